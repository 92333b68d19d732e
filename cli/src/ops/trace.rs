//! `outbox trace ID`: the life of one event, and of the events its handlers published, as an
//! indented tree (or one JSON object). The trace is read by `outbox_host::trace::Tracer`.

use outbox_host::config::Config;
use outbox_host::store::{self, Role};
use outbox_host::trace::{EventTrace, Tracer};

/// Print the trace of event `id` down to `depth` generations of children.
pub async fn print_trace(config: &Config, id: i64, depth: usize, json: bool) -> anyhow::Result<()> {
    let pool = store::connect(&config.settings.database_url, 2).await?;
    store::migrate(&pool).await?;
    super::require(&pool, Role::Viewer, "trace").await?;
    // Route as `outbox run` would, to name the queues of an event that was not fanned out.
    let live = outbox_host::live_config::LiveConfig::start(config).await?;
    let tracer = Tracer::connect(pool, &config.settings, live.router.clone()).await?;
    let Some(trace) = tracer.trace(id, depth).await? else {
        anyhow::bail!("no event {id} in outbox_event (retention may have deleted it)");
    };
    if json {
        out!("{}", serde_json::to_string_pretty(&trace)?);
    } else {
        print_event(&trace, 0);
    }
    Ok(())
}

/// One event's block, indented by `level`, then its children.
fn print_event(t: &EventTrace, level: usize) {
    let pad = "    ".repeat(level);
    let e = &t.event;
    out!(
        "{pad}event {} {} v{} — {} (attempts {})",
        e.id,
        e.event_type,
        e.event_version,
        e.status,
        e.attempts
    );
    out!(
        "{pad}  published {} tenant {} dispatch key {}",
        e.created_at.to_rfc3339(),
        e.tenant_id.as_deref().unwrap_or("-"),
        e.dispatch_key.as_deref().unwrap_or("-")
    );
    if e.headers.as_object().is_some_and(|h| !h.is_empty()) {
        out!("{pad}  headers {}", e.headers);
    }
    for h in &t.history {
        match h.action.as_str() {
            "attempt" => out!(
                "{pad}  attempt {} by {} → {}: {}",
                h.attempts,
                h.actor,
                h.to_status,
                h.last_error.as_deref().unwrap_or("")
            ),
            _ => out!(
                "{pad}  {} by {} at {}: {} → {} (had attempts {}, error {})",
                h.action,
                h.actor,
                h.at.to_rfc3339(),
                h.from_status,
                h.to_status,
                h.attempts,
                h.last_error.as_deref().unwrap_or("-")
            ),
        }
    }
    if let (Some(by), Some(at)) = (&e.claimed_by, e.claimed_at) {
        out!(
            "{pad}  last claim by {by} at {}{}",
            at.to_rfc3339(),
            e.processed_at
                .map(|p| format!(", {} at {}", e.status, p.to_rfc3339()))
                .unwrap_or_default()
        );
    }
    if let Some(error) = &e.last_error {
        out!("{pad}  last error: {error}");
    }
    if let Some(note) = &t.routing_note {
        out!("{pad}  destinations: none ({note})");
    }
    for d in &t.destinations {
        out!(
            "{pad}  → {} {}{}{}",
            d.queue,
            d.state,
            d.stream_id
                .as_deref()
                .map(|s| format!(" as {s}"))
                .unwrap_or_default(),
            d.enqueued_at
                .map(|t| format!(" at {}", t.to_rfc3339()))
                .unwrap_or_default()
        );
        if let Some(error) = &d.last_error {
            out!("{pad}      error: {error}");
        }
    }
    for r in &t.receipts {
        out!(
            "{pad}  handler {} on {}: {} after {} attempt(s), {:.1} ms{}{}{}",
            r.handler,
            r.queue,
            r.result,
            r.attempts,
            r.duration_ms,
            if r.duplicates > 0 {
                format!(", {} duplicate deliveries", r.duplicates)
            } else {
                String::new()
            },
            r.error
                .as_deref()
                .map(|e| format!(", error: {e}"))
                .unwrap_or_default(),
            if r.published_ids.is_empty() {
                String::new()
            } else {
                format!(", published {:?}", r.published_ids)
            }
        );
    }
    if t.receipts.is_empty() && !t.destinations.is_empty() {
        out!("{pad}  no handler receipt yet (no handler bound, or not handled yet)");
    }
    for l in &t.dead_letters {
        out!(
            "{pad}  dead letter {} on {} after {} attempts: {}",
            l.dead_letter_id,
            l.queue,
            l.attempts,
            l.error
        );
    }
    for child in &t.children {
        print_event(child, level + 1);
    }
    if t.children_cut > 0 {
        out!(
            "{pad}    … {} more child events not shown (--depth, or the trace's size bound)",
            t.children_cut
        );
    }
}
