//! Waking the dispatcher: producers notify an idle dispatcher, and stop notifying (their
//! notifications serialise their commits) while a dispatcher claiming fast polls instead.

use std::collections::HashSet;
use std::time::Duration;

use outbox_host::{store, NewEvent};
use outbox_tests::{wait_for, TestEnv};
use serde_json::json;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// A session listening on the dispatcher's channel, as a dispatcher does.
async fn listen_for_new_events(pool: &PgPool) -> PgListener {
    let mut listener = PgListener::connect_with(pool).await.unwrap();
    listener
        .listen(outbox_host::dispatch::NOTIFY_CHANNEL)
        .await
        .unwrap();
    listener
}

/// Whether a notification on the dispatcher's channel arrives within `within`.
async fn notified_within(listener: &mut PgListener, within: Duration) -> bool {
    matches!(
        tokio::time::timeout(within, listener.recv()).await,
        Ok(Ok(_))
    )
}

/// Polling leases current now.
async fn current_polling_leases(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM outbox_dispatcher_polling WHERE until > clock_timestamp()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Producer tasks inserting events until stopped, each running `insert` (which adds
/// `per_insert` events) on a connection of `pool`, then pausing `pause`.
struct Producers {
    producing: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<i64>>,
}

impl Producers {
    fn start(
        pool: &PgPool,
        sessions: usize,
        insert: &'static str,
        per_insert: i64,
        pause: Duration,
    ) -> Self {
        let producing = CancellationToken::new();
        let tasks = (0..sessions)
            .map(|_| {
                let (pool, producing) = (pool.clone(), producing.clone());
                tokio::spawn(async move {
                    let mut inserted = 0i64;
                    while !producing.is_cancelled() {
                        sqlx::query(insert).execute(&pool).await.unwrap();
                        inserted += per_insert;
                        tokio::time::sleep(pause).await;
                    }
                    inserted
                })
            })
            .collect();
        Self { producing, tasks }
    }

    /// Stop them; how many events they inserted.
    async fn stop(self) -> i64 {
        self.producing.cancel();
        let mut inserted = 0;
        for task in self.tasks {
            inserted += task.await.unwrap();
        }
        inserted
    }
}

/// After producers stopped while a dispatcher polled: every one of the `inserted` events gets
/// done (the last ones did not notify: polling or its last look finds them, not the 30 s
/// poll), and the dispatcher withdraws its polling lease.
async fn polled_events_done_and_lease_withdrawn(env: &TestEnv, inserted: i64, within: Duration) {
    wait_for(
        "every event inserted while the dispatcher polled to be done",
        within,
        async || env.count("done").await == inserted,
    )
    .await;
    wait_for(
        "the dispatcher to withdraw its polling lease once events stopped",
        Duration::from_secs(5),
        async || current_polling_leases(&env.pool).await == 0,
    )
    .await;
}

#[sqlx::test(migrations = "../migrations")]
async fn producers_notify_only_while_no_dispatcher_polling_lease_is_current(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let mut listener = listen_for_new_events(&env.pool).await;
    let insert = |n| env.insert_many("mail.wake", n);

    insert(1).await;
    assert!(
        notified_within(&mut listener, Duration::from_secs(5)).await,
        "no dispatcher polls: an insert notifies"
    );

    store::announce_polling(&env.pool, "poller", Duration::from_secs(30))
        .await
        .unwrap();
    insert(1).await;
    insert(3).await;
    assert!(
        !notified_within(&mut listener, Duration::from_millis(500)).await,
        "a dispatcher polls: producers do not notify"
    );

    // A lease that ran out (its host died while polling) silences nobody.
    store::withdraw_polling(&env.pool, "poller").await.unwrap();
    store::announce_polling(&env.pool, "dead-poller", Duration::ZERO)
        .await
        .unwrap();
    insert(1).await;
    assert!(
        notified_within(&mut listener, Duration::from_secs(5)).await,
        "an expired polling lease: an insert notifies again"
    );
    env.cleanup().await;
}

/// The lease end the insert trigger's condition reads (ms since the Unix epoch), and now.
async fn polling_lease_end_and_now_ms(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as(
        "SELECT coalesce(pg_sequence_last_value('outbox_dispatcher_polling_until_ms'), 0),
                (date_part('epoch', clock_timestamp()) * 1000)::bigint",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn the_trigger_condition_follows_the_latest_polling_lease_and_a_withdrawal_leaves_anothers_in_force(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let mut listener = listen_for_new_events(&env.pool).await;
    let insert = |n| env.insert_many("mail.wake", n);

    store::announce_polling(&env.pool, "long", Duration::from_secs(60))
        .await
        .unwrap();
    let (end, now) = polling_lease_end_and_now_ms(&env.pool).await;
    assert!(
        (55_000..=60_000).contains(&(end - now)),
        "the latest lease end: {} ms ahead",
        end - now
    );
    store::announce_polling(&env.pool, "short", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(
        polling_lease_end_and_now_ms(&env.pool).await.0,
        end,
        "a shorter lease never moves the end earlier"
    );

    store::withdraw_polling(&env.pool, "long").await.unwrap();
    let (end, now) = polling_lease_end_and_now_ms(&env.pool).await;
    assert!(
        (15_000..=20_000).contains(&(end - now)),
        "a withdrawal leaves the other lease's end: {} ms ahead",
        end - now
    );
    insert(1).await;
    assert!(
        !notified_within(&mut listener, Duration::from_millis(500)).await,
        "the other dispatcher still polls: producers do not notify"
    );

    store::withdraw_polling(&env.pool, "short").await.unwrap();
    assert_eq!(polling_lease_end_and_now_ms(&env.pool).await.0, 0);
    insert(1).await;
    assert!(
        notified_within(&mut listener, Duration::from_secs(5)).await,
        "nobody polls: an insert notifies"
    );

    // A host of the previous version announces its lease in the table alone: the trigger runs
    // and reads it there.
    sqlx::query(
        "INSERT INTO outbox_dispatcher_polling (worker_id, until) VALUES ('previous', clock_timestamp() + interval '30 seconds')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    insert(1).await;
    assert!(
        !notified_within(&mut listener, Duration::from_millis(500)).await,
        "a lease in the table alone still silences producers"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_producer_role_allowed_only_to_insert_events_inserts_and_is_heard(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let role = format!("outbox_producer_{}", std::process::id());
    for statement in [
        format!("DROP ROLE IF EXISTS {role}"),
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT INSERT ON outbox_event TO {role}"),
        format!("GRANT USAGE ON SEQUENCE outbox_event_id_seq TO {role}"),
    ] {
        sqlx::query(&statement).execute(&env.pool).await.unwrap();
    }
    let options: sqlx::postgres::PgConnectOptions = env.database_url().await.parse().unwrap();
    let producer = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.username(&role).password(""))
        .await
        .unwrap();
    let mut listener = listen_for_new_events(&env.pool).await;
    let insert = || {
        sqlx::query("INSERT INTO outbox_event (event_type, payload) VALUES ('mail.least', '{}')")
            .execute(&producer)
    };

    let first = insert().await;
    let heard = notified_within(&mut listener, Duration::from_secs(5)).await;
    store::announce_polling(&env.pool, "poller", Duration::from_secs(30))
        .await
        .unwrap();
    let second = insert().await;
    let heard_while_polled = notified_within(&mut listener, Duration::from_millis(500)).await;
    producer.close().await;
    for statement in [
        format!("REVOKE ALL ON outbox_event FROM {role}"),
        format!("REVOKE ALL ON SEQUENCE outbox_event_id_seq FROM {role}"),
        format!("DROP ROLE {role}"),
    ] {
        sqlx::query(&statement).execute(&env.pool).await.unwrap();
    }

    first.expect("a role with INSERT alone inserts an event (the trigger reads the leases itself)");
    second.expect("and inserts while a dispatcher polls");
    assert!(heard, "its insert notifies while nobody polls");
    assert!(!heard_while_polled, "and does not while a dispatcher polls");
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn producers_waiting_for_each_others_notifications_are_counted(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    // Sixteen producers committing one event per transaction as fast as they can, each insert
    // notifying (no dispatcher polls): their commits take the notification lock one at a time.
    let producers = sqlx::postgres::PgPoolOptions::new()
        .max_connections(16)
        .connect(&env.database_url().await)
        .await
        .unwrap();
    let running = Producers::start(
        &producers,
        16,
        "INSERT INTO outbox_event (event_type, payload) VALUES ('mail.contended', '{}')",
        1,
        Duration::ZERO,
    );
    let mut most = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while most == 0 && tokio::time::Instant::now() < deadline {
        most = most.max(store::notify_lock_waiters(&env.pool).await.unwrap());
    }
    running.stop().await;
    producers.close().await;
    assert!(
        most > 0,
        "sixteen notifying producers were never seen waiting for each other's commits"
    );

    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dispatcher_claiming_fast_polls_then_hands_waking_back_to_notifications(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    // Only a notification or the dispatcher's own polling can be what finds an event in time.
    env.settings.dispatch_interval = Duration::from_secs(30);
    let dispatcher = env.dispatcher("fast").await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));

    // Producers at about 3,500 events/s (40 every 10 ms), above the rate at which it polls.
    let producers = Producers::start(
        &env.pool,
        1,
        "INSERT INTO outbox_event (event_type, payload) SELECT 'mail.fast', jsonb_build_object('n', g) FROM generate_series(1, 40) g",
        40,
        Duration::from_millis(10),
    );
    wait_for(
        "the dispatcher to announce that it polls",
        Duration::from_secs(10),
        async || current_polling_leases(&env.pool).await == 1,
    )
    .await;
    let inserted = producers.stop().await;
    polled_events_done_and_lease_withdrawn(&env, inserted, Duration::from_secs(5)).await;

    let id = env
        .publish_all(vec![NewEvent::new("mail.slow", json!({}))])
        .await[0];
    wait_for(
        "a notification to wake the idle dispatcher again",
        Duration::from_secs(5),
        async || env.status(id).await.0 == "done",
    )
    .await;

    let ids = env.event_ids("outbox.mail").await;
    assert_eq!(
        i64::try_from(ids.len()).unwrap(),
        inserted + 1,
        "one stream entry per event"
    );
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "no event enqueued twice"
    );
    shutdown.cancel();
    task.await.unwrap();
    assert_eq!(
        current_polling_leases(&env.pool).await,
        0,
        "a stopped dispatcher leaves no lease"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dispatcher_polls_once_producers_wait_on_each_others_notifications_below_the_rate_threshold(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    let fsync: String = sqlx::query_scalar("SHOW fsync")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(
        fsync, "on",
        "this test slows commits with commit_delay, which only delays flushed commits: it needs fsync = on (PostgreSQL's default)"
    );
    // Only a notification or the dispatcher's own polling can be what finds an event in time.
    env.settings.dispatch_interval = Duration::from_secs(30);
    // Producers on a disk that flushes slowly: `commit_delay` sleeps 2 ms before each commit's
    // flush (with fsync on, PostgreSQL's default), inside the notification lock, so notifying
    // producers commit at most 500 events/s together, a quarter of the rate at which a
    // dispatcher polls by its claim rate alone. They offer about 1,200/s (12 sessions, one
    // event per transaction, 10 ms apart).
    let producers = sqlx::postgres::PgPoolOptions::new()
        .max_connections(12)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(conn, "SET commit_delay = 2000; SET commit_siblings = 0")
                    .await
                    .map(|_| ())
            })
        })
        .connect(&env.database_url().await)
        .await
        .unwrap();
    let dispatcher = env.dispatcher("slow-flush").await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    let started = tokio::time::Instant::now();
    let running = Producers::start(
        &producers,
        12,
        "INSERT INTO outbox_event (event_type, payload) VALUES ('mail.flush', '{}')",
        1,
        Duration::from_millis(10),
    );
    wait_for(
        "the dispatcher to poll once producers wait for each other's notifications",
        Duration::from_secs(20),
        async || current_polling_leases(&env.pool).await == 1,
    )
    .await;
    let before_polling = env.count_type("mail.flush").await;
    let rate = before_polling as f64 / started.elapsed().as_secs_f64();
    let inserted = running.stop().await;
    producers.close().await;
    assert!(
        rate < 2000.0,
        "the producers committed {rate:.0} events/s before the dispatcher polled: the claim rate alone would have made it poll"
    );
    polled_events_done_and_lease_withdrawn(&env, inserted, Duration::from_secs(10)).await;
    let ids = env.event_ids("outbox.mail").await;
    assert_eq!(
        i64::try_from(ids.len()).unwrap(),
        inserted,
        "one stream entry per event"
    );
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

/// The sessions of this test's database whose last statement was a `LISTEN`.
async fn listening_sessions(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Whether `subscription` is notified within `within`.
async fn woken_within(subscription: &store::Subscription, within: Duration) -> bool {
    tokio::time::timeout(within, subscription.notified())
        .await
        .is_ok()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_host_listens_for_new_events_and_queue_pauses_on_one_session(pool: PgPool) {
    // PostgreSQL wakes every listening session of a database at every notifying commit: a
    // second session per host doubled that cost for every published event.
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_secs(60);
    let fixture = outbox_tests::PluginFixture::new(
        &[],
        "[routes]\n\"mail.\" = \"outbox.mail\"\n[router]\nplugin = \"native\"\n",
    );
    let host = outbox_host::Host::builder()
        .config(fixture.config(&env.settings))
        .pool(env.pool.clone())
        .worker_id("one-session")
        .start()
        .await
        .unwrap();
    assert!(host.dispatcher().is_some() && host.receivers().is_some());
    wait_for(
        "the host's listening session",
        Duration::from_secs(10),
        async || listening_sessions(&env.pool).await >= 1,
    )
    .await;
    // Both followers subscribed by now (the pause follower reads the table before it waits).
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(listening_sessions(&env.pool).await, 1, "one LISTEN session");

    // New events are heard on it: one is dispatched with the poll interval a minute away.
    let id = env
        .publish_all(vec![NewEvent::new("mail.one-session", json!({}))])
        .await[0];
    wait_for(
        "the event dispatched",
        Duration::from_secs(10),
        async || env.status(id).await.0 == "done",
    )
    .await;
    host.shutdown().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn notifications_reach_their_channels_subscribers_and_every_subscriber_after_a_reconnect(
    pool: PgPool,
) {
    let notifications = store::Notifications::start(pool.clone());
    let a = notifications.subscribe("outbox_test_a");
    let b = notifications.subscribe("outbox_test_b");
    let second_a = notifications.subscribe("outbox_test_a");
    for (name, s) in [("a", &a), ("b", &b), ("second a", &second_a)] {
        assert!(
            woken_within(s, Duration::from_secs(5)).await,
            "{name}: woken once the session listens on its channel"
        );
    }
    wait_for(
        "the session listening on both channels",
        Duration::from_secs(10),
        async || listening_sessions(&pool).await == 1,
    )
    .await;

    sqlx::query("NOTIFY outbox_test_a")
        .execute(&pool)
        .await
        .unwrap();
    assert!(woken_within(&a, Duration::from_secs(5)).await);
    assert!(woken_within(&second_a, Duration::from_secs(5)).await);
    assert!(
        !woken_within(&b, Duration::from_millis(300)).await,
        "another channel's notification does not wake b"
    );

    // The session is cut: every subscriber looks again once it is back, and it hears again.
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(killed, vec![true]);
    for (name, s) in [("a", &a), ("b", &b), ("second a", &second_a)] {
        assert!(
            woken_within(s, Duration::from_secs(10)).await,
            "{name}: woken after the session came back"
        );
    }
    wait_for("the session back", Duration::from_secs(10), async || {
        listening_sessions(&pool).await == 1
    })
    .await;
    sqlx::query("NOTIFY outbox_test_b")
        .execute(&pool)
        .await
        .unwrap();
    assert!(woken_within(&b, Duration::from_secs(5)).await);

    // A subscription keeps the session alive without the handle; the last one gone, it ends.
    drop(notifications);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        listening_sessions(&pool).await,
        1,
        "the subscriptions keep it"
    );
    sqlx::query("NOTIFY outbox_test_a")
        .execute(&pool)
        .await
        .unwrap();
    assert!(woken_within(&a, Duration::from_secs(5)).await);
    drop((a, b, second_a));
    wait_for("the session closed", Duration::from_secs(10), async || {
        listening_sessions(&pool).await == 0
    })
    .await;
}
