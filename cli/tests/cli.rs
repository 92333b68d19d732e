//! The `outbox` binary: bad input gives a clear error, a non-zero exit and writes nothing.
//!
//! One test binary, one module per subject under `cli/`; the helpers they share (running the
//! binary, the test database's URL, reading its output) are here.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]
// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

use sqlx::PgPool;

mod cli {
    mod demo;
    mod host_process;
    mod operators;
    mod otlp;
    mod output;
    mod plugin_authors;
    mod plugin_tutorial;
    mod plugins;
    mod plugins_call;
    mod publish;
    mod queues;
    mod repair;
    mod routes;
}

fn database_url(db: &str) -> String {
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    outbox_host::store::with_database(&base, db)
}

/// The URL of the database `pool` (a `sqlx::test` database) connects to.
async fn pool_url(pool: &PgPool) -> String {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    database_url(&db)
}

fn outbox(db_url: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env(
            "OUTBOX_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        )
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

/// [`outbox`] as the operator holding `token`.
fn outbox_as(db_url: &str, token: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("DATABASE_URL", db_url)
        .env(
            "OUTBOX_CONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../routes.toml"),
        )
        .env("OUTBOX_OPERATOR_TOKEN", token)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run outbox")
}

async fn count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM outbox_event")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The CLI's error line without its `error: ` lead.
fn cli_error(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr.lines().last().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_string()
}

fn repo_path(rel: &str) -> String {
    format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn xlen(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("XLEN").arg(key).query_async(conn).await.unwrap()
}
