//! A small finished batch's record rides on the next claim's statement: the claim records only
//! rows still held under the lease it names, never claims a row it records, and at a trickle of
//! events nothing is lost or doubled, whether the record rode or the batch wrote it itself.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use outbox_host::dispatch::Dispatcher;
use outbox_host::routing::RouterHandle;
use outbox_host::{store, NewEvent};
use outbox_tests::{infra_retries, wait_for, PgKiller, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

#[sqlx::test(migrations = "../migrations")]
async fn a_claim_records_only_rows_held_under_their_lease_and_never_claims_a_row_it_records(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let ids = env
        .publish_all(
            (0..3)
                .map(|i| NewEvent::new("mail.ride", json!({"i": i})))
                .collect(),
        )
        .await;
    // Two rows claimed under a lease that runs out at once: both are claimable again.
    let first = store::claim_due_events(&env.pool, "w", 2, Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(first.events.len(), 2);
    tokio::time::sleep(Duration::from_millis(20)).await;

    // The first is recorded under its lease; the second names a lease it is not held under, so
    // it is not recorded, and neither is claimed by the statement that names them.
    let other_lease = first.claimed_at - chrono::Duration::seconds(1);
    let (claim, recorded) = store::claim_recording_done(
        &env.pool,
        "w",
        10,
        Duration::from_secs(300),
        store::ClaimHorizon::everything(),
        &[(ids[0], first.claimed_at), (ids[1], other_lease)],
    )
    .await
    .unwrap();
    assert_eq!(recorded, vec![ids[0]], "only the row held under its lease");
    let claimed: Vec<i64> = claim.events.iter().map(|e| e.id).collect();
    assert_eq!(
        claimed,
        vec![ids[2]],
        "a row the statement names is not claimed"
    );
    assert_eq!(env.status(ids[0]).await.0, "done");
    assert_eq!(env.status(ids[1]).await.0, "processing");

    // The next plain claim takes the expired one over.
    let next = store::claim_due_events(&env.pool, "w", 10, Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(next.events.len(), 1);
    assert_eq!(next.events[0].id, ids[1]);
    assert!(next.events[0].recovered_lease);

    // Nothing claimable: one row still comes back, with what was recorded and no event.
    let (empty, recorded) = store::claim_recording_done(
        &env.pool,
        "w",
        10,
        Duration::from_secs(300),
        store::ClaimHorizon::everything(),
        &[(ids[1], next.claimed_at), (ids[2], claim.claimed_at)],
    )
    .await
    .unwrap();
    assert!(empty.events.is_empty());
    assert_eq!(
        recorded.iter().collect::<HashSet<_>>(),
        [ids[1], ids[2]].iter().collect()
    );
    assert_eq!(env.count("done").await, 3);
    env.cleanup().await;
}

/// The statement as the dispatcher runs it stays linear in its batch with many rows waiting: the
/// claim part reads the claim index, the record part the primary key.
#[sqlx::test(migrations = "../migrations")]
async fn the_claim_recording_done_rows_reaches_only_its_rows_with_many_waiting(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    env.insert_many("mail.waiting", 20_000).await;
    sqlx::query("ANALYZE outbox_event")
        .execute(&env.pool)
        .await
        .unwrap();
    let dispatch = store::dispatch_pool(&env.pool);
    let plan: Vec<String> =
        sqlx::query_scalar(&format!("EXPLAIN {}", store::CLAIM_RECORDING_DONE_SQL))
            .bind(1000_i64)
            .bind("planner")
            .bind(300.0_f64)
            .bind(None::<chrono::DateTime<chrono::Utc>>)
            .bind(None::<i64>)
            .bind(vec![1_i64, 2])
            .bind(vec![chrono::Utc::now(); 2])
            .fetch_all(&dispatch)
            .await
            .unwrap();
    let plan = plan.join("\n");
    println!("{plan}");
    for index in ["outbox_event_claimable_idx", "outbox_event_pkey"] {
        assert!(plan.contains(index), "{index} in:\n{plan}");
    }
    assert!(!plan.contains("Seq Scan"), "{plan}");
    dispatch.close().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn records_ride_on_the_next_claim_at_a_trickle_and_no_event_is_lost_or_doubled(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    // Only notifications wake the dispatcher: each event is claimed on its own.
    env.settings.dispatch_interval = Duration::from_secs(30);
    let dispatcher = env.dispatcher("trickle").await;
    let stats = dispatcher.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));

    // Let the loop make its first claim and go idle: from then on only a notification wakes it.
    tokio::time::sleep(Duration::from_millis(300)).await;

    // One event alone: no claim comes within the wait, so its batch records itself.
    let lone = env
        .publish_all(vec![NewEvent::new("mail.lone", json!({}))])
        .await[0];
    wait_for(
        "the lone event to be done",
        Duration::from_secs(5),
        async || env.status(lone).await.0 == "done",
    )
    .await;
    assert_eq!(
        stats
            .recorded_on_claim
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no claim came to take the lone event's record"
    );

    // A trickle, one event per transaction about every millisecond: most records ride.
    let mut ids = vec![lone];
    for i in 0..300 {
        ids.extend(
            env.publish_all(vec![NewEvent::new("mail.trickle", json!({"i": i}))])
                .await,
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    wait_for(
        "every event to be done",
        Duration::from_secs(10),
        async || env.count("done").await == 301,
    )
    .await;
    let rode = stats
        .recorded_on_claim
        .load(std::sync::atomic::Ordering::Relaxed);
    let batches = stats.batches.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        rode > 0,
        "some of {batches} batches' records rode on the next claim"
    );
    shutdown.cancel();
    task.await.unwrap();

    let mut in_stream = env.event_ids("outbox.mail").await;
    in_stream.sort_unstable();
    assert_eq!(in_stream, ids, "one stream entry per event");
    let attempts: Vec<i32> =
        sqlx::query_scalar("SELECT DISTINCT attempts FROM outbox_event WHERE status = 'done'")
            .fetch_all(&env.pool)
            .await
            .unwrap();
    assert_eq!(attempts, vec![1], "every event done on its first attempt");
    env.cleanup().await;
}

/// A record waiting for a claim whose statement dies with its backend is written by its batch
/// (or was written by the statement before its reply was lost): under the default lease (300 s)
/// a record lost between the two would leave its row `processing` far past this test.
#[sqlx::test(migrations = "../migrations")]
async fn a_trickle_through_terminated_backends_loses_no_riding_record_and_costs_no_attempt(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    super::blips::default_lease_and_backoff(&mut env);
    let mut pg = PgKiller::new(&env).await;
    let dispatcher = Dispatcher::new(
        pg.host_pool().await,
        env.sink().await,
        RouterHandle::new(TestEnv::default_table()),
        Arc::new(env.settings.clone()),
        "trickle-cut",
    );
    let stats = dispatcher.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(dispatcher.run(shutdown.clone()));

    let claims_cut_before = infra_retries("postgres", "claim");
    // At least 40 cuts, and more (at most 150) until one demonstrably hit a claim statement: a
    // cut that lands while the loop waits for a wake-up may leave the next claim a fresh
    // connection.
    let (mut total, mut terminated, mut cut) = (0_i64, 0, 0);
    while cut < 150 && (cut < 40 || infra_retries("postgres", "claim") <= claims_cut_before) {
        for _ in 0..(8 + cut % 7) {
            env.insert_many("mail.trickle", 1).await;
            total += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        terminated += pg.terminate().await;
        cut += 1;
    }
    assert!(terminated > 0, "no backend of the host was terminated");
    assert!(
        infra_retries("postgres", "claim") > claims_cut_before,
        "no cut hit a claim statement"
    );
    wait_for(
        "every event to be done well within the lease",
        Duration::from_secs(20),
        async || env.count("done").await == total,
    )
    .await;
    assert!(
        stats
            .recorded_on_claim
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "records rode on claims between the cuts"
    );
    shutdown.cancel();
    task.await.unwrap();

    let max_attempts: i32 = sqlx::query_scalar("SELECT max(attempts) FROM outbox_event")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(max_attempts, 1, "a cut was counted as an attempt");
    let ids = env.event_ids("outbox.mail").await;
    assert_eq!(
        i64::try_from(ids.len()).unwrap(),
        total,
        "one entry per event"
    );
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "no event enqueued twice"
    );
    env.cleanup().await;
}
