//! Store: everything the host reads and writes in PostgreSQL after an event is published.
//!
//! Owns the claim (in `claim`: `FOR UPDATE SKIP LOCKED` + lease, and per-key ordering: an event
//! with an ordering key waits while an earlier event of its key is pending or processing, see
//! [`CLAIM_SQL`]), recording a batch's outcomes, releasing
//! claims on shutdown (retention is in `retention`, heartbeats and stale hosts in `hosts`); what operators and the demo read is in
//! [`operator`] (re-exported here). Every statement
//! here is short and autocommitted (or one small transaction): the store never holds a row lock
//! while the caller talks to Redis. Outcomes are only written while the caller still holds the
//! lease it claimed with (`claimed_by` + `claimed_at`), so a host whose lease expired cannot
//! overwrite the work of the host that took over.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

mod access;
mod claim;
mod console;
mod hook_parent;
mod horizon;
mod hosts;
mod locks;
mod notifications;
mod operator;
mod polling;
mod pools;
mod publish;
mod queues;
mod receipts;
mod repair;
mod retention;
mod trace;

pub use access::*;
pub use claim::*;
pub use console::*;
pub use hook_parent::*;
pub use horizon::*;
pub use hosts::*;
pub use locks::*;
pub use notifications::*;
pub use operator::*;
pub use polling::*;
pub use pools::*;
pub use publish::*;
pub use queues::*;
pub use receipts::*;
pub use repair::*;
pub use retention::*;
pub use trace::*;

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// A database failure with the operation it interrupted.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct StoreError {
    /// What the store was doing (`claim_due_events`, `event 42 to outbox.mail`, ...).
    pub context: String,
    /// The driver's error.
    #[source]
    pub source: sqlx::Error,
}

pub(crate) trait Context<T> {
    fn context(self, context: impl Into<String>) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn context(self, context: impl Into<String>) -> Result<T, StoreError> {
        self.map_err(|source| StoreError {
            context: context.into(),
            source,
        })
    }
}

/// How often a process waiting for another one's migrations asks for the lock again.
const MIGRATION_LOCK_POLL: Duration = Duration::from_millis(100);

/// How long a process waits for another one's migrations before it says so in the log.
const MIGRATION_WAIT_NOTICE: Duration = Duration::from_secs(10);

/// Apply pending migrations, one process at a time.
///
/// Several processes may start on an empty database at once (`outbox run` and an `outbox
/// publish`, or the replicas of a deployment). Each takes [`MIGRATION_LOCK`] first, and one
/// that finds it taken asks again every 100 ms instead of queueing on it: a session queued on an
/// advisory lock keeps its statement open, and a `CREATE INDEX CONCURRENTLY` of the holder's
/// migrations waits for every open statement, so the two would wait for each other until
/// PostgreSQL cancels one ("deadlock detected"). The migrations run on the connection that holds
/// the lock, which is then closed, so a failed migration never leaves a pooled connection holding
/// it.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let context = "apply migrations";
    let mut conn = pool.acquire().await.context(context)?.detach();
    let started = std::time::Instant::now();
    let mut noticed = false;
    while !try_advisory_lock(&mut conn, MIGRATION_LOCK)
        .await
        .context(context)?
    {
        if !noticed && started.elapsed() >= MIGRATION_WAIT_NOTICE {
            tracing::info!("waiting for another process to finish applying migrations");
            noticed = true;
        }
        tokio::time::sleep(MIGRATION_LOCK_POLL).await;
    }
    let applied = MIGRATOR.run(&mut conn).await.map_err(|e| StoreError {
        context: context.into(),
        source: e.into(),
    });
    // Ending the session releases its advisory locks, whatever the migrations left behind; if
    // the polite close fails, dropping the socket ends the session all the same.
    if let Err(e) = sqlx::Connection::close(conn).await {
        tracing::debug!("close the migration connection: {e}");
    }
    applied
}

/// Record the host's payload limit (`OUTBOX_MAX_PAYLOAD_BYTES`) where `outbox_publish()` reads
/// it: the ceiling of what a SQL caller may publish (its own limit argument may only lower it).
pub async fn record_max_payload_bytes(
    pool: &PgPool,
    max_payload_bytes: usize,
) -> Result<(), StoreError> {
    let value = i64::try_from(max_payload_bytes).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO outbox_setting (name, value) VALUES ('max_payload_bytes', $1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )
    .bind(value)
    .execute(pool)
    .await
    .context("record the payload limit in outbox_setting")?;
    Ok(())
}

