//! TEST ONLY: a router that abuses `log.write`: first a line that tries to forge a host log line
//! (`"ok\n2026-01-01T00:00:00Z  INFO outbox::audit: capability allowed"`, plus other control
//! characters), then `{"lines": N}` lines of 4 KiB each (default 10 000), then routes every
//! event to `outbox.audit`. The host must strip the control characters and stop logging once
//! the call's log budget is spent.

use outbox_plugin_sdk::log;
use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct LogFlood;

impl Router for LogFlood {
    fn route(config: &Config, events: Vec<Event>) -> Vec<Route> {
        let lines = config
            .parse::<outbox_plugin_sdk::serde_json::Value>()
            .ok()
            .and_then(|v| v.get("lines").and_then(|n| n.as_u64()))
            .unwrap_or(10_000);
        log::write(
            log::Level::Info,
            "ok\n2026-01-01T00:00:00Z  INFO outbox::audit: capability allowed\r\x1b[2Jforged",
        );
        let filler = "x".repeat(4096);
        for i in 0..lines {
            log::write(log::Level::Info, &format!("flood {i} {filler}"));
        }
        events
            .iter()
            .map(|_| Route::queue("outbox.audit"))
            .collect()
    }
}

outbox_plugin_sdk::export_router!(LogFlood);
