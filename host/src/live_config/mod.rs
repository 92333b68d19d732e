//! Live configuration of a running host: the routes file in force, the plugin registry and the
//! router built from them.
//!
//! Owns start-up of the plugins for a [`Config`] ([`LiveConfig::start`]) and applying a reload
//! (a new `routes.toml`, a changed `.wasm`). The rules of a reload:
//!
//! - **Validate and load first, then swap.** A `routes.toml` that does not parse, breaks a
//!   naming rule, binds a plugin where its world does not fit (a router plugin under
//!   `[handlers]`, a handler as `[policy] plugin`) or names a destination its broker lacks (a
//!   JetStream stream, a RabbitMQ exchange: the check the dispatcher's sinks registered with
//!   [`LiveConfig::check_destinations_with`]) is rejected, and the previous routes, plugins
//!   and router keep serving. A failed load never replaces what is serving.
//! - **A change that waits for its plugin files is not lost.** A valid `routes.toml` naming a
//!   new plugin (or a plugin in a new file) whose `.wasm` is missing or does not load yet (a
//!   deploy copying files one by one) is held back as a whole ([`ReloadOutcome::Waiting`], with
//!   a warning naming the files), and applied as soon as a `.wasm` change in the plugin
//!   directory makes them load ([`LiveConfig::retry_pending`]). A plugin left out of the routes
//!   in force (its file was missing at start-up) does not hold a change back, and is loaded
//!   when its file appears. [`LiveConfig::pending_reload`] says what waits. A plugin file that
//!   breaks a rule of plugin files ([`crate::plugin::files`]: outside the plugin directory, not
//!   a regular file, too large) does not wait: the reload is rejected.
//! - **No reader ever misses a plugin during a swap.** The new plugin set is stored together
//!   with the plugins it drops, then the routes and router naming them, and only then are the
//!   dropped plugins removed ([`PluginRegistry::switch`]): a caller holding the previous routes
//!   (the policy plugin's old name, a handler's old binding) still finds what they name. A
//!   replaced `.wasm` swaps one version for the next in one step; a deleted one leaves the
//!   serving version in place.
//! - **Reloads are serialized** (one at a time), and every applied `routes.toml` is announced
//!   to [`LiveConfig::subscribe`] (the receivers start and stop queues on it).
//!
//! - **Every reload is remembered** (the last [`RELOAD_HISTORY_MAX`], accepted or not, with the
//!   reason of a rejection) for the console's plugin page ([`LiveConfig::reload_history`]).
//!
//! It also owns the checks of a [`Config`] that need the plugins, receivers and Redis it is
//! assembled with (`checks.rs`: [`Config::check`]), and the file watcher that hands changes to
//! a reload (`watch.rs`: [`LiveConfig::watch`]). It never routes or handles events itself.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::{Config, RoutesFile};
use crate::contracts::Contracts;
use crate::plugin::{compile_cache, files};
use crate::plugin::{PluginEngine, PluginError, PluginRegistry, StagedPlugins};
use crate::routing::{build_router, RouterHandle};
use crate::sink::DestinationCheck;

mod checks;
mod watch;

pub use checks::RECEIVER_LEASE_MARGIN;
pub use watch::DEBOUNCE;

/// What a reload pass did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A plugin file was swapped in (or a plugin left out loaded) for these plugins.
    Plugins(Vec<String>),
    /// `routes.toml` was applied.
    Routes,
    /// The contracts folder was loaded again: this many event types have a contract now (none
    /// when the folder is gone).
    Contracts(usize),
    /// `routes.toml` is valid but names plugins whose files are missing or do not load yet; the
    /// previous config serves, and the change is applied once they load. The message names them.
    Waiting(String),
    /// Something was rejected; the old version serves.
    Rejected(String),
}

/// How many reloads [`LiveConfig::reload_history`] remembers.
pub const RELOAD_HISTORY_MAX: usize = 50;

/// One reload this host tried: what changed, and whether it was applied.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReloadRecord {
    /// When.
    pub at: chrono::DateTime<chrono::Utc>,
    /// What changed: `routes.toml`, `contracts`, or the `.wasm` file.
    pub what: String,
    /// `applied`, `waiting` (held back until plugin files load) or `rejected`.
    pub result: &'static str,
    /// The plugins swapped in, the warning of a held-back change, or why it was rejected.
    pub detail: String,
}

