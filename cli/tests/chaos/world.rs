//! One chaos run's world: its own database, Redis prefix, Redis users, TCP proxy in front of
//! Redis, plugin directory and `routes.toml`, and the `outbox` host processes it starts, kills
//! and restarts. Every fault it can inject reaches only this run's hosts.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use outbox_tests::{plugin_file, redis_url, OutageProxy};
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use tokio::process::{Child, Command};

/// Workflows the `workflow-trigger` config starts for every `workflow.trigger.event` of the run.
pub const WORKFLOWS: [&str; 3] = ["wf-a", "wf-b", "wf-c"];
/// Plugins subscribed to the run's hook (each the `hook-probe` test plugin under its own name).
pub const SUBSCRIBERS: [&str; 3] = ["probe-a", "probe-b", "probe-c"];
/// The hook the producers publish (`plugin.hook.chaos`).
pub const HOOK: &str = "chaos";
/// The trigger name of the producers' `workflow.trigger.event`s.
pub const TRIGGER: &str = "chaos";
/// Claim lease of the hosts: a killed host's claims come back this soon.
pub const CLAIM_LEASE: Duration = Duration::from_secs(3);
/// Receiver lease of the hosts (handler timeouts are 2 s; the lease must cover them plus 5 s).
pub const RECEIVER_LEASE: Duration = Duration::from_secs(8);
/// Queues with a handler: (queue, handler bound to it).
pub const HANDLER_QUEUES: [(&str, &str); 3] = [
    ("outbox.workflow", "workflow-trigger"),
    ("outbox.plugin-hook", "plugin-hook"),
    ("outbox.plugin-invoke", "builtin:plugin-invoke"),
];
/// Every queue the run's events may reach.
pub const QUEUES: [&str; 9] = [
    "outbox.mail",
    "outbox.fan-a",
    "outbox.fan-b",
    "outbox.fan-c",
    "outbox.workflow",
    "outbox.workflow-executor",
    "outbox.plugin-hook",
    "outbox.plugin-invoke",
    "outbox.probe",
];

/// The queues an event type goes to under the run's `routes.toml` (longest prefix wins), or
/// `None` when no route matches (the event fails by design).
pub fn destinations(event_type: &str) -> Option<&'static [&'static str]> {
    const TABLE: [(&str, &[&str]); 7] = [
        ("workflow.executor.", &["outbox.workflow-executor"]),
        ("workflow.", &["outbox.workflow"]),
        ("mail.", &["outbox.mail"]),
        ("fanout.", &["outbox.fan-a", "outbox.fan-b", "outbox.fan-c"]),
        ("plugin.hook.", &["outbox.plugin-hook"]),
        ("plugin.invoke.", &["outbox.plugin-invoke"]),
        ("probe.", &["outbox.probe"]),
    ];
    TABLE
        .iter()
        .filter(|(prefix, _)| event_type.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, queues)| *queues)
}

/// The run's `routes.toml`. `version` 0 and 1 are equivalent (they differ in a comment and in
/// a router time limit that no call comes near), so alternating them is a reload that must
/// change nothing.
pub fn routes_toml(version: u8) -> String {
    let workflows: Vec<String> = WORKFLOWS
        .iter()
        .map(|id| format!("{{ id = \"{id}\", trigger = {{ event = \"{TRIGGER}\" }} }}"))
        .collect();
    let subscribers: Vec<String> = SUBSCRIBERS.iter().map(|s| format!("\"{s}\"")).collect();
    let mut toml = format!(
        r#"# chaos routes, version {version}
[routes]
"mail." = "outbox.mail"
"fanout." = ["outbox.fan-a", "outbox.fan-b", "outbox.fan-c"]
"workflow." = "outbox.workflow"
"workflow.executor." = "outbox.workflow-executor"
"plugin.hook." = "outbox.plugin-hook"
"plugin.invoke." = "outbox.plugin-invoke"
"plugin.capability-use." = "outbox.plugin-capability-use"
"probe." = "outbox.probe"

[router]
plugin = "prefix-router"

[queue_groups]
general = ["outbox.workflow", "outbox.plugin-hook", "outbox.plugin-invoke"]

[handlers]
"outbox.workflow" = "workflow-trigger"
"outbox.plugin-hook" = "plugin-hook"
"outbox.plugin-invoke" = "builtin:plugin-invoke"

[policy]
plugin = "capability-policy"

[plugins.prefix-router]
timeout_ms = {router_timeout}

[plugins.capability-policy]
timeout_ms = 500

[plugins.workflow-trigger]
timeout_ms = 2000
config = {{ executor = {{ queue = "outbox.workflow-executor" }}, workflows = [{workflows}] }}
grants = {{ publish = ["workflow.execution.", "workflow.executor."] }}

[plugins.plugin-hook]
timeout_ms = 2000
config = {{ subscribers = {{ "{HOOK}" = [{subscribers}] }} }}
grants = {{ publish = ["plugin.invoke."] }}
"#,
        router_timeout = 1000 + u32::from(version),
        workflows = workflows.join(", "),
        subscribers = subscribers.join(", "),
    );
    for name in SUBSCRIBERS {
        toml.push_str(&format!(
            "\n[plugins.{name}]\nfile = \"hook-probe.wasm\"\nhooks = [\"{HOOK}\"]\ntimeout_ms = 2000\ngrants = {{ publish = [\"probe.\"] }}\n"
        ));
    }
    toml
}

