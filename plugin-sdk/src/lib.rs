//! Guest SDK for `outbox` plugins: WebAssembly components the host loads to route events,
//! handle queue entries and decide capability checks.
//!
//! A plugin is a `cdylib` crate built with `cargo build --release --target wasm32-wasip2`. It
//! implements one trait and exports it with one macro, which picks the WIT world
//! (`outbox:plugin@0.2.0`, see `wit/outbox.wit` in this crate):
//!
//! | world | trait | export macro | may call |
//! |---|---|---|---|
//! | `router` | [`router::Router`] | [`export_router!`] | [`log`] |
//! | `handler` | [`handler::Handler`] | [`export_handler!`] | [`log`], [`handler::publish`], [`handler::kv`], [`handler::http`] |
//! | `policy` | [`policy::Policy`] | [`export_policy!`] | [`log`] |
//!
//! Every call receives the plugin's own config from `routes.toml` as a [`Config`] (JSON); events
//! arrive as [`Event`]s whose payload and headers are parsed only when asked for. Host calls a
//! handler makes go through the capability policy and fail with [`HostError::Denied`] when the
//! plugin lacks the grant. The publish, kv and http helpers live under [`handler`] on purpose:
//! a router or policy plugin cannot call them, so its component never imports them.
//!
//! # A router
//!
//! ```no_run
//! use outbox_plugin_sdk::{router::{Route, Router}, Config, Event};
//!
//! struct ByTenant;
//!
//! impl Router for ByTenant {
//!     fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
//!         events
//!             .iter()
//!             .map(|e| match &e.tenant_id {
//!                 Some(tenant) => Route::queue(format!("outbox.tenant.{tenant}")),
//!                 None => Route::NoRoute(format!("event {} has no tenant", e.id)),
//!             })
//!             .collect()
//!     }
//! }
//!
//! outbox_plugin_sdk::export_router!(ByTenant);
//! ```
//!
//! # A handler
//!
//! ```no_run
//! use outbox_plugin_sdk::{handler::{self, Delivery, Handler, Outcome}, log, Config};
//! use outbox_plugin_sdk::serde_json::json;
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Signup { email: String }
//!
//! struct Welcome;
//!
//! impl Handler for Welcome {
//!     fn handle(_config: &Config, delivery: Delivery) -> Outcome {
//!         let signup: Signup = match delivery.event.payload() {
//!             Ok(signup) => signup,
//!             Err(e) => return Outcome::fail(format!("malformed payload: {e}")),
//!         };
//!         log::info!("welcoming {}", signup.email);
//!         match handler::publish("mail.welcome", &json!({ "to": signup.email })) {
//!             Ok(_) => Outcome::Ok,
//!             Err(e) if e.is_denied() => Outcome::fail(e),
//!             Err(e) => Outcome::retry(e),
//!         }
//!     }
//! }
//!
//! outbox_plugin_sdk::export_handler!(Welcome);
//! ```
//!
//! # A capability policy
//!
//! ```no_run
//! use outbox_plugin_sdk::{policy::{CapabilityRequest, Decision, Policy}, Config};
//!
//! struct NoHttp;
//!
//! impl Policy for NoHttp {
//!     fn check(_config: &Config, request: CapabilityRequest) -> Decision {
//!         if request.capability == "http" {
//!             Decision::Deny(format!("plugin '{}' may not use http", request.plugin))
//!         } else {
//!             Decision::Allow
//!         }
//!     }
//! }
//!
//! outbox_plugin_sdk::export_policy!(NoHttp);
//! ```

#![warn(missing_docs)]

// The generated bindings and the export macros name this crate by its external name.
extern crate self as outbox_plugin_sdk;

// Generated code: documented from the WIT where the WIT has docs.
#[allow(missing_docs)]
mod bindings;
mod config;
mod error;
mod event;
pub mod handler;
pub mod log;
pub mod policy;
pub mod router;

pub use config::{Config, ConfigError};
pub use error::HostError;
pub use event::Event;
/// Re-exported so plugins can use `serde_json::Value` and `json!` without another dependency.
pub use serde_json;

/// Implementation details of the `export_*!` macros. Not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::bindings::*;
    pub use wit_bindgen;
}
