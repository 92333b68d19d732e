//! `outbox plugins check FILE`: compile one plugin offline and report its world, WIT package and
//! hash. It never runs the plugin.

use outbox_host::plugin::PluginEngine;

use super::{compile_file_offline, short_hash};

/// `outbox plugins check FILE`: compile one `.wasm` file and check it against the world it
/// exports, offline. Returns the one-line report
/// (`FILE: ok (world router, outbox:plugin@0.2.0, sha256 <16 hex>, compiled in N ms)`).
/// CPU-heavy: call on a blocking thread.
pub fn check_plugin_file(path: &std::path::Path) -> anyhow::Result<String> {
    let engine = PluginEngine::new()?;
    let (compiled, took) = compile_file_offline(&engine, path)?;
    Ok(format!(
        "{}: ok (world {}, {}, sha256 {}, compiled in {} ms)",
        path.display(),
        compiled.world(),
        compiled.exported_package(),
        short_hash(&compiled.hash),
        took.as_millis()
    ))
}
