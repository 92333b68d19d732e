//! The brokers beyond Redis as a host meets them: a `nats` or `rabbitmq` queue whose stream or
//! exchange is missing (or whose stream forgets message ids sooner than the claim lease) stops
//! the host at start with an error naming the queue, a reload naming one is rejected while the
//! routes in force keep serving, and the dispatcher hands events to both brokers, each marked
//! done only once its broker confirmed it (read back with the brokers' own clients), and what
//! the hosts counted of those hand-offs is what `outbox stats` and the console show.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use lapin::options::BasicGetOptions;
use outbox_host::config::{Config, RoutesFile, Settings, SinkKind};
use outbox_host::live_config::{LiveConfig, ReloadOutcome};
use outbox_host::publish::NewEvent;
use outbox_host::queue::{queue_backlogs, BrokerHandoffs, QueueKeys};
use outbox_host::sink::QueueSinks;
use outbox_host::Host;
use serde_json::json;
use sqlx::PgPool;

use outbox_tests::broker_fixtures::{self, amqp_channel, jetstream};
use outbox_tests::{nats_url, rabbitmq_url, PluginFixture, TestEnv};

/// One test's names on the brokers.
struct Names {
    stream: String,
    subject: String,
    exchange: String,
    rabbit_queue: String,
}

impl Names {
    fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Self {
            stream: format!("DEST_{id}"),
            subject: format!("dest.{id}.jobs"),
            exchange: format!("dest.{id}"),
            rabbit_queue: format!("dest.{id}.jobs"),
        }
    }

    /// A routes file: `job.` to a `nats` queue on `stream`, `task.` to a `rabbitmq` queue on
    /// `exchange`.
    fn routes(&self, stream: &str, exchange: &str) -> String {
        format!(
            r#"[routes]
"job." = "outbox.jobs"
"task." = "outbox.tasks"

[queues."outbox.jobs"]
sink = "nats"
nats = {{ stream = "{stream}", subject = "{}" }}

[queues."outbox.tasks"]
sink = "rabbitmq"
rabbitmq = {{ exchange = "{exchange}", routing_key = "tasks" }}

[policy]
plugin = "deny-all"
"#,
            self.subject
        )
    }
}

fn settings(env: &TestEnv) -> Settings {
    Settings {
        nats_url: Some(nats_url()),
        rabbitmq_url: Some(rabbitmq_url()),
        ..env.settings.clone()
    }
}

async fn create_stream(js: &jetstream::Context, names: &Names, window: Duration) {
    broker_fixtures::create_stream(
        js,
        &names.stream,
        std::slice::from_ref(&names.subject),
        window,
    )
    .await;
}

/// Declare the exchange and a queue bound to it by `tasks`.
async fn declare_exchange(channel: &lapin::Channel, names: &Names) {
    broker_fixtures::declare_bound_queue(channel, &names.exchange, &names.rabbit_queue, &["tasks"])
        .await;
}

async fn cleanup(js: &jetstream::Context, channel: &lapin::Channel, names: &Names) {
    let _ = js.delete_stream(&names.stream).await;
    broker_fixtures::delete_exchange_and_queues(
        channel,
        &names.exchange,
        std::slice::from_ref(&names.rabbit_queue),
    )
    .await;
}

/// The error assembling a dispatcher from `routes` gives, if any.
async fn start_error(env: &TestEnv, routes: &str) -> Option<String> {
    let config = Config {
        path: None,
        routes: RoutesFile::parse(routes, std::path::Path::new("routes.toml")).unwrap(),
        settings: settings(env),
    };
    config.check().unwrap();
    Host::builder()
        .config(config)
        .pool(env.pool.clone())
        .build_dispatcher()
        .await
        .err()
        .map(|e| e.to_string())
}

