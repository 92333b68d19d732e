//! The audit after a chaos run: what happened to every event, computed from the database and
//! the Redis streams, never from what the hosts say about themselves.
//!
//! - every committed event exists and is `done`, or `failed` by design (no route) with that
//!   reason; none is `pending`, none `processing` past its lease;
//! - every `done` event has exactly one dispatcher entry in each of its destination streams (a
//!   receiver retry re-adds an entry with `handler_attempt`; those are counted apart), and no
//!   stream holds an entry of an event that does not exist or did not go there;
//! - no rolled-back event exists, in the table or in a stream;
//! - every entry of a handler queue was handled to completion once: its `done` idempotency
//!   marker, an `ok` receipt, its children exactly once (three `workflow.execution.requested`
//!   per trigger, one executor job per execution, one invoke job and one `probe.seen` per hook
//!   subscriber), nothing in a dead-letter stream, nothing unacknowledged or waiting to retry.

use std::collections::{HashMap, HashSet};

use redis::aio::MultiplexedConnection;

use super::producers::{Kind, Produced};
use super::world::{
    destinations, World, HANDLER_QUEUES, QUEUES, RECEIVER_LEASE, SUBSCRIBERS, WORKFLOWS,
};

/// Counts the summary line reports, and examples of what went wrong.
#[derive(Default, Debug)]
pub struct Audit {
    /// Committed producer events.
    pub committed: usize,
    /// Events the handlers published (children).
    pub children: usize,
    /// Rolled-back producer events.
    pub rolled_back: usize,
    /// Events failed by design (no route), with that reason.
    pub failed_by_design: usize,
    /// Missing: a committed event not in the table or not finished, a missing stream entry, an
    /// unfinished handler (no done marker, no ok receipt, a dead letter), a missing child.
    pub lost: usize,
    /// Doubled: more than one dispatcher entry per (event, destination), more children than
    /// the handler publishes once.
    pub duplicated: usize,
    /// Stuck: an event `pending`, or `processing` past its lease; an entry unacknowledged past
    /// the receiver lease, or still waiting to retry.
    pub stuck: usize,
    /// A rolled-back event (or an event nobody published) seen in the table or a stream.
    pub phantom: usize,
    /// Handler entries whose work is recorded done in Redis (the handled marker says `done`) but
    /// whose `ok` receipt row is missing once the receipts stream is empty: the outcome step
    /// appends the receipt atomically with the acknowledgement, so a killed host must not lose
    /// one.
    pub receipts_lost: usize,
    /// Receiver retries seen in the handler streams (re-added entries; not a fault).
    pub handler_retries: usize,
    /// The first few findings, for the failure message.
    pub examples: Vec<String>,
}

impl Audit {
    fn note(&mut self, what: String) {
        if self.examples.len() < 20 {
            self.examples.push(what);
        }
    }

    /// Whether nothing was lost, doubled, stuck or made up.
    pub fn clean(&self) -> bool {
        self.lost == 0
            && self.duplicated == 0
            && self.stuck == 0
            && self.phantom == 0
            && self.receipts_lost == 0
    }
}

struct Row {
    id: i64,
    event_type: String,
    dispatch_key: Option<String>,
    status: String,
    last_error: String,
    expired: bool,
    payload: serde_json::Value,
}

/// Dispatcher entries per (queue, event id), receiver retries per queue, and entries whose
/// event id is not a number.
async fn stream_counts(
    redis: &mut MultiplexedConnection,
    prefix: &str,
) -> (HashMap<(&'static str, i64), usize>, usize, usize) {
    let mut counts = HashMap::new();
    let (mut retries, mut malformed) = (0, 0);
    for queue in QUEUES {
        let key = format!("{prefix}{queue}");
        let mut start = "-".to_string();
        loop {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&key)
                .arg(&start)
                .arg("+")
                .arg("COUNT")
                .arg(10_000)
                .query_async(redis)
                .await
                .unwrap();
            let Some(last) = reply.ids.last().map(|e| e.id.clone()) else {
                break;
            };
            for entry in &reply.ids {
                if entry.map.contains_key("handler_attempt") {
                    retries += 1;
                    continue;
                }
                match entry
                    .get::<String>("event_id")
                    .and_then(|s| s.parse::<i64>().ok())
                {
                    Some(id) => *counts.entry((queue, id)).or_insert(0) += 1,
                    None => malformed += 1,
                }
            }
            start = format!("({last}");
        }
    }
    (counts, retries, malformed)
}

