//! TEST ONLY: a handler that shows how many of its runs overlap, for the per-queue concurrency
//! and rate limit tests. On every delivery it adds one to the kv counter `running`, raises
//! `max` to that value (compare-and-set), adds one to `starts`, sleeps the config's `sleep_ms`
//! (default 0, capped at 10 000), subtracts one from `running` and succeeds. `max` is then the
//! most runs that were ever in progress at once, across every host. Needs the `kv` grant.

use std::time::Duration;

use outbox_plugin_sdk::handler::{kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::{Config, HostError};
use serde::Deserialize;

/// The plugin's config.
#[derive(Deserialize)]
struct ProbeConfig {
    #[serde(default)]
    sleep_ms: u64,
}

/// Raise the kv value `max` to `seen` unless it is already at least that.
fn raise_max(seen: i64) -> Result<(), HostError> {
    loop {
        let current = kv::get("max")?;
        let max: i64 = current.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
        if max >= seen || kv::compare_and_set("max", current.as_deref(), &seen.to_string(), None)? {
            return Ok(());
        }
    }
}

fn run(config: &ProbeConfig) -> Result<(), HostError> {
    let running = kv::increment("running", 1, None)?;
    raise_max(running)?;
    kv::increment("starts", 1, None)?;
    std::thread::sleep(Duration::from_millis(config.sleep_ms.min(10_000)));
    kv::increment("running", -1, None)?;
    Ok(())
}

/// The exported handler.
struct StartProbe;

impl Handler for StartProbe {
    fn handle(config: &Config, _delivery: Delivery) -> Outcome {
        let config = match config.parse::<ProbeConfig>() {
            Ok(c) => c,
            Err(e) => return Outcome::fail(format!("start-probe: {e}")),
        };
        match run(&config) {
            Ok(()) => Outcome::Ok,
            Err(e) => Outcome::retry(format!("start-probe: {e}")),
        }
    }
}

outbox_plugin_sdk::export_handler!(StartProbe);
