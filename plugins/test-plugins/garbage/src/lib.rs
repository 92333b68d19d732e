//! TEST ONLY: a router that breaks the contract by returning one route more than it was given
//! events (every route is `outbox.garbage`). The host must reject the whole batch.
//! Config: none.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct Garbage;

impl Router for Garbage {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        vec![Route::queue("outbox.garbage"); events.len() + 1]
    }
}

outbox_plugin_sdk::export_router!(Garbage);
