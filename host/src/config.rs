//! Configuration: `routes.toml` plus environment variables.
//!
//! Owns parsing and validation of the operator's config file and the env vars of DESIGN.md
//! (environment wins over `[settings]` in the file, which wins over the defaults). It never
//! connects to anything: a [`Config`] is plain data, validated as a whole, so a broken edit can
//! be rejected before it replaces the config that is serving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::routing::{RouteRule, RouteTable};

/// A configuration problem, with the file and the offending entry in the message.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown/mistyped keys.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, with line and column.
        message: String,
    },
    /// The file parses but says something impossible.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An environment variable has a value that does not parse.
    #[error("environment variable {name}={value:?}: {message}")]
    Env {
        /// Variable name.
        name: String,
        /// Its value.
        value: String,
        /// Why it was refused.
        message: String,
    },
}

/// One routing target: a single queue or a fan-out list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum QueueList {
    /// `"mail." = "outbox.mail"`
    One(String),
    /// `"order." = ["outbox.audit", "outbox.search-index"]`
    Many(Vec<String>),
}

impl QueueList {
    /// The queues as a list.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            QueueList::One(q) => vec![q.clone()],
            QueueList::Many(qs) => qs.clone(),
        }
    }
}

/// `[router]`: which router plugin routes events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterSection {
    /// Plugin name from `[plugins]`, or `native` for the built-in table (no WebAssembly).
    #[serde(default = "default_router_plugin")]
    pub plugin: String,
    /// Type prefix -> router plugin, for content-based routing of some prefixes.
    #[serde(default)]
    pub overrides: BTreeMap<String, String>,
}

fn default_router_plugin() -> String {
    "native".to_string()
}

impl Default for RouterSection {
    fn default() -> Self {
        Self {
            plugin: default_router_plugin(),
            overrides: BTreeMap::new(),
        }
    }
}

/// `[policy]`: which plugin decides capability checks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    /// Policy plugin name from `[plugins]`; `deny-all` refuses every call but `log` without
    /// running WebAssembly (used when no policy plugin is declared).
    #[serde(default = "default_policy_plugin")]
    pub plugin: String,
    /// Publish a `plugin.capability-use.denied` event for every denial.
    #[serde(default = "default_true")]
    pub publish_denials: bool,
}

fn default_policy_plugin() -> String {
    "capability-policy".to_string()
}

fn default_true() -> bool {
    true
}

impl Default for PolicySection {
    fn default() -> Self {
        Self {
            plugin: default_policy_plugin(),
            publish_denials: true,
        }
    }
}

/// Capability grants of one plugin (`[plugins.NAME.grants]`), evaluated by the policy plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Event type prefixes the plugin may publish.
    #[serde(default)]
    pub publish: Vec<String>,
    /// Whether the plugin may use its (namespaced) key-value store.
    #[serde(default)]
    pub kv: bool,
    /// Hosts (`host` or `host:port`) the plugin may call over HTTP.
    #[serde(default)]
    pub http: Vec<String>,
    /// Name of an environment variable holding an HMAC-SHA256 secret: when set, the host signs
    /// this plugin's outbound HTTP requests (the plugin never sees the secret).
    #[serde(default)]
    pub http_signing_secret_env: Option<String>,
}

/// `[plugins.NAME]`: one WebAssembly plugin, its limits, config and grants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSpec {
    /// The `.wasm` file, relative to the plugin directory (default `NAME.wasm`).
    #[serde(default)]
    pub file: Option<String>,
    /// Fuel per call (roughly WebAssembly instructions); a runaway loop ends as an error.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// Linear memory cap per call, in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Wall-clock limit per call, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Free-form config handed to the plugin as JSON on every call.
    #[serde(default)]
    pub config: Option<toml::Value>,
    /// Capabilities this plugin may use.
    #[serde(default)]
    pub grants: Grants,
    /// Hooks this plugin subscribes to (`plugin.hook.<hook>` events reach it).
    #[serde(default)]
    pub hooks: Vec<String>,
}

