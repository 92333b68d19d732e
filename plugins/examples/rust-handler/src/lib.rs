//! Example handler in Rust (world `handler`), the twin of `../python-handler/app.py` and
//! `../js-handler/handler.js`: the same behaviour in each language, chosen by the payload's
//! `action` (default `ok`), so the host's tests and the bench treat the three alike.
//!
//! | action | what the handler does |
//! |---|---|
//! | `ok` | counts the event in kv (`seen`), logs it, publishes `child_type` (config) if set |
//! | `retry` | `retry("asked to retry")` |
//! | `retry-after` | retries after 1500 ms |
//! | `fail` | `fail("asked to fail")` |
//! | `spin` | computes forever (the host's time limit stops it) |
//! | `hog` | allocates without bound (the host's memory cap stops it) |
//! | `sleep` | sleeps 30 s (the host's time limit cuts the wait) |

use std::time::Duration;

use outbox_plugin_sdk::handler::{self, kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::serde_json::{json, Value};
use outbox_plugin_sdk::{log, Config};

/// The exported handler.
struct Example;

impl Handler for Example {
    fn handle(config: &Config, delivery: Delivery) -> Outcome {
        let config: Value = match config.parse() {
            Ok(Value::Null) => json!({}),
            Ok(config) => config,
            Err(e) => return Outcome::fail(e),
        };
        let child_type = match config.get("child_type") {
            None | Some(Value::Null) => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(_) => return Outcome::fail("invalid plugin config: child_type must be a string"),
        };
        let event = &delivery.event;
        let payload = match event.payload_json() {
            Ok(Value::Object(payload)) => payload,
            Ok(_) => return Outcome::fail("malformed payload: expected a JSON object"),
            Err(e) => return Outcome::fail(format!("malformed payload: {e}")),
        };
        match payload.get("action").and_then(Value::as_str).unwrap_or("ok") {
            "ok" => {
                let count = match kv::increment("seen", 1, None) {
                    Ok(count) => count,
                    Err(e) => return Outcome::retry(format!("kv: {e}")),
                };
                log::info!("event {} ({}) seen {count} times", event.id, event.event_type);
                if let Some(child_type) = child_type {
                    let child = json!({ "parent": event.id, "count": count });
                    if let Err(e) = handler::publish(&child_type, &child) {
                        return Outcome::retry(format!("publishing {child_type}: {e}"));
                    }
                }
                Outcome::Ok
            }
            "retry" => Outcome::retry("asked to retry"),
            "retry-after" => {
                Outcome::retry_after("asked to retry later", Duration::from_millis(1500))
            }
            "fail" => Outcome::fail("asked to fail"),
            "spin" => spin(),
            "hog" => hog(),
            "sleep" => {
                std::thread::sleep(Duration::from_secs(30));
                Outcome::fail("slept 30 s: the host's time limit did not cut the call")
            }
            other => Outcome::fail(format!("unknown action {other}")),
        }
    }
}

/// Compute forever.
fn spin() -> Outcome {
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
}

/// Allocate 1 MiB after 1 MiB, touching each, forever.
fn hog() -> Outcome {
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        held.push(std::hint::black_box(vec![1u8; 1 << 20]));
    }
}

outbox_plugin_sdk::export_handler!(Example);
