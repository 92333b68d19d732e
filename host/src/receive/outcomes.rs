//! Outcomes: recording what became of one entry in Redis, atomically, by the claim's owner.
//!
//! Owns the three outcome scripts: ok (a `done` marker kept for
//! `OUTBOX_IDEMPOTENCY_TTL_SECONDS`, then `XACK`; successes finishing together share one call,
//! see `finish_batches`), retry (into the retry set, marker cleared, `XACK`; dead-lettered
//! instead when the retry set is full) and dead letter (into the dead-letter stream, trimmed to
//! its cap, marker cleared, `XACK`), the duplicate ack, and carrying each through
//! infrastructure blips (a retry first checks whether the entry is still pending: if not, the
//! earlier try was applied and only its reply lost, so nothing is written twice). Every state
//! change of one entry is one script, so an entry is never acknowledged without its outcome,
//! and every script first checks that the marker still holds the caller's token (see
//! `claims`): a consumer whose claim lapsed and was taken over changes nothing (its outcome is
//! reported as a lost claim), so it never clears the new owner's `done` marker, acknowledges
//! the entry or re-adds it. Each outcome script also appends the handler run's receipt to the
//! receipts stream in the same step, so no acknowledged entry is without one (the receipt
//! writer in `receipts` moves them to PostgreSQL). It never runs a handler and never writes to
//! PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use super::claims::{marker_done, Claim};
use super::controls::RetriesDue;
use super::finish_batches::{finish_invocation, FinishBatches, PendingFinish};
use super::receipts::{HandlerRun, ReceiptUpdate};
use super::{blips, ctx, HandledAs, QueueEntry, ReceiveError, CONSUMER_GROUP};
use crate::config::Settings;
use crate::queue::receipt::RECEIPT_FIELD;
use crate::queue::QueueKeys;
use crate::reconnect::retry_blips;
use crate::redis_conn::RedisConn;

/// What every guarded script returns when the marker no longer holds the caller's token.
pub(super) const LOST: i64 = -1;

