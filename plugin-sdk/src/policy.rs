//! The `policy` world: decide whether a plugin may make one host call.
//!
//! The host asks the policy component before every `publish`, `kv` and `http` call a plugin makes
//! (and `log`, which the default policy always allows). Implement [`Policy`] and export it with
//! [`export_policy!`](crate::export_policy).

use serde::de::DeserializeOwned;

use crate::bindings::policy::exports::outbox::plugin::policy_api::{
    CapabilityRequest as WitRequest, Decision as WitDecision, Guest,
};
use crate::Config;

/// One capability check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityRequest {
    /// Name of the plugin making the call.
    pub plugin: String,
    /// `log`, `publish`, `publish-tenant`, `kv` or `http`.
    pub capability: String,
    /// What the call touches: the event type for `publish`, the tenant for `publish-tenant`
    /// (asked only when a handler publishes into another tenant than its event's), the key for
    /// `kv`, the host (with `:port` when not the scheme's default) for `http`, empty for `log`.
    /// At most 1024 bytes (longer requests fail before any policy runs).
    pub target: String,
    /// The calling plugin's grants from `routes.toml`, as JSON text.
    pub grants: String,
}

impl CapabilityRequest {
    /// The grants deserialized into `T`. Empty grants read as `{}`.
    pub fn grants<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        let json = if self.grants.trim().is_empty() {
            "{}"
        } else {
            self.grants.as_str()
        };
        serde_json::from_str(json)
    }
}

/// The answer to a [`CapabilityRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The call may go ahead.
    Allow,
    /// Refuse, with a reason the calling plugin and the audit log will see.
    Deny(String),
}

/// A capability policy plugin.
pub trait Policy {
    /// Decide one capability check. `config` is the policy plugin's own config.
    fn check(config: &Config, request: CapabilityRequest) -> Decision;
}

/// Adapts a [`Policy`] to the generated `policy-api` export. Used by [`export_policy!`](crate::export_policy).
#[doc(hidden)]
pub struct PolicyExport<P>(std::marker::PhantomData<P>);

impl<P: Policy> Guest for PolicyExport<P> {
    fn check(config: String, request: WitRequest) -> WitDecision {
        let request = CapabilityRequest {
            plugin: request.plugin,
            capability: request.capability,
            target: request.target,
            grants: request.grants,
        };
        match P::check(&Config::new(config), request) {
            Decision::Allow => WitDecision::Allow,
            Decision::Deny(reason) => WitDecision::Deny(reason),
        }
    }
}

/// Export a [`Policy`] implementation as this component's `policy-api`.
///
/// ```no_run
/// use outbox_plugin_sdk::{policy::{CapabilityRequest, Decision, Policy}, Config};
///
/// struct LogOnly;
///
/// impl Policy for LogOnly {
///     fn check(_config: &Config, request: CapabilityRequest) -> Decision {
///         match request.capability.as_str() {
///             "log" => Decision::Allow,
///             other => Decision::Deny(format!("only logging is allowed, not '{other}'")),
///         }
///     }
/// }
///
/// outbox_plugin_sdk::export_policy!(LogOnly);
/// ```
#[macro_export]
macro_rules! export_policy {
    ($policy:ty) => {
        const _: () = {
            type __OutboxPolicyExport = $crate::policy::PolicyExport<$policy>;
            $crate::__private::policy::__export_policy_world!(
                __OutboxPolicyExport with_types_in $crate::__private::policy
            );
        };
    };
}
