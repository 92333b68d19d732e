//! The BullMQ sink against the real `bullmq` package (pinned in `interop/bullmq`, installed by
//! the README test command): an unmodified Node.js `Worker` processes the jobs the host adds,
//! exactly once across fan-out, a host that dies between enqueue and mark-done, and a Node
//! dispatcher adding the same jobs side by side; BullMQ's own retries follow the route's
//! attempts and backoff; `Queue.getJobCounts`, `Queue.getJob` and `QueueEvents` see the jobs;
//! and the Redis state the sink writes matches, key for key, what `Queue.add` writes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use outbox_host::config::RoutesFile;
use outbox_host::dispatch::Dispatcher;
use outbox_host::queue::QueueKeys;
use outbox_host::routing::RouterHandle;
use outbox_host::sink::{Enqueue, EnqueueResult, QueueSinks};
use outbox_host::store;
use outbox_host::NewEvent;
use redis::AsyncCommands;
use serde_json::{json, Value};
use sqlx::PgPool;

use outbox_tests::bullmq_app::{remove_bullmq_prefix, BullmqApp};
use outbox_tests::TestEnv;

/// A unique BullMQ prefix for one test (BullMQ's keys live beside the host's).
fn bull_prefix() -> String {
    format!("bulltest-{}", uuid::Uuid::new_v4().simple())
}

/// A dispatcher over every sink, routing with `routes`' table.
async fn dispatcher(env: &TestEnv, routes: &RoutesFile, worker: &str) -> (Dispatcher, QueueSinks) {
    let live = Arc::new(ArcSwap::from_pointee(routes.clone()));
    let sinks = QueueSinks::connect(&env.settings, live).await.unwrap();
    let dispatcher = Dispatcher::new(
        env.pool.clone(),
        sinks.clone(),
        RouterHandle::new(routes.route_table()),
        Arc::new(env.settings.clone()),
        worker,
    );
    (dispatcher, sinks)
}

fn interop_routes(prefix: &str) -> RoutesFile {
    let text = format!(
        r#"
[routes]
"mail." = "bq.mail"
"order." = ["bq.mail", "bq.audit"]
"flaky." = "bq.flaky"

[queues."bq.mail"]
sink = "bullmq"
bullmq = {{ prefix = "{prefix}" }}

[queues."bq.audit"]
sink = "bullmq"
bullmq = {{ prefix = "{prefix}", job_id = "{{queue}}-{{id}}" }}

[queues."bq.flaky"]
sink = "bullmq"
[queues."bq.flaky".bullmq]
prefix = "{prefix}"
attempts = 3
backoff = {{ type = "fixed", delay_ms = 200 }}

[policy]
plugin = "deny-all"
"#
    );
    RoutesFile::parse(&text, Path::new("<bullmq test routes>")).unwrap()
}

async fn publish_one(env: &TestEnv, event_type: &str, payload: Value) -> i64 {
    env.publish_all(vec![NewEvent::new(event_type, payload)])
        .await[0]
}

