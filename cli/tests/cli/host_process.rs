//! `outbox run` as a process among others: a stderr nobody reads (closed, or full and never
//! read) neither kills nor stalls it, and it still stops in order at SIGTERM; an HTTP address
//! another process holds stops it at start, naming the address.

use std::io::Write;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::process::{Child, Command};

use crate::{pool_url, xlen};

/// The grace period the hosts of these tests get to stop in.
const GRACE: Duration = Duration::from_secs(2);

const ROUTES: &str = r#"
[routes]
"crash." = "outbox.crash"
[router]
plugin = "native"
[policy]
plugin = "deny-all"
"#;

/// One `outbox run --dispatcher-only` on [`ROUTES`], with its own Redis prefix.
struct Host {
    child: Child,
    prefix: String,
    _dir: tempfile::TempDir,
}

/// `outbox run --dispatcher-only` logging at info level into `stderr`, with `http_addr` for
/// its HTTP endpoint.
fn start_host(db_url: &str, http_addr: &str, stderr: Stdio) -> Host {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("routes.toml"), ROUTES).unwrap();
    let prefix = format!("cli-process-{}:", uuid::Uuid::new_v4().simple());
    let mut command = Command::new(env!("CARGO_BIN_EXE_outbox"));
    for var in outbox_host::config::Settings::ENV_VARS {
        command.env_remove(var);
    }
    let child = command
        .args(["run", "--dispatcher-only"])
        .env("DATABASE_URL", db_url)
        .env("REDIS_URL", outbox_tests::redis_url())
        .env("OUTBOX_REDIS_PREFIX", &prefix)
        .env("OUTBOX_CONFIG", dir.path().join("routes.toml"))
        .env("OUTBOX_HTTP_ADDR", http_addr)
        .env("OUTBOX_DISPATCH_INTERVAL_MS", "100")
        .env("OUTBOX_SHUTDOWN_GRACE_MS", GRACE.as_millis().to_string())
        // Every dispatched batch logs at debug level: plenty of lines to write.
        .env("RUST_LOG", "debug,sqlx=warn,h2=warn,hyper=warn,tower=warn")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true)
        .spawn()
        .expect("spawn outbox run");
    Host {
        child,
        prefix,
        _dir: dir,
    }
}

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(outbox_tests::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Publish `n` events, wait until the host has handed every one to its Redis stream, send
/// SIGTERM and check that it stops within its grace period with a success code.
async fn dispatches_then_stops_within_its_grace(pool: &PgPool, mut host: Host, n: usize) {
    let mut redis = redis().await;
    let stream = format!("{}outbox.crash", host.prefix);
    for round in 0..2 {
        let mut tx = pool.begin().await.unwrap();
        for i in 0..n {
            outbox_host::publish(
                &mut tx,
                outbox_host::NewEvent::new(
                    "crash.event",
                    serde_json::json!({ "round": round, "i": i }),
                ),
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
        let expected = i64::try_from((round + 1) * n).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while xlen(&mut redis, &stream).await < expected {
            if let Some(status) = host.child.try_wait().unwrap() {
                panic!("outbox run ended while dispatching: {status:?}");
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: {} of {expected} events reached Redis",
                xlen(&mut redis, &stream).await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // A batch is recorded `done` after its entries reach the stream: wait for the record too.
    let all = i64::try_from(2 * n).unwrap();
    outbox_tests::wait_for(
        "every event recorded done",
        Duration::from_secs(30),
        async || {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM outbox_event WHERE status = 'done'")
                    .fetch_one(pool)
                    .await
                    .unwrap();
            done == all
        },
    )
    .await;

    let pid = host.child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    // The guarantee is about time: the grace period, plus a generous margin for a busy machine.
    let status = tokio::time::timeout(GRACE + Duration::from_secs(15), host.child.wait())
        .await
        .expect("outbox run stops within its grace period after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", host.prefix))
        .query_async(&mut redis)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut redis)
        .await
        .unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn a_host_whose_stderr_is_closed_keeps_dispatching_and_stops_within_its_grace(pool: PgPool) {
    let (reader, writer) = std::io::pipe().unwrap();
    // The reader went away (`outbox run 2>&1 | head -3`): every write to stderr fails (EPIPE).
    drop(reader);
    let host = start_host(&pool_url(&pool).await, "", writer.into());
    dispatches_then_stops_within_its_grace(&pool, host, 200).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_host_whose_stderr_is_never_read_keeps_dispatching_and_stops_within_its_grace(
    pool: PgPool,
) {
    let (reader, writer) = std::io::pipe().unwrap();
    // Fill the pipe before the host starts: its reader never reads, so every write the host
    // makes to stderr would wait forever.
    let written = Arc::new(AtomicUsize::new(0));
    let mut filler = writer.try_clone().unwrap();
    let progress = written.clone();
    std::thread::spawn(move || {
        // Ends with a broken pipe once the test drops the reader.
        while filler.write_all(&[b'.'; 512]).is_ok() {
            progress.fetch_add(512, Ordering::Relaxed);
        }
    });
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = written.load(Ordering::Relaxed);
        if now > 0 && now == last {
            break;
        }
        last = now;
    }
    let host = start_host(&pool_url(&pool).await, "", writer.into());
    dispatches_then_stops_within_its_grace(&pool, host, 200).await;
    drop(reader);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_host_whose_http_address_is_taken_fails_at_start_naming_the_address(pool: PgPool) {
    // Another process (here: this test) holds the port.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let host = start_host(&pool_url(&pool).await, &addr, Stdio::piped());
    let out = tokio::time::timeout(Duration::from_secs(30), host.child.wait_with_output())
        .await
        .expect("outbox run stops at start when its HTTP address is taken")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("OUTBOX_HTTP_ADDR={addr}")) && stderr.contains("in use"),
        "{stderr}"
    );
    drop(taken);
}
