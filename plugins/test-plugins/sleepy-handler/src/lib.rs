//! TEST ONLY: a handler that sleeps for the event payload's `sleep_ms` (default 0, capped at
//! 60 000), then succeeds, publishing nothing (a handler call still running while the host stops
//! or reconfigures its receiver). Config: none.

use std::time::Duration;

use outbox_plugin_sdk::handler::{Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;

/// The exported handler.
struct SlowHandler;

impl Handler for SlowHandler {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let sleep_ms = delivery
            .event
            .payload_json()
            .ok()
            .and_then(|p| p["sleep_ms"].as_u64())
            .unwrap_or(0)
            .min(60_000);
        std::thread::sleep(Duration::from_millis(sleep_ms));
        Outcome::Ok
    }
}

outbox_plugin_sdk::export_handler!(SlowHandler);
