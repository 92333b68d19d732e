//! Queue entries: the fields of one queue stream entry, as the sink writes them with `XADD`,
//! receivers read them, retries and dead letters add to them and a replay strips them.
//!
//! Owns every entry field name (as a constant in [`field`]) and [`QueueEntry`], the one encoder
//! and decoder of an entry. Existing entries must stay readable: it never renames a field or
//! changes a value's format without a migration, and it performs no I/O.

use std::collections::HashMap;

use redis::streams::StreamId;
use redis::Value;

use crate::store::ClaimedEvent;

/// Field names of a queue stream entry.
pub mod field {
    /// The outbox event id (decimal).
    pub const EVENT_ID: &str = "event_id";
    /// Dot-separated event type.
    pub const EVENT_TYPE: &str = "event_type";
    /// Schema version of the payload (decimal).
    pub const EVENT_VERSION: &str = "event_version";
    /// Tenant (empty: none).
    pub const TENANT_ID: &str = "tenant_id";
    /// Payload as JSON text.
    pub const PAYLOAD: &str = "payload";
    /// Headers as JSON text.
    pub const HEADERS: &str = "headers";
    /// Producer idempotency key (empty: none).
    pub const DISPATCH_KEY: &str = "dispatch_key";
    /// When the event was published (RFC 3339, microseconds, `Z`).
    pub const CREATED_AT: &str = "created_at";
    /// Dispatch attempt that enqueued the entry (decimal).
    pub const ATTEMPT: &str = "attempt";
    /// The event's ordering key; written only for events that have one (absent: unordered).
    /// Receivers of a queue marked `ordered` run one entry of a key at a time.
    pub const ORDERING_KEY: &str = "ordering_key";
    /// The event's generation (decimal; see `capability::publish`); written only for events a
    /// handler published (absent, as on every entry written before it existed: 0).
    pub const GENERATION: &str = "generation";
    /// Handler attempt of a redelivered entry (absent: 1).
    pub const HANDLER_ATTEMPT: &str = "handler_attempt";
    /// The error of the previous handler attempt (retries only).
    pub const LAST_ERROR: &str = "last_error";
    /// Makes each scheduled retry a distinct member of the retry set.
    pub const RETRY_NONCE: &str = "retry_nonce";
    /// Why the entry was dead-lettered (dead-letter streams only).
    pub const ERROR: &str = "error";
    /// The handler that gave up (dead-letter streams only).
    pub const HANDLER: &str = "handler";
    /// The queue the entry came from (dead-letter streams only).
    pub const QUEUE: &str = "queue";
    /// When it was dead-lettered (dead-letter streams only).
    pub const DEAD_AT: &str = "dead_at";
    /// The dead-letter entry a replayed entry came from.
    pub const REPLAYED_FROM: &str = "replayed_from";

    /// Fields a delivery adds on top of the event; dropped when the entry starts over.
    pub(crate) const DELIVERY: [&str; 2] = [HANDLER_ATTEMPT, LAST_ERROR];
    /// Fields a replay drops: what delivery and dead-lettering added.
    pub(crate) const NOT_REPLAYED: [&str; 7] = [
        ERROR,
        HANDLER,
        QUEUE,
        DEAD_AT,
        HANDLER_ATTEMPT,
        LAST_ERROR,
        RETRY_NONCE,
    ];
}

/// One queue stream entry: its id and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueEntry {
    /// Stream entry id.
    pub stream_id: String,
    /// Fields as written by the sink (plus `handler_attempt` on retries), sorted by name when
    /// read from Redis.
    pub fields: Vec<(String, String)>,
}

