//! `outbox-bench`: every headline figure of the host with the baseline it is compared to,
//! measured in the same run: dispatch against the SQL limit, end to end against graphile-worker,
//! dispatch with ordering keys against the same events without them, commit-to-enqueue
//! latency, the router plugin against the native table, fresh instantiation, receiver throughput, the capability check in WebAssembly against Rust, host memory over a
//! million events, the claim's cost with few and many finished rows, and dispatch and the empty
//! claim after millions of events passed through the table, and the `outbox` binary as deployed
//! (shipped configuration and plugins) timed from outside.
//!
//! `scripts/bench.sh` (release build, plugins, graphile-worker baseline) or
//! `cargo run --release -p outbox-cli --bin outbox-bench` from the repository root (PostgreSQL
//! and Redis running, plugins built into `plugins/dist`). Uses its own database (`--database`,
//! default `outbox_bench`, recreated) and Redis prefix (`--redis-prefix`, default
//! `outbox-bench:`, cleared), so two runs with different names do not clash. `--only e2e,rss`
//! runs some sections. Ends with one summary table, or with `--json` one JSON document on stdout
//! (the shape is in `report` and bench/README.md). Compares as ratios measured in the same run, never
//! against fixed times.
//!
//! One module per section; shared setup in `common`, the figures in `report`. Every section
//! drives production code (the `Host`, the dispatcher, routers built as `outbox run` builds
//! them, receivers, the store's claim, the `outbox` binary itself); the bench never
//! re-implements what it measures. Baselines (plain SQL, graphile-worker) are written out as
//! what they are.
#![allow(
    clippy::disallowed_methods,
    reason = "a benchmark reads and writes PostgreSQL and Redis directly for its baselines"
)]
#![allow(
    clippy::cast_precision_loss,
    reason = "rates and ratios of counts far below 2^53"
)]

use clap::{Parser, ValueEnum};
use outbox_host::config::Config;
use serde::Serialize;

mod brokers;
mod bullmq;
mod churn;
mod claim_cost;
mod cluster;
mod common;
mod console;
mod deployed;
mod deployed_churn;
mod deployed_latency;
mod deployment;
mod dispatch;
mod e2e;
mod host_process;
mod hosts;
mod languages;
mod latency;
mod ordered;
mod plugins;
mod policy;
mod receive;
mod report;
mod rss;
mod work;

