//! `[plugins.NAME]`: one WebAssembly plugin as the routes file declares it (its file, limits,
//! config, capability grants, supported event versions and hooks).
//!
//! Owns the shape of a plugin's table and the rules its values meet on their own. It never
//! reads a `.wasm` file and never knows what a plugin does: the plugin runtime applies the
//! limits, the policy plugin evaluates the grants.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::naming::{validate_event_type, KvMaxBytes};

/// Capability grants of one plugin (`[plugins.NAME.grants]`), evaluated by the policy plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Event type prefixes the plugin may publish.
    #[serde(default)]
    pub publish: Vec<String>,
    /// Tenants the plugin may publish into besides its event's own (`"*"`: any). Without one,
    /// a handler's children stay in the tenant of the event it handles.
    #[serde(default)]
    pub publish_tenants: Vec<String>,
    /// Whether the plugin may use its (namespaced) key-value store.
    #[serde(default)]
    pub kv: bool,
    /// Hosts (`host` or `host:port`) the plugin may call over HTTP. Without a port, only the
    /// scheme's default port (80, 443). Loopback, link-local, private and other non-public
    /// addresses are reached only through an entry naming that IP (`"127.0.0.1:8080"`) with the
    /// request's port, whether the URL names the IP or a name resolving to it (then an entry
    /// must name the name too).
    #[serde(default)]
    pub http: Vec<String>,
    /// Name of an environment variable holding an HMAC-SHA256 secret: when set, the host signs
    /// this plugin's outbound HTTP requests (the plugin never sees the secret).
    #[serde(default)]
    pub http_signing_secret_env: Option<String>,
    /// Whether the host may sign requests over plain `http://` (off: signed requests go over
    /// `https://` only, so the signature and body are not readable on the way).
    #[serde(default)]
    pub http_signing_allow_plain_http: bool,
}

/// `[plugins.NAME]`: one WebAssembly plugin, its limits, config and grants.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSpec {
    /// The `.wasm` file, a relative path of plain names inside the plugin directory (default
    /// `NAME.wasm`).
    #[serde(default)]
    pub file: Option<String>,
    /// Fuel per call (roughly WebAssembly instructions); a runaway loop ends as an error.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// Linear memory cap per call, in MiB.
    #[serde(default)]
    pub memory_mb: Option<u64>,
    /// Wall-clock limit per call, in milliseconds: computing and waiting (sleeps, host calls,
    /// the wait for a call slot) alike.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Calls of this plugin running at once (1 to 32, default 16); more wait for a slot, and
    /// the wait counts against their `timeout_ms`.
    #[serde(default)]
    pub max_concurrency: Option<u64>,
    /// Free-form config handed to the plugin as JSON on every call.
    #[serde(default)]
    pub config: Option<toml::Value>,
    /// Router plugins only: hand each event's `payload` and `headers` to the plugin (default
    /// false: a router receives them as empty strings, and every other field of the event).
    /// Content-based routers set it; routing by type alone does not pay for copying payloads
    /// into the guest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub router_payload: bool,
    /// Router plugins only: the plugin's answer for an event depends on its event type (and the
    /// plugin's config) alone, never on its id, version, tenant, dispatch key or time. The
    /// dispatcher then asks it once per event type for each loaded version of the plugin and
    /// its config (a hot reload of either asks again) and reuses the answer for every later event
    /// of that type, up to a bounded number of types (see `plugin::remembered_routes`). A
    /// router that looks at anything else must leave it off; it cannot be set with
    /// `router_payload`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub router_by_type: bool,
    /// The SHA-256 of the only file this plugin may load (64 hex digits, as `outbox plugins
    /// check` prints it): a file with another digest is refused, at start-up and on every hot
    /// reload, and the serving version (if any) is kept. Unset: any file that loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<Sha256Pin>,
    /// Capabilities this plugin may use.
    #[serde(default)]
    pub grants: Grants,
    /// Handler plugins only: bytes of kv keys and values the plugin may hold at once (1 to
    /// 1 GiB, default 16 MiB; see `capability::kv`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_max_bytes: Option<KvMaxBytes>,
    /// Handler plugins only: the event versions this handler supports, as a list for every
    /// event type (`[1, 2]`) or per type (`{ "mail.welcome" = [2, 3], "*" = [1] }`: a type not
    /// listed falls back to `"*"`, and without `"*"` to every version). An entry of another
    /// version is acknowledged without running the handler and receipted
    /// `skipped_unsupported_version` (not retried, not a failure). Unset: every version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_versions: Option<SupportedVersions>,
    /// Hooks this plugin subscribes to: a `plugin.invoke.<this plugin>` job for hook `<hook>`
    /// (fanned out from a `plugin.hook.<hook>` event) runs it only when `<hook>` is listed here;
    /// any other job naming it is dead-lettered unrun.
    #[serde(default)]
    pub hooks: Vec<String>,
}

