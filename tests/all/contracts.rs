//! Event contracts: a payload is checked against the schema of its type and version on every
//! publish path (the Rust publisher and the CLI before writing, the SQL function's events by
//! the dispatcher), strict mode refuses unregistered types, and a handler that does not
//! support an event's version is receipted `skipped_unsupported_version` while the event's
//! other handlers run.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_host::contracts::{Conformance, ContractMode, ContractRegistry, Contracts};
use outbox_host::live_config::LiveConfig;
use outbox_host::publish::{publish_checked, PublishError, PublishRules};
use outbox_host::receive::Receivers;
use outbox_host::{Host, NewEvent};
use outbox_tests::{wait_for, PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

const WELCOME: &str = r#"
event_type = "mail.welcome"
owner = "growth"
description = "A user confirmed their address."

[versions.1.schema]
type = "object"
required = ["user_id", "email"]
properties = { user_id = { type = "integer" }, email = { type = "string" } }

[versions.2.schema]
type = "object"
required = ["user_id"]
properties = { user_id = { type = "integer" }, locale = { type = "string" } }
"#;

fn contracts_in(dir: &Path, mode: ContractMode) -> Contracts {
    std::fs::write(dir.join("mail.welcome.toml"), WELCOME).unwrap();
    Contracts::load(Some(dir.to_path_buf()), mode).unwrap()
}

fn rules(contracts: &Contracts) -> PublishRules {
    PublishRules {
        contracts: Some(contracts.clone()),
        ..PublishRules::default()
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn rust_publish_rejects_a_payload_breaking_its_contract_before_writing(pool: PgPool) {
    let dir = tempfile::tempdir().unwrap();
    let contracts = contracts_in(dir.path(), ContractMode::Permissive);
    let mut tx = pool.begin().await.unwrap();
    let bad = NewEvent::new("mail.welcome", json!({"user_id": "42"}));
    let err = publish_checked(&mut tx, bad, &rules(&contracts))
        .await
        .unwrap_err();
    assert!(matches!(err, PublishError::Contract(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("mail.welcome v1 breaks its contract")
            && text.contains("payload.user_id: expected integer, got string (rule: type)")
            && text.contains("payload.email: required field is missing (rule: required)"),
        "{text}"
    );
    // The same payload is fine as version 2, and an unregistered type passes permissively.
    let v2 = NewEvent::new("mail.welcome", json!({"user_id": 42})).with_version(2);
    publish_checked(&mut tx, v2, &rules(&contracts))
        .await
        .unwrap();
    let other = NewEvent::new("mail.other", json!({"anything": true}));
    publish_checked(&mut tx, other, &rules(&contracts))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let rows: Vec<(String, i32)> =
        sqlx::query_as("SELECT event_type, event_version FROM outbox_event ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        vec![("mail.welcome".into(), 2), ("mail.other".into(), 1)],
        "the invalid event was never written"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn strict_mode_rejects_unknown_types_and_versions_on_publish(pool: PgPool) {
    let dir = tempfile::tempdir().unwrap();
    let contracts = contracts_in(dir.path(), ContractMode::Strict);
    let mut tx = pool.begin().await.unwrap();
    for (event, expected) in [
        (
            NewEvent::new("mail.other", json!({})),
            "mail.other has no contract",
        ),
        (
            NewEvent::new("mail.welcome", json!({"user_id": 1})).with_version(3),
            "mail.welcome v3 is not a registered version (registered: v1, v2)",
        ),
    ] {
        let err = publish_checked(&mut tx, event, &rules(&contracts))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{err}");
    }
}

/// Publish through the SQL function, as an application in another language does.
async fn sql_publish(
    pool: &PgPool,
    event_type: &str,
    payload: serde_json::Value,
    version: i32,
) -> i64 {
    sqlx::query_scalar(
        "SELECT outbox_publish(p_event_type => $1, p_payload => $2, p_event_version => $3)",
    )
    .bind(event_type)
    .bind(payload)
    .bind(version)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn sql_published_event_breaking_its_contract_fails_and_is_never_delivered(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let dir = tempfile::tempdir().unwrap();
    let contracts = contracts_in(dir.path(), ContractMode::Strict);
    let valid = sql_publish(
        &env.pool,
        "mail.welcome",
        json!({"user_id": 1, "email": "a@b.c"}),
        1,
    )
    .await;
    let invalid = sql_publish(
        &env.pool,
        "mail.welcome",
        json!({"user_id": [1], "email": "a@b.c"}),
        1,
    )
    .await;
    let unregistered = sql_publish(&env.pool, "mail.other", json!({}), 1).await;
    let dispatcher = env.dispatcher("d1").await.with_contracts(contracts);
    let report = dispatcher.drain().await.unwrap();
    assert_eq!((report.done, report.failed), (1, 2), "{report:?}");
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![valid],
        "only the valid event is delivered"
    );
    let (status, attempts, error) = env.status(invalid).await;
    assert_eq!(
        (status.as_str(), attempts),
        ("failed", 1),
        "failed at once, no retry"
    );
    let error = error.unwrap();
    assert!(
        error.contains("payload.user_id: expected integer, got array (rule: type)"),
        "{error}"
    );
    let (status, _, error) = env.status(unregistered).await;
    assert_eq!(status, "failed");
    assert!(error.unwrap().contains("mail.other has no contract"));
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn contracts_reload_when_their_folder_changes_and_a_broken_edit_keeps_the_old(pool: PgPool) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(
        &[],
        "[routes]\n\"mail.\" = \"outbox.mail\"\n[router]\nplugin = \"native\"\n",
    );
    let contracts_dir = fixture.dir.path().join("contracts");
    std::fs::create_dir(&contracts_dir).unwrap();
    let config = fixture.config(&env.settings);
    let contracts = contracts_in(&contracts_dir, ContractMode::Permissive);
    assert_eq!(
        config.contracts_dir(),
        contracts_dir,
        "contracts/ beside routes.toml"
    );
    let live = LiveConfig::start(&config)
        .await
        .unwrap()
        .with_contracts(contracts.clone());
    let shutdown = CancellationToken::new();
    let watcher = live.clone().watch(shutdown.clone()).unwrap();
    let covered = |c: &Contracts| c.current().get("user.deleted").is_some();

    // A new type appears.
    std::fs::write(
        contracts_dir.join("user.deleted.toml"),
        "event_type = \"user.deleted\"\nowner = \"accounts\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n",
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !covered(&contracts) {
        assert!(Instant::now() < deadline, "the new contract was not loaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A broken edit is refused as a whole: both contracts keep serving.
    std::fs::write(contracts_dir.join("user.deleted.toml"), "event_type = [").unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(covered(&contracts) && contracts.current().get("mail.welcome").is_some());
    shutdown.cancel();
    let _ = watcher.await;
    env.cleanup().await;
}

/// Wait until the contracts in force of `host` satisfy `check`.
async fn wait_for_contracts(host: &Host, what: &str, check: impl Fn(&ContractRegistry) -> bool) {
    let live = host
        .live()
        .expect("a host with a routes file has a live config");
    wait_for(what, Duration::from_secs(15), async || {
        check(&live.contracts.current())
    })
    .await;
}

/// Wait until the dispatcher has settled event `id`: `done` or `failed`.
async fn settled(env: &TestEnv, id: i64) -> (String, i32, Option<String>) {
    let mut status = env.status(id).await;
    wait_for(
        "the event to be settled",
        Duration::from_secs(15),
        async || {
            status = env.status(id).await;
            status.0 == "done" || status.0 == "failed"
        },
    )
    .await;
    status
}

#[sqlx::test(migrations = "../migrations")]
async fn a_contracts_folder_created_edited_or_deleted_while_the_host_runs_is_reloaded(
    pool: PgPool,
) {
    let env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(
        &[],
        "[routes]\n\"mail.\" = \"outbox.mail\"\n[router]\nplugin = \"native\"\n",
    );
    let contracts_dir = fixture.dir.path().join("contracts");
    let host = Host::builder()
        .config(fixture.config(&env.settings))
        .pool(env.pool.clone())
        .worker_id("contracts-reload")
        .start()
        .await
        .unwrap();
    assert!(!contracts_dir.exists(), "the host starts without contracts");

    // The folder appears with a contract: an SQL-published event breaking it is failed by the
    // dispatcher, never delivered.
    std::fs::create_dir(&contracts_dir).unwrap();
    std::fs::write(contracts_dir.join("mail.welcome.toml"), WELCOME).unwrap();
    wait_for_contracts(&host, "the new folder's contract", |r| {
        r.covers("mail.welcome")
    })
    .await;
    let breaking = sql_publish(&env.pool, "mail.welcome", json!({"user_id": "7"}), 1).await;
    let (status, attempts, error) = settled(&env, breaking).await;
    assert_eq!((status.as_str(), attempts), ("failed", 1), "{error:?}");
    let error = error.unwrap();
    assert!(
        error.contains("payload.user_id: expected integer, got string (rule: type)"),
        "{error}"
    );

    // An edit is picked up: user_id becomes a string, email optional.
    std::fs::write(
        contracts_dir.join("mail.welcome.toml"),
        WELCOME
            .replace(
                "user_id = { type = \"integer\" }, email",
                "user_id = { type = \"string\" }, email",
            )
            .replace(
                "required = [\"user_id\", \"email\"]",
                "required = [\"user_id\"]",
            ),
    )
    .unwrap();
    wait_for_contracts(&host, "the edited contract", |r| {
        r.get("mail.welcome")
            .is_some_and(|c| c.versions[&1].schema["properties"]["user_id"]["type"] == "string")
    })
    .await;
    let fits_the_edit = sql_publish(&env.pool, "mail.welcome", json!({"user_id": "7"}), 1).await;
    assert_eq!(settled(&env, fits_the_edit).await.0, "done");
    let breaks_the_edit = sql_publish(&env.pool, "mail.welcome", json!({"user_id": 7}), 1).await;
    assert_eq!(settled(&env, breaks_the_edit).await.0, "failed");

    // The folder is deleted: back to no contracts, as a host started without the folder.
    std::fs::remove_dir_all(&contracts_dir).unwrap();
    wait_for_contracts(&host, "the contracts to be gone", |r| r.is_empty()).await;
    let unchecked = sql_publish(&env.pool, "mail.welcome", json!({"user_id": [1]}), 1).await;
    assert_eq!(settled(&env, unchecked).await.0, "done");
    assert_eq!(
        env.event_ids("outbox.mail").await,
        vec![fits_the_edit, unchecked],
        "only the events their contracts in force accepted were delivered"
    );
    let history = host.live().unwrap().reload_history();
    assert!(
        history.iter().filter(|r| r.what == "contracts").count() >= 3,
        "every contracts reload is remembered: {history:?}"
    );
    host.shutdown().await;
    env.cleanup().await;
}

const HANDLERS: &str = r#"
[routes]
"mail." = ["outbox.mail-old", "outbox.mail-new"]

[router]
plugin = "native"

[handlers]
"outbox.mail-old" = "old-mailer"
"outbox.mail-new" = "new-mailer"

[queue_groups]
general = ["outbox.mail-old", "outbox.mail-new"]

[plugins.capability-policy]

[plugins.old-mailer]
file = "echo-handler.wasm"
supported_versions = [1]

[plugins.new-mailer]
file = "echo-handler.wasm"
supported_versions = { "mail.welcome" = [1, 2] }
"#;

#[sqlx::test(migrations = "../migrations")]
async fn skipped_unsupported_version_recorded_for_one_handler_while_another_completes(
    pool: PgPool,
) {
    let mut env = TestEnv::new(pool).await;
    env.settings.receiver_lease = Duration::from_secs(5);
    let fixture = PluginFixture::new(&["capability-policy", "test/echo-handler"], HANDLERS);
    let config = fixture.config(&env.settings);
    let live = LiveConfig::start(&config).await.unwrap();
    let shutdown = CancellationToken::new();
    let dispatcher = env.dispatcher_routed_by("d1", live.router.clone()).await;
    let receivers = Receivers::new(
        env.pool.clone(),
        live.clone(),
        Arc::new(config.settings.clone()),
        "c1",
    )
    .await
    .unwrap();
    let mut tasks = vec![tokio::spawn(dispatcher.run(shutdown.clone()))];
    for queue in receivers.queues_for_group(Some("general")) {
        tasks.push(tokio::spawn(
            receivers.clone().consume(queue, shutdown.clone()),
        ));
    }
    let ids = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({"user_id": 1})).with_version(2),
            NewEvent::new("mail.welcome", json!({"user_id": 2})),
        ])
        .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let receipts = loop {
        let rows: Vec<(i64, String, String, i32)> = sqlx::query_as(
            "SELECT event_id, handler, result, attempts FROM outbox_receipt ORDER BY 1, 2",
        )
        .fetch_all(&env.pool)
        .await
        .unwrap();
        if rows.len() == 4 {
            break rows;
        }
        assert!(Instant::now() < deadline, "receipts so far: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        receipts,
        vec![
            (ids[0], "new-mailer".into(), "ok".into(), 1),
            (
                ids[0],
                "old-mailer".into(),
                "skipped_unsupported_version".into(),
                1
            ),
            (ids[1], "new-mailer".into(), "ok".into(), 1),
            (ids[1], "old-mailer".into(), "ok".into(), 1),
        ]
    );
    // Skipped is final: acknowledged, nothing pending, nothing dead-lettered or retried.
    let mut conn = env.redis.clone();
    for queue in ["outbox.mail-old", "outbox.mail-new"] {
        let pending: redis::streams::StreamPendingReply = redis::cmd("XPENDING")
            .arg(format!("{}{queue}", env.prefix))
            .arg("outbox")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(pending.count(), 0, "{queue}");
        let dead: i64 = redis::cmd("XLEN")
            .arg(format!("{}{queue}.dead-letter", env.prefix))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(dead, 0, "{queue}");
    }
    let per_handler = outbox_host::store::receipt_counts_by_handler(&env.pool, 10)
        .await
        .unwrap();
    let old = per_handler
        .iter()
        .find(|h| h.handler == "old-mailer")
        .unwrap();
    assert_eq!((old.ok, old.skipped_unsupported_version), (1, 1));
    shutdown.cancel();
    for t in tasks {
        let _ = t.await;
    }
    env.cleanup().await;
}

#[test]
fn the_shipped_example_contracts_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contracts");
    let registry = ContractRegistry::load_dir(&dir).unwrap();
    assert!(!registry.is_empty(), "contracts/ ships examples");
}

/// A contract for `text.costly`: every field a string matching `pattern`.
fn costly_contract(dir: &Path, pattern: &str) -> ContractRegistry {
    let schema = json!({
        "type": "object",
        "additionalProperties": {"type": "string", "pattern": pattern},
    });
    let contract = json!({
        "event_type": "text.costly",
        "owner": "search",
        "description": "Free text checked by a pattern that backtracks.",
        "versions": {"1": {"schema": schema}},
    });
    std::fs::write(dir.join("text.costly.json"), contract.to_string()).unwrap();
    ContractRegistry::load_dir(dir).unwrap()
}

/// `fields` fields, each `value`.
fn payload_of(fields: usize, value: &str) -> serde_json::Value {
    (0..fields)
        .map(|i| (format!("f{i}"), json!(value)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// A pattern whose first branch backtracks exponentially before the second matches anything:
/// 17 `a`s and a `!` take between 300,000 and 600,000 steps (under the per-match budget), 20
/// take more than a million.
const BACKTRACKING: &str = r"^(?:(a|a)*\1b|.*)$";

#[test]
fn many_values_each_under_the_per_match_budget_are_refused_by_the_per_payload_budget() {
    let dir = tempfile::tempdir().unwrap();
    let registry = costly_contract(dir.path(), BACKTRACKING);
    let near = format!("{}!", "a".repeat(17));
    assert_eq!(
        registry.check(
            "text.costly",
            1,
            &payload_of(2, &near),
            ContractMode::Strict
        ),
        Ok(Conformance::Valid),
        "a couple of costly values fit the payload's budget"
    );
    let err = registry
        .check(
            "text.costly",
            1,
            &payload_of(40, &near),
            ContractMode::Strict,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("text.costly v1") && err.contains("per-payload budget"),
        "{err}"
    );
    // One value past the per-match budget is refused on its own, even where a failed match
    // would make the payload valid.
    let past = format!("{}!", "a".repeat(20));
    let err = registry
        .check(
            "text.costly",
            1,
            &payload_of(1, &past),
            ContractMode::Strict,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("per-match budget"), "{err}");
    let negated = tempfile::tempdir().unwrap();
    let contract = json!({
        "event_type": "text.negated",
        "owner": "search",
        "description": "d",
        "versions": {"1": {"schema": {"type": "object", "additionalProperties": {"not": {"pattern": r"^(a|a)*\1b$"}}}}},
    });
    std::fs::write(
        negated.path().join("text.negated.json"),
        contract.to_string(),
    )
    .unwrap();
    let registry = ContractRegistry::load_dir(negated.path()).unwrap();
    let err = registry
        .check(
            "text.negated",
            1,
            &payload_of(1, &past),
            ContractMode::Strict,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("per-match budget"), "{err}");
}

#[test]
fn patterns_the_linear_engine_runs_cost_nothing_from_the_payload_budget() {
    let dir = tempfile::tempdir().unwrap();
    let registry = costly_contract(dir.path(), r"^(a+)+$");
    let long = "a".repeat(5_000);
    assert_eq!(
        registry.check(
            "text.costly",
            1,
            &payload_of(20_000, "aaaa"),
            ContractMode::Strict
        ),
        Ok(Conformance::Valid)
    );
    assert_eq!(
        registry.check(
            "text.costly",
            1,
            &payload_of(50, &long),
            ContractMode::Strict
        ),
        Ok(Conformance::Valid)
    );
    let err = registry
        .check(
            "text.costly",
            1,
            &payload_of(1, "aab"),
            ContractMode::Strict,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(r#"payload.f0: "aab" does not match "^(a+)+$" (rule: pattern)"#),
        "{err}"
    );
}
