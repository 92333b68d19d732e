//! Capabilities under attack: what a hostile handler (`test/capability-probe`, which makes the
//! host calls its event lists) gets from the host. Everything it hands over is bounded, the
//! policy cache and the audit trail do not grow with the number of distinct targets it asks
//! about, and its children stay in its event's tenant. Its HTTP egress is in `capability_http`.

use std::sync::Arc;
use std::time::Duration;

use outbox_host::capability::policy::{
    CapabilityPolicy, MAX_CACHED_DECISIONS, MAX_DECISION_CACHE_BYTES, MAX_POLICY_TARGET_BYTES,
};
use outbox_host::live_config::LiveConfig;
use outbox_host::receive::{HandledAs, QueueEntry, Receivers};
use outbox_host::NewEvent;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::{json, Value};
use sqlx::PgPool;

const PLUGINS: &[&str] = &[
    "capability-policy",
    "test/capability-probe",
    "test/allow-all-policy",
];

/// A routes file with `policy` deciding, and one probe handler per `(name, grants)`, each
/// consuming queue `outbox.<name>`.
pub(crate) fn routes(policy: &str, probes: &[(&str, &str)]) -> String {
    let mut text = format!(
        r#"
[router]
plugin = "native"

[policy]
plugin = "{policy}"

[plugins.capability-policy]
[plugins.allow-all-policy]
"#
    );
    let mut routes = String::from("\n[routes]\n");
    let mut handlers = String::from("\n[handlers]\n");
    for (name, grants) in probes {
        routes.push_str(&format!("\"{name}.\" = \"outbox.{name}\"\n"));
        handlers.push_str(&format!("\"outbox.{name}\" = \"{name}\"\n"));
        text.push_str(&format!(
            "\n[plugins.{name}]\nfile = \"capability-probe.wasm\"\ntimeout_ms = 60000\nfuel = 50_000_000_000\ngrants = {{ {grants} }}\n"
        ));
    }
    format!("{text}{routes}{handlers}")
}

/// A running configuration and receivers that are not consuming (the test hands them entries).
pub(crate) struct Probe {
    pub(crate) env: TestEnv,
    pub(crate) live: LiveConfig,
    receivers: Receivers,
    _fixture: PluginFixture,
}

impl Probe {
    pub(crate) async fn start(pool: PgPool, routes_toml: &str) -> Self {
        let mut env = TestEnv::new(pool).await;
        env.settings.receiver_lease = Duration::from_secs(300);
        let fixture = PluginFixture::new(PLUGINS, routes_toml);
        let config = fixture.config(&env.settings);
        let live = LiveConfig::start(&config).await.unwrap();
        let receivers = Receivers::new(
            env.pool.clone(),
            live.clone(),
            Arc::new(config.settings.clone()),
            "probe-consumer",
        )
        .await
        .unwrap();
        Self {
            env,
            live,
            receivers,
            _fixture: fixture,
        }
    }

    /// Publish a `<probe>.run` event (in `tenant`) carrying `steps`, and hand it to the probe
    /// handler `probe` as its queue would. Returns what became of it and the event id.
    pub(crate) async fn run(
        &self,
        probe: &str,
        tenant: Option<&str>,
        steps: Value,
    ) -> (HandledAs, i64) {
        let mut event = NewEvent::new(format!("{probe}.run"), json!({ "steps": steps }));
        event.tenant_id = tenant.map(str::to_string);
        let payload = event.payload.to_string();
        let id = self.env.publish_all(vec![event]).await[0];
        let entry = QueueEntry::from_flat(
            "0-1",
            &[
                "event_id".into(),
                id.to_string(),
                "event_type".into(),
                format!("{probe}.run"),
                "tenant_id".into(),
                tenant.unwrap_or_default().to_string(),
                "payload".into(),
                payload,
                "headers".into(),
                "{}".into(),
            ],
        );
        let handled = self
            .receivers
            .handle_entry(&format!("outbox.{probe}"), entry)
            .await;
        (handled, id)
    }

    async fn denial_events(&self) -> Vec<Value> {
        sqlx::query_scalar(
            "SELECT payload FROM outbox_event WHERE event_type = 'plugin.capability-use.denied' ORDER BY id",
        )
        .fetch_all(&self.env.pool)
        .await
        .unwrap()
    }

    pub(crate) async fn stop(self) {
        self.env.cleanup().await;
    }
}

