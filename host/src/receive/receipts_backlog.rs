//! Receipts backlog: a receiver reads no new entries while the receipts stream is full.
//!
//! Owns the cap on the receipts stream (`OUTBOX_RECEIPTS_STREAM_MAX_LEN`). Receipts wait in
//! that stream until the receipt writer has written them to PostgreSQL; while PostgreSQL is
//! away (or slower than the handlers) they pile up in Redis. A receipt is the only record that
//! a handler ran, so none is ever trimmed or refused: the outcome scripts always append it (the
//! handler has already run). Instead, before each read a receiver looks at the stream's length
//! (`XLEN`, O(1), one round trip per read of up to its free handler slots) and, at the cap,
//! reads nothing new until the writer has caught up: handlers already running finish and record
//! their receipts (so the stream may pass the cap by the handler runs under way: at most each
//! receiver's concurrency), due retries still
//! move into the queue where they wait like every entry. It logs a warning when a hold starts
//! and an info line when it ends, counts holds in `outbox_receipts_backlog_holds_total{queue}`
//! and sets `outbox_receipts_backlog_full{queue}` while one lasts. It never writes to Redis.

use std::time::Duration;

use crate::redis_conn::RedisConn;

/// How long a held receiver waits before looking again.
pub(super) const RECHECK_HELD: Duration = Duration::from_millis(250);

/// One receiver's view of its queue's receipts stream: where it is, its cap, and whether the
/// receiver is held.
pub(super) struct ReceiptsBacklog {
    conn: RedisConn,
    /// The receipts stream the queue's outcomes append to.
    stream: String,
    /// `OUTBOX_RECEIPTS_STREAM_MAX_LEN`.
    cap: u64,
    held: bool,
}

impl ReceiptsBacklog {
    /// The backlog of receipts `stream` on `conn`, full at `cap` receipts; not held.
    pub(super) fn new(conn: RedisConn, stream: String, cap: u64) -> Self {
        Self {
            conn,
            stream,
            cap,
            held: false,
        }
    }

    /// Whether `queue`'s receiver must read nothing new now: its receipts stream holds
    /// `OUTBOX_RECEIPTS_STREAM_MAX_LEN` receipts or more. A length that cannot be read counts
    /// as below the cap (the read that follows meets the same Redis and handles its error).
    pub(super) async fn full(&mut self, queue: &str) -> bool {
        let cap = self.cap;
        let len: u64 = match redis::cmd("XLEN")
            .arg(&self.stream)
            .query_async(&mut self.conn.clone())
            .await
        {
            Ok(len) => len,
            Err(e) => {
                tracing::debug!(%queue, error = %e, "cannot read the receipts stream's length");
                return self.held;
            }
        };
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
