//! The `kv` capability: a per-plugin key-value store.
//!
//! Owns what `kv` means whatever stores it: the grant check (policy target: the plugin's key),
//! the key, value and time-to-live limits, the per-plugin quotas of keys ([`MAX_KV_KEYS_PER_PLUGIN`])
//! and of bytes ([`KvMaxBytes`], read from `[plugins.NAME] kv_max_bytes`), the error texts of a
//! full quota, and the one checked entry point, [`KvInstance::call`], through which every
//! operation reaches a [`KvBackend`]: [`redis`] in a receiver, [`memory`] in an offline call.
//! It never lets a backend see a key or value that has not passed its limits and the policy.
//!
//! Accounting of bytes (both backends): a key counts for its length plus its value's (the
//! plugin's key, not a Redis key; a store's own overhead is not counted). Expired keys free
//! their bytes at the next write. A write that does not grow what the plugin holds (an
//! overwrite with a value no longer than the old one) is never refused.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::policy::gate::Gate;
use crate::plugin::bindings::HostCallError;

pub(crate) mod memory;
#[allow(
    clippy::disallowed_methods,
    reason = "the kv capability's Redis backend speaks Redis (clippy.toml)"
)]
pub(crate) mod redis;

pub use self::redis::kv_redis_key;

/// The capability name the policy is asked about.
pub const CAPABILITY: &str = "kv";

/// Longest kv key, bytes.
pub const MAX_KV_KEY_BYTES: usize = 512;

/// Largest kv value, bytes.
pub const MAX_KV_VALUE_BYTES: usize = 1 << 20;

/// Keys one plugin may hold at once (expired and deleted keys do not count). The bytes they
/// hold are bounded by the plugin's [`KvMaxBytes`].
pub const MAX_KV_KEYS_PER_PLUGIN: usize = 1000;

pub use crate::naming::{KvMaxBytes, DEFAULT_KV_MAX_BYTES, MAX_KV_MAX_BYTES};

/// Check a key before anything else sees it: 1 to [`MAX_KV_KEY_BYTES`] bytes.
pub(crate) fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KV_KEY_BYTES {
        return Err(format!(
            "kv keys are 1 to {MAX_KV_KEY_BYTES} bytes, got {}",
            key.len()
        ));
    }
    Ok(())
}

/// Check a value and its time to live before anything else sees them.
pub(crate) fn check_value(value: &str, ttl_seconds: Option<u32>) -> Result<(), String> {
    if value.len() > MAX_KV_VALUE_BYTES {
        return Err(format!(
            "kv values are at most {MAX_KV_VALUE_BYTES} bytes, got {}",
            value.len()
        ));
    }
    check_ttl(ttl_seconds)
}

/// A time to live is absent or at least one second.
pub(crate) fn check_ttl(ttl_seconds: Option<u32>) -> Result<(), String> {
    if ttl_seconds == Some(0) {
        return Err("kv: ttl_seconds must be at least 1".into());
    }
    Ok(())
}

/// The error of a full key quota.
pub(crate) fn quota_reached(plugin: &str) -> String {
    format!(
        "kv quota of {MAX_KV_KEYS_PER_PLUGIN} keys reached for plugin '{plugin}': delete keys or let them expire before adding new ones (overwriting an existing key still works)"
    )
}

/// The error of a write that would pass the byte quota `quota` of `plugin`: storing `key` with
/// a value of `value_bytes` bytes.
pub(crate) fn byte_quota_reached(
    plugin: &str,
    quota: u64,
    key: &str,
    value_bytes: usize,
) -> String {
    format!(
        "kv quota of {quota} bytes reached for plugin '{plugin}': storing key {:?} with a value of {value_bytes} bytes would pass it (keys and values count together); delete keys or let them expire first (a write that does not grow what the plugin holds still works; kv_max_bytes in [plugins.{plugin}] sets the quota)",
        super::clip(key, 64)
    )
}

/// One kv operation a plugin asks for, as the host calls hand it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KvOp {
    /// `kv.get`.
    Get { key: String },
    /// `kv.set`, with an optional time to live (at least one second).
    Set {
        key: String,
        value: String,
        ttl_seconds: Option<u32>,
    },
    /// `kv.delete`.
    Delete { key: String },
    /// `kv.increment`: absent counts as 0; the time to live is set only when this creates it.
    Increment {
        key: String,
        delta: i64,
        ttl_seconds: Option<u32>,
    },
    /// `kv.compare-and-set`: store `value` only if the current value is `expected` (`None`:
    /// only if absent).
    CompareAndSet {
        key: String,
        expected: Option<String>,
        value: String,
        ttl_seconds: Option<u32>,
    },
}

