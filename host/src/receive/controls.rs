//! Controls: what operators and `[queues."NAME"]` say about how a queue is consumed.
//!
//! Owns the pause state of every queue as this process knows it ([`QueuePauses`]: read from
//! `outbox_queue_pause`, followed by `LISTEN` and a re-read every second, kept as last read while
//! PostgreSQL is away; each read also re-asserts the queues' Redis pause keys, the barrier
//! every claim checks, see `crate::queue_pause`), which queues have entries held back by that
//! barrier ([`HeldByPause`]), resizing a receiver's handler permits to the queue's `concurrency` as
//! reloads change it ([`Concurrency`]), the queue's rate limit (a window counted in Redis for
//! every host together: [`RateLimiter`]), and when a queue's earliest retry is due
//! ([`RetriesDue`]), so that a retry comes back when its log line said, not at the next
//! housekeeping round; [`QueueControls`] bundles them for a process's receivers. It never runs a handler and never drops an entry: the entries of a
//! paused or limited queue wait in the stream, unread.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::redis_conn::RedisConn;
use sqlx::PgPool;
use tokio::sync::{watch, Semaphore};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::config::RateLimit;
use crate::fault;
use crate::live_config::LiveConfig;
use crate::queue::QueueKeys;
use crate::queue_pause::reassert_pause_keys;
use crate::reconnect::Backoff;
use crate::store::{Notifications, Subscription, QUEUE_PAUSE_CHANNEL};

/// The controls of every queue this process consumes, shared by its receivers.
#[derive(Clone)]
pub(super) struct QueueControls {
    /// Which queues are paused (followed from PostgreSQL).
    pub(super) pauses: QueuePauses,
    /// The queues' rate limit windows.
    pub(super) rate_limiter: Arc<RateLimiter>,
    /// When each queue's next retry scheduled here is due.
    pub(super) retries_due: Arc<RetriesDue>,
    /// The queues with entries held back here by the pause barrier.
    pub(super) held_by_pause: Arc<HeldByPause>,
}

impl QueueControls {
    /// Start following the pause table of `pool` (re-asserting the pause keys of `keys` on
    /// `conn` for the handler-bound queues of `live`), told of changes on `notifications`;
    /// rate limits counted on `conn`.
    pub(super) fn spawn(
        pool: PgPool,
        conn: RedisConn,
        keys: QueueKeys,
        live: LiveConfig,
        notifications: &Notifications,
    ) -> Self {
        Self {
            pauses: QueuePauses::spawn(pool, conn.clone(), keys.clone(), live, notifications),
            rate_limiter: Arc::new(RateLimiter::new(conn, keys)),
            retries_due: Arc::default(),
            held_by_pause: Arc::default(),
        }
    }
}

/// How often the pause table is re-read even without a notification (a lost `NOTIFY`, a
/// listener reconnecting): a pause is seen within this much.
pub const PAUSE_POLL: Duration = Duration::from_secs(1);

/// How long a starting receiver waits for the first read of the pause table before it reads
/// its queue anyway (PostgreSQL unreachable: availability over a pause nobody can see).
const FIRST_PAUSE_READ: Duration = Duration::from_secs(5);

/// The paused queues as last read.
#[derive(Debug, Clone, Default)]
struct PauseState {
    /// Whether the table was read at least once.
    known: bool,
    paused: Arc<BTreeSet<String>>,
}

/// Which queues are paused, as this process last read them; shared by its receivers. The
/// watcher task lives as long as any clone.
#[derive(Clone)]
pub(super) struct QueuePauses {
    state: watch::Receiver<PauseState>,
    _watcher: Arc<DropGuard>,
}

impl QueuePauses {
    /// Start following the pause table of `pool`, re-asserting the pause keys of `keys` on
    /// `conn` (for the handler-bound queues of `live`) at every read, and reading it again on
    /// each `outbox_queue_pause` notification of `notifications`.
    pub(super) fn spawn(
        pool: PgPool,
        conn: RedisConn,
        keys: QueueKeys,
        live: LiveConfig,
        notifications: &Notifications,
    ) -> Self {
        let (tx, rx) = watch::channel(PauseState::default());
        let gone = CancellationToken::new();
        let redis = PauseKeys { conn, keys, live };
        let changes = notifications.subscribe(QUEUE_PAUSE_CHANNEL);
        tokio::spawn(watch_pauses(pool, redis, tx, changes, gone.clone()));
        Self {
            state: rx,
            _watcher: Arc::new(gone.drop_guard()),
        }
    }

