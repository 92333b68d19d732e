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
//! only if that cannot succeed well inside the lease are the rows left to lease expiry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Settings;
use crate::contracts::Contracts;
use crate::fault::{self, Blip};
use crate::reconnect::{connect_with_retry, retry_blips, retry_delay, sleep_or_shutdown, Backoff};
use crate::routing::{RouteDecision, RouterHandle};
use crate::sink::{Enqueue, EnqueueResult, QueueSinks, Sink};
use crate::store::{self, Claim, ClaimedEvent, DeliveryRecord, EventOutcome};

/// The NOTIFY channel the insert trigger signals.
pub const NOTIFY_CHANNEL: &str = "outbox_event";

/// Batches processed at once by one dispatcher (claiming the next while the last is recorded).
const BATCHES_IN_FLIGHT: usize = 2;

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
    sink: Arc<dyn Sink>,
    router: RouterHandle,
    /// The event contracts: a claimed event that breaks its contract fails unrouted.
    contracts: Contracts,
    settings: Arc<Settings>,
    worker_id: String,
    wake: Arc<Notify>,
    stats: Arc<DispatchStats>,
    gate: Arc<SinkGate>,
    /// `claimed_at` of the batches in flight (to tell a lost claim from a held one).
    held: Arc<std::sync::Mutex<Vec<chrono::DateTime<chrono::Utc>>>>,
    /// Where claims read the claim index from (see `store::horizon`).
    horizon: Arc<store::HorizonTracker>,
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
        Self {
            pool,
            sink: Arc::new(sink),
            router,
            contracts: Contracts::none(),
            settings,
            worker_id: worker_id.into(),
            wake: Arc::new(Notify::new()),
            stats: Arc::default(),
            gate: Arc::default(),
            held: Arc::default(),
            horizon: Arc::default(),
        }
    }

    /// Check every claimed event against `contracts` before routing it (the `outbox_publish`
    /// SQL function cannot run a JSON Schema): one that breaks its contract, or has none in
    /// strict mode, fails at once with the validation errors and is never enqueued.
    pub fn with_contracts(mut self, contracts: Contracts) -> Self {
        self.contracts = contracts;
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

    /// Claim and dispatch until nothing is due right now (`outbox drain`). Events whose retry is
    /// scheduled later are left for later. Returns the summed report.
    ///
    /// Pipelined as [`run`](Self::run) is: up to [`BATCHES_IN_FLIGHT`] batches at once, the next
    /// claimed while the last is routed, enqueued and recorded, once a batch has gone through
    /// clean. Until then batches go one at a time: a blipped batch's events are released due at
    /// once, and a batch claimed beside it would take them again only to release them again. It
    /// stops claiming after a queue-system blip (returning with `redis_unavailable`) or an error,
    /// and it returns only when no batch is in flight, so no row it claimed is left `processing`
    /// (a batch whose outcome write failed for good is the exception: its error is returned, and
    /// its rows come back after the lease).
    pub async fn drain(&self) -> Result<BatchReport, store::StoreError> {
        let mut total = BatchReport::default();
        let mut failure: Option<store::StoreError> = None;
        let mut in_flight: JoinSet<Result<BatchReport, store::StoreError>> = JoinSet::new();
        let mut sink_answers = false;
        loop {
            // Wait while the batches in flight are at the limit, and for all of them once one
            // failed or blipped. Checked again after each batch joins: a batch joined here may be
            // the one that blipped, and breaking out with another still in flight would drop
            // (abort) it with its rows claimed.
            loop {
                let stopping = failure.is_some() || total.redis_unavailable;
                let most = if sink_answers { BATCHES_IN_FLIGHT } else { 1 };
                if in_flight.is_empty() || (!stopping && in_flight.len() < most) {
                    break;
                }
                if let Some(joined) = in_flight.join_next().await {
                    sink_answers |= add_batch(&mut total, &mut failure, joined);
                }
            }
            if failure.is_some() || total.redis_unavailable {
                break;
            }
            let claim = match self.claim().await {
                Ok(claim) => claim,
                Err(e) => {
                    failure = Some(e);
                    continue;
                }
            };
            if claim.events.is_empty() {
                // A batch in flight may still make events due at once (a release): look again
                // once it is done.
                match in_flight.join_next().await {
                    Some(joined) => {
                        sink_answers |= add_batch(&mut total, &mut failure, joined);
                        continue;
                    }
                    None => break,
                }
            }
            let me = self.clone();
            in_flight.spawn(async move { me.dispatch_claim(claim).await });
        }
        debug_assert!(
            in_flight.is_empty(),
            "drain returns with no batch in flight"
        );
        match failure {
            Some(e) => Err(e),
            None => Ok(total),
        }
    }

    /// Run until `shutdown` fires: claim, dispatch, wait for work. On shutdown stop claiming,
    /// let in-flight batches finish within the grace period, then release what is still held.
    pub async fn run(self, shutdown: CancellationToken) {
        let listener = tokio::spawn(listen_for_events(
            self.pool.clone(),
            self.wake.clone(),
            shutdown.clone(),
        ));
        let mut in_flight: JoinSet<()> = JoinSet::new();
        let mut backoff = Backoff::new();
        let mut sink_backoff = Backoff::new();
        // A claim failed on a blip: it may have committed with its reply lost.
        let mut claim_maybe_lost = false;
        tracing::info!(worker = %self.worker_id, router = self.router.current().name(), "dispatcher started");
        while !shutdown.is_cancelled() {
            while in_flight.len() >= BATCHES_IN_FLIGHT {
                in_flight.join_next().await;
            }
            if self.gate.blipped.swap(false, Ordering::AcqRel) {
                // A batch hit a queue-system blip; its events are already released. Claim again
                // once the sink answers, so they do not churn through it meanwhile.
                self.wait_for_sink(&mut sink_backoff, &shutdown).await;
                continue;
            }
            if self.gate.clean.swap(false, Ordering::AcqRel) && sink_backoff.succeeded() {
                tracing::info!(
                    sink = self.sink.name(),
                    "queue system is back; dispatching resumes"
                );
            }
            if claim_maybe_lost {
                match self.release_lost_claims().await {
                    Ok(()) => claim_maybe_lost = false,
                    Err(e) => {
                        let blip = fault::postgres_blip(&e.source);
                        backoff
                            .failed_with(blip, &shutdown, |delay| {
                                tracing::error!(error = %e, retry_in = ?delay, "cannot check for a lost claim; retrying")
                            })
                            .await;
                        continue;
                    }
                }
            }
            let claim = match self.claim().await {
                Ok(claim) => {
                    if backoff.succeeded() {
                        tracing::info!("PostgreSQL answers again; claiming resumes");
                    }
                    claim
                }
                Err(e) => {
                    metrics::counter!("outbox_dispatch_errors_total", "stage" => "claim")
                        .increment(1);
                    let blip = fault::postgres_blip(&e.source);
                    if let Some(blip) = blip {
                        blip.count_retry("claim");
                        claim_maybe_lost = true;
                    }
                    backoff
                        .failed_with(blip, &shutdown, |delay| {
                            tracing::error!(error = %e, retry_in = ?delay, "cannot claim events: PostgreSQL unavailable? retrying")
                        })
                        .await;
                    continue;
                }
            };
            if claim.events.is_empty() {
                let wait = self.idle_wait().await;
                tokio::select! {
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(wait) => {}
                    _ = shutdown.cancelled() => {}
                    Some(_) = in_flight.join_next(), if !in_flight.is_empty() => {}
                }
                continue;
            }
            let me = self.clone();
            let claimed_at = claim.claimed_at;
            self.hold(claimed_at, true);
            in_flight.spawn(async move {
                let dispatched = me.dispatch_claim(claim).await;
                me.hold(claimed_at, false);
                match dispatched {
                    Ok(report) if report.redis_unavailable => {
                        me.gate.blipped.store(true, Ordering::Release)
                    }
                    Ok(_) => me.gate.clean.store(true, Ordering::Release),
                    Err(e) => {
                        // Retried on fresh connections for as long as the lease allowed: the rows
                        // stay leased and are claimed again after the lease; the enqueue is
                        // idempotent, so nothing is doubled.
                        tracing::error!(error = %e, "cannot record batch outcomes; rows will be reclaimed after the lease");
                        metrics::counter!("outbox_dispatch_errors_total", "stage" => "record").increment(1);
                    }
                }
            });
        }
        let grace = self.settings.shutdown_grace;
        let finished = tokio::time::timeout(grace, async {
            while in_flight.join_next().await.is_some() {}
        })
        .await;
        if finished.is_err() {
            in_flight.abort_all();
            tracing::warn!(
                ?grace,
                "shutdown grace period over; releasing claimed events"
            );
        }
        match store::release_claims(&self.pool, &self.worker_id).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(released = n, "released claimed events for other hosts"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release claims; they return after the lease")
            }
        }
        listener.abort();
        tracing::info!(worker = %self.worker_id, "dispatcher stopped");
    }

    /// Note a batch in flight (`true`) or finished (`false`) by its claim's `claimed_at`.
    fn hold(&self, claimed_at: chrono::DateTime<chrono::Utc>, held: bool) {
        let mut all = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if held {
            all.push(claimed_at);
        } else if let Some(i) = all.iter().position(|at| *at == claimed_at) {
            all.swap_remove(i);
        }
    }

    /// After a claim failed on a blip, give back whatever this worker holds outside its batches
    /// in flight: the failed claim may have committed with only its reply lost, and its rows
    /// would otherwise wait out the lease with an attempt counted.
    async fn release_lost_claims(&self) -> Result<(), store::StoreError> {
        let held = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let released = store::release_lost_claims(&self.pool, &self.worker_id, &held).await?;
        if released > 0 {
            tracing::warn!(
                released,
                "a claim committed but its reply was lost; its events are claimable again"
            );
        }
        Ok(())
    }

    /// Claim the next batch under this dispatcher's worker id, batch size and lease, reading the
    /// claim index from this dispatcher's horizon.
    async fn claim(&self) -> Result<Claim, store::StoreError> {
        let horizon = self.horizon.current(&self.pool).await;
        store::claim_due_events_from(
            &self.pool,
            &self.worker_id,
            self.settings.dispatch_batch_size,
            self.settings.claim_lease,
            horizon,
        )
        .await
    }

    /// How long to sleep when nothing was claimable: until the next row is due (retry time or
    /// lease end), at most the poll interval.
    async fn idle_wait(&self) -> Duration {
        let interval = self.settings.dispatch_interval;
        let horizon = self.horizon.current(&self.pool).await;
        match store::time_until_next_due(&self.pool, horizon).await {
            // Due now but not claimable: another host holds it mid-claim. Look again shortly.
            Ok(Some(d)) if d.is_zero() => Duration::from_millis(10).min(interval),
            Ok(Some(d)) => (d + Duration::from_millis(5)).min(interval),
            Ok(None) => interval,
            Err(_) => interval,
        }
    }

    /// After a batch hit a blip of the sink's queue system (Redis): wait the probe delay, then
    /// ping until it answers, before claiming more. `backoff` lives in the claim loop and starts
    /// over only after a clean batch, so a blip that outlives a successful ping (`READONLY`
    /// during a long failover) is probed at most once a second, not in a tight loop.
    async fn wait_for_sink(&self, backoff: &mut Backoff, shutdown: &CancellationToken) {
        let sink = self.sink.name();
        let stop = backoff
            .blipped(shutdown, |delay| {
                tracing::warn!(sink, retry_in = ?delay, "queue system blip; claims paused until it answers")
            })
            .await;
        if stop {
            return;
        }
        loop {
            match self.sink.ping().await {
                Ok(()) => return,
                Err(e) => {
                    let stop = backoff
                        .blipped(shutdown, |delay| {
                            tracing::error!(sink, error = %e, retry_in = ?delay, "queue system unavailable; claims paused")
                        })
                        .await;
                    if stop {
                        return;
                    }
                }
            }
        }
    }

    /// How long a batch may keep retrying its PostgreSQL writes through blips: half the lease
    /// from when the batch started, well before another host may take the rows over.
    fn write_deadline(&self, started: Instant) -> Instant {
        started + self.settings.claim_lease / 2
    }

    /// Route, enqueue and record one claimed batch.
    ///
    /// Spans (debug level, see [`crate::trace_context`]): `outbox.claim` for the batch, with
    /// `outbox.route`, `outbox.enqueue` and `outbox.record` inside it, and one `outbox.dispatch`
    /// per event, a child of the event's producer (its `traceparent`) linked to the batch's.
    pub async fn dispatch_claim(&self, claim: Claim) -> Result<BatchReport, store::StoreError> {
        let started = Instant::now();
        let batch_span = tracing::debug_span!(parent: None, "outbox.claim", claimed = claim.events.len(), worker = %self.worker_id);
        let event_spans = dispatch_spans(&batch_span, &claim.events);
        self.stats.batches.fetch_add(1, Ordering::Relaxed);
        let recovered = claim.events.iter().filter(|e| e.recovered_lease).count();
        if recovered > 0 {
            tracing::warn!(
                recovered,
                "took over events whose lease expired (a host died or stalled)"
            );
            metrics::counter!("outbox_lease_recovered_total").increment(recovered as u64);
        }
        let (claim, decisions) = self
            .route(claim)
            .instrument(tracing::debug_span!(parent: &batch_span, "outbox.route"))
            .await;

        // Fan-out events that may have been partly handed off before (retried after a partial
        // failure, or requeued by an operator, which starts the attempts again): skip the
        // destinations already done. Every fan-out event is looked up, whatever its attempt:
        // a requeued one is on attempt 1 again, and its enqueue markers may have expired.
        let fan_out_ids: Vec<i64> = claim
            .events
            .iter()
            .zip(&decisions)
            .filter(|(_, d)| matches!(d, Routed::Route(RouteDecision::Queues(q)) if q.len() > 1))
            .map(|(e, _)| e.id)
            .collect();
        let already = retry_blips(
            "read delivered destinations",
            "record",
            self.write_deadline(started),
            |e: &store::StoreError| fault::postgres_blip(&e.source),
            || store::delivered_destinations(&self.pool, &fan_out_ids),
        )
        .await?;

        let mut items = Vec::new();
        for (event, decision) in claim.events.iter().zip(&decisions) {
            if let Routed::Route(RouteDecision::Queues(queues)) = decision {
                let done = already.get(&event.id);
                for queue in queues {
                    if !done.is_some_and(|d| d.contains(queue)) {
                        items.push(Enqueue { event, queue });
                    }
                }
            }
        }
        let results = self
            .sink
            .enqueue_all(&items)
            .instrument(
                tracing::debug_span!(parent: &batch_span, "outbox.enqueue", entries = items.len()),
            )
            .await;
        let redis_unavailable = results.iter().any(|r| r.blip().is_some());

        let mut per_event: HashMap<i64, Vec<(&str, &EnqueueResult)>> = HashMap::new();
        for (item, result) in items.iter().zip(&results) {
            per_event
                .entry(item.event.id)
                .or_default()
                .push((item.queue, result));
        }
        let added = results
            .iter()
            .filter(|r| matches!(r, EnqueueResult::Added(_)))
            .count();
        self.stats
            .enqueued
            .fetch_add(added as u64, Ordering::Relaxed);

        let mut outcomes = Vec::with_capacity(claim.events.len());
        let mut deliveries = Vec::new();
        for (event, decision) in claim.events.iter().zip(&decisions) {
            let outcome = match decision {
                Routed::BrokeContract(reason) => {
                    tracing::error!(event_id = event.id, event_type = %event.event_type, "{reason}; event failed");
                    EventOutcome::Failed {
                        error: reason.clone(),
                    }
                }
                Routed::Route(RouteDecision::NoRoute(reason)) => {
                    tracing::error!(event_id = event.id, event_type = %event.event_type, "{reason}; event failed");
                    metrics::counter!("outbox_no_route_total").increment(1);
                    EventOutcome::Failed {
                        error: reason.clone(),
                    }
                }
                Routed::Route(RouteDecision::Error(error)) => {
                    self.retry_or_fail(event, error.clone())
                }
                Routed::Route(RouteDecision::Queues(queues)) => {
                    let results = per_event.remove(&event.id).unwrap_or_default();
                    if queues.len() > 1 {
                        // A blipped destination is not recorded: it was not this attempt's fault.
                        for (queue, result) in results.iter().filter(|(_, r)| r.blip().is_none()) {
                            deliveries.push(DeliveryRecord {
                                event_id: event.id,
                                destination: queue.to_string(),
                                stream_id: result.stream_id().map(str::to_string),
                                error: result.error().map(str::to_string),
                            });
                        }
                    }
                    let refused: Vec<&str> = results
                        .iter()
                        .filter(|(_, r)| r.blip().is_none())
                        .filter_map(|(_, r)| r.error())
                        .collect();
                    let blipped: Vec<(&str, Blip)> = results
                        .iter()
                        .filter_map(|(_, r)| Some((r.error()?, r.blip()?)))
                        .collect();
                    if !refused.is_empty() {
                        self.retry_or_fail(event, refused.join("; "))
                    } else if let Some((_, blip)) = blipped.first() {
                        blip.count_retry("enqueue");
                        let errors: Vec<&str> = blipped.iter().map(|(e, _)| *e).collect();
                        tracing::debug!(event_id = event.id, %blip, "hand-off hit an infrastructure blip; released without counting the attempt");
                        EventOutcome::Released {
                            error: errors.join("; "),
                        }
                    } else {
                        EventOutcome::Done
                    }
                }
            };
            outcomes.push((event.id, outcome));
        }

        let counts = retry_blips(
            "record batch outcomes",
            "record",
            self.write_deadline(started),
            |e: &store::StoreError| fault::postgres_blip(&e.source),
            || store::record_outcomes(&self.pool, &claim, &outcomes, &deliveries),
        )
        .instrument(tracing::debug_span!(parent: &batch_span, "outbox.record"))
        .await?;
        for (span, (_, outcome)) in event_spans.iter().zip(&outcomes) {
            span.record("outcome", outcome_label(outcome));
        }
        self.stats.done.fetch_add(counts.done, Ordering::Relaxed);
        self.stats
            .retried
            .fetch_add(counts.retried, Ordering::Relaxed);
        self.stats
            .failed
            .fetch_add(counts.failed, Ordering::Relaxed);
        self.stats
            .released
            .fetch_add(counts.released, Ordering::Relaxed);
        metrics::counter!("outbox_events_dispatched_total").increment(counts.done);
        metrics::counter!("outbox_events_retried_total").increment(counts.retried);
        metrics::counter!("outbox_events_failed_total").increment(counts.failed);
        metrics::histogram!("outbox_dispatch_batch_seconds")
            .record(started.elapsed().as_secs_f64());
        let lost = (outcomes.len() as u64)
            .saturating_sub(counts.done + counts.retried + counts.failed + counts.released);
        if lost > 0 {
            tracing::warn!(
                lost,
                "lease lost before recording (or recorded by an earlier try whose reply was lost); another host finishes those events"
            );
        }
        Ok(BatchReport {
            claimed: claim.events.len(),
            done: counts.done,
            retried: counts.retried,
            failed: counts.failed,
            released: counts.released,
            redis_unavailable,
        })
    }

    /// Route a claim off the async executor. A failing batch call is retried event by event so
    /// one poisonous event cannot hold back the others.
    ///
    /// Events that break their contract are taken out before routing: their decision is
    /// [`Routed::BrokeContract`].
    async fn route(&self, mut claim: Claim) -> (Claim, Vec<Routed>) {
        let router = self.router.current();
        let contracts = self.contracts.clone();
        let events = Arc::new(std::mem::take(&mut claim.events));
        let shared = events.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let violations: Vec<Option<String>> = shared
                .iter()
                .map(|e| {
                    contracts
                        .check_text(&e.event_type, e.event_version, &e.payload, "dispatch")
                        .err()
                        .map(|v| v.to_string())
                })
                .collect();
            if violations.iter().all(Option::is_none) {
                return route_checked(router.as_ref().as_ref(), &shared)
                    .into_iter()
                    .map(Routed::Route)
                    .collect::<Vec<_>>();
            }
            let valid: Vec<ClaimedEvent> = shared
                .iter()
                .zip(&violations)
                .filter(|(_, v)| v.is_none())
                .map(|(e, _)| e.clone())
                .collect();
            let mut routed = route_checked(router.as_ref().as_ref(), &valid).into_iter();
            violations
                .into_iter()
                .map(|violation| match violation {
                    Some(reason) => Routed::BrokeContract(reason),
                    None => Routed::Route(routed.next().unwrap_or_else(|| {
                        RouteDecision::Error("router returned too few routes".into())
                    })),
                })
                .collect()
        })
        .await;
        let decisions = joined.unwrap_or_else(|e| {
            tracing::error!(error = %e, "router panicked");
            vec![Routed::Route(RouteDecision::Error(format!("router panicked: {e}"))); events.len()]
        });
        claim.events = Arc::try_unwrap(events).unwrap_or_else(|shared| (*shared).clone());
        (claim, decisions)
    }

    fn retry_or_fail(&self, event: &ClaimedEvent, error: String) -> EventOutcome {
        if event.attempts > self.settings.max_retries {
            tracing::error!(event_id = event.id, event_type = %event.event_type, attempts = event.attempts, %error, "giving up: event failed");
            EventOutcome::Failed {
                error: format!("gave up after {} attempts: {error}", event.attempts),
            }
        } else {
            let delay = self.settings.backoff_after(event.attempts);
            tracing::warn!(event_id = event.id, event_type = %event.event_type, attempt = event.attempts, retry_in = ?delay, %error, "dispatch failed; will retry");
            EventOutcome::Retry { error, delay }
        }
    }
}