/// What waits for plugin files (see the module comment).
#[derive(Debug, Default)]
struct Pending {
    /// A valid `routes.toml` not applied yet, with the warning naming what it waits for.
    routes_file: Option<String>,
    /// The routes in force serve without some of their plugins (left out at start-up).
    in_force: Option<String>,
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
    /// The event contracts in force (reloaded when a file of their folder changes).
    pub contracts: Contracts,
    /// The receiver lease in force (settings change only at a restart): a reload whose handler
    /// plugins' time limits it no longer covers is rejected.
    receiver_lease: Duration,
    /// The settings in force: a reload is checked against the queue systems they name (see
    /// [`RoutesFile::check_queue_systems`]).
    settings: Arc<crate::config::Settings>,
    pending: Arc<Mutex<Pending>>,
    /// Held by a reload from its first read to its last store.
    reloading: Arc<tokio::sync::Mutex<()>>,
    /// Counts the routes files applied (start-up is 0).
    applied: Arc<tokio::sync::watch::Sender<u64>>,
    /// The last reloads tried, oldest first.
    history: Arc<Mutex<VecDeque<ReloadRecord>>>,
    /// The check of a routes file's destinations on the brokers (the dispatcher's sinks, once
    /// connected): a reload it refuses is rejected.
    destinations: Arc<Mutex<Option<Arc<dyn DestinationCheck>>>>,
}

impl LiveConfig {
    /// Create the plugin engine and registry for `config`, load the plugins it declares and build
    /// the router with [`build_router`]. Every command that routes events starts here, and logs
    /// where plugins load from (the plugin directory is fixed until a restart). A plugin
    /// whose file is missing or does not load is logged and left out (the router falls back to
    /// the native table) and loaded when its file appears; a plugin bound where its world does
    /// not fit is an error ([`PluginError::Misbound`]).
    pub async fn start(config: &Config) -> Result<Self, PluginError> {
        let dir = &config.settings.plugin_dir;
        if dir.is_dir() || config.routes.plugins.is_empty() {
            tracing::info!("plugins load from {}", files::shown_dir(dir));
        } else {
            tracing::warn!(
                "plugins load from {}, which is not a directory: every plugin is left out until it appears",
                files::shown_dir(dir)
            );
        }
        let engine = PluginEngine::with_compile_cache(compile_cache::open_configured(
            &config.settings.plugin_cache_dir,
        ))?;
        let registry = Arc::new(PluginRegistry::new(
            engine,
            config.settings.plugin_dir.clone(),
        ));
        let staged = registry.stage(&config.routes).await?;
        for refused in &staged.refused {
            tracing::error!("{refused}; its events are retried until routes.toml is fixed");
        }
        let in_force = left_out_message(config.path.as_deref(), &registry, &staged);
        if let Some(message) = &in_force {
            tracing::error!("{message}");
        }
        registry.switch(staged, || {});
        let router = RouterHandle::from_box(build_router(&registry, &config.routes));
        Ok(Self {
            registry,
            routes: Arc::new(ArcSwap::from_pointee(config.routes.clone())),
            router,
            routes_path: config.path.clone(),
            contracts: Contracts::none(),
            receiver_lease: config.settings.receiver_lease,
            settings: Arc::new(config.settings.clone()),
            pending: Arc::new(Mutex::new(Pending {
                routes_file: None,
                in_force,
            })),
            reloading: Arc::default(),
            applied: Arc::new(tokio::sync::watch::Sender::new(0)),
            history: Arc::default(),
            destinations: Arc::default(),
        })
    }

    /// Check every reloaded routes file's destinations with `check` before it is applied (the
    /// host registers its sinks once they are connected); a file it refuses is rejected and the
    /// routes in force keep serving.
    pub fn check_destinations_with(&self, check: Arc<dyn DestinationCheck>) {
        if let Ok(mut destinations) = self.destinations.lock() {
            *destinations = Some(check);
        }
    }

    /// Use `contracts` (loaded by the caller, who reports a broken folder at start-up) and
    /// reload them when their folder changes.
    pub fn with_contracts(mut self, contracts: Contracts) -> Self {
        self.contracts = contracts;
        self
    }

