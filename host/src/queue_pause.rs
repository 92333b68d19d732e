//! Queue pause: pausing and resuming a queue (`outbox queue pause|resume`) as a barrier.
//!
//! The guarantee: once [`QueuePauseControl::pause`] has returned, no handler call of the queue
//! starts on any live host until it is resumed (calls already running finish). Owns the two
//! records of a pause and keeping them in step: the row in `outbox_queue_pause` (the lasting
//! record, which hosts follow to stop reading the queue) and the queue's pause key in Redis
//! ([`QueueKeys::paused`]: the barrier). Every idempotency claim on a queue checks the pause key
//! in the same Redis script that makes the claim, so once the key is set no claim is granted
//! anywhere; a claim granted just before must start its handler within
//! [`PAUSE_START_FENCE`] or check the key again (`crate::receive`), and the pause waits
//! [`PAUSE_SETTLE`] (longer than that fence) before returning. A pause or resume changes the row,
//! writes its audit row and sets or deletes the key under the exclusive pause lock
//! ([`crate::store::PauseLock`]); hosts re-assert the keys from the rows under the shared lock
//! ([`reassert_pause_keys`]), so a Redis that restarted empty gets its pauses back within a
//! second, and a key no row backs is deleted. It never runs a handler and never reads a queue.

use std::time::Duration;

use sqlx::PgPool;

use crate::config::Settings;
use crate::queue::{KeyLayout, QueueKeys};
use crate::redis_conn::{RedisConn, RedisTarget};
use crate::store::{Operator, PauseLock, QueuePause, StoreError};

/// How long after its claim was sent a handler call may start without checking the pause key
/// again: a claim older than this when its handler is about to start is confirmed first (and
/// given up, the entry left pending, when the queue was paused meanwhile).
pub const PAUSE_START_FENCE: Duration = Duration::from_millis(500);

/// How long a pause waits after setting the pause key before it returns: longer than
/// [`PAUSE_START_FENCE`], so every claim granted before the key was set has started its handler
/// or will check the key again.
pub const PAUSE_SETTLE: Duration = Duration::from_millis(750);

/// Why a pause or resume failed; nothing was changed unless it says so.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Redis failed while setting or deleting the pause key.
    #[error("{context}: {source} (nothing was changed)")]
    Redis {
        /// What was being done.
        context: String,
        /// The Redis error.
        #[source]
        source: redis::RedisError,
    },
}

/// Pauses and resumes queues: the library call behind `outbox queue pause|resume` (and any
/// embedder's), one Redis connection to set the pause keys.
pub struct QueuePauseControl {
    conn: RedisConn,
    keys: QueueKeys,
}

