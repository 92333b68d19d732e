//! Live configuration of a running host: the routes file in force, the plugin registry and the
//! router built from them.
//!
//! Owns start-up of the plugins for a [`Config`] ([`LiveConfig::start`]) and applying a reload
//! (a new `routes.toml`, a changed `.wasm`): validate and load first, and only then swap, so a
//! rejected change leaves the previous version serving. It never watches files (that is
//! [`crate::plugin::reload`]) and never routes or handles events itself.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::config::{Config, RoutesFile};
use crate::plugin::{PluginEngine, PluginError, PluginRegistry};
use crate::routing::{build_router, RouterHandle};

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
    /// The receiver lease in force (settings change only at a restart): a reload whose handler
    /// plugins' time limits it no longer covers is rejected.
    receiver_lease: Duration,
}

impl LiveConfig {
    /// Create the plugin engine and registry for `config`, load the plugins it declares (a
    /// plugin that fails to load is logged; the router falls back to the native table) and
    /// build the router with [`build_router`]. Every command that routes events starts here.
    pub async fn start(config: &Config) -> Result<Self, PluginError> {
        let engine = PluginEngine::new()?;
        let registry = Arc::new(PluginRegistry::new(
            engine,
            config.settings.plugin_dir.clone(),
        ));
        for error in registry.apply_config_lenient(&config.routes).await {
            tracing::error!("{error}");
        }
        let router = RouterHandle::from_box(build_router(&registry, &config.routes));
        Ok(Self {
            registry,
            routes: Arc::new(ArcSwap::from_pointee(config.routes.clone())),
            router,
            routes_path: config.path.clone(),
            receiver_lease: config.settings.receiver_lease,
        })
    }

    /// Re-read `routes.toml` and apply it, or reject it and keep the current one.
    pub async fn reload_routes(&self) -> ReloadOutcome {
        let Some(path) = &self.routes_path else {
            return ReloadOutcome::Rejected("no routes file".into());
        };
        let next = match RoutesFile::load(path) {
            Ok(next) => next,
            Err(e) => return self.reject(format!("{e}")),
        };
        if let Err(e) = next.check_receiver_lease(self.receiver_lease) {
            return self.reject(format!("{}: {e}", path.display()));
        }
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
}
