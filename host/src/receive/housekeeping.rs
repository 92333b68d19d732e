//! Housekeeping: the periodic chores of one queue's receiver.
//!
//! Owns moving due retries from the retry set back into the stream (noting when the next is
//! due), reclaiming entries a
//! consumer held past the receiver lease (`XAUTOCLAIM`), and trimming the stream below what
//! every consumer group still needs. It never trims what a group has not acknowledged and never
//! runs a handler itself: reclaimed entries go back through the consumer.

use crate::redis_conn::RedisConn;
use redis::AsyncCommands;

use super::consume::Handling;
use super::{ctx, QueueEntry, ReceiveError, Receivers, CONSUMER_GROUP};

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

/// The script that moves due retries back into a stream.
pub(super) fn move_due_script() -> redis::Script {
    redis::Script::new(MOVE_DUE_LUA)
}

impl Receivers {
    /// Move `queue`'s due retries back into its stream, and note when the next one is due
    /// (the receiver moves it then, not at the next housekeeping round). Returns how many
    /// moved.
    pub(super) async fn move_due_retries(&self, queue: &str) -> Result<i64, ReceiveError> {
        let mut conn = self.conn.clone();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let (moved, next_due): (i64, i64) = ctx(
            self.move_due
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

    /// One round of chores on `queue`: move due retries, reclaim and handle stale entries
    /// (not while the queue is `paused`: they wait, pending, until it resumes), trim
    /// acknowledged ones.
    pub(super) async fn housekeeping(
        &self,
        queue: &str,
        handling: &mut Handling,
        paused: bool,
    ) -> Result<(), ReceiveError> {
        let key = self.keys.stream(queue);
        let mut conn = self.conn.clone();
        self.move_due_retries(queue).await?;
        if paused {
            return trim_acknowledged(&mut conn, &key).await;
        }
        // Entries a dead (or stalled) consumer held longer than the lease.
        let reply: redis::Value = ctx(
            redis::cmd("XAUTOCLAIM")
                .arg(&key)
                .arg(CONSUMER_GROUP)
                .arg(&self.consumer)
                .arg(self.settings.receiver_lease.as_millis() as u64)
                .arg("0-0")
                .arg("COUNT")
                .arg(100)
                .query_async(&mut conn)
                .await,
            || format!("reclaim stale entries of {queue}"),
        )?;
        let claimed = parse_autoclaim(reply);
        if !claimed.is_empty() {
            tracing::warn!(%queue, count = claimed.len(), "reclaimed entries a consumer held past the lease");
            metrics::counter!("outbox_receiver_reclaimed_total", "queue" => queue.to_string())
                .increment(claimed.len() as u64);
        }
        self.spawn_handlers(queue, claimed, handling).await;
        // Entries of a host whose heartbeat stopped: taken now, not after the receiver lease.
        if let Err(e) = self.take_over_dead_consumers(queue, handling).await {
            tracing::warn!(%queue, error = %e, "could not take over the entries of a host whose heartbeat stopped; they wait for the receiver lease");
        }
        trim_acknowledged(&mut conn, &key).await
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
async fn trim_acknowledged(conn: &mut RedisConn, key: &str) -> Result<(), ReceiveError> {
    let groups: redis::streams::StreamInfoGroupsReply = match conn.xinfo_groups(key).await {
        Ok(g) => g,
        Err(_) => return Ok(()),
    };
    if groups.groups.is_empty() {
        return Ok(());
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
            return Ok(());
        };
        floor = Some(floor.map_or(id, |f| f.min(id)));
    }
    if let Some((ms, seq)) = floor {
        let _: redis::RedisResult<i64> = redis::cmd("XTRIM")
            .arg(key)
            .arg("MINID")
            .arg(format!("{ms}-{seq}"))
            .query_async(conn)
            .await;
    }
    Ok(())
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