    /// Whether `queue` is paused (as last read).
    pub(super) fn is_paused(&self, queue: &str) -> bool {
        self.state.borrow().paused.contains(queue)
    }

    /// Wait until the table was read once, at most [`FIRST_PAUSE_READ`]; false when it was not.
    pub(super) async fn first_read(&self) -> bool {
        let mut state = self.state.clone();
        tokio::time::timeout(FIRST_PAUSE_READ, state.wait_for(|s| s.known))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Wait until the pause state changes, `stop` fires, or `at_most` passes.
    pub(super) async fn changed_within(&self, at_most: Duration, stop: &CancellationToken) {
        let mut state = self.state.clone();
        state.mark_unchanged();
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = state.changed() => {}
            _ = tokio::time::sleep(at_most) => {}
        }
    }
}

/// Where [`watch_pauses`] re-asserts the pause keys, and for which queues.
struct PauseKeys {
    conn: RedisConn,
    keys: QueueKeys,
    live: LiveConfig,
}

/// Follow `outbox_queue_pause` until `gone`: read it on every notification (`changes`) and every
/// [`PAUSE_POLL`] (re-asserting the Redis pause keys), publishing each change (and the
/// `outbox_queue_paused` gauge). While PostgreSQL is away the last state read stays in force.
async fn watch_pauses(
    pool: PgPool,
    redis: PauseKeys,
    tx: watch::Sender<PauseState>,
    changes: Subscription,
    gone: CancellationToken,
) {
    let mut backoff = Backoff::new();
    loop {
        let consumed: Vec<String> = redis.live.routes.load().handlers.keys().cloned().collect();
        match reassert_pause_keys(&pool, &redis.conn, &redis.keys, &consumed).await {
            Ok(rows) => {
                if backoff.succeeded() {
                    tracing::info!("reading queue pauses again");
                }
                let paused: BTreeSet<String> = rows.into_iter().map(|p| p.queue).collect();
                tx.send_if_modified(|state| {
                    let changed = !state.known || *state.paused != paused;
                    if changed {
                        for queue in state.paused.difference(&paused) {
                            tracing::info!(%queue, "queue resumed: its receivers read it again");
                            metrics::gauge!("outbox_queue_paused", "queue" => queue.clone())
                                .set(0.0);
                        }
                        for queue in paused.difference(&state.paused) {
                            tracing::info!(%queue, "queue paused: its receivers read no new entries (running handlers finish)");
                            metrics::gauge!("outbox_queue_paused", "queue" => queue.clone())
                                .set(1.0);
                        }
                        *state = PauseState {
                            known: true,
                            paused: Arc::new(paused),
                        };
                    }
                    changed
                });
            }
            Err(e) => {
                // Keep what was read last: a paused queue stays paused while PostgreSQL is away.
                let stop = backoff
                    .failed_with(fault::postgres_blip(&e.source), &gone, |delay| {
                        tracing::warn!(error = %e, retry_in = ?delay, "cannot read queue pauses; the last ones read stay in force")
                    })
                    .await;
                if stop {
                    return;
                }
                continue;
            }
        }
        tokio::select! {
            _ = gone.cancelled() => return,
            _ = tokio::time::sleep(PAUSE_POLL) => {}
            _ = changes.notified() => {}
        }
    }
}

/// A receiver's handler permits, resized to its queue's `concurrency` (or
/// `OUTBOX_RECEIVER_CONCURRENCY`) as reloads change it. A lower limit takes effect as running
/// handlers give their permits back.
pub(super) struct Concurrency {
    permits: Arc<Semaphore>,
    /// Permits the semaphore holds, in use or not.
    issued: usize,
}

