//! Outcomes: recording what became of one entry in Redis, atomically, by the claim's owner.
//!
//! Owns the idempotency claim ([`Claim`]: `SET NX PX` of the handled marker to
//! `running:<owner token>`, a token unique per claim, refused while the queue's pause key
//! exists: the pause barrier, see `crate::queue_pause`; and confirming, right before its
//! handler starts, a claim older than [`PAUSE_START_FENCE`]), its renewal while the handler runs
//! (`PEXPIRE` of the marker and `XCLAIM` of the entry, every third of the receiver lease), and
//! the three outcome scripts: ok (a `done` marker, then `XACK`), retry (into the retry set,
//! marker cleared, `XACK`) and dead letter (into the dead-letter stream, marker cleared,
//! `XACK`). Every state change of one entry is one script, so an entry is never acknowledged
//! without its outcome, and every script first checks that the marker still holds the caller's
//! token: a consumer whose claim lapsed and was taken over changes nothing (its outcome is
//! reported as a lost claim), so it never clears the new owner's `done` marker, acknowledges
//! the entry or re-adds it. Each outcome script also appends the handler run's receipt to the
//! receipts stream in the same step, so no acknowledged entry is without one (the receipt
//! writer in `receipts` moves them to PostgreSQL). It never runs a handler and never writes to
//! PostgreSQL.

use std::convert::Infallible;
use std::time::Instant;

use crate::redis_conn::RedisConn;
use redis::AsyncCommands;
use tokio::sync::oneshot;

use super::receipts::{HandlerRun, ReceiptUpdate};
use super::{
    blips, ctx, ClaimAhead, HandledAs, QueueEntry, ReceiveError, Receivers, CONSUMER_GROUP,
};
use crate::queue::receipt::RECEIPT_FIELD;
use crate::queue::{claim_owner, marker_is_done, marker_running, MARKER_DONE_OK};
use crate::queue_pause::PAUSE_START_FENCE;
use crate::reconnect::retry_blips;

/// What every guarded script returns when the marker no longer holds the caller's token.
const LOST: i64 = -1;

/// What the claim scripts return when the queue's pause key exists.
const PAUSED: i64 = -2;

/// Claim entries of one queue unless it is paused: KEYS[1] the queue's pause key, then per
/// claim KEYS[i + 1] its handled marker; ARGV[1] the receiver lease (ms), then per claim
/// ARGV[i + 1] its owner's marker value. While the pause key exists nothing is claimed, every
/// marker already holding its owner's value (an earlier try whose reply was lost) is released,
/// and the reply is {-2}. Otherwise, per claim: 1 when the marker was set (`SET NX PX`) or
/// already holds the owner's value, 0 when it holds another's.
const CLAIM_LUA: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then
  for i = 2, #KEYS do
    if redis.call('GET', KEYS[i]) == ARGV[i] then redis.call('DEL', KEYS[i]) end
  end
  return {-2}
end
local replies = {}
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], ARGV[i], 'NX', 'PX', ARGV[1]) then
    replies[i - 1] = 1
  elseif redis.call('GET', KEYS[i]) == ARGV[i] then
    replies[i - 1] = 1
  else
    replies[i - 1] = 0
  end
end
return replies
"#;

/// Confirm a claim right before its handler starts: KEYS[1] the queue's pause key, KEYS[2] the
/// handled marker; ARGV[1] the owner's marker value. While the pause key exists: release the
/// marker if it holds ARGV[1], return -2. Otherwise 1 when the marker holds ARGV[1], -1 (lost)
/// when not.
const CONFIRM_START_LUA: &str = r#"
local mine = redis.call('GET', KEYS[2]) == ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 1 then
  if mine then redis.call('DEL', KEYS[2]) end
  return -2
end
if mine then return 1 end
return -1
"#;

