//! Cluster section: the end-to-end run of the `e2e` section (one production `Host`, dispatcher
//! and receivers, until every event has an `ok` receipt) on a single Redis node and on a Redis
//! Cluster, the same events, rounds alternating; the cluster's rate against the single node's.
//! The cluster is `--cluster-url`, or the loopback test cluster `scripts/redis-cluster.sh`
//! starts (3 primaries with a replica each, on this machine's cores). The bench's one queue
//! lives in one slot, so one primary takes its writes: the figure is the cost of the cluster
//! client and the slotted keys, not a spread over primaries (a cluster spreads queues).

use std::path::Path;

use anyhow::Context as _;
use outbox_host::config::Settings;
use sqlx::PgPool;

use crate::e2e::{host_end_to_end, HostRun};
use crate::report::Report;
use crate::Args;

/// The cluster to measure on: `--cluster-url`, else the loopback test cluster (started unless
/// it runs).
fn cluster_url(args: &Args) -> anyhow::Result<String> {
    if let Some(url) = &args.cluster_url {
        return Ok(url.clone());
    }
    let script = Path::new("scripts/redis-cluster.sh");
    anyhow::ensure!(
        script.exists(),
        "run from the repository root (scripts/redis-cluster.sh starts the loopback cluster), or pass --cluster-url"
    );
    let out = std::process::Command::new(script)
        .output()
        .context("run scripts/redis-cluster.sh")?;
    anyhow::ensure!(
        out.status.success(),
        "scripts/redis-cluster.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// End to end on one node and on the cluster, and their ratio.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    let n = args.e2e_events;
    anyhow::ensure!(n > 0, "--e2e-events must be at least 1");
    let url = cluster_url(args)?;
    let on_cluster = Settings {
        redis_url: url.clone(),
        ..settings.clone()
    };
    report.say(format_args!(
        "cluster: {n} events end to end (dispatch + echo handler + receipt) on {} and on {}, rounds alternating",
        outbox_host::store::redact(&settings.redis_url),
        outbox_host::store::redact(&url)
    ));
    let mut best_single: Option<HostRun> = None;
    let mut best_cluster: Option<HostRun> = None;
    for round in 1..=args.rounds {
        for (name, settings, best) in [
            ("single node", settings, &mut best_single),
            ("cluster", &on_cluster, &mut best_cluster),
        ] {
            let run = host_end_to_end(pool, settings, n).await?;
            report.say(format_args!(
                "  round {round}, {name}: all dispatched after {:.2} s ({:.0} events/s), all receipts after {:.2} s ({:.0} events/s)",
                run.dispatched,
                n as f64 / run.dispatched,
                run.total,
                n as f64 / run.total
            ));
            if best.as_ref().is_none_or(|b| run.total < b.total) {
                *best = Some(run);
            }
        }
    }
    let single = best_single.context("--rounds must be at least 1")?;
    let cluster = best_cluster.context("--rounds must be at least 1")?;
    report
        .figure(
            "cluster",
            "cluster.e2e",
            format!("end to end on a Redis Cluster, {n} events"),
            n as f64 / cluster.total,
            "events/s",
        )
        .against(
            "cluster.e2e_single_node",
            "the same on one Redis node (same run)",
            n as f64 / single.total,
        );
    report
        .figure(
            "cluster",
            "cluster.dispatch",
            format!("dispatch on a Redis Cluster, {n} events (same runs)"),
            n as f64 / cluster.dispatched,
            "events/s",
        )
        .against(
            "cluster.dispatch_single_node",
            "the same on one Redis node",
            n as f64 / single.dispatched,
        );
    Ok(())
}
