//! Receipts: how what each handler made of each event travels to `outbox_receipt`.
//!
//! A receipt travels in two steps, so none is lost with a killed host. The outcome script that
//! records a handler run in Redis (see `outcomes`) also appends the run's receipt to the
//! receipts stream (`{prefix}outbox:receipts`; on a Redis Cluster one per queue, see
//! [`QueueKeys::receipts_stream`]) in the same atomic step: an acknowledged entry always has
//! its receipt somewhere. This module owns the receipt's form in that stream (one JSON field,
//! short keys) and the other step, the writer: it reads that stream as a consumer group, writes
//! what it read to `outbox_receipt` a batch per transaction (the statement is
//! `store::receipts`, retried on a fresh connection through infrastructure blips for up to
//! [`RECEIPT_RETRY_FOR`]), and only then acknowledges the stream entries and takes them out of
//! the stream (`receipts_trim`). A receipt read by a writer that died first stays pending and
//! is adopted by another writer after the receiver lease (`XAUTOCLAIM`), or by the same
//! consumer reading its own pending entries again after a failed write. Writing one twice
//! changes nothing but a `duplicates` count (see `store::receipts`). It never runs a handler,
//! never touches a queue stream and holds no SQL.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::redis_conn::RedisConn;
use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamReadOptions};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::fault;
use crate::queue::receipt::RECEIPT_FIELD;
use crate::queue::{KeyLayout, QueueEntry, QueueKeys, ReadEntries, CONSUMER_GROUP};
use crate::reconnect::{retry_blips, Backoff};
use crate::redis_conn::RedisTarget;
use crate::store::{write_receipt_updates, KeptConnections, PositionedUpdate, StreamPosition};

pub(super) use crate::store::ReceiptUpdate;
pub use crate::store::{write_receipts, Receipt};

/// A handler run whose outcome is not recorded yet: the outcome step that records it in Redis
/// turns it into a [`Receipt`] (adding the result and error) and appends that to the receipts
/// stream in the same atomic step.
#[derive(Debug, Clone, PartialEq)]
pub struct HandlerRun {
    /// The event the handler ran on.
    pub event_id: i64,
    /// The handler (for a plugin-invoke job: the subscribed plugin).
    pub handler: String,
    /// The queue the entry came from.
    pub queue: String,
    /// The handler attempt this run was.
    pub attempts: i32,
    /// How long the handler ran.
    pub duration: Duration,
    /// Ids of the events the handler published.
    pub published: Vec<i64>,
}

impl HandlerRun {
    /// The run's receipt with `result` (`ok`, `retry` or `dead`) and `error`.
    pub fn receipt(&self, result: &'static str, error: Option<&str>) -> Receipt {
        Receipt {
            event_id: self.event_id,
            handler: self.handler.clone(),
            queue: self.queue.clone(),
            result,
            attempts: self.attempts,
            duration_ms: self.duration.as_secs_f64() * 1000.0,
            published: self.published.clone(),
            error: error.map(str::to_string),
        }
    }
}

/// A receipts stream entry as JSON: short field names, as a queue entry's are kept short
/// (written so; read through [`ReceiptWireRead`]).
#[derive(Debug, Serialize)]
#[serde(tag = "k", rename_all = "snake_case")]
enum ReceiptWire {
    Outcome {
        e: i64,
        h: String,
        q: String,
        r: String,
        a: i32,
        d: f64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        p: Vec<i64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        x: Option<String>,
    },
    Duplicate {
        e: i64,
        h: String,
    },
}

/// [`ReceiptWire`] as it is read: its kind and every field flat, read in one pass over the JSON
/// with the texts borrowed where they hold no escape (serde reads an internally tagged enum by
/// buffering every value first, which cost the writer more than the rest of its decoding).
/// Which fields a kind needs is checked by [`ReceiptUpdate::decode`].
#[derive(Deserialize)]
struct ReceiptWireRead<'a> {
    k: WireKind,
    e: i64,
    #[serde(borrow)]
    h: Cow<'a, str>,
    #[serde(borrow, default)]
    q: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    r: Option<Cow<'a, str>>,
    #[serde(default)]
    a: Option<i32>,
    #[serde(default)]
    d: Option<f64>,
    #[serde(default)]
    p: Vec<i64>,
    #[serde(default)]
    x: Option<String>,
}

/// The tag `k` of a receipts stream entry's JSON.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum WireKind {
    Outcome,
    Duplicate,
}

