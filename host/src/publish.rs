//! Publish: how an application puts an event into the outbox.
//!
//! Owns input validation and the insert. [`publish`] only accepts a `sqlx` transaction, so the
//! event commits or rolls back with the business change that caused it; calling it on a bare
//! pool or connection does not compile. Validation happens before anything is written. The SQL
//! function `outbox_publish(...)` (see `migrations/`) applies the same rules for other languages.

use sqlx::{Postgres, Transaction};

use crate::config::DEFAULT_MAX_PAYLOAD_BYTES;

/// An event to publish. Build one with [`NewEvent::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Lowercase, dot-separated, at least two segments (`mail.welcome`).
    pub event_type: String,
    /// A JSON object.
    pub payload: serde_json::Value,
    /// Tenant, if the product is multi-tenant.
    pub tenant_id: Option<String>,
    /// Producer idempotency key: publishing the same key twice returns the first event's id.
    pub dispatch_key: Option<String>,
    /// Trace context, correlation id, ... (a JSON object).
    pub headers: serde_json::Value,
    /// Key for ordered consumers (stored; informational for now).
    pub ordering_key: Option<String>,
    /// Payload schema version (>= 1).
    pub event_version: i32,
}

impl NewEvent {
    /// An event of `event_type` with `payload`, no tenant, no dispatch key, empty headers.
    pub fn new(event_type: impl Into<String>, payload: serde_json::Value) -> Self {
        Self {
            event_type: event_type.into(),
            payload,
            tenant_id: None,
            dispatch_key: None,
            headers: serde_json::Value::Object(Default::default()),
            ordering_key: None,
            event_version: 1,
        }
    }

