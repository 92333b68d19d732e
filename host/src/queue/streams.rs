//! Streams enqueue: the script the streams sink runs per hand-off, beside the keys it writes
//! (a queue's enqueue marker, its stream and its trim counts), and what its reply says.
//!
//! Owns [`enqueue_script`] (set-if-absent marker + `XADD`, one round trip, atomic; with a
//! queue's `max_len`, the trim and the exact count of what it dropped unread or unacknowledged,
//! per consumer group, in the same step), the trim counts hash's field names ([`trim_field`],
//! put into the script from here and read back by [`super::backlog`]) and [`Trimmed`], the trim
//! part of the script's reply. The entry's fields come in as arguments
//! ([`super::QueueEntry::encode`]); the script names no entry field. It never trims a stream
//! whose hand-off gives no `max_len`, and performs no I/O: the sink runs the script.

use std::sync::LazyLock;

/// Field names of a queue's trim counts hash ([`super::QueueKeys::trimmed`]).
pub mod trim_field {
    /// Entries trimmed in all.
    pub const TRIMMED: &str = "trimmed";
    /// `<group>:unread`: of those, entries the consumer group had not read.
    pub const UNREAD_SUFFIX: &str = ":unread";
    /// `<group>:unacked`: of those, entries the consumer group had read and not acknowledged.
    pub const UNACKED_SUFFIX: &str = ":unacked";
}

/// The enqueue script's template (see [`enqueue_script`]); `$TRIMMED`, `$UNREAD` and `$UNACKED`
/// are the [`trim_field`] names.
const ENQUEUE_LUA: &str = r#"
local existing = redis.call('GET', KEYS[1])
if existing then return {0, existing} end
local added = redis.pcall('XADD', KEYS[2], '*', unpack(ARGV, 5))
if type(added) == 'table' and added.err then return {-1, 'XADD: ' .. added.err} end
redis.call('SET', KEYS[1], added, 'EX', ARGV[1])
local max_len = tonumber(ARGV[2])
if max_len == 0 then return {1, added} end
local over = redis.call('XLEN', KEYS[2]) - max_len
if over < tonumber(ARGV[3]) then return {1, added} end
local limit = math.min(over, tonumber(ARGV[4]))
local head = redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', limit)
local removed = redis.call('XTRIM', KEYS[2], 'MAXLEN', '~', max_len, 'LIMIT', limit)
if removed == 0 then return {1, added} end
redis.call('HINCRBY', KEYS[3], $TRIMMED, removed)
local function split(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function after(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  return am > bm or (am == bm and as > bs)
end
local reply = {1, added, removed}
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[2])) do
  local name, delivered
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then delivered = group[i + 1] end
  end
  local unread = 0
  for i = 1, removed do
    if after(head[i][1], delivered) then unread = unread + 1 end
  end
  local unacked = #redis.call('XPENDING', KEYS[2], name, head[1][1], head[removed][1], removed)
  if unread > 0 or unacked > 0 then
    redis.call('HINCRBY', KEYS[3], name .. $UNREAD, unread)
    redis.call('HINCRBY', KEYS[3], name .. $UNACKED, unacked)
    table.insert(reply, name)
    table.insert(reply, unread)
    table.insert(reply, unacked)
  end
end
return reply
"#;

/// The names [`ENQUEUE_LUA`] is filled in with.
const ENQUEUE_NAMES: [(&str, &str); 3] = [
    ("TRIMMED", trim_field::TRIMMED),
    ("UNREAD", trim_field::UNREAD_SUFFIX),
    ("UNACKED", trim_field::UNACKED_SUFFIX),
];

static ENQUEUE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&super::script_with_names(ENQUEUE_LUA, &ENQUEUE_NAMES)));

/// The streams enqueue script. KEYS[1] = the enqueue marker
/// ([`super::QueueKeys::enqueued_marker`]), KEYS[2] = the stream, KEYS[3] = the queue's trim
/// counts ([`super::QueueKeys::trimmed`]); ARGV[1] = marker TTL (s), ARGV[2] = `max_len` (0:
/// none), ARGV[3] = trim slack, ARGV[4] = trim limit, ARGV[5..] = the entry's field/value
/// pairs. Returns {1, entry id} when added, {0, entry id} when the marker existed, {-1, error}
/// when `XADD` failed (nothing written).
///
/// With a `max_len`, once the stream is at least the slack over it, the oldest entries are
/// trimmed (`XTRIM MAXLEN ~`, at most the limit per call, whole stream nodes) and, when some
/// were, the reply grows to {1, id, trimmed, group, unread, unacked, ...} ([`Trimmed`]): for
/// each consumer group that had not read (id after its last delivered one) or not acknowledged
/// (pending) some of the trimmed entries, those counts, also added to the trim counts hash.
/// Trimming does not clear a group's pending list, so the pending count looks only at the
/// range trimmed now.
pub fn enqueue_script() -> redis::Script {
    ENQUEUE.clone()
}

/// What one enqueue's trim dropped before its consumers finished it, per consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Trimmed {
    /// Entries trimmed.
    pub entries: u64,
    /// Per consumer group: (group, entries it had not read, entries it had read and not
    /// acknowledged).
    pub unfinished: Vec<(String, u64, u64)>,
}

impl Trimmed {
    /// The trim part of an enqueue reply (what follows `{1, id}`): `trimmed, group, unread,
    /// unacked, ...`; `None` when there is none or it is unreadable.
    pub fn from_reply(extra: &[redis::Value]) -> Option<Self> {
        let number = |v: &redis::Value| redis::from_redis_value::<u64>(v).ok();
        let (first, groups) = extra.split_first()?;
        Some(Trimmed {
            entries: number(first)?,
            unfinished: groups
                .chunks(3)
                .filter_map(|g| match g {
                    [name, unread, unacked] => Some((
                        redis::from_redis_value::<String>(name).ok()?,
                        number(unread)?,
                        number(unacked)?,
                    )),
                    _ => None,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_enqueue_script_names_the_trim_fields_from_the_constants() {
        let script = super::super::script_with_names(ENQUEUE_LUA, &ENQUEUE_NAMES);
        assert!(!script.contains('$'), "every name filled in");
        assert!(script.contains("HINCRBY', KEYS[3], 'trimmed', removed"));
        assert!(script.contains("name .. ':unread'"));
        assert!(script.contains("name .. ':unacked'"));
        assert_eq!(
            enqueue_script().get_hash(),
            redis::Script::new(&script).get_hash()
        );
    }

    #[test]
    fn the_trim_part_of_a_reply_reads_per_group() {
        use redis::Value;
        let reply = [
            Value::Int(5),
            Value::BulkString(b"outbox".to_vec()),
            Value::Int(2),
            Value::Int(1),
        ];
        assert_eq!(
            Trimmed::from_reply(&reply),
            Some(Trimmed {
                entries: 5,
                unfinished: vec![("outbox".into(), 2, 1)],
            })
        );
        assert_eq!(Trimmed::from_reply(&[]), None);
    }
}
