//! Receivers: handler plugins run once per event, retry, dead-letter, reclaim, and every host
//! call passes the capability policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::{DeadLetters, HandledAs, QueueEntry, Receivers};
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const PLUGINS: &[&str] = &[
    "capability-policy",
    "workflow-trigger",
    "plugin-hook",
    "test/echo-handler",
    "test/flaky-handler",
    "test/greedy",
];

fn routes(flaky_succeeds: bool) -> String {
    format!(
        r#"
[routes]
"workflow." = "outbox.workflow"
"workflow.executor." = "outbox.workflow-executor"
"plugin.hook." = "outbox.plugin-hook"
"plugin.invoke." = "outbox.plugin-invoke"
"plugin.capability-use." = "outbox.plugin-capability-use"
"flaky." = "outbox.flaky"
"greedy." = "outbox.greedy"

[router]
plugin = "native"

[handlers]
"outbox.workflow" = "workflow-trigger"
"outbox.plugin-hook" = "plugin-hook"
"outbox.plugin-invoke" = "builtin:plugin-invoke"
"outbox.flaky" = "flaky-handler"
"outbox.greedy" = "greedy"

[queue_groups]
general = ["outbox.workflow", "outbox.plugin-hook", "outbox.plugin-invoke", "outbox.flaky", "outbox.greedy"]

[plugins.capability-policy]

[plugins.workflow-trigger]
config = {{ executor = {{ queue = "outbox.workflow-executor" }}, workflows = [
  {{ id = "welcome", trigger = {{ event = "user.signed-up" }} }},
  {{ id = "crm-sync", enabled = true, trigger = {{ event = "user.signed-up" }} }},
  {{ id = "audit", trigger = {{ event = "user.signed-up" }} }},
  {{ id = "retired", enabled = false, trigger = {{ event = "user.signed-up" }} }},
  {{ id = "other", trigger = {{ event = "order.placed" }} }},
] }}
grants = {{ publish = ["workflow.execution.", "workflow.executor."] }}

[plugins.plugin-hook]
config = {{ subscribers = {{ "workflow.executed" = ["audit-log", "notifier"], "workflow.failed" = ["audit-log"], "workflow.retried" = ["audit-log", "flaky-handler"] }} }}
grants = {{ publish = ["plugin.invoke."] }}

[plugins.audit-log]
file = "echo-handler.wasm"
hooks = ["workflow.executed", "workflow.failed", "workflow.retried"]

[plugins.notifier]
file = "echo-handler.wasm"
hooks = ["workflow.executed"]

[plugins.flaky-handler]
config = {{ succeed = {flaky_succeeds} }}
hooks = ["workflow.retried"]

[plugins.greedy]
"#
    )
}

struct Running {
    live: LiveConfig,
    receivers: Receivers,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn start(
    env: &TestEnv,
    fixture: &PluginFixture,
    consumer: &str,
    with_receivers: bool,
) -> Running {
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let settings = Arc::new(config.settings.clone());
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by(&format!("{consumer}-dispatch"), live.router.clone())
        .await;
    let mut tasks = vec![
        tokio::spawn(dispatcher.run(shutdown.clone())),
        live.clone().watch(shutdown.clone()).unwrap(),
    ];
    let receivers = Receivers::new(env.pool.clone(), live.clone(), settings, consumer)
        .await
        .unwrap();
    if with_receivers {
        for queue in receivers.queues_for_group(Some("general")) {
            tasks.push(tokio::spawn(
                receivers.clone().consume(queue, shutdown.clone()),
            ));
        }
    }
    Running {
        live,
        receivers,
        shutdown,
        tasks,
    }
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn test_env_settings(env: &mut TestEnv) {
    env.settings.dispatch_interval = Duration::from_millis(100);
    env.settings.receiver_lease = Duration::from_millis(800);
    env.settings.handler_max_retries = 2;
    env.settings.handler_backoff = vec![Duration::from_millis(200)];
}

/// A consumer of the `outbox` group reads every entry of `queue` and never acknowledges them
/// (it died). Returns how many it took.
async fn take_entries_and_die(env: &TestEnv, queue: &str, consumer: &str) -> usize {
    let mut conn = env.redis.clone();
    let key = format!("{}{queue}", env.prefix);
    let _: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("outbox")
        .arg("0")
        .query_async(&mut conn)
        .await;
    let taken: Option<redis::streams::StreamReadReply> = redis::AsyncCommands::xread_options(
        &mut conn,
        &[&key],
        &[">"],
        &redis::streams::StreamReadOptions::default()
            .group("outbox", consumer)
            .count(100),
    )
    .await
    .unwrap();
    taken.map_or(0, |r| r.keys.iter().map(|k| k.ids.len()).sum())
}

async fn receipts(env: &TestEnv) -> Vec<(i64, String, String, i32)> {
    sqlx::query_as("SELECT event_id, handler, result, duplicates FROM outbox_receipt ORDER BY 1, 2")
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn workflow_trigger_fans_out_to_exactly_n_executions_despite_redelivery(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", true).await;

    // The application publishes in its own transaction.
    let trigger = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up", "data": {"user": 7}}),
        )])
        .await[0];
    wait_for("3 executor jobs", Duration::from_secs(20), async || {
        env.entries("outbox.workflow-executor").await.len() >= 3
    })
    .await;

