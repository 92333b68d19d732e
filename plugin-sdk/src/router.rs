//! The `router` world: decide which queues each event of a batch goes to.
//!
//! Implement [`Router`] and export it with [`export_router!`](crate::export_router). A router
//! may only log: it cannot publish, touch the key-value store or make HTTP calls.

use crate::bindings::router::exports::outbox::plugin::router_api::{
    Event as WitEvent, Guest, RouteDecision,
};
use crate::{Config, Event};

/// Where one event goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Hand the event to these queues (more than one: fan-out). Never empty.
    Queues(Vec<String>),
    /// No rule matches: the event fails at once with this explanation.
    NoRoute(String),
}

impl Route {
    /// Route to a single queue.
    pub fn queue(queue: impl Into<String>) -> Self {
        Self::Queues(vec![queue.into()])
    }
}

/// A router plugin.
///
/// The host calls [`Router::route`] with a batch of claimed events and the plugin's JSON config
/// from `routes.toml` (for the default prefix router: the routing table). Each event's `payload`
/// and `headers` are empty strings unless the plugin's `[plugins.NAME]` sets
/// `router_payload = true`: a router that routes by content asks for them there.
pub trait Router {
    /// Route `events`. Must return exactly one [`Route`] per event, in the same order; the host
    /// rejects the whole batch otherwise. Called only when [`Router::check_config`] accepted
    /// `config`.
    fn route(config: &Config, events: Vec<Event>) -> Vec<Route>;

    /// Whether `config` is usable, before any event is routed with it; by default every config
    /// is. An `Err` fails the whole call (the host retries the events later, like any failed
    /// router call, with this message saying the config is at fault) instead of turning a
    /// broken config into `no-route` failures of good events. The host also calls the router
    /// with an empty batch when `routes.toml` is (re)loaded, so a config this refuses is
    /// refused at load time and the previous config keeps serving.
    fn check_config(config: &Config) -> Result<(), String> {
        let _ = config;
        Ok(())
    }
}

/// How a router's refusal of its config starts (the host recognises it in a failed call).
#[doc(hidden)]
pub const INVALID_CONFIG_MARK: &str = "outbox router: invalid plugin config";

/// Adapts a [`Router`] to the generated `router-api` export. Used by [`export_router!`](crate::export_router).
#[doc(hidden)]
pub struct RouterExport<R>(std::marker::PhantomData<R>);

impl<R: Router> Guest for RouterExport<R> {
    fn route(config: String, events: Vec<WitEvent>) -> Vec<RouteDecision> {
        let config = Config::new(config);
        if let Err(error) = R::check_config(&config) {
            // The WIT answer has no error case: failing the call is the one way to say the
            // config, not the events, is at fault (the host reports the message below).
            panic!("{INVALID_CONFIG_MARK}: {error}");
        }
        let events = events.into_iter().map(Event::from).collect();
        R::route(&config, events)
            .into_iter()
            .map(|route| match route {
                Route::Queues(queues) => RouteDecision::Queues(queues),
                Route::NoRoute(reason) => RouteDecision::NoRoute(reason),
            })
            .collect()
    }
}

/// Export a [`Router`] implementation as this component's `router-api`.
///
/// Use it once, at the top level of a `cdylib` crate:
///
/// ```no_run
/// use outbox_plugin_sdk::{router::{Route, Router}, Config, Event};
///
/// struct Everything;
///
/// impl Router for Everything {
///     fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
///         events.iter().map(|_| Route::queue("outbox.everything")).collect()
///     }
/// }
///
/// outbox_plugin_sdk::export_router!(Everything);
/// ```
#[macro_export]
macro_rules! export_router {
    ($router:ty) => {
        const _: () = {
            type __OutboxRouterExport = $crate::router::RouterExport<$router>;
            $crate::__private::router::__export_router_world!(
                __OutboxRouterExport with_types_in $crate::__private::router
            );
        };
    };
}
