//! Runtime settings, each declared once.
//!
//! Owns the table of settings in the middle of this file: for every knob its `Settings` field,
//! environment variable, `[settings]` file key, default, doc and kind (how its text is parsed,
//! checked, converted and shown). [`FileSettings`], [`Settings`] and its `Default`, the
//! resolution (environment over file over default) and [`Settings::describe`] (what
//! `outbox config` prints) are all generated from that table, so they cannot drift apart. How
//! each kind is read is in `setting_kinds.rs`.
//! It never connects to anything and never shows a secret (URLs are redacted).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::setting_kinds::{
    resolve_one, source_of, ContractModeKind, DirPath, Flag, HostList, Hours, Millis, Number,
    OptionalName, OptionalUrl, PublicUrl, Seconds, SecondsList, SettingKind, Text, Url,
};
use super::{ConfigError, ContractMode};

/// Largest payload accepted by default (256 KiB).
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// The deepest generation of a handler's child by default (`OUTBOX_MAX_EVENT_GENERATION`).
pub const DEFAULT_MAX_EVENT_GENERATION: u32 = 8;

/// The largest `OUTBOX_MAX_EVENT_GENERATION` the host uses (a larger one is clamped to it).
pub const MAX_EVENT_GENERATION_CEILING: u32 = 10_000;

/// Where a resolved setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingSource {
    /// The environment variable.
    Env,
    /// The `[settings]` table of the routes file.
    File,
    /// The built-in default.
    Default,
}

impl fmt::Display for SettingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SettingSource::Env => "env",
            SettingSource::File => "file",
            SettingSource::Default => "default",
        })
    }
}

/// One setting as `outbox config` shows it: never a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShownSetting {
    /// Its environment variable.
    pub env: &'static str,
    /// Its key under `[settings]` (`None`: environment only).
    pub file_key: Option<&'static str>,
    /// The effective value, in the unit of the variable (URL passwords redacted).
    pub value: String,
    /// Where the value came from.
    pub source: SettingSource,
    /// The value as written, when it was out of range and the host clamped it to `value`.
    pub clamped_from: Option<String>,
}

impl ShownSetting {
    /// The warning for a clamped value (`None` when the value is used as written).
    pub fn clamp_warning(&self) -> Option<String> {
        self.clamped_from.as_ref().map(|written| {
            format!(
                "{}={written} (from the {}) is out of range: using {}",
                self.env, self.source, self.value
            )
        })
    }
}

