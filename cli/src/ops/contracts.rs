//! `outbox contracts list|show|check|diff`: the registry of event types as operators and a
//! producer's CI see it. Loading, checking and comparing are the library's
//! (`outbox_host::contracts`); the tables, JSON and exit codes are made here.

use std::path::Path;

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use outbox_host::config::Config;
use outbox_host::contracts::compat::{Compatibility, SchemaDiff};
use outbox_host::contracts::evolution::{diff_contracts, ContractDiff};
use outbox_host::contracts::{load_edition, ContractRegistry, EventContract};

use crate::exit_status::ExitStatus;

/// Exit code of `contracts diff` for a breaking change (a load error exits with 2).
pub const EXIT_BREAKING: u8 = 1;

/// `outbox contracts list`: every registered type with its owner and versions.
pub fn list_contracts(dir: &Path, json: bool) -> anyhow::Result<()> {
    let registry = ContractRegistry::load_dir(dir)?;
    if json {
        let types: Vec<_> = registry.iter().map(contract_json).collect();
        out!("{}", serde_json::json!({ "dir": dir, "contracts": types }));
        return Ok(());
    }
    if registry.is_empty() {
        out!("no contracts in {}", dir.display());
        return Ok(());
    }
    let mut table = Table::new();
    table.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "event type",
        "owner",
        "versions",
        "description",
    ]);
    for contract in registry.iter() {
        table.add_row(vec![
            Cell::new(&contract.event_type),
            Cell::new(&contract.owner),
            Cell::new(versions_text(contract)),
            Cell::new(&contract.description),
        ]);
    }
    out!("{table}");
    Ok(())
}

/// `outbox contracts show TYPE`: one contract with every version's schema.
pub fn show_contract(dir: &Path, event_type: &str, json: bool) -> anyhow::Result<()> {
    let registry = ContractRegistry::load_dir(dir)?;
    let contract = registry.get(event_type).ok_or_else(|| {
        anyhow::anyhow!(
            "{event_type} has no contract in {} (add {event_type}.toml there)",
            dir.display()
        )
    })?;
    if json {
        out!("{}", contract_json(contract));
        return Ok(());
    }
    out!("{}", contract.event_type);
    out!("  owner:       {}", contract.owner);
    out!("  description: {}", contract.description);
    out!("  file:        {}", contract.path.display());
    for version in contract.versions.values() {
        let mut notes = Vec::new();
        if version.deprecated {
            notes.push("deprecated".to_string());
        }
        if let Some(d) = &version.description {
            notes.push(d.clone());
        }
        let notes = if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join("; "))
        };
        out!("  v{}{notes}:", version.version);
        let schema = serde_json::to_string_pretty(&version.schema)?;
        for line in schema.lines() {
            out!("    {line}");
        }
    }
    Ok(())
}

/// `outbox contracts check [DIR]`: load every file as the host would (an error names the file
/// and the field), and warn about registered types no route matches.
pub fn check_contracts(dir: &Path, config: &Config) -> anyhow::Result<()> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a folder", dir.display());
    }
    let registry = ContractRegistry::load_dir(dir)?;
    for contract in registry.iter() {
        if let Some(warning) = super::no_route_warning(config, &contract.event_type) {
            eprintln!("warning: {warning}");
        }
        for version in contract.versions.values().filter(|v| v.deprecated) {
            eprintln!(
                "note: {} v{} is deprecated",
                contract.event_type, version.version
            );
        }
    }
    let versions: usize = registry.iter().map(|c| c.versions.len()).sum();
    out!(
        "{}: ok ({} event types, {versions} versions)",
        dir.display(),
        registry.len()
    );
    Ok(())
}

/// `outbox contracts diff OLD NEW [--json]`: prints the verdict; exits 0 when identical or
/// compatible, [`EXIT_BREAKING`] when breaking, 2 when a file cannot be read or is invalid.
pub fn diff_contract_files(old: &Path, new: &Path, json: bool) -> anyhow::Result<()> {
    match compare_contract_files(old, new, json) {
        Ok(Compatibility::Breaking) => Err(ExitStatus(EXIT_BREAKING).into()),
        Ok(_) => Ok(()),
        Err(e) => {
            errln!("error: {e:#}");
            Err(ExitStatus(2).into())
        }
    }
}

