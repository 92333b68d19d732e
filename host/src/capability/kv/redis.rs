//! The kv capability's Redis backend: the receiver's store.
//!
//! Owns the Lua scripts (each write one script, so the key quota, the byte quota and the keys
//! never disagree and two deliveries updating one key at once never lose an update), the
//! namespaced Redis keys of a plugin's keys and the deadline of each command. It is reached only
//! through [`KvInstance::call`](super::KvInstance::call), after the checks and the policy; it
//! never names a Redis key outside the calling plugin's namespace.

use std::time::Duration;

use futures::future::BoxFuture;

use super::{
    byte_quota_reached, quota_reached, KvAnswer, KvBackend, KvInstance, KvOp,
    MAX_KV_KEYS_PER_PLUGIN,
};
use crate::queue::QueueKeys;
use crate::redis_conn::RedisConn;

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

/// The kv store of a receiver: the shared Redis connection, the host's keys (prefix and
/// layout) and the scripts.
pub(crate) struct RedisKv {
    redis: RedisConn,
    keys: QueueKeys,
    scripts: KvScripts,
}

impl RedisKv {
    /// The store on `redis`, under the keys of `keys`.
    pub(crate) fn new(redis: RedisConn, keys: QueueKeys) -> Self {
        Self {
            redis,
            keys,
            scripts: KvScripts::new(),
        }
    }

    /// Run one checked, allowed operation of the plugin of `kv`.
    async fn run_op(&self, kv: &KvInstance, op: KvOp) -> Result<KvAnswer, String> {
        let plugin = &*kv.plugin;
        let keys = &self.keys;
        let quota = kv.max_bytes;
        match op {
            KvOp::Get { key } => {
                let cmd = redis::cmd("GET").arg(keys.kv(plugin, &key)).clone();
                self.command(cmd).await.map(KvAnswer::Value)
            }
            KvOp::Set {
                key,
                value,
                ttl_seconds,
            } => {
                let value_bytes = value.len();
                let mut call = invocation(&self.scripts.set, keys, plugin, &key);
                call.arg(value)
                    .arg(ttl_seconds.unwrap_or(0))
                    .arg(MAX_KV_KEYS_PER_PLUGIN)
                    .arg(&key)
                    .arg(quota);
                match self.run_script::<i64>(call).await? {
                    1 => Ok(KvAnswer::Done),
                    0 => Err(quota_reached(plugin)),
                    _ => Err(byte_quota_reached(plugin, quota, &key, value_bytes)),
                }
            }
            KvOp::Delete { key } => {
                let mut call = invocation(&self.scripts.delete, keys, plugin, &key);
                call.arg(&key);
                let removed: i64 = self.run_script(call).await?;
                Ok(KvAnswer::Existed(removed > 0))
            }
            KvOp::Increment {
                key,
                delta,
                ttl_seconds,
            } => {
                let mut call = invocation(&self.scripts.increment, keys, plugin, &key);
                call.arg(delta)
                    .arg(ttl_seconds.unwrap_or(0))
                    .arg(MAX_KV_KEYS_PER_PLUGIN)
                    .arg(&key)
                    .arg(quota);
                let reply: redis::Value = self.run_script(call).await?;
                increment_reply(plugin, quota, &key, reply).map(KvAnswer::Counter)
            }
            KvOp::CompareAndSet {
                key,
                expected,
                value,
                ttl_seconds,
            } => {
                let value_bytes = value.len();
                let mut call = invocation(&self.scripts.compare_and_set, keys, plugin, &key);
                call.arg(if expected.is_some() { "1" } else { "0" })
                    .arg(expected.unwrap_or_default())
                    .arg(value)
                    .arg(ttl_seconds.unwrap_or(0))
                    .arg(MAX_KV_KEYS_PER_PLUGIN)
                    .arg(&key)
                    .arg(quota);
                match self.run_script::<i64>(call).await? {
                    1 => Ok(KvAnswer::Stored(true)),
                    0 => Ok(KvAnswer::Stored(false)),
                    -1 => Err(quota_reached(plugin)),
                    _ => Err(byte_quota_reached(plugin, quota, &key, value_bytes)),
                }
            }
        }
    }

    /// Run one Redis command with the kv deadline.
    async fn command<T: redis::FromRedisValue>(&self, cmd: redis::Cmd) -> Result<T, String> {
        let mut conn = self.redis.clone();
        deadline(tokio::time::timeout(KV_DEADLINE, cmd.query_async::<T>(&mut conn)).await)
    }

    /// Run one kv script with the kv deadline.
    async fn run_script<T: redis::FromRedisValue>(
        &self,
        invocation: redis::ScriptInvocation<'_>,
    ) -> Result<T, String> {
        let mut conn = self.redis.clone();
        deadline(tokio::time::timeout(KV_DEADLINE, invocation.invoke_async::<T>(&mut conn)).await)
    }
}

impl KvBackend for RedisKv {
    fn run<'a>(&'a self, kv: &'a KvInstance, op: KvOp) -> BoxFuture<'a, Result<KvAnswer, String>> {
        Box::pin(self.run_op(kv, op))
    }
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

/// The invocation of `script` on plugin `plugin`'s key `key`: KEYS are its value key, the
/// plugin's index and its size hash.
fn invocation<'s>(
    script: &'s redis::Script,
    keys: &QueueKeys,
    plugin: &str,
    key: &str,
) -> redis::ScriptInvocation<'s> {
    let mut invocation = script.prepare_invoke();
    invocation
        .key(keys.kv(plugin, key))
        .key(keys.kv_index(plugin))
        .key(keys.kv_bytes(plugin));
    invocation
}

/// A Redis answer within the kv deadline, as the plugin sees it.
fn deadline<T>(
    answer: Result<redis::RedisResult<T>, tokio::time::error::Elapsed>,
) -> Result<T, String> {
    match answer {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("kv: {e}")),
        Err(_) => Err(format!(
            "kv: Redis did not answer within {} s",
            KV_DEADLINE.as_secs()
        )),
    }
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
}
