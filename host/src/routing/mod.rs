//! Routing: decides which queues an event goes to.
//!
//! Owns the [`Router`] seam the dispatcher calls with a batch of claimed events, the one way to
//! build a router from `routes.toml` ([`build_router`]), the native [`RouteTable`] and the
//! [`TypePattern`]/[`PrefixMatcher`] that every prefix rule (table and `[router.overrides]`)
//! matches with. The WebAssembly router plugin implements the same trait ([`PluginRouter`]). A router never touches
//! the database or Redis: it only maps events to queue names, so it can be swapped (hot reload)
//! between two batches.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;

use crate::config::RoutesFile;
use crate::naming::NATIVE_ROUTER;
use crate::plugin::PluginRegistry;
use crate::store::ClaimedEvent;

mod explain;
mod feedback;
mod pattern;
mod plugin_router;
mod table;

pub use explain::{explain_route, QueueConsumer, RouteExplanation};
pub use feedback::{feedback_loops, FeedbackLoop, FeedbackReport, FeedbackStep};
pub use pattern::{PrefixMatcher, Specificity, TypePattern};
pub use plugin_router::PluginRouter;
pub use table::{no_route_message, RouteRule, RouteTable};

/// The router `routes` asks for: the native table, or router plugins from the registry (the
/// default `[router] plugin` plus `[router.overrides]`). When the default router plugin is not
/// loaded, routes with the native table and says so. `outbox run`, `outbox drain`, `outbox routes
/// which` and the demo all build their router here.
pub fn build_router(registry: &Arc<PluginRegistry>, routes: &RoutesFile) -> Box<dyn Router> {
    if routes.router.plugin == NATIVE_ROUTER && routes.router.overrides.is_empty() {
        return Box::new(routes.route_table());
    }
    if routes.router.plugin != NATIVE_ROUTER && registry.get(&routes.router.plugin).is_none() {
        tracing::error!(
            plugin = %routes.router.plugin,
            dir = %registry.dir().display(),
            "router plugin not loaded; routing with the built-in table (build plugins with scripts/build-plugins.sh)"
        );
        return Box::new(routes.route_table());
    }
    Box::new(PluginRouter::new(registry.clone(), routes))
}

/// [`route_one`] for async code: on a blocking thread (`spawn_blocking`), since a router plugin
/// runs WebAssembly and blocks its thread until the call ends. The console, `outbox trace` and
/// `outbox routes which` route through this, never through [`Router::route_batch`] directly.
pub async fn route_one_on_blocking_thread(
    router: Arc<Box<dyn Router>>,
    event: ClaimedEvent,
) -> RouteDecision {
    tokio::task::spawn_blocking(move || route_one(router.as_ref().as_ref(), &event))
        .await
        .unwrap_or_else(|e| RouteDecision::Error(format!("routing task failed: {e}")))
}

/// Route one event alone: exactly one decision, whatever the router answers (a wrong count or a
/// failed call becomes [`RouteDecision::Error`]). Used when a batch call failed and to explain one
/// type to an operator. Blocks while a router plugin runs: async code calls
/// [`route_one_on_blocking_thread`].
pub fn route_one(router: &dyn Router, event: &ClaimedEvent) -> RouteDecision {
    one_decision(router, router.route_batch(std::slice::from_ref(event)))
}

/// The one decision of `router`'s answer for a single event: a wrong count or a failed call
/// becomes [`RouteDecision::Error`].
pub fn one_decision(
    router: &dyn Router,
    answer: Result<Vec<RouteDecision>, RouterError>,
) -> RouteDecision {
    match answer {
        Ok(mut decisions) if decisions.len() == 1 => decisions.remove(0),
        Ok(decisions) => RouteDecision::Error(format!(
            "router {} returned {} routes for 1 event",
            router.name(),
            decisions.len()
        )),
        Err(e) => RouteDecision::Error(e.to_string()),
    }
}

/// Where one event goes, as decided by a [`Router`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteDecision {
    /// Hand the event to these queues (more than one: fan-out). Never empty.
    Queues(Vec<String>),
    /// No rule matches: the event fails at once with this explanation.
    NoRoute(String),
    /// Routing this one event failed (e.g. the router plugin trapped): retry later.
    Error(String),
}

pub use crate::naming::MAX_QUEUES_PER_EVENT;

