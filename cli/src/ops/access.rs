//! `outbox operator add|list|revoke`, `outbox audit`, `outbox release`, and the check every gated command makes
//! first ([`require`]): who runs it (the token in `OUTBOX_OPERATOR_TOKEN`, or in the file
//! `OUTBOX_OPERATOR_TOKEN_FILE` names) and whether its role allows it. A refused command says why
//! and has changed nothing. The identities, roles and audit rows are
//! `outbox_host::store::{authorize, add_operator_audited, revoke_operator_audited, ...}`: each
//! change and its audit row are one transaction.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use sqlx::PgPool;

use outbox_host::config::Config;
use outbox_host::store::{self, Operator, Role};

/// The operator token of this command: `OUTBOX_OPERATOR_TOKEN`, else the contents of the file
/// `OUTBOX_OPERATOR_TOKEN_FILE` names.
pub fn operator_token() -> anyhow::Result<Option<String>> {
    if let Ok(token) = std::env::var("OUTBOX_OPERATOR_TOKEN") {
        return Ok(Some(token));
    }
    match std::env::var("OUTBOX_OPERATOR_TOKEN_FILE") {
        Ok(path) => {
            let token = std::fs::read_to_string(&path).map_err(|e| {
                anyhow::anyhow!(
                    "read the operator token from OUTBOX_OPERATOR_TOKEN_FILE {path}: {e}"
                )
            })?;
            Ok(Some(token.trim().to_string()))
        }
        Err(_) => Ok(None),
    }
}

/// The operator running `command`, if its token has at least `needed`; else why not.
pub async fn require(pool: &PgPool, needed: Role, command: &str) -> anyhow::Result<Operator> {
    let token = operator_token()?;
    Ok(store::authorize(pool, token.as_deref(), needed, command).await?)
}

/// `outbox operator add NAME --role R`: the first operator (an admin) may be added by anyone
/// who can reach the database; every later one needs an admin's token. The check, the add and
/// its audit row are one transaction (`store::add_operator_audited`), so two first adds at once
/// bootstrap one admin. Prints the new token once.
pub async fn add_operator(config: &Config, name: &str, role: &str) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    let role =
        Role::parse(role).ok_or_else(|| anyhow::anyhow!("--role admin or viewer, not {role:?}"))?;
    let token = operator_token()?;
    let added = store::add_operator_audited(pool, token.as_deref(), name, role).await?;
    eprintln!(
        "operator {name} ({}) added; its token, shown only now (keep it in OUTBOX_OPERATOR_TOKEN or a file named by OUTBOX_OPERATOR_TOKEN_FILE):",
        role.as_str()
    );
    out!("{}", added.token);
    Ok(())
}

/// `outbox operator list`: every operator (never a token).
pub async fn list_operators(config: &Config, json: bool) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    require(pool, Role::Viewer, "operator list").await?;
    let operators = store::list_operators(pool).await?;
    if json {
        out!("{}", serde_json::to_string_pretty(&operators)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_header(vec!["name", "role", "created", "by", "revoked"]);
    for o in &operators {
        t.add_row(vec![
            Cell::new(&o.name),
            Cell::new(&o.role),
            Cell::new(o.created_at.to_rfc3339()),
            Cell::new(&o.created_by),
            Cell::new(o.revoked_at.map(|r| r.to_rfc3339()).unwrap_or_default()),
        ]);
    }
    out!("{t}");
    Ok(())
}

/// `outbox operator revoke NAME` (admin): its token stops working. The last admin cannot be
/// revoked (nobody could repair anything after); the check, the revocation and its audit row are
/// one transaction (`store::revoke_operator_audited`), so two admins revoking each other at once
/// leave one.
pub async fn revoke_operator(config: &Config, name: &str) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    let token = operator_token()?;
    store::revoke_operator_audited(pool, token.as_deref(), name).await?;
    out!("operator {name} revoked");
    Ok(())
}

/// `outbox audit`: the newest `limit` destructive commands.
pub async fn print_audit(config: &Config, limit: i64, json: bool) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    require(pool, Role::Viewer, "audit").await?;
    let entries = store::audit_trail(pool, limit).await?;
    if json {
        out!("{}", serde_json::to_string_pretty(&entries)?);
        return Ok(());
    }
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "at",
        "operator",
        "command",
        "dry run",
        "rows",
        "arguments",
    ]);
    for e in &entries {
        t.add_row(vec![
            Cell::new(e.at.to_rfc3339()),
            Cell::new(&e.operator),
            Cell::new(&e.command),
            Cell::new(if e.dry_run { "yes" } else { "no" }),
            Cell::new(e.rows_affected),
            Cell::new(e.arguments.to_string()),
        ]);
    }
    out!("{t}");
    Ok(())
}

/// `outbox release --worker ID`: give back the claims of a host that died, at once.
pub async fn release_worker(config: &Config, worker: &str, force: bool) -> anyhow::Result<()> {
    let pool = &super::open_store(config).await?;
    let operator = require(pool, Role::Admin, "release").await?;
    match store::worker_silence(pool, worker).await? {
        None => anyhow::bail!(
            "no host {worker:?} has ever sent a heartbeat: `outbox stats` lists the hosts (nothing was changed)"
        ),
        Some(silent) if silent < 30.0 && !force => anyhow::bail!(
            "host {worker} sent a heartbeat {silent:.0} s ago and may still be working: stop it first, or add --force (nothing was changed)"
        ),
        Some(_) => {}
    }
    let released = store::release_claims_audited(pool, &operator, worker, force).await?;
    out!("release: {released} claims of host {worker} are pending again, due now");
    Ok(())
}
