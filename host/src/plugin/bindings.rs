//! Host bindings generated from `plugin-sdk/wit` (the one copy of the contract). The handler
//! and policy worlds reuse the router world's `types` and `log` so one implementation serves all.
//!
//! The previous, frozen version of the contract (`plugin-sdk/wit/0.1`) is bound too, in
//! [`v0_1`], so that plugins built against it keep loading: its worlds are adapted to the
//! current types in `plugin::legacy`, and nothing else in the host sees them.
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

/// The bindings of `outbox:plugin@0.1.0`, the previous version of the contract (frozen in
/// `plugin-sdk/wit/0.1`): only `plugin::legacy` uses them.
#[allow(missing_docs, dead_code)] // generated from the WIT, whose own comments document it
pub(crate) mod v0_1 {
    /// The 0.1 `router` world.
    pub(crate) mod router_world {
        wasmtime::component::bindgen!({
            path: "../plugin-sdk/wit/0.1",
            world: "router",
            imports: { default: async },
            exports: { default: async },
        });
    }

    /// The 0.1 `handler` world.
    pub(crate) mod handler_world {
        wasmtime::component::bindgen!({
            path: "../plugin-sdk/wit/0.1",
            world: "handler",
            imports: { default: async },
            exports: { default: async },
            with: {
                "outbox:plugin/types": super::router_world::outbox::plugin::types,
                "outbox:plugin/log": super::router_world::outbox::plugin::log,
            },
        });
    }

    /// The 0.1 `policy` world.
    pub(crate) mod policy_world {
        wasmtime::component::bindgen!({
            path: "../plugin-sdk/wit/0.1",
            world: "policy",
            imports: { default: async },
            exports: { default: async },
            with: {
                "outbox:plugin/log": super::router_world::outbox::plugin::log,
            },
        });
    }
}

/// The delay and reason of an [`Outcome::RetryAfter`].
pub use handler_world::exports::outbox::plugin::handler_api::DelayedRetry;
/// A delivery a handler plugin handles: the event, its queue and the attempt.
pub use handler_world::exports::outbox::plugin::handler_api::Delivery;
/// What a handler plugin made of a delivery (`ok`, `retry`, `retry-after`, `fail`).
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
