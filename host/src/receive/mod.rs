//! Receive: consumes queues and runs the handler plugin bound to each.
//!
//! Owns the consumer side of a queue: the Redis consumer group, reading and reclaiming entries
//! (`XREADGROUP`, `XAUTOCLAIM` after the receiver lease), the per-(event, handler) idempotency
//! claim (`SET NX PX`, then a `done` marker kept for `OUTBOX_IDEMPOTENCY_TTL_SECONDS`), handler
//! outcomes (ack, delayed retry, dead-letter stream) and trimming streams below what every
//! consumer group has acknowledged. Receipts in PostgreSQL (`receipts`, written in batches
//! after the outcome is safe in Redis) and dead-letter operations ([`DeadLetters`]) live in
//! submodules.
//! It never acknowledges an entry before its outcome is recorded in Redis, and every state
//! change of one entry (marker, retry, dead letter, ack) is a single atomic script.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::streams::{StreamId, StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::capability::http::http_client;
use crate::capability::{CapabilityPolicy, HandlerHost};
use crate::config::Settings;
use crate::plugin::bindings::handler_world::exports::outbox::plugin::handler_api::{
    Delivery, Outcome,
};
use crate::plugin::bindings::WitEvent;
use crate::plugin::reload::LiveConfig;
use crate::plugin::PluginError;

mod dead_letter;
mod receipts;

pub use dead_letter::{DeadLetter, DeadLetters};
use receipts::{spawn_receipt_writer, Receipt, ReceiptUpdate};

/// Consumer group every outbox receiver joins on a queue's stream.
pub const CONSUMER_GROUP: &str = "outbox";
/// The built-in handler that calls a subscribed plugin's hook (`plugin.invoke.*` jobs).
pub const BUILTIN_PLUGIN_INVOKE: &str = "builtin:plugin-invoke";

/// A receiver failure with context.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct ReceiveError {
    /// What the receiver was doing.
    pub context: String,
    /// The Redis error.
    #[source]
    pub source: redis::RedisError,
}

fn ctx<T>(r: redis::RedisResult<T>, context: impl FnOnce() -> String) -> Result<T, ReceiveError> {
    r.map_err(|source| ReceiveError {
        context: context(),
        source,
    })
}

/// Ack with a `done` marker: KEYS[1] marker, KEYS[2] stream; ARGV[1] group, ARGV[2] entry id,
/// ARGV[3] marker value, ARGV[4] marker TTL (s).
const FINISH_LUA: &str = r#"
redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[4])
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
"#;

/// Schedule a retry: KEYS[1] marker, KEYS[2] stream, KEYS[3] retry set; ARGV[1] group,
/// ARGV[2] entry id, ARGV[3] due (ms), ARGV[4] entry as JSON.
const RETRY_LUA: &str = r#"
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('DEL', KEYS[1])
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
"#;

/// Dead-letter: KEYS[1] marker, KEYS[2] stream, KEYS[3] dead-letter stream; ARGV[1] group,
/// ARGV[2] entry id, ARGV[3..] fields of the dead-letter entry.
const DEAD_LUA: &str = r#"
redis.call('XADD', KEYS[3], '*', unpack(ARGV, 3))
redis.call('DEL', KEYS[1])
return redis.call('XACK', KEYS[2], ARGV[1], ARGV[2])
"#;

/// Move due retries back into the stream: KEYS[1] retry set, KEYS[2] stream; ARGV[1] now (ms).
const MOVE_DUE_LUA: &str = r#"
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, member in ipairs(due) do
  redis.call('ZREM', KEYS[1], member)
  redis.call('XADD', KEYS[2], '*', unpack(cjson.decode(member)))
end
return #due
"#;

/// One queue entry as the receiver reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// Stream entry id.
    pub stream_id: String,
    /// Fields as written by the sink (plus `handler_attempt` on retries).
    pub fields: Vec<(String, String)>,
}

