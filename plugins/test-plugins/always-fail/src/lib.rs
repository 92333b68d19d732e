//! TEST ONLY: a handler that fails every delivery with `always fails` (dead-letter test).
//! Config: none.

use outbox_plugin_sdk::handler::{Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;

/// The exported handler.
struct AlwaysFail;

impl Handler for AlwaysFail {
    fn handle(_config: &Config, _delivery: Delivery) -> Outcome {
        Outcome::fail("always fails")
    }
}

outbox_plugin_sdk::export_handler!(AlwaysFail);
