//! Receive: consumes queues and runs the handler plugin bound to each.
//!
//! Split by role, as a producer / completer / maintenance split: [`Receivers`] (here) is the
//! assembly and the set of receivers ([`Receivers::run`]: one per handler-bound queue of the
//! queue group, started and stopped as reloads change `[handlers]`, a stopped one reading
//! nothing more so the queue's entries wait in the stream); `consume` is one queue's receiver
//! loop and one entry's life top to bottom (read, claim, run the handler, record the outcome,
//! [`Receivers::handle_entry`]), with its tasks in `in_flight`. The roles it calls hold only
//! what they need: `claims` (the idempotency claim `SET NX PX` with an owner token, through the
//! pause barrier, made for a read's entries in one round trip, confirmed before a late start,
//! renewed while the handler runs), `invoke` (calling the handler plugin, checking
//! plugin-invoke jobs), `outcomes` (the owner-checked outcome scripts: a `done` marker kept for
//! `OUTBOX_IDEMPOTENCY_TTL_SECONDS`, delayed retry, dead-letter stream, duplicate ack; successes
//! finishing together share one call, `finish_batches`), and the maintenance services, each
//! with a `run_once` (`housekeeping`: [`RetryMover`], [`Reclaimer`], [`StreamTrimmer`];
//! `takeover`: [`DeadHostTakeover`], a dead host's entries before the lease). Beside them:
//! pauses, per-queue concurrency, the rate limit and when the next retry is due in `controls`;
//! one entry of an ordering key at a time on queues marked ordered in `ordering`; receipts
//! (appended to the receipts stream with each outcome, moved to PostgreSQL in batches by a
//! writer, whose SQL is `store::receipts`) in `receipts`, reading held while that stream is
//! full in `receipts_backlog`; dead-letter operations ([`DeadLetters`]) in `dead_letter`; the
//! deadline of retries through infrastructure blips in `blips`. Key names and entry fields come
//! from [`crate::queue`].
//! It never acknowledges an entry before its outcome is recorded in Redis, and every state
//! change of one entry (marker, retry, dead letter, ack) is a single atomic script.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::redis_conn::{RedisConn, RedisTarget};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::capability::http::http_client;
use crate::capability::{CapabilityPolicy, HandlerHost};
use crate::config::Settings;
use crate::live_config::LiveConfig;
use crate::queue::{QueueKeys, CONSUMER_GROUP};

mod blips;
mod claims;
mod consume;
mod controls;
mod dead_letter;
mod finish_batches;
mod housekeeping;
mod in_flight;
mod invoke;
mod ordering;
mod outcomes;
mod receipts;
mod receipts_backlog;
mod receipts_trim;
mod takeover;

pub use outcomes::RESULT_SKIPPED_VERSION;

pub use crate::queue::QueueEntry;
pub use claims::Claim;
pub use dead_letter::{DeadLetter, DeadLetters};
pub use housekeeping::{Reclaimer, RetryMover, StreamTrimmer};
pub use outcomes::{Retry, Settled};
pub use receipts::{write_receipts, HandlerRun, Receipt, RECEIPT_BATCH};
pub use takeover::DeadHostTakeover;

use claims::Claims;
use controls::QueueControls;
use invoke::Invoker;
use outcomes::Outcomes;
use receipts::ReceiptWriters;

/// The built-in handler that calls a subscribed plugin's hook (`plugin.invoke.*` jobs).
pub use crate::naming::BUILTIN_PLUGIN_INVOKE;

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

impl HandledAs {
    /// The `result` label of `outbox_receiver_handled_total` for this outcome.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            HandledAs::Ok => "ok",
            HandledAs::Retry { .. } => "retry",
            HandledAs::Dead(_) => "dead",
            HandledAs::SkippedVersion => RESULT_SKIPPED_VERSION,
            HandledAs::Duplicate => "duplicate",
            HandledAs::Busy => "busy",
            HandledAs::Paused => "paused",
            HandledAs::LostClaim => "lost_claim",
        }
    }
}

/// What an idempotency claim made before an entry's task started found (see
/// `Claims::claim_ahead`).
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

/// Everything the receivers of one process share: the assembly of the roles each receiver
/// loop calls (claims, invoker, outcomes, maintenance services), the queue controls and the
/// receipt writers.
#[derive(Clone)]
pub struct Receivers {
    /// Where reading connections come from (one per receiver loop).
    redis: RedisTarget,
    /// The shared connection: consumer groups, pause keys, receipts stream lengths.
    conn: RedisConn,
    live: LiveConfig,
    settings: Arc<Settings>,
    keys: QueueKeys,
    consumer: String,
    /// Idempotency claims: made, confirmed, renewed.
    claims: Claims,
    /// Runs the handler plugins.
    invoker: Invoker,
    /// Records outcomes.
    outcomes: Outcomes,
    /// The maintenance services each housekeeping round runs.
    maintenance: Maintenance,
    /// Pauses, rate limits, retries due, entries held back by the pause barrier.
    controls: QueueControls,
    /// Keeps this process's receipt writers running.
    receipts: Arc<ReceiptWriters>,
    /// Queue -> receiver loops running on it in this process.
    receiving: Arc<Mutex<BTreeMap<String, usize>>>,
}

/// The maintenance services of a process's receivers, each run once per housekeeping round.
#[derive(Clone)]
struct Maintenance {
    retries: RetryMover,
    reclaimer: Reclaimer,
    trimmer: StreamTrimmer,
    takeover: DeadHostTakeover,
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
    /// Receivers over a connected pool and Redis, consuming as `consumer`, with a listening
    /// session of their own (see [`new_sharing`](Self::new_sharing)).
    pub async fn new(
        pool: PgPool,
        live: LiveConfig,
        settings: Arc<Settings>,
        consumer: impl Into<String>,
    ) -> Result<Self, ReceiveError> {
        let notifications = crate::store::Notifications::start(pool.clone());
        Self::new_sharing(pool, live, settings, consumer, &notifications).await
    }

