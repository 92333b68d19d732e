//! The deployed section's `outbox run` processes: the shipped configuration with the bench
//! queue added, a fresh database per run, starting a host and waiting until it is ready, and
//! stopping it with its stderr's last lines on failure; and the timed end-to-end and dispatch
//! runs of one started host (commit the events, watch the tables until the last one).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{RoutesFile, Settings};
use outbox_host::queue::QueueKeys;
use outbox_host::redis_conn::RedisConn;
use outbox_host::store;
use redis::AsyncCommands as _;
use sqlx::PgPool;

use crate::common::{clear_redis, recreate_database, redis_connection, BENCH_QUEUE};
use crate::deployed::{Cpu, Timed, DISPATCH_TYPES, RUN_DEADLINE};
use crate::host_process::{HostProcess, RunOptions};
use crate::work::Work;

/// The configuration the repository ships, from its root.
pub(crate) const SHIPPED_ROUTES: &str = "routes.toml";
/// The handler plugin added for the bench queue, and its file under the plugin directory.
pub(crate) const ECHO_PLUGIN: &str = "echo-handler";
pub(crate) const ECHO_PLUGIN_FILE: &str = "test/echo-handler.wasm";
/// How long the host may take to answer `/readyz`.
pub(crate) const READY_DEADLINE: Duration = Duration::from_secs(60);

