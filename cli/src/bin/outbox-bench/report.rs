//! Report: the figures of one bench run, each with the baseline it is compared to (measured in
//! the same run) and the goal it is held to, shown as one summary table at the end or printed as
//! one JSON document (`--json`). It also owns where the per-round lines go (stdout in a
//! terminal run, stderr with `--json`, so stdout holds only the document). It measures nothing
//! and never decides a figure's value.

use std::fmt::Display;

use chrono::{DateTime, Utc};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{Cell, CellAlignment, Table};
use serde::Serialize;

/// Version of the JSON document's shape: raised whenever a field changes meaning or goes away.
pub(crate) const SCHEMA: &str = "outbox-bench/1";

/// Everything a run measured, in the order it was measured.
#[derive(Serialize)]
pub(crate) struct Report {
    /// [`SCHEMA`].
    schema: &'static str,
    /// When the run started.
    started_at: DateTime<Utc>,
    /// When the report was printed.
    finished_at: Option<DateTime<Utc>>,
    /// The bench's parameters (the command-line arguments after defaults).
    parameters: serde_json::Value,
    /// Headline figures.
    figures: Vec<Figure>,
    /// Baselines or sections that could not run, and why.
    skipped: Vec<Skipped>,
    /// Supporting text (query plans), shown in the terminal as it is measured.
    details: Vec<Detail>,
    /// True: the document goes to stdout, every other line to stderr.
    #[serde(skip)]
    json: bool,
}

/// One headline figure.
#[derive(Serialize)]
pub(crate) struct Figure {
    /// The section that measured it (`dispatch`, `e2e`, ...).
    section: &'static str,
    /// Stable identifier (`dispatch.host`), for scripts comparing runs.
    key: &'static str,
    /// What it is, in words.
    name: String,
    /// The measured value.
    value: f64,
    /// Unit of `value` (`events/s`, `ms`, `MB`, ...).
    unit: &'static str,
    /// What it is compared to, measured in the same run.
    baseline: Option<Baseline>,
    /// `value / baseline.value`.
    ratio: Option<f64>,
    /// The goal the figure is held to, and whether this run met it.
    goal: Option<Goal>,
}

/// The comparison point of a figure.
#[derive(Serialize)]
pub(crate) struct Baseline {
    /// Stable identifier (`dispatch.sql_limit`).
    key: &'static str,
    /// What it is, in words.
    name: String,
    /// The measured value, in the figure's unit.
    value: f64,
}

/// What a figure must reach.
#[derive(Serialize)]
pub(crate) struct Goal {
    /// `value` or `ratio`.
    of: &'static str,
    /// `>=` or `<=`.
    op: &'static str,
    /// The bound.
    target: f64,
    /// Whether this run met it.
    met: bool,
}

/// A baseline or section that did not run.
#[derive(Serialize)]
pub(crate) struct Skipped {
    /// The section it belongs to.
    section: &'static str,
    /// What did not run.
    what: String,
    /// Why.
    reason: String,
}

/// Supporting text of a section.
#[derive(Serialize)]
pub(crate) struct Detail {
    /// The section it belongs to.
    section: &'static str,
    /// Stable identifier (`claim_cost.plan_large`).
    key: &'static str,
    /// The text (e.g. an EXPLAIN plan).
    text: String,
}

impl Report {
    /// An empty report; `json` sends per-round lines to stderr.
    pub(crate) fn new(json: bool, parameters: serde_json::Value) -> Self {
        Self {
            schema: SCHEMA,
            started_at: Utc::now(),
            finished_at: None,
            parameters,
            figures: Vec::new(),
            skipped: Vec::new(),
            details: Vec::new(),
            json,
        }
    }

    /// Print a progress or per-round line (stdout, or stderr with `--json`).
    pub(crate) fn say(&self, line: impl Display) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// Record a headline figure; chain [`Figure::against`] and a goal onto the result.
    pub(crate) fn figure(
        &mut self,
        section: &'static str,
        key: &'static str,
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
    ) -> &mut Figure {
        self.figures.push(Figure {
            section,
            key,
            name: name.into(),
            value,
            unit,
            baseline: None,
            ratio: None,
            goal: None,
        });
        let last = self.figures.len() - 1;
        &mut self.figures[last]
    }

    /// Record that `what` did not run, and why; said at once, and listed in the summary.
    pub(crate) fn skip(
        &mut self,
        section: &'static str,
        what: impl Into<String>,
        reason: impl Into<String>,
    ) {
        let skipped = Skipped {
            section,
            what: what.into(),
            reason: reason.into(),
        };
        self.say(format!("  SKIPPED {}: {}", skipped.what, skipped.reason));
        self.skipped.push(skipped);
    }

    /// Record supporting text (said at once).
    pub(crate) fn detail(&mut self, section: &'static str, key: &'static str, text: String) {
        self.say(&text);
        self.details.push(Detail { section, key, text });
    }

    /// Print the summary table (terminal) or the JSON document (stdout, `--json`).
    pub(crate) fn finish(mut self) -> anyhow::Result<()> {
        self.finished_at = Some(Utc::now());
        if self.json {
            println!("{}", serde_json::to_string_pretty(&self)?);
            return Ok(());
        }
        println!();
        println!("{}", self.table());
        for s in &self.skipped {
            println!("skipped ({}): {}: {}", s.section, s.what, s.reason);
        }
        Ok(())
    }

