//! `outbox demo`: events flowing end to end on the local PostgreSQL and Redis. Prints tables and
//! a progress bar; every query it shows is a function of `outbox_host::store`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use redis::AsyncCommands;

use outbox_host::config::Config;
use outbox_host::publish::{publish_with_limit, NewEvent};
use outbox_host::queue::QueueKeys;
use outbox_host::routing::RouteDecision;
use outbox_host::store;

/// Redis key prefix of everything the demo writes (cleared at the start of each demo).
pub const DEMO_REDIS_PREFIX: &str = "outbox-demo:";
/// Database the demo uses on the configured server (created if missing, emptied each run).
pub const DEMO_DATABASE: &str = "outbox_demo";

/// Workflows the demo's workflow-trigger handler knows (plugin config, as in `routes.toml`).
const DEMO_WORKFLOWS: &str = r#"
executor = { queue = "outbox.workflow-executor" }
workflows = [
  { id = "welcome-series", trigger = { event = "user.signed-up" } },
  { id = "crm-sync", trigger = { event = "user.signed-up" } },
  { id = "retired", enabled = false, trigger = { event = "user.signed-up" } },
]
"#;

/// The event types the demo publishes, with how many of each.
const DEMO_MIX: &[(&str, usize)] = &[
    ("mail.welcome", 60),
    ("webhook.order.paid", 40),
    ("notification.push", 40),
    ("tenant.subscription.renewed", 20),
    ("billing.invoice.issued", 30),
    ("audit.login", 50),
    ("search.index.document", 30),
    ("order.placed", 30),
    ("mystery.unrouted", 1),
];

