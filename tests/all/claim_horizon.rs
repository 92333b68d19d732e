//! The claim horizon: claims, the horizon's own scan and the host's periodic reads of open rows
//! start where no claimable row can be earlier (the instant, and the first live row's id when
//! it alone bounds it), never at the start of the claim index, and still miss no row (a late
//! commit of a long transaction, sessions this role cannot see).

use std::time::{Duration, Instant};

use outbox_host::store;
use outbox_host::NewEvent;
use outbox_tests::TestEnv;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

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

/// The fewest buffers (and the rows) of up to five reads of [`claim_buffers`] from `horizon`,
/// stopping once `enough` holds: what one read touches varies with what else the machine's
/// PostgreSQL runs (4 alone, 17 once in the middle of the whole suite), and the fewest of a
/// few reads is what the plan needs.
async fn fewest_claim_buffers(
    pool: &PgPool,
    horizon: store::ClaimHorizon,
    enough: impl Fn(i64) -> bool,
) -> (i64, i64) {
    let mut best = claim_buffers(pool, horizon).await;
    for _ in 0..4 {
        if enough(best.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let again = claim_buffers(pool, horizon).await;
        if again.0 < best.0 {
            best = again;
        }
    }
    best
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

/// `events` events of `event_type` in an `outbox_event` autovacuum leaves alone, then `steps`
/// run on them in order (what a dispatcher did to them).
async fn events_left_unvacuumed(env: &TestEnv, event_type: &str, events: i64, steps: &[&str]) {
    sqlx::query("ALTER TABLE outbox_event SET (autovacuum_enabled = false)")
        .execute(&env.pool)
        .await
        .unwrap();
    env.insert_many(event_type, events).await;
    for step in steps {
        sqlx::query(step).execute(&env.pool).await.unwrap();
    }
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
    events_left_unvacuumed(
        &env,
        "mail.finished",
        30_000,
        &[
            "UPDATE outbox_event SET status = 'processing', attempts = 1, claimed_by = 'w', claimed_at = now(),
                claim_expires_at = now() + interval '5 minutes', available_at = now() + interval '5 minutes'",
            "UPDATE outbox_event SET status = 'done', processed_at = now(), claim_expires_at = NULL",
        ],
    )
    .await;
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
    let (from_horizon, rows_from_horizon) =
        fewest_claim_buffers(&env.pool, horizon, |buffers| buffers * 10 < from_start).await;
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
    events_left_unvacuumed(
        &env,
        "mail.burst",
        50_000,
        &[
            "UPDATE outbox_event SET status = 'processing', attempts = 1, claimed_by = 'w', claimed_at = now(),
                claim_expires_at = now() + interval '5 minutes' WHERE id <= 45000",
            "UPDATE outbox_event SET status = 'done', processed_at = now(), claim_expires_at = NULL
         WHERE id <= 45000",
        ],
    )
    .await;
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
    let best =
        fewest_claim_buffers(&env.pool, horizon, |buffers| buffers * 5 < whole_instant).await;
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
    env.host_last_seen("dead-host", Duration::from_secs(3600))
        .await;
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

/// Times the heartbeat's release of stale hosts' claims read `outbox_event` (the summed loops
/// of every scan of it in the plan, `EXPLAIN (ANALYZE, FORMAT JSON)`, which runs the statement).
async fn event_reads_of_stale_claims_release(pool: &PgPool) -> i64 {
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) {}",
        store::RELEASE_STALE_CLAIMS_SQL
    ))
    .bind(store::STALE_HOST_AFTER.as_secs_f64())
    .bind(None::<chrono::DateTime<chrono::Utc>>)
    .fetch_one(pool)
    .await
    .unwrap();
    fn loops_on(node: &serde_json::Value, table: &str) -> i64 {
        let scan = node["Node Type"]
            .as_str()
            .is_some_and(|t| t.ends_with("Scan"));
        let own = if scan && node["Relation Name"] == table {
            node["Actual Loops"].as_i64().unwrap_or(0)
        } else {
            0
        };
        let children = node["Plans"].as_array().map_or(0, |plans| {
            plans.iter().map(|child| loops_on(child, table)).sum()
        });
        own + children
    }
    loops_on(&plan[0]["Plan"], "outbox_event")
}

/// While every host is live (nearly always), the release of stale hosts' claims that every
/// host runs at every heartbeat reads no event: its look at the heartbeat table decides first.
/// Without it, on statistics saying few rows are `processing`, PostgreSQL scanned the whole
/// table for them each time (260 ms of its CPU with 2,000,000 rows). With a stale host holding
/// a claim, the events are read and the claim released.
#[sqlx::test(migrations = "../migrations")]
async fn releasing_stale_hosts_claims_reads_no_event_while_every_host_is_live(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    env.insert_many("mail.backlog", 5_000).await;
    sqlx::query("ANALYZE outbox_event")
        .execute(&env.pool)
        .await
        .unwrap();
    env.host_last_seen("live-host", Duration::ZERO).await;
    assert_eq!(event_reads_of_stale_claims_release(&env.pool).await, 0);

    env.host_last_seen("dead-host", Duration::from_secs(120))
        .await;
    let held: i64 = sqlx::query_scalar(
        "UPDATE outbox_event SET status = 'processing', attempts = 1, claimed_at = now(),
                claimed_by = 'dead-host', claim_expires_at = now() + interval '5 minutes'
         WHERE id = (SELECT min(id) FROM outbox_event) RETURNING id",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert!(event_reads_of_stale_claims_release(&env.pool).await > 0);
    assert_eq!(env.status(held).await, ("pending".into(), 0, None));
    env.cleanup().await;
}

/// The claim loop never waits for a horizon refresh but the first: a due refresh runs on a task
/// of its own while the claim goes on from the horizon in force (still a valid lower bound),
/// and the refreshed horizon is in force once that task is done. Here the refresh is held up
/// by a lock on the table; a claim waiting for it would wait until the lock goes.
#[sqlx::test(migrations = "../migrations")]
async fn a_due_horizon_refresh_runs_behind_the_claim_and_never_holds_it_up(pool: PgPool) {
    let tracker = std::sync::Arc::new(store::HorizonTracker::default());
    let first = tracker.current_refreshed_behind(&pool).await;
    assert!(
        first.at.is_some(),
        "the first horizon is waited for: {first:?}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;

    // A transaction holding the table: the refresh's scan for the oldest live row waits on it.
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_event IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    // Four batches claimed from it: a refresh is due however recent the horizon is.
    tracker.claimed(400, 100);
    for _ in 0..3 {
        let in_force = tokio::time::timeout(
            Duration::from_secs(5),
            tracker.current_refreshed_behind(&pool),
        )
        .await
        .expect("the claim waited for a refresh held up by the lock");
        assert_eq!(
            in_force, first,
            "the horizon in force while its refresh is held up"
        );
    }
    let blocked = Instant::now();
    let waiting = loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks
             WHERE relation = 'outbox_event'::regclass AND NOT granted",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting > 0 || blocked.elapsed() > Duration::from_secs(5) {
            break waiting;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        waiting, 1,
        "one refresh runs behind, however many claims found it due"
    );

    holder.commit().await.unwrap();
    let released = Instant::now();
    loop {
        let in_force = tracker.current_refreshed_behind(&pool).await;
        if in_force != first {
            assert!(in_force.at > first.at, "{in_force:?} after {first:?}");
            break;
        }
        assert!(
            released.elapsed() < Duration::from_secs(10),
            "the refreshed horizon was not in force 10 s after the lock went"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
