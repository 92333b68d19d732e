//! The checks of a configuration that need what the live configuration is assembled with: the
//! plugins' time limits against the receivers' lease, the queues against the Redis `REDIS_URL`
//! names, and the contracts folder a config names.
//!
//! Owns [`Config::check`] (run by whatever starts a host or a command from a config: the host
//! builder, the CLI) and the same checks of a reloaded routes file ([`LiveConfig::reload_routes`]
//! runs [`RoutesFile::check_receiver_lease`] and [`RoutesFile::check_redis`] before it stages
//! anything). They live here, not in [`crate::config`], because they need the plugin limits,
//! the receivers' built-in handler and the Redis URL rules: config stays below all of those. It
//! never loads a plugin or connects to anything.
//!
//! [`LiveConfig::reload_routes`]: super::LiveConfig::reload_routes

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::{Config, ConfigError, RoutesFile, Settings, SinkKind};
use crate::contracts::{ContractError, Contracts};
use crate::naming::BUILTIN_PLUGIN_INVOKE;
use crate::plugin::PluginLimits;
use crate::redis_conn::names_cluster;

/// How much longer than the slowest handler plugin's `timeout_ms` the receiver lease
/// (`OUTBOX_RECEIVER_LEASE_MS`) must be: room for the claim, the outcome script and a busy
/// runtime around the call, so that a handler within its time limit never outlives its claim
/// even before the claim is renewed.
pub const RECEIVER_LEASE_MARGIN: Duration = Duration::from_secs(5);

impl Config {
    /// The checks that need both the routes file and the resolved settings: the receiver lease
    /// against the handler plugins' time limits ([`RoutesFile::check_receiver_lease`]), the
    /// queues against the queue systems the settings name ([`RoutesFile::check_queue_systems`]). The host
    /// builder and the CLI run it on every config they load; run it on a config built by hand.
    pub fn check(&self) -> Result<(), ConfigError> {
        self.routes
            .check_receiver_lease(self.settings.receiver_lease)
            .and_then(|()| self.routes.check_queue_systems(&self.settings))
            .map_err(|message| ConfigError::Invalid {
                path: self.shown_path(),
                message,
            })
    }

    /// Load the event contracts of [`contracts_dir`](Config::contracts_dir) under
    /// `OUTBOX_CONTRACTS_MODE`.
    pub fn load_contracts(&self) -> Result<Contracts, ContractError> {
        Contracts::load(Some(self.contracts_dir()), self.settings.contracts_mode)
    }
}

impl RoutesFile {
    /// The plugins receivers run as handlers, with their time limit: those bound to a queue in
    /// `[handlers]`, and, when a queue is bound to `builtin:plugin-invoke`, those subscribed to
    /// a hook (`hooks`). Plugins not declared under `[plugins]` are left out.
    pub fn handler_plugin_timeouts(&self) -> BTreeMap<&str, Duration> {
        let invokes = self.handlers.values().any(|h| h == BUILTIN_PLUGIN_INVOKE);
        self.plugins
            .iter()
            .filter(|(name, spec)| {
                self.handlers.values().any(|h| h == *name) || (invokes && !spec.hooks.is_empty())
            })
            .map(|(name, spec)| (name.as_str(), PluginLimits::from_spec(spec).timeout))
            .collect()
    }

    /// Check that the queue systems `settings` name can serve these queues: the Redis checks of
    /// [`check_redis`](Self::check_redis), and a `nats` or `rabbitmq` queue only with
    /// `OUTBOX_NATS_URL` or `OUTBOX_RABBITMQ_URL` set (whether its stream or exchange exists is
    /// the sink's check, which needs the broker). The message names the queue.
    pub fn check_queue_systems(&self, settings: &Settings) -> Result<(), String> {
        self.check_redis(&settings.redis_url)?;
        for (queue, spec) in &self.queues {
            let missing = match spec.sink {
                SinkKind::Nats if settings.nats_url.is_none() => "OUTBOX_NATS_URL",
                SinkKind::Rabbitmq if settings.rabbitmq_url.is_none() => "OUTBOX_RABBITMQ_URL",
                _ => continue,
            };
            return Err(format!(
                "[queues.\"{queue}\"] sink = \"{}\" needs {missing} (the broker's URL), which is not set",
                spec.sink
            ));
        }
        Ok(())
    }

