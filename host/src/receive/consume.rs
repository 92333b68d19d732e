//! Consume: one queue's receiver loop, and the life of one entry, top to bottom.
//!
//! Reading: the loop reads its queue (`XREADGROUP` as this consumer on a connection of its own)
//! once a handler task can start, with bounded handler concurrency (the queue's `concurrency`,
//! followed across reloads), nothing while the queue is paused (as the pause rows say, or as
//! its Redis pause key says once an entry met that barrier; the entries held back by it are
//! recovered once the key is gone), no more than its rate limit lets start (see `controls`),
//! nothing while the receipts stream is full (`receipts_backlog`) or too many entries wait
//! behind their ordering keys (`ordering`); it runs the maintenance services every
//! housekeeping round (`housekeeping`, `takeover`), reconnects with backoff, and after a failed
//! read recovers this consumer's own pending entries that no handler task here works on
//! ([`Receivers::recover_own_pending`]: a read whose reply was lost on a dropped connection
//! has delivered its entries to this consumer all the same). Claiming: a read's entries are
//! claimed together (`claims`) as their tasks start. Running and recording: each entry's task
//! ([`Receivers::handle_claimed_entry`]) confirms its claim through the pause barrier, runs the
//! handler (`invoke`) while the claim is renewed, and records the outcome with its receipt
//! (`outcomes`). A stopping receiver waits for its running handlers (all of them when its
//! queue lost its handler, the shutdown grace at shutdown). It never records an outcome but
//! through `outcomes`, whose owner-token checks keep a recovered entry from running twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::streams::StreamReadOptions;
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::claims::{Claimed, StartConfirmed};
use super::in_flight::{own_pending_not_in_flight, Handling, InFlightGuard};
use super::invoke::HandlerFailure;
use super::ordering::{block_keys_in_retry_set, KeyLanes, MAX_HELD_BACK};
use super::receipts::HandlerRun;
use super::receipts_backlog::{ReceiptsBacklog, RECHECK_HELD};
use super::{ClaimAhead, HandledAs, QueueEntry, ReceiveError, Receivers, Retry, CONSUMER_GROUP};
use crate::fault;
use crate::queue::ReadEntries;
use crate::reconnect::Backoff;
use crate::redis_conn::RedisConn;

/// How long one read of a queue waits for new entries.
const READ_BLOCK: Duration = Duration::from_millis(200);

/// [`READ_BLOCK`] in milliseconds, as `XREADGROUP BLOCK` takes it.
const READ_BLOCK_MS: usize = READ_BLOCK.as_millis() as usize;

impl Receivers {
    /// Consume `queue` until shutdown: read new entries, reclaim stale ones, move due retries,
    /// trim what every group acknowledged.
    pub async fn consume(self, queue: String, shutdown: CancellationToken) {
        self.consume_until(queue, shutdown.clone(), shutdown).await
    }

    /// [`consume`](Self::consume) until `stop` (the queue lost its handler; a child of
    /// `shutdown`) or shutdown. Stopped by `stop` alone, it lets every running handler call
    /// finish and record its outcome; at shutdown, within the grace period.
    pub(super) async fn consume_until(
        self,
        queue: String,
        stop: CancellationToken,
        shutdown: CancellationToken,
    ) {
        Arc::new(self).consume_shared(queue, stop, shutdown).await
    }

