//! The brokers as the tests meet them: their URLs, a client of each (the brokers' own), and the
//! destinations a test makes and removes (a JetStream stream, a RabbitMQ exchange with a durable
//! queue bound to it). The host never creates these: the operator does, and so do the tests.

use std::time::Duration;

use async_nats::jetstream;
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;

/// The NATS server with JetStream of the broker tests (`OUTBOX_NATS_URL`, default the local one).
pub fn nats_url() -> String {
    std::env::var("OUTBOX_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// The RabbitMQ of the broker tests (`OUTBOX_RABBITMQ_URL`, default the local one as guest).
pub fn rabbitmq_url() -> String {
    std::env::var("OUTBOX_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A JetStream context on [`nats_url`].
pub async fn jetstream() -> jetstream::Context {
    let client = async_nats::connect(nats_url())
        .await
        .expect("NATS with JetStream at OUTBOX_NATS_URL must be running for the tests");
    jetstream::new(client)
}

/// Make stream `name` taking `subjects`, keeping message ids for `window` (one of that name
/// made before is deleted first).
pub async fn create_stream(
    js: &jetstream::Context,
    name: &str,
    subjects: &[String],
    window: Duration,
) -> jetstream::stream::Stream {
    let _ = js.delete_stream(name).await;
    js.create_stream(jetstream::stream::Config {
        name: name.to_string(),
        subjects: subjects.to_vec(),
        duplicate_window: window,
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A connection to [`rabbitmq_url`] and a channel on it.
pub async fn amqp_channel() -> (lapin::Connection, lapin::Channel) {
    let connection = lapin::Connection::connect(&rabbitmq_url(), Default::default())
        .await
        .expect("RabbitMQ at OUTBOX_RABBITMQ_URL must be running for the tests");
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

/// Declare direct exchange `exchange` and durable queue `queue` bound to it by each of
/// `routing_keys`.
pub async fn declare_bound_queue(
    channel: &lapin::Channel,
    exchange: &str,
    queue: &str,
    routing_keys: &[&str],
) {
    channel
        .exchange_declare(
            exchange.into(),
            lapin::ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    for key in routing_keys {
        channel
            .queue_bind(
                queue.into(),
                exchange.into(),
                (*key).into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
}

/// Delete `queues` and `exchange` (whatever is left of them).
pub async fn delete_exchange_and_queues(
    channel: &lapin::Channel,
    exchange: &str,
    queues: &[String],
) {
    for queue in queues {
        let _ = channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = channel
        .exchange_delete(exchange.into(), ExchangeDeleteOptions::default())
        .await;
}
