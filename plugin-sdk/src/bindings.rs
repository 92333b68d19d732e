//! Raw bindings generated from `wit/outbox.wit`, one module per world.
//!
//! Plugin code should not need anything here: the typed API in the rest of the crate wraps it.
//! The modules are public (but hidden) only because the `export_*!` macros expand in the plugin
//! crate and must name them.

/// Bindings of the `router` world.
pub mod router {
    wit_bindgen::generate!({
        path: "wit",
        world: "router",
        pub_export_macro: true,
        export_macro_name: "__export_router_world",
        default_bindings_module: "outbox_plugin_sdk::__private::router",
        runtime_path: "outbox_plugin_sdk::__private::wit_bindgen::rt",
    });
}

/// Bindings of the `handler` world.
pub mod handler {
    wit_bindgen::generate!({
        path: "wit",
        world: "handler",
        pub_export_macro: true,
        export_macro_name: "__export_handler_world",
        default_bindings_module: "outbox_plugin_sdk::__private::handler",
        runtime_path: "outbox_plugin_sdk::__private::wit_bindgen::rt",
    });
}

/// Bindings of the `policy` world.
pub mod policy {
    wit_bindgen::generate!({
        path: "wit",
        world: "policy",
        pub_export_macro: true,
        export_macro_name: "__export_policy_world",
        default_bindings_module: "outbox_plugin_sdk::__private::policy",
        runtime_path: "outbox_plugin_sdk::__private::wit_bindgen::rt",
    });
}
