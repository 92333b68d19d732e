//! Repair: an operator's requeue and cancel of outbox rows, with guardrails.
//!
//! Owns choosing the rows a repair changes ([`plan_repair`]: one read, no lock; the same
//! arguments choose the same rows, so a dry run lists exactly what a real run then changes) and
//! changing them in short batches ([`apply_repair`]: one transaction per batch, each row re-checked
//! under its row lock and written to `outbox_event_history` with the status, attempts and last
//! error it had). It never touches a `processing` row, requeue never touches a `pending` one
//! (a dispatcher holds or will claim them), and it never holds a lock across batches, so a
//! repair of a million rows does not stall the dispatcher.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Row};

use super::{Context, StoreError};

/// Rows changed per transaction by [`apply_repair`].
pub const REPAIR_BATCH: usize = 1000;

/// What an operator repair does to the rows it chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RepairAction {
    /// `failed` or `cancelled` rows back to `pending`, due now, attempts reset.
    Requeue,
    /// `pending` or `failed` rows to `cancelled`: never dispatched until requeued.
    Cancel,
}

impl RepairAction {
    /// The statuses this action changes.
    pub fn changes(self) -> &'static [&'static str] {
        match self {
            RepairAction::Requeue => &["failed", "cancelled"],
            RepairAction::Cancel => &["pending", "failed"],
        }
    }

    /// The status a changed row gets.
    pub fn to_status(self) -> &'static str {
        match self {
            RepairAction::Requeue => "pending",
            RepairAction::Cancel => "cancelled",
        }
    }

    /// The command's name (`requeue`, `cancel`).
    pub fn as_str(self) -> &'static str {
        match self {
            RepairAction::Requeue => "requeue",
            RepairAction::Cancel => "cancel",
        }
    }

    /// Why a row in `status` is left alone.
    fn why_not(self, status: &str) -> &'static str {
        match (self, status) {
            (_, "processing") => "a dispatcher holds it now",
            (RepairAction::Requeue, "pending") => "it is waiting to be dispatched already",
            (RepairAction::Cancel, "cancelled") => "it is cancelled already",
            (_, "done") => "it was handed to every destination (replay a handler's work with dead-letter replay)",
            _ => "this command does not change rows in that status",
        }
    }
}

/// Which rows a repair is about: every given condition must hold (ids, when given, are the
/// only candidates).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RowFilter {
    /// Only these ids.
    pub ids: Vec<i64>,
    /// Only rows in these statuses (each must be one the action changes; empty: all of those).
    pub statuses: Vec<String>,
    /// Only event types starting with this.
    pub type_prefix: Option<String>,
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only rows created at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Only rows created before this.
    pub until: Option<DateTime<Utc>>,
    /// Only rows whose last error contains this text.
    pub error_contains: Option<String>,
    /// Only fan-out rows whose hand-off to this queue did not succeed.
    pub destination: Option<String>,
}

impl RowFilter {
    /// Whether anything narrows the rows (a repair without any condition is refused).
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
            && self.statuses.is_empty()
            && self.type_prefix.is_none()
            && self.tenant.is_none()
            && self.since.is_none()
            && self.until.is_none()
            && self.error_contains.is_none()
            && self.destination.is_none()
    }
}

/// A repair's arguments were refused before anything was read.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// The arguments cannot be carried out as given.
    #[error("{0}")]
    Refused(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The rows a repair changes, and what it leaves alone and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RepairPlan {
    /// The action.
    pub action: RepairAction,
    /// The rows it changes, in id order (at most the limit).
    pub ids: Vec<i64>,
    /// Rows matching every other condition that are left alone, by status.
    pub skipped: BTreeMap<String, i64>,
    /// Why each skipped status is left alone.
    pub skipped_why: BTreeMap<String, String>,
    /// Requested ids that do not exist.
    pub missing_ids: Vec<i64>,
    /// Rows beyond the limit that a run without it would also change.
    pub beyond_limit: i64,
    /// Things the operator should know before going on (handlers that may run again,
    /// destinations that already have the event).
    pub warnings: Vec<String>,
}

/// What [`apply_repair`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RepairReport {
    /// Rows changed (each with a history row).
    pub changed: u64,
    /// Planned rows whose status changed in between (a dispatcher or another operator got
    /// there first), left alone.
    pub changed_meanwhile: u64,
}

