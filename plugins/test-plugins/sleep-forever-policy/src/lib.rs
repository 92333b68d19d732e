//! TEST ONLY: a capability policy whose `check` sleeps for `u64::MAX` nanoseconds through WASI's
//! monotonic clock: only a time limit that covers waiting ends it (and the host then denies,
//! failing closed). Config: none.

use std::time::Duration;

use outbox_plugin_sdk::policy::{CapabilityRequest, Decision, Policy};
use outbox_plugin_sdk::Config;

/// The exported policy.
struct SleepForeverPolicy;

impl Policy for SleepForeverPolicy {
    fn check(_config: &Config, _request: CapabilityRequest) -> Decision {
        std::thread::sleep(Duration::from_nanos(u64::MAX));
        Decision::Allow
    }
}

outbox_plugin_sdk::export_policy!(SleepForeverPolicy);
