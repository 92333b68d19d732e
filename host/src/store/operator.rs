//! Operator reads: what `outbox stats`, `plugins list`, the alerts and the demo show (counts by status,
//! failures by type, heartbeats, receipts), and the demo's database set-up.
//!
//! Owns only reads, plus creating and emptying the demo's own database. It never touches a row
//! a dispatcher may hold (no claim, no outcome), so nothing here can disturb the claim path.

use std::time::Duration;

use sqlx::{PgPool, Row};

use super::{Context, StoreError};

/// Row counts by status, for `outbox stats` and the demo.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatusCounts {
    /// Waiting to be claimed (including retries not yet due).
    pub pending: i64,
    /// Claimed, lease running.
    pub processing: i64,
    /// Handed to every destination queue.
    pub done: i64,
    /// Given up (retries exhausted or no route): the `failed` status, not a receiver dead letter.
    pub failed: i64,
    /// Cancelled by an operator.
    pub cancelled: i64,
    /// Pending events due for more than 60 s and not claimed yet (the alerting figure; events
    /// scheduled for later or waiting for a retry are not late).
    pub pending_older_than_60s: i64,
}

/// Count rows by status.
pub async fn status_counts(pool: &PgPool) -> Result<StatusCounts, StoreError> {
    let row = sqlx::query(
        r#"
        SELECT count(*) FILTER (WHERE status = 'pending') AS pending,
               count(*) FILTER (WHERE status = 'processing') AS processing,
               count(*) FILTER (WHERE status = 'done') AS done,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
               count(*) FILTER (WHERE status = 'pending' AND available_at < now() - interval '60 seconds')
                   AS old_pending
        FROM outbox_event
        "#,
    )
    .fetch_one(pool)
    .await
    .context("status_counts")?;
    Ok(StatusCounts {
        pending: row.get("pending"),
        processing: row.get("processing"),
        done: row.get("done"),
        failed: row.get("failed"),
        cancelled: row.get("cancelled"),
        pending_older_than_60s: row.get("old_pending"),
    })
}

/// Receipts of one handler by result: what `outbox stats` shows per handler.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HandlerResults {
    /// The handler (for plugin-invoke jobs: the subscribed plugin).
    pub handler: String,
    /// Finished.
    pub ok: i64,
    /// Not run: the handler does not support the event's version.
    pub skipped_unsupported_version: i64,
    /// Waiting for a retry.
    pub retry: i64,
    /// Dead-lettered.
    pub dead: i64,
}

/// Receipt counts by handler and result (at most `limit` handlers, by name).
pub async fn receipt_counts_by_handler(
    pool: &PgPool,
    limit: i64,
) -> Result<Vec<HandlerResults>, StoreError> {
    let rows = sqlx::query(
        r#"
        SELECT handler,
               count(*) FILTER (WHERE result = 'ok') AS ok,
               count(*) FILTER (WHERE result = 'skipped_unsupported_version') AS skipped,
               count(*) FILTER (WHERE result = 'retry') AS retry,
               count(*) FILTER (WHERE result = 'dead') AS dead
        FROM outbox_receipt
        GROUP BY handler
        ORDER BY handler
        LIMIT $1
        "#,
    )
    .bind(limit)
    .fetch_all(pool)
    .await
    .context("receipt_counts_by_handler")?;
    Ok(rows
        .into_iter()
        .map(|r| HandlerResults {
            handler: r.get("handler"),
            ok: r.get("ok"),
            skipped_unsupported_version: r.get("skipped"),
            retry: r.get("retry"),
            dead: r.get("dead"),
        })
        .collect())
}

/// Ordering keys held up by a retry: the key's head event (its lowest id still pending or
/// processing) waits for a retry while later events of the key wait behind it (see
/// [`crate::store::CLAIM_SQL`]).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct OrderingBlocked {
    /// Keys whose head waits for a retry with later events of the key waiting.
    pub blocked_keys: i64,
    /// Events waiting behind those heads.
    pub held_back_events: i64,
    /// Age of the oldest event waiting behind such a head, seconds (`None`: no key blocked).
    pub oldest_blocked_seconds: Option<f64>,
    /// The blocked keys whose waiting events are oldest, oldest first (at most the limit asked).
    pub keys: Vec<BlockedKey>,
}

