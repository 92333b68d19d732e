//! The epoch ticker: advances the engine's epoch every [`EPOCH_TICK`] while a store of the
//! engine lives, and rests while none does.
//!
//! Owns the ticker thread and the count of live stores (a [`Ticking`] guard in each store's
//! state). A guest that computes yields to the executor at every tick and is trapped at the
//! first tick past its deadline, so a store must never live while the ticker rests: its guard is
//! made with the store, and the first live store wakes the ticker. An idle host's ticker used to
//! wake a thousand times a second; it now rests after [`IDLE_TICKS_BEFORE_REST`] ticks without a
//! store, and under a steady trickle of calls it ticks as before. It never touches a store.

#[cfg(test)]
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::Duration;

use wasmtime::Engine;

/// How often the epoch advances while a store lives (a computing guest's time limit is checked
/// to this resolution).
const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Ticks in a row without a live store after which the ticker rests until a store is made.
const IDLE_TICKS_BEFORE_REST: u32 = 50;

/// While resting, how often the ticker looks whether its engine is gone (it then ends). Only
/// that: a store wakes a resting ticker itself, at once.
const REST_CHECK: Duration = Duration::from_secs(10);

/// The ticker thread of one engine and its count of live stores.
#[derive(Clone)]
pub(super) struct EpochTicker {
    live_stores: Arc<AtomicUsize>,
    /// Ticks so far (counted for the tests).
    #[cfg(test)]
    ticks: Arc<AtomicU64>,
    thread: Thread,
}

impl EpochTicker {
    /// Start the ticker of `engine`; it ends once the engine is gone.
    pub(super) fn start(engine: &Engine) -> std::io::Result<Self> {
        let weak = engine.weak();
        let live_stores = Arc::new(AtomicUsize::new(0));
        let stores = live_stores.clone();
        #[cfg(test)]
        let ticks = Arc::new(AtomicU64::new(0));
        #[cfg(test)]
        let ticked = ticks.clone();
        let handle = std::thread::Builder::new()
            .name("outbox-epoch".into())
            .spawn(move || {
                let mut idle_ticks = 0u32;
                loop {
                    if stores.load(Ordering::Acquire) == 0 && idle_ticks >= IDLE_TICKS_BEFORE_REST {
                        // A store made after the check above unparks this thread first, so
                        // this returns at once: the ticker never rests under a live store.
                        std::thread::park_timeout(REST_CHECK);
                        idle_ticks = 0;
                        if weak.upgrade().is_none() {
                            return;
                        }
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => return,
                    }
                    #[cfg(test)]
                    ticked.fetch_add(1, Ordering::Relaxed);
                    if stores.load(Ordering::Acquire) == 0 {
                        idle_ticks = idle_ticks.saturating_add(1);
                    } else {
                        idle_ticks = 0;
                    }
                }
            })?;
        Ok(Self {
            live_stores,
            #[cfg(test)]
            ticks,
            thread: handle.thread().clone(),
        })
    }

    /// Count a store as live until the returned guard is dropped (with the store), waking the
    /// ticker when it rests.
    pub(super) fn ticking(&self) -> Ticking {
        if self.live_stores.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking {
            live_stores: self.live_stores.clone(),
        }
    }

    /// Stores of the engine alive now.
    #[cfg(test)]
    fn live_stores(&self) -> usize {
        self.live_stores.load(Ordering::Acquire)
    }

    /// Ticks so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Whether the thread has ended (it held the other reference to the tick count).
    #[cfg(test)]
    fn thread_ended(&self) -> bool {
        Arc::strong_count(&self.ticks) == 1
    }
}

/// One live store, for the ticker: kept in the store's state, dropped with it.
pub(crate) struct Ticking {
    live_stores: Arc<AtomicUsize>,
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.live_stores.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Wait (up to 5 s) until the ticker's tick count stays put for 100 ms; its count then.
    fn rested(ticker: &EpochTicker) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let before = ticker.ticks();
            std::thread::sleep(Duration::from_millis(100));
            let after = ticker.ticks();
            if after == before {
                return after;
            }
            assert!(Instant::now() < deadline, "the ticker never rested");
        }
    }

    #[test]
    fn the_ticker_rests_without_a_store_and_ticks_while_one_lives() {
        let mut config = wasmtime::Config::new();
        config.epoch_interruption(true);
        let engine = Engine::new(&config).unwrap();
        let ticker = EpochTicker::start(&engine).unwrap();

        // No store: after its idle ticks the ticker rests.
        let first_rest = rested(&ticker);
        assert!(
            first_rest >= u64::from(IDLE_TICKS_BEFORE_REST),
            "{first_rest}"
        );

        // A live store wakes it, and it ticks for as long as the store lives.
        let ticking = ticker.ticking();
        assert_eq!(ticker.live_stores(), 1);
        // At once, not at the next look for a gone engine (REST_CHECK).
        let deadline = Instant::now() + Duration::from_secs(2);
        while ticker.ticks() < first_rest + 2 * u64::from(IDLE_TICKS_BEFORE_REST) {
            assert!(
                Instant::now() < deadline,
                "a live store did not wake the ticker"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(ticking);
        assert_eq!(ticker.live_stores(), 0);
        rested(&ticker);

        // Once the engine is gone, the ticker ends (at its next look, made now).
        drop(engine);
        ticker.thread.unpark();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !ticker.thread_ended() {
            assert!(Instant::now() < deadline, "the ticker outlived its engine");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
