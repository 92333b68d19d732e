//! Reconnect: the one backoff every loop uses while PostgreSQL or Redis are away.
//!
//! Owns the delay schedule (0.5 s doubling up to 30 s), counting consecutive failures, waiting
//! that can be cut short by shutdown, and connecting with retry. It never decides what failed
//! or how to log it (callers say that), and it never gives up on its own: only shutdown stops it.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Exponential backoff for reconnects: 0.5 s doubling up to 30 s.
pub fn retry_delay(failures: u32) -> Duration {
    let ms = 500u64.saturating_mul(1 << failures.saturating_sub(1).min(6));
    Duration::from_millis(ms.min(30_000))
}

/// Sleep, or return early (true) when shutdown fires.
pub async fn sleep_or_shutdown(delay: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(delay) => false,
        _ = shutdown.cancelled() => true,
    }
}

/// Consecutive failures of one loop and the wait each calls for ([`retry_delay`]).
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// No failures yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Count a failure, `log` it with the delay before the next try, and wait that delay.
    /// Returns true when shutdown fired meanwhile: the caller stops.
    pub async fn failed(
        &mut self,
        shutdown: &CancellationToken,
        log: impl FnOnce(Duration),
    ) -> bool {
        self.failures = self.failures.saturating_add(1);
        let delay = retry_delay(self.failures);
        log(delay);
        sleep_or_shutdown(delay, shutdown).await
    }

    /// Count a success: the next failure waits the shortest delay again. Returns true when
    /// failures came before it (time to log "back").
    pub fn succeeded(&mut self) -> bool {
        std::mem::take(&mut self.failures) > 0
    }
}

/// Run `connect` until it succeeds, logging each failure as "`what` unavailable" and backing off
/// ([`Backoff`]); `None` when shutdown fires first.
pub async fn connect_with_retry<T, E, Fut>(
    what: &str,
    shutdown: &CancellationToken,
    mut connect: impl FnMut() -> Fut,
) -> Option<T>
where
    E: std::fmt::Display,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut backoff = Backoff::new();
    loop {
        match connect().await {
            Ok(connected) => return Some(connected),
            Err(e) => {
                let stop = backoff
                    .failed(shutdown, |delay| {
                        tracing::error!(error = %e, retry_in = ?delay, "{what} unavailable; retrying")
                    })
                    .await;
                if stop {
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_half_a_second_to_thirty() {
        let ms: Vec<u128> = (1..=9).map(|f| retry_delay(f).as_millis()).collect();
        assert_eq!(
            ms,
            [500, 1000, 2000, 4000, 8000, 16_000, 30_000, 30_000, 30_000]
        );
        assert_eq!(retry_delay(0), Duration::from_millis(500));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(30));
    }

    #[tokio::test]
    async fn backoff_counts_and_resets() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let mut backoff = Backoff::new();
        assert!(!backoff.succeeded());
        let mut seen = vec![];
        assert!(backoff.failed(&shutdown, |d| seen.push(d)).await);
        assert!(backoff.failed(&shutdown, |d| seen.push(d)).await);
        assert_eq!(seen, [retry_delay(1), retry_delay(2)]);
        assert_eq!(backoff.failures(), 2);
        assert!(backoff.succeeded());
        assert_eq!(backoff.failures(), 0);
        assert!(!backoff.succeeded());
    }

    #[tokio::test]
    async fn connect_with_retry_stops_on_shutdown() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let r: Option<()> =
            connect_with_retry("nothing", &shutdown, || async { Err::<(), _>("down") }).await;
        assert!(r.is_none());
        let ok = connect_with_retry("something", &shutdown, || async { Ok::<_, String>(5) }).await;
        assert_eq!(ok, Some(5));
    }
}