impl RouteDecision {
    /// This decision as the dispatcher may act on it, whatever router made it: a queue list
    /// must be non-empty, hold at most [`MAX_QUEUES_PER_EVENT`] valid queue names
    /// ([`crate::naming::validate_queue_name`]), none twice; anything else becomes an
    /// [`RouteDecision::Error`] naming `router` (retried, and the router is at fault, not the
    /// event). Reasons are bounded ([`crate::naming::bounded_reason`]) before anyone keeps them.
    pub fn checked(self, router: &str) -> RouteDecision {
        match self {
            RouteDecision::Queues(queues) => match queue_list_problem(&queues) {
                Some(problem) => RouteDecision::Error(format!("router {router} {problem}")),
                None => RouteDecision::Queues(queues),
            },
            RouteDecision::NoRoute(reason) => {
                RouteDecision::NoRoute(crate::naming::bounded_reason(&reason))
            }
            RouteDecision::Error(reason) => {
                RouteDecision::Error(crate::naming::bounded_reason(&reason))
            }
        }
    }
}

/// What is wrong with a queue list a router returned for one event, if anything.
fn queue_list_problem(queues: &[String]) -> Option<String> {
    if queues.is_empty() {
        return Some("returned no queue".into());
    }
    if queues.len() > MAX_QUEUES_PER_EVENT {
        return Some(format!(
            "returned {} queues for one event (at most {MAX_QUEUES_PER_EVENT})",
            queues.len()
        ));
    }
    for (i, queue) in queues.iter().enumerate() {
        if let Err(rule) = crate::naming::validate_queue_name(queue) {
            let shown = crate::naming::bounded_reason(queue);
            let shown: String = shown.chars().take(80).collect();
            return Some(format!("returned an invalid queue name {shown:?}: {rule}"));
        }
        if queues[..i].contains(queue) {
            return Some(format!("returned queue '{queue}' twice for one event"));
        }
    }
    None
}

/// A failure of a whole routing call (not of one event).
#[derive(Debug, thiserror::Error)]
#[error("router {router}: {message}")]
pub struct RouterError {
    /// Name of the router that failed.
    pub router: String,
    /// What went wrong, readable by an operator (ends up in `last_error`).
    pub message: String,
}

/// Maps a batch of events to queue lists. Implemented by the native [`RouteTable`] and by the
/// WebAssembly router plugin. [`route_batch`](Router::route_batch) is synchronous and may be
/// CPU-bound: it runs on a blocking thread, never on an async worker (the dispatcher routes a
/// large batch in `spawn_blocking`; async code routing one event for an operator awaits
/// [`route_one_on_blocking_thread`]). [`route_events`](Router::route_events) is the same as a
/// future, for the dispatcher's small batches: a router plugin's guest gives its thread back at
/// every epoch tick, so it is awaited on the dispatcher's own task, without a hop to a blocking
/// thread and back for every event at a trickle.
pub trait Router: Send + Sync {
    /// Short name for logs and errors (`native-table`, `prefix-router`, ...).
    fn name(&self) -> &str;

    /// Route `events`, returning exactly one decision per event, in order. May run a router
    /// plugin: call it from a blocking thread.
    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError>;

    /// [`route_batch`](Router::route_batch) as a future. By default it routes at once, on the
    /// caller's thread: right for a router that only computes a little (the native table); a
    /// router that runs WebAssembly overrides it with calls that yield.
    fn route_events<'a>(
        &'a self,
        events: &'a [ClaimedEvent],
    ) -> BoxFuture<'a, Result<Vec<RouteDecision>, RouterError>> {
        Box::pin(std::future::ready(self.route_batch(events)))
    }

    /// What decides the route of `event_type` (for `outbox routes which`). By default the
    /// router itself, by its [`Router::name`].
    fn decider(&self, event_type: &str) -> RouteDecider {
        let _ = event_type;
        RouteDecider::Router(self.name().to_string())
    }
}

/// What decides the route of one event type, as a [`Router`] explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteDecider {
    /// This rule of the native table.
    Rule(RouteRule),
    /// The native table, where no rule matches.
    NoRule,
    /// The router (plugin) of this name.
    Router(String),
}

/// The router currently serving, swapped atomically on reload: a batch routes with the router
/// it loaded at its start, the next batch sees the new one.
#[derive(Clone)]
pub struct RouterHandle(Arc<arc_swap::ArcSwap<Box<dyn Router>>>);

impl RouterHandle {
    /// Serve `router`.
    pub fn new(router: impl Router + 'static) -> Self {
        Self::from_box(Box::new(router))
    }

    /// Serve an already boxed router.
    pub fn from_box(router: Box<dyn Router>) -> Self {
        Self(Arc::new(arc_swap::ArcSwap::from_pointee(router)))
    }

    /// The router serving now.
    pub fn current(&self) -> Arc<Box<dyn Router>> {
        self.0.load_full()
    }

    /// Replace the router; calls already running finish on the old one.
    pub fn replace(&self, router: Box<dyn Router>) {
        self.0.store(Arc::new(router));
    }
}

impl fmt::Debug for RouterHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RouterHandle")
            .field(&self.current().name())
            .finish()
    }
}