    /// [`new`](Self::new), following queue pauses on `notifications`, the process's one
    /// listening session (every listening session of the database wakes up for every
    /// published event, so a host keeps one).
    pub async fn new_sharing(
        pool: PgPool,
        live: LiveConfig,
        settings: Arc<Settings>,
        consumer: impl Into<String>,
        notifications: &crate::store::Notifications,
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
        let keys = QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url);
        let handler_host = Arc::new(HandlerHost::new(
            policy,
            pool.clone(),
            conn.clone(),
            keys.clone(),
            http,
            settings.max_payload_bytes,
            crate::capability::publish::generation_limit(settings.max_event_generation),
        ));
        let consumer = consumer.into();
        let lease = settings.receiver_lease;
        let controls = QueueControls::spawn(
            pool.clone(),
            conn.clone(),
            keys.clone(),
            live.clone(),
            notifications,
        );
        let maintenance = Maintenance {
            retries: RetryMover::noting_in(
                conn.clone(),
                keys.clone(),
                controls.retries_due.clone(),
            ),
            reclaimer: Reclaimer::new(conn.clone(), keys.clone(), consumer.clone(), lease),
            trimmer: StreamTrimmer::new(conn.clone(), keys.clone()),
            takeover: DeadHostTakeover::new(
                pool.clone(),
                conn.clone(),
                keys.clone(),
                consumer.clone(),
                lease,
            ),
        };
        let receipts = Arc::new(ReceiptWriters::new(
            pool,
            redis.clone(),
            keys.clone(),
            consumer.clone(),
            lease,
        ));
        Ok(Self {
            claims: Claims::new(conn.clone(), keys.clone(), consumer.clone(), lease),
            invoker: Invoker::new(live.clone(), handler_host),
            outcomes: Outcomes::new(
                conn.clone(),
                keys.clone(),
                &settings,
                controls.retries_due.clone(),
            ),
            maintenance,
            controls,
            receipts,
            redis,
            conn,
            live,
            keys,
            settings,
            consumer,
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

    /// The idempotency claim of (`handler`, `event_id`) on `queue` for this consumer: set the
    /// handled marker to `running:<owner token>` (a token new for this claim) for the receiver
    /// lease unless it exists or the queue's pause key does. `Some`: this consumer runs the
    /// handler, and records its outcome with the claim; `None`: someone runs it or ran it (see
    /// the marker), or the queue is paused.
    pub async fn claim_entry(
        &self,
        queue: &str,
        handler: &str,
        event_id: i64,
    ) -> Result<Option<Claim>, ReceiveError> {
        let claim = self.claims.new_claim(queue, handler, event_id);
        match self.claims.claim_once(claim).await? {
            claims::Claimed::Held(claim) => Ok(Some(claim)),
            claims::Claimed::Refused | claims::Claimed::Paused => Ok(None),
        }
    }

    /// Renew `claim` for another receiver lease and claim `stream_id` on `queue` for this
    /// consumer with its idle time reset (so no other consumer reclaims it), in one step and
    /// only while the marker still holds the claim's token. `false`: the claim is lost (it
    /// lapsed, or another consumer holds it now); nothing changed.
    pub async fn renew_claim(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
    ) -> Result<bool, ReceiveError> {
        self.claims.renew(queue, claim, stream_id).await
    }

    /// Finish (ok) one claimed entry: mark the claimed (handler, event) done for
    /// `OUTBOX_IDEMPOTENCY_TTL_SECONDS`, append `run`'s `ok` receipt to the receipts stream and
    /// acknowledge `stream_id` on `queue`, in one step, unless the claim was lost
    /// ([`Settled::LostClaim`]: nothing changed).
    pub async fn finish_ok(
        &self,
        queue: &str,
        claim: &Claim,
        stream_id: &str,
        run: Option<&HandlerRun>,
    ) -> Result<Settled, ReceiveError> {
        self.outcomes.finish_ok(queue, claim, stream_id, run).await
    }

    /// Schedule `entry`'s next delivery `retry.delay` from now, clearing `claim`'s marker,
    /// appending `run`'s `retry` receipt and acknowledging the entry in one step; unless the
    /// claim was lost ([`HandledAs::LostClaim`]: nothing changed). A full retry set
    /// (`OUTBOX_RETRY_SET_MAX_LEN`) dead-letters the entry instead.
    pub async fn schedule_retry(
        &self,
        queue: &str,
        claim: &Claim,
        entry: &QueueEntry,
        retry: Retry,
        run: Option<&HandlerRun>,
    ) -> HandledAs {
        self.outcomes
            .schedule_retry(queue, claim, entry, retry, run)
            .await
    }

    /// Move `entry` to `queue`'s dead-letter stream with `reason`, clearing `claim`'s marker,
    /// appending `run`'s `dead` receipt and acknowledging the entry in one step; unless the
    /// claim was lost ([`HandledAs::LostClaim`]: nothing changed). Without a claim (an entry
    /// that could not be claimed, e.g. without an event id) no marker is touched.
    pub async fn dead_letter(
        &self,
        queue: &str,
        handler: &str,
        claim: Option<&Claim>,
        entry: &QueueEntry,
        reason: String,
        run: Option<&HandlerRun>,
    ) -> HandledAs {
        self.outcomes
            .dead_letter(queue, handler, claim, entry, reason, run)
            .await
    }
}