    // The trigger job is delivered a second time (a redelivery after a lost ack, say).
    let first = env
        .entries("outbox.workflow")
        .await
        .into_iter()
        .find(|e| e["event_id"] == trigger.to_string())
        .unwrap();
    let fields: Vec<(String, String)> = first.into_iter().collect();
    let mut conn = env.redis.clone();
    let _: String = redis::AsyncCommands::xadd(
        &mut conn,
        format!("{}outbox.workflow", env.prefix),
        "*",
        &fields,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;

    let jobs = env.entries("outbox.workflow-executor").await;
    assert_eq!(
        jobs.len(),
        3,
        "one executor job per enabled matching workflow, no duplicates"
    );
    let mut ids: Vec<String> = jobs
        .iter()
        .map(|j| {
            serde_json::from_str::<serde_json::Value>(&j["payload"]).unwrap()["request"]
                ["workflow_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    ids.sort();
    assert_eq!(ids, ["audit", "crm-sync", "welcome"]);
    let executions = env.count_type("workflow.execution.requested").await;
    assert_eq!(executions, 3);
    let (published, duplicates): (Vec<i64>, i32) =
        sqlx::query_as("SELECT published_ids, duplicates FROM outbox_receipt WHERE event_id = $1")
            .bind(trigger)
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(
        published.len(),
        3,
        "the receipt names the events the handler published"
    );
    assert_eq!(duplicates, 1, "the second delivery was a no-op");
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn receiver_killed_mid_handler_is_rerun_without_duplicate_children(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    // Dispatcher only: a consumer that "dies" takes the trigger entry first.
    let running = start(&env, &fixture, "survivor", false).await;
    let trigger = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up"}),
        )])
        .await[0];
    wait_for("the trigger entry", Duration::from_secs(10), async || {
        !env.entries("outbox.workflow").await.is_empty()
    })
    .await;
    let mut conn = env.redis.clone();
    assert_eq!(
        take_entries_and_die(&env, "outbox.workflow", "dying").await,
        1
    );
    // It got as far as claiming the event and publishing the first child, then died.
    let _: () = redis::cmd("SET")
        .arg(format!(
            "{}outbox:handled:workflow-trigger:{trigger}",
            env.prefix
        ))
        .arg("running:dying")
        .arg("PX")
        .arg(800)
        .query_async(&mut conn)
        .await
        .unwrap();
    // `child:` keys are the host's own (producers may not use them): insert the row directly.
    sqlx::query("INSERT INTO outbox_event (event_type, payload, dispatch_key) VALUES ($1, $2, $3)")
        .bind("workflow.execution.requested")
        .bind(json!({"workflow_id": "welcome", "trigger_event_id": trigger, "data": {}}))
        .bind(format!("child:{trigger}:workflow-trigger:0"))
        .execute(&env.pool)
        .await
        .unwrap();

    for queue in running.receivers.queues_for_group(Some("general")) {
        let r = running.receivers.clone();
        tokio::spawn(r.consume(queue, running.shutdown.clone()));
    }
    wait_for("3 executor jobs", Duration::from_secs(20), async || {
        env.entries("outbox.workflow-executor").await.len() >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.entries("outbox.workflow-executor").await.len(),
        3,
        "exactly N executions"
    );
    let executions = env.count_type("workflow.execution.requested").await;
    assert_eq!(
        executions, 3,
        "the rerun reused the children's dispatch keys"
    );
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn plugin_hooks_reach_each_subscribed_plugin_once(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", true).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new(
                "plugin.hook.workflow.executed",
                json!({"workflow_id": "welcome"}),
            ),
            NewEvent::new(
                "plugin.hook.workflow.failed",
                json!({"workflow_id": "crm-sync"}),
            ),
        ])
        .await;
    let (executed, failed) = (ids[0], ids[1]);
    wait_for("three hook receipts", Duration::from_secs(20), async || {
        receipts(&env)
            .await
            .iter()
            .filter(|r| r.1 == "audit-log" || r.1 == "notifier")
            .count()
            >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hook_receipts: Vec<(i64, String, String, i32)> = receipts(&env)
        .await
        .into_iter()
        .filter(|r| r.1 == "audit-log" || r.1 == "notifier")
        .collect();
    assert_eq!(
        hook_receipts,
        vec![
            (executed, "audit-log".into(), "ok".into(), 0),
            (executed, "notifier".into(), "ok".into(), 0),
            (failed, "audit-log".into(), "ok".into(), 0),
        ]
    );
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn ungranted_capability_is_denied_audited_and_writes_nothing(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", true).await;
    let id = env
        .publish_all(vec![NewEvent::new("greedy.try", json!({}))])
        .await[0];
    wait_for("the greedy receipt", Duration::from_secs(20), async || {
        receipts(&env).await.iter().any(|r| r.0 == id)
    })
    .await;
    let receipt = receipts(&env)
        .await
        .into_iter()
        .find(|r| r.0 == id)
        .unwrap();
    assert_eq!(
        receipt.2, "ok",
        "greedy returns ok only when every call was denied: {receipt:?}"
    );
    let charges = env.count_type("billing.charge").await;
    assert_eq!(charges, 0, "nothing published");
    let mut conn = env.redis.clone();
    let kv: Vec<String> =
        redis::AsyncCommands::keys(&mut conn, format!("{}outbox:kv:*", env.prefix))
            .await
            .unwrap();
    assert!(kv.is_empty(), "nothing stored");
    let audits: Vec<serde_json::Value> = sqlx::query_scalar("SELECT payload FROM outbox_event WHERE event_type = 'plugin.capability-use.denied' ORDER BY id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let capabilities: Vec<&str> = audits
        .iter()
        .map(|a| a["capability"].as_str().unwrap())
        .collect();
    assert_eq!(capabilities, ["publish", "kv", "http"], "{audits:?}");
    assert!(audits.iter().all(|a| a["plugin"] == "greedy"));
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn consumer_dying_with_entries_lets_another_take_them_after_the_lease(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "survivor", false).await;
    let ids = env
        .publish_all(
            (0..5)
                .map(|i| NewEvent::new("plugin.hook.workflow.failed", json!({"i": i})))
                .collect(),
        )
        .await;
    wait_for("5 hook entries", Duration::from_secs(10), async || {
        env.entries("outbox.plugin-hook").await.len() == 5
    })
    .await;
    assert_eq!(
        take_entries_and_die(&env, "outbox.plugin-hook", "dead-consumer").await,
        5
    );
    let taken_at = Instant::now();
    for queue in running.receivers.queues_for_group(Some("general")) {
        tokio::spawn(
            running
                .receivers
                .clone()
                .consume(queue, running.shutdown.clone()),
        );
    }
    wait_for("all 5 handled", Duration::from_secs(20), async || {
        receipts(&env)
            .await
            .iter()
            .filter(|r| ids.contains(&r.0) && r.1 == "plugin-hook" && r.2 == "ok")
            .count()
            == 5
    })
    .await;
    assert!(
        taken_at.elapsed() >= Duration::from_millis(800),
        "reclaimed only after the lease"
    );
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dead_hosts_pending_entries_are_taken_over_when_its_heartbeat_stops_not_after_the_lease(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    // A long receiver lease: reclaiming by the lease alone would take two minutes.
    env.settings.receiver_lease = Duration::from_secs(120);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let dispatching = start(&env, &fixture, "dispatcher", false).await;
    let ids = env
        .publish_all(
            (0..3)
                .map(|i| NewEvent::new("flaky.job", json!({ "i": i })))
                .collect(),
        )
        .await;
    wait_for("3 entries", Duration::from_secs(10), async || {
        env.entries("outbox.flaky").await.len() == 3
    })
    .await;
    // A host reads them, claims two, and dies: its heartbeat stopped 100 s ago. It last renewed
    // one claim long ago (10 s of its 120 s left) and the other one just now (a host that lost
    // only PostgreSQL goes on renewing its claims: that one must stay its own).
    assert_eq!(
        take_entries_and_die(&env, "outbox.flaky", "dead-host").await,
        3
    );
    let mut conn = env.redis.clone();
    let marker = |id: i64| format!("{}outbox:handled:flaky-handler:{id}", env.prefix);
    let _: () = redis::cmd("SET")
        .arg(marker(ids[1]))
        .arg("running:dead-host:00000000000000ff")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(marker(ids[2]))
        .arg("running:dead-host:00000000000000aa")
        .arg("PX")
        .arg(119_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO outbox_worker (id, host_name, version, last_seen) VALUES ('dead-host', 'h', 'test', now() - interval '100 seconds')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let taken_at = Instant::now();
    let running = start(&env, &fixture, "survivor", true).await;
    wait_for(
        "the two entries taken over",
        Duration::from_secs(40),
        async || {
            receipts(&env)
                .await
                .iter()
                .filter(|r| (r.0 == ids[0] || r.0 == ids[1]) && r.2 == "ok")
                .count()
                == 2
        },
    )
    .await;
    assert!(
        taken_at.elapsed() < Duration::from_secs(60),
        "taken over long before the 120 s lease"
    );
    // The entry whose claim was renewed just now is left to its owner.
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(format!("{}outbox.flaky", env.prefix))
        .arg("outbox")
        .arg("-")
        .arg("+")
        .arg(10)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].1, "dead-host");
    let still: Option<String> = redis::AsyncCommands::get(&mut conn, marker(ids[2]))
        .await
        .unwrap();
    assert_eq!(still.as_deref(), Some("running:dead-host:00000000000000aa"));
    assert!(!receipts(&env).await.iter().any(|r| r.0 == ids[2]));
    running.stop().await;
    dispatching.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn always_failing_handler_dead_letters_then_replay_delivers_after_a_fix(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    // The fix is a hot reload, which is checked against the lease: cover the handlers' default
    // 2000 ms time limit plus the margin.
    env.settings.receiver_lease = Duration::from_secs(8);
    let fixture = PluginFixture::new(PLUGINS, &routes(false));
    let running = start(&env, &fixture, "c1", true).await;
    let id = env
        .publish_all(vec![NewEvent::new("flaky.job", json!({}))])
        .await[0];
    let dead = DeadLetters::connect(&fixture.config(&env.settings).settings)
        .await
        .unwrap();
    let queues = vec!["outbox.flaky".to_string()];
    wait_for("the dead letter", Duration::from_secs(20), async || {
        !dead.list(&queues).await.unwrap().is_empty()
    })
    .await;
    let letters = dead.list(&queues).await.unwrap();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event_id, Some(id));
    assert_eq!(
        letters[0].attempts, 3,
        "first try plus the 2 configured retries"
    );
    assert!(
        letters[0].error.starts_with("gave up after 3 attempts"),
        "{}",
        letters[0].error
    );

    // Fix the handler through a hot-reloaded config, then replay.
    fixture.replace("routes.toml", routes(true).as_bytes());
    tokio::time::sleep(Duration::from_millis(800)).await;
    dead.replay(&letters[0]).await.unwrap();
    wait_for(
        "the replayed delivery",
        Duration::from_secs(20),
        async || {
            receipts(&env)
                .await
                .iter()
                .any(|r| r.0 == id && r.2 == "ok")
        },
    )
    .await;
    assert!(dead.list(&queues).await.unwrap().is_empty());
    let _ = running.live.registry.list();
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn two_receivers_never_both_run_a_handler_to_completion(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", false).await;
    let other = Receivers::new(
        env.pool.clone(),
        running.live.clone(),
        Arc::new(fixture.config(&env.settings).settings),
        "c2",
    )
    .await
    .unwrap();
    let id = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up"}),
        )])
        .await[0];
    wait_for("the trigger entry", Duration::from_secs(10), async || {
        !env.entries("outbox.workflow").await.is_empty()
    })
    .await;
    let fields = env.entries("outbox.workflow").await.remove(0);
    let entry = QueueEntry {
        stream_id: "0-1".into(),
        fields: fields.into_iter().collect(),
    };
    let (a, b) = tokio::join!(
        running
            .receivers
            .handle_entry("outbox.workflow", entry.clone()),
        other.handle_entry("outbox.workflow", entry.clone())
    );
    let oks = [&a, &b].iter().filter(|h| ***h == HandledAs::Ok).count();
    assert_eq!(oks, 1, "exactly one ran to completion: {a:?} {b:?}");
    assert!(matches!(
        a,
        HandledAs::Ok | HandledAs::Busy | HandledAs::Duplicate
    ));
    assert_eq!(
        other.handle_entry("outbox.workflow", entry).await,
        HandledAs::Duplicate
    );
    let children = env.count_type("workflow.execution.requested").await;
    assert_eq!(children, 3);
    let _ = id;
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn http_executor_gets_one_signed_request_per_execution(pool: PgPool) {
    use axum::body::Bytes;
    use axum::http::{HeaderMap, StatusCode};
    use outbox_host::capability::signing::{
        verify_signature, SignedRequest, SIGNATURE_HEADER, TIMESTAMP_HEADER,
    };

    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    const SECRET: &str = "test-executor-secret";
    std::env::set_var("OUTBOX_TEST_EXECUTOR_SECRET", SECRET);
    let received: Arc<std::sync::Mutex<Vec<(bool, serde_json::Value)>>> = Arc::default();
    let seen = received.clone();
    let app = axum::Router::new().route(
        "/execute",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                let header = |n: &str| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string()
                };
                let host = header("host");
                let received = SignedRequest {
                    method: "POST",
                    host: &host,
                    path_and_query: "/execute",
                    body: &body,
                };
                let verified = verify_signature(
                    SECRET.as_bytes(),
                    &header(TIMESTAMP_HEADER),
                    &received,
                    &header(SIGNATURE_HEADER),
                    chrono::Utc::now().timestamp(),
                    300,
                )
                .is_ok();
                let forged = verify_signature(
                    b"wrong secret",
                    &header(TIMESTAMP_HEADER),
                    &received,
                    &header(SIGNATURE_HEADER),
                    chrono::Utc::now().timestamp(),
                    300,
                )
                .is_ok();
                seen.lock().unwrap().push((
                    verified && !forged,
                    serde_json::from_slice(&body).unwrap_or_default(),
                ));
                if verified {
                    StatusCode::OK
                } else {
                    StatusCode::UNAUTHORIZED
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let routes = routes(true).replace(
        "config = { executor = { queue = \"outbox.workflow-executor\" }, workflows = [",
        &format!("config = {{ executor = {{ http = {{ url = \"http://127.0.0.1:{port}/execute\" }} }}, workflows = ["),
    ).replace(
        "grants = { publish = [\"workflow.execution.\", \"workflow.executor.\"] }",
        // The local executor is a loopback IP named in the grant, reached over plain http:
        // signing there needs the explicit opt-in.
        &format!("grants = {{ publish = [\"workflow.execution.\"], http = [\"127.0.0.1:{port}\"], http_signing_secret_env = \"OUTBOX_TEST_EXECUTOR_SECRET\", http_signing_allow_plain_http = true }}"),
    );
    assert!(routes.contains("http_signing_secret_env"));
    let fixture = PluginFixture::new(PLUGINS, &routes);
    let running = start(&env, &fixture, "c1", true).await;
    let id = env
        .publish_all(vec![NewEvent::new(
            "workflow.execution.requested",
            json!({"workflow_id": "welcome", "data": {"user": 7}}),
        )])
        .await[0];
    wait_for("the executor call", Duration::from_secs(20), async || {
        !received.lock().unwrap().is_empty()
    })
    .await;
    // Deliver the same job again: the receiver's idempotency claim makes it a no-op.
    let fields: Vec<(String, String)> = env
        .entries("outbox.workflow")
        .await
        .remove(0)
        .into_iter()
        .collect();
    let mut conn = env.redis.clone();
    let _: String = redis::AsyncCommands::xadd(
        &mut conn,
        format!("{}outbox.workflow", env.prefix),
        "*",
        &fields,
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let calls = received.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one request per execution: {calls:?}");
    assert!(
        calls[0].0,
        "signed with the secret from the environment, forgery rejected"
    );
    assert_eq!(calls[0].1["request"]["workflow_id"], "welcome");
    assert_eq!(calls[0].1["source_event_id"], id);
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn streams_are_trimmed_only_below_what_every_group_acknowledged(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", false).await;
    let key = format!("{}outbox.plugin-hook", env.prefix);
    let mut conn = env.redis.clone();
    // Another consumer group (an external service) has not read anything yet.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("external")
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    for queue in running.receivers.queues_for_group(Some("general")) {
        tokio::spawn(
            running
                .receivers
                .clone()
                .consume(queue, running.shutdown.clone()),
        );
    }
    let ids = env
        .publish_all(
            (0..4)
                .map(|i| NewEvent::new("plugin.hook.nobody.listens", json!({"i": i})))
                .collect(),
        )
        .await;
    wait_for("4 receipts", Duration::from_secs(20), async || {
        receipts(&env)
            .await
            .iter()
            .filter(|r| ids.contains(&r.0) && r.2 == "ok")
            .count()
            == 4
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let len: i64 = redis::cmd("XLEN")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 4, "the external group still needs every entry");
    let _: () = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(&key)
        .arg("external")
        .query_async(&mut conn)
        .await
        .unwrap();
    wait_for("the trim", Duration::from_secs(10), async || {
        let len: i64 = redis::cmd("XLEN")
            .arg(&key)
            .query_async(&mut env.redis.clone())
            .await
            .unwrap();
        len == 0
    })
    .await;
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_failing_hook_subscriber_does_not_redo_the_others(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(false));
    let running = start(&env, &fixture, "c1", true).await;
    let hook = env
        .publish_all(vec![NewEvent::new(
            "plugin.hook.workflow.retried",
            json!({"workflow_id": "w"}),
        )])
        .await[0];
    wait_for(
        "the failing subscriber to give up",
        Duration::from_secs(30),
        async || {
            receipts(&env)
                .await
                .iter()
                .any(|r| r.0 == hook && r.1 == "flaky-handler" && r.2 == "dead")
        },
    )
    .await;
    let audit: (String, i32, i32) = sqlx::query_as(
        "SELECT result, attempts, duplicates FROM outbox_receipt WHERE event_id = $1 AND handler = 'audit-log'",
    )
    .bind(hook)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        ("ok".to_string(), 1, 0),
        "the healthy subscriber ran once, never again"
    );
    let flaky_attempts: i32 = sqlx::query_scalar(
        "SELECT attempts FROM outbox_receipt WHERE event_id = $1 AND handler = 'flaky-handler'",
    )
    .bind(hook)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(flaky_attempts, 3, "only the failing subscriber retried");
    running.stop().await;
    env.cleanup().await;
}

/// A receipt travels with the outcome: the outcome step appends it to the receipts stream in
/// the same atomic step as the acknowledgement, so a receiver whose writer died before writing
/// it (here: its database writes fail, then the receiver is dropped) loses nothing. Another
/// host's writer adopts the receipt after the receiver lease and writes it, once.
#[sqlx::test(migrations = "../migrations")]
async fn a_receipt_outlives_a_receiver_that_died_before_writing_it(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let settings = Arc::new(config.settings.clone());
    let id = env
        .publish_all(vec![NewEvent::new("flaky.receipt", json!({}))])
        .await[0];
    env.dispatcher_routed_by("receipt-dispatch", live.router.clone())
        .await
        .drain()
        .await
        .unwrap();

    // A database without the outbox tables: every receipt write fails at once (not a blip).
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let elsewhere = PgPool::connect(&outbox_host::store::with_database(&base, "postgres"))
        .await
        .unwrap();
    let doomed = Receivers::new(elsewhere, live.clone(), settings.clone(), "doomed")
        .await
        .unwrap();
    doomed.ensure_group("outbox.flaky").await.unwrap();
    let mut conn = env.redis.clone();
    let read: redis::streams::StreamReadReply = redis::AsyncCommands::xread_options(
        &mut conn,
        &[format!("{}outbox.flaky", env.prefix)],
        &[">"],
        &redis::streams::StreamReadOptions::default()
            .group("outbox", "doomed")
            .count(1),
    )
    .await
    .unwrap();
    let entry = QueueEntry::from_stream(&read.keys[0].ids[0]);
    assert_eq!(entry.event_id(), Some(id));
    assert_eq!(
        doomed.handle_entry("outbox.flaky", entry).await,
        HandledAs::Ok
    );

    let receipts_stream = format!("{}outbox:receipts", env.prefix);
    wait_for(
        "the doomed writer to read the receipt",
        Duration::from_secs(10),
        async || {
            let pending: redis::streams::StreamPendingReply =
                redis::AsyncCommands::xpending(&mut env.redis.clone(), &receipts_stream, "outbox")
                    .await
                    .unwrap();
            pending.count() == 1
        },
    )
    .await;
    drop(doomed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receipts(&env).await.is_empty(), "nothing written yet");

    let _heir = Receivers::new(env.pool.clone(), live, settings, "heir")
        .await
        .unwrap();
    wait_for(
        "the heir to write the receipt",
        Duration::from_secs(20),
        async || !receipts(&env).await.is_empty(),
    )
    .await;
    assert_eq!(
        receipts(&env).await,
        vec![(id, "flaky-handler".to_string(), "ok".to_string(), 0)]
    );
    wait_for(
        "the receipts stream to empty",
        Duration::from_secs(10),
        async || {
            let len: usize = redis::AsyncCommands::xlen(&mut env.redis.clone(), &receipts_stream)
                .await
                .unwrap();
            len == 0
        },
    )
    .await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn trace_of_a_workflow_trigger_shows_its_executions_and_their_executor_jobs(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "tracer", true).await;
    let trigger = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up", "data": {"user": 7}}),
        )])
        .await[0];
    // The trigger and its three executions each have a receipt once all is handled.
    wait_for(
        "4 receipts and 3 executor jobs",
        Duration::from_secs(20),
        async || {
            let receipts: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
                .fetch_one(&env.pool)
                .await
                .unwrap();
            receipts >= 4 && env.entries("outbox.workflow-executor").await.len() >= 3
        },
    )
    .await;

    let tracer = outbox_host::trace::Tracer::connect(
        env.pool.clone(),
        &env.settings,
        running.live.router.clone(),
    )
    .await
    .unwrap();
    let trace = tracer
        .trace(trigger, 5)
        .await
        .unwrap()
        .expect("the trigger exists");
    assert_eq!(trace.event.event_type, "workflow.trigger.event");
    assert_eq!(trace.event.status, "done");
    let stream_of = |queue: &str, trace: &outbox_host::trace::EventTrace| {
        let d = trace
            .destinations
            .iter()
            .find(|d| d.queue == queue)
            .unwrap_or_else(|| panic!("no destination {queue}: {:?}", trace.destinations));
        assert_eq!(d.state, "handed off");
        d.stream_id.clone().expect("the stream entry id")
    };
    let entry = stream_of("outbox.workflow", &trace);
    assert!(
        env.entries("outbox.workflow")
            .await
            .iter()
            .any(|e| e["event_id"] == trigger.to_string()),
        "{entry}"
    );
    assert_eq!(trace.receipts.len(), 1);
    assert_eq!(
        (
            trace.receipts[0].handler.as_str(),
            trace.receipts[0].result.as_str()
        ),
        ("workflow-trigger", "ok")
    );
    assert_eq!(
        trace.children.len(),
        3,
        "one execution per enabled workflow"
    );
    let mut workflows = Vec::new();
    for execution in &trace.children {
        assert_eq!(execution.event.event_type, "workflow.execution.requested");
        assert_eq!(
            execution
                .event
                .dispatch_key
                .as_deref()
                .map(|k| k.starts_with(&format!("child:{trigger}:"))),
            Some(true)
        );
        stream_of("outbox.workflow", execution);
        assert_eq!(execution.receipts[0].result, "ok");
        assert_eq!(execution.children.len(), 1, "each execution's executor job");
        let job = &execution.children[0];
        assert_eq!(job.event.event_type, "workflow.executor.job");
        stream_of("outbox.workflow-executor", job);
        assert!(
            job.receipts.is_empty(),
            "no handler is bound to the executor queue"
        );
        let payload: serde_json::Value = serde_json::from_str(
            &outbox_host::store::event_payload(&env.pool, job.event.id)
                .await
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        workflows.push(
            payload["request"]["workflow_id"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    workflows.sort();
    assert_eq!(workflows, ["audit", "crm-sync", "welcome"]);

    // Depth bounds the tree and says what it left out.
    let shallow = tracer.trace(trigger, 0).await.unwrap().unwrap();
    assert!(shallow.children.is_empty());
    assert_eq!(shallow.children_cut, 3);
    assert!(tracer.trace(i64::MAX, 5).await.unwrap().is_none());
    running.stop().await;
    env.cleanup().await;
}
