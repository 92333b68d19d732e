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

use crate::config::{Config, Settings};
use crate::dispatch::{self, Dispatcher};
use crate::live_config::LiveConfig;
use crate::numeric::signed_figure;
use crate::plugin::{PluginError, PluginRegistry};
use crate::receive::Receivers;
use crate::routing::{Router, RouterHandle};
use crate::sink::{QueueSinks, Sink};
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
    /// Redis could not be reached for the queues' sinks (a one-shot assembly).
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    /// The receivers could not start (a one-shot assembly).
    #[error(transparent)]
    Receive(#[from] crate::receive::ReceiveError),
    /// The queue group asked for is not one of the routes file's `[queue_groups]`.
    #[error("unknown queue group {group:?}: routes.toml has {}", known_groups(.known))]
    UnknownQueueGroup {
        /// The queue group asked for.
        group: String,
        /// The routes file's queue groups.
        known: Vec<String>,
    },
    /// Shutdown was requested before the host finished starting.
    #[error("shutdown requested while starting")]
    ShutdownDuringStart,
}

/// How many connections [`HostBuilder::build_dispatcher`] and [`HostBuilder::build_receivers`]
/// open when no pool is given (a one-shot command needs few; a running host opens its own).
pub const ONE_SHOT_POOL_SIZE: u32 = 4;

/// Builds a [`Host`], or one of its stages on its own: the one assembly of the host's parts,
/// shared by `outbox run`, `outbox drain`, `outbox demo`, `outbox-bench` and the tests.
///
/// `Host::builder().config(cfg).start().await?` runs a whole host;
/// [`build_dispatcher`](Self::build_dispatcher) and [`build_receivers`](Self::build_receivers)
/// assemble one stage exactly as [`start`](Self::start) does, and start nothing.
///
/// Defaults, for whatever is not set:
/// - config: [`Config::from_env`] (`OUTBOX_CONFIG`, else `routes.toml` if present, else the
///   built-in table, with the environment over `[settings]`);
/// - queue group: `WORKER_QUEUE_GROUP` of the config's settings (every group when unset);
/// - pool: [`start`](Self::start) connects to `DATABASE_URL` retrying with backoff until it
///   answers or shutdown is requested; the `build_*` methods connect once
///   ([`ONE_SHOT_POOL_SIZE`] connections) and fail at once, as a one-shot command should;
///   either way the database is migrated;
/// - router: the one the routes file names, through a [`LiveConfig`] (plugins loaded, and with
///   a routes file, hot reload), unless a router or a live configuration is given;
/// - sink: every queue's own sink, following the routes in force ([`start`](Self::start)
///   retries Redis like PostgreSQL; the `build_*` methods connect once);
/// - worker id: [`default_worker_id`] (`hostname-pid-xxxx`);
/// - shutdown: a fresh token ([`Host::shutdown_token`]);
/// - stages: the dispatcher as `OUTBOX_DISPATCHER_ENABLED` says; receivers unless a router was
///   given (and only when a routes file can bind handlers, or binds some).
///
/// Validation, before anything connects: the queue group must be one of the routes file's
/// `[queue_groups]` ([`HostError::UnknownQueueGroup`]; [`start`](Self::start) and
/// [`build_receivers`](Self::build_receivers), which consume by it), then, for a host about to
/// run ([`start`](Self::start)), [`Config::check`] (receiver lease against the handlers' time
/// limits, BullMQ queues on a Redis Cluster). A config read by [`Config::load`] or
/// [`Config::from_env`] has passed that check already; a stage built on its own is run by its
/// caller (a drain, a bench, a test with a deliberately short lease), which answers for it.
#[derive(Default)]
pub struct HostBuilder {
    config: Option<Config>,
    pool: Option<PgPool>,
    router: Option<RouterHandle>,
    live: Option<LiveConfig>,
    sink: Option<Arc<dyn Sink>>,
    worker_id: Option<String>,
    queue_group: Option<String>,
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

    /// Use this live configuration (plugins already loaded) instead of starting one from the
    /// config: stages built from the same one share its plugins and reloads. The caller owns
    /// it, so the host watches no file for it.
    pub fn live_config(mut self, live: LiveConfig) -> Self {
        self.live = Some(live);
        self
    }

    /// Hand events off through this sink instead of connecting every queue's sink (a test's
    /// faulty sink, a bench's single stream sink).
    pub fn sink(mut self, sink: impl Sink + 'static) -> Self {
        self.sink = Some(Arc::new(sink));
        self
    }

