//! Receive: consumes queues and runs the handler plugin bound to each.
//!
//! Owns the consumer side of a queue, one submodule per job: the [`Receivers`] type, which
//! queues get a receiver ([`Receivers::run`]: one per handler-bound queue of the queue group,
//! started and stopped as reloads change `[handlers]`, a stopped one reading nothing more so
//! the queue's entries wait in the stream) and the life of one entry
//! ([`Receivers::handle_entry`]: idempotency claim through the pause barrier, handler while
//! the claim is renewed, outcome with its receipt) here; the reading loop in `consume`; the atomic Redis outcome steps
//! (idempotency claim `SET NX PX` with an owner token, its renewal, then a `done` marker kept
//! for `OUTBOX_IDEMPOTENCY_TTL_SECONDS`, delayed retry, dead-letter stream, each only by the
//! claim's owner) in `outcomes`; calling the handler plugin (and checking plugin-invoke jobs)
//! in `invoke`; pauses, per-queue concurrency, the rate limit and when the next retry is due
//! in `controls`;
//! reclaiming (`XAUTOCLAIM` after the receiver lease), moving due retries and trimming in
//! `housekeeping`; taking the entries of a host whose heartbeat stopped before that lease in
//! `takeover`; on queues marked ordered, one entry of an ordering key at a time (a retried
//! entry holding its key until it comes back) in `ordering`; receipts (appended to the
//! receipts stream with each outcome, moved to
//! PostgreSQL in batches by a writer) in `receipts`, reading held while that stream is full in
//! `receipts_backlog`; dead-letter operations ([`DeadLetters`]) in `dead_letter`; carrying
//! these writes through infrastructure blips (a quick retry on a fresh connection, not a
//! redelivery after the lease) in `blips`. Key names and entry fields come from
//! [`crate::queue`].
//! It never acknowledges an entry before its outcome is recorded in Redis, and every state
//! change of one entry (marker, retry, dead letter, ack) is a single atomic script.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::redis_conn::{RedisConn, RedisTarget};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::capability::http::http_client;
use crate::capability::{CapabilityPolicy, HandlerHost};
use crate::config::Settings;
use crate::fault;
use crate::live_config::LiveConfig;
use crate::queue::{QueueKeys, CONSUMER_GROUP};
use crate::reconnect::retry_blips;

mod blips;
mod consume;
mod controls;
mod dead_letter;
mod housekeeping;
mod invoke;
mod ordering;
mod outcomes;
mod receipts;
mod receipts_backlog;
mod takeover;

pub use outcomes::RESULT_SKIPPED_VERSION;

pub use crate::queue::QueueEntry;
pub use dead_letter::{DeadLetter, DeadLetters};
pub use outcomes::{Claim, Retry, Settled};
pub use receipts::{write_receipts, HandlerRun, Receipt, RECEIPT_BATCH};

use invoke::HandlerFailure;
use outcomes::{Claimed, StartConfirmed};
use receipts::ReceiptWriters;

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

/// What became of one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandledAs {
    /// The handler finished; the entry is acknowledged.
    Ok,
    /// A retry is scheduled, due after `after` (the handler backoff, or the handler's own
    /// `retry-after` delay).
    Retry {
        /// Why, as the handler or the host said.
        reason: String,
        /// When the entry comes back, from now.
        after: std::time::Duration,
    },
    /// The entry went to the dead-letter stream.
    Dead(String),
    /// The handler does not support the event's version (`supported_versions` of its
    /// `[plugins.NAME]`): acknowledged without running it, receipted
    /// `skipped_unsupported_version`, never retried.
    SkippedVersion,
    /// Already finished earlier: acknowledged without running the handler.
    Duplicate,
    /// Another consumer is running it right now; left for the lease.
    Busy,
    /// The queue was paused before its handler started (its pause key was set, see
    /// `crate::queue_pause`): nothing ran, no attempt was counted, any claim was released, and
    /// the entry stays pending for this consumer, which runs it once the queue resumes.
    Paused,
    /// This consumer's claim lapsed while the handler ran and another consumer owns the entry
    /// now: the handler's outcome was discarded, the marker and the entry left untouched.
    LostClaim,
}

