//! The seam between the capabilities and their backends: the same checks and the same policy
//! refuse the same calls whether a receiver's backends (Redis, PostgreSQL, reqwest) or an
//! offline call's (memory, recorder, fixtures) stand behind them, and a refused call reaches
//! neither.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::offline::{OfflineCall, OfflineHost};
use super::publish::ParentEvent;
use super::services::DeliveryServices;
use super::{clip, kv, CapabilityPolicy, HandlerHost};
use crate::config::PluginSpec;
use crate::plugin::bindings::handler_world::outbox::plugin::{
    http as wit_http, publish as wit_publish,
};
use crate::plugin::engine::HandlerServices;
use crate::plugin::{PluginEngine, PluginRegistry};
use crate::queue::QueueKeys;

#[test]
fn clip_cuts_at_char_boundaries() {
    assert_eq!(clip("héllo", 2), "h");
    assert_eq!(clip("abc", 10), "abc");
}

/// The plugin of these tests: kv with a byte quota of 64, one http host, children of `probe.`.
const SPEC: &str = r#"
kv_max_bytes = 64
grants = { kv = true, http = ["api.example.com"], publish = ["probe."] }
"#;

/// A policy giving every request `answer`.
fn policy(answer: Result<(), String>) -> Arc<CapabilityPolicy> {
    let engine = PluginEngine::new().unwrap();
    let registry = Arc::new(PluginRegistry::new(engine, "/nonexistent"));
    Arc::new(CapabilityPolicy::answering(registry, answer))
}

fn parent() -> ParentEvent {
    ParentEvent {
        id: 7,
        event_type: "probe.run".into(),
        tenant_id: None,
        headers: "{}".into(),
        generation: 0,
    }
}

/// A receiver's factors on Redis under a prefix of this test, a database that refuses every
/// connection at once (nothing must reach it) and the network; the services of one delivery.
async fn receiver(answer: Result<(), String>, prefix: &str) -> (DeliveryServices, HandlerHost) {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy("postgres://nobody@127.0.0.1:1/none")
        .unwrap();
    let host = HandlerHost::new(
        policy(answer),
        pool,
        crate::redis_conn::test_connection().await,
        QueueKeys::new(prefix),
        super::http::http_client().unwrap(),
        1024,
        8,
    );
    let spec: PluginSpec = toml::from_str(SPEC).unwrap();
    let services = host.factors.services(
        &Arc::from("probe"),
        &spec,
        parent(),
        "probe",
        "probe".into(),
    );
    (services, host)
}

/// An offline call's factors; the services of one delivery.
fn offline(answer: Result<(), String>) -> (DeliveryServices, OfflineHost) {
    let host = OfflineHost::new(policy(answer), Vec::new(), BTreeMap::new(), 1024).unwrap();
    let spec: PluginSpec = toml::from_str(SPEC).unwrap();
    let services = host.delivery(&Arc::from("probe"), &spec, parent());
    (services, host)
}

