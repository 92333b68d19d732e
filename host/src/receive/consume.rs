//! Consume: the loop that reads one queue and hands each entry to a handler task.
//!
//! Owns the reading connection (`XREADGROUP` as this consumer), bounded handler concurrency
//! (the queue's `concurrency`, followed across reloads), reading nothing while the queue is
//! paused (as the pause rows say, or as its Redis pause key says once an entry met that
//! barrier; the entries held back by it are recovered once the key is gone) and no more than
//! its rate limit lets start (see `controls`),
//! the stream ids handed to a handler task of this loop and not finished yet ([`InFlight`]),
//! when housekeeping runs, reconnecting with backoff, and how a stopping receiver waits for its
//! running handlers (all of them when its queue lost its handler, the shutdown grace at
//! shutdown). After a failed read it recovers this consumer's own pending entries that no
//! handler task here works on ([`Receivers::recover_own_pending`]): a read whose reply was lost
//! on a dropped connection has delivered its entries to this consumer all the same, and they
//! would otherwise wait for the receiver lease. It never records an outcome itself: each entry
//! goes through [`Receivers::handle_entry`], whose owner-token claim keeps a recovered entry
//! from running twice.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use tokio_util::sync::CancellationToken;

use super::controls::{Concurrency, Starts};
use super::ordering::{KeyLanes, MAX_HELD_BACK};
use super::receipts_backlog;
use super::{ClaimAhead, QueueEntry, Receivers, CONSUMER_GROUP};
use crate::fault;
use crate::reconnect::Backoff;
use crate::redis_conn::RedisConn;

/// Own pending entries read per `XREADGROUP` while recovering them after a failed read.
const RECOVER_PAGE: usize = 100;

/// How long one read of a queue waits for new entries.
const READ_BLOCK: Duration = Duration::from_millis(200);

/// The stream ids one receiver loop has handed to a handler task that has not finished, and,
/// while a recovery of own pending entries runs, those that finished since it began (their
/// entry may still be in the recovery's read, read before its acknowledgement).
#[derive(Debug, Default)]
pub(super) struct InFlight {
    ids: Mutex<InFlightIds>,
}

#[derive(Debug, Default)]
struct InFlightIds {
    running: HashSet<String>,
    finished_during_recovery: Option<HashSet<String>>,
}

impl InFlight {
    /// Mark `stream_id` as handled here; false when a task here already handles it.
    fn start(&self, stream_id: &str) -> bool {
        self.ids
            .lock()
            .map(|mut ids| ids.running.insert(stream_id.to_string()))
            .unwrap_or(true)
    }

    /// The task handling `stream_id` has finished.
    fn finish(&self, stream_id: &str) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.running.remove(stream_id);
            if let Some(finished) = ids.finished_during_recovery.as_mut() {
                finished.insert(stream_id.to_string());
            }
        }
    }

    /// Start (true) or end (false) a recovery: from its start, finished ids are remembered.
    fn recovering(&self, on: bool) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.finished_during_recovery = on.then(HashSet::new);
        }
    }

    /// Whether a recovery should leave `stream_id` alone: a task here handles it, or finished
    /// it since the recovery began.
    fn taken(&self, stream_id: &str) -> bool {
        self.ids.lock().map_or(true, |ids| {
            ids.running.contains(stream_id)
                || ids
                    .finished_during_recovery
                    .as_ref()
                    .is_some_and(|f| f.contains(stream_id))
        })
    }
}

/// Removes a stream id from [`InFlight`] when its handler task ends (or is aborted).
pub(super) struct InFlightGuard {
    in_flight: Arc<InFlight>,
    stream_id: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.in_flight.finish(&self.stream_id);
    }
}

/// The handler tasks of one receiver loop: the concurrency permits, the tasks, and the stream
/// ids they handle.
pub(super) struct Handling {
    /// The handler permits, sized to the queue's concurrency.
    concurrency: Concurrency,
    tasks: tokio::task::JoinSet<()>,
    in_flight: Arc<InFlight>,
    /// On an ordered queue: the entries of each ordering key, one running at a time.
    lanes: Arc<KeyLanes<(QueueEntry, InFlightGuard)>>,
}

