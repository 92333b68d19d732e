//! Redis connections: what `REDIS_URL` names (one node, or a Redis Cluster) and how every
//! connection of the host is made.
//!
//! Owns [`RedisTarget`] (the parsed `REDIS_URL`: `redis://host:port/db` for one node, the
//! default; `redis+cluster://host:port,host:port/` or a comma-separated list of `redis://` URLs
//! for a cluster, whose listed nodes are seeds the client discovers the rest from) and
//! [`RedisConn`], the one connection type the sinks, receivers, capabilities, console and CLI
//! use: a shared reconnecting connection on one node, a dedicated one for blocking reads, or a
//! cluster connection (which routes each command, script and single-slot pipeline to the
//! slot's primary and follows `MOVED`/`ASK` itself, replaced by a fresh one when a request on
//! it times out: [`ClusterConn`]). Timeouts are [`crate::reconnect`]'s on both. A `redis://`
//! URL that points at a cluster node is refused when the shared connection is made: every
//! command on another node's slot would fail with `MOVED`. It takes plain values
//! (a URL, a key prefix), never the settings; it never builds a key (that is [`crate::queue`])
//! and never shows a password (see [`RedisTarget::redacted`]).

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

mod cluster;

pub use cluster::{ClusterConn, REPLACE_AT_MOST_EVERY, REPLACE_CONNECT_LIMIT};

use crate::reconnect::{
    redis_manager_config, redis_reader_config, REDIS_CONNECT_TIMEOUT, REDIS_RESPONSE_TIMEOUT,
};

/// The URL scheme of a cluster.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// Retries of the cluster client within one request (redirections, reconnects), each waiting
/// 50 to 500 ms: a failover of a few seconds is ridden out inside the 5 s response timeout,
/// the rest is a blip for the caller.
const CLUSTER_RETRIES: u32 = 6;

/// A `REDIS_URL` the host cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("REDIS_URL {url:?}: {message}")]
pub struct RedisUrlError {
    /// The URL, its passwords hidden.
    pub url: String,
    /// What is wrong with it.
    pub message: String,
}

impl From<RedisUrlError> for redis::RedisError {
    fn from(e: RedisUrlError) -> Self {
        redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "unusable REDIS_URL",
            e.to_string(),
        ))
    }
}

/// Whether `redis_url` names a Redis Cluster (`redis+cluster://`, or a comma-separated list of
/// nodes), without parsing it further.
pub fn names_cluster(redis_url: &str) -> bool {
    let url = redis_url.trim();
    url.starts_with(CLUSTER_SCHEME) || url.contains(',')
}

/// What `REDIS_URL` names.
#[derive(Clone)]
pub enum RedisTarget {
    /// One Redis server.
    Single(redis::Client),
    /// A Redis Cluster, reached through these seed nodes.
    Cluster {
        /// The client (it discovers the cluster from the seeds on each connection).
        client: redis::cluster::ClusterClient,
        /// The seed nodes, as `host:port`.
        seeds: Vec<String>,
    },
}

impl std::fmt::Debug for RedisTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisTarget::Single(client) => f
                .debug_tuple("Single")
                .field(&client.get_connection_info().addr)
                .finish(),
            RedisTarget::Cluster { seeds, .. } => {
                f.debug_struct("Cluster").field("seeds", seeds).finish()
            }
        }
    }
}