/// A plugin file's pinned SHA-256 (`sha256` of `[plugins.NAME]`): 64 hexadecimal digits, kept
/// in lowercase as the host prints digests.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Sha256Pin(String);

impl Sha256Pin {
    /// The digest, 64 lowercase hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Sha256Pin {
    type Error = String;

    fn try_from(digest: String) -> Result<Self, String> {
        if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(digest.to_ascii_lowercase()))
        } else {
            let shown: String = digest.chars().take(80).collect();
            Err(format!(
                "sha256 = {shown:?}: not a SHA-256 digest (64 hexadecimal digits, as `outbox plugins check FILE` prints it)"
            ))
        }
    }
}

impl From<Sha256Pin> for String {
    fn from(pin: Sha256Pin) -> Self {
        pin.0
    }
}

impl std::fmt::Display for Sha256Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The event versions a handler plugin supports (`supported_versions` of `[plugins.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SupportedVersions {
    /// The same versions for every event type.
    All(Vec<i32>),
    /// Event type (or `"*"` for the others) -> versions.
    ByType(BTreeMap<String, Vec<i32>>),
}

impl SupportedVersions {
    /// The versions declared for `event_type` (`None`: every version).
    fn for_type(&self, event_type: &str) -> Option<&[i32]> {
        match self {
            Self::All(versions) => Some(versions),
            Self::ByType(map) => map
                .get(event_type)
                .or_else(|| map.get("*"))
                .map(Vec::as_slice),
        }
    }

    /// Whether a handler declaring these versions runs `event_type` at `version`.
    pub fn supports(&self, event_type: &str, version: i32) -> bool {
        self.for_type(event_type)
            .is_none_or(|versions| versions.contains(&version))
    }

    /// The versions declared for `event_type`, as `v1, v2` (or `every version`).
    pub fn describe_for(&self, event_type: &str) -> String {
        match self.for_type(event_type) {
            Some(versions) => versions
                .iter()
                .map(|v| format!("v{v}"))
                .collect::<Vec<_>>()
                .join(", "),
            None => "every version".into(),
        }
    }

    /// The declaration's rules: non-empty lists of versions >= 1, keys that are event types
    /// or `"*"`.
    pub(super) fn check(&self) -> Result<(), String> {
        let check_list = |what: &str, versions: &[i32]| {
            if versions.is_empty() {
                return Err(format!("{what} lists no version"));
            }
            match versions.iter().find(|v| **v < 1) {
                Some(v) => Err(format!("{what}: version {v} must be >= 1")),
                None => Ok(()),
            }
        };
        match self {
            Self::All(versions) => check_list("supported_versions", versions),
            Self::ByType(map) => {
                if map.is_empty() {
                    return Err("supported_versions names no event type".into());
                }
                for (event_type, versions) in map {
                    if event_type != "*" {
                        validate_event_type(event_type)
                            .map_err(|e| format!("supported_versions: {e}"))?;
                    }
                    check_list(&format!("supported_versions.{event_type:?}"), versions)?;
                }
                Ok(())
            }
        }
    }
}
