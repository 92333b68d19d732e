//! Unit tests of the publish capability's checks: dispatch keys, tenants, the budget, headers,
//! sizes and generations.

use super::*;
use crate::capability::policy::denial_dispatch_key;

#[test]
fn dispatch_keys_are_deterministic_and_bounded() {
    assert_eq!(
        child_dispatch_key(42, "workflow-trigger", 0),
        "child:42:workflow-trigger:0"
    );
    assert_eq!(denial_dispatch_key(42, "h", "kv", "k"), "denied:42:h:kv:k");
    let long = "k".repeat(2000);
    let a = denial_dispatch_key(42, "h", "kv", &long);
    let b = denial_dispatch_key(42, "h", "kv", &format!("{long}x"));
    assert!(a.len() <= 512 && b.len() <= 512, "{}", a.len());
    assert_ne!(a, b);
    assert_eq!(a, denial_dispatch_key(42, "h", "kv", &long));
    let spaced = denial_dispatch_key(42, "h", "kv", "a key\n");
    assert!(spaced.starts_with("denied:42:h:kv:sha256:"), "{spaced}");
    assert!(spaced.bytes().all(|b| b.is_ascii_graphic()), "{spaced}");
}

#[test]
fn children_stay_in_the_parents_tenant_unless_checked() {
    assert_eq!(child_tenant(Some("acme"), None), Ok(TenantCheck::Parent));
    assert_eq!(
        child_tenant(Some("acme"), Some("acme")),
        Ok(TenantCheck::Parent)
    );
    assert_eq!(child_tenant(None, None), Ok(TenantCheck::Parent));
    assert_eq!(
        child_tenant(Some("acme"), Some("globex")),
        Ok(TenantCheck::Other("globex".into()))
    );
    assert_eq!(
        child_tenant(None, Some("acme")),
        Ok(TenantCheck::Other("acme".into()))
    );
    assert!(child_tenant(Some("acme"), Some("")).is_err());
    assert!(child_tenant(None, Some(&"t".repeat(MAX_TENANT_BYTES + 1))).is_err());
}

#[test]
fn the_publish_budget_ends_at_the_limit() {
    assert!(check_budget(0).is_ok());
    assert!(check_budget(MAX_PUBLISH_CALLS_PER_DELIVERY - 1).is_ok());
    let err = check_budget(MAX_PUBLISH_CALLS_PER_DELIVERY).unwrap_err();
    assert!(err.contains("at most 1000 events"), "{err}");
    assert!(check_budget(u32::MAX).is_err());
}

#[test]
fn child_headers_keep_the_parent_and_cannot_forge_causation() {
    let mut headers = serde_json::json!({"traceparent": "00-abc", "x": 1})
        .as_object()
        .unwrap()
        .clone();
    let extra = serde_json::json!({"x": 2, "parent_event_id": 999, "causation_handler": "evil"})
        .as_object()
        .cloned();
    merge_headers(&mut headers, extra, 7, "h");
    assert_eq!(
        serde_json::Value::Object(headers),
        serde_json::json!({"traceparent": "00-abc", "x": 2, "parent_event_id": 7, "causation_handler": "h"})
    );
}

/// Allows every call, counting them.
#[derive(Default)]
struct AllowAll(std::sync::atomic::AtomicU32);

