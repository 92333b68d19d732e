//! `outbox plugins list`: the plugins of live hosts from their heartbeats, or, without one, the
//! plugins routes.toml declares compiled offline. Prints a table or JSON.

use std::time::Duration;

use anyhow::Context as _;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use outbox_host::config::Config;
use outbox_host::plugin::registry::compile_bytes;
use outbox_host::plugin::PluginInfo;
use outbox_host::store;

use super::short_hash;

/// A heartbeat older than this means the host is not running.
const LIVE_HEARTBEAT_SECONDS: u32 = 60;

/// One running host and the plugins its heartbeat reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LivePluginWorker {
    /// Worker id (`outbox_worker.id`).
    pub id: String,
    /// Host name of the process.
    pub host: String,
    /// Seconds since its last heartbeat.
    pub last_seen_seconds_ago: f64,
    /// Its plugins with their counters.
    pub plugins: Vec<PluginInfo>,
}

/// One plugin `routes.toml` declares, loaded offline (no host running).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeclaredPlugin {
    /// Name from `[plugins.NAME]`.
    pub name: String,
    /// Its world, when it loaded.
    pub world: Option<String>,
    /// First 16 hex digits of its SHA-256, when it was readable.
    pub hash: Option<String>,
    /// The file.
    pub file: String,
    /// Why it does not load, if it does not.
    pub error: Option<String>,
}

/// `outbox plugins list`: the plugins of live hosts (heartbeat within 60 s) with their call and
/// error counts; without a live host (or a reachable database) the plugins `routes.toml` declares,
/// compiled from the plugin directory, with a note saying so.
pub async fn print_plugins(config: &Config, json: bool) -> anyhow::Result<()> {
    let note = match live_plugin_workers(&config.settings.database_url).await {
        Ok(workers) if !workers.is_empty() => return print_live_plugins(&workers, json),
        Ok(_) => format!(
            "no live host (no heartbeat with plugins in the last {LIVE_HEARTBEAT_SECONDS} s)"
        ),
        Err(e) => match e.chain().nth(1).map(|_| e.root_cause()) {
            Some(cause) => format!("no live host information ({e}: {cause})"),
            None => format!("no live host information ({e})"),
        },
    };
    let dir = plugin_dir_of(config);
    let declared = {
        let config = config.clone();
        let dir = dir.clone();
        tokio::task::spawn_blocking(move || load_declared_plugins(&config, &dir))
            .await
            .context("loading plugins")??
    };
    let source = config
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "the built-in routes.toml".into());
    let note = format!(
        "{note}; showing the plugins {source} declares, loaded from {}",
        dir.display()
    );
    if json {
        out!(
            "{}",
            serde_json::json!({"source": "declared", "note": note, "plugins": declared})
        );
        return Ok(());
    }
    out!("{note}");
    if declared.is_empty() {
        out!("(no [plugins] declared)");
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(vec!["plugin", "world", "hash", "file", "calls", "errors"]);
    for p in &declared {
        t.add_row(vec![
            Cell::new(&p.name),
            Cell::new(p.world.as_deref().unwrap_or("?")),
            Cell::new(p.hash.as_deref().unwrap_or("-")),
            Cell::new(&p.file),
            Cell::new("not running"),
            Cell::new("not running"),
        ]);
    }
    out!("{t}");
    for p in &declared {
        if let Some(e) = &p.error {
            out!("{}: cannot load: {e}", p.name);
        }
    }
    Ok(())
}

fn print_live_plugins(workers: &[LivePluginWorker], json: bool) -> anyhow::Result<()> {
    if json {
        out!(
            "{}",
            serde_json::json!({"source": "live", "workers": workers})
        );
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "worker",
        "plugin",
        "world",
        "hash",
        "loaded at",
        "calls",
        "errors",
    ]);
    for w in workers {
        let worker = format!(
            "{} ({}, {:.0} s ago)",
            w.id, w.host, w.last_seen_seconds_ago
        );
        if w.plugins.is_empty() {
            t.add_row(vec![Cell::new(&worker), Cell::new("(no plugins loaded)")]);
        }
        for p in &w.plugins {
            t.add_row(vec![
                Cell::new(&worker),
                Cell::new(&p.name),
                Cell::new(&p.world),
                Cell::new(&p.hash),
                Cell::new(&p.loaded_at),
                Cell::new(p.calls),
                Cell::new(p.errors),
            ]);
        }
    }
    out!("{t}");
    Ok(())
}

/// Running hosts (heartbeat within 60 s) whose heartbeat carries a plugin list.
pub async fn live_plugin_workers(database_url: &str) -> anyhow::Result<Vec<LivePluginWorker>> {
    let pool = tokio::time::timeout(Duration::from_secs(3), store::connect(database_url, 1))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "timed out connecting to PostgreSQL at {}",
                store::redact(database_url)
            )
        })??;
    let heartbeats =
        store::live_workers_with_plugins(&pool, Duration::from_secs(LIVE_HEARTBEAT_SECONDS.into()))
            .await;
    pool.close().await;
    heartbeats?
        .into_iter()
        .map(|w| {
            let plugins = w.counters.get("plugins").cloned().unwrap_or_default();
            Ok(LivePluginWorker {
                plugins: serde_json::from_value(plugins)
                    .with_context(|| format!("worker {}: unreadable plugin list", w.id))?,
                host: w.host_name,
                last_seen_seconds_ago: w.last_seen_seconds_ago,
                id: w.id,
            })
        })
        .collect()
}

/// The plugin directory as `outbox plugins` commands see it: the host's
/// (`settings.plugin_dir`, already taken from beside the routes file when relative, see
/// [`outbox_host::plugin::files`]).
pub fn plugin_dir_of(config: &Config) -> std::path::PathBuf {
    config.settings.plugin_dir.clone()
}

/// Compile every plugin `config` declares from `dir` (CPU-heavy: call on a blocking thread).
pub fn load_declared_plugins(
    config: &Config,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<DeclaredPlugin>> {
    if config.routes.plugins.is_empty() {
        return Ok(vec![]);
    }
    let engine = super::offline_engine(&config.settings)?;
    Ok(config
        .routes
        .plugins
        .iter()
        .map(|(name, spec)| {
            let path = dir.join(spec.file.clone().unwrap_or_else(|| format!("{name}.wasm")));
            let file = path.display().to_string();
            let bytes = match outbox_host::plugin::files::read_plugin_file(name, dir, &path) {
                Ok(bytes) => bytes,
                Err(e) => {
                    return DeclaredPlugin {
                        name: name.clone(),
                        world: None,
                        hash: None,
                        file,
                        error: Some(e.to_string()),
                    }
                }
            };
            match compile_bytes(&engine, name, &bytes, &path) {
                Ok(c) => DeclaredPlugin {
                    name: name.clone(),
                    world: Some(c.world().to_string()),
                    hash: Some(short_hash(&c.hash).to_string()),
                    file,
                    error: None,
                },
                Err(e) => DeclaredPlugin {
                    name: name.clone(),
                    world: None,
                    hash: None,
                    file,
                    error: Some(e.to_string()),
                },
            }
        })
        .collect())
}
