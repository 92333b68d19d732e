//! TEST ONLY: a handler whose event payload scripts what each attempt does, and which writes
//! down when each attempt ran, so tests can check retries, delays and traps end to end.
//!
//! Payload: `{"attempts": ["panic", "retry-after:1500", "ok"]}`: attempt n does entry n - 1
//! (the last entry repeats for later attempts). Entries: `ok`, `retry` (the host's backoff),
//! `retry-after:<ms>` (the handler's own delay), `fail`, `panic` (a Rust panic: a trap for the
//! host). Before doing it, every attempt appends its number to the kv key `attempts-<event id>`
//! (comma-separated; a compare-and-set loop, so concurrent attempts never lose one): a test
//! reads that key to see which attempts ran, and when. An attempt whose kv write fails (Redis
//! away) asks for a retry without doing its step. Needs the `kv` grant. Config: none.

use std::time::Duration;

use outbox_plugin_sdk::handler::{kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::{Config, HostError};
use serde::Deserialize;

/// The payload.
#[derive(Deserialize)]
struct Script {
    attempts: Vec<String>,
}

/// Append `attempt` to the list under `key`.
fn record(key: &str, attempt: u32) -> Result<(), HostError> {
    loop {
        let current = kv::get(key)?;
        let next = match &current {
            Some(list) => format!("{list},{attempt}"),
            None => attempt.to_string(),
        };
        if kv::compare_and_set(key, current.as_deref(), &next, Some(3600))? {
            return Ok(());
        }
    }
}

/// The exported handler.
struct RetryProbe;

impl Handler for RetryProbe {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let script: Script = match delivery.event.payload() {
            Ok(script) => script,
            Err(e) => return Outcome::fail(format!("retry-probe: bad payload: {e}")),
        };
        if let Err(e) = record(&format!("attempts-{}", delivery.event.id), delivery.attempt) {
            // The kv store is away (a Redis blip): not the event's fault, try again later.
            return Outcome::retry(format!("retry-probe: kv: {e}"));
        }
        let index = (delivery.attempt as usize).saturating_sub(1);
        let step = script
            .attempts
            .get(index)
            .or(script.attempts.last())
            .map(String::as_str)
            .unwrap_or("ok");
        match step {
            "ok" => Outcome::Ok,
            "retry" => Outcome::retry(format!("retry-probe: attempt {} retries", delivery.attempt)),
            "fail" => Outcome::fail(format!("retry-probe: attempt {} fails", delivery.attempt)),
            "panic" => panic!("retry-probe: attempt {} panics", delivery.attempt),
            other => match other.strip_prefix("retry-after:").map(str::parse::<u64>) {
                Some(Ok(ms)) => Outcome::retry_after(
                    format!("retry-probe: attempt {} asks for {ms} ms", delivery.attempt),
                    Duration::from_millis(ms),
                ),
                _ => Outcome::fail(format!("retry-probe: unknown step {other:?}")),
            },
        }
    }
}

outbox_plugin_sdk::export_handler!(RetryProbe);
