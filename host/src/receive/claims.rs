//! Claims: the idempotency claim one consumer holds on (handler, event) while it runs the
//! handler.
//!
//! Owns the claim ([`Claim`]: `SET NX PX` of the handled marker to `running:<owner token>`, a
//! token unique per claim, refused while the queue's pause key exists: the pause barrier, see
//! `crate::queue_pause`), claiming a read's entries in one round trip ([`Claims::claim_ahead`]),
//! confirming, right before its handler starts, a claim older than [`PAUSE_START_FENCE`], its
//! renewal while the handler runs (`PEXPIRE` of the marker and `XCLAIM` of the entry, every
//! third of the receiver lease: [`Claims::hold`]), and reading whether a marker says `done`.
//! Each step is one script, carried through infrastructure blips on the claim's own owner token,
//! so a retry whose first try was applied recognises its own marker. It never records an
//! outcome (that is `outcomes`, refused there once the marker holds another token) and never
//! runs a handler.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

use super::{blips, ctx, ClaimAhead, QueueEntry, ReceiveError, CONSUMER_GROUP};
use crate::queue::{claim_owner, marker_is_done, marker_running, QueueKeys};
use crate::queue_pause::PAUSE_START_FENCE;
use crate::reconnect::retry_blips;
use crate::redis_conn::RedisConn;

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

/// The claim scripts, loaded once per process.
struct ClaimScripts {
    claim: redis::Script,
    confirm_start: redis::Script,
    renew: redis::Script,
}

/// One consumer's idempotency claim on (handler, event): the handled marker and the owner
/// token it holds while the handler runs. Every outcome recorded with it is refused once the
/// marker holds anything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub(super) queue: String,
    pub(super) handler: String,
    pub(super) event_id: i64,
    pub(super) marker: String,
    pub(super) owner: String,
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

/// The claims one consumer makes, renews and checks: its connection, key names, consumer name
/// and the receiver lease, nothing else.
#[derive(Clone)]
pub(super) struct Claims {
    conn: RedisConn,
    keys: QueueKeys,
    consumer: String,
    lease: Duration,
    scripts: Arc<ClaimScripts>,
}

impl Claims {
    /// Claims of `consumer` on `conn`, each held for `lease` unless renewed.
    pub(super) fn new(conn: RedisConn, keys: QueueKeys, consumer: String, lease: Duration) -> Self {
        Self {
            conn,
            keys,
            consumer,
            lease,
            scripts: Arc::new(ClaimScripts {
                claim: redis::Script::new(CLAIM_LUA),
                confirm_start: redis::Script::new(CONFIRM_START_LUA),
                renew: redis::Script::new(RENEW_LUA),
            }),
        }
    }

    /// The receiver lease in milliseconds.
    fn lease_ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
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

    /// Make `claim` through blips: the marker value carries the claim's owner token, unique to
    /// this delivery, and the claim script takes a marker already holding it for its own, so a
    /// retry whose first try was applied with only its reply lost recognises its own claim
    /// instead of taking it for someone else's (which would leave the entry to the receiver
    /// lease); while the queue is paused it releases that claim instead.
    pub(super) async fn claim(&self, claim: Claim) -> Result<Claimed, ReceiveError> {
        retry_blips(
            "idempotency claim",
            blips::STAGE,
            blips::deadline(self.lease),
            blips::receive_blip,
            || self.claim_once(claim.clone()),
        )
        .await
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

    /// Confirm `claim` right before its handler starts (it is older than
    /// [`PAUSE_START_FENCE`]): see [`StartConfirmed`]. Confirmed, it may start unconfirmed for
    /// another fence.
    async fn confirm_start_once(&self, claim: &mut Claim) -> Result<StartConfirmed, ReceiveError> {
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

    /// [`confirm_start_once`](Self::confirm_start_once) through blips.
    pub(super) async fn confirm_start(
        &self,
        claim: &mut Claim,
    ) -> Result<StartConfirmed, ReceiveError> {
        let (answer, confirmed) = retry_blips(
            "confirm a claim before its handler starts",
            blips::STAGE,
            blips::deadline(self.lease),
            blips::receive_blip,
            || {
                let mut attempt = claim.clone();
                async move {
                    let answer = self.confirm_start_once(&mut attempt).await?;
                    Ok((answer, attempt))
                }
            },
        )
        .await?;
        *claim = confirmed;
        Ok(answer)
    }

    /// Renew `claim` for another receiver lease and claim `stream_id` on `queue` for this
    /// consumer with its idle time reset (so no other consumer reclaims it), in one step and
    /// only while the marker still holds the claim's token. `false`: the claim is lost (it
    /// lapsed, or another consumer holds it now); nothing changed.
    pub(super) async fn renew(
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
    pub(super) async fn hold(&self, queue: &str, claim: &Claim, stream_id: &str) -> Infallible {
        let every = self.lease / 3;
        loop {
            tokio::time::sleep(every).await;
            match self.renew(queue, claim, stream_id).await {
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

    /// Whether `handler` already finished `event_id` on `queue`, retried through blips; an
    /// error that outlasts them counts as not finished.
    pub(super) async fn already_done(&self, queue: &str, handler: &str, event_id: i64) -> bool {
        retry_blips(
            "read the handled marker",
            blips::STAGE,
            blips::deadline(self.lease),
            blips::receive_blip,
            || marker_done(&self.conn, &self.keys, queue, handler, event_id),
        )
        .await
        .unwrap_or(false)
    }
}

/// Whether `handler` already finished `event_id` on `queue` (its marker says `done`).
pub(super) async fn marker_done(
    conn: &RedisConn,
    keys: &QueueKeys,
    queue: &str,
    handler: &str,
    event_id: i64,
) -> Result<bool, ReceiveError> {
    let marker = keys.handled_marker(queue, handler, event_id);
    let state: Option<String> = ctx(conn.clone().get(&marker).await, || {
        format!("read the handled marker {marker}")
    })?;
    Ok(state.as_deref().is_some_and(marker_is_done))
}
