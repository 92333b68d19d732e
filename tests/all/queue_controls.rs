//! Queue controls through real receivers: a paused queue is read by no receiver (seen within a
//! second, kept across a restart, nothing lost: its entries run once it resumes), a queue's
//! `concurrency` caps the handler runs in progress, its `rate_limit` caps how many start per
//! window, and a handler's retry comes back when it is due rather than at the next housekeeping
//! round.

use std::time::{Duration, Instant};

use outbox_host::{store, NewEvent};
use outbox_tests::{wait_for, PluginFixture, RunningHost, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;

const PLUGINS: &[&str] = &["capability-policy", "test/start-probe", "test/retry-probe"];

async fn start(env: &TestEnv, fixture: &PluginFixture, consumer: &str) -> RunningHost {
    RunningHost::start(env, &fixture.config(&env.settings), consumer).await
}

/// A kv value of `plugin` (0 when absent).
async fn kv_number(env: &TestEnv, plugin: &str, key: &str) -> i64 {
    let mut conn = env.redis.clone();
    let value: Option<String> = conn
        .get(format!("{}outbox:kv:{plugin}:{key}", env.prefix))
        .await
        .unwrap();
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn ok_receipts(env: &TestEnv) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_receipt WHERE result = 'ok'")
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

fn probe_routes(queue_options: &str, sleep_ms: u64) -> String {
    format!(
        r#"
[routes]
"ctl." = "outbox.ctl"

[router]
plugin = "native"

[handlers]
"outbox.ctl" = "start-probe"

[queues."outbox.ctl"]
{queue_options}

[plugins.capability-policy]

[plugins.start-probe]
grants = {{ kv = true }}
config = {{ sleep_ms = {sleep_ms} }}
"#
    )
}

fn events(n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| NewEvent::new("ctl.work", json!({ "i": i })))
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_paused_queue_is_read_by_no_receiver_within_a_second_across_a_restart_and_loses_nothing(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(PLUGINS, &probe_routes("", 0));
    let running = start(&env, &fixture, "pause-a").await;
    // Running: an event is handled.
    env.publish_all(events(1)).await;
    wait_for(
        "the first event handled",
        Duration::from_secs(20),
        async || ok_receipts(&env).await == 1,
    )
    .await;

    assert!(
        store::pause_queue(&env.pool, "outbox.ctl", "test", Some("maintenance"))
            .await
            .unwrap()
    );
    // Every receiver sees a pause within a second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    env.publish_all(events(5)).await;
    let stream = format!("{}outbox.ctl", env.prefix);
    let mut conn = env.redis.clone();
    wait_for(
        "the events in the stream",
        Duration::from_secs(20),
        async || conn.xlen::<_, i64>(&stream).await.unwrap() >= 6,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        kv_number(&env, "start-probe", "starts").await,
        1,
        "paused: nothing ran"
    );

    // A restarted host keeps the pause.
    running.stop().await;
    let running = start(&env, &fixture, "pause-b").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        kv_number(&env, "start-probe", "starts").await,
        1,
        "still paused after a restart"
    );

    // Resumed: every entry that waited runs, once.
    assert!(store::resume_queue(&env.pool, "outbox.ctl").await.unwrap());
    wait_for(
        "the waiting events handled",
        Duration::from_secs(20),
        async || ok_receipts(&env).await == 6,
    )
    .await;
    assert_eq!(kv_number(&env, "start-probe", "starts").await, 6);
    running.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn queue_concurrency_caps_the_handler_runs_in_progress(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_concurrency = 64;
    let fixture = PluginFixture::new(PLUGINS, &probe_routes("concurrency = 2", 300));
    let running = start(&env, &fixture, "concurrency").await;
    env.publish_all(events(10)).await;
    wait_for("every event handled", Duration::from_secs(30), async || {
        ok_receipts(&env).await == 10
    })
    .await;
    assert_eq!(
        kv_number(&env, "start-probe", "max").await,
        2,
        "at most two runs at once, and two did overlap"
    );
    running.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_queue_rate_limit_caps_the_starts_per_window(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_concurrency = 16;
    let fixture = PluginFixture::new(
        PLUGINS,
        &probe_routes("rate_limit = { max = 4, duration_ms = 1000 }", 0),
    );
    // Two hosts share the limit.
    let a = start(&env, &fixture, "rate-a").await;
    let b = start(&env, &fixture, "rate-b").await;
    env.publish_all(events(16)).await;
    let mut first_start = None;
    wait_for("every event handled", Duration::from_secs(30), async || {
        if kv_number(&env, "start-probe", "starts").await > 0 {
            first_start.get_or_insert_with(Instant::now);
        }
        ok_receipts(&env).await == 16
    })
    .await;
    let took = first_start.map(|t| t.elapsed()).unwrap_or_default();
    // 16 starts at 4 per window need four windows; a window opens only after the one before
    // closed, so the fourth opens at least two whole windows after the first start.
    assert!(
        took >= Duration::from_millis(1800),
        "16 runs at 4 per second took only {took:?}"
    );
    assert_eq!(kv_number(&env, "start-probe", "starts").await, 16);
    a.stop().await;
    b.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_handler_retry_comes_back_when_it_is_due_not_at_the_next_housekeeping_round(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    // Housekeeping every 5 s (a long receiver lease); the handler asks for 300 ms three times.
    env.settings.receiver_lease = Duration::from_secs(120);
    env.settings.handler_max_retries = 5;
    let routes = r#"
[routes]
"probe." = "outbox.probe"

[router]
plugin = "native"

[handlers]
"outbox.probe" = "retry-probe"

[plugins.capability-policy]

[plugins.retry-probe]
grants = { kv = true }
"#;
    let fixture = PluginFixture::new(PLUGINS, routes);
    let running = start(&env, &fixture, "due").await;
    let id = env
        .publish_all(vec![NewEvent::new(
            "probe.snooze",
            json!({ "attempts": ["retry-after:300", "retry-after:300", "retry-after:300", "ok"] }),
        )])
        .await[0];
    let key = format!("{}outbox:kv:retry-probe:attempts-{id}", env.prefix);
    let mut conn = env.redis.clone();
    let mut seen_at: Vec<Instant> = Vec::new();
    wait_for("four attempts", Duration::from_secs(30), async || {
        let seen: Option<String> = conn.get(&key).await.unwrap();
        let n = seen.map_or(0, |s| s.split(',').count());
        while seen_at.len() < n {
            seen_at.push(Instant::now());
        }
        n == 4
    })
    .await;
    for pair in seen_at.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= Duration::from_millis(250) && gap < Duration::from_millis(2500),
            "a 300 ms retry came back after {gap:?} (gaps: {:?})",
            seen_at.windows(2).map(|p| p[1] - p[0]).collect::<Vec<_>>()
        );
    }
    running.stop().await;
}