#[sqlx::test(migrations = "../migrations")]
async fn bullmq_workers_process_each_event_exactly_once_across_fan_out_a_crash_and_a_side_by_side_dispatcher(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let prefix = bull_prefix();
    let routes = interop_routes(&prefix);
    let mut app = BullmqApp::start(&prefix, &["bq.mail", "bq.audit", "bq.flaky"], true).await;

    // A host that dies between enqueue and mark-done: it claims and hands off these events,
    // the worker runs them, and nothing is recorded; its lease then runs out.
    let mut crashed = Vec::new();
    for i in 0..10 {
        crashed.push(publish_one(&env, "mail.crash", json!({ "n": i })).await);
    }
    let (_, crashed_sinks) = dispatcher(&env, &routes, "crashed-host").await;
    let claim = store::claim_due_events(&env.pool, "crashed-host", 100, Duration::from_millis(50))
        .await
        .unwrap();
    assert_eq!(claim.events.len(), 10);
    let items: Vec<Enqueue<'_>> = claim
        .events
        .iter()
        .map(|event| Enqueue {
            event,
            queue: "bq.mail",
        })
        .collect();
    let results = crashed_sinks.enqueue_all(&items).await;
    assert!(
        results.iter().all(|r| matches!(r, EnqueueResult::Added(_))),
        "{results:?}"
    );
    drop(crashed_sinks);

    // A Node dispatcher, run side by side during a switch, added this one first under the id
    // the host derives.
    let side = publish_one(&env, "mail.side-by-side", json!({ "from": "node" })).await;
    let added = app
        .command(
            json!({"cmd": "add", "queue": "bq.mail", "name": "mail.side-by-side",
                   "data": {"id": side, "from": "the node dispatcher"}, "jobId": format!("outbox-{side}")}),
            "added",
        )
        .await;
    assert_eq!(added["id"], format!("outbox-{side}"));

    let mut mail = Vec::new();
    for i in 0..20 {
        mail.push(
            publish_one(
                &env,
                "mail.welcome",
                json!({ "user": i, "text": "héllo \"quoted\"" }),
            )
            .await,
        );
    }
    let mut orders = Vec::new();
    for i in 0..10 {
        orders.push(publish_one(&env, "order.placed", json!({ "order": i })).await);
    }
    let flaky = publish_one(&env, "flaky.once", json!({ "fail_until_attempt": 3 })).await;
    let broken = publish_one(&env, "flaky.never", json!({ "always_fail": true })).await;

    // The restarted host: the crashed claims come back after their lease.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (host, _) = dispatcher(&env, &routes, "restarted-host").await;
    let report = host.drain().await.unwrap();
    assert_eq!(report.done, 10 + 1 + 20 + 10 + 2, "{report:?}");
    assert_eq!(report.failed + report.retried, 0, "{report:?}");

    // What the worker must run, once each (the flaky ones once per BullMQ attempt).
    let mut expected: BTreeMap<(String, String), usize> = BTreeMap::new();
    for id in crashed.iter().chain(&mail).chain(&orders).chain([&side]) {
        expected.insert(("bq.mail".into(), format!("outbox-{id}")), 1);
    }
    for id in &orders {
        expected.insert(("bq.audit".into(), format!("bq.audit-{id}")), 1);
    }
    expected.insert(("bq.flaky".into(), format!("outbox-{flaky}")), 3);
    expected.insert(("bq.flaky".into(), format!("outbox-{broken}")), 3);
    let total: usize = expected.values().sum();
    app.wait_for(
        "every job to be processed",
        Duration::from_secs(60),
        |seen| {
            seen.iter().filter(|v| v["kind"] == "processed").count() >= total
                && seen.iter().filter(|v| v["kind"] == "completed").count() >= expected.len() - 1
                && seen.iter().any(|v| v["kind"] == "failed")
        },
    )
    .await;
    // Nothing more comes (a doubled job would show up here).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    app.poll();
    let counts: BTreeMap<_, _> = app.processed_counts().into_iter().collect();
    assert_eq!(counts, expected, "processor runs per (queue, job id)");

    // Name and data: the event.
    for v in app.of_kind("processed") {
        let id = v["id"].as_str().unwrap();
        if id == format!("outbox-{side}") {
            assert_eq!(
                v["data"]["from"], "the node dispatcher",
                "the first add is kept"
            );
            continue;
        }
        let data = &v["data"];
        let event_id = data["id"].as_i64().unwrap();
        assert!(id.ends_with(&format!("-{event_id}")), "{v}");
        assert_eq!(v["name"], data["type"], "{v}");
        assert_eq!(data["version"], 1);
        assert!(data["payload"].is_object(), "{v}");
        assert!(data["headers"].is_object(), "{v}");
        if mail.contains(&event_id) {
            assert_eq!(data["type"], "mail.welcome");
            assert_eq!(data["payload"]["text"], "héllo \"quoted\"");
        }
    }
    // BullMQ's own retries: attempts 0, 1, 2 for both; one completed on the third, one failed.
    for id in [flaky, broken] {
        let attempts: Vec<i64> = app
            .of_kind("processed")
            .iter()
            .filter(|v| v["id"] == format!("outbox-{id}"))
            .map(|v| v["attemptsMade"].as_i64().unwrap())
            .collect();
        assert_eq!(attempts, vec![0, 1, 2], "event {id}");
    }
    let failed = app.of_kind("failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["id"], format!("outbox-{broken}"));

    // QueueEvents saw every completion.
    let completed: Vec<String> = app
        .of_kind("completed")
        .iter()
        .map(|v| {
            format!(
                "{}/{}",
                v["queue"].as_str().unwrap(),
                v["id"].as_str().unwrap()
            )
        })
        .collect();
    for (queue, id) in expected.keys() {
        let key = format!("{queue}/{id}");
        let wanted = usize::from(id != &format!("outbox-{broken}"));
        assert_eq!(
            completed.iter().filter(|c| **c == key).count(),
            wanted,
            "completed events of {key}"
        );
    }

    // Queue.getJobCounts and Queue.getJob see them.
    let mail_view = app
        .command(
            json!({"cmd": "inspect", "queue": "bq.mail", "ids": [format!("outbox-{}", mail[0])]}),
            "inspect",
        )
        .await;
    assert_eq!(mail_view["counts"]["completed"], 10 + 1 + 20 + 10);
    assert_eq!(mail_view["counts"]["failed"], 0);
    assert_eq!(mail_view["counts"]["waiting"], 0);
    let job = &mail_view["jobs"][format!("outbox-{}", mail[0])];
    assert_eq!(job["state"], "completed");
    assert_eq!(job["name"], "mail.welcome");
    assert_eq!(job["data"]["id"], mail[0]);
    let flaky_view = app
        .command(
            json!({"cmd": "inspect", "queue": "bq.flaky", "ids": [format!("outbox-{flaky}"), format!("outbox-{broken}")]}),
            "inspect",
        )
        .await;
    assert_eq!(flaky_view["counts"]["completed"], 1);
    assert_eq!(flaky_view["counts"]["failed"], 1);
    let broken_job = &flaky_view["jobs"][format!("outbox-{broken}")];
    assert_eq!(broken_job["state"], "failed");
    assert_eq!(broken_job["attemptsMade"], 3);
    assert_eq!(broken_job["opts"]["attempts"], 3);
    assert_eq!(
        broken_job["opts"]["backoff"],
        json!({"type": "fixed", "delay": 200})
    );

    // The outbox side: every event done, one attempt (the crashed claim's second).
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM outbox_event GROUP BY status")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(statuses, vec![("done".to_string(), 43)]);
    app.quit().await;
    remove_bullmq_prefix(&mut env.redis.clone(), &prefix).await;
}

/// JSON text with every object's keys sorted.
fn canonical(value: &Value) -> String {
    fn sorted(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let map: BTreeMap<&String, Value> =
                    map.iter().map(|(k, v)| (k, sorted(v))).collect();
                json!(map)
            }
            Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sorted(value)).unwrap()
}

