//! Capability bounds that hold per grant and per plugin: an IP grant reaches that IP on its
//! port only (a name resolving to it on another port, or a name the grants do not list, stays
//! refused), a plugin's kv store is bounded in bytes as well as in keys, and a plugin flooding
//! the policy with distinct requests evicts only its own cached decisions.

use serde_json::json;
use sqlx::PgPool;

use outbox_host::capability::policy::{
    CapabilityPolicy, MAX_CACHED_DECISIONS, MAX_DECISION_CACHE_BYTES,
};
use outbox_host::receive::HandledAs;

use crate::capabilities::{routes, Probe};
use crate::capability_http::recording_server;

#[sqlx::test(migrations = "../migrations")]
async fn capability_http_an_ip_grant_is_reached_through_a_name_only_on_its_port_and_for_a_granted_name(
    pool: PgPool,
) {
    let (port, seen) = recording_server().await;
    let (other_port, other_seen) = recording_server().await;
    // `localhost` resolves to 127.0.0.1. The careless policy allows every host: only the
    // host's egress rules stand between the plugins and the loopback ports.
    let both = format!("http = [\"localhost:{port}\", \"127.0.0.1:{port}\"]");
    let other = format!("http = [\"localhost:{other_port}\", \"127.0.0.1:{port}\"]");
    let ip_only = format!("http = [\"127.0.0.1:{port}\"]");
    let probe = Probe::start(
        pool,
        &routes(
            "allow-all-policy",
            &[("both", &both), ("other", &other), ("iponly", &ip_only)],
        ),
    )
    .await;
    // Name and IP granted on one port: the name reaches the IP there.
    let (handled, _) = probe
        .run(
            "both",
            None,
            json!([{ "op": "http", "url": format!("http://localhost:{port}/by-name"),
                     "expect": { "ok": 1, "status": 200 } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    // The name is granted on another port: the IP grant on `port` does not admit it there.
    let (handled, _) = probe
        .run(
            "other",
            None,
            json!([
                { "op": "http", "url": format!("http://localhost:{other_port}/other-port"),
                  "expect": { "failed": 1, "error_contains": "a loopback (127.0.0.0/8) address" } },
                { "op": "http", "url": format!("http://127.0.0.1:{port}/by-ip"),
                  "expect": { "ok": 1, "status": 200 } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    // A name no grant lists, on the default port the policy lets through: refused too.
    let (handled, _) = probe
        .run(
            "iponly",
            None,
            json!([{ "op": "http", "url": "http://localhost/",
                     "expect": { "failed": 1, "error_contains": "a loopback (127.0.0.0/8) address" } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let paths: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.path_and_query.clone())
        .collect();
    assert_eq!(
        paths,
        ["/by-name", "/by-ip"],
        "only the granted calls arrived"
    );
    assert!(
        other_seen.lock().unwrap().is_empty(),
        "nothing reached the other port"
    );
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_kv_bytes_per_plugin_stop_at_the_byte_quota_long_before_the_key_quota(
    pool: PgPool,
) {
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[("kvbig", "kv = true"), ("kvneighbour", "kv = true")],
        ),
    )
    .await;
    // Each key holds 1_000_005 bytes of key and value: the default 16 MiB quota (16_777_216
    // bytes) takes 16 of them, far below the quota of 1000 keys.
    let (handled, _) = probe
        .run(
            "kvbig",
            None,
            json!([
                { "op": "kv-set", "key": "big-{i}", "value_bytes": 1_000_000, "repeat": 17,
                  "expect": { "ok": 16, "failed": 1, "error_contains": "kv quota of 16777216 bytes reached for plugin 'kvbig'" } },
                // The refused key was not written. Compare-and-set is bounded too.
                { "op": "kv-get", "key": "big-16", "expect": { "returns": "none" } },
                { "op": "kv-set", "key": "pad", "value_bytes": 700_000, "expect": { "ok": 1 } },
                { "op": "kv-cas", "key": "cas", "value": "v".repeat(100_000),
                  "expect": { "failed": 1, "error_contains": "kv quota of 16777216 bytes" } },
                // Overwriting with a shorter value frees bytes and always works.
                { "op": "kv-set", "key": "big-0", "value_bytes": 10, "expect": { "ok": 1 } },
                { "op": "kv-set", "key": "after-shrink", "value_bytes": 900_000, "expect": { "ok": 1 } },
                // Deleting a key frees its bytes.
                { "op": "kv-set", "key": "refused", "value_bytes": 1_000_000,
                  "expect": { "failed": 1, "error_contains": "kv quota of 16777216 bytes" } },
                { "op": "kv-delete", "key": "big-1", "expect": { "returns": "true" } },
                { "op": "kv-set", "key": "refused", "value_bytes": 1_000_000, "expect": { "ok": 1 } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let mut conn = probe.env.redis.clone();
    let keys: Vec<String> =
        redis::AsyncCommands::keys(&mut conn, format!("{}outbox:kv:kvbig:*", probe.env.prefix))
            .await
            .unwrap();
    assert_eq!(keys.len(), 18, "{keys:?}");
    // The quota is per plugin: the neighbour still stores a large value.
    let (handled, _) = probe
        .run(
            "kvneighbour",
            None,
            json!([{ "op": "kv-set", "key": "mine", "value_bytes": 1_000_000, "expect": { "ok": 1 } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_kv_byte_quota_is_set_per_plugin_and_freed_by_expiry_and_deletes(pool: PgPool) {
    let routes_toml = routes("capability-policy", &[("kvsmall", "kv = true")]).replace(
        "[plugins.kvsmall]\n",
        "[plugins.kvsmall]\nkv_max_bytes = 4096\n",
    );
    let probe = Probe::start(pool, &routes_toml).await;
    // Keys "s-0".. hold 1003 bytes each: four fit in 4096 bytes, with 84 to spare; `n` takes 2
    // of them, `c` with 80 bytes 81.
    let (handled, _) = probe
        .run(
            "kvsmall",
            None,
            json!([
                { "op": "kv-set", "key": "s-{i}", "value_bytes": 1000, "ttl": 2, "repeat": 5,
                  "expect": { "ok": 4, "failed": 1, "error_contains": "kv quota of 4096 bytes reached for plugin 'kvsmall'" } },
                { "op": "kv-increment", "key": "n", "delta": 7, "expect": { "returns": "7" } },
                { "op": "kv-cas", "key": "c", "value": "x".repeat(82),
                  "expect": { "failed": 1, "error_contains": "kv quota of 4096 bytes" } },
                { "op": "kv-cas", "key": "c", "value": "x".repeat(80), "expect": { "returns": "true" } },
                // 4012 + 2 + 81 = 4095 bytes held: an increment adding digits passes the quota.
                { "op": "kv-increment", "key": "n", "delta": 10_000,
                  "expect": { "failed": 1, "error_contains": "kv quota of 4096 bytes" } },
                { "op": "kv-get", "key": "n", "expect": { "returns": "7" } },
                { "op": "kv-increment", "key": "n", "delta": 2, "expect": { "returns": "9" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let sizes = format!("{}outbox:kv-bytes:kvsmall", probe.env.prefix);
    let mut conn = probe.env.redis.clone();
    let total: u64 = redis::AsyncCommands::hget(&mut conn, &sizes, "")
        .await
        .unwrap();
    assert_eq!(total, 4 * 1003 + 2 + 81);
    // The four keys expire: their bytes are free at the next write.
    tokio::time::sleep(std::time::Duration::from_millis(3000)).await;
    let (handled, _) = probe
        .run(
            "kvsmall",
            None,
            json!([
                { "op": "kv-set", "key": "t-{i}", "value_bytes": 1000, "repeat": 5,
                  "expect": { "ok": 4, "failed": 1, "error_contains": "kv quota of 4096 bytes" } },
                { "op": "kv-delete", "key": "c", "expect": { "returns": "true" } },
                { "op": "kv-delete", "key": "t-0", "expect": { "returns": "true" } },
                { "op": "kv-set", "key": "t-4", "value_bytes": 1000, "expect": { "ok": 1 } },
            ]),
        )
        .await;
    assert_eq!(
        handled,
        HandledAs::Ok,
        "expired and deleted keys freed their bytes"
    );
    let total: u64 = redis::AsyncCommands::hget(&mut conn, &sizes, "")
        .await
        .unwrap();
    assert_eq!(
        total,
        4 * 1003 + 2,
        "the total follows writes, expiry and deletes exactly"
    );
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_policy_cache_flood_by_one_plugin_keeps_another_plugins_decisions_cached(
    pool: PgPool,
) {
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[("flooder", ""), ("steady", "kv = true")],
        ),
    )
    .await;
    let registry = probe.live.registry.clone();
    let policy_calls = |registry: &outbox_host::plugin::PluginRegistry| {
        registry
            .list()
            .into_iter()
            .find(|p| p.name == "capability-policy")
            .map_or(0, |p| p.calls)
    };
    let (calls_for_flood, calls_for_steady, stats) = tokio::task::spawn_blocking(move || {
        let policy = CapabilityPolicy::with_plugin(registry.clone(), "capability-policy");
        let flooder = registry.get("flooder").unwrap();
        let steady = registry.get("steady").unwrap();
        assert_eq!(policy.check(&steady, "kv", "counter"), Ok(()));
        let before_flood = policy_calls(&registry);
        for i in 0..10_000 {
            let target = format!("flood-{i}-{}", "x".repeat(200));
            assert!(policy.check(&flooder, "kv", &target).is_err());
        }
        let after_flood = policy_calls(&registry);
        assert_eq!(policy.check(&steady, "kv", "counter"), Ok(()));
        (
            after_flood - before_flood,
            policy_calls(&registry) - after_flood,
            policy.cache_stats(),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        calls_for_flood, 10_000,
        "every distinct target ran the policy"
    );
    assert_eq!(
        calls_for_steady, 0,
        "the steady plugin's decision was still cached after the flood"
    );
    assert!(
        stats.entries <= MAX_CACHED_DECISIONS && stats.bytes <= MAX_DECISION_CACHE_BYTES,
        "{stats:?}"
    );
    probe.stop().await;
}
