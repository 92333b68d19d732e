//! TEST ONLY: a router built against the previous contract, `outbox:plugin@0.1.0` (frozen in
//! `plugin-sdk/wit/0.1`), with plain wit-bindgen. Routes every event to `outbox.legacy`, except
//! types starting with `nope.`, which get no route. Config: none.

// The generated bindings carry no docs of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "../../../plugin-sdk/wit/0.1", world: "router" });

use exports::outbox::plugin::router_api::{Event, Guest, RouteDecision};

/// The exported router.
struct LegacyRouter;

impl Guest for LegacyRouter {
    fn route(_config: String, events: Vec<Event>) -> Vec<RouteDecision> {
        events
            .iter()
            .map(|e| {
                if e.event_type.starts_with("nope.") {
                    RouteDecision::NoRoute(format!("legacy router: {} goes nowhere", e.event_type))
                } else {
                    RouteDecision::Queues(vec!["outbox.legacy".to_string()])
                }
            })
            .collect()
    }
}

export!(LegacyRouter);