/// What a BullMQ queue holds in Redis, with what depends on the clock or on Redis' own ids
/// left out: each key's type and content, the job hashes without `timestamp`, the delayed
/// set's members without their (time-based) scores, the events stream's fields without the
/// delayed event's timestamp.
async fn queue_state(
    conn: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    prefix: &str,
    queue: &str,
) -> BTreeMap<String, Value> {
    let base = format!("{prefix}:{queue}:");
    let keys: Vec<String> = conn.keys(format!("{base}*")).await.unwrap();
    let mut state = BTreeMap::new();
    for key in keys {
        let name = key.strip_prefix(&base).unwrap().to_string();
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let value = match kind.as_str() {
            "hash" => {
                let mut map: BTreeMap<String, String> = conn.hgetall(&key).await.unwrap();
                map.remove("timestamp");
                for field in ["opts", "data"] {
                    if let Some(text) = map.get_mut(field) {
                        // Compare as JSON, not as text (key order differs).
                        *text = canonical(&serde_json::from_str(text).unwrap());
                    }
                }
                json!(map)
            }
            "list" => json!(conn.lrange::<_, Vec<String>>(&key, 0, -1).await.unwrap()),
            "zset" if name == "delayed" || name == "marker" => {
                json!(conn.zrange::<_, Vec<String>>(&key, 0, -1).await.unwrap())
            }
            "zset" => json!(conn
                .zrange_withscores::<_, Vec<(String, f64)>>(&key, 0, -1)
                .await
                .unwrap()),
            "string" => json!(conn.get::<_, String>(&key).await.unwrap()),
            "stream" => {
                let reply: redis::streams::StreamRangeReply = conn.xrange_all(&key).await.unwrap();
                json!(reply
                    .ids
                    .iter()
                    .map(|entry| {
                        let mut fields: BTreeMap<String, String> = entry
                            .map
                            .iter()
                            .map(|(k, v)| {
                                (k.clone(), redis::from_redis_value::<String>(v).unwrap())
                            })
                            .collect();
                        fields.remove("delay");
                        fields
                    })
                    .collect::<Vec<_>>())
            }
            other => json!(format!("unexpected type {other}")),
        };
        state.insert(name, value);
    }
    state
}

