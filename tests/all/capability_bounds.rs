//! Capability bounds that hold per grant and per plugin: an IP grant reaches that IP on its
//! port only (a name resolving to it on another port, or a name the grants do not list, stays
//! refused), a plugin's kv store is bounded in bytes as well as in keys, and a plugin flooding
//! the policy with distinct requests evicts only its own cached decisions.

use serde_json::json;
use sqlx::PgPool;

use outbox_host::receive::HandledAs;

use crate::capabilities::{recording_server, routes, Probe};

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

