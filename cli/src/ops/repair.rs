//! `outbox requeue` and `outbox cancel`: an operator's repair of outbox rows.
//!
//! Owns the human side of a repair: showing the plan (what changes, what is left alone and why,
//! warnings), asking before a large change, the progress bar, and the text or JSON report. The
//! rows are chosen and changed by `outbox_host::store::{plan_repair, apply_repair}`; a dry run
//! shows the same plan a real run with the same arguments then carries out. Both need an admin
//! operator, and each run (dry or not) is written to the audit trail.

use std::io::IsTerminal;

use outbox_host::config::Config;
use outbox_host::store::{self, RepairAction, RepairPlan, RepairReport, Role, RowFilter};

/// How a repair runs.
#[derive(Debug, Clone)]
pub struct RepairOptions {
    /// Change at most this many rows (lowest ids first).
    pub limit: Option<u64>,
    /// Show the plan, change nothing.
    pub dry_run: bool,
    /// Print one JSON object instead of text (and no progress bar).
    pub json: bool,
    /// Go on without asking, whatever the number of rows.
    pub yes: bool,
    /// Ask before changing more rows than this.
    pub confirm_above: u64,
}

/// The JSON shape of a repair's result.
#[derive(serde::Serialize)]
struct RepairOutput<'a> {
    action: RepairAction,
    dry_run: bool,
    filter: &'a RowFilter,
    /// Rows the run changes (dry run) or chose to change.
    ids: &'a [i64],
    planned: usize,
    changed: u64,
    changed_meanwhile: u64,
    skipped: &'a std::collections::BTreeMap<String, i64>,
    skipped_why: &'a std::collections::BTreeMap<String, String>,
    missing_ids: &'a [i64],
    beyond_limit: i64,
    warnings: &'a [String],
}

/// Run `outbox requeue` or `outbox cancel` with `filter`.
pub async fn repair_rows(
    config: &Config,
    action: RepairAction,
    filter: RowFilter,
    options: RepairOptions,
) -> anyhow::Result<()> {
    let pool = store::connect(&config.settings.database_url, 2).await?;
    store::migrate(&pool).await?;
    let operator = super::require(&pool, Role::Admin, action.as_str()).await?;
    let plan = store::plan_repair(
        &pool,
        action,
        &filter,
        options.limit,
        config.settings.idempotency_ttl,
    )
    .await?;
    if !options.json {
        describe_plan(&plan, options.dry_run);
    }
    let arguments = serde_json::json!({ "filter": &filter, "limit": options.limit });
    let mut report = RepairReport::default();
    if !options.dry_run && !plan.ids.is_empty() {
        confirm(&plan, &options)?;
        let bar = progress_bar(plan.ids.len() as u64, action, options.json);
        report = store::apply_repair(&pool, &plan, &operator.name, &arguments, |done| {
            bar.set_position(done)
        })
        .await?;
        bar.finish_and_clear();
    }
    if options.dry_run || plan.ids.is_empty() {
        // A run that changes rows is audited by `apply_repair`, in the statements that change
        // them; a dry run (or one with nothing to change) is recorded here.
        let affected = if options.dry_run {
            plan.ids.len() as u64
        } else {
            0
        };
        store::record_audit(
            &pool,
            &operator,
            action.as_str(),
            &arguments,
            options.dry_run,
            affected,
        )
        .await?;
    }
    if options.json {
        let output = RepairOutput {
            action,
            dry_run: options.dry_run,
            filter: &filter,
            ids: &plan.ids,
            planned: plan.ids.len(),
            changed: report.changed,
            changed_meanwhile: report.changed_meanwhile,
            skipped: &plan.skipped,
            skipped_why: &plan.skipped_why,
            missing_ids: &plan.missing_ids,
            beyond_limit: plan.beyond_limit,
            warnings: &plan.warnings,
        };
        out!("{}", serde_json::to_string_pretty(&output)?);
    } else if !options.dry_run {
        out!(
            "{}: {} rows changed to {}{}",
            action.as_str(),
            report.changed,
            action.to_status(),
            if report.changed_meanwhile > 0 {
                format!(
                    "; {} left alone because their status changed since they were chosen",
                    report.changed_meanwhile
                )
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// The plan in text: rows to change, rows left alone and why, warnings.
fn describe_plan(plan: &RepairPlan, dry_run: bool) {
    let verb = plan.action.as_str();
    let shown: Vec<String> = plan.ids.iter().take(20).map(i64::to_string).collect();
    let more = if plan.ids.len() > shown.len() {
        format!(" and {} more", plan.ids.len() - shown.len())
    } else {
        String::new()
    };
    out!(
        "{verb}{}: {} rows to {}{}",
        if dry_run {
            " (dry run, nothing changes)"
        } else {
            ""
        },
        plan.ids.len(),
        plan.action.to_status(),
        if plan.ids.is_empty() {
            String::new()
        } else {
            format!(": ids {}{more}", shown.join(", "))
        }
    );
    for (status, count) in &plan.skipped {
        let why = plan.skipped_why.get(status).map_or("", String::as_str);
        out!("  skipped {count} {status} rows: {why}");
    }
    if !plan.missing_ids.is_empty() {
        let missing: Vec<String> = plan.missing_ids.iter().map(i64::to_string).collect();
        out!("  no such event: {}", missing.join(", "));
    }
    if plan.beyond_limit > 0 {
        out!(
            "  {} more rows match beyond --limit; run again to {verb} them",
            plan.beyond_limit
        );
    }
    for warning in &plan.warnings {
        out!("  warning: {warning}");
    }
}

/// Ask before changing more than `confirm_above` rows, unless `--yes`. Without a terminal to
/// ask on, refuse and say how to go on.
fn confirm(plan: &RepairPlan, options: &RepairOptions) -> anyhow::Result<()> {
    let rows = plan.ids.len() as u64;
    if options.yes || rows <= options.confirm_above {
        return Ok(());
    }
    let verb = plan.action.as_str();
    super::confirm::confirm_or_refuse(
        verb,
        &format!("{verb} {rows} rows?"),
        &format!(
            "{verb} would change {rows} rows, more than --confirm-above {}: add --yes to go on",
            options.confirm_above
        ),
        !options.json,
    )
}

/// A progress bar on standard error for a terminal; hidden for JSON or without a terminal.
fn progress_bar(rows: u64, action: RepairAction, json: bool) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(rows);
    if let Ok(style) = indicatif::ProgressStyle::with_template(&format!(
        "{}: {{bar:40}} {{pos}}/{{len}} rows ({{eta}} left)",
        action.as_str()
    )) {
        bar.set_style(style);
    }
    bar
}
