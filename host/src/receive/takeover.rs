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
//! [`DeadHostTakeover::run_once`] is one round on one queue: the receiver calls it every
//! housekeeping round, a test directly.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use super::{ctx, QueueEntry, ReceiveError, CONSUMER_GROUP};
use crate::queue::{marker_running, QueueKeys};
use crate::redis_conn::RedisConn;
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
struct DeadHosts {
    known: Mutex<Option<(Instant, Vec<String>)>>,
}

/// Takes the entries of a queue that the receivers of hosts whose heartbeat stopped held, for
/// one consumer to handle.
#[derive(Clone)]
pub struct DeadHostTakeover {
    /// Where the hosts' heartbeats are read.
    pool: PgPool,
    conn: RedisConn,
    keys: QueueKeys,
    consumer: String,
    lease: Duration,
    script: Arc<redis::Script>,
    /// The hosts whose heartbeat stopped, as last looked up.
    dead_hosts: Arc<DeadHosts>,
}

impl DeadHostTakeover {
    /// A takeover for `consumer`, reading heartbeats from `pool`, with the receiver `lease`.
    pub fn new(
        pool: PgPool,
        conn: RedisConn,
        keys: QueueKeys,
        consumer: String,
        lease: Duration,
    ) -> Self {
        Self {
            pool,
            conn,
            keys,
            consumer,
            lease,
            script: Arc::new(redis::Script::new(TAKE_OVER_LUA)),
            dead_hosts: Arc::default(),
        }
    }

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
        let hosts = match store::stale_host_ids(&self.pool, store::STALE_HOST_AFTER).await {
            Ok(hosts) => hosts.into_iter().filter(|w| *w != self.consumer).collect(),
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

    /// Take the entries of `queue` (consumed by `handler`) that dead hosts' receivers held
    /// (see the module docs) and return them, to be handled like reclaimed ones.
    pub async fn run_once(
        &self,
        queue: &str,
        handler: &str,
    ) -> Result<Vec<QueueEntry>, ReceiveError> {
        let dead = self.dead_consumers().await;
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        let key = self.keys.stream(queue);
        let lease = self.lease;
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
                    self.script
                        .key(&key)
                        .key(self.keys.handled_marker(queue, handler, event_id))
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
        if !taken.is_empty() {
            metrics::counter!("outbox_receiver_taken_over_total", "queue" => queue.to_string())
                .increment(taken.len() as u64);
        }
        Ok(taken)
    }
}
