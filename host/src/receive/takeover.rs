//! Takeover: the entries a dead host's receivers held, taken by a live receiver once that host's
//! heartbeat has stopped, instead of after the receiver lease.
//!
//! A host whose heartbeat (`outbox_worker.last_seen`) is older than
//! [`STALE_HOST_AFTER`](crate::store::STALE_HOST_AFTER) gives back its outbox claims
//! (`store::release_stale_claims`); this module does the same for the entries its receivers
//! read and did not finish, which otherwise wait for `OUTBOX_RECEIVER_LEASE_MS` (set long when
//! handlers are slow). Each entry of such a consumer is taken in one owner-checked script: only
//! while it is still pending for that consumer and idle, and, when its idempotency claim is the
//! dead consumer's, only when that claim has not been renewed for more than a renewal interval
//! (a third of the lease) plus [`RENEWAL_MARGIN`]: a receiver that is alive renews its claims
//! every third of the lease whatever its database connection does, so a host that only lost
//! PostgreSQL never has a running handler's entry taken. The claim is then cleared in the same
//! script and the entry handled here like a reclaimed one (its idempotency claim decides). It
//! never takes an entry another live consumer holds, and never clears a claim that is renewed.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::consume::Handling;
use super::{ctx, QueueEntry, ReceiveError, Receivers, CONSUMER_GROUP};
use crate::queue::marker_running;
use crate::store;

/// How often the silent hosts are looked up in PostgreSQL (per receiver process).
const DEAD_HOSTS_REFRESH: Duration = Duration::from_secs(15);

/// A claim not renewed for a renewal interval plus this long belongs to a receiver that stopped.
const RENEWAL_MARGIN: Duration = Duration::from_secs(5);

/// Pending entries of one dead consumer looked at per queue and round.
const TAKEOVER_PAGE: usize = 100;

/// Take one entry of a dead consumer. KEYS: the stream, the entry's handled marker. ARGV: the
/// group, this consumer, the entry id, the dead consumer, the marker value prefix of its claims,
/// the largest remaining time to live (ms) of a claim it no longer renews, the least idle time
/// (ms). Returns 1 when taken, 0 when the entry is no longer the dead consumer's (acknowledged,
/// taken by another, or not idle), -1 when its claim was renewed recently (left alone).
const TAKE_OVER_LUA: &str = r#"
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], 'IDLE', ARGV[7], ARGV[3], ARGV[3], 1)
if #pending == 0 or pending[1][2] ~= ARGV[4] then
  return 0
end
local claim = redis.call('GET', KEYS[2])
if claim and string.sub(claim, 1, #ARGV[5]) == ARGV[5] then
  if redis.call('PTTL', KEYS[2]) > tonumber(ARGV[6]) then
    return -1
  end
  redis.call('DEL', KEYS[2])
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3])
return 1
"#;

/// The hosts whose heartbeat stopped, as last looked up.
#[derive(Default)]
pub(super) struct DeadHosts {
    known: Mutex<Option<(Instant, Vec<String>)>>,
}

impl Receivers {
    /// The consumers (host ids) whose heartbeat is older than `STALE_HOST_AFTER`, this one
    /// excepted; looked up at most every [`DEAD_HOSTS_REFRESH`].
    async fn dead_consumers(&self) -> Vec<String> {
        let fresh = self.dead_hosts.known.lock().ok().and_then(|known| {
            known
                .as_ref()
                .filter(|(at, _)| at.elapsed() < DEAD_HOSTS_REFRESH)
                .map(|(_, hosts)| hosts.clone())
        });
        if let Some(hosts) = fresh {
            return hosts;
        }
        let hosts = match store::stale_hosts(self.handler_host.pool(), store::STALE_HOST_AFTER)
            .await
        {
            Ok(hosts) => hosts
                .into_iter()
                .map(|h| h.worker)
                .filter(|w| *w != self.consumer)
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot look up hosts whose heartbeat stopped; their entries wait for the receiver lease");
                Vec::new()
            }
        };
        if let Ok(mut known) = self.dead_hosts.known.lock() {
            *known = Some((Instant::now(), hosts.clone()));
        }
        hosts
    }

    /// Take the entries of `queue` that dead hosts' receivers held (see the module docs) and
    /// hand them to handler tasks. Returns how many were taken.
    pub(super) async fn take_over_dead_consumers(
        &self,
        queue: &str,
        handling: &mut Handling,
    ) -> Result<usize, ReceiveError> {
        let dead = self.dead_consumers().await;
        if dead.is_empty() {
            return Ok(0);
        }
        let Some(handler) = self.live.routes.load().handlers.get(queue).cloned() else {
            return Ok(0);
        };
        let key = self.keys.stream(queue);
        let lease = self.settings.receiver_lease;
        let renewed_within = lease
            .saturating_sub(lease / 3)
            .saturating_sub(RENEWAL_MARGIN);
        // An entry just read has no claim yet: leave its reader a moment to make one.
        let min_idle = RENEWAL_MARGIN.min(lease);
        let mut conn = self.conn.clone();
        let mut taken = Vec::new();
        for consumer in dead {
            let pending: Vec<(String, String, u64, u64)> = ctx(
                redis::cmd("XPENDING")
                    .arg(&key)
                    .arg(CONSUMER_GROUP)
                    .arg("-")
                    .arg("+")
                    .arg(TAKEOVER_PAGE)
                    .arg(&consumer)
                    .query_async(&mut conn)
                    .await,
                || format!("pending entries of {consumer} on {queue}"),
            )?;
            let claim_prefix = marker_running(&format!("{consumer}:"));
            for (id, _, _, _) in pending {
                let read: redis::streams::StreamRangeReply = ctx(
                    redis::cmd("XRANGE")
                        .arg(&key)
                        .arg(&id)
                        .arg(&id)
                        .query_async(&mut conn)
                        .await,
                    || format!("read entry {id} of {queue}"),
                )?;
                let Some(entry) = read.ids.first().map(QueueEntry::from_stream) else {
                    continue;
                };
                let event_id = entry.event_id().unwrap_or(0);
                let outcome: i64 = ctx(
                    self.take_over
                        .key(&key)
                        .key(self.keys.handled_marker(queue, &handler, event_id))
                        .arg(CONSUMER_GROUP)
                        .arg(&self.consumer)
                        .arg(&id)
                        .arg(&consumer)
                        .arg(&claim_prefix)
                        .arg(u64::try_from(renewed_within.as_millis()).unwrap_or(u64::MAX))
                        .arg(u64::try_from(min_idle.as_millis()).unwrap_or(u64::MAX))
                        .invoke_async(&mut conn)
                        .await,
                    || format!("take over entry {id} of {queue} from {consumer}"),
                )?;
                if outcome == 1 {
                    taken.push(entry);
                }
            }
            if !taken.is_empty() {
                tracing::warn!(%queue, host = %consumer, count = taken.len(), silent_for = ?store::STALE_HOST_AFTER, "took over the entries of a host whose heartbeat stopped");
            }
        }
        let count = taken.len();
        if count > 0 {
            metrics::counter!("outbox_receiver_taken_over_total", "queue" => queue.to_string())
                .increment(count as u64);
            self.spawn_handlers(queue, taken, handling).await;
        }
        Ok(count)
    }
}

/// The takeover script.
pub(super) fn take_over_script() -> redis::Script {
    redis::Script::new(TAKE_OVER_LUA)
}
