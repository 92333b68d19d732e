//! Brokers section: the dispatcher's throughput into NATS JetStream and into RabbitMQ against
//! the same dispatcher into Redis Streams, in the same run: `--events` `mail.welcome` events
//! dispatched once with `outbox.mail` a stream, once with `sink = "nats"` (a stream the bench
//! makes anew each round, `OUTBOX_BENCH`, file storage, a 10-minute duplicate window) and once with
//! `sink = "rabbitmq"` (an exchange and a durable queue the bench makes, `outbox-bench`), all
//! through `QueueSinks`, the production sink, with the destinations checked as at a host's
//! start. Each broker run is then checked to hold one message per event. The brokers are
//! `OUTBOX_NATS_URL` and `OUTBOX_RABBITMQ_URL` (default: the local ones). It drives the
//! production dispatcher and never re-implements a sink.

use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream;
use lapin::options::{
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use outbox_host::config::{Config, NatsOptions, QueueSpec, RabbitmqOptions, Settings, SinkKind};
use outbox_host::routing::RouterHandle;
use sqlx::PgPool;

use crate::common::{host_throughput_on_routes, prepare};
use crate::report::Report;
use crate::Args;

/// The queue `mail.welcome` events go to under the configured routes.
const MAIL_QUEUE: &str = "outbox.mail";

/// The JetStream stream the bench makes (and empties before each run).
const STREAM: &str = "OUTBOX_BENCH";

/// Its subject.
const SUBJECT: &str = "outbox-bench.mail";

/// The RabbitMQ exchange and queue the bench makes (the queue emptied before each run).
const EXCHANGE: &str = "outbox-bench";

/// Best of `args.rounds` for the streams run and each broker run, and their ratios.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
    router: &RouterHandle,
) -> anyhow::Result<()> {
    let events = args.events;
    let settings = Settings {
        nats_url: Some(
            settings
                .nats_url
                .clone()
                .unwrap_or_else(|| "nats://127.0.0.1:4222".into()),
        ),
        rabbitmq_url: Some(
            settings
                .rabbitmq_url
                .clone()
                .unwrap_or_else(|| "amqp://guest:guest@127.0.0.1:5672/%2f".into()),
        ),
        ..settings.clone()
    };
    let brokers = Brokers::prepare(&settings).await?;
    let on = |spec: QueueSpec| {
        let mut routes = config.routes.clone();
        routes.queues.insert(MAIL_QUEUE.to_string(), spec);
        routes
    };
    let nats_routes = on(QueueSpec {
        sink: SinkKind::Nats,
        nats: Some(NatsOptions {
            stream: STREAM.into(),
            subject: Some(SUBJECT.into()),
        }),
        ..QueueSpec::default()
    });
    let rabbitmq_routes = on(QueueSpec {
        sink: SinkKind::Rabbitmq,
        rabbitmq: Some(RabbitmqOptions {
            exchange: EXCHANGE.into(),
            routing_key: None,
        }),
        ..QueueSpec::default()
    });
    report.say(format_args!(
        "brokers: {events} pre-inserted mail.welcome events into {MAIL_QUEUE} as a Redis Stream, a JetStream stream ({STREAM}) and a RabbitMQ exchange ({EXCHANGE}, confirms), batch {}",
        args.batch
    ));
    let (mut best_streams, mut best_nats, mut best_rabbitmq) = (0f64, 0f64, 0f64);
    for round in 1..=args.rounds {
        prepare(pool, &settings, events).await?;
        let streams =
            host_throughput_on_routes(pool, &settings, router, events, &config.routes).await?;
        prepare(pool, &settings, events).await?;
        brokers.empty().await?;
        let nats = host_throughput_on_routes(pool, &settings, router, events, &nats_routes).await?;
        prepare(pool, &settings, events).await?;
        let rabbitmq =
            host_throughput_on_routes(pool, &settings, router, events, &rabbitmq_routes).await?;
        brokers.check_holds(events).await?;
        report.say(format_args!(
            "  round {round}: streams {streams:>9.0} events/s | JetStream {nats:>9.0} events/s (ratio {:.2}) | RabbitMQ {rabbitmq:>9.0} events/s (ratio {:.2}); one message per event on each",
            nats / streams,
            rabbitmq / streams
        ));
        best_streams = best_streams.max(streams);
        best_nats = best_nats.max(nats);
        best_rabbitmq = best_rabbitmq.max(rabbitmq);
    }
    report
        .figure(
            "brokers",
            "brokers.nats",
            "dispatch throughput into NATS JetStream (acknowledged)",
            best_nats,
            "events/s",
        )
        .against(
            "brokers.streams",
            "the same events into a Redis Stream",
            best_streams,
        );
    report
        .figure(
            "brokers",
            "brokers.rabbitmq",
            "dispatch throughput into RabbitMQ (publisher confirms)",
            best_rabbitmq,
            "events/s",
        )
        .against(
            "brokers.streams",
            "the same events into a Redis Stream",
            best_streams,
        );
    brokers.remove().await;
    Ok(())
}

