//! TEST ONLY: a router that panics on every call (a trap, for the host). The host must fail the
//! batch with the trap message and go on. Config: none.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct Trap;

impl Router for Trap {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        panic!(
            "trap plugin: deliberate panic routing {} event(s)",
            events.len()
        );
    }
}

outbox_plugin_sdk::export_router!(Trap);