impl QueueEntry {
    /// The fields the sink writes for `event` (in this order), values as Redis receives them;
    /// then `ordering_key`, only when the event has one, and `generation`, only when it is
    /// above 0.
    pub fn encode(event: &ClaimedEvent) -> Vec<(&'static str, String)> {
        let mut fields = vec![
            (field::EVENT_ID, event.id.to_string()),
            (field::EVENT_TYPE, event.event_type.clone()),
            (field::EVENT_VERSION, event.event_version.to_string()),
            (
                field::TENANT_ID,
                event.tenant_id.clone().unwrap_or_default(),
            ),
            (field::PAYLOAD, event.payload.clone()),
            (field::HEADERS, event.headers.clone()),
            (
                field::DISPATCH_KEY,
                event.dispatch_key.clone().unwrap_or_default(),
            ),
            (
                field::CREATED_AT,
                event
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            ),
            (field::ATTEMPT, event.attempts.to_string()),
        ];
        if let Some(key) = &event.ordering_key {
            fields.push((field::ORDERING_KEY, key.clone()));
        }
        if event.generation > 0 {
            fields.push((field::GENERATION, event.generation.to_string()));
        }
        fields
    }

    /// An entry as read with `XREAD`/`XRANGE` (field values as text, fields sorted by name).
    pub fn from_stream(id: &StreamId) -> Self {
        let fields = id
            .map
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    redis::from_redis_value::<String>(v).unwrap_or_default(),
                )
            })
            .collect();
        Self::from_fields(id.id.clone(), fields)
    }

    /// An entry from its id and a flat `[name, value, name, value, ...]` list (as in an
    /// `XAUTOCLAIM` reply); a trailing name without a value is ignored.
    pub fn from_flat(stream_id: impl Into<String>, flat: &[String]) -> Self {
        let fields = flat
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect();
        Self::from_fields(stream_id.into(), fields)
    }

    fn from_fields(stream_id: String, mut fields: Vec<(String, String)>) -> Self {
        fields.sort();
        Self { stream_id, fields }
    }

    /// An entry from a read reply's `[name, value, ...]` list, taking its strings as they are.
    /// Read as `XREAD` always read entries: a name given twice keeps its last value, a value
    /// that is not UTF-8 reads as empty, a name that is not UTF-8 is left out, and no list (an
    /// entry deleted while pending) is an entry without fields.
    fn from_read_reply(stream_id: String, flat: Value) -> Self {
        let mut fields = Vec::new();
        let mut values = match flat {
            Value::Array(values) => values.into_iter(),
            _ => Vec::new().into_iter(),
        };
        while let (Some(name), Some(value)) = (values.next(), values.next()) {
            let Some(name) = owned_text(name) else {
                continue;
            };
            fields.push((name, owned_text(value).unwrap_or_default()));
        }
        // Last value wins: a stable sort of the reversed list puts each name's last value
        // first among its own, and `dedup_by` keeps the first.
        fields.reverse();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        fields.dedup_by(|later, first| later.0 == first.0);
        Self { stream_id, fields }
    }

    /// A field's value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A field's value unless it is absent or empty.
    fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// The outbox event id.
    pub fn event_id(&self) -> Option<i64> {
        self.get(field::EVENT_ID)?.parse().ok()
    }

    /// The event type, unless absent or empty.
    pub fn event_type(&self) -> Option<&str> {
        self.non_empty(field::EVENT_TYPE)
    }

    /// The payload schema version (1 when absent or not a number).
    pub fn event_version(&self) -> i32 {
        self.get(field::EVENT_VERSION)
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
    }

    /// The tenant, unless absent or empty.
    pub fn tenant_id(&self) -> Option<&str> {
        self.non_empty(field::TENANT_ID)
    }

    /// The payload JSON text (`{}` when absent).
    pub fn payload(&self) -> &str {
        self.get(field::PAYLOAD).unwrap_or("{}")
    }

    /// The headers JSON text (`{}` when absent).
    pub fn headers(&self) -> &str {
        self.get(field::HEADERS).unwrap_or("{}")
    }

    /// The producer idempotency key, unless absent or empty.
    pub fn dispatch_key(&self) -> Option<&str> {
        self.non_empty(field::DISPATCH_KEY)
    }

    /// The ordering key, unless absent or empty (an entry without one is unordered).
    pub fn ordering_key(&self) -> Option<&str> {
        self.non_empty(field::ORDERING_KEY)
    }

    /// The event's generation: 0 when absent (a producer's event, or an entry written before
    /// the field existed), unreadable or negative.
    pub fn generation(&self) -> i32 {
        self.get(field::GENERATION)
            .and_then(|g| g.parse::<i32>().ok())
            .unwrap_or(0)
            .max(0)
    }

    /// When the event was published, as written (empty when absent).
    pub fn created_at(&self) -> &str {
        self.get(field::CREATED_AT).unwrap_or_default()
    }

    /// Handler attempt of this delivery (1 on first delivery).
    pub fn handler_attempt(&self) -> u32 {
        self.get(field::HANDLER_ATTEMPT)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1)
    }

    /// The fields, flat, for delivery attempt `attempt`: what an earlier delivery added is
    /// replaced by `handler_attempt = attempt` at the end.
    pub fn with_attempt(&self, attempt: u32) -> Vec<String> {
        let mut flat = Vec::with_capacity(self.fields.len() * 2 + 2);
        for (k, v) in &self.fields {
            if !field::DELIVERY.contains(&k.as_str()) {
                flat.push(k.clone());
                flat.push(v.clone());
            }
        }
        flat.push(field::HANDLER_ATTEMPT.into());
        flat.push(attempt.to_string());
        flat
    }

    /// The fields, flat, of this entry's next delivery after a failed `attempt` (what goes into
    /// the retry set): `handler_attempt = attempt + 1` (at most `u32::MAX`), the error, and a
    /// nonce.
    pub fn retry_fields(&self, attempt: u32, last_error: &str) -> Vec<String> {
        let mut flat = self.with_attempt(attempt.saturating_add(1));
        flat.push(field::LAST_ERROR.into());
        flat.push(last_error.to_string());
        flat.push(field::RETRY_NONCE.into());
        flat.push(format!("{}:{}", self.stream_id, attempt));
        flat
    }

    /// The fields, flat, of this entry's dead-letter entry.
    pub fn dead_letter_fields(
        &self,
        error: &str,
        handler: &str,
        queue: &str,
        dead_at: &str,
    ) -> Vec<String> {
        let mut flat = self.with_attempt(self.handler_attempt());
        for (name, value) in [
            (field::ERROR, error),
            (field::HANDLER, handler),
            (field::QUEUE, queue),
            (field::DEAD_AT, dead_at),
        ] {
            flat.push(name.into());
            flat.push(value.to_string());
        }
        flat
    }

    /// The fields of a dead letter put back on its queue: the event's fields (sorted by name),
    /// without what delivery and dead-lettering added, plus `replayed_from`.
    pub fn replay_fields(
        dead_letter: &HashMap<String, String>,
        dead_letter_id: &str,
    ) -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> = dead_letter
            .iter()
            .filter(|(k, _)| !field::NOT_REPLAYED.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        fields.sort();
        fields.push((field::REPLAYED_FROM.into(), dead_letter_id.to_string()));
        fields
    }
}

