//! `routes.toml`: any text parses or is refused without a panic, however deep its nesting; an
//! accepted file, near-valid or edited, meets every documented rule and range; a file built to
//! meet every rule is accepted and reads back the values it holds.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use outbox_host::config::{RoutesFile, Settings};
use outbox_host::plugin::limits::{MAX_CONCURRENCY, MAX_MEMORY_MB};
use outbox_host::plugin::PluginLimits;
use outbox_host::routing::RouteDecision;
use proptest::prelude::*;

use super::routes_toml_inputs::{edited_default_routes_toml, near_valid_routes_toml, valid_routes};
use crate::{
    cases, huge_string, is_event_type, is_plugin_name, is_queue_name, is_routable_queue_list,
    is_routing_prefix, BUILTIN_INVOKE, PLUGIN_CONCURRENCY_MAX,
};

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
            limits.memory_bytes > 0
                && usize::try_from(MAX_MEMORY_MB << 20).is_ok_and(|max| limits.memory_bytes <= max)
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
}
