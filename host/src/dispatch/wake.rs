//! Waking the claim loop: `LISTEN outbox_event` for new rows (on the process's listening
//! session, `store::Notifications`), and, when nothing was claimable,
//! the time until the next row is due (a retry or an expired lease), at most the poll interval;
//! or, while the dispatcher claims more than [`POLL_ABOVE_PER_SECOND`] events a second, or
//! producers were seen waiting for each other's notifications, polling ([`WakeMode`]).
//!
//! Why poll: PostgreSQL serialises the commits of notifying transactions (each holds a
//! cluster-wide lock from queueing its notification until its commit is flushed), so producers
//! committing one event per transaction, each notifying, commit one at a time. A busy
//! dispatcher announces a polling lease (`store::announce_polling`), the insert trigger stops
//! notifying while one is current, and once it caught up the dispatcher looks again
//! [`POLL_EVERY`] after its last claim was sent instead of waiting for a notification. When its
//! rate falls it withdraws the lease and takes one more look shortly after
//! ([`LAST_LOOK_AFTER_POLLING`]), for a row whose producer did not notify and committed after
//! the last poll.
//!
//! The claim rate alone cannot tell a dispatcher that notifications hold producers back: where
//! a commit's flush takes long (a slow disk), serialised producers commit fewer events a second
//! than [`POLL_ABOVE_PER_SECOND`], the dispatcher claims only what they manage, and it would
//! never poll. So a notified dispatcher claiming at least [`CHECK_CONTENTION_FROM_PER_SECOND`]
//! looks once per [`RATE_WINDOW`] for sessions waiting on that lock
//! (`store::notify_lock_waiters`), and polls once they were waiting at
//! [`CONTENDED_LOOKS`] looks in a row; it then keeps polling while it claims at least half the
//! rate it claimed when it started (its producers now commit freely, so the rate rises).
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

/// How soon after sending a claim that caught up a polling dispatcher sends the next one. Counted
/// from the send, not from the reply: counted from the reply, the claim's round trip came on
/// top, and at 5,000 events/s, one per transaction, the commit-to-queue median was 2.3-2.5 ms
/// against 1.7-1.9 ms counted from the send (for 3-5 % more host CPU per event: more claims).
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

/// Claimed events a second from which a notified dispatcher looks for producers waiting for
/// each other's notifications, once per [`RATE_WINDOW`]: one statement every 100 ms, never at a
/// trickle (a flush would have to take 10 ms for producers at this rate to wait on each other).
pub(super) const CHECK_CONTENTION_FROM_PER_SECOND: usize = 100;

/// Events claimed in a [`RATE_WINDOW`] at [`CHECK_CONTENTION_FROM_PER_SECOND`].
const CHECK_CONTENTION_FROM_PER_WINDOW: usize = CHECK_CONTENTION_FROM_PER_SECOND / 10;

/// Looks in a row (one per [`RATE_WINDOW`]) that must find producers waiting on the
/// notification lock before a notified dispatcher polls. A producer waits now and then
/// whenever commits meet (at 1,000 events/s on a disk flushing in 0.7 ms, at one look in six);
/// producers held back by the lock wait at nearly every look.
pub(super) const CONTENDED_LOOKS: u32 = 4;

/// How one dispatcher learns of new rows once it caught up: notified by producers (the
/// default), or polling while its claim rate is above [`POLL_ABOVE_PER_SECOND`] (in the last
/// or the current [`RATE_WINDOW`]) or, after producers were seen waiting on the notification
/// lock at [`CONTENDED_LOOKS`] looks in a row, above half the rate it claimed then.
#[derive(Debug)]
pub(super) struct WakeMode {
    window_started: Instant,
    in_window: usize,
    last_window: usize,
    /// When the polling lease was last announced; `None` while notified.
    announced: Option<Instant>,
    /// Events per window from which a polling dispatcher keeps polling.
    keep_polling_from: usize,
    /// Looks in a row that found producers waiting on the notification lock.
    contended_looks: u32,
    /// The window of the last look (one look per window).
    looked_in: Option<Instant>,
}

