//! The contract registry on files: checks, error lines, modes, loading rules and reloads.

use super::*;
use serde_json::json;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const WELCOME: &str = r#"
event_type = "mail.welcome"
owner = "growth"
description = "A user confirmed their address."

[versions.1.schema]
type = "object"
required = ["user_id", "email"]
[versions.1.schema.properties]
user_id = { type = "integer" }
email = { type = "string", format = "email" }
tags = { type = "array", items = { type = "string" } }

[versions.2]
description = "adds locale"
[versions.2.schema]
type = "object"
required = ["user_id"]
additionalProperties = false
properties = { user_id = { type = "integer" }, locale = { enum = ["en", "fr"] } }
"#;

fn registry() -> ContractRegistry {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "mail.welcome.toml", WELCOME);
    ContractRegistry::load_dir(dir.path()).unwrap()
}

#[test]
fn valid_payload_passes() {
    let r = registry();
    let ok = json!({"user_id": 7, "email": "a@example.com", "tags": ["x"]});
    assert_eq!(
        r.check("mail.welcome", 1, &ok, ContractMode::Strict),
        Ok(Conformance::Valid)
    );
}

#[test]
fn errors_name_the_field_path_and_the_rule() {
    let r = registry();
    let bad = json!({"user_id": "7", "tags": ["x", 3]});
    let err = r
        .check("mail.welcome", 1, &bad, ContractMode::Permissive)
        .unwrap_err();
    let ContractViolation::Invalid { errors, .. } = &err else {
        panic!("{err}")
    };
    assert!(
        errors.contains(&"payload.user_id: expected integer, got string (rule: type)".into()),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"payload.email: required field is missing (rule: required)".into()),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"payload.tags[1]: expected string, got integer (rule: type)".into()),
        "{errors:?}"
    );
    let bad = json!({"user_id": 1, "locale": "de", "extra": true});
    let err = r
        .check("mail.welcome", 2, &bad, ContractMode::Permissive)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("payload.extra: field is not allowed (rule: additionalProperties)"),
        "{err}"
    );
    assert!(
        err.contains("payload.locale: expected one of [\"en\",\"fr\"], got \"de\" (rule: enum)"),
        "{err}"
    );
    let bad = json!({"user_id": 1, "email": "not-an-address"});
    let err = r
        .check("mail.welcome", 1, &bad, ContractMode::Permissive)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("payload.email:") && err.contains("(rule: format)"),
        "{err}"
    );
}

#[test]
fn unknown_types_and_versions_follow_the_mode() {
    let r = registry();
    let p = json!({});
    assert_eq!(
        r.check("mail.other", 1, &p, ContractMode::Permissive),
        Ok(Conformance::UnknownType)
    );
    assert_eq!(
        r.check("mail.welcome", 9, &p, ContractMode::Permissive),
        Ok(Conformance::UnknownVersion)
    );
    let err = r
        .check("mail.other", 1, &p, ContractMode::Strict)
        .unwrap_err();
    assert!(err.to_string().contains("has no contract"), "{err}");
    let err = r
        .check("mail.welcome", 9, &p, ContractMode::Strict)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "mail.welcome v9 is not a registered version (registered: v1, v2)"
    );
}

#[test]
fn many_errors_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let props: Vec<String> = (0..30)
        .map(|i| format!("f{i} = {{ type = \"integer\" }}"))
        .collect();
    let text = format!(
        "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1.schema]\ntype = \"object\"\n[versions.1.schema.properties]\n{}\n",
        props.join("\n")
    );
    write(dir.path(), "a.b.toml", &text);
    let r = ContractRegistry::load_dir(dir.path()).unwrap();
    let payload: serde_json::Map<String, serde_json::Value> =
        (0..30).map(|i| (format!("f{i}"), json!("x"))).collect();
    let Err(ContractViolation::Invalid { errors, .. }) =
        r.check("a.b", 1, &payload.into(), ContractMode::Strict)
    else {
        panic!("expected invalid")
    };
    assert_eq!(errors.len(), MAX_REPORTED_ERRORS + 1);
    assert_eq!(errors.last().unwrap(), "... and 20 more");
}

#[test]
fn json_files_load_like_toml() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "user.deleted.json",
        r#"{"event_type": "user.deleted", "owner": "accounts", "description": "gone",
                "versions": {"1": {"schema": {"type": "object", "properties": {"reason": {"type": ["string", "null"]}}}}}}"#,
    );
    let r = ContractRegistry::load_dir(dir.path()).unwrap();
    assert_eq!(
        r.check(
            "user.deleted",
            1,
            &json!({"reason": null}),
            ContractMode::Strict
        ),
        Ok(Conformance::Valid)
    );
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    let cases = [
        ("a.b.toml", "event_type = \"a.c\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n", "must match the file name"),
        ("a.b.toml", "event_type = \"a.b\"\nowner = \"\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n", "owner must not be empty"),
        ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\nversions = {}\n", "declares no versions"),
        ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.x]\nschema = { type = \"object\" }\n", "version \"x\" must be a whole number"),
        ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"objekt\" }\n", "versions.1.schema"),
        ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { \"$ref\" = \"https://example.com/s.json\" }\n", "versions.1.schema"),
        ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\ncolour = 1\n[versions.1]\nschema = { type = \"object\" }\n", "unknown field"),
        ("Bad.type.toml", "event_type = \"Bad.type\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n", "invalid event type"),
    ];
    for (name, text, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), name, text);
        let err = ContractRegistry::load_dir(dir.path())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(expected),
            "{name}: {err} (expected {expected:?})"
        );
    }
}

#[test]
fn a_failed_reload_keeps_the_previous_registry() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "mail.welcome.toml", WELCOME);
    let contracts = Contracts::load(Some(dir.path().to_path_buf()), ContractMode::Strict).unwrap();
    write(dir.path(), "mail.broken.toml", "not toml [");
    assert!(contracts.reload().is_err());
    assert!(contracts.current().get("mail.welcome").is_some());
    std::fs::remove_file(dir.path().join("mail.broken.toml")).unwrap();
    std::fs::remove_file(dir.path().join("mail.welcome.toml")).unwrap();
    let err = contracts.reload().unwrap_err();
    assert!(
        err.to_string().contains("every event would be rejected"),
        "{err}"
    );
    assert!(contracts.current().get("mail.welcome").is_some());
}

#[test]
fn a_folder_gone_or_emptied_is_no_contracts_in_permissive_mode() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("contracts");
    std::fs::create_dir(&dir).unwrap();
    write(&dir, "mail.welcome.toml", WELCOME);
    let contracts = Contracts::load(Some(dir.clone()), ContractMode::Permissive).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(contracts.reload().unwrap(), 0);
    assert!(contracts.current().is_empty());
}

#[test]
fn strict_mode_needs_contracts() {
    let dir = tempfile::tempdir().unwrap();
    let err = Contracts::load(Some(dir.path().to_path_buf()), ContractMode::Strict).unwrap_err();
    assert!(
        err.to_string().contains("every event would be rejected"),
        "{err}"
    );
}

#[test]
fn check_text_parses_only_covered_types() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "mail.welcome.toml", WELCOME);
    let contracts =
        Contracts::load(Some(dir.path().to_path_buf()), ContractMode::Permissive).unwrap();
    assert_eq!(
        contracts.check_text("x.y", 1, "not json at all", "dispatch"),
        Ok(Conformance::UnknownType)
    );
    let err = contracts
        .check_text("mail.welcome", 1, "{not json", "dispatch")
        .unwrap_err();
    assert!(err.to_string().contains("payload: not valid JSON"), "{err}");
}
