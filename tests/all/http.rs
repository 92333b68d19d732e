//! The operator endpoint: Prometheus metrics, liveness and readiness.

use std::time::{Duration, Instant};

use outbox_host::NewEvent;
use outbox_tests::TestEnv;
use serde_json::json;
use sqlx::PgPool;

#[sqlx::test(migrations = "../migrations")]
async fn metrics_health_and_readiness_are_served(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    env.settings.http_addr = format!("127.0.0.1:{port}");
    let mut config = outbox_host::config::Config::builtin().unwrap();
    config.settings = env.settings.clone();
    let host = outbox_host::Host::builder()
        .config(config)
        .pool(env.pool.clone())
        .receivers_enabled(false)
        .start()
        .await
        .unwrap();
    let id = env
        .publish_all(vec![NewEvent::new("mail.welcome", json!({}))])
        .await[0];
    let start = Instant::now();
    while env.status(id).await.0 != "done" {
        assert!(start.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let base = format!("http://127.0.0.1:{port}");
    let get = |path: &str| {
        let url = format!("{base}{path}");
        async move {
            let response = reqwest::get(&url).await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get("/healthz").await, (200, "ok".to_string()));
    assert_eq!(get("/readyz").await, (200, "ready\n".to_string()));
    let (status, metrics) = get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("outbox_events_dispatched_total"),
        "{metrics}"
    );
    host.shutdown().await;
}