    /// Every figure with its baseline, ratio and goal, one row each.
    fn table(&self) -> Table {
        let mut table = Table::new();
        table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "section", "figure", "value", "baseline", "ratio", "goal",
        ]);
        for f in &self.figures {
            let baseline = f
                .baseline
                .as_ref()
                .map(|b| format!("{}: {}", b.name, format_value(b.value, f.unit)))
                .unwrap_or_default();
            let ratio = f.ratio.map(|r| format!("{r:.2}")).unwrap_or_default();
            let goal = f
                .goal
                .as_ref()
                .map(|g| {
                    let bound = match g.of {
                        "ratio" => format!("{:.2}", g.target),
                        _ => format_value(g.target, f.unit),
                    };
                    let verdict = if g.met { "met" } else { "NOT MET" };
                    format!("{} {} {bound}: {verdict}", g.of, g.op)
                })
                .unwrap_or_default();
            table.add_row(vec![
                Cell::new(f.section),
                Cell::new(&f.name),
                Cell::new(format_value(f.value, f.unit)).set_alignment(CellAlignment::Right),
                Cell::new(baseline),
                Cell::new(ratio).set_alignment(CellAlignment::Right),
                Cell::new(goal),
            ]);
        }
        table
    }
}

impl Figure {
    /// Compare with `baseline` (same unit): sets the ratio `value / baseline`.
    pub(crate) fn against(
        &mut self,
        key: &'static str,
        name: impl Into<String>,
        value: f64,
    ) -> &mut Self {
        self.ratio = (value != 0.0).then(|| self.value / value);
        self.baseline = Some(Baseline {
            key,
            name: name.into(),
            value,
        });
        self
    }

    /// Goal: `value / baseline >= target`.
    pub(crate) fn ratio_at_least(&mut self, target: f64) -> &mut Self {
        let met = self.ratio.is_some_and(|r| r >= target);
        self.goal = Some(Goal {
            of: "ratio",
            op: ">=",
            target,
            met,
        });
        self
    }

    /// Goal: `value / baseline <= target`.
    pub(crate) fn ratio_at_most(&mut self, target: f64) -> &mut Self {
        let met = self.ratio.is_some_and(|r| r <= target);
        self.goal = Some(Goal {
            of: "ratio",
            op: "<=",
            target,
            met,
        });
        self
    }

    /// Goal: `value <= target` (in the figure's unit).
    pub(crate) fn value_at_most(&mut self, target: f64) -> &mut Self {
        self.goal = Some(Goal {
            of: "value",
            op: "<=",
            target,
            met: self.value <= target,
        });
        self
    }
}

/// A value with its unit, with as many decimals as its size deserves.
fn format_value(value: f64, unit: &str) -> String {
    let magnitude = value.abs();
    let decimals = if magnitude >= 100.0 {
        0
    } else if magnitude >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.decimals$} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(report: &Report) -> serde_json::Value {
        serde_json::to_value(report).unwrap()
    }

    #[test]
    fn bench_json_document_has_the_documented_shape() {
        let mut report = Report::new(true, serde_json::json!({"events": 10}));
        report
            .figure("dispatch", "dispatch.host", "host", 800.0, "events/s")
            .against("dispatch.sql_limit", "SQL limit", 1000.0)
            .ratio_at_least(0.7);
        report.skip("e2e", "graphile-worker baseline", "node_modules missing");
        report.detail("claim-cost", "claim_cost.plan_large", "Index Scan".into());
        let doc = document(&report);
        let mut keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "details",
                "figures",
                "finished_at",
                "parameters",
                "schema",
                "skipped",
                "started_at"
            ]
        );
        assert_eq!(doc["schema"], SCHEMA);
        assert_eq!(doc["parameters"]["events"], 10);
        let figure = &doc["figures"][0];
        assert_eq!(figure["key"], "dispatch.host");
        assert_eq!(figure["unit"], "events/s");
        assert_eq!(figure["baseline"]["key"], "dispatch.sql_limit");
        assert_eq!(figure["baseline"]["value"], 1000.0);
        assert_eq!(figure["ratio"], 0.8);
        assert_eq!(
            figure["goal"],
            serde_json::json!({"of": "ratio", "op": ">=", "target": 0.7, "met": true})
        );
        assert_eq!(doc["skipped"][0]["reason"], "node_modules missing");
        assert_eq!(doc["details"][0]["text"], "Index Scan");
    }

    #[test]
    fn bench_figure_without_baseline_has_null_ratio_and_goal() {
        let mut report = Report::new(true, serde_json::Value::Null);
        report.figure("latency", "latency.p50", "p50", 1.5, "ms");
        let figure = &document(&report)["figures"][0];
        assert!(figure["baseline"].is_null());
        assert!(figure["ratio"].is_null());
        assert!(figure["goal"].is_null());
    }

    #[test]
    fn bench_goals_report_a_miss() {
        let mut report = Report::new(true, serde_json::Value::Null);
        report
            .figure("claim-cost", "claim_cost.large", "large", 3.0, "ms")
            .against("claim_cost.small", "small", 1.0)
            .ratio_at_most(1.5);
        report
            .figure("rss", "rss.end", "rss", 120.0, "MB")
            .value_at_most(100.0);
        // A ratio goal without a baseline (it was skipped) is not met.
        report
            .figure("e2e", "e2e.host", "e2e", 5000.0, "events/s")
            .ratio_at_least(4.0);
        let doc = document(&report);
        for i in 0..3 {
            assert_eq!(doc["figures"][i]["goal"]["met"], false, "figure {i}");
        }
        assert_eq!(doc["figures"][0]["ratio"], 3.0);
        let table = report.table().to_string();
        assert!(table.contains("NOT MET"), "{table}");
        assert!(table.contains("3.00 ms"), "{table}");
    }
}
