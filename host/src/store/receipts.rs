//! Receipts: writing what each handler made of each event to `outbox_receipt`.
//!
//! Owns the receipt row ([`Receipt`]), what the receivers' receipt writer writes
//! ([`ReceiptUpdate`]: an outcome, or a duplicate delivery counted on the row) and how a batch
//! of them is written atomically ([`write_receipt_updates`]): updates of one (event, handler)
//! merged first, outcomes as one upsert that keeps a row's newer outcome, and duplicate counts
//! as one update. Writing one twice changes nothing but a `duplicates` count:
//! each row keeps the outcome of the highest receipts stream position (the latest recorded) and
//! unions the published ids. It never reads Redis: how a receipt travels to it (the receipts
//! stream and its writer) is `receive::receipts`.

use std::collections::HashMap;
use std::sync::LazyLock;

use sqlx::PgPool;

/// One handler outcome for `outbox_receipt`.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    /// The event the handler ran on.
    pub event_id: i64,
    /// The handler (for a plugin-invoke job: the subscribed plugin).
    pub handler: String,
    /// The queue the entry came from.
    pub queue: String,
    /// `ok`, `skipped_unsupported_version`, `retry` or `dead`.
    pub result: &'static str,
    /// Handler attempts so far.
    pub attempts: i32,
    /// How long the handler ran.
    pub duration_ms: f64,
    /// Ids of the events the handler published.
    pub published: Vec<i64>,
    /// The error of a `retry` or `dead` outcome.
    pub error: Option<String>,
}

/// What the receipt writer writes: one entry of the receipts stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ReceiptUpdate {
    /// A handler outcome.
    Outcome(Receipt),
    /// A duplicate delivery that was acknowledged without running the handler.
    Duplicate {
        /// The event.
        event_id: i64,
        /// The handler.
        handler: String,
    },
}

/// A receipts stream entry's position: its id `<ms>-<seq>` as numbers, which order the outcomes
/// of one (event, handler) as they were recorded.
pub type StreamPosition = (i64, i64);

/// An update with the position of the receipts stream entry it came from (`None`: written
/// directly, applied as the latest).
#[derive(Debug, Clone)]
pub struct PositionedUpdate {
    /// The update.
    pub update: ReceiptUpdate,
    /// Where it was in the receipts stream.
    pub position: Option<StreamPosition>,
}

/// Write a batch of handler outcomes to `outbox_receipt` in one statement, as the receivers'
/// receipt writer does: an upsert per (event, handler), the latest outcome wins and published
/// ids add up.
pub async fn write_receipts(pool: &PgPool, receipts: &[Receipt]) -> Result<(), sqlx::Error> {
    let updates: Vec<PositionedUpdate> = receipts
        .iter()
        .cloned()
        .map(|r| PositionedUpdate {
            update: ReceiptUpdate::Outcome(r),
            position: None,
        })
        .collect();
    write_receipt_updates(&mut *pool.acquire().await?, &updates).await
}

/// Whether an outcome at `position` replaces one at `current` (a missing position counts as
/// the latest).
fn replaces(position: Option<StreamPosition>, current: Option<StreamPosition>) -> bool {
    match (position, current) {
        (Some(new), Some(old)) => new >= old,
        _ => true,
    }
}

/// Whether the outcome being upserted (`EXCLUDED`) is newer than the row's (`r`): a higher
/// receipts stream position, or either without one.
const NEWER_OUTCOME: &str = "(EXCLUDED.outcome_ms IS NULL OR r.outcome_ms IS NULL \
     OR (EXCLUDED.outcome_ms, EXCLUDED.outcome_seq) >= (r.outcome_ms, r.outcome_seq))";

/// The insert of merged outcomes, each as a new row. Alone, it is the fast path of a batch
/// whose rows cannot exist yet (see [`write_receipt_updates`]): a plain insert costs
/// PostgreSQL about a third less than the upsert (no speculative insertion: one unique-index
/// descent and one WAL record less per row); with [`MERGE_ON_CONFLICT`] it is the upsert.
const INSERT_OUTCOMES: &str = r#"
            INSERT INTO outbox_receipt AS r
                (event_id, handler, queue, result, attempts, duration_ms, published_ids, error,
                 duplicates, outcome_ms, outcome_seq)
            SELECT v.event_id, v.handler, v.queue, v.result, v.attempts, v.duration_ms,
                   v.published::bigint[], v.error, v.duplicates, v.outcome_ms, v.outcome_seq
            FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[],
                        $7::text[], $8::text[], $9::int[], $10::bigint[], $11::bigint[])
                 AS v(event_id, handler, queue, result, attempts, duration_ms, published, error,
                      duplicates, outcome_ms, outcome_seq)
            "#;