#[derive(Parser, Serialize)]
#[command(about = "Measure the outbox host against its baselines, in one run")]
struct Args {
    /// Print one JSON document on stdout (per-round lines go to stderr).
    #[arg(long)]
    json: bool,
    /// Database the bench recreates for itself (`<database>_gw` for graphile-worker).
    #[arg(long, default_value = "outbox_bench", value_parser = common::parse_database_name)]
    database: String,
    /// Redis key prefix the bench writes under (cleared).
    #[arg(long, default_value = "outbox-bench:", value_parser = common::parse_redis_prefix)]
    redis_prefix: String,
    /// Events pre-inserted for the dispatch and plugin throughput runs.
    #[arg(long, default_value_t = 100_000)]
    events: i64,
    /// Dispatch batch size for the throughput runs (and the SQL baselines).
    #[arg(long, default_value_t = 1000)]
    batch: i64,
    /// Offered load for the latency run (events/s, one transaction each).
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Events published in the latency run.
    #[arg(long, default_value_t = 5000)]
    latency_events: usize,
    /// Repetitions of each throughput run (the best is reported).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Entries pre-filled on the queue for each receiver throughput run.
    #[arg(long, default_value_t = 5000)]
    receive_entries: usize,
    /// Receiver concurrencies to measure (`OUTBOX_RECEIVER_CONCURRENCY`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "8,64,256")]
    receive_concurrency: Vec<usize>,
    /// Policy checks timed per case.
    #[arg(long, default_value_t = 20_000)]
    policy_checks: u32,
    /// Events pre-inserted for the end-to-end run (and jobs for graphile-worker).
    #[arg(long, default_value_t = 20_000)]
    e2e_events: i64,
    /// Events the `outbox` process dispatches while its memory is sampled.
    #[arg(long, default_value_t = 1_000_000)]
    rss_events: i64,
    /// Finished rows in the table for the small claim-cost case.
    #[arg(long, default_value_t = 10_000)]
    claim_small: i64,
    /// Finished rows in the table for the large claim-cost case.
    #[arg(long, default_value_t = 10_000_000)]
    claim_large: i64,
    /// Claims timed in each claim-cost case (the median is reported).
    #[arg(long, default_value_t = 20)]
    claim_samples: usize,
    /// Events dispatched (and then claims with nothing due timed) at each point of the churn
    /// section's curve.
    #[arg(long, default_value_t = 100_000)]
    churn_probe: i64,
    /// Events through the table (cumulative) at which the churn section measures again, against
    /// the fresh table, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    churn_checkpoints: Vec<i64>,
    /// Host counts the hosts section runs, comma-separated (1 to 4 `outbox run` processes).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    hosts: Vec<usize>,
    /// Events each run of the hosts section dispatches.
    #[arg(long, default_value_t = 200_000)]
    hosts_events: i64,
    /// Events dispatched in each run of the ordered section.
    #[arg(long, default_value_t = 20_000)]
    ordered_events: i64,
    /// Ordering keys the ordered section spreads its events over.
    #[arg(long, default_value_t = 1000)]
    ordered_keys: i64,
    /// Dispatch batch size of the ordered section's two runs (the default
    /// `OUTBOX_DISPATCH_BATCH_SIZE`): with one event of a key in flight at a time, 1,000 keys
    /// fill two batches of 100 in flight but not two of 1,000.
    #[arg(long, default_value_t = 100)]
    ordered_batch: i64,
    /// The Redis Cluster of the cluster section (`redis+cluster://host:port,...`); default: the
    /// loopback cluster `scripts/redis-cluster.sh` starts.
    #[arg(long)]
    cluster_url: Option<String>,
    /// Events in the table while the console's pages are timed.
    #[arg(long, default_value_t = 1_000_000)]
    console_events: i64,
    /// Requests timed per console page.
    #[arg(long, default_value_t = 20)]
    console_samples: usize,
    /// Events the deployed section commits at once into `outbox run` end to end (and jobs of
    /// its graphile-worker runs).
    #[arg(long, default_value_t = 40_000)]
    deployed_events: i64,
    /// Events the deployed section commits at once into each `outbox run --dispatcher-only`.
    #[arg(long, default_value_t = 100_000)]
    deployed_dispatch_events: i64,
    /// Events through the table (cumulative, comma-separated) after which the deployed section
    /// times a freshly started `outbox run --dispatcher-only` against a fresh table (0: none).
    #[arg(long, value_delimiter = ',', default_value = "1000000")]
    deployed_churn: Vec<i64>,
    /// Seconds of offered load in each of the deployed section's latency runs.
    #[arg(long, default_value_t = 5)]
    deployed_latency_seconds: u64,
    /// Run only these sections (comma-separated; default all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
}

