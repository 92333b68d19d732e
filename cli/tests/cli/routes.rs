//! `outbox routes which|check` and the routes file: which rule or router plugin decides, the
//! overrides a drain follows, plugins found beside the routes file, commands that do not route
//! going on with a broken file, and warnings about handlers feeding their own queue.

use std::process::{Command, Output};

use outbox_host::store::Role;
use sqlx::PgPool;

use crate::{cli_error, count, database_url, outbox, pool_url, repo_path, text, xlen};

#[test]
fn cli_routes_which_explains_the_rule() {
    let out = outbox(
        "postgres://unused",
        &["routes", "which", "tenant.subscription.created"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The shipped routes.toml routes through prefix-router, found in plugins/dist beside it
    // whatever the working directory.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "tenant.subscription.created -> outbox.notification (router plugin \"prefix-router\")"
    );
    // A handler-bound destination names its handler and the queue groups that run it.
    let out = outbox(
        "postgres://unused",
        &["routes", "which", "workflow.trigger.event"],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.lines().nth(1),
        Some("  outbox.workflow: handler workflow-trigger, queue groups general"),
        "{stdout}"
    );
    let out = outbox(
        "postgres://unused",
        &["routes", "which", "workflow.trigger.event", "--json"],
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        json["consumers"],
        serde_json::json!([{"queue": "outbox.workflow", "sink": "streams", "handler": "workflow-trigger", "queue_groups": ["general"]}])
    );
    let out = outbox(
        "postgres://unused",
        &[
            "routes",
            "check",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A routes file whose `[router.overrides]` sends `special.` through a second instance of the
/// prefix-router plugin configured to pick `outbox.webhook`, where the native table says
/// `outbox.audit`; `legacy.` stays on the native table; everything else goes through the default
/// router plugin.
const OVERRIDE_ROUTES: &str = r#"
[routes]
"mail." = "outbox.mail"
"special." = "outbox.audit"
"legacy." = "outbox.audit"

[router]
plugin = "prefix-router"

[router.overrides]
"special." = "special-router"
"legacy." = "native"

[policy]
plugin = "deny-all"

[plugins.prefix-router]

[plugins.special-router]
file = "prefix-router.wasm"
config = { routes = { "special." = "outbox.webhook" } }
"#;

/// `outbox` with `routes` as its config file, plugins from `plugins/dist` and its own Redis prefix.
fn outbox_with_routes(
    db_url: &str,
    routes: &std::path::Path,
    prefix: &str,
    args: &[&str],
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("OUTBOX_CONFIG", routes)
        .env("OUTBOX_PLUGIN_DIR", repo_path("plugins/dist"))
        .env("OUTBOX_REDIS_PREFIX", prefix)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

fn write_override_routes(name: &str) -> std::path::PathBuf {
    let file = std::env::temp_dir().join(format!(
        "outbox-cli-{name}-{}-routes.toml",
        std::process::id()
    ));
    std::fs::write(&file, OVERRIDE_ROUTES).unwrap();
    file
}

#[test]
fn cli_routes_which_names_the_router_plugin_that_decides() {
    let routes = write_override_routes("which");
    let which = |event_type: &str| {
        let out = outbox_with_routes(
            "postgres://unused",
            &routes,
            "unused:",
            &["routes", "which", event_type],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        stdout.trim().to_string()
    };
    assert_eq!(
        which("special.created"),
        "special.created -> outbox.webhook (router plugin \"special-router\")"
    );
    assert_eq!(
        which("mail.welcome"),
        "mail.welcome -> outbox.mail (router plugin \"prefix-router\")"
    );
    assert_eq!(
        which("legacy.thing"),
        "legacy.thing -> outbox.audit (rule \"legacy.\")"
    );
    let nope = which("nope.x");
    assert!(
        nope.starts_with("nope.x: no route") && nope.ends_with("(router plugin \"prefix-router\")"),
        "{nope}"
    );

    // `--json` carries the same answer as the text line, field by field.
    let which_json = |event_type: &str| {
        let out = outbox_with_routes(
            "postgres://unused",
            &routes,
            "unused:",
            &["routes", "which", event_type, "--json"],
        );
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        serde_json::from_str::<serde_json::Value>(stdout.trim()).unwrap()
    };
    assert_eq!(
        which_json("special.created"),
        serde_json::json!({
            "event_type": "special.created",
            "queues": ["outbox.webhook"],
            "decided_by": "router",
            "decider": "special-router",
            "no_route": null,
            "error": null,
            "consumers": [{"queue": "outbox.webhook", "sink": "streams", "handler": null, "queue_groups": []}],
        })
    );
    assert_eq!(
        which_json("legacy.thing"),
        serde_json::json!({
            "event_type": "legacy.thing",
            "queues": ["outbox.audit"],
            "decided_by": "rule",
            "decider": "legacy.",
            "no_route": null,
            "error": null,
            "consumers": [{"queue": "outbox.audit", "sink": "streams", "handler": null, "queue_groups": []}],
        })
    );
    let nope_json = which_json("nope.x");
    assert_eq!(nope_json["queues"], serde_json::json!([]));
    assert_eq!(nope_json["decided_by"], "router");
    let reason = nope_json["no_route"].as_str().unwrap();
    assert!(nope.contains(reason), "{nope} / {reason}");
    std::fs::remove_file(&routes).ok();
}

#[test]
fn a_host_started_from_another_working_directory_loads_plugins_beside_its_routes_file() {
    // A deployment folder: routes.toml and plugins/dist/ beside it; the host runs from elsewhere.
    let deploy = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(deploy.path().join("plugins/dist")).unwrap();
    std::fs::copy(
        repo_path("plugins/dist/prefix-router.wasm"),
        deploy.path().join("plugins/dist/prefix-router.wasm"),
    )
    .unwrap();
    let routes = deploy.path().join("routes.toml");
    std::fs::write(
        &routes,
        "[routes]\n\"mail.\" = \"outbox.mail\"\n[router]\nplugin = \"prefix-router\"\n[policy]\nplugin = \"deny-all\"\n[plugins.prefix-router]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(["routes", "which", "mail.welcome"])
        .current_dir(elsewhere.path())
        .env("OUTBOX_CONFIG", &routes)
        .env_remove("OUTBOX_PLUGIN_DIR")
        .env("RUST_LOG", "info")
        .output()
        .expect("run outbox");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.trim(),
        "mail.welcome -> outbox.mail (router plugin \"prefix-router\")",
        "{stderr}"
    );
    let dist = std::fs::canonicalize(deploy.path().join("plugins/dist")).unwrap();
    assert!(
        stderr.contains("plugins load from") && stderr.contains(&dist.display().to_string()),
        "the host says where plugins load from:\n{stderr}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_drain_routes_through_the_configured_override_plugin(pool: PgPool) {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let url = database_url(&db);
    let routes = write_override_routes(&db);
    // sqlx names test databases after the test, so the name repeats from run to run: the Redis
    // prefix must not, or enqueue markers left by an earlier run would hide this run's entries.
    let prefix = format!(
        "cli-drain-{db}-{}-{}:",
        std::process::id(),
        chrono::Utc::now().timestamp_micros()
    );
    let run = |args: &[&str]| {
        let out = outbox_with_routes(&url, &routes, &prefix, args);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}: {stderr}");
        stdout
    };
    run(&["publish", "special.created", "--payload", "{}"]);
    run(&["publish", "mail.welcome", "--payload", "{}"]);
    let drained = run(&["drain"]);
    assert!(drained.contains("drained: 2 claimed, 2 done"), "{drained}");
    std::fs::remove_file(&routes).ok();

    let client = redis::Client::open(
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
    )
    .unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    assert_eq!(
        xlen(&mut conn, &format!("{prefix}outbox.webhook")).await,
        1,
        "the override plugin decided"
    );
    assert_eq!(
        xlen(&mut conn, &format!("{prefix}outbox.audit")).await,
        0,
        "not the native table"
    );
    assert_eq!(xlen(&mut conn, &format!("{prefix}outbox.mail")).await, 1);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn cli_commands_that_do_not_route_go_on_with_a_broken_routes_file(pool: PgPool) {
    let url = pool_url(&pool).await;
    let token = outbox_host::store::add_operator(&pool, "broken-cfg", Role::Admin, "test")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("routes.toml");
    std::fs::write(&broken, "[routes\n\"mail.\" = ").unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_outbox"))
            .args(args)
            .env("DATABASE_URL", &url)
            .env("OUTBOX_CONFIG", &broken)
            .env("OUTBOX_OPERATOR_TOKEN", &token)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    for args in [
        &["publish", "mail.welcome", "--payload", "{\"to\":\"a@b.c\"}"][..],
        &["stats", "--json"],
        &["config"],
        &["dead-letter", "list", "--queue", "outbox.mail", "--json"],
        &["requeue", "--status", "failed", "--dry-run"],
    ] {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", cli_error(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("warning:")
                && stderr.contains("going on with settings from the environment"),
            "{args:?} warns about the broken file: {stderr}"
        );
    }
    assert_eq!(count(&pool).await, 1, "the publish went through");
    // Commands that route still refuse a broken file.
    let out = run(&["routes", "which", "mail.welcome"]);
    assert!(!out.status.success());
    let out = run(&["dead-letter", "list"]);
    assert!(
        cli_error(&out).contains("no handler-bound queue is known"),
        "{}",
        cli_error(&out)
    );
}

#[test]
fn routes_check_warns_about_handlers_whose_children_come_back_to_their_queue() {
    let dir = tempfile::tempdir().unwrap();
    let routes = dir.path().join("routes.toml");
    // `looper` feeds its own queue; `ping` and `pong` feed each other's; `mailer` feeds nobody.
    std::fs::write(
        &routes,
        r#"
[routes]
"loop." = "outbox.loop"
"ping." = "outbox.ping"
"pong." = "outbox.pong"
"mail." = "outbox.mail"
"audit." = "outbox.audit"

[router]
plugin = "native"

[handlers]
"outbox.loop" = "looper"
"outbox.ping" = "ping"
"outbox.pong" = "pong"
"outbox.mail" = "mailer"

[plugins.capability-policy]

[plugins.looper]
file = "test/feedback-loop.wasm"
grants = { publish = ["loop."] }

[plugins.ping]
file = "test/feedback-loop.wasm"
grants = { publish = ["pong.reply"] }

[plugins.pong]
file = "test/feedback-loop.wasm"
grants = { publish = ["ping."] }

[plugins.mailer]
file = "test/echo-handler.wasm"
grants = { publish = ["audit."] }
"#,
    )
    .unwrap();
    let out = outbox(
        "postgres://unused",
        &["routes", "check", routes.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", cli_error(&out));
    let (_, stderr) = text(&out);
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("feedback loop"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert_eq!(
        warnings[0],
        "warning: feedback loop: handler looper of outbox.loop may publish loop.example (grant \"loop.\"), which routes back to outbox.loop; the host stops such a chain at generation 8 (OUTBOX_MAX_EVENT_GENERATION) with a dead letter"
    );
    assert_eq!(
        warnings[1],
        "warning: feedback loop: outbox.ping (handler ping) publishes pong.reply (grant \"pong.reply\") -> outbox.pong (handler pong) publishes ping.example (grant \"ping.\") -> outbox.ping; the host stops such a chain at generation 8 (OUTBOX_MAX_EVENT_GENERATION) with a dead letter"
    );
    assert!(!stderr.contains("outbox.mail"), "{stderr}");
}

#[test]
fn cli_routes_which_names_a_broker_queues_stream_or_exchange() {
    let file = std::env::temp_dir().join(format!(
        "outbox-cli-brokers-{}-routes.toml",
        std::process::id()
    ));
    std::fs::write(
        &file,
        r#"
[routes]
"order." = ["orders.nats", "orders.rabbit"]
[router]
plugin = "native"
[queues."orders.nats"]
sink = "nats"
nats = { stream = "ORDERS" }
[queues."orders.rabbit"]
sink = "rabbitmq"
rabbitmq = { exchange = "outbox", routing_key = "orders" }
[policy]
plugin = "deny-all"
"#,
    )
    .unwrap();
    let which = |nats_url: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
        command
            .args(["routes", "which", "order.placed"])
            .env("DATABASE_URL", "postgres://unused")
            .env("OUTBOX_CONFIG", &file)
            .env("OUTBOX_PLUGIN_DIR", repo_path("plugins/dist"))
            .env("OUTBOX_RABBITMQ_URL", "amqp://127.0.0.1:5672/%2f")
            .env("RUST_LOG", "warn");
        match nats_url {
            Some(url) => command.env("OUTBOX_NATS_URL", url),
            None => command.env_remove("OUTBOX_NATS_URL"),
        };
        command.output().expect("run outbox")
    };
    let out = which(Some("nats://127.0.0.1:4222"));
    assert!(out.status.success(), "{}", cli_error(&out));
    assert_eq!(
        text(&out).0.lines().skip(1).collect::<Vec<_>>(),
        [
            "  orders.nats: sink nats (stream ORDERS, subject orders.nats), read by the broker's consumers",
            "  orders.rabbit: sink rabbitmq (exchange outbox, routing key orders), read by the broker's consumers",
        ]
    );
    // Without the broker's URL the routes file fails its check, naming the setting.
    let out = which(None);
    assert!(!out.status.success());
    assert!(
        cli_error(&out).contains("needs OUTBOX_NATS_URL"),
        "{}",
        cli_error(&out)
    );
    let _ = std::fs::remove_file(&file);
}
