//! Polling dispatchers: the `outbox_dispatcher_polling` rows that tell producers' insert trigger
//! a dispatcher looks at the table every few milliseconds anyway, so their `NOTIFY` (which
//! serialises their commits) is not needed.
//!
//! Owns announcing, renewing and withdrawing one dispatcher's polling lease, counting the
//! producers that wait for each other's notifications right now (`notify_lock_waiters`), and
//! keeping the latest lease end in the sequence `outbox_dispatcher_polling_until_ms` (milliseconds
//! since the Unix epoch), which the trigger's `WHEN` condition reads so that it does not even run
//! while a lease is current (a PL/pgSQL call and a query per inserting statement saved). It never
//! decides when a dispatcher polls (that is `dispatch::wake`), and a row or the sequence is only
//! ever a lease: an end that is not renewed stops counting when it passes, so a dead host never
//! keeps producers silent. The sequence is set when a lease is announced (never lower than it was)
//! and, at a withdrawal, to the latest end still in the table; two dispatchers changing it at once
//! may leave it lower than the table (producers notify until the next renewal, a second at most),
//! never later than an end that was announced.

use std::time::Duration;

use sqlx::PgPool;

use super::{Context, StoreError};

/// The statement of [`announce_polling`]: `$1` the worker id, `$2` the lease in seconds.
pub const ANNOUNCE_POLLING_SQL: &str = r#"
    WITH lease AS (
        INSERT INTO outbox_dispatcher_polling (worker_id, until)
        VALUES ($1, clock_timestamp() + make_interval(secs => $2))
        ON CONFLICT (worker_id) DO UPDATE SET until = EXCLUDED.until
        RETURNING until
    )
    SELECT setval('outbox_dispatcher_polling_until_ms',
                  greatest((SELECT last_value FROM outbox_dispatcher_polling_until_ms),
                           (date_part('epoch', until) * 1000)::bigint))
    FROM lease
    "#;

/// Announce (or renew) that `worker_id` polls for new rows for the next `lease`: until then
/// the insert trigger does not notify ([`ANNOUNCE_POLLING_SQL`]).
pub async fn announce_polling(
    pool: &PgPool,
    worker_id: &str,
    lease: Duration,
) -> Result<(), StoreError> {
    sqlx::query(ANNOUNCE_POLLING_SQL)
        .bind(worker_id)
        .bind(lease.as_secs_f64())
        .execute(pool)
        .await
        .context(format!("announce that dispatcher {worker_id} polls"))?;
    Ok(())
}

/// The statement of [`withdraw_polling`]: `$1` the worker id.
pub const WITHDRAW_POLLING_SQL: &str = r#"
    WITH gone AS (
        DELETE FROM outbox_dispatcher_polling WHERE worker_id = $1
    )
    SELECT setval('outbox_dispatcher_polling_until_ms', coalesce(
        (SELECT (date_part('epoch', max(until)) * 1000)::bigint
         FROM outbox_dispatcher_polling WHERE worker_id <> $1), 0))
    "#;

/// Withdraw `worker_id`'s polling lease: producers notify again (unless another dispatcher
/// polls) ([`WITHDRAW_POLLING_SQL`]).
pub async fn withdraw_polling(pool: &PgPool, worker_id: &str) -> Result<(), StoreError> {
    sqlx::query(WITHDRAW_POLLING_SQL)
        .bind(worker_id)
        .execute(pool)
        .await
        .context(format!(
            "withdraw the polling lease of dispatcher {worker_id}"
        ))?;
    Ok(())
}

/// The statement of [`notify_lock_waiters`]. PostgreSQL serialises the commits of notifying
/// transactions with one lock, an exclusive lock on the shared object `pg_database` 0, taken
/// when a transaction queues its notifications and held until its commit is flushed: those
/// waiting for it are the producers (of any database of the server) whose commits wait for
/// each other's.
const NOTIFY_LOCK_WAITERS_SQL: &str = r#"
    SELECT count(*) FROM pg_locks
    WHERE locktype = 'object' AND database = 0 AND classid = 'pg_database'::regclass
      AND objid = 0 AND objsubid = 0 AND NOT granted
    "#;

/// How many sessions wait right now to commit a notifying transaction
/// ([`NOTIFY_LOCK_WAITERS_SQL`]): more than none means notifications slow producers down.
pub async fn notify_lock_waiters(pool: &PgPool) -> Result<i64, StoreError> {
    sqlx::query_scalar(NOTIFY_LOCK_WAITERS_SQL)
        .fetch_one(pool)
        .await
        .context("count the sessions waiting to commit a notifying transaction")
}