impl AllowAll {
    fn asked(&self) -> u32 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl AskPolicy for AllowAll {
    fn ask(
        &self,
        _capability: &'static str,
        _target: &str,
    ) -> impl std::future::Future<Output = Result<(), HostCallError>> + Send {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::ready(Ok(()))
    }
}

fn parent() -> ParentEvent {
    ParentEvent {
        id: 7,
        event_type: "loop.ping".into(),
        tenant_id: None,
        headers: "{}".into(),
        generation: 0,
    }
}

fn rules(max_payload_bytes: usize) -> ChildRules {
    ChildRules {
        handler: "h".into(),
        run_key: "h".into(),
        max_payload_bytes,
        max_generation: 8,
    }
}

fn new_event(payload: String, headers: Option<String>) -> wit_publish::NewEvent {
    wit_publish::NewEvent {
        event_type: "loop.ping".into(),
        payload,
        tenant_id: None,
        headers,
    }
}

fn failure(result: Result<PreparedChild, HostCallError>) -> String {
    match result {
        Err(HostCallError::Failed(message)) => message,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test]
async fn oversized_payload_and_headers_texts_are_refused_by_size_before_they_are_parsed() {
    let limit = 1024;
    let policy = AllowAll::default();
    // Too long and not JSON either: the size is what is reported.
    let not_json = "{".repeat(limit + 1);
    let error = failure(
        Children::default()
            .prepare(&parent(), &rules(limit), new_event(not_json, None), &policy)
            .await,
    );
    assert!(
        error.contains("is 1025 bytes, over the limit of 1024 bytes"),
        "{error}"
    );
    let headers = "[".repeat(MAX_CHILD_HEADERS_BYTES + 1);
    let error = failure(
        Children::default()
            .prepare(
                &parent(),
                &rules(limit),
                new_event("{}".into(), Some(headers)),
                &policy,
            )
            .await,
    );
    assert!(
        error.contains(&format!(
            "headers of loop.ping are {} bytes, over the limit of {MAX_CHILD_HEADERS_BYTES} bytes",
            MAX_CHILD_HEADERS_BYTES + 1
        )),
        "{error}"
    );
    assert_eq!(policy.asked(), 0, "refused before the policy was asked");
    // Within the bounds the same texts are parsed, and refused as what they are.
    let error = failure(
        Children::default()
            .prepare(
                &parent(),
                &rules(limit),
                new_event("{".repeat(limit), None),
                &policy,
            )
            .await,
    );
    assert!(error.contains("is not valid JSON"), "{error}");
}

#[tokio::test]
async fn a_child_is_one_generation_deeper_and_refused_past_the_limit() {
    let policy = AllowAll::default();
    let mut children = Children::default();
    let child = children
        .prepare(
            &parent().with_generation(7),
            &rules(1024),
            new_event("{}".into(), None),
            &policy,
        )
        .await
        .unwrap();
    assert_eq!(child.generation, 8);
    assert_eq!(child.event.dispatch_key.as_deref(), Some("child:7:h:0"));
    assert_eq!(
        children
            .published_handle()
            .lock()
            .unwrap()
            .generation_refused,
        None
    );

    let error = failure(
        children
            .prepare(
                &parent().with_generation(8),
                &rules(1024),
                new_event("{}".into(), None),
                &policy,
            )
            .await,
    );
    for needle in [
        "refused loop.ping: event 7 is generation 8",
        "OUTBOX_MAX_EVENT_GENERATION = 8",
    ] {
        assert!(error.contains(needle), "{needle:?} in {error}");
    }
    assert_eq!(
        children
            .published_handle()
            .lock()
            .unwrap()
            .generation_refused,
        Some(error),
        "kept for the receiver to dead-letter the delivery"
    );
    assert_eq!(
        policy.asked(),
        1,
        "the refused call never reached the policy"
    );
    // A generation the host never stores (negative) counts as 0.
    assert_eq!(
        child_generation(&parent().with_generation(-3), "a.b", 8),
        Ok(1)
    );
}

#[test]
fn one_handlers_runs_on_two_queues_of_a_cluster_key_their_children_apart() {
    use crate::queue::KeyLayout;
    assert_eq!(
        run_key("hook-probe", "outbox.a", KeyLayout::Classic),
        "hook-probe"
    );
    let a = run_key("hook-probe", "outbox.a", KeyLayout::Slotted);
    let b = run_key("hook-probe", "outbox.b", KeyLayout::Slotted);
    assert_eq!(a, "hook-probe@outbox.a");
    assert_eq!(
        child_dispatch_key(42, &a, 0),
        "child:42:hook-probe@outbox.a:0"
    );
    assert_ne!(child_dispatch_key(42, &a, 0), child_dispatch_key(42, &b, 0));
}
