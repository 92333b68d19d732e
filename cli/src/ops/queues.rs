//! `outbox queue pause|resume|list`: the operator's controls of the host's receivers. A pause or
//! resume is `outbox_host::queue_pause::QueuePauseControl` (the row, its audit row and the Redis
//! pause key in one step: once a pause returns no handler call of the queue starts on any host);
//! concurrency and rate limits are read from the routes file's `[queues."NAME"]`. A refused
//! command says why and has changed nothing.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};

use outbox_host::config::{validate_queue_name, Config, SinkKind};
use outbox_host::queue_pause::QueuePauseControl;
use outbox_host::store::{self, Role, MAX_PAUSE_REASON_CHARS};

use super::require;

/// Check `queue` before pausing or resuming it: a valid name the routes file names (when it
/// could be read and names any queue), on a streams queue (BullMQ workers are not the host's).
fn check_queue(config: &Config, queue: &str, paused: &[store::QueuePause]) -> anyhow::Result<()> {
    validate_queue_name(queue).map_err(|m| anyhow::anyhow!("queue {queue:?}: {m}"))?;
    let known = config.routes.queue_names();
    if known.is_empty() {
        eprintln!(
            "warning: the routes file names no queue (or could not be read): {queue:?} is not checked against it"
        );
    } else if !known.iter().any(|q| q == queue) && !paused.iter().any(|p| p.queue == queue) {
        anyhow::bail!(
            "unknown queue {queue:?}: the routes file names {} (nothing was changed)",
            known.join(", ")
        );
    }
    if config.routes.sink_of(queue) == SinkKind::Bullmq {
        anyhow::bail!(
            "queue {queue:?} goes to BullMQ, whose workers are not the host's: pause it with BullMQ (Queue.pause) (nothing was changed)"
        );
    }
    Ok(())
}

/// `outbox queue pause QUEUE [--reason R]`: admin only, audited.
pub async fn pause_queue(config: &Config, queue: &str, reason: Option<&str>) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    let operator = require(pool, Role::Admin, "queue pause").await?;
    let paused = store::paused_queues(pool).await?;
    check_queue(config, queue, &paused)?;
    if let Some(reason) = reason {
        if reason.chars().count() > MAX_PAUSE_REASON_CHARS {
            anyhow::bail!(
                "--reason is longer than {MAX_PAUSE_REASON_CHARS} characters (nothing was changed)"
            );
        }
        if reason.chars().any(char::is_control) {
            anyhow::bail!(
                "--reason must be one line of text without control characters (nothing was changed)"
            );
        }
    }
    let control = QueuePauseControl::connect(&config.settings).await?;
    let newly = control.pause(pool, &operator, queue, reason).await?;
    if newly {
        out!("queue {queue} paused: no handler call of it starts on any host from now on; handlers already running finish (`outbox queue resume {queue}` resumes it)");
        if !config.routes.handlers.contains_key(queue) && !config.routes.handlers.is_empty() {
            eprintln!(
                "warning: [handlers] binds no handler to {queue}, so no receiver reads it now; the pause applies once one does"
            );
        }
    } else if let Some(p) = paused.iter().find(|p| p.queue == queue) {
        out!(
            "queue {queue} was already paused (since {}, by {}{})",
            p.paused_at.format("%Y-%m-%d %H:%M:%S UTC"),
            p.paused_by,
            p.reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        );
    } else {
        out!("queue {queue} was already paused");
    }
    Ok(())
}

/// `outbox queue resume QUEUE`: admin only, audited.
pub async fn resume_queue(config: &Config, queue: &str) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    let operator = require(pool, Role::Admin, "queue resume").await?;
    let paused = store::paused_queues(pool).await?;
    check_queue(config, queue, &paused)?;
    let control = QueuePauseControl::connect(&config.settings).await?;
    let resumed = control.resume(pool, &operator, queue).await?;
    if resumed {
        out!("queue {queue} resumed: every host's receivers read it again within a second");
    } else {
        out!("queue {queue} was not paused");
    }
    Ok(())
}

/// One queue as `outbox queue list` shows it.
#[derive(Debug, serde::Serialize)]
struct QueueControls {
    queue: String,
    sink: SinkKind,
    handler: Option<String>,
    paused: Option<store::QueuePause>,
    concurrency: Option<usize>,
    rate_limit: Option<outbox_host::config::RateLimit>,
}

/// `outbox queue list [--json]`: every queue the routes file names (and any paused queue it
/// does not), with its handler, pause, concurrency and rate limit. Viewer role.
pub async fn list_queues(config: &Config, json: bool) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    require(pool, Role::Viewer, "queue list").await?;
    let paused = store::paused_queues(pool).await?;
    let mut names = config.routes.queue_names();
    for p in &paused {
        if !names.contains(&p.queue) {
            names.push(p.queue.clone());
        }
    }
    names.sort();
    let rows: Vec<QueueControls> = names
        .into_iter()
        .map(|queue| {
            let sink = config.routes.sink_of(&queue);
            QueueControls {
                handler: config.routes.handlers.get(&queue).cloned(),
                paused: paused.iter().find(|p| p.queue == queue).cloned(),
                concurrency: (sink == SinkKind::Streams).then(|| {
                    config
                        .routes
                        .concurrency_of(&queue)
                        .unwrap_or(config.settings.receiver_concurrency)
                }),
                rate_limit: config.routes.rate_limit_of(&queue),
                sink,
                queue,
            }
        })
        .collect();
    if json {
        out!("{}", serde_json::to_string(&rows)?);
        return Ok(());
    }
    if rows.is_empty() {
        out!("no queue: the routes file names none and none is paused");
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "queue",
        "sink",
        "handler",
        "state",
        "concurrency",
        "rate limit",
    ]);
    for row in &rows {
        let state = match &row.paused {
            Some(p) => format!(
                "paused since {} by {}{}",
                p.paused_at.format("%Y-%m-%d %H:%M:%S UTC"),
                p.paused_by,
                p.reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            None => "running".into(),
        };
        table.add_row(vec![
            Cell::new(&row.queue),
            Cell::new(row.sink),
            Cell::new(row.handler.as_deref().unwrap_or("")),
            Cell::new(state),
            Cell::new(row.concurrency.map(|n| n.to_string()).unwrap_or_default()),
            Cell::new(
                row.rate_limit
                    .map(|l| l.summary())
                    .unwrap_or_else(|| "none".into()),
            ),
        ]);
    }
    out!("{table}");
    Ok(())
}
