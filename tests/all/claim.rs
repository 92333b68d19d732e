//! Claims and leases: a crashed or stalled host loses nothing and doubles nothing.

use std::time::{Duration, Instant};

use outbox_host::routing::RouteDecision;
use outbox_host::sink::{Enqueue, EnqueueResult};
use outbox_host::store;
use outbox_host::NewEvent;
use outbox_tests::TestEnv;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[sqlx::test(migrations = "../migrations")]
async fn crash_between_enqueue_and_mark_done_still_enqueues_once(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let ids = env
        .publish_all(
            (0..20)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;
    // Host A claims with a short lease, enqueues everything, then "dies" before recording.
    let claim = store::claim_due_events(&env.pool, "doomed-host", 100, Duration::from_millis(500))
        .await
        .unwrap();
    assert_eq!(claim.events.len(), 20);
    let sink = env.sink().await;
    let table = TestEnv::default_table();
    let items: Vec<Enqueue> = claim
        .events
        .iter()
        .map(|event| {
            let RouteDecision::Queues(_) = table.route(&event.event_type) else {
                unreachable!()
            };
            Enqueue {
                event,
                queue: "outbox.mail",
            }
        })
        .collect();
    let results = sink.enqueue_all(&items).await;
    assert!(results.iter().all(|r| matches!(r, EnqueueResult::Added(_))));
    drop(claim);

    // Nothing is claimable until the lease runs out.
    let b = env.dispatcher("survivor").await;
    assert_eq!(
        b.drain().await.unwrap().claimed,
        0,
        "leased rows are not claimable"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let report = b.drain().await.unwrap();
    assert_eq!(report.done, 20, "survivor finishes the events");
    let in_stream = env.event_ids("outbox.mail").await;
    assert_eq!(in_stream, ids, "still exactly one stream entry per event");
    let attempts: Vec<i32> = sqlx::query_scalar("SELECT attempts FROM outbox_event ORDER BY id")
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert!(attempts.iter().all(|a| *a == 2));
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn lease_expiry_lets_another_host_pick_up_a_dead_claimers_rows(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_secs(5);
    let ids = env
        .publish_all(
            (0..5)
                .map(|i| NewEvent::new("audit.login", json!({"i": i})))
                .collect(),
        )
        .await;
    let lease = Duration::from_millis(1500);
    let dead = store::claim_due_events(&env.pool, "dead-host", 100, lease)
        .await
        .unwrap();
    assert_eq!(dead.events.len(), 5);
    let claimed_at = Instant::now();

    let survivor = env.dispatcher("survivor").await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(survivor.run(shutdown.clone()));
    while env.count("done").await < 5 {
        // lease + one poll interval is the promise; the loop actually wakes at the lease end.
        assert!(
            claimed_at.elapsed() < lease + Duration::from_secs(5),
            "not recovered in time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        claimed_at.elapsed() >= lease,
        "taken over only after the lease expired"
    );
    let claimers: Vec<String> =
        sqlx::query_scalar("SELECT claimed_by FROM outbox_event ORDER BY id")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert!(claimers.iter().all(|c| c == "survivor"));
    assert_eq!(env.event_ids("outbox.audit").await, ids);
    // The dead host waking up late cannot overwrite the survivor's result.
    let outcomes: Vec<_> = dead
        .events
        .iter()
        .map(|e| {
            (
                e.id,
                store::EventOutcome::Failed {
                    error: "late".into(),
                },
            )
        })
        .collect();
    let counts = store::record_outcomes(&env.pool, &dead, &outcomes, &[])
        .await
        .unwrap();
    assert_eq!(counts, store::RecordedCounts::default());
    assert_eq!(env.count("done").await, 5);
    shutdown.cancel();
    task.await.unwrap();
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn shutdown_releases_claims_for_other_hosts(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    env.publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await;
    let claim = store::claim_due_events(&env.pool, "leaving-host", 10, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(claim.events.len(), 1);
    // Read from the claim horizon, as the dispatcher does at shutdown: the held row is live, so
    // it is never behind it.
    let horizon = store::claim_horizon(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    assert_eq!(
        store::release_claims(&env.pool, "leaving-host", horizon)
            .await
            .unwrap(),
        1
    );
    let report = env.dispatcher("next-host").await.drain().await.unwrap();
    assert_eq!(report.done, 1, "released row is claimable at once");
    let (_, attempts, _) = env.status(claim.events[0].id).await;
    assert_eq!(attempts, 1, "the released attempt is not counted");
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn claim_query_uses_the_partial_index_with_many_finished_rows(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, processed_at) SELECT 'mail.old', '{}'::jsonb, 'done', now() FROM generate_series(1, 200000)",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    env.insert_many("mail.new", 50).await;
    sqlx::query("ANALYZE outbox_event")
        .execute(&env.pool)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT id FROM outbox_event WHERE status IN ('pending', 'processing') AND available_at <= now() ORDER BY available_at, id LIMIT 100 FOR UPDATE SKIP LOCKED",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    let plan = plan.join("\n");
    println!("{plan}");
    assert!(
        plan.contains("outbox_event_claimable_idx"),
        "claim must use the partial index:\n{plan}"
    );
    assert!(!plan.contains("Seq Scan"), "{plan}");
}

/// The whole claim statement as the dispatcher runs it (`store::CLAIM_SQL`), not only its
/// `SELECT`: with many claimable rows the update must still reach the locked rows one by one
/// (by TID) rather than hash the whole table, so a claim of 1000 costs the same with 20,000
/// or 20,000,000 rows waiting. It did not: joining the locked rows back on `id` planned a
/// sequential scan of `outbox_event` on every claim (44 of its 55 ms with 100,000 rows).
#[sqlx::test(migrations = "../migrations")]
async fn the_claim_statement_reaches_only_the_rows_it_claims_with_many_waiting(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    env.insert_many("mail.waiting", 20_000).await;
    sqlx::query("ANALYZE outbox_event")
        .execute(&env.pool)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", store::CLAIM_SQL))
        .bind(1000_i64)
        .bind("planner")
        .bind(300.0_f64)
        .bind(None::<chrono::DateTime<chrono::Utc>>)
        .bind(None::<i64>)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    let plan = plan.join("\n");
    println!("{plan}");
    assert!(
        plan.contains("outbox_event_claimable_idx"),
        "due rows come from the partial index:\n{plan}"
    );
    assert!(!plan.contains("Seq Scan"), "{plan}");

    // And it claims what it should: 1000 rows, leased, attempt 1, oldest first.
    let claim = store::claim_due_events(&env.pool, "w", 1000, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(claim.events.len(), 1000);
    assert!(claim
        .events
        .iter()
        .all(|e| e.attempts == 1 && !e.recovered_lease));
    let ids: Vec<i64> = claim.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=1000).collect::<Vec<i64>>());
    assert_eq!(env.count("processing").await, 1000);
    env.cleanup().await;
}

/// On a fresh deployment the claim stays linear in its batch: the table was vacuumed while
/// empty, so the planner's statistics say it holds nothing when the first burst arrives. It
/// then planned a sequential scan for every claim (sorting the whole table, and checking every
/// row against the locked rows' list: 20-40 ms per claim of 1000 with 40,000 rows waiting,
/// most of PostgreSQL's CPU end to end). On the dispatcher's connections the claim reads the
/// claim index and reaches the locked rows by one TID scan, joined with nothing.
#[sqlx::test(migrations = "../migrations")]
async fn the_claim_stays_linear_in_its_batch_on_a_table_vacuumed_while_empty(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(&env.pool)
        .await
        .unwrap();
    env.insert_many("mail.burst", 5_000).await;
    let dispatch = store::dispatch_pool(&env.pool);
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN {}", store::CLAIM_SQL))
        .bind(1000_i64)
        .bind("planner")
        .bind(300.0_f64)
        .bind(None::<chrono::DateTime<chrono::Utc>>)
        .bind(None::<i64>)
        .fetch_all(&dispatch)
        .await
        .unwrap();
    let plan = plan.join("\n");
    println!("{plan}");
    assert!(
        plan.contains("outbox_event_claimable_idx"),
        "due rows come from the claim index:\n{plan}"
    );
    assert!(
        plan.contains("TID Cond: (ctid = ANY"),
        "the update reads the locked rows' list in one TID scan:\n{plan}"
    );
    for linear_only in ["Seq Scan", "Nested Loop", "Join"] {
        assert!(!plan.contains(linear_only), "{linear_only} in:\n{plan}");
    }

    // It claims what it should, oldest due first, and tells recovered leases apart.
    let first = store::claim_due_events(&dispatch, "dead", 1000, Duration::from_millis(1))
        .await
        .unwrap();
    let ids: Vec<i64> = first.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=1000).collect::<Vec<i64>>(), "oldest due first");
    assert!(first.events.iter().all(|e| !e.recovered_lease));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let next = store::claim_due_events(&dispatch, "w", 1500, Duration::from_secs(300))
        .await
        .unwrap();
    let ids: Vec<i64> = next.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, (1..=1500).collect::<Vec<i64>>());
    for event in &next.events {
        let expired = event.id <= 1000;
        assert_eq!(event.recovered_lease, expired, "event {}", event.id);
        assert_eq!(
            event.attempts,
            if expired { 2 } else { 1 },
            "event {}",
            event.id
        );
    }
    dispatch.close().await;
    env.cleanup().await;
}

/// A burst arriving after the dispatcher planned its claims while nothing was waiting (each
/// dispatcher connection plans a statement once and keeps that plan; between bursts the claim
/// index holds only the entries finished events left behind) is claimed a batch at a time: each
/// claim statement reads the claim index in order and stops at its batch. Planned then, the
/// claim read the whole burst into a bitmap and sorted it to take each batch (29,500 rows and
/// 27 ms for a claim of 100 with 30,000 waiting, in a profile of the deployed host): every claim
/// cost as much as the backlog, until the dispatcher's sessions stopped planning bitmap scans.
#[sqlx::test(migrations = "../migrations")]
async fn a_burst_after_claims_planned_with_nothing_waiting_is_claimed_a_batch_at_a_time(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    // Events finished before, as a dispatcher leaves them: their entries stay in the claim
    // index until a vacuum.
    env.insert_many("mail.earlier", 2_000).await;
    sqlx::query("UPDATE outbox_event SET status = 'done', processed_at = now()")
        .execute(&env.pool)
        .await
        .unwrap();
    let dispatch = store::dispatch_pool(&env.pool);
    let mut conn = dispatch.acquire().await.unwrap();
    let lease = Duration::from_secs(300);
    let everything = store::ClaimHorizon::everything();
    // Both claim statements planned (and their plans kept) while nothing waits.
    let nothing_done = [(-1_i64, chrono::Utc::now())];
    for done in [&[][..], &nothing_done[..]] {
        let (claim, _) = store::claim_recording_done(&mut *conn, "w", 100, lease, everything, done)
            .await
            .unwrap();
        assert!(claim.events.is_empty());
    }

    env.insert_many("mail.burst", 5_000).await;
    for (name, sql) in [
        ("claim", store::CLAIM_SQL),
        ("claim recording done", store::CLAIM_RECORDING_DONE_SQL),
    ] {
        let (node, rows) = kept_plans_candidate_scan(&mut conn, sql).await;
        assert_eq!(
            (node.as_str(), rows),
            ("Index Scan", 100),
            "{name}: the claim index is read in order up to the batch of 100, not the burst"
        );
    }

    // And the claims take the burst oldest first, a batch each.
    for batch in 0..3 {
        let claim = store::claim_due_events_from(&mut *conn, "w", 100, lease, everything)
            .await
            .unwrap();
        let ids: Vec<i64> = claim.events.iter().map(|e| e.id).collect();
        let first = 2_000 + batch * 100 + 1;
        assert_eq!(ids, (first..first + 100).collect::<Vec<i64>>());
    }
    drop(conn);
    dispatch.close().await;
    env.cleanup().await;
}

/// The scan of a claim's candidates in the plan `conn` keeps for `sql` (a claim statement it has
/// run), executed as a claim of 100 from the start of the index (`EXPLAIN (ANALYZE, FORMAT
/// JSON) EXECUTE` in a transaction rolled back): its node type and the rows it returned.
async fn kept_plans_candidate_scan(conn: &mut sqlx::PgConnection, sql: &str) -> (String, i64) {
    let name: String =
        sqlx::query_scalar("SELECT name FROM pg_prepared_statements WHERE statement = $1")
            .bind(sql)
            .fetch_one(&mut *conn)
            .await
            .expect("the connection keeps the statement prepared");
    let arguments = if sql.contains("$6") {
        "100, 'explain', 300, NULL, NULL, '{}', '{}'"
    } else {
        "100, 'explain', 300, NULL, NULL"
    };
    sqlx::query("BEGIN").execute(&mut *conn).await.unwrap();
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {name}({arguments})"
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    sqlx::query("ROLLBACK").execute(&mut *conn).await.unwrap();
    fn candidates(node: &serde_json::Value) -> Option<&serde_json::Value> {
        if node["Alias"] == "candidate" {
            return Some(node);
        }
        node["Plans"].as_array()?.iter().find_map(candidates)
    }
    let scan = candidates(&plan[0]["Plan"]).unwrap_or_else(|| panic!("no candidate scan: {plan}"));
    (
        scan["Node Type"].as_str().unwrap_or_default().to_string(),
        scan["Actual Rows"].as_i64().unwrap_or(-1),
    )
}

#[sqlx::test(migrations = "../migrations")]
async fn a_dead_hosts_claims_are_released_when_its_heartbeat_stops_without_burning_an_attempt(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let ids = env
        .publish_all(
            (0..7)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;
    // Two hosts claimed them with a 5-minute lease: one stopped heartbeating two minutes ago
    // (SIGKILL), the other is alive.
    env.host_last_seen("dead-host", Duration::from_secs(120))
        .await;
    env.host_last_seen("live-host", Duration::ZERO).await;
    sqlx::query(
        "UPDATE outbox_event SET status = 'processing', attempts = attempts + 1, claimed_at = now(),
                claimed_by = CASE WHEN id <= $1 THEN 'dead-host' ELSE 'live-host' END,
                claim_expires_at = now() + interval '5 minutes', available_at = now() + interval '5 minutes'",
    )
    .bind(ids[4])
    .execute(&env.pool)
    .await
    .unwrap();
    let stale = store::stale_hosts(&env.pool, store::STALE_HOST_AFTER)
        .await
        .unwrap();
    assert_eq!(stale.len(), 1);
    assert_eq!(
        (stale[0].worker.as_str(), stale[0].held_claims),
        ("dead-host", 5)
    );

    // From the claim horizon, as every host's heartbeat reads it: held rows are never behind it.
    let horizon = store::claim_horizon(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    let released = store::release_stale_claims(&env.pool, store::STALE_HOST_AFTER, horizon)
        .await
        .unwrap();
    assert_eq!(
        released,
        vec![store::ReleasedClaims {
            worker: "dead-host".into(),
            events: 5
        }]
    );
    for id in &ids[..5] {
        assert_eq!(
            env.status(*id).await,
            ("pending".into(), 0, None),
            "event {id}"
        );
    }
    for id in &ids[5..] {
        assert_eq!(
            env.status(*id).await.0,
            "processing",
            "a live host keeps its claims"
        );
    }
    // Released again: nothing more to release.
    assert!(store::release_stale_claims(
        &env.pool,
        store::STALE_HOST_AFTER,
        store::ClaimHorizon::everything()
    )
    .await
    .unwrap()
    .is_empty());
    // The next dispatcher hands them off at once, long before the dead host's lease ends.
    let report = env.dispatcher("next-host").await.drain().await.unwrap();
    assert_eq!(report.done, 5);
    assert_eq!(env.event_ids("outbox.mail").await, ids[..5].to_vec());
    env.cleanup().await;
}

/// An idle dispatcher looks at the table once per poll interval (or when notified), not in a
/// loop: with nothing pending or leased there is no next due time, and it sleeps the interval.
#[sqlx::test(migrations = "../migrations")]
async fn an_idle_dispatcher_looks_at_the_table_once_per_poll_interval(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_interval = Duration::from_millis(500);
    let next_due = store::time_until_next_due(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    assert_eq!(
        next_due, None,
        "nothing pending has no due time (not 'due now')"
    );

    let dispatcher = env.dispatcher("idle-host").await;
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = committed_transactions(&env.pool).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    shutdown.cancel();
    task.await.unwrap();
    // Sessions report their counts once idle, within a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let idling = committed_transactions(&env.pool).await - before;
    assert!(
        idling < 60,
        "{idling} transactions in 3 s of idling: a claim and a look at the due time every 10 ms \
         would be about 600, one of each per 500 ms interval about 12"
    );
    env.cleanup().await;
}

/// Transactions committed in this test's database so far (`pg_stat_database`).
async fn committed_transactions(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The dispatcher's own connections commit without waiting for the WAL flush (its claims and
/// outcome records are idempotent to lose in a PostgreSQL crash; see `store::dispatch_pool`);
/// the pool it was made from, which producers and receipts use, keeps the server's setting.
#[sqlx::test(migrations = "../migrations")]
async fn the_dispatch_pool_commits_asynchronously_and_leaves_the_hosts_pool_alone(pool: PgPool) {
    let dispatch = store::dispatch_pool(&pool);
    assert_eq!(setting(&dispatch, "synchronous_commit").await, "off");
    assert_eq!(setting(&pool, "synchronous_commit").await, "on");
    assert_eq!(setting(&dispatch, "enable_seqscan").await, "off");
    assert_eq!(setting(&dispatch, "enable_bitmapscan").await, "off");
    assert_eq!(
        setting(&dispatch, "plan_cache_mode").await,
        "force_generic_plan"
    );
    assert_eq!(setting(&pool, "plan_cache_mode").await, "auto");
    assert_eq!(setting(&dispatch, "jit").await, "off");
    dispatch.close().await;
}

/// The host's own sessions never JIT-compile either (see `store::connect`): on a table of
/// millions of events the estimates of its statements pass PostgreSQL's threshold even when
/// they read nothing.
#[sqlx::test(migrations = "../migrations")]
async fn the_hosts_sessions_do_not_jit_compile(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let url = env.database_url().await;
    let host_pool = store::connect(&url, 1).await.unwrap();
    assert_eq!(setting(&host_pool, "jit").await, "off");
    assert_eq!(setting(&host_pool, "synchronous_commit").await, "on");
    host_pool.close().await;
    env.cleanup().await;
}

/// The polling lease's statements are not JIT-compiled on the dispatcher's connections. With
/// sequential scans priced out there, their reads of the lease sequence and the one-row lease
/// table are estimated at 10^10, past every `jit_*_above_cost`: PostgreSQL compiled each
/// renewal (once a second while the dispatcher polls) with inlining and optimisation, 100-300
/// ms of its CPU, and the claim loop waited for it, so dispatching stopped for that long every
/// second while producers went on committing (commit-to-queue p99 260 ms at 5,000 events/s).
#[sqlx::test(migrations = "../migrations")]
async fn polling_lease_statements_are_not_jit_compiled_on_the_dispatch_pool(pool: PgPool) {
    let dispatch = store::dispatch_pool(&pool);
    // Each with its parameters after the worker id: the announcement's lease in seconds.
    let statements = [
        ("announce", store::ANNOUNCE_POLLING_SQL, Some(2.0_f64)),
        ("withdraw", store::WITHDRAW_POLLING_SQL, None),
    ];
    for (name, sql, lease) in statements {
        let mut conn = dispatch.acquire().await.unwrap();
        let plan = polling_plan(&mut conn, sql, lease).await;
        assert!(!plan.contains("JIT"), "{name} is compiled:\n{plan}");
    }

    // Where PostgreSQL can compile, the same statements planned as the dispatcher's sessions
    // plan them but with the server's JIT setting are compiled: what the setting prevents.
    let mut conn = pool.acquire().await.unwrap();
    let can_compile: bool =
        sqlx::query_scalar("SELECT pg_jit_available() AND current_setting('jit')::bool")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
    if can_compile {
        sqlx::query("SET enable_seqscan = off")
            .execute(&mut *conn)
            .await
            .unwrap();
        for (name, sql, lease) in statements {
            let plan = polling_plan(&mut conn, sql, lease).await;
            assert!(plan.contains("JIT"), "{name} is not compiled:\n{plan}");
        }
    } else {
        println!("this server cannot JIT-compile: the comparison is skipped");
    }
    drop(conn);
    dispatch.close().await;
}

/// `EXPLAIN` of a polling lease statement for a worker id, with `lease` (seconds) bound second
/// when it takes one, as text.
async fn polling_plan(conn: &mut sqlx::PgConnection, sql: &str, lease: Option<f64>) -> String {
    let explain = format!("EXPLAIN {sql}");
    let mut query = sqlx::query_scalar::<_, String>(&explain).bind("planner");
    if let Some(lease) = lease {
        query = query.bind(lease);
    }
    query.fetch_all(conn).await.unwrap().join("\n")
}

/// A session setting as a connection of `pool` reads it (`SHOW`).
async fn setting(pool: &PgPool, name: &str) -> String {
    sqlx::query_scalar(&format!("SHOW {name}"))
        .fetch_one(pool)
        .await
        .unwrap()
}

/// In one hand-off call each entry's enqueue marker is looked up at its turn: an event handed
/// off before is not added again, and an event named twice in the same call (the same queue)
/// is added once, the second finding the marker the first set.
#[sqlx::test(migrations = "../migrations")]
async fn the_same_event_twice_in_one_hand_off_call_is_enqueued_once(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let ids = env
        .publish_all(
            (0..3)
                .map(|i| NewEvent::new("mail.welcome", json!({"i": i})))
                .collect(),
        )
        .await;
    let claim = store::claim_due_events(&env.pool, "w1", 100, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(claim.events.len(), 3);
    let sink = env.sink().await;
    let mail = |i: usize| Enqueue {
        event: &claim.events[i],
        queue: "outbox.mail",
    };
    let before = sink.enqueue_all(&[mail(0)]).await;
    let EnqueueResult::Added(first) = &before[0] else {
        panic!("{before:?}")
    };
    let results = sink
        .enqueue_all(&[mail(0), mail(1), mail(1), mail(2)])
        .await;
    assert_eq!(results[0], EnqueueResult::AlreadyEnqueued(first.clone()));
    let EnqueueResult::Added(second) = &results[1] else {
        panic!("{results:?}")
    };
    assert_eq!(results[2], EnqueueResult::AlreadyEnqueued(second.clone()));
    assert!(matches!(results[3], EnqueueResult::Added(_)), "{results:?}");
    assert_eq!(
        env.event_ids("outbox.mail").await,
        ids,
        "one stream entry per event"
    );
    env.cleanup().await;
}