#[sqlx::test(migrations = "../migrations")]
async fn a_missing_stream_or_exchange_stops_the_host_at_start_naming_the_queue(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let names = Names::new();
    let js = jetstream().await;
    let (_amqp, channel) = amqp_channel().await;
    let routes = names.routes(&names.stream, &names.exchange);

    let error = start_error(&env, &routes).await.expect("no stream yet");
    assert!(error.contains("[queues.\"outbox.jobs\"]"), "{error}");
    assert!(error.contains("does not exist"), "{error}");

    // A stream that forgets message ids sooner than the claim lease (30 s here).
    create_stream(&js, &names, Duration::from_secs(2)).await;
    let error = start_error(&env, &routes).await.expect("window too short");
    assert!(error.contains("duplicate window"), "{error}");
    assert!(error.contains("OUTBOX_CLAIM_LEASE_MS"), "{error}");

    create_stream(&js, &names, Duration::from_secs(120)).await;
    let error = start_error(&env, &routes).await.expect("no exchange yet");
    assert!(error.contains("[queues.\"outbox.tasks\"]"), "{error}");
    assert!(
        error.contains(&format!("exchange '{}'", names.exchange)),
        "{error}"
    );

    declare_exchange(&channel, &names).await;
    assert_eq!(start_error(&env, &routes).await, None);

    // Without the broker's URL the file fails its check before anything connects.
    let config = Config {
        path: None,
        routes: RoutesFile::parse(&routes, std::path::Path::new("routes.toml")).unwrap(),
        settings: Settings {
            nats_url: None,
            ..settings(&env)
        },
    };
    let error = config.check().unwrap_err().to_string();
    assert!(error.contains("needs OUTBOX_NATS_URL"), "{error}");
    cleanup(&js, &channel, &names).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_reload_naming_a_missing_stream_or_exchange_is_rejected_and_the_routes_in_force_serve(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let names = Names::new();
    let js = jetstream().await;
    let (_amqp, channel) = amqp_channel().await;
    create_stream(&js, &names, Duration::from_secs(120)).await;
    declare_exchange(&channel, &names).await;
    let fixture = PluginFixture::new(&[], &names.routes(&names.stream, &names.exchange));
    let config = fixture.config(&settings(&env));
    let live = LiveConfig::start(&config).await.unwrap();
    let sinks = QueueSinks::connect(&config.settings, live.routes.clone())
        .await
        .unwrap();
    live.check_destinations_with(Arc::new(sinks));
    let in_force = live.routes.load_full();

    for (stream, exchange, wanted) in [
        (
            "MISSING_STREAM",
            names.exchange.as_str(),
            "'MISSING_STREAM' does not exist",
        ),
        (
            names.stream.as_str(),
            "missing.exchange",
            "exchange 'missing.exchange'",
        ),
    ] {
        std::fs::write(&fixture.routes_path, names.routes(stream, exchange)).unwrap();
        match live.reload_routes().await {
            ReloadOutcome::Rejected(message) => assert!(message.contains(wanted), "{message}"),
            other => panic!("applied routes naming a missing destination: {other:?}"),
        }
        assert_eq!(
            *live.routes.load_full(),
            *in_force,
            "the routes in force serve"
        );
    }
    cleanup(&js, &channel, &names).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn the_dispatcher_hands_events_to_jetstream_and_rabbitmq_and_marks_them_done(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let names = Names::new();
    let js = jetstream().await;
    let (_amqp, channel) = amqp_channel().await;
    create_stream(&js, &names, Duration::from_secs(120)).await;
    declare_exchange(&channel, &names).await;
    let routes = names.routes(&names.stream, &names.exchange);
    let config = Config {
        path: None,
        routes: RoutesFile::parse(&routes, std::path::Path::new("routes.toml")).unwrap(),
        settings: settings(&env),
    };
    let dispatcher = Host::builder()
        .config(config)
        .pool(env.pool.clone())
        .build_dispatcher()
        .await
        .unwrap();
    let mut events = Vec::new();
    for n in 0..5 {
        events.push(NewEvent::new("job.run", json!({ "n": n })));
        events.push(NewEvent::new("task.run", json!({ "n": n })));
    }
    let ids = env.publish_all(events).await;
    let report = dispatcher.drain().await.unwrap();
    assert_eq!(report.done, 10, "{report:?}");
    let done: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'done'")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(done, 10);

    let mut stream = js.get_stream(&names.stream).await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 5);
    let mut rabbit_ids = Vec::new();
    while let Some(message) = channel
        .basic_get(
            names.rabbit_queue.as_str().into(),
            BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
    {
        let id = message.delivery.properties.message_id().clone().unwrap();
        rabbit_ids.push(id.to_string());
    }
    let wanted: Vec<String> = ids
        .iter()
        .skip(1)
        .step_by(2)
        .map(|id| format!("{}outbox:outbox.tasks:{id}", env.prefix))
        .collect();
    assert_eq!(
        rabbit_ids, wanted,
        "each task once, in order, under its message id"
    );

    // What `outbox stats` and the console show of the two queues (written in the background).
    let routes = RoutesFile::parse(&routes, std::path::Path::new("routes.toml")).unwrap();
    let queues = vec!["outbox.jobs".to_string(), "outbox.tasks".to_string()];
    let keys = QueueKeys::new(env.prefix.clone());
    let want = BrokerHandoffs {
        published: 5,
        confirmed: 5,
        ..BrokerHandoffs::default()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut conn = env.redis.clone();
        let backlogs = queue_backlogs(&mut conn, &keys, &routes, &queues)
            .await
            .unwrap();
        let counts: Vec<_> = backlogs.iter().map(|b| (b.sink, b.broker)).collect();
        if counts
            == [
                (SinkKind::Nats, Some(want)),
                (SinkKind::Rabbitmq, Some(want)),
            ]
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{counts:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(want.summary(), "5 / 5 / 0");
    cleanup(&js, &channel, &names).await;
}
