//! TEST ONLY: a careless capability policy that allows every call of every plugin. The host's
//! tests run under it to show what the host refuses on its own whatever the policy says
//! (non-public addresses the grants do not name, ports the grants do not list). Never deploy
//! it. Config: none.

use outbox_plugin_sdk::policy::{CapabilityRequest, Decision, Policy};
use outbox_plugin_sdk::Config;

/// The exported policy.
struct AllowAll;

impl Policy for AllowAll {
    fn check(_config: &Config, _request: CapabilityRequest) -> Decision {
        Decision::Allow
    }
}

outbox_plugin_sdk::export_policy!(AllowAll);
