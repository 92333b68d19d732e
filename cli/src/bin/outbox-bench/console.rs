//! Console section: how long each page of the operator console takes with `--console-events`
//! (default 1,000,000) events in `outbox_event`, through HTTP as a browser asks for it (signed
//! in, the host's own router and handlers), against a goal of 100 ms; and each search page
//! against its baseline, the store's search query alone (the same rows read, no HTTP, no HTML).
//! The rows are spread over 30 days, 20 types, 100 tenants (plus one rare tenant), 2% failed and
//! 1% pending, as a table that has run for a month looks; vacuumed and analyzed as autovacuum
//! would. Then what the console's search indexes cost the dispatcher when nobody watches:
//! dispatch throughput (`--events`, the dispatch section's run) with them against the same run
//! with them dropped, best of `--rounds`. The section empties the table and puts the indexes
//! back when done.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outbox_host::config::{Config, Settings};
use outbox_host::console::Console;
use outbox_host::live_config::LiveConfig;
use outbox_host::store::{self, EventSearch, Role};
use sqlx::PgPool;

use crate::common::{host_throughput, prepare, serving_router};
use crate::report::Report;
use crate::Args;

/// The indexes the console's search and counts add to `outbox_event` (migrations
/// `*_console_*.sql`), with their definitions, to drop and put back.
const CONSOLE_INDEXES: [(&str, &str); 4] = [
    (
        "outbox_event_tenant_idx",
        "ON outbox_event (tenant_id, id) WHERE tenant_id IS NOT NULL AND status IN ('done', 'failed', 'cancelled')",
    ),
    (
        "outbox_event_type_idx",
        "ON outbox_event (event_type text_pattern_ops, id) WHERE status IN ('done', 'failed', 'cancelled')",
    ),
    (
        "outbox_event_created_brin",
        "ON outbox_event USING brin (created_at)",
    ),
    (
        "outbox_event_failed_status_idx",
        "ON outbox_event (status) WHERE status IN ('failed', 'cancelled')",
    ),
];

/// Requests made before the timed ones (connections, caches and prepared statements warm).
const WARM_UP: usize = 3;
/// A page's goal, in milliseconds.
const PAGE_GOAL_MS: f64 = 100.0;

/// One page to time: its figure key, its name, its path (`{mid}`: an id in the middle of the
/// table, `{failed}`: a failed event's id), and the search it runs, for the baseline.
struct PageCase {
    key: &'static str,
    baseline_key: &'static str,
    name: &'static str,
    path: &'static str,
    search: Option<fn(i64) -> EventSearch>,
}

const PAGES: &[PageCase] = &[
    PageCase {
        key: "console.overview",
        baseline_key: "",
        name: "overview (counts, last hour by minute, queues, hosts)",
        path: "/console",
        search: None,
    },
    PageCase {
        key: "console.events_newest",
        baseline_key: "console.sql_newest",
        name: "events, newest first",
        path: "/console/events",
        search: Some(|_| EventSearch::default()),
    },
    PageCase {
        key: "console.events_type",
        baseline_key: "console.sql_type",
        name: "events of type prefix type7.",
        path: "/console/events?type=type7.",
        search: Some(|_| EventSearch {
            type_prefix: Some("type7.".into()),
            ..Default::default()
        }),
    },
    PageCase {
        key: "console.events_type_deep",
        baseline_key: "console.sql_type_deep",
        name: "events of type7., a page from the middle (keyset)",
        path: "/console/events?type=type7.&before={mid}",
        search: Some(|mid| EventSearch {
            type_prefix: Some("type7.".into()),
            before: Some(mid),
            ..Default::default()
        }),
    },
    PageCase {
        key: "console.events_rare_tenant",
        baseline_key: "console.sql_rare_tenant",
        name: "events of a rare tenant (10 rows)",
        path: "/console/events?tenant=rare-tenant",
        search: Some(|_| EventSearch {
            tenant: Some("rare-tenant".into()),
            ..Default::default()
        }),
    },
    PageCase {
        key: "console.events_failed",
        baseline_key: "console.sql_failed",
        name: "events with status failed",
        path: "/console/events?status=failed",
        search: Some(|_| EventSearch {
            status: Some("failed".into()),
            ..Default::default()
        }),
    },
    PageCase {
        key: "console.events_range",
        baseline_key: "console.sql_range",
        name: "events of one day three weeks ago",
        path: "/console/events?since={day_start}&until={day_end}",
        search: None,
    },
    PageCase {
        key: "console.events_key",
        baseline_key: "console.sql_key",
        name: "event by dispatch key",
        path: "/console/events?dispatch_key=key-500000",
        search: Some(|_| EventSearch {
            dispatch_key: Some("key-500000".into()),
            ..Default::default()
        }),
    },
    PageCase {
        key: "console.event",
        baseline_key: "",
        name: "one event (trace, payload)",
        path: "/console/events/{failed}",
        search: None,
    },
    PageCase {
        key: "console.failed",
        baseline_key: "",
        name: "failed events (200 rows)",
        path: "/console/failed",
        search: None,
    },
    PageCase {
        key: "console.workers",
        baseline_key: "",
        name: "hosts and queues",
        path: "/console/workers",
        search: None,
    },
];

