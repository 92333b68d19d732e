//! NATS JetStream sink: publishes each (event, queue) to the stream its
//! `[queues."NAME".nats]` names, on `OUTBOX_NATS_URL`.
//!
//! Owns the JetStream client of the host and the hand-off to it: a batch's messages are sent
//! in order on the one connection (so the events of an ordering key, at most one per batch,
//! reach the stream in claim order), each with `Nats-Msg-Id` (the [`BrokerMessage`] id: the
//! stream's duplicate window drops a re-publish after a crash between publish and mark-done,
//! and its acknowledgement names the first copy's sequence) and `Nats-Expected-Stream` (a
//! subject another stream took is refused, never stored there); a hand-off counts only once
//! JetStream acknowledged it. It owns the check that a routes file's `nats` queues can be
//! served ([`NatsSink::check_routes`]: the stream exists, takes the subject, and keeps message
//! ids for at least the claim lease), run at start and before a reload is applied. It never
//! creates or edits a stream (the operator's), never touches PostgreSQL and never decides a
//! retry.

use std::time::Duration;

use async_nats::jetstream::context::{
    GetStreamByNameErrorKind, GetStreamErrorKind, PublishErrorKind,
};
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, Context};
use async_nats::HeaderMap;
use futures::future::join_all;

use super::broker_message::BrokerMessage;
use super::{DestinationError, Enqueue, EnqueueResult, SinkError};
use crate::config::{RoutesFile, SinkKind};
use crate::fault;
use crate::redis_conn::redact_url;

/// How long a publish waits for JetStream's acknowledgement, and an API request (stream
/// lookups) for its answer, before it counts as a blip.
pub const NATS_ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting waits for the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a ping waits for the server's answer.
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// The most header bytes JetStream stores with a message (its own limit): the event's fields
/// and its headers object together must fit.
pub const NATS_MAX_HEADER_BYTES: usize = 64 * 1024;

/// Publishes awaiting acknowledgement at once, over every batch; more wait for room.
const MAX_ACKS_PENDING: usize = 20_000;

/// The JetStream sink of `nats` queues.
#[derive(Clone)]
pub struct NatsSink {
    client: async_nats::Client,
    jetstream: Context,
    /// The host's key prefix (`OUTBOX_REDIS_PREFIX`), in every message id.
    prefix: String,
}

