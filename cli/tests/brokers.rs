//! A real `outbox run` dispatching into NATS JetStream and RabbitMQ, SIGKILLed twice while
//! events flow and started again, with each broker's own client consuming all along: on
//! JetStream every event arrives exactly once per queue (the stream's duplicate window drops
//! what a killed host published but never recorded); on RabbitMQ every event arrives at least
//! once per queue, and a second copy only ever under the first one's `message_id`.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL directly to check the host"
)]
// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use lapin::options::{BasicAckOptions, BasicConsumeOptions};
use lapin::types::{AMQPValue, FieldTable};
use sqlx::PgPool;
use tokio::process::Child;

use outbox_tests::broker_fixtures;
use outbox_tests::dispatcher_process::{pool_database_url, spawn_dispatcher};
use outbox_tests::{nats_url, rabbitmq_url};

/// Events the producers commit.
const EVENTS: i64 = 2000;

/// `outbox run --dispatcher-only` on `dir/routes.toml` with both brokers' URLs, logging into
/// `dir/host.log`.
fn start_host(db_url: &str, dir: &Path, prefix: &str) -> Child {
    spawn_dispatcher(
        env!("CARGO_BIN_EXE_outbox"),
        db_url,
        dir,
        prefix,
        &dir.join("host.log"),
        &[
            ("OUTBOX_NATS_URL", nats_url()),
            ("OUTBOX_RABBITMQ_URL", rabbitmq_url()),
        ],
    )
}

/// Commit [`EVENTS`] events in batches (every fifth an `order.placed`, which fans out to the
/// audit queue too) while the host is SIGKILLed twice and started again; then wait until every
/// event is `done`. Returns how many events the killed hosts had claimed and not recorded.
async fn produce_through_two_kills(pool: &PgPool, dir: &Path, prefix: &str) -> i64 {
    let db_url = pool_database_url(pool).await;
    let mut host = start_host(&db_url, dir, prefix);
    let mut in_flight = 0;
    for batch in 0..20 {
        // At two batches, kill between hand-off and record: first hold the table the record
        // statement writes (its fan-out rows), so that the batch's events are claimed and
        // handed off while their record waits; then kill the host. The next host claims them
        // again after the lease and hands them off a second time.
        let held = if batch == 7 || batch == 14 {
            let mut held = pool.begin().await.unwrap();
            sqlx::query("LOCK TABLE outbox_delivery IN EXCLUSIVE MODE")
                .execute(&mut *held)
                .await
                .unwrap();
            Some(held)
        } else {
            None
        };
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload) SELECT CASE WHEN g % 5 = 0 THEN 'order.placed' ELSE 'mail.welcome' END, jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g",
        )
        .bind(batch * 100 + 1)
        .bind(batch * 100 + 100)
        .execute(pool)
        .await
        .unwrap();
        if let Some(held) = held {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let claimed: i64 =
                sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'processing'")
                    .fetch_one(pool)
                    .await
                    .unwrap();
            assert!(
                claimed > 0,
                "the host claimed the batch before it was killed"
            );
            in_flight += claimed;
            host.start_kill().unwrap();
            host.wait().await.unwrap();
            held.rollback().await.unwrap();
            tokio::time::sleep(Duration::from_millis(300)).await;
            host = start_host(&db_url, dir, prefix);
        }
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    let start = Instant::now();
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'done'")
                .fetch_one(pool)
                .await
                .unwrap();
        if done == EVENTS {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{done} of {EVENTS} done; host log: {}",
            std::fs::read_to_string(dir.join("host.log")).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    host.start_kill().unwrap();
    let _ = host.wait().await;
    in_flight
}

/// Each queue's expected event ids: every event on `mail`, the `order.placed` ones on `audit`.
async fn expected(pool: &PgPool) -> BTreeMap<(String, i64), usize> {
    let rows: Vec<(i64, String)> = sqlx::query_as("SELECT id, event_type FROM outbox_event")
        .fetch_all(pool)
        .await
        .unwrap();
    let mut expected = BTreeMap::new();
    for (id, event_type) in rows {
        expected.insert(("kill.mail".to_string(), id), 1);
        if event_type == "order.placed" {
            expected.insert(("kill.audit".to_string(), id), 1);
        }
    }
    expected
}