    /// Load the contracts folder again after a change (a file edited, added or removed, the
    /// folder created or deleted): a folder that no longer loads is logged and the contracts in
    /// force keep serving (see [`Contracts::reload`]). Remembered as a reload of `contracts`.
    pub fn reload_contracts(&self) -> ReloadOutcome {
        let outcome = match self.contracts.reload() {
            Ok(types) => {
                tracing::info!(types, "contracts reloaded");
                metrics::counter!("outbox_reloads_total", "what" => "contracts").increment(1);
                ReloadOutcome::Contracts(types)
            }
            Err(e) => self.reject(format!("{e}; the previous contracts stay in force")),
        };
        self.remember("contracts", &outcome);
        outcome
    }

    /// A receiver that sees a new value each time a `routes.toml` is applied.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// What waits for plugin files to appear or load, as the warning logged for it: a
    /// `routes.toml` not applied yet, or plugins of the routes in force left out. `None` when
    /// everything declared serves.
    pub fn pending_reload(&self) -> Option<String> {
        let pending = self.pending.lock().ok()?;
        match (&pending.routes_file, &pending.in_force) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.clone().or_else(|| b.clone()),
        }
    }

    /// Re-read `routes.toml` and apply it, hold it back until its plugin files load
    /// ([`ReloadOutcome::Waiting`]), or reject it and keep the current one.
    pub async fn reload_routes(&self) -> ReloadOutcome {
        let _reloading = self.reloading.lock().await;
        let outcome = self.reload_routes_now().await;
        self.remember("routes.toml", &outcome);
        outcome
    }

    /// The last reloads this host tried ([`RELOAD_HISTORY_MAX`] at most), newest first.
    pub fn reload_history(&self) -> Vec<ReloadRecord> {
        self.history
            .lock()
            .map(|h| h.iter().rev().cloned().collect())
            .unwrap_or_default()
    }

    /// Remember a reload of `what` and its outcome (a pass that found nothing to do is not one).
    fn remember(&self, what: &str, outcome: &ReloadOutcome) {
        let (result, detail) = match outcome {
            ReloadOutcome::Plugins(names) if names.is_empty() => return,
            ReloadOutcome::Plugins(names) => ("applied", format!("plugins {}", names.join(", "))),
            ReloadOutcome::Routes => ("applied", "routes applied".to_string()),
            ReloadOutcome::Contracts(types) => {
                ("applied", format!("contracts for {types} event types"))
            }
            ReloadOutcome::Waiting(message) => ("waiting", message.clone()),
            ReloadOutcome::Rejected(message) => ("rejected", message.clone()),
        };
        if let Ok(mut history) = self.history.lock() {
            if history.len() == RELOAD_HISTORY_MAX {
                history.pop_front();
            }
            history.push_back(ReloadRecord {
                at: chrono::Utc::now(),
                what: what.to_string(),
                result,
                detail,
            });
        }
    }

    /// Retry what waits for plugin files (a held-back `routes.toml`, plugins left out at
    /// start-up). The file watcher calls it whenever a `.wasm` in the plugin directory changes.
    /// Nothing waiting: `Plugins([])`.
    pub async fn retry_pending(&self) -> ReloadOutcome {
        let _reloading = self.reloading.lock().await;
        let outcome = self.retry_pending_now().await;
        self.remember("plugin files", &outcome);
        outcome
    }

    async fn retry_pending_now(&self) -> ReloadOutcome {
        let (routes_file, in_force) = match self.pending.lock() {
            Ok(p) => (p.routes_file.is_some(), p.in_force.is_some()),
            Err(_) => (false, false),
        };
        if routes_file {
            return self.reload_routes_now().await;
        }
        if !in_force {
            return ReloadOutcome::Plugins(vec![]);
        }
        let routes = self.routes.load_full();
        let staged = match self.registry.stage(&routes).await {
            Ok(staged) => staged,
            Err(e) => {
                let message = self.in_file(e);
                self.set_pending(|p| p.in_force = Some(message.clone()));
                return self.reject(message);
            }
        };
        let before = self.registry.list();
        let still_left_out = left_out_message(self.routes_path.as_deref(), &self.registry, &staged);
        self.registry.switch(staged, || {
            self.router.replace(build_router(&self.registry, &routes));
        });
        let loaded: Vec<String> = self
            .registry
            .list()
            .into_iter()
            .filter(|p| !before.iter().any(|b| b.name == p.name))
            .map(|p| p.name)
            .collect();
        for name in &loaded {
            tracing::info!(plugin = %name, "plugin left out at start-up loaded");
        }
        self.set_pending(|p| p.in_force = still_left_out);
        ReloadOutcome::Plugins(loaded)
    }

    async fn reload_routes_now(&self) -> ReloadOutcome {
        let Some(path) = &self.routes_path else {
            return ReloadOutcome::Rejected("no routes file".into());
        };
        let next = match RoutesFile::load(path) {
            Ok(next) => next,
            Err(e) => {
                self.set_pending(|p| p.routes_file = None);
                return self.reject(format!("{e}"));
            }
        };
        if let Err(e) = next
            .check_receiver_lease(self.receiver_lease)
            .and_then(|()| next.check_queue_systems(&self.settings))
        {
            self.set_pending(|p| p.routes_file = None);
            return self.reject(format!("{}: {e}", path.display()));
        }
        let destinations = self.destinations.lock().ok().and_then(|d| d.clone());
        if let Some(check) = destinations {
            if let Err(e) = check.check_destinations(&next).await {
                self.set_pending(|p| p.routes_file = None);
                return self.reject(format!("{}: {e}", path.display()));
            }
        }
        let staged = match self.registry.stage(&next).await {
            Ok(mut staged) if !staged.refused.is_empty() => {
                self.set_pending(|p| p.routes_file = None);
                return self.reject(self.in_file(staged.refused.remove(0)));
            }
            // A file that breaks a rule of plugin files (outside the plugin directory, not a
            // regular file, too large) is a mistake to fix, not a file still on its way.
            Ok(mut staged)
                if staged
                    .left_out
                    .iter()
                    .any(|(_, e)| matches!(e, PluginError::Refused { .. })) =>
            {
                self.set_pending(|p| p.routes_file = None);
                let at = staged
                    .left_out
                    .iter()
                    .position(|(_, e)| matches!(e, PluginError::Refused { .. }))
                    .unwrap_or(0);
                return self.reject(self.in_file(staged.left_out.swap_remove(at).1));
            }
            Ok(staged) => staged,
            Err(e) => {
                self.set_pending(|p| p.routes_file = None);
                return self.reject(self.in_file(e));
            }
        };
        // Wait for the plugins this change brings (new, moved to another file, or serving now
        // but pinned to a digest their file does not have yet); one already left out of the
        // routes in force, declared with the same file, serves no worse after it.
        let current = self.routes.load_full();
        let waits_for: Vec<String> = staged
            .left_out
            .iter()
            .filter(|(name, e)| {
                if matches!(e, PluginError::PinMismatch { .. }) && self.registry.get(name).is_some()
                {
                    return true;
                }
                let file = |routes: &RoutesFile| {
                    routes
                        .plugins
                        .get(name)
                        .map(|spec| self.registry.file_of(name, spec))
                };
                file(&current).is_none() || file(&current) != file(&next)
            })
            .map(|(_, e)| e.to_string())
            .collect();
        if !waits_for.is_empty() {
            let message = format!(
                "{}: not applied yet, it waits for plugin files that are missing or do not load: {}. The previous config keeps serving; the change is applied once they load (every change of a .wasm in {} retries it)",
                path.display(),
                waits_for.join("; "),
                self.registry.dir().display()
            );
            let first_time = self
                .pending
                .lock()
                .map(|p| p.routes_file.as_deref() != Some(message.as_str()))
                .unwrap_or(true);
            if first_time {
                tracing::warn!("{message}");
            }
            self.set_pending(|p| p.routes_file = Some(message.clone()));
            return ReloadOutcome::Waiting(message);
        }
        if next.settings != current.settings {
            tracing::warn!(
                "[settings] changed in {}; settings take effect at the next restart",
                path.display()
            );
        }
        let still_left_out = left_out_message(Some(path), &self.registry, &staged);
        let next = Arc::new(next);
        self.registry.switch(staged, || {
            self.router.replace(build_router(&self.registry, &next));
            self.routes.store(next.clone());
        });
        self.set_pending(|p| {
            p.routes_file = None;
            p.in_force = still_left_out;
        });
        self.applied.send_modify(|n| *n += 1);
        tracing::info!(file = %path.display(), changes = %routes_change(&current, &next), "routes reloaded");
        metrics::counter!("outbox_reloads_total", "what" => "routes").increment(1);
        ReloadOutcome::Routes
    }

    /// Recompile the plugins using `path` and swap them in, or keep the old versions.
    pub async fn reload_plugin_file(&self, path: &Path) -> ReloadOutcome {
        let _reloading = self.reloading.lock().await;
        let outcome = self.reload_plugin_file_now(path).await;
        self.remember(&path.display().to_string(), &outcome);
        outcome
    }

    async fn reload_plugin_file_now(&self, path: &Path) -> ReloadOutcome {
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

    /// `e` prefixed with the routes file it was found in.
    fn in_file(&self, e: PluginError) -> String {
        match &self.routes_path {
            Some(path) => format!("{}: {e}", path.display()),
            None => e.to_string(),
        }
    }

    fn set_pending(&self, change: impl FnOnce(&mut Pending)) {
        if let Ok(mut pending) = self.pending.lock() {
            change(&mut pending);
        }
    }

    fn reject(&self, message: String) -> ReloadOutcome {
        tracing::error!("reload rejected, the previous version keeps serving: {message}");
        metrics::counter!("outbox_reload_errors_total").increment(1);
        ReloadOutcome::Rejected(message)
    }
}

