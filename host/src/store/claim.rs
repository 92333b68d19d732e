//! The claim: take due rows under a lease (`FOR UPDATE SKIP LOCKED`, per-key ordering, read
//! from the claim horizon), optionally recording in the same statement the `done` rows of
//! batches the caller finished since its last claim.
//!
//! Owns the claim statements and the rows they return. It never records an outcome other than
//! `done` (that is [`super::record_outcomes`]) and never claims a row the same statement records.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::{ClaimHorizon, Context as _, StoreError};

/// One event claimed by a dispatcher, with everything routing and the sink need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedEvent {
    /// `outbox_event.id`.
    pub id: i64,
    /// Tenant, if any.
    pub tenant_id: Option<String>,
    /// Dot-separated type.
    pub event_type: String,
    /// Schema version of the payload.
    pub event_version: i32,
    /// Payload as JSON text (never re-serialised on the way to Redis).
    pub payload: String,
    /// Headers as JSON text.
    pub headers: String,
    /// Producer idempotency key.
    pub dispatch_key: Option<String>,
    /// Ordering key: events of one key are claimed one at a time, in id order (see
    /// [`CLAIM_SQL`]).
    pub ordering_key: Option<String>,
    /// Attempt number of this claim (1 on first claim).
    pub attempts: i32,
    /// When the event was published.
    pub created_at: DateTime<Utc>,
    /// True when this claim took the row over from a claimer whose lease expired.
    pub recovered_lease: bool,
    /// 0 for a producer's event, the parent's + 1 for an event a handler published (see
    /// `capability::publish`).
    pub generation: i32,
}

impl ClaimedEvent {
    /// An event as routers and handlers see it, outside any claim (offline plugin calls,
    /// benches, tests): version 1, no tenant, empty headers, attempt 1, created now.
    pub fn unclaimed(id: i64, event_type: impl Into<String>, payload: impl Into<String>) -> Self {
        Self {
            id,
            tenant_id: None,
            event_type: event_type.into(),
            event_version: 1,
            payload: payload.into(),
            headers: "{}".into(),
            dispatch_key: None,
            ordering_key: None,
            attempts: 1,
            created_at: Utc::now(),
            recovered_lease: false,
            generation: 0,
        }
    }
}

/// A batch of claimed events plus the lease token needed to record their outcomes.
#[derive(Debug, Clone)]
pub struct Claim {
    /// Who claimed (`outbox_worker.id`).
    pub worker_id: String,
    /// The claim statement's timestamp; with `worker_id` it identifies this lease.
    pub claimed_at: DateTime<Utc>,
    /// The rows, oldest due first.
    pub events: Vec<ClaimedEvent>,
}

/// The claim's two steps, `due` (lock the rows) and `claimed` (lease them), shared by
/// [`CLAIM_SQL`] and [`CLAIM_RECORDING_DONE_SQL`]; the argument is one more condition on the
/// candidate rows (SQL text, empty for none).
macro_rules! claim_steps {
    ($also:literal) => {
        concat!(
            r#"
    due AS (
        SELECT ctid, id, status AS previous_status
        FROM outbox_event candidate
        WHERE status IN ('pending', 'processing') AND available_at <= now()
          AND (available_at, id) >= (coalesce($4, '-infinity'::timestamptz),
                                     coalesce($5, -9223372036854775808))
          AND (status = 'pending' OR claim_expires_at <= now())"#,
            $also,
            r#"
          AND (ordering_key IS NULL OR NOT EXISTS (
                SELECT 1 FROM outbox_event earlier
                WHERE earlier.ordering_key = candidate.ordering_key
                  AND earlier.id < candidate.id
                  AND earlier.status IN ('pending', 'processing')))
        ORDER BY available_at, id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ),
    claimed AS (
        UPDATE outbox_event e
        SET status = 'processing',
            attempts = e.attempts + 1,
            claimed_by = $2,
            claimed_at = now(),
            claim_expires_at = now() + make_interval(secs => $3)
        WHERE e.ctid = ANY(ARRAY(SELECT ctid FROM due))
        RETURNING e.id, e.tenant_id, e.event_type, e.event_version, e.payload::text AS payload,
                  e.headers::text AS headers, e.dispatch_key, e.ordering_key, e.attempts,
                  e.created_at, e.claimed_at, e.generation, e.available_at
    )"#
        )
    };
}

