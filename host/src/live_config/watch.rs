//! Hot reload: watches the plugin directory, `routes.toml` and the contracts folder, and hands
//! what changed to the [`LiveConfig`].
//!
//! Owns the `notify` watcher and its debounce (editors write temp files, rename, write twice).
//! Only the paths the host reads are kept ([`WatchedPaths`]): `routes.toml` shares its
//! directory with whatever else lives there (a log file written on every event, say), and each
//! event of another file is dropped where the watcher reports it, before anything is queued,
//! timed or allocated for it. The kept paths settle for [`DEBOUNCE`] (no kept event for that
//! long), then are handled together.
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

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio_util::sync::CancellationToken;

/// How long a burst of file events settles before a reload: the paths kept are handled once
/// none has been kept for this long.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

use super::LiveConfig;

impl LiveConfig {
    /// Watch the plugin directory, `routes.toml` and the contracts folder until shutdown.
    pub fn watch(
        self,
        shutdown: CancellationToken,
    ) -> Result<tokio::task::JoinHandle<()>, notify::Error> {
        let plugin_dir = self.registry.dir().to_path_buf();
        let routes_file = self
            .routes_path
            .clone()
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p));
        let mut contracts = self.contracts.dir().and_then(ContractsWatch::new);
        let watched = WatchedPaths {
            routes_file: routes_file.clone(),
            plugin_dir: plugin_dir.clone(),
            contracts_dir: contracts.as_ref().map(|w| w.dir.clone()),
        };
        let kept_by_watcher = watched.clone();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<PathBuf>>();
        let mut watcher = notify::recommended_watcher(
            move |result: notify::Result<notify::Event>| match result {
                Ok(event) if !event.kind.is_access() => {
                    let kept: Vec<PathBuf> = event
                        .paths
                        .into_iter()
                        .filter(|path| kept_by_watcher.what(path).is_some())
                        .collect();
                    if !kept.is_empty() {
                        let _ = tx.send(kept);
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "file watcher error"),
            },
        )?;
        if plugin_dir.is_dir() {
            watcher.watch(&plugin_dir, RecursiveMode::NonRecursive)?;
        } else {
            tracing::warn!(dir = %plugin_dir.display(), "plugin directory does not exist; plugin files are not watched");
        }
        if let Some(file) = &routes_file {
            // Watch the directory: editors replace the file by renaming a temp file over it.
            let dir = file
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            watcher.watch(&dir, RecursiveMode::NonRecursive)?;
        }
        if let Some(watch) = &mut contracts {
            watcher.watch(&watch.parent, RecursiveMode::NonRecursive)?;
            watch.rearm(&mut watcher);
        }
        let contracts_dir = contracts.as_ref().map(|w| w.dir.clone());
        tracing::info!(plugins = %plugin_dir.display(), routes = ?routes_file, contracts = ?contracts_dir, "watching for plugin, routes and contracts changes");
        Ok(tokio::spawn(async move {
            let mut watcher = watcher;
            loop {
                let mut paths = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    paths = rx.recv() => match paths { Some(p) => p, None => return },
                };
                // Let the burst settle: an editor's temp file, rename and second write, or a
                // plugin file copied in pieces, are one change.
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        more = rx.recv() => match more {
                            Some(more) => paths.extend(more),
                            None => return,
                        },
                        () = tokio::time::sleep(DEBOUNCE) => break,
                    }
                }
                let mut routes_changed = false;
                let mut contracts_changed = false;
                let mut contracts_folder_changed = false;
                let mut wasm: Vec<PathBuf> = Vec::new();
                for path in paths {
                    match watched.what(&path) {
                        Some(Watched::Routes) => routes_changed = true,
                        Some(Watched::ContractsFolder) => {
                            contracts_folder_changed = true;
                            contracts_changed = true;
                        }
                        Some(Watched::Contract) => contracts_changed = true,
                        Some(Watched::Plugin) if path.exists() && !wasm.contains(&path) => {
                            wasm.push(path);
                        }
                        Some(Watched::Plugin) | None => {}
                    }
                }
                if contracts_folder_changed {
                    // Watch the new folder before reading it: a file written meanwhile is
                    // either read now or seen by the watch.
                    if let Some(watch) = &mut contracts {
                        watch.rearm(&mut watcher);
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
    fn rearm(&mut self, watcher: &mut RecommendedWatcher) {
        if self.armed {
            // Gone already when the folder was deleted: nothing to undo then.
            let _ = watcher.unwatch(&self.dir);
            self.armed = false;
        }
        if self.dir.is_dir() {
            match watcher.watch(&self.dir, RecursiveMode::NonRecursive) {
                Ok(()) => self.armed = true,
                Err(e) => {
                    tracing::warn!(dir = %self.dir.display(), error = %e, "cannot watch the contracts folder; its files' changes are not seen")
                }
            }
        }
    }
}

/// The paths the host reads, which decide what the watcher keeps and what a kept path
/// changes. The watched directories report every other file in them too; those are dropped.
#[derive(Clone)]
struct WatchedPaths {
    /// `routes.toml`, canonical (`None`: started without one).
    routes_file: Option<PathBuf>,
    /// The plugin directory as it is watched (the paths of its events start with it).
    plugin_dir: PathBuf,
    /// The contracts folder as [`ContractsWatch::dir`] names it.
    contracts_dir: Option<PathBuf>,
}

/// What a kept path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    /// `routes.toml`.
    Routes,
    /// A `.wasm` in the plugin directory.
    Plugin,
    /// The contracts folder itself (created, deleted, renamed).
    ContractsFolder,
    /// A `.toml` or `.json` file in the contracts folder.
    Contract,
}

impl WatchedPaths {
    /// What an event at `path` may change of what the host reads; `None` for anything else.
    fn what(&self, path: &Path) -> Option<Watched> {
        let parent = path.parent();
        let extension = path.extension();
        if self
            .routes_file
            .as_ref()
            .is_some_and(|f| path.file_name() == f.file_name() && parent == f.parent())
        {
            Some(Watched::Routes)
        } else if self.contracts_dir.as_deref() == Some(path) {
            Some(Watched::ContractsFolder)
        } else if self.contracts_dir.is_some()
            && parent == self.contracts_dir.as_deref()
            && extension.is_some_and(|e| e == "toml" || e == "json")
        {
            Some(Watched::Contract)
        } else if extension.is_some_and(|e| e == "wasm") && parent == Some(&*self.plugin_dir) {
            Some(Watched::Plugin)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::{Watched, WatchedPaths};

    fn watched() -> WatchedPaths {
        WatchedPaths {
            routes_file: Some(PathBuf::from("/etc/outbox/routes.toml")),
            plugin_dir: PathBuf::from("plugins"),
            contracts_dir: Some(PathBuf::from("/etc/outbox/contracts")),
        }
    }

    #[test]
    fn the_watcher_keeps_only_the_files_the_host_reads() {
        let watched = watched();
        for (kept, what) in [
            ("/etc/outbox/routes.toml", Watched::Routes),
            ("plugins/mailer.wasm", Watched::Plugin),
            ("/etc/outbox/contracts", Watched::ContractsFolder),
            ("/etc/outbox/contracts/mail.welcome.toml", Watched::Contract),
            ("/etc/outbox/contracts/mail.welcome.json", Watched::Contract),
        ] {
            assert_eq!(
                watched.what(Path::new(kept)),
                Some(what),
                "{kept} is read by the host"
            );
        }
        for dropped in [
            "/etc/outbox/outbox.log",
            "/etc/outbox/.routes.toml.swp",
            "/etc/outbox/routes.toml~",
            "/etc/outbox/stray.wasm",
            "plugins/notes.txt",
            "plugins/nested/mailer.wasm",
            "/etc/outbox/contracts/README.md",
            "/etc/outbox/contracts/old/mail.welcome.toml",
            "/etc/outbox/contracts.toml",
        ] {
            assert_eq!(
                watched.what(Path::new(dropped)),
                None,
                "{dropped} is not read by the host"
            );
        }
    }
}
