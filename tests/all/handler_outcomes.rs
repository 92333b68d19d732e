//! What a handler answers, end to end through real receivers: a retry at the handler's own
//! time (`retry-after`, capped), a panic retried like any failure, atomic kv updates that lose
//! nothing under concurrent deliveries, and plugins built against the previous contract
//! (`outbox:plugin@0.1.0`) routing, handling and deciding as they did.

use std::time::{Duration, Instant};

use outbox_host::receive::DeadLetters;
use outbox_host::NewEvent;
use outbox_tests::{wait_for, PluginFixture, RunningHost, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;

const PLUGINS: &[&str] = &[
    "capability-policy",
    "test/retry-probe",
    "test/kv-counter",
    "test/legacy-handler",
    "test/legacy-router",
    "test/legacy-policy",
];

/// A host running `routes` with [`PLUGINS`], and the fixture holding its files.
struct Running {
    host: RunningHost,
    _fixture: PluginFixture,
}

async fn start(env: &TestEnv, routes: &str) -> Running {
    let fixture = PluginFixture::new(PLUGINS, routes);
    let host = RunningHost::start(env, &fixture.config(&env.settings), "outcomes").await;
    Running {
        host,
        _fixture: fixture,
    }
}

impl Running {
    async fn stop(self) {
        self.host.stop().await;
    }
}

fn probe_routes() -> &'static str {
    r#"
[routes]
"probe." = "outbox.probe"

[router]
plugin = "native"

[handlers]
"outbox.probe" = "retry-probe"

[plugins.capability-policy]

[plugins.retry-probe]
grants = { kv = true }
"#
}

/// The attempts `retry-probe` recorded for `event_id` so far.
async fn attempts_seen(env: &TestEnv, event_id: i64) -> String {
    let mut conn = env.redis.clone();
    let key = format!("{}outbox:kv:retry-probe:attempts-{event_id}", env.prefix);
    let seen: Option<String> = conn.get(key).await.unwrap();
    seen.unwrap_or_default()
}

fn probe_env_settings(env: &mut TestEnv) {
    env.settings.receiver_lease = Duration::from_secs(4);
    env.settings.handler_max_retries = 2;
    env.settings.handler_backoff = vec![Duration::from_millis(200)];
}

