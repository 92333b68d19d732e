//! The receivers' maintenance services, each one round at a time through its `run_once`: due
//! retries moved back into the stream, entries held past the lease reclaimed, acknowledged
//! entries trimmed, a dead host's entries taken over.

use std::time::Duration;

use outbox_host::queue::{marker_running, QueueKeys, CONSUMER_GROUP};
use outbox_host::receive::{DeadHostTakeover, Reclaimer, RetryMover, StreamTrimmer};
use outbox_host::redis_conn::RedisConn;
use outbox_tests::TestEnv;
use redis::AsyncCommands;
use sqlx::PgPool;

const QUEUE: &str = "outbox.chores";

/// `env`'s keys, with `QUEUE`'s consumer group made.
async fn keys_with_group(env: &TestEnv) -> QueueKeys {
    let keys = QueueKeys::new(env.prefix.clone());
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(keys.stream(QUEUE))
        .arg(CONSUMER_GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut env.redis.clone())
        .await
        .unwrap();
    keys
}

/// Append an entry of event `event_id` to `QUEUE`'s stream; its id.
async fn add(conn: &RedisConn, keys: &QueueKeys, event_id: i64) -> String {
    conn.clone()
        .xadd(
            keys.stream(QUEUE),
            "*",
            &[("event_id", event_id.to_string())],
        )
        .await
        .unwrap()
}

/// Read every new entry of `QUEUE` as `consumer` (they are pending for it then).
async fn read_as(conn: &RedisConn, keys: &QueueKeys, consumer: &str) -> usize {
    let reply: redis::streams::StreamReadReply = conn
        .clone()
        .xread_options(
            &[keys.stream(QUEUE)],
            &[">"],
            &redis::streams::StreamReadOptions::default().group(CONSUMER_GROUP, consumer),
        )
        .await
        .unwrap();
    reply.keys.iter().map(|k| k.ids.len()).sum()
}

