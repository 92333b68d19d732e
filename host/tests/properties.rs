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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use outbox_host::config::{RoutesFile, Settings, DEFAULT_ROUTES_TOML, MAX_QUEUE_NAME_BYTES};
use outbox_host::plugin::limits::{MAX_CONCURRENCY, MAX_MEMORY_MB};
use outbox_host::plugin::{PluginLimits, MAX_REASON_BYTES};
use outbox_host::publish::{validate, validate_event_type, validate_key, MAX_KEY_BYTES};
use outbox_host::queue::{field, QueueEntry, DEAD_LETTER_SUFFIX};
use outbox_host::routing::{RouteDecision, MAX_QUEUES_PER_EVENT};
use outbox_host::store::ClaimedEvent;
use outbox_host::{NewEvent, PublishError};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, Index};
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::Value as Json;

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
// Generators.
// ---------------------------------------------------------------------------------------------

/// A string of `len` copies of one character: cheap huge input.
fn huge_string() -> impl Strategy<Value = String> {
    (any::<char>(), 0usize..300_000).prop_map(|(c, len)| c.to_string().repeat(len))
}

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

/// A name shaped like a plugin name, on both sides of the rule.
fn plugin_name_like() -> impl Strategy<Value = String> {
    prop_oneof![
        16 => "[a-z][a-z0-9]{0,5}(-[a-z0-9]{1,5}){0,2}",
        1 => "[a-zA-Z0-9_.:-]{0,8}",
        1 => (PLUGIN_NAME_MAX - 1..=PLUGIN_NAME_MAX + 1).prop_map(|n| "p".repeat(n)),
        1 => any::<String>(),
    ]
}

/// A routing prefix, on both sides of the rule.
fn prefix_like() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => "[a-z]{1,6}\\.([a-z0-9_-]{1,6}\\.?)?",
        3 => "\\*(\\.[a-z]{1,6})?\\.?",
        2 => "[a-z.*_A-Z -]{0,8}",
        1 => any::<String>(),
    ]
}

/// A hook name (`hooks = [...]`), on both sides of the rule.
fn hook_like() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => "[a-z]{1,6}(\\.[a-z0-9_-]{1,6})?",
        1 => "[a-zA-Z. _-]{0,8}",
        1 => any::<String>(),
    ]
}

/// A TOML value's text meant for an integer setting or limit: mostly small, some huge, negative,
/// out of TOML's range or of another type.
fn integer_like() -> impl Strategy<Value = String> {
    prop_oneof![
        24 => (0i64..=40).prop_map(|n| n.to_string()),
        8 => (0i64..=200_000).prop_map(|n| n.to_string()),
        1 => any::<i64>().prop_map(|n| n.to_string()),
        1 => select(vec![
            "-1",
            "0",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "4294967295",
            "4294967296",
            "2147483648",
            "1_000",
            "0x10",
            "1.5",
            "1e3",
            "nan",
            "\"10\"",
            "true",
            "[]",
        ])
        .prop_map(String::from),
    ]
}