#[sqlx::test(migrations = "../migrations")]
async fn retry_after_waits_the_handlers_own_delay_instead_of_the_backoff(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    probe_env_settings(&mut env);
    let running = start(&env, probe_routes()).await;
    // The backoff is 200 ms; the handler asks for 2.5 s.
    let id = env
        .publish_all(vec![NewEvent::new(
            "probe.snooze",
            json!({ "attempts": ["retry-after:2500", "ok"] }),
        )])
        .await[0];
    let mut first_seen = None;
    wait_for("the first attempt", Duration::from_secs(20), async || {
        let seen = attempts_seen(&env, id).await;
        if seen == "1" {
            first_seen.get_or_insert_with(Instant::now);
        }
        !seen.is_empty()
    })
    .await;
    let first_seen = first_seen.unwrap_or_else(Instant::now);
    let mut second_seen = None;
    wait_for("the second attempt", Duration::from_secs(30), async || {
        let done = attempts_seen(&env, id).await == "1,2";
        if done {
            second_seen.get_or_insert_with(Instant::now);
        }
        done
    })
    .await;
    let waited = second_seen.unwrap_or_else(Instant::now) - first_seen;
    assert!(
        waited >= Duration::from_millis(2400),
        "the second attempt came {waited:?} after the first: before the handler's 2.5 s"
    );
    wait_for("the ok receipt", Duration::from_secs(20), async || {
        env.receipt(id).await.is_some_and(|r| r.0 == "ok")
    })
    .await;
    assert_eq!(
        env.receipt(id).await.unwrap().1,
        2,
        "retry-after counts an attempt"
    );
    running.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn retry_after_beyond_a_day_is_cut_to_a_day(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    probe_env_settings(&mut env);
    let running = start(&env, probe_routes()).await;
    let id = env
        .publish_all(vec![NewEvent::new(
            "probe.forever",
            json!({ "attempts": [format!("retry-after:{}", u64::MAX)] }),
        )])
        .await[0];
    let retry_set = format!("{}outbox:retry:outbox.probe", env.prefix);
    let mut conn = env.redis.clone();
    let mut due_ms = None;
    wait_for(
        "the entry in the retry set",
        Duration::from_secs(20),
        async || {
            let members: Vec<(String, f64)> =
                conn.zrange_withscores(&retry_set, 0, -1).await.unwrap();
            due_ms = members.first().map(|(_, score)| *score);
            due_ms.is_some()
        },
    )
    .await;
    let in_ms = due_ms.unwrap() - chrono::Utc::now().timestamp_millis() as f64;
    let day_ms = 24.0 * 3600.0 * 1000.0;
    assert!(
        (day_ms - 120_000.0..=day_ms).contains(&in_ms),
        "due in {in_ms} ms, not a day"
    );
    assert_eq!(attempts_seen(&env, id).await, "1");
    running.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_handler_that_panics_is_retried_with_the_configured_retries_then_dead_lettered(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    probe_env_settings(&mut env);
    let running = start(&env, probe_routes()).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("probe.once", json!({ "attempts": ["panic", "ok"] })),
            NewEvent::new("probe.always", json!({ "attempts": ["panic"] })),
        ])
        .await;
    wait_for("both outcomes", Duration::from_secs(30), async || {
        let once = env.receipt(ids[0]).await;
        let always = env.receipt(ids[1]).await;
        once.is_some_and(|r| r.0 == "ok") && always.is_some_and(|r| r.0 == "dead")
    })
    .await;
    // A panic is a failed attempt: the next one runs after the backoff and succeeds.
    assert_eq!(env.receipt(ids[0]).await.unwrap().1, 2);
    assert_eq!(attempts_seen(&env, ids[0]).await, "1,2");
    // Panicking every time: the configured retries (2), then the dead-letter stream, with the
    // guest's panic message in the reason.
    let (_, attempts, error) = env.receipt(ids[1]).await.unwrap();
    assert_eq!(attempts, 3);
    assert_eq!(attempts_seen(&env, ids[1]).await, "1,2,3");
    let error = error.unwrap_or_default();
    assert!(error.contains("gave up after 3 attempts"), "{error}");
    assert!(error.contains("retry-probe: attempt 3 panics"), "{error}");
    let dead = DeadLetters::connect(&env.settings).await.unwrap();
    let letters = dead.list(&["outbox.probe".to_string()]).await.unwrap();
    assert_eq!(letters.len(), 1, "{letters:?}");
    running.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn atomic_kv_updates_lose_no_increment_under_concurrent_deliveries(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_concurrency = 64;
    let routes = r#"
[routes]
"count.increment." = "outbox.count-increment"
"count.cas." = "outbox.count-cas"

[router]
plugin = "native"

[handlers]
"outbox.count-increment" = "counter-increment"
"outbox.count-cas" = "counter-cas"

[plugins.capability-policy]

[plugins.counter-increment]
file = "kv-counter.wasm"
config = { mode = "increment" }
grants = { kv = true }

[plugins.counter-cas]
file = "kv-counter.wasm"
config = { mode = "cas" }
timeout_ms = 30000
fuel = 50_000_000_000
grants = { kv = true }
"#;
    let running = start(&env, routes).await;
    let events: Vec<NewEvent> = (0..300)
        .flat_map(|i| {
            [
                NewEvent::new("count.increment.one", json!({ "i": i })),
                NewEvent::new("count.cas.one", json!({ "i": i })),
            ]
        })
        .collect();
    env.publish_all(events).await;
    let ok = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_receipt WHERE result = 'ok'")
            .fetch_one(&env.pool)
            .await
            .unwrap()
    };
    wait_for("600 ok receipts", Duration::from_secs(120), async || {
        ok().await == 600
    })
    .await;
    let mut conn = env.redis.clone();
    for plugin in ["counter-increment", "counter-cas"] {
        let count: Option<String> = conn
            .get(format!("{}outbox:kv:{plugin}:count", env.prefix))
            .await
            .unwrap();
        assert_eq!(count.as_deref(), Some("300"), "{plugin} lost updates");
    }
    running.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn plugins_built_against_the_previous_contract_route_handle_and_decide_as_before(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    probe_env_settings(&mut env);
    let routes = r#"
[router]
plugin = "legacy-router"

[handlers]
"outbox.legacy" = "legacy-handler"

[policy]
plugin = "legacy-policy"

[plugins.legacy-router]
[plugins.legacy-policy]
[plugins.legacy-handler]
grants = { kv = true, publish = ["legacy."] }
"#;
    let running = start(&env, routes).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("old.thing", json!({ "publish": true, "retry_first": true })),
            NewEvent::new("nope.thing", json!({})),
        ])
        .await;
    wait_for(
        "the handler's ok receipt",
        Duration::from_secs(30),
        async || env.receipt(ids[0]).await.is_some_and(|r| r.0 == "ok"),
    )
    .await;
    // Routed by the 0.1 router; handled by the 0.1 handler: a retry, then ok.
    assert!(!env.entries("outbox.legacy").await.is_empty());
    assert_eq!(env.receipt(ids[0]).await.unwrap().1, 2);
    // Its kv calls reached its own namespace...
    let mut conn = env.redis.clone();
    let last: Option<String> = conn
        .get(format!("{}outbox:kv:legacy-handler:last-event", env.prefix))
        .await
        .unwrap();
    assert_eq!(last, Some(ids[0].to_string()));
    // ...and its child has the dispatch key the host gives children (the retry's second
    // publish found the first), allowed by the 0.1 policy.
    let children: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT event_type, dispatch_key FROM outbox_event WHERE event_type = 'legacy.child'",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        children,
        vec![(
            "legacy.child".to_string(),
            Some(format!("child:{}:legacy-handler:0", ids[0]))
        )]
    );
    // The 0.1 router's no-route fails its event with its reason.
    wait_for(
        "the unrouted event to fail",
        Duration::from_secs(20),
        async || env.status(ids[1]).await.0 == "failed",
    )
    .await;
    let (_, _, error) = env.status(ids[1]).await;
    assert!(
        error
            .unwrap_or_default()
            .contains("legacy router: nope.thing goes nowhere"),
        "the router's reason is kept"
    );
    running.stop().await;
}
