//! The `policy` capability: whether one host call of one plugin may happen, and the gate every
//! host call of a delivery passes.
//!
//! Owns [`CapabilityPolicy`] (the policy's backend: the policy plugin `[policy]` names, failing
//! closed without one, or a fixed answer), the request checks done before the policy runs
//! ([`validate_request`]), the decision and denial metrics and the audit log line of a denial;
//! its decision cache lives in [`cache`], the rate limit of denial reports and the
//! `plugin.capability-use.denied` event in [`denials`], and the per-delivery gate (request
//! check, policy, what a denial leaves behind) in [`gate`]. It never performs the host call it
//! decides about, never caches a failed policy call, and never lets a plugin grow host memory or
//! the audit trail with the number of distinct targets it asks about.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use super::clip;
use crate::config::{Grants, RoutesFile};
use crate::plugin::bindings::policy_world::exports::outbox::plugin::policy_api::{
    CapabilityRequest, Decision,
};
use crate::plugin::{LoadedPlugin, PluginError, PluginRegistry};

mod cache;
pub(crate) mod denials;
pub(crate) mod gate;

pub use cache::CacheStats;
use cache::{cache_key, DecisionCache};
pub use denials::denial_dispatch_key;
pub(crate) use denials::DenialLimiter;

pub use crate::naming::DENY_ALL;

/// Event type of the audit event written for a denied host call.
pub const DENIED_EVENT_TYPE: &str = "plugin.capability-use.denied";

/// Longest target quoted in audit lines and denial events (kv keys are checked after the policy).
pub(crate) const MAX_AUDIT_TARGET: usize = 512;

/// Longest target the policy is asked about, bytes: a longer one fails before the policy runs.
pub const MAX_POLICY_TARGET_BYTES: usize = 1024;

/// Longest denial reason kept (cached, returned to the plugin, logged, published), bytes.
pub const MAX_DENIAL_REASON_BYTES: usize = 1024;

/// Cached policy decisions kept at most, all plugins together (when full, the least recently
/// used decision of the plugin holding the most bytes makes room).
pub const MAX_CACHED_DECISIONS: usize = 4096;

/// Bytes the decision cache may hold at most, all plugins together, counted as
/// [`CACHE_ENTRY_OVERHEAD`] per entry plus its clipped reason (when the next entry would pass
/// it, the least recently used decisions of the plugin holding the most bytes make room).
pub const MAX_DECISION_CACHE_BYTES: usize = 1 << 20;

/// What one cache entry costs besides its reason: the 32-byte key, the value and the map's
/// bookkeeping, rounded up.
pub const CACHE_ENTRY_OVERHEAD: usize = 96;

/// Per plugin and capability, at most one denial is logged and published per window; the
/// denials suppressed in between are counted into the next one reported.
pub const DENIAL_REPORT_WINDOW: Duration = Duration::from_secs(60);

/// The capabilities a policy is asked about.
pub const CAPABILITIES: &[&str] = &["log", "publish", "publish-tenant", "kv", "http"];

/// Decides capability checks by calling the configured policy plugin. Reads `[policy]` and looks
/// the policy plugin up on every check, so a reloaded `routes.toml` or policy `.wasm` takes
/// effect at once.
pub struct CapabilityPolicy {
    registry: Arc<PluginRegistry>,
    source: PolicySource,
    /// Decisions of the policy plugin, keyed by a hash of everything they depend on (policy
    /// version and config, caller, capability, target, grants): a policy is a pure function of
    /// its request, so an identical request under the same policy version gets the same answer
    /// without instantiating WebAssembly again. A reload changes the key; failures are never
    /// cached.
    decisions: Mutex<DecisionCache>,
    /// Which denials get an audit log line.
    log_limiter: DenialLimiter,
}

/// Where the `[policy]` section comes from.
enum PolicySource {
    /// `[policy]` of the routes file in force.
    Live(Arc<ArcSwap<RoutesFile>>),
    /// A fixed plugin name (denials are published, as `[policy]` defaults to).
    Fixed(Arc<str>),
    /// A fixed answer to every request, without any plugin (denials are published).
    Answer(Result<(), Arc<str>>),
}