/// Ack entries with a `done` marker, any number in one step: KEYS[1] receipts stream, then per
/// entry KEYS[2i] marker and KEYS[2i+1] stream; ARGV[1] group, ARGV[2] done marker value,
/// ARGV[3] marker TTL (s), then per entry ARGV[3i+1] owner's marker value, ARGV[3i+2] entry id,
/// ARGV[3i+3] receipt (empty: none). Per entry, in order: unless its marker holds its owner's
/// value (then -1, nothing changed for it), set the `done` marker, append the receipt and
/// `XACK`. Returns the per-entry replies (`XACK`'s count or -1).
const FINISH_LUA: &str = r#"
local replies = {}
for i = 1, (#KEYS - 1) / 2 do
  local marker, stream = KEYS[2 * i], KEYS[2 * i + 1]
  local owner, id, receipt = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  if redis.call('GET', marker) ~= owner then
    replies[i] = -1
  else
    redis.call('SET', marker, ARGV[2], 'EX', ARGV[3])
    if receipt ~= '' then redis.call('XADD', KEYS[1], '*', 'receipt', receipt) end
    replies[i] = redis.call('XACK', stream, ARGV[1], id)
  end
end
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

/// Renew a claim: KEYS[1] marker, KEYS[2] stream; ARGV[1] owner's marker value, ARGV[2] lease
/// (ms), ARGV[3] group, ARGV[4] consumer, ARGV[5] entry id. Unless the marker holds ARGV[1]
/// (then 0, nothing changed): extend the marker by the lease, and claim the entry for the
/// consumer with its idle time reset, so `XAUTOCLAIM` elsewhere does not take it (an entry no
/// longer pending is left alone). Returns 1.
const RENEW_LUA: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.pcall('XCLAIM', KEYS[2], ARGV[3], ARGV[4], 0, ARGV[5], 'JUSTID')
return 1
"#;

/// The claim, outcome and renewal scripts, loaded once per process.
pub(super) struct OutcomeScripts {
    claim: redis::Script,
    confirm_start: redis::Script,
    finish: redis::Script,
    retry: redis::Script,
    dead: redis::Script,
    renew: redis::Script,
}

impl OutcomeScripts {
    /// The scripts (Redis loads them on first use).
    pub(super) fn new() -> Self {
        Self {
            claim: redis::Script::new(CLAIM_LUA),
            confirm_start: redis::Script::new(CONFIRM_START_LUA),
            finish: redis::Script::new(FINISH_LUA),
            retry: redis::Script::new(RETRY_LUA),
            dead: redis::Script::new(DEAD_LUA),
            renew: redis::Script::new(RENEW_LUA),
        }
    }
}

/// One consumer's idempotency claim on (handler, event): the handled marker and the owner
/// token it holds while the handler runs. Every outcome recorded with it is refused once the
/// marker holds anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    queue: String,
    handler: String,
    event_id: i64,
    marker: String,
    owner: String,
    /// Until when its handler may start without confirming the claim: [`PAUSE_START_FENCE`]
    /// after the claim was first sent (its check of the pause key ran after that).
    start_by: Instant,
}

impl Claim {
    /// The queue whose entry the claim is for.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The handler claimed.
    pub fn handler(&self) -> &str {
        &self.handler
    }

    /// The event claimed.
    pub fn event_id(&self) -> i64 {
        self.event_id
    }

    /// The owner token (`<consumer>:<nonce>`), unique per claim.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The handled marker's value while this claim holds it.
    pub(super) fn marker_value(&self) -> String {
        marker_running(&self.owner)
    }

    /// Whether its handler may start now without confirming the claim first.
    pub(super) fn may_start_unconfirmed(&self) -> bool {
        Instant::now() < self.start_by
    }
}

/// What a claim made through the pause barrier found.
#[derive(Debug)]
pub(super) enum Claimed {
    /// Made: this consumer runs the handler.
    Held(Claim),
    /// The marker holds another claim (someone runs or ran this handler on the event).
    Refused,
    /// The queue is paused: nothing was claimed (and a claim of an earlier try released).
    Paused,
}

/// What confirming a claim right before its handler starts found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StartConfirmed {
    /// The claim holds and the queue is not paused: the handler starts.
    Start,
    /// The queue was paused meanwhile: the claim was released, the handler does not start.
    Paused,
    /// The claim is no longer this consumer's.
    Lost,
}

