//! Routing a claimed batch: each event checked against its contract, then the router asked for
//! its queues in one batch call (event by event when that call fails); a small batch on the
//! dispatcher's task, a large one off the async executor.
//!
//! Owns the decision per event before the hand-off ([`Routed`]). Whatever the router answers,
//! only a valid, bounded decision leaves here; it never enqueues or records anything.

use std::sync::Arc;

use super::Dispatcher;
use crate::contracts::Contracts;
use crate::plugin::engine::block_on;
use crate::routing::{one_decision, RouteDecision, Router};
use crate::store::{Claim, ClaimedEvent};

/// Batches of at most this many events are routed on the dispatcher's own task (a router
/// plugin's call yields at every epoch tick); larger ones on a blocking thread, where their
/// contract checks and the native table's matching run off the async workers. At a trickle of
/// events every claim is a batch of one or two, and the hop to a blocking thread and back was
/// two thread wake-ups per event.
const ROUTED_ON_TASK_AT_MOST: usize = 16;

impl Dispatcher {
    /// Route a claim: on the dispatcher's task when it is small, on a blocking thread otherwise
    /// (see [`ROUTED_ON_TASK_AT_MOST`]). A failing batch call is retried event by event so one
    /// poisonous event cannot hold back the others.
    ///
    /// Events that break their contract are taken out before routing: their decision is
    /// [`Routed::BrokeContract`].
    pub(super) async fn route(&self, mut claim: Claim) -> (Claim, Vec<Routed>) {
        let router = self.router.current();
        let contracts = self.contracts.clone();
        if claim.events.len() <= ROUTED_ON_TASK_AT_MOST {
            let decisions =
                route_claimed(router.as_ref().as_ref(), &contracts, &claim.events).await;
            return (claim, decisions);
        }
        let events = Arc::new(std::mem::take(&mut claim.events));
        let shared = events.clone();
        let joined = tokio::task::spawn_blocking(move || {
            block_on(route_claimed(router.as_ref().as_ref(), &contracts, &shared)).unwrap_or_else(
                |e| vec![Routed::Route(RouteDecision::Error(e.to_string())); shared.len()],
            )
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

/// Check `events` against their contracts, then route the valid ones (see
/// [`Dispatcher::route`]).
async fn route_claimed(
    router: &dyn Router,
    contracts: &Contracts,
    events: &[ClaimedEvent],
) -> Vec<Routed> {
    let violations: Vec<Option<String>> = events
        .iter()
        .map(|e| {
            contracts
                .check_text(&e.event_type, e.event_version, &e.payload, "dispatch")
                .err()
                .map(|v| v.to_string())
        })
        .collect();
    if violations.iter().all(Option::is_none) {
        return route_checked(router, events)
            .await
            .into_iter()
            .map(Routed::Route)
            .collect();
    }
    let valid: Vec<ClaimedEvent> = events
        .iter()
        .zip(&violations)
        .filter(|(_, v)| v.is_none())
        .map(|(e, _)| e.clone())
        .collect();
    let mut routed = route_checked(router, &valid).await.into_iter();
    violations
        .into_iter()
        .map(|violation| match violation {
            Some(reason) => Routed::BrokeContract(reason),
            None => {
                Routed::Route(routed.next().unwrap_or_else(|| {
                    RouteDecision::Error("router returned too few routes".into())
                }))
            }
        })
        .collect()
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
async fn route_checked(router: &dyn Router, events: &[ClaimedEvent]) -> Vec<RouteDecision> {
    if events.is_empty() {
        return Vec::new();
    }
    let decisions = match router.route_events(events).await {
        Ok(d) if d.len() == events.len() => d,
        Ok(d) => {
            let message = format!(
                "router {} returned {} routes for {} events",
                router.name(),
                d.len(),
                events.len()
            );
            route_one_by_one(router, events, &message).await
        }
        Err(e) => route_one_by_one(router, events, &e.to_string()).await,
    };
    decisions
        .into_iter()
        .map(|d| d.checked(router.name()))
        .collect()
}

async fn route_one_by_one(
    router: &dyn Router,
    events: &[ClaimedEvent],
    batch_error: &str,
) -> Vec<RouteDecision> {
    tracing::warn!(
        router = router.name(),
        error = batch_error,
        "batch routing failed; routing events one by one"
    );
    let mut decisions = Vec::with_capacity(events.len());
    for event in events {
        let answer = router.route_events(std::slice::from_ref(event)).await;
        decisions.push(one_decision(router, answer));
    }
    decisions
}