/// What an idempotency claim made before an entry's task started found (see
/// [`Receivers::claim_ahead`]).
#[derive(Debug)]
pub(super) enum ClaimAhead {
    /// None was made: the task claims the entry itself.
    NotTried,
    /// Made: this consumer runs the handler and records the outcome with it.
    Held(Claim),
    /// The marker exists (someone runs or ran this handler on the event); names the handler.
    Refused(String),
    /// The queue is paused: nothing was claimed; names the handler.
    Paused(String),
    /// The claim's step failed and may or may not have been applied: the task claims again
    /// with the same owner token, so it recognises its own marker.
    Unknown(Claim),
}

impl ClaimAhead {
    /// The handler the claim was made for, if one was tried.
    fn handler(&self) -> Option<&str> {
        match self {
            ClaimAhead::NotTried => None,
            ClaimAhead::Held(claim) | ClaimAhead::Unknown(claim) => Some(claim.handler()),
            ClaimAhead::Refused(handler) | ClaimAhead::Paused(handler) => Some(handler),
        }
    }
}

/// Everything the receivers of one process share.
#[derive(Clone)]
pub struct Receivers {
    redis: RedisTarget,
    conn: RedisConn,
    live: LiveConfig,
    settings: Arc<Settings>,
    keys: QueueKeys,
    consumer: String,
    handler_host: Arc<HandlerHost>,
    scripts: Arc<outcomes::OutcomeScripts>,
    finishes: outcomes::FinishBatches,
    move_due: Arc<redis::Script>,
    /// Takes a dead host's entries (see `takeover`).
    take_over: Arc<redis::Script>,
    /// The hosts whose heartbeat stopped, as last looked up.
    dead_hosts: Arc<takeover::DeadHosts>,
    /// Keeps this process's receipt writers running.
    receipts: Arc<ReceiptWriters>,
    /// Which queues are paused (followed from PostgreSQL).
    pauses: controls::QueuePauses,
    /// The queues' rate limit windows.
    rate_limiter: Arc<controls::RateLimiter>,
    /// When each queue's next retry scheduled here is due.
    retries_due: Arc<controls::RetriesDue>,
    /// The queues with entries held back here by the pause barrier.
    held_by_pause: Arc<controls::HeldByPause>,
    /// Queue -> receiver loops running on it in this process.
    receiving: Arc<Mutex<BTreeMap<String, usize>>>,
}

/// Counts one receiver loop in [`Receivers::receiving`] while it lives.
struct ReceivingGuard {
    receiving: Arc<Mutex<BTreeMap<String, usize>>>,
    queue: String,
}

impl Drop for ReceivingGuard {
    fn drop(&mut self) {
        if let Ok(mut receiving) = self.receiving.lock() {
            if let Some(n) = receiving.get_mut(&self.queue) {
                *n -= 1;
                if *n == 0 {
                    receiving.remove(&self.queue);
                }
            }
        }
    }
}