/// What an outcome script did with a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The outcome is recorded and the entry acknowledged.
    Recorded,
    /// The claim was no longer this owner's: nothing changed.
    LostClaim,
}

impl Settled {
    fn from_reply(reply: i64) -> Self {
        if reply == LOST {
            Settled::LostClaim
        } else {
            Settled::Recorded
        }
    }
}

impl Receivers {
    /// The idempotency claim of (`handler`, `event_id`) on `queue` for this consumer: set the
    /// handled marker to `running:<owner token>` (a token new for this claim) for the receiver
    /// lease unless it exists or the queue's pause key does. `Some`: this consumer runs the
    /// handler, and records its outcome with the claim; `None`: someone runs it or ran it (see
    /// the marker), or the queue is paused.
    pub async fn claim_entry(
        &self,
        queue: &str,
        handler: &str,
        event_id: i64,
    ) -> Result<Option<Claim>, ReceiveError> {
        let claim = self.new_claim(queue, handler, event_id);
        match self.claim_once(claim).await? {
            Claimed::Held(claim) => Ok(Some(claim)),
            Claimed::Refused | Claimed::Paused => Ok(None),
        }
    }

    /// Make `claim` through the pause barrier ([`CLAIM_LUA`]): one try.
    pub(super) async fn claim_once(&self, claim: Claim) -> Result<Claimed, ReceiveError> {
        let replies: Vec<i64> = ctx(
            self.scripts
                .claim
                .key(self.keys.paused(&claim.queue))
                .key(&claim.marker)
                .arg(self.lease_ms())
                .arg(claim.marker_value())
                .invoke_async(&mut self.conn.clone())
                .await,
            || format!("idempotency claim {}", claim.marker),
        )?;
        Ok(match replies.first() {
            Some(&PAUSED) => Claimed::Paused,
            Some(1) => Claimed::Held(claim),
            _ => Claimed::Refused,
        })
    }

    /// Confirm `claim` right before its handler starts (it is older than
    /// [`PAUSE_START_FENCE`]): see [`StartConfirmed`]. Confirmed, it may start unconfirmed for
    /// another fence.
    pub(super) async fn confirm_start(
        &self,
        claim: &mut Claim,
    ) -> Result<StartConfirmed, ReceiveError> {
        let sent = Instant::now();
        let reply: i64 = ctx(
            self.scripts
                .confirm_start
                .key(self.keys.paused(&claim.queue))
                .key(&claim.marker)
                .arg(claim.marker_value())
                .invoke_async(&mut self.conn.clone())
                .await,
            || format!("confirm the claim {}", claim.marker),
        )?;
        Ok(match reply {
            1 => {
                claim.start_by = sent + PAUSE_START_FENCE;
                StartConfirmed::Start
            }
            PAUSED => StartConfirmed::Paused,
            _ => StartConfirmed::Lost,
        })
    }

    /// The idempotency claims of `handler` on the events of `entries` for this consumer, in
    /// one round trip (one [`CLAIM_LUA`] over every entry's marker, refused together while the
    /// queue is paused), one answer per entry in order. An entry without an event id is left to
    /// its task ([`ClaimAhead::NotTried`]: it is dead-lettered there); when the round trip
    /// fails, every claim's effect is unknown ([`ClaimAhead::Unknown`]: the task claims again
    /// with the same owner token).
    pub(super) async fn claim_ahead(
        &self,
        queue: &str,
        handler: &str,
        entries: &[&QueueEntry],
    ) -> Vec<ClaimAhead> {
        let claims: Vec<Option<Claim>> = entries
            .iter()
            .map(|entry| {
                entry
                    .event_id()
                    .map(|id| self.new_claim(queue, handler, id))
            })
            .collect();
        let tried = claims.iter().flatten().count();
        let answers: redis::RedisResult<Vec<i64>> = if tried == 0 {
            Ok(Vec::new())
        } else {
            let mut invocation = self.scripts.claim.key(self.keys.paused(queue));
            invocation.arg(self.lease_ms());
            for claim in claims.iter().flatten() {
                invocation.key(&claim.marker).arg(claim.marker_value());
            }
            invocation.invoke_async(&mut self.conn.clone()).await
        };
        let paused = matches!(answers.as_deref(), Ok([PAUSED]));
        let mut answers = match answers {
            Ok(answers) if paused || answers.len() == tried => Some(answers.into_iter()),
            Ok(_) => None,
            Err(e) => {
                if let Some(blip) = crate::fault::redis_blip(&e) {
                    blip.count_retries(blips::STAGE, tried as u64);
                }
                tracing::warn!(handler, entries = entries.len(), error = %e, "claiming a read's entries together failed; each entry claims again on its own");
                None
            }
        };
        claims
            .into_iter()
            .map(|claim| match (claim, answers.as_mut()) {
                (None, _) => ClaimAhead::NotTried,
                (Some(_), Some(_)) if paused => ClaimAhead::Paused(handler.to_string()),
                (Some(claim), None) => ClaimAhead::Unknown(claim),
                (Some(claim), Some(answers)) => match answers.next() {
                    Some(1) => ClaimAhead::Held(claim),
                    Some(_) => ClaimAhead::Refused(handler.to_string()),
                    None => ClaimAhead::Unknown(claim),
                },
            })
            .collect()
    }

