//! Hosts: each process's heartbeat row in `outbox_worker`, and what happens to the claims of a
//! host whose heartbeat stopped.
//!
//! Owns registering and refreshing a host ([`heartbeat`]), removing it when it stops cleanly
//! ([`forget_worker`]), finding hosts silent for longer than [`STALE_HOST_AFTER`] and releasing
//! the claims they still hold. It never touches a row a live host holds.

use std::time::Duration;

use sqlx::{PgPool, Row};

use super::{ClaimHorizon, Context, StoreError};

/// A host's heartbeat is stale after this long: nine missed 10 s heartbeats. Its claims are
/// then released by the next live host ([`release_stale_claims`]) instead of waiting for the
/// claim lease.
pub const STALE_HOST_AFTER: Duration = Duration::from_secs(90);

/// The claims one stale host held, released.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReleasedClaims {
    /// The host (worker id).
    pub worker: String,
    /// Events it held, now pending again.
    pub events: i64,
}

/// The statement of [`release_stale_claims`]: `$1` the staleness in seconds, `$2` the claim
/// horizon's time.
///
/// Its `EXISTS` over `outbox_worker` is a one-time filter PostgreSQL evaluates before anything
/// else: while every host is live (nearly always) the statement reads no event at all. Without
/// it, statistics saying few rows are `processing` made the planner scan the whole table for
/// them at every heartbeat of every host: 260 ms of PostgreSQL's CPU with 2,000,000 rows.
pub const RELEASE_STALE_CLAIMS_SQL: &str = r#"
    WITH released AS (
        UPDATE outbox_event e
        SET status = 'pending', available_at = now(), attempts = greatest(e.attempts - 1, 0),
            claim_expires_at = NULL
        FROM outbox_worker w
        WHERE e.status = 'processing' AND e.claimed_by = w.id
          AND e.available_at >= coalesce($2, '-infinity'::timestamptz)
          AND w.last_seen < now() - make_interval(secs => $1)
          AND EXISTS (SELECT 1 FROM outbox_worker stale
                      WHERE stale.last_seen < now() - make_interval(secs => $1))
        RETURNING w.id AS worker
    )
    SELECT worker, count(*) AS events FROM released GROUP BY worker ORDER BY worker
    "#;

/// Release the claims of every host whose heartbeat is older than `stale_after`: its
/// `processing` rows go back to `pending`, due now, the attempt that was cut not counted (a dead
/// host is the infrastructure's fault, not the event's). A host that is only slow to heartbeat
/// loses nothing but time: its outcomes are written only under the claim it made, so the host
/// that claims the rows next wins. Every live host runs this every heartbeat
/// ([`RELEASE_STALE_CLAIMS_SQL`]): it reads no event while no host is stale, and otherwise only
/// rows from `horizon` on (a held row is live, so it is never earlier).
pub async fn release_stale_claims(
    pool: &PgPool,
    stale_after: Duration,
    horizon: ClaimHorizon,
) -> Result<Vec<ReleasedClaims>, StoreError> {
    let rows = sqlx::query(RELEASE_STALE_CLAIMS_SQL)
        .bind(stale_after.as_secs_f64())
        .bind(horizon.at)
        .fetch_all(pool)
        .await
        .context("release the claims of stale hosts")?;
    Ok(rows
        .iter()
        .map(|r| ReleasedClaims {
            worker: r.get("worker"),
            events: r.get("events"),
        })
        .collect())
}

/// A host whose heartbeat is older than `stale_after`, with the claims it still holds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StaleHost {
    /// Worker id.
    pub worker: String,
    /// Seconds since its last heartbeat.
    pub silent_seconds: f64,
    /// Events it holds in `processing`.
    pub held_claims: i64,
}

/// Hosts silent for longer than `stale_after` (at most 100, longest silent first) and the claims
/// each still holds (read from the whole claim index: for `outbox stats`, not for a loop; the
/// receivers' takeover reads [`stale_host_ids`]).
pub async fn stale_hosts(
    pool: &PgPool,
    stale_after: Duration,
) -> Result<Vec<StaleHost>, StoreError> {
    let rows = sqlx::query(
        r#"
        SELECT w.id, extract(epoch FROM now() - w.last_seen)::float8 AS silent,
               (SELECT count(*) FROM outbox_event e
                WHERE e.status = 'processing' AND e.claimed_by = w.id) AS held
        FROM outbox_worker w
        WHERE w.last_seen < now() - make_interval(secs => $1)
        ORDER BY w.last_seen
        LIMIT 100
        "#,
    )
    .bind(stale_after.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("stale hosts")?;
    Ok(rows
        .iter()
        .map(|r| StaleHost {
            worker: r.get("id"),
            silent_seconds: r.get("silent"),
            held_claims: r.get("held"),
        })
        .collect())
}

/// The ids of hosts silent for longer than `stale_after` (at most 100, longest silent first):
/// what the receivers' takeover looks up every few seconds. Reads only the heartbeat table.
pub async fn stale_host_ids(
    pool: &PgPool,
    stale_after: Duration,
) -> Result<Vec<String>, StoreError> {
    sqlx::query_scalar(
        "SELECT id FROM outbox_worker WHERE last_seen < now() - make_interval(secs => $1)
         ORDER BY last_seen LIMIT 100",
    )
    .bind(stale_after.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("stale host ids")
}

/// When `worker_id` last sent a heartbeat (seconds ago), if it ever did.
pub async fn worker_silence(pool: &PgPool, worker_id: &str) -> Result<Option<f64>, StoreError> {
    sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - last_seen)::float8 FROM outbox_worker WHERE id = $1",
    )
    .bind(worker_id)
    .fetch_optional(pool)
    .await
    .context(format!("heartbeat of worker {worker_id}"))
}

/// Remove `worker_id` from `outbox_worker` (a host stopping cleanly).
pub async fn forget_worker(pool: &PgPool, worker_id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM outbox_worker WHERE id = $1")
        .bind(worker_id)
        .execute(pool)
        .await
        .context(format!("remove worker {worker_id}"))?;
    Ok(())
}

/// Register or refresh this process in `outbox_worker`.
pub async fn heartbeat(
    pool: &PgPool,
    worker_id: &str,
    queue_group: Option<&str>,
    counters: &serde_json::Value,
) -> Result<(), StoreError> {
    sqlx::query(
        r#"
        INSERT INTO outbox_worker (id, host_name, queue_group, version, counters)
        VALUES ($1, $2, $3, $4, $5)
        ON CONFLICT (id) DO UPDATE SET last_seen = now(), counters = EXCLUDED.counters
        "#,
    )
    .bind(worker_id)
    .bind(
        hostname::get()
            .map(|h| h.to_string_lossy().into_owned())
            .unwrap_or_default(),
    )
    .bind(queue_group)
    .bind(env!("CARGO_PKG_VERSION"))
    .bind(counters)
    .execute(pool)
    .await
    .context(format!("heartbeat of worker {worker_id}"))?;
    Ok(())
}
