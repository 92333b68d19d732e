//! Retention: deleting what the outbox tables no longer need to keep.
//!
//! Owns the delete statements of one retention pass ([`purge_expired`]): `done` events past
//! their retention, `failed` and `cancelled` events past theirs (each with its receipts, which
//! have no foreign key, in the same statement; deliveries and history rows go by their
//! `ON DELETE CASCADE`), receipts past their own retention (whatever became of their event)
//! and `outbox_event_history` rows past theirs. Every statement deletes at most one batch of
//! rows found through an index (`LIMIT` in a subquery of ids, `FOR UPDATE SKIP LOCKED` so it
//! never waits on a dispatcher or an operator's repair), in a transaction of its own that first
//! takes the transaction-level advisory lock [`RETENTION_LOCK`] without waiting: one host
//! deletes at a time, a crash or a dropped connection releases the lock with its transaction,
//! and a backlog of any size goes in short transactions. It never deletes a `pending` or
//! `processing` event (the claim index and the claim horizon only ever see those).

use std::time::Duration;

use sqlx::PgPool;

use super::{Context, StoreError, RETENTION_LOCK};

/// How long each kind of row is kept, and how many rows one statement deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// `done` events, by `processed_at`.
    pub done: Duration,
    /// `failed` and `cancelled` events, by `processed_at` (when they failed or were cancelled).
    pub failed: Duration,
    /// `outbox_receipt` rows, by `updated_at` (their last outcome).
    pub receipts: Duration,
    /// `outbox_event_history` rows, by `at`.
    pub history: Duration,
    /// Rows deleted per statement (clamped to 1..=10000).
    pub batch_size: i64,
}

impl RetentionPolicy {
    /// The policy of `settings` (`OUTBOX_*_RETENTION_HOURS`, `OUTBOX_DONE_RETENTION_BATCH_SIZE`).
    pub fn from_settings(settings: &crate::config::Settings) -> Self {
        Self {
            done: settings.done_retention,
            failed: settings.failed_retention,
            receipts: settings.receipt_retention,
            history: settings.history_retention,
            batch_size: settings.done_retention_batch_size,
        }
    }

    fn batch(&self) -> i64 {
        self.batch_size.clamp(1, 10_000)
    }
}

/// What one retention pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// `done` events.
    pub done_events: u64,
    /// `failed` events.
    pub failed_events: u64,
    /// `cancelled` events.
    pub cancelled_events: u64,
    /// Receipts (with their events, and past their own retention).
    pub receipts: u64,
    /// `outbox_event_history` rows past their retention (not counting those that went with
    /// their event).
    pub history: u64,
    /// The pass stopped early: another host held [`RETENTION_LOCK`] (it deletes instead).
    pub yielded: bool,
}

impl RetentionReport {
    /// Every row deleted, by the `kind` label of `outbox_retention_deleted_total`.
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        [
            ("done_events", self.done_events),
            ("failed_events", self.failed_events),
            ("cancelled_events", self.cancelled_events),
            ("receipts", self.receipts),
            ("history", self.history),
        ]
    }

    /// Rows deleted in all.
    pub fn total(&self) -> u64 {
        self.by_kind().iter().map(|(_, n)| n).sum()
    }
}

/// Delete the finished events of one status older than $1 seconds, at most $2, oldest first,
/// with their receipts. Read through `outbox_event_done_idx` (done) or
/// `outbox_event_finished_at_idx` (failed, cancelled): the status is written into the text so
/// the planner can match the partial index.
macro_rules! purge_events_sql {
    ($status:literal) => {
        concat!(
            "WITH gone AS (
                DELETE FROM outbox_event
                WHERE id = ANY(ARRAY(
                    SELECT id FROM outbox_event
                    WHERE status = '",
            $status,
            "' AND processed_at < now() - make_interval(secs => $1)
                    ORDER BY processed_at
                    LIMIT $2
                    FOR UPDATE SKIP LOCKED
                ))
                RETURNING id
            ),
            receipts AS (
                DELETE FROM outbox_receipt WHERE event_id = ANY(ARRAY(SELECT id FROM gone))
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM receipts)"
        )
    };
}

const PURGE_DONE: &str = purge_events_sql!("done");
const PURGE_FAILED: &str = purge_events_sql!("failed");
const PURGE_CANCELLED: &str = purge_events_sql!("cancelled");

/// Receipts whose last outcome is older than $1 seconds, at most $2: one range of
/// `outbox_receipt_result_idx (result, updated_at)` per result.
const PURGE_RECEIPTS: &str = r#"
    WITH gone AS (
        DELETE FROM outbox_receipt
        WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM outbox_receipt
            WHERE result IN ('ok', 'skipped_unsupported_version', 'retry', 'dead')
              AND updated_at < now() - make_interval(secs => $1)
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING 1
    )
    SELECT count(*), 0::bigint FROM gone
"#;

