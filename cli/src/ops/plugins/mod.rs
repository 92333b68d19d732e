//! `outbox plugins list|check|call|new|sdk|wit`: list, check, try out and scaffold WebAssembly
//! plugins and write out what plugin authors build on, one submodule per command. What they
//! share (naming and compiling a plugin file offline) lives here.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::Settings;
use outbox_host::plugin::registry::{compile_bytes, CompiledPlugin};
use outbox_host::plugin::{compile_cache, PluginEngine};

mod call;
mod check;
mod list;
mod scaffold;
mod sdk;

pub use call::{call_plugin_file, CallExpectation, PluginCallInput};
pub use check::check_plugin_file;
pub use list::print_plugins;
pub use scaffold::{scaffold_plugin, PluginLanguage};
pub use sdk::{write_sdk, write_wit};

/// The first 16 hex digits of a SHA-256, as tables show it.
pub(crate) fn short_hash(hash: &str) -> &str {
    &hash[..hash.len().min(16)]
}

/// The plugin name a file stands for: its stem, with `_` read as `-`
/// (`plugins/dist/prefix-router.wasm` and cargo's own
/// `target/wasm32-wasip2/release/prefix_router.wasm` are both `prefix-router`: cargo names a
/// crate's `.wasm` with `-` turned into `_`, and a plugin name never holds a `_`).
pub(crate) fn plugin_name_of(path: &std::path::Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().replace('_', "-"))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "plugin".into())
}

/// The engine of the offline plugin commands: with the compile cache a host opens
/// (`OUTBOX_PLUGIN_CACHE_DIR`, default `~/.cache/outbox/plugins`), so checking and calling the
/// same build again, or loading it in a host afterwards, does not compile it again.
pub(crate) fn offline_engine(settings: &Settings) -> anyhow::Result<PluginEngine> {
    let cache = compile_cache::open_configured(&settings.plugin_cache_dir);
    Ok(PluginEngine::with_compile_cache(cache)?)
}

/// How a plugin came to be compiled: "compiled in N ms", or "loaded from the compile cache in
/// N ms" when `engine` found it there.
pub(crate) fn compiled_how(engine: &PluginEngine, took: Duration) -> String {
    let ms = took.as_secs_f64() * 1e3;
    match engine.compile_cache_counts() {
        Some((hits, _)) if hits > 0 => format!("loaded from the compile cache in {ms:.1} ms"),
        _ => format!("compiled in {ms:.1} ms"),
    }
}

/// Read and compile one plugin file offline; returns it and the compile time.
pub(crate) fn compile_file_offline(
    engine: &PluginEngine,
    path: &std::path::Path,
) -> anyhow::Result<(std::sync::Arc<CompiledPlugin>, Duration)> {
    let name = plugin_name_of(path);
    let bytes = outbox_host::plugin::files::read_bounded(&name, path, path)
        .with_context(|| format!("{}: cannot read the plugin file", path.display()))?;
    anyhow::ensure!(
        bytes.starts_with(b"\0asm"),
        "{}: plugin {}: not a WebAssembly file (it does not start with the \\0asm magic bytes): build it for wasm32-wasip2 with outbox-plugin-sdk",
        path.display(),
        plugin_name_of(path)
    );
    let started = Instant::now();
    let compiled = compile_bytes(engine, &plugin_name_of(path), &bytes, path)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok((compiled, started.elapsed()))
}