/// The entries of an `XREADGROUP` (or `XREAD`) reply, in stream order, every stream of the
/// reply together: no reply (a read that timed out) is no entry. Any stream's entries read as
/// an id and fields: the receipt writer reads its receipts stream with it too.
///
/// Built from the reply's own strings: the parsed reply is not copied into a map per entry
/// and then again into the entry's fields, which cost a receiver a dozen allocations per
/// field read.
#[derive(Debug, Default)]
pub struct ReadEntries(pub Vec<QueueEntry>);

impl redis::FromRedisValue for ReadEntries {
    fn from_redis_value(v: &Value) -> redis::RedisResult<Self> {
        Self::from_owned_redis_value(v.clone())
    }

    fn from_owned_redis_value(v: Value) -> redis::RedisResult<Self> {
        let streams: Vec<Value> = match v {
            Value::Nil => return Ok(Self::default()),
            // RESP2: [[stream, entries], ...]
            Value::Array(streams) => streams
                .into_iter()
                .map(|stream| match stream {
                    Value::Array(pair) => pair
                        .into_iter()
                        .nth(1)
                        .ok_or_else(|| not_a_read_reply("a stream without its entries")),
                    _ => Err(not_a_read_reply("a stream that is not a pair")),
                })
                .collect::<redis::RedisResult<_>>()?,
            // RESP3: {stream: entries, ...}
            Value::Map(streams) => streams.into_iter().map(|(_, entries)| entries).collect(),
            _ => return Err(not_a_read_reply("neither a list nor a map of streams")),
        };
        let mut read = Vec::new();
        for entries in streams {
            let Value::Array(entries) = entries else {
                return Err(not_a_read_reply("entries that are not a list"));
            };
            read.reserve(entries.len());
            for entry in entries {
                let Value::Array(entry) = entry else {
                    return Err(not_a_read_reply("an entry that is not a list"));
                };
                let mut parts = entry.into_iter();
                let id = parts
                    .next()
                    .and_then(owned_text)
                    .ok_or_else(|| not_a_read_reply("an entry without an id"))?;
                read.push(QueueEntry::from_read_reply(
                    id,
                    parts.next().unwrap_or(Value::Nil),
                ));
            }
        }
        Ok(Self(read))
    }
}

