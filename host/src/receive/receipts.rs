//! Receipts: what each handler made of each event, in `outbox_receipt`.
//!
//! Owns the background writer that turns handler outcomes into rows, a batch per statement,
//! and the SQL it runs ([`write_receipts`]). A batch is one transaction, retried on a fresh
//! connection through infrastructure blips ([`crate::fault`]) for up to
//! [`RECEIPT_RETRY_FOR`]. It only ever runs after the outcome is safe in Redis, so a lost
//! receipt never loses an outcome; it never touches Redis.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sqlx::PgPool;

use super::{HandledAs, Receivers};
use crate::fault;
use crate::reconnect::retry_blips;

/// One handler outcome for `outbox_receipt`.
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    /// The event the handler ran on.
    pub event_id: i64,
    /// The handler (for a plugin-invoke job: the subscribed plugin).
    pub handler: String,
    /// The queue the entry came from.
    pub queue: String,
    /// `ok`, `retry` or `dead`.
    pub result: &'static str,
    /// Handler attempts so far.
    pub attempts: i32,
    /// How long the handler ran.
    pub duration_ms: f64,
    /// Ids of the events the handler published.
    pub published: Vec<i64>,
    /// The error of a `retry` or `dead` outcome.
    pub error: Option<String>,
}

/// What the receipt writer is told.
#[derive(Debug, Clone)]
pub(super) enum ReceiptUpdate {
    /// A handler outcome.
    Outcome(Receipt),
    /// A duplicate delivery that was acknowledged without running the handler.
    Duplicate {
        /// The event.
        event_id: i64,
        /// The handler.
        handler: String,
    },
}

/// Receipts written per statement at most.
pub const RECEIPT_BATCH: usize = 500;

/// How long the writer retries a batch through blips before it gives the batch up (and logs it).
pub const RECEIPT_RETRY_FOR: Duration = Duration::from_secs(30);

/// Start the task that writes receipts in batches: whatever queued up while the previous
/// statement ran goes into the next one, so a busy receiver writes a few rows per entry's worth
/// of round trips and an idle one writes each receipt at once. It ends when every sender is gone.
pub(super) fn spawn_receipt_writer(pool: PgPool) -> tokio::sync::mpsc::Sender<ReceiptUpdate> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<ReceiptUpdate>(10_000);
    tokio::spawn(async move {
        let mut batch = Vec::with_capacity(RECEIPT_BATCH);
        while let Some(first) = rx.recv().await {
            batch.push(first);
            while batch.len() < RECEIPT_BATCH {
                match rx.try_recv() {
                    Ok(update) => batch.push(update),
                    Err(_) => break,
                }
            }
            let written = retry_blips(
                "record receipts",
                "receipts",
                Instant::now() + RECEIPT_RETRY_FOR,
                fault::postgres_blip,
                || write_updates(&pool, &batch),
            )
            .await;
            if let Err(e) = written {
                tracing::warn!(error = %e, receipts = batch.len(), "could not record receipts");
            }
            batch.clear();
        }
    });
    tx
}

/// Write a batch of handler outcomes to `outbox_receipt` in one statement, as the receivers'
/// receipt writer does: an upsert per (event, handler), the latest outcome wins and published
/// ids add up.
pub async fn write_receipts(pool: &PgPool, receipts: &[Receipt]) -> Result<(), sqlx::Error> {
    let updates: Vec<ReceiptUpdate> = receipts
        .iter()
        .cloned()
        .map(ReceiptUpdate::Outcome)
        .collect();
    write_updates(pool, &updates).await
}