/// One ordering key held up by a retry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BlockedKey {
    /// The ordering key.
    pub ordering_key: String,
    /// The head event, waiting for its retry.
    pub head_id: i64,
    /// Dispatch attempts the head has had.
    pub head_attempts: i32,
    /// The head's last error.
    pub head_last_error: Option<String>,
    /// Seconds until the head's retry is due.
    pub retry_in_seconds: f64,
    /// Events of the key waiting behind the head.
    pub held_back_events: i64,
    /// Age of the oldest of them, seconds.
    pub oldest_blocked_seconds: f64,
}

/// The ordering keys held up by a retry ([`OrderingBlocked`]), listing at most `limit` of them.
/// Reads only `outbox_event_ordering_idx`'s rows (pending and processing events with a key).
pub async fn ordering_blocked(pool: &PgPool, limit: i64) -> Result<OrderingBlocked, StoreError> {
    let rows = sqlx::query(
        r#"
        WITH heads AS (
            SELECT DISTINCT ON (ordering_key) ordering_key, id, status, available_at, attempts,
                   last_error
            FROM outbox_event
            WHERE status IN ('pending', 'processing') AND ordering_key IS NOT NULL
            ORDER BY ordering_key, id
        ),
        blocked AS (
            SELECT h.ordering_key, h.id, h.attempts, h.last_error,
                   extract(epoch FROM h.available_at - now())::float8 AS retry_in,
                   held.n AS held, extract(epoch FROM now() - held.since)::float8 AS age
            FROM heads h
            CROSS JOIN LATERAL (
                SELECT count(*) AS n, min(later.created_at) AS since
                FROM outbox_event later
                WHERE later.ordering_key = h.ordering_key AND later.id > h.id
                  AND later.status IN ('pending', 'processing')
            ) held
            WHERE h.status = 'pending' AND h.available_at > now() AND h.attempts > 0
              AND held.n > 0
        )
        SELECT ordering_key, id, attempts, last_error, retry_in, held, age,
               count(*) OVER () AS keys, sum(held) OVER ()::bigint AS held_total,
               max(age) OVER () AS oldest
        FROM blocked
        ORDER BY age DESC, ordering_key
        LIMIT $1
        "#,
    )
    .bind(limit.max(1))
    .fetch_all(pool)
    .await
    .context("ordering keys blocked by a retry")?;
    let mut blocked = OrderingBlocked::default();
    if let Some(first) = rows.first() {
        blocked.blocked_keys = first.get("keys");
        blocked.held_back_events = first.get("held_total");
        blocked.oldest_blocked_seconds = Some(first.get("oldest"));
    }
    blocked.keys = rows
        .iter()
        .take(usize::try_from(limit).unwrap_or(0))
        .map(|r| BlockedKey {
            ordering_key: r.get("ordering_key"),
            head_id: r.get("id"),
            head_attempts: r.get("attempts"),
            head_last_error: r.get("last_error"),
            retry_in_seconds: r.get("retry_in"),
            held_back_events: r.get("held"),
            oldest_blocked_seconds: r.get("age"),
        })
        .collect();
    Ok(blocked)
}

// ---- Operator queries: what `outbox stats`, `outbox plugins list` and the demo show. ----

/// `url` with its database name replaced (`postgres://u@h/a?x=1` + `b` ->
/// `postgres://u@h/b?x=1`).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let base = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

/// Create database `name` on the server `pool` is connected to, unless it exists (the name is
/// quoted as an identifier, so use a lowercase one). Returns whether it was created.
pub async fn create_database_if_missing(pool: &PgPool, name: &str) -> Result<bool, StoreError> {
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(name)
            .fetch_one(pool)
            .await
            .context(format!("look up database {name}"))?;
    if exists {
        return Ok(false);
    }
    sqlx::query(&format!(
        "CREATE DATABASE \"{}\"",
        name.replace('"', "\"\"")
    ))
    .execute(pool)
    .await
    .context(format!("create database {name}"))?;
    Ok(true)
}

