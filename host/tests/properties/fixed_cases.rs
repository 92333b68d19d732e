//! Plain tests: the generators are not vacuous, the constants say what the docs say, and inputs
//! that once broke a check.

use std::path::Path;

use outbox_host::config::{RoutesFile, MAX_QUEUE_NAME_BYTES};
use outbox_host::plugin::limits::MAX_CONCURRENCY;
use outbox_host::publish::MAX_KEY_BYTES;
use outbox_host::queue::{QueueEntry, DEAD_LETTER_SUFFIX};
use outbox_host::routing::MAX_QUEUES_PER_EVENT;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;

use super::routes_toml_inputs::{edited_default_routes_toml, near_valid_routes_toml};
use crate::{
    is_event_type, is_plugin_name, is_queue_name, is_routing_prefix, toml_array, toml_string,
    BUILTIN_INVOKE, KEY_MAX, PLUGIN_CONCURRENCY_MAX, QUEUES_PER_EVENT_MAX, QUEUE_NAME_MAX,
    RESERVED_KEY_PREFIXES,
};

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
