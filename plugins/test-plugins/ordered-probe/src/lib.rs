//! TEST ONLY: a handler that writes, per ordering key, a log of when each delivery starts and
//! ends, so a test can check that the entries of one key never overlap and run in order. The
//! payload says what to do: `{"key": "k1", "seq": 3, "retry_first": true, "sleep_ms": 20}`.
//! Each delivery appends `start:<seq>:<attempt>` to the kv key `log:<key>`, sleeps `sleep_ms`,
//! then appends `end:<seq>:<attempt>` and returns `retry` on the first attempt of an entry with
//! `retry_first`, `ok` otherwise. The log is read, extended and written back without a lock:
//! two deliveries of one key running at once show up in it as interleaved or lost lines.
//! Needs a `kv` grant.

use std::time::Duration;

use outbox_plugin_sdk::handler::{kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::Config;
use serde::Deserialize;

/// What the payload asks of one delivery.
#[derive(Deserialize)]
struct Probe {
    key: String,
    seq: u64,
    #[serde(default)]
    retry_first: bool,
    #[serde(default)]
    sleep_ms: u64,
}

/// Append `line` to the log of `key`.
fn append(key: &str, line: &str) -> Result<(), String> {
    let log_key = format!("log:{key}");
    let mut log = kv::get(&log_key)
        .map_err(|e| format!("kv get: {e}"))?
        .unwrap_or_default();
    if !log.is_empty() {
        log.push(' ');
    }
    log.push_str(line);
    kv::set(&log_key, &log, None).map_err(|e| format!("kv set: {e}"))
}

/// The exported handler.
struct OrderedProbe;

impl Handler for OrderedProbe {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let probe: Probe = match serde_json::from_str(&delivery.event.payload) {
            Ok(p) => p,
            Err(e) => return Outcome::fail(format!("ordered-probe: payload: {e}")),
        };
        let attempt = delivery.attempt;
        if let Err(e) = append(&probe.key, &format!("start:{}:{attempt}", probe.seq)) {
            return Outcome::fail(format!("ordered-probe: {e}"));
        }
        std::thread::sleep(Duration::from_millis(probe.sleep_ms));
        if let Err(e) = append(&probe.key, &format!("end:{}:{attempt}", probe.seq)) {
            return Outcome::fail(format!("ordered-probe: {e}"));
        }
        if probe.retry_first && attempt == 1 {
            Outcome::retry(format!("ordered-probe: entry {} retries once", probe.seq))
        } else {
            Outcome::Ok
        }
    }
}

outbox_plugin_sdk::export_handler!(OrderedProbe);
