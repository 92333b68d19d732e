//! What Redis hands back: a queue stream entry, whatever its fields and values, is read or
//! refused without a panic, and an entry written by the sink reads back with every field.

use std::collections::HashMap;

use outbox_host::queue::{field, QueueEntry};
use outbox_host::store::ClaimedEvent;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

use crate::cases;

/// A publish time as PostgreSQL keeps it (microseconds), years 1 to 9999.
fn created_at() -> impl Strategy<Value = chrono::DateTime<chrono::Utc>> {
    (-62_135_596_800i64..=253_402_300_799, 0u32..1_000_000).prop_map(|(secs, micros)| {
        chrono::DateTime::from_timestamp(secs, micros * 1000).unwrap_or_default()
    })
}

/// Any event as the dispatcher claims it.
fn claimed_event() -> impl Strategy<Value = ClaimedEvent> {
    (
        (
            any::<i64>(),
            any::<String>(),
            any::<i32>(),
            option::of(any::<String>()),
        ),
        (
            any::<String>(),
            any::<String>(),
            option::of(any::<String>()),
            any::<i32>(),
            option::of(any::<String>()),
        ),
        created_at(),
    )
        .prop_map(
            |(
                (id, event_type, version, tenant),
                (payload, headers, dispatch_key, attempts, ordering_key),
                created_at,
            )| {
                let mut event = ClaimedEvent::unclaimed(id, event_type, payload);
                event.event_version = version;
                event.tenant_id = tenant;
                event.headers = headers;
                event.dispatch_key = dispatch_key;
                event.ordering_key = ordering_key;
                event.attempts = attempts;
                event.created_at = created_at;
                event
            },
        )
}

/// Every field name of a queue entry.
const FIELD_NAMES: [&str; 18] = [
    field::EVENT_ID,
    field::EVENT_TYPE,
    field::EVENT_VERSION,
    field::TENANT_ID,
    field::PAYLOAD,
    field::HEADERS,
    field::DISPATCH_KEY,
    field::CREATED_AT,
    field::ATTEMPT,
    field::HANDLER_ATTEMPT,
    field::LAST_ERROR,
    field::RETRY_NONCE,
    field::ERROR,
    field::HANDLER,
    field::QUEUE,
    field::DEAD_AT,
    field::REPLAYED_FROM,
    field::ORDERING_KEY,
];

/// A field name or value as Redis might hand one back: known names, numbers at the edges of
/// their types, anything.
fn entry_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(FIELD_NAMES.to_vec()).prop_map(String::from),
        2 => select(vec![
            "0", "1", "-1", "4294967295", "4294967296", "2147483647", "-2147483648",
            "9223372036854775807", "9223372036854775808", "", " 1", "+1", "1.0",
        ])
        .prop_map(String::from),
        2 => any::<u32>().prop_map(|n| n.to_string()),
        2 => any::<String>(),
    ]
}

/// A Redis reply value as a stream entry's field might hold it.
fn redis_value() -> impl Strategy<Value = redis::Value> {
    prop_oneof![
        4 => entry_text().prop_map(|s| redis::Value::BulkString(s.into_bytes())),
        2 => vec(any::<u8>(), 0..16).prop_map(redis::Value::BulkString),
        1 => Just(redis::Value::Nil),
        1 => any::<i64>().prop_map(redis::Value::Int),
        1 => ".{0,8}".prop_map(redis::Value::SimpleString),
        1 => Just(redis::Value::Okay),
        1 => any::<f64>().prop_map(redis::Value::Double),
        1 => any::<bool>().prop_map(redis::Value::Boolean),
        1 => vec(any::<i64>().prop_map(redis::Value::Int), 0..3).prop_map(redis::Value::Array),
    ]
}