impl RedisTarget {
    /// Parse `REDIS_URL`: `redis://[user[:password]@]host[:port][/db]` (one node),
    /// `redis+cluster://[user[:password]@]host:port[,host:port...][/]` or several `redis://`
    /// URLs separated by commas (a cluster; every node with the same credentials, database 0).
    pub fn parse(url: &str) -> Result<Self, RedisUrlError> {
        let refuse = |message: String| RedisUrlError {
            url: redact_url(url),
            message,
        };
        let url = url.trim();
        if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            let (credentials, hosts) = match rest.rsplit_once('@') {
                Some((credentials, hosts)) => (Some(credentials), hosts),
                None => (None, rest),
            };
            let hosts = hosts.trim_end_matches('/');
            if hosts.contains('/') {
                return Err(refuse(
                    "a Redis Cluster has only database 0: remove the database from the URL".into(),
                ));
            }
            let seeds: Vec<String> = hosts
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(str::to_string)
                .collect();
            if seeds.is_empty() {
                return Err(refuse(
                    "name at least one node: redis+cluster://host:port[,host:port...]".into(),
                ));
            }
            let urls = seeds
                .iter()
                .map(|seed| match credentials {
                    Some(c) => format!("redis://{c}@{seed}/"),
                    None => format!("redis://{seed}/"),
                })
                .collect();
            return Self::cluster(urls, seeds).map_err(refuse);
        }
        if url.contains(',') {
            let urls: Vec<String> = url.split(',').map(|u| u.trim().to_string()).collect();
            let mut seeds = Vec::new();
            for u in &urls {
                let info = redis::Client::open(u.as_str())
                    .map_err(|e| refuse(format!("{}: {e}", redact_url(u))))?;
                let info = info.get_connection_info();
                if info.redis.db != 0 {
                    return Err(refuse(
                        "a Redis Cluster has only database 0: remove the database from the URLs"
                            .into(),
                    ));
                }
                seeds.push(info.addr.to_string());
            }
            return Self::cluster(urls, seeds).map_err(refuse);
        }
        if url.starts_with("rediss://") || url.starts_with("rediss+cluster://") {
            return Err(refuse(
                "TLS (rediss://) is not supported: reach Redis over a TLS tunnel, or on a trusted network".into(),
            ));
        }
        redis::Client::open(url)
            .map(RedisTarget::Single)
            .map_err(|e| refuse(e.to_string()))
    }

    /// The Redis `redis_url` (`REDIS_URL`) names, [parsed](Self::parse) and checked against
    /// the key prefix `redis_prefix` (`OUTBOX_REDIS_PREFIX`): on a cluster the prefix must not
    /// hold `{` or `}` (it would become the hash tag of every key, putting all queues in one
    /// slot or splitting a queue's keys).
    pub fn with_key_prefix(redis_url: &str, redis_prefix: &str) -> Result<Self, RedisUrlError> {
        let target = Self::parse(redis_url)?;
        if target.is_cluster() && redis_prefix.contains(['{', '}']) {
            return Err(RedisUrlError {
                url: redact_url(redis_url),
                message: format!(
                    "OUTBOX_REDIS_PREFIX {redis_prefix:?} holds a '{{' or '}}': on a Redis Cluster the host puts its own hash tags in the keys; use a prefix without braces"
                ),
            });
        }
        Ok(target)
    }

    fn cluster(urls: Vec<String>, seeds: Vec<String>) -> Result<Self, String> {
        let client = redis::cluster::ClusterClientBuilder::new(urls)
            .connection_timeout(REDIS_CONNECT_TIMEOUT)
            .response_timeout(REDIS_RESPONSE_TIMEOUT)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(50)
            .max_retry_wait(500)
            .build()
            .map_err(|e| e.to_string())?;
        Ok(RedisTarget::Cluster { client, seeds })
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisTarget::Cluster { .. })
    }

    /// The shared connection: one node's reconnecting connection (refused when the node is a
    /// cluster node), or a cluster connection.
    pub async fn shared(&self) -> redis::RedisResult<RedisConn> {
        match self {
            RedisTarget::Single(client) => {
                let mut conn =
                    ConnectionManager::new_with_config(client.clone(), redis_manager_config())
                        .await?;
                refuse_cluster_node(&mut conn).await?;
                Ok(RedisConn::Managed(conn))
            }
            RedisTarget::Cluster { client, .. } => Ok(RedisConn::Cluster(
                ClusterConn::connect(client.clone(), None).await?,
            )),
        }
    }

    /// A connection of its own for blocking reads waiting up to `block` (a blocked read holds
    /// its connection, so it never shares one).
    pub async fn reader(&self, block: Duration) -> redis::RedisResult<RedisConn> {
        match self {
            RedisTarget::Single(client) => Ok(RedisConn::Dedicated(
                client
                    .get_multiplexed_async_connection_with_config(&redis_reader_config(block))
                    .await?,
            )),
            RedisTarget::Cluster { client, .. } => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(REDIS_CONNECT_TIMEOUT)
                    .set_response_timeout(block + REDIS_RESPONSE_TIMEOUT);
                Ok(RedisConn::Cluster(
                    ClusterConn::connect(client.clone(), Some(config)).await?,
                ))
            }
        }
    }

    /// Whether Redis answers a `PING` on a connection of its own (what readiness checks).
    pub async fn ping(&self) -> redis::RedisResult<()> {
        let mut conn = self.reader(Duration::ZERO).await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await?;
        Ok(())
    }

    /// The target for logs: the node, or the seeds, never a password.
    pub fn redacted(&self) -> String {
        match self {
            RedisTarget::Single(client) => {
                format!("redis://{}", client.get_connection_info().addr)
            }
            RedisTarget::Cluster { seeds, .. } => format!("{CLUSTER_SCHEME}{}", seeds.join(",")),
        }
    }
}

/// The shared connection to the Redis `redis_url` names, for keys under `redis_prefix`
/// ([`RedisTarget::with_key_prefix`], then [`RedisTarget::shared`]): an unusable `REDIS_URL`
/// is an `InvalidClientConfig` error.
pub async fn connect_shared(redis_url: &str, redis_prefix: &str) -> redis::RedisResult<RedisConn> {
    RedisTarget::with_key_prefix(redis_url, redis_prefix)?
        .shared()
        .await
}

/// Refuse a single-node connection whose server is a cluster node.
async fn refuse_cluster_node(conn: &mut ConnectionManager) -> redis::RedisResult<()> {
    let info: String = redis::cmd("INFO").arg("cluster").query_async(conn).await?;
    if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "REDIS_URL points at a Redis Cluster node",
            "use redis+cluster://host:port (any node of the cluster) so that each key goes to the node owning its slot".to_string(),
        )));
    }
    Ok(())
}