/// Check a request before any policy runs: a known capability and a target of at most
/// [`MAX_POLICY_TARGET_BYTES`]. `Err` says what is wrong (a bad request, not a denial).
pub fn validate_request(capability: &str, target: &str) -> Result<(), String> {
    if !CAPABILITIES.contains(&capability) {
        return Err(format!("unknown capability '{}'", clip(capability, 64)));
    }
    if target.len() > MAX_POLICY_TARGET_BYTES {
        return Err(format!(
            "{capability}: the target is {} bytes, over the limit of {MAX_POLICY_TARGET_BYTES}",
            target.len()
        ));
    }
    Ok(())
}

impl CapabilityPolicy {
    /// A policy that follows `[policy]` of the live `routes` (hot reload included).
    pub fn new(registry: Arc<PluginRegistry>, routes: Arc<ArcSwap<RoutesFile>>) -> Self {
        Self {
            registry,
            source: PolicySource::Live(routes),
            decisions: Default::default(),
            log_limiter: DenialLimiter::new(DENIAL_REPORT_WINDOW),
        }
    }

    /// A policy that always asks plugin `policy_plugin` ([`DENY_ALL`] for none): offline tools,
    /// benches and tests.
    pub fn with_plugin(registry: Arc<PluginRegistry>, policy_plugin: &str) -> Self {
        Self {
            registry,
            source: PolicySource::Fixed(Arc::from(policy_plugin)),
            decisions: Default::default(),
            log_limiter: DenialLimiter::new(DENIAL_REPORT_WINDOW),
        }
    }

    /// A policy that gives every request the same `answer` without running a plugin (`Err`: the
    /// denial reason): tests, and tools that must not load one.
    pub fn answering(registry: Arc<PluginRegistry>, answer: Result<(), String>) -> Self {
        Self {
            registry,
            source: PolicySource::Answer(answer.map_err(Arc::from)),
            decisions: Default::default(),
            log_limiter: DenialLimiter::new(DENIAL_REPORT_WINDOW),
        }
    }

    /// Whether a denial is also written as a `plugin.capability-use.denied` event
    /// (`[policy] publish_denials` in force; on for a fixed policy, like the default).
    pub fn publish_denials(&self) -> bool {
        match &self.source {
            PolicySource::Live(live) => live.load().policy.publish_denials,
            PolicySource::Fixed(_) | PolicySource::Answer(_) => true,
        }
    }

    /// Decide whether `plugin` may use `capability` (`log`, `publish`, `kv` or `http`) on
    /// `target` (the event type, the key, or `host[:port]`). `Err` carries the denial reason.
    /// Fails closed: with `deny-all`, no policy plugin loaded or a plugin of another world,
    /// everything but `log` is denied; a policy call that traps or times out denies (`log`
    /// included). Otherwise the policy plugin decides, `log` included. Records the
    /// decision metric, and the audit line and metric of a denial. Runs WebAssembly: call it
    /// from a blocking thread.
    pub fn check(
        &self,
        plugin: &LoadedPlugin,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        self.check_with_grants(
            &plugin.name,
            || grants_json(&plugin.spec.grants),
            capability,
            target,
        )
    }

    /// [`check`](Self::check) with the caller's grants JSON (built once per delivery).
    pub(crate) fn check_with_grants(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        crate::plugin::block_on(self.check_with_grants_async(plugin, grants, capability, target))
            .unwrap_or_else(|e| {
                Err(format!(
                    "plugin '{plugin}' may not use {capability}: the capability policy could not run, so the call is denied (fail closed): {e}"
                ))
            })
    }

