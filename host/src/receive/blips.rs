//! Blips: the receivers' writes carried through infrastructure blips.
//!
//! Owns retrying an entry's outcome in Redis (the outcome scripts, the idempotency claim, the
//! duplicate ack) on a fresh connection while a blip ([`crate::fault`]) lasts, bounded well
//! inside the receiver lease, so a dropped connection while acknowledging costs a moment, not a
//! redelivery after the lease. Before an outcome script runs again it checks whether the entry is
//! still pending: if not, the previous try was applied and only its reply was lost, so nothing is
//! written twice (a dead letter, above all). It never changes the scripts themselves and never
//! decides an outcome.

use std::time::Instant;

use super::outcomes::{Claim, Claimed, StartConfirmed};
use super::{ctx, ReceiveError, Receivers, CONSUMER_GROUP};
use crate::fault;
use crate::reconnect::retry_blips;

/// What [`Receivers::apply_outcome`] reports when a retry finds its earlier try applied: a
/// recorded outcome (for the dead-letter script: nothing trimmed by this try).
const APPLIED_BEFORE: i64 = 0;

/// The `stage` label of the receivers' retries in `outbox_infra_retries_total`.
pub(super) const STAGE: &str = "receiver_outcome";

/// Classify a receiver error for [`retry_blips`].
pub(super) fn receive_blip(error: &ReceiveError) -> Option<fault::Blip> {
    fault::redis_blip(&error.source)
}

impl Receivers {
    /// Until when a receiver write may be retried through blips: half the receiver lease from
    /// now, so the entry is settled before another consumer could reclaim it.
    pub(super) fn blip_deadline(&self) -> Instant {
        Instant::now() + self.settings.receiver_lease / 2
    }

    /// Run an owner-checked outcome script for `stream_id` on `queue` (`what` names it in logs),
    /// retrying through blips; its reply (`-1`: the claim was lost). A retry first checks the
    /// entry is still pending in the consumer group; if it is not, the earlier try was applied
    /// (only its reply was lost) and this one reports it applied.
    pub(super) async fn apply_outcome(
        &self,
        queue: &str,
        stream_id: &str,
        what: &str,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<i64, ReceiveError> {
        let mut tried = false;
        retry_blips(what, STAGE, self.blip_deadline(), receive_blip, || {
            let again = std::mem::replace(&mut tried, true);
            async move {
                if again && !self.still_pending(queue, stream_id).await? {
                    return Ok(APPLIED_BEFORE);
                }
                ctx(
                    invocation.invoke_async(&mut self.conn.clone()).await,
                    || format!("{what}: {stream_id} on {queue}"),
                )
            }
        })
        .await
    }

    /// Make `claim` (see [`claim_entry`](Receivers::claim_entry)) through blips: the marker
    /// value carries the claim's owner token, unique to this delivery, and the claim script
    /// takes a marker already holding it for its own, so a retry whose first try was applied
    /// with only its reply lost recognises its own claim instead of taking it for someone
    /// else's (which would leave the entry to the receiver lease); while the queue is paused it
    /// releases that claim instead.
    pub(super) async fn claim_through_blips(&self, claim: Claim) -> Result<Claimed, ReceiveError> {
        retry_blips(
            "idempotency claim",
            STAGE,
            self.blip_deadline(),
            receive_blip,
            || self.claim_once(claim.clone()),
        )
        .await
    }

    /// [`confirm_start`](Receivers::confirm_start) through blips.
    pub(super) async fn confirm_start_through_blips(
        &self,
        claim: &mut Claim,
    ) -> Result<StartConfirmed, ReceiveError> {
        let (answer, confirmed) = retry_blips(
            "confirm a claim before its handler starts",
            STAGE,
            self.blip_deadline(),
            receive_blip,
            || {
                let mut attempt = claim.clone();
                async move {
                    let answer = self.confirm_start(&mut attempt).await?;
                    Ok((answer, attempt))
                }
            },
        )
        .await?;
        *claim = confirmed;
        Ok(answer)
    }

    /// Whether `stream_id` is still pending (delivered, not acknowledged) in `queue`'s group.
    async fn still_pending(&self, queue: &str, stream_id: &str) -> Result<bool, ReceiveError> {
        let reply: redis::Value = ctx(
            redis::cmd("XPENDING")
                .arg(self.keys.stream(queue))
                .arg(CONSUMER_GROUP)
                .arg(stream_id)
                .arg(stream_id)
                .arg(1)
                .query_async(&mut self.conn.clone())
                .await,
            || format!("XPENDING {stream_id} on {queue}"),
        )?;
        Ok(matches!(reply, redis::Value::Array(ref entries) if !entries.is_empty()))
    }
}