/// `[settings]`: the same knobs as the environment variables (env wins).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    /// `OUTBOX_DISPATCHER_ENABLED`
    pub dispatcher_enabled: Option<bool>,
    /// `OUTBOX_DISPATCH_INTERVAL_MS`
    pub dispatch_interval_ms: Option<u64>,
    /// `OUTBOX_DISPATCH_BATCH_SIZE`
    pub dispatch_batch_size: Option<i64>,
    /// `OUTBOX_DISPATCH_CONCURRENCY`
    pub dispatch_concurrency: Option<usize>,
    /// `OUTBOX_MAX_RETRIES`
    pub max_retries: Option<i32>,
    /// `OUTBOX_CLAIM_LEASE_MS`
    pub claim_lease_ms: Option<u64>,
    /// `OUTBOX_SHUTDOWN_GRACE_MS`
    pub shutdown_grace_ms: Option<u64>,
    /// `OUTBOX_DONE_RETENTION_HOURS`
    pub done_retention_hours: Option<u64>,
    /// `OUTBOX_DONE_RETENTION_BATCH_SIZE`
    pub done_retention_batch_size: Option<i64>,
    /// `OUTBOX_BACKOFF_SECONDS`: retry delays after attempt 1, 2, ...; the last one repeats.
    pub backoff_seconds: Option<Vec<u64>>,
    /// `OUTBOX_MAX_PAYLOAD_BYTES`
    pub max_payload_bytes: Option<usize>,
    /// `OUTBOX_REDIS_PREFIX`
    pub redis_prefix: Option<String>,
    /// `OUTBOX_DEDUPE_TTL_SECONDS`
    pub dedupe_ttl_seconds: Option<u64>,
    /// `OUTBOX_PLUGIN_DIR`
    pub plugin_dir: Option<String>,
    /// `OUTBOX_HTTP_ADDR`
    pub http_addr: Option<String>,
    /// `OUTBOX_HANDLER_MAX_RETRIES`
    pub handler_max_retries: Option<u32>,
    /// `OUTBOX_HANDLER_BACKOFF_SECONDS`
    pub handler_backoff_seconds: Option<Vec<u64>>,
    /// `OUTBOX_IDEMPOTENCY_TTL_SECONDS`
    pub idempotency_ttl_seconds: Option<u64>,
    /// `OUTBOX_RECEIVER_LEASE_MS`
    pub receiver_lease_ms: Option<u64>,
    /// `OUTBOX_RECEIVER_CONCURRENCY`
    pub receiver_concurrency: Option<usize>,
}

/// The parsed `routes.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutesFile {
    /// Runtime settings (overridden by env vars).
    #[serde(default)]
    pub settings: FileSettings,
    /// Type prefix -> queue(s).
    #[serde(default)]
    pub routes: BTreeMap<String, QueueList>,
    /// Which router routes events.
    #[serde(default)]
    pub router: RouterSection,
    /// Queue group name -> queues its receivers consume.
    #[serde(default)]
    pub queue_groups: BTreeMap<String, Vec<String>>,
    /// Queue -> handler plugin that consumes it (`builtin:plugin-invoke` is the host's own
    /// handler that calls a subscribed plugin's hook).
    #[serde(default)]
    pub handlers: BTreeMap<String, String>,
    /// Capability policy.
    #[serde(default)]
    pub policy: PolicySection,
    /// Plugin name -> spec.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginSpec>,
}

/// The default `routes.toml` shipped with the product (the table of DESIGN.md).
pub const DEFAULT_ROUTES_TOML: &str = include_str!("../../routes.toml");

/// Largest payload accepted by default (256 KiB).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;