impl ReceiptUpdate {
    /// The update as the JSON of a receipts stream entry.
    pub(crate) fn encode(&self) -> String {
        let wire = match self {
            ReceiptUpdate::Outcome(r) => ReceiptWire::Outcome {
                e: r.event_id,
                h: r.handler.clone(),
                q: r.queue.clone(),
                r: r.result.to_string(),
                a: r.attempts,
                d: r.duration_ms,
                p: r.published.clone(),
                x: r.error.clone(),
            },
            ReceiptUpdate::Duplicate { event_id, handler } => ReceiptWire::Duplicate {
                e: *event_id,
                h: handler.clone(),
            },
        };
        // Strings and numbers only (a non-finite duration becomes null): this cannot fail.
        serde_json::to_string(&wire).unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not encode a receipt; it is not recorded");
            String::new()
        })
    }

    /// The update a receipts stream entry's JSON holds, or why it holds none.
    pub(crate) fn decode(json: &str) -> Result<Self, String> {
        let wire: ReceiptWireRead = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let handler = wire.h.into_owned();
        Ok(match wire.k {
            WireKind::Outcome => {
                let missing = |field: &str| format!("an outcome without {field:?}");
                let result = match wire.r.as_deref().ok_or_else(|| missing("r"))? {
                    "ok" => "ok",
                    super::outcomes::RESULT_SKIPPED_VERSION => {
                        super::outcomes::RESULT_SKIPPED_VERSION
                    }
                    "retry" => "retry",
                    "dead" => "dead",
                    other => return Err(format!("unknown result {other:?}")),
                };
                ReceiptUpdate::Outcome(Receipt {
                    event_id: wire.e,
                    handler,
                    queue: wire.q.ok_or_else(|| missing("q"))?.into_owned(),
                    result,
                    attempts: wire.a.ok_or_else(|| missing("a"))?,
                    duration_ms: wire.d.ok_or_else(|| missing("d"))?,
                    published: wire.p,
                    error: wire.x,
                })
            }
            WireKind::Duplicate => ReceiptUpdate::Duplicate {
                event_id: wire.e,
                handler,
            },
        })
    }

    /// The update of one receipts stream entry (read as any stream entry is: its id and its
    /// fields), with its position (`None`: the entry holds no readable receipt).
    fn from_entry(entry: &QueueEntry) -> Option<PositionedUpdate> {
        let json = entry.get(RECEIPT_FIELD)?;
        match Self::decode(json) {
            Ok(update) => Some(PositionedUpdate {
                update,
                position: stream_position(&entry.stream_id),
            }),
            Err(e) => {
                tracing::error!(entry = %entry.stream_id, error = %e, "unreadable receipts stream entry; dropped");
                None
            }
        }
    }
}

/// Receipts written per statement at most (and read from the receipts stream per read).
pub const RECEIPT_BATCH: usize = 500;

/// How long the writer retries a batch through blips before it leaves the batch pending in the
/// receipts stream (to be written again) and logs it.
pub const RECEIPT_RETRY_FOR: Duration = Duration::from_secs(30);

/// How long a read of the receipts stream waits for new entries.
const READ_BLOCK: Duration = Duration::from_millis(1000);

/// How long the writer waits, after a read that found fewer than a batch of new receipts, for
/// more to arrive before it writes them all in one statement. At a trickle of events a read
/// finds one receipt: without this, every event cost a statement in PostgreSQL and two more
/// round trips to Redis (the read, the acknowledgement), with it one of each per this interval.
/// A receipt reaches `outbox_receipt` at most this much later.
const RECEIPT_LINGER: Duration = Duration::from_millis(10);

/// How long a writer whose receivers are all gone keeps writing what is already in the stream.
const FINAL_WRITE_FOR: Duration = Duration::from_secs(5);

/// Keeps one receipt writer running while it lives; the writer writes what is left and stops
/// once this is dropped (which cancels its token).
struct ReceiptWriterHandle {
    _alive: DropGuard,
}

/// The receipt writers of a process's receivers: one for the receipts stream on one Redis
/// node, started with the receivers; on a Redis Cluster (a receipts stream per queue, see
/// [`QueueKeys::receipts_stream`]) one per queue, started when the first receiver of the queue
/// starts. They write what is left and stop once this is dropped.
pub(super) struct ReceiptWriters {
    /// The connections every writer of the process writes on, kept between writes: at most
    /// [`KEPT_CONNECTIONS`] (a cluster's writers, one per queue, share them; more writing at
    /// once borrow from the pool).
    database: KeptConnections,
    redis: RedisTarget,
    keys: QueueKeys,
    consumer: String,
    lease: Duration,
    /// Receipt updates every writer has written to `outbox_receipt` (committed) so far.
    written: std::sync::Arc<AtomicU64>,
    /// Receipts stream -> its running writer.
    running: std::sync::Mutex<HashMap<String, ReceiptWriterHandle>>,
}

