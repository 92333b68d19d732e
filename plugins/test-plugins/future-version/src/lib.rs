//! TEST ONLY: a router built against `outbox:plugin@0.3.0` (a version this host does not
//! implement), written with plain wit-bindgen. The host must refuse it, naming both versions.

// The generated bindings carry no docs of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "wit", world: "router" });

use exports::outbox::plugin::router_api::{Event, Guest};

/// The exported router.
struct FutureRouter;

impl Guest for FutureRouter {
    fn route(events: Vec<Event>) -> Vec<Vec<String>> {
        events
            .iter()
            .map(|_| vec!["outbox.future".to_string()])
            .collect()
    }
}

export!(FutureRouter);