impl Concurrency {
    /// `limit` permits.
    pub(super) fn new(limit: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limit)),
            issued: limit,
        }
    }

    /// The semaphore handler tasks take their permits from.
    pub(super) fn permits(&self) -> &Arc<Semaphore> {
        &self.permits
    }

    /// Move towards `limit`: add the missing permits, or forget free ones until only `limit`
    /// exist (the rest as they come back). True when the limit changed.
    pub(super) fn resize(&mut self, limit: usize) -> bool {
        let limit = limit.max(1);
        if limit > self.issued {
            self.permits.add_permits(limit - self.issued);
            self.issued = limit;
            true
        } else if limit < self.issued {
            self.issued -= self.permits.forget_permits(self.issued - limit);
            true
        } else {
            false
        }
    }
}

/// Take up to ARGV[3] starts from the window of KEYS[1] (a hash: `opened`, the window's start
/// as Redis time in µs, and `used`), opening a new window of ARGV[2] ms when none is open;
/// ARGV[1] is the window's maximum. Returns {granted, opened, ms until the window closes}.
const TAKE_LUA: &str = r#"
local max = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 or ttl > window then
  local t = redis.call('TIME')
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'opened', t[1] .. string.format('%06d', tonumber(t[2])), 'used', 0)
  redis.call('PEXPIRE', KEYS[1], window)
  ttl = window
end
local opened = redis.call('HGET', KEYS[1], 'opened')
local used = tonumber(redis.call('HGET', KEYS[1], 'used')) or 0
local granted = math.min(want, max - used)
if granted > 0 then
  redis.call('HINCRBY', KEYS[1], 'used', granted)
else
  granted = 0
end
return {granted, opened, ttl}
"#;

/// Give back ARGV[2] starts to the window of KEYS[1] if it is still the one opened at ARGV[1].
const REFUND_LUA: &str = r#"
if redis.call('HGET', KEYS[1], 'opened') ~= ARGV[1] then
  return 0
end
local used = tonumber(redis.call('HGET', KEYS[1], 'used')) or 0
local back = math.min(tonumber(ARGV[2]), used)
if back > 0 then
  redis.call('HINCRBY', KEYS[1], 'used', -back)
end
return back
"#;

/// Starts taken from a queue's rate limit window ([`RateLimiter::take`]).
#[derive(Debug)]
pub(super) struct Starts {
    /// How many entries may start.
    pub(super) granted: usize,
    /// The window they came from.
    window: String,
    /// Until the window closes.
    pub(super) closes_in: Duration,
}

/// The rate limit windows of a process's queues, counted in Redis (one hash per queue,
/// [`QueueKeys::rate_limit`]) so that every host of a queue shares one limit.
pub(super) struct RateLimiter {
    conn: RedisConn,
    keys: QueueKeys,
    take: redis::Script,
    refund: redis::Script,
}

impl RateLimiter {
    /// The windows of the queues of `keys`, counted on `conn`.
    pub(super) fn new(conn: RedisConn, keys: QueueKeys) -> Self {
        Self {
            conn,
            keys,
            take: redis::Script::new(TAKE_LUA),
            refund: redis::Script::new(REFUND_LUA),
        }
    }

    /// Up to `want` starts from `queue`'s window under `limit`; `None` when it has no limit.
    /// Counts the reads the limit cut short.
    pub(super) async fn take_starts(
        &self,
        queue: &str,
        limit: Option<RateLimit>,
        want: usize,
    ) -> redis::RedisResult<Option<Starts>> {
        let Some(limit) = limit else {
            return Ok(None);
        };
        let starts = self.take(queue, limit, want).await?;
        if starts.granted < want {
            metrics::counter!("outbox_queue_rate_limited_total", "queue" => queue.to_string())
                .increment(1);
        }
        Ok(Some(starts))
    }

    /// Give back the starts a read did not use (it returned `used` entries); a failure only
    /// logs (the window closes on its own: the limit is only stricter until then).
    pub(super) async fn refund_starts(&self, queue: &str, starts: Option<&Starts>, used: usize) {
        let Some(starts) = starts else {
            return;
        };
        if let Err(e) = self.refund(queue, starts, used).await {
            tracing::debug!(%queue, error = %e, "could not give back unused rate limit starts");
        }
    }

