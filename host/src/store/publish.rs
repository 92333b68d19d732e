//! The publish insert: one event row written inside the producer's transaction.
//!
//! Owns the two statements a publish runs: the insert (a dispatch key already taken writes
//! nothing) and, when the key was taken, the comparison with the event it names. It never
//! commits or opens a transaction of its own (the caller's transaction decides whether the
//! event exists) and never validates: [`crate::publish`] checks the event before it gets here.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Row};

/// The columns of a new `outbox_event` row, already validated by [`crate::publish`].
#[derive(Debug, Clone, Copy)]
pub struct EventRow<'a> {
    /// `event_type`.
    pub event_type: &'a str,
    /// `payload`.
    pub payload: &'a serde_json::Value,
    /// `tenant_id`.
    pub tenant_id: Option<&'a str>,
    /// `dispatch_key`: unique; a second row with it is not written.
    pub dispatch_key: Option<&'a str>,
    /// `headers` (trace context and the producer's own).
    pub headers: &'a serde_json::Value,
    /// `ordering_key`.
    pub ordering_key: Option<&'a str>,
    /// `event_version`.
    pub event_version: i32,
    /// `available_at`: never earlier than now (the database's clock).
    pub available_at: Option<DateTime<Utc>>,
    /// `generation`: how deep in a chain of handler-published events this one is.
    pub generation: i32,
}

/// How the event a dispatch key already names compares with the one a publish brought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHolder {
    /// The id of the event the key names.
    pub id: i64,
    /// Same event type.
    pub same_type: bool,
    /// Same tenant (both none counts as the same).
    pub same_tenant: bool,
    /// Same payload as JSON (key order and spacing do not count).
    pub same_payload: bool,
}

/// Insert `row` in the caller's transaction: its new id, or `None` when its dispatch key
/// already names an event (nothing written; [`compare_with_key_holder`] says which).
pub async fn insert_event(
    conn: &mut PgConnection,
    row: EventRow<'_>,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        r#"
        INSERT INTO outbox_event
            (event_type, payload, tenant_id, dispatch_key, headers, ordering_key, event_version,
             available_at, generation)
        VALUES ($1, $2, $3, $4, $5, $6, $7, greatest(coalesce($8, now()), now()), $9)
        ON CONFLICT (dispatch_key) WHERE dispatch_key IS NOT NULL DO NOTHING
        RETURNING id
        "#,
    )
    .bind(row.event_type)
    .bind(row.payload)
    .bind(row.tenant_id)
    .bind(row.dispatch_key)
    .bind(row.headers)
    .bind(row.ordering_key)
    .bind(row.event_version)
    .bind(row.available_at)
    .bind(row.generation)
    .fetch_optional(conn)
    .await
}

/// The event `row`'s dispatch key names, compared with `row` (jsonb equality for payloads).
pub async fn compare_with_key_holder(
    conn: &mut PgConnection,
    row: EventRow<'_>,
) -> Result<KeyHolder, sqlx::Error> {
    let found = sqlx::query(
        r#"
        SELECT id, event_type = $2 AS same_type, tenant_id IS NOT DISTINCT FROM $3 AS same_tenant,
               payload = $4 AS same_payload
        FROM outbox_event WHERE dispatch_key = $1
        "#,
    )
    .bind(row.dispatch_key)
    .bind(row.event_type)
    .bind(row.tenant_id)
    .bind(row.payload)
    .fetch_one(conn)
    .await?;
    Ok(KeyHolder {
        id: found.try_get("id")?,
        same_type: found.try_get("same_type")?,
        same_tenant: found.try_get("same_tenant")?,
        same_payload: found.try_get("same_payload")?,
    })
}