    /// [`consume_until`](Self::consume_until) on receivers its handler tasks share: each task
    /// holds the loop's `Arc`, not a copy of every role's handles.
    async fn consume_shared(
        self: Arc<Self>,
        queue: String,
        stop: CancellationToken,
        shutdown: CancellationToken,
    ) {
        let key = self.keys.stream(&queue);
        let mut backoff = Backoff::new();
        loop {
            match self.ensure_group(&queue).await {
                Ok(()) => break,
                Err(e) => {
                    let give_up = backoff
                        .failed(&stop, |delay| {
                            tracing::error!(%queue, error = %e, retry_in = ?delay, "cannot create consumer group; Redis unavailable?")
                        })
                        .await;
                    if give_up {
                        return;
                    }
                }
            }
        }
        let _receiving = self.receiving_guard(&queue);
        self.receipts.start_for(&queue);
        tracing::info!(%queue, consumer = %self.consumer, "receiver started");
        let mut handling = Handling::new(self.concurrency_of(&queue));
        if !self.controls.pauses.first_read().await {
            tracing::warn!(%queue, "cannot read the queue pauses (PostgreSQL unreachable?); reading the queue, a pause applies once it is read");
        }
        if self.live.routes.load().is_ordered(&queue) {
            // Entries waiting for a retry keep their keys blocked across a restart.
            let lease = self.settings.receiver_lease;
            match block_keys_in_retry_set(&self.conn, &self.keys, lease, &queue, &handling.lanes)
                .await
            {
                Ok(0) => {}
                Ok(blocked) => {
                    tracing::info!(%queue, blocked, "ordered queue: keys wait for their entries in the retry set")
                }
                Err(e) => {
                    tracing::warn!(%queue, error = %e, "ordered queue: cannot read the retry set; its keys are not held back")
                }
            }
        }
        let mut reader: Option<RedisConn> = None;
        let mut last_housekeeping = Instant::now() - Duration::from_secs(3600);
        // Set by a failed read: recover this consumer's own pending entries before reading on.
        let mut recover = false;
        let mut receipts_backlog = ReceiptsBacklog::new(
            self.conn.clone(),
            self.keys.receipts_stream(&queue),
            self.settings.receipts_stream_max_len,
        );
        while !stop.is_cancelled() {
            while handling.tasks.try_join_next().is_some() {}
            let paused = self.controls.pauses.is_paused(&queue);
            if last_housekeeping.elapsed()
                >= (self.settings.receiver_lease / 4).min(Duration::from_secs(5))
            {
                last_housekeeping = Instant::now();
                if let Err(e) = self.housekeeping(&queue, &mut handling, paused).await {
                    tracing::warn!(%queue, error = %e, "receiver housekeeping failed");
                }
            } else if self
                .controls
                .retries_due
                .take_due(&queue, chrono::Utc::now().timestamp_millis())
            {
                if let Err(e) = self.maintenance.retries.run_once(&queue).await {
                    tracing::warn!(%queue, error = %e, "moving due retries failed; the next housekeeping round moves them");
                }
            }
            let limit = self.concurrency_of(&queue);
            if handling.concurrency.resize(limit) {
                tracing::debug!(%queue, concurrency = limit, "receiver concurrency changed");
            }
            if paused {
                // Read nothing new; running handlers finish. Housekeeping still moves due
                // retries into the stream, where they wait like every other entry.
                self.controls.pauses.changed_within(READ_BLOCK, &stop).await;
                continue;
            }
            if self.controls.held_by_pause.holds(&queue) {
                // Entries met the pause barrier: the pause key rules until it is gone (the
                // pause rows may not say so yet), then they are recovered from this consumer's
                // pending entries.
                match self.pause_key_exists(&queue).await {
                    Ok(false) => {
                        self.controls.held_by_pause.clear(&queue);
                        recover = true;
                    }
                    Ok(true) | Err(_) => {
                        self.controls.pauses.changed_within(READ_BLOCK, &stop).await;
                        continue;
                    }
                }
            }
            if receipts_backlog.full(&queue).await {
                // The same, until the receipt writer catches up (see `receipts_backlog`).
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(RECHECK_HELD) => {}
                }
                continue;
            }
            let released = handling.lanes.expired(Instant::now());
            if !released.is_empty() {
                for (key, event_id, _) in &released {
                    tracing::warn!(%queue, ordering_key = %key, event_id, "the retried entry this ordering key waited for did not come back in time; its later entries run");
                }
                let heads = released.into_iter().map(|(key, _, item)| (Some(key), item));
                self.spawn_admitted(&queue, heads.collect(), &mut handling)
                    .await;
            }
            if handling.lanes.held_back() >= MAX_HELD_BACK {
                // Enough entries wait behind their keys: let them run before reading more.
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(READ_BLOCK) => {}
                }
                continue;
            }
            if reader.is_none() {
                match self.redis.reader(READ_BLOCK).await {
                    Ok(c) => reader = Some(c),
                    Err(e) => {
                        let give_up = backoff
                            .failed_with(fault::redis_blip(&e), &stop, |_| {
                                tracing::error!(%queue, error = %e, "receiver cannot reach Redis; retrying")
                            })
                            .await;
                        if give_up {
                            break;
                        }
                        continue;
                    }
                }
            }
            let Some(connection) = reader.as_mut() else {
                continue;
            };
            let read = if recover {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    r = self.recover_own_pending(&queue, connection, &mut handling) => r.map(|_| ReadEntries::default()),
                }
            } else {
                // Read only once a handler task can start: what is read is claimed and handled at
                // once, a group per read, instead of one entry read ahead and left waiting.
                let permits = handling.concurrency.permits().clone();
                if permits.available_permits() == 0 {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = permits.acquire() => {}
                    }
                }
                let mut available = permits.available_permits().max(1);
                // Under a rate limit, read only as many entries as may start now.
                let limit = self.live.routes.load().rate_limit_of(&queue);
                let limiter = &self.controls.rate_limiter;
                let starts = match limiter.take_starts(&queue, limit, available).await {
                    Ok(starts) => starts,
                    Err(e) => {
                        let give_up = backoff
                            .failed_with(fault::redis_blip(&e), &stop, |_| {
                                tracing::error!(%queue, error = %e, "cannot take from the queue's rate limit; retrying")
                            })
                            .await;
                        if give_up {
                            break;
                        }
                        continue;
                    }
                };
                if let Some(starts) = &starts {
                    if starts.granted == 0 {
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(starts.closes_in.clamp(Duration::from_millis(10), READ_BLOCK)) => {}
                        }
                        continue;
                    }
                    available = starts.granted;
                }
                let opts = StreamReadOptions::default()
                    .group(CONSUMER_GROUP, &self.consumer)
                    .count(available)
                    .block(READ_BLOCK_MS);
                let keys = [&key];
                let read: redis::RedisResult<ReadEntries> = tokio::select! {
                    _ = stop.cancelled() => {
                        limiter.refund_starts(&queue, starts.as_ref(), 0).await;
                        break;
                    }
                    r = connection.xread_options(&keys, &[">"], &opts) => r,
                };
                let used = match &read {
                    Ok(entries) => entries.0.len(),
                    Err(_) => 0,
                };
                limiter.refund_starts(&queue, starts.as_ref(), used).await;
                read
            };
            match read {
                Ok(ReadEntries(entries)) => {
                    if std::mem::take(&mut recover) {
                        receipts_backlog.look_next();
                    }
                    receipts_backlog.entries_read(entries.len());
                    if backoff.succeeded() {
                        tracing::info!(%queue, "receiver reads the queue again");
                    }
                    self.spawn_handlers(&queue, entries, &mut handling).await;
                }
                Err(e) => {
                    reader = None;
                    // The reply may have been lost with its entries delivered to this consumer.
                    recover = true;
                    if e.code() == Some("NOGROUP") {
                        // The stream was deleted under us: recreate it and the group.
                        let _ = self.ensure_group(&queue).await;
                    }
                    let blip = fault::redis_blip(&e);
                    if let Some(blip) = blip {
                        blip.count_retry("receiver_read");
                    }
                    let give_up = backoff
                        .failed_with(blip, &stop, |_| {
                            tracing::error!(%queue, error = %e, "reading the queue failed; retrying")
                        })
                        .await;
                    if give_up {
                        break;
                    }
                }
            }
        }
        // Let running handlers finish: all of them when only this queue stops (each call is
        // bounded by its plugin's limits), within the grace period at shutdown. Unfinished
        // entries stay pending and are reclaimed by a consumer after the lease.
        let tasks = &mut handling.tasks;
        let finished = async { while tasks.join_next().await.is_some() {} };
        tokio::pin!(finished);
        let drained = !shutdown.is_cancelled()
            && tokio::select! {
                _ = &mut finished => true,
                _ = shutdown.cancelled() => false,
            };
        if !drained {
            let _ = tokio::time::timeout(self.settings.shutdown_grace, finished).await;
        }
        tracing::info!(%queue, "receiver stopped");
    }

    /// Whether `queue`'s Redis pause key exists (the barrier: see `crate::queue_pause`).
    async fn pause_key_exists(&self, queue: &str) -> redis::RedisResult<bool> {
        self.conn.clone().exists(self.keys.paused(queue)).await
    }

    /// The handler concurrency of `queue`: its `[queues."NAME"] concurrency`, or
    /// `OUTBOX_RECEIVER_CONCURRENCY`.
    fn concurrency_of(&self, queue: &str) -> usize {
        self.live
            .routes
            .load()
            .concurrency_of(queue)
            .unwrap_or(self.settings.receiver_concurrency)
    }

    /// One housekeeping round on `queue`, each maintenance service once: move due retries,
    /// reclaim entries held past the lease and take a dead host's (both handed to handler
    /// tasks; not while the queue is `paused`: they wait, pending, until it resumes), trim
    /// acknowledged ones.
    async fn housekeeping(
        self: &Arc<Self>,
        queue: &str,
        handling: &mut Handling,
        paused: bool,
    ) -> Result<(), ReceiveError> {
        let services = &self.maintenance;
        services.retries.run_once(queue).await?;
        if !paused {
            let reclaimed = services.reclaimer.run_once(queue).await?;
            self.spawn_handlers(queue, reclaimed, handling).await;
            // Entries of a host whose heartbeat stopped: taken now, not after the lease.
            let handler = self.live.routes.load().handlers.get(queue).cloned();
            if let Some(handler) = handler {
                match services.takeover.run_once(queue, &handler).await {
                    Ok(taken) => self.spawn_handlers(queue, taken, handling).await,
                    Err(e) => {
                        tracing::warn!(%queue, error = %e, "could not take over the entries of a host whose heartbeat stopped; they wait for the receiver lease")
                    }
                }
            }
        }
        services.trimmer.run_once(queue).await.map(drop)
    }

    /// Hand this consumer's own pending entries on `queue` that no handler task of this loop
    /// works on (nor finished while this ran) to handler tasks: the entries of a read whose
    /// reply was lost. Reads the consumer's pending list page by page on `connection`
    /// (`XREADGROUP` from an id, which returns only this consumer's pending entries and never
    /// takes another consumer's), each page after the last id of the one before, so it ends
    /// even while every entry it sees is running. Returns how many it handed on.
    pub(super) async fn recover_own_pending(
        self: &Arc<Self>,
        queue: &str,
        connection: &mut RedisConn,
        handling: &mut Handling,
    ) -> redis::RedisResult<usize> {
        let key = self.keys.stream(queue);
        let (recovered, read) =
            own_pending_not_in_flight(connection, &key, &self.consumer, &handling.in_flight).await;
        let count = recovered.len();
        if count > 0 {
            tracing::warn!(%queue, count, "recovered entries delivered to this consumer by a read whose reply was lost");
            metrics::counter!("outbox_receiver_recovered_total", "queue" => queue.to_string())
                .increment(count as u64);
        }
        // What was found is handed on even when a later page failed: it is this consumer's.
        self.spawn_handlers(queue, recovered, handling).await;
        read.map(|()| count)
    }

    /// Handle each of `entries` on its own task, unless a task of this loop handles it already:
    /// as concurrency permits come free, a group at a time, the group's idempotency claims made
    /// in one round trip (`Claims::claim_ahead`) before its tasks start. A group is what is
    /// free at once (at least one permit, waited for), so a claim never waits for a permit.
    ///
    /// On a queue marked ordered, an entry with an ordering key starts only when no entry of its
    /// key runs or waits for a retry here; otherwise it waits in its key's lane (see
    /// `receive::ordering`), and the task running its key runs it next.
    pub(super) async fn spawn_handlers(
        self: &Arc<Self>,
        queue: &str,
        entries: Vec<QueueEntry>,
        handling: &mut Handling,
    ) {
        let ordered = self.live.routes.load().is_ordered(queue);
        let lanes = handling.lanes.clone();
        let admitted = entries
            .into_iter()
            .filter_map(|entry| {
                InFlightGuard::start(&handling.in_flight, &entry.stream_id).map(|g| (entry, g))
            })
            .filter_map(|(entry, guard)| {
                let key = ordered
                    .then(|| entry.ordering_key().map(str::to_string))
                    .flatten();
                match key {
                    Some(key) => {
                        let event_id = entry.event_id();
                        lanes
                            .admit(&key, event_id, (entry, guard))
                            .map(|item| (Some(key), item))
                    }
                    None => Some((None, (entry, guard))),
                }
            })
            .collect();
        self.spawn_admitted(queue, admitted, handling).await;
    }

    /// Start a handler task for each of `entries` (with its ordering key when its lane admitted
    /// it): see [`spawn_handlers`](Self::spawn_handlers).
    async fn spawn_admitted(
        self: &Arc<Self>,
        queue: &str,
        entries: Vec<(Option<String>, (QueueEntry, InFlightGuard))>,
        handling: &mut Handling,
    ) {
        let mut entries = entries.into_iter();
        let mut group = Vec::new();
        while let Some(first) = entries.next() {
            // The semaphore is never closed, so acquiring only waits.
            let permits = handling.concurrency.permits().clone();
            let Ok(permit) = permits.clone().acquire_owned().await else {
                return;
            };
            group.push((first, permit));
            while let Ok(permit) = permits.clone().try_acquire_owned() {
                let Some(next) = entries.next() else {
                    break;
                };
                group.push((next, permit));
            }
            let handler = self.live.routes.load().handlers.get(queue).cloned();
            let aheads = match handler {
                Some(handler) => {
                    let read: Vec<&QueueEntry> =
                        group.iter().map(|((_, (entry, _)), _)| entry).collect();
                    self.claims.claim_ahead(queue, &handler, &read).await
                }
                None => group.iter().map(|_| ClaimAhead::NotTried).collect(),
            };
            for (((key, (entry, guard)), permit), ahead) in group.drain(..).zip(aheads) {
                let me = Arc::clone(self);
                let queue = queue.to_string();
                let lanes = handling.lanes.clone();
                // Boxed: the task's future (the entry's whole life, several KB) is then moved
                // as a pointer when spawned and when its output replaces it, not copied.
                handling.tasks.spawn(Box::pin(async move {
                    match key {
                        Some(key) => {
                            me.handle_in_lane(&queue, &lanes, &key, (entry, guard), ahead)
                                .await
                        }
                        None => {
                            me.handle_claimed_entry(&queue, entry, ahead).await;
                            drop(guard);
                        }
                    }
                    drop(permit);
                }));
            }
        }
    }

    /// Run `first` (an entry of ordering key `key` its lane admitted, with its claim made
    /// ahead), then, one at a time, the entries of the key that wait behind it, until none
    /// waits or one asks for a retry (the key then waits for that event's entry to come back,
    /// at most its retry delay plus twice the receiver lease).
    async fn handle_in_lane<G>(
        &self,
        queue: &str,
        lanes: &KeyLanes<(QueueEntry, G)>,
        key: &str,
        first: (QueueEntry, G),
        ahead: ClaimAhead,
    ) {
        let mut next = Some((first, ahead));
        while let Some(((entry, guard), ahead)) = next.take() {
            let event_id = entry.event_id();
            let handled = self.handle_claimed_entry(queue, entry, ahead).await;
            drop(guard);
            let retry = match (&handled, event_id) {
                (HandledAs::Retry { after, .. }, Some(event_id)) => Some((
                    event_id,
                    Instant::now() + *after + self.settings.receiver_lease * 2,
                )),
                _ => None,
            };
            next = lanes
                .finish(key, retry)
                .map(|item| (item, ClaimAhead::NotTried));
        }
    }

    /// [`handle_entry`](Self::handle_entry) with what a claim made before the entry's task
    /// started found (`consume` claims a read's entries in one round trip). A claim made ahead
    /// names the handler it was made for, and that handler runs the entry.
    pub(super) async fn handle_claimed_entry(
        &self,
        queue: &str,
        entry: QueueEntry,
        ahead: ClaimAhead,
    ) -> HandledAs {
        let handler = match ahead.handler() {
            Some(handler) => handler.to_string(),
            None => match self.live.routes.load().handlers.get(queue) {
                Some(handler) => handler.clone(),
                None => {
                    tracing::warn!(%queue, "no handler bound to this queue any more (its receiver is stopping); the entry stays pending until a handler is bound again");
                    return HandledAs::Busy;
                }
            },
        };
        let attempt = entry.handler_attempt();
        let Some(event_id) = entry.event_id() else {
            return self
                .outcomes
                .dead_letter(
                    queue,
                    &handler,
                    None,
                    &entry,
                    "malformed entry: no event_id".into(),
                    None,
                )
                .await;
        };
        let claimed = match ahead {
            ClaimAhead::Held(claim) => Ok(Claimed::Held(claim)),
            ClaimAhead::Refused(_) => Ok(Claimed::Refused),
            ClaimAhead::Paused(_) => Ok(Claimed::Paused),
            ClaimAhead::Unknown(claim) => self.claims.claim(claim).await,
            ClaimAhead::NotTried => {
                let claim = self.claims.new_claim(queue, &handler, event_id);
                self.claims.claim(claim).await
            }
        };
        let mut claim = match claimed {
            Ok(Claimed::Held(claim)) => claim,
            Ok(Claimed::Paused) => return self.held_back_by_pause(queue, event_id),
            Ok(Claimed::Refused) => {
                if self.claims.already_done(queue, &handler, event_id).await {
                    let acked = self
                        .outcomes
                        .ack_duplicate(queue, &entry.stream_id, event_id, &handler)
                        .await;
                    if let Err(e) = acked {
                        tracing::warn!(%queue, event_id, error = %e, "could not acknowledge a duplicate; it will be delivered again");
                    }
                    metrics::counter!("outbox_receiver_duplicates_total", "queue" => queue.to_string())
                        .increment(1);
                    return HandledAs::Duplicate;
                }
                return HandledAs::Busy;
            }
            Err(e) => {
                tracing::error!(%queue, event_id, error = %e, "idempotency claim failed; entry stays pending");
                return HandledAs::Busy;
            }
        };

        let started = Instant::now();
        if let Some(supported) = self.invoker.unsupported_version(&handler, &entry) {
            tracing::info!(%queue, event_id, %handler, version = entry.event_version(), supported = %supported, "handler does not support this event version; skipped");
            let run = HandlerRun {
                event_id,
                handler: handler.clone(),
                queue: queue.to_string(),
                attempts: i32::try_from(attempt).unwrap_or(i32::MAX),
                duration: started.elapsed(),
                published: Vec::new(),
            };
            let handled = self
                .outcomes
                .record_skipped_version(queue, &claim, &entry.stream_id, &run)
                .await;
            metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => HandledAs::label(&handled)).increment(1);
            return handled;
        }
        // The pause barrier: a claim granted longer ago than the fence a pause waits for is
        // confirmed first (the queue may have been paused since).
        if !claim.may_start_unconfirmed() {
            match self.claims.confirm_start(&mut claim).await {
                Ok(StartConfirmed::Start) => {}
                Ok(StartConfirmed::Paused) => return self.held_back_by_pause(queue, event_id),
                Ok(StartConfirmed::Lost) => {
                    tracing::warn!(%queue, event_id, %handler, "the claim lapsed before its handler started; the entry is left to its new owner");
                    return HandledAs::LostClaim;
                }
                Err(e) => {
                    tracing::warn!(%queue, event_id, error = %e, "cannot confirm the claim before its handler starts (is the queue paused?); the entry stays pending");
                    return HandledAs::Busy;
                }
            }
        }
        // One span per handler run, a child of the event's producer (the entry's traceparent);
        // the host calls' spans and the children's traceparent come from it.
        let span = tracing::debug_span!(parent: None, "outbox.handle", queue, handler = %handler, event_id, attempt, outcome = tracing::field::Empty);
        crate::trace_context::set_remote_parent(&span, entry.headers());
        // The claim is renewed for as long as the handler runs; the renewal ends with it.
        let (outcome, published, (receipt_event, receipt_handler)) = tokio::select! {
            ran = self.invoker.run(queue, &handler, &entry, attempt).instrument(span.clone()) => ran,
            never = self.claims.hold(queue, &claim, &entry.stream_id) => match never {},
        };
        let duration = started.elapsed();
        // Its receipt goes to the receipts stream in the step that records the outcome.
        let run = HandlerRun {
            event_id: receipt_event,
            handler: receipt_handler,
            queue: queue.to_string(),
            attempts: i32::try_from(attempt).unwrap_or(i32::MAX),
            duration,
            published,
        };
        let handled = match outcome {
            Ok(()) => {
                self.outcomes
                    .record_ok(queue, &claim, &entry.stream_id, &run)
                    .await
            }
            Err(HandlerFailure::Fail(reason)) => {
                self.outcomes
                    .dead_letter(queue, &handler, Some(&claim), &entry, reason, Some(&run))
                    .await
            }
            Err(HandlerFailure::Retry { reason, .. })
                if attempt > self.settings.handler_max_retries =>
            {
                let reason = format!("gave up after {attempt} attempts: {reason}");
                self.outcomes
                    .dead_letter(queue, &handler, Some(&claim), &entry, reason, Some(&run))
                    .await
            }
            Err(HandlerFailure::Retry { reason, after }) => {
                let retry = Retry {
                    attempt,
                    delay: after.unwrap_or_else(|| self.settings.handler_backoff_after(attempt)),
                    reason,
                };
                self.outcomes
                    .schedule_retry(queue, &claim, &entry, retry, Some(&run))
                    .await
            }
        };
        span.record("outcome", HandledAs::label(&handled));
        metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => HandledAs::label(&handled)).increment(1);
        metrics::histogram!("outbox_handler_seconds", "handler" => handler.clone())
            .record(duration.as_secs_f64());
        handled
    }

    /// An entry of `queue` met the pause barrier before its handler started: it stays pending
    /// here, and its receiver recovers it once the queue's pause key is gone.
    fn held_back_by_pause(&self, queue: &str, event_id: i64) -> HandledAs {
        tracing::debug!(%queue, event_id, "queue paused before the handler started; the entry waits pending for the resume");
        self.controls.held_by_pause.note(queue);
        metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => HandledAs::label(&HandledAs::Paused)).increment(1);
        HandledAs::Paused
    }
}
