//! Hook parents: the event a plugin-invoke job says the host fanned it out from.
//!
//! Owns the one read the invoke handler makes before it runs a job that claims to be a host
//! child ([`hook_parent`]): the parent row as PostgreSQL holds it, so the hook event a
//! subscriber gets is that row and not what the job's own payload says. Reads only; it never
//! locks or changes a row.

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::{Context, StoreError};

/// The event a plugin-invoke job names as its parent, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookParent {
    /// Its id.
    pub id: i64,
    /// Its type (a hook event's is `plugin.hook.<hook>`).
    pub event_type: String,
    /// Its version.
    pub event_version: i32,
    /// Its tenant.
    pub tenant_id: Option<String>,
    /// Its payload, as JSON text.
    pub payload: String,
    /// When it was published.
    pub created_at: DateTime<Utc>,
}

/// Event `id` as stored (`None`: no such event, e.g. never written or deleted by retention).
pub async fn hook_parent(pool: &PgPool, id: i64) -> Result<Option<HookParent>, StoreError> {
    let row = sqlx::query(
        "SELECT id, event_type, event_version, tenant_id, payload::text AS payload, created_at
         FROM outbox_event WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
    .context(format!(
        "read event {id}, the parent of a plugin-invoke job"
    ))?;
    Ok(row.map(|r| HookParent {
        id: r.get("id"),
        event_type: r.get("event_type"),
        event_version: r.get("event_version"),
        tenant_id: r.get("tenant_id"),
        payload: r.get("payload"),
        created_at: r.get("created_at"),
    }))
}
