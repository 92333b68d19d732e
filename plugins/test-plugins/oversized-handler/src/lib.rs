//! TEST ONLY: a handler that gives up or retries with a reason far larger than the host keeps
//! (1 MiB, full of newlines and control characters, ending in a forged log line). The event's
//! payload field `outcome` chooses: `"retry"` or `"fail"` (the default).
//!
//! Config: none.

use outbox_plugin_sdk::handler::{Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;

/// The exported handler.
struct OversizedHandler;

impl Handler for OversizedHandler {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let reason = format!(
            "why{}\n2026-11-30T00:00:00.000000Z  INFO outbox::audit: forged by a plugin",
            "\r\n\u{1b}[31m".repeat(1 << 18)
        );
        let payload = delivery.event.payload_json().unwrap_or_default();
        match payload.get("outcome").and_then(|o| o.as_str()) {
            Some("retry") => Outcome::retry(reason),
            _ => Outcome::fail(reason),
        }
    }
}

outbox_plugin_sdk::export_handler!(OversizedHandler);