impl Receivers {
    /// Receivers over a connected pool and Redis, consuming as `consumer`.
    pub async fn new(
        pool: PgPool,
        live: LiveConfig,
        settings: Arc<Settings>,
        consumer: impl Into<String>,
    ) -> Result<Self, ReceiveError> {
        let redis = ctx(
            RedisTarget::with_key_prefix(&settings.redis_url, &settings.redis_prefix)
                .map_err(redis::RedisError::from),
            || "REDIS_URL".into(),
        )?;
        let conn = ctx(redis.shared().await, || {
            format!("connect to Redis at {}", redis.redacted())
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
            QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url),
            http,
            settings.max_payload_bytes,
            crate::capability::publish::generation_limit(settings.max_event_generation),
        ));
        let keys = QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url);
        let consumer = consumer.into();
        let pauses = controls::QueuePauses::spawn(
            pool.clone(),
            conn.clone(),
            QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url),
            live.clone(),
        );
        let receipts = Arc::new(ReceiptWriters::new(
            pool,
            redis.clone(),
            keys.clone(),
            consumer.clone(),
            settings.receiver_lease,
        ));
        let finishes =
            outcomes::FinishBatches::spawn(conn.clone(), settings.idempotency_ttl.as_secs().max(1));
        Ok(Self {
            redis,
            conn,
            handler_host,
            live,
            keys,
            settings,
            consumer,
            scripts: Arc::new(outcomes::OutcomeScripts::new()),
            finishes,
            move_due: Arc::new(housekeeping::move_due_script()),
            take_over: Arc::new(takeover::take_over_script()),
            dead_hosts: Arc::default(),
            receipts,
            pauses,
            rate_limiter: Arc::new(controls::RateLimiter::new()),
            retries_due: Arc::default(),
            held_by_pause: Arc::default(),
            receiving: Arc::default(),
        })
    }

    /// Run a receiver for each queue [`queues_for_group`](Self::queues_for_group) names, and
    /// follow reloads of `routes.toml` until shutdown: a queue that gains a handler (in
    /// `[handlers]`, or by joining the group) gets a receiver; one that loses it has its
    /// receiver stopped. A stopped receiver reads nothing more, so the queue's new entries wait
    /// in the stream, unread, for the next receiver; its running handler calls finish and
    /// record their outcomes first; entries it had read but not finished (at shutdown) are
    /// reclaimed after the receiver lease, and due retries wait in the retry set. This is how
    /// `outbox run` consumes.
    pub async fn run(self, group: Option<String>, shutdown: CancellationToken) {
        let mut applied = self.live.subscribe();
        let mut running: HashMap<String, CancellationToken> = HashMap::new();
        let mut loops = tokio::task::JoinSet::new();
        let mut first = true;
        loop {
            let wanted = self.queues_for_group(group.as_deref());
            running.retain(|queue, stop| {
                let keep = wanted.contains(queue);
                if !keep {
                    tracing::info!(%queue, "no handler bound to this queue any more: stopping its receiver; new entries wait in the stream for a handler");
                    stop.cancel();
                }
                keep
            });
            for queue in wanted {
                if let std::collections::hash_map::Entry::Vacant(slot) = running.entry(queue) {
                    let queue = slot.key().clone();
                    if !first {
                        tracing::info!(%queue, "queue bound to a handler: starting its receiver");
                    }
                    let stop = shutdown.child_token();
                    loops.spawn(
                        self.clone()
                            .consume_until(queue, stop.clone(), shutdown.clone()),
                    );
                    slot.insert(stop);
                }
            }
            if first && running.is_empty() {
                tracing::warn!(group = ?group, "no handler-bound queue in this queue group yet; a receiver starts when routes.toml binds one");
            }
            first = false;
            while loops.try_join_next().is_some() {}
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = applied.changed() => if changed.is_err() {
                    shutdown.cancelled().await;
                    break;
                },
            }
        }
        while loops.join_next().await.is_some() {}
    }

    /// The queues a receiver loop of this process consumes right now (a stopping one counts
    /// until its running handlers finished).
    pub fn receiving(&self) -> Vec<String> {
        self.receiving
            .lock()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Count a receiver loop on `queue` until the guard drops.
    fn receiving_guard(&self, queue: &str) -> ReceivingGuard {
        if let Ok(mut receiving) = self.receiving.lock() {
            *receiving.entry(queue.to_string()).or_default() += 1;
        }
        ReceivingGuard {
            receiving: self.receiving.clone(),
            queue: queue.to_string(),
        }
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

    /// How many receipt updates (outcomes and duplicate counts) this process's receipt writer
    /// has written to `outbox_receipt` so far, each counted once its transaction committed.
    pub fn receipts_written(&self) -> u64 {
        self.receipts.written()
    }

    /// The Redis keys these receivers use.
    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// Create `queue`'s consumer group (and its stream) unless it exists. A new group starts at
    /// the beginning of the stream, so entries enqueued before any receiver ran are consumed
    /// too. [`consume`](Self::consume) calls it first.
    pub async fn ensure_group(&self, queue: &str) -> Result<(), ReceiveError> {
        let key = self.keys.stream(queue);
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg(CONSUMER_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.conn.clone())
            .await;
        match created {
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => ctx(other, || {
                format!("create consumer group {CONSUMER_GROUP} on {key}")
            }),
        }
    }

    /// Handle one entry end to end: idempotency claim, handler (while the claim is renewed),
    /// outcome, receipt.
    pub async fn handle_entry(&self, queue: &str, entry: QueueEntry) -> HandledAs {
        self.handle_claimed_entry(queue, entry, ClaimAhead::NotTried)
            .await
    }

    /// [`handle_entry`](Self::handle_entry) with what a claim made before the entry's task
    /// started found (`consume` claims a read's entries in one round trip). A claim made ahead
    /// names the handler it was made for, and that handler runs the entry.
    pub(super) async fn handle_claimed_entry(
        &self,
        queue: &str,
        entry: QueueEntry,
        ahead: ClaimAhead,
    ) -> HandledAs {
        let handler = match ahead.handler() {
            Some(handler) => handler.to_string(),
            None => match self.live.routes.load().handlers.get(queue) {
                Some(handler) => handler.clone(),
                None => {
                    tracing::warn!(%queue, "no handler bound to this queue any more (its receiver is stopping); the entry stays pending until a handler is bound again");
                    return HandledAs::Busy;
                }
            },
        };
        let attempt = entry.handler_attempt();
        let Some(event_id) = entry.event_id() else {
            return self
                .dead_letter(
                    queue,
                    &handler,
                    None,
                    &entry,
                    "malformed entry: no event_id".into(),
                    None,
                )
                .await;
        };
        let claimed = match ahead {
            ClaimAhead::Held(claim) => Ok(Claimed::Held(claim)),
            ClaimAhead::Refused(_) => Ok(Claimed::Refused),
            ClaimAhead::Paused(_) => Ok(Claimed::Paused),
            ClaimAhead::Unknown(claim) => self.claim_through_blips(claim).await,
            ClaimAhead::NotTried => {
                self.claim_through_blips(self.new_claim(queue, &handler, event_id))
                    .await
            }
        };
        let mut claim = match claimed {
            Ok(Claimed::Held(claim)) => claim,
            Ok(Claimed::Paused) => return self.held_back_by_pause(queue, event_id),
            Ok(Claimed::Refused) => {
                if self.already_done(queue, &handler, event_id).await {
                    let acked = retry_blips(
                        "acknowledge a duplicate",
                        blips::STAGE,
                        self.blip_deadline(),
                        |e: &redis::RedisError| fault::redis_blip(e),
                        || self.ack_duplicate(queue, &entry.stream_id, event_id, &handler),
                    )
                    .await;
                    if let Err(e) = acked {
                        tracing::warn!(%queue, event_id, error = %e, "could not acknowledge a duplicate; it will be delivered again");
                    }
                    metrics::counter!("outbox_receiver_duplicates_total", "queue" => queue.to_string())
                        .increment(1);
                    return HandledAs::Duplicate;
                }
                return HandledAs::Busy;
            }
            Err(e) => {
                tracing::error!(%queue, event_id, error = %e, "idempotency claim failed; entry stays pending");
                return HandledAs::Busy;
            }
        };

        let started = Instant::now();
        if let Some(supported) = self.unsupported_version(&handler, &entry) {
            tracing::info!(%queue, event_id, %handler, version = entry.event_version(), supported = %supported, "handler does not support this event version; skipped");
            let run = HandlerRun {
                event_id,
                handler: handler.clone(),
                queue: queue.to_string(),
                attempts: attempt as i32,
                duration: started.elapsed(),
                published: Vec::new(),
            };
            let handled = self
                .record_skipped_version(queue, &claim, &entry.stream_id, &run)
                .await;
            metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => handled_label(&handled)).increment(1);
            return handled;
        }
        // The pause barrier: a claim granted longer ago than the fence a pause waits for is
        // confirmed first (the queue may have been paused since).
        if !claim.may_start_unconfirmed() {
            match self.confirm_start_through_blips(&mut claim).await {
                Ok(StartConfirmed::Start) => {}
                Ok(StartConfirmed::Paused) => return self.held_back_by_pause(queue, event_id),
                Ok(StartConfirmed::Lost) => {
                    tracing::warn!(%queue, event_id, %handler, "the claim lapsed before its handler started; the entry is left to its new owner");
                    return HandledAs::LostClaim;
                }
                Err(e) => {
                    tracing::warn!(%queue, event_id, error = %e, "cannot confirm the claim before its handler starts (is the queue paused?); the entry stays pending");
                    return HandledAs::Busy;
                }
            }
        }
        // One span per handler run, a child of the event's producer (the entry's traceparent);
        // the host calls' spans and the children's traceparent come from it.
        let span = tracing::debug_span!(parent: None, "outbox.handle", queue, handler = %handler, event_id, attempt, outcome = tracing::field::Empty);
        crate::trace_context::set_remote_parent(&span, entry.headers());
        // The claim is renewed for as long as the handler runs; the renewal ends with it.
        let (outcome, published, (receipt_event, receipt_handler)) = tokio::select! {
            ran = self.run_handler(queue, &handler, &entry, attempt).instrument(span.clone()) => ran,
            never = self.hold_claim(queue, &claim, &entry.stream_id) => match never {},
        };
        let duration = started.elapsed();
        // Its receipt goes to the receipts stream in the step that records the outcome.
        let run = HandlerRun {
            event_id: receipt_event,
            handler: receipt_handler,
            queue: queue.to_string(),
            attempts: attempt as i32,
            duration,
            published,
        };
        let handled = match outcome {
            Ok(()) => self.record_ok(queue, &claim, &entry.stream_id, &run).await,
            Err(HandlerFailure::Fail(reason)) => {
                self.dead_letter(queue, &handler, Some(&claim), &entry, reason, Some(&run))
                    .await
            }
            Err(HandlerFailure::Retry { reason, .. })
                if attempt > self.settings.handler_max_retries =>
            {
                self.dead_letter(
                    queue,
                    &handler,
                    Some(&claim),
                    &entry,
                    format!("gave up after {attempt} attempts: {reason}"),
                    Some(&run),
                )
                .await
            }
            Err(HandlerFailure::Retry { reason, after }) => {
                let retry = Retry {
                    attempt,
                    delay: after.unwrap_or_else(|| self.settings.handler_backoff_after(attempt)),
                    reason,
                };
                self.schedule_retry(queue, &claim, &entry, retry, Some(&run))
                    .await
            }
        };
        span.record("outcome", handled_label(&handled));
        metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => handled_label(&handled)).increment(1);
        metrics::histogram!("outbox_handler_seconds", "handler" => handler.clone())
            .record(duration.as_secs_f64());
        handled
    }
}

