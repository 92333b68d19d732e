//! Console reads: the event search, the last hour's throughput, the oldest due event and the
//! hosts, for the operator web console.
//!
//! Owns only reads, each bounded: a search returns at most one page, found by keyset (`id`
//! below the last one shown, never `OFFSET`), with only the conditions the operator gave, so
//! each combination gets a plan that uses its index (`migrations/*_console_*.sql`). It never
//! locks a row or changes one: the console's actions go through [`super::plan_repair`] and
//! [`super::apply_repair`] like the CLI's.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Postgres, QueryBuilder, Row};

use super::{Context, StoreError};

/// `application_name` of the console's connections (what `pg_stat_activity` shows).
pub const CONSOLE_APPLICATION_NAME: &str = "outbox console";

/// How long a console request waits for one of the console pool's connections.
const CONSOLE_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The console's own pool: at most `max_connections` connections to the database of `host_pool`
/// (same address, user and options), each with `statement_timeout` set at connection start, so
/// a slow search or a burst of sign-ins waits for these connections and never for the
/// dispatcher's. Connects lazily, at the first page.
pub fn console_pool(
    host_pool: &PgPool,
    max_connections: u32,
    statement_timeout: Duration,
) -> PgPool {
    let timeout_ms = statement_timeout.as_millis().max(1).to_string();
    let options = (*host_pool.connect_options())
        .clone()
        .application_name(CONSOLE_APPLICATION_NAME)
        .options([("statement_timeout", timeout_ms.as_str())]);
    PgPoolOptions::new()
        .max_connections(max_connections.max(1))
        .min_connections(0)
        .acquire_timeout(CONSOLE_ACQUIRE_TIMEOUT)
        .idle_timeout(Duration::from_secs(300))
        .connect_lazy_with(options)
}

/// Whether `error` is a statement cancelled by its `statement_timeout`.
pub fn is_statement_timeout(error: &StoreError) -> bool {
    matches!(&error.source, sqlx::Error::Database(e) if e.code().as_deref() == Some("57014"))
}

/// The most rows one search page shows.
pub const SEARCH_PAGE_MAX: i64 = 200;

/// What the console's event search looks for: every given condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct EventSearch {
    /// Only this id.
    pub id: Option<i64>,
    /// Only event types starting with this.
    pub type_prefix: Option<String>,
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only this status.
    pub status: Option<String>,
    /// Only rows created at or after this.
    pub since: Option<DateTime<Utc>>,
    /// Only rows created before this.
    pub until: Option<DateTime<Utc>>,
    /// Only the row with this dispatch key.
    pub dispatch_key: Option<String>,
    /// Keyset: only rows after the last one of the previous page: ids below this (and, for a
    /// time-range search, which is ordered by publication time, rows published at or before
    /// `before_at`).
    pub before: Option<i64>,
    /// Keyset of a time-range search: the `created_at` of the previous page's last row.
    pub before_at: Option<DateTime<Utc>>,
}

/// The statuses an event row can have.
pub const EVENT_STATUSES: [&str; 5] = ["pending", "processing", "done", "failed", "cancelled"];

/// One row of a search page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EventSummary {
    /// Event id.
    pub id: i64,
    /// Event type.
    pub event_type: String,
    /// Event version.
    pub event_version: i32,
    /// Tenant.
    pub tenant: Option<String>,
    /// Status.
    pub status: String,
    /// Dispatch attempts made.
    pub attempts: i32,
    /// Dispatch key.
    pub dispatch_key: Option<String>,
    /// When it was published.
    pub created_at: DateTime<Utc>,
    /// When it may next be claimed.
    pub available_at: DateTime<Utc>,
    /// The last dispatch error.
    pub last_error: Option<String>,
}

/// One search page: the rows, newest first, and the keyset of the next page.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EventPage {
    /// The rows.
    pub events: Vec<EventSummary>,
    /// `before` for the next page (`None`: this is the last one).
    pub next_before: Option<i64>,
    /// `before_at` for the next page of a time-range search.
    pub next_before_at: Option<DateTime<Utc>>,
}

