//! Dispatch: every committed event reaches exactly the queues its route names, once.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use outbox_host::dispatch::Dispatcher;
use outbox_host::routing::{RouteDecision, RouterHandle};
use outbox_host::sink::{Enqueue, EnqueueResult, RedisSink, Sink, SinkError};
use outbox_host::NewEvent;
use outbox_tests::{OutageProxy, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[sqlx::test(migrations = "../migrations")]
async fn every_committed_event_reaches_exactly_its_routed_queues(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let table = TestEnv::table_with(&[("order.", &["outbox.audit", "outbox.search-index"])]);
    let types = [
        "tenant.subscription.created",
        "mail.welcome",
        "webhook.delivery",
        "notification.push",
        "audit.login",
        "workflow.trigger.event",
        "search.index.document",
        "rag.index.chunk",
        "ai.cost.recorded",
        "marketing.lead.created",
        "form.submission.received",
        "billing.invoice.paid",
        "plugin.hook.workflow.executed",
        "plugin.capability-use.denied",
        "order.placed",
    ];
    let mut events = Vec::new();
    for (i, t) in types.iter().enumerate() {
        for j in 0..3 {
            events.push(
                NewEvent::new(*t, json!({"i": i, "j": j, "text": "héllo \"quoted\""}))
                    .with_tenant(format!("tenant-{j}"))
                    .with_headers(
                        json!({"traceparent": format!("00-{:032x}-{:016x}-01", i + 1, j + 1)}),
                    )
                    .with_dispatch_key(format!("{t}:{j}")),
            );
        }
    }
    let ids = env.publish_all(events.clone()).await;
    let dispatcher = env.dispatcher_with("w1", table.clone()).await;
    let report = dispatcher.drain().await.unwrap();
    assert_eq!(report.done as usize, ids.len());

    let mut expected: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (id, e) in ids.iter().zip(&events) {
        let RouteDecision::Queues(queues) = table.route(&e.event_type) else {
            panic!("{} must route", e.event_type)
        };
        for q in queues {
            expected.entry(q).or_default().push(*id);
        }
    }
    for (queue, want) in &expected {
        let entries = env.entries(queue).await;
        let got: Vec<i64> = entries
            .iter()
            .map(|e| e["event_id"].parse().unwrap())
            .collect();
        assert_eq!(&got, want, "queue {queue}");
        for entry in entries {
            let id: i64 = entry["event_id"].parse().unwrap();
            let idx = ids.iter().position(|x| *x == id).unwrap();
            let event = &events[idx];
            assert_eq!(entry["event_type"], event.event_type);
            assert_eq!(entry["event_version"], "1");
            assert_eq!(entry["tenant_id"], event.tenant_id.clone().unwrap());
            assert_eq!(entry["dispatch_key"], event.dispatch_key.clone().unwrap());
            assert_eq!(entry["attempt"], "1");
            let payload: serde_json::Value = serde_json::from_str(&entry["payload"]).unwrap();
            assert_eq!(payload, event.payload);
            let headers: serde_json::Value = serde_json::from_str(&entry["headers"]).unwrap();
            assert_eq!(headers, event.headers);
            assert!(chrono::DateTime::parse_from_rfc3339(&entry["created_at"]).is_ok());
        }
    }
    assert_eq!(env.count("done").await as usize, ids.len());
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn two_dispatchers_racing_enqueue_every_event_once(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_batch_size = 250;
    env.insert_many("mail.bulk", 10_000).await;
    let a = env.dispatcher("racer-a").await;
    let b = env.dispatcher("racer-b").await;
    let (ra, rb) = tokio::join!(a.drain(), b.drain());
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert_eq!(ra.done + rb.done, 10_000);
    assert!(
        ra.done > 0 && rb.done > 0,
        "both dispatchers took part: {ra:?} {rb:?}"
    );
    let ids = env.event_ids("outbox.mail").await;
    assert_eq!(ids.len(), 10_000, "one stream entry per event");
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        10_000,
        "no event enqueued twice"
    );
    assert_eq!(env.count("done").await, 10_000);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn fan_out_failure_does_not_redo_the_destination_that_succeeded(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let table = TestEnv::table_with(&[("order.", &["outbox.audit", "outbox.search-index"])]);
    let id = env
        .publish_all(vec![NewEvent::new("order.placed", json!({"order": 1}))])
        .await[0];
    // Break one destination: a plain string where the stream should be makes XADD fail.
    let mut conn = env.redis.clone();
    let broken = format!("{}outbox.search-index", env.prefix);
    redis::cmd("SET")
        .arg(&broken)
        .arg("not a stream")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();

    let dispatcher = env.dispatcher_with("w1", table).await;
    dispatcher.drain().await.unwrap();
    let (status, attempts, last_error) = env.status(id).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1));
    assert!(last_error.unwrap().contains("outbox.search-index"));
    let deliveries: Vec<(String, String)> = sqlx::query_as(
        "SELECT destination, status FROM outbox_delivery WHERE event_id = $1 ORDER BY 1",
    )
    .bind(id)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        deliveries,
        vec![
            ("outbox.audit".into(), "done".into()),
            ("outbox.search-index".into(), "pending".into())
        ]
    );

    // Repair the broken queue and drop the audit queue's dedupe marker: if the host redid the
    // destination that succeeded, a second audit entry would appear.
    redis::cmd("DEL")
        .arg(&broken)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    redis::cmd("DEL")
        .arg(format!("{}outbox:enqueued:outbox.audit:{id}", env.prefix))
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    env.make_all_due().await;
    dispatcher.drain().await.unwrap();
    assert_eq!(env.status(id).await.0, "done");
    assert_eq!(
        env.event_ids("outbox.audit").await,
        vec![id],
        "succeeded destination not redone"
    );
    assert_eq!(env.event_ids("outbox.search-index").await, vec![id]);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn no_route_fails_at_once_with_a_readable_error(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let ids = env
        .publish_all(vec![
            NewEvent::new("mystery.thing", json!({})),
            NewEvent::new("mail.welcome", json!({})),
        ])
        .await;
    env.dispatcher("w1").await.drain().await.unwrap();
    let (status, attempts, last_error) = env.status(ids[0]).await;
    assert_eq!(
        (status.as_str(), attempts),
        ("failed", 1),
        "no retries for an unroutable event"
    );
    assert_eq!(
        last_error.as_deref(),
        Some("no route matched event type 'mystery.thing' (add a prefix rule to [routes] in routes.toml)")
    );
    assert_eq!(
        env.status(ids[1]).await.0,
        "done",
        "the other event goes on"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn notify_wakes_an_idle_dispatcher_long_before_the_poll_interval(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_secs(30);
    let dispatcher = env.dispatcher("w1").await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await; // let it go idle
    let id = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    let start = Instant::now();
    while env.status(id).await.0 != "done" {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "NOTIFY did not wake the dispatcher"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn retry_is_dispatched_when_due_not_at_the_next_poll(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_secs(30);
    let table = TestEnv::table_with(&[("order.", &["outbox.orders"])]);
    let mut conn = env.redis.clone();
    let broken = format!("{}outbox.orders", env.prefix);
    redis::cmd("SET")
        .arg(&broken)
        .arg("x")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let id = env
        .publish_all(vec![NewEvent::new("order.placed", json!({}))])
        .await[0];
    let dispatcher = env.dispatcher_with("w1", table).await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    let start = Instant::now();
    while env.status(id).await.1 < 1 || env.status(id).await.0 != "pending" {
        assert!(start.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    redis::cmd("DEL")
        .arg(&broken)
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    // Backoff after attempt 1 is 1 s here; the poll interval is 30 s.
    while env.status(id).await.0 != "done" {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "retry waited for the poll interval"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(env.status(id).await.1, 2);
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn embedded_host_dispatches_and_shuts_down(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let mut config = outbox_host::config::Config::builtin().unwrap();
    config.settings = env.settings.clone();
    let host = outbox_host::Host::builder()
        .config(config)
        .pool(env.pool.clone())
        .worker_id("embedded")
        .start()
        .await
        .unwrap();
    let id = env
        .publish_all(vec![NewEvent::new("audit.login", json!({"user": 1}))])
        .await[0];
    let start = Instant::now();
    while env.status(id).await.0 != "done" {
        assert!(start.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let workers = async || -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_worker WHERE id = 'embedded'")
            .fetch_one(&env.pool)
            .await
            .unwrap()
    };
    assert_eq!(workers().await, 1, "heartbeat registered the worker");
    tokio::time::timeout(Duration::from_secs(10), host.shutdown())
        .await
        .expect("shutdown within grace");
    assert_eq!(
        workers().await,
        0,
        "a host that stops cleanly leaves the list of hosts (never reported dead)"
    );
    assert_eq!(env.event_ids("outbox.audit").await, vec![id]);
    env.cleanup().await;
}

/// The real sink, whose second hand-off is held (up to 30 s) until a third hand-off starts, and
/// which notes whether it saw that happen: a third batch reaching the sink while the second is
/// still held proves the next batch was claimed while one was in flight. (Watching the count of
/// `processing` rows instead races: the third batch can be claimed and finished between polls.)
struct WaitsForTheNextClaim {
    inner: RedisSink,
    hand_offs: AtomicUsize,
    overlapped: AtomicBool,
}

impl Sink for WaitsForTheNextClaim {
    fn name(&self) -> &str {
        "waits-for-the-next-claim"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        async move {
            // The first batch goes alone (the sink has not answered yet); from the second on
            // the next is claimed while one is in flight.
            if self.hand_offs.fetch_add(1, Ordering::SeqCst) == 1 {
                let deadline = Instant::now() + Duration::from_secs(30);
                while Instant::now() < deadline {
                    if self.hand_offs.load(Ordering::SeqCst) > 2 {
                        self.overlapped.store(true, Ordering::SeqCst);
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            self.inner.enqueue_all(items).await
        }
        .boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.inner.ping().boxed()
    }
}

/// A sink shared with the test, which reads what it saw.
struct SharedSink(Arc<WaitsForTheNextClaim>);

impl Sink for SharedSink {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        self.0.enqueue_all(items)
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.0.ping()
    }
}

/// `outbox drain` runs the pipelined path `run` does: once a batch went through clean, the next
/// batch is claimed while the last is still being handed off, and every event arrives once.
/// (One batch at a time, the second hand-off would wait its 30 s and never see a third claim.)
#[sqlx::test(migrations = "../migrations")]
async fn drain_claims_the_next_batch_while_one_is_in_flight_and_enqueues_each_event_once(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_batch_size = 10;
    env.insert_many("mail.pipelined", 45).await;
    let sink = Arc::new(WaitsForTheNextClaim {
        inner: env.sink().await,
        hand_offs: AtomicUsize::new(0),
        overlapped: AtomicBool::new(false),
    });
    let dispatcher = Dispatcher::new(
        env.pool.clone(),
        SharedSink(sink.clone()),
        RouterHandle::new(TestEnv::default_table()),
        Arc::new(env.settings.clone()),
        "pipelined-drain",
    );
    let report = dispatcher.drain().await.unwrap();
    assert!(
        sink.overlapped.load(Ordering::SeqCst),
        "a third batch was claimed while the second was in flight"
    );
    assert_eq!((report.claimed, report.done), (45, 45), "{report:?}");
    let ids = env.event_ids("outbox.mail").await;
    assert_eq!(ids.len(), 45, "one stream entry per event");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 45);
    assert_eq!(env.count("done").await, 45);
    env.cleanup().await;
}

/// A drain whose queue system goes away mid-way returns only once no batch is in flight: every
/// row is `done` or back to `pending` with its attempt uncounted, none is left `processing`,
/// and once Redis is back the rest arrive, each once.
#[sqlx::test(migrations = "../migrations")]
async fn a_drain_cut_off_from_redis_never_returns_with_rows_still_processing(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let proxy = OutageProxy::redis().await;
    env.settings.redis_url = proxy.redis_url();
    env.settings.dispatch_batch_size = 50;
    let dispatcher = env.dispatcher("cut-drain").await;
    env.insert_many("mail.cut", 3000).await;
    let stats = dispatcher.stats();
    let drained = tokio::spawn({
        let dispatcher = dispatcher.clone();
        async move { dispatcher.drain().await }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while stats.done.load(Ordering::Relaxed) < 500 {
        assert!(Instant::now() < deadline, "the drain did not get going");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    proxy.cut();
    let report = drained.await.unwrap().unwrap();
    assert!(report.redis_unavailable, "{report:?}");
    let rows: Vec<(String, i32, i64)> = sqlx::query_as(
        "SELECT status, attempts, count(*) FROM outbox_event GROUP BY status, attempts ORDER BY 1, 2",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    for (status, attempts, _) in &rows {
        match status.as_str() {
            "done" => assert_eq!(*attempts, 1, "{rows:?}"),
            "pending" => assert_eq!(*attempts, 0, "released uncounted: {rows:?}"),
            other => panic!("a row left {other} after the drain returned: {rows:?}"),
        }
    }
    assert!(
        env.count("pending").await > 0,
        "the cut came before the end: {rows:?}"
    );

    proxy.restore().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.count("done").await < 3000 {
        assert!(Instant::now() < deadline, "the rest did not arrive");
        dispatcher.drain().await.unwrap();
    }
    let ids = env.event_ids("outbox.mail").await;
    assert_eq!(ids.len(), 3000, "one stream entry per event");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3000);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn every_failed_dispatch_attempt_is_in_the_event_history_with_its_host_and_error(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.max_retries = 1;
    let id = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({"to": "a@b.c"}))])
        .await[0];
    // A plain string where the stream should be makes every XADD fail.
    let mut conn = env.redis.clone();
    redis::cmd("SET")
        .arg(format!("{}outbox.mail", env.prefix))
        .arg("not a stream")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let dispatcher = env.dispatcher("history-w").await;
    for _ in 0..2 {
        dispatcher.drain().await.unwrap();
        env.make_all_due().await;
    }
    assert_eq!(env.status(id).await.0, "failed");
    let history = outbox_host::store::event_history(&env.pool, id)
        .await
        .unwrap();
    let attempts: Vec<(&str, &str, i32, &str)> = history
        .iter()
        .map(|h| {
            (
                h.action.as_str(),
                h.to_status.as_str(),
                h.attempts,
                h.actor.as_str(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("attempt", "pending", 1, "history-w"),
            ("attempt", "failed", 2, "history-w")
        ]
    );
    assert!(history.iter().all(|h| h
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("outbox.mail"))));
    env.cleanup().await;
}
