//! A Redis Cluster (3 primaries with a replica each, on loopback ports started by the test
//! setup, `scripts/redis-cluster.sh`): the dispatcher, the receivers and every Lua script work
//! on it: hand-off, handler claims, successes, retries (retry set, moved back when due),
//! dead letters, kv, receipts. A primary failover while events flow loses and doubles nothing
//! (no hand-off or receipt twice; a handler whose kv call met the failover may run again);
//! a primary killed while events flow loses no hand-off when the sink waits for a replica
//! (`OUTBOX_REDIS_WAIT_REPLICAS=1`).
//! The cluster tests take turns (one at a time): a failover is a change of the whole cluster.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use outbox_host::queue::{KeyLayout, QueueKeys};
use outbox_host::redis_conn::{RedisConn, RedisTarget};
use outbox_host::{publish, NewEvent};
use outbox_tests::{redis_cluster_script, wait_for, PluginFixture, RunningHost, TestEnv};
use redis::AsyncCommands;
use serde_json::json;
use sqlx::PgPool;

/// One cluster test at a time (the cluster tests of other modules take it too).
pub(crate) static CLUSTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const PLUGINS: &[&str] = &["capability-policy", "test/start-probe", "test/retry-probe"];

/// Three queues (their streams in different slots of the cluster): `outbox.cl-a` runs the
/// start probe (a kv counter per start), `outbox.cl-b` and `outbox.cl-c` the retry probe (each
/// event's payload scripts its attempts).
const ROUTES: &str = r#"
[routes]
"cl.a." = "outbox.cl-a"
"cl.b." = "outbox.cl-b"
"cl.c." = "outbox.cl-c"

[router]
plugin = "native"

[handlers]
"outbox.cl-a" = "start-probe"
"outbox.cl-b" = "retry-probe"
"outbox.cl-c" = "retry-probe"

[plugins.capability-policy]

[plugins.start-probe]
grants = { kv = true }

[plugins.retry-probe]
grants = { kv = true }
"#;

const QUEUES: [&str; 3] = ["outbox.cl-a", "outbox.cl-b", "outbox.cl-c"];

fn keys(env: &TestEnv) -> QueueKeys {
    QueueKeys::for_redis_url(&env.settings.redis_prefix, &env.settings.redis_url)
}

/// Receipts by result.
async fn receipts(env: &TestEnv) -> BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "SELECT result, count(*) FROM outbox_receipt GROUP BY result",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

async fn receipt_count(env: &TestEnv) -> i64 {
    receipts(env).await.values().sum()
}

/// The event ids the sink added to `queue`'s stream (a retry adds the entry again, with a
/// handler attempt), checked to be distinct: no event was enqueued twice.
async fn distinct_event_ids(env: &TestEnv, queue: &str) -> HashSet<i64> {
    let ids: Vec<i64> = env
        .entries(queue)
        .await
        .iter()
        .filter(|entry| !entry.contains_key("handler_attempt"))
        .map(|entry| entry["event_id"].parse().unwrap())
        .collect();
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        ids.len(),
        "{queue}: an event was enqueued twice"
    );
    distinct
}

/// `n` events for each queue: `cl.a.*` plain, `cl.b.*` retried once (the handler asks for
/// 200 ms), `cl.c.*` succeeding at once; every tenth `cl.c.*` fails (dead letter).
fn events(n: usize, batch: usize) -> Vec<NewEvent> {
    (0..n)
        .flat_map(|i| {
            let c_steps = if i % 10 == 9 {
                vec!["fail"]
            } else {
                vec!["ok"]
            };
            [
                NewEvent::new("cl.a.work", json!({ "batch": batch, "i": i })),
                NewEvent::new(
                    "cl.b.work",
                    json!({ "attempts": ["retry-after:200", "ok"], "batch": batch, "i": i }),
                ),
                NewEvent::new(
                    "cl.c.work",
                    json!({ "attempts": c_steps, "batch": batch, "i": i }),
                ),
            ]
        })
        .collect()
}