impl RoutesFile {
    /// Parse and validate TOML text; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let file: RoutesFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        file.validate(path)?;
        Ok(file)
    }

    /// Read, parse and validate a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// The routing table of `[routes]`.
    pub fn route_table(&self) -> RouteTable {
        RouteTable::new(
            self.routes
                .iter()
                .map(|(prefix, queues)| RouteRule {
                    prefix: prefix.clone(),
                    queues: queues.to_vec(),
                })
                .collect(),
        )
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        for (prefix, queues) in &self.routes {
            validate_prefix(prefix).map_err(|m| invalid(format!("[routes] \"{prefix}\": {m}")))?;
            let queues = queues.to_vec();
            if queues.is_empty() {
                return Err(invalid(format!("[routes] \"{prefix}\": no queue given")));
            }
            for q in &queues {
                validate_queue_name(q)
                    .map_err(|m| invalid(format!("[routes] \"{prefix}\": queue '{q}': {m}")))?;
            }
            let mut unique = queues.clone();
            unique.sort();
            unique.dedup();
            if unique.len() != queues.len() {
                return Err(invalid(format!(
                    "[routes] \"{prefix}\": a queue is listed twice"
                )));
            }
        }
        for (group, queues) in &self.queue_groups {
            for q in queues {
                validate_queue_name(q)
                    .map_err(|m| invalid(format!("[queue_groups] {group}: queue '{q}': {m}")))?;
            }
        }
        let known_plugin = |name: &str| self.plugins.contains_key(name);
        if self.router.plugin != "native" && !known_plugin(&self.router.plugin) {
            return Err(invalid(format!(
                "[router] plugin = '{}' is not declared under [plugins]",
                self.router.plugin
            )));
        }
        for (prefix, plugin) in &self.router.overrides {
            validate_prefix(prefix)
                .map_err(|m| invalid(format!("[router.overrides] \"{prefix}\": {m}")))?;
            if plugin != "native" && !known_plugin(plugin) {
                return Err(invalid(format!(
                    "[router.overrides] \"{prefix}\" = '{plugin}' is not declared under [plugins]"
                )));
            }
        }
        for (queue, plugin) in &self.handlers {
            validate_queue_name(queue)
                .map_err(|m| invalid(format!("[handlers] '{queue}': {m}")))?;
            if !known_plugin(plugin) && !plugin.starts_with("builtin:") {
                return Err(invalid(format!(
                    "[handlers] '{queue}' = '{plugin}' is not declared under [plugins]"
                )));
            }
        }
        if self.policy.plugin != "deny-all"
            && !known_plugin(&self.policy.plugin)
            && !self.plugins.is_empty()
        {
            return Err(invalid(format!(
                "[policy] plugin = '{}' is not declared under [plugins] (use \"deny-all\" to refuse every capability)",
                self.policy.plugin
            )));
        }
        for (name, spec) in &self.plugins {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
            {
                return Err(invalid(format!(
                    "[plugins] '{name}': plugin names use lowercase letters, digits, '-' and '_'"
                )));
            }
            if spec.memory_mb == Some(0) || spec.timeout_ms == Some(0) || spec.fuel == Some(0) {
                return Err(invalid(format!(
                    "[plugins.{name}]: fuel, memory_mb and timeout_ms must be positive"
                )));
            }
            if let Some(config) = &spec.config {
                serde_json::to_value(config).map_err(|e| {
                    invalid(format!(
                        "[plugins.{name}] config is not representable as JSON: {e}"
                    ))
                })?;
            }
        }
        if let Some(backoff) = &self.settings.backoff_seconds {
            if backoff.is_empty() {
                return Err(invalid(
                    "[settings] backoff_seconds must not be empty".into(),
                ));
            }
        }
        Ok(())
    }
}

/// Check a routing prefix: lowercase segments separated by dots, optional leading `*`.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    let body = prefix.strip_prefix('*').unwrap_or(prefix);
    if prefix.is_empty() {
        return Err("empty prefix".into());
    }
    if body.contains('*') {
        return Err("'*' is only allowed as the whole first segment".into());
    }
    if prefix.starts_with('*') && !(body.is_empty() || body.starts_with('.')) {
        return Err("'*' must stand for a whole first segment, as in '*.deleted'".into());
    }
    if !body
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
    {
        return Err("prefixes use lowercase letters, digits, '_', '-' and '.'".into());
    }
    if body.contains("..") {
        return Err("empty segment ('..')".into());
    }
    Ok(())
}

