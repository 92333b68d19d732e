//! The `kv` capability: a per-plugin key-value store in Redis.
//!
//! Owns the grant check (policy target: the plugin's key), the key and value limits, the
//! per-plugin key namespace, the per-plugin quotas of keys and of bytes (an index of the
//! plugin's keys and a hash of their sizes, kept by the same script that writes a key, so the
//! counts and the keys never disagree), the atomic updates (`increment`, `compare-and-set`: each
//! one script, so two deliveries updating one key at once never lose an update, unlike a `get`
//! then a `set`) and the Redis commands with their deadline. It never lets a plugin name a Redis
//! key outside its own namespace, never lets one plugin hold more than
//! [`MAX_KV_KEYS_PER_PLUGIN`] keys or more bytes than its [`KvMaxBytes`] quota, and never runs
//! a command before the key and value passed their limits and the policy allowed it.
//!
//! Accounting of bytes: a key counts for its length plus its value's (the plugin's key, not the
//! Redis key; Redis' own overhead is not counted), recorded in the plugin's size hash (field:
//! the key; field `""`, never a key since keys are at least one byte: the total). Every write
//! first drops the index entries whose time to live has passed, with their sizes, exactly as the
//! key quota does, so expired keys free their bytes at the next write and the total is exact
//! whenever a write is decided. A write that does not grow what the plugin holds (an overwrite
//! with a value no longer than the old one) is never refused. Keys written by a version without
//! the byte quota count from their next write.

use std::time::Duration;

use super::DeliveryScope;
use crate::plugin::bindings::HostCallError;
use crate::queue::QueueKeys;

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

/// Deadline of one Redis command issued for a plugin.
const KV_DEADLINE: Duration = Duration::from_secs(5);

/// The start of every writing script. KEYS[2]: the plugin's index, KEYS[3]: its size hash.
/// Sets `now_ms`, drops the index members whose expiry has passed and their sizes (from the
/// total too), and defines `held(member)` (the bytes a key holds now), `fits(old, new, quota)`
/// (whether replacing `old` bytes by `new` keeps the total within `quota`; a write that does
/// not grow always fits) and `account(member, old, new)` (record the new size).
macro_rules! kv_script_prelude {
    () => {
        r#"
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now_ms)
if #expired > 0 then
  local freed = 0
  for _, member in ipairs(expired) do
    freed = freed + (tonumber(redis.call('HGET', KEYS[3], member)) or 0)
    redis.call('HDEL', KEYS[3], member)
  end
  redis.call('HINCRBY', KEYS[3], '', -freed)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now_ms)
end
local function held(member)
  return tonumber(redis.call('HGET', KEYS[3], member)) or 0
end
local function fits(old, new, quota)
  if new <= old then
    return true
  end
  local total = tonumber(redis.call('HGET', KEYS[3], '')) or 0
  return total - old + new <= quota
end
local function account(member, old, new)
  redis.call('HSET', KEYS[3], member, new)
  redis.call('HINCRBY', KEYS[3], '', new - old)
end
"#
    };
}

/// `SET` under the quotas. KEYS: the value key, the plugin's index, its size hash. ARGV: value,
/// ttl seconds (0: none), key quota, the plugin's key (index member), byte quota. A key already
/// in the index is overwritten whatever the key count. Returns 1, 0 when the key quota is
/// reached, -1 when the byte quota would be passed (nothing written in either case).
const SET_SCRIPT: &str = concat!(
    kv_script_prelude!(),
    r#"
local member = ARGV[4]
if not redis.call('ZSCORE', KEYS[2], member) then
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
    return 0
  end
end
local old = held(member)
local new = #member + #ARGV[1]
if not fits(old, new, tonumber(ARGV[5])) then
  return -1
end
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl)
  redis.call('ZADD', KEYS[2], now_ms + ttl * 1000, member)
else
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('ZADD', KEYS[2], '+inf', member)
end
account(member, old, new)
return 1
"#
);

/// `DEL` and its index and size entries. KEYS: the value key, the plugin's index, its size
/// hash. ARGV: the plugin's key. Returns how many keys were removed (0 or 1).
const DELETE_SCRIPT: &str = r#"
local size = tonumber(redis.call('HGET', KEYS[3], ARGV[1]))
if size then
  redis.call('HDEL', KEYS[3], ARGV[1])
  redis.call('HINCRBY', KEYS[3], '', -size)
