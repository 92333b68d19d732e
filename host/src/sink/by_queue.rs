//! Sink per queue: hands each queue's entries to the sink its `[queues."NAME"] sink` names.
//!
//! Owns the choice of sink kind per entry, from the routes in force at each batch (so a
//! reloaded `routes.toml` moves a queue to another sink from the next batch on), splitting a
//! batch by kind, running the parts side by side and putting the results back in input order.
//! The dispatcher sees one [`Sink`]; a new broker is one new module and one arm here. It never
//! builds a key or a job itself.

use std::sync::Arc;

use arc_swap::ArcSwap;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::{BullmqSink, Enqueue, EnqueueResult, RedisSink, Sink, SinkError};
use crate::config::{RoutesFile, Settings, SinkKind};

/// Every sink kind, on the host's Redis, chosen per queue.
#[derive(Clone)]
pub struct QueueSinks {
    routes: Arc<ArcSwap<RoutesFile>>,
    streams: RedisSink,
    bullmq: BullmqSink,
}

impl QueueSinks {
    /// Connect to Redis (`REDIS_URL`; one attempt, the caller retries) and prepare every sink
    /// kind over that one connection; each batch reads the queues' sinks from `routes`.
    pub async fn connect(
        settings: &Settings,
        routes: Arc<ArcSwap<RoutesFile>>,
    ) -> Result<Self, SinkError> {
        let streams = RedisSink::from_settings(settings).await?;
        let bullmq = BullmqSink::new(
            streams.connection().clone(),
            streams.keys().clone(),
            streams.dedupe_ttl_secs(),
            settings.dispatch_concurrency,
            routes.clone(),
        )
        .await?
        .waiting_for_replicas(settings.redis_wait_replicas);
        Ok(Self {
            routes,
            streams,
            bullmq,
        })
    }

    /// Hand off every item to its queue's sink; one result per item, in input order.
    pub async fn enqueue_all(&self, items: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        let routes = self.routes.load_full();
        let kinds: Vec<SinkKind> = items.iter().map(|i| routes.sink_of(i.queue)).collect();
        if kinds.iter().all(|k| *k == SinkKind::Streams) {
            return self.streams.enqueue_with(items, &routes).await;
        }
        if kinds.iter().all(|k| *k == SinkKind::Bullmq) {
            return self.bullmq.enqueue_with(items, &routes).await;
        }
        let pick = |kind: SinkKind| -> (Vec<usize>, Vec<Enqueue<'_>>) {
            kinds
                .iter()
                .enumerate()
                .filter(|(_, k)| **k == kind)
                .map(|(i, _)| (i, items[i].clone()))
                .unzip()
        };
        let (streams_at, streams_items) = pick(SinkKind::Streams);
        let (bullmq_at, bullmq_items) = pick(SinkKind::Bullmq);
        let (streams_results, bullmq_results) = futures::join!(
            self.streams.enqueue_with(&streams_items, &routes),
            self.bullmq.enqueue_with(&bullmq_items, &routes)
        );
        let mut results: Vec<Option<EnqueueResult>> = vec![None; items.len()];
        for (at, result) in streams_at
            .into_iter()
            .zip(streams_results)
            .chain(bullmq_at.into_iter().zip(bullmq_results))
        {
            results[at] = Some(result);
        }
        results
            .into_iter()
            .zip(items)
            .map(|(result, item)| {
                result.unwrap_or_else(|| {
                    EnqueueResult::Failed(format!(
                        "event {} to {}: its sink returned no result",
                        item.event.id, item.queue
                    ))
                })
            })
            .collect()
    }
}

impl Sink for QueueSinks {
    fn name(&self) -> &str {
        "redis (streams, bullmq)"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        QueueSinks::enqueue_all(self, items).boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        self.streams.ping().boxed()
    }
}