/// What an outcome does to the row it meets; `{NEWER}` stands for [`NEWER_OUTCOME`]. A row
/// keeps its outcome against an older one; published ids and duplicate counts always add up.
const MERGE_ON_CONFLICT: &str = r#"
            ON CONFLICT (event_id, handler) DO UPDATE
            SET queue = CASE WHEN {NEWER} THEN EXCLUDED.queue ELSE r.queue END,
                result = CASE WHEN {NEWER} THEN EXCLUDED.result ELSE r.result END,
                attempts = CASE WHEN {NEWER} THEN EXCLUDED.attempts ELSE r.attempts END,
                duration_ms = CASE WHEN {NEWER} THEN EXCLUDED.duration_ms ELSE r.duration_ms END,
                error = CASE WHEN {NEWER} THEN EXCLUDED.error ELSE r.error END,
                outcome_ms = CASE WHEN {NEWER} THEN EXCLUDED.outcome_ms ELSE r.outcome_ms END,
                outcome_seq = CASE WHEN {NEWER} THEN EXCLUDED.outcome_seq ELSE r.outcome_seq END,
                published_ids = ARRAY(SELECT DISTINCT unnest(r.published_ids || EXCLUDED.published_ids) ORDER BY 1),
                duplicates = r.duplicates + EXCLUDED.duplicates, updated_at = now()
            "#;

/// The upsert of merged outcomes, as run.
static UPSERT_OUTCOMES_SQL: LazyLock<String> = LazyLock::new(|| {
    format!(
        "{INSERT_OUTCOMES}{}",
        MERGE_ON_CONFLICT.replace("{NEWER}", NEWER_OUTCOME)
    )
});

/// Duplicate counts added to rows that have no outcome in the batch.
const ADD_DUPLICATES: &str = r#"
            UPDATE outbox_receipt r SET duplicates = r.duplicates + v.n, updated_at = now()
            FROM unnest($1::bigint[], $2::text[], $3::int[]) AS v(event_id, handler, n)
            WHERE r.event_id = v.event_id AND r.handler = v.handler
            "#;

/// Write one batch atomically (so a retry repeats all of it or none): outcomes as one upsert,
/// duplicate counts of rows without an outcome in the batch as one update, in one transaction
/// when the batch needs both (one statement alone is autocommitted). Updates of the
/// same (event, handler) are merged first (the outcome of the highest stream position wins;
/// published ids and duplicates add up), and the upsert keeps a row's outcome when it holds a
/// newer one than the batch: whatever order receipts arrive in, the latest recorded outcome
/// stays. A batch of first attempts only (the usual one) is inserted plainly, and upserted only
/// if the insert meets an existing row (`insert_else_upsert`). On `conn`: the writer's own,
/// kept between writes (see [`super::KeptConnections`]).
pub async fn write_receipt_updates(
    conn: &mut sqlx::PgConnection,
    batch: &[PositionedUpdate],
) -> Result<(), sqlx::Error> {
    type Merged = (Option<(Receipt, Option<StreamPosition>)>, i32);
    let mut merged: HashMap<(i64, String), Merged> = HashMap::new();
    for PositionedUpdate { update, position } in batch.iter().cloned() {
        match update {
            ReceiptUpdate::Outcome(mut receipt) => {
                let slot = merged
                    .entry((receipt.event_id, receipt.handler.clone()))
                    .or_default();
                let mut position = position;
                if let Some((previous, previous_position)) = slot.0.take() {
                    if replaces(position, previous_position) {
                        receipt.published.extend(previous.published);
                    } else {
                        let older = std::mem::replace(&mut receipt, previous);
                        receipt.published.extend(older.published);
                        position = previous_position;
                    }
                }
                slot.0 = Some((receipt, position));
            }
            ReceiptUpdate::Duplicate { event_id, handler } => {
                merged.entry((event_id, handler)).or_default().1 += 1
            }
        }
    }
    let mut rows: Vec<OutcomeRow> = Vec::new();
    let (mut dup_ids, mut dup_handlers, mut dup_counts) = (vec![], vec![], vec![]);
    for ((event_id, handler), (receipt, duplicates)) in merged {
        match receipt {
            Some((receipt, position)) => rows.push((receipt, position, duplicates)),
            None => {
                dup_ids.push(event_id);
                dup_handlers.push(handler);
                dup_counts.push(duplicates);
            }
        }
    }
    if !rows.is_empty() && dup_ids.is_empty() && rows.iter().all(first_of_its_row) {
        return insert_else_upsert(conn, &rows).await;
    }
    let upsert = (!rows.is_empty()).then(|| outcomes_query(&UPSERT_OUTCOMES_SQL, &rows));
    let duplicates = (!dup_ids.is_empty()).then(|| {
        sqlx::query(ADD_DUPLICATES)
            .bind(dup_ids)
            .bind(dup_handlers)
            .bind(dup_counts)
    });
    match (upsert, duplicates) {
        (Some(upsert), Some(duplicates)) => {
            let mut tx = sqlx::Connection::begin(&mut *conn).await?;
            upsert.execute(&mut *tx).await?;
            duplicates.execute(&mut *tx).await?;
            tx.commit().await
        }
        // One statement commits on its own: no BEGIN and COMMIT round trips.
        (Some(one), None) | (None, Some(one)) => one.execute(conn).await.map(drop),
        (None, None) => Ok(()),
    }
}