    /// [`check_with_grants`](Self::check_with_grants) as a future, for a host call made inside
    /// a handler's call: awaited in that call's future (under its deadline).
    pub(crate) async fn check_with_grants_async(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        let result = match validate_request(capability, target) {
            Ok(()) => self
                .decide(plugin, grants, capability, target)
                .await
                .map_err(|reason| clip(&reason, MAX_DENIAL_REASON_BYTES).to_string()),
            Err(bad) => Err(format!("plugin '{plugin}' may not use {bad}")),
        };
        let label = capability_label(capability);
        let decision = if result.is_ok() { "allow" } else { "deny" };
        metrics::counter!("outbox_capability_checks_total", "capability" => label, "decision" => decision)
            .increment(1);
        if let Err(reason) = &result {
            if let Some(suppressed) = self.log_limiter.admit(plugin, capability, Instant::now()) {
                tracing::warn!(
                    target: "outbox::audit",
                    plugin,
                    capability,
                    target = clip(target, MAX_AUDIT_TARGET),
                    reason = reason.as_str(),
                    suppressed_before = suppressed,
                    "capability denied (at most one line per plugin and capability per {} s; suppressed_before counts the denials not logged since the previous line)",
                    DENIAL_REPORT_WINDOW.as_secs()
                );
            }
            metrics::counter!("outbox_capability_denied_total", "capability" => label, "plugin" => plugin.to_string())
                .increment(1);
        }
        result
    }

    /// The serving version of the policy plugin `name` (read from `[policy]`). On a miss, when
    /// the routes in force name another policy by now, that one: a reload stores the plugins of
    /// the new routes before the routes and drops the old ones only after, so a check that read
    /// `[policy]` just before a rename still finds a policy (never "no policy" by accident).
    fn policy_plugin(&self, name: &str) -> Option<Arc<LoadedPlugin>> {
        self.registry.get(name).or_else(|| match &self.source {
            PolicySource::Live(live) => {
                let now = live.load();
                (now.policy.plugin != name)
                    .then(|| self.registry.get(&now.policy.plugin))
                    .flatten()
            }
            PolicySource::Fixed(_) | PolicySource::Answer(_) => None,
        })
    }

    async fn decide(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        let routes;
        let policy_name: &str = match &self.source {
            PolicySource::Fixed(name) => name,
            PolicySource::Answer(answer) => {
                return answer.clone().map_err(|reason| reason.to_string());
            }
            PolicySource::Live(live) => {
                routes = live.load_full();
                &routes.policy.plugin
            }
        };
        // Without a working policy plugin every call but `log` is refused (fail closed).
        let fail_closed = |why: String| {
            if capability == "log" {
                Ok(())
            } else {
                Err(format!("plugin '{plugin}' may not use {capability}: {why}"))
            }
        };
        if policy_name == DENY_ALL {
            return fail_closed(
                "[policy] plugin = \"deny-all\" refuses every capability but log".to_string(),
            );
        }
        let Some(policy) = self.policy_plugin(policy_name) else {
            return fail_closed(format!(
                "the capability policy plugin '{policy_name}' is not loaded, so every call is denied (fail closed)"
            ));
        };
        let request = CapabilityRequest {
            plugin: plugin.to_string(),
            capability: capability.to_string(),
            target: target.to_string(),
            grants: grants(),
        };
        let key = cache_key(&[
            policy.compiled.hash.as_str(),
            policy.config_json.as_str(),
            request.plugin.as_str(),
            request.capability.as_str(),
            request.target.as_str(),
            request.grants.as_str(),
        ]);
        if let Some(cached) = self
            .decisions
            .lock()
            .ok()
            .and_then(|mut d| d.get(plugin, &key))
        {
            return cached;
        }
        let decision = match policy.call_policy_in_call(&request).await {
            Ok(Decision::Allow) => Ok(()),
            Ok(Decision::Deny(reason)) => Err(reason),
            Err(PluginError::WrongWorld { found, .. }) => {
                return fail_closed(format!(
                    "[policy] plugin '{policy_name}' is a {found} plugin, not a policy (fail closed)"
                ))
            }
            Err(e) => {
                return Err(format!(
                    "plugin '{plugin}' may not use {capability}: the capability policy failed, so the call is denied (fail closed): {e}"
                ))
            }
        };
        let decision = decision.map_err(|r| clip(&r, MAX_DENIAL_REASON_BYTES).to_string());
        if let Ok(mut decisions) = self.decisions.lock() {
            decisions.insert(plugin, key, &decision);
        }
        decision
    }

    /// How much the decision cache holds now (bounded by [`MAX_CACHED_DECISIONS`] and
    /// [`MAX_DECISION_CACHE_BYTES`] whatever plugins ask).
    pub fn cache_stats(&self) -> CacheStats {
        self.decisions.lock().map(|d| d.stats()).unwrap_or_default()
    }

