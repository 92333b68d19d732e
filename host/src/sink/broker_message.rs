//! The message a broker sink publishes for one (event, queue): what NATS JetStream and RabbitMQ
//! consumers receive.
//!
//! Owns that wire contract, in one place for both brokers: the body is the event's payload,
//! byte for byte (JSON text); the event's fields travel as message headers named here
//! ([`HEADER_EVENT_ID`] and the rest: id, type, version, queue, created-at, attempt, and the
//! tenant, keys and generation when set), its headers object as [`HEADER_HEADERS`] (JSON text),
//! and a W3C trace context (`traceparent`, `tracestate`) also as headers of its own, where
//! tracing libraries look. The message id ([`BrokerMessage::message_id`]) is stable per
//! (event, queue) and host prefix: JetStream's duplicate window drops a re-publish by it, and a
//! RabbitMQ consumer deduplicates by it. It never changes a header name without a note in
//! `docs/queues.md` (consumers read them by name) and performs no I/O.

use crate::store::ClaimedEvent;

/// Header: the event id (decimal).
pub const HEADER_EVENT_ID: &str = "Outbox-Event-Id";
/// Header: the event type.
pub const HEADER_EVENT_TYPE: &str = "Outbox-Event-Type";
/// Header: the payload's schema version (decimal).
pub const HEADER_EVENT_VERSION: &str = "Outbox-Event-Version";
/// Header: the queue (`routes.toml` name) the message was handed off for.
pub const HEADER_QUEUE: &str = "Outbox-Queue";
/// Header: when the event was published (RFC 3339, microseconds, UTC).
pub const HEADER_CREATED_AT: &str = "Outbox-Created-At";
/// Header: the dispatch attempt that handed it off (decimal, 1 on the first).
pub const HEADER_ATTEMPT: &str = "Outbox-Attempt";
/// Header: the tenant, when the event has one.
pub const HEADER_TENANT_ID: &str = "Outbox-Tenant-Id";
/// Header: the producer's idempotency key, when set.
pub const HEADER_DISPATCH_KEY: &str = "Outbox-Dispatch-Key";
/// Header: the ordering key, when set.
pub const HEADER_ORDERING_KEY: &str = "Outbox-Ordering-Key";
/// Header: the event's generation, when above 0 (an event a handler published).
pub const HEADER_GENERATION: &str = "Outbox-Generation";
/// Header: the event's headers object (JSON text).
pub const HEADER_HEADERS: &str = "Outbox-Headers";
/// The W3C trace context headers copied from the event's headers object, when they are strings.
pub const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

/// One (event, queue) as a broker message: id, headers and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMessage<'a> {
    /// Stable per (event, queue) and prefix: `{prefix}outbox:{queue}:{event id}`.
    pub message_id: String,
    /// Header name and value, in a fixed order.
    pub headers: Vec<(&'static str, String)>,
    /// The payload (JSON text).
    pub body: &'a [u8],
}

impl<'a> BrokerMessage<'a> {
    /// The message of `event` for `queue`, under the host's key prefix `prefix`.
    pub fn new(event: &'a ClaimedEvent, queue: &str, prefix: &str) -> Self {
        let mut headers: Vec<(&'static str, String)> = vec![
            (HEADER_EVENT_ID, event.id.to_string()),
            (HEADER_EVENT_TYPE, event.event_type.clone()),
            (HEADER_EVENT_VERSION, event.event_version.to_string()),
            (HEADER_QUEUE, queue.to_string()),
            (
                HEADER_CREATED_AT,
                event
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
            (HEADER_ATTEMPT, event.attempts.to_string()),
        ];
        let optional = [
            (HEADER_TENANT_ID, event.tenant_id.as_ref()),
            (HEADER_DISPATCH_KEY, event.dispatch_key.as_ref()),
            (HEADER_ORDERING_KEY, event.ordering_key.as_ref()),
        ];
        for (name, value) in optional {
            if let Some(value) = value {
                headers.push((name, value.clone()));
            }
        }
        if event.generation > 0 {
            headers.push((HEADER_GENERATION, event.generation.to_string()));
        }
        headers.push((HEADER_HEADERS, event.headers.clone()));
        if let Ok(serde_json::Value::Object(map)) =
            serde_json::from_str::<serde_json::Value>(&event.headers)
        {
            for name in TRACE_HEADERS {
                if let Some(serde_json::Value::String(value)) = map.get(name) {
                    headers.push((name, value.clone()));
                }
            }
        }
        Self {
            message_id: message_id(prefix, queue, event.id),
            headers,
            body: event.payload.as_bytes(),
        }
    }

    /// The first header whose value a line-based protocol (NATS) cannot carry: it holds a
    /// carriage return or a line feed.
    pub fn header_with_line_break(&self) -> Option<&'static str> {
        self.headers
            .iter()
            .find(|(_, value)| value.contains(['\r', '\n']))
            .map(|(name, _)| *name)
    }
}

/// The message id of (event `event_id`, `queue`) under `prefix`:
/// `{prefix}outbox:{queue}:{event_id}`, the name the Redis sinks give their enqueue marker.
pub fn message_id(prefix: &str, queue: &str, event_id: i64) -> String {
    format!("{prefix}outbox:{queue}:{event_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_carries_the_payload_as_its_body_and_the_fields_as_headers() {
        let mut event = ClaimedEvent::unclaimed(42, "order.placed", r#"{"n": 1}"#);
        event.headers =
            r#"{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x": 1}"#
                .into();
        event.ordering_key = Some("acct-1".into());
        event.generation = 2;
        let message = BrokerMessage::new(&event, "outbox.orders", "app:");
        assert_eq!(message.message_id, "app:outbox:outbox.orders:42");
        assert_eq!(message.body, br#"{"n": 1}"#);
        let names: Vec<&str> = message.headers.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                HEADER_EVENT_ID,
                HEADER_EVENT_TYPE,
                HEADER_EVENT_VERSION,
                HEADER_QUEUE,
                HEADER_CREATED_AT,
                HEADER_ATTEMPT,
                HEADER_ORDERING_KEY,
                HEADER_GENERATION,
                HEADER_HEADERS,
                "traceparent",
            ]
        );
        assert_eq!(message.header_with_line_break(), None);
        event.tenant_id = Some("a\nb".into());
        let broken = BrokerMessage::new(&event, "q", "");
        assert_eq!(broken.header_with_line_break(), Some(HEADER_TENANT_ID));
    }
}