/// One `outbox_event` row as the audit reads it: id, type, dispatch key, status, last error,
/// whether its lease ran out while `processing`, payload.
type EventRow = (
    i64,
    String,
    Option<String>,
    String,
    String,
    bool,
    serde_json::Value,
);

/// Audit the run.
pub async fn audit(world: &World, produced: &Produced) -> Audit {
    let mut a = Audit {
        rolled_back: produced.rolled_back.len(),
        ..Audit::default()
    };
    let rows: Vec<EventRow> = sqlx::query_as(
        "SELECT id, event_type, dispatch_key, status::text, coalesce(last_error, ''),
                    status = 'processing' AND claim_expires_at < now(), payload
             FROM outbox_event ORDER BY id",
    )
    .fetch_all(&world.pool)
    .await
    .unwrap();
    let rows: Vec<Row> = rows
        .into_iter()
        .map(
            |(id, event_type, dispatch_key, status, last_error, expired, payload)| Row {
                id,
                event_type,
                dispatch_key,
                status,
                last_error,
                expired,
                payload,
            },
        )
        .collect();
    let by_key: HashMap<&str, &Row> = rows
        .iter()
        .filter_map(|r| r.dispatch_key.as_deref().map(|k| (k, r)))
        .collect();

    // Committed producer events: each in the table, with the type it was published as.
    let mut committed: HashMap<&str, Kind> = produced
        .committed
        .iter()
        .map(|(k, kind)| (k.as_str(), *kind))
        .collect();
    for (key, kind) in &produced.uncertain {
        if by_key.contains_key(key.as_str()) {
            committed.insert(key, *kind);
        }
    }
    a.committed = committed.len();
    for (key, kind) in &committed {
        match by_key.get(key) {
            None => {
                a.lost += 1;
                a.note(format!("committed event {key} is not in outbox_event"));
            }
            Some(row) if row.event_type != kind.event_type() => {
                a.lost += 1;
                a.note(format!(
                    "event {} ({key}) has type {}",
                    row.id, row.event_type
                ));
            }
            Some(_) => {}
        }
    }
    for key in &produced.rolled_back {
        if let Some(row) = by_key.get(key.as_str()) {
            a.phantom += 1;
            a.note(format!(
                "rolled-back event {key} is in the table as {}",
                row.id
            ));
        }
    }

    // Every event in the table: where it came from, how it ended, and its stream entries.
    let mut redis = world.redis.clone();
    let (mut entries, retries, malformed) = stream_counts(&mut redis, &world.prefix).await;
    a.handler_retries = retries;
    if malformed > 0 {
        a.phantom += malformed;
        a.note(format!("{malformed} stream entries without an event id"));
    }
    let receipts: Vec<(i64, String, String)> =
        sqlx::query_as("SELECT event_id, handler, result FROM outbox_receipt")
            .fetch_all(&world.pool)
            .await
            .unwrap();
    let receipts: HashMap<(i64, String), String> = receipts
        .into_iter()
        .map(|(id, handler, result)| ((id, handler), result))
        .collect();
    let mut handled: Vec<(&'static str, i64)> = Vec::new();
    // Children per parent: execution requests per trigger, executor jobs per execution,
    // invoke jobs per (hook, subscriber), probe.seen per (hook, subscriber).
    let mut executions: HashMap<i64, usize> = HashMap::new();
    let mut jobs: HashMap<i64, usize> = HashMap::new();
    let mut invokes: HashMap<(i64, String), usize> = HashMap::new();
    let mut seen: HashMap<(i64, String), usize> = HashMap::new();
    for row in &rows {
        let key = row.dispatch_key.as_deref().unwrap_or("");
        if key.starts_with("child:") {
            a.children += 1;
        } else if !committed.contains_key(key) {
            a.phantom += 1;
            a.note(format!(
                "event {} ({}, key {key:?}) was published by nobody",
                row.id, row.event_type
            ));
        }
        match row.event_type.as_str() {
            "workflow.execution.requested" => {
                let parent = row.payload["trigger_event_id"].as_i64().unwrap_or(0);
                *executions.entry(parent).or_insert(0) += 1;
            }
            "workflow.executor.job" => {
                let parent = row.payload["source_event_id"].as_i64().unwrap_or(0);
                *jobs.entry(parent).or_insert(0) += 1;
            }
            "probe.seen" => {
                let parent = row.payload["event_id"].as_i64().unwrap_or(0);
                // child:<parent>:<plugin>:<index>
                let plugin = key.split(':').nth(2).unwrap_or("").to_string();
                *seen.entry((parent, plugin)).or_insert(0) += 1;
            }
            t if t.starts_with("plugin.invoke.") => {
                let parent = row.payload["event"]["id"].as_i64().unwrap_or(0);
                let plugin = t.trim_start_matches("plugin.invoke.").to_string();
                *invokes.entry((parent, plugin)).or_insert(0) += 1;
            }
            _ => {}
        }
        let Some(queues) = destinations(&row.event_type) else {
            if row.status == "failed" && row.last_error.contains("no route") {
                a.failed_by_design += 1;
            } else {
                a.lost += 1;
                a.note(format!(
                    "unroutable event {} is {} ({:?}), not failed for want of a route",
                    row.id, row.status, row.last_error
                ));
            }
            continue;
        };
        match row.status.as_str() {
            "done" => {}
            "pending" => {
                a.stuck += 1;
                a.note(format!(
                    "event {} ({}) is still pending",
                    row.id, row.event_type
                ));
                continue;
            }
            "processing" => {
                a.stuck += 1;
                a.note(format!(
                    "event {} ({}) is processing{}",
                    row.id,
                    row.event_type,
                    if row.expired { " past its lease" } else { "" }
                ));
                continue;
            }
            other => {
                a.lost += 1;
                a.note(format!(
                    "event {} ({}) is {other}: {}",
                    row.id, row.event_type, row.last_error
                ));
                continue;
            }
        }
        for queue in queues {
            match entries.remove(&(*queue, row.id)).unwrap_or(0) {
                1 => {}
                0 => {
                    a.lost += 1;
                    a.note(format!("done event {} has no entry in {queue}", row.id));
                }
                n => {
                    a.duplicated += n - 1;
                    a.note(format!("done event {} is {n} times in {queue}", row.id));
                }
            }
            if HANDLER_QUEUES.iter().any(|(q, _)| q == queue) {
                handled.push((*queue, row.id));
            }
        }
    }
    for ((queue, id), n) in entries {
        a.phantom += n;
        a.note(format!(
            "{queue} holds {n} entries of event {id}, which is not a done event routed there"
        ));
    }

    // Handler work: the done marker and an ok receipt per (event, handler).
    let handler_of: HashMap<&str, &str> = HANDLER_QUEUES.iter().copied().collect();
    let rows_by_id: HashMap<i64, &Row> = rows.iter().map(|r| (r.id, r)).collect();
    for chunk in handled.chunks(1000) {
        let keys: Vec<String> = chunk
            .iter()
            .map(|(queue, id)| format!("{}outbox:handled:{}:{id}", world.prefix, handler_of[queue]))
            .collect();
        let markers: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&keys)
            .query_async(&mut redis)
            .await
            .unwrap();
        for ((queue, id), marker) in chunk.iter().zip(markers) {
            if !marker
                .as_deref()
                .is_some_and(outbox_host::queue::marker_is_done)
            {
                a.lost += 1;
                a.note(format!(
                    "{queue} entry of event {id}: handled marker {marker:?}"
                ));
                continue;
            }
            // Whom the receipt names: a plugin-invoke job's is the subscriber's, on the hook event.
            let receipt_key = if *queue == "outbox.plugin-invoke" {
                let row = rows_by_id[id];
                (
                    row.payload["event"]["id"].as_i64().unwrap_or(0),
                    row.event_type
                        .trim_start_matches("plugin.invoke.")
                        .to_string(),
                )
            } else {
                (*id, handler_of[queue].to_string())
            };
            match receipts.get(&receipt_key).map(String::as_str) {
                Some("ok") => {}
                other => {
                    a.receipts_lost += 1;
                    a.note(format!(
                        "{queue} entry of event {id}: done, but receipt {receipt_key:?} is {other:?}"
                    ));
                }
            }
        }
    }

    // Children, exactly once each.
    let mut parents_seen: HashSet<i64> = HashSet::new();
    for row in &rows {
        if row.status != "done" {
            continue;
        }
        match row.event_type.as_str() {
            "workflow.trigger.event" => {
                parents_seen.insert(row.id);
                let got = executions.get(&row.id).copied().unwrap_or(0);
                expect(
                    &mut a,
                    format!("executions of trigger {}", row.id),
                    got,
                    WORKFLOWS.len(),
                );
            }
            "workflow.execution.requested" => {
                parents_seen.insert(row.id);
                let got = jobs.get(&row.id).copied().unwrap_or(0);
                expect(
                    &mut a,
                    format!("executor jobs of execution {}", row.id),
                    got,
                    1,
                );
            }
            "plugin.hook.chaos" => {
                parents_seen.insert(row.id);
                for plugin in SUBSCRIBERS {
                    let key = (row.id, plugin.to_string());
                    let got = invokes.get(&key).copied().unwrap_or(0);
                    expect(
                        &mut a,
                        format!("invoke jobs of hook {} for {plugin}", row.id),
                        got,
                        1,
                    );
                    let got = seen.get(&key).copied().unwrap_or(0);
                    expect(
                        &mut a,
                        format!("runs of {plugin} on hook {}", row.id),
                        got,
                        1,
                    );
                }
            }
            _ => {}
        }
    }
    let orphans = executions
        .keys()
        .chain(jobs.keys())
        .chain(invokes.keys().map(|(p, _)| p))
        .chain(seen.keys().map(|(p, _)| p))
        .filter(|p| !parents_seen.contains(p))
        .count();
    if orphans > 0 {
        a.phantom += orphans;
        a.note(format!(
            "{orphans} children of parents that are not done events"
        ));
    }

    // Receivers: nothing unacknowledged, nothing waiting to retry, nothing given up.
    for (queue, _) in HANDLER_QUEUES {
        let key = format!("{}{queue}", world.prefix);
        let idle: redis::Value = redis::cmd("XPENDING")
            .arg(&key)
            .arg("outbox")
            .arg("IDLE")
            .arg(u64::try_from(RECEIVER_LEASE.as_millis()).unwrap())
            .arg("-")
            .arg("+")
            .arg(1000)
            .query_async(&mut redis)
            .await
            .unwrap();
        let stale = match idle {
            redis::Value::Array(items) => items.len(),
            _ => 0,
        };
        let (pending, lag) = group_backlog(&mut redis, &key).await;
        if stale > 0 || pending > 0 || lag > 0 {
            a.stuck += pending.max(stale) + lag;
            a.note(format!(
                "{queue}: {pending} unacknowledged ({stale} past the receiver lease), {lag} unread"
            ));
        }
        let retrying: usize = redis::cmd("ZCARD")
            .arg(format!("{}outbox:retry:{queue}", world.prefix))
            .query_async(&mut redis)
            .await
            .unwrap();
        if retrying > 0 {
            a.stuck += retrying;
            a.note(format!("{queue}: {retrying} entries waiting to retry"));
        }
        let dead: usize = redis::cmd("XLEN")
            .arg(format!("{}{queue}.dead-letter", world.prefix))
            .query_async(&mut redis)
            .await
            .unwrap();
        if dead > 0 {
            a.lost += dead;
            a.note(format!("{queue}: {dead} entries dead-lettered"));
        }
    }
    a
}