/// A connection URL with its password removed (defined with the settings it shows).
pub use crate::config::redact;

/// How long until the next claimable row becomes due, measured on the database clock
/// (`None`: nothing pending or leased; zero: something is due now). Rows held back behind an
/// earlier event of their ordering key do not count: they become claimable when that event
/// finishes, not at their own `available_at`. Reads the claim index from `horizon`.
pub async fn time_until_next_due(
    pool: &PgPool,
    horizon: ClaimHorizon,
) -> Result<Option<Duration>, StoreError> {
    let secs: Option<f64> = sqlx::query_scalar(
        r#"
        SELECT extract(epoch FROM min(
                   CASE WHEN status = 'processing' THEN claim_expires_at ELSE available_at END
               ) - now())::float8
        FROM outbox_event candidate
        WHERE status IN ('pending', 'processing')
          AND available_at >= coalesce($1, '-infinity'::timestamptz)
          AND (ordering_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM outbox_event earlier
                WHERE earlier.ordering_key = candidate.ordering_key
                  AND earlier.id < candidate.id
                  AND earlier.status IN ('pending', 'processing')))
        "#,
    )
    .bind(horizon.at)
    .fetch_one(pool)
    .await
    .context("time_until_next_due")?;
    // Clamped here, not with SQL's `greatest(0, ...)`: that ignores a NULL and made "nothing
    // pending" read as "due now", so an idle dispatcher looked again every 10 ms.
    Ok(secs.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)))
}

/// Destinations of fan-out events that were already handed off in an earlier attempt.
pub async fn delivered_destinations(
    pool: &PgPool,
    event_ids: &[i64],
) -> Result<HashMap<i64, Vec<String>>, StoreError> {
    let mut done: HashMap<i64, Vec<String>> = HashMap::new();
    if event_ids.is_empty() {
        return Ok(done);
    }
    let rows = sqlx::query(
        "SELECT event_id, destination FROM outbox_delivery WHERE event_id = ANY($1) AND status = 'done'",
    )
    .bind(event_ids)
    .fetch_all(pool)
    .await
    .context("delivered_destinations")?;
    for row in rows {
        done.entry(row.get("event_id"))
            .or_default()
            .push(row.get("destination"));
    }
    Ok(done)
}

/// The final state of one claimed event after a dispatch attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum EventOutcome {
    /// Every destination has it.
    Done,
    /// Try again after `delay`, with this error recorded.
    Retry {
        /// The error of this attempt.
        error: String,
        /// Backoff before the next claim.
        delay: Duration,
    },
    /// Given up: kept as `failed` (for audit and `requeue`) with this error.
    Failed {
        /// Why (no route, or the last error after the retries ran out).
        error: String,
    },
    /// Put back, due at once, without counting this attempt: an infrastructure blip, not the
    /// event's fault, stopped it (see [`crate::fault`]). The dispatcher claims it again once the
    /// service answers.
    Released {
        /// The blip, kept in `last_error` until the event is done.
        error: String,
    },
}

/// Result of one (event, destination) hand-off, recorded in `outbox_delivery` for fan-out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The event.
    pub event_id: i64,
    /// The queue.
    pub destination: String,
    /// The stream entry id on success.
    pub stream_id: Option<String>,
    /// The error on failure.
    pub error: Option<String>,
}

/// How many rows a [`record_outcomes`] call changed; fewer than given means some leases were
/// lost to another host (which will finish those events; the enqueue is idempotent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordedCounts {
    /// Rows set to `done`.
    pub done: u64,
    /// Rows put back to `pending` with backoff.
    pub retried: u64,
    /// Rows set to `failed`.
    pub failed: u64,
    /// Rows put back due at once with the attempt not counted (infrastructure blips).
    pub released: u64,
}

