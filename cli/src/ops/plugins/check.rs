//! `outbox plugins check FILE`: compile one plugin offline and report its world, WIT package and
//! hash.

use outbox_host::plugin::engine::Prepared;
use outbox_host::plugin::{PluginEngine, WIT_VERSION};

use super::{compile_file_offline, short_hash};

/// The `outbox:plugin@VERSION` package a compiled plugin's export was built against.
fn exported_package(engine: &PluginEngine, prepared: &Prepared) -> String {
    let component = match prepared {
        Prepared::Router(p) => p.instance_pre().component(),
        Prepared::Handler(p) => p.instance_pre().component(),
        Prepared::Policy(p) => p.instance_pre().component(),
    };
    let export = format!("outbox:plugin/{}-api@", prepared.world());
    let ty = component.component_type();
    let found = ty
        .exports(engine.engine())
        .find_map(|(name, _)| name.strip_prefix(export.as_str()).map(str::to_string));
    format!("outbox:plugin@{}", found.as_deref().unwrap_or(WIT_VERSION))
}

/// `outbox plugins check FILE`: compile one `.wasm` file and check it against the world it
/// exports, offline. Returns the one-line report
/// (`FILE: ok (world router, outbox:plugin@0.1.0, sha256 <16 hex>, compiled in N ms)`).
/// CPU-heavy: call on a blocking thread.
pub fn check_plugin_file(path: &std::path::Path) -> anyhow::Result<String> {
    let engine = PluginEngine::new()?;
    let (compiled, took) = compile_file_offline(&engine, path)?;
    Ok(format!(
        "{}: ok (world {}, {}, sha256 {}, compiled in {} ms)",
        path.display(),
        compiled.prepared.world(),
        exported_package(&engine, &compiled.prepared),
        short_hash(&compiled.hash),
        took.as_millis()
    ))
}
