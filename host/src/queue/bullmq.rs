//! BullMQ's wire format: the key layout of a BullMQ 5 queue, its job hash, the job data the
//! host writes, and the script that adds a job key for key as BullMQ 5's `Queue.add` does, so
//! that an unmodified `bullmq` `Worker` (Node.js) processes it.
//!
//! Owns [`BullmqQueueKeys`] (`<prefix>:<queue>:<suffix>`, the suffixes in [`key`]), the job
//! hash's field names ([`job_field`]), [`job_data`] and [`add_job_script`]. The script does
//! what `Queue.add` does through its `addStandardJob`, `addDelayedJob` and `addPrioritizedJob`
//! scripts for a job without parent, repeat or deduplication options:
//!
//! - `INCR <prefix>:<queue>:id` (BullMQ's id counter moves on every add, duplicates included),
//!   and `opts.maxLenEvents` set to 10,000 in `<prefix>:<queue>:meta` unless present;
//! - a job id that exists already (`<prefix>:<queue>:<job id>`) adds nothing and emits
//!   `duplicated` on the events stream: BullMQ's own dedupe, which also keeps a job added by
//!   another producer under the same id (a Node dispatcher run side by side) from being added
//!   twice;
//! - otherwise `HMSET` of the job hash (`name`, `data`, `opts`, `timestamp`, `delay`,
//!   `priority`) and `added` on the events stream, then by the job's options: a delayed job goes
//!   to the `delayed` sorted set (score `(timestamp + delay) * 0x1000` plus a sequence) with a
//!   `delayed` event and the marker set to the next delayed timestamp; a prioritized one to
//!   `prioritized` (score `priority * 2^32 + pc`); any other is `LPUSH`ed on `wait` (`paused`
//!   while the queue is paused), and the `marker` sorted set gets `0` unless the queue is
//!   paused or at its global concurrency, with a `waiting` event.
//!
//! On top of that it sets the host's enqueue marker (as the streams enqueue script does), so a
//! re-claim after a crash between "enqueued" and "marked done" adds nothing twice even when the
//! worker already finished the job and `removeOnComplete` deleted it.
//!
//! Every key reaches the script as a `KEYS` entry built here ([`BullmqQueueKeys::add_job_keys`]);
//! the job hash's field names are filled in from [`job_field`]. The other names in the script
//! (the `meta` hash's `opts.maxLenEvents`, `paused` and `concurrency`, the events stream's
//! `event`, `jobId`, `name` and `delay`) are BullMQ's own and read nowhere on the Rust side.
//! It changes nothing BullMQ 5 would not read, and performs no I/O: the sink runs the script.

use std::sync::LazyLock;

use crate::store::ClaimedEvent;

/// Suffixes of a BullMQ queue's keys (`<prefix>:<queue>:<suffix>`), as BullMQ's `QueueKeys`
/// names them. A job's hash is `<prefix>:<queue>:<job id>`.
pub mod key {
    /// List of jobs waiting for a worker.
    pub const WAIT: &str = "wait";
    /// List of jobs waiting while the queue is paused.
    pub const PAUSED: &str = "paused";
    /// Hash of the queue's settings (`paused`, `concurrency`, `opts.maxLenEvents`).
    pub const META: &str = "meta";
    /// BullMQ's job id counter.
    pub const ID: &str = "id";
    /// Sorted set of delayed jobs (retries in backoff included).
    pub const DELAYED: &str = "delayed";
    /// List of jobs being processed.
    pub const ACTIVE: &str = "active";
    /// The queue's events stream (`QueueEvents` reads it).
    pub const EVENTS: &str = "events";
    /// Sorted set that wakes the workers.
    pub const MARKER: &str = "marker";
    /// Sorted set of prioritized jobs.
    pub const PRIORITIZED: &str = "prioritized";
    /// The prioritized jobs' counter.
    pub const PC: &str = "pc";
    /// Sorted set of completed jobs.
    pub const COMPLETED: &str = "completed";
    /// Sorted set of failed jobs.
    pub const FAILED: &str = "failed";
}

/// Field names of a BullMQ job hash, as `Queue.add` writes them.
pub mod job_field {
    /// The job name (the event type).
    pub const NAME: &str = "name";
    /// The job data (JSON text).
    pub const DATA: &str = "data";
    /// The job options (JSON text; `jobId` first).
    pub const OPTS: &str = "opts";
    /// When the job was added (unix ms).
    pub const TIMESTAMP: &str = "timestamp";
    /// Its delay (ms).
    pub const DELAY: &str = "delay";
    /// Its priority (0: none).
    pub const PRIORITY: &str = "priority";
}

/// KEYS[3..=12] of the add script: the suffixes of the queue's keys it touches, in order.
const ADD_JOB_KEYS: [&str; 10] = [
    key::WAIT,
    key::PAUSED,
    key::META,
    key::ID,
    key::DELAYED,
    key::ACTIVE,
    key::EVENTS,
    key::MARKER,
    key::PRIORITIZED,
    key::PC,
];