/// What the dispatcher decided for one claimed event before the hand-off.
#[derive(Debug, Clone)]
enum Routed {
    /// The router's decision.
    Route(RouteDecision),
    /// The event breaks its contract (or has none in strict mode): it fails at once with
    /// this explanation and is never enqueued.
    BrokeContract(String),
}

/// Route `events` with one batch call (event by event when the batch call fails, so one
/// poisonous event cannot hold back the others); whatever the router, only a valid, bounded
/// answer reaches the sink and the store.
fn route_checked(
    router: &dyn crate::routing::Router,
    events: &[ClaimedEvent],
) -> Vec<RouteDecision> {
    if events.is_empty() {
        return Vec::new();
    }
    let decisions = match router.route_batch(events) {
        Ok(d) if d.len() == events.len() => d,
        Ok(d) => {
            let message = format!(
                "router {} returned {} routes for {} events",
                router.name(),
                d.len(),
                events.len()
            );
            route_one_by_one(router, events, &message)
        }
        Err(e) => route_one_by_one(router, events, &e.to_string()),
    };
    decisions
        .into_iter()
        .map(|d| d.checked(router.name()))
        .collect()
}

/// One `outbox.dispatch` span per event of a claimed batch: a child of the event's producer
/// (its `traceparent`), linked to the batch's span. None while the batch's span is disabled (no
/// exporter): then nothing is parsed.
fn dispatch_spans(batch: &tracing::Span, events: &[ClaimedEvent]) -> Vec<tracing::Span> {
    if batch.is_disabled() {
        return Vec::new();
    }
    events
        .iter()
        .map(|event| {
            let span = tracing::debug_span!(parent: None, "outbox.dispatch", event_id = event.id, event_type = %event.event_type, outcome = tracing::field::Empty);
            crate::trace_context::set_remote_parent(&span, &event.headers);
            span.follows_from(batch);
            span
        })
        .collect()
}