/// Check a queue name (it becomes a Redis key).
pub fn validate_queue_name(queue: &str) -> Result<(), String> {
    if queue.is_empty() || queue.len() > 200 {
        return Err("queue names are 1 to 200 characters".into());
    }
    if !queue
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
    {
        return Err("queue names use letters, digits, '.', '_', '-' and ':'".into());
    }
    Ok(())
}

/// Fully resolved runtime settings (defaults < `[settings]` < environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// PostgreSQL URL (`DATABASE_URL`).
    pub database_url: String,
    /// Redis URL (`REDIS_URL`).
    pub redis_url: String,
    /// Run the dispatcher in `outbox run`.
    pub dispatcher_enabled: bool,
    /// Fallback poll interval.
    pub dispatch_interval: Duration,
    /// Rows claimed per tick.
    pub dispatch_batch_size: i64,
    /// Redis pipelines in flight at once.
    pub dispatch_concurrency: usize,
    /// Retries before an event is dead-lettered (`failed`).
    pub max_retries: i32,
    /// Claim lease.
    pub claim_lease: Duration,
    /// How long shutdown waits for in-flight work.
    pub shutdown_grace: Duration,
    /// Age after which `done` rows are deleted.
    pub done_retention: Duration,
    /// Rows deleted per retention statement (1..=10000).
    pub done_retention_batch_size: i64,
    /// Retry delay after attempt n is `backoff[min(n, len) - 1]`.
    pub backoff: Vec<Duration>,
    /// Largest accepted payload (bytes of JSON text).
    pub max_payload_bytes: usize,
    /// Prefix for every Redis key the host writes.
    pub redis_prefix: String,
    /// TTL of enqueue dedupe markers.
    pub dedupe_ttl: Duration,
    /// Directory holding `.wasm` plugins.
    pub plugin_dir: PathBuf,
    /// Address of the metrics/health endpoint (empty: disabled).
    pub http_addr: String,
    /// Queue group consumed by `outbox run` (`WORKER_QUEUE_GROUP`; `None` = all groups).
    pub worker_queue_group: Option<String>,
    /// Handler retries before an entry goes to the dead-letter stream.
    pub handler_max_retries: u32,
    /// Handler retry delay after attempt n is `handler_backoff[min(n, len) - 1]`.
    pub handler_backoff: Vec<Duration>,
    /// TTL of receiver idempotency records (longer than the longest retry window).
    pub idempotency_ttl: Duration,
    /// How long a receiver may hold an entry before another consumer reclaims it.
    pub receiver_lease: Duration,
    /// Entries handled at once per queue.
    pub receiver_concurrency: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            database_url: "postgres://postgres@127.0.0.1:5432/test".into(),
            redis_url: "redis://127.0.0.1:6379/".into(),
            dispatcher_enabled: true,
            dispatch_interval: Duration::from_millis(1000),
            dispatch_batch_size: 100,
            dispatch_concurrency: 10,
            max_retries: 6,
            claim_lease: Duration::from_millis(300_000),
            shutdown_grace: Duration::from_millis(30_000),
            done_retention: Duration::from_secs(720 * 3600),
            done_retention_batch_size: 1000,
            backoff: [60, 120, 240, 480, 960, 1920]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            redis_prefix: String::new(),
            dedupe_ttl: Duration::from_secs(7 * 24 * 3600),
            plugin_dir: PathBuf::from("plugins/dist"),
            http_addr: "127.0.0.1:9464".into(),
            worker_queue_group: None,
            handler_max_retries: 5,
            handler_backoff: [1, 5, 30, 120, 600]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            idempotency_ttl: Duration::from_secs(24 * 3600),
            receiver_lease: Duration::from_millis(60_000),
            receiver_concurrency: 8,
        }
    }
}

impl Settings {
    /// Resolve settings from the file's `[settings]` and the process environment.
    pub fn resolve(file: &FileSettings) -> Result<Self, ConfigError> {
        Self::resolve_with(file, |name| std::env::var(name).ok())
    }

