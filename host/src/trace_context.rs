//! Trace context: the W3C `traceparent` and `tracestate` an event carries in its `headers`.
//!
//! Owns the two headers' rules (`traceparent`: version `00`, a 32-hex trace id and a 16-hex
//! parent id, neither all zeros, 2-hex flags, lowercase; `tracestate`: at most
//! [`MAX_TRACESTATE_BYTES`] bytes and [`MAX_TRACESTATE_MEMBERS`] `key=value` members), the check
//! of a producer's headers ([`check_headers`]), turning an event's headers into the OpenTelemetry
//! [`Context`] of its producer ([`remote_context`]) and a span's context into headers
//! ([`span_trace_headers`]), and the three places the host uses them: the Rust publisher adds
//! the current span's context when the producer gave none ([`add_current_span`]), host spans take
//! the event's context as their parent ([`set_remote_parent`]), and a handler's child gets the
//! context of the span that published it ([`set_child_trace`]).
//!
//! It never lets trace headers break delivery: a malformed or oversized `traceparent` or
//! `tracestate` that reached an event anyway (the SQL function does not check them, and plugins
//! hand over what they like) is ignored, never used as a parent; only the Rust and CLI publish
//! paths refuse one, before anything is written. It never sets up a subscriber or an exporter
//! (the `outbox` command does that when `OTEL_EXPORTER_OTLP_ENDPOINT` is set), and it does no
//! work for a disabled span: without an exporter, no header is parsed for a span.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header naming the producer's span: `00-<trace id>-<parent id>-<flags>`.
pub const TRACEPARENT: &str = "traceparent";

/// The header carrying vendor trace state alongside [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// Longest `tracestate` kept, in bytes (the W3C recommendation for what to propagate).
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// Most `tracestate` list members (the W3C limit).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// Why a trace header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    /// A trace header is not a JSON string.
    #[error("header {header} must be a string")]
    NotString {
        /// `traceparent` or `tracestate`.
        header: &'static str,
    },
    /// `traceparent` breaks the W3C format.
    #[error("traceparent {value:?} is not a W3C trace context: {reason}")]
    InvalidTraceparent {
        /// The value, clipped to 64 bytes.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `tracestate` breaks the W3C format or the limits.
    #[error("tracestate is not a W3C trace state: {reason}")]
    InvalidTracestate {
        /// What is wrong with it.
        reason: String,
    },
}

/// Parse a `traceparent` value into the producer's (remote) span context, without trace state.
pub fn parse_traceparent(value: &str) -> Result<SpanContext, TraceContextError> {
    let invalid = |reason| TraceContextError::InvalidTraceparent {
        value: crate::naming::clip(value, 64).to_string(),
        reason,
    };
    let is_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let parts: Vec<&str> = value.split('-').collect();
    let [version, trace_id, parent_id, flags] = parts[..] else {
        return Err(invalid("expected 00-<32 hex>-<16 hex>-<2 hex>"));
    };
    if version != "00" {
        return Err(invalid("only version 00 is supported"));
    }
    if trace_id.len() != 32 || !is_hex(trace_id) {
        return Err(invalid("the trace id must be 32 lowercase hex digits"));
    }
    if parent_id.len() != 16 || !is_hex(parent_id) {
        return Err(invalid("the parent id must be 16 lowercase hex digits"));
    }
    if flags.len() != 2 || !is_hex(flags) {
        return Err(invalid("the flags must be 2 lowercase hex digits"));
    }
    let trace_id = TraceId::from_hex(trace_id).map_err(|_| invalid("bad trace id"))?;
    let span_id = SpanId::from_hex(parent_id).map_err(|_| invalid("bad parent id"))?;
    if trace_id == TraceId::INVALID {
        return Err(invalid("the trace id is all zeros"));
    }
    if span_id == SpanId::INVALID {
        return Err(invalid("the parent id is all zeros"));
    }
    let flags = u8::from_str_radix(flags, 16).map_err(|_| invalid("bad flags"))?;
    Ok(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags),
        true,
        TraceState::NONE,
    ))
}

