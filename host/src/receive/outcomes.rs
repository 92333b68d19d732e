//! Outcomes: recording what became of one entry in Redis, atomically.
//!
//! Owns the idempotency claim (`SET NX PX` on the handled marker), and the three outcome
//! scripts: ok (a `done` marker, then `XACK`), retry (into the retry set, marker cleared,
//! `XACK`) and dead letter (into the dead-letter stream, marker cleared, `XACK`). Every state
//! change of one entry is one script, so an entry is never acknowledged without its outcome.
//! It never runs a handler and never writes receipts.

use redis::AsyncCommands;

use super::{ctx, HandledAs, QueueEntry, ReceiveError, Receivers, CONSUMER_GROUP};
use crate::queue::{marker_is_done, marker_running, MARKER_DONE_OK};

/// Ack with a `done` marker: KEYS[1] marker, KEYS[2] stream; ARGV[1] group, ARGV[2] entry id,
/// ARGV[3] marker value, ARGV[4] marker TTL (s).
const FINISH_LUA: &str = r#"
redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4])
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
"#;

/// Schedule a retry: KEYS[1] marker, KEYS[2] stream, KEYS[3] retry set; ARGV[1] group,
/// ARGV[2] entry id, ARGV[3] due (ms), ARGV[4] entry as JSON.
const RETRY_LUA: &str = r#"
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('DEL', KEYS[1])
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
"#;

/// Dead-letter: KEYS[1] marker, KEYS[2] stream, KEYS[3] dead-letter stream; ARGV[1] group,
/// ARGV[2] entry id, ARGV[3..] fields of the dead-letter entry.
const DEAD_LUA: &str = r#"
redis.call('XADD', KEYS[3], '*', unpack(ARGV, 3))
redis.call('DEL', KEYS[1])
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
"#;

/// The outcome scripts, loaded once per process.
pub(super) struct OutcomeScripts {
    finish: redis::Script,
    retry: redis::Script,
    dead: redis::Script,
}

impl OutcomeScripts {
    /// The three scripts (Redis loads them on first use).
    pub(super) fn new() -> Self {
        Self {
            finish: redis::Script::new(FINISH_LUA),
            retry: redis::Script::new(RETRY_LUA),
            dead: redis::Script::new(DEAD_LUA),
        }
    }
}

impl Receivers {
    /// The idempotency claim of (`handler`, `event_id`) for this consumer: set the handled
    /// marker to `running:<consumer>` for the receiver lease unless it exists. `true`: this
    /// consumer runs the handler; `false`: someone runs it or ran it (see the marker).
    pub async fn claim_entry(&self, handler: &str, event_id: i64) -> Result<bool, ReceiveError> {
        let marker = self.keys.handled_marker(handler, event_id);
        let claimed: Option<String> = ctx(
            redis::cmd("SET")
                .arg(&marker)
                .arg(marker_running(&self.consumer))
                .arg("NX")
                .arg("PX")
                .arg(self.settings.receiver_lease.as_millis() as u64)
                .query_async(&mut self.conn.clone())
                .await,
            || format!("idempotency claim {marker}"),
        )?;
        Ok(claimed.is_some())
    }

    /// Whether `handler` already finished `event_id` (its marker says `done`). A Redis error
    /// counts as not finished.
    pub(super) async fn already_done(&self, handler: &str, event_id: i64) -> bool {
        let marker = self.keys.handled_marker(handler, event_id);
        let state: Option<String> = self.conn.clone().get(&marker).await.unwrap_or(None);
        state.as_deref().is_some_and(marker_is_done)
    }

    /// Finish (ok) one claimed entry: mark (`handler`, `event_id`) done for
    /// `OUTBOX_IDEMPOTENCY_TTL_SECONDS` and acknowledge `stream_id` on `queue`, in one step.
    pub async fn finish_ok(
        &self,
        queue: &str,
        handler: &str,
        event_id: i64,
        stream_id: &str,
    ) -> Result<(), ReceiveError> {
        let marker = self.keys.handled_marker(handler, event_id);
        let _: i64 = ctx(
            self.scripts
                .finish
                .key(&marker)
                .key(self.keys.stream(queue))
                .arg(CONSUMER_GROUP)
                .arg(stream_id)
                .arg(MARKER_DONE_OK)
                .arg(self.settings.idempotency_ttl.as_secs().max(1))
                .invoke_async(&mut self.conn.clone())
                .await,
            || format!("finish {stream_id} on {queue}"),
        )?;
        Ok(())
    }

    /// Acknowledge a duplicate delivery without recording anything (on an error the entry is
    /// delivered again and found a duplicate again).
    pub(super) async fn ack_duplicate(
        &self,
        queue: &str,
        stream_id: &str,
    ) -> redis::RedisResult<i64> {
        self.conn
            .clone()
            .xack(self.keys.stream(queue), CONSUMER_GROUP, &[stream_id])
            .await
    }

    /// Schedule `entry`'s next delivery after the handler backoff of failed `attempt`.
    pub(super) async fn schedule_retry(
        &self,
        queue: &str,
        handler: &str,
        event_id: i64,
        entry: &QueueEntry,
        attempt: u32,
        reason: String,
    ) -> HandledAs {
        let delay = self.settings.handler_backoff_after(attempt);
        let due = chrono::Utc::now().timestamp_millis() + delay.as_millis() as i64;
        let member = entry.retry_fields(attempt, &reason);
        let json = serde_json::to_string(&member).unwrap_or_default();
        let mut invocation = self
            .scripts
            .retry
            .key(self.keys.handled_marker(handler, event_id));
        invocation
            .key(self.keys.stream(queue))
            .key(self.keys.retry_set(queue))
            .arg(CONSUMER_GROUP)
            .arg(&entry.stream_id)
            .arg(due)
            .arg(json);
        let r = self
            .apply_outcome(queue, &entry.stream_id, "schedule a retry", &invocation)
            .await;
        if let Err(e) = r {
            tracing::error!(%queue, event_id, error = %e, "could not schedule the retry; the entry will be redelivered");
        }
        tracing::warn!(%queue, event_id, handler, attempt, retry_in = ?delay, %reason, "handler asked for a retry");
        HandledAs::Retry(reason)
    }

    /// Move `entry` to `queue`'s dead-letter stream with `reason`.
    pub(super) async fn dead_letter(
        &self,
        queue: &str,
        handler: &str,
        entry: &QueueEntry,
        reason: String,
    ) -> HandledAs {
        let marker = self
            .keys
            .handled_marker(handler, entry.event_id().unwrap_or(0));
        let mut invocation = self.scripts.dead.key(&marker);
        invocation
            .key(self.keys.stream(queue))
            .key(self.keys.dead_letter_stream(queue))
            .arg(CONSUMER_GROUP)
            .arg(&entry.stream_id);
        let dead_at = chrono::Utc::now().to_rfc3339();
        for field in entry.dead_letter_fields(&reason, handler, queue, &dead_at) {
            invocation.arg(field);
        }
        let r = self
            .apply_outcome(queue, &entry.stream_id, "dead-letter", &invocation)
            .await;
        if let Err(e) = r {
            tracing::error!(%queue, error = %e, "could not dead-letter the entry; it will be redelivered");
        }
        tracing::error!(%queue, handler, event_id = entry.event_id(), %reason, "entry dead-lettered");
        HandledAs::Dead(reason)
    }
}