impl KvOp {
    /// The operation's name (as `outbox plugins call` shows it).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            KvOp::Get { .. } => "get",
            KvOp::Set { .. } => "set",
            KvOp::Delete { .. } => "delete",
            KvOp::Increment { .. } => "increment",
            KvOp::CompareAndSet { .. } => "compare-and-set",
        }
    }

    /// The plugin's key it works on (the policy target).
    pub(crate) fn key(&self) -> &str {
        match self {
            KvOp::Get { key }
            | KvOp::Set { key, .. }
            | KvOp::Delete { key }
            | KvOp::Increment { key, .. }
            | KvOp::CompareAndSet { key, .. } => key,
        }
    }

    /// The limits of what the operation hands over, checked before anything else sees it: the
    /// key, then the value and time to live, then the expected value.
    fn check(&self) -> Result<(), String> {
        check_key(self.key())?;
        match self {
            KvOp::Get { .. } | KvOp::Delete { .. } => Ok(()),
            KvOp::Set {
                value, ttl_seconds, ..
            } => check_value(value, *ttl_seconds),
            KvOp::Increment { ttl_seconds, .. } => check_ttl(*ttl_seconds),
            KvOp::CompareAndSet {
                expected,
                value,
                ttl_seconds,
                ..
            } => {
                check_value(value, *ttl_seconds)?;
                match expected {
                    Some(expected) => check_value(expected, None),
                    None => Ok(()),
                }
            }
        }
    }
}

/// What a kv operation answered; each [`KvOp`] has its own kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KvAnswer {
    /// `get`: the value, if any.
    Value(Option<String>),
    /// `set`: stored.
    Done,
    /// `delete`: whether the key existed.
    Existed(bool),
    /// `increment`: the new value.
    Counter(i64),
    /// `compare-and-set`: whether it was stored.
    Stored(bool),
}

impl KvAnswer {
    /// The error of an answer of another kind than `op` gives (a backend bug).
    pub(crate) fn mismatch(&self, op: &'static str) -> HostCallError {
        HostCallError::Failed(format!("kv: {op} answered {self:?}"))
    }
}

/// Where the kv operations of a plugin are stored: Redis in a receiver ([`redis::RedisKv`]),
/// memory in an offline call ([`memory::MemoryKv`]). Reached only through [`KvInstance::call`],
/// with operations that passed the checks and the policy; it enforces the quotas of `kv`.
pub(crate) trait KvBackend: Send + Sync {
    /// Run `op` for the plugin of `kv`; `Err` is the message the plugin sees.
    fn run<'a>(&'a self, kv: &'a KvInstance, op: KvOp) -> BoxFuture<'a, Result<KvAnswer, String>>;
}

/// The kv capability of one delivery: the calling plugin and its byte quota.
pub(crate) struct KvInstance {
    /// The plugin whose keys these are.
    pub(crate) plugin: Arc<str>,
    /// Its byte quota ([`KvMaxBytes::of`] its spec).
    pub(crate) max_bytes: u64,
}

impl KvInstance {
    /// The kv capability of `plugin`, whose spec sets `kv_max_bytes` to `max_bytes`.
    pub(crate) fn new(plugin: Arc<str>, max_bytes: Option<KvMaxBytes>) -> Self {
        Self {
            plugin,
            max_bytes: KvMaxBytes::of(max_bytes),
        }
    }

    /// The checked entry point of `kv`: check what `op` hands over, ask `gate` about its key,
    /// then run it on `backend`.
    pub(crate) async fn call(
        &self,
        gate: &Gate,
        backend: &dyn KvBackend,
        op: KvOp,
    ) -> Result<KvAnswer, HostCallError> {
        op.check().map_err(HostCallError::Failed)?;
        gate.authorize(CAPABILITY, op.key()).await?;
        backend.run(self, op).await.map_err(HostCallError::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_bounded_before_anything_runs() {
        assert!(check_key("").is_err());
        assert!(check_key(&"k".repeat(MAX_KV_KEY_BYTES)).is_ok());
        assert!(check_key(&"k".repeat(MAX_KV_KEY_BYTES + 1)).is_err());
        assert!(check_value(&"v".repeat(MAX_KV_VALUE_BYTES), None).is_ok());
        assert!(check_value(&"v".repeat(MAX_KV_VALUE_BYTES + 1), None).is_err());
        assert!(check_value("v", Some(0)).is_err());
        assert!(quota_reached("p").contains("kv quota of 1000 keys reached"));
        assert!(byte_quota_reached("p", 4096, "k", 10).contains("kv quota of 4096 bytes reached"));
    }

    #[test]
    fn the_byte_quota_is_bounded_when_configured() {
        assert_eq!(KvMaxBytes::of(None), 16 << 20);
        let parse = |text: &str| {
            #[derive(serde::Deserialize)]
            struct Spec {
                kv_max_bytes: Option<KvMaxBytes>,
            }
            toml::from_str::<Spec>(text).map(|s| KvMaxBytes::of(s.kv_max_bytes))
        };
        assert_eq!(parse("kv_max_bytes = 4096").unwrap(), 4096);
        for bad in [
            "kv_max_bytes = 0",
            "kv_max_bytes = -1",
            "kv_max_bytes = 1073741825",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let err = parse("kv_max_bytes = 0").err().unwrap().to_string();
        assert!(err.contains("kv_max_bytes must be 1 to"), "{err}");
    }
}
