//! Plugin: the sandboxed WebAssembly runtime for routers, handlers and capability policies.
//!
//! Owns the one wasmtime [`PluginEngine`] (component model, pooling allocator, fuel and epoch
//! deadlines), the [`PluginRegistry`] of compiled plugins and their hot reload, the one way to
//! call a plugin ([`LoadedPlugin::call_router`], [`LoadedPlugin::call_handler`],
//! [`LoadedPlugin::call_policy`]) and the WIT record of an event ([`wit_event`]). Routing through
//! a router plugin lives with routing ([`crate::routing::PluginRouter`]); the file watcher with
//! the live configuration ([`crate::live_config`]).
//! The host services a handler may call live in [`crate::capability`]. A plugin call never
//! holds an executor thread for more than one epoch tick at a time, never outlives its limits
//! (its time limit covers sleeping and host calls as well as computing), and a plugin that
//! traps, loops, sleeps or eats memory fails only its own call: the error comes back as text
//! for the event's `last_error`.

/// The WIT types generated from `plugin-sdk/wit` (events, deliveries, outcomes, decisions),
/// public so operator tools such as `outbox plugins call` can build inputs and read answers;
/// the generated world modules themselves are internal.
pub mod bindings;
pub mod compile_cache;
pub mod engine;
mod epoch_ticker;
pub mod files;
mod host_state;
pub mod legacy;
pub mod limits;
pub mod loaded;
pub mod registry;
pub mod remembered_routes;
pub mod wit_event;

pub use crate::naming::{bounded_reason, MAX_REASON_BYTES};
pub use engine::{block_on, PluginEngine, World};
pub use files::MAX_PLUGIN_FILE_BYTES;
pub use limits::{CallSlots, CallUsage, PluginLimits};
pub use loaded::{CompiledPlugin, LoadedPlugin};
pub use registry::{PluginInfo, PluginRegistry, StagedPlugins};

/// The WIT package version the host implements (`outbox:plugin@0.2.0`); plugins built against
/// the previous one ([`legacy::PREVIOUS_WIT_VERSION`]) are loaded too.
pub const WIT_VERSION: &str = "0.2.0";

/// The `tracing` target of the lines a plugin logs through the host (`outbox:plugin/log`), and
/// of the line that says a call's log budget ran out. Every plugin message is escaped by the
/// host before it is logged ([`limits::sanitize_log_message`]: every control character, line
/// separators and bidirectional overrides), which is more than a log formatter's own ANSI
/// sanitization escapes; so a formatter may write this target's messages as they are.
pub const PLUGIN_LOG_TARGET: &str = "outbox::plugin";

/// A plugin could not be loaded or a call failed. Messages name the plugin and say what to fix.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("plugin {plugin}: cannot read {path}: {source}")]
    Read {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file breaks a rule of plugin files before it is read (see [`files`]): it leads out
    /// of the plugin directory, is not a regular file, or is too large.
    #[error("plugin {plugin}: {path} refused: {rule}")]
    Refused {
        /// Plugin name.
        plugin: String,
        /// The file, as declared.
        path: std::path::PathBuf,
        /// The rule it breaks.
        rule: String,
    },
    /// The file's SHA-256 is not the one `[plugins.NAME] sha256` pins.
    #[error("plugin {plugin}: {path} has sha256 {actual}, but [plugins.{plugin}] sha256 pins {pinned}: not loading it (put the pinned build in place, or review this file and pin its digest)")]
    PinMismatch {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: std::path::PathBuf,
        /// The digest routes.toml pins.
        pinned: String,
        /// The file's digest.
        actual: String,
    },
    /// The file is not a valid component, or does not fit the world it claims.
    #[error("plugin {plugin}: {message}")]
    Invalid {
        /// Plugin name.
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// A call failed (trap, fuel, timeout, memory, malformed answer).
    #[error("plugin {plugin}: {message}")]
    Call {
        /// Plugin name.
        plugin: String,
        /// What happened, readable by an operator.
        message: String,
    },
    /// A router plugin refused its config (`[plugins.NAME].config`, or `[routes]` for the
    /// prefix router): the config is at fault, not the events, which are retried.
    #[error("plugin {plugin} refuses its config (fix it in routes.toml; its events are retried meanwhile): {message}")]
    Config {
        /// Plugin name.
        plugin: String,
        /// Why the plugin refused it.
        message: String,
    },
    /// The plugin implements another world than the call needs (a handler named as a router,
    /// say).
    #[error("plugin {plugin} is a {found} plugin, not a {expected}")]
    WrongWorld {
        /// Plugin name.
        plugin: String,
        /// The world the call needs.
        expected: World,
        /// The world the plugin implements.
        found: World,
    },
    /// `routes.toml` binds a plugin where its world does not fit (a router plugin as the handler
    /// of a queue, say): a config error found when the plugins are loaded.
    #[error("{binding} = '{plugin}': plugin {plugin} is a {found} plugin, but this needs a {expected} plugin")]
    Misbound {
        /// Where `routes.toml` binds it, e.g. `[handlers] 'outbox.mail'` or `[policy] plugin`.
        binding: String,
        /// Plugin name.
        plugin: String,
        /// The world the binding needs.
        expected: World,
        /// The world the plugin implements.
        found: World,
    },
    /// No plugin of that name is loaded.
    #[error("plugin {0} is not loaded (declare it under [plugins] in routes.toml and put its .wasm in the plugin directory)")]
    NotLoaded(String),
    /// The engine could not be created.
    #[error("plugin engine: {0}")]
    Engine(String),
}
