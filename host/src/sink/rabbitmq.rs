//! RabbitMQ sink: publishes each (event, queue) to the exchange its `[queues."NAME".rabbitmq]`
//! names, on `OUTBOX_RABBITMQ_URL`.
//!
//! Owns the host's AMQP connection and its publishing channel (in confirm mode, reopened when a
//! broker restart or a refused publish closed it) and the hand-off: each message persistent
//! (delivery mode 2), `mandatory` (a message no queue is bound for comes back and the hand-off
//! fails: never silently dropped), with the [`BrokerMessage`] id as `message_id`; a hand-off
//! counts only once the broker confirmed it. RabbitMQ keeps no message ids, so a re-publish
//! after a crash between publish and mark-done is delivered again, with the same `message_id`:
//! consumers see every event at least once and deduplicate by that id. It owns the check that
//! a routes file's `rabbitmq` queues can be served ([`RabbitmqSink::check_routes`]: each
//! exchange exists), run at start and before a reload is applied. It never declares an
//! exchange, queue or binding (the operator's), never touches PostgreSQL and never decides a
//! retry.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use super::broker_message::BrokerMessage;
use super::{DestinationError, Enqueue, EnqueueResult, SinkError};
use crate::config::{RoutesFile, SinkKind};
use crate::fault::{self, Blip, BlipKind, Service};
use crate::redis_conn::redact_url;

/// How long connecting, opening a channel, a publish's confirm or a check waits before it
/// counts as a blip.
pub const RABBITMQ_TIMEOUT: Duration = Duration::from_secs(5);

/// AMQP delivery mode 2: the broker writes the message to disk (in a durable queue).
const PERSISTENT: u8 = 2;

/// The host's connection to RabbitMQ and its publishing channel.
struct Session {
    connection: Connection,
    channel: Channel,
}

/// The RabbitMQ sink of `rabbitmq` queues.
#[derive(Clone)]
pub struct RabbitmqSink {
    url: String,
    /// The host's key prefix (`OUTBOX_REDIS_PREFIX`), in every message id.
    prefix: String,
    session: Arc<tokio::sync::Mutex<Option<Session>>>,
}

impl RabbitmqSink {
    /// Connect to RabbitMQ at `url` (one attempt; a lost connection is opened again by the next
    /// batch). `prefix` namespaces the message ids, as it does the Redis keys.
    pub async fn connect(url: &str, prefix: &str) -> Result<Self, SinkError> {
        let sink = Self {
            url: url.to_string(),
            prefix: prefix.to_string(),
            session: Arc::default(),
        };
        sink.channel().await.map_err(|e| {
            SinkError::new(format!("connect to RabbitMQ at {}", redact_url(url)), e)
        })?;
        Ok(sink)
    }

    /// The publishing channel, opening the connection or the channel again when either closed.
    async fn channel(&self) -> Result<Channel, lapin::Error> {
        let mut session = self.session.lock().await;
        if let Some(open) = session.as_ref() {
            if open.channel.status().connected() {
                return Ok(open.channel.clone());
            }
        }
        let connection = match session.take() {
            Some(open) if open.connection.status().connected() => open.connection,
            _ => {
                within_timeout(Connection::connect(
                    &self.url,
                    ConnectionProperties::default().with_connection_name("outbox".into()),
                ))
                .await?
            }
        };
        let channel = within_timeout(connection.create_channel()).await?;
        within_timeout(channel.confirm_select(ConfirmSelectOptions::default())).await?;
        *session = Some(Session {
            connection,
            channel: channel.clone(),
        });
        Ok(channel)
    }

