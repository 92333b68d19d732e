//! Queue controls kept in PostgreSQL: which queues are paused, since when, by whom and why.
//!
//! Owns the `outbox_queue_pause` table (a row per paused queue; its trigger notifies
//! [`QUEUE_PAUSE_CHANNEL`] on every change). It never checks a queue name against the routes
//! (the caller does, with the routes file it has) and never talks to Redis: the receivers read
//! this table and stop reading a paused queue themselves.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::{Context, StoreError};

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
pub async fn pause_queue(
    pool: &PgPool,
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
    .execute(pool)
    .await
    .context(format!("pause {queue}"))?
    .rows_affected();
    Ok(inserted == 1)
}

/// Resume `queue`. False when it was not paused.
pub async fn resume_queue(pool: &PgPool, queue: &str) -> Result<bool, StoreError> {
    let deleted = sqlx::query("DELETE FROM outbox_queue_pause WHERE queue = $1")
        .bind(queue)
        .execute(pool)
        .await
        .context(format!("resume {queue}"))?
        .rows_affected();
    Ok(deleted == 1)
}

/// Every paused queue, by name.
pub async fn paused_queues(pool: &PgPool) -> Result<Vec<QueuePause>, StoreError> {
    let rows = sqlx::query(
        "SELECT queue, paused_at, paused_by, reason FROM outbox_queue_pause ORDER BY queue",
    )
    .fetch_all(pool)
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