end
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('DEL', KEYS[1])
"#;

/// `INCRBY` under the quotas. KEYS: the value key, the plugin's index, its size hash. ARGV:
/// delta, ttl seconds (0: none; applied only when the key is created), key quota, the plugin's
/// key (index member), byte quota. Returns `{'ok', new value}`, `{'quota'}` when creating the
/// key would pass the key quota, `{'bytes'}` when the longer value would pass the byte quota
/// (the old value is put back), or `{'error', message}` when the value is not an integer or the
/// sum overflows (nothing written in each case).
const INCREMENT_SCRIPT: &str = concat!(
    kv_script_prelude!(),
    r#"
local member = ARGV[4]
local before = redis.call('GET', KEYS[1])
if not before and not redis.call('ZSCORE', KEYS[2], member) then
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then
    return {'quota'}
  end
end
local ok, value = pcall(redis.call, 'INCRBY', KEYS[1], ARGV[1])
if not ok then
  return {'error', tostring(value.err or value)}
end
local old = held(member)
local new = #member + redis.call('STRLEN', KEYS[1])
if not fits(old, new, tonumber(ARGV[5])) then
  if before then
    redis.call('SET', KEYS[1], before, 'KEEPTTL')
  else
    redis.call('DEL', KEYS[1])
  end
  return {'bytes'}
end
if not before then
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    redis.call('EXPIRE', KEYS[1], ttl)
    redis.call('ZADD', KEYS[2], now_ms + ttl * 1000, member)
  else
    redis.call('ZADD', KEYS[2], '+inf', member)
  end
end
account(member, old, new)
return {'ok', value}
"#
);

/// Compare-and-set under the quotas. KEYS: the value key, the plugin's index, its size hash.
/// ARGV: `1` when a value is expected (`0`: the key must be absent), the expected value, the new
/// value, ttl seconds (0: none), key quota, the plugin's key (index member), byte quota. Returns
/// 1 when stored, 0 when the current value differs, -1 when creating the key would pass the key
/// quota, -2 when the new value would pass the byte quota (nothing written but on 1).
const COMPARE_AND_SET_SCRIPT: &str = concat!(
    kv_script_prelude!(),
    r#"
local member = ARGV[6]
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '1' then
  if current ~= ARGV[2] then
    return 0
  end
elseif current then
  return 0
end
if not current and not redis.call('ZSCORE', KEYS[2], member) then
  if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[5]) then
    return -1
  end
end
local old = held(member)
local new = #member + #ARGV[3]
if not fits(old, new, tonumber(ARGV[7])) then
  return -2
end
local ttl = tonumber(ARGV[4])
if ttl > 0 then
  redis.call('SET', KEYS[1], ARGV[3], 'EX', ttl)
  redis.call('ZADD', KEYS[2], now_ms + ttl * 1000, member)
else
  redis.call('SET', KEYS[1], ARGV[3])
  redis.call('ZADD', KEYS[2], '+inf', member)
end
account(member, old, new)
return 1
"#
);

/// The kv scripts, loaded once per process.
pub(crate) struct KvScripts {
    set: redis::Script,
    delete: redis::Script,
    increment: redis::Script,
    compare_and_set: redis::Script,
}

impl KvScripts {
    /// The scripts (sent by hash, loaded on first use).
    pub(crate) fn new() -> Self {
        Self {
            set: redis::Script::new(SET_SCRIPT),
            delete: redis::Script::new(DELETE_SCRIPT),
            increment: redis::Script::new(INCREMENT_SCRIPT),
            compare_and_set: redis::Script::new(COMPARE_AND_SET_SCRIPT),
        }
    }
}

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

/// The byte quota of the plugin of `scope`.
fn byte_quota(scope: &DeliveryScope) -> u64 {
    KvMaxBytes::of(scope.plugin.spec.kv_max_bytes)
}

/// `kv.get`.
pub(crate) async fn get(scope: &DeliveryScope, key: &str) -> Result<Option<String>, HostCallError> {
    check_key(key).map_err(HostCallError::Failed)?;
    scope.authorize(CAPABILITY, key).await?;
    let key = redis_key(scope, key);
    run(scope, redis::cmd("GET").arg(key).clone()).await
}

