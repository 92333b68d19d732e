//! Redis Streams sink: hands routed events to Redis Streams, exactly once per (event, queue).
//!
//! Owns the Redis side of dispatch into streams: running the enqueue script of
//! [`crate::queue::streams`] over a queue's hand-offs (per entry a set-if-absent marker + `XADD`,
//! up to [`ENQUEUE_BATCH`] entries in one call, atomic; with a queue's `max_len`, the trim and the
//! exact count of what it dropped unread or unacknowledged, per consumer group, in the same step)
//! with the trim policy (slack and limit per call), the trim metrics and warnings, and the
//! connection. A re-claim after a crash between "enqueued" and "marked done" finds the marker and
//! adds nothing twice. Key names, entry fields and the script come from [`crate::queue`]; it never
//! builds one itself. Pipelining, per-entry results and `NOSCRIPT` recovery are
//! [`super::script`]'s. It never trims a queue that has no `max_len`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::redis_conn::RedisConn;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::script::{Calls, EnqueueScript};
use super::{Enqueue, EnqueueResult, Sink, SinkError};
use crate::queue::streams::{enqueue_script, Trimmed, ENQUEUE_BATCH};
use crate::queue::{QueueEntry, QueueKeys};

/// How far past its `max_len` a stream grows before the enqueue script trims it (one stream
/// node), so the trim runs about once per hundred enqueues.
const TRIM_SLACK: u64 = 100;

/// The most entries one enqueue trims (bounds the work when `max_len` is first set on a long
/// stream: the next enqueues trim the rest).
const TRIM_LIMIT: u64 = 1000;

/// How often, at most, the trims of one queue that dropped unfinished entries are logged.
const TRIM_WARNING_WINDOW: Duration = Duration::from_secs(60);

/// The Redis Streams sink.
#[derive(Clone)]
pub struct RedisSink {
    script: EnqueueScript,
    keys: QueueKeys,
    dedupe_ttl_secs: u64,
    trims: Arc<TrimReports>,
}

/// The trims of each queue since its last warning, so that a queue trimmed on every enqueue
/// logs one line a minute.
#[derive(Default)]
struct TrimReports {
    since_warning: Mutex<HashMap<String, (Instant, Trimmed)>>,
}

