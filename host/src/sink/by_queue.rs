//! Sink per queue: hands each queue's entries to the sink its `[queues."NAME"] sink` names.
//!
//! Owns the choice of sink kind per entry, from the routes in force at each batch (so a
//! reloaded `routes.toml` moves a queue to another sink from the next batch on), splitting a
//! batch by kind, running the parts side by side and putting the results back in input order;
//! and the brokers beyond Redis the settings name (connected at start when their URL is set),
//! with the check of a routes file's destinations on them ([`DestinationCheck`]). The
//! dispatcher sees one [`Sink`]; a new broker is one new module and one arm here. It never
//! builds a key, a job or a message itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::{join_all, BoxFuture};
use futures::FutureExt;

use super::{
    BullmqSink, DestinationCheck, DestinationError, Enqueue, EnqueueResult, NatsSink, RabbitmqSink,
    RedisSink, Sink, SinkError,
};
use crate::config::{RoutesFile, Settings, SinkKind};
use crate::queue::keys::broker_field;

/// Every sink kind, chosen per queue: the Redis ones on the host's Redis, the brokers on
/// theirs.
#[derive(Clone)]
pub struct QueueSinks {
    routes: Arc<ArcSwap<RoutesFile>>,
    streams: RedisSink,
    bullmq: BullmqSink,
    /// Connected when `OUTBOX_NATS_URL` is set.
    nats: Option<NatsSink>,
    /// Connected when `OUTBOX_RABBITMQ_URL` is set.
    rabbitmq: Option<RabbitmqSink>,
    /// `OUTBOX_CLAIM_LEASE_MS`: a JetStream stream must keep message ids at least this long.
    claim_lease: Duration,
}