/// `url` with every password replaced by `***` (one per node in a list).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    if scheme.ends_with("cluster") || !rest.contains(',') {
        return format!("{scheme}://{}", redact_authority(rest));
    }
    url.split(',')
        .map(|one| match one.trim().split_once("://") {
            Some((scheme, rest)) => format!("{scheme}://{}", redact_authority(rest)),
            None => one.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn redact_authority(rest: &str) -> String {
    match rest.rsplit_once('@') {
        Some((credentials, hosts)) => match credentials.split_once(':') {
            Some((user, _)) => format!("{user}:***@{hosts}"),
            None => format!("{credentials}@{hosts}"),
        },
        None => rest.to_string(),
    }
}

/// One Redis connection of the host: shared and reconnecting on one node, dedicated to
/// blocking reads on one node, or a cluster connection. Cheap to clone (each is a handle).
#[derive(Clone)]
pub enum RedisConn {
    /// One node, shared, reconnecting (`ConnectionManager`).
    Managed(ConnectionManager),
    /// One node, a connection of its own (blocking reads).
    Dedicated(MultiplexedConnection),
    /// A Redis Cluster: each command to its slot's primary, on a connection replaced by a
    /// fresh one when a request on it times out ([`ClusterConn`]).
    Cluster(ClusterConn),
}

impl RedisConn {
    /// Whether this connection reaches a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConn::Cluster(_))
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Managed(c) => c.req_packed_command(cmd),
            RedisConn::Dedicated(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => Box::pin(c.command(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Managed(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Dedicated(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => Box::pin(c.commands(pipeline, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Managed(c) => c.get_db(),
            RedisConn::Dedicated(c) => c.get_db(),
            RedisConn::Cluster(c) => c.db(),
        }
    }
}

/// The shared connection the unit tests that talk to Redis use: `REDIS_URL`, or the local
/// server.
#[cfg(test)]
pub(crate) async fn test_connection() -> RedisConn {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string());
    RedisTarget::parse(&url).unwrap().shared().await.unwrap()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn redis_url_accepts_a_cluster_and_a_single_node_stays_the_default() {
        assert!(!RedisTarget::parse("redis://127.0.0.1:6379/")
            .unwrap()
            .is_cluster());
        assert!(!RedisTarget::parse("redis://127.0.0.1:6379/3")
            .unwrap()
            .is_cluster());
        let cluster = RedisTarget::parse("redis+cluster://127.0.0.1:7001,127.0.0.1:7002/").unwrap();
        assert!(cluster.is_cluster());
        assert_eq!(
            cluster.redacted(),
            "redis+cluster://127.0.0.1:7001,127.0.0.1:7002"
        );
        let one_seed = RedisTarget::parse("redis+cluster://:secret@127.0.0.1:7001").unwrap();
        assert!(one_seed.is_cluster());
        assert!(!format!("{one_seed:?}").contains("secret"));
        let list = RedisTarget::parse("redis://127.0.0.1:7001, redis://127.0.0.1:7002").unwrap();
        assert!(list.is_cluster());
    }

    #[test]
    fn redis_urls_a_cluster_cannot_serve_are_refused_without_their_passwords() {
        let err = RedisTarget::parse("redis+cluster://:hunter2@127.0.0.1:7001/2").unwrap_err();
        assert!(err.message.contains("only database 0"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err =
            RedisTarget::parse("redis://127.0.0.1:7001/1,redis://127.0.0.1:7002/1").unwrap_err();
        assert!(err.message.contains("only database 0"), "{err}");
        let err = RedisTarget::parse("redis+cluster://").unwrap_err();
        assert!(err.message.contains("at least one node"), "{err}");
        assert!(RedisTarget::parse("rediss://example.com").is_err());
        assert!(RedisTarget::parse("not a url").is_err());
    }

    #[test]
    fn a_cluster_refuses_a_key_prefix_with_braces() {
        let err =
            RedisTarget::with_key_prefix("redis+cluster://127.0.0.1:7001", "app{1}:").unwrap_err();
        assert!(err.message.contains("OUTBOX_REDIS_PREFIX"), "{err}");
        assert!(RedisTarget::with_key_prefix("redis+cluster://127.0.0.1:7001", "app1:").is_ok());
        assert!(RedisTarget::with_key_prefix("redis://127.0.0.1:6379/", "app{1}:").is_ok());
    }

    #[test]
    fn every_password_of_a_url_is_hidden() {
        assert_eq!(
            redact_url("redis://u:p1@a:1,redis://u:p2@b:2"),
            "redis://u:***@a:1,redis://u:***@b:2"
        );
        assert_eq!(
            redact_url("redis+cluster://u:pw@a:1,b:2/"),
            "redis+cluster://u:***@a:1,b:2/"
        );
        assert_eq!(redact_url("redis://a:1/"), "redis://a:1/");
    }
}