    /// How much of the decision cache the decisions about `plugin`'s calls hold now.
    pub fn cache_stats_of(&self, plugin: &str) -> CacheStats {
        self.decisions
            .lock()
            .map(|d| d.stats_of(plugin))
            .unwrap_or_default()
    }
}

/// The calling plugin's grants as the policy plugin reads them.
pub(crate) fn grants_json(grants: &Grants) -> String {
    serde_json::to_string(grants).unwrap_or_else(|_| "{}".to_string())
}

/// A bounded metric label for a capability name.
pub(crate) fn capability_label(capability: &str) -> &'static str {
    match capability {
        "log" => "log",
        "publish" => "publish",
        "publish-tenant" => "publish-tenant",
        "kv" => "kv",
        "http" => "http",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Arc<PluginRegistry> {
        let engine = crate::plugin::PluginEngine::new().unwrap();
        Arc::new(PluginRegistry::new(engine, "/nonexistent"))
    }

    #[test]
    fn requests_are_checked_before_the_policy() {
        assert!(validate_request("kv", "k").is_ok());
        assert!(validate_request("publish-tenant", "acme").is_ok());
        assert!(validate_request("files", "/etc/passwd").is_err());
        let long = "k".repeat(MAX_POLICY_TARGET_BYTES + 1);
        let err = validate_request("kv", &long).unwrap_err();
        assert!(err.contains("over the limit of 1024"), "{err}");
        // Even with deny-all the over-long target is refused as such.
        let policy = CapabilityPolicy::with_plugin(registry(), DENY_ALL);
        let err = policy
            .check_with_grants("x", || "{}".into(), "kv", &long)
            .unwrap_err();
        assert!(err.contains("over the limit"), "{err}");
    }

    #[test]
    fn deny_all_and_missing_policy_deny_everything_but_log() {
        let grants = || r#"{"kv": true}"#.to_string();
        let deny_all = CapabilityPolicy::with_plugin(registry(), DENY_ALL);
        assert_eq!(deny_all.check_with_grants("x", grants, "log", ""), Ok(()));
        let err = deny_all
            .check_with_grants("x", grants, "kv", "k")
            .unwrap_err();
        assert!(err.contains("deny-all"), "{err}");
        let missing = CapabilityPolicy::with_plugin(registry(), "capability-policy");
        assert_eq!(missing.check_with_grants("x", grants, "log", ""), Ok(()));
        let err = missing
            .check_with_grants("x", grants, "publish", "a.b")
            .unwrap_err();
        assert!(err.contains("'capability-policy' is not loaded"), "{err}");
    }

    /// The real policy plugin, when `scripts/build-plugins.sh` has built it.
    #[tokio::test(flavor = "multi_thread")]
    async fn the_policy_plugin_decides() {
        let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
        if !dist.join("capability-policy.wasm").exists() {
            eprintln!("skipped: plugins/dist/capability-policy.wasm is not built");
            return;
        }
        let mut routes = crate::config::RoutesFile::default();
        let spec: crate::config::PluginSpec = toml::from_str("").unwrap();
        routes.plugins.insert("capability-policy".into(), spec);
        let engine = crate::plugin::PluginEngine::new().unwrap();
        let registry = Arc::new(PluginRegistry::new(engine, dist));
        registry.apply_config(&routes).await.unwrap();
        let policy = CapabilityPolicy::with_plugin(registry, "capability-policy");
        let decisions = tokio::task::spawn_blocking(move || {
            let grants = || r#"{"publish": ["workflow."], "kv": false}"#.to_string();
            let started = std::time::Instant::now();
            let allowed = policy.check_with_grants("x", grants, "publish", "workflow.run");
            let elapsed = started.elapsed();
            let denied = policy.check_with_grants("x", grants, "kv", "k");
            (allowed, denied, elapsed)
        })
        .await
        .unwrap();
        assert_eq!(decisions.0, Ok(()));
        assert!(decisions.1.unwrap_err().contains("kv is not granted"));
        eprintln!("one policy check took {:?}", decisions.2);
    }
}
