//! TEST ONLY: a router whose `route` sleeps for `u64::MAX` nanoseconds (about 584 years) through
//! WASI's monotonic clock. Sleeping uses no fuel and runs no WebAssembly, so only a time limit
//! that covers waiting can end the call. Config: none.

use std::time::Duration;

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct SleepForever;

impl Router for SleepForever {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        std::thread::sleep(Duration::from_nanos(u64::MAX));
        events
            .iter()
            .map(|_| Route::queue("outbox.audit"))
            .collect()
    }
}

outbox_plugin_sdk::export_router!(SleepForever);