// ---- item 3: what a guest hands over is bounded ----

#[sqlx::test(migrations = "../migrations")]
async fn capability_kv_keys_per_plugin_stop_at_the_quota_with_a_clear_error(pool: PgPool) {
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[("kvfill", "kv = true"), ("kvother", "kv = true")],
        ),
    )
    .await;
    let (handled, _) = probe
        .run(
            "kvfill",
            None,
            json!([
                { "op": "kv-set", "key": "q-{i}", "value_bytes": 16, "repeat": 1001,
                  "expect": { "ok": 1000, "failed": 1, "error_contains": "kv quota of 1000 keys reached" } },
                // Overwriting a key it holds still works at the quota.
                { "op": "kv-set", "key": "q-7", "expect": { "ok": 1 } },
                // Deleting one frees a slot, for one new key only.
                { "op": "kv-delete", "key": "q-0", "expect": { "ok": 1 } },
                { "op": "kv-set", "key": "fresh", "expect": { "ok": 1 } },
                { "op": "kv-set", "key": "one-too-many", "expect": { "failed": 1, "error_contains": "kv quota" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let mut conn = probe.env.redis.clone();
    let keys: Vec<String> =
        redis::AsyncCommands::keys(&mut conn, format!("{}outbox:kv:kvfill:*", probe.env.prefix))
            .await
            .unwrap();
    assert_eq!(keys.len(), 1000, "the namespace holds exactly the quota");
    // Ten slots freed (q-0 is gone already), taken again by keys that expire.
    let (handled, _) = probe
        .run(
            "kvfill",
            None,
            json!([
                { "op": "kv-delete", "key": "q-{i}", "repeat": 11, "expect": { "ok": 11 } },
                { "op": "kv-set", "key": "short-{i}", "ttl": 3, "repeat": 10, "expect": { "ok": 10 } },
                { "op": "kv-set", "key": "one-too-many", "expect": { "failed": 1, "error_contains": "kv quota" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    // Keys that expired do not count.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let (handled, _) = probe
        .run(
            "kvfill",
            None,
            json!([
                { "op": "kv-set", "key": "after-expiry-{i}", "repeat": 11,
                  "expect": { "ok": 10, "failed": 1, "error_contains": "kv quota of 1000 keys reached" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok, "expired keys freed their slots");
    // The quota is per plugin: another plugin is not affected.
    let (handled, _) = probe
        .run(
            "kvother",
            None,
            json!([{ "op": "kv-set", "key": "mine", "expect": { "ok": 1 } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_kv_increment_and_compare_and_set_are_atomic_bounded_and_counted(pool: PgPool) {
    let probe = Probe::start(
        pool,
        &routes("capability-policy", &[("kvatomic", "kv = true")]),
    )
    .await;
    let (handled, _) = probe
        .run(
            "kvatomic",
            None,
            json!([
                // An absent counter counts as 0; the time to live is set when it is created...
                { "op": "kv-increment", "key": "hits", "delta": 5, "ttl": 600, "expect": { "ok": 1, "returns": "5" } },
                // ...and kept (not reset, not cleared) by later increments.
                { "op": "kv-increment", "key": "hits", "delta": -2, "ttl": 5, "expect": { "returns": "3" } },
                { "op": "kv-get", "key": "hits", "expect": { "returns": "3" } },
                // A value that is not an integer, and an overflow, fail and change nothing.
                { "op": "kv-set", "key": "word", "value_bytes": 3 },
                { "op": "kv-increment", "key": "word", "expect": { "failed": 1, "error_contains": "not a 64-bit integer" } },
                { "op": "kv-get", "key": "word", "expect": { "returns": "vvv" } },
                { "op": "kv-increment", "key": "hits", "delta": i64::MAX, "expect": { "failed": 1, "error_contains": "overflows" } },
                { "op": "kv-get", "key": "hits", "expect": { "returns": "3" } },
                // compare-and-set: absent expected, absent key -> stored; present now -> refused.
                { "op": "kv-cas", "key": "lock", "value": "a", "expect": { "returns": "true" } },
                { "op": "kv-cas", "key": "lock", "value": "b", "expect": { "returns": "false" } },
                { "op": "kv-cas", "key": "lock", "expected": "z", "value": "b", "expect": { "returns": "false" } },
                { "op": "kv-get", "key": "lock", "expect": { "returns": "a" } },
                { "op": "kv-cas", "key": "lock", "expected": "a", "value": "b", "ttl": 600, "expect": { "returns": "true" } },
                { "op": "kv-get", "key": "lock", "expect": { "returns": "b" } },
                // Bounds before anything runs.
                { "op": "kv-increment", "key": "", "expect": { "failed": 1, "error_contains": "kv keys are 1 to 512 bytes" } },
                { "op": "kv-increment", "key": "t", "ttl": 0, "expect": { "failed": 1, "error_contains": "ttl_seconds must be at least 1" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let mut conn = probe.env.redis.clone();
    let key = |k: &str| format!("{}outbox:kv:kvatomic:{k}", probe.env.prefix);
    let ttl: i64 = redis::AsyncCommands::ttl(&mut conn, key("hits"))
        .await
        .unwrap();
    assert!(
        (500..=600).contains(&ttl),
        "the creating call's ttl holds: {ttl}"
    );
    let ttl: i64 = redis::AsyncCommands::ttl(&mut conn, key("lock"))
        .await
        .unwrap();
    assert!((500..=600).contains(&ttl), "{ttl}");

    // Both count against the key quota like set: at the quota, a new key is refused and an
    // existing one still changes.
    let (handled, _) = probe
        .run(
            "kvatomic",
            None,
            json!([
                { "op": "kv-set", "key": "fill-{i}", "repeat": 997, "expect": { "ok": 997 } },
                { "op": "kv-increment", "key": "new-counter", "expect": { "failed": 1, "error_contains": "kv quota of 1000 keys reached" } },
                { "op": "kv-cas", "key": "new-lock", "value": "x", "expect": { "failed": 1, "error_contains": "kv quota of 1000 keys reached" } },
                { "op": "kv-increment", "key": "hits", "expect": { "returns": "4" } },
                { "op": "kv-cas", "key": "lock", "expected": "b", "value": "c", "expect": { "returns": "true" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_publish_calls_per_delivery_stop_at_the_budget(pool: PgPool) {
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[("fanout", "publish = [\"fanout.\"]")],
        ),
    )
    .await;
    let (handled, parent) = probe
        .run(
            "fanout",
            None,
            json!([
                { "op": "publish", "event_type": "fanout.child", "repeat": 1005,
                  "expect": { "ok": 1000, "failed": 5, "error_contains": "a delivery may publish at most 1000 events" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let children: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM outbox_event WHERE event_type = 'fanout.child' AND (headers->>'parent_event_id')::bigint = $1",
    )
    .bind(parent)
    .fetch_one(&probe.env.pool)
    .await
    .unwrap();
    assert_eq!(children, 1000);
    probe.stop().await;
}

// ---- item 4: the policy cache and the denial trail are bounded ----

#[sqlx::test(migrations = "../migrations")]
async fn capability_denied_target_flood_keeps_the_policy_cache_within_its_byte_bound(pool: PgPool) {
    let probe = Probe::start(pool, &routes("capability-policy", &[("nogrants", "")])).await;
    let registry = probe.live.registry.clone();
    let policy_calls = |registry: &outbox_host::plugin::PluginRegistry| {
        registry
            .list()
            .into_iter()
            .find(|p| p.name == "capability-policy")
            .map_or(0, |p| p.calls)
    };
    let (stats, peak, denied, calls_before, calls_after) = tokio::task::spawn_blocking(move || {
        let policy = CapabilityPolicy::with_plugin(registry.clone(), "capability-policy");
        let plugin = registry.get("nogrants").unwrap();
        let mut peak = policy.cache_stats();
        let mut denied = 0;
        for i in 0..10_000 {
            let target = format!("flood-{i}-{}", "x".repeat(200));
            if policy.check(&plugin, "kv", &target).is_err() {
                denied += 1;
            }
            let now = policy.cache_stats();
            if now.bytes > peak.bytes {
                peak = now;
            }
        }
        // An over-long target is refused before the policy plugin runs.
        let calls_before = policy_calls(&registry);
        let err = policy
            .check(&plugin, "kv", &"k".repeat(MAX_POLICY_TARGET_BYTES + 1))
            .unwrap_err();
        assert!(err.contains("over the limit"), "{err}");
        (
            policy.cache_stats(),
            peak,
            denied,
            calls_before,
            policy_calls(&registry),
        )
    })
    .await
    .unwrap();
    assert_eq!(denied, 10_000);
    assert!(
        peak.bytes <= MAX_DECISION_CACHE_BYTES && peak.entries <= MAX_CACHED_DECISIONS,
        "peak {peak:?}"
    );
    assert!(stats.entries > 0, "decisions are still cached: {stats:?}");
    assert_eq!(
        calls_after, calls_before,
        "the policy never saw the long target"
    );
    eprintln!("10000 distinct denied targets: cache peak {peak:?}, now {stats:?}");
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_denial_flood_publishes_a_bounded_number_of_denial_events(pool: PgPool) {
    let probe = Probe::start(pool, &routes("capability-policy", &[("flooder", "")])).await;
    let (handled, _) = probe
        .run(
            "flooder",
            None,
            json!([
                { "op": "kv-get", "key": "flood-{i}", "repeat": 3000, "expect": { "denied": 3000 } },
                { "op": "http", "url": "https://example.invalid/{i}", "repeat": 50, "expect": { "denied": 50 } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let first = probe.denial_events().await;
    let per = |capability: &str| {
        first
            .iter()
            .filter(|e| e["capability"] == capability)
            .count()
    };
    // One per plugin and capability per 60 s window; the bound allows a very slow machine to
    // open a second window.
    assert!(per("kv") >= 1 && per("kv") <= 2, "{first:?}");
    assert!(per("http") >= 1 && per("http") <= 2, "{first:?}");
    assert_eq!(first[0]["target"], "flood-0");
    // A second delivery's denials are counted into the next event instead of writing more.
    let (handled, _) = probe
        .run(
            "flooder",
            None,
            json!([{ "op": "kv-get", "key": "again-{i}", "repeat": 500, "expect": { "denied": 500 } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let after = probe.denial_events().await;
    assert!(after.len() <= first.len() + 1, "{} events", after.len());
    eprintln!("3550 + 500 denials published {} denial events", after.len());
    probe.stop().await;
}

// ---- item 9: children stay in their parent's tenant ----

#[sqlx::test(migrations = "../migrations")]
async fn capability_handler_publishes_into_another_tenant_only_when_granted(pool: PgPool) {
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[
                ("tenanted", "publish = [\"tenanted.\"]"),
                (
                    "crosser",
                    "publish = [\"crosser.\"], publish_tenants = [\"globex\"]",
                ),
            ],
        ),
    )
    .await;
    let (handled, _) = probe
        .run(
            "tenanted",
            Some("acme"),
            json!([
                { "op": "publish", "event_type": "tenanted.same", "expect": { "ok": 1 } },
                { "op": "publish", "event_type": "tenanted.explicit-same", "tenant": "acme", "expect": { "ok": 1 } },
                { "op": "publish", "event_type": "tenanted.other", "tenant": "globex",
                  "expect": { "denied": 1, "error_contains": "may not publish into tenant 'globex'" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let (handled, _) = probe
        .run(
            "crosser",
            Some("acme"),
            json!([
                { "op": "publish", "event_type": "crosser.granted", "tenant": "globex", "expect": { "ok": 1 } },
                { "op": "publish", "event_type": "crosser.ungranted", "tenant": "initech",
                  "expect": { "denied": 1, "error_contains": "granted tenants: globex" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    // A parent without a tenant does not let a child pick one.
    let (handled, _) = probe
        .run(
            "tenanted",
            None,
            json!([{ "op": "publish", "event_type": "tenanted.claim", "tenant": "acme", "expect": { "denied": 1 } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let rows: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT event_type, tenant_id FROM outbox_event WHERE event_type NOT LIKE '%.run' AND event_type <> 'plugin.capability-use.denied' ORDER BY id",
    )
    .fetch_all(&probe.env.pool)
    .await
    .unwrap();
    let rows: Vec<(&str, Option<&str>)> = rows
        .iter()
        .map(|(t, tenant)| (t.as_str(), tenant.as_deref()))
        .collect();
    assert_eq!(
        rows,
        [
            ("tenanted.same", Some("acme")),
            ("tenanted.explicit-same", Some("acme")),
            ("crosser.granted", Some("globex")),
        ]
    );
    let denials = probe.denial_events().await;
    assert!(
        denials
            .iter()
            .any(|d| d["capability"] == "publish-tenant" && d["target"] == "globex"),
        "the policy saw the tenant: {denials:?}"
    );
    probe.stop().await;
}
