//! Redis Streams sink: hands routed events to Redis Streams, exactly once per (event, queue).
//!
//! Owns the Redis side of dispatch into streams: the enqueue script (set-if-absent marker +
//! `XADD`, one round trip, atomic) and the connection. A re-claim after a crash between
//! "enqueued" and "marked done" finds the marker and adds nothing twice. Key names and entry
//! fields come from [`crate::queue`]; it never builds one itself. Pipelining, per-entry results
//! and `NOSCRIPT` recovery are [`super::script`]'s.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::ConnectionManager;

use super::script::EnqueueScript;
use super::{Enqueue, EnqueueResult, Sink, SinkError};
use crate::queue::{QueueEntry, QueueKeys};

/// Enqueue script. KEYS[1] = dedupe marker, KEYS[2] = stream; ARGV[1] = marker TTL (s),
/// ARGV[2..] = stream field/value pairs. Returns {1, entry id} when added, {0, entry id} when the
/// marker existed, {-1, error} when `XADD` failed (nothing written).
const ENQUEUE_LUA: &str = r#"
local existing = redis.call('GET', KEYS[1])
if existing then return {0, existing} end
local added = redis.pcall('XADD', KEYS[2], '*', unpack(ARGV, 2))
if type(added) == 'table' and added.err then return {-1, 'XADD: ' .. added.err} end
redis.call('SET', KEYS[1], added, 'EX', ARGV[1])
return {1, added}
"#;

/// The Redis Streams sink.
#[derive(Clone)]
pub struct RedisSink {
    script: EnqueueScript,
    keys: QueueKeys,
    dedupe_ttl_secs: u64,
}

impl RedisSink {
    /// Connect (one attempt; the dispatcher retries with backoff). Commands time out after 5 s
    /// so a hung Redis fails a batch instead of stalling the host.
    pub async fn connect(
        redis_url: &str,
        prefix: &str,
        dedupe_ttl: Duration,
        concurrency: usize,
    ) -> Result<Self, SinkError> {
        let conn = connect_redis(redis_url).await?;
        let sink = Self {
            script: EnqueueScript::new(
                conn,
                ENQUEUE_LUA,
                "the streams enqueue script",
                concurrency,
            ),
            keys: QueueKeys::new(prefix),
            dedupe_ttl_secs: dedupe_ttl.as_secs().max(1),
        };
        sink.script.load().await?;
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

    /// The connection (shared with the other sinks on the same Redis).
    pub fn connection(&self) -> &ConnectionManager {
        self.script.connection()
    }

    /// How long an enqueue marker lives, in seconds.
    pub fn dedupe_ttl_secs(&self) -> u64 {
        self.dedupe_ttl_secs
    }

    /// Check Redis answers.
    pub async fn ping(&self) -> Result<(), SinkError> {
        ping(self.connection()).await
    }

    /// Enqueue every hand-off: pipelines of up to 128, at most `concurrency` in flight. Results
    /// come back in input order. A transport failure fails the entries of that pipeline only.
    pub async fn enqueue_all(&self, items: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        let args = |item: &Enqueue<'_>, cmd: &mut redis::Pipeline| {
            let e = item.event;
            cmd.arg(2)
                .arg(self.keys.enqueued_marker(item.queue, e.id))
                .arg(self.keys.stream(item.queue))
                .arg(self.dedupe_ttl_secs);
            for (name, value) in QueueEntry::encode(e) {
                cmd.arg(name).arg(value);
            }
        };
        self.script.run_all(items, &args).await
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

/// Connect to Redis with the host's reconnect policy (commands time out, so a hung Redis fails
/// a batch instead of stalling the host).
pub(super) async fn connect_redis(redis_url: &str) -> Result<ConnectionManager, SinkError> {
    let client = redis::Client::open(redis_url)
        .map_err(|source| SinkError::new(format!("invalid REDIS_URL {redis_url:?}"), source))?;
    ConnectionManager::new_with_config(client, crate::reconnect::redis_manager_config())
        .await
        .map_err(|source| {
            SinkError::new(
                format!("connect to Redis at {}", crate::store::redact(redis_url)),
                source,
            )
        })
}

/// `PING` over `conn`.
pub(super) async fn ping(conn: &ConnectionManager) -> Result<(), SinkError> {
    let mut conn = conn.clone();
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .map(|_| ())
        .map_err(|source| SinkError::new("ping Redis", source))
}
