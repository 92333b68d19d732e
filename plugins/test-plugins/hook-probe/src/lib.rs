//! TEST ONLY: a hook subscriber that reports what it was handed. On every delivery it publishes
//! one `probe.seen` event with payload
//! `{"event_id", "event_type", "tenant_id", "payload", "queue"}` of the delivery (the payload
//! as text), and returns `ok`; a failed publish is retried. Needs a `publish` grant for
//! `probe.`. Its child's dispatch key shows which parent id the host used.

use outbox_plugin_sdk::handler::{self, Delivery, Handler, Outcome};
use outbox_plugin_sdk::serde_json::json;
use outbox_plugin_sdk::Config;

/// The exported handler.
struct HookProbe;

impl Handler for HookProbe {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let event = &delivery.event;
        let seen = json!({
            "event_id": event.id,
            "event_type": event.event_type,
            "tenant_id": event.tenant_id,
            "payload": event.payload,
            "queue": delivery.queue,
        });
        match handler::publish("probe.seen", &seen) {
            Ok(_) => Outcome::Ok,
            Err(e) => Outcome::retry(format!("hook-probe: {e}")),
        }
    }
}

outbox_plugin_sdk::export_handler!(HookProbe);
