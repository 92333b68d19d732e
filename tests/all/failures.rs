//! Outages and bad input: a dead Redis, a CLI given nonsense.

use std::time::Duration;

use outbox_host::NewEvent;
use outbox_tests::{RedisProxy, TestEnv};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = "../migrations")]
async fn redis_down_events_wait_and_retry_then_all_arrive(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let proxy = RedisProxy::start().await;
    env.settings.redis_url = proxy.url();
    let dispatcher = env.dispatcher("w1").await;
    let ids = env
        .publish_all(
            (0..30)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;

    proxy.cut();
    let first = dispatcher.drain().await.unwrap();
    assert!(first.redis_unavailable);
    assert_eq!(first.retried, 30);
    let rows: Vec<(String, i32, f64, Option<String>)> = sqlx::query_as(
        "SELECT status, attempts, extract(epoch FROM available_at - now())::float8, last_error FROM outbox_event ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    for (status, attempts, due_in, err) in &rows {
        assert_eq!((status.as_str(), *attempts), ("pending", 1));
        assert!(
            (0.0..=1.0).contains(due_in),
            "backoff after attempt 1 is 1 s, got {due_in}"
        );
        assert!(err.as_deref().unwrap().contains("redis"), "{err:?}");
    }
    // Not due yet: a drain claims nothing.
    assert_eq!(dispatcher.drain().await.unwrap().claimed, 0);

    // Second failed attempt: backoff 2 s.
    env.make_all_due().await;
    dispatcher.drain().await.unwrap();
    let (attempts, due_in): (i32, f64) = sqlx::query_as(
        "SELECT max(attempts), min(extract(epoch FROM available_at - now()))::float8 FROM outbox_event",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 2);
    assert!(
        (1.0..=2.0).contains(&due_in),
        "backoff after attempt 2 is 2 s, got {due_in}"
    );

    proxy.restore().await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let mut done = 0;
    for _ in 0..20 {
        done += dispatcher.drain().await.unwrap().done;
        if done == 30 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(done, 30, "all events arrive once Redis is back");
    assert_eq!(env.event_ids("outbox.mail").await, ids);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn retries_run_out_into_failed_with_the_last_error(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.max_retries = 2;
    let proxy = RedisProxy::start().await;
    env.settings.redis_url = proxy.url();
    let dispatcher = env.dispatcher("w1").await;
    let id = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    proxy.cut();
    for attempt in 1..=3 {
        env.make_all_due().await;
        dispatcher.drain().await.unwrap();
        let (status, attempts, _) = env.status(id).await;
        assert_eq!(attempts, attempt);
        assert_eq!(status, if attempt <= 2 { "pending" } else { "failed" });
    }
    let (_, _, err) = env.status(id).await;
    assert!(err.unwrap().starts_with("gave up after 3 attempts: "));
    env.cleanup().await;
}
