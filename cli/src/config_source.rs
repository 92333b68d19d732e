//! Config source: the [`Config`] a command runs with, from `--config` (`OUTBOX_CONFIG`) or the
//! environment.
//!
//! Owns the two ways a command loads its routes file: strictly (commands that route events or
//! run plugins) or falling back to the environment (commands that do not). It never connects.

use std::path::PathBuf;

use outbox_host::config::Config;

/// The config of a command that does not route events: a routes file that cannot be read or
/// is invalid is a warning, and the command goes on with settings from the environment and
/// defaults (no routes, no handlers), so the operator still has `publish`, `stats`,
/// `dead-letter`, `config` and friends while the running host keeps its last good config.
pub(crate) fn load_config_or_environment(path: &Option<PathBuf>) -> anyhow::Result<Config> {
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

/// The config of a command that routes events or runs plugins: the routes file `path` names
/// (else `routes.toml` if present, else the built-in table), with the environment over its
/// `[settings]`; an unreadable or invalid file is an error.
pub(crate) fn load_config(path: &Option<PathBuf>) -> anyhow::Result<Config> {
    let config = match path {
        Some(p) => Config::load(p)?,
        None => Config::from_env()?,
    };
    // The checks that need the plugins and Redis a config is assembled with (live_config).
    config.check()?;
    Ok(config)
}
