//! Host: assembles one `outbox` process from the stages and runs it until shutdown.
//!
//! Owns start-up (connect with retry, migrate, build the router), the background tasks
//! (dispatcher, receivers, file watcher, heartbeat, retention, metrics endpoint) and orderly
//! shutdown. An application can
//! embed the same host in its own tokio runtime with [`Host::builder`]; the `outbox` binary is a
//! thin layer over it. It never decides anything about single events: that is the stages' job.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::dispatch::{self, Dispatcher};
use crate::live_config::LiveConfig;
use crate::plugin::{PluginError, PluginRegistry};
use crate::receive::Receivers;
use crate::routing::{Router, RouterHandle};
use crate::store;

/// Why a host did not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// Migrations failed.
    #[error(transparent)]
    Store(#[from] store::StoreError),
    /// The plugin engine could not start.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The contracts folder could not be loaded.
    #[error(transparent)]
    Contracts(#[from] crate::contracts::ContractError),
    /// The HTTP endpoint (console, metrics, health) could not listen on its address.
    #[error(transparent)]
    Http(#[from] crate::http::BindError),
    /// Shutdown was requested before the host finished starting.
    #[error("shutdown requested while starting")]
    ShutdownDuringStart,
}

/// Builds a [`Host`]: `Host::builder().config(cfg).start().await?`.
#[derive(Default)]
pub struct HostBuilder {
    config: Option<Config>,
    pool: Option<PgPool>,
    router: Option<RouterHandle>,
    worker_id: Option<String>,
    shutdown: Option<CancellationToken>,
    dispatcher_enabled: Option<bool>,
    receivers_enabled: Option<bool>,
}

impl HostBuilder {
    /// Use this configuration (default: [`Config::from_env`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Share the application's pool instead of opening one from `DATABASE_URL`.
    pub fn pool(mut self, pool: PgPool) -> Self {
        self.pool = Some(pool);
        self
    }

    /// Route with this router instead of the one `routes.toml` names.
    pub fn router(mut self, router: impl Router + 'static) -> Self {
        self.router = Some(RouterHandle::new(router));
        self
    }

    /// Route through an existing handle (to swap routers from outside).
    pub fn router_handle(mut self, router: RouterHandle) -> Self {
        self.router = Some(router);
        self
    }

    /// Claim under this worker id (default: `host-pid-random`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// Stop when this token is cancelled (default: a fresh token, see [`Host::shutdown_token`]).
    pub fn shutdown_token(mut self, token: CancellationToken) -> Self {
        self.shutdown = Some(token);
        self
    }

    /// Override `OUTBOX_DISPATCHER_ENABLED`.
    pub fn dispatcher_enabled(mut self, enabled: bool) -> Self {
        self.dispatcher_enabled = Some(enabled);
        self
    }

    /// Run receivers for the handler-bound queues of the queue group, following `[handlers]`
    /// as `routes.toml` is reloaded (default: yes, unless a router was supplied; a process whose
    /// routes are built in and bind no handler has nothing to receive).
    pub fn receivers_enabled(mut self, enabled: bool) -> Self {
        self.receivers_enabled = Some(enabled);
        self
    }

    /// Connect (retrying with backoff while PostgreSQL or Redis are away), migrate, and start the
    /// background tasks. Returns once the host is serving.
    pub async fn start(self) -> Result<Host, HostError> {
        let config = match self.config {
            Some(c) => c,
            None => Config::from_env()?,
        };
        config.check()?;
        for warning in config.settings.clamp_warnings(&config.routes.settings) {
            tracing::warn!("{warning}");
        }
        let settings = Arc::new(config.settings.clone());
        // Bound first: a port another process holds stops the host before it does any work.
        let listener = match settings.http_addr.as_str() {
            "" => None,
            addr => Some(crate::http::bind(addr).await?),
        };
        let shutdown = self.shutdown.unwrap_or_default();
        let pool = match self.pool {
            Some(pool) => pool,
            None => dispatch::connect_postgres(&settings, &shutdown)
                .await
                .ok_or(HostError::ShutdownDuringStart)?,
        };
        store::migrate(&pool).await?;
        store::record_max_payload_bytes(&pool, settings.max_payload_bytes).await?;
        let worker_id = self.worker_id.unwrap_or_else(default_worker_id);
        let mut tasks = JoinSet::new();
        let contracts = config.load_contracts()?;
        if !contracts.current().is_empty() {
            tracing::info!(types = contracts.current().len(), mode = %contracts.mode(), "event contracts loaded");
        }
        let (router, live) = match self.router {
            Some(router) => (router, None),
            None => {
                let live = LiveConfig::start(&config)
                    .await?
                    .with_contracts(contracts.clone());
                if config.path.is_some() {
                    match live.clone().watch(shutdown.clone()) {
                        Ok(watcher) => {
                            tasks.spawn(async move {
                                let _ = watcher.await;
                            });
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "hot reload disabled: cannot watch files")
                        }
                    }
                }
                (live.router.clone(), Some(live))
            }
        };
        let mut dispatcher = None;
        if self
            .dispatcher_enabled
            .unwrap_or(settings.dispatcher_enabled)
        {
            // Each queue's sink follows the routes in force (built in: the config's, fixed).
            let routes = match &live {
                Some(live) => live.routes.clone(),
                None => Arc::new(arc_swap::ArcSwap::from_pointee(config.routes.clone())),
            };
            let sink = dispatch::connect_sinks(&settings, routes, &shutdown)
                .await
                .ok_or(HostError::ShutdownDuringStart)?;
            let d = Dispatcher::new(
                pool.clone(),
                sink,
                router.clone(),
                settings.clone(),
                &worker_id,
            )
            .with_contracts(contracts.clone());
            tasks.spawn(d.clone().run(shutdown.clone()));
            tasks.spawn(retention_loop(
                pool.clone(),
                settings.clone(),
                shutdown.clone(),
            ));
            dispatcher = Some(d);
        }
        // Receivers follow `[handlers]` as it is reloaded, so a process whose routes file can
        // change runs them even while no queue is bound yet.
        let mut receivers = None;
        if let Some(live) = live
            .as_ref()
            .filter(|_| self.receivers_enabled.unwrap_or(true))
            .filter(|live| config.path.is_some() || !live.routes.load().handlers.is_empty())
        {
            let r = crate::reconnect::connect_with_retry("Redis (receivers)", &shutdown, || {
                Receivers::new(pool.clone(), live.clone(), settings.clone(), &worker_id)
            })
            .await
            .ok_or(HostError::ShutdownDuringStart)?;
            tasks.spawn(
                r.clone()
                    .run(settings.worker_queue_group.clone(), shutdown.clone()),
            );
            receivers = Some(r);
        }
        // Every process heartbeats (a receiver-only one too), with its plugins' counters and the
        // alerts it raises.
        let firing = crate::alerts::FiringAlerts::default();
        tasks.spawn(heartbeat_loop(
            pool.clone(),
            worker_id.clone(),
            dispatcher
                .as_ref()
                .map(Dispatcher::stats)
                .unwrap_or_default(),
            live.as_ref().map(|l| l.registry.clone()),
            firing.clone(),
            settings.worker_queue_group.clone(),
            shutdown.clone(),
        ));
        // Every process may raise the alerts; one at a time does (an advisory lock).
        tasks.spawn(crate::alerts::alerts_loop(
            pool.clone(),
            live.clone(),
            settings.clone(),
            firing,
            shutdown.clone(),
        ));
        if let Some(listener) = listener {
            let console = crate::console::Console::new(
                pool.clone(),
                settings.clone(),
                live.clone(),
                worker_id.clone(),
            );
            tasks.spawn(crate::http::serve(
                listener,
                settings.http_addr.clone(),
                pool.clone(),
                settings.redis_url.clone(),
                Some(console),
                shutdown.clone(),
            ));
        }
        tracing::info!(worker = %worker_id, "outbox host started");
        Ok(Host {
            shutdown,
            tasks,
            dispatcher,
            pool,
            router,
            config,
            live,
            receivers,
        })
    }
}

/// A running outbox host. Dropping it does not stop it; call [`Host::shutdown`].
pub struct Host {
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    dispatcher: Option<Dispatcher>,
    pool: PgPool,
    router: RouterHandle,
    config: Config,
    live: Option<LiveConfig>,
    receivers: Option<Receivers>,
}

impl Host {
    /// Start building a host.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    /// A token that stops the host when cancelled (e.g. from a signal handler).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// The dispatcher, when enabled.
    pub fn dispatcher(&self) -> Option<&Dispatcher> {
        self.dispatcher.as_ref()
    }

    /// The pool the host uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The router handle (swap it to change routing live).
    pub fn router(&self) -> &RouterHandle {
        &self.router
    }

    /// The live (hot-reloaded) configuration and plugin registry, unless a router was supplied.
    pub fn live(&self) -> Option<&LiveConfig> {
        self.live.as_ref()
    }

    /// The receivers, when this process consumes queues (see [`Receivers::receiving`]).
    pub fn receivers(&self) -> Option<&Receivers> {
        self.receivers.as_ref()
    }

    /// The configuration the host started with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Stop claiming, let in-flight work finish within the grace period, release the rest, and
    /// wait for every task.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.wait().await;
    }

    /// Wait until the host stops (its shutdown token is cancelled elsewhere).
    pub async fn wait(mut self) {
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                if e.is_panic() {
                    tracing::error!(error = %e, "host task panicked");
                }
            }
        }
    }
}

