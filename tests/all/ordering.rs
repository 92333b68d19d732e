//! Per-key ordering: events of one ordering key reach each of their queues in id order, across
//! dispatchers, retries and fan-out; receivers of a queue marked ordered run one entry of a key
//! at a time, in order, a retried entry holding its key until it is done.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::Receivers;
use outbox_host::routing::{RouteDecision, Router, RouterError, RouterHandle};
use outbox_host::store::{self, ClaimedEvent};
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Queue every test event goes to.
const QUEUE_A: &str = "outbox.ordered-a";
/// Second queue of the events that fan out (those of even keys).
const QUEUE_B: &str = "outbox.ordered-b";

/// Routes events of even keys to both queues (fan-out) and the others to [`QUEUE_A`]; fails
/// the first dispatch attempt of every 13th event and the first two of every 97th (a routing
/// error: the event's own fault, retried with backoff).
struct FlakyOrderedRouter;

impl Router for FlakyOrderedRouter {
    fn name(&self) -> &str {
        "flaky-ordered"
    }

    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError> {
        Ok(events
            .iter()
            .map(|event| {
                let fails_for = match event.id {
                    id if id % 97 == 0 => 2,
                    id if id % 13 == 0 => 1,
                    _ => 0,
                };
                if event.attempts <= fails_for {
                    return RouteDecision::Error(format!(
                        "injected failure of event {} on attempt {}",
                        event.id, event.attempts
                    ));
                }
                let even_key = event
                    .ordering_key
                    .as_deref()
                    .and_then(|k| k.strip_prefix("key-"))
                    .and_then(|n| n.parse::<u32>().ok())
                    .is_some_and(|n| n % 2 == 0);
                let mut queues = vec![QUEUE_A.to_string()];
                if even_key {
                    queues.push(QUEUE_B.to_string());
                }
                RouteDecision::Queues(queues)
            })
            .collect())
    }
}

/// Routes every event to `outbox.mail`, failing (a routing error) those in `refused`.
struct Refusing {
    refused: Arc<Mutex<HashSet<i64>>>,
}

impl Router for Refusing {
    fn name(&self) -> &str {
        "refusing"
    }

    fn route_batch(&self, events: &[ClaimedEvent]) -> Result<Vec<RouteDecision>, RouterError> {
        let refused = self.refused.lock().unwrap();
        Ok(events
            .iter()
            .map(|event| match refused.contains(&event.id) {
                true => RouteDecision::Error(format!("event {} refused", event.id)),
                false => RouteDecision::Queues(vec!["outbox.mail".into()]),
            })
            .collect())
    }
}

/// The event ids of each ordering key in `queue`'s stream, in stream order.
async fn ids_per_key(
    env: &TestEnv,
    queue: &str,
    key_of: &HashMap<i64, String>,
) -> BTreeMap<String, Vec<i64>> {
    let mut per_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for id in env.event_ids(queue).await {
        per_key.entry(key_of[&id].clone()).or_default().push(id);
    }
    per_key
}