    /// A claim of (`handler`, `event_id`) on `queue` for this consumer with a new owner token,
    /// not yet made in Redis.
    pub(super) fn new_claim(&self, queue: &str, handler: &str, event_id: i64) -> Claim {
        Claim {
            queue: queue.to_string(),
            handler: handler.to_string(),
            event_id,
            marker: self.keys.handled_marker(queue, handler, event_id),
            owner: claim_owner(&self.consumer, rand::random()),
            start_by: Instant::now() + PAUSE_START_FENCE,
        }
    }

    /// Renew `claim` for another receiver lease and claim `stream_id` on `queue` for this
    /// consumer with its idle time reset (so no other consumer reclaims it), in one step and
    /// only while the marker still holds the claim's token. `false`: the claim is lost (it
    /// lapsed, or another consumer holds it now); nothing changed.
    pub async fn renew_claim(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
    ) -> Result<bool, ReceiveError> {
        let renewed: i64 = ctx(
            self.scripts
                .renew
                .key(&claim.marker)
                .key(self.keys.stream(queue))
                .arg(claim.marker_value())
                .arg(self.lease_ms())
                .arg(CONSUMER_GROUP)
                .arg(&self.consumer)
                .arg(stream_id)
                .invoke_async(&mut self.conn.clone())
                .await,
            || format!("renew the claim {}", claim.marker),
        )?;
        Ok(renewed == 1)
    }

    /// Keep `claim` (and the entry `stream_id`) while the handler runs: renew it every third of
    /// the receiver lease. A failed renewal is retried at the next one; a lost claim is
    /// reported once, and the outcome scripts will refuse the handler's outcome. Never returns:
    /// the caller drops it when the handler is done.
    pub(super) async fn hold_claim(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
    ) -> Infallible {
        let every = self.settings.receiver_lease / 3;
        loop {
            tokio::time::sleep(every).await;
            match self.renew_claim(queue, claim, stream_id).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(
                        %queue,
                        handler = %claim.handler,
                        event_id = claim.event_id,
                        owner = %claim.owner,
                        "lost the claim while the handler runs; another consumer owns the entry and this run's outcome will be discarded"
                    );
                    return std::future::pending().await;
                }
                Err(e) => {
                    tracing::warn!(%queue, event_id = claim.event_id, error = %e, "could not renew the claim; trying again");
                }
            }
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

    /// Whether `handler` already finished `event_id` on `queue` (its marker says `done`).
    pub(super) async fn marker_done(
        &self,
        queue: &str,
        handler: &str,
        event_id: i64,
    ) -> Result<bool, ReceiveError> {
        let marker = self.keys.handled_marker(queue, handler, event_id);
        let state: Option<String> = ctx(self.conn.clone().get(&marker).await, || {
            format!("read the handled marker {marker}")
        })?;
        Ok(state.as_deref().is_some_and(marker_is_done))
    }