impl QueueSinks {
    /// Connect to Redis (`REDIS_URL`) and to each broker whose URL the settings name (one
    /// attempt each, the caller retries), and prepare every sink kind; each batch reads the
    /// queues' sinks from `routes`. Whether the routes' destinations exist on the brokers is
    /// [`check_destinations`](DestinationCheck::check_destinations)'s to say.
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
        let nats = match &settings.nats_url {
            Some(url) => Some(NatsSink::connect(url, &settings.redis_prefix).await?),
            None => None,
        };
        let rabbitmq = match &settings.rabbitmq_url {
            Some(url) => Some(RabbitmqSink::connect(url, &settings.redis_prefix).await?),
            None => None,
        };
        Ok(Self {
            routes,
            streams,
            bullmq,
            nats,
            rabbitmq,
            claim_lease: settings.claim_lease,
        })
    }

    /// Hand off every item to its queue's sink; one result per item, in input order.
    pub async fn enqueue_all(&self, items: &[Enqueue<'_>]) -> Vec<EnqueueResult> {
        let routes = self.routes.load_full();
        let kinds: Vec<SinkKind> = items.iter().map(|i| routes.sink_of(i.queue)).collect();
        if let Some(first) = kinds.first() {
            if kinds.iter().all(|k| k == first) {
                return self.enqueue_on(*first, items, &routes).await;
            }
        }
        let parts: Vec<(Vec<usize>, Vec<Enqueue<'_>>)> = SinkKind::ALL
            .iter()
            .map(|kind| {
                kinds
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| *k == kind)
                    .map(|(i, _)| (i, items[i].clone()))
                    .unzip()
            })
            .collect();
        let results = join_all(
            SinkKind::ALL
                .iter()
                .zip(&parts)
                .map(|(kind, (_, part))| self.enqueue_on(*kind, part, &routes)),
        )
        .await;
        let mut in_order: Vec<Option<EnqueueResult>> = vec![None; items.len()];
        for ((at, _), part_results) in parts.iter().zip(results) {
            for (i, result) in at.iter().zip(part_results) {
                in_order[*i] = Some(result);
            }
        }
        in_order
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

    /// Hand off `items`, all on sinks of `kind`.
    async fn enqueue_on(
        &self,
        kind: SinkKind,
        items: &[Enqueue<'_>],
        routes: &RoutesFile,
    ) -> Vec<EnqueueResult> {
        if items.is_empty() {
            return Vec::new();
        }
        match kind {
            SinkKind::Streams => self.streams.enqueue_with(items, routes).await,
            SinkKind::Bullmq => self.bullmq.enqueue_with(items, routes).await,
            SinkKind::Nats => {
                let results = match &self.nats {
                    Some(nats) => nats.enqueue_with(items, routes).await,
                    None => not_connected(items, "nats", "OUTBOX_NATS_URL"),
                };
                self.count_broker_handoffs(kind, items, &results);
                results
            }
            SinkKind::Rabbitmq => {
                let results = match &self.rabbitmq {
                    Some(rabbitmq) => rabbitmq.enqueue_with(items, routes).await,
                    None => not_connected(items, "rabbitmq", "OUTBOX_RABBITMQ_URL"),
                };
                self.count_broker_handoffs(kind, items, &results);
                results
            }
        }
    }

    /// Count a broker batch's hand-offs per queue: in `outbox_broker_messages_total{sink,
    /// queue, outcome}` and, summed over every host for `outbox stats` and the console, in the
    /// queue's hand-off counts hash on Redis (written in the background: a statistic never
    /// holds a batch back, and a lost write only loses a count).
    fn count_broker_handoffs(
        &self,
        kind: SinkKind,
        items: &[Enqueue<'_>],
        results: &[EnqueueResult],
    ) {
        let mut per_queue: BTreeMap<&str, BTreeMap<&'static str, u64>> = BTreeMap::new();
        for (item, result) in items.iter().zip(results) {
            let counts = per_queue.entry(item.queue).or_default();
            let mut add = |field: &'static str| *counts.entry(field).or_default() += 1;
            add(broker_field::PUBLISHED);
            match result {
                EnqueueResult::Added(_) => add(broker_field::CONFIRMED),
                EnqueueResult::AlreadyEnqueued(_) => {
                    add(broker_field::CONFIRMED);
                    add(broker_field::DUPLICATES);
                }
                EnqueueResult::Failed(_) => add(broker_field::FAILED),
                EnqueueResult::Unavailable { .. } => add(broker_field::UNAVAILABLE),
            }
        }
        let keys = self.streams.keys();
        let mut pipe = redis::pipe();
        for (queue, counts) in &per_queue {
            for (field, n) in counts {
                metrics::counter!(
                    "outbox_broker_messages_total",
                    "sink" => kind.as_str(),
                    "queue" => queue.to_string(),
                    "outcome" => *field
                )
                .increment(*n);
                pipe.cmd("HINCRBY")
                    .arg(keys.broker_handoffs(queue))
                    .arg(*field)
                    .arg(*n)
                    .ignore();
            }
        }
        let mut conn = self.streams.connection().clone();
        tokio::spawn(async move {
            if let Err(e) = pipe.query_async::<()>(&mut conn).await {
                tracing::debug!(error = %e, "broker hand-off counts not written");
            }
        });
    }

    /// Check that every sink this host connected answers.
    pub async fn ping(&self) -> Result<(), SinkError> {
        self.streams.ping().await?;
        if let Some(nats) = &self.nats {
            nats.ping().await?;
        }
        if let Some(rabbitmq) = &self.rabbitmq {
            rabbitmq.ping().await?;
        }
        Ok(())
    }

    /// Check the destinations `routes` names on the brokers (see [`DestinationCheck`]).
    pub async fn check_routes(&self, routes: &RoutesFile) -> Result<(), DestinationError> {
        for (queue, spec) in &routes.queues {
            let missing = match spec.sink {
                SinkKind::Nats if self.nats.is_none() => "OUTBOX_NATS_URL",
                SinkKind::Rabbitmq if self.rabbitmq.is_none() => "OUTBOX_RABBITMQ_URL",
                _ => continue,
            };
            return Err(DestinationError::Invalid(format!(
                "[queues.\"{queue}\"] sink = \"{}\": this host started without {missing}; set it and restart",
                spec.sink
            )));
        }
        if let Some(nats) = &self.nats {
            nats.check_routes(routes, self.claim_lease).await?;
        }
        if let Some(rabbitmq) = &self.rabbitmq {
            rabbitmq.check_routes(routes).await?;
        }
        Ok(())
    }
}

/// Every item failed: its queue's broker is not connected (the routes check refuses such a
/// routes file, so only a routes file swapped in without the check gets here).
fn not_connected(items: &[Enqueue<'_>], sink: &str, setting: &str) -> Vec<EnqueueResult> {
    items
        .iter()
        .map(|item| {
            EnqueueResult::Failed(format!(
                "event {} to {}: sink = \"{sink}\" but this host has no {setting}",
                item.event.id, item.queue
            ))
        })
        .collect()
}

impl Sink for QueueSinks {
    fn name(&self) -> &str {
        "queue sinks (redis streams, bullmq, nats, rabbitmq)"
    }

    fn enqueue_all<'a>(&'a self, items: &'a [Enqueue<'a>]) -> BoxFuture<'a, Vec<EnqueueResult>> {
        QueueSinks::enqueue_all(self, items).boxed()
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), SinkError>> {
        QueueSinks::ping(self).boxed()
    }
}

impl DestinationCheck for QueueSinks {
    fn check_destinations<'a>(
        &'a self,
        routes: &'a RoutesFile,
    ) -> BoxFuture<'a, Result<(), DestinationError>> {
        self.check_routes(routes).boxed()
    }
}