/// The filter as SQL conditions on `outbox_event e`, binding $1..$8 (ids, type prefix, tenant,
/// since, until, error text, destination); the status condition is the caller's.
const FILTER_SQL: &str = r#"
    ($1::bigint[] IS NULL OR e.id = ANY($1))
    AND ($2::text IS NULL OR starts_with(e.event_type, $2))
    AND ($3::text IS NULL OR e.tenant_id = $3)
    AND ($4::timestamptz IS NULL OR e.created_at >= $4)
    AND ($5::timestamptz IS NULL OR e.created_at < $5)
    AND ($6::text IS NULL OR strpos(coalesce(e.last_error, ''), $6) > 0)
    AND ($7::text IS NULL OR EXISTS (
        SELECT 1 FROM outbox_delivery d
        WHERE d.event_id = e.id AND d.destination = $7 AND d.status <> 'done'))
"#;

fn bind_filter<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    filter: &'q RowFilter,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind((!filter.ids.is_empty()).then_some(&filter.ids))
        .bind(filter.type_prefix.as_deref())
        .bind(filter.tenant.as_deref())
        .bind(filter.since)
        .bind(filter.until)
        .bind(filter.error_contains.as_deref())
        .bind(filter.destination.as_deref())
}

/// Choose the rows `action` changes under `filter`, at most `limit` (lowest ids first), and
/// count what it leaves alone. Reads only. `idempotency_ttl` (the receivers' `done` marker
/// lifetime) decides the warning about handlers that may run again.
pub async fn plan_repair(
    pool: &PgPool,
    action: RepairAction,
    filter: &RowFilter,
    limit: Option<u64>,
    idempotency_ttl: Duration,
) -> Result<RepairPlan, RepairError> {
    if filter.is_empty() {
        return Err(RepairError::Refused(format!(
            "{}: give --id or a filter (for example --status {})",
            action.as_str(),
            action.changes()[0]
        )));
    }
    for status in &filter.statuses {
        if !action.changes().contains(&status.as_str()) {
            return Err(RepairError::Refused(format!(
                "{} changes only {} rows, not {status:?} rows ({})",
                action.as_str(),
                action.changes().join(" or "),
                action.why_not(status)
            )));
        }
    }
    let statuses: Vec<String> = if filter.statuses.is_empty() {
        action.changes().iter().map(|s| s.to_string()).collect()
    } else {
        filter.statuses.clone()
    };
    let limit = limit.map(crate::numeric::u64_as_i64);
    let chosen_sql = format!(
        "SELECT e.id FROM outbox_event e WHERE e.status = ANY($8) AND {FILTER_SQL} ORDER BY e.id LIMIT $9"
    );
    let ids: Vec<i64> = bind_filter(sqlx::query(&chosen_sql), filter)
        .bind(&statuses)
        .bind(limit)
        .fetch_all(pool)
        .await
        .context(format!("{}: choose rows", action.as_str()))?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let counts_sql = format!(
        "SELECT e.status, count(*) FROM outbox_event e WHERE {FILTER_SQL} GROUP BY e.status"
    );
    let mut skipped = BTreeMap::new();
    let mut eligible = 0i64;
    for row in bind_filter(sqlx::query(&counts_sql), filter)
        .fetch_all(pool)
        .await
        .context(format!("{}: count rows by status", action.as_str()))?
    {
        let (status, count): (String, i64) = (row.get(0), row.get(1));
        if statuses.contains(&status) {
            eligible += count;
        } else if action.changes().contains(&status.as_str()) {
            // Excluded by --status, not by a guardrail: not reported as skipped.
        } else {
            skipped.insert(status, count);
        }
    }
    let skipped_why = skipped
        .keys()
        .map(|s| (s.clone(), action.why_not(s).to_string()))
        .collect();
    let missing_ids = if filter.ids.is_empty() {
        Vec::new()
    } else {
        let found: Vec<i64> = sqlx::query_scalar("SELECT id FROM outbox_event WHERE id = ANY($1)")
            .bind(&filter.ids)
            .fetch_all(pool)
            .await
            .context(format!("{}: look up the given ids", action.as_str()))?;
        let mut missing: Vec<i64> = filter
            .ids
            .iter()
            .copied()
            .filter(|id| !found.contains(id))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        missing
    };
    let warnings = if action == RepairAction::Requeue {
        requeue_warnings(pool, &ids, idempotency_ttl).await?
    } else {
        Vec::new()
    };
    Ok(RepairPlan {
        action,
        beyond_limit: (eligible - crate::numeric::len_i64(ids.len())).max(0),
        ids,
        skipped,
        skipped_why,
        missing_ids,
        warnings,
    })
}

