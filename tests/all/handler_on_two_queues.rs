//! One handler bound to two queues that both receive an event. On one Redis node the handler's
//! idempotency marker is per (handler, event), so it runs once and its children keep the keys
//! they always had (`child:<parent>:<handler>:<index>`). On a Redis Cluster the marker lives in
//! each queue's slot, so it runs once per queue: each run's children get keys of their own
//! (`child:<parent>:<handler>@<queue>:<index>`), so neither run's children collide with the
//! other's, and each run's redelivery finds its own children again.

use std::time::Duration;

use outbox_host::NewEvent;
use outbox_tests::{wait_for, PluginFixture, RunningHost, TestEnv};
use serde_json::json;
use sqlx::PgPool;

/// `hook-probe` handles both `outbox.two-a` and `outbox.two-b` (every `two.` event goes to
/// both) and publishes one `probe.seen` child naming the queue it ran for.
const ROUTES: &str = r#"
[routes]
"two." = ["outbox.two-a", "outbox.two-b"]
"probe." = "outbox.two-probes"

[router]
plugin = "native"

[handlers]
"outbox.two-a" = "hook-probe"
"outbox.two-b" = "hook-probe"

[plugins.capability-policy]

[plugins.hook-probe]
grants = { publish = ["probe."] }
"#;

const PLUGINS: &[&str] = &["capability-policy", "test/hook-probe"];

/// The `probe.seen` children: (dispatch key, queue named in the payload), by key.
async fn children(env: &TestEnv) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT dispatch_key, payload->>'queue' FROM outbox_event
         WHERE event_type = 'probe.seen' ORDER BY dispatch_key",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

/// Retries and dead letters of the handler's runs, from its receipts.
async fn failed_runs(env: &TestEnv) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM outbox_receipt WHERE handler = 'hook-probe' AND result <> 'ok'",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn on_a_cluster_a_handler_bound_to_two_queues_publishes_each_runs_children_under_its_own_keys(
    pool: PgPool,
) {
    let _turn = crate::redis_cluster::CLUSTER.lock().await;
    let env = TestEnv::on_cluster(pool).await;
    let fixture = PluginFixture::new(PLUGINS, ROUTES);
    let host = RunningHost::start(&env, &fixture.config(&env.settings), "two-cluster").await;
    let parent = env
        .publish_all(vec![NewEvent::new("two.created", json!({}))])
        .await[0];
    wait_for(
        "a child of each queue's run",
        Duration::from_secs(30),
        async || children(&env).await.len() == 2,
    )
    .await;
    assert_eq!(
        children(&env).await,
        vec![
            (
                format!("child:{parent}:hook-probe@outbox.two-a:0"),
                "outbox.two-a".to_string()
            ),
            (
                format!("child:{parent}:hook-probe@outbox.two-b:0"),
                "outbox.two-b".to_string()
            ),
        ]
    );
    assert_eq!(failed_runs(&env).await, 0, "neither run was refused");
    host.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn on_one_redis_node_a_handler_bound_to_two_queues_runs_once_and_keeps_its_child_keys(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(PLUGINS, ROUTES);
    let host = RunningHost::start(&env, &fixture.config(&env.settings), "two-node").await;
    let parent = env
        .publish_all(vec![NewEvent::new("two.created", json!({}))])
        .await[0];
    wait_for(
        "the handler's run and its child",
        Duration::from_secs(30),
        async || children(&env).await.len() == 1,
    )
    .await;
    // The other queue's entry finds the handler done (or running) for this event: no second run.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let children = children(&env).await;
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(children[0].0, format!("child:{parent}:hook-probe:0"));
    assert_eq!(failed_runs(&env).await, 0);
    host.stop().await;
    env.cleanup().await;
}
