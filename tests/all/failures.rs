//! Outages and bad input: a dead Redis, a CLI given nonsense.

use std::time::Duration;

use outbox_host::NewEvent;
use outbox_tests::{OutageProxy, TestEnv};
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = "../migrations")]
async fn redis_down_events_are_put_back_uncounted_and_all_arrive_once_it_answers(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let proxy = OutageProxy::redis().await;
    env.settings.redis_url = proxy.redis_url();
    let dispatcher = env.dispatcher("w1").await;
    let ids = env
        .publish_all(
            (0..30)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;

    proxy.cut();
    for _ in 0..3 {
        // Redis is away: not the events' fault. Each try puts them back, due at once, with the
        // attempt not counted and nothing on the event backoff.
        let report = dispatcher.drain().await.unwrap();
        assert!(report.redis_unavailable);
        assert_eq!((report.released, report.retried, report.failed), (30, 0, 0));
        let rows: Vec<(String, i32, f64, Option<String>)> = sqlx::query_as(
            "SELECT status, attempts, extract(epoch FROM available_at - now())::float8, last_error FROM outbox_event ORDER BY id",
        )
        .fetch_all(&env.pool)
        .await
        .unwrap();
        for (status, attempts, due_in, err) in &rows {
            assert_eq!((status.as_str(), *attempts), ("pending", 0));
            assert!(*due_in <= 0.0, "due at once, got {due_in}");
            assert!(err.as_deref().unwrap().contains("redis"), "{err:?}");
        }
    }

    proxy.restore().await;
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
    let max_attempts: i32 = sqlx::query_scalar("SELECT max(attempts) FROM outbox_event")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(max_attempts, 1, "only the attempt that succeeded counts");
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn retries_run_out_into_failed_with_the_last_error(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.max_retries = 2;
    let dispatcher = env.dispatcher("w1").await;
    let id = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    // The event's own fault: Redis refuses its entry (the stream key holds a string).
    let mut conn = env.redis.clone();
    let _: () = redis::AsyncCommands::set(&mut conn, format!("{}outbox.mail", env.prefix), "x")
        .await
        .unwrap();
    for attempt in 1..=3 {
        env.make_all_due().await;
        dispatcher.drain().await.unwrap();
        let (status, attempts, _) = env.status(id).await;
        assert_eq!(attempts, attempt);
        assert_eq!(status, if attempt <= 2 { "pending" } else { "failed" });
    }
    let (_, _, err) = env.status(id).await;
    let err = err.unwrap();
    assert!(err.starts_with("gave up after 3 attempts: "), "{err}");
    assert!(err.contains("WRONGTYPE"), "{err}");
    env.cleanup().await;
}

/// A queue's hand-offs go to Redis in one script call; an entry Redis refuses inside it (its
/// enqueue marker key holds a hash) fails alone: the others of the same call are handed off
/// once and done.
#[sqlx::test(migrations = "../migrations")]
async fn an_entry_refused_among_its_queues_batch_fails_alone(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let dispatcher = env.dispatcher("w1").await;
    let ids = env
        .publish_all(
            (0..5)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;
    let refused = ids[2];
    let marker =
        outbox_host::queue::QueueKeys::new(&env.prefix).enqueued_marker("outbox.mail", refused);
    let mut conn = env.redis.clone();
    let _: () = redis::AsyncCommands::hset(&mut conn, &marker, "not", "a marker")
        .await
        .unwrap();
    dispatcher.drain().await.unwrap();
    let others: Vec<i64> = ids.iter().copied().filter(|id| *id != refused).collect();
    assert_eq!(
        env.event_ids("outbox.mail").await,
        others,
        "each other entry once"
    );
    for id in &others {
        assert_eq!(env.status(*id).await.0, "done");
    }
    let (status, attempts, error) = env.status(refused).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1), "{error:?}");
    let error = error.unwrap();
    assert!(
        error.contains("WRONGTYPE") && error.contains(&refused.to_string()),
        "{error}"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn postgres_down_mid_run_dispatcher_retries_then_delivers(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(100);
    let proxy = OutageProxy::postgres().await;
    let url = proxy.postgres_url(&env.database_url().await);
    // The dispatcher reaches PostgreSQL only through the proxy; the test uses its own pool.
    let proxied = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&url)
        .await
        .unwrap();
    let dispatcher = outbox_host::dispatch::Dispatcher::new(
        proxied,
        env.sink().await,
        outbox_host::routing::RouterHandle::new(TestEnv::default_table()),
        std::sync::Arc::new(env.settings.clone()),
        "w1",
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    proxy.cut();
    let ids = env
        .publish_all(
            (0..10)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        env.count("done").await,
        0,
        "nothing moves while PostgreSQL is unreachable"
    );
    assert!(
        !task.is_finished(),
        "the dispatcher keeps retrying, it does not exit or panic"
    );

    proxy.restore().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    while env.count("done").await < 10 {
        assert!(
            std::time::Instant::now() < deadline,
            "events not delivered after PostgreSQL came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(env.event_ids("outbox.mail").await, ids, "every event, once");
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn lost_listen_connection_is_re_established(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_secs(60);
    let dispatcher = env.dispatcher("w1").await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    )
    .bind(&db)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(killed, vec![true], "one LISTEN connection was killed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let id = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    let start = std::time::Instant::now();
    while env.status(id).await.0 != "done" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "NOTIFY no longer wakes the dispatcher (poll interval is 60 s)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn retention_deletes_old_done_rows_and_keeps_failed_ones(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, processed_at) SELECT 'mail.old', '{}'::jsonb, s, now() - interval '31 days' FROM unnest(ARRAY['done', 'done', 'done', 'failed', 'cancelled']) s",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO outbox_event (event_type, payload, status, processed_at) VALUES ('mail.new', '{}', 'done', now())")
        .execute(&env.pool)
        .await
        .unwrap();
    let deleted =
        outbox_host::store::purge_done_events(&env.pool, Duration::from_secs(720 * 3600), 2)
            .await
            .unwrap();
    assert_eq!(deleted, 3, "old done rows go, in batches of 2");
    let left: Vec<String> = sqlx::query_scalar("SELECT status FROM outbox_event ORDER BY id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        ["failed", "cancelled", "done"],
        "failed and cancelled rows are kept, recent done rows too"
    );
}