/// Two editions of one contract file (or two plain JSON Schema files), compared and printed.
/// Returns the verdict; [`diff_contract_files`] turns `breaking` into exit code
/// [`EXIT_BREAKING`].
fn compare_contract_files(old: &Path, new: &Path, json: bool) -> anyhow::Result<Compatibility> {
    let (old_value, new_value) = (read_json_or_toml(old)?, read_json_or_toml(new)?);
    let is_contract =
        |v: &serde_json::Value| v.get("event_type").is_some() && v.get("versions").is_some();
    if is_contract(&old_value) && is_contract(&new_value) {
        let (old_contract, new_contract) = (load_edition(old)?, load_edition(new)?);
        if old_contract.event_type != new_contract.event_type {
            anyhow::bail!(
                "{} describes {} but {} describes {}: compare two editions of one type",
                old.display(),
                old_contract.event_type,
                new.display(),
                new_contract.event_type
            );
        }
        let diff = diff_contracts(&old_contract, &new_contract);
        if json {
            out!("{}", serde_json::to_string(&diff)?);
        } else {
            print_contract_diff(&diff);
        }
        return Ok(diff.verdict);
    }
    if is_contract(&old_value) || is_contract(&new_value) {
        anyhow::bail!("compare two contract files or two JSON Schema files, not one of each");
    }
    for (path, schema) in [(old, &old_value), (new, &new_value)] {
        outbox_host::contracts::compile_schema(schema)
            .map_err(|e| anyhow::anyhow!("{}: not a valid JSON Schema: {e}", path.display()))?;
    }
    let diff = outbox_host::contracts::compat::diff_schemas(&old_value, &new_value);
    if json {
        out!("{}", serde_json::to_string(&diff)?);
    } else {
        out!("{}", verdict_word(diff.verdict));
        print_schema_changes(&diff, "  ");
    }
    Ok(diff.verdict)
}

fn print_contract_diff(diff: &ContractDiff) {
    out!("{}: {}", diff.event_type, verdict_word(diff.verdict));
    if diff.metadata_changed {
        out!("  owner or description changed");
    }
    for version in &diff.versions {
        match version.change {
            "removed" => out!(
                "  v{}: removed: breaking (producers and handlers may still use it; deprecate it first)",
                version.version
            ),
            "added" => {
                out!("  v{}: added", version.version);
                if let Some((previous, against)) = &version.against_previous {
                    out!(
                        "    against v{previous}: {} (a new version may change anything; handlers declare the versions they support)",
                        verdict_word(against.verdict)
                    );
                    print_schema_changes(against, "      ");
                }
            }
            _ => {
                out!(
                    "  v{}: changed in place: {}",
                    version.version,
                    verdict_word(version.verdict)
                );
                if let Some(schema) = &version.schema {
                    print_schema_changes(schema, "    ");
                }
            }
        }
    }
}

fn print_schema_changes(diff: &SchemaDiff, indent: &str) {
    for change in &diff.changes {
        out!(
            "{indent}{}: {}: {}",
            change.path,
            verdict_word(change.verdict),
            change.reason
        );
    }
}

fn verdict_word(verdict: Compatibility) -> &'static str {
    match verdict {
        Compatibility::Identical => "identical",
        Compatibility::Compatible => "compatible",
        Compatibility::Breaking => "breaking",
    }
}

fn read_json_or_toml(path: &Path) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    if path.extension().is_some_and(|e| e == "toml") {
        let value: toml::Value = toml::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), e.message()))?;
        Ok(serde_json::to_value(value)?)
    } else {
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

fn versions_text(contract: &EventContract) -> String {
    contract
        .versions
        .values()
        .map(|v| {
            if v.deprecated {
                format!("v{} (deprecated)", v.version)
            } else {
                format!("v{}", v.version)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn contract_json(contract: &EventContract) -> serde_json::Value {
    serde_json::json!({
        "event_type": contract.event_type,
        "owner": contract.owner,
        "description": contract.description,
        "file": contract.path,
        "versions": contract.versions.values().map(|v| serde_json::json!({
            "version": v.version,
            "description": v.description,
            "deprecated": v.deprecated,
            "schema": v.schema,
        })).collect::<Vec<_>>(),
    })
}
