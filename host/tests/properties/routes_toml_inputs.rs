//! Generated `routes.toml` files: near-valid ones (every section, keys and values on both sides
//! of each rule, a little noise), the shipped file after random edits, and files built to meet
//! every rule with the values they must read back as.
//!
//! Generators only: they never call the host and never judge what they make (that is
//! [`super::routes_toml`]).

use std::collections::BTreeMap;

use outbox_host::config::DEFAULT_ROUTES_TOML;
use outbox_host::queue::DEAD_LETTER_SUFFIX;
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::{select, Index};

use crate::{
    queue_name_like, toml_array, toml_string, BUILTIN_INVOKE, PLUGIN_CONCURRENCY_MAX,
    PLUGIN_NAME_MAX, QUEUES_PER_EVENT_MAX,
};

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
pub(super) fn near_valid_routes_toml() -> impl Strategy<Value = String> {
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
pub(super) fn edited_default_routes_toml() -> impl Strategy<Value = String> {
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
pub(super) struct ValidPlugin {
    pub(super) fuel: Option<u64>,
    pub(super) memory_mb: Option<u64>,
    pub(super) timeout_ms: Option<u64>,
    pub(super) max_concurrency: Option<u64>,
    pub(super) hooks: Vec<String>,
    pub(super) router_payload: bool,
}

/// A `routes.toml` meeting every rule, with the values it must read back as.
#[derive(Clone, Debug)]
pub(super) struct ValidRoutes {
    pub(super) routes: BTreeMap<String, Vec<String>>,
    pub(super) router: String,
    pub(super) overrides: BTreeMap<String, String>,
    pub(super) queue_groups: BTreeMap<String, Vec<String>>,
    pub(super) handlers: BTreeMap<String, String>,
    pub(super) policy: String,
    pub(super) plugins: BTreeMap<String, ValidPlugin>,
    pub(super) max_retries: Option<i32>,
    pub(super) dispatch_batch_size: Option<i64>,
    pub(super) receiver_concurrency: Option<u64>,
    pub(super) backoff_seconds: Option<Vec<u64>>,
    pub(super) redis_prefix: Option<String>,
}

impl ValidRoutes {
    pub(super) fn to_toml(&self) -> String {
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
pub(super) fn valid_routes() -> impl Strategy<Value = ValidRoutes> {
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
