//! TEST ONLY: a handler that adds one to the kv counter `count` for every delivery, the way
//! its config says: `{"mode": "get-set"}` reads, adds one and writes back (two calls: racy
//! under concurrent deliveries), `{"mode": "increment"}` uses `kv::increment`, `{"mode":
//! "cas"}` loops on `kv::compare_and_set`. The last two never lose an update. Needs the `kv`
//! grant.

use outbox_plugin_sdk::handler::{kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::{Config, HostError};
use serde::Deserialize;

/// The plugin's config.
#[derive(Deserialize)]
struct CounterConfig {
    mode: String,
}

const KEY: &str = "count";

fn count_once(mode: &str) -> Result<(), HostError> {
    match mode {
        "get-set" => {
            let n: i64 = kv::get(KEY)?.and_then(|v| v.parse().ok()).unwrap_or(0);
            kv::set(KEY, &(n + 1).to_string(), None)
        }
        "increment" => kv::increment(KEY, 1, None).map(drop),
        "cas" => loop {
            let current = kv::get(KEY)?;
            let n: i64 = current.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
            if kv::compare_and_set(KEY, current.as_deref(), &(n + 1).to_string(), None)? {
                return Ok(());
            }
        },
        other => Err(HostError::Failed(format!(
            "kv-counter: unknown mode {other:?}"
        ))),
    }
}

/// The exported handler.
struct KvCounter;

impl Handler for KvCounter {
    fn handle(config: &Config, _delivery: Delivery) -> Outcome {
        let mode = match config.parse::<CounterConfig>() {
            Ok(c) => c.mode,
            Err(e) => return Outcome::fail(format!("kv-counter: {e}")),
        };
        match count_once(&mode) {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::retry(format!("kv-counter: {e}")),
        }
    }
}

outbox_plugin_sdk::export_handler!(KvCounter);