    /// Claim under this worker id (default: `host-pid-random`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = Some(id.into());
        self
    }

    /// Consume only this queue group's queues (overrides `WORKER_QUEUE_GROUP`; must be one of
    /// the routes file's `[queue_groups]`).
    pub fn queue_group(mut self, group: impl Into<String>) -> Self {
        self.queue_group = Some(group.into());
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

    /// The configuration with the defaults applied (see [`HostBuilder`]).
    fn resolve_config(&mut self) -> Result<Config, HostError> {
        let mut config = match self.config.take() {
            Some(c) => c,
            None => Config::from_env()?,
        };
        if let Some(group) = self.queue_group.take() {
            config.settings.worker_queue_group = Some(group);
        }
        Ok(config)
    }

    /// The given pool, else one of [`ONE_SHOT_POOL_SIZE`] connections opened once; migrated.
    async fn one_shot_pool(&mut self, settings: &Settings) -> Result<PgPool, HostError> {
        let pool = match self.pool.take() {
            Some(pool) => pool,
            None => store::connect(&settings.database_url, ONE_SHOT_POOL_SIZE).await?,
        };
        store::migrate(&pool).await?;
        Ok(pool)
    }

    /// Assemble the dispatcher exactly as [`start`](Self::start) does (router, every queue's
    /// sink following the routes in force, contracts, worker id) and start nothing: for
    /// `outbox drain` ([`Dispatcher::drain`]), the bench and the tests. Connects once.
    pub async fn build_dispatcher(mut self) -> Result<Dispatcher, HostError> {
        let config = self.resolve_config()?;
        let settings = Arc::new(config.settings.clone());
        let pool = self.one_shot_pool(&settings).await?;
        let (router, routes) = match (self.router.take(), self.live.take()) {
            (router, Some(live)) => (router.unwrap_or_else(|| live.router.clone()), live.routes),
            (Some(router), None) => (router, fixed_routes(&config)),
            (None, None) => {
                let live = LiveConfig::start(&config).await?;
                (live.router.clone(), live.routes)
            }
        };
        let sink = match self.sink.take() {
            Some(sink) => sink,
            None => {
                let sinks = QueueSinks::connect(&settings, routes.clone()).await?;
                sinks.check_routes(&routes.load()).await.map_err(|e| {
                    crate::config::ConfigError::Invalid {
                        path: config.shown_path(),
                        message: e.to_string(),
                    }
                })?;
                Arc::new(sinks)
            }
        };
        let worker_id = self.worker_id.take().unwrap_or_else(default_worker_id);
        Ok(
            Dispatcher::new(pool, SharedSink(sink), router, settings, worker_id)
                .with_contracts(config.load_contracts()?),
        )
    }

    /// Assemble the receivers exactly as [`start`](Self::start) does (plugins, capability
    /// policy, Redis, consumer name = worker id) and start nothing: the caller runs
    /// [`Receivers::run`] or consumes single queues. Connects once.
    pub async fn build_receivers(mut self) -> Result<Receivers, HostError> {
        let config = self.resolve_config()?;
        check_queue_group(&config)?;
        let settings = Arc::new(config.settings.clone());
        let pool = self.one_shot_pool(&settings).await?;
        let live = match self.live.take() {
            Some(live) => live,
            None => LiveConfig::start(&config).await?,
        };
        let worker_id = self.worker_id.take().unwrap_or_else(default_worker_id);
        Ok(Receivers::new(pool, live, settings, &worker_id).await?)
    }

    /// Connect (retrying with backoff while PostgreSQL or Redis are away), migrate, and start the
    /// background tasks. Returns once the host is serving.
    pub async fn start(mut self) -> Result<Host, HostError> {
        let config = self.resolve_config()?;
        check_queue_group(&config)?;
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
        let (router, live) = match (self.router, self.live) {
            (router, Some(live)) => (router.unwrap_or_else(|| live.router.clone()), Some(live)),
            (Some(router), None) => (router, None),
            (None, None) => {
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
        // One claim horizon per process: the dispatcher's claims, the gauges, the alerts, the
        // heartbeat's release of dead hosts' claims and the console read open rows from it.
        let horizon = Arc::new(store::HorizonTracker::default());
        // One listening session per process, for the dispatcher's new events and the
        // receivers' queue pauses alike (see `store::Notifications`).
        let notifications = store::Notifications::start(pool.clone());
        let mut dispatcher = None;
        if self
            .dispatcher_enabled
            .unwrap_or(settings.dispatcher_enabled)
        {
            // Each queue's sink follows the routes in force (built in: the config's, fixed).
            let routes = match &live {
                Some(live) => live.routes.clone(),
                None => fixed_routes(&config),
            };
            let sink: Arc<dyn Sink> = match self.sink {
                Some(sink) => sink,
                None => {
                    let sinks = dispatch::connect_sinks(&settings, routes, &shutdown)
                        .await
                        .map_err(|message| {
                            HostError::Config(crate::config::ConfigError::Invalid {
                                path: config.shown_path(),
                                message,
                            })
                        })?
                        .ok_or(HostError::ShutdownDuringStart)?;
                    // A reload is checked against the brokers too before it is applied.
                    if let Some(live) = &live {
                        live.check_destinations_with(Arc::new(sinks.clone()));
                    }
                    Arc::new(sinks)
                }
            };
            let d = Dispatcher::new(
                pool.clone(),
                SharedSink(sink),
                router.clone(),
                settings.clone(),
                &worker_id,
            )
            .with_contracts(contracts.clone())
            .with_horizon(horizon.clone())
            .with_notifications(notifications.clone());
            tasks.spawn(d.clone().run(shutdown.clone()));
            tasks.spawn(retention_loop(
                pool.clone(),
                horizon.clone(),
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
                Receivers::new_sharing(
                    pool.clone(),
                    live.clone(),
                    settings.clone(),
                    &worker_id,
                    &notifications,
                )
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
            Heartbeat {
                pool: pool.clone(),
                horizon: horizon.clone(),
                worker_id: worker_id.clone(),
            },
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
            horizon.clone(),
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
                horizon,
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

/// Refuse a queue group the routes file does not define ([`HostError::UnknownQueueGroup`]).
fn check_queue_group(config: &Config) -> Result<(), HostError> {
    match &config.settings.worker_queue_group {
        Some(group) if !config.routes.queue_groups.contains_key(group) => {
            Err(HostError::UnknownQueueGroup {
                group: group.clone(),
                known: config.routes.queue_groups.keys().cloned().collect(),
            })
        }
        _ => Ok(()),
    }
}

/// The routes file's queue groups as [`HostError::UnknownQueueGroup`] names them.
fn known_groups(known: &[String]) -> String {
    if known.is_empty() {
        "no [queue_groups]".to_string()
    } else {
        known.join(", ")
    }
}

/// The config's routes, fixed (a host routing with a given router reloads nothing).
fn fixed_routes(config: &Config) -> Arc<arc_swap::ArcSwap<crate::config::RoutesFile>> {
    Arc::new(arc_swap::ArcSwap::from_pointee(config.routes.clone()))
}

/// A sink given to the builder (or connected by it), shared with the dispatcher.
struct SharedSink(Arc<dyn Sink>);

impl Sink for SharedSink {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn enqueue_all<'a>(
        &'a self,
        items: &'a [crate::sink::Enqueue<'a>],
    ) -> futures::future::BoxFuture<'a, Vec<crate::sink::EnqueueResult>> {
        self.0.enqueue_all(items)
    }

    fn ping(&self) -> futures::future::BoxFuture<'_, Result<(), crate::sink::SinkError>> {
        self.0.ping()
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

/// Where a host's heartbeat goes: its row in `outbox_worker` on `pool`, and the claim horizon
/// the release of dead hosts' claims reads from.
struct Heartbeat {
    pool: PgPool,
    horizon: Arc<store::HorizonTracker>,
    worker_id: String,
}

async fn heartbeat_loop(
    Heartbeat {
        pool,
        horizon,
        worker_id,
    }: Heartbeat,
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
        let at = horizon.current(&pool).await;
        match store::release_stale_claims(&pool, store::STALE_HOST_AFTER, at).await {
            Ok(released) => {
                for r in released {
                    tracing::warn!(host = %r.worker, events = r.events, silent_for = ?store::STALE_HOST_AFTER, "released the claims of a host whose heartbeat stopped");
                    metrics::counter!("outbox_stale_claims_released_total")
                        .increment(crate::numeric::count(r.events));
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
    horizon: Arc<store::HorizonTracker>,
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
        let at = horizon.current(&pool).await;
        match store::pending_and_failed(&pool, Duration::from_secs(60), at).await {
            Ok(counts) => {
                metrics::gauge!("outbox_events_pending").set(signed_figure(counts.pending));
                metrics::gauge!("outbox_events_failed").set(signed_figure(counts.failed));
                metrics::gauge!("outbox_events_pending_older_than_60s")
                    .set(signed_figure(counts.late));
                if counts.late > 1000 {
                    tracing::warn!(
                        old_pending = counts.late,
                        "many events pending for over 60 s: dispatch is falling behind"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "status counts failed"),
        }
        match store::ordering_blocked(&pool, 1).await {
            Ok(blocked) => {
                metrics::gauge!("outbox_ordering_blocked_keys")
                    .set(signed_figure(blocked.blocked_keys));
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
