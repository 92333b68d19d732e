//! `outbox plugins call` runs a handler offline in full: its kv calls work on an in-memory
//! store (seeded from a file), its publish calls are shown as "would publish" with the dispatch
//! keys the host would give them, its http calls are answered from a fixture file or refused,
//! and every call passes the grants and the capability policy of the routes file first.

use std::process::{Command, Output};

use crate::{repo_path, text};

/// A routes file for these tests: the shipped capability policy, `workflow-trigger` with an
/// HTTP executor, and the probe with kv and http grants and a kv byte quota of 8 KiB.
const ROUTES: &str = r#"
[routes]
"workflow." = "outbox.workflow"

[router]
plugin = "native"

[handlers]
"outbox.workflow" = "workflow-trigger"

[queue_groups]
general = ["outbox.workflow"]

[policy]
plugin = "capability-policy"

[plugins.capability-policy]

[plugins.workflow-trigger]
config = { executor = { http = { url = "https://executor.internal/run" } }, workflows = [
  { id = "welcome", trigger = { event = "user.signed-up" } },
  { id = "crm-sync", trigger = { event = "user.signed-up" } },
] }
grants = { publish = ["workflow.execution."], http = ["executor.internal"] }

[plugins.capability-probe]
kv_max_bytes = 8192
grants = { kv = true, http = ["api.example.com"] }
"#;

