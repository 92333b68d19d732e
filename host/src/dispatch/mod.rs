//! Dispatch: the claim loop that moves committed events from PostgreSQL to Redis.
//!
//! Owns one tick's life: claim a batch (lease), route it, enqueue it through the sink, and record
//! the outcomes (done / retry with backoff / failed / released) for the whole batch. It also owns
//! waking up: `LISTEN outbox_event` for new rows, the earliest `available_at` for retries and
//! expired leases, and the poll interval as a fallback. It never holds a row lock across a sink
//! call: the claim statement commits before the sink runs, and the lease (not a lock) protects
//! the rows. It never knows which queue system the [`Sink`] is, and it never writes its own
//! backoff loop (see [`crate::reconnect`]).
//!
//! Per-key ordering is the claim's ([`store::CLAIM_SQL`]): a claim holds at most the head event
//! of each ordering key, and the next event of the key is claimable only once the head's outcome
//! is recorded, so the batches in flight (here and on other hosts) never carry two events of one
//! key, and a key's events reach each queue in id order.
//!
//! Whose fault: only what is the event's own (the router refuses it, the sink refuses an entry)
//! counts as an attempt and waits on the event backoff (`OUTBOX_BACKOFF_SECONDS`). An
//! infrastructure blip ([`crate::fault`]) never does: an event whose hand-off hit one is released
//! (due at once, attempt not counted) while its written destinations stay written, claiming
//! pauses until the sink answers again (probed within a second), and PostgreSQL writes of a
//! batch (outcomes, delivery reads) are retried on a fresh connection while the lease is held;
//!
//! Layout: this module holds the [`Dispatcher`], its counters and how it connects; `claim_loop`
//! runs it (`run`, `drain`: claim, pipeline batches, pause on blips, release at shutdown),
//! `batch` takes one claimed batch through enqueue and record, `records_on_claim` lets a small
//! finished batch's record ride on the next claim's statement, `route` decides each event's
//! queues (contract check, router call), and `wake` says when to look again (`LISTEN`, the next
//! due row).

mod batch;
mod claim_loop;
mod records_on_claim;
mod route;
mod wake;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::config::Settings;
use crate::contracts::Contracts;
use crate::reconnect::connect_with_retry;
use crate::routing::RouterHandle;
use crate::sink::{QueueSinks, Sink};
use crate::store;

/// The NOTIFY channel the insert trigger signals.
pub const NOTIFY_CHANNEL: &str = "outbox_event";

/// Batches processed at once by one dispatcher (claiming the next while the others are routed,
/// handed off and recorded). Three, not two: at batch 100 a batch's claim and record are each
/// about 1.5 ms of PostgreSQL, and a third batch kept PostgreSQL busy while the others waited on
/// Redis and the host (dispatch +22 % at batch 100, unchanged at 1000).
const BATCHES_IN_FLIGHT: usize = 3;

/// Counters of one dispatcher since it started (also exported as metrics).
#[derive(Debug, Default)]
pub struct DispatchStats {
    /// Events handed to all their queues.
    pub done: AtomicU64,
    /// Events put back for a retry.
    pub retried: AtomicU64,
    /// Events given up as `failed` (retries exhausted, or no route).
    pub failed: AtomicU64,
    /// Events put back without counting the attempt after an infrastructure blip.
    pub released: AtomicU64,
    /// Stream entries added.
    pub enqueued: AtomicU64,
    /// Batches claimed.
    pub batches: AtomicU64,
    /// Batches whose outcomes the next claim's statement recorded (see `records_on_claim`).
    pub recorded_on_claim: AtomicU64,
}

impl DispatchStats {
    /// The counters as JSON (for the worker heartbeat).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "done": self.done.load(Ordering::Relaxed),
            "retried": self.retried.load(Ordering::Relaxed),
            "failed": self.failed.load(Ordering::Relaxed),
            "released": self.released.load(Ordering::Relaxed),
            "enqueued": self.enqueued.load(Ordering::Relaxed),
            "batches": self.batches.load(Ordering::Relaxed),
            "recorded_on_claim": self.recorded_on_claim.load(Ordering::Relaxed),
        })
    }
}

/// What one batch came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchReport {
    /// Events claimed.
    pub claimed: usize,
    /// Events marked done.
    pub done: u64,
    /// Events put back with backoff.
    pub retried: u64,
    /// Events given up as `failed`.
    pub failed: u64,
    /// Events put back without counting the attempt (an infrastructure blip on their hand-off).
    pub released: u64,
    /// An infrastructure blip of the queue system (Redis) hit at least one hand-off of the batch:
    /// claiming pauses until the sink answers.
    pub redis_unavailable: bool,
}

