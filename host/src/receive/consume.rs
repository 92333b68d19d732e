//! Consume: the loop that reads one queue and hands each entry to a handler task.
//!
//! Owns the reading connection (`XREADGROUP` as this consumer), bounded handler concurrency,
//! when housekeeping runs, reconnecting with backoff, and how a stopping receiver waits for its
//! running handlers (all of them when its queue lost its handler, the shutdown grace at
//! shutdown). It never records an outcome itself: each entry goes through
//! [`Receivers::handle_entry`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{QueueEntry, Receivers, CONSUMER_GROUP};
use crate::fault;
use crate::reconnect::Backoff;

impl Receivers {
    /// Consume `queue` until shutdown: read new entries, reclaim stale ones, move due retries,
    /// trim what every group acknowledged.
    pub async fn consume(self, queue: String, shutdown: CancellationToken) {
        self.consume_until(queue, shutdown.clone(), shutdown).await
    }

    /// [`consume`](Self::consume) until `stop` (the queue lost its handler; a child of
    /// `shutdown`) or shutdown. Stopped by `stop` alone, it lets every running handler call
    /// finish and record its outcome; at shutdown, within the grace period.
    pub(super) async fn consume_until(
        self,
        queue: String,
        stop: CancellationToken,
        shutdown: CancellationToken,
    ) {
        let key = self.keys.stream(&queue);
        let mut backoff = Backoff::new();
        loop {
            match self.ensure_group(&queue).await {
                Ok(()) => break,
                Err(e) => {
                    let give_up = backoff
                        .failed(&stop, |delay| {
                            tracing::error!(%queue, error = %e, retry_in = ?delay, "cannot create consumer group; Redis unavailable?")
                        })
                        .await;
                    if give_up {
                        return;
                    }
                }
            }
        }
        let _receiving = self.receiving_guard(&queue);
        tracing::info!(%queue, consumer = %self.consumer, "receiver started");
        let permits = Arc::new(Semaphore::new(self.settings.receiver_concurrency));
        let mut reader: Option<redis::aio::MultiplexedConnection> = None;
        let mut last_housekeeping = Instant::now() - Duration::from_secs(3600);
        let mut tasks = tokio::task::JoinSet::new();
        while !stop.is_cancelled() {
            while tasks.try_join_next().is_some() {}
            if last_housekeeping.elapsed()
                >= (self.settings.receiver_lease / 4).min(Duration::from_secs(5))
            {
                last_housekeeping = Instant::now();
                if let Err(e) = self.housekeeping(&queue, &permits, &mut tasks).await {
                    tracing::warn!(%queue, error = %e, "receiver housekeeping failed");
                }
            }
            if reader.is_none() {
                match self.redis_client.get_multiplexed_async_connection().await {
                    Ok(c) => reader = Some(c),
                    Err(e) => {
                        let give_up = backoff
                            .failed_with(fault::redis_blip(&e), &stop, |_| {
                                tracing::error!(%queue, error = %e, "receiver cannot reach Redis; retrying")
                            })
                            .await;
                        if give_up {
                            break;
                        }
                        continue;
                    }
                }
            }
            let Some(connection) = reader.as_mut() else {
                continue;
            };
            let available = permits.available_permits().max(1);
            let opts = StreamReadOptions::default()
                .group(CONSUMER_GROUP, &self.consumer)
                .count(available)
                .block(200);
            let keys = [&key];
            let read: redis::RedisResult<Option<StreamReadReply>> = tokio::select! {
                _ = stop.cancelled() => break,
                r = connection.xread_options(&keys, &[">"], &opts) => r,
            };
            match read {
                Ok(Some(reply)) => {
                    if backoff.succeeded() {
                        tracing::info!(%queue, "receiver reads the queue again");
                    }
                    for stream in reply.keys {
                        for id in &stream.ids {
                            self.spawn_handler(
                                &queue,
                                QueueEntry::from_stream(id),
                                &permits,
                                &mut tasks,
                            )
                            .await;
                        }
                    }
                }
                Ok(None) => {
                    if backoff.succeeded() {
                        tracing::info!(%queue, "receiver reads the queue again");
                    }
                }
                Err(e) => {
                    reader = None;
                    if e.code() == Some("NOGROUP") {
                        // The stream was deleted under us: recreate it and the group.
                        let _ = self.ensure_group(&queue).await;
                    }
                    let blip = fault::redis_blip(&e);
                    if let Some(blip) = blip {
                        blip.count_retry("receiver_read");
                    }
                    let give_up = backoff
                        .failed_with(blip, &stop, |_| {
                            tracing::error!(%queue, error = %e, "reading the queue failed; retrying")
                        })
                        .await;
                    if give_up {
                        break;
                    }
                }
            }
        }
        // Let running handlers finish: all of them when only this queue stops (each call is
        // bounded by its plugin's limits), within the grace period at shutdown. Unfinished
        // entries stay pending and are reclaimed by a consumer after the lease.
        let finished = async { while tasks.join_next().await.is_some() {} };
        tokio::pin!(finished);
        let drained = !shutdown.is_cancelled()
            && tokio::select! {
                _ = &mut finished => true,
                _ = shutdown.cancelled() => false,
            };
        if !drained {
            let _ = tokio::time::timeout(self.settings.shutdown_grace, finished).await;
        }
        tracing::info!(%queue, "receiver stopped");
    }

    /// Handle `entry` on its own task once a concurrency permit is free.
    pub(super) async fn spawn_handler(
        &self,
        queue: &str,
        entry: QueueEntry,
        permits: &Arc<Semaphore>,
        tasks: &mut tokio::task::JoinSet<()>,
    ) {
        // The semaphore is never closed, so acquiring only waits.
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let me = self.clone();
        let queue = queue.to_string();
        tasks.spawn(async move {
            me.handle_entry(&queue, entry).await;
            drop(permit);
        });
    }
}
