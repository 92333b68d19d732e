//! The kv capability's in-memory backend: the store of an offline call (`outbox plugins call`).
//!
//! Owns the store of the one plugin an offline run calls (kept in the run's [`OfflineLog`],
//! seeded by the caller) and the quotas as the Redis scripts decide them. Each operation it
//! runs is written down as an [`OfflineCall::Kv`]. It is reached only through
//! [`KvInstance::call`](super::KvInstance::call), after the checks and the policy; it never
//! counts a time to live down (an offline call lasts milliseconds).

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use super::{
    byte_quota_reached, quota_reached, KvAnswer, KvBackend, KvInstance, KvOp,
    MAX_KV_KEYS_PER_PLUGIN,
};
use crate::capability::offline::{OfflineCall, OfflineKvValue, OfflineLog};

/// The kv store of an offline run.
pub(crate) struct MemoryKv {
    log: OfflineLog,
}

impl MemoryKv {
    /// The store kept in `log`.
    pub(crate) fn new(log: OfflineLog) -> Self {
        Self { log }
    }
}

impl KvBackend for MemoryKv {
    fn run<'a>(&'a self, kv: &'a KvInstance, op: KvOp) -> BoxFuture<'a, Result<KvAnswer, String>> {
        let name = op.name();
        let key = op.key().to_string();
        let answer = self
            .log
            .with_kv(|store| run(store, kv, op))
            .and_then(|answer| answer);
        Box::pin(std::future::ready(answer.map(|(answer, result)| {
            self.log.record(OfflineCall::Kv {
                op: name,
                key,
                result,
            });
            answer
        })))
    }
}

/// Run `op` on `store`; the answer and its text for the record.
fn run(
    store: &mut BTreeMap<String, OfflineKvValue>,
    kv: &KvInstance,
    op: KvOp,
) -> Result<(KvAnswer, String), String> {
    let quota = (&*kv.plugin, kv.max_bytes);
    match op {
        KvOp::Get { key } => {
            let value = store.get(&key).map(|v| v.value.clone());
            let text = format!("{value:?}");
            Ok((KvAnswer::Value(value), text))
        }
        KvOp::Set {
            key,
            value,
            ttl_seconds,
        } => {
            let text = format!("stored {value:?}");
            write(store, quota, &key, value, ttl_seconds).map(|()| (KvAnswer::Done, text))
        }
        KvOp::Delete { key } => {
            let existed = store.remove(&key).is_some();
            Ok((KvAnswer::Existed(existed), format!("{existed}")))
        }
        KvOp::Increment {
            key,
            delta,
            ttl_seconds,
        } => {
            let (current, ttl) = match store.get(&key) {
                None => (0, ttl_seconds),
                Some(v) => match v.value.parse::<i64>() {
                    Ok(n) => (n, v.ttl_seconds),
                    Err(_) => {
                        return Err(format!(
                            "kv: cannot increment {key:?}: its value is not a 64-bit integer or the sum overflows ({:?})",
                            v.value
                        ))
                    }
                },
            };
            let Some(next) = current.checked_add(delta) else {
                return Err(format!(
                    "kv: cannot increment {key:?}: its value is not a 64-bit integer or the sum overflows ({current} + {delta})"
                ));
            };
            write(store, quota, &key, next.to_string(), ttl)?;
            Ok((KvAnswer::Counter(next), next.to_string()))
        }
        KvOp::CompareAndSet {
            key,
            expected,
            value,
            ttl_seconds,
        } => {
            let current = store.get(&key).map(|v| v.value.as_str());
            if current != expected.as_deref() {
                let text = format!("not stored: the value is {current:?}");
                return Ok((KvAnswer::Stored(false), text));
            }
            let text = format!("stored {value:?}");
            write(store, quota, &key, value, ttl_seconds).map(|()| (KvAnswer::Stored(true), text))
        }
    }
}

/// A kv write into the store under the quotas, as the Redis scripts decide: `Err` when `key` is
/// new and the store holds the key quota, or when the write grows the bytes of keys and values
/// the store holds past `max_bytes`.
fn write(
    store: &mut BTreeMap<String, OfflineKvValue>,
    (plugin, max_bytes): (&str, u64),
    key: &str,
    value: String,
    ttl_seconds: Option<u32>,
) -> Result<(), String> {
    let size = |k: &str, v: &OfflineKvValue| (k.len() + v.value.len()) as u64;
    let old = store.get(key).map(|v| size(key, v));
    if old.is_none() && store.len() >= MAX_KV_KEYS_PER_PLUGIN {
        return Err(quota_reached(plugin));
    }
    let old = old.unwrap_or(0);
    let new = (key.len() + value.len()) as u64;
    if new > old {
        let held: u64 = store.iter().map(|(k, v)| size(k, v)).sum();
        if held - old + new > max_bytes {
            return Err(byte_quota_reached(plugin, max_bytes, key, value.len()));
        }
    }
    store.insert(key.to_string(), OfflineKvValue { value, ttl_seconds });
    Ok(())
}