impl QueueEntry {
    /// An entry as read with `XREAD`/`XRANGE` (field values as text, fields sorted by name).
    pub fn from_stream(id: &StreamId) -> Self {
        let mut fields: Vec<(String, String)> = id
            .map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    redis::from_redis_value::<String>(v).unwrap_or_default(),
                )
            })
            .collect();
        fields.sort();
        Self {
            stream_id: id.id.clone(),
            fields,
        }
    }

    /// A field's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The outbox event id.
    pub fn event_id(&self) -> Option<i64> {
        self.get("event_id")?.parse().ok()
    }

    /// Handler attempt of this delivery (1 on first delivery).
    pub fn handler_attempt(&self) -> u32 {
        self.get("handler_attempt")
            .and_then(|a| a.parse().ok())
            .unwrap_or(1)
    }

    fn with_attempt(&self, attempt: u32) -> Vec<String> {
        let mut flat = Vec::with_capacity(self.fields.len() * 2 + 2);
        for (k, v) in &self.fields {
            if k != "handler_attempt" && k != "last_error" {
                flat.push(k.clone());
                flat.push(v.clone());
            }
        }
        flat.push("handler_attempt".into());
        flat.push(attempt.to_string());
        flat
    }

    fn to_wit_event(&self) -> Result<WitEvent, String> {
        let id = self.event_id().ok_or("entry has no numeric event_id")?;
        let event_type = self
            .get("event_type")
            .filter(|t| !t.is_empty())
            .ok_or("entry has no event_type")?;
        Ok(WitEvent {
            id,
            event_type: event_type.to_string(),
            event_version: self
                .get("event_version")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            tenant_id: self
                .get("tenant_id")
                .filter(|t| !t.is_empty())
                .map(str::to_string),
            payload: self.get("payload").unwrap_or("{}").to_string(),
            headers: self.get("headers").unwrap_or("{}").to_string(),
            dispatch_key: self
                .get("dispatch_key")
                .filter(|t| !t.is_empty())
                .map(str::to_string),
            created_at: self.get("created_at").unwrap_or_default().to_string(),
        })
    }
}

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandledAs {
    /// The handler finished; the entry is acknowledged.
    Ok,
    /// A retry is scheduled.
    Retry(String),
    /// The entry went to the dead-letter stream.
    Dead(String),
    /// Already finished earlier: acknowledged without running the handler.
    Duplicate,
    /// Another consumer is running it right now; left for the lease.
    Busy,
}

/// Everything the receivers of one process share.
#[derive(Clone)]
pub struct Receivers {
    redis_client: redis::Client,
    conn: ConnectionManager,
    live: LiveConfig,
    settings: Arc<Settings>,
    consumer: String,
    handler_host: Arc<HandlerHost>,
    finish: Arc<redis::Script>,
    retry: Arc<redis::Script>,
    dead: Arc<redis::Script>,
    move_due: Arc<redis::Script>,
    receipts: tokio::sync::mpsc::Sender<ReceiptUpdate>,
}

impl Receivers {
    /// Receivers over a connected pool and Redis, consuming as `consumer`.
    pub async fn new(
        pool: PgPool,
        live: LiveConfig,
        settings: Arc<Settings>,
        consumer: impl Into<String>,
    ) -> Result<Self, ReceiveError> {
        let redis_client = ctx(redis::Client::open(settings.redis_url.as_str()), || {
            "invalid REDIS_URL".into()
        })?;
        let conn = ctx(ConnectionManager::new(redis_client.clone()).await, || {
            "connect to Redis".into()
        })?;
        let policy = Arc::new(CapabilityPolicy::new(
            live.registry.clone(),
            live.routes.clone(),
        ));
        let http = http_client().map_err(|e| ReceiveError {
            context: format!("build the HTTP client: {e}"),
            source: redis::RedisError::from((redis::ErrorKind::ClientError, "http client")),
        })?;
        let handler_host = Arc::new(HandlerHost::new(
            policy,
            pool.clone(),
            conn.clone(),
            settings.redis_prefix.clone(),
            http,
            settings.max_payload_bytes,
        ));
        Ok(Self {
            redis_client,
            conn,
            handler_host,
            live,
            settings,
            consumer: consumer.into(),
            finish: Arc::new(redis::Script::new(FINISH_LUA)),
            retry: Arc::new(redis::Script::new(RETRY_LUA)),
            dead: Arc::new(redis::Script::new(DEAD_LUA)),
            move_due: Arc::new(redis::Script::new(MOVE_DUE_LUA)),
            receipts: spawn_receipt_writer(pool),
        })
    }

    /// The queues this process consumes: those bound to a handler in `[handlers]` and, when a
    /// group is given, listed in that queue group.
    pub fn queues_for_group(&self, group: Option<&str>) -> Vec<String> {
        let routes = self.live.routes.load();
        routes
            .handlers
            .keys()
            .filter(|q| match group {
                None => true,
                Some(g) => routes.queue_groups.get(g).is_some_and(|qs| qs.contains(q)),
            })
            .cloned()
            .collect()
    }

