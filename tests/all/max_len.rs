//! A stream queue grows only below what its consumer groups acknowledged, unless its table says
//! `max_len`: then it stays near that length, and what the trim dropped before a group read or
//! acknowledged it is counted exactly, per group, where `outbox stats` reads it.

use std::sync::Arc;

use arc_swap::ArcSwap;
use outbox_host::config::RoutesFile;
use outbox_host::dispatch::Dispatcher;
use outbox_host::queue::{queue_backlogs, QueueKeys};
use outbox_host::routing::RouterHandle;
use outbox_host::sink::QueueSinks;
use outbox_tests::TestEnv;
use redis::AsyncCommands;
use sqlx::PgPool;

const ROUTES: &str = r#"
[routes]
"bulk." = "outbox.bulk"
"keep." = "outbox.keep"

[router]
plugin = "native"

[queues."outbox.bulk"]
max_len = 1000
"#;

async fn dispatch_all(env: &TestEnv, routes: &RoutesFile) {
    let live = Arc::new(ArcSwap::from_pointee(routes.clone()));
    let sinks = QueueSinks::connect(&env.settings, live).await.unwrap();
    let dispatcher = Dispatcher::new(
        env.pool.clone(),
        sinks,
        RouterHandle::new(routes.route_table()),
        Arc::new(env.settings.clone()),
        "max-len-host",
    );
    dispatcher.drain().await.unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_queue_with_max_len_stays_near_it_and_counts_what_its_consumers_had_not_finished(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let routes = RoutesFile::parse(ROUTES, std::path::Path::new("routes.toml")).unwrap();
    let keys = QueueKeys::new(&env.settings.redis_prefix);
    let bulk = keys.stream("outbox.bulk");
    let mut conn = env.redis.clone();
    // A slow consumer group: it reads 300 entries and acknowledges the first 100.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&bulk)
        .arg("outbox")
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    env.insert_many("bulk.item", 400).await;
    env.insert_many("keep.item", 1500).await;
    dispatch_all(&env, &routes).await;
    let read: redis::streams::StreamReadReply = conn
        .xread_options(
            &[&bulk],
            &[">"],
            &redis::streams::StreamReadOptions::default()
                .group("outbox", "slow")
                .count(300),
        )
        .await
        .unwrap();
    let read: Vec<String> = read.keys[0].ids.iter().map(|e| e.id.clone()).collect();
    assert_eq!(read.len(), 300);
    let acked: i64 = conn.xack(&bulk, "outbox", &read[..100]).await.unwrap();
    assert_eq!(acked, 100);

    // 1,100 more: 1,500 in all through a queue kept near 1,000.
    env.insert_many("bulk.item", 1100).await;
    dispatch_all(&env, &routes).await;
    assert_eq!(env.count("done").await, 3000, "every event handed off");
    let len: u64 = conn.xlen(&bulk).await.unwrap();
    assert!(
        (1000..1100).contains(&len),
        "the stream is kept near max_len: {len}"
    );
    let trimmed = 1500 - len;
    // The oldest went first: 100 acknowledged, 200 read and not acknowledged, the rest unread.
    let counts: std::collections::HashMap<String, u64> =
        conn.hgetall(keys.trimmed("outbox.bulk")).await.unwrap();
    assert_eq!(counts.get("trimmed"), Some(&trimmed), "{counts:?}");
    assert_eq!(counts.get("outbox:unacked"), Some(&200), "{counts:?}");
    assert_eq!(
        counts.get("outbox:unread"),
        Some(&(trimmed - 300)),
        "{counts:?}"
    );

    // Without max_len nothing is trimmed, however long the stream grows.
    let keep: u64 = conn.xlen(keys.stream("outbox.keep")).await.unwrap();
    assert_eq!(keep, 1500);
    let keep_counts: std::collections::HashMap<String, u64> =
        conn.hgetall(keys.trimmed("outbox.keep")).await.unwrap();
    assert!(keep_counts.is_empty());

    // What outbox stats reads: the counts and each stream's memory.
    let queues = vec!["outbox.bulk".to_string(), "outbox.keep".to_string()];
    let backlogs = queue_backlogs(&mut conn, &keys, &routes, &queues)
        .await
        .unwrap();
    let bulk_backlog = &backlogs[0];
    let shown = bulk_backlog.trimmed.as_ref().expect("trim counts shown");
    assert_eq!(shown.entries, trimmed);
    assert_eq!(shown.unacked.get("outbox"), Some(&200));
    assert_eq!(shown.unread.get("outbox"), Some(&(trimmed - 300)));
    assert!(bulk_backlog.memory_bytes.unwrap_or(0) > 10_000);
    assert!(backlogs[1].trimmed.is_none());
    assert!(backlogs[1].memory_bytes.unwrap_or(0) > 10_000);
}

#[test]
fn max_len_is_bounded_and_refused_on_bullmq_queues() {
    let parse = |extra: &str| {
        RoutesFile::parse(
            &format!("[router]\nplugin = \"native\"\n{extra}"),
            std::path::Path::new("routes.toml"),
        )
    };
    parse("[queues.\"q.a\"]\nmax_len = 1000\n").unwrap();
    let err = parse("[queues.\"q.a\"]\nmax_len = 10\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_len = 10 is out of range"), "{err}");
    let err = parse("[queues.\"q.a\"]\nsink = \"bullmq\"\nmax_len = 5000\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_len applies to streams queues"), "{err}");
}