/// `wasm` with a custom section appended: the same component (custom sections carry no
/// behaviour), a different file and hash, so swapping it in is a real reload.
pub fn with_custom_section(wasm: &[u8], label: &str) -> Vec<u8> {
    fn leb128(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = u8::try_from(n & 0x7f).unwrap();
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"outbox-chaos";
    let mut body = Vec::new();
    leb128(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(label.as_bytes());
    let mut out = wasm.to_vec();
    out.push(0);
    leb128(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// What one host process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `outbox run`: dispatcher and receivers.
    Full,
    /// `outbox run --dispatcher-only`.
    Dispatcher,
    /// `outbox run --receivers-only`.
    Receivers,
}

/// One host slot: a name, a role, its own Redis user (so its connections can be killed alone),
/// and the process now running in it, if any.
pub struct HostSlot {
    /// `h0`, `h1`, ...
    pub name: String,
    /// What it runs.
    pub role: Role,
    /// Its Redis ACL user.
    pub redis_user: String,
    /// The running process.
    pub child: Option<Child>,
    /// Processes started in this slot so far.
    pub starts: usize,
}

/// The world of one run.
pub struct World {
    /// The run's database name.
    pub db_name: String,
    /// URL of the run's database.
    pub db_url: String,
    /// The test's own pool on the run's database (application_name `outbox-chaos`, never cut).
    pub pool: PgPool,
    /// A pool on the server's default database, for terminating the hosts' backends.
    pub admin: PgPool,
    /// A direct Redis connection (never cut).
    pub redis: redis::aio::MultiplexedConnection,
    /// The run's Redis key prefix.
    pub prefix: String,
    /// The proxy the hosts reach Redis through.
    pub proxy: OutageProxy,
    /// Plugin directory, `routes.toml` and host logs.
    pub dir: tempfile::TempDir,
    /// Host slots.
    pub hosts: Vec<HostSlot>,
    /// The hosts' logs (kept when the run fails or `OUTBOX_CHAOS_KEEP_LOGS` is set; removed by
    /// [`World::cleanup`]).
    pub logs: PathBuf,
    /// The two equivalent versions of each reloaded plugin file (file name, [v0, v1]).
    pub plugin_versions: Vec<(String, [Vec<u8>; 2])>,
}

fn base_database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

impl World {
    /// Create the database (migrated), the Redis users, the proxy and the plugin directory.
    pub async fn new(name: &str, roles: &[Role]) -> Self {
        let pid = std::process::id();
        let db_name = format!("outbox_chaos_{pid}_{name}");
        let base = base_database_url();
        let admin = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&base)
            .await
            .expect("PostgreSQL at DATABASE_URL");
        sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{db_name}\" WITH (FORCE)"
        ))
        .execute(&admin)
        .await
        .unwrap();
        sqlx::query(&format!("CREATE DATABASE \"{db_name}\""))
            .execute(&admin)
            .await
            .unwrap();
        let db_url = outbox_host::store::with_database(&base, &db_name);
        let options: PgConnectOptions = db_url.parse().unwrap();
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options.application_name("outbox-chaos"))
            .await
            .unwrap();
        sqlx::migrate!("../migrations").run(&pool).await.unwrap();

        let mut redis = redis::Client::open(redis_url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("Redis at REDIS_URL");
        let prefix = format!("chaos:{pid}:{name}:");
        let mut hosts = Vec::new();
        for (i, role) in roles.iter().enumerate() {
            let user = format!("outbox-chaos-{pid}-{name}-h{i}");
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&user)
                .arg("on")
                .arg("nopass")
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .query_async(&mut redis)
                .await
                .unwrap();
            hosts.push(HostSlot {
                name: format!("h{i}"),
                role: *role,
                redis_user: user,
                child: None,
                starts: 0,
            });
        }
        // The hosts' streams are trimmed below what every consumer group acknowledged; an
        // audit group that never reads keeps every entry for the count at the end.
        for (queue, _) in HANDLER_QUEUES {
            let _: () = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(format!("{prefix}{queue}"))
                .arg("chaos-audit")
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut redis)
                .await
                .unwrap();
        }

        let dir = tempfile::tempdir().unwrap();
        let mut plugin_versions = Vec::new();
        for plugin in [
            "prefix-router",
            "capability-policy",
            "workflow-trigger",
            "plugin-hook",
            "test/hook-probe",
        ] {
            let base_name = plugin.rsplit('/').next().unwrap();
            let file = format!("{base_name}.wasm");
            let bytes = std::fs::read(plugin_file(plugin)).unwrap();
            std::fs::write(dir.path().join(&file), &bytes).unwrap();
            let other = with_custom_section(&bytes, "v1");
            plugin_versions.push((file, [bytes, other]));
        }
        std::fs::write(dir.path().join("routes.toml"), routes_toml(0)).unwrap();
        let logs = std::env::temp_dir().join(format!("outbox-chaos-{pid}-{name}"));
        let _ = std::fs::remove_dir_all(&logs);
        std::fs::create_dir_all(&logs).unwrap();
        Self {
            logs,
            db_name,
            db_url,
            pool,
            admin,
            redis,
            prefix,
            proxy: OutageProxy::redis().await,
            dir,
            hosts,
            plugin_versions,
        }
    }

    /// The run's `routes.toml`.
    pub fn routes_path(&self) -> PathBuf {
        self.dir.path().join("routes.toml")
    }

    fn log_path(&self, slot: usize) -> PathBuf {
        self.logs.join(format!("{}.log", self.hosts[slot].name))
    }

    /// Redis URL of a slot: its own user, through the proxy.
    fn host_redis_url(&self, slot: usize) -> String {
        let proxied = self.proxy.redis_url();
        let rest = proxied.strip_prefix("redis://").unwrap();
        format!("redis://{}:any@{rest}", self.hosts[slot].redis_user)
    }

    /// Start the slot's host process (it must not be running).
    pub fn start(&mut self, slot: usize) {
        assert!(self.hosts[slot].child.is_none(), "slot {slot} is running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(slot))
            .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
        command.arg("run");
        match self.hosts[slot].role {
            Role::Full => {}
            Role::Dispatcher => {
                command.arg("--dispatcher-only");
            }
            Role::Receivers => {
                command.arg("--receivers-only");
            }
        }
        for var in outbox_host::config::Settings::ENV_VARS {
            command.env_remove(var);
        }
        command
            .env("DATABASE_URL", &self.db_url)
            .env("REDIS_URL", self.host_redis_url(slot))
            .env("OUTBOX_REDIS_PREFIX", &self.prefix)
            .env("OUTBOX_CONFIG", self.routes_path())
            .env("OUTBOX_PLUGIN_DIR", self.dir.path())
            .env("OUTBOX_HTTP_ADDR", "")
            .env(
                "OUTBOX_CLAIM_LEASE_MS",
                CLAIM_LEASE.as_millis().to_string(),
            )
            .env(
                "OUTBOX_RECEIVER_LEASE_MS",
                RECEIVER_LEASE.as_millis().to_string(),
            )
            .env("OUTBOX_DISPATCH_INTERVAL_MS", "250")
            .env("OUTBOX_BACKOFF_SECONDS", "1,2")
            .env("OUTBOX_HANDLER_BACKOFF_SECONDS", "1,2")
            .env("OUTBOX_SHUTDOWN_GRACE_MS", "2000")
            .env(
                "RUST_LOG",
                "warn,outbox_host::host=info,outbox_host::live_config=info,outbox_host::plugin::registry=info",
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .kill_on_drop(true);
        let child = command.spawn().expect("spawn outbox run");
        self.hosts[slot].child = Some(child);
        self.hosts[slot].starts += 1;
    }

    /// SIGKILL the slot's host and wait until it is gone. Returns whether one was running.
    pub async fn kill(&mut self, slot: usize) -> bool {
        let Some(mut child) = self.hosts[slot].child.take() else {
            return false;
        };
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "host {} had exited by itself ({status}); see {}",
                self.hosts[slot].name,
                self.log_path(slot).display()
            );
        }
        child.start_kill().unwrap();
        let _ = child.wait().await;
        true
    }

    /// Wait until the slot's latest process says it started (connected, plugins loaded,
    /// dispatcher and receivers running), at most `within`; returns how long that took.
    pub async fn wait_up(&mut self, slot: usize, within: Duration) -> Option<Duration> {
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            let text = std::fs::read_to_string(self.log_path(slot)).unwrap_or_default();
            if text.matches("outbox host started").count() >= self.hosts[slot].starts {
                return Some(started.elapsed());
            }
            self.assert_hosts_alive();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Panic if a host that should be running has exited by itself.
    pub fn assert_hosts_alive(&mut self) {
        for slot in 0..self.hosts.len() {
            let log = self.log_path(slot);
            if let Some(child) = self.hosts[slot].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let tail = std::fs::read_to_string(&log).unwrap_or_default();
                    let tail: Vec<&str> = tail.lines().rev().take(20).collect();
                    panic!(
                        "host {} exited by itself ({status}); last log lines:\n{}",
                        self.hosts[slot].name,
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    );
                }
            }
        }
    }

    /// Slots with a running host.
    pub fn running(&self) -> Vec<usize> {
        (0..self.hosts.len())
            .filter(|s| self.hosts[*s].child.is_some())
            .collect()
    }

    /// Terminate every PostgreSQL backend of this run's hosts; returns how many.
    pub async fn terminate_backends(&self) -> i64 {
        sqlx::query_scalar(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = $1 AND application_name = 'outbox'",
        )
        .bind(&self.db_name)
        .fetch_one(&self.admin)
        .await
        .unwrap()
    }

    /// Kill every Redis connection of one slot's host; returns how many.
    pub async fn kill_redis_connections(&self, slot: usize) -> i64 {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&self.hosts[slot].redis_user)
            .query_async(&mut self.redis.clone())
            .await
            .unwrap()
    }

    /// Replace a file in the plugin directory the way deploy tools do (write, rename over).
    pub fn replace_file(&self, file_name: &str, bytes: &[u8]) {
        let tmp = self.dir.path().join(format!(".{file_name}.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(file_name)).unwrap();
    }

    /// Swap in version `version` of a plugin file.
    pub fn reload_plugin(&self, file_name: &str, version: usize) {
        let (_, versions) = self
            .plugin_versions
            .iter()
            .find(|(f, _)| f == file_name)
            .unwrap();
        self.replace_file(file_name, &versions[version % 2]);
    }

    /// Reloads the hosts applied and refused, from their logs (every process of every slot).
    pub fn reloads_in_logs(&self) -> (usize, usize) {
        let (mut applied, mut refused) = (0, 0);
        for slot in 0..self.hosts.len() {
            let text = std::fs::read_to_string(self.log_path(slot)).unwrap_or_default();
            applied += text
                .lines()
                .filter(|l| l.contains("plugin reloaded") || l.contains("routes reloaded"))
                .count();
            refused += text
                .lines()
                .filter(|l| l.contains("reload rejected"))
                .count();
        }
        (applied, refused)
    }

    /// Stop every host, then drop the database, the Redis keys and users.
    pub async fn cleanup(mut self) {
        for slot in 0..self.hosts.len() {
            self.kill(slot).await;
        }
        self.proxy.cut();
        let mut conn = self.redis.clone();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{}*", self.prefix))
                .arg("COUNT")
                .arg(5000)
                .query_async(&mut conn)
                .await
                .unwrap();
            if !keys.is_empty() {
                let _: () = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for host in &self.hosts {
            let _: redis::RedisResult<i64> = redis::cmd("ACL")
                .arg("DELUSER")
                .arg(&host.redis_user)
                .query_async(&mut conn)
                .await;
        }
        self.pool.close().await;
        // OUTBOX_CHAOS_KEEP_LOGS=1 keeps the host logs of a passing run too.
        if std::env::var_os("OUTBOX_CHAOS_KEEP_LOGS").is_none() {
            let _ = std::fs::remove_dir_all(&self.logs);
        }
        let _ = sqlx::query(&format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.db_name
        ))
        .execute(&self.admin)
        .await;
    }
}