/// Record a batch's outcomes in one autocommitted statement (one round trip instead of a
/// transaction of several): the fan-out deliveries' upsert, every `done` row (by `id = ANY`,
/// the primary key), and the rest (retry, failed, released; joined with their errors and delays
/// as arrays), each a data-modifying CTE over disjoint rows; a retried or failed attempt also
/// gets an `outbox_event_history` row (host, error), a `done` one does not (the row is its
/// record). Only rows still held under
/// `claim`'s lease change (deliveries included), so running it again after an error is safe:
/// what the first run committed is no longer held and is left alone (it then reads as "lease
/// lost" in the counts). A batch whose events are all done and none fanned out is recorded by
/// a plain update of those rows instead (`record_all_done`), under the same check.
///
/// The status is tested as `coalesce(status, '') = 'processing'` (the column is never NULL) so
/// that the planner cannot prove the claim index's predicate and never reads that index for
/// these rows: a bitmap scan of it (chosen when its statistics say it is small, as they do
/// until the table is analyzed) walks every dead entry finished events left in it, which after
/// 10,000,000 events on an unvacuumed table cost most of each batch.
pub async fn record_outcomes(
    db: impl sqlx::PgExecutor<'_>,
    claim: &Claim,
    outcomes: &[(i64, EventOutcome)],
    deliveries: &[DeliveryRecord],
) -> Result<RecordedCounts, StoreError> {
    let mut done_ids = Vec::with_capacity(outcomes.len());
    let (mut ids, mut statuses, mut errors, mut delays) = (vec![], vec![], vec![], vec![]);
    for (id, outcome) in outcomes {
        let (status, error, delay) = match outcome {
            EventOutcome::Done => {
                done_ids.push(*id);
                continue;
            }
            EventOutcome::Retry { error, delay } => ("pending", error, delay.as_secs_f64()),
            EventOutcome::Failed { error } => ("failed", error, 0.0),
            EventOutcome::Released { error } => ("released", error, 0.0),
        };
        ids.push(*id);
        statuses.push(status);
        errors.push(error.as_str());
        delays.push(delay);
    }
    if ids.is_empty() && deliveries.is_empty() {
        return record_all_done(db, claim, &done_ids).await;
    }
    let (mut d_ids, mut d_dest, mut d_stream, mut d_err) = (vec![], vec![], vec![], vec![]);
    for d in deliveries {
        d_ids.push(d.event_id);
        d_dest.push(d.destination.as_str());
        d_stream.push(d.stream_id.as_deref());
        d_err.push(d.error.as_deref());
    }
    let rows = sqlx::query(
        r#"
        WITH delivered AS (
            INSERT INTO outbox_delivery AS d
                (event_id, destination, status, attempts, last_error, stream_id, delivered_at)
            SELECT v.event_id, v.destination,
                   CASE WHEN v.err IS NULL THEN 'done' ELSE 'pending' END, 1, v.err, v.stream_id,
                   CASE WHEN v.err IS NULL THEN now() END
            FROM unnest($6::bigint[], $7::text[], $8::text[], $9::text[])
                 AS v(event_id, destination, stream_id, err)
            JOIN outbox_event e ON e.id = v.event_id
            WHERE coalesce(e.status, '') = 'processing' AND e.claimed_by = $10
              AND e.claimed_at = $11
            ON CONFLICT (event_id, destination) DO UPDATE
            SET status = EXCLUDED.status,
                attempts = d.attempts + 1,
                last_error = EXCLUDED.last_error,
                stream_id = coalesce(EXCLUDED.stream_id, d.stream_id),
                delivered_at = EXCLUDED.delivered_at
            WHERE d.status <> 'done'
        ),
        done AS (
            UPDATE outbox_event
            SET status = 'done', processed_at = now(), last_error = NULL, claim_expires_at = NULL
            WHERE id = ANY($1) AND coalesce(status, '') = 'processing' AND claimed_by = $10
              AND claimed_at = $11
            RETURNING 'done'::text AS status
        ),
        other AS (
            UPDATE outbox_event e
            SET status = CASE WHEN v.status = 'released' THEN 'pending' ELSE v.status END,
                attempts = CASE WHEN v.status = 'released' THEN greatest(e.attempts - 1, 0)
                                ELSE e.attempts END,
                last_error = v.err,
                available_at = CASE WHEN v.status IN ('pending', 'released')
                                    THEN now() + make_interval(secs => v.delay_s)
                                    ELSE e.available_at END,
                processed_at = CASE WHEN v.status = 'failed' THEN now() ELSE e.processed_at END,
                claim_expires_at = NULL
            FROM unnest($2::bigint[], $3::text[], $4::text[], $5::float8[])
                 AS v(id, status, err, delay_s)
            WHERE e.id = v.id AND coalesce(e.status, '') = 'processing' AND e.claimed_by = $10
              AND e.claimed_at = $11
            RETURNING e.id, v.status, v.err, e.attempts
        ),
        attempted AS (
            INSERT INTO outbox_event_history
                (event_id, action, actor, from_status, to_status, attempts, last_error)
            SELECT id, 'attempt', $10, 'processing', status, attempts, err
            FROM other WHERE status IN ('pending', 'failed')
        )
        SELECT status, count(*) AS n
        FROM (SELECT status FROM done UNION ALL SELECT status FROM other) AS recorded
        GROUP BY status
        "#,
    )
    .bind(&done_ids)
    .bind(&ids)
    .bind(&statuses)
    .bind(&errors)
    .bind(&delays)
    .bind(&d_ids)
    .bind(&d_dest)
    .bind(&d_stream)
    .bind(&d_err)
    .bind(&claim.worker_id)
    .bind(claim.claimed_at)
    .fetch_all(db)
    .await
    .context(format!(
        "record_outcomes: {} events ({} done), {} deliveries",
        outcomes.len(),
        done_ids.len(),
        deliveries.len()
    ))?;
    let mut counts = RecordedCounts::default();
    for row in rows {
        let n = u64::try_from(row.get::<i64, _>("n")).unwrap_or(0);
        match row.get::<&str, _>("status") {
            "done" => counts.done += n,
            "pending" => counts.retried += n,
            "released" => counts.released += n,
            _ => counts.failed += n,
        }
    }
    Ok(counts)
}

