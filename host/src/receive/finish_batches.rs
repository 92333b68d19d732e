//! Finish batches: the successes of handlers that finish at about the same time, recorded in
//! one step.
//!
//! Owns the task that takes every waiting success (up to [`FINISH_BATCH`]) and records them
//! with one [`FINISH_LUA`] call per receipts stream, answering each with its own reply, and the
//! layout of that call's KEYS and ARGV ([`finish_invocation`]). It never decides an outcome and
//! never retries a failed step itself: each caller retries its own success (see `outcomes`).

use tokio::sync::oneshot;

use super::outcomes::{Settled, FINISH_LUA};
use super::{blips, CONSUMER_GROUP};
use crate::queue::MARKER_DONE_OK;
use crate::redis_conn::RedisConn;

/// The most successes one [`FinishBatches`] step records: one script call, during which Redis
/// serves nobody else.
const FINISH_BATCH: usize = 64;

/// One handler success waiting to be recorded (see [`FINISH_LUA`] for what is written).
pub(super) struct PendingFinish {
    /// The receipts stream of the entry's queue (see [`crate::queue::QueueKeys::receipts_stream`]).
    pub(super) receipts_stream: String,
    /// The handled marker.
    pub(super) marker: String,
    /// The entry's stream.
    pub(super) stream: String,
    /// The marker's value while the claim holds it.
    pub(super) owner_value: String,
    /// The entry's id.
    pub(super) stream_id: String,
    /// The receipts stream entry (empty: none).
    pub(super) receipt: String,
}

/// Records the successes of handlers that finish at about the same time in one step: one
/// [`FINISH_LUA`] call for up to [`FINISH_BATCH`] entries of any queues (on a Redis Cluster
/// one call per queue, run at once: a script touches one slot), instead of one per entry. A success waits only for the step in flight, never for a timer: an idle receiver's
/// success goes alone at once, a busy one's join the next step. Each entry keeps its own
/// owner check and reply, so one lost claim changes nothing for the others. The waiting
/// successes are bounded by the handler tasks (one each).
#[derive(Clone)]
pub(super) struct FinishBatches {
    waiting: tokio::sync::mpsc::UnboundedSender<WaitingFinish>,
}

impl FinishBatches {
    /// Start the task that records successes on `conn`, with `done` markers kept for
    /// `marker_ttl_s`; it ends when the last clone is dropped.
    pub(super) fn spawn(conn: RedisConn, marker_ttl_s: u64) -> Self {
        let (waiting, queue) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(record_finish_batches(queue, conn, marker_ttl_s));
        Self { waiting }
    }

    /// Record `finish` with whatever else is waiting: what the script did for it, or `None`
    /// when the step failed (applied or not: the caller retries on its own).
    pub(super) async fn finish(&self, finish: PendingFinish) -> Option<Settled> {
        let (reply, settled) = oneshot::channel();
        self.waiting.send((finish, reply)).ok()?;
        settled.await.ok().flatten()
    }
}

/// One [`FINISH_LUA`] call for `finishes` (its KEYS and ARGV layout, written once), with `done`
/// markers kept for `marker_ttl_s`.
pub(super) fn finish_invocation<'a>(
    script: &'a redis::Script,
    receipts_stream: &str,
    marker_ttl_s: u64,
    finishes: impl IntoIterator<Item = &'a PendingFinish>,
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.key(receipts_stream);
    invocation
        .arg(CONSUMER_GROUP)
        .arg(MARKER_DONE_OK)
        .arg(marker_ttl_s);
    for finish in finishes {
        invocation
            .key(&finish.marker)
            .key(&finish.stream)
            .arg(&finish.owner_value)
            .arg(&finish.stream_id)
            .arg(&finish.receipt);
    }
    invocation
}