/// The keys of one BullMQ queue (`<prefix>:<name>:...`), as BullMQ's `QueueKeys` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BullmqQueueKeys {
    base: String,
}

impl BullmqQueueKeys {
    /// The keys of queue `name` under `prefix`.
    pub fn new(prefix: &str, name: &str) -> Self {
        Self {
            base: format!("{prefix}:{name}:"),
        }
    }

    /// `<prefix>:<name>:<suffix>`: a suffix of [`key`], or a job id (the job hash).
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }

    /// The hash of job `job_id`: `<prefix>:<name>:<job id>`.
    pub fn job(&self, job_id: &str) -> String {
        self.key(job_id)
    }

    /// KEYS[3..=12] of [`add_job_script`]: `wait`, `paused`, `meta`, `id`, `delayed`, `active`,
    /// `events`, `marker`, `prioritized`, `pc`.
    pub fn add_job_keys(&self) -> [String; 10] {
        ADD_JOB_KEYS.map(|suffix| self.key(suffix))
    }
}

/// The add script's template (see [`add_job_script`]); `$NAME`, `$DATA`, `$OPTS`, `$TIMESTAMP`,
/// `$DELAY` and `$PRIORITY` are the [`job_field`] names.
const ADD_JOB_LUA: &str = r#"
local rcall = redis.call
local existing = rcall('GET', KEYS[1])
if existing then return {0, existing} end
-- Refuse before writing anything: a script error halfway would leave a job hash that a retry
-- takes for an added job.
local want = {[2] = 'hash', [3] = 'list', [4] = 'list', [5] = 'hash', [6] = 'string',
  [7] = 'zset', [8] = 'list', [9] = 'stream', [10] = 'zset', [11] = 'zset', [12] = 'string'}
for i = 2, 12 do
  local kind = rcall('TYPE', KEYS[i])['ok']
  if kind ~= 'none' and kind ~= want[i] then
    return {-1, 'WRONGTYPE ' .. KEYS[i] .. ' holds a ' .. kind .. ', not a ' .. want[i] .. ' as BullMQ keeps it'}
  end
end
local jobId = ARGV[2]
rcall('INCR', KEYS[6])
local maxEvents = rcall('HGET', KEYS[5], 'opts.maxLenEvents')
if not maxEvents then
  maxEvents = 10000
  rcall('HSET', KEYS[5], 'opts.maxLenEvents', maxEvents)
end
if rcall('EXISTS', KEYS[2]) == 1 then
  rcall('XADD', KEYS[9], 'MAXLEN', '~', maxEvents, '*', 'event', 'duplicated', 'jobId', jobId)
  rcall('SET', KEYS[1], jobId, 'EX', ARGV[1])
  return {0, jobId}
end
local name = ARGV[3]
local timestamp = tonumber(ARGV[6])
local delay = tonumber(ARGV[7])
local priority = tonumber(ARGV[8])
rcall('HMSET', KEYS[2], $NAME, name, $DATA, ARGV[4], $OPTS, ARGV[5],
  $TIMESTAMP, timestamp, $DELAY, delay, $PRIORITY, priority)
rcall('XADD', KEYS[9], '*', 'event', 'added', 'jobId', jobId, 'name', name)
if delay > 0 then
  local delayedTimestamp = timestamp + delay
  local minScore = delayedTimestamp * 0x1000
  local maxScore = (delayedTimestamp + 1) * 0x1000 - 1
  local score = minScore
  local last = rcall('ZREVRANGEBYSCORE', KEYS[7], maxScore, minScore, 'WITHSCORES', 'LIMIT', 0, 1)
  local lastScore = tonumber(last[2])
  if lastScore ~= nil then
    if lastScore >= maxScore then score = maxScore else score = lastScore + 1 end
  end
  rcall('ZADD', KEYS[7], score, jobId)
  rcall('XADD', KEYS[9], 'MAXLEN', '~', maxEvents, '*', 'event', 'delayed', 'jobId', jobId,
    'delay', delayedTimestamp)
  local first = rcall('ZRANGE', KEYS[7], 0, 0, 'WITHSCORES')
  local next = tonumber(first[2])
  if next ~= nil then rcall('ZADD', KEYS[10], next / 0x1000, '1') end
else
  local meta = rcall('HMGET', KEYS[5], 'paused', 'concurrency')
  local pausedOrMaxed = false
  if meta[1] then
    pausedOrMaxed = true
  elseif meta[2] then
    pausedOrMaxed = rcall('LLEN', KEYS[8]) >= tonumber(meta[2])
  end
  if priority > 0 then
    local counter = rcall('INCR', KEYS[12])
    rcall('ZADD', KEYS[11], priority * 0x100000000 + counter % 0x100000000, jobId)
  elseif meta[1] then
    rcall('LPUSH', KEYS[4], jobId)
  else
    rcall('LPUSH', KEYS[3], jobId)
  end
  if not pausedOrMaxed then rcall('ZADD', KEYS[10], 0, '0') end
  rcall('XADD', KEYS[9], 'MAXLEN', '~', maxEvents, '*', 'event', 'waiting', 'jobId', jobId)
