//! How each kind of setting is read, checked, converted and shown ([`SettingKind`]), and the
//! resolution of one setting (environment over file over default).
//!
//! Owns the kinds the table of `settings.rs` names (flags, numbers, durations in their units,
//! lists, paths, URLs, `Host` lists, the contracts mode) and the values that only settings
//! hold ([`ContractMode`]). It never reads the environment itself (the lookup is handed in) and
//! never shows a secret: a URL is shown through [`redact`].

use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, SettingSource};
use crate::naming::{check_host_entry, check_public_url};

/// What happens to an event whose type or version has no contract (`OUTBOX_CONTRACTS_MODE`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractMode {
    /// Accepted and counted in `outbox_contract_unregistered_total` (the default while teams
    /// adopt contracts).
    #[default]
    Permissive,
    /// Rejected: every published type and version must be registered.
    Strict,
}

impl FromStr for ContractMode {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "permissive" => Ok(Self::Permissive),
            "strict" => Ok(Self::Strict),
            other => Err(format!(
                "unknown contracts mode {other:?}: use \"permissive\" or \"strict\""
            )),
        }
    }
}

impl fmt::Display for ContractMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Permissive => "permissive",
            Self::Strict => "strict",
        })
    }
}

/// A connection URL with its password removed (`postgres://u:secret@h/db` ->
/// `postgres://u@h/db`), for logs and `outbox config`.
pub fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((creds, host)) => {
                let user = creds.split(':').next().unwrap_or("");
                format!("{scheme}://{user}@{host}")
            }
            None => url.to_string(),
        },
        None => url.to_string(),
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
        check_public_url(raw).map_err(|e| e.to_string())
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
            .try_for_each(|host| check_host_entry(host).map_err(|e| e.to_string()))
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
        redact(value)
    }
}

/// An optional URL; unset or blank means none (`OUTBOX_NATS_URL`, `OUTBOX_RABBITMQ_URL`). Shown
/// with its password redacted.
pub(crate) struct OptionalUrl;

impl SettingKind for OptionalUrl {
    type Raw = Option<String>;
    type Value = Option<String>;
    fn is_set(text: &str) -> bool {
        !text.trim().is_empty()
    }
    fn parse(text: &str) -> Result<Option<String>, String> {
        Ok(Some(text.trim().to_string()))
    }
    fn value(raw: Option<String>) -> Option<String> {
        raw
    }
    fn show(value: &Option<String>) -> String {
        value
            .as_deref()
            .map_or_else(|| "(none)".to_string(), redact)
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
pub(super) fn resolve_one<K: SettingKind>(
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
pub(super) fn source_of<K: SettingKind>(
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
