//! Who reaches the console, over plain HTTP to a real host's listener: only the allowed `Host`s
//! (DNS rebinding), a `Secure` session cookie behind an `https://` public URL, sign-in attempts
//! limited before any database query, the console's reads on their own small pool with a
//! statement timeout, and dead-letter pages that name only the queues the routes bind.

use std::time::{Duration, Instant};

use outbox_host::store::{self, Role};
use outbox_host::Host;
use outbox_tests::{PluginFixture, TestEnv};
use sqlx::{Connection, PgPool};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A host on the built-in routes (or `fixture`'s) with the console on a free loopback port;
/// its base URL.
async fn start_host(env: &mut TestEnv, fixture: Option<&PluginFixture>) -> (Host, String) {
    let port = free_port();
    env.settings.http_addr = format!("127.0.0.1:{port}");
    let config = match fixture {
        Some(fixture) => fixture.config(&env.settings),
        None => {
            let mut config = outbox_host::config::Config::builtin().unwrap();
            config.settings = env.settings.clone();
            config
        }
    };
    let host = Host::builder()
        .config(config)
        .pool(env.pool.clone())
        .receivers_enabled(fixture.is_some())
        .worker_id("console-access")
        .start()
        .await
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let start = Instant::now();
    while reqwest::get(format!("{base}/healthz")).await.is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no HTTP listener"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (host, base)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Sign in with `token`; the session cookie (`name=value`).
async fn sign_in(http: &reqwest::Client, base: &str, token: &str) -> String {
    let r = http
        .post(format!("{base}/console/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303, "signed in");
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap();
    set_cookie.split(';').next().unwrap().to_string()
}

#[sqlx::test(migrations = "../migrations")]
async fn the_console_and_metrics_answer_only_their_allowed_hosts(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.console_allowed_hosts = vec!["proxy.internal".into()];
    let (host, base) = start_host(&mut env, None).await;
    let port = base.rsplit(':').next().unwrap().to_string();
    let http = client();
    let get = |path: &str, host_header: String| {
        let (http, url) = (http.clone(), format!("{base}{path}"));
        async move {
            let r = http
                .get(url)
                .header("host", host_header)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };

    // A page fetched under a name that points here by DNS rebinding: refused, on every path
    // that shows or takes anything.
    for path in ["/console", "/console/login", "/console/events", "/metrics"] {
        for foreign in [
            format!("evil.example:{port}"),
            "evil.example".to_string(),
            format!("127.0.0.2:{port}"),
        ] {
            let (status, body) = get(path, foreign.clone()).await;
            assert_eq!(status, 421, "{path} for {foreign}: {body}");
            assert!(body.contains("does not answer for host"), "{body}");
        }
    }
    let r = http
        .post(format!("{base}/console/login"))
        .header("host", "evil.example")
        .form(&[("token", "obx_guess")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 421, "a sign-in under a foreign name");

    // The probes stay open to every Host (orchestrators use the pod's address).
    assert_eq!(get("/healthz", "10.9.8.7:1234".into()).await.0, 200);
    assert_eq!(get("/readyz", "evil.example".into()).await.0, 200);

    // The listener's own address, the loopback names on its port and the configured extra.
    for allowed in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "proxy.internal".to_string(),
        format!("PROXY.internal:{port}"),
    ] {
        let (status, body) = get("/metrics", allowed.clone()).await;
        assert_eq!(status, 200, "{allowed}: {body}");
        assert_eq!(get("/console", allowed.clone()).await.0, 303, "{allowed}");
    }
    host.shutdown().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn session_cookies_are_secure_only_behind_an_https_public_url(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let token = store::add_operator(&env.pool, "ada", Role::Viewer, "test")
        .await
        .unwrap();
    let sign_in_cookie = |base: String, host_header: String| {
        let token = token.clone();
        async move {
            let r = client()
                .post(format!("{base}/console/login"))
                .header("host", &host_header)
                .form(&[("token", token.as_str())])
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 303, "signed in via {host_header}");
            r.headers()["set-cookie"].to_str().unwrap().to_string()
        }
    };

    // Plain loopback HTTP (no public URL): the cookie cannot be Secure, or no browser would send it.
    let (host, base) = start_host(&mut env, None).await;
    let port = base.rsplit(':').next().unwrap().to_string();
    let cookie = sign_in_cookie(base.clone(), format!("127.0.0.1:{port}")).await;
    assert!(
        cookie.contains("HttpOnly") && !cookie.contains("Secure"),
        "{cookie}"
    );
    host.shutdown().await;

    // Behind a TLS-terminating proxy at an https:// public URL: Secure, and the URL's host is
    // an allowed Host.
    env.settings.console_public_url = "https://outbox.example.test".into();
    let (host, base) = start_host(&mut env, None).await;
    let cookie = sign_in_cookie(base.clone(), "outbox.example.test".into()).await;
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("; Secure"),
        "{cookie}"
    );
    // Signing out clears it with the same flags.
    let session = cookie.split(';').next().unwrap().to_string();
    let page = client()
        .get(format!("{base}/console/workers"))
        .header("host", "outbox.example.test")
        .header("cookie", &session)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("the sign-out form's csrf token")
        .to_string();
    let out = client()
        .post(format!("{base}/console/logout"))
        .header("host", "outbox.example.test")
        .header("cookie", &session)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), 303);
    let cleared = out.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.contains("Max-Age=0") && cleared.contains("; Secure"),
        "{cleared}"
    );
    host.shutdown().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn sign_in_attempts_over_the_limit_get_429_before_any_database_query(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.console_sign_in_per_minute = 3;
    // A sign-in that did query would wait this long on the lock below.
    env.settings.console_statement_timeout = Duration::from_secs(60);
    let admin = store::add_operator(&env.pool, "ada", Role::Admin, "test")
        .await
        .unwrap();
    let (host, base) = start_host(&mut env, None).await;
    let http = client();
    let attempt = |token: String| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.post(format!("{base}/console/login"))
                .form(&[("token", token.as_str())])
                .send()
                .await
                .expect("an answer, not a request hanging on the database")
        }
    };
    for _ in 0..3 {
        assert_eq!(attempt("obx_guess".into()).await.status(), 401);
    }

    // Nobody can read the operators now: any query of a sign-in would wait.
    let mut blocker = env.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_operator IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let refused = attempt(admin.clone()).await;
    assert_eq!(
        refused.status(),
        429,
        "the fourth attempt in a minute, even with the right token"
    );
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=20).contains(&retry_after), "{retry_after}");
    assert!(refused
        .text()
        .await
        .unwrap()
        .contains("too many sign-in attempts"));
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
         WHERE c.relname = 'outbox_operator' AND NOT l.granted",
    )
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(waiting, 0, "no sign-in query waits on the operators");
    blocker.rollback().await.unwrap();
    host.shutdown().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn console_reads_run_on_their_own_small_pool_and_a_slow_search_is_cancelled(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    env.settings.console_db_connections = 2;
    env.settings.console_statement_timeout = Duration::from_millis(500);
    let viewer = store::add_operator(&env.pool, "vic", Role::Viewer, "test")
        .await
        .unwrap();
    let (host, base) = start_host(&mut env, None).await;
    let http = client();
    let cookie = sign_in(&http, &base, &viewer).await;

    // A search that cannot finish (the table is locked) is cut at the console's statement
    // timeout and says so; six at once share the console's two connections. The lock is held
    // on a connection of its own, and the test reads through another taken before it: while
    // the table is locked, the host's own loops (claim, lease recovery, heartbeat, alerts)
    // wait on it and may hold every connection of the host's pool.
    let mut own = env.pool.acquire().await.unwrap();
    let mut blocker_conn = sqlx::PgConnection::connect_with(&env.pool.connect_options())
        .await
        .unwrap();
    let mut blocker = blocker_conn.begin().await.unwrap();
    sqlx::query("LOCK TABLE outbox_event IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let searches: Vec<_> = (0..6)
        .map(|_| {
            let (http, base, cookie) = (http.clone(), base.clone(), cookie.clone());
            tokio::spawn(async move {
                let r = http
                    .get(format!("{base}/console/events?type=mail."))
                    .header("cookie", cookie)
                    .send()
                    .await
                    .expect("an answer before the lock is released");
                (r.status().as_u16(), r.text().await.unwrap())
            })
        })
        .collect();
    // The host's own pool is not the console's: it still answers meanwhile.
    let own_timeout: String = sqlx::query_scalar("SHOW statement_timeout")
        .fetch_one(&mut *own)
        .await
        .unwrap();
    assert_ne!(
        own_timeout, "500ms",
        "the host's connections have no console timeout"
    );
    for search in searches {
        let (status, page) = search.await.unwrap();
        assert_eq!(status, 503, "{page}");
        assert!(
            page.contains("took longer than the console allows"),
            "{page}"
        );
    }
    let console_connections: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE application_name = 'outbox console' AND datname = current_database()",
    )
    .fetch_one(&mut *own)
    .await
    .unwrap();
    assert!(
        (1..=2).contains(&console_connections),
        "the console reads through its own connections, at most 2: {console_connections}"
    );
    blocker.rollback().await.unwrap();
    drop(own);

    // Once the table is free, the same search answers.
    let r = http
        .get(format!("{base}/console/events?type=mail."))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    host.shutdown().await;
    env.cleanup().await;
}