impl ReceiptWriters {
    /// The writers of receivers consuming as `consumer`, writing to `pool`; on one Redis node
    /// its writer starts now.
    pub(super) fn new(
        pool: PgPool,
        redis: RedisTarget,
        keys: QueueKeys,
        consumer: String,
        lease: Duration,
    ) -> Self {
        let writers = Self {
            database: KeptConnections::new(pool, KEPT_CONNECTIONS),
            redis,
            keys,
            consumer,
            lease,
            written: std::sync::Arc::default(),
            running: std::sync::Mutex::default(),
        };
        if writers.keys.layout() == KeyLayout::Classic {
            writers.start_for(QUEUE_OF_SHARED_STREAM);
        }
        writers
    }

    /// Make sure the writer of the receipts stream that outcomes on `queue` append to runs.
    pub(super) fn start_for(&self, queue: &str) {
        let stream = self.keys.receipts_stream(queue);
        let Ok(mut running) = self.running.lock() else {
            return;
        };
        running.entry(stream.clone()).or_insert_with(|| {
            spawn_receipt_writer(
                self.database.clone(),
                self.redis.clone(),
                stream,
                self.consumer.clone(),
                self.lease,
                self.written.clone(),
            )
        });
    }

    /// Receipt updates written and committed so far, by all the writers.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

/// Connections the receipt writers of a process keep between their writes: one for the one
/// writer on a single Redis node; on a cluster the writers of every queue share them, so a host
/// with many queues never holds more of the pool than this.
const KEPT_CONNECTIONS: usize = 2;

/// Any queue name: on one node every queue's receipts go to the same stream.
const QUEUE_OF_SHARED_STREAM: &str = "";

/// Start a receipt writer: it reads `stream` as consumer `consumer` and writes on `database`
/// (counting in `written`) until every [`ReceiptWriterHandle`] clone is gone.
fn spawn_receipt_writer(
    database: KeptConnections,
    redis: RedisTarget,
    stream: String,
    consumer: String,
    lease: Duration,
    written: std::sync::Arc<AtomicU64>,
) -> ReceiptWriterHandle {
    let gone = CancellationToken::new();
    let writer = ReceiptWriter {
        written,
        database,
        redis,
        stream,
        consumer,
        lease,
    };
    let alive = gone.clone().drop_guard();
    tokio::spawn(writer.run(gone));
    ReceiptWriterHandle { _alive: alive }
}

/// The receipt writer's state: where it reads and writes, and as whom.
struct ReceiptWriter {
    /// Receipt updates written and committed so far.
    written: std::sync::Arc<AtomicU64>,
    /// The writers' connections, kept between writes (see [`crate::store::KeptConnections`]).
    database: KeptConnections,
    redis: RedisTarget,
    stream: String,
    consumer: String,
    lease: Duration,
}

/// Which entries the writer reads next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadFrom {
    /// Its own pending entries (read before, not written: after a failed write or at start).
    OwnPending,
    /// Entries no writer has read yet.
    New,
}