impl Receivers {
    /// An entry of `queue` met the pause barrier before its handler started: it stays pending
    /// here, and its receiver recovers it once the queue's pause key is gone.
    fn held_back_by_pause(&self, queue: &str, event_id: i64) -> HandledAs {
        tracing::debug!(%queue, event_id, "queue paused before the handler started; the entry waits pending for the resume");
        self.held_by_pause.note(queue);
        metrics::counter!("outbox_receiver_handled_total", "queue" => queue.to_string(), "result" => handled_label(&HandledAs::Paused)).increment(1);
        HandledAs::Paused
    }

    /// The versions `handler` declares when it does not support `entry`'s event version
    /// (`None`: it does, or declares nothing, or is the host's own plugin-invoke handler).
    fn unsupported_version(&self, handler: &str, entry: &QueueEntry) -> Option<String> {
        let routes = self.live.routes.load();
        let supported = routes.plugins.get(handler)?.supported_versions.as_ref()?;
        let event_type = entry.event_type().unwrap_or_default();
        (!supported.supports(event_type, entry.event_version()))
            .then(|| supported.describe_for(event_type))
    }
}

fn handled_label(h: &HandledAs) -> &'static str {
    match h {
        HandledAs::Ok => "ok",
        HandledAs::Retry { .. } => "retry",
        HandledAs::Dead(_) => "dead",
        HandledAs::SkippedVersion => outcomes::RESULT_SKIPPED_VERSION,
        HandledAs::Duplicate => "duplicate",
        HandledAs::Busy => "busy",
        HandledAs::Paused => "paused",
        HandledAs::LostClaim => "lost_claim",
    }
}