/// The bench's stream and exchange, through the brokers' own clients.
struct Brokers {
    jetstream: jetstream::Context,
    _amqp: lapin::Connection,
    channel: lapin::Channel,
}

impl Brokers {
    /// Make the stream, the exchange and its queue (kept between runs, emptied per round).
    async fn prepare(settings: &Settings) -> anyhow::Result<Self> {
        let nats_url = settings.nats_url.as_deref().unwrap_or_default();
        let client = async_nats::connect(nats_url)
            .await
            .with_context(|| format!("connect to NATS at {nats_url}"))?;
        let jetstream = jetstream::new(client);
        let amqp_url = settings.rabbitmq_url.as_deref().unwrap_or_default();
        let amqp = lapin::Connection::connect(amqp_url, Default::default())
            .await
            .context("connect to RabbitMQ")?;
        let channel = amqp.create_channel().await?;
        channel
            .exchange_declare(
                EXCHANGE.into(),
                lapin::ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_declare(
                EXCHANGE.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        channel
            .queue_bind(
                EXCHANGE.into(),
                EXCHANGE.into(),
                MAIL_QUEUE.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        Ok(Self {
            jetstream,
            _amqp: amqp,
            channel,
        })
    }

    /// A new stream, and the queue emptied. The stream is made again rather than purged: a
    /// purge keeps the message ids of its duplicate window, and every round's events have the
    /// same ids (the bench empties the event table), so they would all be dropped as
    /// re-publishes.
    async fn empty(&self) -> anyhow::Result<()> {
        let _ = self.jetstream.delete_stream(STREAM).await;
        self.jetstream
            .create_stream(jetstream::stream::Config {
                name: STREAM.into(),
                subjects: vec![SUBJECT.into()],
                duplicate_window: Duration::from_secs(600),
                ..Default::default()
            })
            .await
            .context("make the bench's JetStream stream")?;
        self.channel
            .queue_purge(EXCHANGE.into(), QueuePurgeOptions::default())
            .await?;
        Ok(())
    }

    /// Each broker holds one message per event.
    async fn check_holds(&self, events: i64) -> anyhow::Result<()> {
        let mut stream = self.jetstream.get_stream(STREAM).await?;
        let messages = stream.info().await?.state.messages;
        anyhow::ensure!(
            i64::try_from(messages)? == events,
            "{messages} messages in {STREAM} for {events} events"
        );
        let queue = self
            .channel
            .queue_declare(
                EXCHANGE.into(),
                QueueDeclareOptions {
                    passive: true,
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
        anyhow::ensure!(
            i64::from(queue.message_count()) == events,
            "{} messages in RabbitMQ queue {EXCHANGE} for {events} events",
            queue.message_count()
        );
        Ok(())
    }

    /// Remove the stream and the queue's messages (the exchange and queue stay for the next
    /// run).
    async fn remove(&self) {
        let _ = self.jetstream.delete_stream(STREAM).await;
        let _ = self
            .channel
            .queue_purge(EXCHANGE.into(), QueuePurgeOptions::default())
            .await;
    }
}