/// `hostname-pid-xxxx`: unique per process, readable in `claimed_by`.
pub fn default_worker_id() -> String {
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "host".into());
    format!(
        "{host}-{}-{:04x}",
        std::process::id(),
        rand::random::<u16>()
    )
}

async fn heartbeat_loop(
    pool: PgPool,
    worker_id: String,
    stats: Arc<dispatch::DispatchStats>,
    plugins: Option<Arc<PluginRegistry>>,
    firing: crate::alerts::FiringAlerts,
    queue_group: Option<String>,
    shutdown: CancellationToken,
) {
    loop {
        let mut counters = stats.to_json();
        if let Some(registry) = &plugins {
            counters["plugins"] = serde_json::to_value(registry.list()).unwrap_or_default();
        }
        if let Ok(firing) = firing.lock() {
            if !firing.is_empty() {
                counters["alerts_firing"] = serde_json::to_value(&*firing).unwrap_or_default();
            }
        }
        if let Err(e) = store::heartbeat(&pool, &worker_id, queue_group.as_deref(), &counters).await
        {
            tracing::warn!(error = %e, "heartbeat failed");
        }
        // A host that died (no heartbeat for STALE_HOST_AFTER) gives its claims back now rather
        // than at the end of its lease; any live host does it, the update is the same from all.
        match store::release_stale_claims(&pool, store::STALE_HOST_AFTER).await {
            Ok(released) => {
                for r in released {
                    tracing::warn!(host = %r.worker, events = r.events, silent_for = ?store::STALE_HOST_AFTER, "released the claims of a host whose heartbeat stopped");
                    metrics::counter!("outbox_stale_claims_released_total")
                        .increment(r.events as u64);
                }
            }
            Err(e) => tracing::warn!(error = %e, "releasing the claims of stale hosts failed"),
        }
        if crate::reconnect::sleep_or_shutdown(Duration::from_secs(10), &shutdown).await {
            // A host that stops cleanly leaves the list of hosts (and is not reported dead).
            if let Err(e) = store::forget_worker(&pool, &worker_id).await {
                tracing::warn!(error = %e, "could not remove this host's heartbeat row");
            }
            return;
        }
    }
}

