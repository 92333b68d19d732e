//! Enqueue scripts: running a Lua script over hand-offs, pipelined, with results per entry.
//!
//! Owns what every Redis-based sink does the same way: the hand-offs grouped by queue (on a Redis
//! Cluster a pipeline and a script reach one slot, and a queue's keys share its slot; in input
//! order within a queue), in pipelines of up to [`PIPELINE_CHUNK`] hand-offs with at most
//! `concurrency` in flight; a script that takes one hand-off per call ([`Calls::PerEntry`]) gets
//! one `EVALSHA` each, one that takes several of a queue's hand-offs ([`Calls::PerQueue`], a
//! pipeline holding as many as one call takes) one `EVALSHA` per pipeline, replying with one reply
//! per hand-off. Each hand-off's reply is read on its own (an error reply fails its entry only; an
//! error reply to a whole call, or a connection that breaks under a pipeline, fails that pipeline's
//! entries, as [`EnqueueResult::Unavailable`] when it is a blip, while the others keep their
//! results), and `NOSCRIPT` recovery: `EVALSHA` in a pipeline does not fall back to loading the
//! script the way `redis::Script::invoke_async` does for a single call (redis crate 0.32), so the
//! script is loaded again and the entries that got `NOSCRIPT` run once more.
//!
//! The reply convention of every enqueue script, per hand-off: `{1, id}` added, `{0, id}` already
//! there (nothing written), `{-1, error}` refused (nothing written); an added entry's reply may
//! carry more values after the id (what the streams sink trimmed), handed to the sink as they are.
//! It never builds a key or an argument itself: the sink's `args` closure does; the scripts are
//! [`crate::queue`]'s.

use crate::redis_conn::RedisConn;
use futures::stream::{self, StreamExt};
use redis::aio::ConnectionLike;
use redis::Value;

use super::{Enqueue, EnqueueResult, SinkError};
use crate::fault::{self, BlipKind};

/// How many hand-offs go into one pipeline.
pub(super) const PIPELINE_CHUNK: usize = 128;

/// How long a pipeline waits for its replicas to confirm its writes (`WAIT`).
pub(super) const REPLICA_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How an enqueue script takes its hand-offs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Calls {
    /// One hand-off per call (its reply is the hand-off's).
    PerEntry,
    /// Up to `at_most` hand-offs of one queue per call (and per pipeline), replying with an
    /// array of one reply per hand-off, in order.
    PerQueue {
        /// The most hand-offs the script takes in one call.
        at_most: usize,
    },
}

impl Calls {
    /// How many hand-offs go into one pipeline.
    fn pipeline_len(self) -> usize {
        match self {
            Calls::PerEntry => PIPELINE_CHUNK,
            Calls::PerQueue { at_most } => at_most.max(1),
        }
    }
}

/// One enqueue script on one connection.
#[derive(Clone)]
pub(super) struct EnqueueScript {
    conn: RedisConn,
    script: redis::Script,
    calls: Calls,
    /// What the script does, for errors ("the BullMQ add script").
    what: &'static str,
    concurrency: usize,
    /// Replicas that must confirm each pipeline's writes (`WAIT` at its end; 0: none).
    wait_replicas: usize,
}

impl EnqueueScript {
    /// `script`, taking its hand-offs as `calls` says, run over `conn`, `concurrency`
    /// pipelines at once. Call [`load`](Self::load) before the first use.
    pub(super) fn new(
        conn: RedisConn,
        script: redis::Script,
        calls: Calls,
        what: &'static str,
        concurrency: usize,
    ) -> Self {
        Self {
            conn,
            script,
            calls,
            what,
            concurrency: concurrency.max(1),
            wait_replicas: 0,
        }
    }

    /// Make every pipeline end with `WAIT replicas 1000` on the node that ran it: a hand-off is
    /// reported written only once `replicas` replicas have it, so a primary that dies before
    /// replicating loses no hand-off the dispatcher recorded (the others come back as blips and
    /// are handed off again, idempotently). 0: no wait.
    pub(super) fn waiting_for_replicas(mut self, replicas: usize) -> Self {
        self.wait_replicas = replicas;
        self
    }

    /// The connection the script runs on.
    pub(super) fn connection(&self) -> &RedisConn {
        &self.conn
    }

    /// Load the script into Redis (`SCRIPT LOAD`).
    pub(super) async fn load(&self) -> Result<(), SinkError> {
        let mut conn = self.conn.clone();
        self.script
            .prepare_invoke()
            .load_async(&mut conn)
            .await
            .map(|_| ())
            .map_err(|source| SinkError::new(format!("load {} into Redis", self.what), source))
    }