/// Write `text` to a file of this test run and return its path.
fn file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("outbox-plugins-call-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// `outbox plugins call` with the routes above and the built plugins.
fn call(args: &[&str]) -> Output {
    let routes = file("routes.toml", ROUTES);
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("plugins")
        .arg("call")
        .args(args)
        .env("DATABASE_URL", "postgres://unused")
        .env("REDIS_URL", "redis://unused")
        .env("OUTBOX_CONFIG", &routes)
        .env("OUTBOX_PLUGIN_DIR", repo_path("plugins/dist"))
        .env("OUTBOX_PLUGIN_CACHE_DIR", "off")
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

#[test]
fn cli_plugins_call_shows_what_the_shipped_workflow_trigger_would_publish() {
    // The fan-out: two workflows match, so two children, each with the dispatch key the host
    // gives the i-th child of event 7 published by this handler.
    let out = call(&[
        &repo_path("plugins/dist/workflow-trigger.wasm"),
        "--event",
        r#"{"id": 7, "event_type": "workflow.trigger.event", "tenant_id": "acme",
            "payload": {"trigger": "user.signed-up", "data": {"user": 42}}}"#,
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("grants: [plugins.workflow-trigger] of "),
        "{stdout}"
    );
    assert!(
        stdout.contains("capability policy: plugin capability-policy"),
        "{stdout}"
    );
    // workflow-trigger.wasm runs as workflow-trigger (the file's name), with its declared
    // config and grants; a trigger event only fans out.
    assert!(
        stdout.contains(
            "would publish workflow.execution.requested (dispatch key child:7:workflow-trigger:0, tenant acme): "
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("child:7:workflow-trigger:1, tenant acme): {\"data\":{\"user\":42},\"trigger_event_id\":7,\"workflow_id\":\"crm-sync\"}"),
        "{stdout}"
    );
    assert!(
        stdout.contains("workflow.trigger.event (from outbox.test): ok"),
        "{stdout}"
    );

    // An execution request goes to the HTTP executor: answered from the fixture file.
    let fixtures = file(
        "fixtures.json",
        r#"[{"method": "POST", "url": "https://executor.internal/run", "status": 202, "body": {"accepted": true}}]"#,
    );
    let request = r#"{"id": 8, "event_type": "workflow.execution.requested", "payload": {"workflow_id": "welcome"}}"#;
    let out = call(&[
        &repo_path("plugins/dist/workflow-trigger.wasm"),
        "--event",
        request,
        "--http-fixtures",
        fixtures.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("http POST https://executor.internal/run: 202 (fixture 1)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("workflow.execution.requested (from outbox.test): ok"),
        "{stdout}"
    );

    // Without a fixture the request is refused with a clear message (nothing is sent), and the
    // handler's own answer to that failure shows (workflow-trigger retries a failed call): an
    // answer other than ok exits 1, unless the test expects it.
    let out = call(&[
        &repo_path("plugins/dist/workflow-trigger.wasm"),
        "--event",
        request,
    ]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("plugins call: the handler answered retry (")
            && stderr.contains("expected ok (--expect)"),
        "{stderr}"
    );
    let out = call(&[
        &repo_path("plugins/dist/workflow-trigger.wasm"),
        "--event",
        request,
        "--expect",
        "retry",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("failed: http: http: no fixture answers POST https://executor.internal/run (an offline call sends no request; give the answer in a fixture file with --http-fixtures)"),
        "{stdout}"
    );
    assert!(stdout.contains(": retry ("), "{stdout}");
}

#[test]
fn cli_plugins_call_serves_kv_from_a_seed_and_checks_grants_and_the_policy() {
    let seed = file("kv.json", r#"{"visits": 41, "name": "ada"}"#);
    let steps = r#"{"event_type": "probe.run", "payload": {"steps": [
        {"op": "kv-increment", "key": "visits", "expect": {"returns": "42"}},
        {"op": "kv-get", "key": "name", "expect": {"returns": "ada"}},
        {"op": "kv-cas", "key": "name", "expected": "bob", "value": "eve", "expect": {"returns": "false"}},
        {"op": "kv-cas", "key": "name", "expected": "ada", "value": "eve", "ttl": 60, "expect": {"returns": "true"}},
        {"op": "kv-set", "key": "fresh", "value_bytes": 3},
        {"op": "kv-delete", "key": "gone", "expect": {"returns": "false"}},
        {"op": "publish", "event_type": "probe.child", "expect": {"denied": 1, "error_contains": "may not publish"}},
        {"op": "http", "url": "https://elsewhere.example.org/x", "expect": {"denied": 1}}
    ]}}"#;
    let out = call(&[
        &repo_path("plugins/dist/test/capability-probe.wasm"),
        "--event",
        steps,
        "--kv",
        seed.to_str().unwrap(),
        "--expect",
        "denied",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("probe.run (from outbox.test): ok"),
        "{stdout}"
    );
    assert!(stdout.contains("kv increment \"visits\": 42"), "{stdout}");
    assert!(
        stdout.contains("kv compare-and-set \"name\": not stored: the value is Some(\"ada\")"),
        "{stdout}"
    );
    assert!(
        stdout.contains("denied: publish \"probe.child\": "),
        "{stdout}"
    );
    assert!(
        stdout.contains("denied: http \"elsewhere.example.org\": "),
        "{stdout}"
    );
    assert!(stdout.contains("kv after the call: 3 keys"), "{stdout}");
    assert!(stdout.contains("\"name\" = \"eve\" (ttl 60 s)"), "{stdout}");
    assert!(stdout.contains("\"visits\" = \"42\""), "{stdout}");

    // --grants replaces the declared grants: without kv every kv call is denied by the policy.
    let out = call(&[
        &repo_path("plugins/dist/test/capability-probe.wasm"),
        "--event",
        r#"{"event_type": "probe.run", "payload": {"steps": [{"op": "kv-get", "key": "a", "expect": {"denied": 1}}]}}"#,
        "--grants",
        r#"{"publish": ["probe."]}"#,
        "--expect",
        "denied",
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("grants: given on the command line"),
        "{stdout}"
    );
    assert!(stdout.contains("denied: kv \"a\": "), "{stdout}");

    // A bad seed is a clear error before anything runs.
    let bad = file("bad-kv.json", r#"{"list": [1, 2]}"#);
    let out = call(&[
        &repo_path("plugins/dist/test/capability-probe.wasm"),
        "--event",
        r#"{"event_type": "probe.run", "payload": {"steps": []}}"#,
        "--kv",
        bad.to_str().unwrap(),
    ]);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stderr.contains("the value of \"list\" must be a string or an integer"),
        "{stderr}"
    );
}

#[test]
fn cli_plugins_call_applies_the_kv_byte_quota_of_the_plugin() {
    // Keys "b-0".. hold 1003 bytes each: eight fit in 8192 bytes, the ninth does not; deleting
    // one frees its bytes.
    let steps = r#"{"event_type": "probe.run", "payload": {"steps": [
        {"op": "kv-set", "key": "b-{i}", "value_bytes": 1000, "repeat": 9,
         "expect": {"ok": 8, "failed": 1, "error_contains": "kv quota of 8192 bytes reached for plugin 'capability-probe'"}},
        {"op": "kv-delete", "key": "b-1", "expect": {"returns": "true"}},
        {"op": "kv-set", "key": "b-8", "value_bytes": 1000, "expect": {"ok": 1}}
    ]}}"#;
    let out = call(&[
        &repo_path("plugins/dist/test/capability-probe.wasm"),
        "--event",
        steps,
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("probe.run (from outbox.test): ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains("kv quota of 8192 bytes reached"),
        "{stdout}"
    );
    assert!(stdout.contains("kv after the call: 8 keys"), "{stdout}");
}

#[test]
fn cli_plugins_call_finds_the_declared_plugin_of_a_file_named_as_cargo_builds_it() {
    // cargo writes `capability_probe.wasm` for the crate `capability-probe`: the call must run
    // with `[plugins.capability-probe]`'s grants, not as an undeclared plugin without any.
    let dir = std::env::temp_dir().join(format!("outbox-cargo-named-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cargo_named = dir.join("capability_probe.wasm");
    std::fs::copy(
        repo_path("plugins/dist/test/capability-probe.wasm"),
        &cargo_named,
    )
    .unwrap();
    let out = call(&[
        cargo_named.to_str().unwrap(),
        "--event",
        r#"{"event_type": "probe.run", "payload": {"steps": [
            {"op": "kv-set", "key": "a", "value_bytes": 1, "expect": {"ok": 1}}]}}"#,
    ]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("capability-probe: world handler"),
        "named after the plugin, not the file: {stdout}"
    );
    assert!(
        stdout.contains("grants: [plugins.capability-probe] of"),
        "the declared grants apply: {stdout}"
    );
    assert!(
        stdout.contains("probe.run (from outbox.test): ok"),
        "its kv grant let the write through: {stdout}"
    );
}

#[test]
fn cli_plugins_call_exits_non_zero_on_a_denied_host_call_or_an_unexpected_answer() {
    let probe = repo_path("plugins/dist/test/capability-probe.wasm");
    let denied_publish = r#"{"event_type": "probe.run", "payload": {"steps": [
        {"op": "publish", "event_type": "probe.child", "expect": {"denied": 1}}]}}"#;
    // A denial the test did not expect fails the call, even though the handler answered ok.
    let out = call(&[&probe, "--event", denied_publish]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("probe.run (from outbox.test): ok"),
        "{stdout}"
    );
    assert!(
        stderr.contains("plugins call: 1 host call(s) denied"),
        "{stderr}"
    );
    // Expected, it passes; expecting a denial that does not come fails.
    let out = call(&[&probe, "--event", denied_publish, "--expect", "denied"]);
    assert!(out.status.success(), "{:?}", text(&out));
    let quiet = r#"{"event_type": "probe.run", "payload": {"steps": []}}"#;
    let out = call(&[&probe, "--event", quiet, "--expect", "denied"]);
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no host call was denied"), "{stderr}");
    // A handler's failure fails the call; --expect fail turns it into the test's success.
    let failing = r#"{"event_type": "probe.run", "payload": {"steps": [
        {"op": "kv-get", "key": "a", "expect": {"returns": "never"}}]}}"#;
    let out = call(&[&probe, "--event", failing]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stderr.contains("the handler answered fail ("), "{stderr}");
    let out = call(&[&probe, "--event", failing, "--expect", "fail"]);
    assert!(out.status.success(), "{:?}", text(&out));
    // --expect must fit the plugin's world.
    let out = call(&[&probe, "--event", quiet, "--expect", "allow"]);
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--expect allow: not an answer a handler plugin gives"),
        "{stderr}"
    );
}
