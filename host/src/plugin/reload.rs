//! Hot reload: watches the plugin directory and `routes.toml`, and hands what changed to the
//! [`LiveConfig`].
//!
//! Owns the `notify` watcher and its debounce (editors write temp files, rename, write twice).
//! A changed `routes.toml` goes to [`LiveConfig::reload_routes`], a changed file of the contracts
//! folder to [`LiveConfig::reload_contracts`]; a `.wasm` that was created,
//! written or renamed into the plugin directory first retries what waits for plugin files
//! ([`LiveConfig::retry_pending`]: a `routes.toml` held back until its plugins load, plugins left
//! out at start-up), then goes to [`LiveConfig::reload_plugin_file`]. Those validate before they
//! swap. A deleted `.wasm` changes nothing (its serving version stays), so replacing a file by
//! delete-then-create or by renaming a new file over it never leaves a plugin missing. It never
//! parses, loads or routes anything itself, and never blocks dispatch: batches in flight finish
//! with the router they started with.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{new_debouncer, DebounceEventResult};
use tokio_util::sync::CancellationToken;

/// How long a burst of file events settles before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

use crate::live_config::LiveConfig;

impl LiveConfig {
    /// Watch the plugin directory and `routes.toml` until shutdown.
    pub fn watch(
        self,
        shutdown: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, notify::Error> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<PathBuf>>();
        let mut debouncer =
            new_debouncer(
                DEBOUNCE,
                None,
                move |result: DebounceEventResult| match result {
                    Ok(events) => {
                        let paths: Vec<PathBuf> = events
                            .into_iter()
                            .filter(|e| !e.kind.is_access())
                            .flat_map(|e| e.event.paths)
                            .collect();
                        if !paths.is_empty() {
                            let _ = tx.send(paths);
                        }
                    }
                    Err(errors) => {
                        for e in errors {
                            tracing::warn!(error = %e, "file watcher error");
                        }
                    }
                },
            )?;
        let plugin_dir = self.registry.dir().to_path_buf();
        if plugin_dir.is_dir() {
            debouncer.watch(&plugin_dir, RecursiveMode::NonRecursive)?;
        } else {
            tracing::warn!(dir = %plugin_dir.display(), "plugin directory does not exist; plugin files are not watched");
        }
        let routes_file = self
            .routes_path
            .clone()
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
        if let Some(file) = &routes_file {
            // Watch the directory: editors replace the file by renaming a temp file over it.
            let dir = file
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            debouncer.watch(&dir, RecursiveMode::NonRecursive)?;
        }
        let contracts_dir = self
            .contracts
            .dir()
            .filter(|d| d.is_dir())
            .map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf()));
        if let Some(dir) = &contracts_dir {
            debouncer.watch(dir, RecursiveMode::NonRecursive)?;
        }
        tracing::info!(plugins = %plugin_dir.display(), routes = ?routes_file, contracts = ?contracts_dir, "watching for plugin, routes and contracts changes");
        Ok(tokio::spawn(async move {
            let _debouncer = debouncer;
            loop {
                let paths = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    paths = rx.recv() => match paths { Some(p) => p, None => return },
                };
                let mut routes_changed = false;
                let mut contracts_changed = false;
                let mut wasm: Vec<PathBuf> = Vec::new();
                for path in paths {
                    if routes_file.as_ref().is_some_and(|f| {
                        path.file_name() == f.file_name() && path.parent() == f.parent()
                    }) {
                        routes_changed = true;
                    } else if contracts_dir
                        .as_deref()
                        .is_some_and(|d| path.parent() == Some(d))
                        && path.extension().is_some_and(|e| e == "toml" || e == "json")
                    {
                        contracts_changed = true;
                    } else if path.extension().is_some_and(|e| e == "wasm")
                        && path.exists()
                        && !wasm.contains(&path)
                    {
                        wasm.push(path);
                    }
                }
                if contracts_changed {
                    self.reload_contracts();
                }
                if routes_changed {
                    self.reload_routes().await;
                }
                // A file a held-back routes.toml (or a plugin left out at start-up) waits for
                // may have arrived: retry that first, then swap changed files of serving plugins
                // (unchanged ones are skipped by their hash).
                if !wasm.is_empty() && self.pending_reload().is_some() {
                    self.retry_pending().await;
                }
                for path in wasm {
                    self.reload_plugin_file(&path).await;
                }
            }
        }))
    }
}