/// Median and largest of `samples` (seconds), in milliseconds.
fn median_max_ms(mut samples: Vec<f64>) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2] * 1e3;
    let max = samples.last().copied().unwrap_or_default() * 1e3;
    (median, max)
}

/// Fill the table, serve the console, and time its pages.
pub(crate) async fn run(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.console_samples > 0,
        "--console-samples must be at least 1"
    );
    let n = args.console_events;
    report.say(format_args!(
        "console: each page through HTTP with {n} events in outbox_event, median of {} requests; search pages against store::search_events alone",
        args.console_samples
    ));
    let filled = Instant::now();
    fill(pool, n).await?;
    report.say(format_args!(
        "  {n} events written, vacuumed and analyzed in {:.1} s",
        filled.elapsed().as_secs_f64()
    ));
    let (mid, failed): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT max(id) / 2 FROM outbox_event), (SELECT max(id) FROM outbox_event WHERE status = 'failed')",
    )
    .fetch_one(pool)
    .await?;
    let day_start = (chrono::Utc::now() - chrono::Duration::days(21)).format("%Y-%m-%dT00:00");
    let day_end = (chrono::Utc::now() - chrono::Duration::days(20)).format("%Y-%m-%dT00:00");

    let config = Config {
        settings: settings.clone(),
        ..config.clone()
    };
    let live = LiveConfig::start(&config)
        .await
        .context("load the routes' plugins")?;
    let console = Console::new(
        pool.clone(),
        Arc::new(settings.clone()),
        Some(live),
        "outbox-bench".into(),
        Arc::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, console.router()).await;
    });
    let token = store::add_operator(pool, "bench-viewer", Role::Viewer, "outbox-bench")
        .await
        .context("add the bench's viewer")?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signed_in = http
        .post(format!("{base}/console/login"))
        .form(&[("token", token.as_str())])
        .send()
        .await?;
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("the console set no session cookie")?
        .to_string();

    for page in PAGES {
        let path = page
            .path
            .replace("{mid}", &mid.to_string())
            .replace("{failed}", &failed.to_string())
            .replace("{day_start}", &day_start.to_string())
            .replace("{day_end}", &day_end.to_string());
        let mut samples = Vec::with_capacity(args.console_samples);
        for i in 0..WARM_UP + args.console_samples {
            let started = Instant::now();
            let response = http
                .get(format!("{base}{path}"))
                .header("cookie", &cookie)
                .send()
                .await?;
            let status = response.status();
            let body = response.text().await?;
            anyhow::ensure!(
                status.is_success(),
                "{path}: {status}: {}",
                body.chars().take(500).collect::<String>()
            );
            if i >= WARM_UP {
                samples.push(started.elapsed().as_secs_f64());
            }
        }
        let (median, max) = median_max_ms(samples);
        let figure = report.figure(
            "console",
            page.key,
            format!("{} (max {max:.1} ms)", page.name),
            median,
            "ms",
        );
        let search = match (page.search, page.key) {
            (Some(search), _) => Some(search(mid)),
            (None, "console.events_range") => Some(EventSearch {
                since: Some(chrono::Utc::now() - chrono::Duration::days(21)),
                until: Some(chrono::Utc::now() - chrono::Duration::days(20)),
                ..Default::default()
            }),
            _ => None,
        };
        match search {
            Some(search) => {
                let mut samples = Vec::with_capacity(args.console_samples);
                for i in 0..WARM_UP + args.console_samples {
                    let started = Instant::now();
                    store::search_events(pool, &search, 50).await?;
                    if i >= WARM_UP {
                        samples.push(started.elapsed().as_secs_f64());
                    }
                }
                let (sql, _) = median_max_ms(samples);
                figure
                    .against(page.baseline_key, "store::search_events alone", sql)
                    .value_at_most(PAGE_GOAL_MS);
            }
            None => {
                figure.value_at_most(PAGE_GOAL_MS);
            }
        }
    }
    server.abort();
    index_cost(args, report, &config, pool, settings).await?;
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("empty outbox_event after the console section")?;
    sqlx::query("DELETE FROM outbox_operator WHERE name = 'bench-viewer'")
        .execute(pool)
        .await?;
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}

