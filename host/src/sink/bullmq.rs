//! BullMQ sink: adds each routed event as a job in BullMQ's own Redis format, so that an
//! unmodified `bullmq` `Worker` (BullMQ 5, Node.js) processes it, exactly once per (event,
//! queue).
//!
//! Owns the job's shape and the add script. The script does, key for key, what BullMQ 5's
//! `Queue.add` does through its `addStandardJob`, `addDelayedJob` and `addPrioritizedJob`
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
//! On top of that it sets the host's enqueue marker (as the streams sink does), so a re-claim
//! after a crash between "enqueued" and "marked done" adds nothing twice even when the worker
//! already finished the job and `removeOnComplete` deleted it.
//!
//! Job name = event type; data = the event as JSON (`id`, `type`, `version`, `tenant`,
//! `payload`, `headers`, `dispatchKey`, `orderingKey`, `createdAt`), or with `data = "payload"`
//! the payload alone; job id from the queue's
//! template (default `outbox-<event id>`); options from `[queues."NAME".bullmq]`, read per batch
//! from the routes in force. It never touches PostgreSQL and never decides retries: BullMQ's
//! own `attempts`/`backoff` retry a job whose processor throws.

use std::collections::HashMap;
use std::sync::Arc;

use crate::redis_conn::RedisConn;
use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::script::EnqueueScript;
use super::{Enqueue, EnqueueResult, Sink, SinkError};
use crate::config::{BullmqOptions, JobData, RoutesFile};
use crate::queue::QueueKeys;
use crate::store::ClaimedEvent;

/// The add script. KEYS: 1 the host's enqueue marker, 2 the job hash, 3 `wait`, 4 `paused`,
/// 5 `meta`, 6 `id`, 7 `delayed`, 8 `active`, 9 `events`, 10 `marker`, 11 `prioritized`,
/// 12 `pc`. ARGV: 1 marker TTL (s), 2 job id, 3 name, 4 data, 5 opts (JSON), 6 timestamp (ms),
/// 7 delay (ms), 8 priority. Returns {1, job id} when added, {0, job id} when the marker or
/// the job existed, {-1, error} when a key holds another type than BullMQ's (nothing written:
/// Redis does not roll a script back, so the types are checked before the first write).
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
rcall('HMSET', KEYS[2], 'name', name, 'data', ARGV[4], 'opts', ARGV[5],
  'timestamp', timestamp, 'delay', delay, 'priority', priority)
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

    /// `<prefix>:<name>:<suffix>`: `wait`, `active`, `meta`, ... or a job id (the job hash).
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }
}

/// What the sink writes for one queue in one batch, prepared once per queue.
struct QueueJobs {
    options: BullmqOptions,
    queue_keys: BullmqQueueKeys,
    /// `wait`, `paused`, `meta`, `id`, `delayed`, `active`, `events`, `marker`, `prioritized`,
    /// `pc`: KEYS[3..=12] of the add script.
    keys: [String; 10],
    /// The job options after `"jobId":...,` (a JSON object's remaining members and `}`).
    opts_tail: String,
    delay: u64,
    priority: u32,
}

impl QueueJobs {
    fn new(queue: &str, options: BullmqOptions) -> Self {
        let keys = BullmqQueueKeys::new(&options.prefix, queue);
        let opts = serde_json::Value::Object(options.job_opts()).to_string();
        // `{"attempts":0,...}` -> `"attempts":0,...}`: the job's opts are `{"jobId":ID,` + tail.
        let opts_tail = opts.get(1..).unwrap_or("}").to_string();
        Self {
            delay: options.delay_ms.unwrap_or(0),
            priority: options.priority.unwrap_or(0),
            keys: [
                "wait",
                "paused",
                "meta",
                "id",
                "delayed",
                "active",
                "events",
                "marker",
                "prioritized",
                "pc",
            ]
            .map(|suffix| keys.key(suffix)),
            queue_keys: keys,
            options,
            opts_tail,
        }
    }

    fn job_key(&self, job_id: &str) -> String {
        self.queue_keys.key(job_id)
    }