impl Handling {
    /// At most `concurrency` handler tasks at once.
    pub(super) fn new(concurrency: usize) -> Self {
        Self {
            concurrency: Concurrency::new(concurrency),
            tasks: tokio::task::JoinSet::new(),
            in_flight: Arc::default(),
            lanes: Arc::default(),
        }
    }
}

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
        if !self.pauses.first_read().await {
            tracing::warn!(%queue, "cannot read the queue pauses (PostgreSQL unreachable?); reading the queue, a pause applies once it is read");
        }
        if self.live.routes.load().is_ordered(&queue) {
            // Entries waiting for a retry keep their keys blocked across a restart.
            match self.block_keys_in_retry_set(&queue, &handling.lanes).await {
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
        let mut receipts_backlog = receipts_backlog::ReceiptsBacklog::default();
        while !stop.is_cancelled() {
            while handling.tasks.try_join_next().is_some() {}
            let paused = self.pauses.is_paused(&queue);
            if last_housekeeping.elapsed()
                >= (self.settings.receiver_lease / 4).min(Duration::from_secs(5))
            {
                last_housekeeping = Instant::now();
                if let Err(e) = self.housekeeping(&queue, &mut handling, paused).await {
                    tracing::warn!(%queue, error = %e, "receiver housekeeping failed");
                }
            } else if self
                .retries_due
                .take_due(&queue, chrono::Utc::now().timestamp_millis())
            {
                if let Err(e) = self.move_due_retries(&queue).await {
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
                self.pauses.changed_within(READ_BLOCK, &stop).await;
                continue;
            }
            if self.held_by_pause.holds(&queue) {
                // Entries met the pause barrier: the pause key rules until it is gone (the
                // pause rows may not say so yet), then they are recovered from this consumer's
                // pending entries.
                match self.pause_key_exists(&queue).await {
                    Ok(false) => {
                        self.held_by_pause.clear(&queue);
                        recover = true;
                    }
                    Ok(true) | Err(_) => {
                        self.pauses.changed_within(READ_BLOCK, &stop).await;
                        continue;
                    }
                }
            }
            if self
                .receipts_backlog_full(&queue, &mut receipts_backlog)
                .await
            {
                // The same, until the receipt writer catches up (see `receipts_backlog`).
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(receipts_backlog::RECHECK_HELD) => {}
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
                    r = self.recover_own_pending(&queue, connection, &mut handling) => r.map(|_| None),
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
                let starts = match self.take_starts(&queue, available).await {
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
                    .block(READ_BLOCK.as_millis() as usize);
                let keys = [&key];
                let read: redis::RedisResult<Option<StreamReadReply>> = tokio::select! {
                    _ = stop.cancelled() => {
                        self.refund_starts(&queue, starts.as_ref(), 0).await;
                        break;
                    }
                    r = connection.xread_options(&keys, &[">"], &opts) => r,
                };
                let used = match &read {
                    Ok(Some(reply)) => reply.keys.iter().map(|k| k.ids.len()).sum(),
                    _ => 0,
                };
                self.refund_starts(&queue, starts.as_ref(), used).await;
                read
            };
            match read {
                Ok(reply) => {
                    recover = false;
                    if backoff.succeeded() {
                        tracing::info!(%queue, "receiver reads the queue again");
                    }
                    let entries = reply
                        .map(|r: StreamReadReply| r.keys)
                        .unwrap_or_default()
                        .iter()
                        .flat_map(|stream| stream.ids.iter().map(QueueEntry::from_stream))
                        .collect();
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

    /// Up to `want` starts from `queue`'s rate limit window; `None` when it has no limit.
    async fn take_starts(&self, queue: &str, want: usize) -> redis::RedisResult<Option<Starts>> {
        let Some(limit) = self.live.routes.load().rate_limit_of(queue) else {
            return Ok(None);
        };
        let mut conn = self.conn.clone();
        let starts = self
            .rate_limiter
            .take(&mut conn, &self.keys, queue, limit, want)
            .await?;
        if starts.granted < want {
            metrics::counter!("outbox_queue_rate_limited_total", "queue" => queue.to_string())
                .increment(1);
        }
        Ok(Some(starts))
    }

    /// Give back the starts a read did not use (it returned `used` entries).
    async fn refund_starts(&self, queue: &str, starts: Option<&Starts>, used: usize) {
        let Some(starts) = starts else {
            return;
        };
        let mut conn = self.conn.clone();
        if let Err(e) = self
            .rate_limiter
            .refund(&mut conn, &self.keys, queue, starts, used)
            .await
        {
            // The window closes on its own: the limit is only stricter until then.
            tracing::debug!(%queue, error = %e, "could not give back unused rate limit starts");
        }
    }

    /// Hand this consumer's own pending entries on `queue` that no handler task of this loop
    /// works on (nor finished while this ran) to handler tasks: the entries of a read whose
    /// reply was lost. Reads the consumer's pending list page by page on `connection`
    /// (`XREADGROUP` from an id, which returns only this consumer's pending entries and never
    /// takes another consumer's), each page after the last id of the one before, so it ends
    /// even while every entry it sees is running. Returns how many it handed on.
    pub(super) async fn recover_own_pending(
        &self,
        queue: &str,
        connection: &mut RedisConn,
        handling: &mut Handling,
    ) -> redis::RedisResult<usize> {
        let key = self.keys.stream(queue);
        let opts = StreamReadOptions::default()
            .group(CONSUMER_GROUP, &self.consumer)
            .count(RECOVER_PAGE);
        handling.in_flight.recovering(true);
        let mut after = "0".to_string();
        let mut recovered = Vec::new();
        let read = loop {
            let page: Option<StreamReadReply> =
                match connection.xread_options(&[&key], &[&after], &opts).await {
                    Ok(page) => page,
                    Err(e) => break Err(e),
                };
            let ids: Vec<_> = page
                .map(|p| p.keys.into_iter().flat_map(|k| k.ids).collect())
                .unwrap_or_default();
            let Some(last) = ids.last() else {
                break Ok(());
            };
            after = last.id.clone();
            recovered.extend(
                ids.iter()
                    .filter(|id| !handling.in_flight.taken(&id.id))
                    .map(QueueEntry::from_stream),
            );
        };
        handling.in_flight.recovering(false);
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
    /// in one round trip ([`Receivers::claim_ahead`]) before its tasks start. A group is what is
    /// free at once (at least one permit, waited for), so a claim never waits for a permit.
    ///
    /// On a queue marked ordered, an entry with an ordering key starts only when no entry of its
    /// key runs or waits for a retry here; otherwise it waits in its key's lane (see
    /// `receive::ordering`), and the task running its key runs it next.
    pub(super) async fn spawn_handlers(
        &self,
        queue: &str,
        entries: Vec<QueueEntry>,
        handling: &mut Handling,
    ) {
        let ordered = self.live.routes.load().is_ordered(queue);
        let lanes = handling.lanes.clone();
        let admitted = entries
            .into_iter()
            .filter_map(|entry| {
                handling.in_flight.start(&entry.stream_id).then(|| {
                    let guard = InFlightGuard {
                        in_flight: handling.in_flight.clone(),
                        stream_id: entry.stream_id.clone(),
                    };
                    (entry, guard)
                })
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
        &self,
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
                    self.claim_ahead(queue, &handler, &read).await
                }
                None => group.iter().map(|_| ClaimAhead::NotTried).collect(),
            };
            for (((key, (entry, guard)), permit), ahead) in group.drain(..).zip(aheads) {
                let me = self.clone();
                let queue = queue.to_string();
                let lanes = handling.lanes.clone();
                handling.tasks.spawn(async move {
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
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovery_leaves_running_entries_and_those_finished_while_it_ran() {
        let in_flight = InFlight::default();
        assert!(in_flight.start("1-0"));
        assert!(!in_flight.start("1-0"), "one task per entry");
        assert!(in_flight.start("2-0"));
        in_flight.finish("2-0");
        assert!(in_flight.taken("1-0"));
        assert!(!in_flight.taken("2-0"), "finished before any recovery");

        in_flight.recovering(true);
        in_flight.finish("1-0");
        assert!(
            in_flight.taken("1-0"),
            "finished during the recovery: its entry may be in the recovery's read, acknowledged since"
        );
        assert!(!in_flight.taken("3-0"), "pending here, handled by no task");
        in_flight.recovering(false);
        assert!(!in_flight.taken("1-0"));
    }
}