impl TrimReports {
    /// Count `trimmed` for `queue` (metrics), and warn when it dropped unfinished entries, at
    /// most once per [`TRIM_WARNING_WINDOW`] per queue with the totals since the last warning.
    fn report(&self, queue: &str, max_len: u64, trimmed: Trimmed) {
        metrics::counter!("outbox_queue_trimmed_total", "queue" => queue.to_string())
            .increment(trimmed.entries);
        for (group, unread, unacked) in &trimmed.unfinished {
            metrics::counter!("outbox_queue_trimmed_unread_total", "queue" => queue.to_string(), "group" => group.clone())
                .increment(*unread);
            metrics::counter!("outbox_queue_trimmed_unacked_total", "queue" => queue.to_string(), "group" => group.clone())
                .increment(*unacked);
        }
        if trimmed.unfinished.is_empty() {
            return;
        }
        let Ok(mut since) = self.since_warning.lock() else {
            return;
        };
        let now = Instant::now();
        let (last, total) = since
            .entry(queue.to_string())
            .or_insert_with(|| (now - TRIM_WARNING_WINDOW, Trimmed::default()));
        total.entries += trimmed.entries;
        for (group, unread, unacked) in trimmed.unfinished {
            match total.unfinished.iter_mut().find(|(g, _, _)| *g == group) {
                Some((_, r, a)) => {
                    *r += unread;
                    *a += unacked;
                }
                None => total.unfinished.push((group, unread, unacked)),
            }
        }
        if now.duration_since(*last) < TRIM_WARNING_WINDOW {
            return;
        }
        for (group, unread, unacked) in &total.unfinished {
            tracing::warn!(%queue, max_len, %group, unread, unacked, trimmed = total.entries, "max_len dropped entries this consumer group had not finished ({unread} not read, {unacked} read and not acknowledged): they are gone; raise max_len or add consumers");
        }
        *last = now;
        *total = Trimmed::default();
    }
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
                enqueue_script(),
                Calls::PerQueue {
                    at_most: ENQUEUE_BATCH,
                },
                "the streams enqueue script",
                concurrency,
            ),
            keys: QueueKeys::for_redis_url(prefix, redis_url),
            dedupe_ttl_secs: dedupe_ttl.as_secs().max(1),
            trims: Arc::default(),
        };
        sink.script.load().await?;
        Ok(sink)
    }

    /// [`connect`](Self::connect) with `REDIS_URL`, `OUTBOX_REDIS_PREFIX`, the dedupe TTL and
    /// `OUTBOX_DISPATCH_CONCURRENCY` from `settings`, each pipeline waiting for
    /// `OUTBOX_REDIS_WAIT_REPLICAS` replicas.
    pub async fn from_settings(settings: &crate::config::Settings) -> Result<Self, SinkError> {
        let sink = Self::connect(
            &settings.redis_url,
            &settings.redis_prefix,
            settings.dedupe_ttl,
            settings.dispatch_concurrency,
        )
        .await?;
        Ok(sink.waiting_for_replicas(settings.redis_wait_replicas))
    }

    /// Each pipeline ends with `WAIT replicas 1000`: a hand-off counts as written once
    /// `replicas` replicas have it (0: no wait).
    pub fn waiting_for_replicas(mut self, replicas: usize) -> Self {
        self.script = self.script.waiting_for_replicas(replicas);
        self
    }

    /// The Redis keys this sink writes.
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// The connection (shared with the other sinks on the same Redis).
    pub fn connection(&self) -> &RedisConn {
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
    /// No queue is trimmed (see [`enqueue_with`](Self::enqueue_with)).
    pub async fn enqueue_all(&self, items: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        self.enqueue_trimming(items, &|_| None).await
    }

    /// [`enqueue_all`](Self::enqueue_all), each queue trimmed to its `max_len` in `routes`.
    pub async fn enqueue_with(
        &self,
        items: &[Enqueue<'_>],
        routes: &crate::config::RoutesFile,
    ) -> Vec<EnqueueResult> {
        self.enqueue_trimming(items, &|queue| routes.max_len_of(queue))
            .await
    }

    async fn enqueue_trimming(
        &self,
        items: &[Enqueue<'_>],
        max_len: &(dyn Fn(&str) -> Option<u64> + Sync),
    ) -> Vec<EnqueueResult> {
        // One call per queue's chunk (the runner groups by queue): its stream, its trim counts
        // and one marker per entry, then each entry's fields preceded by their count.
        let args = |chunk: &[Enqueue<'_>], cmd: &mut redis::Pipeline| {
            let Some(queue) = chunk.first().map(|item| item.queue) else {
                return;
            };
            cmd.arg(2 + chunk.len())
                .arg(self.keys.stream(queue))
                .arg(self.keys.trimmed(queue));
            for item in chunk {
                cmd.arg(self.keys.enqueued_marker(queue, item.event.id));
            }
            cmd.arg(self.dedupe_ttl_secs)
                .arg(max_len(queue).unwrap_or(0))
                .arg(TRIM_SLACK)
                .arg(TRIM_LIMIT);
            for item in chunk {
                let fields = QueueEntry::encode(item.event);
                cmd.arg(2 * fields.len());
                for (name, value) in fields {
                    cmd.arg(name).arg(value);
                }
            }
        };
        let trimmed = |item: &Enqueue<'_>, extra: &[redis::Value]| {
            if let Some(trimmed) = Trimmed::from_reply(extra) {
                self.trims
                    .report(item.queue, max_len(item.queue).unwrap_or(0), trimmed);
            }
        };
        self.script.run_all_reporting(items, &args, &trimmed).await
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
pub(super) async fn connect_redis(redis_url: &str) -> Result<RedisConn, SinkError> {
    let target = crate::redis_conn::RedisTarget::parse(redis_url)
        .map_err(|e| SinkError::new("invalid REDIS_URL", redis::RedisError::from(e)))?;
    target.shared().await.map_err(|source| {
        SinkError::new(format!("connect to Redis at {}", target.redacted()), source)
    })
}

/// `PING` over `conn`.
pub(super) async fn ping(conn: &RedisConn) -> Result<(), SinkError> {
    let mut conn = conn.clone();
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .map(|_| ())
        .map_err(|source| SinkError::new("ping Redis", source))
}
