//! Host bindings generated from `plugin-sdk/wit` (the one copy of the contract). The handler
//! and policy worlds reuse the router world's `types` and `log` so one implementation serves all.
//!
//! Imports and exports are generated `async`: the engine runs every call as a future (so a guest
//! that sleeps or waits on a host call can be cut at its time limit) and the host functions
//! (`log`, `publish`, `kv`, `http`) are `async fn`s.
//!
//! The generated world modules stay inside the crate (only the engine links and calls them);
//! the WIT types callers build inputs from and read answers into are re-exported here under
//! clear names. Nothing here calls a plugin.

/// The `router` world.
#[allow(missing_docs, dead_code)] // generated from the WIT, whose own comments document it
pub(crate) mod router_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "router",
        imports: { default: async },
        exports: { default: async },
    });
}

/// The `handler` world.
#[allow(missing_docs, dead_code)] // generated from the WIT, whose own comments document it
pub(crate) mod handler_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "handler",
        imports: { default: async },
        exports: { default: async },
        with: {
            "outbox:plugin/types": super::router_world::outbox::plugin::types,
            "outbox:plugin/log": super::router_world::outbox::plugin::log,
        },
    });
}

/// The `policy` world.
#[allow(missing_docs, dead_code)] // generated from the WIT, whose own comments document it
pub(crate) mod policy_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "policy",
        imports: { default: async },
        exports: { default: async },
        with: {
            "outbox:plugin/log": super::router_world::outbox::plugin::log,
        },
    });
}

/// A delivery a handler plugin handles: the event, its queue and the attempt.
pub use handler_world::exports::outbox::plugin::handler_api::Delivery;
/// What a handler plugin made of a delivery (`ok`, `retry`, `fail`).
pub use handler_world::exports::outbox::plugin::handler_api::Outcome;
/// An outgoing HTTP request a handler asks the host to send (`http.send`).
pub use handler_world::outbox::plugin::http::Request as HttpRequest;
/// The answer to an [`HttpRequest`].
pub use handler_world::outbox::plugin::http::Response as HttpResponse;
/// An event a handler asks the host to publish (`publish.send`).
pub use handler_world::outbox::plugin::publish::NewEvent as WitNewEvent;
/// A capability request a policy plugin decides.
pub use policy_world::exports::outbox::plugin::policy_api::CapabilityRequest;
/// A policy plugin's answer (`allow`, or `deny` with a reason).
pub use policy_world::exports::outbox::plugin::policy_api::Decision;
/// A router plugin's answer for one event (queues or no route).
pub use router_world::exports::outbox::plugin::router_api::RouteDecision as WitRouteDecision;
/// The WIT `event` record every world shares.
pub use router_world::outbox::plugin::types::Event as WitEvent;
/// The WIT `host-error` a host call returns to a plugin (`denied` by the capability policy, or
/// `failed`). Distinct from [`crate::HostError`], which is a failure of the host process itself.
pub use router_world::outbox::plugin::types::HostError as HostCallError;