/// The start probe's count of handler starts (its kv key `starts`).
async fn starts(env: &TestEnv) -> i64 {
    let mut conn = env.redis.clone();
    let value: Option<String> = conn
        .get(keys(env).kv("start-probe", "starts"))
        .await
        .unwrap();
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// Give every queue stream a consumer group that never reads, so receivers' housekeeping trims
/// nothing (it keeps what any group still needs) and the tests can count every entry the sink
/// added.
async fn keep_every_entry(env: &TestEnv) {
    let mut conn = env.redis.clone();
    for queue in QUEUES {
        let _: () = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(keys(env).stream(queue))
            .arg("test-audit")
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// What a timed-out wait saw, for its failure message: the events by status, the receipts by
/// result, the first events without a receipt, and each queue's stream, pending entries and
/// retry set.
async fn where_events_stand(env: &TestEnv) -> String {
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM outbox_event GROUP BY status ORDER BY 1")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    let unreceipted: Vec<(i64, String, String, i32)> = sqlx::query_as(
        "SELECT e.id, e.event_type, e.status, e.attempts FROM outbox_event e
         WHERE NOT EXISTS (SELECT 1 FROM outbox_receipt r WHERE r.event_id = e.id)
         ORDER BY e.id LIMIT 10",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let mut report = format!(
        "events by status {statuses:?}, receipts by result {:?}, first events without a receipt (id, type, status, attempts) {unreceipted:?}",
        receipts(env).await
    );
    let mut conn = env.redis.clone();
    for queue in QUEUES {
        let stream = keys(env).stream(queue);
        let length: usize = conn.xlen(&stream).await.unwrap_or(0);
        let pending: redis::Value = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(outbox_host::queue::CONSUMER_GROUP)
            .query_async(&mut conn)
            .await
            .unwrap_or(redis::Value::Nil);
        let retries: usize = conn.zcard(keys(env).retry_set(queue)).await.unwrap_or(0);
        report.push_str(&format!(
            "; {queue}: {length} entries, pending {pending:?}, {retries} waiting to retry"
        ));
    }
    report
}

/// How often a handler may have run: once, or (after a crash lost a recorded outcome) again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HandlerRuns {
    Once,
    AtLeastOnce,
}

/// Everything published went through: every event done, each queue's stream holding each of
/// its events once, every receipt written, every `cl.a` handler started once (or at least
/// once), the `dead` failing `cl.c` events in the dead-letter stream.
async fn assert_all_through(env: &TestEnv, per_queue: i64, dead: i64, runs: HandlerRuns) {
    let total = 3 * per_queue;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let by_result = receipts(env).await;
        if by_result.get("ok").copied().unwrap_or(0) == total - dead
            && by_result.get("dead").copied().unwrap_or(0) == dead
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for every handler's last outcome; {}",
            where_events_stand(env).await
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(receipt_count(env).await, total, "one receipt per event");
    wait_for(
        "every hand-off recorded",
        Duration::from_secs(30),
        async || env.count("done").await == total,
    )
    .await;
    for queue in QUEUES {
        assert_eq!(
            distinct_event_ids(env, queue).await.len() as i64,
            per_queue,
            "{queue}: each event once"
        );
    }
    let by_result = receipts(env).await;
    assert_eq!(
        by_result.get("dead").copied().unwrap_or(0),
        dead,
        "{by_result:?}"
    );
    assert_eq!(
        by_result.get("ok").copied().unwrap_or(0),
        total - dead,
        "{by_result:?}"
    );
    let attempts = match runs {
        HandlerRuns::Once => "attempts = 2",
        HandlerRuns::AtLeastOnce => "attempts >= 2",
    };
    let retried: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM outbox_receipt WHERE queue = 'outbox.cl-b' AND {attempts}"
    ))
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        retried, per_queue,
        "each cl.b event ran twice ({attempts}): a retry, then ok"
    );
    match runs {
        HandlerRuns::Once => assert_eq!(
            starts(env).await,
            per_queue,
            "each cl.a handler started once"
        ),
        HandlerRuns::AtLeastOnce => assert!(
            starts(env).await >= per_queue,
            "each cl.a handler started at least once"
        ),
    }
    let mut conn = env.redis.clone();
    let letters: usize = conn
        .xlen(keys(env).dead_letter_stream("outbox.cl-c"))
        .await
        .unwrap();
    assert_eq!(
        letters as i64, dead,
        "the failed events are in the dead-letter stream"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn events_flow_through_a_redis_cluster_each_handled_once(pool: PgPool) {
    let _turn = CLUSTER.lock().await;
    let env = TestEnv::on_cluster(pool).await;
    assert_eq!(keys(&env).layout(), KeyLayout::Slotted);
    // The three queues' keys really are spread over the cluster.
    let mut conn = env.redis.clone();
    let mut slots = HashSet::new();
    for queue in QUEUES {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(keys(&env).stream(queue))
            .query_async(&mut conn)
            .await
            .unwrap();
        slots.insert(slot);
    }
    assert_eq!(slots.len(), 3, "each queue in a slot of its own");

    keep_every_entry(&env).await;
    let fixture = PluginFixture::new(PLUGINS, ROUTES);
    let running = RunningHost::start(&env, &fixture.config(&env.settings), "cluster-a").await;
    env.publish_all(events(100, 0)).await;
    assert_all_through(&env, 100, 10, HandlerRuns::Once).await;
    running.stop().await;
    env.cleanup().await;
}

/// Publish 20 batches of 15 events per queue, 150 ms apart, in the background.
fn keep_publishing(env: &TestEnv) -> tokio::task::JoinHandle<()> {
    let pool = env.pool.clone();
    tokio::spawn(async move {
        for batch in 0..20 {
            let mut tx = pool.begin().await.unwrap();
            for event in events(15, batch) {
                publish(&mut tx, event).await.unwrap();
            }
            tx.commit().await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    })
}

/// The node (`host:port`) of each primary of the cluster and its replicas.
async fn primaries_and_replicas(env: &TestEnv) -> Vec<(String, Vec<String>)> {
    let mut conn = env.redis.clone();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .unwrap();
    let rows: Vec<Vec<&str>> = nodes
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let address = |row: &Vec<&str>| row[1].split('@').next().unwrap_or_default().to_string();
    rows.iter()
        .filter(|row| row[2].contains("master"))
        .map(|primary| {
            let replicas = rows
                .iter()
                .filter(|row| row[2].contains("slave") && row[3] == primary[0])
                .map(address)
                .collect();
            (address(primary), replicas)
        })
        .collect()
}

/// A plain connection to one node (for the administrative commands of a failover).
async fn node(address: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://{address}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Whether the replica at `address` is connected to its primary and synced.
async fn replica_in_sync(address: &str) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(&mut node(address).await)
        .await
        .unwrap();
    info.lines().any(|l| l.trim() == "master_link_status:up")
}

/// Wait (up to 20 s) until the replica at `replica` is in sync with `primary`: a failover
/// before that finds no replica able to take over.
async fn wait_until_in_sync(replica: &str, primary: &str) {
    wait_for(
        &format!("{replica} in sync with {primary}"),
        Duration::from_secs(20),
        async || replica_in_sync(replica).await,
    )
    .await;
}

async fn role(address: &str) -> String {
    let reply: Vec<redis::Value> = redis::cmd("ROLE")
        .query_async(&mut node(address).await)
        .await
        .unwrap();
    redis::from_redis_value(&reply[0]).unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_primary_failover_while_events_flow_loses_and_doubles_nothing(pool: PgPool) {
    let _turn = CLUSTER.lock().await;
    // The host's log, shown when the test fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info,sqlx=warn")
        .with_test_writer()
        .try_init();
    let env = TestEnv::on_cluster(pool).await;
    keep_every_entry(&env).await;
    let fixture = PluginFixture::new(PLUGINS, ROUTES);
    let running = RunningHost::start(&env, &fixture.config(&env.settings), "cluster-f").await;

    // Events keep coming while every primary in turn hands over to its replica
    // (`CLUSTER FAILOVER` on the replica).
    let publisher = keep_publishing(&env);
    for (primary, replicas) in primaries_and_replicas(&env).await {
        let replica = replicas
            .first()
            .expect("every primary has a replica")
            .clone();
        wait_until_in_sync(&replica, &primary).await;
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async(&mut node(&replica).await)
            .await
            .unwrap();
        wait_for(
            &format!("{replica} takes over from {primary}"),
            Duration::from_secs(20),
            async || role(&replica).await == "master" && role(&primary).await == "slave",
        )
        .await;
    }
    publisher.await.unwrap();
    // 20 batches of 15, one failing `cl.c` event in each. Every hand-off in the streams once,
    // every receipt once. A handler may have run again: in about one run in thirty the
    // client's cluster connection stops answering at a failover until a request on it times
    // out (5 s) and a fresh connection replaces it, and a handler whose kv call waited on it
    // past its time limit is retried (at-least-once delivery).
    assert_all_through(&env, 300, 20, HandlerRuns::AtLeastOnce).await;
    running.stop().await;
    env.cleanup().await;
}

/// The primary serving `slot`, and its replicas.
async fn primary_of_slot(env: &TestEnv, slot: u16) -> (String, Vec<String>) {
    let mut conn = env.redis.clone();
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .unwrap();
    let serving = nodes
        .lines()
        .find(|line| {
            line.split_whitespace().skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<u16>(), high.parse::<u16>()), (Ok(l), Ok(h)) if l <= slot && slot <= h)
            })
        })
        .expect("a node serves every slot");
    let address = serving.split_whitespace().nth(1).unwrap();
    let address = address.split('@').next().unwrap().to_string();
    primaries_and_replicas(env)
        .await
        .into_iter()
        .find(|(primary, _)| *primary == address)
        .expect("the serving node is a primary")
}

