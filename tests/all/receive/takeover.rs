//! Taking over another consumer's entries: after the lease when a consumer dies, as soon as a
//! dead host's heartbeat stops, never two receivers completing one handler, and a receipt that
//! outlives the receiver that died before writing it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::live_config::LiveConfig;
use outbox_host::receive::{HandledAs, QueueEntry, Receivers};
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

use super::{receipts, routes, start, take_entries_and_die, test_env_settings, wait_for, PLUGINS};

#[sqlx::test(migrations = "../migrations")]
async fn consumer_dying_with_entries_lets_another_take_them_after_the_lease(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "survivor", false).await;
    let ids = env
        .publish_all(
            (0..5)
                .map(|i| NewEvent::new("plugin.hook.workflow.failed", json!({"i": i})))
                .collect(),
        )
        .await;
    wait_for("5 hook entries", Duration::from_secs(10), async || {
        env.entries("outbox.plugin-hook").await.len() == 5
    })
    .await;
    assert_eq!(
        take_entries_and_die(&env, "outbox.plugin-hook", "dead-consumer").await,
        5
    );
    let taken_at = Instant::now();
    for queue in running.receivers.queues_for_group(Some("general")) {
        tokio::spawn(
            running
                .receivers
                .clone()
                .consume(queue, running.shutdown.clone()),
        );
    }
    wait_for("all 5 handled", Duration::from_secs(20), async || {
        receipts(&env)
            .await
            .iter()
            .filter(|r| ids.contains(&r.0) && r.1 == "plugin-hook" && r.2 == "ok")
            .count()
            == 5
    })
    .await;
    assert!(
        taken_at.elapsed() >= Duration::from_millis(800),
        "reclaimed only after the lease"
    );
    running.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dead_hosts_pending_entries_are_taken_over_when_its_heartbeat_stops_not_after_the_lease(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    // A long receiver lease: reclaiming by the lease alone would take two minutes.
    env.settings.receiver_lease = Duration::from_secs(120);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let dispatching = start(&env, &fixture, "dispatcher", false).await;
    let ids = env
        .publish_all(
            (0..3)
                .map(|i| NewEvent::new("flaky.job", json!({ "i": i })))
                .collect(),
        )
        .await;
    wait_for("3 entries", Duration::from_secs(10), async || {
        env.entries("outbox.flaky").await.len() == 3
    })
    .await;
    // A host reads them, claims two, and dies: its heartbeat stopped 100 s ago. It last renewed
    // one claim long ago (10 s of its 120 s left) and the other one just now (a host that lost
    // only PostgreSQL goes on renewing its claims: that one must stay its own).
    assert_eq!(
        take_entries_and_die(&env, "outbox.flaky", "dead-host").await,
        3
    );
    let mut conn = env.redis.clone();
    let marker = |id: i64| format!("{}outbox:handled:flaky-handler:{id}", env.prefix);
    let _: () = redis::cmd("SET")
        .arg(marker(ids[1]))
        .arg("running:dead-host:00000000000000ff")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(marker(ids[2]))
        .arg("running:dead-host:00000000000000aa")
        .arg("PX")
        .arg(119_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    env.host_last_seen("dead-host", Duration::from_secs(100))
        .await;
    let taken_at = Instant::now();
    let running = start(&env, &fixture, "survivor", true).await;
    wait_for(
        "the two entries taken over",
        Duration::from_secs(40),
        async || {
            receipts(&env)
                .await
                .iter()
                .filter(|r| (r.0 == ids[0] || r.0 == ids[1]) && r.2 == "ok")
                .count()
                == 2
        },
    )
    .await;
    assert!(
        taken_at.elapsed() < Duration::from_secs(60),
        "taken over long before the 120 s lease"
    );
    // The entry whose claim was renewed just now is left to its owner.
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(format!("{}outbox.flaky", env.prefix))
        .arg("outbox")
        .arg("-")
        .arg("+")
        .arg(10)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].1, "dead-host");
    let still: Option<String> = redis::AsyncCommands::get(&mut conn, marker(ids[2]))
        .await
        .unwrap();
    assert_eq!(still.as_deref(), Some("running:dead-host:00000000000000aa"));
    assert!(!receipts(&env).await.iter().any(|r| r.0 == ids[2]));
    running.stop().await;
    dispatching.stop().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn two_receivers_never_both_run_a_handler_to_completion(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", false).await;
    let other = Receivers::new(
        env.pool.clone(),
        running.live.clone(),
        Arc::new(fixture.config(&env.settings).settings),
        "c2",
    )
    .await
    .unwrap();
    let id = env
        .publish_all(vec![NewEvent::new(
            "workflow.trigger.event",
            json!({"trigger": "user.signed-up"}),
        )])
        .await[0];
    wait_for("the trigger entry", Duration::from_secs(10), async || {
        !env.entries("outbox.workflow").await.is_empty()
    })
    .await;
    let fields = env.entries("outbox.workflow").await.remove(0);
    let entry = QueueEntry {
        stream_id: "0-1".into(),
        fields: fields.into_iter().collect(),
    };
    let (a, b) = tokio::join!(
        running
            .receivers
            .handle_entry("outbox.workflow", entry.clone()),
        other.handle_entry("outbox.workflow", entry.clone())
    );
    let oks = [&a, &b].iter().filter(|h| ***h == HandledAs::Ok).count();
    assert_eq!(oks, 1, "exactly one ran to completion: {a:?} {b:?}");
    assert!(matches!(
        a,
        HandledAs::Ok | HandledAs::Busy | HandledAs::Duplicate
    ));
    assert_eq!(
        other.handle_entry("outbox.workflow", entry).await,
        HandledAs::Duplicate
    );
    let children = env.count_type("workflow.execution.requested").await;
    assert_eq!(children, 3);
    let _ = id;
    running.stop().await;
    env.cleanup().await;
}

