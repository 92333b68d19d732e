//! Handlers that fail: an ungranted capability is denied, audited and writes nothing; a handler
//! that always fails dead-letters its entry, and a replay after the fix delivers it.

use std::time::Duration;

use outbox_host::receive::DeadLetters;
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

use super::{receipts, routes, start, test_env_settings, wait_for, PLUGINS};

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