    fn key(&self, queue: &str) -> String {
        format!("{}{}", self.settings.redis_prefix, queue)
    }

    /// The dead-letter stream of a queue.
    pub fn dead_letter_key(&self, queue: &str) -> String {
        format!("{}{}.dead-letter", self.settings.redis_prefix, queue)
    }

    fn retry_key(&self, queue: &str) -> String {
        format!("{}outbox:retry:{}", self.settings.redis_prefix, queue)
    }

    fn marker_key(&self, handler: &str, event_id: i64) -> String {
        format!(
            "{}outbox:handled:{}:{}",
            self.settings.redis_prefix, handler, event_id
        )
    }

    /// Consume `queue` until shutdown: read new entries, reclaim stale ones, move due retries,
    /// trim what every group acknowledged.
    pub async fn consume(self, queue: String, shutdown: CancellationToken) {
        let key = self.key(&queue);
        let mut failures = 0u32;
        loop {
            match self.ensure_group(&key).await {
                Ok(()) => break,
                Err(e) => {
                    failures += 1;
                    let delay = crate::dispatch::retry_delay(failures);
                    tracing::error!(%queue, error = %e, retry_in = ?delay, "cannot create consumer group; Redis unavailable?");
                    if crate::dispatch::sleep_or_shutdown(delay, &shutdown).await {
                        return;
                    }
                }
            }
        }
        tracing::info!(%queue, consumer = %self.consumer, "receiver started");
        let permits = Arc::new(Semaphore::new(self.settings.receiver_concurrency));
        let mut reader: Option<redis::aio::MultiplexedConnection> = None;
        let mut last_housekeeping = Instant::now() - Duration::from_secs(3600);
        let mut tasks = tokio::task::JoinSet::new();
        while !shutdown.is_cancelled() {
            while tasks.try_join_next().is_some() {}
            if last_housekeeping.elapsed()
                >= (self.settings.receiver_lease / 4).min(Duration::from_secs(5))
            {
                last_housekeeping = Instant::now();
                if let Err(e) = self.housekeeping(&queue, &permits, &mut tasks).await {
                    tracing::warn!(%queue, error = %e, "receiver housekeeping failed");
                }
            }
            if reader.is_none() {
                match self.redis_client.get_multiplexed_async_connection().await {
                    Ok(c) => reader = Some(c),
                    Err(e) => {
                        failures += 1;
                        tracing::error!(%queue, error = %e, "receiver cannot reach Redis; retrying");
                        if crate::dispatch::sleep_or_shutdown(
                            crate::dispatch::retry_delay(failures),
                            &shutdown,
                        )
                        .await
                        {
                            break;
                        }
                        continue;
                    }
                }
            }
            let available = permits.available_permits().max(1);
            let opts = StreamReadOptions::default()
                .group(CONSUMER_GROUP, &self.consumer)
                .count(available)
                .block(200);
            let keys = [&key];
            let read: redis::RedisResult<Option<StreamReadReply>> = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = reader.as_mut().expect("connected").xread_options(&keys, &[">"], &opts) => r,
            };
            match read {
                Ok(Some(reply)) => {
                    failures = 0;
                    for stream in reply.keys {
                        for id in &stream.ids {
                            self.spawn_handler(
                                &queue,
                                QueueEntry::from_stream(id),
                                &permits,
                                &mut tasks,
                            )
                            .await;
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    failures += 1;
                    reader = None;
                    if e.code() == Some("NOGROUP") {
                        // The stream was deleted under us: recreate it and the group.
                        let _ = self.ensure_group(&key).await;
                    }
                    tracing::error!(%queue, error = %e, "reading the queue failed; retrying");
                    if crate::dispatch::sleep_or_shutdown(
                        crate::dispatch::retry_delay(failures),
                        &shutdown,
                    )
                    .await
                    {
                        break;
                    }
                }
            }
        }
        // Let running handlers finish within the grace period; unfinished entries stay pending
        // and are reclaimed by another consumer after the lease.
        let _ = tokio::time::timeout(self.settings.shutdown_grace, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        tracing::info!(%queue, "receiver stopped");
    }

    /// Create the consumer group (and the stream) unless it exists. A new group starts at the
    /// beginning of the stream, so entries enqueued before any receiver ran are consumed too.
    async fn ensure_group(&self, key: &str) -> redis::RedisResult<()> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(key)
            .arg(CONSUMER_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.conn.clone())
            .await;
        match created {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    async fn housekeeping(
        &self,
        queue: &str,
        permits: &Arc<Semaphore>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> Result<(), ReceiveError> {
        let key = self.key(queue);
        let mut conn = self.conn.clone();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let _: i64 = ctx(
            self.move_due
                .key(self.retry_key(queue))
                .key(&key)
                .arg(now_ms)
                .invoke_async(&mut conn)
                .await,
            || format!("move due retries of {queue}"),
        )?;
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
        for entry in claimed {
            self.spawn_handler(queue, entry, permits, tasks).await;
        }
        trim_acknowledged(&mut conn, &key).await
    }

    /// Handle `entry` on its own task once a concurrency permit is free.
    async fn spawn_handler(
        &self,
        queue: &str,
        entry: QueueEntry,
        permits: &Arc<Semaphore>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) {
        let permit = permits
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore open");
        let me = self.clone();
        let queue = queue.to_string();
        tasks.spawn(async move {
            me.handle_entry(&queue, entry).await;
            drop(permit);
        });
    }

    /// Handle one entry end to end: idempotency claim, handler, outcome, receipt.
    pub async fn handle_entry(&self, queue: &str, entry: QueueEntry) -> HandledAs {
        let routes = self.live.routes.load_full();
        let Some(handler) = routes.handlers.get(queue).cloned() else {
            tracing::error!(%queue, "no handler bound to this queue any more; leaving the entry pending");
            return HandledAs::Busy;
        };
        let key = self.key(queue);
        let mut conn = self.conn.clone();
        let attempt = entry.handler_attempt();
        let Some(event_id) = entry.event_id() else {
            return self
                .dead_letter(
                    queue,
                    &handler,
                    &entry,
                    "malformed entry: no event_id".into(),
                    &mut conn,
                )
                .await;
        };
        let marker = self.marker_key(&handler, event_id);
        let claimed: Option<String> = match redis::cmd("SET")
            .arg(&marker)
            .arg(format!("running:{}", self.consumer))
            .arg("NX")
            .arg("PX")
            .arg(self.settings.receiver_lease.as_millis() as u64)
            .query_async(&mut conn)
            .await
        {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(%queue, event_id, error = %e, "idempotency claim failed; entry stays pending");
                return HandledAs::Busy;
            }
        };
        if claimed.is_none() {
            let state: Option<String> = conn.get(&marker).await.unwrap_or(None);
            if state.as_deref().is_some_and(|s| s.starts_with("done")) {
                let _: redis::RedisResult<i64> =
                    conn.xack(&key, CONSUMER_GROUP, &[&entry.stream_id]).await;
                self.record_duplicate(event_id, &handler).await;
                metrics::counter!("outbox_receiver_duplicates_total", "queue" => queue.to_string())
                    .increment(1);
                return HandledAs::Duplicate;
            }
            return HandledAs::Busy;
        }

        let started = Instant::now();
        let (outcome, published, (receipt_event, receipt_handler)) = self
            .run_handler(
                queue,
                &handler,
                &entry,
                attempt,
                routes.policy.publish_denials,
            )
            .await;
        let duration = started.elapsed();
        let handled = match outcome {
            Ok(()) => {
                let done: redis::RedisResult<i64> = self
                    .finish
                    .key(&marker)
                    .key(&key)
                    .arg(CONSUMER_GROUP)
                    .arg(&entry.stream_id)
                    .arg("done:ok")
                    .arg(self.settings.idempotency_ttl.as_secs().max(1))
                    .invoke_async(&mut conn)
                    .await;
                if let Err(e) = done {
                    tracing::error!(%queue, event_id, error = %e, "could not record success; the entry will be redelivered");
                }
                HandledAs::Ok
            }
            Err(HandlerFailure::Fail(reason)) => {
                self.dead_letter(queue, &handler, &entry, reason, &mut conn)
                    .await
            }
            Err(HandlerFailure::Retry(reason)) if attempt > self.settings.handler_max_retries => {
                self.dead_letter(
                    queue,
                    &handler,
                    &entry,
                    format!("gave up after {attempt} attempts: {reason}"),
                    &mut conn,
                )
                .await
            }
            Err(HandlerFailure::Retry(reason)) => {
                let delay = self.settings.handler_backoff_after(attempt);
                let due = chrono::Utc::now().timestamp_millis() + delay.as_millis() as i64;
                let mut member = entry.with_attempt(attempt + 1);
                member.push("last_error".into());
                member.push(reason.clone());
                member.push("retry_nonce".into());
                member.push(format!("{}:{}", entry.stream_id, attempt));
                let json = serde_json::to_string(&member).unwrap_or_default();
                let r: redis::RedisResult<i64> = self
                    .retry
                    .key(&marker)
                    .key(&key)
                    .key(self.retry_key(queue))
                    .arg(CONSUMER_GROUP)
                    .arg(&entry.stream_id)
                    .arg(due)
                    .arg(json)
                    .invoke_async(&mut conn)
                    .await;
                if let Err(e) = r {
                    tracing::error!(%queue, event_id, error = %e, "could not schedule the retry; the entry will be redelivered");
                }
                tracing::warn!(%queue, event_id, handler, attempt, retry_in = ?delay, %reason, "handler asked for a retry");
                HandledAs::Retry(reason)
            }
        };
        metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => handled_label(&handled)).increment(1);
        metrics::histogram!("outbox_handler_seconds", "handler" => handler.clone())
            .record(duration.as_secs_f64());
        self.record_receipt(
            receipt_event,
            &receipt_handler,
            queue,
            &handled,
            attempt,
            duration,
            &published,
        )
        .await;
        handled
    }

    async fn dead_letter(
        &self,
        queue: &str,
        handler: &str,
        entry: &QueueEntry,
        reason: String,
        conn: &mut ConnectionManager,
    ) -> HandledAs {
        let marker = self.marker_key(handler, entry.event_id().unwrap_or(0));
        let mut invocation = self.dead.key(&marker);
        invocation
            .key(self.key(queue))
            .key(self.dead_letter_key(queue))
            .arg(CONSUMER_GROUP)
            .arg(&entry.stream_id);
        for field in entry.with_attempt(entry.handler_attempt()) {
            invocation.arg(field);
        }
        invocation
            .arg("error")
            .arg(&reason)
            .arg("handler")
            .arg(handler)
            .arg("queue")
            .arg(queue)
            .arg("dead_at")
            .arg(chrono::Utc::now().to_rfc3339());
        let r: redis::RedisResult<i64> = invocation.invoke_async(conn).await;
        if let Err(e) = r {
            tracing::error!(%queue, error = %e, "could not dead-letter the entry; it will be redelivered");
        }
        tracing::error!(%queue, handler, event_id = entry.event_id(), %reason, "entry dead-lettered");
        HandledAs::Dead(reason)
    }

    /// Run the handler; returns the outcome, the ids it published, and whom the receipt is
    /// about (for a plugin-invoke job: the hook event and the subscribed plugin).
    async fn run_handler(
        &self,
        queue: &str,
        handler: &str,
        entry: &QueueEntry,
        attempt: u32,
        publish_denials: bool,
    ) -> (Result<(), HandlerFailure>, Vec<i64>, (i64, String)) {
        let mut receipt = (entry.event_id().unwrap_or(0), handler.to_string());
        let mut event = match entry.to_wit_event() {
            Ok(e) => e,
            Err(e) => {
                return (
                    Err(HandlerFailure::Fail(format!("malformed entry: {e}"))),
                    vec![],
                    receipt,
                )
            }
        };
        let mut plugin_name = handler.to_string();
        if handler == BUILTIN_PLUGIN_INVOKE {
            // A plugin-invoke job: call the subscribed plugin's hook with the hook event.
            match parse_invoke_job(&event) {
                Ok((plugin, hook_event)) => {
                    plugin_name = plugin;
                    event = hook_event;
                    receipt = (event.id, plugin_name.clone());
                }
                Err(e) => return (Err(HandlerFailure::Fail(e)), vec![], receipt),
            }
        }
        let Some(plugin) = self.live.registry.get(&plugin_name) else {
            return (
                Err(HandlerFailure::Retry(format!(
                    "handler plugin {plugin_name} is not loaded"
                ))),
                vec![],
                receipt,
            );
        };
        // `[policy] publish_denials` in force is read per delivery by the shared handler host.
        let _ = publish_denials;
        let services = self
            .handler_host
            .services(plugin.clone(), event.clone(), handler);
        let published = services.published_ids_handle();
        let delivery = Delivery {
            event,
            queue: queue.to_string(),
            attempt,
        };
        let joined = tokio::task::spawn_blocking(move || {
            plugin.call_handler(Some(Box::new(services)), &delivery)
        })
        .await;
        let published = published.lock().map(|p| p.clone()).unwrap_or_default();
        let outcome = match joined {
            Ok(Ok(Outcome::Ok)) => Ok(()),
            Ok(Ok(Outcome::Retry(reason))) => Err(HandlerFailure::Retry(reason)),
            Ok(Ok(Outcome::Fail(reason))) => Err(HandlerFailure::Fail(reason)),
            Ok(Err(e @ PluginError::WrongWorld { .. })) => Err(HandlerFailure::Fail(e.to_string())),
            Ok(Err(e)) => Err(HandlerFailure::Retry(e.to_string())),
            Err(e) => Err(HandlerFailure::Retry(format!("handler task failed: {e}"))),
        };
        (outcome, published, receipt)
    }

    #[allow(clippy::too_many_arguments)] // one row's columns; a struct would only rename them
    async fn record_receipt(
        &self,
        event_id: i64,
        handler: &str,
        queue: &str,
        handled: &HandledAs,
        attempts: u32,
        duration: Duration,
        published: &[i64],
    ) {
        let (result, error) = match handled {
            HandledAs::Ok => ("ok", None),
            HandledAs::Retry(e) => ("retry", Some(e.clone())),
            HandledAs::Dead(e) => ("dead", Some(e.clone())),
            HandledAs::Duplicate | HandledAs::Busy => return,
        };
        self.send_receipt(ReceiptUpdate::Outcome(Receipt {
            event_id,
            handler: handler.to_string(),
            queue: queue.to_string(),
            result,
            attempts: attempts as i32,
            duration_ms: duration.as_secs_f64() * 1000.0,
            published: published.to_vec(),
            error,
        }))
        .await;
    }

    async fn record_duplicate(&self, event_id: i64, handler: &str) {
        self.send_receipt(ReceiptUpdate::Duplicate {
            event_id,
            handler: handler.to_string(),
        })
        .await;
    }

    async fn send_receipt(&self, update: ReceiptUpdate) {
        if self.receipts.send(update).await.is_err() {
            tracing::warn!("the receipt writer stopped; a receipt was not recorded");
        }
    }
}

/// Why a handler did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HandlerFailure {
    Retry(String),
    Fail(String),
}

fn handled_label(h: &HandledAs) -> &'static str {
    match h {
        HandledAs::Ok => "ok",
        HandledAs::Retry(_) => "retry",
        HandledAs::Dead(_) => "dead",
        HandledAs::Duplicate => "duplicate",
        HandledAs::Busy => "busy",
    }
}

