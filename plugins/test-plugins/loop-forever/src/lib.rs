//! TEST ONLY: a router whose `route` never returns. The host must end the call with its epoch or
//! fuel deadline and fail the batch, not hang. Config: none.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct LoopForever;

impl Router for LoopForever {
    fn route(_config: &Config, _events: Vec<Event>) -> Vec<Route> {
        let mut spins: u64 = 0;
        loop {
            // `black_box` keeps the optimizer from reasoning about the loop.
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }
}

outbox_plugin_sdk::export_router!(LoopForever);
