//! The capability policy: whether one host call of one plugin may happen.
//!
//! Owns [`CapabilityPolicy`] (which policy plugin decides, failing closed without one), the
//! request checks done before the policy runs ([`validate_request`]), its decision cache
//! (bounded in entries and bytes, keyed by a hash, reasons clipped, evicting the least recently
//! used decision of the plugin holding the most, so a plugin's flood evicts its own decisions
//! and no other plugin's), the decision and denial
//! metrics, the audit log line of a denial (rate-limited per plugin and capability by a
//! [`DenialLimiter`]), and the `plugin.capability-use.denied` event a denial is recorded as. It
//! never performs the host call it decides about, never caches a failed policy call, and never
//! lets a plugin grow host memory or the audit trail with the number of distinct targets it asks
//! about.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
}

/// Size of the decision cache, as [`CapabilityPolicy::cache_stats`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Entries held.
    pub entries: usize,
    /// Bytes held, counted as [`CACHE_ENTRY_OVERHEAD`] per entry plus its reason.
    pub bytes: usize,
}

/// The decision cache: per calling plugin, hash of the request -> decision (reason clipped),
/// bounded in entries and bytes for all plugins together. Each plugin's decisions keep their
/// own order of use; when the next entry would pass a bound, the least recently used decision
/// of the plugin holding the most bytes is evicted, until it fits. A plugin asking about ever
/// new targets therefore evicts its own decisions once it holds the most, and a plugin with a
/// small working set keeps its decisions cached whatever another one floods the policy with.
#[derive(Default)]
struct DecisionCache {
    plugins: HashMap<Box<str>, PluginDecisions>,
    entries: usize,
    bytes: usize,
    /// Logical clock of uses (each get or insert of a decision takes the next value).
    clock: u64,
}

/// The cached decisions of one plugin and their order of use.
#[derive(Default)]
struct PluginDecisions {
    map: HashMap<[u8; 32], CachedDecision>,
    /// Last use -> key, oldest first.
    by_use: BTreeMap<u64, [u8; 32]>,
    bytes: usize,
}

struct CachedDecision {
    decision: Result<(), Box<str>>,
    last_use: u64,
}

impl CachedDecision {
    /// What the entry counts for against [`MAX_DECISION_CACHE_BYTES`].
    fn cost(&self) -> usize {
        CACHE_ENTRY_OVERHEAD + self.decision.as_ref().err().map_or(0, |r| r.len())
    }
}

impl DecisionCache {
    /// The decision cached for `plugin` under `key`, now its most recently used.
    fn get(&mut self, plugin: &str, key: &[u8; 32]) -> Option<Result<(), String>> {
        self.clock += 1;
        let now = self.clock;
        let decisions = self.plugins.get_mut(plugin)?;
        let cached = decisions.map.get_mut(key)?;
        decisions.by_use.remove(&cached.last_use);
        decisions.by_use.insert(now, *key);
        cached.last_use = now;
        Some(
            cached
                .decision
                .as_ref()
                .map(|_| ())
                .map_err(|r| r.to_string()),
        )
    }

    fn insert(&mut self, plugin: &str, key: [u8; 32], decision: &Result<(), String>) {
        self.clock += 1;
        let entry = CachedDecision {
            decision: decision
                .as_ref()
                .map(|_| ())
                .map_err(|r| Box::from(clip(r, MAX_DENIAL_REASON_BYTES))),
            last_use: self.clock,
        };
        let cost = entry.cost();
        self.remove(plugin, &key);
        while self.entries > 0
            && (self.entries >= MAX_CACHED_DECISIONS
                || self.bytes + cost > MAX_DECISION_CACHE_BYTES)
        {
            self.evict_from_the_heaviest();
        }
        let decisions = self.plugins.entry(Box::from(plugin)).or_default();
        decisions.by_use.insert(entry.last_use, key);
        decisions.bytes += cost;
        decisions.map.insert(key, entry);
        self.entries += 1;
        self.bytes += cost;
    }

    /// Drop `plugin`'s decision under `key`, if cached.
    fn remove(&mut self, plugin: &str, key: &[u8; 32]) {
        let Some(decisions) = self.plugins.get_mut(plugin) else {
            return;
        };
        if let Some(old) = decisions.map.remove(key) {
            decisions.by_use.remove(&old.last_use);
            decisions.bytes -= old.cost();
            self.entries -= 1;
            self.bytes -= old.cost();
        }
        if decisions.map.is_empty() {
            self.plugins.remove(plugin);
        }
    }

