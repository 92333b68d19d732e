//! A small key-value store (Redis), namespaced per plugin by the host: two plugins never see
//! each other's keys.

use crate::bindings::handler::outbox::plugin::kv as wit;
use crate::HostError;

/// The value stored under `key`, if any.
pub fn get(key: &str) -> Result<Option<String>, HostError> {
    wit::get(key).map_err(HostError::from)
}

/// Store `value` under `key`, expiring after `ttl_seconds` when given.
pub fn set(key: &str, value: &str, ttl_seconds: Option<u32>) -> Result<(), HostError> {
    wit::set(key, value, ttl_seconds).map_err(HostError::from)
}

/// Delete `key`; true when it existed.
pub fn delete(key: &str) -> Result<bool, HostError> {
    wit::delete(key).map_err(HostError::from)
}
