//! Property tests of the host's input checks, through its public API: what an operator writes
//! (`routes.toml`), what a producer publishes (event type, keys, payload), what Redis hands back
//! (queue stream entries) and what a router answers.
//!
//! Each property runs on generated input, both arbitrary (any string, any field list) and
//! structured near-valid input built to land on both sides of every rule (random tables, keys,
//! queue names, prefixes, plugin names, numbers out of range), and proves that:
//!
//! - no check panics, whatever it is given (huge, empty, unicode, control characters, deep
//!   nesting);
//! - whatever a check accepts meets the documented rule, written again below as a plain
//!   character-by-character checker (no regex, no call into the host); for event types, keys,
//!   `validate` and router answers the verdict is exactly the rule's, refusals included;
//! - a valid input generated from the rule is accepted, and keeps every value it was given;
//! - a queue entry written by the sink reads back with every field it carries.
//!
//! It needs no service. The default case counts keep the whole file within seconds; a longer
//! search runs the same properties on more cases:
//!
//! ```sh
//! PROPTEST_CASES=100000 cargo test -p outbox-host --test properties
//! ```
//!
//! A failing case is shrunk to a small input and printed; the plain `#[test]`s at the end keep
//! the exact inputs that once broke a check, so they stay fixed.
//!
//! One test binary, one module per subject under `properties/`; the documented rules written
//! again and the generators several subjects share are here.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]

mod properties {
    mod fixed_cases;
    mod publish;
    mod queue_entries;
    mod route_decisions;
    mod routes_toml;
    mod routes_toml_inputs;
}

use std::collections::BTreeSet;

use outbox_host::queue::DEAD_LETTER_SUFFIX;
use outbox_host::NewEvent;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// The documented rules, written again independently of the host's code.
// ---------------------------------------------------------------------------------------------

/// Longest event type, characters (README "Publishing", the schema's CHECK).
const EVENT_TYPE_MAX: usize = 255;
/// Longest dispatch or ordering key, bytes (README "Publishing").
const KEY_MAX: usize = 512;
/// Longest queue name, bytes (`routes.toml`).
const QUEUE_NAME_MAX: usize = 200;
/// Longest plugin name, characters.
const PLUGIN_NAME_MAX: usize = 64;
/// Most queues one event may go to.
const QUEUES_PER_EVENT_MAX: usize = 32;
/// `max_concurrency` of a plugin: 1 to 32 (`routes.toml`).
const PLUGIN_CONCURRENCY_MAX: u64 = 32;
/// Dispatch key prefixes reserved for the host (README "Publishing").
const RESERVED_KEY_PREFIXES: [&str; 2] = ["child:", "denied:"];
/// The one built-in handler.
const BUILTIN_INVOKE: &str = "builtin:plugin-invoke";

/// What a segment of an event type or a routing prefix is made of: `a-z`, `0-9`, `_`, `-`.
fn is_segment_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'
}

/// Event type: `^[a-z0-9_-]+(\.[a-z0-9_-]+)+$`, at most 255 characters.
fn is_event_type(text: &str) -> bool {
    if text.chars().count() > EVENT_TYPE_MAX {
        return false;
    }
    let mut dots = 0;
    let mut segment_len = 0;
    for c in text.chars() {
        if c == '.' {
            if segment_len == 0 {
                return false;
            }
            dots += 1;
            segment_len = 0;
        } else if is_segment_char(c) {
            segment_len += 1;
        } else {
            return false;
        }
    }
    dots >= 1 && segment_len > 0
}

/// Dispatch or ordering key: 1 to 512 bytes of printable ASCII without spaces (`!` to `~`).
fn is_key(key: &str) -> bool {
    (1..=KEY_MAX).contains(&key.len()) && key.bytes().all(|b| (b'!'..=b'~').contains(&b))
}

/// Queue name: 1 to 200 letters, digits, `.`, `_`, `-`, not ending in `.dead-letter`.
fn is_queue_name(queue: &str) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-';
    (1..=QUEUE_NAME_MAX).contains(&queue.len())
        && queue.chars().all(allowed)
        && !queue.ends_with(".dead-letter")
}

