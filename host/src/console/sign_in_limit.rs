//! Sign-in limit: how many console sign-in attempts the host takes, per client address and from
//! all addresses together.
//!
//! Owns one token bucket per client address (`OUTBOX_CONSOLE_SIGN_IN_PER_MINUTE` attempts a
//! minute, refilled evenly) and one for all of them (`OUTBOX_CONSOLE_SIGN_IN_GLOBAL_PER_MINUTE`),
//! in memory, at most [`ADDRESSES_MAX`] addresses (full buckets go first, then the least recently
//! used). An attempt takes a token from both before the sign-in reads anything, so a guessing
//! script is answered 429 without a database query. It never sleeps and never blocks: a refusal
//! says how long until the next attempt is allowed. Behind a proxy every client has the proxy's
//! address, so the per-address limit is shared by everyone behind it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Client addresses tracked at most.
pub const ADDRESSES_MAX: usize = 10_000;

/// A bucket: `tokens` left at `at`, refilled at the limit's rate up to its size.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(size: f64, now: Instant) -> Self {
        Bucket {
            tokens: size,
            at: now,
        }
    }

    /// Refill up to `now`.
    fn refill(&mut self, size: f64, now: Instant) {
        let per_second = size / 60.0;
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * per_second).min(size);
        self.at = now;
    }

    /// How long until one token is there (zero when one is).
    fn wait(&self, size: f64) -> Duration {
        if self.tokens >= 1.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((1.0 - self.tokens) * 60.0 / size)
    }
}

/// The sign-in attempts of one console.
#[derive(Debug)]
pub struct SignInLimit {
    per_address: f64,
    global: f64,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    global: Bucket,
    by_address: HashMap<Option<IpAddr>, Bucket>,
}

impl SignInLimit {
    /// `per_address` and `global` attempts a minute (each at least 1).
    pub fn new(per_address: u32, global: u32) -> Self {
        let (per_address, global) = (f64::from(per_address.max(1)), f64::from(global.max(1)));
        Self {
            per_address,
            global,
            state: Mutex::new(State {
                global: Bucket::full(global, Instant::now()),
                by_address: HashMap::new(),
            }),
        }
    }

    /// Take one attempt for `client` (`None`: the address is unknown; those share one bucket):
    /// `Ok` when allowed, else how long until the next attempt is.
    pub fn attempt(&self, client: Option<IpAddr>) -> Result<(), Duration> {
        self.attempt_at(client, Instant::now())
    }

    fn attempt_at(&self, client: Option<IpAddr>, now: Instant) -> Result<(), Duration> {
        let Ok(mut state) = self.state.lock() else {
            return Err(Duration::from_secs(1));
        };
        let State { global, by_address } = &mut *state;
        if !by_address.contains_key(&client) && by_address.len() >= ADDRESSES_MAX {
            // A full bucket is the same as none.
            let size = self.per_address;
            by_address.retain(|_, b| {
                let mut b = *b;
                b.refill(size, now);
                b.tokens < size
            });
            if by_address.len() >= ADDRESSES_MAX {
                if let Some(oldest) = by_address.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| *k) {
                    by_address.remove(&oldest);
                }
            }
        }
        let bucket = by_address
            .entry(client)
            .or_insert_with(|| Bucket::full(self.per_address, now));
        bucket.refill(self.per_address, now);
        global.refill(self.global, now);
        let wait = bucket.wait(self.per_address).max(global.wait(self.global));
        if !wait.is_zero() {
            return Err(wait);
        }
        bucket.tokens -= 1.0;
        global.tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> Option<IpAddr> {
        Some(IpAddr::from([10, 0, 0, last]))
    }

    #[test]
    fn each_address_gets_its_attempts_a_minute_then_waits() {
        let limit = SignInLimit::new(3, 100);
        let start = Instant::now();
        for _ in 0..3 {
            assert!(limit.attempt_at(ip(1), start).is_ok());
        }
        let wait = limit.attempt_at(ip(1), start).unwrap_err();
        assert!(
            wait > Duration::from_secs(19) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        // Another address is not held up by the first.
        assert!(limit.attempt_at(ip(2), start).is_ok());
        // A token comes back after a third of a minute.
        assert!(limit
            .attempt_at(ip(1), start + Duration::from_secs(21))
            .is_ok());
        assert!(limit
            .attempt_at(ip(1), start + Duration::from_secs(21))
            .is_err());
    }

    #[test]
    fn all_addresses_together_get_the_global_attempts() {
        let limit = SignInLimit::new(5, 4);
        let start = Instant::now();
        for last in 1..=4 {
            assert!(limit.attempt_at(ip(last), start).is_ok());
        }
        let wait = limit.attempt_at(ip(9), start).unwrap_err();
        assert!(wait > Duration::from_secs(14), "{wait:?}");
        // A refused attempt takes no token: the wait does not grow.
        assert!(limit.attempt_at(ip(9), start).unwrap_err() <= wait);
    }

    #[test]
    fn tracked_addresses_are_bounded() {
        let limit = SignInLimit::new(1, 100_000);
        let start = Instant::now();
        for n in 0..(u32::try_from(ADDRESSES_MAX).unwrap() + 50) {
            let _ = limit.attempt_at(Some(IpAddr::from(n.to_be_bytes())), start);
        }
        assert!(limit.state.lock().unwrap().by_address.len() <= ADDRESSES_MAX);
    }
}
