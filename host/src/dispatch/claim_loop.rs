//! The claim loop: [`Dispatcher::run`] until shutdown and [`Dispatcher::drain`] until nothing
//! is due, both pipelining up to [`BATCHES_IN_FLIGHT`] batches.
//!
//! Owns claiming (under the worker id, batch size, lease and claim horizon), the batches in
//! flight and the claims they hold, the pause after a queue-system blip (probing the sink until
//! it answers), the release of a claim whose reply was lost, and the release of everything held
//! at shutdown. It never routes, enqueues or records an event itself (that is [`super::batch`])
//! and never writes its own backoff loop (see [`crate::reconnect`]).

use std::sync::atomic::Ordering;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::wake::WakeMode;
use super::{BatchReport, Dispatcher, BATCHES_IN_FLIGHT, NOTIFY_CHANNEL};
use crate::fault;
use crate::reconnect::Backoff;
use crate::store::{self, Claim, Context as _};

impl Dispatcher {
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
        // New events are announced on the process's listening session (one of its own when the
        // host shares none), kept alive by the subscription.
        let new_events = match &self.notifications {
            Some(shared) => shared.subscribe(NOTIFY_CHANNEL),
            None => store::Notifications::start(self.pool.clone()).subscribe(NOTIFY_CHANNEL),
        };
        // Each batch in flight answers whether its end may have made rows claimable at once.
        let mut in_flight: JoinSet<bool> = JoinSet::new();
        let mut backoff = Backoff::new();
        let mut sink_backoff = Backoff::new();
        // A claim failed on a blip: it may have committed with its reply lost.
        let mut claim_maybe_lost = false;
        // The last claim took everything claimable (fewer rows than a batch): wait for a new
        // event, a due time or a finished batch before claiming again, instead of spending a
        // claim that finds nothing. At a trickle of events this is one claim per event, not two.
        let mut caught_up = false;
        // When to look again without a wake-up, as last worked out (see `wait_for_work`).
        let mut next_look: Option<Instant> = None;
        // Notified by producers, or polling while claiming fast (see `wake`).
        let mut wake_mode = WakeMode::new();
        // When the last claim was sent: a polling dispatcher looks again a poll interval after
        // it, not after the claim's reply.
        let mut last_claim_sent = Instant::now();
        tracing::info!(worker = %self.worker_id, router = self.router.current().name(), "dispatcher started");
        self.records.set_open(true);
        while !shutdown.is_cancelled() {
            // A batch whose record waits to ride on the next claim is as good as finished.
            while in_flight.len() >= BATCHES_IN_FLIGHT && !self.records.any() {
                tokio::select! {
                    joined = in_flight.join_next() => {
                        if joined.is_some_and(|j| j.unwrap_or(true)) {
                            next_look = None;
                        }
                    }
                    _ = self.records.offered() => {}
                }
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
            if std::mem::take(&mut caught_up) {
                self.wait_for_work(
                    &new_events,
                    &mut in_flight,
                    &mut next_look,
                    &mut wake_mode,
                    last_claim_sent,
                    &shutdown,
                )
                .await;
                continue;
            }
            last_claim_sent = Instant::now();
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
                // Something woke the loop and nothing was claimable: a row due later (a new
                // one published with a later `available_at`) may be what woke it.
                next_look = None;
                self.wait_for_work(
                    &new_events,
                    &mut in_flight,
                    &mut next_look,
                    &mut wake_mode,
                    last_claim_sent,
                    &shutdown,
                )
                .await;
                continue;
            }
            caught_up = claim.events.len() < self.batch_len();
            wake_mode.claimed(claim.events.len());
            let me = self.clone();
            let claimed_at = claim.claimed_at;
            // Finishing the head of an ordering key makes the key's next event claimable.
            let unblocks_keys = claim.events.iter().any(|e| e.ordering_key.is_some());
            self.hold(claimed_at, true);
            in_flight.spawn(async move {
                let dispatched = me.dispatch_claim(claim).await;
                me.hold(claimed_at, false);
                match dispatched {
                    Ok(report) if report.redis_unavailable => {
                        me.gate.blipped.store(true, Ordering::Release);
                        true
                    }
                    Ok(report) => {
                        me.gate.clean.store(true, Ordering::Release);
                        unblocks_keys || report.retried > 0 || report.released > 0
                    }
                    Err(e) => {
                        // Retried on fresh connections for as long as the lease allowed: the rows
                        // stay leased and are claimed again after the lease; the enqueue is
                        // idempotent, so nothing is doubled.
                        tracing::error!(error = %e, "cannot record batch outcomes; rows will be reclaimed after the lease");
                        metrics::counter!("outbox_dispatch_errors_total", "stage" => "record").increment(1);
                        true
                    }
                }
            });
        }
        // Records waiting for a claim go back to their batches, which record them now.
        self.records.set_open(false);
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
        let horizon = self.horizon.current(&self.pool).await;
        match store::release_claims(&self.pool, &self.worker_id, horizon).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(released = n, "released claimed events for other hosts"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release claims; they return after the lease")
            }
        }
        if wake_mode.polling() {
            self.withdraw_polling().await;
        }
        tracing::info!(worker = %self.worker_id, "dispatcher stopped");
    }

    /// Sleep until there may be something to claim: a new event (`NOTIFY`), the next row's due
    /// time or lease end (at most the poll interval), a batch in flight finishing in a way that
    /// may have made rows claimable at once (it put rows back, or it held the head of an ordering
    /// key), or shutdown. A batch that only marked its rows done changes nothing claimable: at a
    /// trickle of events, waking for it cost a claim that found nothing and another look at the
    /// next due time per event. While the dispatcher polls (`wake_mode`: it claims fast, and
    /// producers do not notify), it sleeps only until the next poll and reads no due time.
    ///
    /// When to look again without a wake-up (`next_look`) is worked out from the table (the
    /// next due time, at most the poll interval ahead) only when the last one has passed or was
    /// cleared: by a claim that found nothing, or a batch that put rows back. Between those,
    /// what a claim that found rows and a notification tell the loop cannot move it earlier,
    /// and at a trickle of events this is one statement per event fewer. A row made due early
    /// by another host is still looked for within the poll interval.
    async fn wait_for_work(
        &self,
        new_events: &store::Subscription,
        in_flight: &mut JoinSet<bool>,
        next_look: &mut Option<Instant>,
        wake_mode: &mut WakeMode,
        last_claim_sent: Instant,
        shutdown: &CancellationToken,
    ) {
        let at = match (
            self.follow_claim_rate(wake_mode, last_claim_sent.into_std())
                .await,
            *next_look,
        ) {
            (Some(look), _) => Instant::from_std(look),
            (None, Some(at)) if at > Instant::now() => at,
            (None, _) => *next_look.insert(Instant::now() + self.idle_wait().await),
        };
        let wait = tokio::time::sleep_until(at);
        tokio::pin!(wait);
        loop {
            tokio::select! {
                _ = new_events.notified() => return,
                _ = &mut wait => return,
                _ = shutdown.cancelled() => return,
                Some(joined) = in_flight.join_next(), if !in_flight.is_empty() => {
                    // A batch task that panicked or was aborted: look again.
                    if joined.unwrap_or(true) {
                        *next_look = None;
                        return;
                    }
                }
            }
        }
    }

    /// The batch size as a length (a claim returning fewer rows took all that was claimable).
    fn batch_len(&self) -> usize {
        usize::try_from(self.settings.dispatch_batch_size).unwrap_or(usize::MAX)
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
        let horizon = self.horizon.current(&self.pool).await;
        let released =
            store::release_lost_claims(&self.pool, &self.worker_id, &held, horizon).await?;
        if released > 0 {
            tracing::warn!(
                released,
                "a claim committed but its reply was lost; its events are claimable again"
            );
        }
        Ok(())
    }

    /// Claim the next batch under this dispatcher's worker id, batch size and lease, reading the
    /// claim index from this dispatcher's horizon, and recording in the same statement the
    /// records waiting to ride on it (see [`super::records_on_claim`]; each batch hears how many
    /// of its rows were recorded, or records them itself when the statement failed).
    async fn claim(&self) -> Result<Claim, store::StoreError> {
        let horizon = self.horizon.current_refreshed_behind(&self.pool).await;
        let mut conn = self
            .statements
            .acquire()
            .await
            .context("claim_due_events: acquire a connection")?;
        let riding = self.records.take();
        let claimed = store::claim_recording_done(
            &mut *conn,
            &self.worker_id,
            self.settings.dispatch_batch_size,
            self.settings.claim_lease,
            horizon,
            &riding.rows(),
        )
        .await;
        conn.finished(&claimed);
        match claimed {
            Ok((claim, recorded)) => {
                riding.answer(Some(&recorded));
                self.horizon
                    .claimed(claim.events.len(), self.settings.dispatch_batch_size);
                Ok(claim)
            }
            Err(e) => {
                riding.answer(None);
                Err(e)
            }
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
