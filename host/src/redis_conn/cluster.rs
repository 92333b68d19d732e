//! A Redis Cluster connection that replaces itself when it stops answering.
//!
//! The cluster client's connection (`redis::cluster_async::ClusterConnection`) drives every
//! request through one background task that also refreshes the slot map. After a primary
//! failover under load that task was seen to stop answering for good: every later request on
//! the connection timed out, for minutes, while a connection made afresh from the same client
//! answered at once (the receivers' claims, outcomes and housekeeping all stalled until the
//! receiver lease let another consumer take their entries). [`ClusterConn`] keeps the current
//! connection behind an [`ArcSwap`]: a request that times out makes a fresh connection take
//! its place in the background (one replacement at a time, at most one per
//! [`REPLACE_AT_MOST_EVERY`], each given [`REPLACE_CONNECT_LIMIT`]), and every clone of the
//! handle sends its next request on the new one. Requests in flight on the old
//! connection finish or time out there; nothing is resent (the caller decides, as after any
//! timeout: a timeout is a blip, see [`crate::fault`]).
//!
//! Never retries a request itself, and never replaces a connection because of an error the
//! server answered (`MOVED`, `READONLY`, a script error): the client follows those.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisResult, Value};

/// The shortest time between two replacements of one connection: a cluster that is really
/// away is not reconnected at the pace of its callers' timeouts.
pub const REPLACE_AT_MOST_EVERY: Duration = Duration::from_secs(1);

/// How long making a fresh connection may take: one that hangs never holds the replacement
/// back for good.
pub const REPLACE_CONNECT_LIMIT: Duration = Duration::from_secs(10);

/// A handle on a cluster connection that is replaced by a fresh one when a request on it times
/// out (see the module comment). Cheap to clone; every clone shares the connection in use.
#[derive(Clone)]
pub struct ClusterConn {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    /// The config a fresh connection is made with (`None`: the client's).
    config: Option<ClusterConfig>,
    current: ArcSwap<ClusterConnection>,
    /// When the connection was last replaced; held while a replacement is being made.
    replacing: Arc<tokio::sync::Mutex<Option<Instant>>>,
    /// Replacements so far.
    replaced: AtomicU64,
}

impl ClusterConn {
    /// Connect through `client` (with `config`, or the client's own settings).
    pub async fn connect(
        client: ClusterClient,
        config: Option<ClusterConfig>,
    ) -> RedisResult<Self> {
        let first = new_connection(&client, config.as_ref()).await?;
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                config,
                current: ArcSwap::from_pointee(first),
                replacing: Arc::new(tokio::sync::Mutex::new(None)),
                replaced: AtomicU64::new(0),
            }),
        })
    }

    /// How many times the connection was replaced after a request on it timed out.
    pub fn replacements(&self) -> u64 {
        self.shared.replaced.load(Ordering::Relaxed)
    }

    /// Send one command on the current connection.
    pub async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let used = self.shared.current.load_full();
        let result = (*used).clone().req_packed_command(cmd).await;
        self.after(&used, &result);
        result
    }

    /// Send `count` replies' worth of `pipeline` (from `offset`) on the current connection.
    pub async fn commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let used = self.shared.current.load_full();
        let result = (*used)
            .clone()
            .req_packed_commands(pipeline, offset, count)
            .await;
        self.after(&used, &result);
        result
    }

    /// The database of the connection (always 0 on a cluster).
    pub fn db(&self) -> i64 {
        self.shared.current.load().get_db()
    }

    /// After a request on `used`: when it timed out, replace `used` in the background (the
    /// caller gets its error at once) unless another request already did, a replacement is
    /// being made, or the last was made less than [`REPLACE_AT_MOST_EVERY`] ago.
    fn after<T>(&self, used: &Arc<ClusterConnection>, result: &RedisResult<T>) {
        let Err(error) = result else { return };
        if !error.is_timeout() {
            return;
        }
        let Ok(mut last) = Arc::clone(&self.shared.replacing).try_lock_owned() else {
            return;
        };
        if !Arc::ptr_eq(&self.shared.current.load(), used)
            || last.is_some_and(|at| at.elapsed() < REPLACE_AT_MOST_EVERY)
        {
            return;
        }
        *last = Some(Instant::now());
        let shared = Arc::clone(&self.shared);
        let error = error.to_string();
        tokio::spawn(async move {
            // Held until the fresh connection is in place (or could not be made).
            let _replacing = last;
            let fresh = tokio::time::timeout(
                REPLACE_CONNECT_LIMIT,
                new_connection(&shared.client, shared.config.as_ref()),
            )
            .await;
            match fresh {
                Ok(Ok(fresh)) => {
                    shared.current.store(Arc::new(fresh));
                    shared.replaced.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("outbox_redis_cluster_connections_replaced_total")
                        .increment(1);
                    tracing::warn!(%error, "a request on the Redis Cluster connection timed out; the connection is replaced by a fresh one");
                }
                Ok(Err(e)) => {
                    tracing::warn!(%error, reconnect_error = %e, "a request on the Redis Cluster connection timed out and no fresh connection could be made; the next timeout tries again");
                }
                Err(_) => {
                    tracing::warn!(%error, limit = ?REPLACE_CONNECT_LIMIT, "a request on the Redis Cluster connection timed out and a fresh connection was not made in time; the next timeout tries again");
                }
            }
        });
    }
}

async fn new_connection(
    client: &ClusterClient,
    config: Option<&ClusterConfig>,
) -> RedisResult<ClusterConnection> {
    match config {
        Some(config) => {
            client
                .get_async_connection_with_config(config.clone())
                .await
        }
        None => client.get_async_connection().await,
    }
}