impl QueuePauseControl {
    /// Connect to the Redis of `settings` (`REDIS_URL`, `OUTBOX_REDIS_PREFIX`).
    pub async fn connect(settings: &Settings) -> Result<Self, PauseError> {
        let redis_error = |source: redis::RedisError| PauseError::Redis {
            context: "connect to Redis (REDIS_URL) to set the queue's pause key".into(),
            source,
        };
        let target = RedisTarget::with_key_prefix(&settings.redis_url, &settings.redis_prefix)
            .map_err(|e| redis_error(redis::RedisError::from(e)))?;
        let conn = target.shared().await.map_err(redis_error)?;
        Ok(Self {
            conn,
            keys: QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url),
        })
    }

    /// Pause `queue` for `operator` (`reason`: blank is none; the table refuses one longer than
    /// [`crate::store::MAX_PAUSE_REASON_CHARS`]): under the exclusive pause lock, set the pause key,
    /// then write the row and its audit row in one transaction; then wait [`PAUSE_SETTLE`].
    /// When it returns, no handler call of `queue` starts on any live host until a resume.
    /// False when the queue was paused already (the first pause's row stays; the key is set
    /// again all the same). On an error nothing was changed (a key set by a pause whose commit
    /// failed is deleted by the hosts' next re-read).
    pub async fn pause(
        &self,
        pool: &PgPool,
        operator: &Operator,
        queue: &str,
        reason: Option<&str>,
    ) -> Result<bool, PauseError> {
        let mut lock = PauseLock::exclusive(pool).await?;
        let was_paused = is_paused(&mut lock, queue).await?;
        let key = self.keys.paused(queue);
        // The barrier first, so no row lock is held across a Redis call.
        self.set_key(&key, &operator.name).await?;
        let recorded = async {
            let newly = lock.pause(queue, &operator.name, reason).await?;
            lock.record_audit(
                operator,
                "queue pause",
                &serde_json::json!({ "queue": queue, "reason": reason }),
                u64::from(newly),
            )
            .await?;
            Ok::<_, StoreError>(newly)
        }
        .await;
        let newly = match recorded {
            Ok(newly) => newly,
            Err(e) => {
                if !was_paused {
                    self.delete_key_after_failure(&key).await;
                }
                return Err(e.into());
            }
        };
        lock.commit().await?;
        tokio::time::sleep(PAUSE_SETTLE).await;
        Ok(newly)
    }

    /// Resume `queue` for `operator`: under the exclusive pause lock, delete the pause key, then
    /// delete the row and write its audit row in one transaction; every host reads the queue
    /// again within a second. False when it was not paused (the key is deleted all the same).
    /// On an error nothing was changed (a key deleted by a resume whose commit failed is set
    /// again by the hosts' next re-read).
    pub async fn resume(
        &self,
        pool: &PgPool,
        operator: &Operator,
        queue: &str,
    ) -> Result<bool, PauseError> {
        let mut lock = PauseLock::exclusive(pool).await?;
        let paused_by = lock
            .paused_queues()
            .await?
            .into_iter()
            .find(|p| p.queue == queue)
            .map(|p| p.paused_by);
        let key = self.keys.paused(queue);
        redis::cmd("DEL")
            .arg(&key)
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(|source| PauseError::Redis {
                context: format!("delete the pause key {key}"),
                source,
            })?;
        let recorded = async {
            let resumed = lock.resume(queue).await?;
            lock.record_audit(
                operator,
                "queue resume",
                &serde_json::json!({ "queue": queue }),
                u64::from(resumed),
            )
            .await?;
            Ok::<_, StoreError>(resumed)
        }
        .await;
        let resumed = match recorded {
            Ok(resumed) => resumed,
            Err(e) => {
                if let Some(paused_by) = paused_by {
                    if let Err(redis) = self.set_key(&key, &paused_by).await {
                        tracing::warn!(error = %redis, %key, "could not set the pause key again after a failed resume; the hosts' next re-read sets it");
                    }
                }
                return Err(e.into());
            }
        };
        lock.commit().await?;
        Ok(resumed)
    }

    /// Set the pause key `key` to `by`.
    async fn set_key(&self, key: &str, by: &str) -> Result<(), PauseError> {
        redis::cmd("SET")
            .arg(key)
            .arg(by)
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(|source| PauseError::Redis {
                context: format!("set the pause key {key}"),
                source,
            })
    }

    /// Delete the pause key `key` a failed pause set (still under the pause lock).
    async fn delete_key_after_failure(&self, key: &str) {
        let deleted = redis::cmd("DEL")
            .arg(key)
            .query_async::<()>(&mut self.conn.clone())
            .await;
        if let Err(e) = deleted {
            tracing::warn!(error = %e, %key, "could not delete the pause key of a failed pause; the hosts' next re-read deletes it");
        }
    }
}

/// Whether `queue` has a pause row, as the holder of `lock` reads it.
async fn is_paused(lock: &mut PauseLock, queue: &str) -> Result<bool, StoreError> {
    Ok(lock.paused_queues().await?.iter().any(|p| p.queue == queue))
}

/// Re-read the paused queues and make the pause keys agree with them, under the shared pause
/// lock (so no pause or resume interleaves): set the key of every paused queue, delete the key
/// of each of `queues` (the queues this process consumes) that is not paused. Returns the
/// paused queues; a Redis failure is logged and leaves the keys as they were (the rows are
/// returned all the same).
pub async fn reassert_pause_keys(
    pool: &PgPool,
    conn: &RedisConn,
    keys: &QueueKeys,
    queues: &[String],
) -> Result<Vec<QueuePause>, StoreError> {
    let mut lock = PauseLock::shared(pool).await?;
    let paused = lock.paused_queues().await?;
    let mut commands = Vec::new();
    for p in &paused {
        let mut set = redis::cmd("SET");
        set.arg(keys.paused(&p.queue)).arg(&p.paused_by);
        commands.push(set);
    }
    for queue in queues {
        if !paused.iter().any(|p| &p.queue == queue) {
            let mut del = redis::cmd("DEL");
            del.arg(keys.paused(queue));
            commands.push(del);
        }
    }
    if let Err(e) = run_each(conn, keys, commands).await {
        tracing::warn!(error = %e, "cannot re-assert the queue pause keys in Redis; trying again at the next read");
    }
    lock.commit().await?;
    Ok(paused)
}

/// Run `commands` (each on one key): in one pipeline on one Redis node, one by one on a
/// cluster (where a pipeline must stay in one slot).
async fn run_each(
    conn: &RedisConn,
    keys: &QueueKeys,
    commands: Vec<redis::Cmd>,
) -> redis::RedisResult<()> {
    if commands.is_empty() {
        return Ok(());
    }
    let mut conn = conn.clone();
    if keys.layout() == KeyLayout::Classic {
        let mut pipe = redis::pipe();
        for command in commands {
            pipe.add_command(command).ignore();
        }
        return pipe.query_async::<()>(&mut conn).await;
    }
    for command in commands {
        command.query_async::<()>(&mut conn).await?;
    }
    Ok(())
}