/// What a requeue of `ids` should warn about: events older than the receivers' idempotency
/// window (a handler that ran on them before may run again) and fan-out destinations that have
/// the event already (not redone).
async fn requeue_warnings(
    pool: &PgPool,
    ids: &[i64],
    idempotency_ttl: Duration,
) -> Result<Vec<String>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let row = sqlx::query(
        r#"
        SELECT count(*) FILTER (WHERE e.created_at < now() - make_interval(secs => $2)),
               count(*) FILTER (WHERE EXISTS (
                   SELECT 1 FROM outbox_delivery d WHERE d.event_id = e.id AND d.status = 'done'))
        FROM outbox_event e WHERE e.id = ANY($1)
        "#,
    )
    .bind(ids)
    .bind(idempotency_ttl.as_secs_f64())
    .fetch_one(pool)
    .await
    .context("requeue: check the idempotency window and delivered destinations")?;
    let (old, delivered): (i64, i64) = (row.get(0), row.get(1));
    let mut warnings = Vec::new();
    if old > 0 {
        warnings.push(format!(
            "{old} of these events are older than the receivers' idempotency window ({} s, OUTBOX_IDEMPOTENCY_TTL_SECONDS): a handler that already ran on one of them may run again",
            idempotency_ttl.as_secs()
        ));
    }
    if delivered > 0 {
        warnings.push(format!(
            "{delivered} of these events were already handed to some of their fan-out destinations: those are not redone, only the others"
        ));
    }
    Ok(warnings)
}

