//! A real `outbox run --dispatcher-only` process for the tests that SIGKILL a host mid-flow and
//! start it again (the BullMQ and broker kill tests of the `outbox` binary's own test suite).

use std::path::Path;
use std::process::Stdio;

use sqlx::PgPool;
use tokio::process::{Child, Command};

/// The URL of the database behind `pool` (a `sqlx::test` database), for a child process.
pub async fn pool_database_url(pool: &PgPool) -> String {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .unwrap();
    let base = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    outbox_host::store::with_database(&base, &db)
}

/// `binary run --dispatcher-only` on `dir/routes.toml` with plugins from `dir`, under the Redis
/// prefix `prefix`, with a short claim lease (1.5 s), a 100 ms poll, batches of 50 and no HTTP
/// listener, appending its output to `log`; `env` adds variables (a broker's URL). Killed when
/// dropped.
pub fn spawn_dispatcher(
    binary: &str,
    db_url: &str,
    dir: &Path,
    prefix: &str,
    log: &Path,
    env: &[(&str, String)],
) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut command = Command::new(binary);
    for var in outbox_host::config::Settings::ENV_VARS {
        command.env_remove(var);
    }
    command
        .args(["run", "--dispatcher-only"])
        .env("DATABASE_URL", db_url)
        .env("REDIS_URL", crate::redis_url())
        .env("OUTBOX_REDIS_PREFIX", prefix)
        .env("OUTBOX_CONFIG", dir.join("routes.toml"))
        .env("OUTBOX_PLUGIN_DIR", dir)
        .env("OUTBOX_HTTP_ADDR", "")
        .env("OUTBOX_CLAIM_LEASE_MS", "1500")
        .env("OUTBOX_DISPATCH_INTERVAL_MS", "100")
        .env("OUTBOX_DISPATCH_BATCH_SIZE", "50")
        .env("RUST_LOG", "warn,outbox_host::host=info")
        .env("NO_COLOR", "1");
    for (name, value) in env {
        command.env(name, value);
    }
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn outbox run")
}