/// A merged outcome with its position and duplicate count.
type OutcomeRow = (Receipt, Option<StreamPosition>, i32);

/// Whether `row` is most likely the first of its (event, handler): a handler's first attempt
/// with no duplicate delivery counted. It is not when its receipt is written again (a writer
/// died between writing and trimming it) or a replayed dead letter runs as attempt 1 again;
/// those rare batches take the upsert after the insert meets the row.
fn first_of_its_row((receipt, _, duplicates): &OutcomeRow) -> bool {
    receipt.attempts <= 1 && *duplicates == 0
}

/// Write outcomes that are most likely new rows: a plain insert, and the upsert instead when
/// the insert meets an existing row (the insert then wrote nothing: one statement).
async fn insert_else_upsert(
    conn: &mut sqlx::PgConnection,
    rows: &[OutcomeRow],
) -> Result<(), sqlx::Error> {
    match outcomes_query(INSERT_OUTCOMES, rows)
        .execute(&mut *conn)
        .await
    {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            outcomes_query(&UPSERT_OUTCOMES_SQL, rows)
                .execute(conn)
                .await
                .map(drop)
        }
        other => other.map(drop),
    }
}

/// `sql` ([`INSERT_OUTCOMES`] or the upsert) bound to a batch's outcomes.
fn outcomes_query<'q>(
    sql: &'q str,
    rows: &[OutcomeRow],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    let published: Vec<String> = rows
        .iter()
        .map(|(r, _, _)| {
            let ids: Vec<String> = r.published.iter().map(i64::to_string).collect();
            format!("{{{}}}", ids.join(","))
        })
        .collect();
    sqlx::query(sql)
        .bind(rows.iter().map(|(r, _, _)| r.event_id).collect::<Vec<_>>())
        .bind(
            rows.iter()
                .map(|(r, _, _)| r.handler.clone())
                .collect::<Vec<_>>(),
        )
        .bind(
            rows.iter()
                .map(|(r, _, _)| r.queue.clone())
                .collect::<Vec<_>>(),
        )
        .bind(rows.iter().map(|(r, _, _)| r.result).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _, _)| r.attempts).collect::<Vec<_>>())
        .bind(
            rows.iter()
                .map(|(r, _, _)| r.duration_ms)
                .collect::<Vec<_>>(),
        )
        .bind(published)
        .bind(
            rows.iter()
                .map(|(r, _, _)| r.error.clone())
                .collect::<Vec<_>>(),
        )
        .bind(rows.iter().map(|(_, _, d)| *d).collect::<Vec<_>>())
        .bind(
            rows.iter()
                .map(|(_, p, _)| p.map(|p| p.0))
                .collect::<Vec<_>>(),
        )
        .bind(
            rows.iter()
                .map(|(_, p, _)| p.map(|p| p.1))
                .collect::<Vec<_>>(),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(result: &'static str, attempts: i32, published: Vec<i64>) -> ReceiptUpdate {
        ReceiptUpdate::Outcome(Receipt {
            event_id: 42,
            handler: "audit-log".into(),
            queue: "outbox.audit".into(),
            result,
            attempts,
            duration_ms: 1.5,
            published,
            error: (result != "ok").then(|| format!("{result} on attempt {attempts}")),
        })
    }

    #[test]
    fn a_later_position_replaces_an_earlier_one() {
        assert!(replaces(Some((10, 0)), Some((9, 99))));
        assert!(
            replaces(Some((10, 2)), Some((10, 2))),
            "the same entry again"
        );
        assert!(!replaces(Some((10, 1)), Some((10, 2))));
        assert!(replaces(None, Some((10, 2))), "no position: the latest");
    }

    async fn row(pool: &PgPool) -> (String, i32, Vec<i64>, i32) {
        sqlx::query_as(
            "SELECT result, attempts, published_ids, duplicates FROM outbox_receipt \
             WHERE event_id = 42 AND handler = 'audit-log'",
        )
        .fetch_one(pool)
        .await
        .unwrap()
    }

    fn at(update: ReceiptUpdate, ms: i64) -> PositionedUpdate {
        PositionedUpdate {
            update,
            position: Some((ms, 0)),
        }
    }

    /// A receipt adopted late from a dead writer, or written again after a writer died between
    /// writing and deleting it, never overwrites the newer outcome; its published ids still
    /// count.
    #[sqlx::test(migrations = "../migrations")]
    async fn a_receipt_written_late_or_twice_never_overwrites_a_newer_outcome(pool: PgPool) {
        let write = |batch: Vec<PositionedUpdate>| {
            let pool = pool.clone();
            async move {
                let mut conn = pool.acquire().await.unwrap();
                write_receipt_updates(&mut conn, &batch).await.unwrap()
            }
        };
        write(vec![at(outcome("ok", 2, vec![11]), 200)]).await;
        write(vec![at(outcome("retry", 1, vec![10]), 100)]).await;
        assert_eq!(row(&pool).await, ("ok".into(), 2, vec![10, 11], 0));
        write(vec![at(outcome("ok", 2, vec![11]), 200)]).await;
        assert_eq!(row(&pool).await, ("ok".into(), 2, vec![10, 11], 0));
        // Within one batch too, whatever the order.
        write(vec![
            at(outcome("dead", 1, vec![]), 400),
            at(outcome("retry", 3, vec![12]), 300),
        ])
        .await;
        assert_eq!(row(&pool).await, ("dead".into(), 1, vec![10, 11, 12], 0));
        // A replayed dead letter runs again as attempt 1: the newer outcome wins, not the
        // higher attempt.
        write(vec![at(outcome("ok", 1, vec![]), 500)]).await;
        assert_eq!(row(&pool).await.0, "ok");
    }

    /// A batch of first attempts goes in as a plain insert; when one of its receipts already
    /// has its row (written again after a writer died, or a replayed dead letter), the batch is
    /// upserted instead: that row merged, the others written, nothing lost or doubled.
    #[sqlx::test(migrations = "../migrations")]
    async fn a_first_attempt_batch_meeting_an_existing_row_is_upserted_whole(pool: PgPool) {
        let mut conn = pool.acquire().await.unwrap();
        let first = at(outcome("ok", 1, vec![10]), 100);
        write_receipt_updates(&mut conn, std::slice::from_ref(&first))
            .await
            .unwrap();
        assert_eq!(row(&pool).await, ("ok".into(), 1, vec![10], 0));
        let other = |event_id: i64| {
            let ReceiptUpdate::Outcome(mut receipt) = outcome("ok", 1, vec![]) else {
                unreachable!()
            };
            receipt.event_id = event_id;
            at(ReceiptUpdate::Outcome(receipt), 150)
        };
        let again = at(outcome("ok", 1, vec![10, 20]), 200);
        write_receipt_updates(&mut conn, &[other(43), again, other(44)])
            .await
            .unwrap();
        assert_eq!(row(&pool).await, ("ok".into(), 1, vec![10, 20], 0));
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(rows, 3, "the batch's other receipts are written too");
    }
}