/// Change the rows of `plan` in batches of [`REPAIR_BATCH`], one statement and transaction
/// each: every row is re-checked under its row lock (a row whose status changed since the plan
/// is left alone and counted in [`RepairReport::changed_meanwhile`]), changed, and written to
/// `outbox_event_history` as done by `actor` with `detail` (the command's filter). The repair's
/// one `outbox_audit` row (operator `actor`, command `requeue` or `cancel`, arguments `detail`)
/// is written by the same statement as the first batch and its `rows_affected` raised by each
/// later one, so at every moment the audit trail counts exactly the rows committed: a batch
/// whose audit write fails changes nothing. After each batch `progress` gets the rows handled
/// so far.
pub async fn apply_repair(
    pool: &PgPool,
    plan: &RepairPlan,
    actor: &str,
    detail: &serde_json::Value,
    mut progress: impl FnMut(u64),
) -> Result<RepairReport, StoreError> {
    let action = plan.action;
    let statuses: Vec<&str> = action.changes().to_vec();
    let set = match action {
        RepairAction::Requeue => {
            "status = 'pending', attempts = 0, available_at = now(), processed_at = NULL, \
             last_error = NULL, claimed_by = NULL, claimed_at = NULL, claim_expires_at = NULL"
        }
        RepairAction::Cancel => {
            "status = 'cancelled', processed_at = now(), claimed_by = NULL, claimed_at = NULL, \
             claim_expires_at = NULL"
        }
    };
    let sql = format!(
        r#"
        WITH old AS (
            SELECT id, status, attempts, last_error FROM outbox_event
            WHERE id = ANY($1) AND status = ANY($2)
            ORDER BY id
            FOR UPDATE
        ),
        changed AS (
            UPDATE outbox_event e SET {set}
            FROM old WHERE e.id = old.id
            RETURNING e.id, old.status AS from_status, old.attempts, old.last_error
        ),
        history AS (
            INSERT INTO outbox_event_history
                (event_id, action, actor, from_status, to_status, attempts, last_error, detail)
            SELECT id, $3, $4, from_status, $5, attempts, last_error, $6 FROM changed
        ),
        -- The repair's audit row: written with the first batch ($7 NULL), counted up by the
        -- others, always in the statement that changes the rows it counts.
        audit_added AS (
            INSERT INTO outbox_audit (operator, command, arguments, dry_run, rows_affected)
            SELECT $4, $3, $6, false, (SELECT count(*) FROM changed)
            WHERE $7::bigint IS NULL
            RETURNING id
        ),
        audit_counted AS (
            UPDATE outbox_audit SET rows_affected = rows_affected + (SELECT count(*) FROM changed)
            WHERE id = $7::bigint
            RETURNING id
        )
        SELECT (SELECT count(*) FROM changed),
               (SELECT id FROM audit_added UNION ALL SELECT id FROM audit_counted)
        "#
    );
    let mut report = RepairReport::default();
    let mut audit_id: Option<i64> = None;
    for batch in plan.ids.chunks(REPAIR_BATCH) {
        let what = || {
            format!(
                "{} rows {}..={}",
                action.as_str(),
                batch.first().copied().unwrap_or_default(),
                batch.last().copied().unwrap_or_default()
            )
        };
        let mut tx = pool.begin().await.context(what())?;
        let (changed, audited): (i64, Option<i64>) = sqlx::query_as(&sql)
            .bind(batch)
            .bind(&statuses)
            .bind(action.as_str())
            .bind(actor)
            .bind(action.to_status())
            .bind(detail)
            .bind(audit_id)
            .fetch_one(&mut *tx)
            .await
            .context(what())?;
        if audited.is_none() {
            // The audit row of an earlier batch is gone (deleted in between): the rows would
            // change uncounted, so the batch is rolled back and the repair stops.
            return Err(StoreError {
                context: format!(
                    "{}: the repair's audit row is gone, nothing more changed",
                    what()
                ),
                source: sqlx::Error::RowNotFound,
            });
        }
        tx.commit().await.context(what())?;
        audit_id = audited;
        report.changed += crate::numeric::count(changed);
        report.changed_meanwhile +=
            crate::numeric::count(crate::numeric::len_i64(batch.len()) - changed);
        progress(report.changed + report.changed_meanwhile);
    }
    Ok(report)
}

/// One change in an event's history (`outbox_event_history`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HistoryEntry {
    /// When.
    pub at: DateTime<Utc>,
    /// `requeue` or `cancel`.
    pub action: String,
    /// Who.
    pub actor: String,
    /// The status before.
    pub from_status: String,
    /// The status after.
    pub to_status: String,
    /// Attempts before.
    pub attempts: i32,
    /// The last error before.
    pub last_error: Option<String>,
}

/// The history of event `event_id`, oldest first.
pub async fn event_history(pool: &PgPool, event_id: i64) -> Result<Vec<HistoryEntry>, StoreError> {
    let rows = sqlx::query(
        "SELECT at, action, actor, from_status, to_status, attempts, last_error
         FROM outbox_event_history WHERE event_id = $1 ORDER BY id",
    )
    .bind(event_id)
    .fetch_all(pool)
    .await
    .context(format!("history of event {event_id}"))?;
    Ok(rows
        .iter()
        .map(|row| HistoryEntry {
            at: row.get("at"),
            action: row.get("action"),
            actor: row.get("actor"),
            from_status: row.get("from_status"),
            to_status: row.get("to_status"),
            attempts: row.get("attempts"),
            last_error: row.get("last_error"),
        })
        .collect())
}