/// A receipt travels with the outcome: the outcome step appends it to the receipts stream in
/// the same atomic step as the acknowledgement, so a receiver whose writer died before writing
/// it (here: its database writes fail, then the receiver is dropped) loses nothing. Another
/// host's writer adopts the receipt after the receiver lease and writes it, once.
#[sqlx::test(migrations = "../migrations")]
async fn a_receipt_outlives_a_receiver_that_died_before_writing_it(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let settings = Arc::new(config.settings.clone());
    let id = env
        .publish_all(vec![NewEvent::new("flaky.receipt", json!({}))])
        .await[0];
    env.dispatcher_routed_by("receipt-dispatch", live.router.clone())
        .await
        .drain()
        .await
        .unwrap();

    // A database without the outbox tables: every receipt write fails at once (not a blip).
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let elsewhere = PgPool::connect(&outbox_host::store::with_database(&base, "postgres"))
        .await
        .unwrap();
    let doomed = Receivers::new(elsewhere, live.clone(), settings.clone(), "doomed")
        .await
        .unwrap();
    doomed.ensure_group("outbox.flaky").await.unwrap();
    let mut conn = env.redis.clone();
    let read: redis::streams::StreamReadReply = redis::AsyncCommands::xread_options(
        &mut conn,
        &[format!("{}outbox.flaky", env.prefix)],
        &[">"],
        &redis::streams::StreamReadOptions::default()
            .group("outbox", "doomed")
            .count(1),
    )
    .await
    .unwrap();
    let entry = QueueEntry::from_stream(&read.keys[0].ids[0]);
    assert_eq!(entry.event_id(), Some(id));
    assert_eq!(
        doomed.handle_entry("outbox.flaky", entry).await,
        HandledAs::Ok
    );

    let receipts_stream = format!("{}outbox:receipts", env.prefix);
    wait_for(
        "the doomed writer to read the receipt",
        Duration::from_secs(10),
        async || {
            let pending: redis::streams::StreamPendingReply =
                redis::AsyncCommands::xpending(&mut env.redis.clone(), &receipts_stream, "outbox")
                    .await
                    .unwrap();
            pending.count() == 1
        },
    )
    .await;
    drop(doomed);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(receipts(&env).await.is_empty(), "nothing written yet");

    let _heir = Receivers::new(env.pool.clone(), live, settings, "heir")
        .await
        .unwrap();
    wait_for(
        "the heir to write the receipt",
        Duration::from_secs(20),
        async || !receipts(&env).await.is_empty(),
    )
    .await;
    assert_eq!(
        receipts(&env).await,
        vec![(id, "flaky-handler".to_string(), "ok".to_string(), 0)]
    );
    wait_for(
        "the receipts stream to empty",
        Duration::from_secs(10),
        async || {
            let len: usize = redis::AsyncCommands::xlen(&mut env.redis.clone(), &receipts_stream)
                .await
                .unwrap();
            len == 0
        },
    )
    .await;
    env.cleanup().await;
}
