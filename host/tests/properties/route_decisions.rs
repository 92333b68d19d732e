//! What a router answers: only a valid list of queues is acted on, and its reasons are bounded.

use outbox_host::plugin::MAX_REASON_BYTES;
use outbox_host::routing::RouteDecision;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use crate::{cases, huge_string, is_routable_queue_list, queue_name_like, QUEUES_PER_EVENT_MAX};

/// A queue list as a router might answer: valid names, repeats, invalid names, too many.
fn router_answer() -> impl Strategy<Value = Vec<String>> {
    let queue = || {
        prop_oneof![
            2 => select(vec!["outbox.mail", "outbox.audit", "a"]).prop_map(String::from),
            3 => queue_name_like(),
        ]
    };
    prop_oneof![
        4 => vec(queue(), 0..6),
        1 => vec(queue(), QUEUES_PER_EVENT_MAX - 2..=QUEUES_PER_EVENT_MAX + 3),
        1 => (QUEUES_PER_EVENT_MAX - 1..=QUEUES_PER_EVENT_MAX + 1)
            .prop_map(|n| (0..n).map(|i| format!("q{i}")).collect()),
    ]
}

proptest! {
    #![proptest_config(cases(256))]

    /// 5. A router answer is accepted exactly when it holds 1 to 32 valid queue names, none
    /// twice, and comes back unchanged; a refused one is an error naming the router.
    #[test]
    fn route_decision_checked_follows_the_rules(
        queues in router_answer(),
        router in prop_oneof!["[a-z-]{1,16}", ".{0,16}"],
    ) {
        let checked = RouteDecision::Queues(queues.clone()).checked(&router);
        if is_routable_queue_list(&queues) {
            prop_assert_eq!(checked, RouteDecision::Queues(queues));
        } else {
            match checked {
                RouteDecision::Error(message) => {
                    let prefix = format!("router {router} returned ");
                    prop_assert!(message.starts_with(&prefix), "{message:?}");
                }
                other => prop_assert!(false, "{queues:?} passed as {other:?}"),
            }
        }
    }

    /// 5. Reasons a router gives are bounded and free of control characters.
    #[test]
    fn route_decision_reasons_are_bounded(
        reason in prop_oneof![any::<String>(), huge_string()],
        no_route in any::<bool>(),
    ) {
        let decision = if no_route {
            RouteDecision::NoRoute(reason.clone())
        } else {
            RouteDecision::Error(reason.clone())
        };
        let (RouteDecision::NoRoute(kept) | RouteDecision::Error(kept)) = decision.checked("r") else {
            return Err(TestCaseError::fail("a reason became a queue list"));
        };
        prop_assert!(kept.len() <= MAX_REASON_BYTES, "{} bytes kept", kept.len());
        prop_assert!(!kept.chars().any(char::is_control));
        if reason.len() <= MAX_REASON_BYTES && !reason.chars().any(char::is_control) {
            prop_assert_eq!(kept, reason);
        }
    }
}
