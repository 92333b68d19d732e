//! TEST ONLY: a handler that asks for a retry on every delivery unless its config is
//! `{"succeed": true}` (retry/backoff and hot-reload tests: flip the config and the next attempt
//! succeeds).

use outbox_plugin_sdk::handler::{Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;
use serde::Deserialize;

/// The plugin's config.
#[derive(Deserialize)]
struct FlakyConfig {
    #[serde(default)]
    succeed: bool,
}

/// The exported handler.
struct FlakyHandler;

impl Handler for FlakyHandler {
    fn handle(config: &Config, delivery: Delivery) -> Outcome {
        match config.parse::<FlakyConfig>() {
            Ok(FlakyConfig { succeed: true }) => Outcome::Ok,
            Ok(_) => Outcome::retry(format!(
                "flaky-handler: attempt {} fails until the config says {{\"succeed\": true}}",
                delivery.attempt
            )),
            Err(e) => Outcome::fail(format!("flaky-handler: {e}")),
        }
    }
}

outbox_plugin_sdk::export_handler!(FlakyHandler);
