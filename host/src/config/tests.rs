//! Tests of parsing and validating a routes file on its own.

use super::*;

#[test]
fn routes_file_uses_the_plugin_name_rule() {
    let err = RoutesFile::parse(
        "[policy]\nplugin = \"deny-all\"\n[plugins.my_router]\n",
        Path::new("routes.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("[plugins] 'my_router'"), "{err}");
    RoutesFile::parse(
        "[policy]\nplugin = \"deny-all\"\n[plugins.my-router]\n",
        Path::new("routes.toml"),
    )
    .unwrap();
}

#[test]
fn routes_file_refuses_an_empty_backoff_list() {
    for key in ["backoff_seconds", "handler_backoff_seconds"] {
        let err = RoutesFile::parse(&format!("[settings]\n{key} = []\n"), Path::new("r.toml"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, format!("r.toml: [settings] {key} must not be empty"));
    }
}

#[test]
fn queues_marked_ordered_in_the_queues_table_are_ordered_and_others_are_not() {
    let routes = RoutesFile::parse(
        "[queues.\"outbox.billing\"]\nordered = true\n[queues.\"outbox.mail\"]\n",
        Path::new("r.toml"),
    )
    .unwrap();
    assert!(routes.is_ordered("outbox.billing"));
    assert!(
        !routes.is_ordered("outbox.mail"),
        "ordered defaults to false"
    );
    assert!(!routes.is_ordered("outbox.audit"), "not listed: unordered");
    assert!(!RoutesFile::default().is_ordered("outbox.billing"));
    // The shipped routes.toml parses, with its example commented out.
    RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml")).unwrap();
}

#[test]
fn the_queues_table_refuses_unknown_keys_and_invalid_queue_names() {
    let err = RoutesFile::parse(
        "[queues.\"outbox.billing\"]\nordred = true\n",
        Path::new("r.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ordred"), "{err}");
    for (bad, why) in [
        ("outbox:billing", "no ':'"),
        ("outbox.billing.dead-letter", "dead-letter"),
    ] {
        let err = RoutesFile::parse(
            &format!("[queues.\"{bad}\"]\nordered = true\n"),
            Path::new("r.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(&format!("[queues] \"{bad}\"")), "{err}");
        assert!(err.contains(why), "{bad}: {err}");
    }
    let err = RoutesFile::parse(
        "[queues.\"outbox.billing\"]\nordered = 1\n",
        Path::new("r.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("ordered"), "{err}");
}

#[test]
fn routes_file_refuses_unknown_settings_keys() {
    let err = RoutesFile::parse("[settings]\nretries = 3\n", Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("retries"), "{err}");
}

#[test]
fn supported_versions_are_checked_and_looked_up() {
    let parse = |text: &str| RoutesFile::parse(text, Path::new("routes.toml"));
    let routes = parse(
        "[policy]\nplugin = \"deny-all\"\n[plugins.mailer]\nsupported_versions = { \"mail.welcome\" = [2, 3], \"*\" = [1] }\n[plugins.other]\nsupported_versions = [1, 2]\n",
    )
    .unwrap();
    let by_type = routes.plugins["mailer"].supported_versions.clone().unwrap();
    assert!(by_type.supports("mail.welcome", 3));
    assert!(!by_type.supports("mail.welcome", 1));
    assert!(by_type.supports("mail.reset", 1));
    assert!(!by_type.supports("mail.reset", 2));
    assert_eq!(by_type.describe_for("mail.welcome"), "v2, v3");
    let all = routes.plugins["other"].supported_versions.clone().unwrap();
    assert!(all.supports("x.y", 2) && !all.supports("x.y", 3));
    let only = SupportedVersions::ByType([("a.b".to_string(), vec![1])].into());
    assert!(
        only.supports("c.d", 7),
        "types not listed, without \"*\": every version"
    );
    for (bad, expected) in [
        ("[plugins.m]\nsupported_versions = []\n", "lists no version"),
        (
            "[plugins.m]\nsupported_versions = [0]\n",
            "version 0 must be >= 1",
        ),
        (
            "[plugins.m]\nsupported_versions = { \"Mail\" = [1] }\n",
            "invalid event type",
        ),
        (
            "[plugins.m]\nsupported_versions = \"all\"\n",
            "supported_versions",
        ),
    ] {
        let bad = format!("[policy]\nplugin = \"deny-all\"\n{bad}");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(err.contains(expected), "{bad}: {err}");
    }
}

#[test]
fn hooks_must_be_hook_names() {
    for bad in ["", "Order.Paid", "order..paid", "order paid"] {
        let err = RoutesFile::parse(
            &format!("[policy]\nplugin = \"deny-all\"\n[plugins.audit]\nhooks = [{bad:?}]\n"),
            Path::new("r.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("[plugins.audit] hooks:"), "{bad}: {err}");
    }
    RoutesFile::parse(
        "[policy]\nplugin = \"deny-all\"\n[plugins.audit]\nhooks = [\"order.paid\", \"user\"]\n",
        Path::new("r.toml"),
    )
    .unwrap();
}

#[test]
fn a_handler_names_a_declared_plugin_or_the_one_built_in_handler() {
    let routes = |handler: &str| {
        format!("[policy]\nplugin = \"deny-all\"\n[handlers]\n\"outbox.q\" = \"{handler}\"\n")
    };
    RoutesFile::parse(&routes("builtin:plugin-invoke"), Path::new("r.toml")).unwrap();
    let err = RoutesFile::parse(&routes("builtin:plugin-invok"), Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a built-in handler"), "{err}");
    let err = RoutesFile::parse(&routes("nobody"), Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not declared under [plugins]"), "{err}");
}

#[test]
fn default_routes_file_parses() {
    RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml")).unwrap();
}

#[test]
fn a_relative_plugin_dir_is_beside_the_routes_file_unless_it_came_from_the_environment() {
    let routes = Path::new("/etc/outbox/routes.toml");
    let default = Path::new("plugins/dist");
    assert_eq!(
        plugin_dir_for(default, false, Some(routes)),
        Path::new("/etc/outbox/plugins/dist")
    );
    assert_eq!(plugin_dir_for(default, true, Some(routes)), default);
    assert_eq!(plugin_dir_for(default, false, None), default);
    assert_eq!(
        plugin_dir_for(default, false, Some(Path::new("routes.toml"))),
        default,
        "a routes file in the working directory: the same directory as before"
    );
    assert_eq!(
        plugin_dir_for(Path::new("/opt/wasm"), false, Some(routes)),
        Path::new("/opt/wasm")
    );
}

#[test]
fn router_by_type_cannot_be_declared_with_router_payload() {
    let text = "[policy]\nplugin = \"deny-all\"\n[plugins.r]\nrouter_by_type = true\n";
    RoutesFile::parse(text, Path::new("routes.toml")).unwrap();
    let err = RoutesFile::parse(
        &format!("{text}router_payload = true\n"),
        Path::new("routes.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("[plugins.r]: router_by_type and router_payload exclude each other"),
        "{err}"
    );
}
