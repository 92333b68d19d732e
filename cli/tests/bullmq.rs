//! A real `outbox run` dispatching into BullMQ queues, SIGKILLed while events flow and started
//! again, with the real `bullmq` Worker (interop/bullmq) processing the jobs: every event is
//! processed exactly once, and every event ends `done`.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]
// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use outbox_tests::bullmq_app::{remove_bullmq_prefix, BullmqApp};
use outbox_tests::dispatcher_process::{pool_database_url, spawn_dispatcher};
use sqlx::PgPool;
use tokio::process::Child;

/// `outbox run --dispatcher-only` on `dir/routes.toml`, logging into `log`.
fn start_host(db_url: &str, dir: &std::path::Path, prefix: &str, log: &std::path::Path) -> Child {
    spawn_dispatcher(env!("CARGO_BIN_EXE_outbox"), db_url, dir, prefix, log, &[])
}

#[sqlx::test(migrations = "../migrations")]
async fn a_killed_and_restarted_host_hands_each_event_to_bullmq_workers_exactly_once(pool: PgPool) {
    let db_url = pool_database_url(&pool).await;
    let dir = tempfile::tempdir().unwrap();
    let bull = format!("bullkill-{}", uuid::Uuid::new_v4().simple());
    let host_prefix = format!("test:{}:", uuid::Uuid::new_v4().simple());
    std::fs::write(
        dir.path().join("routes.toml"),
        format!(
            r#"
[routes]
"mail." = "bq.kill"
"order." = ["bq.kill", "bq.kill-audit"]
[router]
plugin = "native"
[queues."bq.kill"]
sink = "bullmq"
bullmq = {{ prefix = "{bull}", attempts = 2 }}
[queues."bq.kill-audit"]
sink = "bullmq"
bullmq = {{ prefix = "{bull}" }}
[policy]
plugin = "deny-all"
"#
        ),
    )
    .unwrap();
    let log = dir.path().join("host.log");
    let mut app = BullmqApp::start(&bull, &["bq.kill", "bq.kill-audit"], true).await;
    let mut host = start_host(&db_url, dir.path(), &host_prefix, &log);

    // Producers commit 3,000 events (a fifth of them fan out to two queues) in batches while
    // the host is SIGKILLed twice and started again.
    const EVENTS: i64 = 3000;
    let mut kills = 0;
    for batch in 0..30 {
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload) SELECT CASE WHEN g % 5 = 0 THEN 'order.placed' ELSE 'mail.welcome' END, jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g",
        )
        .bind(batch * 100 + 1)
        .bind(batch * 100 + 100)
        .execute(&pool)
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        if batch == 10 || batch == 20 {
            host.start_kill().unwrap();
            host.wait().await.unwrap();
            kills += 1;
            tokio::time::sleep(Duration::from_millis(300)).await;
            host = start_host(&db_url, dir.path(), &host_prefix, &log);
        }
    }
    assert_eq!(kills, 2);

    let start = Instant::now();
    loop {
        let done: i64 =
            sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'done'")
                .fetch_one(&pool)
                .await
                .unwrap();
        if done == EVENTS {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{done} of {EVENTS} done; host log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids: Vec<(i64, String)> = sqlx::query_as("SELECT id, event_type FROM outbox_event")
        .fetch_all(&pool)
        .await
        .unwrap();
    let mut expected: HashMap<(String, String), usize> = HashMap::new();
    for (id, event_type) in &ids {
        expected.insert(("bq.kill".into(), format!("outbox-{id}")), 1);
        if event_type == "order.placed" {
            expected.insert(("bq.kill-audit".into(), format!("outbox-{id}")), 1);
        }
    }
    let total = expected.len();
    app.wait_for("every job processed", Duration::from_secs(60), |seen| {
        seen.iter().filter(|v| v["kind"] == "processed").count() >= total
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.poll();
    let counts = app.processed_counts();
    let doubled: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(doubled.is_empty(), "processed more than once: {doubled:?}");
    assert_eq!(counts, expected, "each job processed once");
    let recovered: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE attempts > 1")
        .fetch_one(&pool)
        .await
        .unwrap();
    eprintln!(
        "{EVENTS} events, {total} jobs, each processed once across {kills} kills; {recovered} events were claimed again after a killed host's lease"
    );

    host.start_kill().unwrap();
    let _ = host.wait().await;
    app.quit().await;
    let mut conn = redis::Client::open(outbox_tests::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    remove_bullmq_prefix(&mut conn, &bull).await;
    remove_bullmq_prefix(&mut conn, host_prefix.trim_end_matches(':')).await;
}
