//! HTTP egress under attack: what a hostile handler (`test/capability-probe`) reaches with its
//! `http` grants. Responses are bounded, internal addresses and ports its grants do not name are
//! refused whatever the policy says, a name resolving to loopback needs an address grant, and
//! requests are signed over method, host, path and body. The other capabilities under attack
//! (kv, publish, the policy cache, tenants) are in `capabilities`.

use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Uri};
use outbox_host::capability::signing::{SIGNATURE_HEADER, TIMESTAMP_HEADER};
use outbox_host::receive::HandledAs;
use serde_json::json;
use sqlx::PgPool;

use crate::capabilities::{routes, Probe};

/// A local server answering `/small` (16 bytes), `/big` (2 MiB with a length) and `/stream`
/// (2 MiB in chunks, no length). Returns its port and the paths it was asked for.
async fn response_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(uri.path().to_string());
            match uri.path() {
                "/big" => Body::from(vec![b'x'; 2 << 20]),
                "/stream" => {
                    let chunks =
                        (0..64).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'y'; 32 << 10])));
                    Body::from_stream(futures::stream::iter(chunks))
                }
                _ => Body::from("sixteen bytes.."),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, seen)
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_http_response_bodies_over_the_cap_are_refused(pool: PgPool) {
    let (port, _) = response_server().await;
    let grants = format!("http = [\"127.0.0.1:{port}\"]");
    let probe = Probe::start(pool, &routes("capability-policy", &[("fetch", &grants)])).await;
    let base = format!("http://127.0.0.1:{port}");
    let (handled, _) = probe
        .run(
            "fetch",
            None,
            json!([
                { "op": "http", "url": format!("{base}/small"), "expect": { "ok": 1, "status": 200 } },
                { "op": "http", "url": format!("{base}/big"),
                  "expect": { "failed": 1, "error_contains": "over the limit of 1048576 bytes" } },
                { "op": "http", "url": format!("{base}/stream"),
                  "expect": { "failed": 1, "error_contains": "over the limit of 1048576 bytes" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    probe.stop().await;
}

/// What a local server saw of one request.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    method: String,
    pub(crate) path_and_query: String,
    headers: HeaderMap,
    body: Bytes,
}

/// A local server on 127.0.0.1 recording every request; answers 200.
pub(crate) async fn recording_server() -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push(Seen {
                    method: method.to_string(),
                    path_and_query: uri
                        .path_and_query()
                        .map(|p| p.to_string())
                        .unwrap_or_default(),
                    headers,
                    body,
                });
                "ok"
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, seen)
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_http_to_a_name_resolving_to_loopback_needs_an_ip_grant(pool: PgPool) {
    let (port, seen) = recording_server().await;
    let by_name = format!("http = [\"localhost:{port}\"]");
    let with_ip = format!("http = [\"localhost:{port}\", \"127.0.0.1:{port}\", \"[::1]:{port}\"]");
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[("byname", &by_name), ("withip", &with_ip)],
        ),
    )
    .await;
    let url = format!("http://localhost:{port}/hook");
    let (handled, _) = probe
        .run(
            "byname",
            None,
            json!([{ "op": "http", "url": url,
                     "expect": { "failed": 1, "error_contains": "a loopback (127.0.0.0/8) address" } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the server"
    );
    let (handled, _) = probe
        .run(
            "withip",
            None,
            json!([{ "op": "http", "url": url, "expect": { "ok": 1, "status": 200 } }]),
        )
        .await;
    assert_eq!(
        handled,
        HandledAs::Ok,
        "an IP grant on the same port lets the name through"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_http_internal_addresses_and_ungranted_ports_are_refused_whatever_the_policy(
    pool: PgPool,
) {
    let (port, seen) = recording_server().await;
    let (other_port, other_seen) = recording_server().await;
    let grants = format!("http = [\"127.0.0.1:{port}\"]");
    // The careless policy allows everything: the host's own egress rules still hold.
    let probe = Probe::start(
        pool,
        &routes(
            "allow-all-policy",
            &[("careless", &grants), ("ungranted", "")],
        ),
    )
    .await;
    let (handled, _) = probe
        .run(
            "careless",
            None,
            json!([
                { "op": "http", "url": "http://169.254.169.254/latest/meta-data/",
                  "expect": { "failed": 1, "error_contains": "link-local" } },
                { "op": "http", "url": "http://[::ffff:169.254.169.254]/latest/meta-data/",
                  "expect": { "failed": 1, "error_contains": "link-local" } },
                { "op": "http", "url": "http://2852039166/latest/meta-data/",
                  "expect": { "failed": 1, "error_contains": "link-local" } },
                { "op": "http", "url": format!("http://127.0.0.1:{other_port}/"),
                  "expect": { "failed": 1, "error_contains": format!("port {other_port} of 127.0.0.1:{other_port} is not granted") } },
                { "op": "http", "url": format!("http://127.0.0.1:{port}/fine"), "expect": { "ok": 1, "status": 200 } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let (handled, _) = probe
        .run(
            "ungranted",
            None,
            json!([
                { "op": "http", "url": format!("http://127.0.0.1:{port}/"),
                  "expect": { "failed": 1, "error_contains": "not granted" } },
                { "op": "http", "url": "http://127.0.0.1/",
                  "expect": { "failed": 1, "error_contains": "loopback" } },
                { "op": "http", "url": "http://10.0.0.1/",
                  "expect": { "failed": 1, "error_contains": "private" } },
                { "op": "http", "url": "http://[::1]/",
                  "expect": { "failed": 1, "error_contains": "loopback" } },
            ]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only the granted call arrived"
    );
    assert!(other_seen.lock().unwrap().is_empty());
    probe.stop().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_http_grant_without_a_port_allows_only_the_default_port(pool: PgPool) {
    let (port, seen) = recording_server().await;
    let probe = Probe::start(
        pool,
        &routes("capability-policy", &[("noport", "http = [\"127.0.0.1\"]")]),
    )
    .await;
    let (handled, _) = probe
        .run(
            "noport",
            None,
            json!([{ "op": "http", "url": format!("http://127.0.0.1:{port}/"),
                     "expect": { "denied": 1, "error_contains": format!("127.0.0.1:{port}") } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    assert!(seen.lock().unwrap().is_empty());
    probe.stop().await;
}

/// HMAC-SHA256 over the documented signing string, computed here without the host's code.
fn expected_signature(
    secret: &str,
    ts: &str,
    method: &str,
    host: &str,
    path: &str,
    body: &[u8],
) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{ts}\n{method}\n{host}\n{path}\n").as_bytes());
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[sqlx::test(migrations = "../migrations")]
async fn capability_http_signature_covers_method_host_path_and_body(pool: PgPool) {
    const SECRET: &str = "capability-test-secret";
    std::env::set_var("OUTBOX_TEST_CAPABILITY_SECRET", SECRET);
    let (port, seen) = recording_server().await;
    let signed = format!(
        "http = [\"127.0.0.1:{port}\"], http_signing_secret_env = \"OUTBOX_TEST_CAPABILITY_SECRET\", http_signing_allow_plain_http = true"
    );
    let plain = format!(
        "http = [\"127.0.0.1:{port}\"], http_signing_secret_env = \"OUTBOX_TEST_CAPABILITY_SECRET\""
    );
    let probe = Probe::start(
        pool,
        &routes(
            "capability-policy",
            &[("signer", &signed), ("plainsigner", &plain)],
        ),
    )
    .await;
    // Without the grant, the host refuses to sign over plain http: nothing is sent.
    let (handled, _) = probe
        .run(
            "plainsigner",
            None,
            json!([{ "op": "http", "method": "POST", "url": format!("http://127.0.0.1:{port}/pay?amount=10"),
                     "body": "{\"to\":\"alice\"}",
                     "expect": { "failed": 1, "error_contains": "does not sign over plain http" } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    assert!(
        seen.lock().unwrap().is_empty(),
        "the unsigned request was not sent either"
    );
    let (handled, _) = probe
        .run(
            "signer",
            None,
            json!([{ "op": "http", "method": "POST", "url": format!("http://127.0.0.1:{port}/pay?amount=10"),
                     "body": "{\"to\":\"alice\"}", "expect": { "ok": 1, "status": 200 } }]),
        )
        .await;
    assert_eq!(handled, HandledAs::Ok);
    let got = seen.lock().unwrap().remove(0);
    let header = |name: &str| got.headers.get(name).unwrap().to_str().unwrap().to_string();
    let ts = header(TIMESTAMP_HEADER);
    let host = header("host");
    assert_eq!(host, format!("127.0.0.1:{port}"));
    assert_eq!(
        (got.method.as_str(), got.path_and_query.as_str()),
        ("POST", "/pay?amount=10")
    );
    let expected = expected_signature(SECRET, &ts, "POST", &host, "/pay?amount=10", &got.body);
    assert_eq!(header(SIGNATURE_HEADER), expected);
    // The same signature does not cover another method, path, host or body.
    for (method, host, path, body) in [
        ("PUT", host.as_str(), "/pay?amount=10", &got.body[..]),
        ("POST", host.as_str(), "/pay?amount=1000", &got.body[..]),
        ("POST", "evil.example", "/pay?amount=10", &got.body[..]),
        (
            "POST",
            host.as_str(),
            "/pay?amount=10",
            b"{\"to\":\"mallory\"}".as_slice(),
        ),
    ] {
        assert_ne!(
            header(SIGNATURE_HEADER),
            expected_signature(SECRET, &ts, method, host, path, body)
        );
    }
    // The old scheme (timestamp and body only) is gone.
    assert_ne!(header(SIGNATURE_HEADER), {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
        mac.update(format!("{ts}.").as_bytes());
        mac.update(&got.body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    });
    probe.stop().await;
}
