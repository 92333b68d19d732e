//! Host bindings generated from `plugin-sdk/wit` (the one copy of the contract). The handler
//! and policy worlds reuse the router world's `types` and `log` so one implementation serves all.

/// The `router` world.
pub mod router_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "router",
    });
}

/// The `handler` world.
pub mod handler_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "handler",
        with: {
            "outbox:plugin/types": super::router_world::outbox::plugin::types,
            "outbox:plugin/log": super::router_world::outbox::plugin::log,
        },
    });
}

/// The `policy` world.
pub mod policy_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "policy",
        with: {
            "outbox:plugin/log": super::router_world::outbox::plugin::log,
        },
    });
}

pub use router_world::outbox::plugin::types::{Event as WitEvent, HostError};