/// [`record_outcomes`] for the usual batch: every event done, none fanned out. One plain update
/// by primary key, under the same lease check (the update [`CLAIM_RECORDING_DONE_SQL`] makes
/// too, for a batch recorded with the next claim): the full statement's other data-modifying CTEs
/// cost PostgreSQL about 60 µs per batch even when they touch nothing, which at a trickle (one
/// event per batch) was a fifth of what recording an event cost.
async fn record_all_done(
    db: impl sqlx::PgExecutor<'_>,
    claim: &Claim,
    done_ids: &[i64],
) -> Result<RecordedCounts, StoreError> {
    let done = sqlx::query(
        r#"
        UPDATE outbox_event
        SET status = 'done', processed_at = now(), last_error = NULL, claim_expires_at = NULL
        WHERE id = ANY($1) AND coalesce(status, '') = 'processing' AND claimed_by = $2
          AND claimed_at = $3
        "#,
    )
    .bind(done_ids)
    .bind(&claim.worker_id)
    .bind(claim.claimed_at)
    .execute(db)
    .await
    .context(format!(
        "record_outcomes: {} events, all done",
        done_ids.len()
    ))?
    .rows_affected();
    Ok(RecordedCounts {
        done,
        ..RecordedCounts::default()
    })
}

/// Give back rows this worker still holds (shutdown past the grace period): they become
/// claimable at once, with the attempt that never finished not counted. Reads the claim index
/// from `horizon` (a held row is never earlier).
pub async fn release_claims<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    worker_id: &str,
    horizon: ClaimHorizon,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        r#"
        UPDATE outbox_event
        SET status = 'pending', available_at = now(), attempts = greatest(attempts - 1, 0),
            claim_expires_at = NULL
        WHERE status = 'processing' AND claimed_by = $1
          AND available_at >= coalesce($2, '-infinity'::timestamptz)
        "#,
    )
    .bind(worker_id)
    .bind(horizon.at)
    .execute(executor)
    .await
    .context(format!("release claims of worker {worker_id}"))?
    .rows_affected())
}

/// Give back rows this worker holds under a claim it does not know of: a claim statement that
/// committed but whose reply was lost when the connection dropped. `held` are the `claimed_at`
/// of the batches the worker has in flight; everything else it holds becomes claimable at once,
/// with the attempt that never started not counted. Reads the claim index from `horizon`.
pub async fn release_lost_claims(
    pool: &PgPool,
    worker_id: &str,
    held: &[DateTime<Utc>],
    horizon: ClaimHorizon,
) -> Result<u64, StoreError> {
    Ok(sqlx::query(
        r#"
        UPDATE outbox_event
        SET status = 'pending', available_at = now(), attempts = greatest(attempts - 1, 0),
            claim_expires_at = NULL
        WHERE status = 'processing' AND claimed_by = $1 AND NOT (claimed_at = ANY($2))
          AND available_at >= coalesce($3, '-infinity'::timestamptz)
        "#,
    )
    .bind(worker_id)
    .bind(held)
    .bind(horizon.at)
    .execute(pool)
    .await
    .context(format!("release lost claims of worker {worker_id}"))?
    .rows_affected())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_database_replaces_only_the_database_name() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/test", "other"),
            "postgres://u:p@h:5432/other"
        );
        assert_eq!(
            with_database("postgres://u@h/test?sslmode=disable", "x"),
            "postgres://u@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
    }

    #[test]
    fn redact_drops_the_password() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u@h/db");
        assert_eq!(redact("redis://h:6379/"), "redis://h:6379/");
    }
}
