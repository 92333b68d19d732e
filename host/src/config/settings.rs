//! Runtime settings, each declared once.
//!
//! Owns the table of settings at the bottom of this file: for every knob its `Settings` field,
//! environment variable, `[settings]` file key, default, doc and kind (how its text is parsed,
//! checked, converted and shown). [`FileSettings`], [`Settings`] and its `Default`, the
//! resolution (environment over file over default) and [`Settings::describe`] (what
//! `outbox config` prints) are all generated from that table, so they cannot drift apart.
//! It never connects to anything and never shows a secret (URLs are redacted).

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::contracts::ContractMode;

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

/// How one kind of setting is read, checked, converted and shown. `Raw` is what the
/// environment variable and the file hold (in the unit the name says: ms, seconds, hours);
/// `Value` is what [`Settings`] holds.
pub(crate) trait SettingKind {
    /// The value as written by the operator.
    type Raw;
    /// The value as the host uses it.
    type Value;
    /// Whether the variable's text counts as set (by default blank text means unset).
    fn is_set(text: &str) -> bool {
        !text.trim().is_empty()
    }
    /// Parse the variable's text.
    fn parse(text: &str) -> Result<Self::Raw, String>;
    /// The rule every raw value (from the environment or the file) must meet.
    fn check(_raw: &Self::Raw) -> Result<(), String> {
        Ok(())
    }
    /// Convert to what the host uses.
    fn value(raw: Self::Raw) -> Self::Value;
    /// Show the value in the variable's own unit.
    fn show(value: &Self::Value) -> String;
}

/// `true` or `false`.
pub(crate) struct Flag;

impl SettingKind for Flag {
    type Raw = bool;
    type Value = bool;
    fn parse(text: &str) -> Result<bool, String> {
        text.trim()
            .parse()
            .map_err(|e: std::str::ParseBoolError| e.to_string())
    }
    fn value(raw: bool) -> bool {
        raw
    }
    fn show(value: &bool) -> String {
        value.to_string()
    }
}

/// An integer (its range is the type's; clamps are per setting).
pub(crate) struct Number<T>(PhantomData<T>);

impl<T> SettingKind for Number<T>
where
    T: FromStr + fmt::Display,
    T::Err: fmt::Display,
{
    type Raw = T;
    type Value = T;
    fn parse(text: &str) -> Result<T, String> {
        text.trim().parse().map_err(|e: T::Err| e.to_string())
    }
    fn value(raw: T) -> T {
        raw
    }
    fn show(value: &T) -> String {
        value.to_string()
    }
}

/// A duration written in milliseconds.
pub(crate) struct Millis;

impl SettingKind for Millis {
    type Raw = u64;
    type Value = Duration;
    fn parse(text: &str) -> Result<u64, String> {
        Number::<u64>::parse(text)
    }
    fn value(raw: u64) -> Duration {
        Duration::from_millis(raw)
    }
    fn show(value: &Duration) -> String {
        value.as_millis().to_string()
    }
}

/// A duration written in seconds.
pub(crate) struct Seconds;

impl SettingKind for Seconds {
    type Raw = u64;
    type Value = Duration;
    fn parse(text: &str) -> Result<u64, String> {
        Number::<u64>::parse(text)
    }
    fn value(raw: u64) -> Duration {
        Duration::from_secs(raw)
    }
    fn show(value: &Duration) -> String {
        value.as_secs().to_string()
    }
}

/// A duration written in hours.
pub(crate) struct Hours;

impl SettingKind for Hours {
    type Raw = u64;
    type Value = Duration;
    fn parse(text: &str) -> Result<u64, String> {
        Number::<u64>::parse(text)
    }
    fn value(raw: u64) -> Duration {
        Duration::from_secs(raw.saturating_mul(3600))
    }
    fn show(value: &Duration) -> String {
        (value.as_secs() / 3600).to_string()
    }
}

/// A non-empty list of delays in seconds: `60,120,240` in the environment, `[60, 120, 240]` in
/// the file.
pub(crate) struct SecondsList;

