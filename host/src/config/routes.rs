//! `routes.toml` as parsed: [`RoutesFile`] and its sections (`[routes]`, `[router]`,
//! `[policy]`, `[handlers]`, `[queue_groups]`; `[plugins]` and `[queues]` have modules of their
//! own), and the validation of a file on its own.
//!
//! Owns what a routes file may say: every name in it meets its naming rule
//! ([`crate::naming`]), every plugin it binds is declared, every table is within its bounds.
//! It never reads a plugin file, never connects to Redis and never builds a router: the checks
//! that need the plugins or the Redis in force run where those are assembled
//! ([`crate::live_config`]), the routing table is built by [`crate::routing`].

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::queues::check_queue_specs;
use super::{BullmqOptions, ConfigError, FileSettings, PluginSpec, QueueSpec, RateLimit, SinkKind};
use crate::naming::{
    check_file_key, validate_event_type, validate_plugin_name, validate_prefix,
    validate_queue_name, BUILTIN_PLUGIN_INVOKE, DEFAULT_POLICY_PLUGIN, DENY_ALL,
    MAX_PLUGIN_CONCURRENCY, MAX_QUEUES_PER_EVENT, NATIVE_ROUTER,
};

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
    NATIVE_ROUTER.to_string()
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
    DEFAULT_POLICY_PLUGIN.to_string()
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
            let max = MAX_QUEUES_PER_EVENT;
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
        check_queue_specs(&self.queues, &self.handlers).map_err(invalid)?;
        let known_plugin = |name: &str| self.plugins.contains_key(name);
        if self.router.plugin != NATIVE_ROUTER && !known_plugin(&self.router.plugin) {
            return Err(invalid(format!(
                "[router] plugin = '{}' is not declared under [plugins]",
                self.router.plugin
            )));
        }
        for (prefix, plugin) in &self.router.overrides {
            validate_prefix(prefix)
                .map_err(|m| invalid(format!("[router.overrides] \"{prefix}\": {m}")))?;
            if plugin != NATIVE_ROUTER && !known_plugin(plugin) {
                return Err(invalid(format!(
                    "[router.overrides] \"{prefix}\" = '{plugin}' is not declared under [plugins]"
                )));
            }
        }
        for (queue, plugin) in &self.handlers {
            validate_queue_name(queue)
                .map_err(|m| invalid(format!("[handlers] '{queue}': {m}")))?;
            if plugin.starts_with("builtin:") {
                if plugin != BUILTIN_PLUGIN_INVOKE {
                    return Err(invalid(format!(
                        "[handlers] '{queue}' = '{plugin}' is not a built-in handler (the one built-in handler is '{}')",
                        BUILTIN_PLUGIN_INVOKE
                    )));
                }
            } else if !known_plugin(plugin) {
                return Err(invalid(format!(
                    "[handlers] '{queue}' = '{plugin}' is not declared under [plugins]"
                )));
            }
        }
        if self.policy.plugin != DENY_ALL
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
                check_file_key(file)
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
                validate_event_type(&format!("plugin.hook.{hook}")).map_err(
                    |_| {
                        invalid(format!(
                            "[plugins.{name}] hooks: {hook:?} is not a hook name (plugin.hook.<hook> must be a valid event type: lowercase letters, digits, '_', '-', dot-separated)"
                        ))
                    },
                )?;
            }
            if spec.router_by_type && spec.router_payload {
                return Err(invalid(format!(
                    "[plugins.{name}]: router_by_type and router_payload exclude each other (a router that reads payloads does not decide by event type alone)"
                )));
            }
            let max = MAX_PLUGIN_CONCURRENCY as u64;
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