/// Parse a `tracestate` value: comma-separated `key=value` members (spaces around them allowed,
/// empty members skipped), at most [`MAX_TRACESTATE_BYTES`] and [`MAX_TRACESTATE_MEMBERS`].
pub fn parse_tracestate(value: &str) -> Result<TraceState, TraceContextError> {
    let invalid = |reason: String| TraceContextError::InvalidTracestate { reason };
    if value.len() > MAX_TRACESTATE_BYTES {
        return Err(invalid(format!(
            "{} bytes, over the limit of {MAX_TRACESTATE_BYTES}",
            value.len()
        )));
    }
    let mut members = Vec::new();
    for member in value.split(',').map(|m| m.trim_matches([' ', '\t'])) {
        if member.is_empty() {
            continue;
        }
        let Some((key, val)) = member.split_once('=') else {
            return Err(invalid(format!(
                "member {:?} is not key=value",
                crate::naming::clip(member, 64)
            )));
        };
        // The W3C value: printable ASCII (no ',' or '=', checked below), not ending in a space.
        if val.is_empty() || val.ends_with(' ') || !val.bytes().all(|b| (b' '..=b'~').contains(&b))
        {
            return Err(invalid(format!(
                "the value of {:?} is not printable ASCII",
                crate::naming::clip(key, 64)
            )));
        }
        members.push((key.to_string(), val.to_string()));
    }
    if members.len() > MAX_TRACESTATE_MEMBERS {
        return Err(invalid(format!(
            "{} members, over the limit of {MAX_TRACESTATE_MEMBERS}",
            members.len()
        )));
    }
    TraceState::from_key_value(members).map_err(|e| invalid(e.to_string()))
}

/// A trace header of `headers` (a JSON object), if present: `Err` when it is not a string.
fn header<'a>(
    headers: &'a serde_json::Value,
    name: &'static str,
) -> Result<Option<&'a str>, TraceContextError> {
    match headers.get(name) {
        None => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(TraceContextError::NotString { header: name }),
    }
}

/// Check a producer's trace headers: a `traceparent` or `tracestate` present must be a valid
/// one. Headers that are not an object have no trace headers (their own check refuses them).
pub fn check_headers(headers: &serde_json::Value) -> Result<(), TraceContextError> {
    if let Some(traceparent) = header(headers, TRACEPARENT)? {
        parse_traceparent(traceparent)?;
    }
    if let Some(tracestate) = header(headers, TRACESTATE)? {
        parse_tracestate(tracestate)?;
    }
    Ok(())
}

/// The producer's span context in `headers` (a JSON object), as the parent of a host span:
/// `None` without a valid `traceparent`. An invalid `tracestate` is dropped, the parent kept.
pub fn remote_context(headers: &serde_json::Value) -> Option<Context> {
    let parent = parse_traceparent(header(headers, TRACEPARENT).ok()??).ok()?;
    let state = header(headers, TRACESTATE)
        .ok()
        .flatten()
        .and_then(|s| parse_tracestate(s).ok())
        .unwrap_or_default();
    let parent = SpanContext::new(
        parent.trace_id(),
        parent.span_id(),
        parent.trace_flags(),
        true,
        state,
    );
    Some(Context::new().with_remote_span_context(parent))
}

/// [`remote_context`] of headers given as JSON text (queue entries, handler events).
pub fn remote_context_from_text(headers: &str) -> Option<Context> {
    remote_context(&serde_json::from_str(headers).ok()?)
}

/// The `traceparent` (and `tracestate`, when not empty) naming `span`, when it has a valid
/// OpenTelemetry span context (an exporter is installed and the span is enabled).
pub fn span_trace_headers(span: &tracing::Span) -> Option<(String, Option<String>)> {
    let cx = span.context();
    let span_ref = cx.span();
    let context = span_ref.span_context();
    if !context.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    );
    let tracestate = Some(context.trace_state().header()).filter(|s| !s.is_empty());
    Some((traceparent, tracestate))
}

/// Write `span`'s trace headers into `headers` (a JSON object), replacing both; `false` (and
/// nothing changed) when the span has no valid context.
fn write_span_headers(
    headers: &mut serde_json::Map<String, serde_json::Value>,
    span: &tracing::Span,
) -> bool {
    let Some((traceparent, tracestate)) = span_trace_headers(span) else {
        return false;
    };
    headers.insert(TRACEPARENT.into(), traceparent.into());
    match tracestate {
        Some(state) => headers.insert(TRACESTATE.into(), state.into()),
        None => headers.remove(TRACESTATE),
    };
    true
}