/// Write one batch in one transaction (so a retry repeats all of it or none): outcomes as one
/// upsert, duplicate counts of rows without an outcome in the batch as one update. Updates of the
/// same (event, handler) are merged first (the latest outcome wins, published ids and duplicates
/// add up).
async fn write_updates(pool: &PgPool, batch: &[ReceiptUpdate]) -> Result<(), sqlx::Error> {
    let mut merged: HashMap<(i64, String), (Option<Receipt>, i32)> = HashMap::new();
    for update in batch.iter().cloned() {
        match update {
            ReceiptUpdate::Outcome(receipt) => {
                let slot = merged
                    .entry((receipt.event_id, receipt.handler.clone()))
                    .or_default();
                let mut receipt = receipt;
                if let Some(previous) = slot.0.take() {
                    receipt.published.extend(previous.published);
                }
                slot.0 = Some(receipt);
            }
            ReceiptUpdate::Duplicate { event_id, handler } => {
                merged.entry((event_id, handler)).or_default().1 += 1
            }
        }
    }
    let mut rows: Vec<(Receipt, i32)> = Vec::new();
    let (mut dup_ids, mut dup_handlers, mut dup_counts) = (vec![], vec![], vec![]);
    for ((event_id, handler), (receipt, duplicates)) in merged {
        match receipt {
            Some(receipt) => rows.push((receipt, duplicates)),
            None => {
                dup_ids.push(event_id);
                dup_handlers.push(handler);
                dup_counts.push(duplicates);
            }
        }
    }
    let mut tx = pool.begin().await?;
    if !rows.is_empty() {
        let published: Vec<String> = rows
            .iter()
            .map(|(r, _)| {
                let ids: Vec<String> = r.published.iter().map(i64::to_string).collect();
                format!("{{{}}}", ids.join(","))
            })
            .collect();
        sqlx::query(
            r#"
            INSERT INTO outbox_receipt AS r
                (event_id, handler, queue, result, attempts, duration_ms, published_ids, error, duplicates)
            SELECT v.event_id, v.handler, v.queue, v.result, v.attempts, v.duration_ms,
                   v.published::bigint[], v.error, v.duplicates
            FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::int[], $6::float8[],
                        $7::text[], $8::text[], $9::int[])
                 AS v(event_id, handler, queue, result, attempts, duration_ms, published, error, duplicates)
            ON CONFLICT (event_id, handler) DO UPDATE
            SET result = EXCLUDED.result, attempts = EXCLUDED.attempts, duration_ms = EXCLUDED.duration_ms,
                published_ids = ARRAY(SELECT DISTINCT unnest(r.published_ids || EXCLUDED.published_ids) ORDER BY 1),
                error = EXCLUDED.error, queue = EXCLUDED.queue,
                duplicates = r.duplicates + EXCLUDED.duplicates, updated_at = now()
            "#,
        )
        .bind(rows.iter().map(|(r, _)| r.event_id).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _)| r.handler.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _)| r.queue.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _)| r.result).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _)| r.attempts).collect::<Vec<_>>())
        .bind(rows.iter().map(|(r, _)| r.duration_ms).collect::<Vec<_>>())
        .bind(published)
        .bind(rows.iter().map(|(r, _)| r.error.clone()).collect::<Vec<_>>())
        .bind(rows.iter().map(|(_, d)| *d).collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
    }
    if !dup_ids.is_empty() {
        sqlx::query(
            r#"
            UPDATE outbox_receipt r SET duplicates = r.duplicates + v.n, updated_at = now()
            FROM unnest($1::bigint[], $2::text[], $3::int[]) AS v(event_id, handler, n)
            WHERE r.event_id = v.event_id AND r.handler = v.handler
            "#,
        )
        .bind(dup_ids)
        .bind(dup_handlers)
        .bind(dup_counts)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

impl Receivers {
    /// Queue the receipt of a handled entry (`Duplicate`, `Busy` and `LostClaim` leave no
    /// receipt: a lost claim's outcome was discarded, and the receipt is the new owner's).
    #[allow(clippy::too_many_arguments)] // one row's columns; a struct would only rename them
    pub(super) async fn record_receipt(
        &self,
        event_id: i64,
        handler: &str,
        queue: &str,
        handled: &HandledAs,
        attempts: u32,
        duration: Duration,
        published: &[i64],
    ) {
        let (result, error) = match handled {
            HandledAs::Ok => ("ok", None),
            HandledAs::Retry(e) => ("retry", Some(e.clone())),
            HandledAs::Dead(e) => ("dead", Some(e.clone())),
            HandledAs::Duplicate | HandledAs::Busy | HandledAs::LostClaim => return,
        };
        self.send_receipt(ReceiptUpdate::Outcome(Receipt {
            event_id,
            handler: handler.to_string(),
            queue: queue.to_string(),
            result,
            attempts: attempts as i32,
            duration_ms: duration.as_secs_f64() * 1000.0,
            published: published.to_vec(),
            error,
        }))
        .await;
    }

    /// Count a duplicate delivery on the receipt of (event, handler).
    pub(super) async fn record_duplicate(&self, event_id: i64, handler: &str) {
        self.send_receipt(ReceiptUpdate::Duplicate {
            event_id,
            handler: handler.to_string(),
        })
        .await;
    }

    async fn send_receipt(&self, update: ReceiptUpdate) {
        if self.receipts.send(update).await.is_err() {
            tracing::warn!("the receipt writer stopped; a receipt was not recorded");
        }
    }
}
