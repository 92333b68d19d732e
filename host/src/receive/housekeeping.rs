//! Housekeeping: the maintenance services of a queue's receivers, each one round at a time.
//!
//! Owns three services, each with a `run_once(queue)` the receiver calls every housekeeping
//! round (a quarter of the receiver lease, at most 5 s) and a test can call directly:
//! [`RetryMover`] moves due retries from the retry set back into the stream (noting when the
//! next is due, so the receiver moves it then), [`Reclaimer`] takes the entries a consumer held
//! past the receiver lease (`XAUTOCLAIM`), and [`StreamTrimmer`] trims the stream below what
//! every consumer group still needs. Taking a dead host's entries before the lease is the fourth
//! service, in `takeover`. It never trims what a group has not acknowledged and never runs a
//! handler itself: reclaimed entries are returned, and go back through the consumer.

use std::sync::Arc;
use std::time::Duration;

use crate::redis_conn::RedisConn;
use redis::AsyncCommands;

use super::controls::RetriesDue;
use super::{ctx, QueueEntry, ReceiveError, CONSUMER_GROUP};
use crate::queue::QueueKeys;

/// Move due retries back into the stream: KEYS[1] retry set, KEYS[2] stream; ARGV[1] now (ms).
/// Returns {moved, the next retry's due time in ms or -1}.
const MOVE_DUE_LUA: &str = r#"
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(member)))
end
local next = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if next[2] then
  return {#due, math.floor(tonumber(next[2]))}
end
return {#due, -1}
"#;

/// Due retries moved per script call; more are moved on the next call at once.
const MOVE_DUE_BATCH: i64 = 100;

/// Entries reclaimed per `XAUTOCLAIM` call.
const RECLAIM_PAGE: usize = 100;

/// Moves a queue's due retries from its retry set back into its stream.
#[derive(Clone)]
pub struct RetryMover {
    conn: RedisConn,
    keys: QueueKeys,
    script: Arc<redis::Script>,
    /// Where the next retry's due time is noted (shared with the outcomes that schedule them).
    retries_due: Arc<RetriesDue>,
}

impl RetryMover {
    /// A mover on `conn` for the queues of `keys`.
    pub fn new(conn: RedisConn, keys: QueueKeys) -> Self {
        Self::noting_in(conn, keys, Arc::default())
    }

    /// A mover that notes when each queue's next retry is due in `retries_due`.
    pub(super) fn noting_in(
        conn: RedisConn,
        keys: QueueKeys,
        retries_due: Arc<RetriesDue>,
    ) -> Self {
        Self {
            conn,
            keys,
            script: Arc::new(redis::Script::new(MOVE_DUE_LUA)),
            retries_due,
        }
    }

    /// Move `queue`'s due retries (at most a batch of 100) back into its stream, and note when
    /// the next one is due (the receiver moves it then, not at the next housekeeping round; at
    /// once when a full batch moved). Returns how many moved.
    pub async fn run_once(&self, queue: &str) -> Result<i64, ReceiveError> {
        let mut conn = self.conn.clone();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let (moved, next_due): (i64, i64) = ctx(
            self.script
                .key(self.keys.retry_set(queue))
                .key(self.keys.stream(queue))
                .arg(now_ms)
                .invoke_async(&mut conn)
                .await,
            || format!("move due retries of {queue}"),
        )?;
        if moved >= MOVE_DUE_BATCH {
            self.retries_due.note(queue, now_ms);
        } else if next_due >= 0 {
            self.retries_due.note(queue, next_due);
        }
        Ok(moved)
    }
}

/// Takes the entries a consumer held past the receiver lease (it died, or stalled), for one
/// consumer to handle again.
#[derive(Clone)]
pub struct Reclaimer {
    conn: RedisConn,
    keys: QueueKeys,
    consumer: String,
    lease: Duration,
}

impl Reclaimer {
    /// A reclaimer taking entries for `consumer` once they were idle for `lease`.
    pub fn new(conn: RedisConn, keys: QueueKeys, consumer: String, lease: Duration) -> Self {
        Self {
            conn,
            keys,
            consumer,
            lease,
        }
    }

    /// Claim up to 100 entries of `queue` idle past the lease for this consumer (`XAUTOCLAIM`)
    /// and return them, to be handled (their idempotency claims decide whether they run).
    pub async fn run_once(&self, queue: &str) -> Result<Vec<QueueEntry>, ReceiveError> {
        let reply: redis::Value = ctx(
            redis::cmd("XAUTOCLAIM")
                .arg(self.keys.stream(queue))
                .arg(CONSUMER_GROUP)
                .arg(&self.consumer)
                .arg(u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX))
                .arg("0-0")
                .arg("COUNT")
                .arg(RECLAIM_PAGE)
                .query_async(&mut self.conn.clone())
                .await,
            || format!("reclaim stale entries of {queue}"),
        )?;
        let claimed = parse_autoclaim(reply);
        if !claimed.is_empty() {
            tracing::warn!(%queue, count = claimed.len(), "reclaimed entries a consumer held past the lease");
            metrics::counter!("outbox_receiver_reclaimed_total", "queue" => queue.to_string())
                .increment(claimed.len() as u64);
        }
        Ok(claimed)
    }
}

/// Trims a queue's stream below the oldest entry any consumer group still needs.
#[derive(Clone)]
pub struct StreamTrimmer {
    conn: RedisConn,
    keys: QueueKeys,
}

impl StreamTrimmer {
    /// A trimmer on `conn` for the queues of `keys`.
    pub fn new(conn: RedisConn, keys: QueueKeys) -> Self {
        Self { conn, keys }
    }

    /// Trim `queue`'s stream below its oldest pending or unread entry of every group; returns
    /// how many entries went (0 when nothing could be trimmed, or the trim failed: the next
    /// round tries again).
    pub async fn run_once(&self, queue: &str) -> Result<u64, ReceiveError> {
        trim_acknowledged(&mut self.conn.clone(), &self.keys.stream(queue)).await
    }
}

/// The entries of an `XAUTOCLAIM` reply.
fn parse_autoclaim(reply: redis::Value) -> Vec<QueueEntry> {
    // [next-cursor, [[id, [k, v, ...]], ...], [deleted ids]]
    let redis::Value::Array(parts) = reply else {
        return vec![];
    };
    let Some(redis::Value::Array(entries)) = parts.get(1) else {
        return vec![];
    };
    entries
        .iter()
        .filter_map(|e| {
            let redis::Value::Array(pair) = e else {
                return None;
            };
            let id: String = redis::from_redis_value(pair.first()?).ok()?;
            let raw: Vec<String> = redis::from_redis_value(pair.get(1)?).ok()?;
            Some(QueueEntry::from_flat(id, &raw))
        })
        .collect()
}

/// Trim a stream below the oldest entry any consumer group still needs (its oldest pending
/// entry, or what it has not read yet). Streams nobody consumes are never trimmed.
async fn trim_acknowledged(conn: &mut RedisConn, key: &str) -> Result<u64, ReceiveError> {
    let groups: redis::streams::StreamInfoGroupsReply = match conn.xinfo_groups(key).await {
        Ok(g) => g,
        Err(_) => return Ok(0),
    };
    if groups.groups.is_empty() {
        return Ok(0);
    }
    let mut floor: Option<(u64, u64)> = None;
    for group in &groups.groups {
        let needed = if group.pending > 0 {
            let summary: redis::Value = ctx(
                redis::cmd("XPENDING")
                    .arg(key)
                    .arg(&group.name)
                    .query_async(conn)
                    .await,
                || format!("XPENDING {key}"),
            )?;
            match summary {
                redis::Value::Array(parts) => parts
                    .get(1)
                    .and_then(|v| redis::from_redis_value::<String>(v).ok()),
                _ => None,
            }
        } else {
            // Everything delivered is acknowledged: keep from the entry after the last delivered.
            Some(next_id(&group.last_delivered_id))
        };
        let Some(id) = needed.and_then(|id| parse_id(&id)) else {
            return Ok(0);
        };
        floor = Some(floor.map_or(id, |f| f.min(id)));
    }
    let Some((ms, seq)) = floor else {
        return Ok(0);
    };
    let trimmed: redis::RedisResult<u64> = redis::cmd("XTRIM")
        .arg(key)
        .arg("MINID")
        .arg(format!("{ms}-{seq}"))
        .query_async(conn)
        .await;
    Ok(trimmed.unwrap_or(0))
}

fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

fn next_id(id: &str) -> String {
    match parse_id(id) {
        Some((ms, seq)) => format!("{ms}-{}", seq + 1),
        None => "0-0".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> redis::Value {
        redis::Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn autoclaim_reply_becomes_sorted_entries() {
        let reply = redis::Value::Array(vec![
            bulk("0-0"),
            redis::Value::Array(vec![redis::Value::Array(vec![
                bulk("5-1"),
                redis::Value::Array(vec![
                    bulk("payload"),
                    bulk("{}"),
                    bulk("event_id"),
                    bulk("4"),
                ]),
            ])]),
            redis::Value::Array(vec![]),
        ]);
        let entries = parse_autoclaim(reply);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].stream_id, "5-1");
        assert_eq!(entries[0].fields[0], ("event_id".into(), "4".into()));
        assert_eq!(entries[0].event_id(), Some(4));
        assert!(parse_autoclaim(redis::Value::Nil).is_empty());
    }

    #[test]
    fn stream_ids() {
        assert_eq!(parse_id("12-3"), Some((12, 3)));
        assert_eq!(parse_id("nope"), None);
        assert_eq!(next_id("12-3"), "12-4");
        assert_eq!(next_id("bad"), "0-0");
    }
}
