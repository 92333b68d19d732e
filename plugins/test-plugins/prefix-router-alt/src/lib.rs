//! TEST ONLY: a router that sends every event to `outbox.alt`. The hot-reload test swaps it in
//! for `prefix-router` and watches new events change queue. Config: ignored.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct PrefixRouterAlt;

impl Router for PrefixRouterAlt {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        vec![Route::queue("outbox.alt"); events.len()]
    }
}

outbox_plugin_sdk::export_router!(PrefixRouterAlt);