    /// [`marker_done`](Self::marker_done) retried through blips; an error that outlasts them
    /// counts as not finished.
    pub(super) async fn already_done(&self, queue: &str, handler: &str, event_id: i64) -> bool {
        retry_blips(
            "read the handled marker",
            blips::STAGE,
            self.blip_deadline(),
            blips::receive_blip,
            || self.marker_done(queue, handler, event_id),
        )
        .await
        .unwrap_or(false)
    }

    /// Finish (ok) one claimed entry: mark the claimed (handler, event) done for
    /// `OUTBOX_IDEMPOTENCY_TTL_SECONDS`, append `run`'s `ok` receipt to the receipts stream and
    /// acknowledge `stream_id` on `queue`, in one step, unless the claim was lost
    /// ([`Settled::LostClaim`]: nothing changed).
    pub async fn finish_ok(
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
        let ttl_s = self.settings.idempotency_ttl.as_secs().max(1);
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
            self.blip_deadline(),
            blips::receive_blip,
            || async move {
                match self
                    .finish_as(queue, claim, stream_id, Some(run), result)
                    .await?
                {
                    // A blip while reading the marker is retried with the whole step, not taken
                    // for a lost claim (which would leave the entry without receipt).
                    Settled::LostClaim
                        if self
                            .marker_done(&claim.queue, &claim.handler, claim.event_id)
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
    /// and count it on the receipt (both in one `MULTI`; on an error the entry is delivered
    /// again and found a duplicate again).
    pub(super) async fn ack_duplicate(
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
    pub async fn schedule_retry(
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
        let due = chrono::Utc::now().timestamp_millis() + delay.as_millis() as i64;
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
            .arg(self.settings.retry_set_max_len);
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
    pub async fn dead_letter(
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
            .arg(self.settings.dead_letter_max_len);
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
        let cap = self.settings.retry_set_max_len;
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
        tracing::warn!(%queue, trimmed, max_len = self.settings.dead_letter_max_len, "the dead-letter stream is at its cap (OUTBOX_DEAD_LETTER_MAX_LEN): its oldest dead letters were trimmed and are gone");
    }

    /// The receiver lease in milliseconds.
    fn lease_ms(&self) -> u64 {
        self.settings.receiver_lease.as_millis() as u64
    }
}

/// A handler retry to schedule ([`Receivers::schedule_retry`]).
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

/// The most successes one [`FinishBatches`] step records: one script call, during which Redis
/// serves nobody else.
const FINISH_BATCH: usize = 64;

/// One handler success waiting to be recorded (see [`FINISH_LUA`] for what is written).
pub(super) struct PendingFinish {
    /// The receipts stream of the entry's queue (see [`crate::queue::QueueKeys::receipts_stream`]).
    receipts_stream: String,
    marker: String,
    stream: String,
    owner_value: String,
    stream_id: String,
    receipt: String,
}

/// Records the successes of handlers that finish at about the same time in one step: one
/// [`FINISH_LUA`] call for up to [`FINISH_BATCH`] entries of any queues (on a Redis Cluster
/// one call per queue, run at once: a script touches one slot), instead of one per entry. A success waits only for the step in flight, never for a timer: an idle receiver's
/// success goes alone at once, a busy one's join the next step. Each entry keeps its own
/// owner check and reply, so one lost claim changes nothing for the others. The waiting
/// successes are bounded by the handler tasks (one each).
#[derive(Clone)]
pub(super) struct FinishBatches {
    waiting: tokio::sync::mpsc::UnboundedSender<WaitingFinish>,
}

impl FinishBatches {
    /// Start the task that records successes on `conn`, with `done` markers kept for
    /// `marker_ttl_s`; it ends when the last clone is dropped.
    pub(super) fn spawn(conn: RedisConn, marker_ttl_s: u64) -> Self {
        let (waiting, queue) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(record_finish_batches(queue, conn, marker_ttl_s));
        Self { waiting }
    }

    /// Record `finish` with whatever else is waiting: what the script did for it, or `None`
    /// when the step failed (applied or not: the caller retries on its own).
    pub(super) async fn finish(&self, finish: PendingFinish) -> Option<Settled> {
        let (reply, settled) = oneshot::channel();
        self.waiting.send((finish, reply)).ok()?;
        settled.await.ok().flatten()
    }
}

/// One [`FINISH_LUA`] call for `finishes` (its KEYS and ARGV layout, written once), with `done`
/// markers kept for `marker_ttl_s`.
fn finish_invocation<'a>(
    script: &'a redis::Script,
    receipts_stream: &str,
    marker_ttl_s: u64,
    finishes: impl IntoIterator<Item = &'a PendingFinish>,
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.key(receipts_stream);
    invocation
        .arg(CONSUMER_GROUP)
        .arg(MARKER_DONE_OK)
        .arg(marker_ttl_s);
    for finish in finishes {
        invocation
            .key(&finish.marker)
            .key(&finish.stream)
            .arg(&finish.owner_value)
            .arg(&finish.stream_id)
            .arg(&finish.receipt);
    }
    invocation
}

/// The task behind [`FinishBatches`]: takes every waiting success (up to [`FINISH_BATCH`]),
/// records them in one script call per receipts stream and answers each.
async fn record_finish_batches(
    mut queue: tokio::sync::mpsc::UnboundedReceiver<WaitingFinish>,
    conn: RedisConn,
    marker_ttl_s: u64,
) {
    let script = redis::Script::new(FINISH_LUA);
    let mut batch = Vec::with_capacity(FINISH_BATCH);
    while queue.recv_many(&mut batch, FINISH_BATCH).await > 0 {
        // One step per receipts stream (one on a single node; one per queue on a cluster).
        batch.sort_by(|(a, _), (b, _)| a.receipts_stream.cmp(&b.receipts_stream));
        let mut steps = Vec::new();
        while let Some((first, _)) = batch.first() {
            let stream = first.receipts_stream.clone();
            let same = batch
                .iter()
                .take_while(|(finish, _)| finish.receipts_stream == stream)
                .count();
            let step: Vec<WaitingFinish> = batch.drain(..same).collect();
            steps.push(record_finish_step(
                &script,
                conn.clone(),
                marker_ttl_s,
                step,
            ));
        }
        futures::future::join_all(steps).await;
    }
}

/// A success waiting to be recorded and where its answer goes.
type WaitingFinish = (PendingFinish, oneshot::Sender<Option<Settled>>);

/// One [`FINISH_LUA`] call for `step` (successes that share a receipts stream), answering each.
async fn record_finish_step(
    script: &redis::Script,
    mut conn: RedisConn,
    marker_ttl_s: u64,
    step: Vec<WaitingFinish>,
) {
    let Some((first, _)) = step.first() else {
        return;
    };
    let invocation = finish_invocation(
        script,
        &first.receipts_stream,
        marker_ttl_s,
        step.iter().map(|(finish, _)| finish),
    );
    let replies: redis::RedisResult<Vec<i64>> = invocation.invoke_async(&mut conn).await;
    match replies {
        Ok(replies) if replies.len() == step.len() => {
            for ((_, reply), settled) in step.into_iter().zip(replies) {
                let _ = reply.send(Some(Settled::from_reply(settled)));
            }
        }
        other => {
            let entries = step.len();
            match other {
                Err(e) => {
                    if let Some(blip) = crate::fault::redis_blip(&e) {
                        blip.count_retries(blips::STAGE, entries as u64);
                    }
                    tracing::warn!(entries, error = %e, "recording handler successes together failed; each is retried on its own")
                }
                Ok(replies) => {
                    tracing::warn!(entries, replies = replies.len(), "recording handler successes together gave a reply per entry only for some; each is retried on its own")
                }
            }
            for (_, reply) in step {
                let _ = reply.send(None);
            }
        }
    }
}

/// The receipt argument of an outcome script: `run`'s receipt as a receipts stream entry, or
/// empty (none).
/// The receipt result of a handler that finished its entry.
pub(super) const RESULT_OK: &str = "ok";
/// The receipt result of an entry whose event version its handler does not support.
pub const RESULT_SKIPPED_VERSION: &str = "skipped_unsupported_version";

fn receipt_arg(run: Option<&HandlerRun>, result: &'static str, error: Option<&str>) -> String {
    run.map(|run| ReceiptUpdate::Outcome(run.receipt(result, error)).encode())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueKeys;
    use redis::streams::StreamReadOptions;

    async fn redis() -> RedisConn {
        let url =
            std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string());
        crate::redis_conn::RedisTarget::parse(&url)
            .unwrap()
            .shared()
            .await
            .unwrap()
    }

    /// A pending entry on `stream` (delivered to consumer `c`) and its marker held by `owner`.
    async fn delivered_and_claimed(
        conn: &mut RedisConn,
        stream: &str,
        marker: &str,
        owner: &str,
    ) -> String {
        let id: String = conn.xadd(stream, "*", &[("event_id", "1")]).await.unwrap();
        let _: redis::streams::StreamReadReply = conn
            .xread_options(
                &[stream],
                &[">"],
                &StreamReadOptions::default().group(CONSUMER_GROUP, "c"),
            )
            .await
            .unwrap();
        let _: () = conn.set(marker, marker_running(owner)).await.unwrap();
        id
    }

    #[tokio::test]
    async fn successes_recorded_together_keep_each_entrys_own_owner_check() {
        let mut conn = redis().await;
        let keys = QueueKeys::new(format!("outcomes-test-{}:", rand::random::<u32>()));
        let (a, b) = (keys.stream("queue-a"), keys.stream("queue-b"));
        for stream in [&a, &b] {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(stream)
                .arg(CONSUMER_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await
                .unwrap();
        }
        let markers: Vec<String> = (1..=3)
            .map(|i| keys.handled_marker("queue-a", "h", i))
            .collect();
        let ids = [
            delivered_and_claimed(&mut conn, &a, &markers[0], "c:1").await,
            // Taken over: its marker holds another owner's token now.
            delivered_and_claimed(&mut conn, &a, &markers[1], "other:9").await,
            delivered_and_claimed(&mut conn, &b, &markers[2], "c:3").await,
        ];
        let batches = FinishBatches::spawn(conn.clone(), 60);
        let finish = |i: usize, stream: &str, owner: &str| {
            batches.finish(PendingFinish {
                receipts_stream: keys.receipts_stream("queue-a"),
                marker: markers[i].clone(),
                stream: stream.to_string(),
                owner_value: marker_running(owner),
                stream_id: ids[i].clone(),
                receipt: format!("receipt {i}"),
            })
        };
        // Sent at once, so they may share a step; each gets its own answer either way.
        let (first, lost, third) = tokio::join!(
            finish(0, &a, "c:1"),
            finish(1, &a, "c:2"),
            finish(2, &b, "c:3")
        );
        assert_eq!(first, Some(Settled::Recorded));
        assert_eq!(lost, Some(Settled::LostClaim));
        assert_eq!(third, Some(Settled::Recorded));

        let marker = |i: usize| {
            let mut conn = conn.clone();
            let key = markers[i].clone();
            async move { conn.get::<_, Option<String>>(key).await.unwrap() }
        };
        assert_eq!(marker(0).await.as_deref(), Some(MARKER_DONE_OK));
        assert_eq!(
            marker(1).await,
            Some(marker_running("other:9")),
            "the new owner's marker is untouched"
        );
        assert_eq!(marker(2).await.as_deref(), Some(MARKER_DONE_OK));
        let pending = |stream: String| {
            let mut conn = conn.clone();
            async move {
                let reply: redis::streams::StreamPendingReply =
                    conn.xpending(&stream, CONSUMER_GROUP).await.unwrap();
                reply.count()
            }
        };
        assert_eq!(
            pending(a.clone()).await,
            1,
            "only the lost claim's entry is still pending"
        );
        assert_eq!(pending(b.clone()).await, 0);
        let receipts: usize = conn.xlen(keys.receipts_stream("queue-a")).await.unwrap();
        assert_eq!(
            receipts, 2,
            "a receipt for each recorded success, none for the lost one"
        );

        let mut all: Vec<String> = markers.clone();
        all.extend([a, b, keys.receipts_stream("queue-a")]);
        let _: () = conn.del(all).await.unwrap();
    }
}
