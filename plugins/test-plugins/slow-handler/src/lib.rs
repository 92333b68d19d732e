//! TEST ONLY: a handler slower than the receiver lease. On every delivery it adds one to the kv
//! key `runs`, sleeps `sleep_ms` (config `{"sleep_ms": 3000}`, default 0), and returns `ok` on
//! its first run and `retry("slow-handler: run N ...")` on any later one: a second run of the
//! same entry is the bug it exists to expose, and its late `retry` is the outcome that must not
//! undo the first run's `done` marker. Needs a `kv` grant.

use std::time::Duration;

use outbox_plugin_sdk::handler::{kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;
use serde::Deserialize;

/// The kv key counting runs.
const RUNS_KEY: &str = "runs";

/// The plugin's config.
#[derive(Deserialize)]
struct SlowConfig {
    #[serde(default)]
    sleep_ms: u64,
}

/// Add one to the run counter; the new count.
fn count_run() -> Result<u64, String> {
    let runs = kv::get(RUNS_KEY)
        .map_err(|e| format!("kv get: {e}"))?
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    kv::set(RUNS_KEY, &runs.to_string(), None).map_err(|e| format!("kv set: {e}"))?;
    Ok(runs)
}

/// The exported handler.
struct SlowHandler;

impl Handler for SlowHandler {
    fn handle(config: &Config, _delivery: Delivery) -> Outcome {
        let config = match config.parse::<SlowConfig>() {
            Ok(c) => c,
            Err(e) => return Outcome::fail(format!("slow-handler: {e}")),
        };
        let run = match count_run() {
            Ok(run) => run,
            Err(e) => return Outcome::fail(format!("slow-handler: {e}")),
        };
        std::thread::sleep(Duration::from_millis(config.sleep_ms));
        if run == 1 {
            Outcome::Ok
        } else {
            Outcome::retry(format!("slow-handler: run {run}; the entry already ran"))
        }
    }
}

outbox_plugin_sdk::export_handler!(SlowHandler);