end
rcall('SET', KEYS[1], jobId, 'EX', ARGV[1])
return {1, jobId}
"#;

/// The names [`ADD_JOB_LUA`] is filled in with.
const ADD_JOB_NAMES: [(&str, &str); 6] = [
    ("NAME", job_field::NAME),
    ("DATA", job_field::DATA),
    ("OPTS", job_field::OPTS),
    ("TIMESTAMP", job_field::TIMESTAMP),
    ("DELAY", job_field::DELAY),
    ("PRIORITY", job_field::PRIORITY),
];

static ADD_JOB: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&super::script_with_names(ADD_JOB_LUA, &ADD_JOB_NAMES)));

/// The add script. KEYS: 1 the host's enqueue marker
/// ([`super::QueueKeys::enqueued_marker`]), 2 the job hash ([`BullmqQueueKeys::job`]), 3 to 12
/// [`BullmqQueueKeys::add_job_keys`]. ARGV: 1 marker TTL (s), 2 job id, 3 name, 4 data, 5 opts
/// (JSON), 6 timestamp (ms), 7 delay (ms), 8 priority. Returns {1, job id} when added, {0, job
/// id} when the marker or the job existed, {-1, error} when a key holds another type than
/// BullMQ's (nothing written: Redis does not roll a script back, so the types are checked
/// before the first write).
pub fn add_job_script() -> redis::Script {
    ADD_JOB.clone()
}

/// The job's `data`: the event as JSON. `payload` and `headers` are embedded as they are: they
/// come from PostgreSQL's `jsonb`, so they are valid JSON and never re-serialised.
pub fn job_data(event: &ClaimedEvent) -> String {
    let text = |s: Option<&str>| match s {
        Some(s) => serde_json::Value::String(s.to_string()).to_string(),
        None => "null".to_string(),
    };
    let payload: &str = if event.payload.is_empty() {
        "null"
    } else {
        &event.payload
    };
    let headers: &str = if event.headers.is_empty() {
        "{}"
    } else {
        &event.headers
    };
    format!(
        r#"{{"id":{},"type":{},"version":{},"tenant":{},"payload":{payload},"headers":{headers},"dispatchKey":{},"orderingKey":{},"createdAt":{}}}"#,
        event.id,
        text(Some(&event.event_type)),
        event.event_version,
        text(event.tenant_id.as_deref()),
        text(event.dispatch_key.as_deref()),
        text(event.ordering_key.as_deref()),
        text(Some(
            &event
                .created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        )),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn job_data_is_the_event_as_json_with_payload_and_headers_embedded() {
        let mut event = ClaimedEvent::unclaimed(42, "mail.welcome", r#"{"user": 7, "q": "a\"b"}"#);
        event.tenant_id = Some("acme".into());
        event.headers = r#"{"traceparent": "00-x"}"#.into();
        let data: serde_json::Value = serde_json::from_str(&job_data(&event)).unwrap();
        assert_eq!(data["id"], 42);
        assert_eq!(data["type"], "mail.welcome");
        assert_eq!(data["version"], 1);
        assert_eq!(data["tenant"], "acme");
        assert_eq!(data["payload"], serde_json::json!({"user": 7, "q": "a\"b"}));
        assert_eq!(data["headers"]["traceparent"], "00-x");
        assert_eq!(data["dispatchKey"], serde_json::Value::Null);
        assert_eq!(data["orderingKey"], serde_json::Value::Null);
        assert!(data["createdAt"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn keys_are_bullmqs() {
        let keys = BullmqQueueKeys::new("bull", "outbox.mail");
        assert_eq!(keys.job("outbox-42"), "bull:outbox.mail:outbox-42");
        assert_eq!(keys.key(key::COMPLETED), "bull:outbox.mail:completed");
        let add = keys.add_job_keys();
        assert_eq!(add[0], "bull:outbox.mail:wait");
        assert_eq!(add[9], "bull:outbox.mail:pc");
    }

    #[test]
    fn the_add_script_names_the_job_fields_from_the_constants() {
        let script = super::super::script_with_names(ADD_JOB_LUA, &ADD_JOB_NAMES);
        assert!(!script.contains('$'), "every name filled in");
        assert!(script.contains(
            "rcall('HMSET', KEYS[2], 'name', name, 'data', ARGV[4], 'opts', ARGV[5],\n  'timestamp', timestamp, 'delay', delay, 'priority', priority)"
        ));
        assert_eq!(
            add_job_script().get_hash(),
            redis::Script::new(&script).get_hash()
        );
    }
}
