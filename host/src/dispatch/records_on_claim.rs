//! Records that ride on the next claim: a small batch whose events all went to every queue
//! (all `done`, no fan-out deliveries, no ordering key) hands its record to the claim loop, whose
//! next claim statement records it ([`store::claim_recording_done`]), instead of running a
//! statement of its own. At a trickle of events a claim carries about one event, and this is one
//! statement per event instead of two.
//!
//! Owns the list of records waiting for a claim and the hand-over between a batch and the claim
//! loop. A record waits at most [`RIDE_WAIT`]: if no claim takes it by then (no new event came),
//! the batch takes it back and records it itself, as it does when the loop's statement failed or
//! the loop stopped. It never records anything but `done`, and never delays the hand-off itself
//! (the record comes after it either way).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{oneshot, Notify};

use crate::store::{Claim, EventOutcome};

/// The longest a finished batch waits for the claim loop's next claim to record it; past it the
/// batch records itself. Short beside a lease (a row stays `processing` this much longer) and
/// long enough that at 1,000 events/s the next event nearly always comes first.
const RIDE_WAIT: Duration = Duration::from_millis(5);

/// The largest batch that rides on a claim: past a few dozen events the record's own work
/// outweighs its statement's fixed cost, and recording on the batch's own connection keeps it
/// beside the next claim instead of inside it.
const RIDE_MAX_EVENTS: usize = 64;

/// One finished batch's record waiting for a claim.
struct WaitingRecord {
    /// The batch's claim (`claimed_at`), under whose lease its rows are recorded.
    claimed_at: DateTime<Utc>,
    /// Its rows, all handed off.
    ids: Vec<i64>,
    /// How many of them the claim recorded, or `None`: not recorded, the batch records them.
    reply: oneshot::Sender<Option<u64>>,
}

/// Records waiting for the claim loop's next claim (shared by a dispatcher's clones).
#[derive(Default)]
pub(super) struct WaitingRecords {
    /// Whether the claim loop takes records now (only while `run` claims: `drain` and a
    /// stopping loop do not).
    open: AtomicBool,
    waiting: Mutex<Vec<WaitingRecord>>,
    /// Signalled when a record starts waiting (a loop waiting on its batches in flight looks).
    offered: Notify,
}

/// The records a claim takes: each batch's rows under its `claimed_at`, and where to answer.
pub(super) struct RidingRecords(Vec<WaitingRecord>);

impl RidingRecords {
    /// Every row with the `claimed_at` of its batch, as the claim statement takes them.
    pub(super) fn rows(&self) -> Vec<(i64, DateTime<Utc>)> {
        self.0
            .iter()
            .flat_map(|r| r.ids.iter().map(|id| (*id, r.claimed_at)))
            .collect()
    }

    /// Tell each batch how many of its rows `recorded` holds, or (`None`) that its record is
    /// its own again (the statement failed).
    pub(super) fn answer(self, recorded: Option<&[i64]>) {
        for record in self.0 {
            let done = recorded.map(|all| {
                let mine = record.ids.iter().filter(|id| all.contains(id)).count();
                u64::try_from(mine).unwrap_or(u64::MAX)
            });
            // A batch that stopped waiting (its task was aborted at shutdown) needs no answer.
            let _ = record.reply.send(done);
        }
    }
}

impl WaitingRecords {
    fn list(&self) -> std::sync::MutexGuard<'_, Vec<WaitingRecord>> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Start (`true`) or stop taking records. Stopping hands every waiting record back to its
    /// batch at once.
    pub(super) fn set_open(&self, open: bool) {
        self.open.store(open, Ordering::Release);
        if !open {
            self.take().answer(None);
        }
    }

    /// Whether a record waits for a claim.
    pub(super) fn any(&self) -> bool {
        !self.list().is_empty()
    }

    /// Resolves once a record is offered (at once if one was offered since the last wait).
    pub(super) async fn offered(&self) {
        self.offered.notified().await
    }

    /// Everything waiting, for the claim about to run.
    pub(super) fn take(&self) -> RidingRecords {
        RidingRecords(std::mem::take(&mut *self.list()))
    }

    /// Offer a finished batch's record to the next claim, if it may ride: every outcome `done`,
    /// no fan-out deliveries to write, no ordering key (its key's next event waits on this
    /// record), at most [`RIDE_MAX_EVENTS`] events, and the loop taking records. Then wait at
    /// most [`RIDE_WAIT`] for a claim to take it, and return how many rows it recorded. `None`:
    /// the batch records itself.
    pub(super) async fn ride(
        &self,
        claim: &Claim,
        outcomes: &[(i64, EventOutcome)],
        has_deliveries: bool,
    ) -> Option<u64> {
        let rides = self.open.load(Ordering::Acquire)
            && !has_deliveries
            && claim.events.len() <= RIDE_MAX_EVENTS
            && claim.events.iter().all(|e| e.ordering_key.is_none())
            && outcomes.iter().all(|(_, o)| *o == EventOutcome::Done);
        if !rides {
            return None;
        }
        let (reply, mut answer) = oneshot::channel();
        self.list().push(WaitingRecord {
            claimed_at: claim.claimed_at,
            ids: outcomes.iter().map(|(id, _)| *id).collect(),
            reply,
        });
        self.offered.notify_one();
        // Closed in between: `set_open(false)` may have run before the push.
        if !self.open.load(Ordering::Acquire) && self.withdraw(claim.claimed_at) {
            return None;
        }
        match tokio::time::timeout(RIDE_WAIT, &mut answer).await {
            Ok(done) => done.ok().flatten(),
            // Still waiting: take it back. Gone: a claim took it, its answer is coming.
            Err(_) if self.withdraw(claim.claimed_at) => None,
            Err(_) => answer.await.ok().flatten(),
        }
    }

    /// Take the record of the batch claimed at `claimed_at` back from the list; false when a
    /// claim already took it.
    fn withdraw(&self, claimed_at: DateTime<Utc>) -> bool {
        let mut list = self.list();
        match list.iter().position(|r| r.claimed_at == claimed_at) {
            Some(i) => {
                list.swap_remove(i);
                true
            }
            None => false,
        }
    }
}
