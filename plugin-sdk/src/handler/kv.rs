//! A small key-value store (Redis), namespaced per plugin by the host: two plugins never see
//! each other's keys.
//!
//! Each call is atomic on its own, but a [`get`] followed by a [`set`] is not: deliveries run
//! concurrently (on one host and on several), so two of them can read the same old value and
//! one update is lost. Count with [`increment`]; for any other read-modify-write, loop on
//! [`compare_and_set`]:
//!
//! ```no_run
//! use outbox_plugin_sdk::handler::kv;
//! use outbox_plugin_sdk::HostError;
//!
//! /// Append `id` to the comma-separated list under `key`, whatever runs at the same time.
//! fn remember(key: &str, id: i64) -> Result<(), HostError> {
//!     loop {
//!         let current = kv::get(key)?;
//!         let next = match &current {
//!             Some(list) => format!("{list},{id}"),
//!             None => id.to_string(),
//!         };
//!         if kv::compare_and_set(key, current.as_deref(), &next, None)? {
//!             return Ok(());
//!         }
//!         // Someone else changed it in between: read again.
//!     }
//! }
//! ```
//!
//! The host bounds what a plugin stores: keys of 1 to 512 bytes, values up to 1 MiB, at most
//! 1000 live keys per plugin and 16 MiB of keys and values together (`kv_max_bytes` in its
//! `[plugins.NAME]` changes that).

use crate::bindings::handler::outbox::plugin::kv as wit;
use crate::HostError;

/// The value stored under `key`, if any.
pub fn get(key: &str) -> Result<Option<String>, HostError> {
    wit::get(key).map_err(HostError::from)
}

/// Store `value` under `key`, expiring after `ttl_seconds` when given. Not atomic with a
/// [`get`] before it: see the [module docs](self).
pub fn set(key: &str, value: &str, ttl_seconds: Option<u32>) -> Result<(), HostError> {
    wit::set(key, value, ttl_seconds).map_err(HostError::from)
}

/// Delete `key`; true when it existed.
pub fn delete(key: &str) -> Result<bool, HostError> {
    wit::delete(key).map_err(HostError::from)
}

/// Add `delta` (may be negative) to the integer under `key` atomically and return the new
/// value; an absent key counts as 0. `ttl_seconds` sets the expiry only when this call creates
/// the key (one counter per time window), an existing key keeps its own. Fails, changing
/// nothing, when the value is not a decimal 64-bit integer or the sum would overflow.
///
/// ```no_run
/// use outbox_plugin_sdk::handler::kv;
///
/// # fn demo() -> Result<(), outbox_plugin_sdk::HostError> {
/// let sent_today = kv::increment("mails:2026-12-01", 1, Some(86_400))?;
/// if sent_today > 10_000 {
///     // over the daily budget
/// }
/// # Ok(())
/// # }
/// ```
pub fn increment(key: &str, delta: i64, ttl_seconds: Option<u32>) -> Result<i64, HostError> {
    wit::increment(key, delta, ttl_seconds).map_err(HostError::from)
}

/// Store `value` under `key` only if its current value is `expected` (`None`: only if the key
/// is absent), atomically. `Ok(true)` when stored; `Ok(false)` when the current value differs
/// and nothing changed: read it again and retry (see the [module docs](self)). `ttl_seconds` as
/// in [`set`].
pub fn compare_and_set(
    key: &str,
    expected: Option<&str>,
    value: &str,
    ttl_seconds: Option<u32>,
) -> Result<bool, HostError> {
    wit::compare_and_set(key, expected, value, ttl_seconds).map_err(HostError::from)
}
