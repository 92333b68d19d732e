//! `outbox plugins check FILE`: compile one plugin offline and report its world, WIT package and
//! hash. It never runs the plugin.

use outbox_host::config::Settings;

use super::{compile_file_offline, compiled_how, offline_engine, plugin_name_of, short_hash};

/// `outbox plugins check FILE`: compile one `.wasm` file and check it against the world it
/// exports, offline. Returns the report: one line
/// (`FILE: ok (world router, outbox:plugin@0.2.0, sha256 <16 hex>, compiled in N ms)`), then the
/// `sha256 = "<64 hex>"` line that pins this build under its `[plugins.NAME]`. Compiled with
/// the compile cache `settings` name. CPU-heavy: call on a blocking thread.
pub fn check_plugin_file(path: &std::path::Path, settings: &Settings) -> anyhow::Result<String> {
    let engine = offline_engine(settings)?;
    let (compiled, took) = compile_file_offline(&engine, path)?;
    Ok(format!(
        "{}: ok (world {}, {}, sha256 {}, {})\n\
         to load only this build, pin it under [plugins.{}] in routes.toml:\n  \
         sha256 = \"{}\"",
        path.display(),
        compiled.world(),
        compiled.exported_package(),
        short_hash(&compiled.hash),
        compiled_how(&engine, took),
        plugin_name_of(path),
        compiled.hash,
    ))
}
