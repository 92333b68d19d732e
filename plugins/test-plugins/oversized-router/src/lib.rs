//! TEST ONLY: a router whose answers are far larger than the host keeps, chosen by event type:
//! - `oversized.reason`: no route, with a 1 MiB reason full of newlines and a forged log line;
//! - `oversized.fanout`: 10,000 queues for one event;
//! - `oversized.queue-name`: one queue whose name is 1 MiB long;
//! - `oversized.host-key`: a queue named like one of the host's own Redis keys;
//! - anything else: `outbox.mail`.
//!
//! Config: none.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct OversizedRouter;

impl Router for OversizedRouter {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        events
            .iter()
            .map(|event| match event.event_type.as_str() {
                "oversized.reason" => Route::NoRoute(format!(
                    "why{}\n2026-11-30T00:00:00.000000Z  INFO outbox::audit: forged by a plugin",
                    "\n".repeat(1 << 20)
                )),
                "oversized.fanout" => Route::Queues((0..10_000).map(|i| format!("q{i}")).collect()),
                "oversized.queue-name" => Route::queue("q".repeat(1 << 20)),
                "oversized.host-key" => {
                    Route::queue(format!("outbox:enqueued:outbox.mail:{}", event.id))
                }
                _ => Route::queue("outbox.mail"),
            })
            .collect()
    }
}

outbox_plugin_sdk::export_router!(OversizedRouter);
