//! Streams enqueue: the script the streams sink runs for a queue's hand-offs, beside the keys it
//! writes (a queue's enqueue markers, its stream and its trim counts), and what its reply says.
//!
//! Owns [`enqueue_script`] (per entry a set-if-absent marker + `XADD`, up to [`ENQUEUE_BATCH`]
//! entries of one queue in one call, atomic; with a queue's `max_len`, the trim and the exact count
//! of what it dropped unread or unacknowledged, per consumer group, in the same call), the trim
//! counts hash's field names ([`trim_field`], put into the script from here and read back by
//! [`super::backlog`]) and [`Trimmed`], the trim part of the script's reply. The entry's fields
//! come in as arguments ([`super::QueueEntry::encode`]); the script names no entry field. It never
//! trims a stream whose hand-off gives no `max_len`, and performs no I/O: the sink runs the script.

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
/// are the [`trim_field`] names, `stream_id_after` is [`super::STREAM_ID_ORDER_LUA`]'s.
const ENQUEUE_LUA: &str = r#"
local replies = {}
local last_added = nil
local at = 5
for i = 3, #KEYS do
  local n = tonumber(ARGV[at])
  local first, last = at + 1, at + n
  at = last + 1
  local existing = redis.pcall('GET', KEYS[i])
  if type(existing) == 'table' and existing.err then
    replies[#replies + 1] = {-1, 'GET: ' .. existing.err}
  elseif existing then
    replies[#replies + 1] = {0, existing}
  else
    local added = redis.pcall('XADD', KEYS[1], '*', unpack(ARGV, first, last))
    if type(added) == 'table' and added.err then
      replies[#replies + 1] = {-1, 'XADD: ' .. added.err}
    else
      local set = redis.pcall('SET', KEYS[i], added, 'EX', ARGV[1])
      if type(set) == 'table' and set.err then
        replies[#replies + 1] = {-1, 'SET: ' .. set.err}
      else
        replies[#replies + 1] = {1, added}
        last_added = #replies
      end
    end
  end
end
local max_len = tonumber(ARGV[2])
if max_len == 0 or last_added == nil then return replies end
local over = redis.call('XLEN', KEYS[1]) - max_len
if over < tonumber(ARGV[3]) then return replies end
local limit = math.min(over, tonumber(ARGV[4]))
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', limit)
local removed = redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', max_len, 'LIMIT', limit)
if removed == 0 then return replies end
redis.call('HINCRBY', KEYS[2], $TRIMMED, removed)
local reply = replies[last_added]
table.insert(reply, removed)
for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, delivered
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then delivered = group[i + 1] end
  end
  local unread = 0
  for i = 1, removed do
    if stream_id_after(head[i][1], delivered) then unread = unread + 1 end
  end
  local unacked = #redis.call('XPENDING', KEYS[1], name, head[1][1], head[removed][1], removed)
  if unread > 0 or unacked > 0 then
    redis.call('HINCRBY', KEYS[2], name .. $UNREAD, unread)
    redis.call('HINCRBY', KEYS[2], name .. $UNACKED, unacked)
    table.insert(reply, name)
    table.insert(reply, unread)
    table.insert(reply, unacked)
  end
end
return replies
"#;

/// The names [`ENQUEUE_LUA`] is filled in with.
const ENQUEUE_NAMES: [(&str, &str); 3] = [
    ("TRIMMED", trim_field::TRIMMED),
    ("UNREAD", trim_field::UNREAD_SUFFIX),
    ("UNACKED", trim_field::UNACKED_SUFFIX),
];

/// The enqueue script's text: [`ENQUEUE_LUA`] with its names filled in, after the stream id
/// order functions it uses.
fn enqueue_script_text() -> String {
    super::with_stream_id_order(&super::script_with_names(ENQUEUE_LUA, &ENQUEUE_NAMES))
}

/// The most entries one call of the [`enqueue_script`] hands off: a call runs alone in Redis,
/// so this bounds how long it makes every other client wait (about a millisecond).
pub const ENQUEUE_BATCH: usize = 128;

static ENQUEUE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&enqueue_script_text()));

/// The streams enqueue script: one call hands off several entries of one queue, each one
/// exactly once. KEYS[1] = the stream, KEYS[2] = the queue's trim counts
/// ([`super::QueueKeys::trimmed`]), KEYS[3..] = one enqueue marker per entry
/// ([`super::QueueKeys::enqueued_marker`]); ARGV[1] = marker TTL (s), ARGV[2] = `max_len` (0:
/// none), ARGV[3] = trim slack, ARGV[4] = trim limit, then per entry, in the order of its
/// marker: the number n of its field and value arguments, then those n arguments. Returns one
/// reply per entry, in order: {1, entry id} when added, {0, entry id} when the marker existed,
/// {-1, error} when `GET`, `XADD` or `SET` failed for it (the others go on; an `XADD` that
/// failed wrote nothing). [`ENQUEUE_BATCH`] entries at most per call.
///
/// With a `max_len`, once the stream (after this call's entries) is at least the slack over
/// it, the oldest entries are trimmed (`XTRIM MAXLEN ~`, at most the limit per call, whole
/// stream nodes) and, when some were, the reply of the call's last added entry grows to {1, id,
/// trimmed, group, unread, unacked, ...} ([`Trimmed`]): for each consumer group that had not
/// read (id after its last delivered one) or not acknowledged (pending) some of the trimmed
/// entries, those counts, also added to the trim counts hash. Trimming does not clear a group's
/// pending list, so the pending count looks only at the range trimmed now.
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
        let script = enqueue_script_text();
        assert!(!script.contains('$'), "every name filled in");
        assert!(script.contains("HINCRBY', KEYS[2], 'trimmed', removed"));
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