/// The consumer each pending entry of `QUEUE` is pending for, by entry id.
async fn pending_for(conn: &RedisConn, keys: &QueueKeys) -> Vec<(String, String)> {
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(keys.stream(QUEUE))
        .arg(CONSUMER_GROUP)
        .arg("-")
        .arg("+")
        .arg(100)
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    pending.into_iter().map(|(id, c, _, _)| (id, c)).collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn the_retry_mover_moves_due_retries_back_into_the_stream_and_leaves_later_ones(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let keys = QueueKeys::new(env.prefix.clone());
    let mut conn = env.redis.clone();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let member = |id: i64| serde_json::to_string(&["event_id", id.to_string().as_str()]).unwrap();
    let _: () = conn
        .zadd(keys.retry_set(QUEUE), member(1), now_ms - 1_000)
        .await
        .unwrap();
    let _: () = conn
        .zadd(keys.retry_set(QUEUE), member(2), now_ms + 60_000)
        .await
        .unwrap();

    let mover = RetryMover::new(env.redis.clone(), keys.clone());
    assert_eq!(mover.run_once(QUEUE).await.unwrap(), 1);
    let stream: redis::streams::StreamRangeReply =
        conn.xrange_all(keys.stream(QUEUE)).await.unwrap();
    assert_eq!(stream.ids.len(), 1);
    assert_eq!(
        stream.ids[0].get::<String>("event_id").as_deref(),
        Some("1")
    );
    let waiting: usize = conn.zcard(keys.retry_set(QUEUE)).await.unwrap();
    assert_eq!(waiting, 1, "the retry due in a minute waits");
    assert_eq!(
        mover.run_once(QUEUE).await.unwrap(),
        0,
        "nothing more is due"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn the_reclaimer_takes_only_entries_held_past_the_lease(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let keys = keys_with_group(&env).await;
    let first = add(&env.redis, &keys, 1).await;
    assert_eq!(read_as(&env.redis, &keys, "stalled").await, 1);

    let patient = Reclaimer::new(
        env.redis.clone(),
        keys.clone(),
        "patient".into(),
        Duration::from_secs(60),
    );
    assert!(
        patient.run_once(QUEUE).await.unwrap().is_empty(),
        "held for less than the lease"
    );

    tokio::time::sleep(Duration::from_millis(150)).await;
    let reclaimer = Reclaimer::new(
        env.redis.clone(),
        keys.clone(),
        "heir".into(),
        Duration::from_millis(100),
    );
    let reclaimed = reclaimer.run_once(QUEUE).await.unwrap();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].stream_id, first);
    assert_eq!(reclaimed[0].event_id(), Some(1));
    assert_eq!(
        pending_for(&env.redis, &keys).await,
        vec![(first, "heir".to_string())]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn the_trimmer_trims_what_every_group_acknowledged_and_nothing_else(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let keys = QueueKeys::new(env.prefix.clone());
    let trimmer = StreamTrimmer::new(env.redis.clone(), keys.clone());
    let oldest = add(&env.redis, &keys, 0).await;
    assert_eq!(
        trimmer.run_once(QUEUE).await.unwrap(),
        0,
        "a stream nobody consumes is never trimmed"
    );

    let keys = keys_with_group(&env).await;
    let ids = [
        add(&env.redis, &keys, 1).await,
        add(&env.redis, &keys, 2).await,
    ];
    assert_eq!(read_as(&env.redis, &keys, "c").await, 3);
    let mut conn = env.redis.clone();
    let _: i64 = conn
        .xack(keys.stream(QUEUE), CONSUMER_GROUP, &[&ids[0]])
        .await
        .unwrap();
    // The oldest entry is still pending: it holds the floor, nothing goes.
    assert_eq!(trimmer.run_once(QUEUE).await.unwrap(), 0);
    let _: i64 = conn
        .xack(keys.stream(QUEUE), CONSUMER_GROUP, &[&oldest])
        .await
        .unwrap();
    assert_eq!(
        trimmer.run_once(QUEUE).await.unwrap(),
        2,
        "everything below the oldest pending entry"
    );
    let left: usize = conn.xlen(keys.stream(QUEUE)).await.unwrap();
    assert_eq!(left, 1, "the pending entry stays");
}

#[sqlx::test(migrations = "../migrations")]
async fn the_takeover_takes_a_dead_hosts_entries_unless_its_claim_is_still_renewed(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let keys = keys_with_group(&env).await;
    let lease = Duration::from_secs(1);
    let takeover = |consumer: &str| {
        DeadHostTakeover::new(
            env.pool.clone(),
            env.redis.clone(),
            keys.clone(),
            consumer.to_string(),
            lease,
        )
    };
    let unclaimed = add(&env.redis, &keys, 1).await;
    let renewed = add(&env.redis, &keys, 2).await;
    assert_eq!(read_as(&env.redis, &keys, "dead-host").await, 2);
    let alive = add(&env.redis, &keys, 3).await;
    assert_eq!(read_as(&env.redis, &keys, "live-host").await, 1);
    // The dead host renewed its claim on event 2 just now (a host that lost only PostgreSQL).
    let _: () = redis::cmd("SET")
        .arg(keys.handled_marker(QUEUE, "h", 2))
        .arg(marker_running("dead-host:00000000000000aa"))
        .arg("PX")
        .arg(60_000)
        .query_async(&mut env.redis.clone())
        .await
        .unwrap();
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    assert!(
        takeover("heir")
            .run_once(QUEUE, "h")
            .await
            .unwrap()
            .is_empty(),
        "no host's heartbeat stopped yet"
    );

    env.host_last_seen("dead-host", Duration::from_secs(100))
        .await;
    env.host_last_seen("live-host", Duration::ZERO).await;
    let taken = takeover("heir").run_once(QUEUE, "h").await.unwrap();
    assert_eq!(
        taken
            .iter()
            .map(|e| e.stream_id.clone())
            .collect::<Vec<_>>(),
        vec![unclaimed.clone()]
    );
    let mut pending = pending_for(&env.redis, &keys).await;
    pending.sort();
    assert_eq!(
        pending,
        vec![
            (unclaimed, "heir".to_string()),
            (renewed, "dead-host".to_string()),
            (alive, "live-host".to_string()),
        ]
    );
}
