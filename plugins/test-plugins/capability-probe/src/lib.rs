//! TEST ONLY: a hostile handler that makes whatever host calls its event's payload lists, as
//! often as asked, and checks how each ended. The host's tests use it to flood the capability
//! layer (distinct denied targets, too many children, too many kv keys) and to probe the egress
//! rules (internal addresses, ports, signing).
//!
//! Payload:
//!
//! ```json
//! { "steps": [
//!   { "op": "publish", "event_type": "probe.child", "tenant": "globex", "repeat": 1,
//!     "expect": { "ok": 1 } },
//!   { "op": "kv-set", "key": "k-{i}", "value_bytes": 10, "ttl": 60, "repeat": 1001,
//!     "expect": { "ok": 1000, "failed": 1, "error_contains": "kv quota of 1000 keys reached" } },
//!   { "op": "kv-get", "key": "k-{i}" }, { "op": "kv-delete", "key": "k-{i}" },
//!   { "op": "kv-increment", "key": "n", "delta": 5, "ttl": 60, "expect": { "returns": "5" } },
//!   { "op": "kv-cas", "key": "n", "expected": "5", "value": "6", "expect": { "returns": "true" } },
//!   { "op": "http", "method": "POST", "url": "http://127.0.0.1:9/x", "body": "hi",
//!     "expect": { "ok": 1, "status": 200 } }
//! ] }
//! ```
//!
//! `{i}` in `event_type`, `key` and `url` is replaced by the repetition's index (0-based). Each
//! step counts its calls that were allowed and worked (`ok`), were denied by the policy
//! (`denied`) or failed (`failed`); `expect` names the counts it wants (unnamed ones are not
//! checked), `error_contains` a text the first denial or failure must contain, `status` the
//! HTTP status of the last successful call, and `returns` what the last successful call
//! returned, as text (`kv-get`: the value or `none`; `kv-increment`: the new value;
//! `kv-delete`, `kv-cas`: `true` or `false`). `kv-cas` without `expected` expects the key absent. Returns `ok` when every expectation holds, otherwise
//! fails with the first step that did not behave as expected. Config: none.

use outbox_plugin_sdk::handler::http::{self, Request};
use outbox_plugin_sdk::handler::{kv, Delivery, Handler, NewEvent, Outcome};
use outbox_plugin_sdk::serde_json::{json, Value};
use outbox_plugin_sdk::{Config, HostError};

/// How one step's calls ended.
#[derive(Default)]
struct Tally {
    ok: u64,
    denied: u64,
    failed: u64,
    first_error: Option<String>,
    last_status: Option<u16>,
    last_return: Option<String>,
}

impl Tally {
    fn record<T>(&mut self, result: Result<T, HostError>) -> Option<T> {
        match result {
            Ok(value) => {
                self.ok += 1;
                Some(value)
            }
            Err(e) => {
                match &e {
                    HostError::Denied(_) => self.denied += 1,
                    HostError::Failed(_) => self.failed += 1,
                }
                self.first_error.get_or_insert_with(|| e.to_string());
                None
            }
        }
    }

    fn summary(&self) -> String {
        let error: String = self
            .first_error
            .as_deref()
            .unwrap_or("none")
            .chars()
            .take(400)
            .collect();
        format!(
            "ok={} denied={} failed={} status={:?} first error: {error}",
            self.ok, self.denied, self.failed, self.last_status
        )
    }
}