    /// Resolve with an explicit environment lookup (tests use a map).
    pub fn resolve_with(
        file: &FileSettings,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut s = Settings::default();
        fn parse<T: std::str::FromStr>(
            env: &impl Fn(&str) -> Option<String>,
            name: &str,
        ) -> Result<Option<T>, ConfigError>
        where
            T::Err: std::fmt::Display,
        {
            match env(name) {
                None => Ok(None),
                Some(v) if v.trim().is_empty() => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<T>()
                    .map(Some)
                    .map_err(|e| ConfigError::Env {
                        name: name.into(),
                        value: v.clone(),
                        message: e.to_string(),
                    }),
            }
        }
        if let Some(v) = env("DATABASE_URL").filter(|v| !v.is_empty()) {
            s.database_url = v;
        }
        if let Some(v) = env("REDIS_URL").filter(|v| !v.is_empty()) {
            s.redis_url = v;
        }
        let ms = Duration::from_millis;
        s.dispatcher_enabled = parse(&env, "OUTBOX_DISPATCHER_ENABLED")?
            .or(file.dispatcher_enabled)
            .unwrap_or(s.dispatcher_enabled);
        s.dispatch_interval = parse(&env, "OUTBOX_DISPATCH_INTERVAL_MS")?
            .or(file.dispatch_interval_ms)
            .map(ms)
            .unwrap_or(s.dispatch_interval);
        s.dispatch_batch_size = parse(&env, "OUTBOX_DISPATCH_BATCH_SIZE")?
            .or(file.dispatch_batch_size)
            .unwrap_or(s.dispatch_batch_size)
            .clamp(1, 10_000);
        s.dispatch_concurrency = parse(&env, "OUTBOX_DISPATCH_CONCURRENCY")?
            .or(file.dispatch_concurrency)
            .unwrap_or(s.dispatch_concurrency)
            .clamp(1, 1024);
        s.max_retries = parse(&env, "OUTBOX_MAX_RETRIES")?
            .or(file.max_retries)
            .unwrap_or(s.max_retries)
            .max(0);
        s.claim_lease = parse(&env, "OUTBOX_CLAIM_LEASE_MS")?
            .or(file.claim_lease_ms)
            .map(ms)
            .unwrap_or(s.claim_lease)
            .max(ms(100));
        s.shutdown_grace = parse(&env, "OUTBOX_SHUTDOWN_GRACE_MS")?
            .or(file.shutdown_grace_ms)
            .map(ms)
            .unwrap_or(s.shutdown_grace);
        s.done_retention = parse::<u64>(&env, "OUTBOX_DONE_RETENTION_HOURS")?
            .or(file.done_retention_hours)
            .map(|h| Duration::from_secs(h * 3600))
            .unwrap_or(s.done_retention);
        s.done_retention_batch_size = parse(&env, "OUTBOX_DONE_RETENTION_BATCH_SIZE")?
            .or(file.done_retention_batch_size)
            .unwrap_or(s.done_retention_batch_size)
            .clamp(1, 10_000);
        let backoff_env = match env("OUTBOX_BACKOFF_SECONDS").filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(
                v.split(',')
                    .map(|p| p.trim().parse::<u64>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| ConfigError::Env {
                        name: "OUTBOX_BACKOFF_SECONDS".into(),
                        value: v.clone(),
                        message: format!("{e} (expected comma-separated seconds, e.g. 60,120,240)"),
                    })?,
            ),
            None => None,
        };
        if let Some(b) = backoff_env.or_else(|| file.backoff_seconds.clone()) {
            if !b.is_empty() {
                s.backoff = b.into_iter().map(Duration::from_secs).collect();
            }
        }
        s.max_payload_bytes = parse(&env, "OUTBOX_MAX_PAYLOAD_BYTES")?
            .or(file.max_payload_bytes)
            .unwrap_or(s.max_payload_bytes);
        if let Some(p) = env("OUTBOX_REDIS_PREFIX").or_else(|| file.redis_prefix.clone()) {
            s.redis_prefix = p;
        }
        s.dedupe_ttl = parse(&env, "OUTBOX_DEDUPE_TTL_SECONDS")?
            .or(file.dedupe_ttl_seconds)
            .map(Duration::from_secs)
            .unwrap_or(s.dedupe_ttl);
        if let Some(d) = env("OUTBOX_PLUGIN_DIR").or_else(|| file.plugin_dir.clone()) {
            s.plugin_dir = PathBuf::from(d);
        }
        if let Some(a) = env("OUTBOX_HTTP_ADDR").or_else(|| file.http_addr.clone()) {
            s.http_addr = a;
        }
        s.worker_queue_group = env("WORKER_QUEUE_GROUP").filter(|g| !g.trim().is_empty());
        s.handler_max_retries = parse(&env, "OUTBOX_HANDLER_MAX_RETRIES")?
            .or(file.handler_max_retries)
            .unwrap_or(s.handler_max_retries);
        let handler_backoff =
            match env("OUTBOX_HANDLER_BACKOFF_SECONDS").filter(|v| !v.trim().is_empty()) {
                Some(v) => Some(
                    v.split(',')
                        .map(|p| p.trim().parse::<u64>())
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| ConfigError::Env {
                            name: "OUTBOX_HANDLER_BACKOFF_SECONDS".into(),
                            value: v.clone(),
                            message: format!("{e} (expected comma-separated seconds)"),
                        })?,
                ),
                None => file.handler_backoff_seconds.clone(),
            };
        if let Some(b) = handler_backoff.filter(|b| !b.is_empty()) {
            s.handler_backoff = b.into_iter().map(Duration::from_secs).collect();
        }
        s.idempotency_ttl = parse(&env, "OUTBOX_IDEMPOTENCY_TTL_SECONDS")?
            .or(file.idempotency_ttl_seconds)
            .map(Duration::from_secs)
            .unwrap_or(s.idempotency_ttl);
        s.receiver_lease = parse(&env, "OUTBOX_RECEIVER_LEASE_MS")?
            .or(file.receiver_lease_ms)
            .map(ms)
            .unwrap_or(s.receiver_lease)
            .max(ms(100));
        s.receiver_concurrency = parse(&env, "OUTBOX_RECEIVER_CONCURRENCY")?
            .or(file.receiver_concurrency)
            .unwrap_or(s.receiver_concurrency)
            .clamp(1, 1024);
        Ok(s)
    }

    /// Handler retry delay after failed attempt `attempt` (1-based).
    pub fn handler_backoff_after(&self, attempt: u32) -> Duration {
        let idx = (attempt.max(1) as usize - 1).min(self.handler_backoff.len() - 1);
        self.handler_backoff[idx]
    }

    /// Retry delay after failed attempt `attempt` (1-based): 1, 2, 4, ... minutes by default.
    pub fn backoff_after(&self, attempt: i32) -> Duration {
        let idx = (attempt.max(1) as usize - 1).min(self.backoff.len() - 1);
        self.backoff[idx]
    }
}

