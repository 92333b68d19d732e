//! The policy's decision cache: per calling plugin, the decisions of the policy plugin keyed by
//! a hash of everything they depend on, bounded in entries and bytes for all plugins together.
//!
//! Owns [`DecisionCache`] and its eviction (the least recently used decision of the plugin
//! holding the most bytes makes room, so a plugin's flood evicts its own decisions and no other
//! plugin's) and the cache key. It never decides anything itself, never holds a reason longer
//! than [`MAX_DENIAL_REASON_BYTES`], and never grows past [`MAX_CACHED_DECISIONS`] entries or
//! [`MAX_DECISION_CACHE_BYTES`] bytes.

use std::collections::{BTreeMap, HashMap};

use sha2::{Digest, Sha256};

use super::{
    CACHE_ENTRY_OVERHEAD, MAX_CACHED_DECISIONS, MAX_DECISION_CACHE_BYTES, MAX_DENIAL_REASON_BYTES,
};
use crate::capability::clip;

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
pub(super) struct DecisionCache {
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
    pub(super) fn get(&mut self, plugin: &str, key: &[u8; 32]) -> Option<Result<(), String>> {
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

    pub(super) fn insert(&mut self, plugin: &str, key: [u8; 32], decision: &Result<(), String>) {
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

    pub(super) fn stats(&self) -> CacheStats {
        CacheStats {
            entries: self.entries,
            bytes: self.bytes,
        }
    }

    /// The entries and bytes `plugin`'s decisions hold.
    pub(super) fn stats_of(&self, plugin: &str) -> CacheStats {
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
pub(super) fn cache_key(parts: &[&str]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