impl ReceiptWriter {
    async fn run(self, gone: CancellationToken) {
        let mut conn: Option<RedisConn> = None;
        // Failures wait a probe delay (at most a second), as a blip does, and are logged at most
        // every 30 s.
        let mut backoff = Backoff::new();
        let mut from = ReadFrom::OwnPending;
        let mut adopted_at = Instant::now();
        let mut closing: Option<Instant> = None;
        loop {
            if gone.is_cancelled() && closing.is_none() {
                // Every receiver is gone: write what is in the stream, then stop.
                closing = Some(Instant::now());
                from = ReadFrom::OwnPending;
            }
            if closing.is_some_and(|since| since.elapsed() > FINAL_WRITE_FOR) {
                break;
            }
            let connection = match conn.as_mut() {
                Some(c) => c,
                None => match self.connect().await {
                    Ok(c) => conn.insert(c),
                    Err(e) => {
                        if closing.is_some() {
                            break;
                        }
                        backoff
                            .blipped(&gone, |retry_in| {
                                tracing::warn!(error = %e, ?retry_in, "receipt writer cannot reach Redis; retrying")
                            })
                            .await;
                        continue;
                    }
                },
            };
            let read = if adopted_at.elapsed() >= self.lease / 2 && closing.is_none() {
                adopted_at = Instant::now();
                self.adopt(connection).await
            } else {
                let block = if closing.is_some() || from == ReadFrom::OwnPending {
                    None
                } else {
                    Some(READ_BLOCK)
                };
                tokio::select! {
                    r = self.read(connection, from, block, RECEIPT_BATCH) => r,
                    _ = gone.cancelled(), if closing.is_none() => {
                        // Every receiver is gone: write what is in the stream, then stop. The
                        // cut read's entries (if any) are this consumer's pending entries now.
                        closing = Some(Instant::now());
                        from = ReadFrom::OwnPending;
                        continue;
                    }
                }
            };
            let mut entries = match read {
                Ok(entries) => entries,
                Err(e) => {
                    conn = None;
                    from = ReadFrom::OwnPending;
                    if closing.is_some() {
                        break;
                    }
                    backoff
                        .blipped(&gone, |retry_in| {
                            tracing::warn!(error = %e, ?retry_in, "receipt writer cannot read the receipts stream; retrying")
                        })
                        .await;
                    continue;
                }
            };
            if from == ReadFrom::New
                && closing.is_none()
                && !entries.is_empty()
                && entries.len() < RECEIPT_BATCH
            {
                tokio::time::sleep(RECEIPT_LINGER).await;
                let more = RECEIPT_BATCH - entries.len();
                match self.read(connection, ReadFrom::New, None, more).await {
                    Ok(more) => entries.extend(more),
                    // What this read got may be this consumer's now with its reply lost: the
                    // next read is of its own pending entries, as after any failed read.
                    Err(_) => from = ReadFrom::OwnPending,
                }
            }
            if entries.is_empty() {
                match (from, closing) {
                    (ReadFrom::OwnPending, _) => from = ReadFrom::New,
                    (ReadFrom::New, Some(_)) => break,
                    (ReadFrom::New, None) => {}
                }
                continue;
            }
            match self.write(connection, &entries).await {
                Ok(()) => {
                    backoff.succeeded();
                }
                Err(e) => {
                    // Left pending: read again from this consumer's pending entries.
                    from = ReadFrom::OwnPending;
                    if closing.is_some() {
                        break;
                    }
                    let receipts = entries.len();
                    backoff
                        .blipped(&gone, |retry_in| {
                            tracing::warn!(error = %e, receipts, ?retry_in, "could not record receipts; they stay in the receipts stream and are written again")
                        })
                        .await;
                }
            }
        }
    }

    /// A connection of its own (blocking reads would hold up a shared one), with the consumer
    /// group made unless it exists.
    async fn connect(&self) -> redis::RedisResult<RedisConn> {
        let mut conn = self.redis.reader(READ_BLOCK).await?;
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&self.stream)
            .arg(CONSUMER_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            Err(e) if e.code() != Some("BUSYGROUP") => Err(e),
            _ => Ok(conn),
        }
    }

    /// Up to `count` entries: this consumer's pending ones, or new ones (waiting up to `block`
    /// for them).
    async fn read(
        &self,
        conn: &mut RedisConn,
        from: ReadFrom,
        block: Option<Duration>,
        count: usize,
    ) -> redis::RedisResult<Vec<QueueEntry>> {
        let mut opts = StreamReadOptions::default()
            .group(CONSUMER_GROUP, &self.consumer)
            .count(count);
        if let Some(block) = block {
            opts = opts.block(block.as_millis() as usize);
        }
        let id = match from {
            ReadFrom::OwnPending => "0",
            ReadFrom::New => ">",
        };
        let ReadEntries(entries) =
            redis::AsyncCommands::xread_options(conn, &[&self.stream], &[id], &opts).await?;
        Ok(entries)
    }

    /// Entries another writer read and left unwritten for longer than the receiver lease (it
    /// died, or its database writes keep failing): now this consumer's.
    async fn adopt(&self, conn: &mut RedisConn) -> redis::RedisResult<Vec<QueueEntry>> {
        let reply: StreamAutoClaimReply = redis::AsyncCommands::xautoclaim_options(
            conn,
            &self.stream,
            CONSUMER_GROUP,
            &self.consumer,
            crate::numeric::millis(self.lease),
            "0-0",
            StreamAutoClaimOptions::default().count(RECEIPT_BATCH),
        )
        .await?;
        if !reply.claimed.is_empty() {
            tracing::info!(
                receipts = reply.claimed.len(),
                "adopted receipts another writer left unwritten"
            );
        }
        Ok(reply.claimed.iter().map(QueueEntry::from_stream).collect())
    }

    /// Write `entries` to `outbox_receipt`, then acknowledge them and take them out of the
    /// stream.
    async fn write(&self, conn: &mut RedisConn, entries: &[QueueEntry]) -> Result<(), String> {
        let batch: Vec<PositionedUpdate> = entries
            .iter()
            .filter_map(ReceiptUpdate::from_entry)
            .collect();
        if !batch.is_empty() {
            retry_blips(
                "record receipts",
                "receipts",
                Instant::now() + RECEIPT_RETRY_FOR,
                fault::postgres_blip,
                || async {
                    let mut conn = self.database.acquire().await?;
                    let written = write_receipt_updates(&mut conn, &batch).await;
                    conn.finished(&written);
                    written
                },
            )
            .await
            .map_err(|e| e.to_string())?;
            self.written
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            metrics::counter!("outbox_receipts_written_total").increment(batch.len() as u64);
        }
        let ids: Vec<&str> = entries.iter().map(|e| e.stream_id.as_str()).collect();
        // Written but not acknowledged: written again later, which changes nothing but the
        // duplicate counts.
        super::receipts_trim::remove_written(conn, &self.stream, CONSUMER_GROUP, &ids)
            .await
            .map(drop)
            .map_err(|e| format!("acknowledge written receipts: {e}"))
    }
}

