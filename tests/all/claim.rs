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
    sqlx::query(
        "INSERT INTO outbox_worker (id, host_name, version, last_seen)
         VALUES ('dead-host', 'h', '0', now() - interval '2 minutes'), ('live-host', 'h', '0', now())",
    )
    .execute(&env.pool)
    .await
    .unwrap();
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

/// The shared buffers the claim statement's scan of the claim index touches reading it from
/// `horizon` (`EXPLAIN (ANALYZE, BUFFERS)` in a transaction rolled back), and the rows the
/// statement would claim.
async fn claim_buffers(pool: &PgPool, horizon: store::ClaimHorizon) -> (i64, i64) {
    let mut tx = pool.begin().await.unwrap();
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {}",
        store::CLAIM_SQL
    ))
    .bind(1000_i64)
    .bind("explain")
    .bind(300.0_f64)
    .bind(horizon.at)
    .bind(horizon.from_id)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    let top = &plan[0]["Plan"];
    let scan = index_scan(top, "outbox_event_claimable_idx")
        .unwrap_or_else(|| panic!("the claim does not read the claim index: {plan}"));
    let blocks = |f: &str| scan[f].as_i64().unwrap_or(0);
    (
        blocks("Shared Hit Blocks") + blocks("Shared Read Blocks"),
        top["Actual Rows"].as_i64().unwrap_or(-1),
    )
}

/// The plan node scanning `index`, anywhere under `node`.
fn index_scan<'a>(node: &'a serde_json::Value, index: &str) -> Option<&'a serde_json::Value> {
    if node["Index Name"] == index {
        return Some(node);
    }
    node["Plans"]
        .as_array()?
        .iter()
        .find_map(|child| index_scan(child, index))
}

