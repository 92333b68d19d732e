//! Hot reload: watches the plugin directory and `routes.toml`, and swaps in what changed.
//!
//! Owns the `notify` watcher and its debounce (editors write temp files, rename, write twice).
//! A changed `.wasm` is compiled off the hot path and swapped into the registry; a changed
//! `routes.toml` is parsed, validated, its plugins loaded, and only then the router replaced.
//! Anything that fails is logged and rejected: the previous version keeps serving. It never
//! blocks dispatch: batches in flight finish with the router they started with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::RecursiveMode;
use notify_debouncer_full::{new_debouncer, DebounceEventResult};
use tokio_util::sync::CancellationToken;

use super::{PluginRegistry, PluginRouter};
use crate::config::RoutesFile;
use crate::routing::{Router, RouterHandle};

/// How long a burst of file events settles before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// The router `routes` asks for: the native table, or router plugins from the registry. When
/// the default router plugin is not loaded, routes with the native table and says so.
pub fn build_router(registry: &Arc<PluginRegistry>, routes: &RoutesFile) -> Box<dyn Router> {
    if routes.router.plugin == "native" && routes.router.overrides.is_empty() {
        return Box::new(routes.route_table());
    }
    if routes.router.plugin != "native" && registry.get(&routes.router.plugin).is_none() {
        tracing::error!(
            plugin = %routes.router.plugin,
            dir = %registry.dir().display(),
            "router plugin not loaded; routing with the built-in table (build plugins with scripts/build-plugins.sh)"
        );
        return Box::new(routes.route_table());
    }
    Box::new(PluginRouter::new(registry.clone(), routes))
}

/// What a reload pass did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A plugin file was swapped in for these plugins.
    Plugins(Vec<String>),
    /// `routes.toml` was applied.
    Routes,
    /// Something was rejected; the old version serves.
    Rejected(String),
}

/// Live configuration of a running host: the routes file in force and the router built from it.
#[derive(Clone)]
pub struct LiveConfig {
    /// The registry of plugins.
    pub registry: Arc<PluginRegistry>,
    /// The routes file in force.
    pub routes: Arc<ArcSwap<RoutesFile>>,
    /// The router the dispatcher uses.
    pub router: RouterHandle,
    /// Where `routes.toml` lives (`None`: built in, not watched).
    pub routes_path: Option<PathBuf>,
}

impl LiveConfig {
    /// Re-read `routes.toml` and apply it, or reject it and keep the current one.
    pub async fn reload_routes(&self) -> ReloadOutcome {
        let Some(path) = &self.routes_path else {
            return ReloadOutcome::Rejected("no routes file".into());
        };
        let next = match RoutesFile::load(path) {
            Ok(next) => next,
            Err(e) => return self.reject(format!("{e}")),
        };
        if let Err(e) = self.registry.apply_config(&next).await {
            return self.reject(format!("{}: {e}", path.display()));
        }
        if next.settings != self.routes.load().settings {
            tracing::warn!(
                "[settings] changed in {}; settings take effect at the next restart",
                path.display()
            );
        }
        self.router.replace(build_router(&self.registry, &next));
        self.routes.store(Arc::new(next));
        tracing::info!(file = %path.display(), "routes reloaded");
        metrics::counter!("outbox_reloads_total", "what" => "routes").increment(1);
        ReloadOutcome::Routes
    }

    /// Recompile the plugins using `path` and swap them in, or keep the old versions.
    pub async fn reload_plugin_file(&self, path: &Path) -> ReloadOutcome {
        match self.registry.reload_file(path).await {
            Ok(names) => {
                if !names.is_empty() {
                    metrics::counter!("outbox_reloads_total", "what" => "plugin").increment(1);
                    // A router swap is seen by the next batch through the registry; rebuild the
                    // router anyway so a plugin that just appeared replaces the fallback table.
                    let routes = self.routes.load_full();
                    self.router.replace(build_router(&self.registry, &routes));
                }
                ReloadOutcome::Plugins(names)
            }
            Err(e) => self.reject(e.to_string()),
        }
    }

    fn reject(&self, message: String) -> ReloadOutcome {
        tracing::error!("reload rejected, the previous version keeps serving: {message}");
        metrics::counter!("outbox_reload_errors_total").increment(1);
        ReloadOutcome::Rejected(message)
    }

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
        tracing::info!(plugins = %plugin_dir.display(), routes = ?routes_file, "watching for plugin and routes changes");
        Ok(tokio::spawn(async move {
            let _debouncer = debouncer;
            loop {
                let paths = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    paths = rx.recv() => match paths { Some(p) => p, None => return },
                };
                let mut routes_changed = false;
                let mut wasm: Vec<PathBuf> = Vec::new();
                for path in paths {
                    if routes_file.as_ref().is_some_and(|f| {
                        path.file_name() == f.file_name() && path.parent() == f.parent()
                    }) {
                        routes_changed = true;
                    } else if path.extension().is_some_and(|e| e == "wasm")
                        && path.exists()
                        && !wasm.contains(&path)
                    {
                        wasm.push(path);
                    }
                }
                if routes_changed {
                    self.reload_routes().await;
                }
                for path in wasm {
                    self.reload_plugin_file(&path).await;
                }
            }
        }))
    }
}
