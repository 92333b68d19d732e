//! Sink: hands routed events to a queue system, exactly once per (event, queue).
//!
//! Owns the seam between the dispatcher and a queue system: the [`Sink`] trait, what one
//! hand-off is ([`Enqueue`]) and what became of it ([`EnqueueResult`]), and the check that a
//! routes file's destinations exist on their brokers ([`DestinationCheck`]). Each queue system
//! is one submodule: Redis Streams ([`RedisSink`], read by the host's receivers) and BullMQ's
//! format ([`BullmqSink`], read by `bullmq` workers), sharing the pipelined script runner of
//! `script`; NATS JetStream ([`NatsSink`]) and RabbitMQ ([`RabbitmqSink`]), publishing the
//! message of `broker_message`; [`QueueSinks`] picks one per queue (`[queues."NAME"] sink`).
//! What a Redis sink writes (keys, entry fields, job hash, the Lua scripts) is the wire
//! contract of [`crate::queue`]; a sink runs it.
//! A sink never touches PostgreSQL, never builds a key itself and never decides retries: it
//! reports per-entry results, telling an entry the queue system refused
//! ([`EnqueueResult::Failed`], the event's fault) from an infrastructure blip
//! ([`EnqueueResult::Unavailable`], classified by [`crate::fault`]), and the dispatcher records
//! them. Every sink passes the one conformance suite (`tests/all/sink_conformance.rs`).

use futures::future::BoxFuture;

use crate::config::RoutesFile;
use crate::fault::Blip;
use crate::store::ClaimedEvent;

pub mod broker_message;
mod bullmq;
mod by_queue;
mod nats;
mod rabbitmq;
mod redis_streams;
mod script;

pub use bullmq::BullmqSink;
pub use by_queue::QueueSinks;
pub use nats::{NatsSink, NATS_ACK_TIMEOUT, NATS_MAX_HEADER_BYTES};
pub use rabbitmq::{RabbitmqSink, RABBITMQ_TIMEOUT};
pub use redis_streams::RedisSink;

/// A sink failure with context.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct SinkError {
    /// What the sink was doing.
    pub context: String,
    /// The client's error.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl SinkError {
    /// A failure of `context` caused by `source`.
    pub fn new(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Self {
            context: context.into(),
            source: source.into(),
        }
    }
}

/// One (event, queue) hand-off to perform.
#[derive(Debug, Clone)]
pub struct Enqueue<'a> {
    /// The event.
    pub event: &'a ClaimedEvent,
    /// The destination queue (without the Redis prefix).
    pub queue: &'a str,
}

/// What happened to one [`Enqueue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnqueueResult {
    /// A new stream entry was added.
    Added(String),
    /// An earlier attempt already added it; this is its entry id. Nothing was written.
    AlreadyEnqueued(String),
    /// The queue system refused this entry (e.g. the key holds another type); nothing was
    /// written. The event's fault: it counts as an attempt.
    Failed(String),
    /// An infrastructure blip (connection dropped or refused, timeout, `LOADING`, `NOSCRIPT`,
    /// `READONLY`, ...): the entry may or may not have been written, and handing it off again is
    /// safe (the hand-off is idempotent). Not the event's fault.
    Unavailable {
        /// What went wrong, with the event and queue.
        error: String,
        /// The blip's kind.
        blip: Blip,
    },
}

impl EnqueueResult {
    /// The stream entry id, if the queue has the event.
    pub fn stream_id(&self) -> Option<&str> {
        match self {
            EnqueueResult::Added(id) | EnqueueResult::AlreadyEnqueued(id) => Some(id),
            EnqueueResult::Failed(_) | EnqueueResult::Unavailable { .. } => None,
        }
    }

    /// The error, if it failed.
    pub fn error(&self) -> Option<&str> {
        match self {
            EnqueueResult::Failed(e) | EnqueueResult::Unavailable { error: e, .. } => Some(e),
            EnqueueResult::Added(_) | EnqueueResult::AlreadyEnqueued(_) => None,
        }
    }

    /// The infrastructure blip, if this hand-off hit one.
    pub fn blip(&self) -> Option<Blip> {
        match self {
            EnqueueResult::Unavailable { blip, .. } => Some(*blip),
            _ => None,
        }
    }
}

/// A queue system the dispatcher hands events to. Object-safe: the dispatcher holds an
/// `Arc<dyn Sink>` and never knows which kind it is.
///
/// Contract: [`enqueue_all`](Sink::enqueue_all) is idempotent per (event, queue) (a repeated
/// hand-off reports [`EnqueueResult::AlreadyEnqueued`] and writes nothing) and returns one
/// result per item, in input order, and reports an infrastructure blip as
/// [`EnqueueResult::Unavailable`] entry by entry (a pipeline cut halfway fails only what it did
/// not confirm).
pub trait Sink: Send + Sync {
    /// Short name for logs (`redis-streams`, ...).
    fn name(&self) -> &str;

    /// Hand off every item; one result per item, in input order.
    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>>;

    /// Check the queue system answers.
    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>>;
}

/// Why a routes file's destinations cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DestinationError {
    /// A destination is wrong (a missing stream or exchange, a subject another stream takes, a
    /// duplicate window shorter than the claim lease): the operator's to fix.
    #[error("{0}")]
    Invalid(String),
    /// A broker did not answer the check.
    #[error("{0}")]
    Unreachable(String),
}

/// Checks that the destinations a routes file names on its brokers exist and can take the
/// queues' messages, before the host serves that file: at start, and before a reload is
/// applied (a reload it refuses leaves the routes in force serving).
pub trait DestinationCheck: Send + Sync {
    /// Check every destination of `routes`; the error names the queue and what to change.
    fn check_destinations<'a>(
        &'a self,
        routes: &'a RoutesFile,
    ) -> BoxFuture<'a, Result<(), DestinationError>>;
}
