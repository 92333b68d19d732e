//! Configuration: `routes.toml` plus environment variables.
//!
//! Owns parsing and validation of the operator's config file and the naming rules for what it
//! declares (routing prefixes, queue names, plugin names); the runtime settings and their env
//! vars (DESIGN.md) are declared once, in one table in `config/settings.rs` that generates
//! [`Settings`] (environment wins over `[settings]` in the file, which wins over the defaults). It never connects to anything: a [`Config`] is plain
//! data, validated as a whole, so a broken edit can be rejected before it replaces the config
//! that is serving.

mod queues;
mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::routing::{RouteRule, RouteTable};

pub use queues::{
    BackoffKind, BullmqBackoff, BullmqOptions, JobData, KeepJobs, QueueSpec, RateLimit, SinkKind,
    DEFAULT_BULLMQ_JOB_ID, DEFAULT_BULLMQ_PREFIX, MAX_QUEUE_CONCURRENCY,
};
pub use settings::{
    FileSettings, SettingSource, Settings, ShownSetting, DEFAULT_MAX_EVENT_GENERATION,
    DEFAULT_MAX_PAYLOAD_BYTES,
};

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
    /// A `[settings]` value breaks its setting's rule (for settings not read from a file).
    #[error("[settings] {key} {message}")]
    Setting {
        /// The key under `[settings]`.
        key: String,
        /// What is wrong.
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
    /// Tenants the plugin may publish into besides its event's own (`"*"`: any). Without one,
    /// a handler's children stay in the tenant of the event it handles.
    #[serde(default)]
    pub publish_tenants: Vec<String>,
    /// Whether the plugin may use its (namespaced) key-value store.
    #[serde(default)]
    pub kv: bool,
    /// Hosts (`host` or `host:port`) the plugin may call over HTTP. Without a port, only the
    /// scheme's default port (80, 443). Loopback, link-local, private and other non-public
    /// addresses are reached only through an entry naming that IP (`"127.0.0.1:8080"`) with the
    /// request's port, whether the URL names the IP or a name resolving to it (then an entry
    /// must name the name too).
    #[serde(default)]
    pub http: Vec<String>,
    /// Name of an environment variable holding an HMAC-SHA256 secret: when set, the host signs
    /// this plugin's outbound HTTP requests (the plugin never sees the secret).
    #[serde(default)]
    pub http_signing_secret_env: Option<String>,
    /// Whether the host may sign requests over plain `http://` (off: signed requests go over
    /// `https://` only, so the signature and body are not readable on the way).
    #[serde(default)]
    pub http_signing_allow_plain_http: bool,
}

/// `[plugins.NAME]`: one WebAssembly plugin, its limits, config and grants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSpec {
    /// The `.wasm` file, a relative path of plain names inside the plugin directory (default
    /// `NAME.wasm`).
    #[serde(default)]
    pub file: Option<String>,
    /// Fuel per call (roughly WebAssembly instructions); a runaway loop ends as an error.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// Linear memory cap per call, in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Wall-clock limit per call, in milliseconds: computing and waiting (sleeps, host calls,
    /// the wait for a call slot) alike.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Calls of this plugin running at once (1 to 32, default 16); more wait for a slot, and
    /// the wait counts against their `timeout_ms`.
    #[serde(default)]
    pub max_concurrency: Option<u64>,
    /// Free-form config handed to the plugin as JSON on every call.
    #[serde(default)]
    pub config: Option<toml::Value>,
    /// Router plugins only: hand each event's `payload` and `headers` to the plugin (default
    /// false: a router receives them as empty strings, and every other field of the event).
    /// Content-based routers set it; routing by type alone does not pay for copying payloads
    /// into the guest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub router_payload: bool,
    /// Capabilities this plugin may use.
    #[serde(default)]
    pub grants: Grants,
    /// Handler plugins only: bytes of kv keys and values the plugin may hold at once (1 to
    /// 1 GiB, default 16 MiB; see `capability::kv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_max_bytes: Option<crate::capability::kv::KvMaxBytes>,
    /// Handler plugins only: the event versions this handler supports, as a list for every
    /// event type (`[1, 2]`) or per type (`{ "mail.welcome" = [2, 3], "*" = [1] }`: a type not
    /// listed falls back to `"*"`, and without `"*"` to every version). An entry of another
    /// version is acknowledged without running the handler and receipted
    /// `skipped_unsupported_version` (not retried, not a failure). Unset: every version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_versions: Option<SupportedVersions>,
    /// Hooks this plugin subscribes to: a `plugin.invoke.<this plugin>` job for hook `<hook>`
    /// (fanned out from a `plugin.hook.<hook>` event) runs it only when `<hook>` is listed here;
    /// any other job naming it is dead-lettered unrun.
    #[serde(default)]
    pub hooks: Vec<String>,
}

