//! Naming and bounds rules: what a name the host keeps may look like, and how long a text it
//! keeps may be.
//!
//! Owns the one copy of each rule that config, publish, contracts, routing and the capabilities
//! share: event types ([`validate_event_type`]), routing prefixes ([`validate_prefix`]), queue
//! names and their reserved suffix ([`validate_queue_name`], [`DEAD_LETTER_SUFFIX`]), plugin
//! names, plugin file keys and the built-in plugin names ([`validate_plugin_name`],
//! [`check_file_key`], [`BUILTIN_PLUGIN_INVOKE`], [`NATIVE_ROUTER`], [`DENY_ALL`]), the `Host`
//! entries of the operator endpoint ([`check_host_entry`], [`check_public_url`]), the bounds a
//! kept text is cut to ([`clip`], [`bounded_reason`]) and the limits these rules share. A broken
//! rule is a [`NameError`] whose message says what the rule is.
//!
//! This is the bottom floor: it imports nothing from the rest of the crate (std and small crates
//! only), never touches files, the network, PostgreSQL or Redis, and never keeps state.

mod bounds;
mod event_type;
mod host;
mod plugin;
mod queue;

pub use bounds::{bounded_reason, clip, MAX_REASON_BYTES};
pub use event_type::{validate_event_type, validate_prefix, MAX_EVENT_TYPE_BYTES};
pub use host::{check_host_entry, check_public_url, split_host_port, MAX_HOST_BYTES};
pub use plugin::{
    check_file_key, validate_plugin_name, KvMaxBytes, BUILTIN_PLUGIN_INVOKE, DEFAULT_KV_MAX_BYTES,
    DEFAULT_POLICY_PLUGIN, DENY_ALL, MAX_KV_MAX_BYTES, MAX_PLUGIN_CONCURRENCY,
    MAX_PLUGIN_NAME_BYTES, NATIVE_ROUTER,
};
pub use queue::{
    validate_queue_name, DEAD_LETTER_SUFFIX, MAX_QUEUES_PER_EVENT, MAX_QUEUE_NAME_BYTES,
};

/// A name or value that breaks one of these rules; the message says the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not an event type: lowercase dot-separated segments, at least two.
    #[error("invalid event type {0:?}: use lowercase dot-separated segments (a-z, 0-9, '_', '-'), at least two, e.g. \"mail.welcome\"")]
    EventType(String),
    /// A routing prefix breaks the prefix rule; the text says which part.
    #[error("{0}")]
    Prefix(&'static str),
    /// Not a plugin name.
    #[error("invalid plugin name {:?}: use lowercase letters, digits and single '-', starting with a letter (at most {} characters), e.g. \"form-router\"", .0, MAX_PLUGIN_NAME_BYTES)]
    PluginName(String),
    /// A `[plugins.NAME] file` that is not a relative path of plain names.
    #[error("a plugin file must be a relative path inside the plugin directory, of plain names (no leading '/', no '..', no '.')")]
    PluginFile,
    /// A queue name that is empty or too long.
    #[error("queue names are 1 to {} characters", MAX_QUEUE_NAME_BYTES)]
    QueueNameLength,
    /// A queue name with a character the host's own Redis keys use.
    #[error("queue names use letters, digits, '.', '_' and '-' (no ':', which the host's own Redis keys use)")]
    QueueNameCharacters,
    /// A queue name ending in a reserved suffix.
    #[error(
        "a queue name must not end in '{}' (that names another queue's dead-letter stream)",
        DEAD_LETTER_SUFFIX
    )]
    QueueNameReserved,
    /// A `Host` entry that is not `host` or `host:port` (the entry shown clipped).
    #[error("{0:?} is not a host: use a name or an IP address, optionally with :port (e.g. outbox.example.com or 10.0.0.5:9464)")]
    HostEntry(String),
    /// A public URL that does not parse.
    #[error("{url:?} is not a URL: {reason}")]
    PublicUrlUnparsable {
        /// The URL as written.
        url: String,
        /// The parser's explanation.
        reason: String,
    },
    /// A public URL whose scheme is neither `http` nor `https`.
    #[error("{0:?} must start with https:// (or http:// for a console that is not behind TLS)")]
    PublicUrlScheme(String),
    /// A public URL without a host.
    #[error("{0:?} names no host")]
    PublicUrlNoHost(String),
    /// A public URL carrying a user or password.
    #[error("{0:?} must not carry a user or password")]
    PublicUrlCredentials(String),
    /// A `kv_max_bytes` out of its bounds.
    #[error("kv_max_bytes must be 1 to {} (1 GiB), got {}", MAX_KV_MAX_BYTES, .0)]
    KvMaxBytes(u64),
}
