//! TEST ONLY: a capability policy built against the previous contract, `outbox:plugin@0.1.0`
//! (frozen in `plugin-sdk/wit/0.1`), with plain wit-bindgen. Allows every capability but
//! `http`, which it denies with `legacy policy: no http for <plugin>`. Config: none.

// The generated bindings carry no docs of their own.
#![allow(missing_docs)]

wit_bindgen::generate!({ path: "../../../plugin-sdk/wit/0.1", world: "policy" });

use exports::outbox::plugin::policy_api::{CapabilityRequest, Decision, Guest};

/// The exported policy.
struct LegacyPolicy;

impl Guest for LegacyPolicy {
    fn check(_config: String, request: CapabilityRequest) -> Decision {
        if request.capability == "http" {
            Decision::Deny(format!("legacy policy: no http for {}", request.plugin))
        } else {
            Decision::Allow
        }
    }
}

export!(LegacyPolicy);
