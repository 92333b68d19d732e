//! `outbox stats`, `outbox routes which` and `outbox config`.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use sqlx::{PgPool, Row};

use crate::config::{Config, ShownSetting};
use crate::routing::{RouteDecider, RouteDecision, Router};
use crate::store::{self, ClaimedEvent};

/// Print the status counts (and per-type failures) of the outbox.
pub async fn print_stats(pool: &PgPool, json: bool) -> anyhow::Result<()> {
    let counts = store::status_counts(pool).await?;
    let failed_by_type: Vec<(String, i64)> = sqlx::query(
        "SELECT event_type, count(*) AS n FROM outbox_event WHERE status = 'failed' GROUP BY 1 ORDER BY 2 DESC LIMIT 20",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.get("event_type"), r.get("n")))
    .collect();
    let workers: Vec<(String, String, f64)> = sqlx::query(
        "SELECT id, host_name, extract(epoch FROM now() - last_seen)::float8 AS age FROM outbox_worker ORDER BY last_seen DESC LIMIT 20",
    )
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|r| (r.get("id"), r.get("host_name"), r.get("age")))
    .collect();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "status": counts,
                "failed_by_type": failed_by_type.iter().map(|(t, n)| serde_json::json!({"event_type": t, "count": n})).collect::<Vec<_>>(),
                "workers": workers.iter().map(|(id, h, age)| serde_json::json!({"id": id, "host": h, "last_seen_seconds_ago": age})).collect::<Vec<_>>(),
            })
        );
        return Ok(());
    }
    let mut table = Table::new();
    table
        .load_preset(UTF8_FULL_CONDENSED)
        .set_header(vec!["status", "events"]);
    for (name, n) in [
        ("pending", counts.pending),
        ("processing", counts.processing),
        ("done", counts.done),
        ("failed", counts.failed),
        ("cancelled", counts.cancelled),
        ("pending > 60 s", counts.pending_older_than_60s),
    ] {
        table.add_row(vec![Cell::new(name), Cell::new(n)]);
    }
    println!("{table}");
    if !failed_by_type.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["failed event type", "events"]);
        for (ty, n) in failed_by_type {
            t.add_row(vec![Cell::new(ty), Cell::new(n)]);
        }
        println!("{t}");
    }
    if !workers.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["worker", "host", "last seen"]);
        for (id, host, age) in workers {
            t.add_row(vec![
                Cell::new(id),
                Cell::new(host),
                Cell::new(format!("{age:.0} s ago")),
            ]);
        }
        println!("{t}");
    }
    Ok(())
}

/// Explain where `event_type` goes under `router` (built by
/// [`build_router`](crate::routing::build_router)): the queues and the table rule that picked
/// them, or, for a router plugin, the plugin and what it answered for an event of that type with
/// an empty payload.
pub fn explain_route(router: &dyn Router, event_type: &str) -> String {
    let event = ClaimedEvent::unclaimed(0, event_type, "{}");
    let decision = match router.route_batch(std::slice::from_ref(&event)) {
        Ok(mut decisions) if decisions.len() == 1 => decisions.remove(0),
        Ok(decisions) => RouteDecision::Error(format!(
            "router {} returned {} decisions for 1 event",
            router.name(),
            decisions.len()
        )),
        Err(e) => RouteDecision::Error(e.to_string()),
    };
    let by = match router.decider(event_type) {
        RouteDecider::Rule(rule) => format!("rule \"{}\"", rule.prefix),
        RouteDecider::NoRule => String::new(),
        RouteDecider::Router(name) => format!("router plugin \"{name}\""),
    };
    let outcome = match decision {
        RouteDecision::Queues(queues) => format!("{event_type} -> {}", queues.join(", ")),
        RouteDecision::NoRoute(reason) => format!("{event_type}: {reason}"),
        RouteDecision::Error(message) => format!("{event_type}: routing failed: {message}"),
    };
    if by.is_empty() {
        outcome
    } else {
        format!("{outcome} ({by})")
    }
}

/// Every setting as a `KEY=value  # source` line (env, file or default), for `outbox config`;
/// URL passwords are redacted.
pub fn describe_settings(config: &Config) -> String {
    render_settings(&config.settings.describe(&config.routes.settings))
}

/// Lay out settings as aligned `KEY=value  # source` lines.
fn render_settings(shown: &[ShownSetting]) -> String {
    let assignments: Vec<String> = shown
        .iter()
        .map(|s| format!("{}={}", s.env, s.value))
        .collect();
    let width = assignments.iter().map(String::len).max().unwrap_or(0);
    assignments
        .iter()
        .zip(shown)
        .map(|(assignment, s)| format!("{assignment:<width$}  # {}", s.source))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{FileSettings, Settings};

    #[test]
    fn outbox_config_output_names_every_setting_with_its_source() {
        let file = FileSettings {
            max_retries: Some(3),
            ..FileSettings::default()
        };
        let env = |name: &str| (name == "DATABASE_URL").then(|| "postgres://u:hunter2@db/x".into());
        let settings = Settings::resolve_with(&file, env).unwrap();
        let text = render_settings(&settings.describe_with(&file, env));
        for var in Settings::ENV_VARS {
            assert!(
                text.lines().any(|l| l.starts_with(&format!("{var}="))),
                "{var} missing from:\n{text}"
            );
        }
        assert_eq!(text.lines().count(), Settings::ENV_VARS.len());
        assert!(!text.contains("hunter2"), "{text}");
        let line = |var: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{var}=")))
                .unwrap()
                .to_string()
        };
        assert!(line("DATABASE_URL").ends_with("# env"), "{text}");
        assert!(line("OUTBOX_MAX_RETRIES").starts_with("OUTBOX_MAX_RETRIES=3 "));
        assert!(line("OUTBOX_MAX_RETRIES").ends_with("# file"));
        assert!(line("OUTBOX_HTTP_ADDR").ends_with("# default"));
    }
}
