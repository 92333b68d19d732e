//! Publish: how an application puts an event into the outbox.
//!
//! Owns input validation and the insert. [`publish`] only accepts a `sqlx` transaction, so the
//! event commits or rolls back with the business change that caused it; calling it on a bare
//! pool or connection does not compile. Validation happens before anything is written. The SQL
//! function `outbox_publish(...)` (see `migrations/`) applies the same rules, with the same
//! messages, for other languages, except the trace headers: a producer's malformed `traceparent`
//! or `tracestate` is refused here only ([`crate::trace_context`]; the host ignores one that
//! arrives through SQL). An event without a `traceparent` gets the current span's when spans
//! are exported.
//!
//! Also owns the dispatch key contract: a key names one event (a repeated key returns the first
//! id only when type, tenant and payload match, and is a [`PublishError::DispatchKeyConflict`]
//! otherwise), the key rules ([`validate_key`]) and the prefixes reserved for the host's own
//! events ([`RESERVED_DISPATCH_KEY_PREFIXES`]). It never lets a producer use a reserved prefix:
//! only the host's own publish paths (`capability::publish`, denial events) may. Nor can a
//! producer set an event's generation: [`NewEvent`] has none, and what a producer publishes is
//! generation 0; only the host's child path stores a deeper one.

use sqlx::{Postgres, Transaction};

use crate::config::DEFAULT_MAX_PAYLOAD_BYTES;
use crate::contracts::{ContractViolation, Contracts};

/// Longest dispatch or ordering key, in bytes.
pub const MAX_KEY_BYTES: usize = 512;

/// Dispatch key prefixes only the host's own events use (handler children, denial audits).
pub const RESERVED_DISPATCH_KEY_PREFIXES: &[&str] = &["child:", "denied:"];

/// Who publishes: producers may not use [`RESERVED_DISPATCH_KEY_PREFIXES`], the host may.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publisher {
    /// An application, the SQL function or the CLI.
    Producer,
    /// The host itself (handler children, denial events).
    Host,
}

