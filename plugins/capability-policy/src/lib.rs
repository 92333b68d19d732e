//! `capability-policy`: the default capability policy. The host asks it before every host call a
//! plugin makes and passes the calling plugin's grants from `routes.toml`.
//!
//! Grants (per calling plugin, JSON; every field optional):
//!
//! ```json
//! { "publish": ["workflow.", "plugin.invoke."], "publish_tenants": ["acme"], "kv": true,
//!   "http": ["api.example.com", "hooks.example.com:8443"] }
//! ```
//!
//! Rules:
//! - `log` is always allowed;
//! - `publish` is allowed when the event type (the target) starts with one of the `publish`
//!   prefixes;
//! - `publish-tenant` (asked by the host only when a handler publishes into another tenant than
//!   its event's; the target is that tenant) is allowed when `publish_tenants` lists the tenant
//!   or `"*"`;
//! - `kv` is allowed when `kv` is `true`;
//! - `http` is allowed when the target (`host`, or `host:port` for a port that is not the
//!   scheme's default) equals a granted entry (host names compare case-insensitively); an entry
//!   without a port allows only the default ports, and an entry with port 80 or 443 also matches
//!   the bare host (the host then checks the port against the URL's scheme, and refuses
//!   non-public addresses the grants do not name as IPs);
//! - anything else (unknown capability, unreadable grants) is denied.
//!
//! Every denial says which plugin, what it tried and what it was granted, e.g.
//! `plugin 'x' may not publish 'billing.charge' (granted prefixes: workflow.)`.
//!
//! Config (the policy's own): `{}`, or `{"deny_all": true}` to deny every `publish`, `kv` and
//! `http` call whatever the grants (logging stays allowed: the WIT contract grants it to every
//! plugin).

use outbox_plugin_sdk::policy::{CapabilityRequest, Decision, Policy};
use outbox_plugin_sdk::Config;
use serde::Deserialize;

/// The policy's own config.
#[derive(Deserialize)]
struct PolicyConfig {
    /// Deny every call except logging.
    #[serde(default)]
    deny_all: bool,
}

/// One plugin's grants.
#[derive(Deserialize)]
struct Grants {
    /// Event type prefixes the plugin may publish.
    #[serde(default)]
    publish: Vec<String>,
    /// Tenants the plugin may publish into besides its event's own (`*`: any).
    #[serde(default)]
    publish_tenants: Vec<String>,
    /// Whether the plugin may use the key-value store.
    #[serde(default)]
    kv: bool,
    /// Hosts (`host` or `host:port`) the plugin may call.
    #[serde(default)]
    http: Vec<String>,
}

/// Split `host:port` into its parts; `[v6]:port` keeps the brackets in the host. A bare IPv6
/// address (several colons, no brackets) is all host.
fn split_host_port(target: &str) -> (&str, Option<&str>) {
    if target.starts_with('[') {
        return match target.find(']') {
            Some(end) => {
                let (host, rest) = target.split_at(end + 1);
                (host, rest.strip_prefix(':'))
            }
            None => (target, None),
        };
    }
    match target.split_once(':') {
        Some((host, port)) if !port.contains(':') => (host, Some(port)),
        _ => (target, None),
    }
}

/// Whether a granted `host` / `host:port` entry allows calling `target`: the same host and
/// port; a target without a port is on the scheme's default port, which an entry without a port
/// or with port 80 or 443 names.
fn http_grant_allows(grant: &str, target: &str) -> bool {
    if grant.eq_ignore_ascii_case(target) {
        return true;
    }
    let (grant_host, grant_port) = split_host_port(grant);
    let (target_host, target_port) = split_host_port(target);
    grant_host.eq_ignore_ascii_case(target_host)
        && target_port.is_none()
        && matches!(grant_port, Some("80" | "443"))
}

/// `a, b, c`, or `none` for an empty list.
fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// Decide one request against the grants.
fn decide(config: &PolicyConfig, request: &CapabilityRequest) -> Decision {
    let CapabilityRequest {
        plugin,
        capability,
        target,
        ..
    } = request;
    if capability == "log" {
        return Decision::Allow;
    }
    if config.deny_all {
        return Decision::Deny(format!(
            "plugin '{plugin}' may not use {capability}: the capability policy denies all calls (deny_all)"
        ));
    }
    let grants: Grants = match request.grants() {
        Ok(grants) => grants,
        Err(e) => {
            return Decision::Deny(format!(
                "plugin '{plugin}' may not use {capability}: its grants are not readable ({e})"
            ))
        }
    };
    match capability.as_str() {
        "publish"
            if grants
                .publish
                .iter()
                .any(|p| target.starts_with(p.as_str())) =>
        {
            Decision::Allow
        }
        "publish" => Decision::Deny(format!(
            "plugin '{plugin}' may not publish '{target}' (granted prefixes: {})",
            list(&grants.publish)
        )),
        "publish-tenant"
            if grants
                .publish_tenants
                .iter()
                .any(|t| t == "*" || t == target) =>
        {
            Decision::Allow
        }
        "publish-tenant" => Decision::Deny(format!(
            "plugin '{plugin}' may not publish into tenant '{target}': a handler publishes into its own event's tenant only, unless publish_tenants grants others (granted tenants: {})",
            list(&grants.publish_tenants)
        )),
        "kv" if grants.kv => Decision::Allow,
        "kv" => Decision::Deny(format!(
            "plugin '{plugin}' may not use kv (key '{target}'): kv is not granted"
        )),
        "http" if grants.http.iter().any(|g| http_grant_allows(g, target)) => Decision::Allow,
        "http" => Decision::Deny(format!(
            "plugin '{plugin}' may not call http host '{target}' (granted hosts: {})",
            list(&grants.http)
        )),
        other => Decision::Deny(format!(
            "plugin '{plugin}' asked for unknown capability '{other}'"
        )),
    }
}