/// The claim statement of [`claim_due_events`] (`$1` limit, `$2` worker id, `$3` lease in
/// seconds, `$4` the claim horizon or NULL, `$5` its first id or NULL), public so that tests
/// can check its plan.
///
/// The index is read from the claim horizon (see `horizon`: its instant, and the first live
/// row's id when that row alone bounds it): no claimable row is earlier, and
/// the entries before it are those finished events left behind.
///
/// The update reaches the locked rows by their `ctid` list alone (one TID scan of exactly those
/// rows, sorted once), never by a join with `due`: a join on `id` lets the planner hash the whole
/// table (a sequential scan) as soon as many rows are waiting, and a join on `ctid` beside the
/// list let it pick, on stale statistics, a nested loop that checked every row against the
/// whole list (batch² comparisons, a tenth of the machine's CPU in a profile of the deployed
/// host). Whether a row's lease was recovered is read from the few `due` rows that were
/// `processing` (usually none). Every step is linear in the batch whatever the plan. The row
/// lock taken in `due` keeps each `ctid` valid until the update in the same statement; a row
/// another transaction changed after this statement's snapshot is not visible at its TID and is
/// left for the next claim (never half-claimed).
///
/// Per-key ordering: a row with an `ordering_key` is claimable only while no row of the same key
/// with a lower id is `pending` or `processing` (one probe of `outbox_event_ordering_idx`), so a
/// claim takes at most the head of each key, and the next event of a key waits until the head
/// is `done`, `failed` or `cancelled` (a retry puts the head back to `pending`: it still
/// blocks). Against a concurrent claimer the check needs no lock: a row that claimer has locked
/// or claimed is `pending` or `processing` in any snapshot this statement can have, so it
/// blocks its later rows here whether or not `SKIP LOCKED` skips the row itself; a row only
/// stops blocking once its outcome (written after its hand-off to every queue) has committed.
pub const CLAIM_SQL: &str = concat!(
    "WITH",
    claim_steps!(""),
    r#"
    SELECT claimed.*,
           claimed.id = ANY(ARRAY(SELECT id FROM due WHERE previous_status = 'processing'))
               AS recovered
    FROM claimed
    ORDER BY available_at, id
    "#
);

/// [`CLAIM_SQL`] recording first, in the same statement, rows this worker finished as `done`
/// (`$6` their ids, `$7` each one's `claimed_at`, the lease it holds them under: a row no longer
/// held so is left alone), and never claiming one of them (a row whose lease ran out while it
/// waited to be recorded). Always returns at least one row: `recorded` (the ids it set `done`)
/// on every row, and the claimed event's columns, NULL on the one row of a claim that found
/// nothing. Public so that tests can check its plan.
pub const CLAIM_RECORDING_DONE_SQL: &str = concat!(
    r#"
    WITH recorded AS (
        UPDATE outbox_event
        SET status = 'done', processed_at = now(), last_error = NULL, claim_expires_at = NULL
        WHERE id = ANY($6::bigint[]) AND coalesce(status, '') = 'processing' AND claimed_by = $2
          AND claimed_at = ($7::timestamptz[])[array_position($6::bigint[], id)]
        RETURNING id
    ),"#,
    claim_steps!(
        "
          AND candidate.id <> ALL($6::bigint[])"
    ),
    r#"
    SELECT claimed.*,
           claimed.id = ANY(ARRAY(SELECT id FROM due WHERE previous_status = 'processing'))
               AS recovered,
           ARRAY(SELECT id FROM recorded) AS recorded
    FROM (VALUES (true)) AS always LEFT JOIN claimed ON true
    ORDER BY claimed.available_at, claimed.id
    "#
);

/// Claim up to `limit` due rows: pending rows whose `available_at` has passed and processing
/// rows whose lease (`claim_expires_at`) expired. Claimed rows get `status = processing`,
/// `attempts + 1` and a lease of `lease` in `claim_expires_at`; their `available_at` stays, so
/// the index entry a claimed row leaves when it finishes lies behind the claim horizon instead
/// of where later claims read (the lease end), and the one partial index finds expired leases
/// too (at their row's `available_at`, which holds the horizon back while they are live). One
/// statement ([`CLAIM_SQL`]), autocommitted, reading the whole claim index; the dispatcher reads
/// it from its horizon ([`claim_due_events_from`]).
pub async fn claim_due_events(
    pool: &PgPool,
    worker_id: &str,
    limit: i64,
    lease: Duration,
) -> Result<Claim, StoreError> {
    claim_due_events_from(pool, worker_id, limit, lease, ClaimHorizon::everything()).await
}