impl SettingKind for SecondsList {
    type Raw = Vec<u64>;
    type Value = Vec<Duration>;
    fn parse(text: &str) -> Result<Vec<u64>, String> {
        text.split(',')
            .map(|part| part.trim().parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{e} (expected comma-separated seconds, e.g. 60,120,240)"))
    }
    fn check(raw: &Vec<u64>) -> Result<(), String> {
        if raw.is_empty() {
            return Err("must not be empty".into());
        }
        Ok(())
    }
    fn value(raw: Vec<u64>) -> Vec<Duration> {
        raw.into_iter().map(Duration::from_secs).collect()
    }
    fn show(value: &Vec<Duration>) -> String {
        value
            .iter()
            .map(|d| d.as_secs().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Free text, taken as written; a variable set to the empty string counts (an empty
/// `OUTBOX_HTTP_ADDR` turns the endpoint off).
pub(crate) struct Text;

impl SettingKind for Text {
    type Raw = String;
    type Value = String;
    fn is_set(_text: &str) -> bool {
        true
    }
    fn parse(text: &str) -> Result<String, String> {
        Ok(text.to_string())
    }
    fn value(raw: String) -> String {
        raw
    }
    fn show(value: &String) -> String {
        value.clone()
    }
}

/// A filesystem path, taken as written.
pub(crate) struct DirPath;

impl SettingKind for DirPath {
    type Raw = String;
    type Value = PathBuf;
    fn is_set(_text: &str) -> bool {
        true
    }
    fn parse(text: &str) -> Result<String, String> {
        Ok(text.to_string())
    }
    fn value(raw: String) -> PathBuf {
        PathBuf::from(raw)
    }
    fn show(value: &PathBuf) -> String {
        value.display().to_string()
    }
}

/// The console's public URL: empty, or `http://` / `https://` and a host (the scheme decides
/// the session cookie's `Secure` flag, the host joins the allowed `Host`s).
pub(crate) struct PublicUrl;

impl SettingKind for PublicUrl {
    type Raw = String;
    type Value = String;
    fn parse(text: &str) -> Result<String, String> {
        Ok(text.trim().to_string())
    }
    fn check(raw: &String) -> Result<(), String> {
        crate::allowed_hosts::check_public_url(raw)
    }
    fn value(raw: String) -> String {
        raw
    }
    fn show(value: &String) -> String {
        value.clone()
    }
}

/// A list of `Host` header values (`host` or `host:port`): `a.example,b.example:8443` in the
/// environment, `["a.example", "b.example:8443"]` in the file.
pub(crate) struct HostList;

impl SettingKind for HostList {
    type Raw = Vec<String>;
    type Value = Vec<String>;
    fn parse(text: &str) -> Result<Vec<String>, String> {
        Ok(text
            .split(',')
            .map(|part| part.trim().to_string())
            .filter(|part| !part.is_empty())
            .collect())
    }
    fn check(raw: &Vec<String>) -> Result<(), String> {
        raw.iter()
            .try_for_each(|host| crate::allowed_hosts::check_host_entry(host))
    }
    fn value(raw: Vec<String>) -> Vec<String> {
        raw.into_iter().map(|h| h.to_ascii_lowercase()).collect()
    }
    fn show(value: &Vec<String>) -> String {
        value.join(",")
    }
}

/// `permissive` or `strict` ([`ContractMode`]).
pub(crate) struct ContractModeKind;

impl SettingKind for ContractModeKind {
    type Raw = String;
    type Value = ContractMode;
    fn parse(text: &str) -> Result<String, String> {
        Ok(text.trim().to_string())
    }
    fn check(raw: &String) -> Result<(), String> {
        raw.parse::<ContractMode>().map(|_| ())
    }
    fn value(raw: String) -> ContractMode {
        raw.parse().unwrap_or_default()
    }
    fn show(value: &ContractMode) -> String {
        value.to_string()
    }
}

/// A connection URL; shown with its password redacted; an empty variable is ignored.
pub(crate) struct Url;

impl SettingKind for Url {
    type Raw = String;
    type Value = String;
    fn is_set(text: &str) -> bool {
        !text.is_empty()
    }
    fn parse(text: &str) -> Result<String, String> {
        Ok(text.to_string())
    }
    fn value(raw: String) -> String {
        raw
    }
    fn show(value: &String) -> String {
        crate::store::redact(value)
    }
}

/// An optional name; unset or blank means "all" (`WORKER_QUEUE_GROUP`).
pub(crate) struct OptionalName;

impl SettingKind for OptionalName {
    type Raw = Option<String>;
    type Value = Option<String>;
    fn parse(text: &str) -> Result<Option<String>, String> {
        Ok(Some(text.to_string()))
    }
    fn value(raw: Option<String>) -> Option<String> {
        raw
    }
    fn show(value: &Option<String>) -> String {
        value.as_deref().unwrap_or("(all)").to_string()
    }
}

/// The variable's text, when it counts as set for kind `K`.
fn env_text<K: SettingKind>(env: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    env(name).filter(|text| K::is_set(text))
}

/// Resolve one setting: the variable if set, else the file's value, else the default; then
/// the kind's rule. Errors name the variable and its value, or the file key.
fn resolve_one<K: SettingKind>(
    env: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    file: Option<(&'static str, &K::Raw)>,
    default: K::Raw,
) -> Result<K::Value, ConfigError>
where
    K::Raw: Clone,
{
    if let Some(text) = env_text::<K>(env, name) {
        let raw = K::parse(&text)
            .and_then(|raw| K::check(&raw).map(|()| raw))
            .map_err(|message| ConfigError::Env {
                name: name.into(),
                value: text.clone(),
                message,
            })?;
        return Ok(K::value(raw));
    }
    if let Some((key, raw)) = file {
        K::check(raw).map_err(|message| ConfigError::Setting {
            key: key.into(),
            message,
        })?;
        return Ok(K::value(raw.clone()));
    }
    Ok(K::value(default))
}

/// Where a setting of kind `K` comes from, by the same rules [`resolve_one`] follows.
fn source_of<K: SettingKind>(
    env: &dyn Fn(&str) -> Option<String>,
    name: &str,
    in_file: bool,
) -> SettingSource {
    if env_text::<K>(env, name).is_some() {
        SettingSource::Env
    } else if in_file {
        SettingSource::File
    } else {
        SettingSource::Default
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
        /// `max_concurrency`, entries wait for a call slot before their time limit starts.
        receiver_concurrency: usize {
            env: "OUTBOX_RECEIVER_CONCURRENCY",
            file: receiver_concurrency: usize,
            kind: Number<usize>,
            default: 64,
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
        let idx = (attempt.max(1) as usize - 1).min(self.handler_backoff.len() - 1);
        self.handler_backoff[idx]
    }

    /// Retry delay after failed attempt `attempt` (1-based): 1, 2, 4, ... minutes by default.
    pub fn backoff_after(&self, attempt: i32) -> Duration {
        let idx = (attempt.max(1) as usize - 1).min(self.backoff.len() - 1);
        self.backoff[idx]
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn clamped_values_are_shown_with_what_was_written() {
        let env = env_of(&[("OUTBOX_RECEIVER_CONCURRENCY", "0")]);
        let file = FileSettings::default();
        let settings = Settings::resolve_with(&file, &env).unwrap();
        assert_eq!(settings.receiver_concurrency, 1);
        let shown = settings.describe_with(&file, &env);
        let clamped: Vec<String> = shown
            .iter()
            .filter_map(ShownSetting::clamp_warning)
            .collect();
        assert_eq!(
            clamped,
            vec![
                "OUTBOX_RECEIVER_CONCURRENCY=0 (from the env) is out of range: using 1".to_string()
            ]
        );
        let defaults = Settings::resolve_with(&file, env_of(&[])).unwrap();
        assert!(
            defaults
                .describe_with(&file, env_of(&[]))
                .iter()
                .all(|s| s.clamped_from.is_none()),
            "defaults are never clamped"
        );
    }

    #[test]
    fn values_the_program_sets_after_resolving_are_not_warned_about_but_an_operators_are() {
        // The demo resolves the operator's settings, then chooses some values itself.
        let file = FileSettings::default();
        let mut chosen = Settings::resolve_with(&file, env_of(&[])).unwrap();
        chosen.dispatch_interval = Duration::from_millis(200);
        chosen.redis_prefix = "outbox-demo:".into();
        chosen.http_addr = String::new();
        let shown = chosen.describe_with(&file, env_of(&[]));
        let warnings: Vec<String> = shown
            .iter()
            .filter_map(ShownSetting::clamp_warning)
            .collect();
        assert_eq!(warnings, Vec::<String>::new());
        assert_eq!(
            shown
                .iter()
                .find(|s| s.env == "OUTBOX_DISPATCH_INTERVAL_MS")
                .map(|s| s.value.as_str()),
            Some("200"),
            "the value in force is shown"
        );

        // The same program on top of an operator's out-of-range value still warns about it.
        let env = env_of(&[("OUTBOX_DISPATCH_BATCH_SIZE", "0")]);
        let mut chosen = Settings::resolve_with(&file, &env).unwrap();
        chosen.dispatch_interval = Duration::from_millis(200);
        let warnings: Vec<String> = chosen
            .describe_with(&file, &env)
            .iter()
            .filter_map(ShownSetting::clamp_warning)
            .collect();
        assert_eq!(
            warnings,
            vec![
                "OUTBOX_DISPATCH_BATCH_SIZE=0 (from the env) is out of range: using 1".to_string()
            ]
        );
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    /// A `[settings]` table with one value for every kind of setting.
    fn file() -> FileSettings {
        FileSettings {
            dispatcher_enabled: Some(false),
            dispatch_batch_size: Some(50),
            dispatch_interval_ms: Some(250),
            done_retention_hours: Some(48),
            dedupe_ttl_seconds: Some(60),
            backoff_seconds: Some(vec![5, 10]),
            redis_prefix: Some("file:".into()),
            plugin_dir: Some("/file/plugins".into()),
            ..FileSettings::default()
        }
    }

    #[test]
    fn defaults_when_neither_env_nor_file() {
        let s = Settings::resolve_with(&FileSettings::default(), no_env).unwrap();
        assert_eq!(s, Settings::default());
        assert!(s.dispatcher_enabled);
        assert_eq!(s.dispatch_batch_size, 100);
        assert_eq!(s.dispatch_interval, Duration::from_millis(1000));
        assert_eq!(s.done_retention, Duration::from_secs(720 * 3600));
        assert_eq!(s.dedupe_ttl, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(s.backoff.len(), 6);
        assert_eq!(s.backoff_after(1), Duration::from_secs(60));
        assert_eq!(s.backoff_after(99), Duration::from_secs(1920));
        assert_eq!(s.handler_backoff_after(1), Duration::from_secs(1));
        assert_eq!(s.redis_prefix, "");
        assert_eq!(s.plugin_dir, PathBuf::from("plugins/dist"));
        assert_eq!(s.worker_queue_group, None);
        assert_eq!(s.max_payload_bytes, DEFAULT_MAX_PAYLOAD_BYTES);
    }

    #[test]
    fn file_overrides_defaults_for_every_kind() {
        let s = Settings::resolve_with(&file(), no_env).unwrap();
        assert!(!s.dispatcher_enabled);
        assert_eq!(s.dispatch_batch_size, 50);
        assert_eq!(s.dispatch_interval, Duration::from_millis(250));
        assert_eq!(s.done_retention, Duration::from_secs(48 * 3600));
        assert_eq!(s.dedupe_ttl, Duration::from_secs(60));
        assert_eq!(
            s.backoff,
            vec![Duration::from_secs(5), Duration::from_secs(10)]
        );
        assert_eq!(s.redis_prefix, "file:");
        assert_eq!(s.plugin_dir, PathBuf::from("/file/plugins"));
    }

    #[test]
    fn env_overrides_file_for_every_kind() {
        let env = env_of(&[
            ("OUTBOX_DISPATCHER_ENABLED", "true"),
            ("OUTBOX_DISPATCH_BATCH_SIZE", " 7 "),
            ("OUTBOX_DISPATCH_INTERVAL_MS", "20"),
            ("OUTBOX_DONE_RETENTION_HOURS", "2"),
            ("OUTBOX_DEDUPE_TTL_SECONDS", "9"),
            ("OUTBOX_BACKOFF_SECONDS", "1, 2,3"),
            ("OUTBOX_REDIS_PREFIX", "env:"),
            ("OUTBOX_PLUGIN_DIR", "/env/plugins"),
            ("DATABASE_URL", "postgres://env/db"),
            ("WORKER_QUEUE_GROUP", "mail"),
        ]);
        let s = Settings::resolve_with(&file(), env).unwrap();
        assert!(s.dispatcher_enabled);
        assert_eq!(s.dispatch_batch_size, 7);
        assert_eq!(s.dispatch_interval, Duration::from_millis(20));
        assert_eq!(s.done_retention, Duration::from_secs(2 * 3600));
        assert_eq!(s.dedupe_ttl, Duration::from_secs(9));
        assert_eq!(s.backoff, [1, 2, 3].map(Duration::from_secs).to_vec());
        assert_eq!(s.redis_prefix, "env:");
        assert_eq!(s.plugin_dir, PathBuf::from("/env/plugins"));
        assert_eq!(s.database_url, "postgres://env/db");
        assert_eq!(s.worker_queue_group.as_deref(), Some("mail"));
    }

    #[test]
    fn blank_env_counts_as_unset_except_for_text() {
        let env = env_of(&[
            ("OUTBOX_DISPATCH_BATCH_SIZE", "  "),
            ("OUTBOX_BACKOFF_SECONDS", ""),
            ("DATABASE_URL", ""),
            ("WORKER_QUEUE_GROUP", " "),
            ("OUTBOX_REDIS_PREFIX", ""),
            ("OUTBOX_HTTP_ADDR", ""),
        ]);
        let s = Settings::resolve_with(&file(), env).unwrap();
        assert_eq!(s.dispatch_batch_size, 50);
        assert_eq!(
            s.backoff,
            vec![Duration::from_secs(5), Duration::from_secs(10)]
        );
        assert_eq!(s.database_url, Settings::default().database_url);
        assert_eq!(s.worker_queue_group, None);
        // An empty text variable is a value: no prefix, HTTP endpoint off.
        assert_eq!(s.redis_prefix, "");
        assert_eq!(s.http_addr, "");
    }

    #[test]
    fn out_of_range_values_are_clamped() {
        let env = env_of(&[
            ("OUTBOX_DISPATCH_BATCH_SIZE", "0"),
            ("OUTBOX_DONE_RETENTION_BATCH_SIZE", "1000000"),
            ("OUTBOX_DISPATCH_CONCURRENCY", "0"),
            ("OUTBOX_RECEIVER_CONCURRENCY", "5000"),
            ("OUTBOX_MAX_RETRIES", "-3"),
            ("OUTBOX_CLAIM_LEASE_MS", "1"),
            ("OUTBOX_RECEIVER_LEASE_MS", "0"),
        ]);
        let s = Settings::resolve_with(&FileSettings::default(), env).unwrap();
        assert_eq!(s.dispatch_batch_size, 1);
        assert_eq!(s.done_retention_batch_size, 10_000);
        assert_eq!(s.dispatch_concurrency, 1);
        assert_eq!(s.receiver_concurrency, 1024);
        assert_eq!(s.max_retries, 0);
        assert_eq!(s.claim_lease, Duration::from_millis(100));
        assert_eq!(s.receiver_lease, Duration::from_millis(100));
    }

    fn env_error(name: &str, value: &str) -> (String, String, String) {
        match Settings::resolve_with(&FileSettings::default(), env_of(&[(name, value)])) {
            Err(ConfigError::Env {
                name,
                value,
                message,
            }) => (name, value, message),
            other => panic!("{name}={value:?}: expected an env error, got {other:?}"),
        }
    }

    #[test]
    fn unparsable_integer_env_names_the_variable_and_value() {
        let (name, value, _) = env_error("OUTBOX_DISPATCH_BATCH_SIZE", "lots");
        assert_eq!(
            (name.as_str(), value.as_str()),
            ("OUTBOX_DISPATCH_BATCH_SIZE", "lots")
        );
        let err = Settings::resolve_with(
            &FileSettings::default(),
            env_of(&[("OUTBOX_MAX_RETRIES", "six")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("OUTBOX_MAX_RETRIES") && err.contains("six"),
            "{err}"
        );
    }

    #[test]
    fn negative_duration_env_is_refused() {
        let (name, value, _) = env_error("OUTBOX_CLAIM_LEASE_MS", "-5");
        assert_eq!(
            (name.as_str(), value.as_str()),
            ("OUTBOX_CLAIM_LEASE_MS", "-5")
        );
        env_error("OUTBOX_DONE_RETENTION_HOURS", "1.5");
        env_error("OUTBOX_IDEMPOTENCY_TTL_SECONDS", "1h");
    }

    #[test]
    fn unparsable_bool_env_is_refused() {
        let (name, value, message) = env_error("OUTBOX_DISPATCHER_ENABLED", "yes");
        assert_eq!(
            (name.as_str(), value.as_str()),
            ("OUTBOX_DISPATCHER_ENABLED", "yes")
        );
        assert!(message.contains("true"), "{message}");
    }

    #[test]
    fn unparsable_seconds_list_env_is_refused_with_a_hint() {
        let (name, value, message) = env_error("OUTBOX_BACKOFF_SECONDS", "60,,120");
        assert_eq!(
            (name.as_str(), value.as_str()),
            ("OUTBOX_BACKOFF_SECONDS", "60,,120")
        );
        assert!(message.contains("comma-separated seconds"), "{message}");
        let (name, _, _) = env_error("OUTBOX_HANDLER_BACKOFF_SECONDS", "1m");
        assert_eq!(name, "OUTBOX_HANDLER_BACKOFF_SECONDS");
    }

    #[test]
    fn empty_backoff_list_in_file_is_refused() {
        for file in [
            FileSettings {
                backoff_seconds: Some(vec![]),
                ..FileSettings::default()
            },
            FileSettings {
                handler_backoff_seconds: Some(vec![]),
                ..FileSettings::default()
            },
        ] {
            let key = if file.backoff_seconds.is_some() {
                "backoff_seconds"
            } else {
                "handler_backoff_seconds"
            };
            assert_eq!(
                file.check(),
                Err(format!("[settings] {key} must not be empty"))
            );
            match Settings::resolve_with(&file, no_env) {
                Err(ConfigError::Setting { key: k, message }) => {
                    assert_eq!(k, key);
                    assert_eq!(message, "must not be empty");
                }
                other => panic!("expected a settings error, got {other:?}"),
            }
        }
    }

    #[test]
    fn env_wins_over_an_invalid_file_value() {
        let file = FileSettings {
            backoff_seconds: Some(vec![]),
            ..FileSettings::default()
        };
        let s = Settings::resolve_with(&file, env_of(&[("OUTBOX_BACKOFF_SECONDS", "4")])).unwrap();
        assert_eq!(s.backoff, vec![Duration::from_secs(4)]);
    }

    #[test]
    fn unknown_file_key_is_refused() {
        let err = toml::from_str::<FileSettings>("dispatch_batch = 5").unwrap_err();
        assert!(err.to_string().contains("dispatch_batch"), "{err}");
    }

    #[test]
    fn defaults_meet_their_own_rules() {
        let defaults = FileSettings {
            backoff_seconds: Some(vec![60, 120, 240, 480, 960, 1920]),
            handler_backoff_seconds: Some(vec![1, 5, 30, 120, 600]),
            ..FileSettings::default()
        };
        assert_eq!(defaults.check(), Ok(()));
        assert!(!Settings::default().handler_backoff.is_empty());
    }

    #[test]
    fn every_file_setting_is_named_after_its_env_var() {
        let shown = Settings::default().describe_with(&FileSettings::default(), no_env);
        for s in &shown {
            if let Some(key) = s.file_key {
                assert_eq!(s.env, format!("OUTBOX_{}", key.to_uppercase()));
            }
        }
        let keys = shown.iter().filter(|s| s.file_key.is_some()).count();
        assert_eq!(keys, Settings::ENV_VARS.len() - 3);
    }

    #[test]
    fn describe_covers_every_env_var_with_source_and_no_secret() {
        let env = env_of(&[
            ("REDIS_URL", "redis://:s3cret@cache:6379/"),
            ("OUTBOX_DISPATCH_BATCH_SIZE", "20"),
        ]);
        let file = file();
        let settings = Settings::resolve_with(&file, &env).unwrap();
        let shown = settings.describe_with(&file, &env);
        let names: Vec<&str> = shown.iter().map(|s| s.env).collect();
        assert_eq!(names, Settings::ENV_VARS);
        let get = |name: &str| shown.iter().find(|s| s.env == name).unwrap();
        assert_eq!(get("REDIS_URL").value, "redis://@cache:6379/");
        assert_eq!(get("REDIS_URL").source, SettingSource::Env);
        assert_eq!(get("OUTBOX_DISPATCH_BATCH_SIZE").value, "20");
        assert_eq!(get("OUTBOX_DISPATCH_BATCH_SIZE").source, SettingSource::Env);
        assert_eq!(get("OUTBOX_BACKOFF_SECONDS").value, "5,10");
        assert_eq!(get("OUTBOX_BACKOFF_SECONDS").source, SettingSource::File);
        assert_eq!(get("OUTBOX_DONE_RETENTION_HOURS").value, "48");
        assert_eq!(get("OUTBOX_DISPATCH_INTERVAL_MS").value, "250");
        assert_eq!(get("OUTBOX_PLUGIN_DIR").value, "/file/plugins");
        assert_eq!(get("OUTBOX_HTTP_ADDR").source, SettingSource::Default);
        assert_eq!(get("WORKER_QUEUE_GROUP").value, "(all)");
        assert_eq!(get("WORKER_QUEUE_GROUP").source, SettingSource::Default);
        assert!(shown.iter().all(|s| !s.value.contains("s3cret")));
    }
}