/// The event versions a handler plugin supports (`supported_versions` of `[plugins.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SupportedVersions {
    /// The same versions for every event type.
    All(Vec<i32>),
    /// Event type (or `"*"` for the others) -> versions.
    ByType(BTreeMap<String, Vec<i32>>),
}

impl SupportedVersions {
    /// The versions declared for `event_type` (`None`: every version).
    fn for_type(&self, event_type: &str) -> Option<&[i32]> {
        match self {
            Self::All(versions) => Some(versions),
            Self::ByType(map) => map
                .get(event_type)
                .or_else(|| map.get("*"))
                .map(Vec::as_slice),
        }
    }

    /// Whether a handler declaring these versions runs `event_type` at `version`.
    pub fn supports(&self, event_type: &str, version: i32) -> bool {
        self.for_type(event_type)
            .is_none_or(|versions| versions.contains(&version))
    }

    /// The versions declared for `event_type`, as `v1, v2` (or `every version`).
    pub fn describe_for(&self, event_type: &str) -> String {
        match self.for_type(event_type) {
            Some(versions) => versions
                .iter()
                .map(|v| format!("v{v}"))
                .collect::<Vec<_>>()
                .join(", "),
            None => "every version".into(),
        }
    }

    /// The declaration's rules: non-empty lists of versions >= 1, keys that are event types
    /// or `"*"`.
    fn check(&self) -> Result<(), String> {
        let check_list = |what: &str, versions: &[i32]| {
            if versions.is_empty() {
                return Err(format!("{what} lists no version"));
            }
            match versions.iter().find(|v| **v < 1) {
                Some(v) => Err(format!("{what}: version {v} must be >= 1")),
                None => Ok(()),
            }
        };
        match self {
            Self::All(versions) => check_list("supported_versions", versions),
            Self::ByType(map) => {
                if map.is_empty() {
                    return Err("supported_versions names no event type".into());
                }
                for (event_type, versions) in map {
                    if event_type != "*" {
                        crate::publish::validate_event_type(event_type)
                            .map_err(|e| format!("supported_versions: {e}"))?;
                    }
                    check_list(&format!("supported_versions.{event_type:?}"), versions)?;
                }
                Ok(())
            }
        }
    }
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
    /// Queue -> per-queue options (`[queues."outbox.billing"] ordered = true`, `sink =
    /// "bullmq"`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub queues: BTreeMap<String, QueueSpec>,
}