/// An event to publish. Build one with [`NewEvent::new`] and the `with_*` methods.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Lowercase, dot-separated, at least two segments (`mail.welcome`).
    pub event_type: String,
    /// A JSON object.
    pub payload: serde_json::Value,
    /// Tenant, if the product is multi-tenant.
    pub tenant_id: Option<String>,
    /// Producer idempotency key: publishing the same key again with the same type, tenant and
    /// payload returns the first event's id; with different ones it is a conflict.
    pub dispatch_key: Option<String>,
    /// Trace context, correlation id, ... (a JSON object).
    pub headers: serde_json::Value,
    /// Ordering key: events of one key are dispatched one at a time in id order (see
    /// [`crate::store::CLAIM_SQL`]), and handled so on queues marked `ordered`.
    pub ordering_key: Option<String>,
    /// Payload schema version (>= 1).
    pub event_version: i32,
    /// Not dispatched before this time (`None`, or a time before the transaction's start: at
    /// once, stored as the transaction's `now()`).
    pub available_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// What [`publish_reporting`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Published {
    /// The event's id.
    pub id: i64,
    /// `false` when its dispatch key already named the same event (nothing was written).
    pub inserted: bool,
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
            available_at: None,
        }
    }

    /// Hold the event back until `at` (it is dispatched from then on; a time in the past is
    /// stored as now).
    pub fn with_available_at(mut self, at: chrono::DateTime<chrono::Utc>) -> Self {
        self.available_at = Some(at);
        self
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
    #[error("{}", crate::naming::NameError::EventType(.0.clone()))]
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
    /// A `traceparent` or `tracestate` header is not a valid W3C trace context.
    #[error("headers of {event_type}: {source}")]
    InvalidTraceContext {
        /// The event's type.
        event_type: String,
        /// What is wrong with it.
        #[source]
        source: crate::trace_context::TraceContextError,
    },
    /// A field is out of range (version < 1, ...).
    #[error("{0}")]
    InvalidField(String),
    /// A dispatch or ordering key breaks the key rule.
    #[error("{field} of {event_type} must be 1 to 512 bytes of printable ASCII without spaces")]
    InvalidKey {
        /// `dispatch_key` or `ordering_key`.
        field: &'static str,
        /// The event's type.
        event_type: String,
    },
    /// A producer used a dispatch key prefix reserved for the host's own events.
    #[error("dispatch_key of {event_type} starts with {prefix}, a prefix reserved for the host's own events")]
    ReservedKeyPrefix {
        /// The event's type.
        event_type: String,
        /// The reserved prefix it starts with.
        prefix: &'static str,
    },
    /// The dispatch key already names an event with another type, tenant or payload.
    #[error("dispatch_key {key} already names event {existing_id} with a different {differs}")]
    DispatchKeyConflict {
        /// The dispatch key.
        key: String,
        /// The event the key already names.
        existing_id: i64,
        /// What differs: `event type`, `tenant`, `payload`, comma-separated.
        differs: String,
    },
    /// The payload breaks the contract of its type and version, or (strict mode) the type or
    /// version has none.
    #[error(transparent)]
    Contract(#[from] ContractViolation),
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

/// Check an event type ([`crate::naming::validate_event_type`]: lowercase, dot-separated, at
/// least two non-empty segments), as a [`PublishError`].
pub fn validate_event_type(event_type: &str) -> Result<(), PublishError> {
    crate::naming::validate_event_type(event_type)
        .map_err(|_| PublishError::InvalidEventType(event_type.to_string()))
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

/// Check a dispatch or ordering key (`field` names it in the error): 1 to [`MAX_KEY_BYTES`]
/// bytes of printable ASCII without spaces (`!` to `~`).
pub fn validate_key(field: &'static str, event_type: &str, key: &str) -> Result<(), PublishError> {
    let ok =
        !key.is_empty() && key.len() <= MAX_KEY_BYTES && key.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(PublishError::InvalidKey {
            field,
            event_type: event_type.to_string(),
        })
    }
}

/// Validate an event against the rules and a payload size limit, without writing anything.
/// A dispatch key with a reserved prefix is rejected: those are the host's.
pub fn validate(event: &NewEvent, max_payload_bytes: usize) -> Result<(), PublishError> {
    validate_as(event, max_payload_bytes, Publisher::Producer)
}

/// [`validate`], for `publisher`: only the host may use the reserved key prefixes.
pub(crate) fn validate_as(
    event: &NewEvent,
    max_payload_bytes: usize,
    publisher: Publisher,
) -> Result<(), PublishError> {
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
    if event.tenant_id.as_deref() == Some("") {
        return Err(PublishError::InvalidField(format!(
            "tenant_id of {} must not be empty (leave it out for no tenant)",
            event.event_type
        )));
    }
    if event.event_version < 1 {
        return Err(PublishError::InvalidField(format!(
            "event_version of {} must be >= 1, got {}",
            event.event_type, event.event_version
        )));
    }
    if let Some(key) = &event.dispatch_key {
        validate_key("dispatch_key", &event.event_type, key)?;
    }
    if let Some(key) = &event.ordering_key {
        validate_key("ordering_key", &event.event_type, key)?;
    }
    if publisher == Publisher::Producer {
        crate::trace_context::check_headers(&event.headers).map_err(|source| {
            PublishError::InvalidTraceContext {
                event_type: event.event_type.clone(),
                source,
            }
        })?;
        if let Some(prefix) = event.dispatch_key.as_deref().and_then(reserved_prefix) {
            return Err(PublishError::ReservedKeyPrefix {
                event_type: event.event_type.clone(),
                prefix,
            });
        }
    }
    Ok(())
}

/// The reserved prefix `key` starts with, if any.
fn reserved_prefix(key: &str) -> Option<&'static str> {
    RESERVED_DISPATCH_KEY_PREFIXES
        .iter()
        .copied()
        .find(|prefix| key.starts_with(prefix))
}

/// Publish `event` inside the caller's transaction, with the default 256 KiB payload limit.
/// Returns the new id, or the existing id when `dispatch_key` already names an event of the
/// same type, tenant and payload (nothing is written then; headers may differ); a
/// [`PublishError::DispatchKeyConflict`] when it names a different one. The event is visible to dispatchers only when `tx` commits.
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
    publish_as(tx, event, max_payload_bytes, Publisher::Producer, 0).await
}

/// [`publish_with_limit`] for `publisher` (the host's own paths pass [`Publisher::Host`]), of
/// generation `generation`. Only the host's child path passes one above 0 (a handler's child:
/// its parent's + 1, see `capability::publish`); what a producer publishes is generation 0.
pub(crate) async fn publish_as(
    tx: &mut Transaction<'_, Postgres>,
    event: NewEvent,
    max_payload_bytes: usize,
    publisher: Publisher,
    generation: i32,
) -> Result<i64, PublishError> {
    publish_reported_as(tx, event, max_payload_bytes, publisher, generation)
        .await
        .map(|p| p.id)
}

/// What a published event must meet beyond its own shape: the payload limit and, when the
/// application has adopted them, the event contracts (`contracts/` beside `routes.toml`).
#[derive(Debug, Clone)]
pub struct PublishRules {
    /// Largest payload, in bytes (`OUTBOX_MAX_PAYLOAD_BYTES`).
    pub max_payload_bytes: usize,
    /// The contracts each payload is checked against (no check when `None`).
    pub contracts: Option<Contracts>,
}