    /// Run the script over every item: `args` adds the `numkeys`, keys and arguments of one
    /// call after `EVALSHA sha`, for one item ([`Calls::PerEntry`]) or for several items of
    /// one queue ([`Calls::PerQueue`]). Results come back in input order.
    pub(super) async fn run_all<'a, F>(&self, items: &[Enqueue<'a>], args: &F) -> Vec<EnqueueResult>
    where
        F: Fn(&[Enqueue<'a>], &mut redis::Pipeline) + Sync,
    {
        self.run_all_reporting(items, args, &|_, _| {}).await
    }

    /// [`run_all`](Self::run_all), handing the values an added entry's reply carries after its
    /// id to `extra`, with the item.
    pub(super) async fn run_all_reporting<'a, F, X>(
        &self,
        items: &[Enqueue<'a>],
        args: &F,
        extra: &X,
    ) -> Vec<EnqueueResult>
    where
        F: Fn(&[Enqueue<'a>], &mut redis::Pipeline) + Sync,
        X: Fn(&Enqueue<'a>, &[Value]) + Sync,
    {
        // Which items go into each pipeline: the items of one queue, in input order (a queue's
        // keys share its slot on a Redis Cluster, and a per-queue script takes one queue's).
        // Results are put back in input order.
        let mut by_queue: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
        for (i, item) in items.iter().enumerate() {
            by_queue.entry(item.queue).or_default().push(i);
        }
        let pipelines: Vec<Vec<usize>> = by_queue
            .into_values()
            .flat_map(|positions| {
                positions
                    .chunks(self.calls.pipeline_len())
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        let runs = pipelines.into_iter().map(|positions| async move {
            let chunk: Vec<Enqueue<'a>> = positions.iter().map(|&i| items[i].clone()).collect();
            let results = self.run_chunk(&chunk, args, extra).await;
            (positions, results)
        });
        let done: Vec<(Vec<usize>, Vec<EnqueueResult>)> = stream::iter(runs)
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut results: Vec<Option<EnqueueResult>> = vec![None; items.len()];
        for (positions, chunk_results) in done {
            for (i, result) in positions.into_iter().zip(chunk_results) {
                results[i] = Some(result);
            }
        }
        results
            .into_iter()
            .zip(items)
            .map(|(result, item)| {
                result.unwrap_or_else(|| {
                    EnqueueResult::Failed(format!(
                        "event {} to {}: no reply",
                        item.event.id, item.queue
                    ))
                })
            })
            .collect()
    }

    async fn run_chunk<'a, F, X>(
        &self,
        chunk: &[Enqueue<'a>],
        args: &F,
        extra: &X,
    ) -> Vec<EnqueueResult>
    where
        F: Fn(&[Enqueue<'a>], &mut redis::Pipeline) + Sync,
        X: Fn(&Enqueue<'a>, &[Value]) + Sync,
    {
        let mut results = self.run_pipeline(chunk, args, extra).await;
        let missing: Vec<usize> = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.blip().is_some_and(|b| b.kind == BlipKind::NoScript))
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() {
            return results;
        }
        // Redis lost its scripts (restart, SCRIPT FLUSH): load it again and run those once more.
        if let Err(e) = self.load().await {
            tracing::warn!(error = %e, "could not reload {}", self.what);
            return results;
        }
        let again: Vec<Enqueue<'a>> = missing.iter().map(|&i| chunk[i].clone()).collect();
        for (i, result) in missing
            .into_iter()
            .zip(self.run_pipeline(&again, args, extra).await)
        {
            results[i] = result;
        }
        results
    }

    async fn run_pipeline<'a, F, X>(
        &self,
        chunk: &[Enqueue<'a>],
        args: &F,
        extra: &X,
    ) -> Vec<EnqueueResult>
    where
        F: Fn(&[Enqueue<'a>], &mut redis::Pipeline) + Sync,
        X: Fn(&Enqueue<'a>, &[Value]) + Sync,
    {
        let mut pipe = redis::pipe();
        let hash = self.script.get_hash();
        let calls = match self.calls {
            Calls::PerEntry => {
                for item in chunk {
                    args(std::slice::from_ref(item), pipe.cmd("EVALSHA").arg(hash));
                }
                chunk.len()
            }
            Calls::PerQueue { .. } => {
                args(chunk, pipe.cmd("EVALSHA").arg(hash));
                1
            }
        };
        let waits = self.wait_replicas > 0;
        if waits {
            // No key: the pipeline still goes to the node of its hand-offs, which answers it.
            pipe.cmd("WAIT")
                .arg(self.wait_replicas)
                .arg(crate::numeric::millis(REPLICA_WAIT));
        }
        let expected = calls + usize::from(waits);
        let mut conn = self.conn.clone();
        // Not `query_async`: it turns the first error reply into an error for the whole pipeline.
        match conn.req_packed_commands(&pipe, 0, expected).await {
            Ok(mut replies) if replies.len() == expected => {
                let confirmed = match waits.then(|| replies.pop()).flatten() {
                    None => None,
                    Some(Value::Int(n)) => Some(usize::try_from(n).unwrap_or(0)),
                    Some(_) => Some(0),
                };
                let replies = match self.calls {
                    Calls::PerEntry => replies,
                    Calls::PerQueue { .. } => match replies.pop() {
                        Some(Value::Array(each)) if each.len() == chunk.len() => each,
                        Some(Value::ServerError(e)) => {
                            let e = redis::RedisError::from(e);
                            return chunk.iter().map(|item| redis_error(item, &e)).collect();
                        }
                        other => {
                            return chunk
                                .iter()
                                .map(|item| {
                                    EnqueueResult::Failed(format!(
                                        "event {} to {}: unexpected reply from {} for {} hand-offs: {other:?}",
                                        item.event.id,
                                        item.queue,
                                        self.what,
                                        chunk.len()
                                    ))
                                })
                                .collect()
                        }
                    },
                };
                chunk
                    .iter()
                    .zip(replies)
                    .map(|(item, reply)| {
                        let result = self.parse_reply(item, reply, extra);
                        match confirmed {
                            Some(n) if n < self.wait_replicas && result.stream_id().is_some() => {
                                self.not_replicated(item, n)
                            }
                            _ => result,
                        }
                    })
                    .collect()
            }
            Ok(replies) => chunk
                .iter()
                .map(|item| {
                    EnqueueResult::Failed(format!(
                        "event {} to {}: {} replies to a pipeline of {}",
                        item.event.id,
                        item.queue,
                        replies.len(),
                        chunk.len()
                    ))
                })
                .collect(),
            Err(e) => chunk.iter().map(|item| redis_error(item, &e)).collect(),
        }
    }

    /// A hand-off written but confirmed by only `confirmed` of the replicas it must reach: a
    /// blip (the primary may lose it), handed off again later.
    fn not_replicated(&self, item: &Enqueue<'_>, confirmed: usize) -> EnqueueResult {
        EnqueueResult::Unavailable {
            error: format!(
                "event {} to {}: written, but {confirmed} of the {} replicas OUTBOX_REDIS_WAIT_REPLICAS asks for confirmed it within {} ms",
                item.event.id,
                item.queue,
                self.wait_replicas,
                REPLICA_WAIT.as_millis()
            ),
            blip: fault::Blip {
                service: fault::Service::Redis,
                kind: BlipKind::Timeout,
            },
        }
    }

    fn parse_reply<'a, X>(&self, item: &Enqueue<'a>, reply: Value, extra: &X) -> EnqueueResult
    where
        X: Fn(&Enqueue<'a>, &[Value]),
    {
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::SimpleString(s) => s.clone(),
            other => format!("{other:?}"),
        };
        match reply {
            Value::Array(parts) if parts.len() > 2 && parts[0] == Value::Int(1) => {
                extra(item, &parts[2..]);
                EnqueueResult::Added(text(&parts[1]))
            }
            Value::Array(parts) if parts.len() == 2 => match &parts[0] {
                Value::Int(1) => EnqueueResult::Added(text(&parts[1])),
                Value::Int(0) => EnqueueResult::AlreadyEnqueued(text(&parts[1])),
                _ => EnqueueResult::Failed(format!(
                    "event {} to {}: refused: {}",
                    item.event.id,
                    item.queue,
                    text(&parts[1])
                )),
            },
            Value::ServerError(e) => redis_error(item, &e.into()),
            other => EnqueueResult::Failed(format!(
                "event {} to {}: unexpected reply from {}: {other:?}",
                item.event.id, item.queue, self.what
            )),
        }
    }
}

/// A Redis error for one entry: a blip leaves it [`EnqueueResult::Unavailable`], anything else
/// is a refusal of the entry.
fn redis_error(item: &Enqueue<'_>, error: &redis::RedisError) -> EnqueueResult {
    let message = format!("event {} to {}: redis: {error}", item.event.id, item.queue);
    match fault::redis_blip(error) {
        Some(blip) => EnqueueResult::Unavailable {
            error: message,
            blip,
        },
        None => EnqueueResult::Failed(message),
    }
}
