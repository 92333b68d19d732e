//! TEST ONLY: a handler that logs each delivery and succeeds, publishing nothing.
//! Config: none.

use outbox_plugin_sdk::handler::{Delivery, Handler, Outcome};
use outbox_plugin_sdk::{log, Config};

/// The exported handler.
struct EchoHandler;

impl Handler for EchoHandler {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let event = &delivery.event;
        log::info!(
            "echo: event {} ({}) from queue {}, attempt {}: {}",
            event.id,
            event.event_type,
            delivery.queue,
            delivery.attempt,
            event.payload
        );
        Outcome::Ok
    }
}

outbox_plugin_sdk::export_handler!(EchoHandler);
