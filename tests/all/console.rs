//! The operator web console, served by a real host and used in a real browser (headless
//! chromium through chromedriver): sign in, find a failed event, open its trace, requeue it and
//! see it delivered, replay a dead letter, see a rejected plugin reload with its reason, and a
//! viewer who cannot requeue. Every page is saved as a screenshot and checked for text and
//! browser console errors. Plus the session, CSRF and escaping rules over plain HTTP.

use std::time::{Duration, Instant};

use outbox_host::receive::DeadLetters;
use outbox_host::store::{self, Role};
use outbox_host::{Host, NewEvent};
use outbox_tests::browser::Browser;
use outbox_tests::{PluginFixture, TestEnv};
use serde_json::json;
use sqlx::PgPool;

fn routes(fixed: bool) -> String {
    format!(
        r#"
[routes]
"mail." = "outbox.mail"
"flaky." = "outbox.flaky"
{billing}

[router]
plugin = "native"

[handlers]
"outbox.flaky" = "flaky-handler"

[plugins.flaky-handler]
config = {{ succeed = {fixed} }}

[policy]
plugin = "deny-all"
"#,
        billing = if fixed {
            "\"billing.\" = \"outbox.mail\""
        } else {
            ""
        }
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A host with the console on a free loopback port, on `fixture`'s routes.
async fn start_host(env: &mut TestEnv, fixture: &PluginFixture) -> (Host, String) {
    let port = free_port();
    env.settings.http_addr = format!("127.0.0.1:{port}");
    env.settings.handler_max_retries = 1;
    env.settings.handler_backoff = vec![Duration::from_millis(100)];
    env.settings.receiver_lease = Duration::from_secs(8);
    let host = Host::builder()
        .config(fixture.config(&env.settings))
        .pool(env.pool.clone())
        .worker_id("console-host")
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

async fn wait_until<F: AsyncFn() -> bool>(what: &str, within: Duration, done: F) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn sign_in(browser: &Browser, base: &str, token: &str) {
    browser.goto(&format!("{base}/console")).await;
    // Not signed in: the console sends the browser to its sign-in page.
    browser.find("#token").await.send_keys(token).await.unwrap();
    browser.click("button[type=submit]").await;
    browser.find("#overview").await;
}

#[sqlx::test(migrations = "../migrations")]
async fn console_in_a_real_browser_requeues_replays_and_shows_a_rejected_reload(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["test/flaky-handler"], &routes(false));
    let (host, base) = start_host(&mut env, &fixture).await;
    let admin = store::add_operator(&env.pool, "ada", Role::Admin, "test")
        .await
        .unwrap();
    let viewer = store::add_operator(&env.pool, "vic", Role::Viewer, "test")
        .await
        .unwrap();

    // A delivered event, an event with no route (it fails at once), and an event whose handler
    // keeps failing (it is dead-lettered).
    let ids = env
        .publish_all(vec![
            NewEvent::new("mail.welcome", json!({"to": "a@example.com"})),
            NewEvent::new(
                "billing.charge",
                json!({"amount": 42, "note": "<img src=x onerror=alert(1)>"}),
            )
            .with_tenant("acme"),
            NewEvent::new("flaky.job", json!({"n": 1})),
        ])
        .await;
    let (delivered, failed, flaky) = (ids[0], ids[1], ids[2]);
    let dead = DeadLetters::connect(&fixture.config(&env.settings).settings)
        .await
        .unwrap();
    let flaky_queue = vec!["outbox.flaky".to_string()];
    wait_until(
        "the failed event and the dead letter",
        Duration::from_secs(30),
        async || {
            env.status(failed).await.0 == "failed"
                && env.status(delivered).await.0 == "done"
                && !dead.list(&flaky_queue).await.unwrap().is_empty()
        },
    )
    .await;

    let mut browser = Browser::start(
        &std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"),
    )
    .await;
    sign_in(&browser, &base, &admin).await;
    // The session cookie is HttpOnly and SameSite=Strict.
    let cookie = browser
        .cookie("outbox_console")
        .await
        .expect("session cookie");
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(
        cookie.same_site().map(|s| s.to_string()).as_deref(),
        Some("Strict")
    );
    browser
        .wait_for_text("#count-failed", Duration::from_secs(10), |t| t == "1")
        .await;
    browser.screenshot("overview").await;

    // Events: search by type prefix and tenant.
    browser
        .goto(&format!("{base}/console/events?type=billing.&tenant=acme"))
        .await;
    let table = browser.text("#events").await;
    assert!(
        table.contains(&failed.to_string()) && table.contains("billing.charge"),
        "{table}"
    );
    assert!(!table.contains("mail.welcome"), "{table}");
    browser.screenshot("events").await;

    // Failed: find the failed event and open its trace.
    browser.goto(&format!("{base}/console/failed")).await;
    assert!(browser.text("#failed").await.contains("no route"));
    browser.screenshot("failed").await;
    browser
        .click(&format!("#failed a[href='/console/events/{failed}']"))
        .await;
    browser.find("#destinations, #history").await;
    assert!(browser.text("#status").await.contains("failed"));
    // The payload is shown as text: the markup in it is escaped, never run.
    assert!(browser
        .text("#payload")
        .await
        .contains("<img src=x onerror=alert(1)>"));
    browser.screenshot("event-failed").await;

    // Fix the route (hot reload), then requeue from the event's page: preview, confirm.
    fixture.replace("routes.toml", routes(true).as_bytes());
    let live = host.live().unwrap().clone();
    wait_until("the fixed routes", Duration::from_secs(10), async || {
        live.routes.load().routes.contains_key("billing.")
    })
    .await;
    browser.click("#requeue").await;
    assert!(browser
        .text("#preview-summary")
        .await
        .contains("1 events would change to pending"));
    assert_eq!(
        env.status(failed).await.0,
        "failed",
        "a preview changes nothing"
    );
    browser.screenshot("requeue-preview").await;
    browser.click("#confirm").await;
    assert!(browser
        .text("#result")
        .await
        .contains("requeue: 1 events changed to pending"));
    browser.screenshot("requeue-done").await;
    wait_until(
        "the requeued event delivered",
        Duration::from_secs(10),
        async || env.status(failed).await.0 == "done",
    )
    .await;
    browser
        .goto(&format!("{base}/console/events/{failed}"))
        .await;
    browser
        .wait_for_text("#status", Duration::from_secs(10), |t| t.contains("done"))
        .await;
    assert!(browser.text("#destinations").await.contains("outbox.mail"));
    assert!(browser.text("#history").await.contains("requeue"));
    browser.screenshot("event-delivered").await;

    // Dead letters: the flaky handler's entry, replayed after its fix (same reload).
    browser.goto(&format!("{base}/console/dead-letters")).await;
    let letters = browser.text("#dead-letters").await;
    assert!(letters.contains(&flaky.to_string()), "{letters}");
    browser.screenshot("dead-letters").await;
    browser.click("#dead-letters input[name=letter]").await;
    browser.click("#replay-selected").await;
    assert!(browser
        .text("#preview-summary")
        .await
        .contains("1 dead letters would be replayed"));
    browser.screenshot("replay-preview").await;
    browser.click("#confirm").await;
    assert!(browser
        .text("#result")
        .await
        .contains("dead-letter replay: 1 done"));
    wait_until(
        "the replayed entry handled",
        Duration::from_secs(20),
        async || {
            let ok: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM outbox_receipt WHERE event_id = $1 AND result = 'ok'",
            )
            .bind(flaky)
            .fetch_one(&env.pool)
            .await
            .unwrap();
            ok == 1
        },
    )
    .await;
    assert!(dead.list(&flaky_queue).await.unwrap().is_empty());

    // A plugin file that does not compile: the reload is rejected, the page says why.
    fixture.replace("flaky-handler.wasm", b"not a wasm component");
    let start = Instant::now();
    loop {
        browser.goto(&format!("{base}/console/plugins")).await;
        if browser.text("#reloads").await.contains("rejected") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no rejected reload shown"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reloads = browser.text("#reloads").await;
    assert!(reloads.contains("flaky-handler.wasm"), "{reloads}");
    assert!(browser.text("#plugins").await.contains("flaky-handler"));
    browser
        .find("#which-type")
        .await
        .send_keys("billing.charge")
        .await
        .unwrap();
    browser.click("form.search button").await;
    assert!(browser
        .text("#which-answer")
        .await
        .contains("billing.charge -> outbox.mail"));
    browser.screenshot("plugins").await;

    // A paused queue shows as paused, with who paused it and why.
    store::pause_queue(&env.pool, "outbox.flaky", "ada", Some("console check"))
        .await
        .unwrap();
    browser.goto(&format!("{base}/console/workers")).await;
    assert!(browser.text("#hosts").await.contains("console-host"));
    let queues = browser.text("#queues").await;
    assert!(queues.contains("outbox.flaky"), "{queues}");
    assert!(
        queues.contains("paused by ada") && queues.contains("console check"),
        "{queues}"
    );
    browser.screenshot("workers").await;

    // Every action above is in the audit trail under the admin's name, previews as dry runs.
    let audit: Vec<(String, String, bool, i64)> = sqlx::query_as(
        "SELECT operator, command, dry_run, rows_affected FROM outbox_audit ORDER BY id",
    )
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        vec![
            ("ada".into(), "requeue".into(), true, 1),
            ("ada".into(), "requeue".into(), false, 1),
            ("ada".into(), "dead-letter replay".into(), true, 1),
            ("ada".into(), "dead-letter replay".into(), false, 1),
        ]
    );

    // A viewer reads, but its requeue button is disabled and a forged requeue is refused.
    browser.click("header form.inline button").await;
    browser.find("#token").await;
    sign_in(&browser, &base, &viewer).await;
    let second = env
        .publish_all(vec![NewEvent::new("nowhere.thing", json!({}))])
        .await[0];
    wait_until(
        "the second failed event",
        Duration::from_secs(10),
        async || env.status(second).await.0 == "failed",
    )
    .await;
    browser.goto(&format!("{base}/console/failed")).await;
    let button = browser.find("#requeue-selected").await;
    assert_eq!(
        button.attr("disabled").await.unwrap().as_deref(),
        Some("true")
    );
    assert!(browser.text("#viewer-note").await.contains("viewer"));
    browser.screenshot("failed-as-viewer").await;
    let csrf = browser
        .find("#failed-form input[name=csrf]")
        .await
        .attr("value")
        .await
        .unwrap()
        .unwrap();
    let session = browser.cookie("outbox_console").await.unwrap();
    let forged = reqwest::Client::new()
        .post(format!("{base}/console/failed/apply"))
        .header("cookie", format!("outbox_console={}", session.value()))
        .form(&[
            ("csrf", csrf.as_str()),
            ("action", "requeue"),
            ("id", &second.to_string()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    assert!(forged.text().await.unwrap().contains("viewer role"));
    assert_eq!(env.status(second).await.0, "failed");

    eprintln!(
        "console screenshots: {}",
        browser
            .screenshots
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    browser.close().await;
    host.shutdown().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn console_needs_a_session_checks_csrf_and_escapes_what_it_shows(pool: PgPool) {
    let mut env = TestEnv::new(pool).await;
    let fixture = PluginFixture::new(&["test/flaky-handler"], &routes(true));
    let (host, base) = start_host(&mut env, &fixture).await;
    let admin = store::add_operator(&env.pool, "ada", Role::Admin, "test")
        .await
        .unwrap();
    let id = env
        .publish_all(vec![NewEvent::new(
            "nowhere.thing",
            json!({"html": "</pre><script>alert(1)</script>"}),
        )
        .with_tenant("<b>t</b>")])
        .await[0];
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // No session: every page sends to the sign-in page, every action too.
    for path in [
        "/console",
        "/console/events",
        "/console/failed",
        "/console/plugins",
    ] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 303, "{path}");
        assert_eq!(r.headers()["location"], "/console/login", "{path}");
    }
    let r = http
        .post(format!("{base}/console/failed/apply"))
        .form(&[("action", "requeue"), ("id", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);

    // A wrong token: refused, with the reason.
    let r = http
        .post(format!("{base}/console/login"))
        .form(&[("token", "obx_wrong")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.text().await.unwrap().contains("not valid"));

    // The right one: a session cookie, HttpOnly and SameSite=Strict.
    let r = http
        .post(format!("{base}/console/login"))
        .form(&[("token", admin.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let get = |path: String| {
        let (http, cookie) = (http.clone(), cookie.clone());
        async move {
            let r = http
                .get(path)
                .header("cookie", cookie)
                .send()
                .await
                .unwrap();
            let csp = r.headers()["content-security-policy"]
                .to_str()
                .unwrap()
                .to_string();
            (r.status().as_u16(), csp, r.text().await.unwrap())
        }
    };
    wait_until("the failed event", Duration::from_secs(10), async || {
        env.status(id).await.0 == "failed"
    })
    .await;
    let (status, csp, page) = get(format!("{base}/console/events/{id}")).await;
    assert_eq!(status, 200, "{page}");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(
        !page.contains("<script>alert(1)"),
        "unescaped payload: {page}"
    );
    assert!(
        page.contains("&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    let (_, _, events) = get(format!("{base}/console/events?tenant=%3Cb%3Et%3C%2Fb%3E")).await;
    assert!(
        events.contains("&lt;b&gt;t&lt;/b&gt;") && !events.contains("<b>t</b>"),
        "{events}"
    );

    // Bad input is a clear error, not a page of nothing.
    let (status, _, page) = get(format!("{base}/console/events?status=nope")).await;
    assert_eq!(status, 400);
    assert!(page.contains("unknown status"), "{page}");
    let (status, _, _) = get(format!("{base}/console/events/999999")).await;
    assert_eq!(status, 404);

    // An action without the session's CSRF token, or from another origin, changes nothing.
    let r = http
        .post(format!("{base}/console/failed/apply"))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", "forged"),
            ("action", "requeue"),
            ("id", &id.to_string()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let (_, _, failed_page) = get(format!("{base}/console/failed")).await;
    let csrf = failed_page
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    let r = http
        .post(format!("{base}/console/failed/apply"))
        .header("cookie", &cookie)
        .header("origin", "http://evil.example")
        .form(&[
            ("csrf", csrf.as_str()),
            ("action", "requeue"),
            ("id", &id.to_string()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(env.status(id).await.0, "failed");
    // The same form from the console itself goes through.
    let r = http
        .post(format!("{base}/console/failed/apply"))
        .header("cookie", &cookie)
        .header("origin", base.clone())
        .form(&[
            ("csrf", csrf.as_str()),
            ("action", "cancel"),
            ("id", &id.to_string()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(env.status(id).await.0, "cancelled");

    // A revoked operator's session ends at its next request.
    store::revoke_operator(&env.pool, "ada").await.unwrap();
    let r = http
        .get(format!("{base}/console"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    host.shutdown().await;
    env.cleanup().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn console_search_pages_by_keyset_cover_every_match_once(pool: PgPool) {
    // 500 events over 500 minutes, ids in time order except a few committed late (a smaller id
    // with a later time), 5 types, tenants a and b.
    sqlx::query(
        "INSERT INTO outbox_event (event_type, payload, tenant_id, created_at)
         SELECT 'type' || (g % 5) || '.x', '{}', CASE WHEN g % 2 = 0 THEN 'a' ELSE 'b' END,
                now() - interval '1 minute' * (500 - g) + CASE WHEN g % 97 = 0 THEN interval '3 minutes' ELSE interval '0' END
         FROM generate_series(1, 500) g",
    )
    .execute(&pool)
    .await
    .unwrap();
    let expect = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            let mut ids: Vec<i64> = sqlx::query_scalar(sql).fetch_all(&pool).await.unwrap();
            ids.sort_unstable();
            ids
        }
    };
    let walk = |search: store::EventSearch| {
        let pool = pool.clone();
        async move {
            let mut search = search;
            let mut seen = Vec::new();
            loop {
                let page = store::search_events(&pool, &search, 50).await.unwrap();
                assert!(page.events.len() <= 50);
                seen.extend(page.events.iter().map(|e| e.id));
                match page.next_before {
                    Some(before) => {
                        search.before = Some(before);
                        search.before_at = page.next_before_at;
                    }
                    None => break,
                }
            }
            let count = seen.len();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), count, "a row was shown twice");
            seen
        }
    };
    let by_type = walk(store::EventSearch {
        type_prefix: Some("type3.".into()),
        tenant: Some("a".into()),
        ..Default::default()
    })
    .await;
    assert_eq!(
        by_type,
        expect("SELECT id FROM outbox_event WHERE event_type = 'type3.x' AND tenant_id = 'a'")
            .await
    );
    let since = chrono::Utc::now() - chrono::Duration::minutes(400);
    let until = chrono::Utc::now() - chrono::Duration::minutes(100);
    let in_range = walk(store::EventSearch {
        since: Some(since),
        until: Some(until),
        ..Default::default()
    })
    .await;
    let mut expected: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM outbox_event WHERE created_at >= $1 AND created_at < $2",
    )
    .bind(since)
    .bind(until)
    .fetch_all(&pool)
    .await
    .unwrap();
    expected.sort_unstable();
    assert!(expected.len() > 250, "{}", expected.len());
    assert_eq!(in_range, expected);
    // A `_` or `%` in a prefix is a character, not a wildcard.
    let none = store::search_events(
        &pool,
        &store::EventSearch {
            type_prefix: Some("type_".into()),
            ..Default::default()
        },
        50,
    )
    .await
    .unwrap();
    assert!(none.events.is_empty());
}