impl NatsSink {
    /// Connect to the NATS server at `url` (one attempt; the client reconnects by itself after
    /// that). `prefix` namespaces the message ids, as it does the Redis keys.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, SinkError> {
        let client = async_nats::ConnectOptions::new()
            .name("outbox")
            .connection_timeout(CONNECT_TIMEOUT)
            .request_timeout(Some(NATS_ACK_TIMEOUT))
            .connect(url)
            .await
            .map_err(|e| SinkError::new(format!("connect to NATS at {}", redact_url(url)), e))?;
        let jetstream = jetstream::ContextBuilder::new()
            .timeout(NATS_ACK_TIMEOUT)
            .ack_timeout(NATS_ACK_TIMEOUT)
            .max_ack_inflight(MAX_ACKS_PENDING)
            .backpressure_on_inflight(true)
            .build(client.clone());
        Ok(Self {
            client,
            jetstream,
            prefix: prefix.to_string(),
        })
    }

    /// Publish every item (each on a `nats` queue of `routes`) and wait for JetStream's
    /// acknowledgements; one result per item, in input order.
    pub async fn enqueue_with(
        &self,
        items: &[Enqueue<'_>],
        routes: &RoutesFile,
    ) -> Vec<EnqueueResult> {
        // Sent one after the other (in order on the connection), acknowledged together.
        let mut pending = Vec::with_capacity(items.len());
        for item in items {
            pending.push(self.send(item, routes).await);
        }
        join_all(
            pending
                .into_iter()
                .zip(items)
                .map(|(sent, item)| async move {
                    let (stream, ack) = match sent {
                        Ok(sent) => sent,
                        Err(result) => return result,
                    };
                    match ack.await {
                        Ok(ack) if ack.duplicate => {
                            EnqueueResult::AlreadyEnqueued(ack.sequence.to_string())
                        }
                        Ok(ack) => EnqueueResult::Added(ack.sequence.to_string()),
                        Err(e) => publish_failed(item, &stream, &e),
                    }
                }),
        )
        .await
    }

    /// Send one item's message; its stream and the acknowledgement to wait for, or its result
    /// when it could not be sent.
    async fn send(
        &self,
        item: &Enqueue<'_>,
        routes: &RoutesFile,
    ) -> Result<(String, jetstream::context::PublishAckFuture), EnqueueResult> {
        let event = item.event;
        let Some(options) = routes.queues.get(item.queue).and_then(|q| q.nats.as_ref()) else {
            return Err(EnqueueResult::Failed(format!(
                "event {} to {}: the queue has no [nats] table in the routes in force",
                event.id, item.queue
            )));
        };
        let message = BrokerMessage::new(event, item.queue, &self.prefix);
        if let Some(header) = message.header_with_line_break() {
            return Err(EnqueueResult::Failed(format!(
                "event {} to {}: its {header} holds a line break, which a NATS header cannot carry",
                event.id, item.queue
            )));
        }
        // `NATS/1.0\r\n`, a `Name: value\r\n` line per header, the ids', and the closing line.
        let header_bytes = 12
            + message
                .headers
                .iter()
                .map(|(name, value)| name.len() + value.len() + 4)
                .sum::<usize>()
            + message.message_id.len()
            + options.stream.len()
            + 48;
        if header_bytes > NATS_MAX_HEADER_BYTES {
            return Err(EnqueueResult::Failed(format!(
                "event {} to {}: its fields and headers object take {header_bytes} bytes as NATS headers; JetStream stores at most 64 KiB of headers per message (the payload itself may be larger)",
                event.id, item.queue
            )));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &message.headers {
            headers.insert(*name, value.as_str());
        }
        let publish = PublishMessage::build()
            .payload(message.body.to_vec().into())
            .headers(headers)
            .message_id(&message.message_id)
            .expected_stream(&options.stream);
        let subject = options.subject_for(item.queue).to_string();
        match self.jetstream.send_publish(subject, publish).await {
            Ok(ack) => Ok((options.stream.clone(), ack)),
            Err(e) => Err(publish_failed(item, &options.stream, &e)),
        }
    }

    /// Check that the server answers: connected, and a round trip (`PING`) within
    /// [`PING_TIMEOUT`].
    pub async fn ping(&self) -> Result<(), SinkError> {
        match tokio::time::timeout(PING_TIMEOUT, self.client.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(SinkError::new("ping NATS", e)),
            Err(elapsed) => Err(SinkError::new("ping NATS", elapsed)),
        }
    }

    /// Check that every `nats` queue of `routes` can be served: its stream exists, is the
    /// stream that takes its subject, and keeps message ids (its duplicate window) for at least
    /// `claim_lease`, the longest a crashed host's event waits before another host publishes it
    /// again. The message names the queue, the stream and what to change.
    pub async fn check_routes(
        &self,
        routes: &RoutesFile,
        claim_lease: Duration,
    ) -> Result<(), DestinationError> {
        for (queue, spec) in &routes.queues {
            let Some(options) = spec.nats.as_ref().filter(|_| spec.sink == SinkKind::Nats) else {
                continue;
            };
            let stream = &options.stream;
            let subject = options.subject_for(queue);
            let at = |m: String| format!("[queues.\"{queue}\"] nats: {m}");
            let invalid = |m: String| DestinationError::Invalid(at(m));
            let unreachable = |m: String| DestinationError::Unreachable(at(m));
            let mut found = match self.jetstream.get_stream(stream).await {
                Ok(found) => found,
                Err(e) if stream_not_found(&e) => {
                    return Err(invalid(format!(
                        "JetStream stream '{stream}' does not exist; create it with a subject that takes '{subject}' (nats stream add {stream} --subjects '{subject}' --dupe-window {}s)",
                        claim_lease.as_secs() + 60
                    )))
                }
                Err(e) => {
                    return Err(unreachable(format!(
                        "looking up JetStream stream '{stream}': {e}"
                    )))
                }
            };
            let info = found
                .info()
                .await
                .map_err(|e| unreachable(format!("reading JetStream stream '{stream}': {e}")))?;
            let window = info.config.duplicate_window;
            let subjects = info.config.subjects.join(", ");
            match self.jetstream.stream_by_subject(subject).await {
                Ok(taker) if taker == *stream => {}
                Ok(taker) => {
                    return Err(invalid(format!(
                        "subject '{subject}' is taken by stream '{taker}', not '{stream}'"
                    )))
                }
                Err(e) if e.kind() != GetStreamByNameErrorKind::NotFound => {
                    return Err(unreachable(format!(
                        "looking up the stream of subject '{subject}': {e}"
                    )))
                }
                Err(_) => {
                    return Err(invalid(format!(
                        "stream '{stream}' (subjects: {subjects}) does not take subject '{subject}'; add it to the stream's subjects or set nats.subject"
                    )))
                }
            }
            if window < claim_lease {
                return Err(invalid(format!(
                    "stream '{stream}' keeps message ids for {} s (its duplicate window), less than the claim lease OUTBOX_CLAIM_LEASE_MS = {} s: an event re-published after a host crashed between publish and mark-done would be stored twice. Raise the window (nats stream edit {stream} --dupe-window {}s) or lower the lease",
                    window.as_secs(),
                    claim_lease.as_secs(),
                    claim_lease.as_secs() + 60
                )));
            }
        }
        Ok(())
    }
}

/// The result of a publish that failed: a blip of NATS (handed off again, no attempt counted),
/// or a refusal (the event's fault or a configuration error: an attempt).
fn publish_failed(
    item: &Enqueue<'_>,
    stream: &str,
    error: &jetstream::context::PublishError,
) -> EnqueueResult {
    let context = format!(
        "event {} to {} (JetStream stream '{stream}')",
        item.event.id, item.queue
    );
    if let Some(blip) = fault::nats_publish_blip(error) {
        return EnqueueResult::Unavailable {
            error: format!("{context}: {error}"),
            blip,
        };
    }
    let detail = match error.kind() {
        PublishErrorKind::StreamNotFound => {
            "no stream takes the subject (was the stream deleted?)".to_string()
        }
        _ => error.to_string(),
    };
    EnqueueResult::Failed(format!("{context}: {detail}"))
}

/// True when looking a stream up failed because JetStream has no stream of that name.
fn stream_not_found(error: &jetstream::context::GetStreamError) -> bool {
    matches!(
        error.kind(),
        GetStreamErrorKind::JetStream(api) if api.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}