/// Generates [`FileSettings`], [`Settings`] (+ `Default`), the resolution and the description
/// from one table. Environment-only settings have no file key.
macro_rules! declare_settings {
    (@adjust $value:expr) => { $value };
    (@adjust $value:expr, $adjust:expr) => { ($adjust)($value) };
    (
        env_only {
            $(
                $(#[doc = $edoc:literal])+
                $efield:ident: $etype:ty {
                    env: $eenv:literal,
                    kind: $ekind:ty,
                    default: $edefault:expr $(,)?
                }
            )+
        }
        env_and_file {
            $(
                $(#[doc = $doc:literal])+
                $field:ident: $type:ty {
                    env: $env:literal,
                    file: $key:ident: $ftype:ty,
                    kind: $kind:ty,
                    default: $default:expr
                    $(, adjust: $adjust:expr)? $(,)?
                }
            )+
        }
    ) => {
        /// `[settings]`: the same knobs as the environment variables (the environment wins).
        /// Unknown keys are errors.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct FileSettings {
            $(
                $(#[doc = $doc])+
                #[doc = ""]
                #[doc = concat!("Overridden by `", $env, "`; default `", stringify!($default), "`.")]
                pub $key: Option<$ftype>,
            )+
        }

        /// Fully resolved runtime settings (defaults < `[settings]` < environment).
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct Settings {
            $(
                $(#[doc = $edoc])+
                #[doc = ""]
                #[doc = concat!("Env `", $eenv, "` only; default `", stringify!($edefault), "`.")]
                pub $efield: $etype,
            )+
            $(
                $(#[doc = $doc])+
                #[doc = ""]
                #[doc = concat!(
                    "Env `", $env, "`, file key `", stringify!($key),
                    "`, default `", stringify!($default), "`."
                )]
                pub $field: $type,
            )+
        }

        impl Default for Settings {
            fn default() -> Self {
                Self {
                    $( $efield: <$ekind as SettingKind>::value($edefault), )+
                    $(
                        $field: declare_settings!(
                            @adjust <$kind as SettingKind>::value($default) $(, $adjust)?
                        ),
                    )+
                }
            }
        }

        impl Settings {
            /// Every environment variable a setting reads, in the order `outbox config` shows.
            pub const ENV_VARS: &'static [&'static str] = &[$($eenv,)+ $($env,)+];

            /// Resolve with an explicit environment lookup (tests use a map).
            pub fn resolve_with(
                file: &FileSettings,
                env: impl Fn(&str) -> Option<String>,
            ) -> Result<Self, ConfigError> {
                let env: &dyn Fn(&str) -> Option<String> = &env;
                Ok(Self {
                    $(
                        $efield: resolve_one::<$ekind>(env, $eenv, None, $edefault)?,
                    )+
                    $(
                        $field: declare_settings!(
                            @adjust resolve_one::<$kind>(
                                env,
                                $env,
                                file.$key.as_ref().map(|raw| (stringify!($key), raw)),
                                $default,
                            )? $(, $adjust)?
                        ),
                    )+
                })
            }

            /// Every setting with its effective value and where it came from, given the file's
            /// `[settings]` and an environment lookup.
            pub fn describe_with(
                &self,
                file: &FileSettings,
                env: impl Fn(&str) -> Option<String>,
            ) -> Vec<ShownSetting> {
                let env: &dyn Fn(&str) -> Option<String> = &env;
                vec![
                    $(
                        ShownSetting {
                            env: $eenv,
                            file_key: None,
                            value: <$ekind as SettingKind>::show(&self.$efield),
                            source: source_of::<$ekind>(env, $eenv, false),
                            clamped_from: None,
                        },
                    )+
                    $(
                        {
                            let value = <$kind as SettingKind>::show(&self.$field);
                            // The value as written, when the setting's clamp changed it. Only
                            // the clamp counts: a value the program set itself after resolving
                            // (the demo's interval) was never written out of range.
                            let clamped_from = resolve_one::<$kind>(
                                env,
                                $env,
                                file.$key.as_ref().map(|raw| (stringify!($key), raw)),
                                $default,
                            )
                            .ok()
                            .and_then(|written| {
                                let shown = <$kind as SettingKind>::show(&written);
                                let clamped = <$kind as SettingKind>::show(
                                    &declare_settings!(@adjust written $(, $adjust)?),
                                );
                                (clamped != shown).then_some(shown)
                            });
                            ShownSetting {
                                env: $env,
                                file_key: Some(stringify!($key)),
                                clamped_from,
                                value,
                                source: source_of::<$kind>(env, $env, file.$key.is_some()),
                            }
                        },
                    )+
                ]
            }
        }

        impl FileSettings {
            /// Check every value against its setting's rule; the message names the key.
            pub(crate) fn check(&self) -> Result<(), String> {
                $(
                    if let Some(raw) = &self.$key {
                        <$kind as SettingKind>::check(raw)
                            .map_err(|m| format!("[settings] {} {m}", stringify!($key)))?;
                    }
                )+
                Ok(())
            }
        }
    };
}

declare_settings! {
    env_only {
        /// PostgreSQL URL.
        database_url: String {
            env: "DATABASE_URL",
            kind: Url,
            default: String::from("postgres://postgres@127.0.0.1:5432/test"),
        }
        /// Redis URL.
        redis_url: String {
            env: "REDIS_URL",
            kind: Url,
            default: String::from("redis://127.0.0.1:6379/"),
        }
        /// NATS server URL for queues with `sink = "nats"` (`nats://host:4222`, credentials in
        /// the URL; none by default: a routes file with a `nats` queue then fails its check).
        nats_url: Option<String> {
            env: "OUTBOX_NATS_URL",
            kind: OptionalUrl,
            default: None,
        }
        /// RabbitMQ URL for queues with `sink = "rabbitmq"` (`amqp://user:pass@host:5672/vhost`;
        /// none by default: a routes file with a `rabbitmq` queue then fails its check).
        rabbitmq_url: Option<String> {
            env: "OUTBOX_RABBITMQ_URL",
            kind: OptionalUrl,
            default: None,
        }
        /// Queue group consumed by `outbox run` (`None` = all groups).
        worker_queue_group: Option<String> {
            env: "WORKER_QUEUE_GROUP",
            kind: OptionalName,
            default: None,
        }
    }
    env_and_file {
        /// Run the dispatcher in `outbox run` (`false` makes a receiver-only process).
        dispatcher_enabled: bool {
            env: "OUTBOX_DISPATCHER_ENABLED",
            file: dispatcher_enabled: bool,
            kind: Flag,
            default: true,
        }
        /// Fallback poll interval (NOTIFY wakes the dispatcher sooner).
        dispatch_interval: Duration {
            env: "OUTBOX_DISPATCH_INTERVAL_MS",
            file: dispatch_interval_ms: u64,
            kind: Millis,
            default: 1000,
        }
        /// Rows claimed per tick (clamped to 1..=10000).
        dispatch_batch_size: i64 {
            env: "OUTBOX_DISPATCH_BATCH_SIZE",
            file: dispatch_batch_size: i64,
            kind: Number<i64>,
            default: 100,
            adjust: |n: i64| n.clamp(1, 10_000),
        }
        /// Redis pipelines in flight at once (clamped to 1..=1024).
        dispatch_concurrency: usize {
            env: "OUTBOX_DISPATCH_CONCURRENCY",
            file: dispatch_concurrency: usize,
            kind: Number<usize>,
            default: 10,
            adjust: |n: usize| n.clamp(1, 1024),
        }
        /// Redis replicas that must confirm each hand-off (`WAIT`, up to 1 s) before the
        /// dispatcher records it; a hand-off they do not confirm is a blip, handed off again
        /// (0: none, the default; at most 16).
        redis_wait_replicas: usize {
            env: "OUTBOX_REDIS_WAIT_REPLICAS",
            file: redis_wait_replicas: usize,
            kind: Number<usize>,
            default: 0,
            adjust: |n: usize| n.min(16),
        }
        /// Retries before an event is given up as `failed`; negative counts as 0.
        max_retries: i32 {
            env: "OUTBOX_MAX_RETRIES",
            file: max_retries: i32,
            kind: Number<i32>,
            default: 6,
            adjust: |n: i32| n.max(0),
        }
        /// Claim lease (at least 100 ms).
        claim_lease: Duration {
            env: "OUTBOX_CLAIM_LEASE_MS",
            file: claim_lease_ms: u64,
            kind: Millis,
            default: 300_000,
            adjust: |d: Duration| d.max(Duration::from_millis(100)),
        }
        /// How long shutdown waits for in-flight work.
        shutdown_grace: Duration {
            env: "OUTBOX_SHUTDOWN_GRACE_MS",
            file: shutdown_grace_ms: u64,
            kind: Millis,
            default: 30_000,
        }
        /// Age after which `done` rows are deleted.
        done_retention: Duration {
            env: "OUTBOX_DONE_RETENTION_HOURS",
            file: done_retention_hours: u64,
            kind: Hours,
            default: 720,
        }
        /// Rows deleted per retention statement (clamped to 1..=10000).
        done_retention_batch_size: i64 {
            env: "OUTBOX_DONE_RETENTION_BATCH_SIZE",
            file: done_retention_batch_size: i64,
            kind: Number<i64>,
            default: 1000,
            adjust: |n: i64| n.clamp(1, 10_000),
        }
        /// Retry delay after attempt n is `backoff[min(n, len) - 1]` (the last one repeats).
        backoff: Vec<Duration> {
            env: "OUTBOX_BACKOFF_SECONDS",
            file: backoff_seconds: Vec<u64>,
            kind: SecondsList,
            default: vec![60, 120, 240, 480, 960, 1920],
        }
        /// Largest accepted payload (bytes of JSON text).
        max_payload_bytes: usize {
            env: "OUTBOX_MAX_PAYLOAD_BYTES",
            file: max_payload_bytes: usize,
            kind: Number<usize>,
            default: DEFAULT_MAX_PAYLOAD_BYTES,
        }
        /// The deepest generation an event a handler publishes may have: a producer's event is
        /// generation 0 and each handler's child one more than its parent; a publish past it is
        /// refused and the delivery dead-lettered, which ends a handler feedback loop (at most
        /// 10000).
        max_event_generation: u32 {
            env: "OUTBOX_MAX_EVENT_GENERATION",
            file: max_event_generation: u32,
            kind: Number<u32>,
            default: DEFAULT_MAX_EVENT_GENERATION,
            adjust: |n: u32| n.min(MAX_EVENT_GENERATION_CEILING),
        }
        /// Prefix for every Redis key the host writes.
        redis_prefix: String {
            env: "OUTBOX_REDIS_PREFIX",
            file: redis_prefix: String,
            kind: Text,
            default: String::new(),
        }
        /// TTL of enqueue dedupe markers.
        dedupe_ttl: Duration {
            env: "OUTBOX_DEDUPE_TTL_SECONDS",
            file: dedupe_ttl_seconds: u64,
            kind: Seconds,
            default: 7 * 24 * 3600,
        }
        /// Directory holding `.wasm` plugins (relative: beside the routes file, or from the working
        /// directory when set by the environment variable).
        plugin_dir: PathBuf {
            env: "OUTBOX_PLUGIN_DIR",
            file: plugin_dir: String,
            kind: DirPath,
            default: String::from("plugins/dist"),
        }
        /// Where compiled plugins are kept between runs: `auto` (`$XDG_CACHE_HOME/outbox/plugins`
        /// or `~/.cache/outbox/plugins`), `off`, or a directory only the host's user can write to.
        plugin_cache_dir: String {
            env: "OUTBOX_PLUGIN_CACHE_DIR",
            file: plugin_cache_dir: String,
            kind: Text,
            default: String::from("auto"),
        }
        /// Address of the metrics/health endpoint (empty: disabled).
        http_addr: String {
            env: "OUTBOX_HTTP_ADDR",
            file: http_addr: String,
            kind: Text,
            default: String::from("127.0.0.1:9464"),
        }
        /// The console's public URL as operators open it (e.g. `https://outbox.example.com`,
        /// empty: none). `https://` marks the session cookie `Secure`; its host is an allowed
        /// `Host` of the endpoint.
        console_public_url: String {
            env: "OUTBOX_CONSOLE_PUBLIC_URL",
            file: console_public_url: String,
            kind: PublicUrl,
            default: String::new(),
        }
        /// More `Host` values the console and `/metrics` answer (comma-separated `host` or
        /// `host:port`; a host without a port is allowed on any port), e.g. a proxy's name.
        /// Always allowed: the listener's address, `localhost`, `127.0.0.1`, `[::1]` with its
        /// port, and the public URL's host.
        console_allowed_hosts: Vec<String> {
            env: "OUTBOX_CONSOLE_ALLOWED_HOSTS",
            file: console_allowed_hosts: Vec<String>,
            kind: HostList,
            default: Vec::new(),
        }
        /// Console sign-in attempts allowed per client address per minute (clamped to
        /// 1..=10000); more get 429 before any database query.
        console_sign_in_per_minute: u32 {
            env: "OUTBOX_CONSOLE_SIGN_IN_PER_MINUTE",
            file: console_sign_in_per_minute: u32,
            kind: Number<u32>,
            default: 10,
            adjust: |n: u32| n.clamp(1, 10_000),
        }
        /// Console sign-in attempts allowed per minute from all addresses together (clamped to
        /// 1..=100000).
        console_sign_in_global_per_minute: u32 {
            env: "OUTBOX_CONSOLE_SIGN_IN_GLOBAL_PER_MINUTE",
            file: console_sign_in_global_per_minute: u32,
            kind: Number<u32>,
            default: 100,
            adjust: |n: u32| n.clamp(1, 100_000),
        }
        /// PostgreSQL connections of the console's own pool for its reads and sign-ins
        /// (clamped to 1..=16), apart from the dispatcher's.
        console_db_connections: u32 {
            env: "OUTBOX_CONSOLE_DB_CONNECTIONS",
            file: console_db_connections: u32,
            kind: Number<u32>,
            default: 3,
            adjust: |n: u32| n.clamp(1, 16),
        }
        /// `statement_timeout` of the console's pool (at least 100 ms): a search that takes
        /// longer is cancelled and the page says so.
        console_statement_timeout: Duration {
            env: "OUTBOX_CONSOLE_STATEMENT_TIMEOUT_MS",
            file: console_statement_timeout_ms: u64,
            kind: Millis,
            default: 5000,
            adjust: |d: Duration| d.max(Duration::from_millis(100)),
        }
        /// Handler retries before an entry goes to the dead-letter stream.
        handler_max_retries: u32 {
            env: "OUTBOX_HANDLER_MAX_RETRIES",
            file: handler_max_retries: u32,
            kind: Number<u32>,
            default: 5,
        }
        /// Handler retry delay after attempt n is `handler_backoff[min(n, len) - 1]`.
        handler_backoff: Vec<Duration> {
            env: "OUTBOX_HANDLER_BACKOFF_SECONDS",
            file: handler_backoff_seconds: Vec<u64>,
            kind: SecondsList,
            default: vec![1, 5, 30, 120, 600],
        }
        /// TTL of receiver idempotency records (longer than the longest retry window).
        idempotency_ttl: Duration {
            env: "OUTBOX_IDEMPOTENCY_TTL_SECONDS",
            file: idempotency_ttl_seconds: u64,
            kind: Seconds,
            default: 24 * 3600,
        }
        /// How long a receiver may hold an entry before another consumer reclaims it (at least
        /// 100 ms).
        receiver_lease: Duration {
            env: "OUTBOX_RECEIVER_LEASE_MS",
            file: receiver_lease_ms: u64,
            kind: Millis,
            default: 60_000,
            adjust: |d: Duration| d.max(Duration::from_millis(100)),
        }
        /// The pending-backlog alert: more than this many pending events older than 60 s ...
        pending_alert_count: i64 {
            env: "OUTBOX_PENDING_ALERT_COUNT",
            file: pending_alert_count: i64,
            kind: Number<i64>,
            default: 1000,
            adjust: |n: i64| n.max(0),
        }
        /// ... for at least this long (seconds) fires it.
        pending_alert_for: Duration {
            env: "OUTBOX_PENDING_ALERT_FOR",
            file: pending_alert_for: u64,
            kind: Seconds,
            default: 300,
        }
        /// How often the alerting host checks the alerts (at least 100 ms).
        alert_interval: Duration {
            env: "OUTBOX_ALERT_INTERVAL_MS",
            file: alert_interval_ms: u64,
            kind: Millis,
            default: 15_000,
            adjust: |d: Duration| d.max(Duration::from_millis(100)),
        }
        /// Entries handled at once per queue (clamped to 1..=1024). Beyond its handler plugin's
        /// `max_concurrency`, entries wait for a call slot before their time limit starts. The
        /// default keeps a few hundred entries read ahead of the call slots, as a local queue
        /// does, so reads, claims and finish steps carry many entries each (figures in
        /// docs/queues.md). What it holds is bounded by it: at most this many entries per
        /// queue, each at most `max_payload_bytes`.
        receiver_concurrency: usize {
            env: "OUTBOX_RECEIVER_CONCURRENCY",
            file: receiver_concurrency: usize,
            kind: Number<usize>,
            default: 256,
            adjust: |n: usize| n.clamp(1, 1024),
        }
        /// Event contracts: `permissive` accepts (and counts) an event whose type or version
        /// has no contract, `strict` rejects it. An event that breaks its contract is always
        /// refused.
        contracts_mode: ContractMode {
            env: "OUTBOX_CONTRACTS_MODE",
            file: contracts_mode: String,
            kind: ContractModeKind,
            default: String::from("permissive"),
        }
        /// The contracts folder (empty: `contracts/` beside the routes file, or in the working
        /// directory when there is none).
        contracts_dir: String {
            env: "OUTBOX_CONTRACTS_DIR",
            file: contracts_dir: String,
            kind: Text,
            default: String::new(),
        }
        // Retention and caps: what the host keeps, and for how long or how many.
        /// Age after which handler receipts (`outbox_receipt`) are deleted; the receipts of an
        /// event that retention deletes go with it.
        receipt_retention: Duration {
            env: "OUTBOX_RECEIPT_RETENTION_HOURS",
            file: receipt_retention_hours: u64,
            kind: Hours,
            default: 720,
        }
        /// Age after which `failed` and `cancelled` events are deleted (longer than `done`: an
        /// operator may still requeue them).
        failed_retention: Duration {
            env: "OUTBOX_FAILED_RETENTION_HOURS",
            file: failed_retention_hours: u64,
            kind: Hours,
            default: 2160,
        }
        /// Age after which rows of `outbox_event_history` are deleted (an event's rows also go
        /// with the event).
        history_retention: Duration {
            env: "OUTBOX_HISTORY_RETENTION_HOURS",
            file: history_retention_hours: u64,
            kind: Hours,
            default: 2160,
        }
        /// Receipts waiting in Redis for the receipt writer (PostgreSQL away or slow) at which
        /// receivers stop reading new entries until it catches up; none is ever dropped (at
        /// least 1).
        receipts_stream_max_len: u64 {
            env: "OUTBOX_RECEIPTS_STREAM_MAX_LEN",
            file: receipts_stream_max_len: u64,
            kind: Number<u64>,
            default: 100_000,
            adjust: |n: u64| n.max(1),
        }
        /// Entries a queue's dead-letter stream keeps; adding one more trims the oldest,
        /// counted and logged (at least 1).
        dead_letter_max_len: u64 {
            env: "OUTBOX_DEAD_LETTER_MAX_LEN",
            file: dead_letter_max_len: u64,
            kind: Number<u64>,
            default: 10_000,
            adjust: |n: u64| n.max(1),
        }
        /// Entries a queue's retry set holds; a retry asked for while it is full goes to the
        /// dead-letter stream instead, counted and logged (at least 1).
        retry_set_max_len: u64 {
            env: "OUTBOX_RETRY_SET_MAX_LEN",
            file: retry_set_max_len: u64,
            kind: Number<u64>,
            default: 100_000,
            adjust: |n: u64| n.max(1),
        }
    }
}

impl Settings {
    /// Resolve settings from the file's `[settings]` and the process environment.
    pub fn resolve(file: &FileSettings) -> Result<Self, ConfigError> {
        Self::resolve_with(file, |name| std::env::var(name).ok())
    }

    /// Every setting with its effective value and source (env, file or default), using the
    /// process environment: what `outbox config` prints.
    pub fn describe(&self, file: &FileSettings) -> Vec<ShownSetting> {
        self.describe_with(file, |name| std::env::var(name).ok())
    }

    /// One warning per setting whose value was out of range and clamped (e.g.
    /// `OUTBOX_DISPATCH_BATCH_SIZE=0` runs as 1), using the process environment: logged at
    /// start-up and shown by `outbox config`.
    pub fn clamp_warnings(&self, file: &FileSettings) -> Vec<String> {
        self.describe(file)
            .iter()
            .filter_map(ShownSetting::clamp_warning)
            .collect()
    }

    /// Handler retry delay after failed attempt `attempt` (1-based).
    pub fn handler_backoff_after(&self, attempt: u32) -> Duration {
        let idx = usize::try_from(attempt.max(1) - 1)
            .unwrap_or(usize::MAX)
            .min(self.handler_backoff.len() - 1);
        self.handler_backoff[idx]
    }

    /// Retry delay after failed attempt `attempt` (1-based): 1, 2, 4, ... minutes by default.
    pub fn backoff_after(&self, attempt: i32) -> Duration {
        let idx = usize::try_from(attempt.max(1) - 1)
            .unwrap_or(usize::MAX)
            .min(self.backoff.len() - 1);
        self.backoff[idx]
    }
}

#[cfg(test)]
mod tests;