/// The shipped configuration with the bench queue added, and a plugin directory holding the
/// shipped plugins and the echo handler; removed when dropped.
pub(crate) struct Deployment {
    pub(crate) dir: PathBuf,
    pub(crate) config_path: PathBuf,
    pub(crate) plugin_dir: PathBuf,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The shipped `routes.toml` plus the bench queue, written to a temporary directory with a
/// plugin directory of the shipped plugins and the echo handler.
pub(crate) fn deployment(settings: &Settings) -> anyhow::Result<Deployment> {
    let text = std::fs::read_to_string(SHIPPED_ROUTES).with_context(|| {
        format!("read the shipped {SHIPPED_ROUTES} (run the bench from the repository root)")
    })?;
    let mut doc: toml::Table = text
        .parse()
        .with_context(|| format!("parse {SHIPPED_ROUTES}"))?;
    table_mut(&mut doc, "routes")?.insert("bench.".into(), BENCH_QUEUE.into());
    table_mut(&mut doc, "handlers")?.insert(BENCH_QUEUE.into(), ECHO_PLUGIN.into());
    table_mut(&mut doc, "plugins")?.insert(ECHO_PLUGIN.into(), toml::Table::new().into());
    // Consumed with every group (`outbox run` without --queue-group) and with `general`.
    if let Some(general) = table_mut(&mut doc, "queue_groups")?
        .get_mut("general")
        .and_then(toml::Value::as_array_mut)
    {
        general.push(BENCH_QUEUE.into());
    }
    let plugins: Vec<String> = doc
        .get("plugins")
        .and_then(toml::Value::as_table)
        .map(|t| {
            t.iter()
                .filter(|(_, v)| v.get("file").is_none())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    let written = toml::to_string(&doc).context("write the deployed configuration")?;

    let dir = std::env::temp_dir().join(format!("outbox-bench-deployed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let plugin_dir = dir.join("plugins");
    std::fs::create_dir_all(&plugin_dir)
        .with_context(|| format!("create {}", plugin_dir.display()))?;
    let deployment = Deployment {
        config_path: dir.join("routes.toml"),
        plugin_dir,
        dir,
    };
    RoutesFile::parse(&written, &deployment.config_path)
        .context("the shipped routes.toml with the bench queue added does not validate")?;
    std::fs::write(&deployment.config_path, &written)
        .with_context(|| format!("write {}", deployment.config_path.display()))?;

    let shipped = &settings.plugin_dir;
    let entries = std::fs::read_dir(shipped)
        .with_context(|| format!("read {} (run scripts/build-plugins.sh)", shipped.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") && path.is_file() {
            if let Some(name) = path.file_name() {
                std::fs::copy(&path, deployment.plugin_dir.join(name))
                    .with_context(|| format!("copy {}", path.display()))?;
            }
        }
    }
    let echo = shipped.join(ECHO_PLUGIN_FILE);
    std::fs::copy(
        &echo,
        deployment.plugin_dir.join(format!("{ECHO_PLUGIN}.wasm")),
    )
    .with_context(|| {
        format!(
            "copy {} (run scripts/build-plugins.sh, test plugins included)",
            echo.display()
        )
    })?;
    for name in plugins {
        let file = deployment.plugin_dir.join(format!("{name}.wasm"));
        anyhow::ensure!(
            file.is_file(),
            "plugin {name} of {SHIPPED_ROUTES} is not in {}: run scripts/build-plugins.sh",
            shipped.display()
        );
    }
    Ok(deployment)
}

/// The table `key` of `doc`, created when missing.
fn table_mut<'a>(doc: &'a mut toml::Table, key: &str) -> anyhow::Result<&'a mut toml::Table> {
    doc.entry(key)
        .or_insert(toml::Table::new().into())
        .as_table_mut()
        .with_context(|| format!("[{key}] of {SHIPPED_ROUTES} is not a table"))
}

/// Recreate and migrate the database `name` and empty the bench's Redis prefix: a pool on it,
/// and `settings` pointing there.
pub(crate) async fn fresh_database(
    settings: &Settings,
    name: &str,
) -> anyhow::Result<(PgPool, Settings)> {
    recreate_database(settings, name).await?;
    let mut bench = settings.clone();
    bench.database_url = store::with_database(&settings.database_url, name);
    let pool = store::connect(&bench.database_url, 16)
        .await
        .with_context(|| format!("connect to the database {name}"))?;
    store::migrate(&pool)
        .await
        .with_context(|| format!("migrate the database {name}"))?;
    clear_redis(&bench).await?;
    Ok((pool, bench))
}

/// One timed run against a fresh `outbox run`: recreate the database `name` ([`fresh_database`]),
/// start the host there ([`start_host`]), run `timed` with the host, the pool and the settings
/// pointing there, and stop the host ([`stop_host`]: a failure carries its stderr's last lines);
/// the pool is closed whatever happened.
pub(crate) async fn on_fresh_host<T>(
    exe: &Path,
    deployment: &Deployment,
    settings: &Settings,
    name: &str,
    dispatcher_only: bool,
    batch_size: Option<i64>,
    timed: impl AsyncFnOnce(&mut HostProcess, &PgPool, &Settings) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let (pool, bench) = fresh_database(settings, name).await?;
    let result = match start_host(exe, deployment, &bench, &pool, dispatcher_only, batch_size).await
    {
        Ok(mut host) => {
            let result = timed(&mut host, &pool, &bench).await;
            stop_host(host, result).await
        }
        Err(e) => Err(e),
    };
    pool.close().await;
    result
}

/// Start `outbox run` (full, or `--dispatcher-only`) with the deployed configuration and an
/// HTTP listener on a free port, and wait until it is ready: `/readyz` answers 200 and its
/// heartbeat is in `outbox_worker`.
pub(crate) async fn start_host(
    exe: &Path,
    deployment: &Deployment,
    settings: &Settings,
    pool: &PgPool,
    dispatcher_only: bool,
    batch_size: Option<i64>,
) -> anyhow::Result<HostProcess> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("find a free port")?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut host = HostProcess::spawn_with(
        exe,
        settings,
        &RunOptions {
            config_path: Some(&deployment.config_path),
            dispatcher_only,
            http_addr: &addr,
            batch_size,
            plugin_dir: &deployment.plugin_dir,
        },
    )?;
    // The full run is ready once its receiver of the bench queue has made its consumer group
    // (which creates the stream).
    let stream = (!dispatcher_only).then(|| {
        QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url).stream(BENCH_QUEUE)
    });
    match wait_ready(&mut host, pool, settings, stream.as_deref()).await {
        Ok(()) => Ok(host),
        Err(e) => {
            stop_host(
                host,
                Err(e.context("the outbox process did not become ready")),
            )
            .await
        }
    }
}

/// Poll the host's `/readyz` (on the address it was started with) until 200, then the
/// heartbeat, then (full run) until `stream` exists, then let the host settle.
pub(crate) async fn wait_ready(
    host: &mut HostProcess,
    pool: &PgPool,
    settings: &Settings,
    stream: Option<&str>,
) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .context("build the HTTP client")?;
    let url = format!("http://{}/readyz", host.http_addr()?);
    let deadline = Instant::now() + READY_DEADLINE;
    loop {
        host.ensure_running()?;
        let last = match client.get(&url).send().await {
            Ok(r) if r.status().is_success() => break,
            Ok(r) => format!("status {}", r.status()),
            Err(e) => e.to_string(),
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "{url} did not answer 200 within {} s (last: {last})",
            READY_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        host.ensure_running()?;
        let live: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_worker")
            .fetch_one(pool)
            .await
            .context("read the host's heartbeat")?;
        if live > 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no heartbeat in outbox_worker within {} s",
            READY_DEADLINE.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Some(stream) = stream {
        let mut redis = redis_connection(settings).await?;
        loop {
            host.ensure_running()?;
            let exists: bool = redis
                .exists(stream)
                .await
                .with_context(|| format!("look for {stream}"))?;
            if exists {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "no receiver made {stream} within {} s",
                READY_DEADLINE.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // Idle before the clock starts: its first (empty) claims and reads are done.
    tokio::time::sleep(Duration::from_millis(500)).await;
    host.ensure_running()
}

/// Stop `host` (SIGTERM); a failed `result` gets the last lines of its stderr.
pub(crate) async fn stop_host<T>(
    host: HostProcess,
    result: anyhow::Result<T>,
) -> anyhow::Result<T> {
    let tail = host.stderr_tail();
    host.stop().await;
    result.map_err(|e| e.context(format!("outbox run (last lines of its stderr):\n{tail}")))
}

/// Commit `tx`, which inserted `what`, starting the clock at the COMMIT: the last event's id,
/// the CPU counters and the instant just before it.
async fn commit_timed(
    mut tx: sqlx::Transaction<'_, sqlx::Postgres>,
    host: &HostProcess,
    what: &str,
) -> anyhow::Result<(i64, Cpu, Instant)> {
    let last: i64 = sqlx::query_scalar("SELECT max(id) FROM outbox_event")
        .fetch_one(&mut *tx)
        .await
        .context("read the last event id")?;
    let before = Cpu::now(host.pid);
    let start = Instant::now();
    tx.commit()
        .await
        .with_context(|| format!("commit {what}"))?;
    Ok((last, before, start))
}

/// Events a host handles end to end before the timed run: a host that has been running has
/// planned its statements on a table holding the entries finished events left behind, as every
/// deployed host has, and its plugins are instantiated once.
pub(crate) const E2E_WARM_UP_EVENTS: i64 = 2_000;

/// `n` `bench.echo` events inserted in `tx`.
async fn insert_echo_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    n: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id) SELECT 'bench.echo', jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10) FROM generate_series(1, $1) g",
    )
    .bind(n)
    .execute(&mut **tx)
    .await
    .context("insert the bench events")?;
    Ok(())
}

/// Warm the host up ([`E2E_WARM_UP_EVENTS`] events through to their receipts, untimed), then
/// commit `n` `bench.echo` events in one transaction and time until every `ok` receipt.
pub(crate) async fn e2e_timed(
    host: &mut HostProcess,
    pool: &PgPool,
    redis: &mut RedisConn,
    n: i64,
) -> anyhow::Result<Timed> {
    let mut warm_up = pool.begin().await.context("begin")?;
    insert_echo_events(&mut warm_up, E2E_WARM_UP_EVENTS).await?;
    warm_up
        .commit()
        .await
        .context("commit the warm-up events")?;
    poll_until(
        host,
        Instant::now() + RUN_DEADLINE,
        Duration::from_millis(10),
        || async {
            let written: i64 = sqlx::query_scalar("SELECT count(*) FROM outbox_receipt")
                .fetch_one(pool)
                .await
                .context("count the warm-up receipts")?;
            Ok((written < E2E_WARM_UP_EVENTS)
                .then(|| format!("{written} of {E2E_WARM_UP_EVENTS} warm-up receipts")))
        },
    )
    .await?;

    let mut tx = pool.begin().await.context("begin")?;
    insert_echo_events(&mut tx, n).await?;
    let work_before = Work::now(pool, redis).await?;
    let (last, before, start) = commit_timed(tx, host, "the bench events").await?;
    let deadline = start + RUN_DEADLINE;
    // Cheap until the last event has its receipt (one primary-key probe), then the count.
    poll_until(host, deadline, Duration::from_millis(10), || async {
        let last_done: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outbox_receipt WHERE event_id = $1)")
                .bind(last)
                .fetch_one(pool)
                .await
                .context("look for the last event's receipt")?;
        Ok((!last_done).then(|| "the last event had no receipt".to_string()))
    })
    .await?;
    poll_until(host, deadline, Duration::from_millis(5), || async {
        let (ok, not_ok): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE result = 'ok'), count(*) FILTER (WHERE result <> 'ok') FROM outbox_receipt",
        )
        .fetch_one(pool)
        .await
        .context("count receipts")?;
        anyhow::ensure!(
            not_ok == 0,
            "{not_ok} receipts other than ok ({ok} ok of {n})"
        );
        let ok = ok - E2E_WARM_UP_EVENTS;
        Ok((ok < n).then(|| format!("only {ok} of {n} ok receipts")))
    })
    .await?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = Cpu::now(host.pid).per_event_since(before, n);
    let work = Work::now(pool, redis)
        .await?
        .per_event_since(work_before, n);
    Ok(Timed {
        seconds,
        cpu,
        work: Some(work),
    })
}