/// The task behind [`FinishBatches`]: takes every waiting success (up to [`FINISH_BATCH`]),
/// records them in one script call per receipts stream and answers each.
async fn record_finish_batches(
    mut queue: tokio::sync::mpsc::UnboundedReceiver<WaitingFinish>,
    conn: RedisConn,
    marker_ttl_s: u64,
) {
    let script = redis::Script::new(FINISH_LUA);
    let mut batch = Vec::with_capacity(FINISH_BATCH);
    while queue.recv_many(&mut batch, FINISH_BATCH).await > 0 {
        // One step per receipts stream (one on a single node; one per queue on a cluster).
        batch.sort_by(|(a, _), (b, _)| a.receipts_stream.cmp(&b.receipts_stream));
        let mut steps = Vec::new();
        while let Some((first, _)) = batch.first() {
            let stream = first.receipts_stream.clone();
            let same = batch
                .iter()
                .take_while(|(finish, _)| finish.receipts_stream == stream)
                .count();
            let step: Vec<WaitingFinish> = batch.drain(..same).collect();
            steps.push(record_finish_step(
                &script,
                conn.clone(),
                marker_ttl_s,
                step,
            ));
        }
        futures::future::join_all(steps).await;
    }
}

/// A success waiting to be recorded and where its answer goes.
type WaitingFinish = (PendingFinish, oneshot::Sender<Option<Settled>>);

