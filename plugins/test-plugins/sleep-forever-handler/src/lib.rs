//! TEST ONLY: a handler that never finishes by waiting, never by computing.
//!
//! Config `{"mode": "sleep"}` (the default): sleep for `u64::MAX` nanoseconds through WASI's
//! monotonic clock. Config `{"mode": "host-calls"}`: forever, ask the host for the kv key
//! `tick` (whatever the answer, denied included) and sleep 20 ms. Either way only a time limit
//! that covers waiting and host calls ends the call.

use std::time::Duration;

use outbox_plugin_sdk::handler::{kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;
use serde::Deserialize;

/// The plugin's config.
#[derive(Deserialize, Default)]
struct SleepConfig {
    #[serde(default)]
    mode: Option<String>,
}

/// The exported handler.
struct SleepForeverHandler;

impl Handler for SleepForeverHandler {
    fn handle(config: &Config, _delivery: Delivery) -> Outcome {
        let config: SleepConfig = config.parse().unwrap_or_default();
        if config.mode.as_deref() == Some("host-calls") {
            loop {
                let _ = std::hint::black_box(kv::get("tick"));
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        std::thread::sleep(Duration::from_nanos(u64::MAX));
        Outcome::Ok
    }
}

outbox_plugin_sdk::export_handler!(SleepForeverHandler);