/// Plugin name: lowercase letters, digits and single `-`, starting with a letter, not ending
/// with `-`, at most 64 characters.
fn is_plugin_name(name: &str) -> bool {
    let mut previous: Option<char> = None;
    for c in name.chars() {
        let ok = match previous {
            None => c.is_ascii_lowercase(),
            Some(p) => c.is_ascii_lowercase() || c.is_ascii_digit() || (c == '-' && p != '-'),
        };
        if !ok {
            return false;
        }
        previous = Some(c);
    }
    previous.is_some_and(|last| last != '-') && name.chars().count() <= PLUGIN_NAME_MAX
}

/// Routing prefix (`[routes]`, `[router.overrides]`): lowercase segments separated by dots, the
/// last one possibly still empty (`mail.`), and an optional leading `*` standing for a whole
/// first segment (`*`, `*.`, `*.deleted`).
fn is_routing_prefix(prefix: &str) -> bool {
    let after_first = match prefix.strip_prefix('*') {
        Some("") => return true,
        Some(rest) => match rest.strip_prefix('.') {
            Some(after_dot) => after_dot,
            None => return false,
        },
        None if prefix.is_empty() => return false,
        None => prefix,
    };
    let mut segment_len = 0;
    for c in after_first.chars() {
        if c == '.' && segment_len > 0 {
            segment_len = 0;
        } else if is_segment_char(c) {
            segment_len += 1;
        } else {
            return false;
        }
    }
    true
}

/// `validate`'s verdict by the documented rules alone.
fn event_meets_the_rules(event: &NewEvent, max_payload_bytes: usize) -> bool {
    let payload_bytes = serde_json::to_vec(&event.payload).map_or(usize::MAX, |v| v.len());
    is_event_type(&event.event_type)
        && event.payload.is_object()
        && payload_bytes <= max_payload_bytes
        && event.headers.is_object()
        && event.tenant_id.as_deref() != Some("")
        && event.event_version >= 1
        && event.dispatch_key.as_deref().is_none_or(is_key)
        && event.ordering_key.as_deref().is_none_or(is_key)
        && !event
            .dispatch_key
            .as_deref()
            .is_some_and(|key| RESERVED_KEY_PREFIXES.iter().any(|p| key.starts_with(p)))
}

/// Whether `queues` is an answer the dispatcher may act on: 1 to 32 valid names, none twice.
fn is_routable_queue_list(queues: &[String]) -> bool {
    let unique: BTreeSet<&String> = queues.iter().collect();
    (1..=QUEUES_PER_EVENT_MAX).contains(&queues.len())
        && queues.iter().all(|q| is_queue_name(q))
        && unique.len() == queues.len()
}

/// `PROPTEST_CASES` cases per property when set, else `cases`. A failure is printed (shrunk),
/// not saved to a file: the plain tests at the end keep the inputs worth keeping.
fn cases(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config.failure_persistence = None;
    config
}

// ---------------------------------------------------------------------------------------------
// Generators several subjects share.
// ---------------------------------------------------------------------------------------------

/// A string of `len` copies of one character: cheap huge input.
fn huge_string() -> impl Strategy<Value = String> {
    (any::<char>(), 0usize..300_000).prop_map(|(c, len)| c.to_string().repeat(len))
}

/// A name shaped like a queue name, on both sides of the rule.
fn queue_name_like() -> impl Strategy<Value = String> {
    prop_oneof![
        24 => "[a-z]{1,6}(\\.[a-zA-Z0-9_-]{1,6}){0,2}",
        1 => "[A-Za-z0-9._:-]{0,10}",
        1 => "[a-z]{1,6}".prop_map(|q| format!("{q}{DEAD_LETTER_SUFFIX}")),
        1 => (QUEUE_NAME_MAX - 2..=QUEUE_NAME_MAX + 2).prop_map(|n| "q".repeat(n)),
        1 => any::<String>(),
    ]
}

/// `text` as a TOML basic string, which is also a quoted key: `"` and `\\` escaped, control
/// characters as `\uXXXX`.
fn toml_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", c as u32)),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A list of strings as a TOML array.
fn toml_array(items: &[String]) -> String {
    let items: Vec<String> = items.iter().map(|s| toml_string(s)).collect();
    format!("[{}]", items.join(", "))
}
