//! Opt: the command line of `outbox` as clap types: every command, flag, default and `--help`
//! text, and the conversions from them to what [`crate::ops`] takes.
//!
//! Owns the argument types only. It never connects, reads a routes file or prints: the commands
//! run in [`crate::ops`], [`crate::run`] picks which.

use std::path::PathBuf;

use clap::{ArgGroup, Parser, Subcommand, ValueEnum};
use outbox_host::plugin::World;
use outbox_host::store;

use crate::ops;

/// Transactional outbox host: moves committed events from PostgreSQL to Redis queues.
#[derive(Parser)]
#[command(name = "outbox", version, about)]
pub(crate) struct Opt {
    /// The routes file (routing table, queue groups, plugins). Default: routes.toml if present,
    /// else the built-in table.
    #[arg(long, global = true, env = "OUTBOX_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

// The commands of `outbox`.
#[derive(Subcommand)]
pub(crate) enum Command {
    /// Apply database migrations and exit.
    Migrate,
    /// Run the host: dispatcher (and, with --queue-group, receivers) until SIGINT/SIGTERM.
    Run(RunArgs),
    /// Dispatch everything that is due now, once, then exit (for cron or repair).
    Drain,
    /// Publish one event (in its own transaction).
    Publish(PublishArgs),
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

// The flags of `outbox run` (no doc comment: the variant's is its help).
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Queue group to consume (also WORKER_QUEUE_GROUP; default: every group).
    #[arg(long)]
    pub(crate) queue_group: Option<String>,
    /// Run only the dispatcher, no receivers.
    #[arg(long, conflicts_with = "receivers_only")]
    pub(crate) dispatcher_only: bool,
    /// Run only receivers, no dispatcher (same as OUTBOX_DISPATCHER_ENABLED=false).
    #[arg(long)]
    pub(crate) receivers_only: bool,
}

// The arguments of `outbox publish` (no doc comment: the variant's is its help).
#[derive(clap::Args)]
pub(crate) struct PublishArgs {
    /// Event type, e.g. mail.welcome.
    pub(crate) event_type: String,
    /// Payload: a JSON object, `@FILE` to read it from a file, or `-` for standard input.
    #[arg(long)]
    pub(crate) payload: String,
    /// Tenant id.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Idempotency key (1 to 512 bytes of printable ASCII without spaces; `child:` and
    /// `denied:` are the host's): publishing it again with the same type, tenant and payload
    /// returns the first event's id, with different ones it fails.
    #[arg(long)]
    pub(crate) dispatch_key: Option<String>,
    /// Headers: a JSON object.
    #[arg(long)]
    pub(crate) headers: Option<String>,
    /// Ordering key (same rule as the dispatch key).
    #[arg(long)]
    pub(crate) ordering_key: Option<String>,
    /// Payload schema version (>= 1).
    #[arg(long, default_value_t = 1)]
    pub(crate) event_version: i32,
    /// Dispatch no sooner than this many seconds from now.
    #[arg(long, conflicts_with = "available_at")]
    pub(crate) delay: Option<u64>,
    /// Dispatch no sooner than this time (RFC 3339, e.g. 2026-12-01T08:00:00Z).
    #[arg(long)]
    pub(crate) available_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Print `{"id", "inserted", "dispatch_key"}` instead of the id.
    #[arg(long)]
    pub(crate) json: bool,
}

// `outbox queue ...`.
#[derive(Subcommand)]
pub(crate) enum QueueCommand {
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

// `outbox plugins ...`.
#[derive(Subcommand)]
pub(crate) enum PluginsCommand {
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
    Call(CallArgs),
    /// Scaffold a plugin project into DIR/NAME that builds as is, anywhere: a Rust crate with
    /// the plugin SDK vendored inside it, or a Python or JavaScript handler with the WIT
    /// package beside it.
    New {
        /// Plugin name (and crate name): lowercase letters, digits and '-'.
        name: String,
        /// Which world the plugin implements.
        #[arg(long, value_enum)]
        world: WorldArg,
        /// The language: rust (any world), python or js (handlers, built with componentize-py
        /// or jco).
        #[arg(long, value_enum, default_value = "rust")]
        lang: LangArg,
        /// Parent directory (default: the current directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Rust: depend on the plugin SDK at this folder (written by `outbox plugins sdk --out
        /// DIR`) instead of vendoring a copy into the crate.
        #[arg(long, value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
    /// Write the plugin SDK crate (outbox-plugin-sdk, standalone, its WIT package inside) to DIR.
    Sdk {
        /// The folder to write (new or empty).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Refresh a folder holding an SDK written before (its src/ and wit/ are replaced).
        #[arg(long)]
        force: bool,
    },
    /// Write the plugin contract, the WIT package outbox:plugin (the current version and the
    /// previous one the host still loads), to DIR, for any component toolchain.
    Wit {
        /// The folder to write (new or empty).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Overwrite a folder holding the outbox:plugin WIT package already.
        #[arg(long)]
        force: bool,
    },
}

// The arguments of `outbox plugins call` (no doc comment: the variant's is its help).
#[derive(clap::Args)]
#[command(group(ArgGroup::new("input").required(true).args(["events", "event"])))]
pub(crate) struct CallArgs {
    /// The plugin file.
    pub(crate) file: PathBuf,
    /// Router input: a JSON array of events, e.g.
    /// '[{"event_type": "mail.welcome", "payload": {}, "tenant_id": "t1"}]' (ids default to
    /// 1..n, version 1, headers {}, created_at now).
    #[arg(long)]
    pub(crate) events: Option<String>,
    /// Handler input: one event object; policy input: one capability request
    /// '{"plugin": "...", "capability": "publish", "target": "...", "grants": {...}}'.
    #[arg(long)]
    pub(crate) event: Option<String>,
    /// The plugin's JSON config (default: what routes.toml gives a plugin of the file's
    /// name; for a router, at least the routing table). Not `--config`: that is the routes
    /// file.
    #[arg(long, value_name = "JSON")]
    pub(crate) plugin_config: Option<String>,
    /// Queue of the delivery (handlers).
    #[arg(long, default_value = "outbox.test")]
    pub(crate) queue: String,
    /// Attempt of the delivery (handlers; 1 on first delivery).
    #[arg(long, default_value_t = 1)]
    pub(crate) attempt: u32,
    /// Handlers: a JSON file seeding the in-memory kv store, e.g. '{"count": "41"}' (string
    /// or integer values). Without it the store starts empty.
    #[arg(long, value_name = "FILE")]
    pub(crate) kv: Option<PathBuf>,
    /// Handlers: a JSON file of canned HTTP answers, e.g. '[{"method": "POST", "url":
    /// "https://executor.internal/run", "status": 202, "body": {"ok": true}}]'. A request no
    /// fixture answers fails with a clear message; nothing is ever sent.
    #[arg(long, value_name = "FILE")]
    pub(crate) http_fixtures: Option<PathBuf>,
    /// Handlers: the grants to run with, as JSON ('{"kv": true, "publish": ["mail."]}'),
    /// instead of `[plugins.NAME].grants` of the routes file.
    #[arg(long, value_name = "JSON")]
    pub(crate) grants: Option<String>,
    /// What the call must end with, else the command exits 1 (for tests in CI). A handler
    /// must answer `ok` with no host call denied unless given `retry`, `fail` and/or
    /// `denied` (at least one host call denied); a policy may be held to `allow` or `deny`.
    #[arg(long, value_enum, value_name = "ANSWER")]
    pub(crate) expect: Vec<ExpectArg>,
}

/// What `outbox plugins call --expect` accepts.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum ExpectArg {
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
pub(crate) enum WorldArg {
    /// Routes batches of events to queues.
    Router,
    /// Handles queue entries.
    Handler,
    /// Decides capability checks.
    Policy,
}

/// A plugin language, as `--lang` spells it.
#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LangArg {
    /// Rust, on the plugin SDK.
    Rust,
    /// Python, with componentize-py.
    Python,
    /// JavaScript, with jco.
    Js,
}

impl From<LangArg> for ops::PluginLanguage {
    fn from(l: LangArg) -> Self {
        match l {
            LangArg::Rust => Self::Rust,
            LangArg::Python => Self::Python,
            LangArg::Js => Self::Js,
        }
    }
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

// `outbox dead-letter ...`.
#[derive(Subcommand)]
pub(crate) enum DeadLetterCommand {
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
pub(crate) struct EveryDeadLetter {
    /// Every dead letter of every handler-bound queue (required when no filter is given).
    #[arg(long)]
    pub(crate) all: bool,
    /// With --all: do not ask first.
    #[arg(long)]
    pub(crate) yes: bool,
}

/// Which dead letters a command applies to.
#[derive(clap::Args)]
pub(crate) struct DeadLetterFilter {
    /// Only this queue (default: every handler-bound queue in routes.toml).
    #[arg(long)]
    pub(crate) queue: Option<String>,
    /// Only this dead-letter entry id.
    #[arg(long)]
    pub(crate) id: Option<String>,
    /// Only this outbox event id.
    #[arg(long)]
    pub(crate) event: Option<i64>,
}

// `outbox operator ...`.
#[derive(Subcommand)]
pub(crate) enum OperatorCommand {
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
pub(crate) struct RowFilterArgs {
    /// This event id (repeatable).
    #[arg(long = "id")]
    pub(crate) ids: Vec<i64>,
    /// Only rows in this status (requeue: failed or cancelled; cancel: pending or failed).
    #[arg(long)]
    pub(crate) status: Vec<String>,
    /// Only event types starting with this.
    #[arg(long)]
    pub(crate) type_prefix: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub(crate) tenant: Option<String>,
    /// Only rows created at or after this time (RFC 3339, e.g. 2026-11-30T12:00:00Z).
    #[arg(long)]
    pub(crate) since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only rows created before this time (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// Only rows whose last error contains this text.
    #[arg(long)]
    pub(crate) error_contains: Option<String>,
    /// Only fan-out rows whose hand-off to this queue failed (destinations that have the event
    /// are never redone).
    #[arg(long)]
    pub(crate) destination: Option<String>,
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
pub(crate) struct RepairArgs {
    /// Change at most this many rows (lowest ids first).
    #[arg(long)]
    pub(crate) limit: Option<u64>,
    /// Show exactly the rows a real run would change, change nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Print one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// Do not ask, whatever the number of rows.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Ask before changing more rows than this.
    #[arg(long, default_value_t = 100)]
    pub(crate) confirm_above: u64,
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

// `outbox contracts ...`.
#[derive(Subcommand)]
pub(crate) enum ContractsCommand {
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

// `outbox routes ...`.
#[derive(Subcommand)]
pub(crate) enum RoutesCommand {
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

/// A JSON argument's text: literal JSON, `@FILE` to read it from a file, or `-` for standard
/// input (`--payload`, and the JSON arguments of `outbox plugins call`).
pub(crate) fn read_payload_arg(arg: &str) -> anyhow::Result<String> {
    use anyhow::Context;
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

impl DeadLetterCommand {
    /// What the command does, to which dead letters, whether only as a dry run, and whether it
    /// prints JSON (`list` never changes anything, so it is a dry run).
    pub(crate) fn into_request(
        self,
    ) -> (ops::DeadLetterAction, ops::DeadLetterSelection, bool, bool) {
        let no_all = || EveryDeadLetter {
            all: false,
            yes: false,
        };
        let (filter, action, dry_run, json, everything) = match self {
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
        (action, selection, dry_run, json)
    }
}