/// Attempt history rows older than $1 seconds, at most $2 (`outbox_event_history_attempt_at_idx`).
const PURGE_ATTEMPT_HISTORY: &str = r#"
    WITH gone AS (
        DELETE FROM outbox_event_history
        WHERE id = ANY(ARRAY(
            SELECT id FROM outbox_event_history
            WHERE action = 'attempt' AND at < now() - make_interval(secs => $1)
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING 1
    )
    SELECT count(*), 0::bigint FROM gone
"#;

/// Operator history rows (requeue, cancel, ...) older than $1 seconds, at most $2
/// (`outbox_event_history_operator_at_idx`).
const PURGE_OPERATOR_HISTORY: &str = r#"
    WITH gone AS (
        DELETE FROM outbox_event_history
        WHERE id = ANY(ARRAY(
            SELECT id FROM outbox_event_history
            WHERE action <> 'attempt' AND at < now() - make_interval(secs => $1)
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ))
        RETURNING 1
    )
    SELECT count(*), 0::bigint FROM gone
"#;

/// Every statement a retention pass runs, by what it deletes (`$1`: the retention in seconds,
/// `$2`: the batch size), so their plans can be checked (`EXPLAIN`).
pub fn retention_statements() -> [(&'static str, &'static str); 6] {
    [
        ("done events", PURGE_DONE),
        ("failed events", PURGE_FAILED),
        ("cancelled events", PURGE_CANCELLED),
        ("receipts", PURGE_RECEIPTS),
        ("attempt history", PURGE_ATTEMPT_HISTORY),
        ("operator history", PURGE_OPERATOR_HISTORY),
    ]
}

/// One batch of `sql` (which returns rows deleted and receipts deleted with them) under
/// [`RETENTION_LOCK`]; `None` when another host holds the lock (nothing was deleted).
async fn purge_batch(
    pool: &PgPool,
    sql: &'static str,
    older_than: Duration,
    batch: i64,
) -> Result<Option<(u64, u64)>, StoreError> {
    let mut tx = pool.begin().await.context("retention: begin")?;
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(RETENTION_LOCK)
        .fetch_one(&mut *tx)
        .await
        .context("retention: take the retention lock")?;
    if !locked {
        return Ok(None);
    }
    let (rows, receipts): (i64, i64) = sqlx::query_as(sql)
        .bind(older_than.as_secs_f64())
        .bind(batch)
        .fetch_one(&mut *tx)
        .await
        .context("retention: delete a batch")?;
    tx.commit().await.context("retention: commit")?;
    Ok(Some((
        crate::numeric::count(rows),
        crate::numeric::count(receipts),
    )))
}

/// Run batches of `sql` until one deletes less than a full batch; adds to `rows` and
/// `receipts`. `false`: another host holds [`RETENTION_LOCK`] and the pass should stop.
async fn purge_all(
    pool: &PgPool,
    sql: &'static str,
    older_than: Duration,
    batch: i64,
    rows: &mut u64,
    receipts: &mut u64,
) -> Result<bool, StoreError> {
    loop {
        let Some((deleted, with_them)) = purge_batch(pool, sql, older_than, batch).await? else {
            return Ok(false);
        };
        *rows += deleted;
        *receipts += with_them;
        if deleted < crate::numeric::count(batch) {
            return Ok(true);
        }
    }
}

/// One retention pass of `policy`: every kind of row past its retention, batch by batch, until
/// none is left or another host holds [`RETENTION_LOCK`] (then [`RetentionReport::yielded`]).
/// On an error the rows deleted so far stay deleted (each batch committed on its own).
pub async fn purge_expired(
    pool: &PgPool,
    policy: &RetentionPolicy,
) -> Result<RetentionReport, StoreError> {
    let batch = policy.batch();
    let mut report = RetentionReport::default();
    let mut history_attempts = 0;
    let mut history_operator = 0;
    let steps: [(&'static str, Duration, &mut u64); 6] = [
        (PURGE_DONE, policy.done, &mut report.done_events),
        (PURGE_FAILED, policy.failed, &mut report.failed_events),
        (PURGE_CANCELLED, policy.failed, &mut report.cancelled_events),
        (PURGE_RECEIPTS, policy.receipts, &mut report.receipts),
        (PURGE_ATTEMPT_HISTORY, policy.history, &mut history_attempts),
        (
            PURGE_OPERATOR_HISTORY,
            policy.history,
            &mut history_operator,
        ),
    ];
    let mut receipts_with_events = 0;
    let mut yielded = false;
    for (sql, older_than, rows) in steps {
        if !purge_all(
            pool,
            sql,
            older_than,
            batch,
            rows,
            &mut receipts_with_events,
        )
        .await?
        {
            yielded = true;
            break;
        }
    }
    report.receipts += receipts_with_events;
    report.history = history_attempts + history_operator;
    report.yielded = yielded;
    Ok(report)
}

/// Delete `done` events processed more than `older_than` ago (with their receipts),
/// `batch_size` rows per statement, as a retention pass does; returns how many events went
/// (0 while another host holds [`RETENTION_LOCK`]).
pub async fn purge_done_events(
    pool: &PgPool,
    older_than: Duration,
    batch_size: i64,
) -> Result<u64, StoreError> {
    let (mut events, mut receipts) = (0, 0);
    purge_all(
        pool,
        PURGE_DONE,
        older_than,
        batch_size.clamp(1, 10_000),
        &mut events,
        &mut receipts,
    )
    .await?;
    Ok(events)
}
