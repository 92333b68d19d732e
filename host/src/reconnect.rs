//! Reconnect: the one backoff every loop uses while PostgreSQL or Redis are away.
//!
//! Owns the delay schedules: 0.5 s doubling up to 30 s for failures nobody recognises (a wrong
//! password, a missing table: retrying fast would only flood the log), and 0.1 s doubling up to
//! 1 s while a service is away for a recognised infrastructure blip ([`crate::fault`]), so work
//! resumes within about a second of the service answering again. It also owns counting
//! consecutive failures, waiting that can be cut short by shutdown, connecting with retry, and
//! retrying one operation through blips until a deadline ([`retry_blips`]), and how every Redis
//! connection times out and reconnects ([`redis_manager_config`], [`redis_reader_config`]).
//! It never decides
//! what failed (callers pass the classification) or how to log it (callers say that), and a
//! loop never gives up on its own: only shutdown stops it.

use std::time::{Duration, Instant};

use redis::aio::ConnectionManagerConfig;
use redis::AsyncConnectionConfig;
use tokio_util::sync::CancellationToken;

use crate::fault::Blip;

/// How often a loop that keeps probing a service through a blip logs that it still waits.
const BLIP_LOG_EVERY: Duration = Duration::from_secs(30);

/// How long a Redis command may wait for its reply before it fails as a timeout (a blip,
/// retried as one): a hung or silently gone Redis fails the step instead of stalling the host.
pub const REDIS_RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long connecting to Redis may take.
pub const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The config of every shared Redis connection ([`redis::aio::ConnectionManager`]): replies
/// time out after [`REDIS_RESPONSE_TIMEOUT`], connecting after [`REDIS_CONNECT_TIMEOUT`], and a
/// broken connection is reconnected at most 1 s apart. (The crate's defaults wait up to a
/// minute or two between reconnect attempts, and forever for a reply: after a short Redis
/// outage every command on the connection stalled that long.)
pub fn redis_manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(REDIS_CONNECT_TIMEOUT)
        .set_response_timeout(REDIS_RESPONSE_TIMEOUT)
        .set_number_of_retries(1)
        .set_max_delay(1000)
}

/// The config of a connection of its own for blocking reads that wait up to `block` for
/// entries: a reply that does not come within `block` plus [`REDIS_RESPONSE_TIMEOUT`] fails the
/// read, and the caller connects again.
pub fn redis_reader_config(block: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(REDIS_CONNECT_TIMEOUT)
        .set_response_timeout(block + REDIS_RESPONSE_TIMEOUT)
}

/// Exponential backoff for reconnects: 0.5 s doubling up to 30 s.
pub fn retry_delay(failures: u32) -> Duration {
    let ms = 500u64.saturating_mul(1 << failures.saturating_sub(1).min(6));
    Duration::from_millis(ms.min(30_000))
}

