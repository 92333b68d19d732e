//! Route explanations: where one event type goes and who consumes it, for `outbox routes which`
//! and the console's "which queues for this type?" box.
//!
//! Owns only the explanation (the text line and the JSON are made from one value, so they agree).
//! It routes an event of the type with an empty payload through the router in force, on a
//! blocking thread, and never touches the database or Redis.

use crate::config::{RoutesFile, SinkKind};
use crate::store::ClaimedEvent;

use std::sync::Arc;

use super::{route_one_on_blocking_thread, RouteDecider, RouteDecision, Router};

/// Where one event type goes, for `outbox routes which` (the text line and `--json` are made
/// from this one value, so they always agree).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RouteExplanation {
    /// The event type asked about.
    pub event_type: String,
    /// The queues it goes to (empty when it has no route or routing failed).
    pub queues: Vec<String>,
    /// What decided: `rule` (a `[routes]` prefix), `router` (a router plugin) or `none`.
    pub decided_by: &'static str,
    /// The rule's prefix, or the router plugin's name (`None` when nothing decided).
    pub decider: Option<String>,
    /// Why it has no route (`None` when it has one).
    pub no_route: Option<String>,
    /// The router's error (`None` unless routing failed).
    pub error: Option<String>,
    /// Who consumes each of `queues` here: its handler (if any) and the queue groups that
    /// list it (a host run with `--queue-group G` consumes only G's queues).
    pub consumers: Vec<QueueConsumer>,
}

/// Who runs the entries of one queue.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct QueueConsumer {
    /// The queue.
    pub queue: String,
    /// Where its events go: `streams` (the host's receivers), `bullmq` (BullMQ workers),
    /// `nats` or `rabbitmq` (the broker's consumers).
    pub sink: SinkKind,
    /// For a `bullmq` queue: its prefix, job id template and job options, in one line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bullmq: Option<String>,
    /// For a `nats` or `rabbitmq` queue: its stream and subject, or exchange and routing key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    /// The handler bound to it in `[handlers]` (`None`: no handler of this host runs it).
    pub handler: Option<String>,
    /// The queue groups that list it.
    pub queue_groups: Vec<String>,
}

impl std::fmt::Display for RouteExplanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let event_type = &self.event_type;
        match (&self.no_route, &self.error) {
            (_, Some(message)) => write!(f, "{event_type}: routing failed: {message}")?,
            (Some(reason), None) => write!(f, "{event_type}: {reason}")?,
            (None, None) => write!(f, "{event_type} -> {}", self.queues.join(", "))?,
        }
        match (self.decided_by, &self.decider) {
            ("rule", Some(prefix)) => write!(f, " (rule \"{prefix}\")")?,
            ("router", Some(name)) => write!(f, " (router plugin \"{name}\")")?,
            _ => {}
        }
        for consumer in &self.consumers {
            if let Some(broker) = &consumer.broker {
                write!(
                    f,
                    "\n  {}: sink {} ({broker}), read by the broker's consumers",
                    consumer.queue, consumer.sink
                )?;
                if let Some(handler) = &consumer.handler {
                    write!(f, "; handler {handler} drains what is left in its stream")?;
                }
                continue;
            }
            if let Some(bullmq) = &consumer.bullmq {
                write!(
                    f,
                    "\n  {}: sink bullmq ({bullmq}), processed by BullMQ workers",
                    consumer.queue
                )?;
                if let Some(handler) = &consumer.handler {
                    write!(f, "; handler {handler} drains what is left in its stream")?;
                }
                continue;
            }
            if let Some(handler) = &consumer.handler {
                let groups = if consumer.queue_groups.is_empty() {
                    "no queue group: only hosts run without --queue-group".to_string()
                } else {
                    format!("queue groups {}", consumer.queue_groups.join(", "))
                };
                write!(f, "\n  {}: handler {handler}, {groups}", consumer.queue)?;
            }
        }
        Ok(())
    }
}

/// A `nats` or `rabbitmq` queue's destination in one line.
fn broker_destination(routes: &RoutesFile, queue: &str) -> Option<String> {
    let spec = routes.queues.get(queue)?;
    match spec.sink {
        SinkKind::Nats => spec
            .nats
            .as_ref()
            .map(|n| format!("stream {}, subject {}", n.stream, n.subject_for(queue))),
        SinkKind::Rabbitmq => spec.rabbitmq.as_ref().map(|r| {
            let exchange = if r.exchange.is_empty() {
                "the default exchange"
            } else {
                r.exchange.as_str()
            };
            format!(
                "exchange {exchange}, routing key {}",
                r.routing_key_for(queue)
            )
        }),
        SinkKind::Streams | SinkKind::Bullmq => None,
    }
}

/// Explain where `event_type` goes under `router` (built by
/// [`build_router`](super::build_router)): the queues and the table rule that picked
/// them, or, for a router plugin, the plugin and what it answered for an event of that type with
/// an empty payload. The router runs on a blocking thread (a router plugin blocks its thread), so
/// async code (the console, the CLI) awaits this directly.
pub async fn explain_route(
    router: Arc<Box<dyn Router>>,
    routes: &RoutesFile,
    event_type: &str,
) -> RouteExplanation {
    let event = ClaimedEvent::unclaimed(0, event_type, "{}");
    let decider = router.decider(event_type);
    let decision = route_one_on_blocking_thread(router, event).await;
    let (decided_by, decider) = match decider {
        RouteDecider::Rule(rule) => ("rule", Some(rule.prefix.clone())),
        RouteDecider::NoRule => ("none", None),
        RouteDecider::Router(name) => ("router", Some(name.to_string())),
    };
    let (queues, no_route, error) = match decision {
        RouteDecision::Queues(queues) => (queues, None, None),
        RouteDecision::NoRoute(reason) => (vec![], Some(reason), None),
        RouteDecision::Error(message) => (vec![], None, Some(message)),
    };
    let consumers = queues
        .iter()
        .map(|queue| QueueConsumer {
            queue: queue.clone(),
            sink: routes.sink_of(queue),
            bullmq: (routes.sink_of(queue) == SinkKind::Bullmq)
                .then(|| routes.bullmq_options(queue).summary()),
            broker: broker_destination(routes, queue),
            handler: routes.handlers.get(queue).cloned(),
            queue_groups: routes
                .queue_groups
                .iter()
                .filter(|(_, members)| members.contains(queue))
                .map(|(group, _)| group.clone())
                .collect(),
        })
        .collect();
    RouteExplanation {
        event_type: event_type.to_string(),
        consumers,
        queues,
        decided_by,
        decider,
        no_route,
        error,
    }
}