/// What an event's dispatch came to, for its span.
fn outcome_label(outcome: &EventOutcome) -> &'static str {
    match outcome {
        EventOutcome::Done => "done",
        EventOutcome::Retry { .. } => "retry",
        EventOutcome::Failed { .. } => "failed",
        EventOutcome::Released { .. } => "released",
    }
}

/// Add one finished batch of [`Dispatcher::drain`] to `total`, or keep its error (the first).
/// True when the batch went through clean (no error, no queue-system blip). A batch that
/// panicked panics the drain too.
fn add_batch(
    total: &mut BatchReport,
    failure: &mut Option<store::StoreError>,
    joined: Result<Result<BatchReport, store::StoreError>, tokio::task::JoinError>,
) -> bool {
    match joined {
        Ok(Ok(report)) => {
            total.claimed += report.claimed;
            total.done += report.done;
            total.retried += report.retried;
            total.failed += report.failed;
            total.released += report.released;
            total.redis_unavailable |= report.redis_unavailable;
            !report.redis_unavailable
        }
        Ok(Err(e)) => {
            failure.get_or_insert(e);
            false
        }
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            tracing::error!(error = %e, "a drained batch was cancelled");
            false
        }
    }
}

fn route_one_by_one(
    router: &dyn crate::routing::Router,
    events: &[ClaimedEvent],
    batch_error: &str,
) -> Vec<RouteDecision> {
    tracing::warn!(
        router = router.name(),
        error = batch_error,
        "batch routing failed; routing events one by one"
    );
    events
        .iter()
        .map(|event| crate::routing::route_one(router, event))
        .collect()
}

