//! Redis Streams sink: hands routed events to Redis Streams, exactly once per (event, queue).
//!
//! Owns the Redis side of dispatch: the enqueue script (set-if-absent marker + `XADD`, one
//! round trip, atomic), pipelining a batch, bounded concurrency, and reconnects. A re-claim after
//! a crash between "enqueued" and "marked done" finds the marker and adds nothing twice. Key
//! names and entry fields come from [`crate::queue`]; it never builds one itself.
//!
//! Results are per entry: a pipeline's replies are read one by one (an error reply fails its
//! entry only), and a connection that breaks under a pipeline fails the entries of that pipeline
//! as [`EnqueueResult::Unavailable`] while the other pipelines' entries keep their results.
//! `NOSCRIPT` (Redis restarted or its scripts were flushed): `EVALSHA` in a pipeline does not fall
//! back to loading the script the way `redis::Script::invoke_async` does for a single call (redis
//! crate 0.32), so this sink loads it and runs the entries that got `NOSCRIPT` once more.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use futures::FutureExt;
use redis::aio::{ConnectionLike, ConnectionManager};
use redis::Value;

use super::{Enqueue, EnqueueResult, Sink, SinkError};
use crate::fault::{self, BlipKind};
use crate::queue::{QueueEntry, QueueKeys};

/// Enqueue script. KEYS[1] = dedupe marker, KEYS[2] = stream; ARGV[1] = marker TTL (s),
/// ARGV[2..] = stream field/value pairs. Returns {1, entry id} when added, {0, entry id} when the
/// marker existed, {-1, error} when `XADD` failed (nothing written).
const ENQUEUE_LUA: &str = r#"
local existing = redis.call('GET', KEYS[1])
if existing then return {0, existing} end
local added = redis.pcall('XADD', KEYS[2], '*', unpack(ARGV, 2))
if type(added) == 'table' and added.err then return {-1, added.err} end
redis.call('SET', KEYS[1], added, 'EX', ARGV[1])
return {1, added}
"#;

/// The Redis Streams sink.
#[derive(Clone)]
pub struct RedisSink {
    conn: ConnectionManager,
    script: redis::Script,
    keys: QueueKeys,
    dedupe_ttl_secs: u64,
    concurrency: usize,
}

/// How many hand-offs go into one pipeline.
const PIPELINE_CHUNK: usize = 128;

impl RedisSink {
    /// Connect (one attempt; the dispatcher retries with backoff). Commands time out after 5 s
    /// so a hung Redis fails a batch instead of stalling the host.
    pub async fn connect(
        redis_url: &str,
        prefix: &str,
        dedupe_ttl: Duration,
        concurrency: usize,
    ) -> Result<Self, SinkError> {
        let client = redis::Client::open(redis_url)
            .map_err(|source| SinkError::new(format!("invalid REDIS_URL {redis_url:?}"), source))?;
        let conn =
            ConnectionManager::new_with_config(client, crate::reconnect::redis_manager_config())
                .await
                .map_err(|source| {
                    SinkError::new(
                        format!("connect to Redis at {}", crate::store::redact(redis_url)),
                        source,
                    )
                })?;
        let sink = Self {
            conn,
            script: redis::Script::new(ENQUEUE_LUA),
            keys: QueueKeys::new(prefix),
            dedupe_ttl_secs: dedupe_ttl.as_secs().max(1),
            concurrency: concurrency.max(1),
        };
        sink.load_script().await?;
        Ok(sink)
    }

    /// [`connect`](Self::connect) with `REDIS_URL`, `OUTBOX_REDIS_PREFIX`, the dedupe TTL and
    /// `OUTBOX_DISPATCH_CONCURRENCY` from `settings`.
    pub async fn from_settings(settings: &crate::config::Settings) -> Result<Self, SinkError> {
        Self::connect(
            &settings.redis_url,
            &settings.redis_prefix,
            settings.dedupe_ttl,
            settings.dispatch_concurrency,
        )
        .await
    }

    /// The Redis keys this sink writes.
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// Check Redis answers.
    pub async fn ping(&self) -> Result<(), SinkError> {
        let mut conn = self.conn.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(|_| ())
            .map_err(|source| SinkError::new("ping Redis", source))
    }

