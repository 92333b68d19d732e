//! `outbox migrate`, `outbox run` and `outbox drain`: the commands that start the host's stages.
//! The host is assembled by `outbox_host::HostBuilder` (the same assembly the bench and the
//! tests use); this module only picks its options from the command line and prints the result.

use outbox_host::config::Config;
use outbox_host::{Host, HostError};
use tokio_util::sync::CancellationToken;

use crate::opt::RunArgs;

/// `outbox migrate`: apply the database migrations.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    super::open_store(config).await?;
    out!("migrations applied");
    Ok(())
}

/// `outbox run`: the host until SIGINT/SIGTERM (a second signal stops it at once). Shutdown
/// asked for while it was still starting ends the command quietly.
pub async fn run_host(config: Config, args: RunArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::signals::cancel_on_signal(shutdown.clone()));
    let mut builder = Host::builder().config(config).shutdown_token(shutdown);
    if let Some(group) = args.queue_group {
        builder = builder.queue_group(group);
    }
    if args.dispatcher_only {
        builder = builder.receivers_enabled(false);
    }
    if args.receivers_only {
        builder = builder.dispatcher_enabled(false);
    }
    match builder.start().await {
        Ok(host) => host.wait().await,
        Err(HostError::ShutdownDuringStart) => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// `outbox drain`: dispatch everything due now, once, routed exactly as `outbox run` routes it
/// (router plugin, overrides, fallback table, and each queue's sink); fails when Redis went away
/// during the drain.
pub async fn drain(config: Config) -> anyhow::Result<()> {
    let dispatcher = Host::builder().config(config).build_dispatcher().await?;
    let report = dispatcher.drain().await?;
    out!(
        "drained: {} claimed, {} done, {} retried later, {} failed",
        report.claimed,
        report.done,
        report.retried,
        report.failed
    );
    if report.redis_unavailable {
        anyhow::bail!("Redis became unavailable during the drain; the rest waits for a retry");
    }
    Ok(())
}