/// `outbox demo`: publish a few hundred events of several types (one with no route, one rolled
/// back), run a dispatcher, and print what went where.
pub async fn run_demo(mut config: Config) -> anyhow::Result<()> {
    let started = Instant::now();
    let settings = &mut config.settings;
    let admin = store::connect(&settings.database_url, 2).await?;
    store::create_database_if_missing(&admin, DEMO_DATABASE).await?;
    admin.close().await;
    settings.database_url = store::with_database(&settings.database_url, DEMO_DATABASE);
    settings.redis_prefix = DEMO_REDIS_PREFIX.to_string();
    settings.dispatch_interval = Duration::from_millis(200);
    settings.http_addr = String::new();
    out!(
        "demo: PostgreSQL {} (database {DEMO_DATABASE}, emptied), Redis {} (keys under '{DEMO_REDIS_PREFIX}', cleared)",
        store::redact(&settings.database_url),
        store::redact(&settings.redis_url)
    );

    let pool = store::connect(&settings.database_url, 8).await?;
    store::migrate(&pool).await?;
    store::empty_outbox(&pool).await?;
    let keys = QueueKeys::for_redis_url(&settings.redis_prefix, &settings.redis_url);
    let mut conn =
        outbox_host::redis_conn::connect_shared(&settings.redis_url, &settings.redis_prefix)
            .await?;
    let mut old: Vec<String> = Vec::new();
    for pattern in keys.match_patterns() {
        let matched: Vec<String> = conn.keys(pattern).await?;
        old.extend(matched);
    }
    if !old.is_empty() {
        let _: () = conn.del(old).await?;
    }

    // The shipped table has no fan-out rule; the demo adds one so fan-out shows up.
    config.routes.routes.insert(
        "order.".into(),
        outbox_host::config::QueueList::Many(vec![
            "outbox.audit".into(),
            "outbox.search-index".into(),
        ]),
    );
    // One receiver runs the workflow-trigger plugin on outbox.workflow: a trigger event fans out
    // to the enabled workflows, each handed on to the executor queue. Other queues keep what the
    // dispatcher put there, so they can be counted.
    config
        .routes
        .handlers
        .retain(|queue, _| queue == "outbox.workflow");
    if let Some(spec) = config.routes.plugins.get_mut("workflow-trigger") {
        spec.config = Some(toml::from_str(DEMO_WORKFLOWS)?);
    }
    let table = config.routes.route_table();
    out!("demo: routing table (plus the demo's fan-out rule \"order.\"):\n{table}");

    // Publish in application-style transactions of 25 events; one transaction rolls back.
    let mut published = 0usize;
    let mut batch = 0usize;
    let mut tx = pool.begin().await?;
    for (event_type, count) in DEMO_MIX {
        for i in 0..*count {
            let event = NewEvent::new(*event_type, serde_json::json!({"n": i, "demo": true}))
                .with_tenant(format!("tenant-{}", i % 3))
                .with_headers(
                    serde_json::json!({"correlation_id": format!("demo-{event_type}-{i}")}),
                )
                .with_dispatch_key(format!("demo:{event_type}:{i}"));
            publish_with_limit(&mut tx, event, settings.max_payload_bytes).await?;
            published += 1;
            batch += 1;
            if batch == 25 {
                tx.commit().await?;
                tx = pool.begin().await?;
                batch = 0;
            }
        }
    }
    tx.commit().await?;
    let mut doomed = pool.begin().await?;
    for i in 0..10 {
        publish_with_limit(
            &mut doomed,
            NewEvent::new("mail.rolled_back", serde_json::json!({"n": i})),
            settings.max_payload_bytes,
        )
        .await?;
    }
    doomed.rollback().await?;
    let mut tx = pool.begin().await?;
    let trigger = publish_with_limit(
        &mut tx,
        NewEvent::new(
            "workflow.trigger.event",
            serde_json::json!({"trigger": "user.signed-up", "data": {"user": 42}}),
        ),
        settings.max_payload_bytes,
    )
    .await?;
    tx.commit().await?;
    published += 1;
    out!("demo: published {published} events in transactions of 25 (the last one a workflow trigger); 10 more were rolled back and never appear");

    let host = outbox_host::Host::builder()
        .config(config.clone())
        .pool(pool.clone())
        .worker_id("outbox-demo")
        .start()
        .await?;
    out!(
        "demo: routing through {} (plugins from {})",
        match host.router().current().name() {
            "native-table" =>
                "the built-in table (router plugin not built: run scripts/build-plugins.sh)"
                    .to_string(),
            name => format!("the WebAssembly router plugin '{name}'"),
        },
        config.settings.plugin_dir.display()
    );
    let bar = indicatif::ProgressBar::new(published as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("demo: dispatching {bar:40} {pos}/{len} {msg}")
            .context("progress bar template")?,
    );
    let workflows_on = host
        .live()
        .is_some_and(|l| l.registry.get("workflow-trigger").is_some());
    let executor_stream = keys.stream("outbox.workflow-executor");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = store::status_counts(&pool).await?;
        bar.set_position(outbox_host::numeric::count(c.done + c.failed).min(published as u64));
        let jobs: u64 = conn.xlen(&executor_stream).await?;
        // The handler's receipt reaches the table shortly after its outcome (through the
        // receipts stream): wait for it too, so the table below shows it.
        let handled = !workflows_on
            || (jobs >= 2
                && conn
                    .xlen::<_, u64>(keys.receipts_stream("outbox.workflow-executor"))
                    .await?
                    == 0
                && !store::receipts(&pool).await?.is_empty());
        if c.pending == 0 && c.processing == 0 && handled {
            break;
        }
        if Instant::now() > deadline {
            bar.abandon_with_message("timed out (is Redis reachable?)");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bar.finish_and_clear();
    let router = host.router().current();
    host.shutdown().await;

    // A router plugin's call blocks its thread: route on a blocking thread.
    let routed = tokio::task::spawn_blocking(move || {
        DEMO_MIX
            .iter()
            .map(|(event_type, _)| {
                let event = store::ClaimedEvent::unclaimed(0, *event_type, "{}");
                let queues = match router
                    .route_batch(std::slice::from_ref(&event))
                    .map(|d| d.into_iter().next())
                {
                    Ok(Some(RouteDecision::Queues(queues))) => queues,
                    _ => Vec::new(),
                };
                (*event_type, queues)
            })
            .collect::<Vec<_>>()
    })
    .await?;
    let mut per_queue: BTreeMap<String, (u64, Vec<&str>)> = BTreeMap::new();
    for (event_type, queues) in routed {
        for q in queues {
            per_queue.entry(q).or_default().1.push(event_type);
        }
    }
    for (queue, (n, _)) in per_queue.iter_mut() {
        *n = conn.xlen(keys.stream(queue)).await?;
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "queue (Redis stream)",
        "entries",
        "event types",
    ]);
    for (queue, (n, types)) in &per_queue {
        t.add_row(vec![
            Cell::new(queue),
            Cell::new(n),
            Cell::new(types.join(", ")),
        ]);
    }
    let jobs: u64 = conn.xlen(&executor_stream).await?;
    t.add_row(vec![
        Cell::new("outbox.workflow-executor"),
        Cell::new(jobs),
        Cell::new("workflow.executor.job (published by the workflow-trigger handler)"),
    ]);
    out!("{t}");
    let counts = store::status_counts(&pool).await?;
    out!(
        "events: {} done, {} failed, {} pending; fan-out deliveries recorded: {}",
        counts.done,
        counts.failed,
        counts.pending,
        store::done_delivery_count(&pool).await?
    );
    let failed = store::failed_events(&pool).await?;
    if !failed.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["failed event", "type", "why"]);
        for f in failed {
            t.add_row(vec![
                Cell::new(f.id),
                Cell::new(f.event_type),
                Cell::new(f.last_error.unwrap_or_default()),
            ]);
        }
        out!("{t}");
    }
    if workflows_on {
        let receipts = store::receipts(&pool).await?;
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "handled event",
            "type",
            "handler (WebAssembly)",
            "result",
            "attempts",
            "published",
            "ms",
        ]);
        for r in receipts {
            t.add_row(vec![
                Cell::new(r.event_id),
                Cell::new(r.event_type.unwrap_or_default()),
                Cell::new(r.handler),
                Cell::new(r.result),
                Cell::new(r.attempts),
                Cell::new(format!("{:?}", r.published_ids)),
                Cell::new(format!("{:.1}", r.duration_ms)),
            ]);
        }
        out!("receiver: the workflow trigger (event {trigger}) fanned out to the 2 enabled workflows (the disabled one was skipped):\n{t}");
    }
    let sample: Vec<redis::streams::StreamRangeReply> = vec![
        conn.xrange_count(keys.stream("outbox.mail"), "-", "+", 1)
            .await?,
    ];
    if let Some(entry) = sample.first().and_then(|r| r.ids.first()) {
        let fields: BTreeMap<String, String> = outbox_host::receive::QueueEntry::from_stream(entry)
            .fields
            .into_iter()
            .collect();
        out!(
            "first entry of outbox.mail ({}): {}",
            entry.id,
            serde_json::to_string(&fields)?
        );
    }
    out!("demo finished in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
