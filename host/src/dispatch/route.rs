//! Routing a claimed batch: each event checked against its contract, then the router asked for
//! its queues in one batch call (event by event when that call fails), off the async executor.
//!
//! Owns the decision per event before the hand-off ([`Routed`]). Whatever the router answers,
//! only a valid, bounded decision leaves here; it never enqueues or records anything.

use std::sync::Arc;

use super::Dispatcher;
use crate::routing::RouteDecision;
use crate::store::{Claim, ClaimedEvent};

impl Dispatcher {
    /// Route a claim off the async executor. A failing batch call is retried event by event so
    /// one poisonous event cannot hold back the others.
    ///
    /// Events that break their contract are taken out before routing: their decision is
    /// [`Routed::BrokeContract`].
    pub(super) async fn route(&self, mut claim: Claim) -> (Claim, Vec<Routed>) {
        let router = self.router.current();
        let contracts = self.contracts.clone();
        let events = Arc::new(std::mem::take(&mut claim.events));
        let shared = events.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let violations: Vec<Option<String>> = shared
                .iter()
                .map(|e| {
                    contracts
                        .check_text(&e.event_type, e.event_version, &e.payload, "dispatch")
                        .err()
                        .map(|v| v.to_string())
                })
                .collect();
            if violations.iter().all(Option::is_none) {
                return route_checked(router.as_ref().as_ref(), &shared)
                    .into_iter()
                    .map(Routed::Route)
                    .collect::<Vec<_>>();
            }
            let valid: Vec<ClaimedEvent> = shared
                .iter()
                .zip(&violations)
                .filter(|(_, v)| v.is_none())
                .map(|(e, _)| e.clone())
                .collect();
            let mut routed = route_checked(router.as_ref().as_ref(), &valid).into_iter();
            violations
                .into_iter()
                .map(|violation| match violation {
                    Some(reason) => Routed::BrokeContract(reason),
                    None => Routed::Route(routed.next().unwrap_or_else(|| {
                        RouteDecision::Error("router returned too few routes".into())
                    })),
                })
                .collect()
        })
        .await;
        let decisions = joined.unwrap_or_else(|e| {
            tracing::error!(error = %e, "router panicked");
            vec![Routed::Route(RouteDecision::Error(format!("router panicked: {e}"))); events.len()]
        });
        claim.events = Arc::try_unwrap(events).unwrap_or_else(|shared| (*shared).clone());
        (claim, decisions)
    }
}

/// What the dispatcher decided for one claimed event before the hand-off.
#[derive(Debug, Clone)]
pub(super) enum Routed {
    /// The router's decision.
    Route(RouteDecision),
    /// The event breaks its contract (or has none in strict mode): it fails at once with
    /// this explanation and is never enqueued.
    BrokeContract(String),
}

/// Route `events` with one batch call (event by event when the batch call fails, so one
/// poisonous event cannot hold back the others); whatever the router, only a valid, bounded
/// answer reaches the sink and the store.
fn route_checked(
    router: &dyn crate::routing::Router,
    events: &[ClaimedEvent],
) -> Vec<RouteDecision> {
    if events.is_empty() {
        return Vec::new();
    }
    let decisions = match router.route_batch(events) {
        Ok(d) if d.len() == events.len() => d,
        Ok(d) => {
            let message = format!(
                "router {} returned {} routes for {} events",
                router.name(),
                d.len(),
                events.len()
            );
            route_one_by_one(router, events, &message)
        }
        Err(e) => route_one_by_one(router, events, &e.to_string()),
    };
    decisions
        .into_iter()
        .map(|d| d.checked(router.name()))
        .collect()
}

fn route_one_by_one(
    router: &dyn crate::routing::Router,
    events: &[ClaimedEvent],
    batch_error: &str,
) -> Vec<RouteDecision> {
    tracing::warn!(
        router = router.name(),
        error = batch_error,
        "batch routing failed; routing events one by one"
    );
    events
        .iter()
        .map(|event| crate::routing::route_one(router, event))
        .collect()
}
