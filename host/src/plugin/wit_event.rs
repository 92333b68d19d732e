//! The WIT `event` record of a claimed event, as router and handler plugins receive it.
//!
//! Owns the one conversion from [`ClaimedEvent`] to [`WitEvent`], and what a router is spared
//! (payload and headers withheld unless its spec sets `router_payload`). It never calls a
//! plugin.

use super::bindings::WitEvent;
use crate::store::ClaimedEvent;

/// The WIT record of a claimed event, whole (handlers, offline calls).
pub fn to_wit_event(e: &ClaimedEvent) -> WitEvent {
    to_router_event(e, true)
}

/// The WIT record a router plugin receives: every field, but `payload` and `headers` only when
/// `payload` is true (the plugin's `router_payload`), else empty strings. A stored payload or
/// header set is never empty (both are JSON objects), so an empty string always means withheld.
/// Most routers route by type: withholding what they never read saves copying it into the
/// guest for every event of every batch.
pub fn to_router_event(e: &ClaimedEvent, payload: bool) -> WitEvent {
    let (payload, headers) = match payload {
        true => (e.payload.clone(), e.headers.clone()),
        false => (String::new(), String::new()),
    };
    WitEvent {
        id: e.id,
        event_type: e.event_type.clone(),
        event_version: e.event_version,
        tenant_id: e.tenant_id.clone(),
        payload,
        headers,
        dispatch_key: e.dispatch_key.clone(),
        created_at: e
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    }
}
