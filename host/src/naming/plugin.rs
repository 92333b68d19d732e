//! Plugin names, plugin file keys, the names of the built-in plugins, and the bounds a plugin's
//! spec is checked against.

use std::path::{Component, Path};

use super::NameError;

/// Longest plugin name, in bytes.
pub const MAX_PLUGIN_NAME_BYTES: usize = 64;

/// `[router] plugin` value for the built-in routing table (no plugin).
pub const NATIVE_ROUTER: &str = "native";

/// `[policy] plugin` value that refuses every capability but `log` without running WebAssembly.
pub const DENY_ALL: &str = "deny-all";

/// `[policy] plugin` when the routes file names none.
pub const DEFAULT_POLICY_PLUGIN: &str = "capability-policy";

/// The one built-in handler: bound to a queue in `[handlers]`, it runs the plugin a
/// `plugin.invoke.<plugin>` job names (the hook subscribers).
pub const BUILTIN_PLUGIN_INVOKE: &str = "builtin:plugin-invoke";

/// Largest `max_concurrency` a plugin may ask for: with the per-call caps of the plugin engine,
/// one plugin then holds at most half of the pooling allocator's instances, memories and tables.
pub const MAX_PLUGIN_CONCURRENCY: usize = 32;

/// Bytes of keys and values one plugin may hold at once unless its `[plugins.NAME]` sets
/// `kv_max_bytes`: 16 MiB.
pub const DEFAULT_KV_MAX_BYTES: u64 = 16 << 20;

/// Largest `kv_max_bytes` a plugin may be given: 1 GiB (about what the kv store's key count cap
/// of values of the largest size hold).
pub const MAX_KV_MAX_BYTES: u64 = 1 << 30;

/// Check a plugin name, the one rule for `[plugins.NAME]` and `outbox plugins new NAME`:
/// lowercase letters, digits and single '-', starting with a letter, not ending with '-', at
/// most [`MAX_PLUGIN_NAME_BYTES`] characters. A plugin crate `NAME` builds to `NAME.wasm`
/// (scripts/build-plugins.sh turns '_' into '-'), the file a `[plugins.NAME]` entry loads by
/// default, so '_' is refused: such a name could never match its built file.
pub fn validate_plugin_name(name: &str) -> Result<(), NameError> {
    let ok = name.len() <= MAX_PLUGIN_NAME_BYTES
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(NameError::PluginName(name.to_string()))
    }
}

/// The rule a `[plugins.NAME] file` key breaks, if any: it must name a file under the plugin
/// directory by a relative path of plain names (no leading `/`, no `..`, no `.`).
pub fn check_file_key(file: &str) -> Result<(), NameError> {
    let plain = !file.is_empty()
        && Path::new(file)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if plain {
        Ok(())
    } else {
        Err(NameError::PluginFile)
    }
}

/// `kv_max_bytes` of `[plugins.NAME]`: the bytes of keys and values the plugin may hold at once
/// in its kv store, 1 to [`MAX_KV_MAX_BYTES`] (default [`DEFAULT_KV_MAX_BYTES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct KvMaxBytes(u64);

impl KvMaxBytes {
    /// The quota of a plugin whose spec sets `kv_max_bytes` to `set` (`None`: the default).
    pub fn of(set: Option<KvMaxBytes>) -> u64 {
        set.map_or(DEFAULT_KV_MAX_BYTES, |q| q.0)
    }
}

impl TryFrom<u64> for KvMaxBytes {
    type Error = NameError;

    fn try_from(bytes: u64) -> Result<Self, NameError> {
        if bytes == 0 || bytes > MAX_KV_MAX_BYTES {
            return Err(NameError::KvMaxBytes(bytes));
        }
        Ok(Self(bytes))
    }
}

impl From<KvMaxBytes> for u64 {
    fn from(quota: KvMaxBytes) -> u64 {
        quota.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_names_follow_the_built_wasm_file_names() {
        for ok in [
            "a",
            "form-router",
            "prefix-router-alt",
            "v2",
            "x1-y2",
            &"a".repeat(64),
        ] {
            assert_eq!(validate_plugin_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "Form",
            "form_router",
            "1router",
            "-router",
            "router-",
            "form--router",
            "form.router",
            "form router",
            &"a".repeat(65),
        ] {
            let err = validate_plugin_name(bad).unwrap_err().to_string();
            assert!(err.contains("lowercase letters"), "{bad}: {err}");
        }
    }

    #[test]
    fn file_keys_are_plain_relative_paths() {
        for ok in ["a.wasm", "team/a.wasm", "a..b.wasm"] {
            assert_eq!(check_file_key(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "/a.wasm",
            "../a.wasm",
            "team/../../a.wasm",
            "./a.wasm",
            "/",
        ] {
            assert!(check_file_key(bad).is_err(), "{bad}");
        }
    }
}
