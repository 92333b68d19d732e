//! Hot reload: watches the plugin directory, `routes.toml` and the contracts folder, and hands
//! what changed to the [`LiveConfig`].
//!
//! Owns the `notify` watcher and its debounce (editors write temp files, rename, write twice).
//! A changed `routes.toml` goes to [`LiveConfig::reload_routes`]. The contracts folder is
//! watched through its parent directory too, so that creating, deleting or replacing the folder
//! while the host runs is seen: each time the folder itself appears, disappears or is renamed,
//! the watch on it is set up again, and every change of the folder or of a `.toml`/`.json` file
//! in it goes to [`LiveConfig::reload_contracts`] (a folder gone is no contracts, as for a host
//! started without it). A `.wasm` that was created,
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
use notify_debouncer_full::{new_debouncer, DebounceEventResult, Debouncer, FileIdCache};
use tokio_util::sync::CancellationToken;

/// How long a burst of file events settles before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

use super::LiveConfig;

impl LiveConfig {
    /// Watch the plugin directory, `routes.toml` and the contracts folder until shutdown.
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
        let mut contracts = self.contracts.dir().and_then(ContractsWatch::new);
        if let Some(watch) = &mut contracts {
            debouncer.watch(&watch.parent, RecursiveMode::NonRecursive)?;
            watch.rearm(&mut debouncer);
        }
        let contracts_dir = contracts.as_ref().map(|w| w.dir.clone());
        tracing::info!(plugins = %plugin_dir.display(), routes = ?routes_file, contracts = ?contracts_dir, "watching for plugin, routes and contracts changes");
        Ok(tokio::spawn(async move {
            let mut debouncer = debouncer;
            loop {
                let paths = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    paths = rx.recv() => match paths { Some(p) => p, None => return },
                };
                let mut routes_changed = false;
                let mut contracts_changed = false;
                let mut contracts_folder_changed = false;
                let mut wasm: Vec<PathBuf> = Vec::new();
                for path in paths {
                    if routes_file.as_ref().is_some_and(|f| {
                        path.file_name() == f.file_name() && path.parent() == f.parent()
                    }) {
                        routes_changed = true;
                    } else if contracts.as_ref().is_some_and(|w| w.is_folder(&path)) {
                        contracts_folder_changed = true;
                        contracts_changed = true;
                    } else if contracts.as_ref().is_some_and(|w| w.holds_contract(&path)) {
                        contracts_changed = true;
                    } else if path.extension().is_some_and(|e| e == "wasm")
                        && path.exists()
                        && !wasm.contains(&path)
                    {
                        wasm.push(path);
                    }
                }
                if contracts_folder_changed {
                    // Watch the new folder before reading it: a file written meanwhile is
                    // either read now or seen by the watch.
                    if let Some(watch) = &mut contracts {
                        watch.rearm(&mut debouncer);
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

/// The contracts folder as the watcher follows it: through its parent (which sees the folder
/// created, deleted or renamed) and, while it exists, the folder itself (its files).
struct ContractsWatch {
    /// The folder's parent directory, canonical.
    parent: PathBuf,
    /// The folder: its canonical parent joined with its name (it may not exist).
    dir: PathBuf,
    /// Whether the folder itself is watched now.
    armed: bool,
}

impl ContractsWatch {
    /// Follow `dir`; `None` (with a warning) when its parent directory does not exist.
    fn new(dir: &Path) -> Option<Self> {
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let (Ok(parent), Some(name)) = (std::fs::canonicalize(parent), dir.file_name()) else {
            tracing::warn!(dir = %dir.display(), "the contracts folder's parent directory does not exist; contracts are not watched");
            return None;
        };
        Some(Self {
            dir: parent.join(name),
            parent,
            armed: false,
        })
    }

    /// Watch the folder itself if it exists now, and stop watching what it was before (a folder
    /// deleted, or replaced by renaming another over it).
    fn rearm<T: notify::Watcher, C: FileIdCache>(&mut self, debouncer: &mut Debouncer<T, C>) {
        if self.armed {
            // Gone already when the folder was deleted: nothing to undo then.
            let _ = debouncer.unwatch(&self.dir);
            self.armed = false;
        }
        if self.dir.is_dir() {
            match debouncer.watch(&self.dir, RecursiveMode::NonRecursive) {
                Ok(()) => self.armed = true,
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot watch the contracts folder; its files' changes are not seen")
                }
            }
        }
    }

    /// Whether `path` is the folder itself (created, deleted, renamed).
    fn is_folder(&self, path: &Path) -> bool {
        path == self.dir
    }

    /// Whether `path` is a contract file of the folder (`.toml` or `.json`).
    fn holds_contract(&self, path: &Path) -> bool {
        path.parent() == Some(self.dir.as_path())
            && path.extension().is_some_and(|e| e == "toml" || e == "json")
    }
}
