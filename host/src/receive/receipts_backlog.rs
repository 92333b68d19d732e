//! Receipts backlog: a receiver reads no new entries while the receipts stream is full.
//!
//! Owns the cap on the receipts stream (`OUTBOX_RECEIPTS_STREAM_MAX_LEN`). Receipts wait in
//! that stream until the receipt writer has written them to PostgreSQL; while PostgreSQL is
//! away (or slower than the handlers) they pile up in Redis. A receipt is the only record that
//! a handler ran, so none is ever trimmed or refused: the outcome scripts always append it (the
//! handler has already run). Instead, before a read a receiver looks at the stream's length
//! (`XLEN`, O(1)) and, at the cap, reads nothing new until the writer has caught up: handlers
//! already running finish and record their receipts (so the stream may pass the cap by the
//! handler runs under way: at most each receiver's concurrency), due retries still move into
//! the queue where they wait like every entry. Far from the cap it need not look before every
//! read: while the length it last saw plus every entry it has read since (each adds one receipt)
//! stays under half the cap, it looks again only [`LOOK_EVERY`] after the last look (what other
//! receivers add meanwhile), so at a trickle, where a read brings one entry, the look is not a
//! round trip per entry. From half the cap on it looks before every read, as near the cap it
//! must. It logs a warning when a hold starts and an info line when it ends, counts holds in
//! `outbox_receipts_backlog_holds_total{queue}` and sets `outbox_receipts_backlog_full{queue}`
//! while one lasts. It never writes to Redis.

use std::time::{Duration, Instant};

use crate::redis_conn::RedisConn;

/// How long a held receiver waits before looking again.
pub(super) const RECHECK_HELD: Duration = Duration::from_millis(250);

/// While the stream is under half its cap (with what this receiver read since), how long after
/// a look the receiver reads on without looking again.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(100);

/// The stream's length at a look, when it was taken, and the entries this receiver has read
/// since (each adds one receipt to the stream once handled).
struct Look {
    len: u64,
    at: Instant,
    read_since: u64,
}

impl Look {
    /// Whether this look still answers for a stream capped at `cap` at `now`: taken within
    /// [`LOOK_EVERY`], and its length plus what was read since under half the cap.
    fn answers(&self, now: Instant, cap: u64) -> bool {
        now.saturating_duration_since(self.at) < LOOK_EVERY
            && self.len.saturating_add(self.read_since) < cap / 2
    }
}

/// One receiver's view of its queue's receipts stream: where it is, its cap, and whether the
/// receiver is held.
pub(super) struct ReceiptsBacklog {
    conn: RedisConn,
    /// The receipts stream the queue's outcomes append to.
    stream: String,
    /// `OUTBOX_RECEIPTS_STREAM_MAX_LEN`.
    cap: u64,
    held: bool,
    /// The last look, while it may stand in for a new one; `None`: look before the next read.
    last_look: Option<Look>,
}

impl ReceiptsBacklog {
    /// The backlog of receipts `stream` on `conn`, full at `cap` receipts; not held.
    pub(super) fn new(conn: RedisConn, stream: String, cap: u64) -> Self {
        Self {
            conn,
            stream,
            cap,
            held: false,
            last_look: None,
        }
    }

    /// Count `entries` just read: each adds a receipt once handled.
    pub(super) fn entries_read(&mut self, entries: usize) {
        if let Some(look) = &mut self.last_look {
            look.read_since = look
                .read_since
                .saturating_add(u64::try_from(entries).unwrap_or(u64::MAX));
        }
    }

    /// Look at the stream before the next read, whatever the last look said (entries were
    /// handed to handlers without a read: a recovery of this consumer's pending entries).
    pub(super) fn look_next(&mut self) {
        self.last_look = None;
    }

    /// Whether `queue`'s receiver must read nothing new now: its receipts stream holds
    /// `OUTBOX_RECEIPTS_STREAM_MAX_LEN` receipts or more, as a new look says, or the last one
    /// while it still answers (see the module comment). A length that cannot be read leaves the
    /// receiver as it was (the read that follows meets the same Redis and handles its error).
    pub(super) async fn full(&mut self, queue: &str) -> bool {
        let now = Instant::now();
        if !self.held
            && self
                .last_look
                .as_ref()
                .is_some_and(|look| look.answers(now, self.cap))
        {
            return false;
        }
        let cap = self.cap;
        let len: u64 = match redis::cmd("XLEN")
            .arg(&self.stream)
            .query_async(&mut self.conn.clone())
            .await
        {
            Ok(len) => len,
            Err(e) => {
                tracing::debug!(%queue, error = %e, "cannot read the receipts stream's length");
                self.last_look = None;
                return self.held;
            }
        };
        self.last_look = Some(Look {
            len,
            at: Instant::now(),
            read_since: 0,
        });
        let full = len >= cap;
        if full && !self.held {
            metrics::counter!("outbox_receipts_backlog_holds_total", "queue" => queue.to_string())
                .increment(1);
            tracing::warn!(%queue, receipts = len, max_len = cap, "the receipts stream is full (OUTBOX_RECEIPTS_STREAM_MAX_LEN): the receipt writer is behind (PostgreSQL away?); reading no new entries until it catches up");
        } else if !full && self.held {
            tracing::info!(%queue, receipts = len, "the receipt writer caught up; reading the queue again");
        }
        if full != self.held {
            metrics::gauge!("outbox_receipts_backlog_full", "queue" => queue.to_string())
                .set(if full { 1.0 } else { 0.0 });
        }
        self.held = full;
        full
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_answers_only_briefly_and_only_while_the_stream_and_what_was_read_since_stay_under_half_the_cap(
    ) {
        let at = Instant::now();
        let look = |len, read_since| Look {
            len,
            at,
            read_since,
        };
        assert!(look(0, 0).answers(at, 10));
        assert!(look(2, 2).answers(at + LOOK_EVERY / 2, 10));
        assert!(
            !look(2, 3).answers(at, 10),
            "what was read since reaches half the cap: look again"
        );
        assert!(!look(5, 0).answers(at, 10), "the stream is at half the cap");
        assert!(
            !look(0, 0).answers(at + LOOK_EVERY, 10),
            "others may have added receipts since"
        );
        assert!(
            !look(0, 0).answers(at, 1),
            "a cap of 1: look before every read"
        );
        assert!(!look(u64::MAX, 1).answers(at, u64::MAX), "no overflow");
    }
}