    /// Take up to `want` starts of `queue`'s window under `limit`.
    async fn take(&self, queue: &str, limit: RateLimit, want: usize) -> redis::RedisResult<Starts> {
        let (granted, window, ttl): (i64, String, i64) = self
            .take
            .key(self.keys.rate_limit(queue))
            .arg(limit.max)
            .arg(limit.duration_ms)
            .arg(want)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(Starts {
            granted: usize::try_from(granted).unwrap_or(0),
            window,
            closes_in: Duration::from_millis(crate::numeric::count(ttl)),
        })
    }

    /// Give back the starts of `starts` that `used` did not use (a read returned fewer
    /// entries), while their window is open.
    async fn refund(&self, queue: &str, starts: &Starts, used: usize) -> redis::RedisResult<()> {
        let unused = starts.granted.saturating_sub(used);
        if unused == 0 {
            return Ok(());
        }
        let _: i64 = self
            .refund
            .key(self.keys.rate_limit(queue))
            .arg(&starts.window)
            .arg(unused)
            .invoke_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// The queues whose entries met the pause barrier here (their claim refused, or released,
/// before the handler started): each waits pending for this process's consumer, and the
/// queue's receiver recovers them once the queue's pause key is gone.
#[derive(Debug, Default)]
pub(super) struct HeldByPause {
    queues: Mutex<BTreeSet<String>>,
}

impl HeldByPause {
    /// An entry of `queue` was held back.
    pub(super) fn note(&self, queue: &str) {
        if let Ok(mut queues) = self.queues.lock() {
            queues.insert(queue.to_string());
        }
    }

    /// Whether an entry of `queue` was held back since the last [`clear`](Self::clear).
    pub(super) fn holds(&self, queue: &str) -> bool {
        self.queues.lock().is_ok_and(|q| q.contains(queue))
    }

    /// The held entries of `queue` are about to be recovered.
    pub(super) fn clear(&self, queue: &str) {
        if let Ok(mut queues) = self.queues.lock() {
            queues.remove(queue);
        }
    }
}

/// When each queue's earliest retry scheduled by this process is due (ms since the epoch), so
/// the queue's receiver moves it back into the stream then.
#[derive(Debug, Default)]
pub(super) struct RetriesDue {
    due: Mutex<HashMap<String, i64>>,
}

impl RetriesDue {
    /// A retry of `queue` is due at `at_ms`.
    pub(super) fn note(&self, queue: &str, at_ms: i64) {
        if let Ok(mut due) = self.due.lock() {
            let slot = due.entry(queue.to_string()).or_insert(at_ms);
            *slot = (*slot).min(at_ms);
        }
    }

    /// Whether a retry of `queue` is due at `now_ms`; forgets it if so (the move that follows
    /// notes the next one).
    pub(super) fn take_due(&self, queue: &str, now_ms: i64) -> bool {
        self.due.lock().is_ok_and(|mut due| match due.get(queue) {
            Some(at) if *at <= now_ms => {
                due.remove(queue);
                true
            }
            _ => false,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn concurrency_grows_at_once_and_shrinks_as_permits_come_back() {
        let mut c = Concurrency::new(4);
        let held: Vec<_> = (0..3)
            .map(|_| c.permits().clone().try_acquire_owned().unwrap())
            .collect();
        assert!(c.resize(1));
        assert_eq!(c.permits().available_permits(), 0, "the free one forgotten");
        drop(held);
        assert!(c.resize(1));
        assert_eq!(c.permits().available_permits(), 1);
        assert!(!c.resize(1));
        assert!(c.resize(8));
        assert_eq!(c.permits().available_permits(), 8);
    }

    #[test]
    fn a_retry_is_due_at_the_earliest_time_noted() {
        let due = RetriesDue::default();
        due.note("q", 2000);
        due.note("q", 1000);
        assert!(!due.take_due("q", 999));
        assert!(due.take_due("q", 1000));
        assert!(!due.take_due("q", 5000), "forgotten once taken");
        assert!(!due.take_due("other", 5000));
    }
}