/// How much longer than the slowest handler plugin's `timeout_ms` the receiver lease
/// (`OUTBOX_RECEIVER_LEASE_MS`) must be: room for the claim, the outcome script and a busy
/// runtime around the call, so that a handler within its time limit never outlives its claim
/// even before the claim is renewed.
pub const RECEIVER_LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The default `routes.toml` shipped with the product (the table of DESIGN.md).
pub const DEFAULT_ROUTES_TOML: &str = include_str!("../../../routes.toml");

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

    /// Whether `[queues."NAME"]` marks `queue` ordered.
    pub fn is_ordered(&self, queue: &str) -> bool {
        self.queues.get(queue).is_some_and(|spec| spec.ordered)
    }

    /// Every queue this file names (as a route's destination, under `[handlers]`, in a queue
    /// group or under `[queues]`), sorted.
    pub fn queue_names(&self) -> Vec<String> {
        let mut names: std::collections::BTreeSet<String> =
            self.routes.values().flat_map(QueueList::to_vec).collect();
        names.extend(self.handlers.keys().cloned());
        names.extend(self.queue_groups.values().flatten().cloned());
        names.extend(self.queues.keys().cloned());
        names.into_iter().collect()
    }

    /// The sink `queue`'s events go to (`streams` unless `[queues."NAME"]` says otherwise).
    pub fn sink_of(&self, queue: &str) -> SinkKind {
        self.queues
            .get(queue)
            .map(|spec| spec.sink)
            .unwrap_or_default()
    }

    /// `[queues."NAME"] max_len` of `queue`, if set.
    pub fn max_len_of(&self, queue: &str) -> Option<u64> {
        self.queues.get(queue).and_then(|spec| spec.max_len)
    }

    /// `[queues."NAME"] concurrency` of `queue`, if set.
    pub fn concurrency_of(&self, queue: &str) -> Option<usize> {
        self.queues
            .get(queue)
            .and_then(|spec| spec.concurrency)
            .map(|n| n as usize)
    }

    /// `[queues."NAME"] rate_limit` of `queue`, if set.
    pub fn rate_limit_of(&self, queue: &str) -> Option<RateLimit> {
        self.queues.get(queue).and_then(|spec| spec.rate_limit)
    }

    /// The BullMQ options of `queue` (the defaults when it has none).
    pub fn bullmq_options(&self, queue: &str) -> BullmqOptions {
        self.queues
            .get(queue)
            .map(|spec| spec.bullmq_options().into_owned())
            .unwrap_or_default()
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

    /// The plugins receivers run as handlers, with their time limit: those bound to a queue in
    /// `[handlers]`, and, when a queue is bound to `builtin:plugin-invoke`, those subscribed to
    /// a hook (`hooks`). Plugins not declared under `[plugins]` are left out.
    pub fn handler_plugin_timeouts(&self) -> BTreeMap<&str, Duration> {
        let invokes = self
            .handlers
            .values()
            .any(|h| h == crate::receive::BUILTIN_PLUGIN_INVOKE);
        self.plugins
            .iter()
            .filter(|(name, spec)| {
                self.handlers.values().any(|h| h == *name) || (invokes && !spec.hooks.is_empty())
            })
            .map(|(name, spec)| {
                (
                    name.as_str(),
                    crate::plugin::PluginLimits::from_spec(spec).timeout,
                )
            })
            .collect()
    }

    /// Check that the Redis `redis_url` names can serve these queues: on a Redis Cluster a
    /// BullMQ queue is refused (BullMQ's keys of one queue live in many slots unless its prefix
    /// carries a hash tag, and the host's enqueue marker would sit in yet another: the add
    /// script could not run), naming the queue.
    pub fn check_redis(&self, redis_url: &str) -> Result<(), String> {
        if !crate::redis_conn::names_cluster(redis_url) {
            return Ok(());
        }
        match self
            .queues
            .iter()
            .find(|(_, spec)| spec.sink == SinkKind::Bullmq)
        {
            Some((queue, _)) => Err(format!(
                "[queues.\"{queue}\"] sink = \"bullmq\" is not supported on a Redis Cluster (REDIS_URL names one): keep BullMQ queues on a single Redis node, or use the streams sink"
            )),
            None => Ok(()),
        }
    }

    /// Check that a receiver lease of `lease` covers every handler plugin's time limit plus
    /// [`RECEIVER_LEASE_MARGIN`]; otherwise the error names the setting, the slowest plugin and
    /// the smallest lease that would do.
    pub fn check_receiver_lease(&self, lease: Duration) -> Result<(), String> {
        let Some((plugin, timeout)) = self
            .handler_plugin_timeouts()
            .into_iter()
            .max_by_key(|(_, timeout)| *timeout)
        else {
            return Ok(());
        };
        let needed = timeout + RECEIVER_LEASE_MARGIN;
        if lease >= needed {
            return Ok(());
        }
        Err(format!(
            "receiver lease OUTBOX_RECEIVER_LEASE_MS ([settings] receiver_lease_ms) = {} ms is shorter than handler plugin '{plugin}' timeout_ms = {} ms plus a {} ms margin: another consumer could take an entry over while the handler still runs; set it to at least {} (or lower [plugins.{plugin}] timeout_ms)",
            lease.as_millis(),
            timeout.as_millis(),
            RECEIVER_LEASE_MARGIN.as_millis(),
            needed.as_millis(),
        ))
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
            let max = crate::routing::MAX_QUEUES_PER_EVENT;
            if queues.len() > max {
                return Err(invalid(format!(
                    "[routes] \"{prefix}\": {} queues, more than the {max} one event may go to",
                    queues.len()
                )));
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
        for queue in self.queues.keys() {
            validate_queue_name(queue)
                .map_err(|m| invalid(format!("[queues] \"{queue}\": {m}")))?;
        }
        queues::check_queue_specs(&self.queues, &self.handlers).map_err(invalid)?;
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
            if plugin.starts_with("builtin:") {
                if plugin != crate::receive::BUILTIN_PLUGIN_INVOKE {
                    return Err(invalid(format!(
                        "[handlers] '{queue}' = '{plugin}' is not a built-in handler (the one built-in handler is '{}')",
                        crate::receive::BUILTIN_PLUGIN_INVOKE
                    )));
                }
            } else if !known_plugin(plugin) {
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
            validate_plugin_name(name).map_err(|m| invalid(format!("[plugins] '{name}': {m}")))?;
            if let Some(file) = &spec.file {
                crate::plugin::files::check_file_key(file)
                    .map_err(|rule| invalid(format!("[plugins.{name}] file = {file:?}: {rule}")))?;
            }
            if spec.memory_mb == Some(0) || spec.timeout_ms == Some(0) || spec.fuel == Some(0) {
                return Err(invalid(format!(
                    "[plugins.{name}]: fuel, memory_mb and timeout_ms must be positive"
                )));
            }
            if let Some(supported) = &spec.supported_versions {
                supported
                    .check()
                    .map_err(|m| invalid(format!("[plugins.{name}] {m}")))?;
            }
            for hook in &spec.hooks {
                crate::publish::validate_event_type(&format!("plugin.hook.{hook}")).map_err(
                    |_| {
                        invalid(format!(
                            "[plugins.{name}] hooks: {hook:?} is not a hook name (plugin.hook.<hook> must be a valid event type: lowercase letters, digits, '_', '-', dot-separated)"
                        ))
                    },
                )?;
            }
            let max = crate::plugin::engine::MAX_CONCURRENCY as u64;
            if let Some(n) = spec.max_concurrency.filter(|n| !(1..=max).contains(n)) {
                return Err(invalid(format!(
                    "[plugins.{name}]: max_concurrency must be 1 to {max}, got {n}"
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
        self.settings.check().map_err(invalid)?;
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
    if !prefix.starts_with('*') && body.starts_with('.') {
        return Err(
            "empty first segment (no event type starts with '.'; a prefix starts with a segment or '*', as in 'mail.' or '*.deleted')"
                .into(),
        );
    }
    Ok(())
}

/// Check a plugin name, the one rule for `[plugins.NAME]` and `outbox plugins new NAME`:
/// lowercase letters, digits and single '-', starting with a letter, not ending with '-', at
/// most 64 characters. A plugin crate `NAME` builds to `NAME.wasm` (scripts/build-plugins.sh
/// turns '_' into '-'), the file a `[plugins.NAME]` entry loads by default, so '_' is refused:
/// such a name could never match its built file.
pub fn validate_plugin_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid plugin name {name:?}: use lowercase letters, digits and single '-', starting with a letter (at most 64 characters), e.g. \"form-router\""
        ))
    }
}

/// Longest queue name, bytes.
pub const MAX_QUEUE_NAME_BYTES: usize = 200;

/// Check a queue name. It becomes part of Redis keys (`{prefix}{queue}`, its markers, retry set
/// and dead-letter stream), so it must never be able to name one of the host's own keys: no `:`
/// (the host's keys are `{prefix}outbox:...`) and no `.dead-letter` ending (queue `x.dead-letter`
/// would be queue `x`'s dead-letter stream). The same rule holds for `routes.toml`, router
/// plugin answers and `outbox plugins call --queue`.
pub fn validate_queue_name(queue: &str) -> Result<(), String> {
    if queue.is_empty() || queue.len() > MAX_QUEUE_NAME_BYTES {
        return Err(format!(
            "queue names are 1 to {MAX_QUEUE_NAME_BYTES} characters"
        ));
    }
    if !queue
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(
            "queue names use letters, digits, '.', '_' and '-' (no ':', which the host's own Redis keys use)"
                .into(),
        );
    }
    if queue.ends_with(crate::queue::DEAD_LETTER_SUFFIX) {
        return Err(format!(
            "a queue name must not end in '{}' (that names another queue's dead-letter stream)",
            crate::queue::DEAD_LETTER_SUFFIX
        ));
    }
    Ok(())
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

    /// Load a specific routes file and resolve the environment. A relative plugin directory
    /// from `[settings]` or the default is taken from the routes file's directory (one from
    /// `OUTBOX_PLUGIN_DIR` from the working directory): see [`crate::plugin::files`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let routes = RoutesFile::load(path)?;
        let mut settings = Settings::resolve(&routes.settings)?;
        let from_env = settings
            .describe_with(&routes.settings, |name| std::env::var(name).ok())
            .iter()
            .any(|s| s.env == "OUTBOX_PLUGIN_DIR" && s.source == SettingSource::Env);
        settings.plugin_dir =
            crate::plugin::files::plugin_dir_for(&settings.plugin_dir, from_env, Some(path));
        let config = Self {
            path: Some(path.to_path_buf()),
            routes,
            settings,
        };
        config.check()?;
        Ok(config)
    }

    /// No routes at all, settings from the environment and defaults only: what commands that
    /// do not route fall back to when the routes file cannot be used (see the CLI), so a broken
    /// `routes.toml` does not stop `publish`, `stats` or `dead-letter list`.
    pub fn environment_only() -> Result<Self, ConfigError> {
        Ok(Self {
            path: None,
            routes: RoutesFile::default(),
            settings: Settings::resolve(&FileSettings::default())?,
        })
    }

    /// The contracts folder: `OUTBOX_CONTRACTS_DIR`, else `contracts/` beside the routes file
    /// (in the working directory when the routes are built in).
    pub fn contracts_dir(&self) -> PathBuf {
        if !self.settings.contracts_dir.is_empty() {
            return PathBuf::from(&self.settings.contracts_dir);
        }
        self.path
            .as_deref()
            .and_then(Path::parent)
            .map(|dir| dir.join("contracts"))
            .unwrap_or_else(|| PathBuf::from("contracts"))
    }

    /// Load the event contracts of [`contracts_dir`](Self::contracts_dir) under
    /// `OUTBOX_CONTRACTS_MODE`.
    pub fn load_contracts(
        &self,
    ) -> Result<crate::contracts::Contracts, crate::contracts::ContractError> {
        crate::contracts::Contracts::load(Some(self.contracts_dir()), self.settings.contracts_mode)
    }

    /// The built-in default `routes.toml` with the environment applied.
    pub fn builtin() -> Result<Self, ConfigError> {
        let routes = RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("<built-in routes.toml>"))?;
        let settings = Settings::resolve(&routes.settings)?;
        let config = Self {
            path: None,
            routes,
            settings,
        };
        config.check()?;
        Ok(config)
    }

    /// The checks that need both the routes file and the resolved settings: the receiver lease
    /// against the handler plugins' time limits ([`RoutesFile::check_receiver_lease`]), the
    /// queues against the Redis `REDIS_URL` names ([`RoutesFile::check_redis`]).
    /// [`load`](Self::load) and [`builtin`](Self::builtin) run it; run it on a config built by
    /// hand.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.routes
            .check_receiver_lease(self.settings.receiver_lease)
            .and_then(|()| self.routes.check_redis(&self.settings.redis_url))
            .map_err(|message| ConfigError::Invalid {
                path: self
                    .path
                    .clone()
                    .unwrap_or_else(|| PathBuf::from("<built-in routes.toml>")),
                message,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_follow_the_built_wasm_file_names() {
        for ok in [
            "a",
            "form-router",
            "prefix-router-alt",
            "v2",
            "x1-y2",
            &"a".repeat(64),
        ] {
            assert_eq!(validate_plugin_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Form",
            "form_router",
            "1router",
            "-router",
            "router-",
            "form--router",
            "form.router",
            "form router",
            &"a".repeat(65),
        ] {
            let err = validate_plugin_name(bad).unwrap_err();
            assert!(err.contains("lowercase letters"), "{bad}: {err}");
        }
    }

    #[test]
    fn routes_file_uses_the_plugin_name_rule() {
        let err = RoutesFile::parse(
            "[policy]\nplugin = \"deny-all\"\n[plugins.my_router]\n",
            Path::new("routes.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("[plugins] 'my_router'"), "{err}");
        RoutesFile::parse(
            "[policy]\nplugin = \"deny-all\"\n[plugins.my-router]\n",
            Path::new("routes.toml"),
        )
        .unwrap();
    }

    #[test]
    fn routes_file_refuses_an_empty_backoff_list() {
        for key in ["backoff_seconds", "handler_backoff_seconds"] {
            let err = RoutesFile::parse(&format!("[settings]\n{key} = []\n"), Path::new("r.toml"))
                .unwrap_err()
                .to_string();
            assert_eq!(err, format!("r.toml: [settings] {key} must not be empty"));
        }
    }

    #[test]
    fn queues_marked_ordered_in_the_queues_table_are_ordered_and_others_are_not() {
        let routes = RoutesFile::parse(
            "[queues.\"outbox.billing\"]\nordered = true\n[queues.\"outbox.mail\"]\n",
            Path::new("r.toml"),
        )
        .unwrap();
        assert!(routes.is_ordered("outbox.billing"));
        assert!(
            !routes.is_ordered("outbox.mail"),
            "ordered defaults to false"
        );
        assert!(!routes.is_ordered("outbox.audit"), "not listed: unordered");
        assert!(!RoutesFile::default().is_ordered("outbox.billing"));
        // The shipped routes.toml parses, with its example commented out.
        RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml")).unwrap();
    }

    #[test]
    fn the_queues_table_refuses_unknown_keys_and_invalid_queue_names() {
        let err = RoutesFile::parse(
            "[queues.\"outbox.billing\"]\nordred = true\n",
            Path::new("r.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("ordred"), "{err}");
        for (bad, why) in [
            ("outbox:billing", "no ':'"),
            ("outbox.billing.dead-letter", "dead-letter"),
        ] {
            let err = RoutesFile::parse(
                &format!("[queues.\"{bad}\"]\nordered = true\n"),
                Path::new("r.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains(&format!("[queues] \"{bad}\"")), "{err}");
            assert!(err.contains(why), "{bad}: {err}");
        }
        let err = RoutesFile::parse(
            "[queues.\"outbox.billing\"]\nordered = 1\n",
            Path::new("r.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("ordered"), "{err}");
    }

    #[test]
    fn routes_file_refuses_unknown_settings_keys() {
        let err = RoutesFile::parse("[settings]\nretries = 3\n", Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("retries"), "{err}");
    }

    fn lease_config(routes: &str, lease_ms: u64) -> Config {
        Config {
            path: Some(PathBuf::from("routes.toml")),
            routes: RoutesFile::parse(routes, Path::new("routes.toml")).unwrap(),
            settings: Settings {
                receiver_lease: Duration::from_millis(lease_ms),
                ..Settings::default()
            },
        }
    }

    const SLOW_HANDLER: &str = r#"
[policy]
plugin = "deny-all"
[handlers]
"outbox.slow" = "slow"
[plugins.slow]
timeout_ms = 10000
[plugins.fast]
timeout_ms = 60000
"#;

    #[test]
    fn receiver_lease_shorter_than_a_handlers_time_limit_is_refused() {
        let err = lease_config(SLOW_HANDLER, 14_999)
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("routes.toml: "), "{err}");
        assert!(err.contains("OUTBOX_RECEIVER_LEASE_MS"), "{err}");
        assert!(err.contains("receiver_lease_ms"), "{err}");
        assert!(
            err.contains("handler plugin 'slow' timeout_ms = 10000 ms"),
            "{err}"
        );
        assert!(err.contains("at least 15000"), "{err}");
        // Exactly the time limit plus the margin is enough; a plugin no queue runs is not a
        // handler (`fast`).
        lease_config(SLOW_HANDLER, 15_000).check().unwrap();
    }

    #[test]
    fn receiver_lease_covers_hook_subscribers_and_default_time_limits() {
        let routes = r#"
[policy]
plugin = "deny-all"
[handlers]
"outbox.plugin-invoke" = "builtin:plugin-invoke"
"outbox.mail" = "mailer"
[plugins.mailer]
[plugins.audit]
hooks = ["order.paid"]
timeout_ms = 30000
"#;
        let err = lease_config(routes, 20_000)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("handler plugin 'audit' timeout_ms = 30000 ms"),
            "{err}"
        );
        lease_config(routes, 35_000).check().unwrap();
        // Without the invoke handler nobody runs a hook subscriber; `mailer` has the default
        // limit (2000 ms).
        let no_invoke =
            routes.replace("\"outbox.plugin-invoke\" = \"builtin:plugin-invoke\"\n", "");
        lease_config(&no_invoke, 7_000).check().unwrap();
        let err = lease_config(&no_invoke, 6_999)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("handler plugin 'mailer' timeout_ms = 2000 ms"),
            "{err}"
        );
    }

    #[test]
    fn supported_versions_are_checked_and_looked_up() {
        let parse = |text: &str| RoutesFile::parse(text, Path::new("routes.toml"));
        let routes = parse(
            "[policy]\nplugin = \"deny-all\"\n[plugins.mailer]\nsupported_versions = { \"mail.welcome\" = [2, 3], \"*\" = [1] }\n[plugins.other]\nsupported_versions = [1, 2]\n",
        )
        .unwrap();
        let by_type = routes.plugins["mailer"].supported_versions.clone().unwrap();
        assert!(by_type.supports("mail.welcome", 3));
        assert!(!by_type.supports("mail.welcome", 1));
        assert!(by_type.supports("mail.reset", 1));
        assert!(!by_type.supports("mail.reset", 2));
        assert_eq!(by_type.describe_for("mail.welcome"), "v2, v3");
        let all = routes.plugins["other"].supported_versions.clone().unwrap();
        assert!(all.supports("x.y", 2) && !all.supports("x.y", 3));
        let only = SupportedVersions::ByType([("a.b".to_string(), vec![1])].into());
        assert!(
            only.supports("c.d", 7),
            "types not listed, without \"*\": every version"
        );
        for (bad, expected) in [
            ("[plugins.m]\nsupported_versions = []\n", "lists no version"),
            (
                "[plugins.m]\nsupported_versions = [0]\n",
                "version 0 must be >= 1",
            ),
            (
                "[plugins.m]\nsupported_versions = { \"Mail\" = [1] }\n",
                "invalid event type",
            ),
            (
                "[plugins.m]\nsupported_versions = \"all\"\n",
                "supported_versions",
            ),
        ] {
            let bad = format!("[policy]\nplugin = \"deny-all\"\n{bad}");
            let err = parse(&bad).unwrap_err().to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
    }

    #[test]
    fn hooks_must_be_hook_names() {
        for bad in ["", "Order.Paid", "order..paid", "order paid"] {
            let err = RoutesFile::parse(
                &format!("[policy]\nplugin = \"deny-all\"\n[plugins.audit]\nhooks = [{bad:?}]\n"),
                Path::new("r.toml"),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("[plugins.audit] hooks:"), "{bad}: {err}");
        }
        RoutesFile::parse(
            "[policy]\nplugin = \"deny-all\"\n[plugins.audit]\nhooks = [\"order.paid\", \"user\"]\n",
            Path::new("r.toml"),
        )
        .unwrap();
    }

    #[test]
    fn default_routes_file_fits_the_default_receiver_lease() {
        let routes = RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml")).unwrap();
        routes
            .check_receiver_lease(Settings::default().receiver_lease)
            .unwrap();
    }

    #[test]
    fn a_handler_names_a_declared_plugin_or_the_one_built_in_handler() {
        let routes = |handler: &str| {
            format!("[policy]\nplugin = \"deny-all\"\n[handlers]\n\"outbox.q\" = \"{handler}\"\n")
        };
        RoutesFile::parse(&routes("builtin:plugin-invoke"), Path::new("r.toml")).unwrap();
        let err = RoutesFile::parse(&routes("builtin:plugin-invok"), Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not a built-in handler"), "{err}");
        let err = RoutesFile::parse(&routes("nobody"), Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not declared under [plugins]"), "{err}");
    }

    #[test]
    fn default_routes_file_parses() {
        RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml")).unwrap();
    }
}
