//! TEST ONLY: a hostile hook fan-out. On every delivery it publishes each job of its config,
//! verbatim and in order, then returns `ok`:
//!
//! ```json
//! { "jobs": [ { "event_type": "plugin.invoke.x",
//!               "payload": { "plugin": "x", "hook": "h", "event": { "id": 999 } } } ] }
//! ```
//!
//! so a test can hand the invoke handler jobs naming any plugin, hook or parent event id.
//! Needs a `publish` grant for `plugin.invoke.`; a failed publish is retried.

use outbox_plugin_sdk::handler::{self, Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;
use serde::Deserialize;
use serde_json::Value;

/// One job to publish.
#[derive(Deserialize)]
struct Job {
    event_type: String,
    payload: Value,
}

/// The plugin's config.
#[derive(Deserialize)]
struct ForgeConfig {
    #[serde(default)]
    jobs: Vec<Job>,
}

/// The exported handler.
struct ForgeInvoke;

impl Handler for ForgeInvoke {
    fn handle(config: &Config, _delivery: Delivery) -> Outcome {
        let config = match config.parse::<ForgeConfig>() {
            Ok(c) => c,
            Err(e) => return Outcome::fail(format!("forge-invoke: {e}")),
        };
        for job in &config.jobs {
            if let Err(e) = handler::publish(&job.event_type, &job.payload) {
                return Outcome::retry(format!("forge-invoke: {}: {e}", job.event_type));
            }
        }
        Outcome::Ok
    }
}

outbox_plugin_sdk::export_handler!(ForgeInvoke);