/// Insert `n` events over [`DISPATCH_TYPES`], round-robin, in one statement.
pub(crate) async fn insert_dispatch_events<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    n: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id) SELECT ($2::text[])[1 + g % 4], jsonb_build_object('user', g, 'text', 'hello, welcome aboard'), 'tenant-' || (g % 10) FROM generate_series(1, $1) g",
    )
    .bind(n)
    .bind(&DISPATCH_TYPES[..])
    .execute(executor)
    .await
    .context("insert the dispatch events")?;
    Ok(())
}

/// Commit `n` dispatch events in one transaction and time until every one is done.
pub(crate) async fn dispatch_timed(
    host: &mut HostProcess,
    pool: &PgPool,
    n: i64,
) -> anyhow::Result<Timed> {
    let mut tx = pool.begin().await.context("begin")?;
    insert_dispatch_events(&mut *tx, n).await?;
    // Every row of this run is claimable from its transaction's start on (a retry or release
    // only moves that later), so the count below reads the claim index from there, not the
    // entries every earlier run's finished events left behind until a vacuum.
    let since: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
        .fetch_one(&mut *tx)
        .await
        .context("read the transaction's start")?;
    let (last, before, start) = commit_timed(tx, host, "the dispatch events").await?;
    let deadline = start + RUN_DEADLINE;
    // Cheap until the last event is done (one primary-key probe), then the claim index's count.
    poll_until(host, deadline, Duration::from_millis(10), || async {
        let last_done: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM outbox_event WHERE id = $1 AND status = 'done')",
        )
        .bind(last)
        .fetch_one(pool)
        .await
        .context("look at the last event")?;
        Ok((!last_done).then(|| "the last event was not done".to_string()))
    })
    .await?;
    poll_until(host, deadline, Duration::from_millis(5), || async {
        let remaining: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_event WHERE status IN ('pending', 'processing') AND available_at >= $1",
        )
        .bind(since)
        .fetch_one(pool)
        .await
        .context("count the events not done")?;
        Ok((remaining > 0).then(|| format!("{remaining} of {n} events not done")))
    })
    .await?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = Cpu::now(host.pid).per_event_since(before, n);
    let failed: i64 =
        sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status <> 'done'")
            .fetch_one(pool)
            .await
            .context("count the events not done")?;
    anyhow::ensure!(failed == 0, "{failed} of {n} events ended other than done");
    Ok(Timed {
        seconds,
        cpu,
        work: None,
    })
}

/// Run `check` every `every` until it finds what it waits for (`None`), failing if `host` exits
/// or `deadline` passes; `Some(what)` says what is still missing, for that error.
async fn poll_until<F, Fut>(
    host: &mut HostProcess,
    deadline: Instant,
    every: Duration,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<String>>>,
{
    loop {
        host.ensure_running()?;
        let Some(missing) = check().await? else {
            return Ok(());
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "{missing} after {} s",
            RUN_DEADLINE.as_secs()
        );
        tokio::time::sleep(every).await;
    }
}