/// Dispatch throughput with the console's indexes against the same run without them.
async fn index_cost(
    args: &Args,
    report: &mut Report,
    config: &Config,
    pool: &PgPool,
    settings: &Settings,
) -> anyhow::Result<()> {
    let router = serving_router(config, settings).await?;
    let (mut with, mut without) = (0f64, 0f64);
    for round in 1..=args.rounds {
        prepare(pool, settings, args.events).await?;
        let indexed = host_throughput(pool, settings, router.clone(), args.events).await?;
        for (name, _) in CONSOLE_INDEXES {
            sqlx::query(&format!("DROP INDEX {name}"))
                .execute(pool)
                .await
                .with_context(|| format!("drop {name}"))?;
        }
        prepare(pool, settings, args.events).await?;
        let bare = host_throughput(pool, settings, router.clone(), args.events).await;
        for (name, definition) in CONSOLE_INDEXES {
            sqlx::query(&format!("CREATE INDEX IF NOT EXISTS {name} {definition}"))
                .execute(pool)
                .await
                .with_context(|| format!("put {name} back"))?;
        }
        let bare = bare?;
        report.say(format_args!(
            "  round {round}: dispatch with the console's indexes {indexed:>9.0} events/s | without {bare:>9.0} events/s (ratio {:.2})",
            indexed / bare
        ));
        with = with.max(indexed);
        without = without.max(bare);
    }
    report
        .figure(
            "console",
            "console.dispatch_with_indexes",
            "dispatch throughput with the console's search indexes",
            with,
            "events/s",
        )
        .against(
            "console.dispatch_without_indexes",
            "the same events without them",
            without,
        )
        .ratio_at_least(0.9);
    Ok(())
}

/// `n` events over the last 30 days (ids in time order): 20 types, 100 tenants and a rare one
/// (10 rows), 2% failed, 1% pending (due now), the rest done; a dispatch key on every tenth.
async fn fill(pool: &PgPool, n: i64) -> anyhow::Result<()> {
    sqlx::query("TRUNCATE outbox_event, outbox_delivery, outbox_event_history, outbox_worker RESTART IDENTITY")
        .execute(pool)
        .await
        .context("truncate outbox_event")?;
    sqlx::query(
        r#"
        INSERT INTO outbox_event (event_type, payload, tenant_id, dispatch_key, status, attempts,
                                  available_at, processed_at, last_error, created_at)
        SELECT 'type' || (g % 20) || '.happened',
               jsonb_build_object('n', g, 'text', 'an event as an application publishes it'),
               CASE WHEN g % ($1 / 10) = 0 THEN 'rare-tenant' ELSE 'tenant-' || (g % 100) END,
               CASE WHEN g % 10 = 0 THEN 'key-' || g END,
               CASE WHEN g % 50 = 0 THEN 'failed' WHEN g % 100 = 1 THEN 'pending' ELSE 'done' END,
               1,
               CASE WHEN g % 100 = 1 THEN now() ELSE t END,
               CASE WHEN g % 100 = 1 THEN NULL ELSE t + interval '1 second' END,
               CASE WHEN g % 50 = 0 THEN 'no route matched event type' END,
               t
        FROM generate_series(1, $1) g,
             LATERAL (SELECT now() - interval '30 days' * (1 - g::float8 / $1) AS t) at
        "#,
    )
    .bind(n)
    .execute(pool)
    .await
    .with_context(|| format!("insert {n} events"))?;
    sqlx::query("VACUUM ANALYZE outbox_event")
        .execute(pool)
        .await
        .context("vacuum outbox_event")?;
    Ok(())
}
