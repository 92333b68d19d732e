//! TEST ONLY: a router that probes the sandbox once per batch and routes every event to one
//! queue per probe, so a host test can assert on the queue list:
//!
//! | probe | queue when blocked | queue when it worked |
//! |---|---|---|
//! | read `/etc/passwd` | `probe.file-denied` | `probe.file-allowed` |
//! | env vars `HOME`, `PATH` or any other | `probe.env-empty` | `probe.env-visible` |
//! | TCP connect to `127.0.0.1:5432` | `probe.socket-denied` | `probe.socket-allowed` |
//! | wall clock after 2020-01-01 | `probe.clock-hidden` | `probe.clock-visible` |
//!
//! A refused TCP connection counts as allowed: the socket was opened, nothing listened. Each
//! probe's detail is logged at info level. Config: none.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use outbox_plugin_sdk::router::{Route, Router};
use outbox_plugin_sdk::{log, Config, Event};

/// 2020-01-01T00:00:00Z in seconds since the Unix epoch.
const YEAR_2020: u64 = 1_577_836_800;

/// Try to read a host file.
fn probe_file() -> &'static str {
    match std::fs::read("/etc/passwd") {
        Ok(bytes) => {
            log::info!("probe file: read {} bytes of /etc/passwd", bytes.len());
            "probe.file-allowed"
        }
        Err(e) => {
            log::info!("probe file: {e}");
            "probe.file-denied"
        }
    }
}

/// Look for any environment variable.
fn probe_env() -> &'static str {
    let named = ["HOME", "PATH"]
        .into_iter()
        .find(|name| std::env::var_os(name).is_some());
    let count = std::env::vars_os().count();
    log::info!("probe env: {count} variable(s), HOME/PATH visible: {named:?}");
    if named.is_some() || count > 0 {
        "probe.env-visible"
    } else {
        "probe.env-empty"
    }
}

/// Try to open a TCP connection to the local PostgreSQL port.
fn probe_socket() -> &'static str {
    let addr = SocketAddr::from(([127, 0, 0, 1], 5432));
    match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
        Ok(_) => {
            log::info!("probe socket: connected to {addr}");
            "probe.socket-allowed"
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            log::info!("probe socket: {addr} refused the connection (socket opened)");
            "probe.socket-allowed"
        }
        Err(e) => {
            log::info!("probe socket: {e}");
            "probe.socket-denied"
        }
    }
}

/// Read the wall clock.
fn probe_clock() -> &'static str {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    log::info!("probe clock: {since_epoch} s since the Unix epoch");
    if since_epoch > YEAR_2020 {
        "probe.clock-visible"
    } else {
        "probe.clock-hidden"
    }
}

/// The exported router.
struct SandboxProbe;

impl Router for SandboxProbe {
    fn route(_config: &Config, events: Vec<Event>) -> Vec<Route> {
        let queues: Vec<String> = [probe_file(), probe_env(), probe_socket(), probe_clock()]
            .into_iter()
            .map(str::to_owned)
            .collect();
        vec![Route::Queues(queues); events.len()]
    }
}

outbox_plugin_sdk::export_router!(SandboxProbe);