/// [`claim_due_events`] reading the claim index from `horizon` (from [`claim_horizon`]), on
/// `db` (a pool, or a connection the caller keeps: see [`KeptConnections`]).
pub async fn claim_due_events_from(
    db: impl sqlx::PgExecutor<'_>,
    worker_id: &str,
    limit: i64,
    lease: Duration,
    horizon: ClaimHorizon,
) -> Result<Claim, StoreError> {
    let rows = claim_query(CLAIM_SQL, worker_id, limit, lease, horizon)
        .fetch_all(db)
        .await
        .context("claim_due_events")?;
    Ok(claim_of(worker_id, &rows))
}

/// [`claim_due_events_from`], recording first in the same statement ([`CLAIM_RECORDING_DONE_SQL`])
/// the rows `done` lists as `done`: each `(id, claimed_at)` a row of a batch this worker claimed
/// at `claimed_at` and handed off to every queue. One statement instead of two: at a trickle of
/// events, where a claim carries about one event, recording a batch this way instead of on its
/// own took a third off PostgreSQL's CPU per event in SQL alone, and 14 % of what the deployed
/// host costs PostgreSQL per event beyond the producer's own commit at 1,000 events/s. Returns
/// the claim and the ids it recorded; a row missing from them was no longer held under that
/// lease (another host took it over after the lease ran out, or an earlier try recorded it).
pub async fn claim_recording_done(
    db: impl sqlx::PgExecutor<'_>,
    worker_id: &str,
    limit: i64,
    lease: Duration,
    horizon: ClaimHorizon,
    done: &[(i64, DateTime<Utc>)],
) -> Result<(Claim, Vec<i64>), StoreError> {
    if done.is_empty() {
        let claim = claim_due_events_from(db, worker_id, limit, lease, horizon).await?;
        return Ok((claim, Vec::new()));
    }
    let (ids, claimed_ats): (Vec<i64>, Vec<DateTime<Utc>>) = done.iter().copied().unzip();
    let rows = claim_query(CLAIM_RECORDING_DONE_SQL, worker_id, limit, lease, horizon)
        .bind(&ids)
        .bind(&claimed_ats)
        .fetch_all(db)
        .await
        .context(format!("claim_due_events recording {} done", ids.len()))?;
    let recorded = rows
        .first()
        .map(|row| row.get::<Vec<i64>, _>("recorded"))
        .unwrap_or_default();
    Ok((claim_of(worker_id, &rows), recorded))
}

/// `sql`, one of the claim statements, with the parameters they share bound (`$1` limit, `$2`
/// worker id, `$3` lease in seconds, `$4` and `$5` the claim horizon).
fn claim_query<'q>(
    sql: &'q str,
    worker_id: &'q str,
    limit: i64,
    lease: Duration,
    horizon: ClaimHorizon,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(limit)
        .bind(worker_id)
        .bind(lease.as_secs_f64())
        .bind(horizon.at)
        .bind(horizon.from_id)
}

/// The claim the rows of a claim statement describe (a row whose `id` is NULL, the one row of
/// [`CLAIM_RECORDING_DONE_SQL`] when nothing was claimable, describes no event).
fn claim_of(worker_id: &str, rows: &[sqlx::postgres::PgRow]) -> Claim {
    let mut claimed_at = Utc::now();
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(id) = row.get::<Option<i64>, _>("id") else {
            continue;
        };
        claimed_at = row.get("claimed_at");
        events.push(ClaimedEvent {
            id,
            tenant_id: row.get("tenant_id"),
            event_type: row.get("event_type"),
            event_version: row.get("event_version"),
            payload: row.get("payload"),
            headers: row.get("headers"),
            dispatch_key: row.get("dispatch_key"),
            ordering_key: row.get("ordering_key"),
            attempts: row.get("attempts"),
            created_at: row.get("created_at"),
            recovered_lease: row.get("recovered"),
            generation: row.get("generation"),
        });
    }
    events.sort_by_key(|e| e.id);
    Claim {
        worker_id: worker_id.to_string(),
        claimed_at,
        events,
    }
}
