//! Host bindings generated from `plugin-sdk/wit` (the one copy of the contract). The handler
//! and policy worlds reuse the router world's `types` and `log` so one implementation serves all.

/// The `router` world.
#[allow(missing_docs)] // generated from the WIT, whose own comments document it
pub mod router_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "router",
    });
}

/// The `handler` world.
#[allow(missing_docs)] // generated from the WIT, whose own comments document it
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
#[allow(missing_docs)] // generated from the WIT, whose own comments document it
pub mod policy_world {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "policy",
        with: {
            "outbox:plugin/log": super::router_world::outbox::plugin::log,
        },
    });
}

/// The WIT `event` record every world shares.
pub use router_world::outbox::plugin::types::Event as WitEvent;
/// The WIT `host-error` a host call returns to a plugin (`denied` by the capability policy, or
/// `failed`). Distinct from [`crate::HostError`], which is a failure of the host process itself.
pub use router_world::outbox::plugin::types::HostError as HostCallError;