/// A TOML value's text of any kind.
fn any_value_text() -> impl Strategy<Value = String> {
    prop_oneof![
        integer_like(),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<String>().prop_map(|s| toml_string(&s)),
        vec(integer_like(), 0..4).prop_map(|items| format!("[{}]", items.join(", "))),
        Just("{ a = 1 }".to_string()),
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

/// How a `[settings]` key's value is written.
#[derive(Clone, Copy, Debug)]
enum SettingValue {
    Flag,
    Integer,
    Seconds,
    Text,
}

/// Every `[settings]` key, with how its value is written.
const SETTINGS_KEYS: [(&str, SettingValue); 21] = [
    ("dispatcher_enabled", SettingValue::Flag),
    ("dispatch_interval_ms", SettingValue::Integer),
    ("dispatch_batch_size", SettingValue::Integer),
    ("dispatch_concurrency", SettingValue::Integer),
    ("max_retries", SettingValue::Integer),
    ("claim_lease_ms", SettingValue::Integer),
    ("shutdown_grace_ms", SettingValue::Integer),
    ("done_retention_hours", SettingValue::Integer),
    ("done_retention_batch_size", SettingValue::Integer),
    ("backoff_seconds", SettingValue::Seconds),
    ("max_payload_bytes", SettingValue::Integer),
    ("redis_prefix", SettingValue::Text),
    ("dedupe_ttl_seconds", SettingValue::Integer),
    ("plugin_dir", SettingValue::Text),
    ("plugin_cache_dir", SettingValue::Text),
    ("http_addr", SettingValue::Text),
    ("handler_max_retries", SettingValue::Integer),
    ("handler_backoff_seconds", SettingValue::Seconds),
    ("idempotency_ttl_seconds", SettingValue::Integer),
    ("receiver_lease_ms", SettingValue::Integer),
    ("receiver_concurrency", SettingValue::Integer),
];

/// One `[settings]` line: a known key with a value mostly of its kind, or an unknown key.
fn settings_line() -> impl Strategy<Value = String> {
    let known = (select(SETTINGS_KEYS.to_vec()), 0u8..12).prop_flat_map(|((key, kind), dice)| {
        let value: BoxedStrategy<String> = match (kind, dice) {
            (_, 0) => any_value_text().boxed(),
            (SettingValue::Flag, _) => any::<bool>().prop_map(|b| b.to_string()).boxed(),
            (SettingValue::Integer, _) => integer_like().boxed(),
            (SettingValue::Seconds, _) => vec(integer_like(), 0..4)
                .prop_map(|items| format!("[{}]", items.join(", ")))
                .boxed(),
            (SettingValue::Text, _) => any::<String>().prop_map(|s| toml_string(&s)).boxed(),
        };
        value.prop_map(move |value| format!("{key} = {value}"))
    });
    prop_oneof![
        29 => known,
        1 => ("[a-z_]{1,12}", any_value_text()).prop_map(|(k, v)| format!("{k} = {v}")),
    ]
}

/// A `[plugins.NAME]` body: limits, hooks, flags, config and grants, any of them missing.
fn plugin_lines() -> impl Strategy<Value = (Vec<String>, Vec<String>)> {
    let limit = |key: &'static str| {
        option::weighted(
            0.5,
            integer_like().prop_map(move |v| format!("{key} = {v}")),
        )
    };
    let body = (
        limit("fuel"),
        limit("memory_mb"),
        limit("timeout_ms"),
        limit("max_concurrency"),
        option::weighted(
            0.3,
            vec(hook_like(), 0..3).prop_map(|h| format!("hooks = {}", toml_array(&h))),
        ),
        option::weighted(
            0.2,
            any::<bool>().prop_map(|b| format!("router_payload = {b}")),
        ),
        option::weighted(
            0.2,
            "[a-z./-]{0,12}".prop_map(|f| format!("file = {}", toml_string(&f))),
        ),
        option::weighted(
            0.2,
            select(vec![
                "{ a = 1 }",
                "{}",
                "[1, \"x\"]",
                "{ a = { b = [1.5, nan] } }",
                "1979-05-27T07:32:00Z",
            ])
            .prop_map(|c| format!("config = {c}")),
        ),
        option::weighted(
            0.01,
            ("[a-z_]{1,8}", any_value_text()).prop_map(|(k, v)| format!("{k} = {v}")),
        ),
    );
    let grants = (
        option::weighted(
            0.3,
            vec("[a-z.]{0,8}", 0..3).prop_map(|p| format!("publish = {}", toml_array(&p))),
        ),
        option::weighted(0.2, any::<bool>().prop_map(|b| format!("kv = {b}"))),
        option::weighted(
            0.2,
            vec("[a-z0-9.:]{0,12}", 0..3).prop_map(|h| format!("http = {}", toml_array(&h))),
        ),
        option::weighted(
            0.01,
            ("[a-z_]{1,8}", any_value_text()).prop_map(|(k, v)| format!("{k} = {v}")),
        ),
    );
    (body, grants).prop_map(|((a, b, c, d, e, f, g, h, i), (j, k, l, m))| {
        (
            [a, b, c, d, e, f, g, h, i].into_iter().flatten().collect(),
            [j, k, l, m].into_iter().flatten().collect(),
        )
    })
}

/// A plugin name `[router]`, `[handlers]` or `[policy]` may name: mostly a declared plugin or
/// one of `valid_specials`, sometimes another special name or anything.
fn plugin_reference(declared: &[String], valid_specials: &[&str]) -> impl Strategy<Value = String> {
    let mut valid: Vec<String> = declared.to_vec();
    valid.extend(valid_specials.iter().map(|s| s.to_string()));
    let specials = [
        "native",
        "deny-all",
        BUILTIN_INVOKE,
        "builtin:other",
        "capability-policy",
    ];
    prop_oneof![
        16 => select(valid),
        1 => select(specials.map(String::from).to_vec()),
        1 => plugin_name_like(),
    ]
}

/// One `[routes]` value: one queue or a list (up to past the fan-out limit), as TOML text.
fn route_target() -> impl Strategy<Value = String> {
    prop_oneof![
        16 => queue_name_like().prop_map(|q| toml_string(&q)),
        12 => vec(queue_name_like(), 1..4).prop_map(|qs| toml_array(&qs)),
        1 => Just("[]".to_string()),
        1 => (QUEUES_PER_EVENT_MAX - 1..=QUEUES_PER_EVENT_MAX + 2).prop_map(|n| {
            toml_array(&(0..n).map(|i| format!("outbox.q{i}")).collect::<Vec<_>>())
        }),
        2 => vec(select(vec!["a", "b"]).prop_map(String::from), 1..4).prop_map(|qs| toml_array(&qs)),
        1 => any_value_text(),
    ]
}

/// A `routes.toml` near the rules: every section, with keys and values on both sides of each
/// rule, references that mostly name declared plugins, and a little noise (unknown keys and
/// tables, repeated keys, comments).
fn near_valid_routes_toml() -> impl Strategy<Value = String> {
    vec(plugin_name_like(), 0..4).prop_flat_map(|plugins| {
        let n = plugins.len();
        (
            Just(plugins.clone()),
            vec(settings_line(), 0..3),
            vec((prefix_like(), route_target()), 0..5),
            option::weighted(0.7, plugin_reference(&plugins, &["native"])),
            vec(
                (prefix_like(), plugin_reference(&plugins, &["native"])),
                0..3,
            ),
            vec(("[a-z]{1,6}", vec(queue_name_like(), 0..4)), 0..3),
            vec(
                (
                    queue_name_like(),
                    plugin_reference(&plugins, &[BUILTIN_INVOKE]),
                ),
                0..4,
            ),
            option::weighted(0.95, plugin_reference(&plugins, &["deny-all"])),
            vec(plugin_lines(), n..=n),
            option::weighted(0.02, ("[a-z_]{1,8}", any_value_text())),
        )
            .prop_map(
                |(
                    plugins,
                    settings,
                    routes,
                    router,
                    overrides,
                    groups,
                    handlers,
                    policy,
                    specs,
                    unknown,
                )| {
                    let mut text = String::from("# generated\n");
                    if let Some((key, value)) = unknown {
                        text += &format!("{key} = {value}\n");
                    }
                    text += "[settings]\n";
                    for line in settings {
                        text += &format!("{line}\n");
                    }
                    text += "\n[routes]\n";
                    for (prefix, target) in routes {
                        text += &format!("{} = {target}\n", toml_string(&prefix));
                    }
                    text += "[router]\n";
                    if let Some(router) = router {
                        text += &format!("plugin = {}\n", toml_string(&router));
                    }
                    text += "[router.overrides]\n";
                    for (prefix, plugin) in overrides {
                        text += &format!("{} = {}\n", toml_string(&prefix), toml_string(&plugin));
                    }
                    text += "[queue_groups]\n";
                    for (group, queues) in groups {
                        text += &format!("{group} = {}\n", toml_array(&queues));
                    }
                    text += "[handlers]\n";
                    for (queue, plugin) in handlers {
                        text += &format!("{} = {}\n", toml_string(&queue), toml_string(&plugin));
                    }
                    text += "[policy]\n";
                    if let Some(policy) = policy {
                        text += &format!(
                            "plugin = {}\npublish_denials = false\n",
                            toml_string(&policy)
                        );
                    }
                    for (name, (body, grants)) in plugins.iter().zip(specs) {
                        text += &format!("[plugins.{}]\n", toml_string(name));
                        for line in body {
                            text += &format!("{line}\n");
                        }
                        text += &format!("[plugins.{}.grants]\n", toml_string(name));
                        for line in grants {
                            text += &format!("{line}\n");
                        }
                    }
                    text
                },
            )
    })
}

/// One edit of a text: delete a span, insert a snippet, or both (a replacement).
#[derive(Clone, Debug)]
struct TextEdit {
    at: Index,
    delete: usize,
    insert: String,
}

impl TextEdit {
    fn apply(&self, text: &mut String) {
        let mut start = self.at.index(text.len() + 1);
        while !text.is_char_boundary(start) {
            start -= 1;
        }
        let mut end = (start + self.delete).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        text.replace_range(start..end, &self.insert);
    }
}

/// The shipped `routes.toml` after a few random edits (snippets that break or bend its rules).
fn edited_default_routes_toml() -> impl Strategy<Value = String> {
    let snippet = prop_oneof![
        select(vec![
            "",
            "\n",
            "\"",
            "[",
            "]",
            "=",
            ",",
            ".",
            "..",
            "*",
            ":",
            "-",
            "0",
            "-1",
            "33",
            "99999999999999999999",
            ".dead-letter",
            "\n[routes]\n",
            "\n[plugins.x]\n",
            "\n[handlers]\n\"q\" = \"nobody\"\n",
            "\"x.\" = \"q:1\"\n",
            "\"\" = \"q\"\n",
            "max_concurrency = 0\n",
            "memory_mb = 100000\n",
            "hooks = [\"Bad Hook\"]\n",
            "plugin = \"native\"\n",
            "plugin = \"deny-all\"\n",
            "{",
            "}",
        ])
        .prop_map(String::from),
        any::<String>(),
    ];
    vec(
        (
            any::<Index>(),
            prop_oneof![3 => Just(0usize), 1 => 0usize..40],
            snippet,
        )
            .prop_map(|(at, delete, insert)| TextEdit { at, delete, insert }),
        1..4,
    )
    .prop_map(|edits| {
        let mut text = DEFAULT_ROUTES_TOML.to_string();
        for edit in &edits {
            edit.apply(&mut text);
        }
        text
    })
}

/// A valid plugin spec with its expected values.
#[derive(Clone, Debug)]
struct ValidPlugin {
    fuel: Option<u64>,
    memory_mb: Option<u64>,
    timeout_ms: Option<u64>,
    max_concurrency: Option<u64>,
    hooks: Vec<String>,
    router_payload: bool,
}

/// A `routes.toml` meeting every rule, with the values it must read back as.
#[derive(Clone, Debug)]
struct ValidRoutes {
    routes: BTreeMap<String, Vec<String>>,
    router: String,
    overrides: BTreeMap<String, String>,
    queue_groups: BTreeMap<String, Vec<String>>,
    handlers: BTreeMap<String, String>,
    policy: String,
    plugins: BTreeMap<String, ValidPlugin>,
    max_retries: Option<i32>,
    dispatch_batch_size: Option<i64>,
    receiver_concurrency: Option<u64>,
    backoff_seconds: Option<Vec<u64>>,
    redis_prefix: Option<String>,
}

impl ValidRoutes {
    fn to_toml(&self) -> String {
        let mut text = String::from("[settings]\n");
        if let Some(n) = self.max_retries {
            text += &format!("max_retries = {n}\n");
        }
        if let Some(n) = self.dispatch_batch_size {
            text += &format!("dispatch_batch_size = {n}\n");
        }
        if let Some(n) = self.receiver_concurrency {
            text += &format!("receiver_concurrency = {n}\n");
        }
        if let Some(list) = &self.backoff_seconds {
            let items: Vec<String> = list.iter().map(u64::to_string).collect();
            text += &format!("backoff_seconds = [{}]\n", items.join(", "));
        }
        if let Some(prefix) = &self.redis_prefix {
            text += &format!("redis_prefix = {}\n", toml_string(prefix));
        }
        text += "[routes]\n";
        for (prefix, queues) in &self.routes {
            let target = match queues.as_slice() {
                [one] => toml_string(one),
                many => toml_array(many),
            };
            text += &format!("{} = {target}\n", toml_string(prefix));
        }
        text += &format!(
            "[router]\nplugin = {}\n[router.overrides]\n",
            toml_string(&self.router)
        );
        for (prefix, plugin) in &self.overrides {
            text += &format!("{} = {}\n", toml_string(prefix), toml_string(plugin));
        }
        text += "[queue_groups]\n";
        for (group, queues) in &self.queue_groups {
            text += &format!("{} = {}\n", toml_string(group), toml_array(queues));
        }
        text += "[handlers]\n";
        for (queue, plugin) in &self.handlers {
            text += &format!("{} = {}\n", toml_string(queue), toml_string(plugin));
        }
        text += &format!("[policy]\nplugin = {}\n", toml_string(&self.policy));
        for (name, spec) in &self.plugins {
            text += &format!("[plugins.{name}]\n");
            for (key, value) in [
                ("fuel", spec.fuel),
                ("memory_mb", spec.memory_mb),
                ("timeout_ms", spec.timeout_ms),
                ("max_concurrency", spec.max_concurrency),
            ] {
                if let Some(value) = value {
                    text += &format!("{key} = {value}\n");
                }
            }
            text += &format!(
                "hooks = {}\nrouter_payload = {}\n",
                toml_array(&spec.hooks),
                spec.router_payload
            );
        }
        text
    }
}

/// A valid queue name.
fn valid_queue_name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_-]{1,10}(\\.[A-Za-z0-9_-]{1,10}){0,3}"
        .prop_filter("not a dead-letter stream", |q| {
            !q.ends_with(DEAD_LETTER_SUFFIX)
        })
}

