//! `outbox-bench`: dispatch throughput against a raw SQL baseline, router plugin against the
//! native table, commit-to-enqueue latency, receiver throughput with a trivial handler plugin,
//! and the cost of a capability-policy check in WebAssembly against the same check in Rust.
//!
//! `cargo run --release -p outbox-cli --bin outbox-bench` from the repository root (PostgreSQL
//! and Redis running, plugins built into `plugins/dist`). Uses its own database (`outbox_bench`,
//! recreated) and Redis prefix (`outbox-bench:`, cleared). `--only receive,policy` runs some
//! sections (`dispatch`, `plugins`, `latency`, `receive`, `policy`; default all).
//! Prints figures; compares as ratios measured in the same run, never against fixed times.
//!
//! One module per section; shared setup in `common`. Every section drives production code
//! (dispatcher, routers built as `outbox run` builds them, receivers, receipt writer SQL,
//! plugin calls); the bench never re-implements what it measures.

use clap::{Parser, ValueEnum};
use outbox_host::config::Config;

mod common;
mod dispatch;
mod latency;
mod plugins;
mod policy;
mod receive;

#[derive(Parser)]
#[command(about = "Measure outbox dispatch throughput and latency")]
struct Args {
    /// Events pre-inserted for the throughput runs.
    #[arg(long, default_value_t = 100_000)]
    events: i64,
    /// Dispatch batch size for the throughput runs.
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
    #[arg(long, value_delimiter = ',', default_value = "8,32")]
    receive_concurrency: Vec<usize>,
    /// Policy checks timed per case.
    #[arg(long, default_value_t = 20_000)]
    policy_checks: u32,
    /// Run only these sections (comma-separated; default all).
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
}

/// A part of the bench.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Section {
    /// Dispatch throughput against the raw SQL baseline.
    Dispatch,
    /// Router plugin against the native table, and instantiation cost.
    Plugins,
    /// Commit-to-enqueue latency at a steady offered load.
    Latency,
    /// Receiver throughput with the echo handler plugin.
    Receive,
    /// Capability-policy check in WebAssembly against native Rust.
    Policy,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let run = |section: Section| args.only.is_empty() || args.only.contains(&section);
    let config = Config::from_env()?;
    let (pool, settings) = common::bench_database(&config, args.batch).await?;

    println!(
        "outbox-bench: {} events, batch {}, best of {} rounds",
        args.events, args.batch, args.rounds
    );
    // The router `outbox run` would build from this configuration (the dispatch and latency
    // sections measure the host as it runs).
    let serving = match run(Section::Dispatch) || run(Section::Latency) {
        true => Some(common::serving_router(&config, &settings).await?),
        false => None,
    };
    if let (true, Some(router)) = (run(Section::Dispatch), &serving) {
        dispatch::run(&args, &pool, &settings, router).await?;
    }
    if run(Section::Plugins) {
        plugins::run(&args, &config, &pool, &settings).await?;
    }
    if let (true, Some(router)) = (run(Section::Latency), &serving) {
        latency::run(&args, &pool, &settings, router).await?;
    }
    if run(Section::Receive) || run(Section::Policy) {
        let live = common::bench_plugins(&settings).await?;
        if run(Section::Receive) {
            receive::run(&args, &pool, &settings, &live).await?;
        }
        if run(Section::Policy) {
            policy::run(&args, &live).await?;
        }
    }
    Ok(())
}
