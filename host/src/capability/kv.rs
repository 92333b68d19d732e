//! The `kv` capability: a per-plugin key-value store in Redis.
//!
//! Owns the grant check (policy target: the plugin's key), the key and value limits, the
//! per-plugin key namespace and the Redis commands with their deadline. It never lets a plugin
//! name a Redis key outside its own namespace, and never runs a command before the policy
//! allowed it.

use std::time::Duration;

use super::DeliveryScope;
use crate::plugin::bindings::HostCallError;

/// The capability name the policy is asked about.
pub const CAPABILITY: &str = "kv";

/// Longest kv key, bytes.
pub const MAX_KV_KEY_BYTES: usize = 512;

/// Largest kv value, bytes.
pub const MAX_KV_VALUE_BYTES: usize = 1 << 20;

/// Deadline of one Redis command issued for a plugin.
const KV_DEADLINE: Duration = Duration::from_secs(5);

/// `kv.get`.
pub(crate) async fn get(scope: &DeliveryScope, key: &str) -> Result<Option<String>, HostCallError> {
    scope.authorize(CAPABILITY, key).await?;
    let key = redis_key(scope, key)?;
    run(scope, redis::cmd("GET").arg(key).clone()).await
}

/// `kv.set`, with an optional time to live (at least one second).
pub(crate) async fn set(
    scope: &DeliveryScope,
    key: &str,
    value: String,
    ttl_seconds: Option<u32>,
) -> Result<(), HostCallError> {
    scope.authorize(CAPABILITY, key).await?;
    let key = redis_key(scope, key)?;
    if value.len() > MAX_KV_VALUE_BYTES {
        return Err(HostCallError::Failed(format!(
            "kv values are at most {MAX_KV_VALUE_BYTES} bytes, got {}",
            value.len()
        )));
    }
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg(value);
    match ttl_seconds {
        Some(0) => {
            return Err(HostCallError::Failed(
                "kv: ttl_seconds must be at least 1".into(),
            ))
        }
        Some(ttl) => {
            cmd.arg("EX").arg(ttl);
        }
        None => {}
    }
    run::<()>(scope, cmd).await
}

/// `kv.delete`: whether the key existed.
pub(crate) async fn delete(scope: &DeliveryScope, key: &str) -> Result<bool, HostCallError> {
    scope.authorize(CAPABILITY, key).await?;
    let key = redis_key(scope, key)?;
    let removed: i64 = run(scope, redis::cmd("DEL").arg(key).clone()).await?;
    Ok(removed > 0)
}

/// Run one Redis command with the kv deadline.
async fn run<T: redis::FromRedisValue>(
    scope: &DeliveryScope,
    cmd: redis::Cmd,
) -> Result<T, HostCallError> {
    let mut conn = scope.host.redis.clone();
    match tokio::time::timeout(KV_DEADLINE, cmd.query_async::<T>(&mut conn)).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(HostCallError::Failed(format!("kv: {e}"))),
        Err(_) => Err(HostCallError::Failed(format!(
            "kv: Redis did not answer within {} s",
            KV_DEADLINE.as_secs()
        ))),
    }
}

/// The namespaced Redis key of a plugin key, after checking its length.
fn redis_key(scope: &DeliveryScope, key: &str) -> Result<String, HostCallError> {
    if key.is_empty() || key.len() > MAX_KV_KEY_BYTES {
        return Err(HostCallError::Failed(format!(
            "kv keys are 1 to {MAX_KV_KEY_BYTES} bytes, got {}",
            key.len()
        )));
    }
    Ok(kv_redis_key(
        &scope.host.key_prefix,
        &scope.plugin.name,
        key,
    ))
}

/// The Redis key of plugin `plugin`'s key `key`: `{prefix}outbox:kv:{plugin}:{key}`. A `:` or
/// `%` in the plugin name is percent-encoded, so no two plugins can share a key.
pub fn kv_redis_key(prefix: &str, plugin: &str, key: &str) -> String {
    crate::queue::QueueKeys::new(prefix).kv(plugin, key)
}

#[cfg(test)]
mod tests {
    use super::kv_redis_key;

    #[test]
    fn kv_keys_are_namespaced_per_plugin() {
        assert_eq!(
            kv_redis_key("", "counter", "hits"),
            "outbox:kv:counter:hits"
        );
        assert_eq!(
            kv_redis_key("app1:", "counter", "a:b"),
            "app1:outbox:kv:counter:a:b"
        );
        // Plugin "a" key "b:c" and plugin "a:b" key "c" must not meet.
        assert_ne!(kv_redis_key("", "a", "b:c"), kv_redis_key("", "a:b", "c"));
        assert_eq!(kv_redis_key("", "a:b", "c"), "outbox:kv:a%3Ab:c");
        assert_ne!(kv_redis_key("", "a%3Ab", "c"), kv_redis_key("", "a:b", "c"));
    }
}
