//! Stream trimming: a queue stream is trimmed only below what every consumer group has
//! acknowledged.

use std::time::Duration;

use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

use super::{receipts, routes, start, test_env_settings, wait_for, PLUGINS};

#[sqlx::test(migrations = "../migrations")]
async fn streams_are_trimmed_only_below_what_every_group_acknowledged(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    test_env_settings(&mut env);
    let fixture = PluginFixture::new(PLUGINS, &routes(true));
    let running = start(&env, &fixture, "c1", false).await;
    let key = format!("{}outbox.plugin-hook", env.prefix);
    let mut conn = env.redis.clone();
    // Another consumer group (an external service) has not read anything yet.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&key)
        .arg("external")
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    for queue in running.receivers.queues_for_group(Some("general")) {
        tokio::spawn(
            running
                .receivers
                .clone()
                .consume(queue, running.shutdown.clone()),
        );
    }
    let ids = env
        .publish_all(
            (0..4)
                .map(|i| NewEvent::new("plugin.hook.nobody.listens", json!({"i": i})))
                .collect(),
        )
        .await;
    wait_for("4 receipts", Duration::from_secs(20), async || {
        receipts(&env)
            .await
            .iter()
            .filter(|r| ids.contains(&r.0) && r.2 == "ok")
            .count()
            == 4
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let len: i64 = redis::cmd("XLEN")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 4, "the external group still needs every entry");
    let _: () = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(&key)
        .arg("external")
        .query_async(&mut conn)
        .await
        .unwrap();
    wait_for("the trim", Duration::from_secs(10), async || {
        let len: i64 = redis::cmd("XLEN")
            .arg(&key)
            .query_async(&mut env.redis.clone())
            .await
            .unwrap();
        len == 0
    })
    .await;
    running.stop().await;
    env.cleanup().await;
}
