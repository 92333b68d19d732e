//! Waking the claim loop: `LISTEN outbox_event` for new rows, and, when nothing was claimable,
//! the time until the next row is due (a retry or an expired lease), at most the poll interval.
//!
//! It only ever wakes the loop or says how long to sleep: it never claims, and a lost `LISTEN`
//! connection never stops dispatching (the poll interval covers it while it reconnects).

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Dispatcher, NOTIFY_CHANNEL};
use crate::fault;
use crate::reconnect::{retry_delay, sleep_or_shutdown, Backoff};
use crate::store;

impl Dispatcher {
    /// How long to sleep when nothing was claimable: until the next row is due (retry time or
    /// lease end), at most the poll interval.
    pub(super) async fn idle_wait(&self) -> Duration {
        let interval = self.settings.dispatch_interval;
        let horizon = self.horizon.current(&self.pool).await;
        match store::time_until_next_due(&self.pool, horizon).await {
            // Due now but not claimable: another host holds it mid-claim. Look again shortly.
            Ok(Some(d)) if d.is_zero() => Duration::from_millis(10).min(interval),
            Ok(Some(d)) => (d + Duration::from_millis(5)).min(interval),
            Ok(None) => interval,
            Err(_) => interval,
        }
    }
}

/// `LISTEN outbox_event` and wake the dispatcher on every notification. Re-listens after a lost
/// connection and wakes once then, since inserts may have happened while it was away.
pub(super) async fn listen_for_events(
    pool: PgPool,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut backoff = Backoff::new();
    loop {
        let mut listener = match PgListener::connect_with(&pool).await {
            Ok(l) => l,
            Err(e) => {
                let stop = backoff
                    .failed_with(fault::postgres_blip(&e), &shutdown, |delay| {
                        tracing::warn!(error = %e, retry_in = ?delay, "cannot LISTEN for new events; polling meanwhile")
                    })
                    .await;
                if stop {
                    return;
                }
                continue;
            }
        };
        if let Err(e) = listener.listen(NOTIFY_CHANNEL).await {
            let stop = backoff
                .failed_with(fault::postgres_blip(&e), &shutdown, |_| {
                    tracing::warn!(error = %e, "LISTEN {NOTIFY_CHANNEL} failed; polling meanwhile")
                })
                .await;
            if stop {
                return;
            }
            continue;
        }
        if backoff.succeeded() {
            tracing::info!("listening for new events again");
        }
        wake.notify_one();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                received = listener.recv() => match received {
                    Ok(_) => wake.notify_one(),
                    Err(e) => {
                        tracing::warn!(error = %e, "lost the LISTEN connection; reconnecting");
                        wake.notify_one();
                        break;
                    }
                }
            }
        }
        if sleep_or_shutdown(retry_delay(1), &shutdown).await {
            return;
        }
    }
}