    /// Publish every item (each on a `rabbitmq` queue of `routes`) and wait for the broker's
    /// confirms; one result per item, in input order.
    pub async fn enqueue_with(
        &self,
        items: &[Enqueue<'_>],
        routes: &RoutesFile,
    ) -> Vec<EnqueueResult> {
        let channel = match self.channel().await {
            Ok(channel) => channel,
            Err(e) => {
                let blip = fault::amqp_blip(&e).unwrap_or(Blip {
                    service: Service::Rabbitmq,
                    kind: BlipKind::Io,
                });
                return items
                    .iter()
                    .map(|item| EnqueueResult::Unavailable {
                        error: format!(
                            "event {} to {}: RabbitMQ unavailable: {e}",
                            item.event.id, item.queue
                        ),
                        blip,
                    })
                    .collect();
            }
        };
        // Published one after the other on the channel (in order), confirmed together.
        let mut pending = Vec::with_capacity(items.len());
        for item in items {
            pending.push(self.publish(&channel, item, routes).await);
        }
        join_all(pending.into_iter().zip(items).map(|(sent, item)| async move {
            let (message_id, confirm) = match sent {
                Ok(sent) => sent,
                Err(result) => return result,
            };
            let context = format!("event {} to {}", item.event.id, item.queue);
            match tokio::time::timeout(RABBITMQ_TIMEOUT, confirm).await {
                Ok(Ok(Confirmation::Ack(None))) => EnqueueResult::Added(message_id),
                Ok(Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned)))) => {
                    EnqueueResult::Failed(format!(
                        "{context}: returned by RabbitMQ ({} {}): no queue is bound to exchange '{}' for routing key '{}'",
                        returned.reply_code,
                        returned.reply_text,
                        returned.delivery.exchange,
                        returned.delivery.routing_key
                    ))
                }
                Ok(Ok(Confirmation::Nack(None))) => EnqueueResult::Unavailable {
                    error: format!("{context}: RabbitMQ refused to take the message (nack)"),
                    blip: Blip {
                        service: Service::Rabbitmq,
                        kind: BlipKind::ResourcesExceeded,
                    },
                },
                Ok(Ok(Confirmation::NotRequested)) => EnqueueResult::Unavailable {
                    error: format!("{context}: the channel was not in confirm mode"),
                    blip: Blip {
                        service: Service::Rabbitmq,
                        kind: BlipKind::Io,
                    },
                },
                Ok(Err(e)) => amqp_failed(&context, &e),
                Err(_) => EnqueueResult::Unavailable {
                    error: format!("{context}: no confirm from RabbitMQ within {RABBITMQ_TIMEOUT:?}"),
                    blip: Blip {
                        service: Service::Rabbitmq,
                        kind: BlipKind::Timeout,
                    },
                },
            }
        }))
        .await
    }

    /// Publish one item's message; its message id and the confirm to wait for, or its result
    /// when it could not be published.
    async fn publish(
        &self,
        channel: &Channel,
        item: &Enqueue<'_>,
        routes: &RoutesFile,
    ) -> Result<(String, lapin::PublisherConfirm), EnqueueResult> {
        let event = item.event;
        let context = format!("event {} to {}", event.id, item.queue);
        let Some(options) = routes
            .queues
            .get(item.queue)
            .and_then(|q| q.rabbitmq.as_ref())
        else {
            return Err(EnqueueResult::Failed(format!(
                "{context}: the queue has no [rabbitmq] table in the routes in force"
            )));
        };
        let message = BrokerMessage::new(event, item.queue, &self.prefix);
        let short = |what: &str, value: &str| {
            ShortString::try_new(value).map_err(|_| {
                EnqueueResult::Failed(format!(
                    "{context}: its {what} is {} bytes, more than AMQP's 255",
                    value.len()
                ))
            })
        };
        let mut headers = FieldTable::default();
        for (name, value) in &message.headers {
            headers.insert(
                (*name).into(),
                AMQPValue::LongString(LongString::from(value.as_bytes())),
            );
        }
        let mut properties = BasicProperties::default()
            .with_message_id(short("message id", &message.message_id)?)
            .with_content_type("application/json".into())
            .with_delivery_mode(PERSISTENT)
            .with_app_id("outbox".into())
            .with_headers(headers);
        if let Ok(kind) = ShortString::try_new(event.event_type.as_str()) {
            properties = properties.with_type(kind);
        }
        if let Ok(seconds) = u64::try_from(event.created_at.timestamp()) {
            properties = properties.with_timestamp(seconds);
        }
        let exchange = short("exchange", &options.exchange)?;
        let routing_key = short("routing key", options.routing_key_for(item.queue))?;
        match channel
            .basic_publish(
                exchange,
                routing_key,
                BasicPublishOptions {
                    mandatory: true,
                    immediate: false,
                },
                message.body,
                properties,
            )
            .await
        {
            Ok(confirm) => Ok((message.message_id, confirm)),
            Err(e) => Err(amqp_failed(&context, &e)),
        }
    }

    /// Check that the broker answers (the channel is open, or opens).
    pub async fn ping(&self) -> Result<(), SinkError> {
        self.channel()
            .await
            .map(|_| ())
            .map_err(|e| SinkError::new("ping RabbitMQ", e))
    }

    /// Check that every `rabbitmq` queue of `routes` can be served: its exchange exists (a
    /// passive declare on a channel of its own, which a refusal closes). The message names the
    /// queue and the exchange.
    pub async fn check_routes(&self, routes: &RoutesFile) -> Result<(), DestinationError> {
        for (queue, spec) in &routes.queues {
            let Some(options) = spec
                .rabbitmq
                .as_ref()
                .filter(|_| spec.sink == SinkKind::Rabbitmq)
            else {
                continue;
            };
            let exchange = &options.exchange;
            if exchange.is_empty() {
                // The default exchange always exists (and refuses to be declared).
                continue;
            }
            let at = |m: String| format!("[queues.\"{queue}\"] rabbitmq: {m}");
            let probe = self
                .probe_channel()
                .await
                .map_err(|e| DestinationError::Unreachable(at(format!("RabbitMQ: {e}"))))?;
            let declared = within_timeout(probe.exchange_declare(
                exchange.as_str().into(),
                lapin::ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    passive: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            ))
            .await;
            let _ = probe.close(200, "checked".into()).await;
            declared.map_err(|e| match fault::amqp_blip(&e) {
                Some(_) => {
                    DestinationError::Unreachable(at(format!("checking exchange '{exchange}': {e}")))
                }
                None => DestinationError::Invalid(at(format!(
                    "exchange '{exchange}' does not exist in the virtual host of OUTBOX_RABBITMQ_URL (declare it, e.g. rabbitmqadmin declare exchange name={exchange} type=topic durable=true): {e}"
                ))),
            })?;
        }
        Ok(())
    }

    /// A channel of its own on the host's connection (opened first if needed), for a check
    /// whose refusal closes its channel.
    async fn probe_channel(&self) -> Result<Channel, lapin::Error> {
        self.channel().await?;
        let session = self.session.lock().await;
        match session.as_ref() {
            Some(open) => within_timeout(open.connection.create_channel()).await,
            None => Err(lapin::Error::from(
                lapin::ErrorKind::InvalidConnectionState(lapin::ConnectionState::Closed),
            )),
        }
    }
}

/// The result of a publish that failed: a blip of RabbitMQ (handed off again, no attempt
/// counted), or a refusal (a configuration error: an attempt).
fn amqp_failed(context: &str, error: &lapin::Error) -> EnqueueResult {
    match fault::amqp_blip(error) {
        Some(blip) => EnqueueResult::Unavailable {
            error: format!("{context}: {error}"),
            blip,
        },
        None => EnqueueResult::Failed(format!("{context}: refused by RabbitMQ: {error}")),
    }
}

/// Run an AMQP request, a timeout counting as a timed-out connection.
async fn within_timeout<T>(
    request: impl std::future::Future<Output = Result<T, lapin::Error>>,
) -> Result<T, lapin::Error> {
    match tokio::time::timeout(RABBITMQ_TIMEOUT, request).await {
        Ok(result) => result,
        Err(_) => Err(lapin::Error::from(lapin::ErrorKind::IOError(Arc::new(
            std::io::Error::from(std::io::ErrorKind::TimedOut),
        )))),
    }
}