/// A valid routing prefix.
fn valid_prefix() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_-]{1,8}(\\.[a-z0-9_-]{1,8}){0,2}\\.?",
        "\\*(\\.[a-z0-9_-]{1,8}){0,2}\\.?",
    ]
}

/// A valid list of queues for one route: 1 to 32 distinct names.
fn valid_queue_list() -> impl Strategy<Value = Vec<String>> {
    prop::collection::btree_set(valid_queue_name(), 1..=QUEUES_PER_EVENT_MAX)
        .prop_map(|set| set.into_iter().collect())
}

/// A `routes.toml` that meets every rule.
fn valid_routes() -> impl Strategy<Value = ValidRoutes> {
    let plugin = (
        option::of(1u64..=u64::MAX >> 1),
        option::of(1u64..=100_000),
        option::of(1u64..=600_000),
        option::of(1u64..=PLUGIN_CONCURRENCY_MAX),
        vec("[a-z0-9_-]{1,8}(\\.[a-z0-9_-]{1,8})?", 0..3),
        any::<bool>(),
    )
        .prop_map(
            |(fuel, memory_mb, timeout_ms, max_concurrency, hooks, router_payload)| ValidPlugin {
                fuel,
                memory_mb,
                timeout_ms,
                max_concurrency,
                hooks,
                router_payload,
            },
        );
    btree_map("[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4}){0,2}", plugin, 0..4).prop_flat_map(|plugins| {
        let names: Vec<String> = plugins.keys().cloned().collect();
        let mut routers = names.clone();
        routers.push("native".into());
        let mut handlers = names.clone();
        handlers.push(BUILTIN_INVOKE.into());
        let mut policies = names.clone();
        policies.push("deny-all".into());
        (
            Just(plugins),
            btree_map(valid_prefix(), valid_queue_list(), 0..6),
            select(routers.clone()),
            btree_map(valid_prefix(), select(routers), 0..3),
            btree_map(".{0,8}", vec(valid_queue_name(), 0..4), 0..3),
            btree_map(valid_queue_name(), select(handlers), 0..4),
            select(policies),
            (
                option::of(any::<i32>()),
                option::of(any::<i64>()),
                option::of(0u64..=i64::MAX as u64),
                option::of(vec(0u64..=i64::MAX as u64, 1..6)),
                option::of(any::<String>()),
            ),
        )
            .prop_map(
                |(plugins, routes, router, overrides, queue_groups, handlers, policy, settings)| {
                    let (
                        max_retries,
                        dispatch_batch_size,
                        receiver_concurrency,
                        backoff_seconds,
                        redis_prefix,
                    ) = settings;
                    ValidRoutes {
                        routes,
                        router,
                        overrides,
                        queue_groups,
                        handlers,
                        policy,
                        plugins,
                        max_retries,
                        dispatch_batch_size,
                        receiver_concurrency,
                        backoff_seconds,
                        redis_prefix,
                    }
                },
            )
    })
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

/// A queue list as a router might answer: valid names, repeats, invalid names, too many.
fn router_answer() -> impl Strategy<Value = Vec<String>> {
    let queue = || {
        prop_oneof![
            2 => select(vec!["outbox.mail", "outbox.audit", "a"]).prop_map(String::from),
            3 => queue_name_like(),
        ]
    };
    prop_oneof![
        4 => vec(queue(), 0..6),
        1 => vec(queue(), QUEUES_PER_EVENT_MAX - 2..=QUEUES_PER_EVENT_MAX + 3),
        1 => (QUEUES_PER_EVENT_MAX - 1..=QUEUES_PER_EVENT_MAX + 1)
            .prop_map(|n| (0..n).map(|i| format!("q{i}")).collect()),
    ]
}

// ---------------------------------------------------------------------------------------------
// What an accepted routes.toml must hold.
// ---------------------------------------------------------------------------------------------

/// Check every documented rule on an accepted file, and that what the host derives from it (its
/// settings, plugin limits and routing table) stays within the documented ranges.
fn assert_meets_documented_rules(file: &RoutesFile) -> Result<(), TestCaseError> {
    let declared = |name: &str| file.plugins.contains_key(name);
    for (prefix, queues) in &file.routes {
        prop_assert!(
            is_routing_prefix(prefix),
            "[routes] prefix {prefix:?} accepted"
        );
        let queues = queues.to_vec();
        prop_assert!(
            is_routable_queue_list(&queues),
            "[routes] {prefix:?} = {queues:?} accepted"
        );
    }
    for (group, queues) in &file.queue_groups {
        for queue in queues {
            prop_assert!(
                is_queue_name(queue),
                "[queue_groups] {group:?}: {queue:?} accepted"
            );
        }
    }
    prop_assert!(file.router.plugin == "native" || declared(&file.router.plugin));
    for (prefix, plugin) in &file.router.overrides {
        prop_assert!(
            is_routing_prefix(prefix),
            "[router.overrides] {prefix:?} accepted"
        );
        prop_assert!(plugin == "native" || declared(plugin));
    }
    for (queue, handler) in &file.handlers {
        prop_assert!(is_queue_name(queue), "[handlers] queue {queue:?} accepted");
        prop_assert!(
            handler == BUILTIN_INVOKE || declared(handler),
            "[handlers] {handler:?}"
        );
    }
    prop_assert!(
        file.policy.plugin == "deny-all"
            || declared(&file.policy.plugin)
            || file.plugins.is_empty()
    );
    for (name, spec) in &file.plugins {
        prop_assert!(is_plugin_name(name), "[plugins] {name:?} accepted");
        prop_assert!(
            spec.fuel != Some(0) && spec.memory_mb != Some(0) && spec.timeout_ms != Some(0)
        );
        if let Some(n) = spec.max_concurrency {
            prop_assert!(
                (1..=PLUGIN_CONCURRENCY_MAX).contains(&n),
                "max_concurrency {n}"
            );
        }
        for hook in &spec.hooks {
            prop_assert!(
                is_event_type(&format!("plugin.hook.{hook}")),
                "hook {hook:?} accepted"
            );
        }
        let limits = PluginLimits::from_spec(spec);
        prop_assert!(limits.fuel > 0);
        prop_assert!(
            limits.memory_bytes > 0 && limits.memory_bytes <= (MAX_MEMORY_MB as usize) << 20
        );
        prop_assert!(limits.timeout > Duration::ZERO);
        prop_assert!((1..=MAX_CONCURRENCY).contains(&limits.max_concurrency));
    }

    // The file's [settings] alone (no environment) resolve, within the documented ranges.
    let settings = Settings::resolve_with(&file.settings, |_| None);
    prop_assert!(
        settings.is_ok(),
        "accepted [settings] do not resolve: {settings:?}"
    );
    let settings = settings.unwrap_or_default();
    prop_assert!((1..=10_000).contains(&settings.dispatch_batch_size));
    prop_assert!((1..=10_000).contains(&settings.done_retention_batch_size));
    prop_assert!((1..=1024).contains(&settings.dispatch_concurrency));
    prop_assert!((1..=1024).contains(&settings.receiver_concurrency));
    prop_assert!(settings.max_retries >= 0);
    prop_assert!(settings.claim_lease >= Duration::from_millis(100));
    prop_assert!(settings.receiver_lease >= Duration::from_millis(100));
    prop_assert!(!settings.backoff.is_empty() && !settings.handler_backoff.is_empty());
    for attempt in [i32::MIN, -1, 0, 1, 2, 1000, i32::MAX] {
        prop_assert!(settings.backoff.contains(&settings.backoff_after(attempt)));
    }
    for attempt in [0, 1, 2, 1000, u32::MAX] {
        prop_assert!(settings
            .handler_backoff
            .contains(&settings.handler_backoff_after(attempt)));
    }
    if let Some(limit) = file.settings.max_payload_bytes {
        prop_assert_eq!(settings.max_payload_bytes, limit);
    }
    let _ = file.check_receiver_lease(settings.receiver_lease);

    // Whatever the native table answers for an event type, the dispatcher may act on.
    let table = file.route_table();
    let probes = file
        .routes
        .keys()
        .map(|prefix| format!("{}x.y", prefix.replace('*', "any")))
        .chain(["mail.welcome".to_string(), "a.b".to_string()]);
    for event_type in probes {
        let decision = table.route(&event_type);
        if let RouteDecision::Queues(queues) = &decision {
            prop_assert_eq!(
                decision.clone().checked("native-table"),
                decision.clone(),
                "the table routes {} to {:?}, which the dispatcher refuses",
                event_type,
                queues
            );
        }
    }
    Ok(())
}

/// Parse `text` as `routes.toml`; an accepted file must meet the documented rules.
fn check_routes_toml(text: &str) -> Result<(), TestCaseError> {
    if let Ok(file) = RoutesFile::parse(text, Path::new("routes.toml")) {
        assert_meets_documented_rules(&file)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The properties.
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(cases(256))]

    /// 1. Any text given as `routes.toml` parses or is refused, never panics.
    #[test]
    fn routes_toml_any_text_never_panics(text in prop_oneof![
        any::<String>(),
        "[\\[\\]\"'=.,{}a-z0-9_ \n#*:-]{0,200}",
        huge_string(),
    ]) {
        check_routes_toml(&text)?;
    }

    /// 1. Nesting of any depth (arrays, inline tables, dotted keys, table headers) is refused
    /// or accepted, never a crash: a stack overflow would abort the host on a reload.
    #[test]
    fn routes_toml_deep_nesting_never_crashes(depth in 0usize..20_000, kind in 0u8..5) {
        let path = vec!["a"; depth.max(1)].join(".");
        let nested = match kind {
            0 => format!("config = {}1{}", "[".repeat(depth), "]".repeat(depth)),
            1 => format!("config = {}1{}", "{ a = ".repeat(depth), "}".repeat(depth)),
            2 => format!("config.{path} = 1"),
            3 => format!("[plugins.p.config.{path}]"),
            _ => format!("[{path}]"),
        };
        let text = format!("[policy]\nplugin = \"deny-all\"\n[plugins.p]\n{nested}\n");
        check_routes_toml(&text)?;
    }

    /// 1. Near-valid files: accepted ones meet every documented rule and range.
    #[test]
    fn routes_toml_near_valid_accepted_files_meet_the_rules(text in near_valid_routes_toml()) {
        check_routes_toml(&text)?;
    }

    /// 1. The shipped file with random edits: never a panic, accepted edits meet the rules.
    #[test]
    fn routes_toml_edited_default_accepted_files_meet_the_rules(text in edited_default_routes_toml()) {
        check_routes_toml(&text)?;
    }

    /// 1. A file built to meet every rule is accepted, and reads back the values it holds.
    #[test]
    fn routes_toml_valid_files_are_accepted_as_written(routes in valid_routes()) {
        let text = routes.to_toml();
        let file = RoutesFile::parse(&text, Path::new("routes.toml"));
        prop_assert!(file.is_ok(), "valid file refused: {:?}\n{}", file.err(), text);
        let file = file.unwrap_or_default();
        assert_meets_documented_rules(&file)?;
        let read: BTreeMap<String, Vec<String>> =
            file.routes.iter().map(|(p, q)| (p.clone(), q.to_vec())).collect();
        prop_assert_eq!(&read, &routes.routes);
        prop_assert_eq!(&file.router.plugin, &routes.router);
        prop_assert_eq!(&file.router.overrides, &routes.overrides);
        prop_assert_eq!(&file.queue_groups, &routes.queue_groups);
        prop_assert_eq!(&file.handlers, &routes.handlers);
        prop_assert_eq!(&file.policy.plugin, &routes.policy);
        prop_assert_eq!(file.plugins.len(), routes.plugins.len());
        for (name, expected) in &routes.plugins {
            let spec = &file.plugins[name];
            prop_assert_eq!(spec.fuel, expected.fuel);
            prop_assert_eq!(spec.memory_mb, expected.memory_mb);
            prop_assert_eq!(spec.timeout_ms, expected.timeout_ms);
            prop_assert_eq!(spec.max_concurrency, expected.max_concurrency);
            prop_assert_eq!(&spec.hooks, &expected.hooks);
            prop_assert_eq!(spec.router_payload, expected.router_payload);
        }
        prop_assert_eq!(file.settings.max_retries, routes.max_retries);
        prop_assert_eq!(file.settings.dispatch_batch_size, routes.dispatch_batch_size);
        prop_assert_eq!(
            file.settings.receiver_concurrency.map(|n| n as u64),
            routes.receiver_concurrency
        );
        prop_assert_eq!(&file.settings.backoff_seconds, &routes.backoff_seconds);
        prop_assert_eq!(&file.settings.redis_prefix, &routes.redis_prefix);
    }

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
        let limit = (size as i64 + offset).max(0) as usize;
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

    /// 5. A router answer is accepted exactly when it holds 1 to 32 valid queue names, none
    /// twice, and comes back unchanged; a refused one is an error naming the router.
    #[test]
    fn route_decision_checked_follows_the_rules(
        queues in router_answer(),
        router in prop_oneof!["[a-z-]{1,16}", ".{0,16}"],
    ) {
        let checked = RouteDecision::Queues(queues.clone()).checked(&router);
        if is_routable_queue_list(&queues) {
            prop_assert_eq!(checked, RouteDecision::Queues(queues));
        } else {
            match checked {
                RouteDecision::Error(message) => {
                    let prefix = format!("router {router} returned ");
                    prop_assert!(message.starts_with(&prefix), "{message:?}");
                }
                other => prop_assert!(false, "{queues:?} passed as {other:?}"),
            }
        }
    }

    /// 5. Reasons a router gives are bounded and free of control characters.
    #[test]
    fn route_decision_reasons_are_bounded(
        reason in prop_oneof![any::<String>(), huge_string()],
        no_route in any::<bool>(),
    ) {
        let decision = if no_route {
            RouteDecision::NoRoute(reason.clone())
        } else {
            RouteDecision::Error(reason.clone())
        };
        let (RouteDecision::NoRoute(kept) | RouteDecision::Error(kept)) = decision.checked("r") else {
            return Err(TestCaseError::fail("a reason became a queue list"));
        };
        prop_assert!(kept.len() <= MAX_REASON_BYTES, "{} bytes kept", kept.len());
        prop_assert!(!kept.chars().any(char::is_control));
        if reason.len() <= MAX_REASON_BYTES && !reason.chars().any(char::is_control) {
            prop_assert_eq!(kept, reason);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Plain tests: the generators are not vacuous, the constants say what the docs say, and inputs
// that once broke a check.
// ---------------------------------------------------------------------------------------------

/// How many of `samples` values drawn from `strategy` `accepted` takes.
fn accepted_share<S: Strategy>(
    strategy: S,
    samples: usize,
    accepted: impl Fn(&S::Value) -> bool,
) -> usize {
    let mut runner = TestRunner::deterministic();
    (0..samples)
        .filter(|_| {
            strategy
                .new_tree(&mut runner)
                .map(|tree| accepted(&tree.current()))
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn near_valid_files_land_on_both_sides_of_the_rules() {
    let parses = |text: &String| RoutesFile::parse(text, Path::new("routes.toml")).is_ok();
    for (what, accepted) in [
        (
            "near-valid",
            accepted_share(near_valid_routes_toml(), 400, parses),
        ),
        (
            "edited default",
            accepted_share(edited_default_routes_toml(), 400, parses),
        ),
    ] {
        assert!(
            (20..=380).contains(&accepted),
            "{what}: {accepted} of 400 generated files accepted (the generator no longer reaches both sides)"
        );
    }
}

#[test]
fn documented_limits_are_the_host_constants() {
    assert_eq!(MAX_QUEUE_NAME_BYTES, QUEUE_NAME_MAX);
    assert_eq!(MAX_QUEUES_PER_EVENT, QUEUES_PER_EVENT_MAX);
    assert_eq!(MAX_KEY_BYTES, KEY_MAX);
    assert_eq!(MAX_CONCURRENCY as u64, PLUGIN_CONCURRENCY_MAX);
    assert_eq!(DEAD_LETTER_SUFFIX, ".dead-letter");
    assert_eq!(outbox_host::receive::BUILTIN_PLUGIN_INVOKE, BUILTIN_INVOKE);
    assert_eq!(
        outbox_host::publish::RESERVED_DISPATCH_KEY_PREFIXES,
        RESERVED_KEY_PREFIXES
    );
}

#[test]
fn the_independent_rules_agree_with_the_documented_examples() {
    for ok in ["mail.welcome", "a.b", "ai.cost.v2_x-y"] {
        assert!(is_event_type(ok), "{ok}");
    }
    for bad in [
        "mail",
        "",
        "Mail.welcome",
        "mail..x",
        ".mail",
        "mail.",
        "mail.wélcome",
    ] {
        assert!(!is_event_type(bad), "{bad}");
    }
    for ok in [
        "mail.",
        "tenant.subscription.",
        "*.deleted",
        "*",
        "*.",
        "mail",
    ] {
        assert!(is_routing_prefix(ok), "{ok}");
    }
    for bad in [
        "", "Mail.", "a..b", "*a", "**", "a*", ".", ".mail", "*..", "mail .x",
    ] {
        assert!(!is_routing_prefix(bad), "{bad}");
    }
    for ok in ["a", "form-router", "v2", &"a".repeat(64)] {
        assert!(is_plugin_name(ok), "{ok}");
    }
    for bad in [
        "",
        "Form",
        "form_router",
        "1router",
        "-r",
        "r-",
        "a--b",
        &"a".repeat(65),
    ] {
        assert!(!is_plugin_name(bad), "{bad}");
    }
    for ok in ["outbox.mail", "Q-1_x", &"q".repeat(200)] {
        assert!(is_queue_name(ok), "{ok}");
    }
    for bad in ["", "a:b", "a.dead-letter", "a b", &"q".repeat(201)] {
        assert!(!is_queue_name(bad), "{bad}");
    }
}

/// Found by `queue_entry_from_flat_never_panics`: the retry of an entry whose `handler_attempt`
/// is `u32::MAX` computed `attempt + 1` unchecked (a panic in debug builds, attempt 0 in
/// release). A receiver retries such an entry when `OUTBOX_HANDLER_MAX_RETRIES` is `u32::MAX`.
#[test]
fn retry_of_an_entry_at_the_largest_attempt_does_not_overflow() {
    let flat = [
        "event_id",
        "event_id",
        "0",
        "event_id",
        "handler_attempt",
        "4294967295",
    ]
    .map(String::from);
    let entry = QueueEntry::from_flat("", &flat);
    assert_eq!(entry.handler_attempt(), u32::MAX);
    let retried = QueueEntry::from_flat("2-0", &entry.retry_fields(entry.handler_attempt(), ""));
    assert_eq!(retried.handler_attempt(), u32::MAX);
}

/// Found by `routes_toml_near_valid_accepted_files_meet_the_rules` (and, as `".search.index."`,
/// by the edited default file): a routing prefix with an empty first segment was accepted,
/// though no event type starts with a dot, so its rule could never match.
#[test]
fn a_prefix_with_an_empty_first_segment_is_refused() {
    let text = "# generated\n[settings]\n\n[routes]\n\".\" = \"a\"\n[router]\n[router.overrides]\n[queue_groups]\n[handlers]\n[policy]\n";
    let err = RoutesFile::parse(text, Path::new("routes.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("[routes] \".\": empty first segment"), "{err}");
    for prefix in [".search.index.", ".a"] {
        for section in ["routes", "router.overrides"] {
            let value = if section == "routes" {
                "\"a\""
            } else {
                "\"native\""
            };
            let text = format!("[{section}]\n{} = {value}\n", toml_string(prefix));
            let err = RoutesFile::parse(&text, Path::new("routes.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("empty first segment"), "{err}");
        }
    }
    for prefix in ["*.", "*", "a.", "*.a"] {
        let text = format!("[routes]\n{} = \"a\"\n", toml_string(prefix));
        RoutesFile::parse(&text, Path::new("routes.toml")).unwrap();
    }
}

/// Found by `routes_toml_near_valid_accepted_files_meet_the_rules`: a route to 33 queues was
/// accepted, though the dispatcher refuses any routing answer naming more than 32 queues, so
/// every event of that prefix failed routing and was retried until it gave up.
#[test]
fn a_route_to_more_queues_than_one_event_may_go_to_is_refused() {
    let route = |n: usize| {
        let queues: Vec<String> = (0..n).map(|i| format!("outbox.q{i}")).collect();
        format!(
            "# generated\n[settings]\n\n[routes]\n\"a.\" = {}\n[router]\n[router.overrides]\n[queue_groups]\n[handlers]\n[policy]\n",
            toml_array(&queues)
        )
    };
    let err = RoutesFile::parse(&route(33), Path::new("routes.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("[routes] \"a.\": 33 queues, more than the 32 one event may go to"),
        "{err}"
    );
    let file = RoutesFile::parse(&route(32), Path::new("routes.toml")).unwrap();
    let decision = file.route_table().route("a.b");
    assert_eq!(decision.clone().checked("native-table"), decision);
}
