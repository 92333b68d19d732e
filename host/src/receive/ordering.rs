//! Ordering: one entry of an ordering key in flight at a time, on queues marked ordered.
//!
//! On a queue with `[queues."NAME"] ordered = true`, a receiver loop runs the entries of one
//! ordering key (the entry's `ordering_key` field) one after the other, in the order it read
//! them (stream order), while entries of other keys and entries without a key run concurrently
//! as on any queue. Owns the lanes ([`KeyLanes`]): per key, whether an entry runs, the entries
//! read and waiting behind it, and the retry the key waits for. A handler retry sends its entry
//! to the retry set, from which it comes back later as a new stream entry, behind later entries
//! of its key: the key stays blocked in this receiver until the entry of that event comes back
//! and finishes (ok, dead letter, or found already done), so later entries never overtake it.
//! The wait is bounded (its retry delay plus twice the receiver lease, see
//! `Receivers::handle_in_lane` in `consume`): an entry that never comes back to this receiver (taken by
//! another receiver process, or its retry removed) releases the key with a warning. At start a
//! receiver blocks the keys of the entries waiting in its queue's retry set, so a restart does
//! not let later entries overtake them.
//!
//! What it does not order: entries without a key; one queue consumed by several receiver
//! processes (each orders what it reads, not what the others read); after a receiver dies, its
//! unfinished entries come back only after the receiver lease, and entries of the same keys
//! read meanwhile by another may run first. It never records an outcome itself and never
//! reorders the entries of one key: it only decides when each may start.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::QueueEntry;
use crate::queue::QueueKeys;
use crate::redis_conn::RedisConn;

/// Entries one receiver loop holds back behind running or retrying entries of their key; beyond
/// it the loop reads no more until some have run.
pub(super) const MAX_HELD_BACK: usize = 10_000;

/// Entries of the retry set read at start to block their keys.
const RETRY_SET_SCAN: isize = 10_000;

/// The per-key lanes of one receiver loop, holding the waiting entries as `T`.
#[derive(Debug)]
pub(super) struct KeyLanes<T> {
    lanes: Mutex<HashMap<String, Lane<T>>>,
    held_back: AtomicUsize,
}

impl<T> Default for KeyLanes<T> {
    fn default() -> Self {
        Self {
            lanes: Mutex::new(HashMap::new()),
            held_back: AtomicUsize::new(0),
        }
    }
}

#[derive(Debug)]
struct Lane<T> {
    /// A task runs an entry of the key.
    running: bool,
    /// The key waits for the retry of this event, until this instant at most.
    retry: Option<(i64, Instant)>,
    /// Entries read and waiting, in stream order.
    waiting: VecDeque<T>,
}

impl<T> Default for Lane<T> {
    fn default() -> Self {
        Self {
            running: false,
            retry: None,
            waiting: VecDeque::new(),
        }
    }
}