/// `kv.set`, with an optional time to live (at least one second), within the plugin's quota.
pub(crate) async fn set(
    scope: &DeliveryScope,
    key: &str,
    value: String,
    ttl_seconds: Option<u32>,
) -> Result<(), HostCallError> {
    check_key(key).map_err(HostCallError::Failed)?;
    check_value(&value, ttl_seconds).map_err(HostCallError::Failed)?;
    scope.authorize(CAPABILITY, key).await?;
    let keys = &scope.host.keys;
    let value_bytes = value.len();
    let quota = byte_quota(scope);
    let mut invocation = scope.host.kv_scripts.set.prepare_invoke();
    invocation
        .key(keys.kv(&scope.plugin.name, key))
        .key(keys.kv_index(&scope.plugin.name))
        .key(keys.kv_bytes(&scope.plugin.name))
        .arg(value)
        .arg(ttl_seconds.unwrap_or(0))
        .arg(MAX_KV_KEYS_PER_PLUGIN)
        .arg(key)
        .arg(quota);
    let stored: i64 = run_script(scope, invocation).await?;
    match stored {
        1 => Ok(()),
        0 => Err(HostCallError::Failed(quota_reached(&scope.plugin.name))),
        _ => Err(HostCallError::Failed(byte_quota_reached(
            &scope.plugin.name,
            quota,
            key,
            value_bytes,
        ))),
    }
}

/// `kv.delete`: whether the key existed.
pub(crate) async fn delete(scope: &DeliveryScope, key: &str) -> Result<bool, HostCallError> {
    check_key(key).map_err(HostCallError::Failed)?;
    scope.authorize(CAPABILITY, key).await?;
    let keys = &scope.host.keys;
    let mut invocation = scope.host.kv_scripts.delete.prepare_invoke();
    invocation
        .key(keys.kv(&scope.plugin.name, key))
        .key(keys.kv_index(&scope.plugin.name))
        .key(keys.kv_bytes(&scope.plugin.name))
        .arg(key);
    let removed: i64 = run_script(scope, invocation).await?;
    Ok(removed > 0)
}

/// `kv.increment`: the new value of the counter under `key` (absent counts as 0), the time to
/// live set only when this call creates it.
pub(crate) async fn increment(
    scope: &DeliveryScope,
    key: &str,
    delta: i64,
    ttl_seconds: Option<u32>,
) -> Result<i64, HostCallError> {
    check_key(key).map_err(HostCallError::Failed)?;
    check_ttl(ttl_seconds).map_err(HostCallError::Failed)?;
    scope.authorize(CAPABILITY, key).await?;
    let keys = &scope.host.keys;
    let quota = byte_quota(scope);
    let mut invocation = scope.host.kv_scripts.increment.prepare_invoke();
    invocation
        .key(keys.kv(&scope.plugin.name, key))
        .key(keys.kv_index(&scope.plugin.name))
        .key(keys.kv_bytes(&scope.plugin.name))
        .arg(delta)
        .arg(ttl_seconds.unwrap_or(0))
        .arg(MAX_KV_KEYS_PER_PLUGIN)
        .arg(key)
        .arg(quota);
    let reply: redis::Value = run_script(scope, invocation).await?;
    increment_reply(&scope.plugin.name, quota, key, reply).map_err(HostCallError::Failed)
}

/// What the increment script answered, as the plugin sees it.
fn increment_reply(
    plugin: &str,
    quota: u64,
    key: &str,
    reply: redis::Value,
) -> Result<i64, String> {
    let parts: Vec<redis::Value> = match reply {
        redis::Value::Array(parts) => parts,
        other => return Err(format!("kv: unexpected increment answer {other:?}")),
    };
    let status: String = parts
        .first()
        .and_then(|v| redis::from_redis_value(v).ok())
        .unwrap_or_default();
    match status.as_str() {
        "ok" => parts
            .get(1)
            .and_then(|v| redis::from_redis_value(v).ok())
            .ok_or_else(|| "kv: increment answered no value".to_string()),
        "quota" => Err(quota_reached(plugin)),
        // The value grew by a digit or a sign: at most 20 bytes.
        "bytes" => Err(byte_quota_reached(plugin, quota, key, 20)),
        _ => {
            let detail: String = parts
                .get(1)
                .and_then(|v| redis::from_redis_value(v).ok())
                .unwrap_or_default();
            Err(format!(
                "kv: cannot increment {key:?}: its value is not a 64-bit integer or the sum overflows ({detail})"
            ))
        }
    }
}

