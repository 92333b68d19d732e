//! The capability policy: whether one host call of one plugin may happen.
//!
//! Owns [`CapabilityPolicy`] (which policy plugin decides, failing closed without one), its
//! decision cache, the decision and denial metrics, the audit log line of a denial, and the
//! `plugin.capability-use.denied` event a denial is recorded as. It never performs the host call
//! it decides about, and never caches a failed policy call.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::clip;
use super::publish::{bounded_dispatch_key, child_headers, ParentEvent};
use crate::config::RoutesFile;
use crate::plugin::bindings::policy_world::exports::outbox::plugin::policy_api::{
    CapabilityRequest, Decision,
};
use crate::plugin::{LoadedPlugin, PluginError, PluginRegistry};
use crate::publish::NewEvent;

/// `[policy] plugin` value that refuses every capability but `log` without running WebAssembly.
pub const DENY_ALL: &str = "deny-all";

/// Event type of the audit event written for a denied host call.
pub const DENIED_EVENT_TYPE: &str = "plugin.capability-use.denied";

/// Longest target quoted in audit lines and denial events (kv keys are checked after the policy).
pub(crate) const MAX_AUDIT_TARGET: usize = 512;

/// Cached policy decisions kept at most (the cache is cleared when full).
const MAX_CACHED_DECISIONS: usize = 4096;

/// Decides capability checks by calling the configured policy plugin. Reads `[policy]` and looks
/// the policy plugin up on every check, so a reloaded `routes.toml` or policy `.wasm` takes
/// effect at once.
pub struct CapabilityPolicy {
    registry: Arc<PluginRegistry>,
    source: PolicySource,
    /// Decisions of the policy plugin, keyed by everything they depend on (policy version and
    /// config, caller, capability, target, grants): a policy is a pure function of its request,
    /// so an identical request under the same policy version gets the same answer without
    /// instantiating WebAssembly again. A reload changes the key; failures are never cached.
    decisions: std::sync::Mutex<HashMap<String, Result<(), String>>>,
}

/// Where the `[policy]` section comes from.
enum PolicySource {
    /// `[policy]` of the routes file in force.
    Live(Arc<ArcSwap<RoutesFile>>),
    /// A fixed plugin name (denials are published, as `[policy]` defaults to).
    Fixed(Arc<str>),
}

impl CapabilityPolicy {
    /// A policy that follows `[policy]` of the live `routes` (hot reload included).
    pub fn new(registry: Arc<PluginRegistry>, routes: Arc<ArcSwap<RoutesFile>>) -> Self {
        Self {
            registry,
            source: PolicySource::Live(routes),
            decisions: Default::default(),
        }
    }

    /// A policy that always asks plugin `policy_plugin` ([`DENY_ALL`] for none): offline tools,
    /// benches and tests.
    pub fn with_plugin(registry: Arc<PluginRegistry>, policy_plugin: &str) -> Self {
        Self {
            registry,
            source: PolicySource::Fixed(Arc::from(policy_plugin)),
            decisions: Default::default(),
        }
    }

    /// Whether a denial is also written as a `plugin.capability-use.denied` event
    /// (`[policy] publish_denials` in force; on for a fixed policy, like the default).
    pub fn publish_denials(&self) -> bool {
        match &self.source {
            PolicySource::Live(live) => live.load().policy.publish_denials,
            PolicySource::Fixed(_) => true,
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
        self.check_with_grants(&plugin.name, || grants_json(plugin), capability, target)
    }

    /// [`check`](Self::check) with the caller's grants JSON (built once per delivery).
    pub(crate) fn check_with_grants(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        let result = self.decide(plugin, grants, capability, target);
        let label = capability_label(capability);
        let decision = if result.is_ok() { "allow" } else { "deny" };
        metrics::counter!("outbox_capability_checks_total", "capability" => label, "decision" => decision)
            .increment(1);
        if let Err(reason) = &result {
            tracing::warn!(
                target: "outbox::audit",
                plugin,
                capability,
                target = clip(target, MAX_AUDIT_TARGET),
                reason = reason.as_str(),
                "capability denied"
            );
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
            PolicySource::Fixed(_) => None,
        })
    }

    fn decide(
        &self,
        plugin: &str,
        grants: impl FnOnce() -> String,
        capability: &str,
        target: &str,
    ) -> Result<(), String> {
        let routes;
        let policy_name: &str = match &self.source {
            PolicySource::Fixed(name) => name,
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
        let key = [
            policy.compiled.hash.as_str(),
            policy.config_json.as_str(),
            request.plugin.as_str(),
            request.capability.as_str(),
            request.target.as_str(),
            request.grants.as_str(),
        ]
        .join("\u{0}");
        if let Some(cached) = self
            .decisions
            .lock()
            .ok()
            .and_then(|d| d.get(&key).cloned())
        {
            return cached;
        }
        let decision = match policy.call_policy(&request) {
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
        if let Ok(mut decisions) = self.decisions.lock() {
            if decisions.len() >= MAX_CACHED_DECISIONS {
                decisions.clear();
            }
            decisions.insert(key, decision.clone());
        }
        decision
    }
}

/// The calling plugin's grants as the policy plugin reads them.
pub(crate) fn grants_json(plugin: &LoadedPlugin) -> String {
    serde_json::to_string(&plugin.spec.grants).unwrap_or_else(|_| "{}".to_string())
}

/// A bounded metric label for a capability name.
fn capability_label(capability: &str) -> &'static str {
    match capability {
        "log" => "log",
        "publish" => "publish",
        "kv" => "kv",
        "http" => "http",
        _ => "other",
    }
}

/// Dispatch key of the denial event for one (parent, handler, capability, target). A target
/// outside the key charset (printable ASCII without spaces) is replaced by its SHA-256, so the
/// key follows the same rule as every producer's.
pub fn denial_dispatch_key(
    parent_id: i64,
    handler: &str,
    capability: &str,
    target: &str,
) -> String {
    let target = if target.bytes().all(|b| b.is_ascii_graphic()) {
        target.to_string()
    } else {
        format!("sha256:{}", hex::encode(Sha256::digest(target.as_bytes())))
    };
    bounded_dispatch_key(format!(
        "denied:{parent_id}:{handler}:{capability}:{target}"
    ))
}

/// The `plugin.capability-use.denied` event of one denial (idempotent per parent, handler,
/// capability and target), a child of `parent`.
pub(crate) fn denial_event(
    plugin: &str,
    capability: &str,
    target: &str,
    reason: &str,
    parent: &ParentEvent,
    handler: &str,
) -> NewEvent {
    let payload = serde_json::json!({
        "plugin": plugin,
        "capability": capability,
        "target": clip(target, MAX_AUDIT_TARGET),
        "reason": reason,
        "parent_event_id": parent.id,
        "handler": handler,
    });
    let key = denial_dispatch_key(parent.id, handler, capability, target);
    let mut event = NewEvent::new(DENIED_EVENT_TYPE, payload)
        .with_dispatch_key(key)
        .with_headers(child_headers(parent, handler, None));
    event.tenant_id = parent.tenant_id.clone();
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Arc<PluginRegistry> {
        let engine = crate::plugin::PluginEngine::new().unwrap();
        Arc::new(PluginRegistry::new(engine, "/nonexistent"))
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
