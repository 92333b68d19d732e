//! Dispatch: every committed event reaches exactly the queues its route names, once.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use outbox_host::routing::RouteDecision;
use outbox_host::NewEvent;
use outbox_tests::TestEnv;
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
                    .with_headers(json!({"traceparent": format!("00-{i:032x}-{j:016x}-01")}))
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
    tokio::time::timeout(Duration::from_secs(10), host.shutdown())
        .await
        .expect("shutdown within grace");
    let workers: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_worker WHERE id = 'embedded'")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(workers, 1, "heartbeat registered the worker");
    assert_eq!(env.event_ids("outbox.audit").await, vec![id]);
    env.cleanup().await;
}
