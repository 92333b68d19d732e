//! `outbox routes check|which`: the routing table as an operator checks it. Parsing, the
//! routers and the feedback-loop analysis are the library's (`outbox_host::config`,
//! `outbox_host::routing`); the warnings and explanations are printed here.

use std::path::PathBuf;

use outbox_host::config::{RoutesFile, Settings};
use outbox_host::live_config::LiveConfig;
use outbox_host::publish;

use crate::config_source::load_config;

/// `outbox routes check [FILE]`: validate a routes file (`file`, else `routes.toml`) and warn
/// about handler-bound queues no queue group lists or that a `max_len` trims, and about
/// feedback loops among the handlers.
pub fn check_routes(file: Option<PathBuf>) -> anyhow::Result<()> {
    let path = file.unwrap_or_else(|| PathBuf::from("routes.toml"));
    let routes = RoutesFile::load(&path)?;
    let settings = Settings::resolve(&routes.settings)?;
    routes
        .check_receiver_lease(settings.receiver_lease)
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    for (queue, handler) in &routes.handlers {
        let groups: Vec<&str> = routes
            .queue_groups
            .iter()
            .filter(|(_, queues)| queues.contains(queue))
            .map(|(group, _)| group.as_str())
            .collect();
        if groups.is_empty() && !routes.queue_groups.is_empty() {
            errln!(
                "warning: {queue} is bound to handler {handler} but no queue group lists it: only hosts run without --queue-group consume it"
            );
        }
        if let Some(max_len) = routes.max_len_of(queue) {
            errln!(
                "warning: {queue} is bound to handler {handler} and has max_len = {max_len}: entries beyond it are dropped even when the handler has not run them yet (counted in outbox stats)"
            );
        }
    }
    let feedback = outbox_host::routing::feedback_loops(&routes);
    for feedback_loop in &feedback.loops {
        eprintln!(
            "warning: feedback loop: {feedback_loop}; the host stops such a chain at generation {} (OUTBOX_MAX_EVENT_GENERATION) with a dead letter",
            settings.max_event_generation
        );
    }
    for unanalysed in &feedback.unanalysed {
        eprintln!("note: {unanalysed}");
    }
    out!(
        "{}: ok ({} routes, {} queue groups, {} plugins)",
        path.display(),
        routes.routes.len(),
        routes.queue_groups.len(),
        routes.plugins.len()
    );
    Ok(())
}

/// `outbox routes which TYPE [--json]`: which queues an event type goes to and which rule
/// decided, routed by the router `outbox run` would build. The type is checked before the
/// routes file (`config_path`) is loaded.
pub async fn which_route(
    config_path: &Option<PathBuf>,
    event_type: &str,
    json: bool,
) -> anyhow::Result<()> {
    publish::validate_event_type(event_type)?;
    let config = load_config(config_path)?;
    let live = LiveConfig::start(&config).await?;
    let explanation =
        outbox_host::routing::explain_route(live.router.current(), &config.routes, event_type)
            .await;
    if json {
        out!("{}", serde_json::to_string(&explanation)?);
    } else {
        out!("{explanation}");
    }
    Ok(())
}