/// A reply string as an owned `String` without copying it (`None`: not a string, or not UTF-8).
fn owned_text(v: Value) -> Option<String> {
    match v {
        Value::BulkString(bytes) => String::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        Value::VerbatimString { text, .. } => Some(text),
        _ => None,
    }
}

fn not_a_read_reply(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::TypeError,
        "not a stream read reply",
        what.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> ClaimedEvent {
        let mut e = ClaimedEvent::unclaimed(7, "mail.welcome", r#"{"to":"a@b"}"#);
        e.tenant_id = Some("t1".into());
        e.event_version = 3;
        e.headers = r#"{"h":1}"#.into();
        e.dispatch_key = Some("k-1".into());
        e.attempts = 2;
        e.created_at = chrono::DateTime::parse_from_rfc3339("2024-05-06T07:08:09.123456Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap();
        e
    }

    fn read_back(fields: &[(&str, String)]) -> QueueEntry {
        let flat: Vec<String> = fields
            .iter()
            .flat_map(|(k, v)| [k.to_string(), v.clone()])
            .collect();
        QueueEntry::from_flat("1-0", &flat)
    }

    #[test]
    fn encode_writes_todays_fields() {
        let fields = QueueEntry::encode(&event());
        let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "event_id",
                "event_type",
                "event_version",
                "tenant_id",
                "payload",
                "headers",
                "dispatch_key",
                "created_at",
                "attempt"
            ]
        );
        assert_eq!(fields[0].1, "7");
        assert_eq!(fields[7].1, "2024-05-06T07:08:09.123456Z");
        assert_eq!(fields[8].1, "2");
    }

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn entry_value(id: &str, flat: &[&str]) -> Value {
        Value::Array(vec![
            bulk(id),
            Value::Array(flat.iter().map(|t| bulk(t)).collect()),
        ])
    }

    fn read(v: Value) -> Vec<QueueEntry> {
        redis::from_owned_redis_value::<ReadEntries>(v).unwrap().0
    }

    #[test]
    fn a_read_reply_gives_the_entries_xread_always_gave() {
        let entries = vec![
            entry_value("1-0", &["event_id", "7", "payload", "{}", "attempt", "1"]),
            entry_value("2-0", &["event_type", "a.b", "event_id", "8"]),
        ];
        let reply = Value::Array(vec![Value::Array(vec![bulk("q"), Value::Array(entries)])]);
        let via_map: redis::streams::StreamReadReply = redis::from_redis_value(&reply).unwrap();
        let before: Vec<QueueEntry> = via_map.keys[0]
            .ids
            .iter()
            .map(QueueEntry::from_stream)
            .collect();
        let now = read(reply);
        assert_eq!(now, before);
        assert_eq!(now[0].stream_id, "1-0");
        assert_eq!(now[0].event_id(), Some(7));
        assert_eq!(now[1].event_type(), Some("a.b"));
        assert_eq!(
            now[0].fields,
            [("attempt", "1"), ("event_id", "7"), ("payload", "{}")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn a_read_reply_in_resp3_nil_or_of_several_streams_reads_the_same() {
        assert!(read(Value::Nil).is_empty(), "a read that timed out");
        let resp3 = Value::Map(vec![(
            bulk("q"),
            Value::Array(vec![entry_value("5-1", &["event_id", "9"])]),
        )]);
        let entries = read(resp3);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].event_id(), Some(9));
        let two = Value::Array(vec![
            Value::Array(vec![bulk("a"), Value::Array(vec![entry_value("1-0", &[])])]),
            Value::Array(vec![bulk("b"), Value::Array(vec![entry_value("2-0", &[])])]),
        ]);
        let ids: Vec<String> = read(two).into_iter().map(|e| e.stream_id).collect();
        assert_eq!(ids, ["1-0", "2-0"]);
        assert!(
            redis::from_owned_redis_value::<ReadEntries>(Value::Int(3)).is_err(),
            "not a read reply"
        );
    }

    #[test]
    fn a_read_entry_keeps_a_names_last_value_and_drops_what_is_not_text() {
        let mut flat = vec![
            bulk("event_id"),
            bulk("1"),
            Value::BulkString(vec![0xff, 0xfe]),
            bulk("name not text"),
            bulk("payload"),
            Value::BulkString(vec![0xff]),
            bulk("event_id"),
            bulk("2"),
        ];
        flat.push(bulk("dangling name"));
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("q"),
            Value::Array(vec![
                Value::Array(vec![bulk("1-0"), Value::Array(flat)]),
                // Deleted while pending: `XREADGROUP` from an id gives its id alone.
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ]),
        ])]);
        let entries = read(reply);
        assert_eq!(
            entries[0].event_id(),
            Some(2),
            "the last value, as a map kept it"
        );
        assert_eq!(
            entries[0].get("payload"),
            Some(""),
            "a value not UTF-8 reads empty"
        );
        assert_eq!(entries[0].fields.len(), 2, "a name not UTF-8 is left out");
        assert_eq!(entries[1].stream_id, "2-0");
        assert!(entries[1].fields.is_empty());
    }

    #[test]
    fn encode_decode_round_trip() {
        let entry = read_back(&QueueEntry::encode(&event()));
        assert_eq!(entry.stream_id, "1-0");
        assert_eq!(entry.event_id(), Some(7));
        assert_eq!(entry.event_type(), Some("mail.welcome"));
        assert_eq!(entry.event_version(), 3);
        assert_eq!(entry.tenant_id(), Some("t1"));
        assert_eq!(entry.payload(), r#"{"to":"a@b"}"#);
        assert_eq!(entry.headers(), r#"{"h":1}"#);
        assert_eq!(entry.dispatch_key(), Some("k-1"));
        assert_eq!(entry.created_at(), "2024-05-06T07:08:09.123456Z");
        assert_eq!(entry.get(field::ATTEMPT), Some("2"));
        assert_eq!(entry.handler_attempt(), 1);
    }

    #[test]
    fn the_ordering_key_is_written_only_when_the_event_has_one() {
        let mut keyed = event();
        keyed.ordering_key = Some("account-9".into());
        let fields = QueueEntry::encode(&keyed);
        assert_eq!(fields.len(), 10);
        assert_eq!(fields[9], (field::ORDERING_KEY, "account-9".to_string()));
        assert_eq!(read_back(&fields).ordering_key(), Some("account-9"));
        let unkeyed = read_back(&QueueEntry::encode(&event()));
        assert_eq!(unkeyed.ordering_key(), None);
        assert_eq!(
            unkeyed.get(field::ORDERING_KEY),
            None,
            "no empty field either"
        );
        // A retry keeps the key.
        let retried = QueueEntry::from_flat("2-0", &read_back(&fields).retry_fields(1, "boom"));
        assert_eq!(retried.ordering_key(), Some("account-9"));
    }

    #[test]
    fn the_generation_is_written_only_above_zero_and_reads_as_zero_when_absent() {
        let mut child = event();
        child.generation = 3;
        let fields = QueueEntry::encode(&child);
        assert_eq!(fields.last(), Some(&(field::GENERATION, "3".to_string())));
        let entry = read_back(&fields);
        assert_eq!(entry.generation(), 3);
        // A retry, a dead letter and its replay keep it.
        let retried = QueueEntry::from_flat("2-0", &entry.retry_fields(1, "boom"));
        assert_eq!(retried.generation(), 3);
        let dead = QueueEntry::from_flat("3-0", &retried.dead_letter_fields("e", "h", "q", "t"));
        let map: HashMap<String, String> = dead.fields.iter().cloned().collect();
        let replayed = QueueEntry::replay_fields(&map, "3-0");
        assert!(replayed.contains(&(field::GENERATION.to_string(), "3".to_string())));
        // A producer's event (and every entry written before the field existed) has none.
        let root = QueueEntry::encode(&event());
        assert!(root.iter().all(|(name, _)| *name != field::GENERATION));
        assert_eq!(read_back(&root).generation(), 0);
        for junk in ["", "x", "-4"] {
            let entry = QueueEntry::from_flat("1-0", &["generation".into(), junk.into()]);
            assert_eq!(entry.generation(), 0, "{junk:?}");
        }
    }

    #[test]
    fn absent_options_decode_as_none() {
        let entry = read_back(&QueueEntry::encode(&ClaimedEvent::unclaimed(
            1, "a.b", "{}",
        )));
        assert_eq!(entry.tenant_id(), None);
        assert_eq!(entry.dispatch_key(), None);
        assert_eq!(entry.get(field::TENANT_ID), Some(""));
    }

    #[test]
    fn retry_and_dead_letter_round_trip() {
        let first = read_back(&QueueEntry::encode(&event()));
        let retried = QueueEntry::from_flat("2-0", &first.retry_fields(1, "boom"));
        assert_eq!(retried.handler_attempt(), 2);
        assert_eq!(retried.get(field::LAST_ERROR), Some("boom"));
        assert_eq!(retried.get(field::RETRY_NONCE), Some("1-0:1"));
        assert_eq!(retried.event_id(), Some(7));
        // A second retry replaces what the first added instead of repeating it.
        let again = QueueEntry::from_flat("3-0", &retried.retry_fields(2, "bang"));
        assert_eq!(again.handler_attempt(), 3);
        assert_eq!(again.get(field::LAST_ERROR), Some("bang"));
        assert_eq!(
            again
                .fields
                .iter()
                .filter(|(k, _)| k == field::HANDLER_ATTEMPT)
                .count(),
            1
        );

        let dead = QueueEntry::from_flat(
            "4-0",
            &again.dead_letter_fields("gave up", "mailer", "outbox.mail", "now"),
        );
        assert_eq!(dead.get(field::ERROR), Some("gave up"));
        assert_eq!(dead.get(field::HANDLER), Some("mailer"));
        assert_eq!(dead.get(field::QUEUE), Some("outbox.mail"));
        assert_eq!(dead.get(field::DEAD_AT), Some("now"));
        assert_eq!(dead.handler_attempt(), 3);

        let map: HashMap<String, String> = dead.fields.iter().cloned().collect();
        let replayed = QueueEntry::replay_fields(&map, "4-0");
        let mut expected: Vec<(String, String)> = QueueEntry::encode(&event())
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        expected.sort();
        expected.push((field::REPLAYED_FROM.into(), "4-0".into()));
        assert_eq!(replayed, expected);
    }
}