    /// Set the tenant.
    pub fn with_tenant(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// Set the producer idempotency key.
    pub fn with_dispatch_key(mut self, key: impl Into<String>) -> Self {
        self.dispatch_key = Some(key.into());
        self
    }

    /// Set the headers (must be a JSON object).
    pub fn with_headers(mut self, headers: serde_json::Value) -> Self {
        self.headers = headers;
        self
    }

    /// Set the ordering key.
    pub fn with_ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Set the payload schema version.
    pub fn with_version(mut self, version: i32) -> Self {
        self.event_version = version;
        self
    }
}

/// Why an event was not published. Nothing was written in any of these cases.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The event type breaks the naming rule.
    #[error("invalid event type {0:?}: use lowercase dot-separated segments (a-z, 0-9, '_', '-'), at least two, e.g. \"mail.welcome\"")]
    InvalidEventType(String),
    /// The payload is not a JSON object.
    #[error("payload of {event_type} must be a JSON object, got {found}")]
    PayloadNotObject {
        /// The event's type.
        event_type: String,
        /// What it was instead (`array`, `string`, ...).
        found: &'static str,
    },
    /// The payload is too large.
    #[error("payload of {event_type} is {size} bytes, over the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The event's type.
        event_type: String,
        /// Serialised size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// Headers are not a JSON object.
    #[error("headers of {event_type} must be a JSON object")]
    HeadersNotObject {
        /// The event's type.
        event_type: String,
    },
    /// A field is out of range (empty dispatch key, version < 1, ...).
    #[error("{0}")]
    InvalidField(String),
    /// The insert failed.
    #[error("publish {event_type}: {source}")]
    Database {
        /// The event's type.
        event_type: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
}

/// Check an event type: lowercase, dot-separated, at least two non-empty segments.
pub fn validate_event_type(event_type: &str) -> Result<(), PublishError> {
    let ok = event_type.len() <= 255
        && event_type.split('.').count() >= 2
        && event_type.split('.').all(|seg| {
            !seg.is_empty()
                && seg
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(PublishError::InvalidEventType(event_type.to_string()))
    }
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Validate an event against the rules and a payload size limit, without writing anything.
pub fn validate(event: &NewEvent, max_payload_bytes: usize) -> Result<(), PublishError> {
    validate_event_type(&event.event_type)?;
    if !event.payload.is_object() {
        return Err(PublishError::PayloadNotObject {
            event_type: event.event_type.clone(),
            found: json_kind(&event.payload),
        });
    }
    let size = serde_json::to_vec(&event.payload)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > max_payload_bytes {
        return Err(PublishError::PayloadTooLarge {
            event_type: event.event_type.clone(),
            size,
            limit: max_payload_bytes,
        });
    }
    if !event.headers.is_object() {
        return Err(PublishError::HeadersNotObject {
            event_type: event.event_type.clone(),
        });
    }
    if event.event_version < 1 {
        return Err(PublishError::InvalidField(format!(
            "event_version of {} must be >= 1, got {}",
            event.event_type, event.event_version
        )));
    }
    if matches!(&event.dispatch_key, Some(k) if k.is_empty() || k.len() > 512) {
        return Err(PublishError::InvalidField(format!(
            "dispatch_key of {} must be 1 to 512 characters",
            event.event_type
        )));
    }
    Ok(())
}

/// Publish `event` inside the caller's transaction, with the default 256 KiB payload limit.
/// Returns the new id, or the existing id when `dispatch_key` was already used (nothing is
/// written then). The event is visible to dispatchers only when `tx` commits.
pub async fn publish(
    tx: &mut Transaction<'_, Postgres>,
    event: NewEvent,
) -> Result<i64, PublishError> {
    publish_with_limit(tx, event, DEFAULT_MAX_PAYLOAD_BYTES).await
}

/// [`publish`] with an explicit payload limit (`OUTBOX_MAX_PAYLOAD_BYTES`).
pub async fn publish_with_limit(
    tx: &mut Transaction<'_, Postgres>,
    event: NewEvent,
    max_payload_bytes: usize,
) -> Result<i64, PublishError> {
    validate(&event, max_payload_bytes)?;
    let db_err = |source| PublishError::Database {
        event_type: event.event_type.clone(),
        source,
    };
    let inserted: Option<i64> = sqlx::query_scalar(
        r#"
        INSERT INTO outbox_event
            (event_type, payload, tenant_id, dispatch_key, headers, ordering_key, event_version)
        VALUES ($1, $2, $3, $4, $5, $6, $7)
        ON CONFLICT (dispatch_key) DO NOTHING
        RETURNING id
        "#,
    )
    .bind(&event.event_type)
    .bind(&event.payload)
    .bind(&event.tenant_id)
    .bind(&event.dispatch_key)
    .bind(&event.headers)
    .bind(&event.ordering_key)
    .bind(event.event_version)
    .fetch_optional(&mut **tx)
    .await
    .map_err(db_err)?;
    match inserted {
        Some(id) => Ok(id),
        None => sqlx::query_scalar("SELECT id FROM outbox_event WHERE dispatch_key = $1")
            .bind(&event.dispatch_key)
            .fetch_one(&mut **tx)
            .await
            .map_err(db_err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_type_rule() {
        for ok in [
            "mail.welcome",
            "a.b",
            "tenant.subscription.created",
            "ai.cost.v2_x-y",
        ] {
            assert!(validate_event_type(ok).is_ok(), "{ok}");
        }
        for bad in [
            "mail",
            "",
            "Mail.welcome",
            "mail..x",
            ".mail",
            "mail.",
            "mail welcome.x",
            "mail.wélcome",
        ] {
            assert!(validate_event_type(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn payload_rules() {
        let e = NewEvent::new("mail.welcome", serde_json::json!([1]));
        assert!(matches!(
            validate(&e, 100),
            Err(PublishError::PayloadNotObject { .. })
        ));
        let e = NewEvent::new("mail.welcome", serde_json::json!({"x": "y".repeat(200)}));
        let err = validate(&e, 100).unwrap_err();
        assert!(
            err.to_string().contains("over the limit of 100 bytes"),
            "{err}"
        );
    }
}
