//! `outbox operator add|list|revoke`, `outbox audit`, `outbox release`, and the check every gated command makes
//! first ([`require`]): who runs it (the token in `OUTBOX_OPERATOR_TOKEN`, or in the file
//! `OUTBOX_OPERATOR_TOKEN_FILE` names) and whether its role allows it. A refused command says why
//! and has changed nothing. The identities, roles and audit rows are
//! `outbox_host::store::{authorize, add_operator, record_audit, ...}`.

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use sqlx::PgPool;

use outbox_host::store::{self, AccessError, Operator, Role};

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
/// who can reach the database; every later one needs an admin's token. Prints the new token
/// once.
pub async fn add_operator(pool: &PgPool, name: &str, role: Role) -> anyhow::Result<()> {
    let by = if store::operators_exist(pool).await? {
        let admin = require(pool, Role::Admin, "operator add").await?;
        admin.name
    } else {
        if role != Role::Admin {
            anyhow::bail!(
                "no operator exists yet: the first one must be an admin (`outbox operator add {name} --role admin`)"
            );
        }
        "bootstrap".to_string()
    };
    let token = store::add_operator(pool, name, role, &by).await?;
    let operator = Operator {
        name: name.to_string(),
        role,
    };
    let arguments = serde_json::json!({ "name": name, "role": role });
    store::record_audit(
        pool,
        &operator_or(&by, &operator),
        "operator add",
        &arguments,
        false,
        1,
    )
    .await?;
    eprintln!(
        "operator {name} ({}) added; its token, shown only now (keep it in OUTBOX_OPERATOR_TOKEN or a file named by OUTBOX_OPERATOR_TOKEN_FILE):",
        role.as_str()
    );
    out!("{token}");
    Ok(())
}

/// The audit row's operator: who added (an admin), or the new admin itself when bootstrapping.
fn operator_or(by: &str, added: &Operator) -> Operator {
    if by == "bootstrap" {
        added.clone()
    } else {
        Operator {
            name: by.to_string(),
            role: Role::Admin,
        }
    }
}

/// `outbox operator list`: every operator (never a token).
pub async fn list_operators(pool: &PgPool, json: bool) -> anyhow::Result<()> {
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
/// revoked (nobody could repair anything after).
pub async fn revoke_operator(pool: &PgPool, name: &str) -> anyhow::Result<()> {
    let admin = require(pool, Role::Admin, "operator revoke").await?;
    let operators = store::list_operators(pool).await?;
    let active_admins: Vec<&str> = operators
        .iter()
        .filter(|o| o.role == "admin" && o.revoked_at.is_none())
        .map(|o| o.name.as_str())
        .collect();
    if active_admins == [name] {
        return Err(AccessError::Invalid(format!(
            "{name} is the last admin: add another admin before revoking it (nothing was changed)"
        ))
        .into());
    }
    if !store::revoke_operator(pool, name).await? {
        anyhow::bail!("no active operator named {name} (nothing was changed)");
    }
    let arguments = serde_json::json!({ "name": name });
    store::record_audit(pool, &admin, "operator revoke", &arguments, false, 1).await?;
    out!("operator {name} revoked");
    Ok(())
}

/// `outbox audit`: the newest `limit` destructive commands.
pub async fn print_audit(pool: &PgPool, limit: i64, json: bool) -> anyhow::Result<()> {
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
pub async fn release_worker(pool: &PgPool, worker: &str, force: bool) -> anyhow::Result<()> {
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
    let released = store::release_claims(pool, worker).await?;
    store::record_audit(
        pool,
        &operator,
        "release",
        &serde_json::json!({ "worker": worker, "force": force }),
        false,
        released,
    )
    .await?;
    out!("release: {released} claims of host {worker} are pending again, due now");
    Ok(())
}