fn request(url: &str, headers: &[(&str, &str)]) -> wit_http::Request {
    wit_http::Request {
        method: "GET".into(),
        url: url.into(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        body: None,
        timeout_ms: None,
    }
}

fn child(event_type: &str, payload: String) -> wit_publish::NewEvent {
    wit_publish::NewEvent {
        event_type: event_type.into(),
        payload,
        tenant_id: None,
        headers: None,
    }
}

/// Calls every check refuses before the policy or the backend (one per rule), each answer as
/// text.
async fn refused_by_checks(services: &mut dyn HandlerServices) -> Vec<String> {
    let big = "v".repeat(kv::MAX_KV_VALUE_BYTES + 1);
    vec![
        format!("{:?}", services.kv_get(String::new()).await),
        format!("{:?}", services.kv_set("k".into(), big, None).await),
        format!(
            "{:?}",
            services.kv_set("k".into(), "v".into(), Some(0)).await
        ),
        format!("{:?}", services.kv_increment("k".into(), 1, Some(0)).await),
        format!(
            "{:?}",
            services
                .kv_compare_and_set("k".into(), Some("x".repeat(2 << 20)), "v".into(), None)
                .await
        ),
        format!(
            "{:?}",
            services
                .http_send(request("ftp://api.example.com/", &[]))
                .await
        ),
        format!(
            "{:?}",
            services
                .http_send(request("https://api.example.com:8443/", &[]))
                .await
        ),
        format!(
            "{:?}",
            services.http_send(request("http://127.0.0.1/", &[])).await
        ),
        format!(
            "{:?}",
            services
                .http_send(request("https://api.example.com/", &[("host", "evil")]))
                .await
        ),
        format!(
            "{:?}",
            services.publish(child("Not A Type", "{}".into())).await
        ),
        format!(
            "{:?}",
            services
                .publish(child("probe.child", format!("\"{}\"", "p".repeat(2048))))
                .await
        ),
    ]
}

fn kv_keys(prefix: &str) -> Vec<String> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string());
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query(&mut conn)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_checks_refuse_the_same_calls_with_a_receivers_and_an_offline_backend() {
    let prefix = format!("seam-checks-{}:", rand::random::<u64>());
    let (mut real, _host) = receiver(Ok(()), &prefix).await;
    let (mut memory, offline_host) = offline(Ok(()));
    let by_receiver = refused_by_checks(&mut real).await;
    let offline = refused_by_checks(&mut memory).await;
    assert_eq!(by_receiver, offline);
    for answer in &by_receiver {
        assert!(answer.starts_with("Err(HostError::Failed("), "{answer}");
    }
    // Nothing reached either backend: no Redis key, no kv value, nothing published or sent;
    // the offline call wrote each refusal down.
    assert!(kv_keys(&prefix).is_empty());
    let state = offline_host.state();
    assert!(state.kv.is_empty());
    assert_eq!(state.calls.len(), by_receiver.len());
    assert!(state
        .calls
        .iter()
        .all(|c| matches!(c, OfflineCall::Failed { .. })));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_policy_denies_the_same_calls_with_a_receivers_and_an_offline_backend() {
    let prefix = format!("seam-policy-{}:", rand::random::<u64>());
    let denied = Err("not in this test".to_string());
    let (mut real, _host) = receiver(denied.clone(), &prefix).await;
    let (mut memory, offline_host) = offline(denied);
    for services in [&mut real as &mut dyn HandlerServices, &mut memory] {
        let answers = [
            format!("{:?}", services.kv_set("k".into(), "v".into(), None).await),
            format!(
                "{:?}",
                services
                    .http_send(request("https://api.example.com/", &[]))
                    .await
            ),
            format!(
                "{:?}",
                services.publish(child("probe.child", "{}".into())).await
            ),
        ];
        for answer in answers {
            assert_eq!(answer, "Err(HostError::Denied(\"not in this test\"))");
        }
    }
    assert!(kv_keys(&prefix).is_empty());
    let state = offline_host.state();
    assert!(state.kv.is_empty());
    assert_eq!(state.calls.len(), 3);
    assert!(state
        .calls
        .iter()
        .all(|c| matches!(c, OfflineCall::Denied { .. })));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kv_byte_quota_refuses_the_same_write_in_redis_and_in_memory() {
    let prefix = format!("seam-quota-{}:", rand::random::<u64>());
    let (mut real, _host) = receiver(Ok(()), &prefix).await;
    let (mut memory, _offline_host) = offline(Ok(()));
    let mut answers = Vec::new();
    for services in [&mut real as &mut dyn HandlerServices, &mut memory] {
        // 1 + 40 bytes fit in 64; another 41 do not; an overwrite that does not grow does.
        answers.push([
            format!(
                "{:?}",
                services.kv_set("a".into(), "x".repeat(40), None).await
            ),
            format!(
                "{:?}",
                services.kv_set("b".into(), "y".repeat(40), None).await
            ),
            format!(
                "{:?}",
                services.kv_set("a".into(), "z".repeat(40), None).await
            ),
            format!("{:?}", services.kv_increment("b".into(), 5, None).await),
            format!("{:?}", services.kv_get("b".into()).await),
        ]);
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0][0], "Ok(())");
    assert!(
        answers[0][1].contains("kv quota of 64 bytes reached for plugin 'probe'"),
        "{}",
        answers[0][1]
    );
    assert_eq!(answers[0][2], "Ok(())");
    assert_eq!(answers[0][4], "Ok(Some(\"5\"))");
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_string());
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    for key in kv_keys(&prefix) {
        let _: () = redis::cmd("DEL").arg(key).query(&mut conn).unwrap();
    }
}
