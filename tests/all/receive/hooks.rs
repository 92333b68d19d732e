//! `plugin-hook` on the receivers: a hook reaches each subscribed plugin once, and a failing
//! subscriber is retried alone, without redoing the others.

use std::time::Duration;

use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

use super::{receipts, routes, start, test_env_settings, wait_for, PLUGINS};

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