/// 30,000 events went through the table (a claim's version and a done version each, as the
/// dispatcher leaves them) and nothing vacuumed it: their dead entries fill the start of the
/// claim index. Read from the claim horizon, a claim of the 10 new events touches a small part
/// of what it touches read from the start, and claims the same rows.
#[sqlx::test(migrations = "../migrations")]
async fn a_claim_reads_the_claim_index_from_its_horizon_not_past_every_finished_event(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    sqlx::query("ALTER TABLE outbox_event SET (autovacuum_enabled = false)")
        .execute(&env.pool)
        .await
        .unwrap();
    env.insert_many("mail.finished", 30_000).await;
    for step in [
        "UPDATE outbox_event SET status = 'processing', attempts = 1, claimed_by = 'w', claimed_at = now(),
                claim_expires_at = now() + interval '5 minutes', available_at = now() + interval '5 minutes'",
        "UPDATE outbox_event SET status = 'done', processed_at = now(), claim_expires_at = NULL",
    ] {
        sqlx::query(step).execute(&env.pool).await.unwrap();
    }
    env.insert_many("mail.fresh", 10).await;
    let horizon = store::claim_horizon(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    assert!(
        horizon.exact,
        "the tests' role reads every open transaction"
    );
    let (from_start, rows_from_start) =
        claim_buffers(&env.pool, store::ClaimHorizon::everything()).await;
    // The buffers one read touches vary with what else the machine's PostgreSQL runs (4 alone,
    // 17 once in the middle of the whole suite): the fewest of a few reads is what the plan
    // needs.
    let mut best = claim_buffers(&env.pool, horizon).await;
    for _ in 0..4 {
        if best.0 * 10 < from_start {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = claim_buffers(&env.pool, horizon).await;
        if again.0 < best.0 {
            best = again;
        }
    }
    let (from_horizon, rows_from_horizon) = best;
    println!(
        "claim index buffers: {from_start} read from the start, {from_horizon} from the horizon"
    );
    assert_eq!(rows_from_start, 10);
    assert_eq!(rows_from_horizon, 10, "the horizon hides no claimable row");
    assert!(
        from_horizon * 10 < from_start,
        "from the horizon {from_horizon} buffers, from the start {from_start}"
    );
    // The bounded scan for the next horizon starts at this one and finds the same rows.
    let next = store::claim_horizon(&env.pool, horizon).await.unwrap();
    assert!(next.at >= horizon.at);
    let claim = store::claim_due_events_from(&env.pool, "w2", 100, Duration::from_secs(300), next)
        .await
        .unwrap();
    assert_eq!(claim.events.len(), 10);
}

/// Events committed together share one `available_at` (their transaction's start). After
/// 45,000 of a burst of 50,000 went through (as the dispatcher leaves them: the claim keeps
/// `available_at`), the claim index holds their dead entries at that same instant, before the
/// live ones. The horizon names the first live row's id too, so a claim starts there instead of
/// walking every finished event of the burst (3 ms and 100,000 entries per claim at 50,000),
/// and still claims the burst's next rows in order.
#[sqlx::test(migrations = "../migrations")]
async fn a_claim_inside_a_burst_committed_at_one_instant_starts_at_its_first_live_row(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    sqlx::query("ALTER TABLE outbox_event SET (autovacuum_enabled = false)")
        .execute(&env.pool)
        .await
        .unwrap();
    env.insert_many("mail.burst", 50_000).await;
    for step in [
        "UPDATE outbox_event SET status = 'processing', attempts = 1, claimed_by = 'w', claimed_at = now(),
                claim_expires_at = now() + interval '5 minutes' WHERE id <= 45000",
        "UPDATE outbox_event SET status = 'done', processed_at = now(), claim_expires_at = NULL
         WHERE id <= 45000",
    ] {
        sqlx::query(step).execute(&env.pool).await.unwrap();
    }
    let burst: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT min(available_at) FROM outbox_event")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    let horizon = store::claim_horizon(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    assert_eq!(horizon.at, Some(burst));
    assert_eq!(horizon.from_id, Some(45_001), "the burst's first live row");
    let instant_only = store::ClaimHorizon {
        from_id: None,
        ..horizon
    };
    let (whole_instant, rows) = claim_buffers(&env.pool, instant_only).await;
    assert_eq!(rows, 1000);
    let mut best = claim_buffers(&env.pool, horizon).await;
    for _ in 0..4 {
        if best.0 * 5 < whole_instant {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = claim_buffers(&env.pool, horizon).await;
        if again.0 < best.0 {
            best = again;
        }
    }
    println!(
        "claim index buffers: {whole_instant} from the burst's instant, {} from its first live row",
        best.0
    );
    assert_eq!(best.1, 1000, "the horizon hides no claimable row");
    assert!(
        best.0 * 5 < whole_instant,
        "from the first live row {} buffers, from the instant {whole_instant}",
        best.0
    );
    // The next horizon's scan starts at this one and finds the same row; claims go on in order.
    let next = store::claim_horizon(&env.pool, horizon).await.unwrap();
    assert_eq!(next, horizon);
    let claim = store::claim_due_events_from(&env.pool, "w2", 100, Duration::from_secs(300), next)
        .await
        .unwrap();
    let ids: Vec<i64> = claim.events.iter().map(|e| e.id).collect();
    assert_eq!(ids, (45_001..=45_100).collect::<Vec<i64>>());
    env.cleanup().await;
}

/// A producer's transaction stamps its event with the transaction's start (`now()`), and may
/// commit long after: meanwhile the dispatcher claims newer events and moves its horizon on.
/// The open transaction holds the horizon back, so the late event is claimed as soon as it
/// commits, not at the next full scan minutes later.
#[sqlx::test(migrations = "../migrations")]
async fn an_event_committed_late_by_a_long_transaction_is_claimed_as_soon_as_it_commits(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let dispatcher = env.dispatcher("horizon-host").await;
    let stats = dispatcher.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));

    let mut late = env.pool.begin().await.unwrap();
    let late_id = outbox_host::publish::publish(&mut late, NewEvent::new("mail.late", json!({})))
        .await
        .unwrap();
    // Newer events flow for 3 s (several horizon refreshes) while that transaction stays open.
    let flowing = Instant::now();
    let mut published = 0;
    while flowing.elapsed() < Duration::from_secs(3) {
        env.publish_all(vec![NewEvent::new(
            "mail.welcome",
            json!({ "n": published }),
        )])
        .await;
        published += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    late.commit().await.unwrap();
    let committed = Instant::now();
    while env.status(late_id).await.0 != "done" {
        assert!(
            committed.elapsed() < Duration::from_secs(10),
            "the late event was not claimed within 10 s of its commit ({} others done)",
            stats.done.load(std::sync::atomic::Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    task.await.unwrap();
}

/// A role that may not read other sessions' transaction starts (no `pg_read_all_stats`) cannot
/// prove where the oldest open transaction began: its horizon says so and stays the hidden
/// margin before now, so an event of a hidden transaction is still found.
#[sqlx::test(migrations = "../migrations")]
async fn a_role_that_cannot_see_other_transactions_keeps_the_horizon_a_margin_before_now(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let role = format!("outbox_horizon_{}", std::process::id());
    sqlx::query(&format!("DROP ROLE IF EXISTS {role}"))
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query(&format!("GRANT SELECT ON outbox_event TO {role}"))
        .execute(&env.pool)
        .await
        .unwrap();
    let options: sqlx::postgres::PgConnectOptions = env.database_url().await.parse().unwrap();
    let restricted = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options.username(&role).password(""))
        .await
        .unwrap();

    // Another role's transaction is open: its start is hidden from the restricted role.
    let mut open = env.pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *open).await.unwrap();
    let hidden = store::claim_horizon(&restricted, store::ClaimHorizon::everything())
        .await
        .unwrap();
    let seen = store::claim_horizon(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    open.rollback().await.unwrap();
    restricted.close().await;
    sqlx::query(&format!("REVOKE ALL ON outbox_event FROM {role}"))
        .execute(&env.pool)
        .await
        .unwrap();
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(&env.pool)
        .await
        .unwrap();

    assert!(seen.exact, "the superuser sees every transaction");
    assert!(!hidden.exact, "the restricted role cannot: {hidden:?}");
    let margin = chrono::Duration::from_std(store::HIDDEN_MARGIN).unwrap();
    assert!(
        hidden.at.unwrap() <= chrono::Utc::now() - margin + chrono::Duration::seconds(1),
        "{hidden:?}"
    );
}

/// What a running host reads of open rows every few seconds (the gauges, the alerts, the
/// heartbeat's release of a dead host's claims, the console's overview) starts at the claim
/// horizon, like the claim, so its cost follows the open rows and never the entries finished
/// events left at the start of the claim index. Shown with a row the horizon excludes: one
/// written by hand behind it (the case the dispatcher's periodic full scan covers), which each
/// read finds from the start of the index and does not find from the horizon.
#[sqlx::test(migrations = "../migrations")]
async fn the_hosts_periodic_reads_of_open_rows_start_at_the_claim_horizon(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    env.insert_many("mail.open", 3).await;
    sqlx::query(
        "INSERT INTO outbox_worker (id, host_name, version, last_seen)
         VALUES ('dead-host', 'h', 'test', now() - interval '1 hour')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let horizon = store::claim_horizon(&env.pool, store::ClaimHorizon::everything())
        .await
        .unwrap();
    assert!(horizon.exact);
    // Behind the horizon: a late pending row and a row the dead host holds.
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, available_at)
         VALUES ('mail.behind', '{}', now() - interval '2 hours')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, claimed_by, claimed_at,
                                   claim_expires_at, available_at)
         VALUES ('mail.held', '{}', 'processing', 1, 'dead-host', now() - interval '2 hours',
                 now() + interval '1 hour', now() - interval '2 hours')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let everything = store::ClaimHorizon::everything();
    let late = Duration::from_secs(60);

    let from_horizon = store::pending_and_failed(&env.pool, late, horizon)
        .await
        .unwrap();
    let from_start = store::pending_and_failed(&env.pool, late, everything)
        .await
        .unwrap();
    assert_eq!((from_horizon.pending, from_horizon.late), (3, 0));
    assert_eq!((from_start.pending, from_start.late), (4, 1));

    let counts = store::console_counts(&env.pool, horizon).await.unwrap();
    assert_eq!((counts.pending, counts.processing), (3, 0));
    let counts = store::console_counts(&env.pool, everything).await.unwrap();
    assert_eq!((counts.pending, counts.processing), (4, 1));

    let waited = store::oldest_due_pending_seconds(&env.pool, horizon)
        .await
        .unwrap()
        .unwrap();
    assert!(waited < 3600.0, "from the horizon: {waited} s");
    let waited = store::oldest_due_pending_seconds(&env.pool, everything)
        .await
        .unwrap()
        .unwrap();
    assert!(waited >= 7000.0, "from the start: {waited} s");

    let released = store::release_stale_claims(&env.pool, store::STALE_HOST_AFTER, horizon)
        .await
        .unwrap();
    assert!(released.is_empty(), "{released:?}");
    let released = store::release_stale_claims(&env.pool, store::STALE_HOST_AFTER, everything)
        .await
        .unwrap();
    assert_eq!(released.len(), 1);
    assert_eq!(released[0].events, 1);
    env.cleanup().await;
}

/// The dispatcher's own connections commit without waiting for the WAL flush (its claims and
/// outcome records are idempotent to lose in a PostgreSQL crash; see `store::dispatch_pool`);
/// the pool it was made from, which producers and receipts use, keeps the server's setting.
#[sqlx::test(migrations = "../migrations")]
async fn the_dispatch_pool_commits_asynchronously_and_leaves_the_hosts_pool_alone(pool: PgPool) {
    let dispatch = store::dispatch_pool(&pool);
    let mode: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&dispatch)
        .await
        .unwrap();
    assert_eq!(mode, "off");
    let mode: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(mode, "on");
    let seqscan: String = sqlx::query_scalar("SHOW enable_seqscan")
        .fetch_one(&dispatch)
        .await
        .unwrap();
    assert_eq!(seqscan, "off");
    dispatch.close().await;
}