/// A `plugin.invoke.*` job's target plugin and the hook event it carries.
fn parse_invoke_job(job: &WitEvent) -> Result<(String, WitEvent), String> {
    let payload: serde_json::Value = serde_json::from_str(&job.payload)
        .map_err(|e| format!("plugin-invoke job {}: payload is not JSON: {e}", job.id))?;
    let plugin = payload["plugin"]
        .as_str()
        .ok_or_else(|| format!("plugin-invoke job {}: no 'plugin'", job.id))?;
    let hook = payload["hook"]
        .as_str()
        .ok_or_else(|| format!("plugin-invoke job {}: no 'hook'", job.id))?;
    let inner = &payload["event"];
    let event = WitEvent {
        id: inner["id"].as_i64().unwrap_or(job.id),
        event_type: inner["event_type"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("plugin.hook.{hook}")),
        event_version: inner["event_version"].as_i64().unwrap_or(1) as i32,
        tenant_id: inner["tenant_id"]
            .as_str()
            .map(str::to_string)
            .or_else(|| job.tenant_id.clone()),
        payload: inner
            .get("payload")
            .map(|p| p.to_string())
            .unwrap_or_else(|| "{}".into()),
        headers: job.headers.clone(),
        dispatch_key: job.dispatch_key.clone(),
        created_at: inner["created_at"]
            .as_str()
            .unwrap_or(&job.created_at)
            .to_string(),
    };
    Ok((plugin.to_string(), event))
}

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
            let mut fields: Vec<(String, String)> = raw
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| (c[0].clone(), c[1].clone()))
                .collect();
            fields.sort();
            Some(QueueEntry {
                stream_id: id,
                fields,
            })
        })
        .collect()
}

/// Trim a stream below the oldest entry any consumer group still needs (its oldest pending
/// entry, or what it has not read yet). Streams nobody consumes are never trimmed.
async fn trim_acknowledged(conn: &mut ConnectionManager, key: &str) -> Result<(), ReceiveError> {
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
