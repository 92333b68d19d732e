//! Operator repairs (`outbox requeue`, `outbox cancel`): their guardrails, their history rows,
//! and requeues that run beside a live dispatcher.

use std::time::Duration;

use outbox_host::store::{apply_repair, event_history, plan_repair, RepairAction, RowFilter};
use outbox_host::NewEvent;
use outbox_tests::TestEnv;
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const DAY: Duration = Duration::from_secs(86_400);

/// One row in each status, all `mail.` events; returns their ids by status.
async fn one_row_per_status(env: &TestEnv) -> Vec<(String, i64)> {
    let mut ids = Vec::new();
    for status in ["pending", "processing", "done", "failed", "cancelled"] {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO outbox_event (event_type, payload, status, attempts, last_error, available_at)
             VALUES ('mail.welcome', '{}', $1, 3, 'smtp refused', now() + interval '1 hour')
             RETURNING id",
        )
        .bind(status)
        .fetch_one(&env.pool)
        .await
        .unwrap();
        ids.push((status.to_string(), id));
    }
    ids
}

async fn statuses(env: &TestEnv) -> Vec<(i64, String, i32)> {
    sqlx::query_as("SELECT id, status, attempts FROM outbox_event ORDER BY id")
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

fn by_prefix(prefix: &str) -> RowFilter {
    RowFilter {
        type_prefix: Some(prefix.into()),
        ..RowFilter::default()
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn requeue_never_touches_pending_or_processing_rows_and_counts_them(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let rows = one_row_per_status(&env).await;
    let id_of = |s: &str| rows.iter().find(|(st, _)| st == s).unwrap().1;
    let before = statuses(&env).await;

    let plan = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &by_prefix("mail."),
        None,
        DAY,
    )
    .await
    .unwrap();
    assert_eq!(plan.ids, vec![id_of("failed"), id_of("cancelled")]);
    assert_eq!(plan.skipped.get("pending"), Some(&1));
    assert_eq!(plan.skipped.get("processing"), Some(&1));
    assert_eq!(plan.skipped.get("done"), Some(&1));
    assert!(plan.skipped_why["processing"].contains("dispatcher holds it"));

    let report = apply_repair(&env.pool, &plan, "tester", &json!({}), |_| {})
        .await
        .unwrap();
    assert_eq!((report.changed, report.changed_meanwhile), (2, 0));
    let after = statuses(&env).await;
    for (id, status, attempts) in &after {
        let (_, old_status, old_attempts) = before.iter().find(|(i, _, _)| i == id).unwrap();
        if *id == id_of("failed") || *id == id_of("cancelled") {
            assert_eq!((status.as_str(), *attempts), ("pending", 0));
        } else {
            assert_eq!(
                (status, attempts),
                (old_status, old_attempts),
                "row {id} untouched"
            );
        }
    }
    // The requeued row is due now and its previous state is in its history, not lost.
    let (status, attempts, last_error) = env.status(id_of("failed")).await;
    assert_eq!(
        (status.as_str(), attempts, last_error),
        ("pending", 0, None)
    );
    let history = event_history(&env.pool, id_of("failed")).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (
            history[0].action.as_str(),
            history[0].from_status.as_str(),
            history[0].attempts,
            history[0].last_error.as_deref(),
            history[0].actor.as_str()
        ),
        ("requeue", "failed", 3, Some("smtp refused"), "tester")
    );
    let due: bool =
        sqlx::query_scalar("SELECT available_at <= now() FROM outbox_event WHERE id = $1")
            .bind(id_of("failed"))
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert!(due);

    // Asking for a status requeue never changes is refused, and changes nothing.
    let refused = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &RowFilter {
            statuses: vec!["pending".into()],
            ..RowFilter::default()
        },
        None,
        DAY,
    )
    .await
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("changes only failed or cancelled rows"),
        "{refused}"
    );
    let no_filter = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &RowFilter::default(),
        None,
        DAY,
    )
    .await
    .unwrap_err();
    assert!(
        no_filter.to_string().contains("give --id or a filter"),
        "{no_filter}"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn cancel_never_touches_processing_rows_and_a_cancelled_row_is_never_dispatched(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let rows = one_row_per_status(&env).await;
    let id_of = |s: &str| rows.iter().find(|(st, _)| st == s).unwrap().1;
    let plan = plan_repair(
        &env.pool,
        RepairAction::Cancel,
        &by_prefix("mail."),
        None,
        DAY,
    )
    .await
    .unwrap();
    assert_eq!(plan.ids, vec![id_of("pending"), id_of("failed")]);
    assert_eq!(plan.skipped.get("processing"), Some(&1));
    assert_eq!(plan.skipped.get("cancelled"), Some(&1));
    apply_repair(&env.pool, &plan, "tester", &json!({}), |_| {})
        .await
        .unwrap();
    assert_eq!(env.status(id_of("processing")).await.0, "processing");
    assert_eq!(env.status(id_of("pending")).await.0, "cancelled");

    // Due now, a cancelled row is still never claimed; requeue brings it back.
    env.make_all_due().await;
    sqlx::query("UPDATE outbox_event SET status = 'done' WHERE status = 'processing'")
        .execute(&env.pool)
        .await
        .unwrap();
    let dispatcher = env.dispatcher("cancel-d").await;
    let drained = dispatcher.drain().await.unwrap();
    assert_eq!(drained.claimed, 0, "cancelled rows are never claimed");
    assert!(env.event_ids("outbox.mail").await.is_empty());
    let back = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &RowFilter {
            ids: vec![id_of("pending")],
            ..RowFilter::default()
        },
        None,
        DAY,
    )
    .await
    .unwrap();
    apply_repair(&env.pool, &back, "tester", &json!({}), |_| {})
        .await
        .unwrap();
    dispatcher.drain().await.unwrap();
    assert_eq!(env.event_ids("outbox.mail").await, vec![id_of("pending")]);
    let history = event_history(&env.pool, id_of("pending")).await.unwrap();
    let actions: Vec<_> = history.iter().map(|h| h.action.as_str()).collect();
    assert_eq!(actions, ["cancel", "requeue"]);
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn requeue_dry_run_changes_nothing_and_lists_exactly_what_the_real_run_changes(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, last_error)
         SELECT CASE WHEN g % 3 = 0 THEN 'mail.welcome' ELSE 'audit.login' END, '{}',
                CASE WHEN g % 2 = 0 THEN 'failed' ELSE 'done' END, 6,
                CASE WHEN g % 4 = 0 THEN 'timeout' ELSE 'refused' END
         FROM generate_series(1, 500) g",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let filter = RowFilter {
        type_prefix: Some("audit.".into()),
        error_contains: Some("time".into()),
        ..RowFilter::default()
    };
    let before = statuses(&env).await;
    let dry = plan_repair(&env.pool, RepairAction::Requeue, &filter, Some(50), DAY)
        .await
        .unwrap();
    assert_eq!(statuses(&env).await, before, "planning changes nothing");
    assert_eq!(dry.ids.len(), 50);
    assert!(dry.beyond_limit > 0);

    let real = plan_repair(&env.pool, RepairAction::Requeue, &filter, Some(50), DAY)
        .await
        .unwrap();
    apply_repair(&env.pool, &real, "tester", &json!({}), |_| {})
        .await
        .unwrap();
    let changed: Vec<i64> = statuses(&env)
        .await
        .into_iter()
        .zip(&before)
        .filter(|(after, before)| after != *before)
        .map(|(after, _)| after.0)
        .collect();
    assert_eq!(
        changed, dry.ids,
        "the dry run listed exactly the rows the run changed"
    );
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn requeue_of_100000_failed_rows_beside_a_running_dispatcher_delivers_each_exactly_once(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.dispatch_batch_size = 1000;
    const N: i64 = 100_000;
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, last_error, processed_at)
         SELECT 'mail.welcome', jsonb_build_object('n', g), 'failed', 6, 'smtp refused', now()
         FROM generate_series(1, $1) g",
    )
    .bind(N)
    .execute(&env.pool)
    .await
    .unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env.dispatcher("requeue-beside").await;
    let running = tokio::spawn(dispatcher.run(shutdown.clone()));
    let plan = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &by_prefix("mail."),
        None,
        DAY,
    )
    .await
    .unwrap();
    assert_eq!(plan.ids.len() as i64, N);
    let mut batches = 0;
    let report = apply_repair(&env.pool, &plan, "tester", &json!({}), |_| batches += 1)
        .await
        .unwrap();
    assert_eq!(report.changed as i64, N);
    assert_eq!(batches, N / 1000, "in batches of 1000, a transaction each");
    let started = std::time::Instant::now();
    while env.count("done").await < N {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{} of {N} done",
            env.count("done").await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    shutdown.cancel();
    running.await.unwrap();
    let mut ids = env.event_ids("outbox.mail").await;
    assert_eq!(ids.len() as i64, N, "each requeued row enqueued once");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len() as i64, N, "no row enqueued twice");
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn requeue_of_one_fan_out_destination_does_not_redo_the_destination_that_succeeded(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.max_retries = 1;
    let table = TestEnv::table_with(&[("order.", &["outbox.audit", "outbox.search-index"])]);
    let id = env
        .publish_all(vec![NewEvent::new("order.placed", json!({"order": 1}))])
        .await[0];
    let mut conn = env.redis.clone();
    let broken = format!("{}outbox.search-index", env.prefix);
    redis::cmd("SET")
        .arg(&broken)
        .arg("not a stream")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();
    let dispatcher = env.dispatcher_with("fanout-requeue", table).await;
    for _ in 0..3 {
        dispatcher.drain().await.unwrap();
        env.make_all_due().await;
    }
    assert_eq!(env.status(id).await.0, "failed");

    let plan = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &RowFilter {
            destination: Some("outbox.search-index".into()),
            ..RowFilter::default()
        },
        None,
        DAY,
    )
    .await
    .unwrap();
    assert_eq!(plan.ids, vec![id]);
    assert!(
        plan.warnings
            .iter()
            .any(|w| w.contains("already handed to some of their fan-out destinations")),
        "{:?}",
        plan.warnings
    );
    let other = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &RowFilter {
            destination: Some("outbox.audit".into()),
            ..RowFilter::default()
        },
        None,
        DAY,
    )
    .await
    .unwrap();
    assert!(
        other.ids.is_empty(),
        "the audit hand-off succeeded: nothing to requeue for it"
    );

    // Repair the queue and drop the audit dedupe marker: a redo would show a second entry.
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
    apply_repair(&env.pool, &plan, "tester", &json!({}), |_| {})
        .await
        .unwrap();
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

