//! In flight: the handler tasks of one receiver loop and the stream ids they handle.
//!
//! Owns [`Handling`] (a loop's concurrency permits, its tasks, its ordering lanes) and
//! [`InFlight`]: which stream ids a task of the loop handles now, and, while a recovery of own
//! pending entries runs, which finished since it began, so a recovery never hands on an entry
//! a task here runs or just finished. It reads only this consumer's own pending
//! entries ([`own_pending_not_in_flight`]) and never runs a handler itself.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::controls::Concurrency;
use super::ordering::KeyLanes;
use super::{QueueEntry, CONSUMER_GROUP};
use crate::queue::ReadEntries;
use crate::redis_conn::RedisConn;
use redis::streams::StreamReadOptions;
use redis::AsyncCommands;

/// The stream ids one receiver loop has handed to a handler task that has not finished, and,
/// while a recovery of own pending entries runs, those that finished since it began (their
/// entry may still be in the recovery's read, read before its acknowledgement).
#[derive(Debug, Default)]
pub(super) struct InFlight {
    ids: Mutex<InFlightIds>,
}

#[derive(Debug, Default)]
struct InFlightIds {
    running: HashSet<String>,
    finished_during_recovery: Option<HashSet<String>>,
}

impl InFlight {
    /// Mark `stream_id` as handled here; false when a task here already handles it.
    pub(super) fn start(&self, stream_id: &str) -> bool {
        self.ids
            .lock()
            .map(|mut ids| ids.running.insert(stream_id.to_string()))
            .unwrap_or(true)
    }

    /// The task handling `stream_id` has finished.
    pub(super) fn finish(&self, stream_id: &str) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.running.remove(stream_id);
            if let Some(finished) = ids.finished_during_recovery.as_mut() {
                finished.insert(stream_id.to_string());
            }
        }
    }

    /// Start (true) or end (false) a recovery: from its start, finished ids are remembered.
    pub(super) fn recovering(&self, on: bool) {
        if let Ok(mut ids) = self.ids.lock() {
            ids.finished_during_recovery = on.then(HashSet::new);
        }
    }

    /// Whether a recovery should leave `stream_id` alone: a task here handles it, or finished
    /// it since the recovery began.
    pub(super) fn taken(&self, stream_id: &str) -> bool {
        self.ids.lock().map_or(true, |ids| {
            ids.running.contains(stream_id)
                || ids
                    .finished_during_recovery
                    .as_ref()
                    .is_some_and(|f| f.contains(stream_id))
        })
    }
}

/// Removes a stream id from [`InFlight`] when its handler task ends (or is aborted).
pub(super) struct InFlightGuard {
    in_flight: Arc<InFlight>,
    stream_id: String,
}

impl InFlightGuard {
    /// Mark `stream_id` as handled in `in_flight` until the guard drops; `None` when a task
    /// there already handles it.
    pub(super) fn start(in_flight: &Arc<InFlight>, stream_id: &str) -> Option<Self> {
        in_flight.start(stream_id).then(|| Self {
            in_flight: in_flight.clone(),
            stream_id: stream_id.to_string(),
        })
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.in_flight.finish(&self.stream_id);
    }
}

/// The handler tasks of one receiver loop: the concurrency permits, the tasks, and the stream
/// ids they handle.
pub(super) struct Handling {
    /// The handler permits, sized to the queue's concurrency.
    pub(super) concurrency: Concurrency,
    /// The running handler tasks.
    pub(super) tasks: tokio::task::JoinSet<()>,
    /// The stream ids those tasks handle.
    pub(super) in_flight: Arc<InFlight>,
    /// On an ordered queue: the entries of each ordering key, one running at a time.
    pub(super) lanes: Arc<KeyLanes<(QueueEntry, InFlightGuard)>>,
}

impl Handling {
    /// At most `concurrency` handler tasks at once.
    pub(super) fn new(concurrency: usize) -> Self {
        Self {
            concurrency: Concurrency::new(concurrency),
            tasks: tokio::task::JoinSet::new(),
            in_flight: Arc::default(),
            lanes: Arc::default(),
        }
    }
}

/// Own pending entries read per `XREADGROUP` while recovering them after a failed read.
const RECOVER_PAGE: usize = 100;

/// `consumer`'s pending entries on the stream `key` that no task of `in_flight` handles (nor
/// finished while this ran): read page by page on `connection` (`XREADGROUP` from an id, which
/// returns only this consumer's pending entries and never takes another consumer's), each page
/// after the last id of the one before, so it ends even while every entry it sees is running.
/// What was found comes back with the read's result, even when a later page failed.
pub(super) async fn own_pending_not_in_flight(
    connection: &mut RedisConn,
    key: &str,
    consumer: &str,
    in_flight: &InFlight,
) -> (Vec<QueueEntry>, redis::RedisResult<()>) {
    let opts = StreamReadOptions::default()
        .group(CONSUMER_GROUP, consumer)
        .count(RECOVER_PAGE);
    in_flight.recovering(true);
    let mut after = "0".to_string();
    let mut recovered = Vec::new();
    let read = loop {
        let page: ReadEntries = match connection.xread_options(&[key], &[&after], &opts).await {
            Ok(page) => page,
            Err(e) => break Err(e),
        };
        let Some(last) = page.0.last() else {
            break Ok(());
        };
        after = last.stream_id.clone();
        recovered.extend(
            page.0
                .into_iter()
                .filter(|entry| !in_flight.taken(&entry.stream_id)),
        );
    };
    in_flight.recovering(false);
    (recovered, read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recovery_leaves_running_entries_and_those_finished_while_it_ran() {
        let in_flight = InFlight::default();
        assert!(in_flight.start("1-0"));
        assert!(!in_flight.start("1-0"), "one task per entry");
        assert!(in_flight.start("2-0"));
        in_flight.finish("2-0");
        assert!(in_flight.taken("1-0"));
        assert!(!in_flight.taken("2-0"), "finished before any recovery");

        in_flight.recovering(true);
        in_flight.finish("1-0");
        assert!(
            in_flight.taken("1-0"),
            "finished during the recovery: its entry may be in the recovery's read, acknowledged since"
        );
        assert!(!in_flight.taken("3-0"), "pending here, handled by no task");
        in_flight.recovering(false);
        assert!(!in_flight.taken("1-0"));
    }
}
