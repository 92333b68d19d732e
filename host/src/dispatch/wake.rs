//! Waking the claim loop: `LISTEN outbox_event` for new rows (on the process's listening
//! session, `store::Notifications`), and, when nothing was claimable,
//! the time until the next row is due (a retry or an expired lease), at most the poll interval;
//! or, while the dispatcher claims more than [`POLL_ABOVE_PER_SECOND`] events a second, polling
//! ([`WakeMode`]).
//!
//! Why poll: PostgreSQL serialises the commits of notifying transactions (each holds a
//! cluster-wide lock from queueing its notification until its commit is flushed), so producers
//! committing one event per transaction, each notifying, commit one at a time. A busy
//! dispatcher announces a polling lease (`store::announce_polling`), the insert trigger stops
//! notifying while one is current, and the dispatcher looks again [`POLL_EVERY`] after it caught
//! up instead of waiting for a notification. When its rate falls it withdraws the lease and
//! takes one more look shortly after ([`LAST_LOOK_AFTER_POLLING`]), for a row whose producer did
//! not notify and committed after the last poll.
//!
//! It only ever wakes the loop or says how long to sleep: it never claims, and a lost `LISTEN`
//! connection never stops dispatching (the poll interval covers it while it reconnects).

use std::time::{Duration, Instant};

use super::Dispatcher;
use crate::store;

/// Claimed events a second above which a caught-up dispatcher polls instead of waiting for
/// producers' notifications. Below it, the notifications cost producers little (their commits
/// rarely meet), and a notification wakes the dispatcher sooner than the next poll would: at
/// 1,000 events/s, one per transaction, polling every millisecond doubled the commit-to-queue
/// median (0.86 to 1.73 ms, the timer's granularity included).
pub(super) const POLL_ABOVE_PER_SECOND: usize = 2000;

/// How soon a polling dispatcher looks again after a claim that caught up.
pub(super) const POLL_EVERY: Duration = Duration::from_millis(1);

/// The polling lease announced to producers, renewed when half of it has passed. A host that
/// dies while polling silences producers' notifications for at most this long.
const POLLING_LEASE: Duration = Duration::from_secs(2);

/// The one look a dispatcher takes this long after it stopped polling: a producer that did not
/// notify (the lease was current when it inserted) may have committed after the last poll.
pub(super) const LAST_LOOK_AFTER_POLLING: Duration = Duration::from_millis(20);

/// The span over which the claim rate is counted.
const RATE_WINDOW: Duration = Duration::from_millis(100);

/// Events claimed in a [`RATE_WINDOW`] at [`POLL_ABOVE_PER_SECOND`].
const POLL_ABOVE_PER_WINDOW: usize = POLL_ABOVE_PER_SECOND / 10;

/// How one dispatcher learns of new rows once it caught up: notified by producers (the
/// default), or polling while its claim rate is above [`POLL_ABOVE_PER_SECOND`] (in the last
/// or the current [`RATE_WINDOW`]).
#[derive(Debug)]
pub(super) struct WakeMode {
    window_started: Instant,
    in_window: usize,
    last_window: usize,
    /// When the polling lease was last announced; `None` while notified.
    announced: Option<Instant>,
}

impl WakeMode {
    /// Notified, no events claimed yet.
    pub(super) fn new() -> Self {
        Self {
            window_started: Instant::now(),
            in_window: 0,
            last_window: 0,
            announced: None,
        }
    }

    /// Whether the polling lease is announced.
    pub(super) fn polling(&self) -> bool {
        self.announced.is_some()
    }

    /// Count `events` claimed now.
    pub(super) fn claimed(&mut self, events: usize) {
        self.count(events, Instant::now());
    }

    /// Count `events` claimed at `now`.
    fn count(&mut self, events: usize, now: Instant) {
        self.roll(now);
        self.in_window += events;
    }

    /// Whether the claim rate calls for polling at `now`.
    fn busy(&mut self, now: Instant) -> bool {
        self.roll(now);
        self.in_window.max(self.last_window) >= POLL_ABOVE_PER_WINDOW
    }

    /// Start a new window once the current one is over (an empty one between counts as 0).
    fn roll(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.window_started);
        if elapsed >= RATE_WINDOW {
            self.last_window = if elapsed < 2 * RATE_WINDOW {
                self.in_window
            } else {
                0
            };
            self.in_window = 0;
            self.window_started = now;
        }
    }
}

impl Dispatcher {
    /// Follow the claim rate before the loop waits: announce (or renew) the polling lease while
    /// busy, withdraw it when not. The loop then looks again after the returned time without
    /// waiting for a notification, or `None`: wait as usual (notification, due time, poll
    /// interval). A failed announcement leaves the dispatcher notified; a failed withdrawal
    /// leaves the lease to run out.
    pub(super) async fn follow_claim_rate(&self, mode: &mut WakeMode) -> Option<Duration> {
        let now = Instant::now();
        match (mode.busy(now), mode.announced) {
            (true, Some(at)) if now.saturating_duration_since(at) < POLLING_LEASE / 2 => {
                Some(POLL_EVERY)
            }
            (true, _) => {
                match store::announce_polling(&self.pool, &self.worker_id, POLLING_LEASE).await {
                    Ok(()) => {
                        if mode.announced.is_none() {
                            tracing::debug!(worker = %self.worker_id, "claiming fast: polling, producers stop notifying");
                        }
                        mode.announced = Some(now);
                        Some(POLL_EVERY)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot announce polling; waiting for notifications");
                        mode.announced = None;
                        None
                    }
                }
            }
            (false, Some(_)) => {
                mode.announced = None;
                self.withdraw_polling().await;
                tracing::debug!(worker = %self.worker_id, "claiming slowly: producers notify again");
                Some(LAST_LOOK_AFTER_POLLING)
            }
            (false, None) => None,
        }
    }

    /// Withdraw this dispatcher's polling lease (when it stops polling, and at shutdown).
    pub(super) async fn withdraw_polling(&self) {
        if let Err(e) = store::withdraw_polling(&self.pool, &self.worker_id).await {
            tracing::debug!(error = %e, "cannot withdraw the polling lease; it runs out by itself");
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claim_rate_calls_for_polling_only_while_it_stays_above_the_threshold() {
        let start = Instant::now();
        let mut mode = WakeMode::new();
        mode.window_started = start;
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert!(!mode.busy(at(0)), "nothing claimed yet");

        mode.count(POLL_ABOVE_PER_WINDOW - 1, at(10));
        assert!(!mode.busy(at(20)), "just under the rate");
        mode.count(1, at(30));
        assert!(mode.busy(at(40)), "at the rate within the window");
        assert!(
            mode.busy(at(150)),
            "the last full window still counts in the next one"
        );
        mode.count(10, at(160));
        assert!(
            !mode.busy(at(260)),
            "two windows on, only the slow one before counts"
        );

        mode.count(POLL_ABOVE_PER_WINDOW, at(270));
        assert!(mode.busy(at(280)));
        assert!(
            !mode.busy(at(600)),
            "a window with nothing claimed after a gap of more than one window"
        );
    }
}
