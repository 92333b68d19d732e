//! Shared fixtures for the end-to-end tests in `all/`: a per-test environment over the real
//! PostgreSQL (a fresh database from `sqlx::test`) and the real Redis (a unique key prefix), and
//! a TCP proxy that can cut Redis off and bring it back, and real faults aimed at one test's host
//! only (its Redis connections killed, its PostgreSQL backends terminated or refused).
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]

pub mod broker_fixtures;
pub mod browser;
pub mod bullmq_app;
pub mod dispatcher_process;
mod outage_proxy;

pub use broker_fixtures::{nats_url, rabbitmq_url};
pub use outage_proxy::OutageProxy;

use std::collections::HashMap;
use std::path::Path;

use std::time::Duration;

use outbox_host::config::{Config, RoutesFile, Settings, DEFAULT_ROUTES_TOML};
use outbox_host::dispatch::Dispatcher;
use outbox_host::routing::{RouteRule, RouteTable, RouterHandle};
use outbox_host::sink::RedisSink;
use outbox_host::{publish, Host, NewEvent};
use redis::AsyncCommands;
use sqlx::PgPool;
use tokio::task::JoinHandle;

/// A dispatcher and the receivers of every handler-bound queue of a config, as one host runs
/// them, until [`stop`](Self::stop).
pub struct RunningHost {
    shutdown: tokio_util::sync::CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningHost {
    /// Start them on `env` with `config`: the dispatcher as `<consumer>-dispatch`, the
    /// receivers as consumer `consumer`.
    pub async fn start(
        env: &TestEnv,
        config: &outbox_host::config::Config,
        consumer: &str,
    ) -> Self {
        let live = outbox_host::live_config::LiveConfig::start(config)
            .await
            .unwrap();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let dispatcher = env
            .dispatcher_routed_by(&format!("{consumer}-dispatch"), live.router.clone())
            .await;
        let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
        let receivers = Host::builder()
            .config(config.clone())
            .pool(env.pool.clone())
            .live_config(live)
            .worker_id(consumer)
            .build_receivers()
            .await
            .unwrap();
        for queue in receivers.queues_for_group(None) {
            tasks.push(tokio::spawn(
                receivers.clone().consume(queue, shutdown.clone()),
            ));
        }
        Self { shutdown, tasks }
    }

    /// Shut them down and wait for every task.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Poll `check` every 20 ms until it holds; fail the test naming `what` after `timeout`.
pub async fn wait_for(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redis used by the tests (`REDIS_URL`, default local).
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// The test Redis Cluster (`scripts/redis-cluster.sh`: 3 primaries with a replica each on
/// loopback ports 7101-7106), started on first use unless it runs and is healthy; its
/// `REDIS_URL`.
pub fn redis_cluster_url() -> String {
    static URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    URL.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-cluster.sh");
        let out = std::process::Command::new(&script)
            .output()
            .expect("run scripts/redis-cluster.sh");
        assert!(
            out.status.success(),
            "scripts/redis-cluster.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    })
    .clone()
}

/// Run `scripts/redis-cluster.sh` with `args` (e.g. `kill 7101`, `revive 7101`) on the test
/// cluster; panics unless it succeeds.
pub fn redis_cluster_script(args: &[&str]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-cluster.sh");
    let out = std::process::Command::new(&script)
        .args(args)
        .output()
        .expect("run scripts/redis-cluster.sh");
    assert!(
        out.status.success(),
        "scripts/redis-cluster.sh {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `plugins/dist`: the built plugins (`scripts/build-plugins.sh`).
pub fn dist_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist")
}

/// Path of a built plugin: `name` from `plugins/dist`, or `test/name` for a test plugin.
pub fn plugin_file(name: &str) -> std::path::PathBuf {
    let path = dist_dir().join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: build the plugins with scripts/build-plugins.sh (scripts/test.sh does)",
        path.display()
    );
    path
}

/// `bytes` (a component) with a custom section appended: the same plugin, another file hash.
pub fn another_build_of(bytes: &[u8], tag: &str) -> Vec<u8> {
    let name = b"outbox-test";
    let mut section = vec![name.len() as u8];
    section.extend_from_slice(name);
    section.extend_from_slice(tag.as_bytes());
    assert!(section.len() < 128, "one-byte LEB128 size");
    let mut out = bytes.to_vec();
    out.push(0); // custom section id
    out.push(section.len() as u8);
    out.extend_from_slice(&section);
    out
}

/// A private plugin directory and routes file for one test, so it can replace files freely.
pub struct PluginFixture {
    /// Holds the directory alive.
    pub dir: tempfile::TempDir,
    /// `routes.toml` inside it.
    pub routes_path: std::path::PathBuf,
}

impl PluginFixture {
    /// Copy the named plugins (`name` or `test/name`, stored as `<basename>.wasm`) into a fresh
    /// directory and write `routes_toml` beside them.
    pub fn new(plugins: &[&str], routes_toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        for name in plugins {
            let base = name.rsplit('/').next().unwrap();
            std::fs::copy(plugin_file(name), dir.path().join(format!("{base}.wasm"))).unwrap();
        }
        let routes_path = dir.path().join("routes.toml");
        std::fs::write(&routes_path, routes_toml).unwrap();
        Self { dir, routes_path }
    }

    /// A config for this fixture on top of a test's settings.
    pub fn config(&self, settings: &Settings) -> outbox_host::config::Config {
        let routes = RoutesFile::load(&self.routes_path).expect("fixture routes.toml");
        let mut settings = settings.clone();
        settings.plugin_dir = self.dir.path().to_path_buf();
        outbox_host::config::Config {
            path: Some(self.routes_path.clone()),
            routes,
            settings,
        }
    }

    /// Replace a file the way editors and deploy tools do: write a temp file, rename it over.
    pub fn replace(&self, file_name: &str, bytes: &[u8]) {
        let tmp = self.dir.path().join(format!(".{file_name}.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(file_name)).unwrap();
    }
}

/// One test's world: its own database and its own Redis key prefix.
pub struct TestEnv {
    /// The test database.
    pub pool: PgPool,
    /// Settings tuned for tests (short intervals, small backoff).
    pub settings: Settings,
    /// Redis key prefix unique to this test.
    pub prefix: String,
    /// A direct Redis connection for assertions.
    pub redis: outbox_host::redis_conn::RedisConn,
}

impl TestEnv {
    /// Wrap a `sqlx::test` pool, on the Redis of `REDIS_URL`.
    pub async fn new(pool: PgPool) -> Self {
        Self::on_redis(pool, redis_url()).await
    }

    /// Wrap a `sqlx::test` pool, on the test Redis Cluster ([`redis_cluster_url`]).
    pub async fn on_cluster(pool: PgPool) -> Self {
        Self::on_redis(pool, redis_cluster_url()).await
    }

    /// Wrap a `sqlx::test` pool, on the Redis `redis_url` names.
    pub async fn on_redis(pool: PgPool, redis_url: String) -> Self {
        let prefix = format!("test:{}:", uuid::Uuid::new_v4().simple());
        let settings = Settings {
            redis_url: redis_url.clone(),
            redis_prefix: prefix.clone(),
            dispatch_interval: Duration::from_millis(100),
            dispatch_batch_size: 100,
            claim_lease: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(5),
            backoff: vec![Duration::from_secs(1), Duration::from_secs(2)],
            http_addr: String::new(),
            plugin_dir: dist_dir(),
            ..Settings::default()
        };
        let redis = outbox_host::redis_conn::RedisTarget::parse(&redis_url)
            .expect("REDIS_URL")
            .shared()
            .await
            .expect("Redis at REDIS_URL must be running for the tests");
        Self {
            pool,
            settings,
            prefix,
            redis,
        }
    }

    /// The default routing table of `routes.toml`.
    pub fn default_table() -> RouteTable {
        RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml"))
            .expect("default routes.toml")
            .route_table()
    }

    /// The default table plus extra rules.
    pub fn table_with(extra: &[(&str, &[&str])]) -> RouteTable {
        let mut rules = Self::default_table().rules().to_vec();
        for (prefix, queues) in extra {
            rules.push(RouteRule {
                prefix: prefix.to_string(),
                queues: queues.iter().map(|q| q.to_string()).collect(),
            });
        }
        RouteTable::new(rules)
    }

    /// A sink on this test's prefix.
    pub async fn sink(&self) -> RedisSink {
        RedisSink::from_settings(&self.settings)
            .await
            .expect("connect sink")
    }

    /// A dispatcher with the default table.
    pub async fn dispatcher(&self, worker: &str) -> Dispatcher {
        self.dispatcher_with(worker, Self::default_table()).await
    }

    /// A dispatcher with a given table.
    pub async fn dispatcher_with(&self, worker: &str, table: RouteTable) -> Dispatcher {
        self.dispatcher_routed_by(worker, RouterHandle::new(table))
            .await
    }

    /// A dispatcher routing through `router` (e.g. a live plugin router), handing off through
    /// [`sink`](Self::sink), assembled by the host's builder.
    pub async fn dispatcher_routed_by(&self, worker: &str, router: RouterHandle) -> Dispatcher {
        Host::builder()
            .config(self.config())
            .pool(self.pool.clone())
            .router_handle(router)
            .sink(self.sink().await)
            .worker_id(worker)
            .build_dispatcher()
            .await
            .expect("assemble the dispatcher")
    }

    /// This test's settings with no routes file (routing is given to what is built from it).
    pub fn config(&self) -> Config {
        Config {
            path: None,
            routes: RoutesFile::default(),
            settings: self.settings.clone(),
        }
    }

    /// Publish events in one committed transaction.
    pub async fn publish_all(&self, events: Vec<NewEvent>) -> Vec<i64> {
        let mut tx = self.pool.begin().await.unwrap();
        let mut ids = Vec::with_capacity(events.len());
        for e in events {
            ids.push(publish(&mut tx, e).await.expect("publish"));
        }
        tx.commit().await.unwrap();
        ids
    }

    /// Insert `n` events of `event_type` fast (one statement).
    pub async fn insert_many(&self, event_type: &str, n: i64) {
        sqlx::query(
            "INSERT INTO outbox_event (event_type, payload) SELECT $1, jsonb_build_object('n', g) FROM generate_series(1, $2) g",
        )
        .bind(event_type)
        .bind(n)
        .execute(&self.pool)
        .await
        .unwrap();
    }

    /// All entries of a queue's stream, as field maps, oldest first.
    pub async fn entries(&self, queue: &str) -> Vec<HashMap<String, String>> {
        let mut conn = self.redis.clone();
        let reply: redis::streams::StreamRangeReply = conn
            .xrange_all(format!("{}{}", self.prefix, queue))
            .await
            .unwrap();
        reply
            .ids
            .into_iter()
            .map(|e| {
                e.map
                    .into_iter()
                    .map(|(k, v)| (k, redis::from_redis_value::<String>(&v).unwrap()))
                    .collect()
            })
            .collect()
    }

    /// Event ids in a queue's stream, in stream order.
    pub async fn event_ids(&self, queue: &str) -> Vec<i64> {
        self.entries(queue)
            .await
            .iter()
            .map(|e| e["event_id"].parse().unwrap())
            .collect()
    }

    /// Status of one event.
    pub async fn status(&self, id: i64) -> (String, i32, Option<String>) {
        sqlx::query_as("SELECT status, attempts, last_error FROM outbox_event WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// The receipt of one event (its only handler): result, attempts, error.
    pub async fn receipt(&self, event_id: i64) -> Option<(String, i32, Option<String>)> {
        sqlx::query_as("SELECT result, attempts, error FROM outbox_receipt WHERE event_id = $1")
            .bind(event_id)
            .fetch_optional(&self.pool)
            .await
            .unwrap()
    }

    /// Count of events in a status.
    pub async fn count(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = $1")
            .bind(status)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Count of events of one type.
    pub async fn count_type(&self, event_type: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE event_type = $1")
            .bind(event_type)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// A host's heartbeat row as `outbox_worker` keeps it: `id` last seen `ago` before now
    /// (zero: live), as a host that stopped heartbeating (SIGKILL) leaves it.
    pub async fn host_last_seen(&self, id: &str, ago: Duration) {
        sqlx::query(
            "INSERT INTO outbox_worker (id, host_name, version, last_seen)
             VALUES ($1, 'h', 'test', now() - make_interval(secs => $2))",
        )
        .bind(id)
        .bind(ago.as_secs_f64())
        .execute(&self.pool)
        .await
        .unwrap();
    }

    /// The URL of this test's database (for child processes).
    pub async fn database_url(&self) -> String {
        dispatcher_process::pool_database_url(&self.pool).await
    }

    /// Make every pending event due now (skip the backoff wait).
    pub async fn make_all_due(&self) {
        sqlx::query("UPDATE outbox_event SET available_at = now() WHERE status = 'pending'")
            .execute(&self.pool)
            .await
            .unwrap();
    }

    /// Delete this test's Redis keys.
    pub async fn cleanup(&self) {
        let mut conn = self.redis.clone();
        let mut keys: Vec<String> = Vec::new();
        for pattern in outbox_host::queue::QueueKeys::for_redis_url(
            &self.settings.redis_prefix,
            &self.settings.redis_url,
        )
        .match_patterns()
        {
            let matched: Vec<String> = conn.keys(pattern).await.unwrap_or_default();
            keys.extend(matched);
        }
        if conn.is_cluster() {
            // One key at a time: a command reaches one slot.
            for key in keys {
                let _: Result<(), _> = conn.del(key).await;
            }
        } else if !keys.is_empty() {
            let _: Result<(), _> = conn.del(keys).await;
        }
    }
}

/// Real Redis faults aimed at one test's host only. The host connects as an ACL user of its own
/// (created here, deleted on drop), so [`kill`](Self::kill) can close exactly its connections
/// with `CLIENT KILL USER`, the way a proxy restart or a failover drops them, while the other
/// clients of the shared Redis (other tests, other processes) are untouched.
pub struct RedisKiller {
    user: String,
    admin: redis::aio::MultiplexedConnection,
}

impl RedisKiller {
    /// Create the ACL user (all keys, channels and commands, any password).
    pub async fn new() -> Self {
        let user = format!("outbox-test-{}", uuid::Uuid::new_v4().simple());
        let mut admin = redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("on")
            .arg("nopass")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .query_async(&mut admin)
            .await
            .unwrap();
        Self { user, admin }
    }

    /// `REDIS_URL` logged in as this killer's user.
    pub fn url(&self) -> String {
        let url = redis_url();
        let (scheme, rest) = url.split_once("://").unwrap();
        let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
        format!("{scheme}://{}:any@{rest}", self.user)
    }

    /// Close every connection of this user; returns how many there were.
    pub async fn kill(&self) -> i64 {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&self.user)
            .query_async(&mut self.admin.clone())
            .await
            .unwrap()
    }
}

impl Drop for RedisKiller {
    fn drop(&mut self) {
        if let Ok(mut conn) = redis::Client::open(redis_url()).and_then(|c| c.get_connection()) {
            let _: redis::RedisResult<i64> = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&self.user)
                .query(&mut conn);
        }
    }
}

/// Real PostgreSQL faults aimed at one test's host only: the host's pool comes from
/// [`host_pool`](Self::host_pool) (`outbox_host::store::connect`, so its backends carry
/// `application_name = 'outbox'`) on the test's own database, and a separate connection
/// terminates those backends or makes that one database refuse connections.
pub struct PgKiller {
    /// On the server's default database (`DATABASE_URL`): a database cannot refuse connections
    /// while the session altering it is inside it.
    admin: sqlx::PgConnection,
    /// Inside the test database, opened before any refusal (it outlives one).
    inside: sqlx::PgConnection,
    url: String,
    database: String,
}

impl PgKiller {
    /// A killer for the test database behind `env`.
    pub async fn new(env: &TestEnv) -> Self {
        use sqlx::Connection;
        let url = env.database_url().await;
        let mut inside = sqlx::PgConnection::connect(&url).await.unwrap();
        let database: String = sqlx::query_scalar("SELECT current_database()")
            .fetch_one(&mut inside)
            .await
            .unwrap();
        let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let admin = sqlx::PgConnection::connect(&base).await.unwrap();
        Self {
            admin,
            inside,
            url,
            database,
        }
    }

    /// A pool for the host under test, opened the way the host opens its own.
    pub async fn host_pool(&self) -> PgPool {
        outbox_host::store::connect(&self.url, 16).await.unwrap()
    }

    /// Terminate every backend of the host on the test database (`pg_terminate_backend`, what a
    /// failover or a proxy restart does); returns how many.
    pub async fn terminate(&mut self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'outbox'",
        )
        .bind(&self.database)
        .fetch_one(&mut self.admin)
        .await
        .unwrap()
    }

    /// Events `done` now, read on the killer's own connection inside the test database.
    pub async fn count_done(&mut self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'done'")
            .fetch_one(&mut self.inside)
            .await
            .unwrap()
    }

    /// Make the test database refuse new connections (`ALLOW_CONNECTIONS false`), or accept
    /// them again. Only this test's database: the shared server keeps serving.
    pub async fn allow_connections(&mut self, allow: bool) {
        sqlx::query(&format!(
            "ALTER DATABASE \"{}\" ALLOW_CONNECTIONS {allow}",
            self.database.replace('"', "\"\"")
        ))
        .execute(&mut self.admin)
        .await
        .unwrap();
    }
}

/// The sum of `outbox_infra_retries_total` for `service` at `stage`, across kinds, as the
/// process-wide metrics recorder has it (installed on first use).
pub fn infra_retries(service: &str, stage: &str) -> f64 {
    let Some(handle) = outbox_host::http::prometheus() else {
        return 0.0;
    };
    let service = format!("service=\"{service}\"");
    let stage = format!("stage=\"{stage}\"");
    handle
        .render()
        .lines()
        .filter(|l| l.starts_with("outbox_infra_retries_total{"))
        .filter(|l| l.contains(&service) && l.contains(&stage))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