/// The warning for plugins of the routes in force that `staged` left out, if any.
fn left_out_message(
    routes_path: Option<&Path>,
    registry: &PluginRegistry,
    staged: &StagedPlugins,
) -> Option<String> {
    if staged.left_out.is_empty() {
        return None;
    }
    let missing: Vec<String> = staged.left_out.iter().map(|(_, e)| e.to_string()).collect();
    Some(format!(
        "{}: serving without plugins whose files are missing or do not load: {}. They load as soon as their files appear in {}",
        routes_path.map_or_else(|| "built-in routes".into(), |p| p.display().to_string()),
        missing.join("; "),
        registry.dir().display()
    ))
}

/// What a reload changed, for its log line: keys added (`+`), removed (`-`) and changed (`~`) in
/// each section (`routes +"billing." ~"mail."; plugins ~audit; router changed`), or `nothing`.
pub fn routes_change(current: &RoutesFile, next: &RoutesFile) -> String {
    fn section<V: PartialEq>(
        name: &str,
        before: &std::collections::BTreeMap<String, V>,
        after: &std::collections::BTreeMap<String, V>,
    ) -> Option<String> {
        let mut parts = Vec::new();
        for (key, value) in after {
            match before.get(key) {
                None => parts.push(format!("+{key:?}")),
                Some(old) if old != value => parts.push(format!("~{key:?}")),
                Some(_) => {}
            }
        }
        for key in before.keys().filter(|k| !after.contains_key(*k)) {
            parts.push(format!("-{key:?}"));
        }
        (!parts.is_empty()).then(|| format!("{name} {}", parts.join(" ")))
    }
    let mut changes: Vec<String> = [
        section("routes", &current.routes, &next.routes),
        section("handlers", &current.handlers, &next.handlers),
        section("queue_groups", &current.queue_groups, &next.queue_groups),
        section("plugins", &current.plugins, &next.plugins),
        section("queues", &current.queues, &next.queues),
    ]
    .into_iter()
    .flatten()
    .collect();
    if current.router != next.router {
        changes.push("router changed".into());
    }
    if current.policy != next.policy {
        changes.push("policy changed".into());
    }
    if current.settings != next.settings {
        changes.push("settings changed (applied at the next restart)".into());
    }
    if changes.is_empty() {
        "nothing".into()
    } else {
        changes.join("; ")
    }
}

#[cfg(test)]
mod routes_change_tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_reload_says_what_it_changed() {
        let parse = |text: &str| RoutesFile::parse(text, Path::new("routes.toml")).unwrap();
        let before =
            parse("[routes]\n\"mail.\" = \"outbox.mail\"\n\"audit.\" = \"outbox.audit\"\n");
        let after =
            parse("[routes]\n\"mail.\" = \"outbox.mail2\"\n\"billing.\" = \"outbox.billing\"\n");
        assert_eq!(
            routes_change(&before, &after),
            "routes +\"billing.\" ~\"mail.\" -\"audit.\""
        );
        assert_eq!(routes_change(&before, &before), "nothing");
    }
}
