//! What a denial leaves behind: the rate limit of denial reports and the
//! `plugin.capability-use.denied` event a denial is recorded as.
//!
//! Owns [`DenialLimiter`] (per plugin and capability, at most one report per
//! [`DENIAL_REPORT_WINDOW`], the rest counted into the next), the denial event and its
//! idempotent dispatch key. It never writes anything itself (the receiver's denial sink inserts
//! the event) and never lets the number of distinct targets a plugin asks about grow host
//! memory or the audit trail.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::{
    capability_label, DENIAL_REPORT_WINDOW, DENIED_EVENT_TYPE, MAX_AUDIT_TARGET,
    MAX_DENIAL_REASON_BYTES,
};
use crate::capability::clip;
use crate::capability::publish::{bounded_dispatch_key, child_headers, ParentEvent};
use crate::publish::NewEvent;

/// Rate limit of denial reports (audit log lines, denial events): per (plugin, capability), the
/// first denial of a window is reported, the others are only counted; the next report carries
/// that count. Holds one small slot per (plugin, capability), cleared when over a bound.
pub(crate) struct DenialLimiter {
    window: Duration,
    slots: Mutex<HashMap<(Box<str>, &'static str), Slot>>,
}

struct Slot {
    opened: Instant,
    suppressed: u64,
}

/// Slots a [`DenialLimiter`] keeps at most (plugins x capabilities; cleared when full).
const MAX_LIMITER_SLOTS: usize = 4096;

impl DenialLimiter {
    /// A limiter reporting at most one denial per (plugin, capability) per `window`.
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            slots: Mutex::default(),
        }
    }

    /// Whether to report a denial of `capability` to `plugin` at `now`: `Some(n)` with the
    /// number of denials suppressed since the previous report, `None` to suppress this one.
    pub(crate) fn admit(&self, plugin: &str, capability: &str, now: Instant) -> Option<u64> {
        let Ok(mut slots) = self.slots.lock() else {
            return Some(0);
        };
        let key = (Box::from(plugin), capability_label(capability));
        match slots.get_mut(&key) {
            Some(slot) if now.saturating_duration_since(slot.opened) < self.window => {
                slot.suppressed += 1;
                None
            }
            Some(slot) => {
                let suppressed = slot.suppressed;
                *slot = Slot {
                    opened: now,
                    suppressed: 0,
                };
                Some(suppressed)
            }
            None => {
                if slots.len() >= MAX_LIMITER_SLOTS {
                    slots.clear();
                }
                slots.insert(
                    key,
                    Slot {
                        opened: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
        }
    }
}

/// Dispatch key of the denial event for one (parent, handler, capability, target). A target
/// outside the key charset (printable ASCII without spaces) is replaced by its SHA-256, so the
/// key follows the same rule as every producer's.
pub fn denial_dispatch_key(
    parent_id: i64,
    handler: &str,
    capability: &str,
    target: &str,
) -> String {
    let target = if target.bytes().all(|b| b.is_ascii_graphic()) {
        target.to_string()
    } else {
        format!("sha256:{}", hex::encode(Sha256::digest(target.as_bytes())))
    };
    bounded_dispatch_key(format!(
        "denied:{parent_id}:{handler}:{capability}:{target}"
    ))
}

/// One denial to record as an event.
pub(crate) struct Denial<'a> {
    /// The plugin that was refused.
    pub(crate) plugin: &'a str,
    /// The capability it asked for.
    pub(crate) capability: &'a str,
    /// What it asked about.
    pub(crate) target: &'a str,
    /// The policy's reason.
    pub(crate) reason: &'a str,
    /// Denials of this plugin and capability not published since the previous event.
    pub(crate) suppressed_before: u64,
}

/// The `plugin.capability-use.denied` event of one denial (idempotent per parent, handler,
/// capability and target), a child of `parent`. `suppressed_before` in the payload counts the
/// denials of the same plugin and capability that were rate-limited since the previous event
/// ([`DENIAL_REPORT_WINDOW`]).
pub(crate) fn denial_event(denial: &Denial<'_>, parent: &ParentEvent, handler: &str) -> NewEvent {
    let Denial {
        plugin,
        capability,
        target,
        reason,
        suppressed_before,
    } = *denial;
    let payload = serde_json::json!({
        "plugin": plugin,
        "capability": capability,
        "target": clip(target, MAX_AUDIT_TARGET),
        "reason": clip(reason, MAX_DENIAL_REASON_BYTES),
        "parent_event_id": parent.id,
        "handler": handler,
        "suppressed_before": suppressed_before,
        "report_window_seconds": DENIAL_REPORT_WINDOW.as_secs(),
    });
    let key = denial_dispatch_key(parent.id, handler, capability, target);
    let mut event = NewEvent::new(DENIED_EVENT_TYPE, payload)
        .with_dispatch_key(key)
        .with_headers(child_headers(parent, handler, None));
    event.tenant_id = parent.tenant_id.clone();
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denial_reports_are_limited_per_plugin_and_capability() {
        let limiter = DenialLimiter::new(Duration::from_secs(60));
        let t0 = Instant::now();
        assert_eq!(limiter.admit("p", "kv", t0), Some(0));
        for _ in 0..1000 {
            assert_eq!(limiter.admit("p", "kv", t0 + Duration::from_secs(1)), None);
        }
        assert_eq!(limiter.admit("p", "http", t0), Some(0), "per capability");
        assert_eq!(limiter.admit("q", "kv", t0), Some(0), "per plugin");
        // The next window reports again, with the count left out.
        assert_eq!(
            limiter.admit("p", "kv", t0 + Duration::from_secs(61)),
            Some(1000)
        );
        assert_eq!(limiter.admit("p", "kv", t0 + Duration::from_secs(62)), None);
    }
}
