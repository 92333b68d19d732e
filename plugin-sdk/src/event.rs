//! The event a plugin receives, with JSON accessors that parse on demand.

use serde::de::DeserializeOwned;

/// One outbox event, as the host hands it to a router or handler plugin.
///
/// `payload` and `headers` stay JSON text until a plugin asks for them, so a router that only
/// looks at [`Event::event_type`] never pays for parsing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// `outbox_event.id`.
    pub id: i64,
    /// Lowercase, dot-separated type, e.g. `mail.welcome`.
    pub event_type: String,
    /// Schema version of the payload (1 unless the producer said otherwise).
    pub event_version: i32,
    /// Tenant the event belongs to, if any.
    pub tenant_id: Option<String>,
    /// The event's JSON object, as text. A router receives it (and `headers`) only when its
    /// `[plugins.NAME]` in `routes.toml` sets `router_payload = true`; otherwise both are empty
    /// strings (a stored payload is never empty: it is a JSON object).
    pub payload: String,
    /// Trace context / correlation headers: a JSON object, as text (empty for a router, as
    /// `payload` is).
    pub headers: String,
    /// The producer's idempotency key, if any.
    pub dispatch_key: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
}

impl Event {
    /// The payload as an untyped JSON value.
    pub fn payload_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }

    /// The payload deserialized into `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }

    /// The headers as an untyped JSON value.
    pub fn headers_json(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.headers)
    }

    /// The headers deserialized into `T` (e.g. a `HashMap<String, String>`).
    pub fn headers<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.headers)
    }
}

/// Implements `From<generated event>` for [`Event`]: every world has its own copy of the WIT
/// `event` record.
macro_rules! from_wit_event {
    ($($wit:path),+ $(,)?) => {$(
        impl From<$wit> for Event {
            fn from(e: $wit) -> Self {
                Self {
                    id: e.id,
                    event_type: e.event_type,
                    event_version: e.event_version,
                    tenant_id: e.tenant_id,
                    payload: e.payload,
                    headers: e.headers,
                    dispatch_key: e.dispatch_key,
                    created_at: e.created_at,
                }
            }
        }
    )+};
}

from_wit_event!(
    crate::bindings::router::outbox::plugin::types::Event,
    crate::bindings::handler::outbox::plugin::types::Event,
);