/// A part of the bench.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Section {
    /// Dispatch throughput against the SQL limit and the store's statements alone.
    Dispatch,
    /// Router plugin against the native table, and instantiation cost.
    Plugins,
    /// The example handler in Rust, Python and JavaScript: compile time, call cost, memory.
    Languages,
    /// Commit-to-enqueue latency at a steady offered load.
    Latency,
    /// Receiver throughput with the echo handler plugin.
    Receive,
    /// Capability-policy check in WebAssembly against native Rust.
    Policy,
    /// One host dispatching and receiving until every receipt is written, against
    /// graphile-worker draining the same number of jobs.
    E2e,
    /// Claim cost with few and with many finished rows in the table.
    ClaimCost,
    /// Dispatch throughput and the empty claim after many events passed through the table
    /// (dead row versions, autovacuum only), against a fresh table.
    Churn,
    /// Resident memory of an `outbox run` process over many events.
    Rss,
    /// One, two and three `outbox run` processes on one database: throughput, each host's
    /// share, where the CPU goes.
    Hosts,
    /// Dispatch throughput with ordering keys against the same events without them.
    Ordered,
    /// Dispatch throughput into BullMQ's job format against the same events into a stream.
    Bullmq,
    /// Dispatch throughput into NATS JetStream and into RabbitMQ against the same events into
    /// a stream.
    Brokers,
    /// The end-to-end run on a Redis Cluster against one Redis node.
    Cluster,
    Console,
    /// The `outbox` binary as deployed (shipped routes.toml and plugins, HTTP on), timed from
    /// outside: end to end against graphile-worker, dispatch against the SQL limit, latency.
    Deployed,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = |section: Section| args.only.is_empty() || args.only.contains(&section);
    let mut report = report::Report::new(args.json, serde_json::to_value(&args)?);
    let config = Config::from_env()?;
    let (pool, settings) = common::bench_database(&config, &args).await?;

    report.say(format_args!(
        "outbox-bench: database {}, Redis prefix {}, {} events, batch {}, best of {} rounds",
        args.database, args.redis_prefix, args.events, args.batch, args.rounds
    ));
    // The router `outbox run` would build from this configuration (the dispatch and latency
    // sections measure the host as it runs).
    let serving = match run(Section::Dispatch)
        || run(Section::Latency)
        || run(Section::Ordered)
        || run(Section::Bullmq)
        || run(Section::Brokers)
        || run(Section::Churn)
    {
        true => Some(common::serving_router(&config, &settings).await?),
        false => None,
    };
    if let (true, Some(router)) = (run(Section::Dispatch), &serving) {
        dispatch::run(&args, &mut report, &pool, &settings, router).await?;
    }
    if let (true, Some(router)) = (run(Section::Ordered), &serving) {
        ordered::run(&args, &mut report, &pool, &settings, router).await?;
    }
    if let (true, Some(router)) = (run(Section::Bullmq), &serving) {
        bullmq::run(&args, &mut report, &config, &pool, &settings, router).await?;
    }
    if let (true, Some(router)) = (run(Section::Brokers), &serving) {
        brokers::run(&args, &mut report, &config, &pool, &settings, router).await?;
    }
    if run(Section::Plugins) {
        plugins::run(&args, &mut report, &config, &pool, &settings).await?;
    }
    if run(Section::Languages) {
        languages::run(&mut report, &settings).await?;
    }
    if let (true, Some(router)) = (run(Section::Latency), &serving) {
        latency::run(&args, &mut report, &pool, &settings, router).await?;
    }
    if run(Section::Receive) || run(Section::Policy) {
        let live = common::bench_plugins(&settings).await?;
        if run(Section::Receive) {
            receive::run(&args, &mut report, &pool, &settings, &live).await?;
        }
        if run(Section::Policy) {
            policy::run(&args, &mut report, &live).await?;
        }
    }
    if run(Section::E2e) {
        e2e::run(&args, &mut report, &pool, &settings).await?;
    }
    if run(Section::Cluster) {
        cluster::run(&args, &mut report, &pool, &settings).await?;
    }
    if run(Section::ClaimCost) {
        claim_cost::run(&args, &mut report, &pool, &settings).await?;
    }
    if let (true, Some(router)) = (run(Section::Churn), &serving) {
        churn::run(&args, &mut report, &pool, &settings, router).await?;
    }
    if run(Section::Console) {
        console::run(&args, &mut report, &config, &pool, &settings).await?;
    }
    if run(Section::Hosts) {
        hosts::run(&args, &mut report, &config, &pool, &settings).await?;
    }
    if run(Section::Rss) {
        rss::run(&args, &mut report, &config, &pool, &settings).await?;
    }
    if run(Section::Deployed) {
        deployed::run(&args, &mut report, &settings).await?;
    }
    report.finish()
}
