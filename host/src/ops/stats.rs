//! `outbox stats`, `outbox routes which` and `outbox config`.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use sqlx::{PgPool, Row};

use crate::config::{Config, ShownSetting};
use crate::routing::{RouteDecision, RouteTable};
use crate::store;

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

/// Explain where `event_type` goes under `table`.
pub fn explain_route(table: &RouteTable, event_type: &str) -> String {
    match table.rule_for(event_type) {
        Some(rule) => format!(
            "{event_type} -> {} (rule \"{}\")",
            rule.queues.join(", "),
            rule.prefix
        ),
        None => match table.route(event_type) {
            RouteDecision::NoRoute(reason) => format!("{event_type}: {reason}"),
            other => format!("{event_type}: {other:?}"),
        },
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
