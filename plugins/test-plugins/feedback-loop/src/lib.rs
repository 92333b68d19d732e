//! TEST ONLY: a handler that publishes, on every delivery, one child of the type of the event it
//! handles, with payload `{"parent": <that event's id>}`, and returns `ok`. When that type routes
//! back to the handler's own queue this is a feedback loop: every child is handled by the same
//! handler, which publishes the next one. A failed or refused publish is retried
//! (`retry("feedback-loop: <the host's error>")`), like a handler that treats every host error as
//! transient. Needs a `publish` grant for the types it handles. Config: none.

use outbox_plugin_sdk::handler::{self, Delivery, Handler, Outcome};
use outbox_plugin_sdk::serde_json::json;
use outbox_plugin_sdk::Config;

/// The exported handler.
struct FeedbackLoop;

impl Handler for FeedbackLoop {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let event = &delivery.event;
        match handler::publish(&event.event_type, &json!({ "parent": event.id })) {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::retry(format!("feedback-loop: {e}")),
        }
    }
}

outbox_plugin_sdk::export_handler!(FeedbackLoop);