/// The claim loop of one host process.
#[derive(Clone)]
pub struct Dispatcher {
    pool: PgPool,
    /// The connections of `pool` claims and outcome records run on, kept between statements
    /// (one for the claim loop and one per batch in flight: see [`store::KeptConnections`]).
    statements: store::KeptConnections,
    sink: Arc<dyn Sink>,
    router: RouterHandle,
    /// The event contracts: a claimed event that breaks its contract fails unrouted.
    contracts: Contracts,
    settings: Arc<Settings>,
    worker_id: String,
    stats: Arc<DispatchStats>,
    gate: Arc<SinkGate>,
    /// `claimed_at` of the batches in flight (to tell a lost claim from a held one).
    held: Arc<std::sync::Mutex<Vec<chrono::DateTime<chrono::Utc>>>>,
    /// Finished batches' records waiting to ride on the next claim.
    records: Arc<records_on_claim::WaitingRecords>,
    /// Where claims read the claim index from (see `store::horizon`).
    horizon: Arc<store::HorizonTracker>,
    /// The process's listening session, when shared with its other followers (else `run`
    /// starts one of its own).
    notifications: Option<store::Notifications>,
}

/// What finished batches tell the claim loop about the sink: a blip hit one (pause and probe),
/// or one went through clean (the sink's backoff starts over).
#[derive(Debug, Default)]
struct SinkGate {
    blipped: AtomicBool,
    clean: AtomicBool,
}

impl Dispatcher {
    /// A dispatcher over connected PostgreSQL and a connected sink (e.g. [`QueueSinks`], or a
    /// single [`crate::sink::RedisSink`] when every queue is a stream).
    pub fn new(
        pool: PgPool,
        sink: impl Sink + 'static,
        router: RouterHandle,
        settings: Arc<Settings>,
        worker_id: impl Into<String>,
    ) -> Self {
        let pool = store::dispatch_pool(&pool);
        Self {
            statements: store::KeptConnections::new(pool.clone(), BATCHES_IN_FLIGHT + 1),
            pool,
            sink: Arc::new(sink),
            router,
            contracts: Contracts::none(),
            settings,
            worker_id: worker_id.into(),
            stats: Arc::default(),
            gate: Arc::default(),
            held: Arc::default(),
            records: Arc::default(),
            horizon: Arc::default(),
            notifications: None,
        }
    }

    /// Check every claimed event against `contracts` before routing it (the `outbox_publish`
    /// SQL function cannot run a JSON Schema): one that breaks its contract, or has none in
    /// strict mode, fails at once with the validation errors and is never enqueued.
    pub fn with_contracts(mut self, contracts: Contracts) -> Self {
        self.contracts = contracts;
        self
    }

    /// Read the claim index from `horizon`, shared with the host's other readers of open rows
    /// (gauges, alerts, console), so one process keeps one horizon fresh instead of several.
    pub fn with_horizon(mut self, horizon: Arc<store::HorizonTracker>) -> Self {
        self.horizon = horizon;
        self
    }

    /// Follow new events on `notifications`, the process's one listening session (see
    /// [`store::Notifications`]: every listening session of the database wakes up for every
    /// published event, so a process keeps one).
    pub fn with_notifications(mut self, notifications: store::Notifications) -> Self {
        self.notifications = Some(notifications);
        self
    }

    /// This dispatcher's worker id (`claimed_by`).
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Counters since start.
    pub fn stats(&self) -> Arc<DispatchStats> {
        self.stats.clone()
    }

    /// The router handle (swap it to reload routing).
    pub fn router(&self) -> &RouterHandle {
        &self.router
    }
}

/// Connect to PostgreSQL, retrying with backoff and a clear log line until it answers or
/// shutdown fires (`None`).
pub async fn connect_postgres(settings: &Settings, shutdown: &CancellationToken) -> Option<PgPool> {
    connect_with_retry("PostgreSQL", shutdown, || {
        store::connect(&settings.database_url, 16)
    })
    .await
}

/// Connect the sinks (every queue's: on Redis, and on the brokers the settings name; each
/// batch reads the queues' sinks from `routes`), retrying with backoff and a clear log line
/// until every queue system answers and the check of the routes' destinations on the brokers
/// could run, or shutdown fires (`Ok(None)`). A destination that is wrong (a missing stream or
/// exchange...) is `Err`, naming the queue: the host does not start on it.
pub async fn connect_sinks(
    settings: &Settings,
    routes: Arc<arc_swap::ArcSwap<crate::config::RoutesFile>>,
    shutdown: &CancellationToken,
) -> Result<Option<QueueSinks>, String> {
    let mut backoff = crate::reconnect::Backoff::new();
    loop {
        let Some(sinks) = connect_with_retry("the queue systems", shutdown, || {
            QueueSinks::connect(settings, routes.clone())
        })
        .await
        else {
            return Ok(None);
        };
        match sinks.check_routes(&routes.load()).await {
            Ok(()) => return Ok(Some(sinks)),
            Err(crate::sink::DestinationError::Invalid(message)) => return Err(message),
            Err(crate::sink::DestinationError::Unreachable(message)) => {
                let stop = backoff
                    .failed(shutdown, |delay| {
                        tracing::error!(error = %message, retry_in = ?delay, "cannot check the queues' destinations; retrying")
                    })
                    .await;
                if stop {
                    return Ok(None);
                }
            }
        }
    }
}