/// `kv.compare-and-set`: store `value` under `key` only if the current value is `expected`
/// (`None`: only if absent); whether it was stored.
pub(crate) async fn compare_and_set(
    scope: &DeliveryScope,
    key: &str,
    expected: Option<&str>,
    value: String,
    ttl_seconds: Option<u32>,
) -> Result<bool, HostCallError> {
    check_key(key).map_err(HostCallError::Failed)?;
    check_value(&value, ttl_seconds).map_err(HostCallError::Failed)?;
    if let Some(expected) = expected {
        check_value(expected, None).map_err(HostCallError::Failed)?;
    }
    scope.authorize(CAPABILITY, key).await?;
    let keys = &scope.host.keys;
    let value_bytes = value.len();
    let quota = byte_quota(scope);
    let mut invocation = scope.host.kv_scripts.compare_and_set.prepare_invoke();
    invocation
        .key(keys.kv(&scope.plugin.name, key))
        .key(keys.kv_index(&scope.plugin.name))
        .key(keys.kv_bytes(&scope.plugin.name))
        .arg(if expected.is_some() { "1" } else { "0" })
        .arg(expected.unwrap_or_default())
        .arg(value)
        .arg(ttl_seconds.unwrap_or(0))
        .arg(MAX_KV_KEYS_PER_PLUGIN)
        .arg(key)
        .arg(quota);
    let stored: i64 = run_script(scope, invocation).await?;
    match stored {
        1 => Ok(true),
        0 => Ok(false),
        -1 => Err(HostCallError::Failed(quota_reached(&scope.plugin.name))),
        _ => Err(HostCallError::Failed(byte_quota_reached(
            &scope.plugin.name,
            quota,
            key,
            value_bytes,
        ))),
    }
}

/// Run one Redis command with the kv deadline.
async fn run<T: redis::FromRedisValue>(
    scope: &DeliveryScope,
    cmd: redis::Cmd,
) -> Result<T, HostCallError> {
    let mut conn = scope.host.redis.clone();
    deadline(tokio::time::timeout(KV_DEADLINE, cmd.query_async::<T>(&mut conn)).await)
}

/// Run one kv script with the kv deadline.
async fn run_script<T: redis::FromRedisValue>(
    scope: &DeliveryScope,
    invocation: redis::ScriptInvocation<'_>,
) -> Result<T, HostCallError> {
    let mut conn = scope.host.redis.clone();
    deadline(tokio::time::timeout(KV_DEADLINE, invocation.invoke_async::<T>(&mut conn)).await)
}

/// A Redis answer within the kv deadline, as the plugin sees it.
fn deadline<T>(
    answer: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
) -> Result<T, HostCallError> {
    match answer {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(HostCallError::Failed(format!("kv: {e}"))),
        Err(_) => Err(HostCallError::Failed(format!(
            "kv: Redis did not answer within {} s",
            KV_DEADLINE.as_secs()
        ))),
    }
}

/// The namespaced Redis key of a plugin key (checked by [`check_key`]).
fn redis_key(scope: &DeliveryScope, key: &str) -> String {
    scope.host.keys.kv(&scope.plugin.name, key)
}

/// The Redis key of plugin `plugin`'s key `key`: `{prefix}outbox:kv:{plugin}:{key}`. A `:` or
/// `%` in the plugin name is percent-encoded, so no two plugins can share a key.
pub fn kv_redis_key(prefix: &str, plugin: &str, key: &str) -> String {
    QueueKeys::new(prefix).kv(plugin, key)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // The index is outside every plugin's namespace.
        let index = QueueKeys::new("").kv_index("counter");
        assert_eq!(index, "outbox:kv-index:counter");
        assert!(!index.starts_with(&QueueKeys::new("").kv_namespace("counter")));
    }

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