impl Default for PublishRules {
    fn default() -> Self {
        Self {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            contracts: None,
        }
    }
}

impl PublishRules {
    /// The rules of `config`: its payload limit and its contracts folder and mode.
    pub fn from_config(
        config: &crate::config::Config,
    ) -> Result<Self, crate::contracts::ContractError> {
        Ok(Self {
            max_payload_bytes: config.settings.max_payload_bytes,
            contracts: Some(crate::contracts::Contracts::load(
                Some(config.contracts_dir()),
                config.settings.contracts_mode,
            )?),
        })
    }

    /// Check `event` against these rules without writing anything (shape, keys, payload limit,
    /// contract).
    pub fn validate(&self, event: &NewEvent) -> Result<(), PublishError> {
        validate(event, self.max_payload_bytes)?;
        if let Some(contracts) = &self.contracts {
            contracts.check(
                &event.event_type,
                event.event_version,
                &event.payload,
                "publish",
            )?;
        }
        Ok(())
    }
}

/// Publish `event` inside the caller's transaction under `rules`: the payload is checked
/// against the contract of its type and version before anything is written (an invalid one is
/// a [`PublishError::Contract`] naming each field path and rule).
pub async fn publish_checked(
    tx: &mut Transaction<'_, Postgres>,
    event: NewEvent,
    rules: &PublishRules,
) -> Result<Published, PublishError> {
    rules.validate(&event)?;
    publish_reported_as(tx, event, rules.max_payload_bytes, Publisher::Producer, 0).await
}

/// [`publish_with_limit`], saying whether the event was written or its dispatch key already
/// named the same event.
pub async fn publish_reporting(
    tx: &mut Transaction<'_, Postgres>,
    event: NewEvent,
    max_payload_bytes: usize,
) -> Result<Published, PublishError> {
    publish_reported_as(tx, event, max_payload_bytes, Publisher::Producer, 0).await
}

async fn publish_reported_as(
    tx: &mut Transaction<'_, Postgres>,
    mut event: NewEvent,
    max_payload_bytes: usize,
    publisher: Publisher,
    generation: i32,
) -> Result<Published, PublishError> {
    validate_as(&event, max_payload_bytes, publisher)?;
    crate::trace_context::add_current_span(&mut event.headers);
    let db_err = |source| PublishError::Database {
        event_type: event.event_type.clone(),
        source,
    };
    let row = crate::store::EventRow {
        event_type: &event.event_type,
        payload: &event.payload,
        tenant_id: event.tenant_id.as_deref(),
        dispatch_key: event.dispatch_key.as_deref(),
        headers: &event.headers,
        ordering_key: event.ordering_key.as_deref(),
        event_version: event.event_version,
        available_at: event.available_at,
        generation,
    };
    if let Some(id) = crate::store::insert_event(tx, row).await.map_err(db_err)? {
        return Ok(Published { id, inserted: true });
    }
    // The key names an event already: the same one only if type, tenant and payload match
    // (jsonb equality: key order and spacing do not count).
    let holder = crate::store::compare_with_key_holder(tx, row)
        .await
        .map_err(db_err)?;
    let differs: Vec<&str> = [
        (holder.same_type, "event type"),
        (holder.same_tenant, "tenant"),
        (holder.same_payload, "payload"),
    ]
    .into_iter()
    .filter(|(same, _)| !same)
    .map(|(_, what)| what)
    .collect();
    if differs.is_empty() {
        Ok(Published {
            id: holder.id,
            inserted: false,
        })
    } else {
        Err(PublishError::DispatchKeyConflict {
            key: event.dispatch_key.unwrap_or_default(),
            existing_id: holder.id,
            differs: differs.join(", "),
        })
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
    fn key_rules_and_reserved_prefixes() {
        let long = "k".repeat(MAX_KEY_BYTES);
        for ok in ["welcome:42", "a", long.as_str(), "~!#"] {
            assert!(validate_key("dispatch_key", "a.b", ok).is_ok(), "{ok}");
        }
        for bad in ["", "a b", "tab\t", "clé", &format!("{long}k")] {
            assert!(validate_key("dispatch_key", "a.b", bad).is_err(), "{bad}");
        }
        let child = NewEvent::new("a.b", serde_json::json!({})).with_dispatch_key("child:1:h:0");
        assert!(matches!(
            validate(&child, 100),
            Err(PublishError::ReservedKeyPrefix {
                prefix: "child:",
                ..
            })
        ));
        assert!(validate_as(&child, 100, Publisher::Host).is_ok());
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