/// The Rust publisher's hook: when `headers` (a JSON object) has no `traceparent` and the
/// current span has a valid context, name that span as the event's producer.
pub(crate) fn add_current_span(headers: &mut serde_json::Value) {
    if let serde_json::Value::Object(map) = headers {
        if !map.contains_key(TRACEPARENT) {
            write_span_headers(map, &tracing::Span::current());
        }
    }
}

/// Make the event whose headers are `headers` (JSON text) the parent of `span`, which must not
/// have been entered yet. Nothing is parsed for a disabled span; headers without a valid
/// `traceparent` leave `span` a root.
pub(crate) fn set_remote_parent(span: &tracing::Span, headers: &str) {
    if span.is_disabled() {
        return;
    }
    if let Some(parent) = remote_context_from_text(headers) {
        // Fails only without an OpenTelemetry layer, when there is nothing to parent.
        let _ = span.set_parent(parent);
    }
}

/// A child event's trace headers: the parent's, never the plugin's own (`inherited` holds the
/// parent's headers, `own` what the plugin asked for), then the context of the span current
/// while it is published (a host call span, when spans are exported), so the child is in the
/// same trace either way.
pub(crate) fn set_child_trace(
    inherited: &mut serde_json::Map<String, serde_json::Value>,
    own: Option<&mut serde_json::Map<String, serde_json::Value>>,
) {
    if let Some(own) = own {
        own.remove(TRACEPARENT);
        own.remove(TRACESTATE);
    }
    write_span_headers(inherited, &tracing::Span::current());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_w3c_traceparent_parses_and_malformed_ones_do_not() {
        let context = parse_traceparent(VALID).unwrap();
        assert_eq!(
            format!("{:032x}", context.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(format!("{:016x}", context.span_id()), "00f067aa0ba902b7");
        assert!(context.is_sampled() && context.is_remote());
        assert!(
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
                .is_ok_and(|c| !c.is_sampled())
        );
        for bad in [
            "",
            "00-abc",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tracestate_is_bounded_in_bytes_and_members() {
        let state = parse_tracestate("rojo=00f067aa0ba902b7, congo=t61rcWkgMzE,,").unwrap();
        assert_eq!(state.get("congo"), Some("t61rcWkgMzE"));
        assert_eq!(state.header(), "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
        let members: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
        assert!(parse_tracestate(&members.join(",")).is_err());
        assert!(parse_tracestate(&members[..32].join(",")).is_ok());
        assert!(parse_tracestate(&format!("k={}", "v".repeat(MAX_TRACESTATE_BYTES))).is_err());
        for bad in ["novalue", "Upper=x", "k=v\u{1}"] {
            assert!(parse_tracestate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn producer_headers_are_checked_and_stored_ones_never_break_anything() {
        assert!(check_headers(&json!({"traceparent": VALID, "tracestate": "a=b"})).is_ok());
        assert!(check_headers(&json!({"x": 1})).is_ok());
        assert!(matches!(
            check_headers(&json!({"traceparent": "00-nope"})),
            Err(TraceContextError::InvalidTraceparent { .. })
        ));
        assert!(matches!(
            check_headers(&json!({"traceparent": 7})),
            Err(TraceContextError::NotString { .. })
        ));
        assert!(check_headers(&json!({"traceparent": VALID, "tracestate": "x"})).is_err());

        let cx = remote_context(&json!({"traceparent": VALID, "tracestate": "x"})).unwrap();
        assert_eq!(
            format!("{:032x}", cx.span().span_context().trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "a bad tracestate is dropped, the parent kept"
        );
        assert!(remote_context(&json!({"traceparent": "00-nope"})).is_none());
        assert!(remote_context_from_text("not json").is_none());
        assert!(remote_context_from_text("{}").is_none());
    }

    #[test]
    fn without_an_exporter_nothing_is_added_and_children_keep_the_parents_trace() {
        let mut headers = json!({"x": 1});
        add_current_span(&mut headers);
        assert_eq!(headers, json!({"x": 1}));

        let mut inherited = json!({"traceparent": VALID}).as_object().cloned().unwrap();
        let mut own = json!({"traceparent": "00-forged", "tracestate": "a=b", "y": 2})
            .as_object()
            .cloned()
            .unwrap();
        set_child_trace(&mut inherited, Some(&mut own));
        assert_eq!(inherited.get(TRACEPARENT), Some(&json!(VALID)));
        assert_eq!(own, json!({"y": 2}).as_object().cloned().unwrap());
    }
}