const DEAD_LETTER_ROUTES: &str = r#"
[routes]
"flaky." = "outbox.flaky"
"mail." = "outbox.mail"

[router]
plugin = "native"

[handlers]
"outbox.flaky" = "flaky-handler"

[plugins.flaky-handler]
config = { succeed = true }

[policy]
plugin = "deny-all"
"#;

#[sqlx::test(migrations = "../migrations")]
async fn dead_letter_pages_name_only_the_queues_the_routes_bind_to_handlers(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["test/flaky-handler"], DEAD_LETTER_ROUTES);
    let admin = store::add_operator(&env.pool, "ada", Role::Admin, "test")
        .await
        .unwrap();
    let (host, base) = start_host(&mut env, Some(&fixture)).await;
    let http = client();
    let cookie = sign_in(&http, &base, &admin).await;
    let get = |query: &str| {
        let (http, url, cookie) = (
            http.clone(),
            format!("{base}/console/dead-letters?{query}"),
            cookie.clone(),
        );
        async move {
            let r = http.get(url).header("cookie", cookie).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let (status, page) = get("queue=outbox.flaky").await;
    assert_eq!(status, 200, "{page}");
    let csrf = page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();

    for (queue, why) in [
        // Routed, but no handler: it has no dead letters.
        ("outbox.mail", "among the handler-bound queues"),
        ("outbox.nope", "among the handler-bound queues"),
        // Not a queue name at all: never turned into a Redis key.
        ("outbox%3Ahandled%3Ax", "queue names use letters"),
        ("outbox.flaky.dead-letter", "dead-letter stream"),
    ] {
        let (status, page) = get(&format!("queue={queue}")).await;
        assert_eq!(status, 404, "{queue}: {page}");
        assert!(page.contains(why), "{queue}: {page}");
        assert!(page.contains("nothing was read or changed"), "{page}");
    }
    for letter in ["outbox.nope|1-0", "outbox:handled:x|1-0"] {
        let r = http
            .post(format!("{base}/console/dead-letters/preview"))
            .header("cookie", &cookie)
            .form(&[
                ("csrf", csrf.as_str()),
                ("action", "drop"),
                ("letter", letter),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{letter}");
    }
    host.shutdown().await;
    env.cleanup().await;
}