impl<T> KeyLanes<T> {
    /// An entry of `key` (of event `event_id`) was read: `Some(item)` when it may run now (its
    /// lane is then running), `None` when it waits behind its key's running entry or retry.
    /// The entry a key waits for runs at once, ahead of the entries waiting.
    pub(super) fn admit(&self, key: &str, event_id: Option<i64>, item: T) -> Option<T> {
        let Ok(mut lanes) = self.lanes.lock() else {
            return Some(item);
        };
        let lane = lanes.entry(key.to_string()).or_default();
        let awaited = lane.retry.is_some_and(|(id, _)| Some(id) == event_id);
        if !lane.running && (lane.retry.is_none() || awaited) {
            lane.retry = None;
            lane.running = true;
            return Some(item);
        }
        lane.waiting.push_back(item);
        self.held_back.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// The running entry of `key` finished. With `retry` (its event and the latest instant to
    /// wait for it) the key waits for that event's entry to come back; otherwise the next
    /// waiting entry is returned to run (the lane stays running), or the lane ends.
    pub(super) fn finish(&self, key: &str, retry: Option<(i64, Instant)>) -> Option<T> {
        let mut lanes = self.lanes.lock().ok()?;
        let lane = lanes.get_mut(key)?;
        lane.running = false;
        if retry.is_some() {
            lane.retry = retry;
            return None;
        }
        let next = self.pop(lane);
        lane.running = next.is_some();
        if next.is_none() && lane.retry.is_none() {
            lanes.remove(key);
        }
        next
    }

    /// Give up waiting for retries past their deadline (`now`): each such key's next waiting
    /// entry, to run (its lane running again), with the key and the event it waited for.
    pub(super) fn expired(&self, now: Instant) -> Vec<(String, i64, T)> {
        let Ok(mut lanes) = self.lanes.lock() else {
            return vec![];
        };
        let mut started = Vec::new();
        let mut ended = Vec::new();
        for (key, lane) in lanes.iter_mut() {
            let Some((event_id, until)) = lane.retry else {
                continue;
            };
            if lane.running || until > now {
                continue;
            }
            lane.retry = None;
            match self.pop(lane) {
                Some(item) => {
                    lane.running = true;
                    started.push((key.clone(), event_id, item));
                }
                None => ended.push(key.clone()),
            }
        }
        for key in ended {
            lanes.remove(&key);
        }
        started
    }

    /// Block `key` until the entry of `event_id` comes back (at most until `until`): an entry
    /// found in the retry set at start.
    pub(super) fn await_retry(&self, key: &str, event_id: i64, until: Instant) {
        if let Ok(mut lanes) = self.lanes.lock() {
            let lane = lanes.entry(key.to_string()).or_default();
            if !lane.running && lane.retry.is_none() {
                lane.retry = Some((event_id, until));
            }
        }
    }

    /// Entries waiting behind their key.
    pub(super) fn held_back(&self) -> usize {
        self.held_back.load(Ordering::Relaxed)
    }

    fn pop(&self, lane: &mut Lane<T>) -> Option<T> {
        let next = lane.waiting.pop_front();
        if next.is_some() {
            self.held_back.fetch_sub(1, Ordering::Relaxed);
        }
        next
    }
}

/// Block the keys of the entries waiting in `queue`'s retry set (read at a receiver's start on
/// an ordered queue), each until its retry is due plus twice the receiver `lease`. Returns how
/// many keys it blocked.
pub(super) async fn block_keys_in_retry_set<T>(
    conn: &RedisConn,
    keys: &QueueKeys,
    lease: Duration,
    queue: &str,
    lanes: &KeyLanes<T>,
) -> redis::RedisResult<usize> {
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(keys.retry_set(queue))
        .arg(0)
        .arg(RETRY_SET_SCAN - 1)
        .arg("WITHSCORES")
        .query_async(&mut conn.clone())
        .await?;
    let now_ms = crate::numeric::signed_figure(chrono::Utc::now().timestamp_millis());
    let mut blocked = 0;
    for (member, due_ms) in members {
        let Ok(flat) = serde_json::from_str::<Vec<String>>(&member) else {
            continue;
        };
        let entry = QueueEntry::from_flat("", &flat);
        let (Some(key), Some(event_id)) = (entry.ordering_key(), entry.event_id()) else {
            continue;
        };
        // A score the host did not write (or one past any retry delay) waits the longest delay.
        let wait = Duration::try_from_secs_f64((due_ms - now_ms).max(0.0) / 1000.0)
            .unwrap_or(super::invoke::MAX_RETRY_AFTER)
            .min(super::invoke::MAX_RETRY_AFTER);
        lanes.await_retry(key, event_id, Instant::now() + wait + lease * 2);
        blocked += 1;
    }
    Ok(blocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_of_a_key_runs_at_a_time_in_the_order_read() {
        let lanes = KeyLanes::default();
        assert_eq!(lanes.admit("a", Some(1), 1), Some(1));
        assert_eq!(lanes.admit("a", Some(2), 2), None);
        assert_eq!(lanes.admit("b", Some(3), 3), Some(3), "other keys flow");
        assert_eq!(lanes.admit("a", Some(4), 4), None);
        assert_eq!(lanes.held_back(), 2);
        assert_eq!(lanes.finish("a", None), Some(2));
        assert_eq!(lanes.admit("a", Some(6), 6), None, "2 runs now");
        assert_eq!(lanes.finish("a", None), Some(4));
        assert_eq!(lanes.finish("a", None), Some(6));
        assert_eq!(lanes.finish("a", None), None);
        assert_eq!(lanes.held_back(), 0);
        assert_eq!(
            lanes.admit("a", Some(5), 5),
            Some(5),
            "an idle key runs at once"
        );
    }

    #[test]
    fn a_retried_entry_holds_its_key_until_it_comes_back() {
        let lanes = KeyLanes::default();
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(lanes.admit("a", Some(1), "1"), Some("1"));
        assert_eq!(lanes.admit("a", Some(2), "2"), None);
        assert_eq!(lanes.finish("a", Some((1, later))), None, "waits for 1");
        assert_eq!(lanes.admit("a", Some(3), "3"), None);
        assert!(lanes.expired(Instant::now()).is_empty());
        assert_eq!(lanes.admit("a", Some(1), "1 again"), Some("1 again"));
        assert_eq!(lanes.finish("a", None), Some("2"));
        assert_eq!(lanes.finish("a", None), Some("3"));
        assert_eq!(lanes.finish("a", None), None);
    }

    #[test]
    fn a_retry_that_never_comes_back_releases_its_key_at_the_deadline() {
        let lanes = KeyLanes::default();
        let soon = Instant::now() + Duration::from_millis(1);
        assert_eq!(lanes.admit("a", Some(1), 1), Some(1));
        assert_eq!(lanes.admit("a", Some(2), 2), None);
        assert_eq!(lanes.finish("a", Some((1, soon))), None);
        let started = lanes.expired(soon + Duration::from_millis(1));
        assert_eq!(started, vec![("a".to_string(), 1, 2)]);
        assert_eq!(lanes.admit("a", Some(3), 3), None, "2 runs now");
        assert_eq!(lanes.finish("a", None), Some(3));
    }

    #[test]
    fn a_key_found_in_the_retry_set_waits_for_that_entry() {
        let lanes = KeyLanes::default();
        lanes.await_retry("a", 1, Instant::now() + Duration::from_secs(60));
        assert_eq!(lanes.admit("a", Some(2), 2), None);
        assert_eq!(lanes.admit("a", Some(1), 1), Some(1));
        assert_eq!(lanes.finish("a", None), Some(2));
    }
}