    async fn load_script(&self) -> Result<(), SinkError> {
        let mut conn = self.conn.clone();
        self.script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .map(|_| ())
            .map_err(|source| SinkError::new("load the enqueue script into Redis", source))
    }

    /// Enqueue every hand-off: pipelines of up to 128, at most `concurrency` in flight. Results
    /// come back in input order. A transport failure fails the entries of that pipeline only.
    pub async fn enqueue_all(&self, items: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        let pipelines: Vec<_> = items
            .chunks(PIPELINE_CHUNK)
            .enumerate()
            .map(|(i, chunk)| self.enqueue_chunk(chunk).map(move |r| (i, r)))
            .collect();
        let mut results: Vec<(usize, Vec<EnqueueResult>)> = stream::iter(pipelines)
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        results.sort_by_key(|(i, _)| *i);
        results.into_iter().flat_map(|(_, r)| r).collect()
    }

    async fn enqueue_chunk(&self, chunk: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        let mut results = self.run_pipeline(chunk).await;
        let missing: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.blip().is_some_and(|b| b.kind == BlipKind::NoScript))
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() {
            return results;
        }
        // Redis lost its scripts (restart, SCRIPT FLUSH): load it again and run those once more.
        if let Err(e) = self.load_script().await {
            tracing::warn!(error = %e, "could not reload the enqueue script");
            return results;
        }
        let again: Vec<Enqueue<'_>> = missing.iter().map(|&i| chunk[i].clone()).collect();
        for (i, result) in missing.into_iter().zip(self.run_pipeline(&again).await) {
            results[i] = result;
        }
        results
    }

    async fn run_pipeline(&self, chunk: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        let mut pipe = redis::pipe();
        let hash = self.script.get_hash();
        for item in chunk {
            let e = item.event;
            let cmd = pipe
                .cmd("EVALSHA")
                .arg(hash)
                .arg(2)
                .arg(self.keys.enqueued_marker(item.queue, e.id))
                .arg(self.keys.stream(item.queue))
                .arg(self.dedupe_ttl_secs);
            for (name, value) in QueueEntry::encode(e) {
                cmd.arg(name).arg(value);
            }
        }
        let mut conn = self.conn.clone();
        // Not `query_async`: it turns the first error reply into an error for the whole pipeline.
        match conn.req_packed_commands(&pipe, 0, chunk.len()).await {
            Ok(replies) if replies.len() == chunk.len() => chunk
                .iter()
                .zip(replies)
                .map(|(item, reply)| parse_reply(item, reply))
                .collect(),
            Ok(replies) => chunk
                .iter()
                .map(|item| {
                    EnqueueResult::Failed(format!(
                        "event {} to {}: {} replies to a pipeline of {}",
                        item.event.id,
                        item.queue,
                        replies.len(),
                        chunk.len()
                    ))
                })
                .collect(),
            Err(e) => chunk.iter().map(|item| redis_error(item, &e)).collect(),
        }
    }
}

impl Sink for RedisSink {
    fn name(&self) -> &str {
        "redis-streams"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        RedisSink::enqueue_all(self, items).boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        RedisSink::ping(self).boxed()
    }
}

/// A Redis error for one entry: a blip leaves it [`EnqueueResult::Unavailable`], anything else
/// is a refusal of the entry.
fn redis_error(item: &Enqueue<'_>, error: &redis::RedisError) -> EnqueueResult {
    let message = format!("event {} to {}: redis: {error}", item.event.id, item.queue);
    match fault::redis_blip(error) {
        Some(blip) => EnqueueResult::Unavailable {
            error: message,
            blip,
        },
        None => EnqueueResult::Failed(message),
    }
}

fn parse_reply(item: &Enqueue<'_>, reply: Value) -> EnqueueResult {
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    match reply {
        Value::Array(parts) if parts.len() == 2 => match &parts[0] {
            Value::Int(1) => EnqueueResult::Added(text(&parts[1])),
            Value::Int(0) => EnqueueResult::AlreadyEnqueued(text(&parts[1])),
            _ => EnqueueResult::Failed(format!(
                "event {} to {}: XADD refused: {}",
                item.event.id,
                item.queue,
                text(&parts[1])
            )),
        },
        Value::ServerError(e) => redis_error(item, &e.into()),
        other => EnqueueResult::Failed(format!(
            "event {} to {}: unexpected reply from the enqueue script: {other:?}",
            item.event.id, item.queue
        )),
    }
}
