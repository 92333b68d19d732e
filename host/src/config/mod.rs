//! Configuration: `routes.toml` plus environment variables.
//!
//! Owns parsing and validation of the operator's config file: [`RoutesFile`] and its sections
//! (`routes.rs`), the plugin tables (`plugins.rs`), the queue tables (`queues.rs`,
//! `bullmq.rs`, `brokers.rs`); the runtime settings and their env vars (DESIGN.md) are declared once, in one
//! table in `config/settings.rs` that generates [`Settings`] (environment wins over `[settings]`
//! in the file, which wins over the defaults; how each kind of value is read is in
//! `setting_kinds.rs`). The naming rules a file's names meet live in [`crate::naming`], which is
//! all of the crate this module imports: it never connects to anything and never loads a
//! plugin. A [`Config`] is plain data, validated as a whole, so a broken edit can be rejected
//! before it replaces the config that is serving; the checks that need the plugins, receivers
//! or Redis in force ([`Config::check`]) live where those are assembled, in
//! [`crate::live_config`].

mod brokers;
mod bullmq;
mod plugins;
mod queues;
mod routes;
mod setting_kinds;
mod settings;

use std::path::{Path, PathBuf};

/// The naming rules of the names a routes file holds (defined in [`crate::naming`]).
pub use crate::naming::{
    validate_plugin_name, validate_prefix, validate_queue_name, MAX_QUEUE_NAME_BYTES,
};
pub use brokers::{NatsOptions, RabbitmqOptions, MAX_BROKER_NAME_BYTES};
pub use bullmq::{
    BackoffKind, BullmqBackoff, BullmqOptions, JobData, KeepJobs, DEFAULT_BULLMQ_JOB_ID,
    DEFAULT_BULLMQ_PREFIX,
};
pub use plugins::{Grants, PluginSpec, Sha256Pin, SupportedVersions};
pub use queues::{QueueSpec, RateLimit, SinkKind, MAX_QUEUE_CONCURRENCY};
pub use routes::{PolicySection, QueueList, RouterSection, RoutesFile};
pub use setting_kinds::{redact, ContractMode};
pub use settings::{
    FileSettings, SettingSource, Settings, ShownSetting, DEFAULT_MAX_EVENT_GENERATION,
    DEFAULT_MAX_PAYLOAD_BYTES,
};

/// A configuration problem, with the file and the offending entry in the message.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown/mistyped keys.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's explanation, with line and column.
        message: String,
    },
    /// The file parses but says something impossible.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An environment variable has a value that does not parse.
    #[error("environment variable {name}={value:?}: {message}")]
    Env {
        /// Variable name.
        name: String,
        /// Its value.
        value: String,
        /// Why it was refused.
        message: String,
    },
    /// A `[settings]` value breaks its setting's rule (for settings not read from a file).
    #[error("[settings] {key} {message}")]
    Setting {
        /// The key under `[settings]`.
        key: String,
        /// What is wrong.
        message: String,
    },
}
/// The default `routes.toml` shipped with the product (the table of DESIGN.md).
pub const DEFAULT_ROUTES_TOML: &str = include_str!("../../../routes.toml");

/// Everything the host needs: the routes file and the resolved settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where the routes file came from (`None`: built-in default).
    pub path: Option<PathBuf>,
    /// The parsed routes file.
    pub routes: RoutesFile,
    /// Resolved settings.
    pub settings: Settings,
}

impl Config {
    /// Load `OUTBOX_CONFIG` (default `routes.toml`; the built-in default table when that file
    /// does not exist and no path was given explicitly) and resolve the environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        match std::env::var("OUTBOX_CONFIG")
            .ok()
            .filter(|p| !p.is_empty())
        {
            Some(p) => Self::load(Path::new(&p)),
            None if Path::new("routes.toml").exists() => Self::load(Path::new("routes.toml")),
            None => Self::builtin(),
        }
    }

    /// Load a specific routes file and resolve the environment. A relative plugin directory
    /// from `[settings]` or the default is taken from the routes file's directory (one from
    /// `OUTBOX_PLUGIN_DIR` from the working directory): see [`plugin_dir_for`]. The checks that
    /// need the plugins and the Redis in force are not run here: see [`Config::check`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let routes = RoutesFile::load(path)?;
        let mut settings = Settings::resolve(&routes.settings)?;
        let from_env = settings
            .describe_with(&routes.settings, |name| std::env::var(name).ok())
            .iter()
            .any(|s| s.env == "OUTBOX_PLUGIN_DIR" && s.source == SettingSource::Env);
        settings.plugin_dir = plugin_dir_for(&settings.plugin_dir, from_env, Some(path));
        Ok(Self {
            path: Some(path.to_path_buf()),
            routes,
            settings,
        })
    }

    /// No routes at all, settings from the environment and defaults only: what commands that
    /// do not route fall back to when the routes file cannot be used (see the CLI), so a broken
    /// `routes.toml` does not stop `publish`, `stats` or `dead-letter list`.
    pub fn environment_only() -> Result<Self, ConfigError> {
        Ok(Self {
            path: None,
            routes: RoutesFile::default(),
            settings: Settings::resolve(&FileSettings::default())?,
        })
    }

    /// The contracts folder: `OUTBOX_CONTRACTS_DIR`, else `contracts/` beside the routes file
    /// (in the working directory when the routes are built in).
    pub fn contracts_dir(&self) -> PathBuf {
        if !self.settings.contracts_dir.is_empty() {
            return PathBuf::from(&self.settings.contracts_dir);
        }
        self.path
            .as_deref()
            .and_then(Path::parent)
            .map(|dir| dir.join("contracts"))
            .unwrap_or_else(|| PathBuf::from("contracts"))
    }

    /// The built-in default `routes.toml` with the environment applied.
    pub fn builtin() -> Result<Self, ConfigError> {
        let routes = RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("<built-in routes.toml>"))?;
        let settings = Settings::resolve(&routes.settings)?;
        Ok(Self {
            path: None,
            routes,
            settings,
        })
    }

    /// Where this config came from, as errors name it.
    pub fn shown_path(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from("<built-in routes.toml>"))
    }
}

/// The plugin directory the host reads: `setting` as resolved, taken from the directory of
/// `routes_path` when it is relative and did not come from `OUTBOX_PLUGIN_DIR` (`from_env`);
/// unchanged otherwise (absolute, from the environment, or no routes file).
pub fn plugin_dir_for(setting: &Path, from_env: bool, routes_path: Option<&Path>) -> PathBuf {
    if from_env || setting.is_absolute() {
        return setting.to_path_buf();
    }
    match routes_path.and_then(Path::parent) {
        Some(dir) => dir.join(setting),
        None => setting.to_path_buf(),
    }
}

#[cfg(test)]
mod tests;