/// One [`FINISH_LUA`] call for `step` (successes that share a receipts stream), answering each.
async fn record_finish_step(
    script: &redis::Script,
    mut conn: RedisConn,
    marker_ttl_s: u64,
    step: Vec<WaitingFinish>,
) {
    let Some((first, _)) = step.first() else {
        return;
    };
    let invocation = finish_invocation(
        script,
        &first.receipts_stream,
        marker_ttl_s,
        step.iter().map(|(finish, _)| finish),
    );
    let replies: redis::RedisResult<Vec<i64>> = invocation.invoke_async(&mut conn).await;
    match replies {
        Ok(replies) if replies.len() == step.len() => {
            for ((_, reply), settled) in step.into_iter().zip(replies) {
                let _ = reply.send(Some(Settled::from_reply(settled)));
            }
        }
        other => {
            let entries = step.len();
            match other {
                Err(e) => {
                    if let Some(blip) = crate::fault::redis_blip(&e) {
                        blip.count_retries(blips::STAGE, entries as u64);
                    }
                    tracing::warn!(entries, error = %e, "recording handler successes together failed; each is retried on its own")
                }
                Ok(replies) => {
                    tracing::warn!(entries, replies = replies.len(), "recording handler successes together gave a reply per entry only for some; each is retried on its own")
                }
            }
            for (_, reply) in step {
                let _ = reply.send(None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::{marker_running, QueueKeys};
    use redis::streams::StreamReadOptions;
    use redis::AsyncCommands;

    /// A pending entry on `stream` (delivered to consumer `c`) and its marker held by `owner`.
    async fn delivered_and_claimed(
        conn: &mut RedisConn,
        stream: &str,
        marker: &str,
        owner: &str,
    ) -> String {
        let id: String = conn.xadd(stream, "*", &[("event_id", "1")]).await.unwrap();
        let _: redis::streams::StreamReadReply = conn
            .xread_options(
                &[stream],
                &[">"],
                &StreamReadOptions::default().group(CONSUMER_GROUP, "c"),
            )
            .await
            .unwrap();
        let _: () = conn.set(marker, marker_running(owner)).await.unwrap();
        id
    }

    /// `XGROUP CREATE ... MKSTREAM` on each of `streams`.
    async fn with_group(conn: &mut RedisConn, streams: &[&String]) {
        for stream in streams {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(*stream)
                .arg(CONSUMER_GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(conn)
                .await
                .unwrap();
        }
    }

    /// How many entries of `stream` are pending in the group.
    async fn pending_count(conn: &RedisConn, stream: &str) -> usize {
        let reply: redis::streams::StreamPendingReply =
            conn.clone().xpending(stream, CONSUMER_GROUP).await.unwrap();
        reply.count()
    }

    /// A claim named twice in one finish call (its success sent twice) is recorded once: the
    /// second check reads the marker the first set (`done`, no longer the owner's), so the
    /// second answers as a lost claim and writes nothing, and every recorded entry is
    /// acknowledged.
    #[tokio::test]
    async fn a_claim_named_twice_in_one_finish_call_is_recorded_once() {
        let mut conn = crate::redis_conn::test_connection().await;
        let keys = QueueKeys::new(format!("outcomes-test-{}:", rand::random::<u32>()));
        let stream = keys.stream("queue-a");
        let receipts = keys.receipts_stream("queue-a");
        with_group(&mut conn, &[&stream]).await;
        let markers: Vec<String> = (1..=2)
            .map(|i| keys.handled_marker("queue-a", "h", i))
            .collect();
        let first = delivered_and_claimed(&mut conn, &stream, &markers[0], "c:1").await;
        let second = delivered_and_claimed(&mut conn, &stream, &markers[1], "c:2").await;
        let finish = |marker: &String, owner: &str, id: &String| PendingFinish {
            receipts_stream: receipts.clone(),
            marker: marker.clone(),
            stream: stream.clone(),
            owner_value: marker_running(owner),
            stream_id: id.clone(),
            receipt: format!("receipt of {id}"),
        };
        let step = [
            finish(&markers[0], "c:1", &first),
            finish(&markers[0], "c:1", &first),
            finish(&markers[1], "c:2", &second),
        ];
        let script = redis::Script::new(FINISH_LUA);
        let replies: Vec<i64> = finish_invocation(&script, &receipts, 60, &step)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        let settled: Vec<Settled> = replies.into_iter().map(Settled::from_reply).collect();
        assert_eq!(
            settled,
            [Settled::Recorded, Settled::LostClaim, Settled::Recorded]
        );
        let receipts_written: usize = conn.xlen(&receipts).await.unwrap();
        assert_eq!(receipts_written, 2, "one receipt per recorded entry");
        assert_eq!(pending_count(&conn, &stream).await, 0, "both acknowledged");
        let mut all = markers.clone();
        all.extend([stream, receipts]);
        let _: () = conn.del(all).await.unwrap();
    }

    /// A finish call that fails part way (the receipts stream key holds a string, so the `XADD`
    /// of the first entry with a receipt is refused) returns the error and leaves the entries it
    /// finished before acknowledged (each at its turn): a retry of such an entry finds it
    /// applied, and the entry it failed on is not acknowledged.
    #[tokio::test]
    async fn a_finish_call_failing_part_way_acknowledges_what_it_finished_before() {
        let mut conn = crate::redis_conn::test_connection().await;
        let keys = QueueKeys::new(format!("outcomes-test-{}:", rand::random::<u32>()));
        let stream = keys.stream("queue-a");
        let receipts = keys.receipts_stream("queue-a");
        with_group(&mut conn, &[&stream]).await;
        let _: () = conn.set(&receipts, "not a stream").await.unwrap();
        let markers: Vec<String> = (1..=2)
            .map(|i| keys.handled_marker("queue-a", "h", i))
            .collect();
        let quiet = delivered_and_claimed(&mut conn, &stream, &markers[0], "c:1").await;
        let refused = delivered_and_claimed(&mut conn, &stream, &markers[1], "c:2").await;
        let step = [
            PendingFinish {
                receipts_stream: receipts.clone(),
                marker: markers[0].clone(),
                stream: stream.clone(),
                owner_value: marker_running("c:1"),
                stream_id: quiet.clone(),
                receipt: String::new(),
            },
            PendingFinish {
                receipts_stream: receipts.clone(),
                marker: markers[1].clone(),
                stream: stream.clone(),
                owner_value: marker_running("c:2"),
                stream_id: refused.clone(),
                receipt: "a receipt".into(),
            },
        ];
        let script = redis::Script::new(FINISH_LUA);
        let reply: redis::RedisResult<Vec<i64>> = finish_invocation(&script, &receipts, 60, &step)
            .invoke_async(&mut conn)
            .await;
        let error = reply.unwrap_err().to_string();
        assert!(error.contains("WRONGTYPE"), "{error}");
        // Each pending entry: (id, consumer, idle ms, deliveries).
        let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(&stream)
            .arg(CONSUMER_GROUP)
            .arg("-")
            .arg("+")
            .arg(10)
            .query_async(&mut conn)
            .await
            .unwrap();
        let ids: Vec<String> = pending.into_iter().map(|(id, ..)| id).collect();
        assert_eq!(
            ids,
            [refused],
            "the finished entry is acknowledged, the refused one not"
        );
        let marker: Option<String> = conn.get(&markers[0]).await.unwrap();
        assert_eq!(marker.as_deref(), Some(MARKER_DONE_OK));
        let mut all = markers.clone();
        all.extend([stream, receipts]);
        let _: () = conn.del(all).await.unwrap();
    }

    #[tokio::test]
    async fn successes_recorded_together_keep_each_entrys_own_owner_check() {
        let mut conn = crate::redis_conn::test_connection().await;
        let keys = QueueKeys::new(format!("outcomes-test-{}:", rand::random::<u32>()));
        let (a, b) = (keys.stream("queue-a"), keys.stream("queue-b"));
        with_group(&mut conn, &[&a, &b]).await;
        let markers: Vec<String> = (1..=3)
            .map(|i| keys.handled_marker("queue-a", "h", i))
            .collect();
        let ids = [
            delivered_and_claimed(&mut conn, &a, &markers[0], "c:1").await,
            // Taken over: its marker holds another owner's token now.
            delivered_and_claimed(&mut conn, &a, &markers[1], "other:9").await,
            delivered_and_claimed(&mut conn, &b, &markers[2], "c:3").await,
        ];
        let batches = FinishBatches::spawn(conn.clone(), 60);
        let finish = |i: usize, stream: &str, owner: &str| {
            batches.finish(PendingFinish {
                receipts_stream: keys.receipts_stream("queue-a"),
                marker: markers[i].clone(),
                stream: stream.to_string(),
                owner_value: marker_running(owner),
                stream_id: ids[i].clone(),
                receipt: format!("receipt {i}"),
            })
        };
        // Sent at once, so they may share a step; each gets its own answer either way.
        let (first, lost, third) = tokio::join!(
            finish(0, &a, "c:1"),
            finish(1, &a, "c:2"),
            finish(2, &b, "c:3")
        );
        assert_eq!(first, Some(Settled::Recorded));
        assert_eq!(lost, Some(Settled::LostClaim));
        assert_eq!(third, Some(Settled::Recorded));

        let marker = |i: usize| {
            let mut conn = conn.clone();
            let key = markers[i].clone();
            async move { conn.get::<_, Option<String>>(key).await.unwrap() }
        };
        assert_eq!(marker(0).await.as_deref(), Some(MARKER_DONE_OK));
        assert_eq!(
            marker(1).await,
            Some(marker_running("other:9")),
            "the new owner's marker is untouched"
        );
        assert_eq!(marker(2).await.as_deref(), Some(MARKER_DONE_OK));
        assert_eq!(
            pending_count(&conn, &a).await,
            1,
            "only the lost claim's entry is still pending"
        );
        assert_eq!(pending_count(&conn, &b).await, 0);
        let receipts: usize = conn.xlen(keys.receipts_stream("queue-a")).await.unwrap();
        assert_eq!(
            receipts, 2,
            "a receipt for each recorded success, none for the lost one"
        );

        let mut all: Vec<String> = markers.clone();
        all.extend([a, b, keys.receipts_stream("queue-a")]);
        let _: () = conn.del(all).await.unwrap();
    }
}