    /// Check that the Redis `redis_url` names can serve these queues: on a Redis Cluster a
    /// BullMQ queue is refused (BullMQ's keys of one queue live in many slots unless its prefix
    /// carries a hash tag, and the host's enqueue marker would sit in yet another: the add
    /// script could not run), naming the queue.
    pub fn check_redis(&self, redis_url: &str) -> Result<(), String> {
        if !names_cluster(redis_url) {
            return Ok(());
        }
        match self
            .queues
            .iter()
            .find(|(_, spec)| spec.sink == SinkKind::Bullmq)
        {
            Some((queue, _)) => Err(format!(
                "[queues.\"{queue}\"] sink = \"bullmq\" is not supported on a Redis Cluster (REDIS_URL names one): keep BullMQ queues on a single Redis node, or use the streams sink"
            )),
            None => Ok(()),
        }
    }

    /// Check that a receiver lease of `lease` covers every handler plugin's time limit plus
    /// [`RECEIVER_LEASE_MARGIN`]; otherwise the error names the setting, the slowest plugin and
    /// the smallest lease that would do.
    pub fn check_receiver_lease(&self, lease: Duration) -> Result<(), String> {
        let Some((plugin, timeout)) = self
            .handler_plugin_timeouts()
            .into_iter()
            .max_by_key(|(_, timeout)| *timeout)
        else {
            return Ok(());
        };
        let needed = timeout + RECEIVER_LEASE_MARGIN;
        if lease >= needed {
            return Ok(());
        }
        Err(format!(
            "receiver lease OUTBOX_RECEIVER_LEASE_MS ([settings] receiver_lease_ms) = {} ms is shorter than handler plugin '{plugin}' timeout_ms = {} ms plus a {} ms margin: another consumer could take an entry over while the handler still runs; set it to at least {} (or lower [plugins.{plugin}] timeout_ms)",
            lease.as_millis(),
            timeout.as_millis(),
            RECEIVER_LEASE_MARGIN.as_millis(),
            needed.as_millis(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::config::{Settings, DEFAULT_ROUTES_TOML};

    fn lease_config(routes: &str, lease_ms: u64) -> Config {
        Config {
            path: Some(PathBuf::from("routes.toml")),
            routes: RoutesFile::parse(routes, Path::new("routes.toml")).unwrap(),
            settings: Settings {
                receiver_lease: Duration::from_millis(lease_ms),
                ..Settings::default()
            },
        }
    }

    const SLOW_HANDLER: &str = r#"
    [policy]
    plugin = "deny-all"
    [handlers]
    "outbox.slow" = "slow"
    [plugins.slow]
    timeout_ms = 10000
    [plugins.fast]
    timeout_ms = 60000
    "#;

    #[test]
    fn receiver_lease_shorter_than_a_handlers_time_limit_is_refused() {
        let err = lease_config(SLOW_HANDLER, 14_999)
            .check()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("routes.toml: "), "{err}");
        assert!(err.contains("OUTBOX_RECEIVER_LEASE_MS"), "{err}");
        assert!(err.contains("receiver_lease_ms"), "{err}");
        assert!(
            err.contains("handler plugin 'slow' timeout_ms = 10000 ms"),
            "{err}"
        );
        assert!(err.contains("at least 15000"), "{err}");
        // Exactly the time limit plus the margin is enough; a plugin no queue runs is not a
        // handler (`fast`).
        lease_config(SLOW_HANDLER, 15_000).check().unwrap();
    }

    #[test]
    fn receiver_lease_covers_hook_subscribers_and_default_time_limits() {
        let routes = r#"
    [policy]
    plugin = "deny-all"
    [handlers]
    "outbox.plugin-invoke" = "builtin:plugin-invoke"
    "outbox.mail" = "mailer"
    [plugins.mailer]
    [plugins.audit]
    hooks = ["order.paid"]
    timeout_ms = 30000
    "#;
        let err = lease_config(routes, 20_000)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("handler plugin 'audit' timeout_ms = 30000 ms"),
            "{err}"
        );
        lease_config(routes, 35_000).check().unwrap();
        // Without the invoke handler nobody runs a hook subscriber; `mailer` has the default
        // limit (2000 ms).
        let no_invoke =
            routes.replace("\"outbox.plugin-invoke\" = \"builtin:plugin-invoke\"\n", "");
        lease_config(&no_invoke, 7_000).check().unwrap();
        let err = lease_config(&no_invoke, 6_999)
            .check()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("handler plugin 'mailer' timeout_ms = 2000 ms"),
            "{err}"
        );
    }

    #[test]
    fn default_routes_file_fits_the_default_receiver_lease() {
        let routes = RoutesFile::parse(DEFAULT_ROUTES_TOML, Path::new("routes.toml")).unwrap();
        routes
            .check_receiver_lease(Settings::default().receiver_lease)
            .unwrap();
    }
}