/// Wait until `seen` holds `total` deliveries or more (and a little longer, for stragglers).
async fn wait_for_deliveries(seen: &Mutex<Vec<(String, i64, String)>>, total: usize) {
    let start = Instant::now();
    while seen.lock().unwrap().len() < total {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} of {total} deliveries",
            seen.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// A field of what the hosts counted of `queue`'s broker hand-offs (written in the background).
async fn broker_counts(prefix: &str, queue: &str, field: &str) -> u64 {
    let client = redis::Client::open(outbox_tests::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = outbox_host::queue::QueueKeys::new(prefix.to_string()).broker_handoffs(queue);
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query_async::<Option<u64>>(&mut conn)
        .await
        .unwrap()
        .unwrap_or(0)
}

#[sqlx::test(migrations = "../migrations")]
async fn a_killed_and_restarted_host_hands_each_event_to_jetstream_exactly_once(pool: PgPool) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("test:{id}:");
    let stream_name = format!("KILL_{id}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("routes.toml"),
        format!(
            r#"[routes]
"mail." = "kill.mail"
"order." = ["kill.mail", "kill.audit"]
[router]
plugin = "native"
[queues."kill.mail"]
sink = "nats"
nats = {{ stream = "{stream_name}", subject = "kill.{id}.mail" }}
[queues."kill.audit"]
sink = "nats"
nats = {{ stream = "{stream_name}", subject = "kill.{id}.audit" }}
[policy]
plugin = "deny-all"
"#
        ),
    )
    .unwrap();
    let js = broker_fixtures::jetstream().await;
    let stream = broker_fixtures::create_stream(
        &js,
        &stream_name,
        &[format!("kill.{id}.>")],
        Duration::from_secs(120),
    )
    .await;
    // A consumer reading all along, acknowledging each message, as an application would.
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, i64, String)>>> = Arc::default();
    let reader = tokio::spawn({
        let seen = seen.clone();
        let id = id.clone();
        async move {
            let mut messages = consumer.messages().await.unwrap();
            while let Some(Ok(message)) = messages.next().await {
                let headers = message.headers.clone().unwrap();
                let event: i64 = headers
                    .get("Outbox-Event-Id")
                    .unwrap()
                    .as_str()
                    .parse()
                    .unwrap();
                let queue = message
                    .subject
                    .as_str()
                    .replace(&format!("kill.{id}."), "kill.");
                let msg_id = headers.get("Nats-Msg-Id").unwrap().as_str().to_string();
                message.ack().await.unwrap();
                seen.lock().unwrap().push((queue, event, msg_id));
            }
        }
    });

    let recovered = produce_through_two_kills(&pool, dir.path(), &prefix).await;
    let expected = expected(&pool).await;
    wait_for_deliveries(&seen, expected.len()).await;
    reader.abort();
    let mut counts: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for (queue, event, msg_id) in seen.lock().unwrap().iter() {
        assert_eq!(msg_id, &format!("{prefix}outbox:{queue}:{event}"));
        *counts.entry((queue.clone(), *event)).or_default() += 1;
    }
    let doubled: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "received more than once: {doubled:?}");
    assert_eq!(counts, expected, "each event once per queue");
    let duplicates = broker_counts(&prefix, "kill.mail", "duplicates").await
        + broker_counts(&prefix, "kill.audit", "duplicates").await;
    eprintln!(
        "{EVENTS} events, {} messages, each received once across 2 kills; {recovered} events claimed and not recorded when the hosts were killed, {duplicates} re-publishes dropped by the stream",
        expected.len()
    );
    js.delete_stream(&stream_name).await.unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_killed_and_restarted_host_hands_each_event_to_rabbitmq_at_least_once_under_one_message_id(
    pool: PgPool,
) {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let prefix = format!("test:{id}:");
    let exchange = format!("kill.{id}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("routes.toml"),
        format!(
            r#"[routes]
"mail." = "kill.mail"
"order." = ["kill.mail", "kill.audit"]
[router]
plugin = "native"
[queues."kill.mail"]
sink = "rabbitmq"
rabbitmq = {{ exchange = "{exchange}" }}
[queues."kill.audit"]
sink = "rabbitmq"
rabbitmq = {{ exchange = "{exchange}" }}
[policy]
plugin = "deny-all"
"#
        ),
    )
    .unwrap();
    let (_amqp, channel) = broker_fixtures::amqp_channel().await;
    let rabbit_queue = format!("kill.{id}");
    broker_fixtures::declare_bound_queue(
        &channel,
        &exchange,
        &rabbit_queue,
        &["kill.mail", "kill.audit"],
    )
    .await;
    // A consumer reading all along, acknowledging each delivery.
    let mut consumer = channel
        .basic_consume(
            rabbit_queue.as_str().into(),
            "kill-test".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let seen: Arc<Mutex<Vec<(String, i64, String)>>> = Arc::default();
    let reader = tokio::spawn({
        let seen = seen.clone();
        async move {
            while let Some(Ok(delivery)) = consumer.next().await {
                let properties = &delivery.properties;
                let headers = properties.headers().clone().unwrap();
                let text = |name: &str| match headers.inner().get(name) {
                    Some(AMQPValue::LongString(s)) => {
                        String::from_utf8(s.as_bytes().to_vec()).unwrap()
                    }
                    other => panic!("{name}: {other:?}"),
                };
                let event: i64 = text("Outbox-Event-Id").parse().unwrap();
                let queue = text("Outbox-Queue");
                let msg_id = properties.message_id().clone().unwrap().to_string();
                delivery.ack(BasicAckOptions::default()).await.unwrap();
                seen.lock().unwrap().push((queue, event, msg_id));
            }
        }
    });

    let recovered = produce_through_two_kills(&pool, dir.path(), &prefix).await;
    let expected = expected(&pool).await;
    wait_for_deliveries(&seen, expected.len()).await;
    reader.abort();
    let mut counts: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for (queue, event, msg_id) in seen.lock().unwrap().iter() {
        // Every copy, the first and any re-publish, under the one id of (event, queue).
        assert_eq!(msg_id, &format!("{prefix}outbox:{queue}:{event}"));
        *counts.entry((queue.clone(), *event)).or_default() += 1;
    }
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !counts.contains_key(*k))
        .collect();
    assert!(missing.is_empty(), "never received: {missing:?}");
    assert!(
        counts.keys().all(|k| expected.contains_key(k)),
        "only the events committed"
    );
    let copies: usize = counts.values().sum();
    eprintln!(
        "{EVENTS} events, {} messages, {copies} deliveries across 2 kills ({} redelivered under the same message id); {recovered} events claimed and not recorded when the hosts were killed",
        expected.len(),
        copies - expected.len()
    );
    broker_fixtures::delete_exchange_and_queues(&channel, &exchange, &[rabbit_queue]).await;
}
