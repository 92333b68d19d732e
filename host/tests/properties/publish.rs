//! What a producer publishes: event types and keys are accepted exactly when the rule says so,
//! each kind of mutation of a valid type is refused, `validate` follows every rule and the
//! payload limit is exact.

use outbox_host::publish::{validate, validate_event_type, validate_key};
use outbox_host::{NewEvent, PublishError};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use serde_json::Value as Json;

use crate::{cases, event_meets_the_rules, huge_string, is_event_type, is_key, EVENT_TYPE_MAX};

/// A valid event type: 2 to 6 segments of the allowed characters.
fn valid_event_type() -> impl Strategy<Value = String> {
    vec("[a-z0-9_-]{1,12}", 2..=6).prop_map(|segments| segments.join("."))
}

/// Text shaped like an event type, on both sides of the rule.
fn event_type_like() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => valid_event_type(),
        2 => "[a-zA-Z0-9_. *:é-]{0,20}",
        1 => any::<String>(),
        1 => (valid_event_type(), 1usize..30).prop_map(|(t, n)| vec![t; n].join(".")),
        1 => huge_string(),
    ]
}

/// Text shaped like a dispatch or ordering key, on both sides of the rule.
fn key_like() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[!-~]{1,24}",
        1 => "(child|denied|chil|denied-):[a-z0-9]{0,6}",
        1 => "[ -\u{7f}]{0,24}",
        1 => (508usize..=516).prop_map(|n| "k".repeat(n)),
        1 => any::<String>(),
    ]
}

/// Any JSON value (finite numbers only: JSON has no other).
fn json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        any::<u64>().prop_map(Json::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)),
        ".{0,24}".prop_map(Json::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Json::Array),
            btree_map(".{0,8}", inner, 0..6).prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

/// A JSON object: nested values, or one long string (payloads near any limit).
fn json_object() -> impl Strategy<Value = Json> {
    prop_oneof![
        3 => btree_map(".{0,8}", json_value(), 0..6).prop_map(|m| Json::Object(m.into_iter().collect())),
        1 => ("[a-z]{0,4}", 0usize..4_000)
            .prop_map(|(k, n)| serde_json::json!({ k: "x".repeat(n) })),
    ]
}

/// An event for `validate`, near its rules.
fn new_event() -> impl Strategy<Value = NewEvent> {
    (
        event_type_like(),
        prop_oneof![6 => json_object(), 1 => json_value()],
        prop_oneof![6 => json_object(), 1 => json_value()],
        option::of(".{0,12}"),
        prop_oneof![6 => 1i32..5, 1 => any::<i32>(), 1 => Just(0)],
        option::weighted(0.4, key_like()),
        option::weighted(0.2, key_like()),
    )
        .prop_map(
            |(event_type, payload, headers, tenant, version, dispatch_key, ordering_key)| {
                let mut event = NewEvent::new(event_type, payload)
                    .with_headers(headers)
                    .with_version(version);
                event.tenant_id = tenant;
                event.dispatch_key = dispatch_key;
                event.ordering_key = ordering_key;
                event
            },
        )
}

proptest! {
    #![proptest_config(cases(256))]

    /// 2. Event types: accepted exactly when the grammar says so, whatever the text.
    #[test]
    fn event_type_verdict_follows_the_grammar(text in event_type_like()) {
        let verdict = validate_event_type(&text);
        prop_assert_eq!(verdict.is_ok(), is_event_type(&text), "{:?}", text);
        if let Err(err) = verdict {
            let is_invalid_type = matches!(&err, PublishError::InvalidEventType(t) if *t == text);
            prop_assert!(is_invalid_type, "{err:?}");
        }
    }

    /// 2. A valid event type is accepted; each kind of mutation of it is refused.
    #[test]
    fn event_type_mutations_are_refused(
        event_type in valid_event_type(),
        at in any::<Index>(),
        bad in prop_oneof![
            "[A-Z]",
            select(vec![" ", "\t", "\n", "\0", "*", ":", "/", "é", "\u{202e}", "Ａ"]).prop_map(String::from),
        ],
        mutation in 0u8..6,
    ) {
        prop_assert!(validate_event_type(&event_type).is_ok(), "{event_type:?}");
        let dots: Vec<usize> = event_type.match_indices('.').map(|(i, _)| i).collect();
        let mutated = match mutation {
            0 => {
                let mut t = event_type.clone();
                t.insert_str(at.index(t.len() + 1), &bad);
                t
            }
            1 => {
                let mut t = event_type.clone();
                t.insert(dots[at.index(dots.len())], '.');
                t
            }
            2 => format!(".{event_type}"),
            3 => format!("{event_type}."),
            4 => event_type.replace('.', ""),
            _ => format!("{event_type}.{}", "a".repeat(EVENT_TYPE_MAX)),
        };
        prop_assert!(validate_event_type(&mutated).is_err(), "{mutated:?} accepted");
    }

    /// 2. Keys: accepted exactly when the rule says so; the error names the field.
    #[test]
    fn key_verdict_follows_the_rule(key in prop_oneof![key_like(), huge_string()], ordering in any::<bool>()) {
        let field = if ordering { "ordering_key" } else { "dispatch_key" };
        let verdict = validate_key(field, "a.b", &key);
        prop_assert_eq!(verdict.is_ok(), is_key(&key), "{:?}", key);
        if let Err(err) = verdict {
            let names_the_field = matches!(err, PublishError::InvalidKey { field: f, .. } if f == field);
            prop_assert!(names_the_field, "{err:?}");
        }
    }

    /// 3. `validate` never panics and accepts exactly the events the documented rules allow.
    #[test]
    fn validate_follows_the_rules(event in new_event(), limit in prop_oneof![
        0usize..5_000,
        Just(0usize),
        Just(usize::MAX),
        Just(outbox_host::config::DEFAULT_MAX_PAYLOAD_BYTES),
    ]) {
        let verdict = validate(&event, limit);
        prop_assert_eq!(
            verdict.is_ok(),
            event_meets_the_rules(&event, limit),
            "{:?} with limit {}: {:?}",
            event,
            limit,
            verdict
        );
    }

    /// 3. A payload over the limit is always refused, with its size; at or under the limit a
    /// valid event is accepted.
    #[test]
    fn payload_limit_is_exact(
        event_type in valid_event_type(),
        payload in json_object(),
        offset in -3i64..=3,
    ) {
        let size = serde_json::to_vec(&payload).map_or(0, |v| v.len());
        let limit = size.saturating_add_signed(isize::try_from(offset).unwrap());
        let event = NewEvent::new(event_type, payload);
        match validate(&event, limit) {
            Ok(()) => prop_assert!(size <= limit, "{size} bytes accepted under a limit of {limit}"),
            Err(PublishError::PayloadTooLarge { size: s, limit: l, .. }) => {
                prop_assert!(size > limit);
                prop_assert_eq!((s, l), (size, limit));
            }
            Err(other) => prop_assert!(false, "unexpected refusal: {other}"),
        }
    }
}
