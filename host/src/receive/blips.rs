//! Blips: how long and how the receivers' writes are carried through infrastructure blips.
//!
//! Owns the deadline of those retries (half the receiver lease from now, so an entry is settled
//! before another consumer could reclaim it), which errors count as a blip ([`crate::fault`]),
//! and the `stage` label they are counted under. The retries themselves are the callers':
//! the claim steps in `claims` (on the claim's own owner token), the outcome scripts in
//! `outcomes` (checking first whether the entry is still pending, so nothing is written twice),
//! the duplicate ack. It never changes a script and never decides an outcome.

use std::time::{Duration, Instant};

use super::ReceiveError;
use crate::fault;

/// The `stage` label of the receivers' retries in `outbox_infra_retries_total`.
pub(super) const STAGE: &str = "receiver_outcome";

/// Classify a receiver error for [`crate::reconnect::retry_blips`].
pub(super) fn receive_blip(error: &ReceiveError) -> Option<fault::Blip> {
    fault::redis_blip(&error.source)
}

/// Until when a receiver write may be retried through blips: half the receiver `lease` from
/// now, so the entry is settled before another consumer could reclaim it.
pub(super) fn deadline(lease: Duration) -> Instant {
    Instant::now() + lease / 2
}
