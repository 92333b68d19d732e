//! The `outbox` command: parses the command line and calls the library; [`ops`] prints what
//! operators see. The library itself never prints.

use std::path::PathBuf;

use anyhow::Context;
use clap::{ArgGroup, Parser, Subcommand, ValueEnum};
use outbox_host::config::{Config, RoutesFile, Settings};
use outbox_host::plugin::World;
use outbox_host::{publish, store, Host, NewEvent};
use tokio_util::sync::CancellationToken;

#[macro_use]
mod output;
#[macro_use]
mod log_output;
mod ops;
mod span_export;

/// Transactional outbox host: moves committed events from PostgreSQL to Redis queues.
#[derive(Parser)]
#[command(name = "outbox", version, about)]
struct Cli {
    /// The routes file (routing table, queue groups, plugins). Default: routes.toml if present,
    /// else the built-in table.
    #[arg(long, global = true, env = "OUTBOX_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply database migrations and exit.
    Migrate,
    /// Run the host: dispatcher (and, with --queue-group, receivers) until SIGINT/SIGTERM.
    Run {
        /// Queue group to consume (also WORKER_QUEUE_GROUP; default: every group).
        #[arg(long)]
        queue_group: Option<String>,
        /// Run only the dispatcher, no receivers.
        #[arg(long, conflicts_with = "receivers_only")]
        dispatcher_only: bool,
        /// Run only receivers, no dispatcher (same as OUTBOX_DISPATCHER_ENABLED=false).
        #[arg(long)]
        receivers_only: bool,
    },
    /// Dispatch everything that is due now, once, then exit (for cron or repair).
    Drain,
    /// Publish one event (in its own transaction).
    Publish {
        /// Event type, e.g. mail.welcome.
        event_type: String,
        /// Payload: a JSON object, `@FILE` to read it from a file, or `-` for standard input.
        #[arg(long)]
        payload: String,
        /// Tenant id.
        #[arg(long)]
        tenant: Option<String>,
        /// Idempotency key (1 to 512 bytes of printable ASCII without spaces; `child:` and
        /// `denied:` are the host's): publishing it again with the same type, tenant and payload
        /// returns the first event's id, with different ones it fails.
        #[arg(long)]
        dispatch_key: Option<String>,
        /// Headers: a JSON object.
        #[arg(long)]
        headers: Option<String>,
        /// Ordering key (same rule as the dispatch key).
        #[arg(long)]
        ordering_key: Option<String>,
        /// Payload schema version (>= 1).
        #[arg(long, default_value_t = 1)]
        event_version: i32,
        /// Dispatch no sooner than this many seconds from now.
        #[arg(long, conflicts_with = "available_at")]
        delay: Option<u64>,
        /// Dispatch no sooner than this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
        #[arg(long)]
        available_at: Option<chrono::DateTime<chrono::Utc>>,
        /// Print `{"id", "inserted", "dispatch_key"}` instead of the id.
        #[arg(long)]
        json: bool,
    },
    /// Migrate, publish a few hundred demo events, dispatch them and show what went where.
    Demo,
    /// Show event counts by status, failures by type and live workers.
    Stats {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The registry of event types (`contracts/` beside routes.toml): list, show, check a
    /// folder, or diff two editions of a contract for a producer's CI.
    Contracts {
        #[command(subcommand)]
        command: ContractsCommand,
    },
    /// Inspect the routing table.
    Routes {
        #[command(subcommand)]
        command: RoutesCommand,
    },
    /// List, replay or drop entries of the dead-letter streams (handlers that gave up).
    DeadLetter {
        #[command(subcommand)]
        command: DeadLetterCommand,
    },
    /// Put failed or cancelled outbox rows back to pending (attempts reset, due now); the
    /// previous status, attempts and error go to the event's history. Never touches pending or
    /// processing rows.
    Requeue {
        #[command(flatten)]
        filter: RowFilterArgs,
        #[command(flatten)]
        options: RepairArgs,
    },
    /// Cancel pending or failed outbox rows: a cancelled row is never dispatched (requeue brings
    /// it back). Never touches processing rows.
    Cancel {
        #[command(flatten)]
        filter: RowFilterArgs,
        #[command(flatten)]
        options: RepairArgs,
    },
    /// Manage operator identities: a name, a role (admin repairs, viewer reads) and a token
    /// (OUTBOX_OPERATOR_TOKEN) shown once.
    Operator {
        #[command(subcommand)]
        command: OperatorCommand,
    },
    /// The life of one event: published, each attempt, each destination and its stream entry,
    /// each handler's receipt, dead letters, and the events its handlers published (a tree).
    Trace {
        /// The event id.
        id: i64,
        /// Generations of child events shown.
        #[arg(long, default_value_t = 5)]
        depth: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Give back the claims of a host that died (its `processing` events become pending, due
    /// now, the cut attempt not counted). Live hosts do this by themselves once a host's
    /// heartbeat is 90 s old; this does it at once. Needs an admin; audited.
    Release {
        /// The host's worker id (`outbox stats` lists them).
        #[arg(long)]
        worker: String,
        /// Release even if the host sent a heartbeat in the last 30 s (it may still be working:
        /// its events may then be handed off twice, once by it and once by the next claimer).
        #[arg(long)]
        force: bool,
    },
    /// Pause, resume and list the queues the host's receivers read: a paused queue's entries
    /// wait in its stream (every host stops reading it within a second; running handlers
    /// finish). Concurrency and rate limits are set in routes.toml's `[queues."NAME"]`.
    Queue {
        #[command(subcommand)]
        command: QueueCommand,
    },
    /// Show the audit trail: who ran which destructive command, when, on what, with what effect.
    Audit {
        /// Newest entries shown.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the effective settings (environment over `[settings]` over defaults).
    Config,
    /// Inspect, check, try out and scaffold WebAssembly plugins.
    Plugins {
        #[command(subcommand)]
        command: PluginsCommand,
    },
}

#[derive(Subcommand)]
enum QueueCommand {
    /// Pause a queue: receivers read no new entries until it is resumed (persisted; needs an
    /// admin; audited).
    Pause {
        /// The queue (as routes.toml names it).
        queue: String,
        /// Why, shown by `outbox queue list` (one line, at most 500 characters).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Resume a paused queue (needs an admin; audited).
    Resume {
        /// The queue.
        queue: String,
    },
    /// List the queues with their handler, pause, concurrency and rate limit.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum PluginsCommand {
    /// List plugins: version hash, load time and call/error counts from running hosts'
    /// heartbeats; without a live host, the plugins routes.toml declares, loaded from the plugin
    /// directory.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Compile one .wasm file and check it against the world it exports (offline).
    Check {
        /// The plugin file.
        file: PathBuf,
    },
    /// Run a plugin once without a database, Redis or network and show its answer and cost.
    ///
    /// Routers take --events; handlers take one event with --event; policies take one
    /// capability request with --event. JSON arguments may also be `@FILE` or `-` (stdin).
    /// A plugin declared under [plugins] in the config runs with its declared limits
    /// (timeout_ms, memory_mb, fuel) and grants, others with the defaults and no grants. A
    /// handler's host calls are checked by the capability policy of the config, then served
    /// offline: kv from memory (--kv seeds it), publish shown as "would publish" with the
    /// child's dispatch key, http answered from --http-fixtures or refused.
    #[command(group(ArgGroup::new("input").required(true).args(["events", "event"])))]
    Call {
        /// The plugin file.
        file: PathBuf,
        /// Router input: a JSON array of events, e.g.
        /// '[{"event_type": "mail.welcome", "payload": {}, "tenant_id": "t1"}]' (ids default to
        /// 1..n, version 1, headers {}, created_at now).
        #[arg(long)]
        events: Option<String>,
        /// Handler input: one event object; policy input: one capability request
        /// '{"plugin": "...", "capability": "publish", "target": "...", "grants": {...}}'.
        #[arg(long)]
        event: Option<String>,
        /// The plugin's JSON config (default: what routes.toml gives a plugin of the file's
        /// name; for a router, at least the routing table). Not `--config`: that is the routes
        /// file.
        #[arg(long, value_name = "JSON")]
        plugin_config: Option<String>,
        /// Queue of the delivery (handlers).
        #[arg(long, default_value = "outbox.test")]
        queue: String,
        /// Attempt of the delivery (handlers; 1 on first delivery).
        #[arg(long, default_value_t = 1)]
        attempt: u32,
        /// Handlers: a JSON file seeding the in-memory kv store, e.g. '{"count": "41"}' (string
        /// or integer values). Without it the store starts empty.
        #[arg(long, value_name = "FILE")]
        kv: Option<PathBuf>,
        /// Handlers: a JSON file of canned HTTP answers, e.g. '[{"method": "POST", "url":
        /// "https://executor.internal/run", "status": 202, "body": {"ok": true}}]'. A request no
        /// fixture answers fails with a clear message; nothing is ever sent.
        #[arg(long, value_name = "FILE")]
        http_fixtures: Option<PathBuf>,
        /// Handlers: the grants to run with, as JSON ('{"kv": true, "publish": ["mail."]}'),
        /// instead of `[plugins.NAME].grants` of the routes file.
        #[arg(long, value_name = "JSON")]
        grants: Option<String>,
        /// What the call must end with, else the command exits 1 (for tests in CI). A handler
        /// must answer `ok` with no host call denied unless given `retry`, `fail` and/or
        /// `denied` (at least one host call denied); a policy may be held to `allow` or `deny`.
        #[arg(long, value_enum, value_name = "ANSWER")]
        expect: Vec<ExpectArg>,
    },
    /// Scaffold a plugin crate from the SDK template into DIR/NAME.
    New {
        /// Crate and plugin name: lowercase letters, digits and '-'.
        name: String,
        /// Which world the plugin implements.
        #[arg(long, value_enum)]
        world: WorldArg,
        /// Parent directory (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// What `outbox plugins call --expect` accepts.
#[derive(Clone, Copy, ValueEnum)]
enum ExpectArg {
    /// A handler answers ok.
    Ok,
    /// A handler answers retry (or retry-after).
    Retry,
    /// A handler answers fail.
    Fail,
    /// At least one of a handler's host calls is denied.
    Denied,
    /// A policy allows.
    Allow,
    /// A policy denies.
    Deny,
}

impl From<ExpectArg> for ops::CallExpectation {
    fn from(e: ExpectArg) -> Self {
        match e {
            ExpectArg::Ok => Self::Ok,
            ExpectArg::Retry => Self::Retry,
            ExpectArg::Fail => Self::Fail,
            ExpectArg::Denied => Self::Denied,
            ExpectArg::Allow => Self::Allow,
            ExpectArg::Deny => Self::Deny,
        }
    }
}

/// A plugin world, as `--world` spells it.
#[derive(Clone, Copy, ValueEnum)]
enum WorldArg {
    /// Routes batches of events to queues.
    Router,
    /// Handles queue entries.
    Handler,
    /// Decides capability checks.
    Policy,
}

impl From<WorldArg> for World {
    fn from(w: WorldArg) -> Self {
        match w {
            WorldArg::Router => World::Router,
            WorldArg::Handler => World::Handler,
            WorldArg::Policy => World::Policy,
        }
    }
}

#[derive(Subcommand)]
enum DeadLetterCommand {
    /// Show dead letters.
    List {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Put dead letters back on their queue (handler attempts start again).
    Replay {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// Show what would be replayed, change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        everything: EveryDeadLetter,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Delete dead letters for good.
    Drop {
        #[command(flatten)]
        filter: DeadLetterFilter,
        /// Show what would be dropped, change nothing.
        #[arg(long)]
        dry_run: bool,
        #[command(flatten)]
        everything: EveryDeadLetter,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Replaying or dropping every dead letter needs saying so.
#[derive(clap::Args)]
struct EveryDeadLetter {
    /// Every dead letter of every handler-bound queue (required when no filter is given).
    #[arg(long)]
    all: bool,
    /// With --all: do not ask first.
    #[arg(long)]
    yes: bool,
}

/// Which dead letters a command applies to.
#[derive(clap::Args)]
struct DeadLetterFilter {
    /// Only this queue (default: every handler-bound queue in routes.toml).
    #[arg(long)]
    queue: Option<String>,
    /// Only this dead-letter entry id.
    #[arg(long)]
    id: Option<String>,
    /// Only this outbox event id.
    #[arg(long)]
    event: Option<i64>,
}

#[derive(Subcommand)]
enum OperatorCommand {
    /// Add an operator and print its token once (the first one, an admin, needs no token).
    Add {
        /// Name: 1 to 64 letters, digits, '_', '.', '@' or '-'.
        name: String,
        /// What it may do.
        #[arg(long, value_parser = ["admin", "viewer"])]
        role: String,
    },
    /// List operators (never their tokens).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an operator: its token stops working at once.
    Revoke {
        /// The operator.
        name: String,
    },
}

/// Which outbox rows a requeue or cancel applies to (every given condition must hold).
#[derive(clap::Args)]
struct RowFilterArgs {
    /// This event id (repeatable).
    #[arg(long = "id")]
    ids: Vec<i64>,
    /// Only rows in this status (requeue: failed or cancelled; cancel: pending or failed).
    #[arg(long)]
    status: Vec<String>,
    /// Only event types starting with this.
    #[arg(long)]
    type_prefix: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    tenant: Option<String>,
    /// Only rows created at or after this time (RFC 3339, e.g. 2026-11-30T12:00:00Z).
    #[arg(long)]
    since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only rows created before this time (RFC 3339).
    #[arg(long)]
    until: Option<chrono::DateTime<chrono::Utc>>,
    /// Only rows whose last error contains this text.
    #[arg(long)]
    error_contains: Option<String>,
    /// Only fan-out rows whose hand-off to this queue failed (destinations that have the event
    /// are never redone).
    #[arg(long)]
    destination: Option<String>,
}

impl From<RowFilterArgs> for store::RowFilter {
    fn from(a: RowFilterArgs) -> Self {
        store::RowFilter {
            ids: a.ids,
            statuses: a.status,
            type_prefix: a.type_prefix,
            tenant: a.tenant,
            since: a.since,
            until: a.until,
            error_contains: a.error_contains,
            destination: a.destination,
        }
    }
}

/// How a requeue or cancel runs.
#[derive(clap::Args)]
struct RepairArgs {
    /// Change at most this many rows (lowest ids first).
    #[arg(long)]
    limit: Option<u64>,
    /// Show exactly the rows a real run would change, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    /// Do not ask, whatever the number of rows.
    #[arg(long)]
    yes: bool,
    /// Ask before changing more rows than this.
    #[arg(long, default_value_t = 100)]
    confirm_above: u64,
}

impl From<RepairArgs> for ops::RepairOptions {
    fn from(a: RepairArgs) -> Self {
        ops::RepairOptions {
            limit: a.limit,
            dry_run: a.dry_run,
            json: a.json,
            yes: a.yes,
            confirm_above: a.confirm_above,
        }
    }
}

#[derive(Subcommand)]
enum ContractsCommand {
    /// Every registered event type with its owner and versions.
    List {
        /// The contracts folder (default: contracts/ beside the routes file, or
        /// OUTBOX_CONTRACTS_DIR).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One event type's contract, with each version's JSON Schema.
    Show {
        /// The event type, e.g. mail.welcome.
        event_type: String,
        /// The contracts folder (default as for `list`).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Load a contracts folder as the host would; exit 1 naming the file and field on an error.
    Check {
        /// The folder (default as for `list`).
        dir: Option<PathBuf>,
    },
    /// Classify the change between two editions of a contract file (or two JSON Schema files):
    /// exit 0 identical or compatible, 1 breaking (with the reason per field), 2 when a file
    /// cannot be read or is invalid.
    Diff {
        /// The edition consumers were built against (e.g. from the main branch).
        old: PathBuf,
        /// The proposed edition.
        new: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// A command that ends with a specific exit status and has printed what it had to say.
#[derive(Debug)]
struct ExitStatus(u8);

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for ExitStatus {}

#[derive(Subcommand)]
enum RoutesCommand {
    /// Validate a routes file (default: the configured one).
    Check {
        /// File to check.
        file: Option<PathBuf>,
    },
    /// Show which queues an event type goes to, and by which rule.
    Which {
        /// Event type.
        event_type: String,
        /// One JSON object (event_type, queues, decided_by, decider, no_route, error).
        #[arg(long)]
        json: bool,
    },
}

/// The config of a command that does not route events: a routes file that cannot be read or
/// is invalid is a warning, and the command goes on with settings from the environment and
/// defaults (no routes, no handlers), so the operator still has `publish`, `stats`,
/// `dead-letter`, `config` and friends while the running host keeps its last good config.
fn load_config_or_environment(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    match load_config(path) {
        Ok(config) => Ok(config),
        Err(e) => {
            errln!(
                "warning: {e:#}\nwarning: going on with settings from the environment and defaults only (this command does not route events; a running host keeps its last good config)"
            );
            Ok(Config::environment_only()?)
        }
    }
}

fn load_config(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    let config = match path {
        Some(p) => Config::load(p)?,
        None => Config::from_env()?,
    };
    // The checks that need the plugins and Redis a config is assembled with (live_config).
    config.check()?;
    Ok(config)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let span_export = span_export::init(log_output::LogOutput::install_stderr());
    let cli = Cli::parse();
    let ran = run(cli).await;
    if let Some(span_export) = span_export {
        span_export.shutdown().await;
    }
    let code = match ran {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<ExitStatus>() {
            Some(ExitStatus(code)) => std::process::ExitCode::from(*code),
            None => {
                errln!("error: {e:#}");
                std::process::ExitCode::FAILURE
            }
        },
    };
    log_output::flush_at_exit(log_output::FLUSH_AT_EXIT);
    code
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Migrate => {
            let config = load_config_or_environment(&cli.config)?;
            let pool = store::connect(&config.settings.database_url, 2).await?;
            store::migrate(&pool).await?;
            out!("migrations applied");
        }
        Command::Run {
            queue_group,
            dispatcher_only,
            receivers_only,
        } => {
            let mut config = load_config(&cli.config)?;
            if queue_group.is_some() {
                config.settings.worker_queue_group = queue_group;
            }
            if let Some(group) = &config.settings.worker_queue_group {
                if !config.routes.queue_groups.contains_key(group) {
                    let known: Vec<&str> = config
                        .routes
                        .queue_groups
                        .keys()
                        .map(String::as_str)
                        .collect();
                    anyhow::bail!(
                        "unknown queue group {group:?}: routes.toml has {}",
                        if known.is_empty() {
                            "no [queue_groups]".to_string()
                        } else {
                            known.join(", ")
                        }
                    );
                }
            }
            let shutdown = CancellationToken::new();
            tokio::spawn(cancel_on_signal(shutdown.clone()));
            let mut builder = Host::builder();
            if dispatcher_only {
                builder = builder.receivers_enabled(false);
            }
            if receivers_only {
                builder = builder.dispatcher_enabled(false);
            }
            let host = match builder
                .config(config)
                .shutdown_token(shutdown)
                .start()
                .await
            {
                Ok(host) => host,
                Err(outbox_host::HostError::ShutdownDuringStart) => return Ok(()),
                Err(e) => return Err(e.into()),
            };
            host.wait().await;
        }
        Command::Drain => {
            let config = load_config(&cli.config)?;
            let settings = std::sync::Arc::new(config.settings.clone());
            let pool = store::connect(&settings.database_url, 4).await?;
            store::migrate(&pool).await?;
            // Route exactly as `outbox run` would: router plugin, overrides, fallback table, and
            // each queue's sink.
            let live = outbox_host::live_config::LiveConfig::start(&config).await?;
            let sink =
                outbox_host::sink::QueueSinks::connect(&settings, live.routes.clone()).await?;
            let dispatcher = outbox_host::dispatch::Dispatcher::new(
                pool,
                sink,
                live.router.clone(),
                settings,
                outbox_host::host::default_worker_id(),
            )
            .with_contracts(config.load_contracts()?);
            let report = dispatcher.drain().await?;
            out!(
                "drained: {} claimed, {} done, {} retried later, {} failed",
                report.claimed,
                report.done,
                report.retried,
                report.failed
            );
            if report.redis_unavailable {
                anyhow::bail!(
                    "Redis became unavailable during the drain; the rest waits for a retry"
                );
            }
        }
        Command::Publish {
            event_type,
            payload,
            tenant,
            dispatch_key,
            headers,
            ordering_key,
            event_version,
            delay,
            available_at,
            json,
        } => {
            let config = load_config_or_environment(&cli.config)?;
            let payload = read_payload_arg(&payload)?;
            let payload: serde_json::Value = serde_json::from_str(&payload).with_context(|| {
                format!("--payload is not valid JSON: {:?}", abbreviate(&payload))
            })?;
            let mut event = NewEvent::new(event_type, payload);
            if let Some(h) = headers {
                event = event.with_headers(
                    serde_json::from_str(&h)
                        .with_context(|| format!("--headers is not valid JSON: {h:?}"))?,
                );
            }
            if let Some(t) = tenant {
                event = event.with_tenant(t);
            }
            if let Some(k) = dispatch_key {
                event = event.with_dispatch_key(k);
            }
            if let Some(k) = ordering_key {
                event = event.with_ordering_key(k);
            }
            event = event.with_version(event_version);
            let delay = delay
                .map(|s| {
                    chrono::Duration::try_seconds(i64::try_from(s).unwrap_or(i64::MAX))
                        .and_then(|d| chrono::Utc::now().checked_add_signed(d))
                        .ok_or_else(|| anyhow::anyhow!("--delay {s} is too far in the future"))
                })
                .transpose()?;
            if let Some(at) = delay.or(available_at) {
                event = event.with_available_at(at);
            }
            let dispatch_key = event.dispatch_key.clone();
            // Validate before touching the database so bad input never needs a connection.
            // The contracts folder beside routes.toml checks the payload here, before writing.
            let rules = publish::PublishRules::from_config(&config)?;
            rules.validate(&event)?;
            if let Some(warning) = ops::no_route_warning(&config, &event.event_type) {
                errln!("warning: {warning}");
            }
            let pool = store::connect(&config.settings.database_url, 1).await?;
            store::migrate(&pool).await?;
            let mut tx = pool.begin().await?;
            let published = publish::publish_checked(&mut tx, event, &rules).await?;
            tx.commit().await?;
            if json {
                out!(
                    "{}",
                    serde_json::json!({
                        "id": published.id,
                        "inserted": published.inserted,
                        "dispatch_key": dispatch_key,
                    })
                );
            } else {
                out!("{}", published.id);
                if !published.inserted {
                    errln!(
                        "event {} already existed under dispatch key {}: nothing new was written",
                        published.id,
                        dispatch_key.as_deref().unwrap_or_default()
                    );
                }
            }
        }
        Command::Demo => ops::run_demo(load_config(&cli.config)?).await?,
        Command::Requeue { filter, options } => {
            let config = load_config_or_environment(&cli.config)?;
            let action = store::RepairAction::Requeue;
            ops::repair_rows(&config, action, filter.into(), options.into()).await?;
        }
        Command::Cancel { filter, options } => {
            let config = load_config_or_environment(&cli.config)?;
            let action = store::RepairAction::Cancel;
            ops::repair_rows(&config, action, filter.into(), options.into()).await?;
        }
        Command::Stats { json } => {
            let config = load_config_or_environment(&cli.config)?;
            let pool = store::connect(&config.settings.database_url, 2).await?;
            store::migrate(&pool).await?;
            ops::require(&pool, store::Role::Viewer, "stats").await?;
            ops::print_stats(&pool, &config, json).await?;
        }
        Command::Operator { command } => {
            let config = load_config_or_environment(&cli.config)?;
            let pool = store::connect(&config.settings.database_url, 2).await?;
            store::migrate(&pool).await?;
            match command {
                OperatorCommand::Add { name, role } => {
                    let role = store::Role::parse(&role)
                        .ok_or_else(|| anyhow::anyhow!("--role admin or viewer, not {role:?}"))?;
                    ops::add_operator(&pool, &name, role).await?;
                }
                OperatorCommand::List { json } => ops::list_operators(&pool, json).await?,
                OperatorCommand::Revoke { name } => ops::revoke_operator(&pool, &name).await?,
            }
        }
        Command::Trace { id, depth, json } => {
            ops::print_trace(&load_config(&cli.config)?, id, depth, json).await?;
        }
        Command::Release { worker, force } => {
            let config = load_config_or_environment(&cli.config)?;
            let pool = store::connect(&config.settings.database_url, 2).await?;
            store::migrate(&pool).await?;
            ops::release_worker(&pool, &worker, force).await?;
        }
        Command::Queue { command } => {
            let config = load_config_or_environment(&cli.config)?;
            let pool = store::connect(&config.settings.database_url, 2).await?;
            store::migrate(&pool).await?;
            match command {
                QueueCommand::Pause { queue, reason } => {
                    ops::pause_queue(&pool, &config, &queue, reason.as_deref()).await?
                }
                QueueCommand::Resume { queue } => ops::resume_queue(&pool, &config, &queue).await?,
                QueueCommand::List { json } => ops::list_queues(&pool, &config, json).await?,
            }
        }
        Command::Audit { limit, json } => {
            let config = load_config_or_environment(&cli.config)?;
            let pool = store::connect(&config.settings.database_url, 2).await?;
            store::migrate(&pool).await?;
            ops::print_audit(&pool, limit, json).await?;
        }
        Command::Contracts { command } => {
            let config = load_config_or_environment(&cli.config)?;
            let dir_or_default =
                |dir: Option<PathBuf>| dir.unwrap_or_else(|| config.contracts_dir());
            match command {
                ContractsCommand::List { dir, json } => {
                    ops::list_contracts(&dir_or_default(dir), json)?
                }
                ContractsCommand::Show {
                    event_type,
                    dir,
                    json,
                } => ops::show_contract(&dir_or_default(dir), &event_type, json)?,
                ContractsCommand::Check { dir } => {
                    ops::check_contracts(&dir_or_default(dir), &config)?
                }
                ContractsCommand::Diff { old, new, json } => {
                    match ops::diff_contract_files(&old, &new, json) {
                        Ok(outbox_host::contracts::compat::Compatibility::Breaking) => {
                            return Err(ExitStatus(ops::EXIT_BREAKING).into())
                        }
                        Ok(_) => {}
                        Err(e) => {
                            errln!("error: {e:#}");
                            return Err(ExitStatus(2).into());
                        }
                    }
                }
            }
        }
        Command::Routes { command } => match command {
            RoutesCommand::Check { file } => {
                let path = file
                    .or(cli.config)
                    .unwrap_or_else(|| PathBuf::from("routes.toml"));
                let routes = RoutesFile::load(&path)?;
                let settings = Settings::resolve(&routes.settings)?;
                routes
                    .check_receiver_lease(settings.receiver_lease)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                for (queue, handler) in &routes.handlers {
                    let groups: Vec<&str> = routes
                        .queue_groups
                        .iter()
                        .filter(|(_, queues)| queues.contains(queue))
                        .map(|(group, _)| group.as_str())
                        .collect();
                    if groups.is_empty() && !routes.queue_groups.is_empty() {
                        errln!(
                            "warning: {queue} is bound to handler {handler} but no queue group lists it: only hosts run without --queue-group consume it"
                        );
                    }
                    if let Some(max_len) = routes.max_len_of(queue) {
                        errln!(
                            "warning: {queue} is bound to handler {handler} and has max_len = {max_len}: entries beyond it are dropped even when the handler has not run them yet (counted in outbox stats)"
                        );
                    }
                }
                let feedback = outbox_host::routing::feedback_loops(&routes);
                for feedback_loop in &feedback.loops {
                    eprintln!(
                        "warning: feedback loop: {feedback_loop}; the host stops such a chain at generation {} (OUTBOX_MAX_EVENT_GENERATION) with a dead letter",
                        settings.max_event_generation
                    );
                }
                for unanalysed in &feedback.unanalysed {
                    eprintln!("note: {unanalysed}");
                }
                out!(
                    "{}: ok ({} routes, {} queue groups, {} plugins)",
                    path.display(),
                    routes.routes.len(),
                    routes.queue_groups.len(),
                    routes.plugins.len()
                );
            }
            RoutesCommand::Which { event_type, json } => {
                publish::validate_event_type(&event_type)?;
                let config = load_config(&cli.config)?;
                let live = outbox_host::live_config::LiveConfig::start(&config).await?;
                let explanation =
                    ops::explain_route(live.router.current(), &config.routes, &event_type).await;
                if json {
                    out!("{}", serde_json::to_string(&explanation)?);
                } else {
                    out!("{explanation}");
                }
            }
        },
        Command::Config => {
            let config = load_config_or_environment(&cli.config)?;
            out!(
                "# routes file: {}",
                config
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "<built-in>".into())
            );
            out!("{}", ops::describe_settings(&config));
        }
        Command::Plugins { command } => run_plugins(command, &cli.config).await?,
        Command::DeadLetter { command } => {
            let config = load_config_or_environment(&cli.config)?;
            let no_all = || EveryDeadLetter {
                all: false,
                yes: false,
            };
            let (filter, action, dry_run, json, everything) = match command {
                DeadLetterCommand::List { filter, json } => {
                    (filter, ops::DeadLetterAction::List, true, json, no_all())
                }
                DeadLetterCommand::Replay {
                    filter,
                    dry_run,
                    everything,
                    json,
                } => (
                    filter,
                    ops::DeadLetterAction::Replay,
                    dry_run,
                    json,
                    everything,
                ),
                DeadLetterCommand::Drop {
                    filter,
                    dry_run,
                    everything,
                    json,
                } => (
                    filter,
                    ops::DeadLetterAction::Drop,
                    dry_run,
                    json,
                    everything,
                ),
            };
            let selection = ops::DeadLetterSelection {
                queue: filter.queue,
                id: filter.id,
                event_id: filter.event,
                all: everything.all,
                yes: everything.yes,
            };
            ops::dead_letters(&config, &selection, action, dry_run, json).await?;
        }
    }
    Ok(())
}

async fn run_plugins(command: PluginsCommand, config_path: &Option<PathBuf>) -> anyhow::Result<()> {
    match command {
        PluginsCommand::List { json } => {
            ops::print_plugins(&load_config_or_environment(config_path)?, json).await?;
        }
        PluginsCommand::Check { file } => {
            out!("{}", blocking(move || ops::check_plugin_file(&file)).await?);
        }
        PluginsCommand::Call {
            file,
            events,
            event,
            plugin_config,
            queue,
            attempt,
            kv,
            http_fixtures,
            grants,
            expect,
        } => {
            if let Some(p) = config_path.as_ref().and_then(|p| p.to_str()) {
                if p.trim_start().starts_with(['{', '[']) {
                    anyhow::bail!("--config is the routes file; give the plugin's JSON config with --plugin-config");
                }
            }
            let config = load_config(config_path)?;
            let input = ops::PluginCallInput {
                events: events.as_deref().map(read_payload_arg).transpose()?,
                event: event.as_deref().map(read_payload_arg).transpose()?,
                config: plugin_config.as_deref().map(read_payload_arg).transpose()?,
                queue,
                attempt,
                kv_seed: kv,
                http_fixtures,
                grants: grants.as_deref().map(read_payload_arg).transpose()?,
                expect: expect.into_iter().map(Into::into).collect(),
            };
            let report = blocking(move || ops::call_plugin_file(&config, &file, &input)).await?;
            out!("{}", report.text);
            if !report.unmet.is_empty() {
                for line in &report.unmet {
                    errln!("plugins call: {line}");
                }
                return Err(ExitStatus(1).into());
            }
        }
        PluginsCommand::New { name, world, dir } => {
            let parent = dir.unwrap_or_else(|| PathBuf::from("."));
            let (_, next) = ops::scaffold_plugin(&name, world.into(), &parent)?;
            out!("{next}");
        }
    }
    Ok(())
}

/// Run CPU-heavy, blocking plugin work (compiling, calling) off the async executor.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .context("plugin work panicked")?
}

/// `--payload` text: literal JSON, `@FILE`, or `-` for standard input.
fn read_payload_arg(arg: &str) -> anyhow::Result<String> {
    if arg == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .context("reading --payload from standard input")?;
        Ok(text)
    } else if let Some(path) = arg.strip_prefix('@') {
        std::fs::read_to_string(path).with_context(|| format!("reading --payload file {path}"))
    } else {
        Ok(arg.to_string())
    }
}

fn abbreviate(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_string(),
    }
}

/// Cancel `token` at the first SIGINT or SIGTERM: the host stops in order within its grace
/// period. The token is cancelled before anything is logged, so shutdown never waits on a log
/// line. A second signal stops the process at once (what is still claimed is taken over when
/// its lease expires).
async fn cancel_on_signal(token: CancellationToken) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(not(unix))]
    let mut term = None::<()>;
    shutdown_signal(&mut term).await;
    token.cancel();
    tracing::info!("shutdown requested; finishing in-flight work (a second signal stops at once)");
    shutdown_signal(&mut term).await;
    errln!("error: second shutdown signal: stopping now without finishing in-flight work");
    log_output::flush_at_exit(std::time::Duration::from_millis(200));
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