#[sqlx::test(migrations = "../migrations")]
async fn a_killed_primary_loses_no_hand_off_when_the_sink_waits_for_a_replica(pool: PgPool) {
    let _turn = CLUSTER.lock().await;
    let mut env = TestEnv::on_cluster(pool).await;
    env.settings.redis_wait_replicas = 1;
    keep_every_entry(&env).await;
    let fixture = PluginFixture::new(PLUGINS, ROUTES);
    let running = RunningHost::start(&env, &fixture.config(&env.settings), "cluster-k").await;

    let publisher = keep_publishing(&env);
    tokio::time::sleep(Duration::from_millis(700)).await;
    // The primary of `outbox.cl-a`'s slot crashes (SIGKILL) while events flow; the cluster
    // promotes its replica; the crashed node comes back and rejoins as a replica.
    let mut conn = env.redis.clone();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(keys(&env).stream("outbox.cl-a"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let (primary, replicas) = primary_of_slot(&env, slot).await;
    let replica = replicas.first().expect("the primary has a replica").clone();
    let port = primary.rsplit(':').next().unwrap().to_string();
    wait_until_in_sync(&replica, &primary).await;
    redis_cluster_script(&["kill", &port]);
    wait_for(
        &format!("{replica} promoted after {primary} crashed"),
        Duration::from_secs(30),
        async || role(&replica).await == "master",
    )
    .await;
    redis_cluster_script(&["revive", &port]);
    wait_for(
        &format!("{primary} back as a replica"),
        Duration::from_secs(30),
        async || role(&primary).await == "slave",
    )
    .await;
    publisher.await.unwrap();
    // Every hand-off in the streams once; a handler whose recorded outcome the crash took may
    // have run again (at-least-once delivery), its receipt written once.
    assert_all_through(&env, 300, 20, HandlerRuns::AtLeastOnce).await;
    running.stop().await;
    env.cleanup().await;
}

/// A request on the host's cluster connection that times out makes a fresh connection take
/// its place, and the next request goes on the fresh one. After a failover under load the
/// client's connection was seen to stop answering for good (every request timing out, while a
/// new connection answered), which stalled the receivers until their lease ran out. Here
/// `CLIENT PAUSE ... WRITE` on the key's primary holds one write past the response timeout;
/// reads, and the fresh connection's `PING` and slot discovery, still answer.
#[sqlx::test(migrations = "../migrations")]
async fn a_cluster_connection_whose_request_times_out_is_replaced_by_a_fresh_one(pool: PgPool) {
    let _turn = CLUSTER.lock().await;
    let env = TestEnv::on_cluster(pool).await;
    let target = RedisTarget::parse(&env.settings.redis_url).unwrap();
    let mut conn = target.shared().await.unwrap();
    let key = format!("{}paused-write", env.prefix);
    let _: () = conn.set(&key, "before").await.unwrap();
    let RedisConn::Cluster(cluster) = conn.clone() else {
        panic!("a cluster URL gives a cluster connection")
    };
    assert_eq!(cluster.replacements(), 0);

    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query_async(&mut env.redis.clone())
        .await
        .unwrap();
    let (primary, _) = primary_of_slot(&env, slot).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(8000)
        .arg("WRITE")
        .query_async(&mut node(&primary).await)
        .await
        .unwrap();
    let held: redis::RedisResult<()> = conn.set(&key, "during").await;
    // The fresh connection is made in the background while the pause still holds writes.
    wait_for(
        "the connection replaced",
        Duration::from_secs(2),
        async || cluster.replacements() == 1,
    )
    .await;
    let _: () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query_async(&mut node(&primary).await)
        .await
        .unwrap();
    let error = held.expect_err("a write held past the response timeout fails");
    assert!(error.is_timeout(), "{error}");

    // Every clone sends on the fresh connection, and it answers.
    let read: String = conn.get(&key).await.unwrap();
    assert!(read == "before" || read == "during", "{read}");
    let _: () = conn.set(&key, "after").await.unwrap();
    let read: String = conn.get(&key).await.unwrap();
    assert_eq!(read, "after");
    assert_eq!(
        cluster.replacements(),
        1,
        "an answered request replaces nothing"
    );
    env.cleanup().await;
}
