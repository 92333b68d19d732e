//! TEST ONLY: a router that allocates 1 MiB after 1 MiB (touching every page) until memory runs
//! out. The host's memory cap must turn that into a failed call, not an exhausted host.
//! Config: none.

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{Config, Event};

/// The exported router.
struct AllocForever;

impl Router for AllocForever {
    fn route(_config: &Config, _events: Vec<Event>) -> Vec<Route> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![0xA5; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

outbox_plugin_sdk::export_router!(AllocForever);
