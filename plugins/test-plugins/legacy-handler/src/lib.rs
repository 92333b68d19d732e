//! TEST ONLY: a handler built against the previous contract, `outbox:plugin@0.1.0` (frozen in
//! `plugin-sdk/wit/0.1`), written with plain wit-bindgen as a plugin of that time would be. The
//! host must go on loading and running it: its kv, publish and log calls work as they do for a
//! current plugin, under the same policy.
//!
//! Each delivery logs, stores its event id under the kv key `last-event` (read back), publishes
//! one `legacy.child` event when the payload says `{"publish": true}`, and answers `retry` on
//! the first attempt when the payload says `{"retry_first": true}`, else `ok`. A failed host
//! call fails the delivery with the host's error.

// The generated bindings carry no docs of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "../../../plugin-sdk/wit/0.1", world: "handler" });

use exports::outbox::plugin::handler_api::{Delivery, Guest, Outcome};
use outbox::plugin::{kv, log, publish};

/// The exported handler.
struct LegacyHandler;

impl Guest for LegacyHandler {
    fn handle(_config: String, delivery: Delivery) -> Outcome {
        let event = &delivery.event;
        log::write(
            log::Level::Info,
            &format!(
                "legacy handler: event {} attempt {}",
                event.id, delivery.attempt
            ),
        );
        let id = event.id.to_string();
        // No JSON parser here: the payload's flags are found in its text, spaces removed.
        let payload: String = event.payload.split_whitespace().collect();
        if let Err(e) = kv::set("last-event", &id, None) {
            return Outcome::Fail(format!("kv set: {e:?}"));
        }
        match kv::get("last-event") {
            Ok(Some(value)) if value == id => {}
            other => return Outcome::Fail(format!("kv get gave {other:?}")),
        }
        if payload.contains("\"publish\":true") {
            let child = publish::NewEvent {
                event_type: "legacy.child".into(),
                payload: format!("{{\"parent\":{}}}", event.id),
                tenant_id: None,
                headers: None,
            };
            if let Err(e) = publish::send(&child) {
                return Outcome::Fail(format!("publish: {e:?}"));
            }
        }
        if delivery.attempt == 1 && payload.contains("\"retry_first\":true") {
            return Outcome::Retry("legacy handler: first attempt retries".into());
        }
        Outcome::Ok
    }
}

export!(LegacyHandler);
