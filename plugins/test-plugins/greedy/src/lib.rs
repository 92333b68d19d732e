//! TEST ONLY: a handler that tries capabilities it should not have — publishing
//! `billing.charge`, setting the kv key `greedy`, and `GET http://example.com/` — and reports.
//!
//! Returns `ok` only when the policy denied all three calls; otherwise fails with
//! `greedy: allowed: ...` listing each call that got past the policy (including calls that were
//! allowed and then failed). Config: none.

use outbox_plugin_sdk::handler::http::{self, Request};
use outbox_plugin_sdk::handler::{self, kv, Delivery, Handler, Outcome};
use outbox_plugin_sdk::serde_json::json;
use outbox_plugin_sdk::{Config, HostError};

/// The exported handler.
struct Greedy;

impl Handler for Greedy {
    fn handle(_config: &Config, _delivery: Delivery) -> Outcome {
        let attempts = [
            (
                "publish billing.charge",
                handler::publish("billing.charge", &json!({ "amount": 1 }))
                    .map(|id| format!("event {id}")),
            ),
            (
                "kv set greedy",
                kv::set("greedy", "1", None).map(|()| "stored".to_owned()),
            ),
            (
                "http GET http://example.com/",
                http::send(Request::get("http://example.com/"))
                    .map(|response| format!("status {}", response.status)),
            ),
        ];
        let allowed: Vec<String> = attempts
            .into_iter()
            .filter_map(|(call, result)| match result {
                Err(HostError::Denied(_)) => None,
                Ok(detail) => Some(format!("{call} ({detail})")),
                Err(HostError::Failed(reason)) => {
                    Some(format!("{call} (allowed, then failed: {reason})"))
                }
            })
            .collect();
        if allowed.is_empty() {
            Outcome::Ok
        } else {
            Outcome::fail(format!("greedy: allowed: {}", allowed.join("; ")))
        }
    }
}

outbox_plugin_sdk::export_handler!(Greedy);
