//! The pause barrier: once pausing a queue (the library call `outbox queue pause` makes) has
//! returned, no handler call of that queue starts on any live host until it is resumed, and
//! every entry that waited runs exactly once after the resume. Several hosts consume the queue
//! while events flow; the events published after the pause returned are the ones that must
//! not start.

use std::time::Duration;

use outbox_host::queue_pause::QueuePauseControl;
use outbox_host::store::{Operator, Role};
use outbox_host::NewEvent;
use outbox_tests::{wait_for, PluginFixture, RunningHost, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const PLUGINS: &[&str] = &["capability-policy", "test/retry-probe"];

const QUEUE: &str = "outbox.barrier";

/// How many hosts consume the queue.
const HOSTS: usize = 3;

const ROUTES: &str = r#"
[routes]
"barrier." = "outbox.barrier"

[router]
plugin = "native"

[handlers]
"outbox.barrier" = "retry-probe"

[plugins.capability-policy]

[plugins.retry-probe]
grants = { kv = true }
"#;

fn event() -> NewEvent {
    NewEvent::new("barrier.work", json!({ "attempts": ["ok"] }))
}

/// The attempts `retry-probe` recorded for event `id` (`None`: it never started).
async fn attempts(env: &TestEnv, id: i64) -> Option<String> {
    let mut conn = env.redis.clone();
    conn.get(format!("{}outbox:kv:retry-probe:attempts-{id}", env.prefix))
        .await
        .unwrap()
}

/// How many of `ids` the dispatcher has put on their queue.
async fn dispatched(env: &TestEnv, ids: &[i64]) -> usize {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_event WHERE id = ANY($1) AND status = 'done'",
    )
    .bind(ids)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    n as usize
}

/// Publish one event every 10 ms until `stop`; the ids published.
fn flow(env: &TestEnv, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<i64>> {
    let pool = env.pool.clone();
    tokio::spawn(async move {
        let mut ids = Vec::new();
        while !stop.is_cancelled() {
            let mut tx = pool.begin().await.unwrap();
            ids.push(outbox_host::publish(&mut tx, event()).await.unwrap());
            tx.commit().await.unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ids
    })
}

#[sqlx::test(migrations = "../migrations")]
async fn once_a_pause_returns_no_handler_call_starts_on_any_host_until_the_resume(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(PLUGINS, ROUTES);
    let config = fixture.config(&env.settings);
    // Each host on a pool of its own, as separate processes would be.
    let url = env.database_url().await;
    let mut hosts = Vec::new();
    for i in 0..HOSTS {
        let host_env = TestEnv {
            pool: PgPool::connect(&url).await.unwrap(),
            settings: env.settings.clone(),
            prefix: env.prefix.clone(),
            redis: env.redis.clone(),
        };
        hosts.push(RunningHost::start(&host_env, &config, &format!("barrier-{i}")).await);
    }
    let control = QueuePauseControl::connect(&env.settings).await.unwrap();
    let admin = Operator {
        name: "ops".into(),
        role: Role::Admin,
    };
    let mut every_id = Vec::new();
    for round in 0..3 {
        // Events flow and the hosts handle them.
        let stop = CancellationToken::new();
        let flowing = flow(&env, stop.clone());
        tokio::time::sleep(Duration::from_millis(400)).await;

        assert!(control
            .pause(&env.pool, &admin, QUEUE, Some("barrier test"))
            .await
            .unwrap());
        // Published once the pause returned: none of these may start before the resume.
        let after = env.publish_all((0..20).map(|_| event()).collect()).await;
        stop.cancel();
        let before = flowing.await.unwrap();
        assert!(!before.is_empty());
        wait_for(
            "the events published after the pause on the queue",
            Duration::from_secs(20),
            async || dispatched(&env, &after).await == after.len(),
        )
        .await;
        // Longer than any host takes to see the pause row (a second at most).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        for id in &after {
            assert_eq!(
                attempts(&env, *id).await,
                None,
                "round {round}: event {id}, published after the pause returned, was handled before the resume"
            );
        }

        assert!(control.resume(&env.pool, &admin, QUEUE).await.unwrap());
        let round_ids: Vec<i64> = before.into_iter().chain(after).collect();
        wait_for(
            "every event of the round handled after the resume",
            Duration::from_secs(30),
            async || {
                for id in &round_ids {
                    if attempts(&env, *id).await.is_none() {
                        return false;
                    }
                }
                true
            },
        )
        .await;
        every_id.extend(round_ids);
    }
    // Exactly once: one attempt each (an entry held back by the pause is not run twice), and
    // one `ok` receipt each.
    for id in &every_id {
        assert_eq!(
            attempts(&env, *id).await.as_deref(),
            Some("1"),
            "event {id} ran more than once (or in another attempt)"
        );
    }
    wait_for(
        "an ok receipt for every event",
        Duration::from_secs(20),
        async || {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM outbox_receipt WHERE result = 'ok' AND attempts = 1",
            )
            .fetch_one(&env.pool)
            .await
            .unwrap();
            n as usize == every_id.len()
        },
    )
    .await;
    for host in hosts {
        host.stop().await;
    }
}
