//! Routing: decides which queues an event goes to.
//!
//! Owns the [`Router`] seam the dispatcher calls with a batch of claimed events, and the native
//! [`RouteTable`] (longest matching prefix from `routes.toml`). The WebAssembly router plugin
//! implements the same trait. A router never touches the database or Redis: it only maps events
//! to queue names, so it can be swapped (hot reload) between two batches.

use std::fmt;

use crate::store::ClaimedEvent;

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
/// WebAssembly router plugin. Calls are synchronous and may be CPU-bound; the dispatcher runs
/// them off the async executor.
pub trait Router: Send + Sync {
    /// Short name for logs and errors (`native-table`, `prefix-router`, ...).
    fn name(&self) -> &str;

    /// Route `events`, returning exactly one decision per event, in order.
    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError>;
}

/// One rule of the routing table: a type prefix and the queues it sends to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RouteRule {
    /// Event type prefix, e.g. `mail.` or `tenant.subscription.`; a leading `*` matches any one
    /// first segment (`*.deleted` matches `user.deleted` and `order.deleted.v2`).
    pub prefix: String,
    /// Destination queues (two or more: fan-out).
    pub queues: Vec<String>,
}

impl RouteRule {
    fn matches(&self, event_type: &str) -> bool {
        match self.prefix.strip_prefix('*') {
            Some(rest) => match event_type.find('.') {
                Some(dot) => event_type[dot..].starts_with(rest),
                None => false,
            },
            None => event_type.starts_with(&self.prefix),
        }
    }

    /// Specificity used to pick the longest match: literal prefixes beat wildcards of the same
    /// length.
    fn specificity(&self) -> (usize, bool) {
        (self.prefix.len(), !self.prefix.starts_with('*'))
    }
}

/// The native routing table: longest matching prefix wins.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteTable {
    rules: Vec<RouteRule>,
}

impl RouteTable {
    /// Build a table; rules are kept most specific first so the first match is the longest.
    pub fn new(mut rules: Vec<RouteRule>) -> Self {
        rules.sort_by_key(|r| std::cmp::Reverse(r.specificity()));
        Self { rules }
    }

    /// The rules, most specific first.
    pub fn rules(&self) -> &[RouteRule] {
        &self.rules
    }

    /// The rule that routes `event_type`, if any.
    pub fn rule_for(&self, event_type: &str) -> Option<&RouteRule> {
        self.rules.iter().find(|r| r.matches(event_type))
    }

    /// Route one event type.
    pub fn route(&self, event_type: &str) -> RouteDecision {
        match self.rule_for(event_type) {
            Some(rule) => RouteDecision::Queues(rule.queues.clone()),
            None => RouteDecision::NoRoute(no_route_message(event_type)),
        }
    }
}

/// The `last_error` text of an event that no rule routes.
pub fn no_route_message(event_type: &str) -> String {
    format!(
        "no route matched event type '{event_type}' (add a prefix rule to [routes] in routes.toml)"
    )
}

impl Router for RouteTable {
    fn name(&self) -> &str {
        "native-table"
    }

    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError> {
        Ok(events.iter().map(|e| self.route(&e.event_type)).collect())
    }
}

impl fmt::Display for RouteTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for rule in &self.rules {
            writeln!(f, "{:<28} -> {}", rule.prefix, rule.queues.join(", "))?;
        }
        Ok(())
    }
}

/// The router currently serving, swapped atomically on reload: a batch routes with the router
/// it loaded at its start, the next batch sees the new one.
#[derive(Clone)]
pub struct RouterHandle(std::sync::Arc<arc_swap::ArcSwap<Box<dyn Router>>>);

impl RouterHandle {
    /// Serve `router`.
    pub fn new(router: impl Router + 'static) -> Self {
        Self::from_box(Box::new(router))
    }

    /// Serve an already boxed router.
    pub fn from_box(router: Box<dyn Router>) -> Self {
        Self(std::sync::Arc::new(arc_swap::ArcSwap::from_pointee(router)))
    }

    /// The router serving now.
    pub fn current(&self) -> std::sync::Arc<Box<dyn Router>> {
        self.0.load_full()
    }

    /// Replace the router; calls already running finish on the old one.
    pub fn replace(&self, router: Box<dyn Router>) {
        self.0.store(std::sync::Arc::new(router));
    }
}

impl fmt::Debug for RouterHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RouterHandle")
            .field(&self.current().name())
            .finish()
    }
}