/// `n` failed `mail.welcome` rows.
async fn failed_rows(env: &TestEnv, n: i64) {
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, status, attempts, last_error)
         SELECT 'mail.welcome', jsonb_build_object('n', g), 'failed', 6, 'smtp refused'
         FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(&env.pool)
    .await
    .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_repair_whose_audit_row_cannot_be_written_changes_nothing(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    failed_rows(&env, 10).await;
    sqlx::query(
        "ALTER TABLE outbox_audit ADD CONSTRAINT test_refuses_requeue CHECK (command <> 'requeue')",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let plan = plan_repair(
        &env.pool,
        RepairAction::Requeue,
        &by_prefix("mail."),
        None,
        DAY,
    )
    .await
    .unwrap();
    assert_eq!(plan.ids.len(), 10);
    let refused = apply_repair(&env.pool, &plan, "tester", &json!({"limit": null}), |_| {}).await;
    assert!(refused.is_err(), "the repair fails with its audit row");
    assert_eq!(env.count("failed").await, 10, "no row changed unaudited");
    let history: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_event_history")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(history, 0, "no history row without the audit row");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_repair_in_several_batches_keeps_one_audit_row_counting_every_committed_row(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    failed_rows(&env, 2500).await;
    let plan = plan_repair(
        &env.pool,
        RepairAction::Cancel,
        &by_prefix("mail."),
        None,
        DAY,
    )
    .await
    .unwrap();
    let arguments = json!({"filter": {"type_prefix": "mail."}});
    let report = apply_repair(&env.pool, &plan, "ada", &arguments, |_| {})
        .await
        .unwrap();
    assert_eq!(report.changed, 2500);
    let audit: Vec<(String, String, serde_json::Value, bool, i64)> = sqlx::query_as(
        "SELECT operator, command, arguments, dry_run, rows_affected FROM outbox_audit",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        vec![("ada".into(), "cancel".into(), arguments, false, 2500)],
        "one audit row for the whole repair, counting every batch"
    );
}