/// Empty the outbox: every event, delivery, worker and receipt row, ids restarting at 1 (the demo's
/// fresh start; never on a database a host is serving).
pub async fn empty_outbox(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query(
        "TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker, outbox_receipt RESTART IDENTITY",
    )
    .execute(pool)
    .await
    .context("empty the outbox tables")?;
    Ok(())
}

/// How many failed events of one type.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FailedTypeCount {
    /// Event type.
    pub event_type: String,
    /// Failed events of that type.
    pub count: i64,
}

/// Failed events counted by type, most first, at most `limit` types.
pub async fn failed_counts_by_type(
    pool: &PgPool,
    limit: i64,
) -> Result<Vec<FailedTypeCount>, StoreError> {
    let rows = sqlx::query(
        "SELECT event_type, count(*) AS n FROM outbox_event WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await
    .context("failed events by type")?;
    Ok(rows
        .into_iter()
        .map(|r| FailedTypeCount {
            event_type: r.get("event_type"),
            count: r.get("n"),
        })
        .collect())
}

/// One failed event and why it failed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FailedEvent {
    /// Event id.
    pub id: i64,
    /// Event type.
    pub event_type: String,
    /// The last error recorded for it.
    pub last_error: Option<String>,
}

/// Every failed event, oldest id first.
pub async fn failed_events(pool: &PgPool) -> Result<Vec<FailedEvent>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, event_type, last_error FROM outbox_event WHERE status = 'failed' ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .context("failed events")?;
    Ok(rows
        .into_iter()
        .map(|r| FailedEvent {
            id: r.get("id"),
            event_type: r.get("event_type"),
            last_error: r.get("last_error"),
        })
        .collect())
}

/// Fan-out deliveries recorded as done (`outbox_delivery`).
pub async fn done_delivery_count(pool: &PgPool) -> Result<i64, StoreError> {
    sqlx::query_scalar("SELECT count(*) FROM outbox_delivery WHERE status = 'done'")
        .fetch_one(pool)
        .await
        .context("count done deliveries")
}

/// A host process as its last heartbeat (`outbox_worker`) shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WorkerHeartbeat {
    /// Worker id (`outbox_worker.id`).
    pub id: String,
    /// Host name of the process.
    pub host_name: String,
    /// Seconds since its last heartbeat.
    pub last_seen_seconds_ago: f64,
    /// The counters it reported (JSON object; `plugins` is its plugin list, if any).
    pub counters: serde_json::Value,
}

fn heartbeat_from_row(r: &sqlx::postgres::PgRow) -> WorkerHeartbeat {
    WorkerHeartbeat {
        id: r.get("id"),
        host_name: r.get("host_name"),
        last_seen_seconds_ago: r.get("age"),
        counters: r.get("counters"),
    }
}

/// The `limit` most recently seen workers, most recent first.
pub async fn recent_workers(pool: &PgPool, limit: i64) -> Result<Vec<WorkerHeartbeat>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, host_name, extract(epoch FROM now() - last_seen)::float8 AS age, counters \
         FROM outbox_worker ORDER BY last_seen DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await
    .context("reading host heartbeats (outbox_worker)")?;
    Ok(rows.iter().map(heartbeat_from_row).collect())
}

/// Workers seen within `within` whose heartbeat carries a plugin list (`counters.plugins`),
/// ordered by id.
pub async fn live_workers_with_plugins(
    pool: &PgPool,
    within: Duration,
) -> Result<Vec<WorkerHeartbeat>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, host_name, extract(epoch FROM now() - last_seen)::float8 AS age, counters \
         FROM outbox_worker \
         WHERE last_seen > now() - make_interval(secs => $1) \
           AND jsonb_typeof(counters->'plugins') = 'array' \
         ORDER BY id",
    )
    .bind(within.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("reading host heartbeats (outbox_worker)")?;
    Ok(rows.iter().map(heartbeat_from_row).collect())
}

