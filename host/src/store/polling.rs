//! Polling dispatchers: the `outbox_dispatcher_polling` rows that tell producers' insert trigger
//! a dispatcher looks at the table every few milliseconds anyway, so their `NOTIFY` (which
//! serialises their commits) is not needed.
//!
//! Owns announcing, renewing and withdrawing one dispatcher's polling lease. It never decides
//! when a dispatcher polls (that is `dispatch::wake`), and a row is only ever a lease: one that
//! is not renewed stops counting at `until`, so a dead host never keeps producers silent.

use std::time::Duration;

use sqlx::PgPool;

use super::{Context, StoreError};

/// Announce (or renew) that `worker_id` polls for new rows for the next `lease`: until then
/// the insert trigger does not notify.
pub async fn announce_polling(
    pool: &PgPool,
    worker_id: &str,
    lease: Duration,
) -> Result<(), StoreError> {
    sqlx::query(
        r#"
        INSERT INTO outbox_dispatcher_polling (worker_id, until)
        VALUES ($1, clock_timestamp() + make_interval(secs => $2))
        ON CONFLICT (worker_id) DO UPDATE SET until = EXCLUDED.until
        "#,
    )
    .bind(worker_id)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await
    .context(format!("announce that dispatcher {worker_id} polls"))?;
    Ok(())
}

/// Withdraw `worker_id`'s polling lease: producers notify again (unless another dispatcher
/// polls).
pub async fn withdraw_polling(pool: &PgPool, worker_id: &str) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM outbox_dispatcher_polling WHERE worker_id = $1")
        .bind(worker_id)
        .execute(pool)
        .await
        .context(format!(
            "withdraw the polling lease of dispatcher {worker_id}"
        ))?;
    Ok(())
}