#[sqlx::test(migrations = "../migrations")]
async fn bullmq_sink_writes_what_queue_add_writes_key_for_key(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let ours = bull_prefix();
    let theirs = bull_prefix();
    let text = format!(
        r#"
[routes]
"std." = "bq.std"
"opt." = "bq.opt"
"prio." = "bq.prio"
"later." = "bq.later"
"paused." = "bq.paused"

[queues."bq.std"]
sink = "bullmq"
bullmq = {{ prefix = "{ours}" }}
[queues."bq.opt"]
sink = "bullmq"
bullmq = {{ prefix = "{ours}", attempts = 4, backoff = {{ type = "exponential", delay_ms = 1000 }}, remove_on_complete = true, remove_on_fail = {{ age = 3600, count = 10 }} }}
[queues."bq.prio"]
sink = "bullmq"
bullmq = {{ prefix = "{ours}", priority = 5 }}
[queues."bq.later"]
sink = "bullmq"
bullmq = {{ prefix = "{ours}", delay_ms = 60000 }}
[queues."bq.paused"]
sink = "bullmq"
bullmq = {{ prefix = "{ours}" }}

[policy]
plugin = "deny-all"
"#
    );
    let routes = RoutesFile::parse(&text, Path::new("<test>")).unwrap();
    let queues = ["bq.std", "bq.opt", "bq.prio", "bq.later", "bq.paused"];
    let options: HashMap<&str, Value> = HashMap::from([
        ("bq.std", json!({})),
        (
            "bq.opt",
            json!({"attempts": 4, "backoff": {"type": "exponential", "delay": 1000}, "removeOnComplete": true, "removeOnFail": {"age": 3600, "count": 10}}),
        ),
        ("bq.prio", json!({"priority": 5})),
        ("bq.later", json!({"delay": 60000})),
        ("bq.paused", json!({})),
    ]);
    let ours_app = BullmqApp::start(&ours, &queues, false).await;
    let mut theirs_app = BullmqApp::start(&theirs, &queues, false).await;
    let mut ours_app = ours_app;
    for app in [&mut ours_app, &mut theirs_app] {
        app.command(json!({"cmd": "pause", "queue": "bq.paused"}), "paused")
            .await;
    }

    let mut published = Vec::new();
    for (i, queue) in queues.iter().enumerate() {
        let event_type = format!("{}.happened", queue.trim_start_matches("bq."));
        for n in 0..2 {
            let payload = json!({"i": i, "n": n});
            let id = publish_one(&env, &event_type, payload).await;
            published.push((id, *queue, event_type.clone()));
        }
    }
    let (host, _) = dispatcher(&env, &routes, "host").await;
    host.drain().await.unwrap();
    // Queue.add with the same name, data and options (data: exactly what the host wrote).
    let mut conn = env.redis.clone();
    for (id, queue, event_type) in &published {
        let job_id = format!("outbox-{id}");
        let data: String = conn
            .hget(format!("{ours}:{queue}:{job_id}"), "data")
            .await
            .unwrap();
        let mut opts = options[queue].clone();
        opts["jobId"] = json!(job_id);
        theirs_app
            .command(
                json!({"cmd": "add", "queue": queue, "name": event_type, "data": serde_json::from_str::<Value>(&data).unwrap(), "opts": opts}),
                "added",
            )
            .await;
    }
    // A second hand-off of the same event (a re-claim whose enqueue marker is gone) is a
    // duplicate to BullMQ, as a second Queue.add is.
    let first = published[0].0;
    let marker = QueueKeys::new(&env.settings.redis_prefix).enqueued_marker("bq.std", first);
    let removed: i64 = conn.del(&marker).await.unwrap();
    assert_eq!(removed, 1, "the host's enqueue marker {marker}");
    sqlx::query("UPDATE outbox_event SET status = 'pending', available_at = now() WHERE id = $1")
        .bind(first)
        .execute(&env.pool)
        .await
        .unwrap();
    host.drain().await.unwrap();
    let job_id = format!("outbox-{first}");
    let data: String = conn
        .hget(format!("{ours}:bq.std:{job_id}"), "data")
        .await
        .unwrap();
    theirs_app
        .command(
            json!({"cmd": "add", "queue": "bq.std", "name": published[0].2, "data": serde_json::from_str::<Value>(&data).unwrap(), "opts": {"jobId": job_id}}),
            "added",
        )
        .await;

    let holds = HashMap::from([
        ("bq.std", "wait"),
        ("bq.opt", "wait"),
        ("bq.prio", "prioritized"),
        ("bq.later", "delayed"),
        ("bq.paused", "paused"),
    ]);
    for queue in queues {
        let mine = queue_state(&mut conn, &ours, queue).await;
        // The comparison is about something: the jobs, where they wait, the events stream.
        for (id, q, _) in published.iter().filter(|(_, q, _)| *q == queue) {
            assert!(mine.contains_key(&format!("outbox-{id}")), "{q}: {mine:#?}");
        }
        assert_eq!(
            mine[holds[queue]].as_array().map(Vec::len),
            Some(2),
            "{queue}: {mine:#?}"
        );
        assert!(
            mine.contains_key("events") && mine.contains_key("id"),
            "{mine:#?}"
        );
        let bullmq = queue_state(&mut conn, &theirs, queue).await;
        assert_eq!(
            serde_json::to_string_pretty(&mine).unwrap(),
            serde_json::to_string_pretty(&bullmq).unwrap(),
            "queue {queue}: the sink's keys (left) against Queue.add's (right)"
        );
    }
    ours_app.quit().await;
    theirs_app.quit().await;
    remove_bullmq_prefix(&mut conn, &ours).await;
    remove_bullmq_prefix(&mut conn, &theirs).await;
}