/// Count `got` children against `want`: fewer are lost, more are doubled.
fn expect(a: &mut Audit, what: String, got: usize, want: usize) {
    if got < want {
        a.lost += want - got;
        a.note(format!("{what}: {got} of {want}"));
    } else if got > want {
        a.duplicated += got - want;
        a.note(format!("{what}: {got}, want {want}"));
    }
}

/// The `outbox` consumer group's unacknowledged and unread entries on a stream.
pub async fn group_backlog(redis: &mut MultiplexedConnection, key: &str) -> (usize, usize) {
    let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(key)
        .query_async(redis)
        .await
        .unwrap_or_default();
    for group in groups {
        let name: String = group
            .get("name")
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_default();
        if name != "outbox" {
            continue;
        }
        let pending: usize = group
            .get("pending")
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or(0);
        // Unread: the group has not been handed the stream's last entry yet.
        let delivered: String = group
            .get("last-delivered-id")
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_default();
        let stream: HashMap<String, redis::Value> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(key)
            .query_async(redis)
            .await
            .unwrap_or_default();
        let last: String = stream
            .get("last-generated-id")
            .and_then(|v| redis::from_redis_value(v).ok())
            .unwrap_or_default();
        let lag = usize::from(delivered != last);
        return (pending, lag);
    }
    // No group yet: nothing was ever consumed; unread is whatever the stream holds.
    let len: usize = redis::cmd("XLEN")
        .arg(key)
        .query_async(redis)
        .await
        .unwrap_or(0);
    (0, len)
}