/// `LISTEN outbox_event` and wake the dispatcher on every notification. Re-listens after a lost
/// connection and wakes once then, since inserts may have happened while it was away.
async fn listen_for_events(pool: PgPool, wake: Arc<Notify>, shutdown: CancellationToken) {
    let mut backoff = Backoff::new();
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                let stop = backoff
                    .failed_with(fault::postgres_blip(&e), &shutdown, |delay| {
                        tracing::warn!(error = %e, retry_in = ?delay, "cannot LISTEN for new events; polling meanwhile")
                    })
                    .await;
                if stop {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = listener.listen(NOTIFY_CHANNEL).await {
            let stop = backoff
                .failed_with(fault::postgres_blip(&e), &shutdown, |_| {
                    tracing::warn!(error = %e, "LISTEN {NOTIFY_CHANNEL} failed; polling meanwhile")
                })
                .await;
            if stop {
                return;
            }
            continue;
        }
        if backoff.succeeded() {
            tracing::info!("listening for new events again");
        }
        wake.notify_one();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.recv() => match received {
                    Ok(_) => wake.notify_one(),
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the LISTEN connection; reconnecting");
                        wake.notify_one();
                        break;
                    }
                }
            }
        }
        if sleep_or_shutdown(retry_delay(1), &shutdown).await {
            return;
        }
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

/// Connect the sinks (every queue's, on Redis; each batch reads the queues' sinks from
/// `routes`), retrying with backoff and a clear log line until Redis answers or shutdown fires
/// (`None`).
pub async fn connect_sinks(
    settings: &Settings,
    routes: Arc<arc_swap::ArcSwap<crate::config::RoutesFile>>,
    shutdown: &CancellationToken,
) -> Option<QueueSinks> {
    connect_with_retry("Redis", shutdown, || {
        QueueSinks::connect(settings, routes.clone())
    })
    .await
}