/// Routes sending `mail.` to the BullMQ queue `bq.mail` and `ok.` to `bq.ok`, under `prefix`.
fn two_queue_routes(prefix: &str) -> RoutesFile {
    let text = format!(
        r#"
[routes]
"mail." = "bq.mail"
"ok." = "bq.ok"
[queues."bq.mail"]
sink = "bullmq"
bullmq = {{ prefix = "{prefix}" }}
[queues."bq.ok"]
sink = "bullmq"
bullmq = {{ prefix = "{prefix}" }}
[policy]
plugin = "deny-all"
"#
    );
    RoutesFile::parse(&text, Path::new("<test>")).unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_redis_outage_under_the_bullmq_sink_costs_no_attempt_and_adds_each_job_once(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    let proxy = outbox_tests::OutageProxy::redis().await;
    env.settings.redis_url = proxy.redis_url();
    let prefix = bull_prefix();
    let routes = two_queue_routes(&prefix);
    let (host, _) = dispatcher(&env, &routes, "host").await;
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(publish_one(&env, "mail.welcome", json!({ "n": i })).await);
    }
    proxy.cut();
    let report = host.drain().await.unwrap();
    assert!(report.redis_unavailable, "{report:?}");
    assert_eq!(
        report.done + report.failed + report.retried,
        0,
        "{report:?}"
    );
    for id in &ids {
        let (status, attempts, _) = env.status(*id).await;
        assert_eq!(
            (status.as_str(), attempts),
            ("pending", 0),
            "event {id}: no attempt burned"
        );
    }
    proxy.restore().await;
    let mut done = 0;
    let start = Instant::now();
    while done < 20 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{done} of 20 done"
        );
        done += host.drain().await.unwrap().done;
    }
    let mut conn = env.redis.clone();
    let mut waiting: Vec<String> = conn
        .lrange(format!("{prefix}:bq.mail:wait"), 0, -1)
        .await
        .unwrap();
    waiting.sort();
    let mut wanted: Vec<String> = ids.iter().map(|id| format!("outbox-{id}")).collect();
    wanted.sort();
    assert_eq!(waiting, wanted, "each job once in the wait list");
    remove_bullmq_prefix(&mut conn, &prefix).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_bullmq_key_of_the_wrong_type_refuses_its_events_writes_nothing_and_spares_the_others(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let prefix = bull_prefix();
    let routes = two_queue_routes(&prefix);
    let mut conn = env.redis.clone();
    // Someone's string where BullMQ keeps the wait list.
    let wait = format!("{prefix}:bq.mail:wait");
    let _: () = conn.set(&wait, "not a list").await.unwrap();
    let refused = publish_one(&env, "mail.welcome", json!({})).await;
    let fine = publish_one(&env, "ok.welcome", json!({})).await;
    let (host, _) = dispatcher(&env, &routes, "host").await;
    let report = host.drain().await.unwrap();
    assert_eq!((report.done, report.retried), (1, 1), "{report:?}");
    let (status, attempts, error) = env.status(refused).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    let error = error.unwrap();
    assert!(
        error.contains(&format!("event {refused} to bq.mail"))
            && error.contains("WRONGTYPE")
            && error.contains(&wait),
        "{error}"
    );
    let job: bool = conn
        .exists(format!("{prefix}:bq.mail:outbox-{refused}"))
        .await
        .unwrap();
    assert!(!job, "a refused add writes no job hash");
    let events: bool = conn
        .exists(format!("{prefix}:bq.mail:events"))
        .await
        .unwrap();
    assert!(!events, "a refused add emits no event");
    assert_eq!(env.status(fine).await.0, "done");

    // Fixed by the operator: the retry adds the job.
    let _: () = conn.del(&wait).await.unwrap();
    env.make_all_due().await;
    host.drain().await.unwrap();
    assert_eq!(env.status(refused).await.0, "done");
    let waiting: Vec<String> = conn.lrange(&wait, 0, -1).await.unwrap();
    assert_eq!(waiting, vec![format!("outbox-{refused}")]);
    remove_bullmq_prefix(&mut conn, &prefix).await;
}