    fn opts(&self, job_id: &str) -> String {
        let id = serde_json::Value::String(job_id.to_string()).to_string();
        if self.opts_tail == "}" {
            format!("{{\"jobId\":{id}}}")
        } else {
            format!("{{\"jobId\":{id},{}", self.opts_tail)
        }
    }
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

/// The BullMQ sink: per-queue options from the routes in force.
#[derive(Clone)]
pub struct BullmqSink {
    script: EnqueueScript,
    keys: QueueKeys,
    dedupe_ttl_secs: u64,
    routes: Arc<ArcSwap<RoutesFile>>,
}

impl BullmqSink {
    /// A sink over `conn` (the host's Redis), with the host's enqueue markers under `keys`, each
    /// kept `dedupe_ttl_secs`; queue options come from `routes` at each batch. Loads the script.
    pub async fn new(
        conn: RedisConn,
        keys: QueueKeys,
        dedupe_ttl_secs: u64,
        concurrency: usize,
        routes: Arc<ArcSwap<RoutesFile>>,
    ) -> Result<Self, SinkError> {
        let sink = Self {
            script: EnqueueScript::new(conn, ADD_JOB_LUA, "the BullMQ add script", concurrency),
            keys,
            dedupe_ttl_secs: dedupe_ttl_secs.max(1),
            routes,
        };
        sink.script.load().await?;
        Ok(sink)
    }

    /// Each pipeline ends with `WAIT replicas 1000` (see [`super::RedisSink::waiting_for_replicas`]).
    pub fn waiting_for_replicas(mut self, replicas: usize) -> Self {
        self.script = self.script.waiting_for_replicas(replicas);
        self
    }

    /// Add every hand-off as a job, with each queue's options in `routes`. Results come back in
    /// input order; the job id stands where the streams sink gives the entry id.
    pub async fn enqueue_with(
        &self,
        items: &[Enqueue<'_>],
        routes: &RoutesFile,
    ) -> Vec<EnqueueResult> {
        let mut queues: HashMap<&str, QueueJobs> = HashMap::new();
        for item in items {
            queues
                .entry(item.queue)
                .or_insert_with(|| QueueJobs::new(item.queue, routes.bullmq_options(item.queue)));
        }
        let timestamp = chrono::Utc::now().timestamp_millis().max(0);
        let args = |item: &Enqueue<'_>, cmd: &mut redis::Pipeline| {
            let Some(jobs) = queues.get(item.queue) else {
                return;
            };
            let event = item.event;
            let job_id = jobs.options.job_id(event.id, item.queue);
            cmd.arg(12)
                .arg(self.keys.enqueued_marker(item.queue, event.id))
                .arg(jobs.job_key(&job_id));
            for key in &jobs.keys {
                cmd.arg(key);
            }
            cmd.arg(self.dedupe_ttl_secs)
                .arg(&job_id)
                .arg(&event.event_type);
            match jobs.options.data {
                JobData::Event => cmd.arg(job_data(event)),
                JobData::Payload => cmd.arg(&event.payload),
            };
            cmd.arg(jobs.opts(&job_id))
                .arg(timestamp)
                .arg(jobs.delay)
                .arg(jobs.priority);
        };
        self.script.run_all(items, &args).await
    }
}

impl Sink for BullmqSink {
    fn name(&self) -> &str {
        "bullmq"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        async move {
            let routes = self.routes.load_full();
            self.enqueue_with(items, &routes).await
        }
        .boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        super::redis_streams::ping(self.script.connection()).boxed()
    }
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
    fn job_opts_carry_the_job_id_first_then_the_queue_options() {
        let jobs = QueueJobs::new(
            "outbox.mail",
            BullmqOptions {
                attempts: Some(3),
                ..BullmqOptions::default()
            },
        );
        let opts: serde_json::Value = serde_json::from_str(&jobs.opts("outbox-42")).unwrap();
        assert_eq!(
            opts,
            serde_json::json!({"jobId": "outbox-42", "attempts": 3})
        );
        assert_eq!(jobs.job_key("outbox-42"), "bull:outbox.mail:outbox-42");
        assert_eq!(jobs.keys[0], "bull:outbox.mail:wait");
    }
}
