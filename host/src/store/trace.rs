//! Trace reads: what PostgreSQL knows of one event's life, for `outbox trace`.
//!
//! Owns the reads of one event's row, its history (failed attempts, requeues, cancels), its
//! fan-out deliveries and its handlers' receipts. Reads only; what Redis knows (stream entry
//! ids, dead letters) is added by [`crate::trace`].

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::{Context, StoreError};

/// One event's row as a trace shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TracedEvent {
    /// Its id.
    pub id: i64,
    /// Type.
    pub event_type: String,
    /// Version.
    pub event_version: i32,
    /// Tenant.
    pub tenant_id: Option<String>,
    /// Idempotency key (for a handler's child: `child:<parent>:<handler>:<index>`).
    pub dispatch_key: Option<String>,
    /// Ordering key.
    pub ordering_key: Option<String>,
    /// Headers.
    pub headers: serde_json::Value,
    /// Status now.
    pub status: String,
    /// Dispatch attempts counted.
    pub attempts: i32,
    /// Published (committed) at.
    pub created_at: DateTime<Utc>,
    /// Next claim (pending) or lease end (processing).
    pub available_at: DateTime<Utc>,
    /// The host that claimed it last.
    pub claimed_by: Option<String>,
    /// When it was claimed last.
    pub claimed_at: Option<DateTime<Utc>>,
    /// When it was done, failed or cancelled.
    pub processed_at: Option<DateTime<Utc>>,
    /// The last dispatch error.
    pub last_error: Option<String>,
}

/// One fan-out destination's hand-off record.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TracedDelivery {
    /// The queue.
    pub destination: String,
    /// `done` or `pending`.
    pub status: String,
    /// Attempts at this destination.
    pub attempts: i32,
    /// Its stream entry id once handed off.
    pub stream_id: Option<String>,
    /// When it was handed off.
    pub delivered_at: Option<DateTime<Utc>>,
    /// The last error at this destination.
    pub last_error: Option<String>,
}

/// One handler's receipt for the event.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TracedReceipt {
    /// The handler (for a plugin-invoke job: the subscribed plugin).
    pub handler: String,
    /// The queue its entry came from.
    pub queue: String,
    /// `ok`, `retry` or `dead`.
    pub result: String,
    /// Handler attempts.
    pub attempts: i32,
    /// How long the last run took.
    pub duration_ms: f64,
    /// Deliveries found already handled.
    pub duplicates: i32,
    /// The error of a `retry` or `dead` outcome.
    pub error: Option<String>,
    /// Events the handler published.
    pub published_ids: Vec<i64>,
    /// When the first outcome was written.
    pub first_seen_at: DateTime<Utc>,
    /// When the latest was.
    pub updated_at: DateTime<Utc>,
}

/// Event `id`'s row, or `None`.
pub async fn traced_event(pool: &PgPool, id: i64) -> Result<Option<TracedEvent>, StoreError> {
    let row = sqlx::query(
        "SELECT id, event_type, event_version, tenant_id, dispatch_key, ordering_key, headers,
                status, attempts, created_at,
                CASE WHEN status = 'processing' THEN coalesce(claim_expires_at, available_at)
                     ELSE available_at END AS available_at,
                claimed_by, claimed_at, processed_at,
                last_error
         FROM outbox_event WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
    .context(format!("trace event {id}"))?;
    Ok(row.map(|row| TracedEvent {
        id: row.get("id"),
        event_type: row.get("event_type"),
        event_version: row.get("event_version"),
        tenant_id: row.get("tenant_id"),
        dispatch_key: row.get("dispatch_key"),
        ordering_key: row.get("ordering_key"),
        headers: row.get("headers"),
        status: row.get("status"),
        attempts: row.get("attempts"),
        created_at: row.get("created_at"),
        available_at: row.get("available_at"),
        claimed_by: row.get("claimed_by"),
        claimed_at: row.get("claimed_at"),
        processed_at: row.get("processed_at"),
        last_error: row.get("last_error"),
    }))
}

/// Event `id`'s fan-out delivery rows, by destination.
pub async fn event_deliveries(pool: &PgPool, id: i64) -> Result<Vec<TracedDelivery>, StoreError> {
    let rows = sqlx::query(
        "SELECT destination, status, attempts, stream_id, delivered_at, last_error
         FROM outbox_delivery WHERE event_id = $1 ORDER BY destination",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .context(format!("deliveries of event {id}"))?;
    Ok(rows
        .iter()
        .map(|row| TracedDelivery {
            destination: row.get("destination"),
            status: row.get("status"),
            attempts: row.get("attempts"),
            stream_id: row.get("stream_id"),
            delivered_at: row.get("delivered_at"),
            last_error: row.get("last_error"),
        })
        .collect())
}

/// Event `id`'s receipts, by handler.
pub async fn event_receipts(pool: &PgPool, id: i64) -> Result<Vec<TracedReceipt>, StoreError> {
    let rows = sqlx::query(
        "SELECT handler, queue, result, attempts, duration_ms, duplicates, error, published_ids,
                first_seen_at, updated_at
         FROM outbox_receipt WHERE event_id = $1 ORDER BY handler",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    .context(format!("receipts of event {id}"))?;
    Ok(rows
        .iter()
        .map(|row| TracedReceipt {
            handler: row.get("handler"),
            queue: row.get("queue"),
            result: row.get("result"),
            attempts: row.get("attempts"),
            duration_ms: row.get("duration_ms"),
            duplicates: row.get("duplicates"),
            error: row.get("error"),
            published_ids: row.get("published_ids"),
            first_seen_at: row.get("first_seen_at"),
            updated_at: row.get("updated_at"),
        })
        .collect())
}

/// Event `id`'s payload as JSON text, or `None`.
pub async fn event_payload(pool: &PgPool, id: i64) -> Result<Option<String>, StoreError> {
    sqlx::query_scalar("SELECT payload::text FROM outbox_event WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
        .context(format!("payload of event {id}"))
}