/// Ack entries with a `done` marker, any number in one step: KEYS[1] receipts stream, then per
/// entry KEYS[2i] marker and KEYS[2i+1] stream; ARGV[1] group, ARGV[2] done marker value,
/// ARGV[3] marker TTL (s), then per entry ARGV[3i+1] owner's marker value, ARGV[3i+2] entry id,
/// ARGV[3i+3] receipt (empty: none). Per entry, in order: unless its marker holds its owner's
/// value (then -1, nothing changed for it), set the `done` marker and append the receipt
/// (reply 1). Then one `XACK` per stream for all of its entries recorded so (a script's call into
/// Redis costs about as much as a short command: one for a step instead of one per entry).
/// Returns the per-entry replies. A command that fails stops the loop at that entry; the
/// entries recorded before it are acknowledged all the same, and the failure is the reply.
pub(super) const FINISH_LUA: &str = r#"
local replies, acks, streams = {}, {}, {}
local failed = nil
local function call(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then failed = reply end
  return reply
end
for i = 1, (#KEYS - 1) / 2 do
  local marker, stream = KEYS[2 * i], KEYS[2 * i + 1]
  local owner, id, receipt = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  local held = call('GET', marker)
  if failed then break end
  if held ~= owner then
    replies[i] = -1
  else
    call('SET', marker, ARGV[2], 'EX', ARGV[3])
    if failed then break end
    if receipt ~= '' then call('XADD', KEYS[1], '*', 'receipt', receipt) end
    if failed then break end
    if acks[stream] == nil then
      acks[stream] = {}
      streams[#streams + 1] = stream
    end
    table.insert(acks[stream], id)
    replies[i] = 1
  end
end
for _, stream in ipairs(streams) do
  local acked = redis.pcall('XACK', stream, ARGV[1], unpack(acks[stream]))
  if failed == nil and type(acked) == 'table' and acked.err then failed = acked end
end
if failed then return failed end
return replies
"#;

/// What the retry script returns when the retry set is full (nothing changed).
const RETRY_SET_FULL: i64 = -2;

/// Schedule a retry: KEYS[1] marker, KEYS[2] stream, KEYS[3] retry set, KEYS[4] receipts
/// stream; ARGV[1] owner's marker value, ARGV[2] group, ARGV[3] entry id, ARGV[4] due (ms),
/// ARGV[5] entry as JSON, ARGV[6] receipt (empty: none), ARGV[7] the retry set's cap. Returns
/// `XACK`'s count, or -1 (nothing changed) unless the marker holds ARGV[1], or -2 (nothing
/// changed, [`RETRY_SET_FULL`]) when the retry set already holds ARGV[7] entries.
const RETRY_LUA: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then return -2 end
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[5])
redis.call('DEL', KEYS[1])
if ARGV[6] ~= '' then redis.call('XADD', KEYS[4], '*', 'receipt', ARGV[6]) end
return redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
"#;

/// Dead-letter: KEYS[1] marker, KEYS[2] stream, KEYS[3] dead-letter stream, KEYS[4] receipts
/// stream; ARGV[1] owner's marker value (empty: the entry was never claimed, the marker is left
/// alone), ARGV[2] group, ARGV[3] entry id, ARGV[4] receipt (empty: none), ARGV[5] the
/// dead-letter stream's cap, ARGV[6..] fields of the dead-letter entry. The stream is trimmed
/// to the cap exactly (`MAXLEN =`: the oldest dead letters go). Returns how many were trimmed
/// (the entry is acknowledged), or -1 (nothing changed) unless the marker holds a non-empty
/// ARGV[1].
const DEAD_LUA: &str = r#"
if ARGV[1] ~= '' then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
  redis.call('DEL', KEYS[1])
end
local before = redis.call('XLEN', KEYS[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '=', ARGV[5], '*', unpack(ARGV, 6))
local trimmed = before + 1 - redis.call('XLEN', KEYS[3])
if ARGV[4] ~= '' then redis.call('XADD', KEYS[4], '*', 'receipt', ARGV[4]) end
redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
return trimmed
"#;

/// What [`Outcomes::apply_outcome`] reports when a retry finds its earlier try applied: a
/// recorded outcome (for the dead-letter script: nothing trimmed by this try).
const APPLIED_BEFORE: i64 = 0;

/// What an outcome script did with a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The outcome is recorded and the entry acknowledged.
    Recorded,
    /// The claim was no longer this owner's: nothing changed.
    LostClaim,
}

impl Settled {
    pub(super) fn from_reply(reply: i64) -> Self {
        if reply == LOST {
            Settled::LostClaim
        } else {
            Settled::Recorded
        }
    }
}

/// The outcome scripts, loaded once per process.
struct OutcomeScripts {
    finish: redis::Script,
    retry: redis::Script,
    dead: redis::Script,
}

/// Records outcomes: its connection, key names, the caps and times an outcome needs, the
/// batched successes and where a scheduled retry's due time is noted; nothing else.
#[derive(Clone)]
pub(super) struct Outcomes {
    conn: RedisConn,
    keys: QueueKeys,
    /// The receiver lease: writes are retried through blips for half of it.
    lease: Duration,
    /// How long a `done` marker is kept (s).
    marker_ttl_s: u64,
    retry_set_max_len: u64,
    dead_letter_max_len: u64,
    scripts: Arc<OutcomeScripts>,
    finishes: FinishBatches,
    retries_due: Arc<RetriesDue>,
}

impl Outcomes {
    /// Outcomes recorded on `conn` as `settings` say, noting retries in `retries_due`; starts
    /// the task that records successes together.
    pub(super) fn new(
        conn: RedisConn,
        keys: QueueKeys,
        settings: &Settings,
        retries_due: Arc<RetriesDue>,
    ) -> Self {
        let marker_ttl_s = settings.idempotency_ttl.as_secs().max(1);
        Self {
            finishes: FinishBatches::spawn(conn.clone(), marker_ttl_s),
            conn,
            keys,
            lease: settings.receiver_lease,
            marker_ttl_s,
            retry_set_max_len: settings.retry_set_max_len,
            dead_letter_max_len: settings.dead_letter_max_len,
            scripts: Arc::new(OutcomeScripts {
                finish: redis::Script::new(FINISH_LUA),
                retry: redis::Script::new(RETRY_LUA),
                dead: redis::Script::new(DEAD_LUA),
            }),
            retries_due,
        }
    }

    /// Report that `claim`'s `outcome` was discarded because the claim was lost.
    fn lost_claim(&self, queue: &str, claim: &Claim, outcome: &'static str) -> HandledAs {
        tracing::warn!(
            %queue,
            handler = %claim.handler,
            event_id = claim.event_id,
            owner = %claim.owner,
            outcome,
            "lost claim: the handler ran past its claim and another consumer owns the entry; its outcome was discarded, the marker and the entry are untouched"
        );
        metrics::counter!("outbox_receiver_lost_claims_total", "queue" => queue.to_string(), "outcome" => outcome)
            .increment(1);
        HandledAs::LostClaim
    }

    /// Finish (ok) one claimed entry: mark the claimed (handler, event) done for
    /// `OUTBOX_IDEMPOTENCY_TTL_SECONDS`, append `run`'s `ok` receipt to the receipts stream and
    /// acknowledge `stream_id` on `queue`, in one step, unless the claim was lost
    /// ([`Settled::LostClaim`]: nothing changed).
    pub(super) async fn finish_ok(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: Option<&HandlerRun>,
    ) -> Result<Settled, ReceiveError> {
        self.finish_as(queue, claim, stream_id, run, RESULT_OK)
            .await
    }

    /// [`finish_ok`](Self::finish_ok) with the receipt's `result`: `ok`, or
    /// `skipped_unsupported_version` for an entry finished without running its handler.
    async fn finish_as(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: Option<&HandlerRun>,
        result: &'static str,
    ) -> Result<Settled, ReceiveError> {
        let finish = PendingFinish {
            receipts_stream: self.keys.receipts_stream(queue),
            marker: claim.marker.clone(),
            stream: self.keys.stream(queue),
            owner_value: claim.marker_value(),
            stream_id: stream_id.to_string(),
            receipt: receipt_arg(run, result, None),
        };
        let ttl_s = self.marker_ttl_s;
        let receipts_stream = self.keys.receipts_stream(queue);
        let replies: Vec<i64> = ctx(
            finish_invocation(&self.scripts.finish, &receipts_stream, ttl_s, [&finish])
                .invoke_async(&mut self.conn.clone())
                .await,
            || format!("finish {stream_id} on {queue}"),
        )?;
        Ok(Settled::from_reply(
            replies.first().copied().unwrap_or(LOST),
        ))
    }

    /// Record a successful handler run of `claim` on `stream_id`: together with the other
    /// handlers' successes that are waiting at that moment ([`FinishBatches`]), and if that
    /// step fails, on its own through blips ([`finish_ok`](Self::finish_ok)). A retry that finds
    /// the claim gone but the entry done was applied by an earlier try (only the reply was
    /// lost), so it counts as recorded.
    pub(super) async fn record_ok(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: &HandlerRun,
    ) -> HandledAs {
        self.record_finished(queue, claim, stream_id, run, RESULT_OK)
            .await
    }

    /// Finish `claim` without running its handler, which does not support the event's version:
    /// recorded like a success (done marker, acknowledged, never retried) with the receipt
    /// `skipped_unsupported_version`.
    pub(super) async fn record_skipped_version(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: &HandlerRun,
    ) -> HandledAs {
        match self
            .record_finished(queue, claim, stream_id, run, RESULT_SKIPPED_VERSION)
            .await
        {
            HandledAs::Ok => HandledAs::SkippedVersion,
            other => other,
        }
    }

    /// Record a finished run of `claim` with the receipt `result` (`ok` or a skip).
    async fn record_finished(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: &HandlerRun,
        result: &'static str,
    ) -> HandledAs {
        let together = self
            .finishes
            .finish(PendingFinish {
                receipts_stream: self.keys.receipts_stream(queue),
                marker: claim.marker.clone(),
                stream: self.keys.stream(queue),
                owner_value: claim.marker_value(),
                stream_id: stream_id.to_string(),
                receipt: receipt_arg(Some(run), result, None),
            })
            .await;
        let finished = match together {
            Some(settled) => Ok(settled),
            // The shared step failed and may or may not have been applied: on its own now, as a
            // retry.
            None => {
                self.finish_through_blips(queue, claim, stream_id, run, result)
                    .await
            }
        };
        match finished {
            Ok(Settled::Recorded) => HandledAs::Ok,
            Ok(Settled::LostClaim) => self.lost_claim(queue, claim, "ok"),
            Err(e) => {
                tracing::error!(%queue, event_id = claim.event_id, error = %e, "could not record success; the entry will be redelivered");
                HandledAs::Ok
            }
        }
    }

    /// [`finish_as`](Self::finish_as) retried through blips after a try whose effect is unknown:
    /// a lost claim whose marker says `done` was applied by an earlier try.
    async fn finish_through_blips(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: &HandlerRun,
        result: &'static str,
    ) -> Result<Settled, ReceiveError> {
        retry_blips(
            "record success",
            blips::STAGE,
            blips::deadline(self.lease),
            blips::receive_blip,
            || async move {
                match self
                    .finish_as(queue, claim, stream_id, Some(run), result)
                    .await?
                {
                    // A blip while reading the marker is retried with the whole step, not taken
                    // for a lost claim (which would leave the entry without receipt).
                    Settled::LostClaim
                        if marker_done(
                            &self.conn,
                            &self.keys,
                            &claim.queue,
                            &claim.handler,
                            claim.event_id,
                        )
                        .await? =>
                    {
                        Ok(Settled::Recorded)
                    }
                    settled => Ok(settled),
                }
            },
        )
        .await
    }

    /// Acknowledge a duplicate delivery of (`handler`, `event_id`) without running the handler,
    /// and count it on the receipt (both in one `MULTI`, retried through blips; on an error the
    /// entry is delivered again and found a duplicate again).
    pub(super) async fn ack_duplicate(
        &self,
        queue: &str,
        stream_id: &str,
        event_id: i64,
        handler: &str,
    ) -> redis::RedisResult<()> {
        retry_blips(
            "acknowledge a duplicate",
            blips::STAGE,
            blips::deadline(self.lease),
            |e: &redis::RedisError| crate::fault::redis_blip(e),
            || self.ack_duplicate_once(queue, stream_id, event_id, handler),
        )
        .await
    }

    /// One try of [`ack_duplicate`](Self::ack_duplicate).
    async fn ack_duplicate_once(
        &self,
        queue: &str,
        stream_id: &str,
        event_id: i64,
        handler: &str,
    ) -> redis::RedisResult<()> {
        let duplicate = ReceiptUpdate::Duplicate {
            event_id,
            handler: handler.to_string(),
        };
        redis::pipe()
            .atomic()
            .xack(self.keys.stream(queue), CONSUMER_GROUP, &[stream_id])
            .ignore()
            .xadd(
                self.keys.receipts_stream(queue),
                "*",
                &[(RECEIPT_FIELD, duplicate.encode())],
            )
            .ignore()
            .query_async(&mut self.conn.clone())
            .await
    }

    /// Schedule `entry`'s next delivery `retry.delay` from now, clearing `claim`'s marker,
    /// appending `run`'s `retry` receipt and acknowledging the entry in one step; unless the
    /// claim was lost ([`HandledAs::LostClaim`]: nothing changed).
    pub(super) async fn schedule_retry(
        &self,
        queue: &str,
        claim: &Claim,
        entry: &QueueEntry,
        retry: Retry,
        run: Option<&HandlerRun>,
    ) -> HandledAs {
        let Retry {
            attempt,
            delay,
            reason,
        } = retry;
        let due = chrono::Utc::now()
            .timestamp_millis()
            .saturating_add(crate::numeric::millis_i64(delay));
        let member = entry.retry_fields(attempt, &reason);
        let json = serde_json::to_string(&member).unwrap_or_default();
        let mut invocation = self.scripts.retry.key(&claim.marker);
        invocation
            .key(self.keys.stream(queue))
            .key(self.keys.retry_set(queue))
            .key(self.keys.receipts_stream(queue))
            .arg(claim.marker_value())
            .arg(CONSUMER_GROUP)
            .arg(&entry.stream_id)
            .arg(due)
            .arg(json)
            .arg(receipt_arg(run, "retry", Some(&reason)))
            .arg(self.retry_set_max_len);
        let r = self
            .apply_outcome(queue, &entry.stream_id, "schedule a retry", &invocation)
            .await;
        if matches!(r, Ok(RETRY_SET_FULL)) {
            return self
                .dead_letter_for_full_retry_set(queue, claim, entry, attempt, reason, run)
                .await;
        }
        match r.map(Settled::from_reply) {
            Ok(Settled::LostClaim) => return self.lost_claim(queue, claim, "retry"),
            Ok(Settled::Recorded) => self.retries_due.note(queue, due),
            Err(e) => {
                tracing::error!(%queue, event_id = claim.event_id, error = %e, "could not schedule the retry; the entry will be redelivered");
            }
        }
        tracing::warn!(%queue, event_id = claim.event_id, handler = %claim.handler, attempt, retry_in = ?delay, %reason, "handler asked for a retry");
        HandledAs::Retry {
            reason,
            after: delay,
        }
    }

    /// Move `entry` to `queue`'s dead-letter stream with `reason`, clearing `claim`'s marker,
    /// appending `run`'s `dead` receipt and acknowledging the entry in one step; unless the
    /// claim was lost ([`HandledAs::LostClaim`]: nothing changed). Without a claim (an entry
    /// that could not be claimed, e.g. without an event id) no marker is touched.
    pub(super) async fn dead_letter(
        &self,
        queue: &str,
        handler: &str,
        claim: Option<&Claim>,
        entry: &QueueEntry,
        reason: String,
        run: Option<&HandlerRun>,
    ) -> HandledAs {
        let marker = match claim {
            Some(claim) => claim.marker.clone(),
            None => self
                .keys
                .handled_marker(queue, handler, entry.event_id().unwrap_or(0)),
        };
        let mut invocation = self.scripts.dead.key(&marker);
        invocation
            .key(self.keys.stream(queue))
            .key(self.keys.dead_letter_stream(queue))
            .key(self.keys.receipts_stream(queue))
            .arg(claim.map(Claim::marker_value).unwrap_or_default())
            .arg(CONSUMER_GROUP)
            .arg(&entry.stream_id)
            .arg(receipt_arg(run, "dead", Some(&reason)))
            .arg(self.dead_letter_max_len);
        let dead_at = chrono::Utc::now().to_rfc3339();
        for field in entry.dead_letter_fields(&reason, handler, queue, &dead_at) {
            invocation.arg(field);
        }
        let r = self
            .apply_outcome(queue, &entry.stream_id, "dead-letter", &invocation)
            .await;
        let trimmed = r.as_ref().ok().copied().filter(|n| *n > 0);
        match (r.map(Settled::from_reply), claim) {
            (Ok(Settled::LostClaim), Some(claim)) => {
                return self.lost_claim(queue, claim, "dead-letter")
            }
            (Ok(_), _) => {
                if let Some(trimmed) = trimmed {
                    self.report_dead_letters_trimmed(queue, trimmed.unsigned_abs());
                }
            }
            (Err(e), _) => {
                tracing::error!(%queue, error = %e, "could not dead-letter the entry; it will be redelivered");
            }
        }
        tracing::error!(%queue, handler, event_id = entry.event_id(), %reason, "entry dead-lettered");
        HandledAs::Dead(reason)
    }

    /// `claim`'s retry found `queue`'s retry set full (`OUTBOX_RETRY_SET_MAX_LEN`): the entry
    /// goes to the dead-letter stream instead (replayable from there), counted and logged.
    async fn dead_letter_for_full_retry_set(
        &self,
        queue: &str,
        claim: &Claim,
        entry: &QueueEntry,
        attempt: u32,
        reason: String,
        run: Option<&HandlerRun>,
    ) -> HandledAs {
        let cap = self.retry_set_max_len;
        metrics::counter!("outbox_retry_set_full_total", "queue" => queue.to_string()).increment(1);
        tracing::error!(%queue, event_id = claim.event_id, handler = %claim.handler, attempt, max_len = cap, "the retry set is full (OUTBOX_RETRY_SET_MAX_LEN): the entry is dead-lettered instead of retried");
        let reason = format!("retry set full ({cap} entries, OUTBOX_RETRY_SET_MAX_LEN): {reason}");
        self.dead_letter(queue, &claim.handler, Some(claim), entry, reason, run)
            .await
    }

    /// Count and log dead letters trimmed from `queue`'s dead-letter stream at its cap.
    fn report_dead_letters_trimmed(&self, queue: &str, trimmed: u64) {
        metrics::counter!("outbox_redis_trimmed_total", "queue" => queue.to_string(), "kind" => "dead_letter")
            .increment(trimmed);
        tracing::warn!(%queue, trimmed, max_len = self.dead_letter_max_len, "the dead-letter stream is at its cap (OUTBOX_DEAD_LETTER_MAX_LEN): its oldest dead letters were trimmed and are gone");
    }

    /// Run an owner-checked outcome script for `stream_id` on `queue` (`what` names it in logs),
    /// retrying through blips; its reply (`-1`: the claim was lost). A retry first checks the
    /// entry is still pending in the consumer group; if it is not, the earlier try was applied
    /// (only its reply was lost) and this one reports it applied.
    pub(super) async fn apply_outcome(
        &self,
        queue: &str,
        stream_id: &str,
        what: &str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<i64, ReceiveError> {
        let mut tried = false;
        retry_blips(
            what,
            blips::STAGE,
            blips::deadline(self.lease),
            blips::receive_blip,
            || {
                let again = std::mem::replace(&mut tried, true);
                async move {
                    if again && !self.still_pending(queue, stream_id).await? {
                        return Ok(APPLIED_BEFORE);
                    }
                    ctx(
                        invocation.invoke_async(&mut self.conn.clone()).await,
                        || format!("{what}: {stream_id} on {queue}"),
                    )
                }
            },
        )
        .await
    }

    /// Whether `stream_id` is still pending (delivered, not acknowledged) in `queue`'s group.
    async fn still_pending(&self, queue: &str, stream_id: &str) -> Result<bool, ReceiveError> {
        let reply: redis::Value = ctx(
            redis::cmd("XPENDING")
                .arg(self.keys.stream(queue))
                .arg(CONSUMER_GROUP)
                .arg(stream_id)
                .arg(stream_id)
                .arg(1)
                .query_async(&mut self.conn.clone())
                .await,
            || format!("XPENDING {stream_id} on {queue}"),
        )?;
        Ok(matches!(reply, redis::Value::Array(ref entries) if !entries.is_empty()))
    }
}

/// A handler retry to schedule ([`Receivers::schedule_retry`](super::Receivers::schedule_retry)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// The attempt that failed (1 for the first delivery).
    pub attempt: u32,
    /// How long until the next delivery: the handler backoff of `attempt`
    /// ([`Settings::handler_backoff_after`](crate::config::Settings::handler_backoff_after)), or
    /// the handler's own `retry-after` delay.
    pub delay: std::time::Duration,
    /// Why, as recorded in the receipt and the log.
    pub reason: String,
}

/// The receipt result of a handler that finished its entry.
pub(super) const RESULT_OK: &str = "ok";
/// The receipt result of an entry whose event version its handler does not support.
pub const RESULT_SKIPPED_VERSION: &str = "skipped_unsupported_version";

/// The receipt argument of an outcome script: `run`'s receipt as a receipts stream entry, or
/// empty (none).
fn receipt_arg(run: Option<&HandlerRun>, result: &'static str, error: Option<&str>) -> String {
    run.map(|run| ReceiptUpdate::Outcome(run.receipt(result, error)).encode())
        .unwrap_or_default()
}