impl WakeMode {
    /// Notified, no events claimed yet.
    pub(super) fn new() -> Self {
        Self {
            window_started: Instant::now(),
            in_window: 0,
            last_window: 0,
            announced: None,
            keep_polling_from: POLL_ABOVE_PER_WINDOW,
            contended_looks: 0,
            looked_in: None,
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

    /// The claim rate at `now`: events in the last or the current window, the larger.
    fn rate(&mut self, now: Instant) -> usize {
        self.roll(now);
        self.in_window.max(self.last_window)
    }

    /// Whether the claim rate (and, while notified, what the looks found) calls for polling at
    /// `now`.
    fn busy(&mut self, now: Instant) -> bool {
        let rate = self.rate(now);
        if self.announced.is_some() {
            rate >= self.keep_polling_from
        } else {
            rate >= POLL_ABOVE_PER_WINDOW
                || (self.contended_looks >= CONTENDED_LOOKS
                    && rate >= CHECK_CONTENTION_FROM_PER_WINDOW)
        }
    }

    /// Whether to look for producers waiting on the notification lock at `now`: while
    /// notified, claiming at least [`CHECK_CONTENTION_FROM_PER_SECOND`] and below
    /// [`POLL_ABOVE_PER_SECOND`], once per window.
    fn should_look(&mut self, now: Instant) -> bool {
        let rate = self.rate(now);
        self.announced.is_none()
            && (CHECK_CONTENTION_FROM_PER_WINDOW..POLL_ABOVE_PER_WINDOW).contains(&rate)
            && self.contended_looks < CONTENDED_LOOKS
            && self.looked_in != Some(self.window_started)
    }

    /// What a look found: whether producers were waiting on the notification lock.
    fn looked(&mut self, producers_waiting: bool) {
        self.looked_in = Some(self.window_started);
        self.contended_looks = if producers_waiting {
            self.contended_looks + 1
        } else {
            0
        };
    }

    /// The polling lease was announced at `now`. Polling that starts because producers waited
    /// keeps on while the rate stays above half of what it is now; started by the rate, while
    /// it stays above [`POLL_ABOVE_PER_SECOND`].
    fn started_polling(&mut self, now: Instant) {
        if self.announced.is_none() {
            let rate = self.rate(now);
            self.keep_polling_from = if rate >= POLL_ABOVE_PER_WINDOW {
                POLL_ABOVE_PER_WINDOW
            } else {
                (rate / 2).max(CHECK_CONTENTION_FROM_PER_WINDOW)
            };
        }
        self.announced = Some(now);
    }

    /// The dispatcher is notified again (it withdrew, or could not announce, the lease).
    fn notified(&mut self) {
        self.announced = None;
        self.contended_looks = 0;
        self.keep_polling_from = POLL_ABOVE_PER_WINDOW;
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
    /// busy, withdraw it when not; while notified at a middling rate, look for producers
    /// waiting for each other's notifications first. The loop then looks again at the returned
    /// instant without waiting for a notification ([`POLL_EVERY`] after `last_claim_sent` while
    /// polling; [`LAST_LOOK_AFTER_POLLING`] after the lease is withdrawn), or `None`: wait as usual
    /// (notification, due time, poll interval). A failed announcement leaves the dispatcher
    /// notified; a failed withdrawal leaves the lease to run out; a failed look finds nobody
    /// waiting.
    pub(super) async fn follow_claim_rate(
        &self,
        mode: &mut WakeMode,
        last_claim_sent: Instant,
    ) -> Option<Instant> {
        let now = Instant::now();
        if mode.should_look(now) {
            let waiting = match store::notify_lock_waiters(&self.pool).await {
                Ok(waiting) => waiting > 0,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot look for producers waiting on notifications");
                    false
                }
            };
            mode.looked(waiting);
        }
        match (mode.busy(now), mode.announced) {
            (true, Some(at)) if now.saturating_duration_since(at) < POLLING_LEASE / 2 => {
                Some(last_claim_sent + POLL_EVERY)
            }
            (true, _) => {
                match store::announce_polling(&self.pool, &self.worker_id, POLLING_LEASE).await {
                    Ok(()) => {
                        if mode.announced.is_none() {
                            tracing::debug!(worker = %self.worker_id, producers_waited = mode.contended_looks >= CONTENDED_LOOKS, "claiming fast: polling, producers stop notifying");
                        }
                        mode.started_polling(now);
                        Some(last_claim_sent + POLL_EVERY)
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "cannot announce polling; waiting for notifications");
                        mode.notified();
                        None
                    }
                }
            }
            (false, Some(_)) => {
                mode.notified();
                self.withdraw_polling().await;
                tracing::debug!(worker = %self.worker_id, "claiming slowly: producers notify again");
                Some(Instant::now() + LAST_LOOK_AFTER_POLLING)
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
        let horizon = self.horizon.current_refreshed_behind(&self.pool).await;
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

    /// A fresh mode whose first window starts now, and the instant `ms` after that.
    fn mode_and_clock() -> (WakeMode, impl Fn(u64) -> Instant) {
        let start = Instant::now();
        let mut mode = WakeMode::new();
        mode.window_started = start;
        (mode, move |ms| start + Duration::from_millis(ms))
    }

    #[test]
    fn the_claim_rate_calls_for_polling_only_while_it_stays_above_the_threshold() {
        let (mut mode, at) = mode_and_clock();
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

    #[test]
    fn producers_waiting_on_notifications_make_a_dispatcher_poll_until_its_rate_halves() {
        let (mut mode, at) = mode_and_clock();
        // 500 events/s, throttled by the notification lock: under the rate threshold.
        let per_window = 50;
        let mut now = 0;
        for look in 1..=CONTENDED_LOOKS {
            mode.count(per_window, at(now));
            now += 100;
            assert!(mode.should_look(at(now)), "look {look} is due");
            assert!(!mode.busy(at(now)), "not before {CONTENDED_LOOKS} looks");
            mode.looked(true);
            assert!(!mode.should_look(at(now + 50)), "one look per window");
        }
        assert!(mode.busy(at(now)), "producers waited at every look");
        mode.started_polling(at(now));
        assert!(!mode.should_look(at(now + 100)), "no looks while polling");

        // Polling, the producers commit freely: the rate rises, then falls.
        mode.count(3 * per_window, at(now + 10));
        assert!(mode.busy(at(now + 110)));
        mode.count(per_window / 2, at(now + 120));
        assert!(
            mode.busy(at(now + 220)),
            "half the starting rate still polls"
        );
        mode.count(per_window / 2 - 1, at(now + 230));
        assert!(
            !mode.busy(at(now + 330)),
            "below half the starting rate it stops"
        );
        mode.notified();
        assert!(!mode.busy(at(now + 340)), "looks count again from nothing");
    }

    #[test]
    fn a_look_finding_nobody_waiting_starts_the_count_again_and_a_trickle_is_never_looked_at() {
        let (mut mode, at) = mode_and_clock();
        let mut now = 0;
        for waiting in [true, true, true, false, true, true, true] {
            mode.count(50, at(now));
            now += 100;
            assert!(mode.should_look(at(now)));
            mode.looked(waiting);
            assert!(!mode.busy(at(now)), "never {CONTENDED_LOOKS} in a row");
        }
        mode.count(CHECK_CONTENTION_FROM_PER_WINDOW - 1, at(now));
        assert!(
            !mode.should_look(at(now + 100)),
            "below the contention floor nothing is looked at"
        );
        mode.count(POLL_ABOVE_PER_WINDOW, at(now + 110));
        assert!(
            !mode.should_look(at(now + 120)),
            "above the rate threshold the rate decides"
        );
        assert!(mode.busy(at(now + 120)));
        mode.started_polling(at(now + 120));
        mode.count(POLL_ABOVE_PER_WINDOW - 1, at(now + 220));
        assert!(
            !mode.busy(at(now + 420)),
            "polling started by the rate stops below the rate threshold"
        );
    }
}