/// The search refused its conditions before reading anything.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// A condition is not valid.
    #[error("{0}")]
    Invalid(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `prefix` as a `LIKE` pattern matching what starts with it (`%`, `_` and `\` escaped).
fn like_prefix(prefix: &str) -> String {
    let mut pattern = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

/// The finished rows: what the console's search indexes hold (`migrations/*_console_*.sql`).
const FINISHED: &str = "status IN ('done', 'failed', 'cancelled')";
/// The open rows: what the claim index holds.
const OPEN: &str = "status IN ('pending', 'processing')";

/// A time range narrower than this is read through the BRIN index on `created_at` and ordered
/// by time; a wider one (or one open at an end) is read newest id first through the primary
/// key, which meets rows of the range at once.
pub const NARROW_RANGE: chrono::TimeDelta = chrono::TimeDelta::days(2);

/// Whether `search` is ordered by publication time (a narrow time range) rather than by id.
fn orders_by_time(search: &EventSearch) -> bool {
    match (search.since, search.until) {
        (Some(since), Some(until)) => until - since <= NARROW_RANGE,
        (Some(since), None) => Utc::now() - since <= NARROW_RANGE,
        _ => false,
    }
}

/// The search's conditions (after a branch's status condition), each bound.
fn push_conditions(query: &mut QueryBuilder<'_, Postgres>, search: &EventSearch, by_time: bool) {
    if let Some(id) = search.id {
        query.push(" AND id = ").push_bind(id);
    }
    if let Some(prefix) = search.type_prefix.as_deref().filter(|p| !p.is_empty()) {
        query
            .push(" AND event_type LIKE ")
            .push_bind(like_prefix(prefix));
    }
    if let Some(tenant) = &search.tenant {
        query.push(" AND tenant_id = ").push_bind(tenant.clone());
    }
    if let Some(status) = &search.status {
        query.push(" AND status = ").push_bind(status.clone());
    }
    if let Some(since) = search.since {
        query.push(" AND created_at >= ").push_bind(since);
    }
    if let Some(until) = search.until {
        query.push(" AND created_at < ").push_bind(until);
    }
    if let Some(key) = &search.dispatch_key {
        query.push(" AND dispatch_key = ").push_bind(key.clone());
    }
    match (search.before, search.before_at) {
        (Some(before), Some(at)) if by_time => {
            query
                .push(" AND (created_at, id) < (")
                .push_bind(at)
                .push(", ")
                .push_bind(before)
                .push(")");
        }
        (Some(before), _) => {
            query.push(" AND id < ").push_bind(before);
        }
        (None, _) => {}
    }
}

/// One page (`limit` rows, at most [`SEARCH_PAGE_MAX`]) of the events matching `search`, newest
/// first: by id, or, for a narrow time range ([`NARROW_RANGE`]), by publication time (then id),
/// so that an old range is read from the BRIN index and not by walking every newer id. Only the given
/// conditions are in the statement, so each uses its index.
pub async fn search_events(
    pool: &PgPool,
    search: &EventSearch,
    limit: i64,
) -> Result<EventPage, SearchError> {
    if let Some(status) = &search.status {
        if !EVENT_STATUSES.contains(&status.as_str()) {
            return Err(SearchError::Invalid(format!(
                "unknown status {status:?}: one of {}",
                EVENT_STATUSES.join(", ")
            )));
        }
    }
    if let (Some(since), Some(until)) = (search.since, search.until) {
        if since >= until {
            return Err(SearchError::Invalid(format!(
                "the time range is empty: from {since} is not before {until}"
            )));
        }
    }
    let limit = limit.clamp(1, SEARCH_PAGE_MAX);
    let by_time = orders_by_time(search);
    let order = if by_time {
        " ORDER BY created_at DESC, id DESC LIMIT "
    } else {
        " ORDER BY id DESC LIMIT "
    };
    // Two branches: finished rows (read from the console's partial indexes, which hold only
    // finished rows, so an event adds one entry to each, not one per status change) and open
    // rows (few; read from the claim index). A status filter keeps only its branch.
    let branches: Vec<&str> = match search.status.as_deref() {
        Some("pending" | "processing") => vec![OPEN],
        Some(_) => vec![FINISHED],
        None => vec![FINISHED, OPEN],
    };
    let mut query: QueryBuilder<Postgres> = QueryBuilder::new("SELECT * FROM (");
    for (i, branch) in branches.iter().enumerate() {
        if i > 0 {
            query.push(" UNION ALL ");
        }
        // The open branch reads every open row that matches from the claim index, behind an
        // `OFFSET 0` fence: walking the primary key for a few open rows would pass every
        // finished one (its cost grows with the backlog, not with the table).
        let fenced = *branch == OPEN;
        query.push(if fenced {
            "(SELECT * FROM (SELECT "
        } else {
            "(SELECT "
        });
        query.push(
            "id, event_type, event_version, tenant_id, status, attempts, dispatch_key, \
             created_at, CASE WHEN status = 'processing' THEN coalesce(claim_expires_at, available_at) \
             ELSE available_at END AS available_at, last_error FROM outbox_event WHERE ",
        );
        query.push(*branch);
        push_conditions(&mut query, search, by_time);
        if fenced {
            query.push(" OFFSET 0) open_rows");
        }
        // One row more than the page tells whether there is a next page.
        query.push(order).push_bind(limit + 1).push(")");
    }
    query.push(") page").push(order).push_bind(limit + 1);
    // Planned for its own values every time (never a generic plan, which cannot use a prefix
    // index for `LIKE $1`).
    let rows = query
        .build()
        .persistent(false)
        .fetch_all(pool)
        .await
        .context("search events")?;
    let mut events: Vec<EventSummary> = rows
        .iter()
        .map(|r| EventSummary {
            id: r.get("id"),
            event_type: r.get("event_type"),
            event_version: r.get("event_version"),
            tenant: r.get("tenant_id"),
            status: r.get("status"),
            attempts: r.get("attempts"),
            dispatch_key: r.get("dispatch_key"),
            created_at: r.get("created_at"),
            available_at: r.get("available_at"),
            last_error: r.get("last_error"),
        })
        .collect();
    let shown = usize::try_from(limit).unwrap_or(0);
    let last = if events.len() > shown {
        events.truncate(shown);
        events.last().map(|e| (e.id, e.created_at))
    } else {
        None
    };
    Ok(EventPage {
        events,
        next_before: last.map(|(id, _)| id),
        next_before_at: last.filter(|_| by_time).map(|(_, at)| at),
    })
}

/// One minute of the last hour: events published, handed off, and dispatch attempts failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MinuteCounts {
    /// Start of the minute.
    pub minute: DateTime<Utc>,
    /// Events published.
    pub published: i64,
    /// Events handed to every destination (`done`).
    pub done: i64,
    /// Dispatch attempts that failed.
    pub failed_attempts: i64,
}

/// Per-minute counts for the last 60 minutes, oldest first (every minute present, zeros
/// included). Each count reads an index on its time column.
pub async fn throughput_last_hour(pool: &PgPool) -> Result<Vec<MinuteCounts>, StoreError> {
    let rows = sqlx::query(
        r#"
        WITH minutes AS (
            SELECT generate_series(date_trunc('minute', now()) - interval '59 minutes',
                                   date_trunc('minute', now()), interval '1 minute') AS minute
        ),
        published AS (
            SELECT date_trunc('minute', created_at) AS minute, count(*) AS n
            FROM (
                SELECT created_at FROM outbox_event
                WHERE status IN ('done', 'failed', 'cancelled')
                  AND created_at >= date_trunc('minute', now()) - interval '59 minutes'
                UNION ALL
                SELECT created_at FROM outbox_event
                WHERE status IN ('pending', 'processing')
                  AND created_at >= date_trunc('minute', now()) - interval '59 minutes'
            ) published
            GROUP BY 1
        ),
        done AS (
            SELECT date_trunc('minute', processed_at) AS minute, count(*) AS n
            FROM outbox_event
            WHERE status = 'done' AND processed_at >= date_trunc('minute', now()) - interval '59 minutes'
            GROUP BY 1
        ),
        failed AS (
            SELECT date_trunc('minute', at) AS minute, count(*) AS n
            FROM outbox_event_history
            WHERE action = 'attempt' AND at >= date_trunc('minute', now()) - interval '59 minutes'
            GROUP BY 1
        )
        SELECT m.minute, coalesce(p.n, 0) AS published, coalesce(d.n, 0) AS done,
               coalesce(f.n, 0) AS failed_attempts
        FROM minutes m
        LEFT JOIN published p USING (minute)
        LEFT JOIN done d USING (minute)
        LEFT JOIN failed f USING (minute)
        ORDER BY m.minute
        "#,
    )
    .fetch_all(pool)
    .await
    .context("throughput of the last hour")?;
    Ok(rows
        .iter()
        .map(|r| MinuteCounts {
            minute: r.get("minute"),
            published: r.get("published"),
            done: r.get("done"),
            failed_attempts: r.get("failed_attempts"),
        })
        .collect())
}

/// How long the longest-waiting due event has waited (seconds since its `available_at`):
/// events scheduled for later are not waiting yet. `None` when nothing is due. Reads the claim
/// index from `horizon` (see [`super::claim_horizon`]).
pub async fn oldest_due_pending_seconds(
    pool: &PgPool,
    horizon: super::ClaimHorizon,
) -> Result<Option<f64>, StoreError> {
    sqlx::query_scalar(
        r#"
        SELECT extract(epoch FROM now() - available_at)::float8
        FROM outbox_event
        WHERE status IN ('pending', 'processing') AND status = 'pending' AND available_at <= now()
          AND available_at >= coalesce($1, '-infinity'::timestamptz)
        ORDER BY available_at, id
        LIMIT 1
        "#,
    )
    .bind(horizon.at)
    .fetch_optional(pool)
    .await
    .context("oldest due pending event")
}

/// A host as its heartbeat row shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HostRow {
    /// Worker id.
    pub id: String,
    /// Host name.
    pub host_name: String,
    /// The queue group it consumes (`None`: every handler-bound queue).
    pub queue_group: Option<String>,
    /// Its version.
    pub version: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Seconds since its last heartbeat.
    pub last_seen_seconds_ago: f64,
    /// What it reported (dispatch counters, plugins, alerts firing).
    pub counters: serde_json::Value,
}

/// The hosts seen in the last `within_seconds`, most recent first (at most 100).
pub async fn hosts_seen(pool: &PgPool, within_seconds: i64) -> Result<Vec<HostRow>, StoreError> {
    let rows = sqlx::query(
        r#"
        SELECT id, host_name, queue_group, version, started_at,
               extract(epoch FROM now() - last_seen)::float8 AS age, counters
        FROM outbox_worker
        WHERE last_seen >= now() - make_interval(secs => $1)
        ORDER BY last_seen DESC, id
        LIMIT 100
        "#,
    )
    .bind(crate::numeric::signed_figure(within_seconds))
    .fetch_all(pool)
    .await
    .context("hosts seen")?;
    Ok(rows
        .iter()
        .map(|r| HostRow {
            id: r.get("id"),
            host_name: r.get("host_name"),
            queue_group: r.get("queue_group"),
            version: r.get("version"),
            started_at: r.get("started_at"),
            last_seen_seconds_ago: r.get("age"),
            counters: r.get("counters"),
        })
        .collect())
}

/// The operator holding a console session, checked again at each request: `None` when it was
/// revoked (or never existed) since the session started.
pub async fn operator_still_valid(
    pool: &PgPool,
    name: &str,
) -> Result<Option<super::Role>, StoreError> {
    let role: Option<String> = sqlx::query_scalar(
        "SELECT role FROM outbox_operator WHERE name = $1 AND revoked_at IS NULL",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .context(format!("check operator {name}"))?;
    Ok(role.as_deref().and_then(super::Role::parse))
}

/// Counts above this are shown as "more than" (a backlog of millions is not counted on every
/// refresh).
pub const COUNT_CAP: i64 = 100_000;

/// Row counts by status for the console: exact up to [`COUNT_CAP`] (one more means "more") for
/// the statuses an operator acts on (pending and processing from the claim index, processing
/// being at most a batch per host; failed and cancelled from their own small index), and `done`
/// estimated from the table's statistics (counting millions of done rows on every refresh would
/// cost more than the page may).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConsoleCounts {
    /// Waiting to be claimed (retries and scheduled events included).
    pub pending: i64,
    /// Claimed, lease running.
    pub processing: i64,
    /// Given up.
    pub failed: i64,
    /// Cancelled by an operator.
    pub cancelled: i64,
    /// Handed to every destination (exact below 100,000 rows, estimated from the table's
    /// statistics above).
    pub done_estimate: i64,
    /// Whether `done_estimate` is an estimate (a large table) rather than a count.
    pub done_is_estimate: bool,
}

/// Below this many rows (by the statistics) `done` is counted exactly.
const EXACT_DONE_COUNT_BELOW: i64 = 100_000;

/// Count rows by status, `done` estimated on a large table (see [`ConsoleCounts`]); open rows
/// are read from the claim index at `horizon` (see [`super::claim_horizon`]).
pub async fn console_counts(
    pool: &PgPool,
    horizon: super::ClaimHorizon,
) -> Result<ConsoleCounts, StoreError> {
    let row = sqlx::query(
        r#"
        SELECT (SELECT count(*) FROM (SELECT 1 FROM outbox_event WHERE status IN ('pending', 'processing')
                 AND available_at >= coalesce($2, '-infinity'::timestamptz) LIMIT $1) s) AS open,
               (SELECT count(*) FROM (SELECT 1 FROM outbox_event WHERE status IN ('pending', 'processing') AND status = 'processing'
                 AND available_at >= coalesce($2, '-infinity'::timestamptz) LIMIT $1) s) AS processing,
               (SELECT count(*) FROM (SELECT 1 FROM outbox_event WHERE status IN ('failed', 'cancelled') AND status = 'failed' LIMIT $1) s) AS failed,
               (SELECT count(*) FROM (SELECT 1 FROM outbox_event WHERE status IN ('failed', 'cancelled') AND status = 'cancelled' LIMIT $1) s) AS cancelled,
               (SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'outbox_event'::regclass) AS estimate
        "#,
    )
    .bind(COUNT_CAP + 1)
    .bind(horizon.at)
    .fetch_one(pool)
    .await
    .context("console counts")?;
    let open: i64 = row.get("open");
    let processing: i64 = row.get("processing");
    let mut counts = ConsoleCounts {
        // Above the cap the open count stops, so pending is only known to be above it too.
        pending: if open > COUNT_CAP {
            open
        } else {
            open - processing
        },
        processing,
        failed: row.get("failed"),
        cancelled: row.get("cancelled"),
        done_estimate: 0,
        done_is_estimate: false,
    };
    let estimate: i64 = row.get("estimate");
    counts.done_estimate = if estimate < EXACT_DONE_COUNT_BELOW {
        // A small (or never analyzed) table: counting is cheap and the estimate is not.
        sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'done'")
            .fetch_one(pool)
            .await
            .context("console counts: done")?
    } else {
        counts.done_is_estimate = true;
        (estimate - counts.pending - counts.processing - counts.failed - counts.cancelled).max(0)
    };
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::like_prefix;

    #[test]
    fn like_prefix_escapes_wildcards() {
        assert_eq!(like_prefix("mail."), "mail.%");
        assert_eq!(like_prefix("a_b%c\\"), "a\\_b\\%c\\\\%");
    }
}