#[sqlx::test(migrations = "../migrations")]
async fn per_key_order_kept_with_two_dispatchers_and_failures(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_batch_size = 50;
    env.settings.backoff = vec![Duration::from_millis(50)];
    // 10,000 events over 100 keys, the keys in a scrambled order.
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, ordering_key) SELECT 'ordered.test', jsonb_build_object('n', g), 'key-' || ((g * g + 3 * g) % 100) FROM generate_series(1, 10000) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let key_of: HashMap<i64, String> = sqlx::query_as("SELECT id, ordering_key FROM outbox_event")
        .fetch_all(&env.pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(key_of.len(), 10_000);

    let router = RouterHandle::new(FlakyOrderedRouter);
    let a = env.dispatcher_routed_by("racer-a", router.clone()).await;
    let b = env.dispatcher_routed_by("racer-b", router).await;
    let (stats_a, stats_b) = (a.stats(), b.stats());
    let shutdown = CancellationToken::new();
    let tasks = [
        tokio::spawn(a.run(shutdown.clone())),
        tokio::spawn(b.run(shutdown.clone())),
    ];
    let deadline = Instant::now() + Duration::from_secs(180);
    while env.count("done").await < 10_000 {
        assert!(
            Instant::now() < deadline,
            "not all dispatched: {} done",
            env.count("done").await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    for task in tasks {
        task.await.unwrap();
    }
    let done = |s: &outbox_host::dispatch::DispatchStats| {
        s.done.load(std::sync::atomic::Ordering::Relaxed)
    };
    let retried = |s: &outbox_host::dispatch::DispatchStats| {
        s.retried.load(std::sync::atomic::Ordering::Relaxed)
    };
    assert!(
        done(&stats_a) > 0 && done(&stats_b) > 0,
        "both dispatchers took part"
    );
    let injected = (1..=10_000)
        .map(|id: i64| match id {
            id if id % 97 == 0 => 2,
            id if id % 13 == 0 => 1,
            _ => 0,
        })
        .sum::<u64>();
    assert_eq!(
        retried(&stats_a) + retried(&stats_b),
        injected,
        "every injected failure was retried"
    );

    // Every key's entries come in id order on each queue, none lost or doubled.
    for queue in [QUEUE_A, QUEUE_B] {
        let per_key = ids_per_key(&env, queue, &key_of).await;
        let mut expected: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        let mut ids: Vec<&i64> = key_of.keys().collect();
        ids.sort();
        for id in ids {
            let key = &key_of[id];
            let fans_out = key
                .strip_prefix("key-")
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n % 2 == 0);
            if queue == QUEUE_A || fans_out {
                expected.entry(key.clone()).or_default().push(*id);
            }
        }
        assert_eq!(per_key.len(), expected.len(), "{queue}: keys");
        for (key, want) in &expected {
            assert_eq!(
                per_key.get(key),
                Some(want),
                "{queue}: the entries of {key} are not exactly its events in id order"
            );
        }
    }
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_retrying_event_holds_back_its_key_while_other_keys_flow_and_stats_show_it(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.backoff = vec![Duration::from_secs(60)];
    let keyed = |key: &str, i: i32| {
        NewEvent::new("mail.welcome", json!({"i": i})).with_ordering_key(key.to_string())
    };
    let ids = env
        .publish_all(vec![
            keyed("stuck", 1),
            keyed("free", 1),
            keyed("stuck", 2),
            keyed("free", 2),
            keyed("stuck", 3),
            NewEvent::new("mail.welcome", json!({"unkeyed": true})),
        ])
        .await;
    // The head of "stuck" fails (its route fails until told otherwise).
    let refused = Arc::new(Mutex::new(HashSet::from([ids[0]])));
    let dispatcher = env
        .dispatcher_routed_by(
            "w1",
            RouterHandle::new(Refusing {
                refused: refused.clone(),
            }),
        )
        .await;
    // The first claim takes the head of each key and the unkeyed event; then "free" goes on,
    // while the later events of "stuck" wait.
    let report = dispatcher.drain().await.unwrap();
    assert_eq!(report.retried, 1, "{report:?}");
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![ids[1], ids[5], ids[3]],
        "the other key and the unkeyed event flowed"
    );
    let (status, attempts, _) = env.status(ids[0]).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    for later in [ids[2], ids[4]] {
        assert_eq!(env.status(later).await, ("pending".into(), 0, None));
    }

    let blocked = store::ordering_blocked(&env.pool, 10).await.unwrap();
    assert_eq!(blocked.blocked_keys, 1);
    assert_eq!(blocked.held_back_events, 2);
    assert!(blocked.oldest_blocked_seconds.is_some_and(|s| s >= 0.0));
    assert_eq!(blocked.keys.len(), 1);
    assert_eq!(blocked.keys[0].ordering_key, "stuck");
    assert_eq!(blocked.keys[0].head_id, ids[0]);
    assert!(blocked.keys[0].retry_in_seconds > 30.0);
    // Nothing is due that could be claimed: the dispatcher sleeps until the retry, not 10 ms.
    assert!(
        store::time_until_next_due(&env.pool, store::ClaimHorizon::everything())
            .await
            .unwrap()
            .is_some_and(|d| d > Duration::from_secs(30))
    );

    // The head's retry comes due and goes through: the key's later events follow, in order.
    refused.lock().unwrap().clear();
    env.make_all_due().await;
    for _ in 0..3 {
        dispatcher.drain().await.unwrap();
    }
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![ids[1], ids[5], ids[3], ids[0], ids[2], ids[4]]
    );
    let blocked = store::ordering_blocked(&env.pool, 10).await.unwrap();
    assert_eq!(blocked, store::OrderingBlocked::default());
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_failed_earlier_event_no_longer_holds_back_its_key(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let keyed = |type_: &str, i: i32| {
        NewEvent::new(type_, json!({"i": i})).with_ordering_key("k".to_string())
    };
    let ids = env
        .publish_all(vec![keyed("nowhere.at-all", 1), keyed("mail.welcome", 2)])
        .await;
    let dispatcher = env.dispatcher("w1").await;
    for _ in 0..2 {
        dispatcher.drain().await.unwrap();
    }
    assert_eq!(env.status(ids[0]).await.0, "failed", "no route");
    assert_eq!(env.event_ids("outbox.mail").await, vec![ids[1]]);
    env.cleanup().await;
}

/// Routes of the receiver test: `probe.` events to an ordered queue run by `ordered-probe`.
const PROBE_ROUTES: &str = r#"
[routes]
"probe." = "outbox.probe"

[router]
plugin = "native"

[handlers]
"outbox.probe" = "ordered-probe"

[queues."outbox.probe"]
ordered = true

[policy]
plugin = "capability-policy"
publish_denials = false

[plugins.capability-policy]

[plugins.ordered-probe]
timeout_ms = 2000
grants = { kv = true }
"#;

#[sqlx::test(migrations = "../migrations")]
async fn an_ordered_queue_runs_one_entry_of_a_key_at_a_time_in_order_across_retries(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_secs(8);
    env.settings.handler_backoff = vec![Duration::from_millis(200)];
    env.settings.handler_max_retries = 3;
    let fixture = PluginFixture::new(&["capability-policy", "test/ordered-probe"], PROBE_ROUTES);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env
        .dispatcher_routed_by("probe-dispatch", live.router.clone())
        .await;
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "probe-receiver",
    )
    .await
    .unwrap();
    let keys = ["a", "b", "c", "d"];
    const PER_KEY: u64 = 12;
    let mut events = Vec::new();
    for seq in 0..PER_KEY {
        for key in keys {
            let payload =
                json!({"key": key, "seq": seq, "retry_first": seq % 4 == 1, "sleep_ms": 10});
            events.push(
                NewEvent::new("probe.step", payload).with_ordering_key(format!("order-{key}")),
            );
        }
    }
    env.publish_all(events).await;
    let tasks = [
        tokio::spawn(dispatcher.run(shutdown.clone())),
        tokio::spawn(receivers.consume("outbox.probe".into(), shutdown.clone())),
    ];
    let total = keys.len() as i64 * PER_KEY as i64;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ok: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt WHERE result = 'ok'")
            .fetch_one(&env.pool)
            .await
            .unwrap();
        if ok == total {
            break;
        }
        assert!(Instant::now() < deadline, "{ok} of {total} handled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    for task in tasks {
        task.await.unwrap();
    }

    // Each key's log: every entry starts after the one before it ended, in order, and an entry
    // that asked for a retry runs again before the next one starts.
    let mut conn = env.redis.clone();
    for key in keys {
        let log: String = redis::AsyncCommands::get(
            &mut conn,
            format!("{}outbox:kv:ordered-probe:log:{key}", env.prefix),
        )
        .await
        .unwrap();
        let mut expected = Vec::new();
        for seq in 0..PER_KEY {
            expected.push(format!("start:{seq}:1"));
            expected.push(format!("end:{seq}:1"));
            if seq % 4 == 1 {
                expected.push(format!("start:{seq}:2"));
                expected.push(format!("end:{seq}:2"));
            }
        }
        assert_eq!(log, expected.join(" "), "key {key}");
    }
    env.cleanup().await;
}