/// A receipts stream entry's position: its id `<ms>-<seq>` as numbers (`None`: not an entry
/// id).
pub(super) fn stream_position(id: &str) -> Option<StreamPosition> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(result: &'static str, attempts: i32, published: Vec<i64>) -> ReceiptUpdate {
        ReceiptUpdate::Outcome(Receipt {
            event_id: 42,
            handler: "audit-log".into(),
            queue: "outbox.audit".into(),
            result,
            attempts,
            duration_ms: 1.5,
            published,
            error: (result != "ok").then(|| format!("{result} on attempt {attempts}")),
        })
    }

    #[test]
    fn a_receipt_survives_the_stream_encoding() {
        for update in [
            outcome("ok", 1, vec![]),
            outcome("retry", 2, vec![7, 8]),
            outcome("dead", 3, vec![9]),
            ReceiptUpdate::Duplicate {
                event_id: -5,
                handler: "h:with:colons".into(),
            },
        ] {
            assert_eq!(ReceiptUpdate::decode(&update.encode()), Ok(update));
        }
        let forged = r#"{"k":"outcome","e":1,"h":"x","q":"q","r":"maybe","a":1,"d":0.0}"#;
        assert!(ReceiptUpdate::decode(forged).unwrap_err().contains("maybe"));
        assert!(ReceiptUpdate::decode("not json").is_err());
    }

    #[test]
    fn a_receipt_is_read_with_escapes_and_refused_without_its_fields() {
        // Texts holding escapes are read as well as plain ones (not borrowed).
        let escaped = ReceiptUpdate::Outcome(Receipt {
            handler: "h\"q\u{1b}\u{e9}".into(),
            queue: "q\n".into(),
            error: Some("line\nbreak \"quoted\"".into()),
            ..match outcome("retry", 2, vec![1]) {
                ReceiptUpdate::Outcome(r) => r,
                ReceiptUpdate::Duplicate { .. } => unreachable!(),
            }
        });
        assert_eq!(ReceiptUpdate::decode(&escaped.encode()), Ok(escaped));
        let read = ReceiptUpdate::decode(r#"{"k":"duplicate","e":3,"h":"\u0068\u00e9"}"#);
        assert_eq!(
            read,
            Ok(ReceiptUpdate::Duplicate {
                event_id: 3,
                handler: "h\u{e9}".into()
            })
        );
        // An outcome needs each of its fields; the kind must be known.
        for (json, why) in [
            (
                r#"{"k":"outcome","e":1,"h":"x","r":"ok","a":1,"d":0.0}"#,
                "\"q\"",
            ),
            (
                r#"{"k":"outcome","e":1,"h":"x","q":"q","a":1,"d":0.0}"#,
                "\"r\"",
            ),
            (
                r#"{"k":"outcome","e":1,"h":"x","q":"q","r":"ok","d":0.0}"#,
                "\"a\"",
            ),
            (
                r#"{"k":"outcome","e":1,"h":"x","q":"q","r":"ok","a":1,"d":null}"#,
                "\"d\"",
            ),
            (r#"{"k":"other","e":1,"h":"x"}"#, "unknown variant"),
            (r#"{"k":"duplicate","h":"x"}"#, "missing field `e`"),
        ] {
            let error = ReceiptUpdate::decode(json).unwrap_err();
            assert!(error.contains(why), "{json}: {error}");
        }
    }

    #[test]
    fn stream_positions_order_as_redis_orders_entry_ids() {
        assert_eq!(
            stream_position("1700000000000-3"),
            Some((1_700_000_000_000, 3))
        );
        assert_eq!(stream_position("12"), None);
        assert_eq!(stream_position("a-1"), None);
    }
}