proptest! {
    #![proptest_config(cases(256))]

    /// 4. Any flat field list decodes without a panic, and so does everything derived from it.
    #[test]
    fn queue_entry_from_flat_never_panics(
        stream_id in ".{0,12}",
        flat in vec(entry_text(), 0..24),
        error in ".{0,12}",
    ) {
        let entry = QueueEntry::from_flat(stream_id.clone(), &flat);
        prop_assert_eq!(entry.fields.len(), flat.len() / 2);
        prop_assert!(entry.fields.windows(2).all(|w| w[0] <= w[1]), "fields not sorted");
        for (name, value) in &entry.fields {
            let present = flat.chunks_exact(2).any(|c| &c[0] == name && &c[1] == value);
            prop_assert!(present, "{name:?} = {value:?} was not in the list");
        }
        let _ = (entry.event_id(), entry.event_type(), entry.event_version(), entry.tenant_id());
        let _ = (entry.payload(), entry.headers(), entry.dispatch_key(), entry.created_at());
        let attempt = entry.handler_attempt();
        let next = QueueEntry::from_flat("2-0", &entry.retry_fields(attempt, &error));
        prop_assert!(next.handler_attempt() > attempt || attempt == u32::MAX);
        prop_assert_eq!(next.get(field::LAST_ERROR), Some(error.as_str()));
        let again = QueueEntry::from_flat("3-0", &entry.with_attempt(attempt));
        prop_assert_eq!(again.handler_attempt(), attempt);
        let dead = QueueEntry::from_flat("4-0", &entry.dead_letter_fields(&error, "h", "q", "now"));
        let map: HashMap<String, String> = dead.fields.iter().cloned().collect();
        let replayed = QueueEntry::replay_fields(&map, "4-0");
        prop_assert_eq!(replayed.last().map(|(k, _)| k.as_str()), Some(field::REPLAYED_FROM));
    }

    /// 4. Any Redis reply decodes without a panic; a value that is not text reads as empty.
    #[test]
    fn queue_entry_from_stream_never_panics(
        id in ".{0,12}",
        map in prop::collection::hash_map(entry_text(), redis_value(), 0..12),
    ) {
        let stream = redis::streams::StreamId { id: id.clone(), map: map.clone() };
        let entry = QueueEntry::from_stream(&stream);
        prop_assert_eq!(&entry.stream_id, &id);
        prop_assert_eq!(entry.fields.len(), map.len());
        let _ = (entry.event_id(), entry.event_version(), entry.handler_attempt());
    }

    /// 4. What the sink writes reads back field for field, from a flat list and from a stream
    /// reply alike.
    #[test]
    fn queue_entry_round_trips_every_field(event in claimed_event()) {
        let encoded = QueueEntry::encode(&event);
        let names: Vec<&str> = encoded.iter().map(|(k, _)| *k).collect();
        let mut expected = FIELD_NAMES[..9].to_vec();
        if event.ordering_key.is_some() {
            expected.push(field::ORDERING_KEY);
        }
        prop_assert_eq!(names, expected);
        let flat: Vec<String> = encoded.iter().flat_map(|(k, v)| [k.to_string(), v.clone()]).collect();
        let stream = redis::streams::StreamId {
            id: "1-0".into(),
            map: encoded
                .iter()
                .map(|(k, v)| (k.to_string(), redis::Value::BulkString(v.clone().into_bytes())))
                .collect(),
        };
        let non_empty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        for entry in [QueueEntry::from_flat("1-0", &flat), QueueEntry::from_stream(&stream)] {
            prop_assert_eq!(entry.stream_id.as_str(), "1-0");
            prop_assert_eq!(entry.event_id(), Some(event.id));
            prop_assert_eq!(entry.event_type().map(String::from), non_empty(&Some(event.event_type.clone())));
            prop_assert_eq!(entry.event_version(), event.event_version);
            // An empty tenant or dispatch key is written as "no tenant", "no key" (documented).
            prop_assert_eq!(entry.tenant_id().map(String::from), non_empty(&event.tenant_id));
            prop_assert_eq!(entry.payload(), event.payload.as_str());
            prop_assert_eq!(entry.headers(), event.headers.as_str());
            prop_assert_eq!(entry.dispatch_key().map(String::from), non_empty(&event.dispatch_key));
            prop_assert_eq!(entry.ordering_key().map(String::from), non_empty(&event.ordering_key));
            let created = chrono::DateTime::parse_from_rfc3339(entry.created_at())
                .map(|t| t.with_timezone(&chrono::Utc));
            prop_assert_eq!(created.ok(), Some(event.created_at));
            prop_assert_eq!(entry.get(field::ATTEMPT).and_then(|a| a.parse().ok()), Some(event.attempts));
            prop_assert_eq!(entry.handler_attempt(), 1);
            for (name, value) in &encoded {
                prop_assert_eq!(entry.get(name), Some(value.as_str()));
            }
        }
    }
}