/// What one handler made of one event (`outbox_receipt`), with the event's type.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ReceiptRow {
    /// The handled event.
    pub event_id: i64,
    /// Its type (none once the event row is gone).
    pub event_type: Option<String>,
    /// The handler plugin.
    pub handler: String,
    /// `ok`, `retry` or `dead`.
    pub result: String,
    /// Attempts so far.
    pub attempts: i32,
    /// Events the handler published.
    pub published_ids: Vec<i64>,
    /// Time of the last attempt, in milliseconds.
    pub duration_ms: f64,
}

/// Every receipt, by event id.
pub async fn receipts(pool: &PgPool) -> Result<Vec<ReceiptRow>, StoreError> {
    let rows = sqlx::query(
        "SELECT r.event_id, e.event_type, r.handler, r.result, r.attempts, r.published_ids, r.duration_ms \
         FROM outbox_receipt r LEFT JOIN outbox_event e ON e.id = r.event_id ORDER BY r.event_id",
    )
    .fetch_all(pool)
    .await
    .context("reading receipts (outbox_receipt)")?;
    Ok(rows
        .into_iter()
        .map(|r| ReceiptRow {
            event_id: r.get("event_id"),
            event_type: r.get("event_type"),
            handler: r.get("handler"),
            result: r.get("result"),
            attempts: r.get("attempts"),
            published_ids: r.get("published_ids"),
            duration_ms: r.get("duration_ms"),
        })
        .collect())
}

/// What the alerts and the gauges watch of the outbox table: open events, the late ones among
/// them, and `failed` events ([`pending_and_failed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PendingAndFailed {
    /// `pending` rows (due or scheduled later, retries included).
    pub pending: i64,
    /// `pending` rows due for longer than the given time and still not claimed (an event
    /// scheduled for later, or waiting for its retry, is not late).
    pub late: i64,
    /// `failed` rows.
    pub failed: i64,
}

/// Count pending events, those due for longer than `late_after` among them, and `failed`
/// events: what the alerts watch every check and the gauges every minute. Pending rows are read
/// from the claim index at `horizon` (no live row is earlier; see [`claim_horizon`]) and
/// failed ones from `outbox_event_failed_status_idx`, so the cost follows the open and failed
/// rows, never the entries finished events left in the claim index (which only `VACUUM`
/// removes) or the done rows (unlike [`status_counts`], which counts every row and is for
/// `outbox stats`).
///
/// [`claim_horizon`]: super::claim_horizon
pub async fn pending_and_failed(
    pool: &PgPool,
    late_after: Duration,
    horizon: super::ClaimHorizon,
) -> Result<PendingAndFailed, StoreError> {
    let (pending, late, failed): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*),
                count(*) FILTER (WHERE available_at < now() - make_interval(secs => $1)),
                (SELECT count(*) FROM outbox_event
                 WHERE status IN ('failed', 'cancelled') AND status = 'failed')
         FROM outbox_event
         WHERE status IN ('pending', 'processing') AND status = 'pending'
           AND available_at >= coalesce($2, '-infinity'::timestamptz)",
    )
    .bind(late_after.as_secs_f64())
    .bind(horizon.at)
    .fetch_one(pool)
    .await
    .context("count pending and failed events")?;
    Ok(PendingAndFailed {
        pending,
        late,
        failed,
    })
}

/// Workers whose last heartbeat is older than `silent_for` but newer than `forgotten_after`, with
/// the seconds since, by id.
pub async fn silent_workers(
    pool: &PgPool,
    silent_for: Duration,
    forgotten_after: Duration,
) -> Result<Vec<(String, i64)>, StoreError> {
    sqlx::query_as(
        "SELECT id, extract(epoch FROM now() - last_seen)::bigint FROM outbox_worker
         WHERE last_seen < now() - make_interval(secs => $1)
           AND last_seen > now() - make_interval(secs => $2)
         ORDER BY id",
    )
    .bind(silent_for.as_secs_f64())
    .bind(forgotten_after.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("reading silent workers (outbox_worker)")
}