/// The exported policy.
struct CapabilityPolicy;

impl Policy for CapabilityPolicy {
    fn check(config: &Config, request: CapabilityRequest) -> Decision {
        match config.parse::<PolicyConfig>() {
            Ok(config) => decide(&config, &request),
            Err(e) => Decision::Deny(format!("capability-policy: {e}")),
        }
    }
}

outbox_plugin_sdk::export_policy!(CapabilityPolicy);

#[cfg(test)]
mod tests {
    use super::*;

    const GRANTS: &str = r#"{"publish": ["workflow.", "plugin.invoke."], "publish_tenants": ["acme"], "kv": true, "http": ["api.example.com", "localhost:8080", "secure.example.com:443"]}"#;

    fn check(capability: &str, target: &str, grants: &str) -> Decision {
        let request = CapabilityRequest {
            plugin: "x".into(),
            capability: capability.into(),
            target: target.into(),
            grants: grants.into(),
        };
        CapabilityPolicy::check(&Config::new("{}"), request)
    }

    #[test]
    fn log_is_always_allowed() {
        assert_eq!(check("log", "", "{}"), Decision::Allow);
        assert_eq!(check("log", "", "not json"), Decision::Allow);
    }

    #[test]
    fn publish_needs_a_matching_prefix() {
        assert_eq!(
            check("publish", "workflow.execution.requested", GRANTS),
            Decision::Allow
        );
        assert_eq!(
            check("publish", "billing.charge", r#"{"publish": ["workflow."]}"#),
            Decision::Deny(
                "plugin 'x' may not publish 'billing.charge' (granted prefixes: workflow.)".into()
            )
        );
        assert_eq!(
            check("publish", "billing.charge", "{}"),
            Decision::Deny(
                "plugin 'x' may not publish 'billing.charge' (granted prefixes: none)".into()
            )
        );
    }

    #[test]
    fn kv_needs_the_flag() {
        assert_eq!(check("kv", "k", GRANTS), Decision::Allow);
        assert_eq!(
            check("kv", "k", r#"{"kv": false}"#),
            Decision::Deny("plugin 'x' may not use kv (key 'k'): kv is not granted".into())
        );
    }

    #[test]
    fn http_matches_host_or_host_and_port() {
        assert_eq!(check("http", "api.example.com", GRANTS), Decision::Allow);
        assert_eq!(check("http", "API.example.com", GRANTS), Decision::Allow);
        // A grant without a port names the default ports only (the target then has no port).
        assert!(matches!(
            check("http", "api.example.com:8443", GRANTS),
            Decision::Deny(_)
        ));
        assert!(matches!(
            check("http", "api.example.com:443", GRANTS),
            Decision::Deny(_)
        ));
        assert_eq!(check("http", "secure.example.com", GRANTS), Decision::Allow);
        assert_eq!(check("http", "localhost:8080", GRANTS), Decision::Allow);
        assert!(matches!(
            check("http", "localhost:9090", GRANTS),
            Decision::Deny(_)
        ));
        assert!(matches!(
            check("http", "localhost", GRANTS),
            Decision::Deny(_)
        ));
        assert_eq!(
            check("http", "example.com", GRANTS),
            Decision::Deny(
                "plugin 'x' may not call http host 'example.com' (granted hosts: api.example.com, localhost:8080, secure.example.com:443)"
                    .into()
            )
        );
        assert_eq!(
            check("http", "[::1]", r#"{"http": ["[::1]"]}"#),
            Decision::Allow
        );
        assert!(matches!(
            check("http", "[::1]:8080", r#"{"http": ["[::1]"]}"#),
            Decision::Deny(_)
        ));
    }

    #[test]
    fn other_tenants_need_a_tenant_grant() {
        assert_eq!(check("publish-tenant", "acme", GRANTS), Decision::Allow);
        assert_eq!(
            check("publish-tenant", "globex", GRANTS),
            Decision::Deny(
                "plugin 'x' may not publish into tenant 'globex': a handler publishes into its own event's tenant only, unless publish_tenants grants others (granted tenants: acme)"
                    .into()
            )
        );
        assert!(matches!(
            check("publish-tenant", "acme", r#"{"publish": ["workflow."]}"#),
            Decision::Deny(_)
        ));
        assert_eq!(
            check("publish-tenant", "anyone", r#"{"publish_tenants": ["*"]}"#),
            Decision::Allow
        );
    }

    #[test]
    fn unknown_capabilities_and_bad_grants_are_denied() {
        assert!(matches!(
            check("files", "/etc/passwd", GRANTS),
            Decision::Deny(_)
        ));
        assert!(matches!(check("kv", "k", "[1]"), Decision::Deny(_)));
    }

    #[test]
    fn deny_all_keeps_logging() {
        let request = |capability: &str| CapabilityRequest {
            plugin: "x".into(),
            capability: capability.into(),
            target: "workflow.x".into(),
            grants: GRANTS.into(),
        };
        let config = Config::new(r#"{"deny_all": true}"#);
        assert_eq!(
            CapabilityPolicy::check(&config, request("log")),
            Decision::Allow
        );
        assert!(matches!(
            CapabilityPolicy::check(&config, request("publish")),
            Decision::Deny(_)
        ));
    }
}