async fn retention_loop(
    pool: PgPool,
    settings: Arc<crate::config::Settings>,
    shutdown: CancellationToken,
) {
    loop {
        if crate::reconnect::sleep_or_shutdown(Duration::from_secs(60), &shutdown).await {
            return;
        }
        match store::purge_expired(&pool, &store::RetentionPolicy::from_settings(&settings)).await {
            Ok(report) => record_retention(&report),
            Err(e) => tracing::warn!(error = %e, "retention failed"),
        }
        match store::status_counts(&pool).await {
            Ok(counts) => {
                metrics::gauge!("outbox_events_pending").set(counts.pending as f64);
                metrics::gauge!("outbox_events_failed").set(counts.failed as f64);
                metrics::gauge!("outbox_events_pending_older_than_60s")
                    .set(counts.pending_older_than_60s as f64);
                if counts.pending_older_than_60s > 1000 {
                    tracing::warn!(
                        old_pending = counts.pending_older_than_60s,
                        "many events pending for over 60 s: dispatch is falling behind"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "status counts failed"),
        }
        match store::ordering_blocked(&pool, 1).await {
            Ok(blocked) => {
                metrics::gauge!("outbox_ordering_blocked_keys").set(blocked.blocked_keys as f64);
                metrics::gauge!("outbox_ordering_oldest_blocked_seconds")
                    .set(blocked.oldest_blocked_seconds.unwrap_or_default());
            }
            Err(e) => tracing::warn!(error = %e, "ordering keys blocked by a retry: read failed"),
        }
    }
}

/// Count and log what a retention pass deleted (`outbox_retention_deleted_total{kind}`).
fn record_retention(report: &store::RetentionReport) {
    for (kind, deleted) in report.by_kind() {
        if deleted > 0 {
            metrics::counter!("outbox_retention_deleted_total", "kind" => kind).increment(deleted);
        }
    }
    if report.total() > 0 {
        tracing::info!(
            done_events = report.done_events,
            failed_events = report.failed_events,
            cancelled_events = report.cancelled_events,
            receipts = report.receipts,
            history = report.history,
            "retention: deleted rows past their retention"
        );
    }
    if report.yielded {
        tracing::debug!("retention: another host is deleting; this pass stopped");
    }
}