/// Everything the host needs: the routes file and the resolved settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the routes file came from (`None`: built-in default).
    pub path: Option<PathBuf>,
    /// The parsed routes file.
    pub routes: RoutesFile,
    /// Resolved settings.
    pub settings: Settings,
}

impl Config {
    /// Load `OUTBOX_CONFIG` (default `routes.toml`; the built-in default table when that file
    /// does not exist and no path was given explicitly) and resolve the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        match std::env::var("OUTBOX_CONFIG")
            .ok()
            .filter(|p| !p.is_empty())
        {
            Some(p) => Self::load(Path::new(&p)),
            None if Path::new("routes.toml").exists() => Self::load(Path::new("routes.toml")),
            None => Self::builtin(),
        }
    }

    /// Load a specific routes file and resolve the environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let routes = RoutesFile::load(path)?;
        let settings = Settings::resolve(&routes.settings)?;
        Ok(Self {
            path: Some(path.to_path_buf()),
            routes,
            settings,
        })
    }

    /// The built-in default `routes.toml` with the environment applied.
    pub fn builtin() -> Result<Self, ConfigError> {
        let routes = RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("<built-in routes.toml>"))?;
        let settings = Settings::resolve(&routes.settings)?;
        Ok(Self {
            path: None,
            routes,
            settings,
        })
    }
}