/// Delay before the next probe of a service that is away for a recognised blip: 0.1 s doubling
/// up to 1 s.
pub fn probe_delay(failures: u32) -> Duration {
    let ms = 100u64.saturating_mul(1 << failures.saturating_sub(1).min(4));
    Duration::from_millis(ms.min(1_000))
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
    last_logged: Option<Instant>,
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

    /// Count a recognised infrastructure blip and wait [`probe_delay`]: the service is probed
    /// again within a second, so work resumes about a second after it answers. `log` runs on the
    /// first blip of a run and then at most every 30 s. Returns true when shutdown fired
    /// meanwhile: the caller stops.
    pub async fn blipped(
        &mut self,
        shutdown: &CancellationToken,
        log: impl FnOnce(Duration),
    ) -> bool {
        self.failures = self.failures.saturating_add(1);
        let delay = probe_delay(self.failures);
        if self
            .last_logged
            .is_none_or(|at| at.elapsed() >= BLIP_LOG_EVERY)
        {
            self.last_logged = Some(Instant::now());
            log(delay);
        }
        sleep_or_shutdown(delay, shutdown).await
    }

    /// [`blipped`](Self::blipped) when `blip` is one, else [`failed`](Self::failed).
    pub async fn failed_with(
        &mut self,
        blip: Option<Blip>,
        shutdown: &CancellationToken,
        log: impl FnOnce(Duration),
    ) -> bool {
        match blip {
            Some(_) => self.blipped(shutdown, log).await,
            None => self.failed(shutdown, log).await,
        }
    }

    /// Count a success: the next failure waits the shortest delay again. Returns true when
    /// failures came before it (time to log "back").
    pub fn succeeded(&mut self) -> bool {
        self.last_logged = None;
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

/// Run `op` until it succeeds, fails with an error `classify` does not call a blip, or the next
/// try would start after `deadline`; between tries wait [`probe_delay`]. Each retry counts in
/// `outbox_infra_retries_total` at `stage`, and the first one is logged with `what`. Returns the
/// last result. Use it for writes that are safe to repeat (idempotent, or guarded by a lease).
pub async fn retry_blips<T, E, Fut>(
    what: &str,
    stage: &'static str,
    deadline: Instant,
    classify: impl Fn(&E) -> Option<Blip>,
    mut op: impl FnMut() -> Fut,
) -> Result<T, E>
where
    E: std::fmt::Display,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut failures = 0u32;
    loop {
        let error = match op().await {
            Ok(done) => {
                if failures > 0 {
                    tracing::info!(
                        what,
                        retries = failures,
                        "succeeded after infrastructure retries"
                    );
                }
                return Ok(done);
            }
            Err(e) => e,
        };
        let Some(blip) = classify(&error) else {
            return Err(error);
        };
        failures += 1;
        let delay = probe_delay(failures);
        if Instant::now() + delay >= deadline {
            tracing::error!(what, %blip, %error, retries = failures - 1, "infrastructure retries ran out");
            return Err(error);
        }
        if failures == 1 {
            tracing::warn!(what, %blip, %error, "infrastructure blip; retrying on a fresh connection");
        }
        blip.count_retry(stage);
        tokio::time::sleep(delay).await;
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

    #[test]
    fn probes_double_from_a_tenth_of_a_second_to_one() {
        let ms: Vec<u128> = (1..=7).map(|f| probe_delay(f).as_millis()).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1000, 1000, 1000]);
        assert_eq!(probe_delay(0), Duration::from_millis(100));
        assert_eq!(probe_delay(u32::MAX), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn blips_probe_fast_and_log_once_per_run() {
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        let mut backoff = Backoff::new();
        let mut logged = vec![];
        for _ in 0..5 {
            assert!(backoff.blipped(&shutdown, |d| logged.push(d)).await);
        }
        assert_eq!(logged, [probe_delay(1)], "one log line per run of blips");
        assert_eq!(backoff.failures(), 5);
        assert!(backoff.succeeded());
        assert!(backoff.blipped(&shutdown, |d| logged.push(d)).await);
        assert_eq!(logged.len(), 2, "a new run logs again");
    }

    #[tokio::test]
    async fn retry_blips_retries_blips_only_and_stops_at_the_deadline() {
        use crate::fault::{BlipKind, Service};
        let blip = |e: &&str| {
            (*e == "blip").then_some(Blip {
                service: Service::Redis,
                kind: BlipKind::ConnectionDropped,
            })
        };
        let far = Instant::now() + Duration::from_secs(60);
        let mut tries = 0;
        let r = retry_blips("t", "test", far, blip, || {
            tries += 1;
            let result = if tries < 3 { Err("blip") } else { Ok(tries) };
            async move { result }
        })
        .await;
        assert_eq!(r, Ok(3));

        let mut tries = 0;
        let r: Result<(), &str> = retry_blips("t", "test", far, blip, || {
            tries += 1;
            async { Err("refused") }
        })
        .await;
        assert_eq!((r, tries), (Err("refused"), 1), "not a blip: no retry");

        let mut tries = 0;
        let soon = Instant::now() + Duration::from_millis(250);
        let r: Result<(), &str> = retry_blips("t", "test", soon, blip, || {
            tries += 1;
            async { Err("blip") }
        })
        .await;
        assert_eq!(r, Err("blip"));
        assert!(
            (2..=3).contains(&tries),
            "bounded by the deadline: {tries} tries"
        );
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