    /// Evict the least recently used decision of the plugin holding the most bytes.
    fn evict_from_the_heaviest(&mut self) {
        let Some(heaviest) = self
            .plugins
            .iter()
            .max_by_key(|(_, d)| d.bytes)
            .map(|(name, _)| name.clone())
        else {
            return;
        };
        let oldest = self.plugins[&heaviest]
            .by_use
            .first_key_value()
            .map(|(_, key)| *key);
        match oldest {
            Some(key) => self.remove(&heaviest, &key),
            None => {
                self.plugins.remove(&heaviest);
            }
        }
    }

    fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries,
            bytes: self.bytes,
        }
    }

    /// The entries and bytes `plugin`'s decisions hold.
    fn stats_of(&self, plugin: &str) -> CacheStats {
        self.plugins
            .get(plugin)
            .map_or_else(CacheStats::default, |d| CacheStats {
                entries: d.map.len(),
                bytes: d.bytes,
            })
    }
}

/// The cache key of one request under one policy version: SHA-256 of its parts, each
/// length-prefixed (so no two different requests share a key by moving a separator).
fn cache_key(parts: &[&str]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
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

/// Rate limit of denial reports (audit log lines, denial events): per (plugin, capability), the
/// first denial of a window is reported, the others are only counted; the next report carries
/// that count. Holds one small slot per (plugin, capability), cleared when over a bound.
pub(crate) struct DenialLimiter {
    window: Duration,
    slots: Mutex<HashMap<(Box<str>, &'static str), Slot>>,
}

struct Slot {
    opened: Instant,
    suppressed: u64,
}

/// Slots a [`DenialLimiter`] keeps at most (plugins x capabilities; cleared when full).
const MAX_LIMITER_SLOTS: usize = 4096;

impl DenialLimiter {
    /// A limiter reporting at most one denial per (plugin, capability) per `window`.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            slots: Mutex::default(),
        }
    }

    /// Whether to report a denial of `capability` to `plugin` at `now`: `Some(n)` with the
    /// number of denials suppressed since the previous report, `None` to suppress this one.
    pub(crate) fn admit(&self, plugin: &str, capability: &str, now: Instant) -> Option<u64> {
        let Ok(mut slots) = self.slots.lock() else {
            return Some(0);
        };
        let key = (Box::from(plugin), capability_label(capability));
        match slots.get_mut(&key) {
            Some(slot) if now.saturating_duration_since(slot.opened) < self.window => {
                slot.suppressed += 1;
                None
            }
            Some(slot) => {
                let suppressed = slot.suppressed;
                *slot = Slot {
                    opened: now,
                    suppressed: 0,
                };
                Some(suppressed)
            }
            None => {
                if slots.len() >= MAX_LIMITER_SLOTS {
                    slots.clear();
                }
                slots.insert(
                    key,
                    Slot {
                        opened: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
        }
    }
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
            PolicySource::Fixed(_) => None,
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
pub(crate) fn grants_json(plugin: &LoadedPlugin) -> String {
    serde_json::to_string(&plugin.spec.grants).unwrap_or_else(|_| "{}".to_string())
}

/// A bounded metric label for a capability name.
fn capability_label(capability: &str) -> &'static str {
    match capability {
        "log" => "log",
        "publish" => "publish",
        "publish-tenant" => "publish-tenant",
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

/// One denial to record as an event.
pub(crate) struct Denial<'a> {
    /// The plugin that was refused.
    pub(crate) plugin: &'a str,
    /// The capability it asked for.
    pub(crate) capability: &'a str,
    /// What it asked about.
    pub(crate) target: &'a str,
    /// The policy's reason.
    pub(crate) reason: &'a str,
    /// Denials of this plugin and capability not published since the previous event.
    pub(crate) suppressed_before: u64,
}

/// The `plugin.capability-use.denied` event of one denial (idempotent per parent, handler,
/// capability and target), a child of `parent`. `suppressed_before` in the payload counts the
/// denials of the same plugin and capability that were rate-limited since the previous event
/// ([`DENIAL_REPORT_WINDOW`]).
pub(crate) fn denial_event(denial: &Denial<'_>, parent: &ParentEvent, handler: &str) -> NewEvent {
    let Denial {
        plugin,
        capability,
        target,
        reason,
        suppressed_before,
    } = *denial;
    let payload = serde_json::json!({
        "plugin": plugin,
        "capability": capability,
        "target": clip(target, MAX_AUDIT_TARGET),
        "reason": clip(reason, MAX_DENIAL_REASON_BYTES),
        "parent_event_id": parent.id,
        "handler": handler,
        "suppressed_before": suppressed_before,
        "report_window_seconds": DENIAL_REPORT_WINDOW.as_secs(),
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
    fn the_decision_cache_stays_within_its_bounds() {
        let mut cache = DecisionCache::default();
        let long_reason = "r".repeat(100_000);
        for i in 0u32..20_000 {
            let decision = if i % 2 == 0 {
                Ok(())
            } else {
                Err(long_reason.clone())
            };
            cache.insert("p", cache_key(&[&i.to_string()]), &decision);
            let stats = cache.stats();
            assert!(stats.bytes <= MAX_DECISION_CACHE_BYTES, "{stats:?}");
            assert!(stats.entries <= MAX_CACHED_DECISIONS, "{stats:?}");
        }
        let kept = cache.get("p", &cache_key(&["19999"])).unwrap().unwrap_err();
        assert_eq!(kept.len(), MAX_DENIAL_REASON_BYTES, "reasons are clipped");
        // Overwriting an entry does not count it twice.
        let mut one = DecisionCache::default();
        one.insert("p", cache_key(&["a"]), &Err("x".into()));
        one.insert("p", cache_key(&["a"]), &Err("x".into()));
        assert_eq!(one.stats().bytes, CACHE_ENTRY_OVERHEAD + 1);
        // Moving a separator does not make two requests share a key.
        assert_ne!(cache_key(&["ab", "c"]), cache_key(&["a", "bc"]));
    }

    #[test]
    fn a_plugin_flooding_the_decision_cache_evicts_only_its_own_decisions() {
        let mut cache = DecisionCache::default();
        let steady = cache_key(&["steady", "kv", "counter"]);
        cache.insert("steady", steady, &Ok(()));
        let denied = cache_key(&["steady", "kv", "secret"]);
        cache.insert("steady", denied, &Err("no".into()));
        let long_reason = "r".repeat(2000);
        for i in 0u32..50_000 {
            let decision = if i % 3 == 0 {
                Ok(())
            } else {
                Err(long_reason.clone())
            };
            cache.insert(
                "flooder",
                cache_key(&["flooder", &i.to_string()]),
                &decision,
            );
            let stats = cache.stats();
            assert!(stats.bytes <= MAX_DECISION_CACHE_BYTES, "{stats:?}");
            assert!(stats.entries <= MAX_CACHED_DECISIONS, "{stats:?}");
        }
        assert_eq!(cache.get("steady", &steady), Some(Ok(())));
        assert_eq!(cache.get("steady", &denied), Some(Err("no".into())));
        assert_eq!(cache.stats_of("steady").entries, 2);
        // The flooder keeps its most recent decisions, within what is left.
        let last = cache_key(&["flooder", "49999"]);
        assert!(cache.get("flooder", &last).is_some());
        assert!(cache
            .get("flooder", &cache_key(&["flooder", "0"]))
            .is_none());
        // Its least recently used go first: one it keeps using survives its own flood.
        let mut lru = DecisionCache::default();
        let hot = cache_key(&["hot"]);
        lru.insert("p", hot, &Ok(()));
        for i in 0u32..10_000 {
            lru.insert("p", cache_key(&[&i.to_string()]), &Ok(()));
            assert!(lru.get("p", &hot).is_some(), "evicted at {i}");
        }
        assert_eq!(lru.stats().entries, MAX_CACHED_DECISIONS);
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
    fn denial_reports_are_limited_per_plugin_and_capability() {
        let limiter = DenialLimiter::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(limiter.admit("p", "kv", t0), Some(0));
        for _ in 0..1000 {
            assert_eq!(limiter.admit("p", "kv", t0 + Duration::from_secs(1)), None);
        }
        assert_eq!(limiter.admit("p", "http", t0), Some(0), "per capability");
        assert_eq!(limiter.admit("q", "kv", t0), Some(0), "per plugin");
        // The next window reports again, with the count left out.
        assert_eq!(
            limiter.admit("p", "kv", t0 + Duration::from_secs(61)),
            Some(1000)
        );
        assert_eq!(limiter.admit("p", "kv", t0 + Duration::from_secs(62)), None);
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
