//! Queue controls kept in PostgreSQL: which queues are paused, since when, by whom and why.
//!
//! Owns the `outbox_queue_pause` table (a row per paused queue; its trigger notifies
//! [`QUEUE_PAUSE_CHANNEL`] on every change) and the pause lock ([`PauseLock`]: a transaction
//! holding the advisory lock [`PAUSE_LOCK`], exclusive for an operator's pause or resume and its
//! audit row, shared for a host re-reading the table), which keeps each pause row and the
//! Redis pause key that `crate::queue_pause` keeps beside it changing in one order. It never
//! checks a queue name against the routes (the caller does, with the routes file it has) and
//! never talks to Redis itself: the caller does, while it holds the lock.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, Row, Transaction};

use super::{record_audit, Context, Operator, StoreError, PAUSE_LOCK};

/// The channel the table's trigger notifies with the queue's name on every pause and resume.
pub const QUEUE_PAUSE_CHANNEL: &str = "outbox_queue_pause";

/// The longest pause reason kept (the table's check).
pub const MAX_PAUSE_REASON_CHARS: usize = 500;

/// One paused queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QueuePause {
    /// The queue.
    pub queue: String,
    /// When it was paused.
    pub paused_at: DateTime<Utc>,
    /// The operator who paused it.
    pub paused_by: String,
    /// Why, as the operator said.
    pub reason: Option<String>,
}

/// Pause `queue` (by `operator`, for `reason`: blank is none; the table refuses one longer than
/// [`MAX_PAUSE_REASON_CHARS`]). False when it was paused already (the first pause's time,
/// operator and reason stay).
pub async fn pause_queue<'e>(
    executor: impl PgExecutor<'e>,
    queue: &str,
    operator: &str,
    reason: Option<&str>,
) -> Result<bool, StoreError> {
    let reason = reason.map(str::trim).filter(|r| !r.is_empty());
    let inserted = sqlx::query(
        "INSERT INTO outbox_queue_pause (queue, paused_by, reason) VALUES ($1, $2, $3)
         ON CONFLICT (queue) DO NOTHING",
    )
    .bind(queue)
    .bind(operator)
    .bind(reason)
    .execute(executor)
    .await
    .context(format!("pause {queue}"))?
    .rows_affected();
    Ok(inserted == 1)
}

/// Resume `queue`. False when it was not paused.
pub async fn resume_queue<'e>(
    executor: impl PgExecutor<'e>,
    queue: &str,
) -> Result<bool, StoreError> {
    let deleted = sqlx::query("DELETE FROM outbox_queue_pause WHERE queue = $1")
        .bind(queue)
        .execute(executor)
        .await
        .context(format!("resume {queue}"))?
        .rows_affected();
    Ok(deleted == 1)
}

/// Every paused queue, by name.
pub async fn paused_queues<'e>(
    executor: impl PgExecutor<'e>,
) -> Result<Vec<QueuePause>, StoreError> {
    let rows = sqlx::query(
        "SELECT queue, paused_at, paused_by, reason FROM outbox_queue_pause ORDER BY queue",
    )
    .fetch_all(executor)
    .await
    .context("read the paused queues")?;
    Ok(rows
        .iter()
        .map(|row| QueuePause {
            queue: row.get("queue"),
            paused_at: row.get("paused_at"),
            paused_by: row.get("paused_by"),
            reason: row.get("reason"),
        })
        .collect())
}

/// A transaction holding the pause lock ([`PAUSE_LOCK`]): what it changes and the Redis work
/// its holder does before [`commit`](Self::commit) happen as one step for every other holder.
/// Dropped without a commit, it changes nothing.
pub struct PauseLock {
    tx: Transaction<'static, Postgres>,
}

impl PauseLock {
    /// Begin a transaction holding the lock exclusively (an operator's pause or resume): waits
    /// for the holders before it.
    pub async fn exclusive(pool: &PgPool) -> Result<Self, StoreError> {
        Self::begin(pool, "SELECT pg_advisory_xact_lock($1)").await
    }

    /// Begin a transaction holding the lock shared (a host re-reading the pauses): any number
    /// at once, none while a pause or resume holds it.
    pub async fn shared(pool: &PgPool) -> Result<Self, StoreError> {
        Self::begin(pool, "SELECT pg_advisory_xact_lock_shared($1)").await
    }

    async fn begin(pool: &PgPool, lock: &'static str) -> Result<Self, StoreError> {
        let mut tx = pool.begin().await.context("begin a queue pause change")?;
        sqlx::query(lock)
            .bind(PAUSE_LOCK)
            .execute(&mut *tx)
            .await
            .context("take the queue pause lock")?;
        Ok(Self { tx })
    }

    /// [`pause_queue`] in this transaction.
    pub async fn pause(
        &mut self,
        queue: &str,
        operator: &str,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        pause_queue(&mut *self.tx, queue, operator, reason).await
    }

    /// [`resume_queue`] in this transaction.
    pub async fn resume(&mut self, queue: &str) -> Result<bool, StoreError> {
        resume_queue(&mut *self.tx, queue).await
    }

    /// [`paused_queues`] in this transaction.
    pub async fn paused_queues(&mut self) -> Result<Vec<QueuePause>, StoreError> {
        paused_queues(&mut *self.tx).await
    }

    /// [`record_audit`] in this transaction: committed with the change, or not at all.
    pub async fn record_audit(
        &mut self,
        operator: &Operator,
        command: &str,
        arguments: &serde_json::Value,
        rows_affected: u64,
    ) -> Result<(), StoreError> {
        record_audit(
            &mut *self.tx,
            operator,
            command,
            arguments,
            false,
            rows_affected,
        )
        .await
    }

    /// Commit the change (and release the lock).
    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx
            .commit()
            .await
            .context("commit a queue pause change")
    }
}
