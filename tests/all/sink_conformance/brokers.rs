//! The brokers' side of the conformance suite: one test's JetStream stream and RabbitMQ
//! exchange with a queue per suite queue (made here, deleted at cleanup), reading back what
//! the sinks published with each broker's own client, and the message contract spelled out.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream;
use lapin::options::BasicGetOptions;
use lapin::types::AMQPValue;
use outbox_host::store::ClaimedEvent;
use serde_json::Value;

use outbox_tests::broker_fixtures;

/// One test's destinations on the brokers: a stream taking `conf.<id>.>` and an exchange
/// `conf.<id>` with one durable queue per suite queue, bound by the queue name.
pub struct BrokerWorld {
    /// The stream's name.
    pub stream: String,
    /// The subjects' first token after `conf.`: the test's id.
    pub id: String,
    /// The exchange's name.
    pub exchange: String,
    jetstream: jetstream::Context,
    amqp: lapin::Connection,
    channel: lapin::Channel,
}

impl BrokerWorld {
    /// Make the stream and the exchange with a queue per name in `queues`.
    pub async fn new(id: &str, queues: &[&str]) -> Self {
        let jetstream = broker_fixtures::jetstream().await;
        let stream = format!("CONF_{id}");
        broker_fixtures::create_stream(
            &jetstream,
            &stream,
            &[format!("conf.{id}.>")],
            Duration::from_secs(600),
        )
        .await;
        let (amqp, channel) = broker_fixtures::amqp_channel().await;
        let exchange = format!("conf.{id}");
        for queue in queues {
            let name = format!("conf.{id}.{queue}");
            broker_fixtures::declare_bound_queue(&channel, &exchange, &name, &[*queue]).await;
        }
        Self {
            stream,
            id: id.to_string(),
            exchange,
            jetstream,
            amqp,
            channel,
        }
    }

    /// The subject `queue`'s messages are published on.
    pub fn subject(&self, queue: &str) -> String {
        format!("conf.{}.{queue}", self.id)
    }

    /// What the stream holds on `queue`'s subject, in stream order: (sequence, fields).
    pub async fn read_nats(&self, queue: &str) -> Vec<(String, BTreeMap<String, Value>)> {
        let mut stream = self.jetstream.get_stream(&self.stream).await.unwrap();
        let state = stream.info().await.unwrap().state.clone();
        let subject = self.subject(queue);
        let mut landed = Vec::new();
        if state.messages == 0 {
            return landed;
        }
        for seq in state.first_sequence..=state.last_sequence {
            let Ok(message) = stream.get_raw_message(seq).await else {
                continue;
            };
            if message.subject.as_str() != subject {
                continue;
            }
            let mut fields = BTreeMap::new();
            for (name, values) in message.headers.iter() {
                let name = name.to_string();
                if name.starts_with("Nats-Expected") {
                    continue;
                }
                assert_eq!(values.len(), 1, "{name}: one value");
                fields.insert(name, Value::String(values[0].as_str().to_string()));
            }
            fields.insert(
                "<body>".into(),
                Value::String(String::from_utf8(message.payload.to_vec()).unwrap()),
            );
            landed.push((seq.to_string(), fields));
        }
        landed
    }

    /// What `queue`'s RabbitMQ queue holds, in queue order, taken off it: (message id,
    /// fields).
    pub async fn read_rabbitmq(&self, queue: &str) -> Vec<(String, BTreeMap<String, Value>)> {
        let name = format!("conf.{}.{queue}", self.id);
        let mut landed = Vec::new();
        while let Some(message) = self
            .channel
            .basic_get(name.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let properties = &message.delivery.properties;
            let mut fields = BTreeMap::new();
            if let Some(headers) = properties.headers() {
                for (name, value) in headers.inner() {
                    let AMQPValue::LongString(text) = value else {
                        panic!("{name}: a long string, got {value:?}");
                    };
                    fields.insert(
                        name.to_string(),
                        Value::String(String::from_utf8(text.as_bytes().to_vec()).unwrap()),
                    );
                }
            }
            let text = |v: Option<&lapin::types::ShortString>| {
                Value::String(v.map(|s| s.to_string()).unwrap_or_default())
            };
            fields.insert(
                "<content-type>".into(),
                text(properties.content_type().as_ref()),
            );
            fields.insert("<type>".into(), text(properties.kind().as_ref()));
            fields.insert("<app-id>".into(), text(properties.app_id().as_ref()));
            fields.insert(
                "<delivery-mode>".into(),
                Value::from(properties.delivery_mode().unwrap_or(0)),
            );
            fields.insert(
                "<body>".into(),
                Value::String(String::from_utf8(message.delivery.data.clone()).unwrap()),
            );
            let id = properties
                .message_id()
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default();
            landed.push((id, fields));
        }
        landed
    }

    /// Delete the stream, the queues and the exchange.
    pub async fn cleanup(&self, queues: &[&str]) {
        let _ = self.jetstream.delete_stream(&self.stream).await;
        let names: Vec<String> = queues
            .iter()
            .map(|queue| format!("conf.{}.{queue}", self.id))
            .collect();
        broker_fixtures::delete_exchange_and_queues(&self.channel, &self.exchange, &names).await;
        let _ = self.amqp.close(200, "done".into()).await;
    }
}

/// The headers every broker message carries for `event` on `queue` (the contract of
/// `docs/queues.md`, spelled out), plus its body as `<body>`.
pub fn expected_headers(event: &ClaimedEvent, queue: &str) -> BTreeMap<String, Value> {
    let text = |s: &str| Value::String(s.to_string());
    let mut fields = BTreeMap::from([
        ("Outbox-Event-Id".to_string(), text(&event.id.to_string())),
        ("Outbox-Event-Type".into(), text(&event.event_type)),
        (
            "Outbox-Event-Version".into(),
            text(&event.event_version.to_string()),
        ),
        ("Outbox-Queue".into(), text(queue)),
        (
            "Outbox-Created-At".into(),
            text(
                &event
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
        ),
        ("Outbox-Attempt".into(), text(&event.attempts.to_string())),
        ("Outbox-Headers".into(), text(&event.headers)),
        ("<body>".into(), text(&event.payload)),
    ]);
    for (name, value) in [
        ("Outbox-Tenant-Id", &event.tenant_id),
        ("Outbox-Dispatch-Key", &event.dispatch_key),
        ("Outbox-Ordering-Key", &event.ordering_key),
    ] {
        if let Some(value) = value {
            fields.insert(name.into(), text(value));
        }
    }
    if event.generation > 0 {
        fields.insert(
            "Outbox-Generation".into(),
            text(&event.generation.to_string()),
        );
    }
    let headers: Value = serde_json::from_str(&event.headers).unwrap();
    for name in ["traceparent", "tracestate"] {
        if let Some(Value::String(value)) = headers.get(name) {
            fields.insert(name.into(), text(value));
        }
    }
    fields
}

/// The message id of (event, queue) under `prefix`, spelled out.
pub fn message_id(prefix: &str, queue: &str, event_id: i64) -> String {
    format!("{prefix}outbox:{queue}:{event_id}")
}
