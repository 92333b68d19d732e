//! Signals: how `outbox run` stops on SIGINT/SIGTERM.
//!
//! Owns the signal handling of the process: the first signal cancels the host's shutdown token,
//! a second one exits at once. It never stops the host itself (the host's shutdown does).

use tokio_util::sync::CancellationToken;

/// Cancel `token` at the first SIGINT or SIGTERM: the host stops in order within its grace
/// period. The token is cancelled before anything is logged, so shutdown never waits on a log
/// line. A second signal stops the process at once (what is still claimed is taken over when
/// its lease expires).
pub(crate) async fn cancel_on_signal(token: CancellationToken) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(not(unix))]
    let mut term = None::<()>;
    shutdown_signal(&mut term).await;
    token.cancel();
    tracing::info!("shutdown requested; finishing in-flight work (a second signal stops at once)");
    shutdown_signal(&mut term).await;
    errln!("error: second shutdown signal: stopping now without finishing in-flight work");
    crate::log_output::flush_at_exit(std::time::Duration::from_millis(200));
    std::process::exit(1);
}

/// The next SIGINT, or SIGTERM when it could be listened to.
#[cfg(unix)]
async fn shutdown_signal(term: &mut Option<tokio::signal::unix::Signal>) {
    let terminate = async {
        match term {
            Some(term) => {
                term.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// The next Ctrl-C.
#[cfg(not(unix))]
async fn shutdown_signal(_: &mut Option<()>) {
    let _ = tokio::signal::ctrl_c().await;
}