/// Run one step `repeat` times.
fn run(step: &Value) -> Result<Tally, String> {
    let op = step["op"].as_str().ok_or("a step needs an op")?;
    let repeat = step["repeat"].as_u64().unwrap_or(1);
    let text = |field: &str, i: u64| {
        step[field]
            .as_str()
            .unwrap_or_default()
            .replace("{i}", &i.to_string())
    };
    let mut tally = Tally::default();
    for i in 0..repeat {
        match op {
            "publish" => {
                let mut event = NewEvent::new(&text("event_type", i), &json!({ "i": i }))
                    .map_err(|e| e.to_string())?;
                if let Some(tenant) = step["tenant"].as_str() {
                    event = event.tenant(tenant);
                }
                tally.record(event.send());
            }
            "kv-set" => {
                let size = step["value_bytes"].as_u64().unwrap_or(1) as usize;
                let ttl = step["ttl"].as_u64().map(|t| t as u32);
                tally.record(kv::set(&text("key", i), &"v".repeat(size), ttl));
            }
            "kv-get" => {
                if let Some(value) = tally.record(kv::get(&text("key", i))) {
                    tally.last_return = Some(value.unwrap_or_else(|| "none".into()));
                }
            }
            "kv-delete" => {
                if let Some(existed) = tally.record(kv::delete(&text("key", i))) {
                    tally.last_return = Some(existed.to_string());
                }
            }
            "kv-increment" => {
                let delta = step["delta"].as_i64().unwrap_or(1);
                let ttl = step["ttl"].as_u64().map(|t| t as u32);
                if let Some(value) = tally.record(kv::increment(&text("key", i), delta, ttl)) {
                    tally.last_return = Some(value.to_string());
                }
            }
            "kv-cas" => {
                let expected = step["expected"].as_str();
                let value = text("value", i);
                let ttl = step["ttl"].as_u64().map(|t| t as u32);
                let stored = kv::compare_and_set(&text("key", i), expected, &value, ttl);
                if let Some(stored) = tally.record(stored) {
                    tally.last_return = Some(stored.to_string());
                }
            }
            "http" => {
                let method = step["method"].as_str().unwrap_or("GET");
                let mut request = Request::new(method, text("url", i));
                if let Some(body) = step["body"].as_str() {
                    request = request.body(body.as_bytes().to_vec());
                }
                if let Some(response) = tally.record(http::send(request)) {
                    tally.last_status = Some(response.status);
                }
            }
            other => return Err(format!("unknown op {other}")),
        }
    }
    Ok(tally)
}

/// Whether a step's tally meets its `expect`.
fn check(step: &Value, tally: &Tally) -> Result<(), String> {
    let expect = &step["expect"];
    for (name, got) in [
        ("ok", tally.ok),
        ("denied", tally.denied),
        ("failed", tally.failed),
    ] {
        if let Some(want) = expect[name].as_u64() {
            if want != got {
                return Err(format!("expected {name}={want}; {}", tally.summary()));
            }
        }
    }
    if let Some(want) = expect["error_contains"].as_str() {
        if !tally
            .first_error
            .as_deref()
            .unwrap_or_default()
            .contains(want)
        {
            return Err(format!(
                "expected an error containing {want:?}; {}",
                tally.summary()
            ));
        }
    }
    if let Some(want) = expect["returns"].as_str() {
        if tally.last_return.as_deref() != Some(want) {
            return Err(format!(
                "expected the last call to return {want:?}, got {:?}; {}",
                tally.last_return,
                tally.summary()
            ));
        }
    }
    if let Some(want) = expect["status"].as_u64() {
        if tally.last_status.map(u64::from) != Some(want) {
            return Err(format!("expected status {want}; {}", tally.summary()));
        }
    }
    Ok(())
}

/// The exported handler.
struct CapabilityProbe;

impl Handler for CapabilityProbe {
    fn handle(_config: &Config, delivery: Delivery) -> Outcome {
        let payload: Value = match outbox_plugin_sdk::serde_json::from_str(&delivery.event.payload)
        {
            Ok(p) => p,
            Err(e) => return Outcome::fail(format!("probe: payload: {e}")),
        };
        let steps = payload["steps"].as_array().cloned().unwrap_or_default();
        for (n, step) in steps.iter().enumerate() {
            let verdict = run(step).and_then(|tally| check(step, &tally));
            if let Err(why) = verdict {
                return Outcome::fail(format!(
                    "probe step {n} ({}): {why}",
                    step["op"].as_str().unwrap_or("?")
                ));
            }
        }
        Outcome::Ok
    }
}

outbox_plugin_sdk::export_handler!(CapabilityProbe);
