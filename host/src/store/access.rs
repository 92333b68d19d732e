//! Access: operator identities, their roles and tokens, and the audit trail of what they did.
//!
//! Owns `outbox_operator` (a name, a role — `admin` may repair, `viewer` may read — and the
//! SHA-256 of a token shown once when it is made) and `outbox_audit` (one row per destructive
//! command run: who, what, with which arguments, dry run or not, rows affected). An operator
//! command that changes the operators does its checks, its change and its audit row in one
//! transaction holding [`lock_operators`], so two at once cannot both bootstrap a first admin
//! or revoke the last two admins, and no change is kept without its audit row. It never stores
//! or logs a token itself, and it never lets a refused operator through: every failure to
//! identify or authorize is an [`AccessError`] saying why and what to do.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool, Row};

use super::{Context, StoreError};

/// What an operator may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads: stats, traces, dead-letter lists, the audit trail.
    Viewer,
    /// Reads and repairs: requeue, cancel, dead-letter replay and drop, managing operators.
    Admin,
}

impl Role {
    /// `admin` or `viewer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Admin => "admin",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "viewer" => Some(Role::Viewer),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// An identified operator.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Operator {
    /// The operator's name.
    pub name: String,
    /// Its role.
    pub role: Role,
}

/// Why an operator command may not run.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// No operator exists yet.
    #[error("no operator exists yet: create the first admin with `outbox operator add NAME --role admin` (it prints a token once), then set OUTBOX_OPERATOR_TOKEN to that token")]
    NoOperators,
    /// No token was given.
    #[error("`{command}` needs an operator token with the {needed} role: set OUTBOX_OPERATOR_TOKEN, or OUTBOX_OPERATOR_TOKEN_FILE to a file holding it")]
    NoToken {
        /// The command.
        command: String,
        /// The role it needs.
        needed: &'static str,
    },
    /// The token names no operator, or a revoked one.
    #[error("the operator token is not valid (unknown or revoked): nothing was changed")]
    BadToken,
    /// The operator's role is not enough.
    #[error(
        "operator {operator} has the {role} role; `{command}` needs {needed}: nothing was changed"
    )]
    Forbidden {
        /// The operator.
        operator: String,
        /// Its role.
        role: &'static str,
        /// The command.
        command: String,
        /// The role it needs.
        needed: &'static str,
    },
    /// The request itself is wrong (a bad name, a duplicate).
    #[error("{0}")]
    Invalid(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The stored form of a token.
fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new random token (`obx_` and 64 hex digits).
fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    format!("obx_{}", hex::encode(bytes))
}

/// Whether any operator (revoked or not) exists.
pub async fn operators_exist(pool: &PgPool) -> Result<bool, StoreError> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outbox_operator)")
        .fetch_one(pool)
        .await
        .context("look for operators")
}

/// Identify the holder of `token` and check it has at least `needed` for `command`.
pub async fn authorize(
    pool: &PgPool,
    token: Option<&str>,
    needed: Role,
    command: &str,
) -> Result<Operator, AccessError> {
    let mut conn = pool.acquire().await.context("identify the operator")?;
    authorize_on(&mut conn, token, needed, command).await
}

/// [`authorize`] on `conn` (inside the caller's transaction, so the answer holds until it
/// commits when the caller holds [`lock_operators`]).
async fn authorize_on(
    conn: &mut PgConnection,
    token: Option<&str>,
    needed: Role,
    command: &str,
) -> Result<Operator, AccessError> {
    let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outbox_operator)")
        .fetch_one(&mut *conn)
        .await
        .context("look for operators")?;
    if !any {
        return Err(AccessError::NoOperators);
    }
    let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) else {
        return Err(AccessError::NoToken {
            command: command.to_string(),
            needed: needed.as_str(),
        });
    };
    let row = sqlx::query(
        "SELECT name, role FROM outbox_operator WHERE token_sha256 = $1 AND revoked_at IS NULL",
    )
    .bind(token_hash(token))
    .fetch_optional(&mut *conn)
    .await
    .context("identify the operator")?;
    let Some(row) = row else {
        return Err(AccessError::BadToken);
    };
    let name: String = row.get("name");
    let role = Role::parse(row.get::<&str, _>("role")).ok_or(AccessError::BadToken)?;
    if role < needed {
        return Err(AccessError::Forbidden {
            operator: name,
            role: role.as_str(),
            command: command.to_string(),
            needed: needed.as_str(),
        });
    }
    Ok(Operator { name, role })
}

/// Take the lock that serializes every change of the operators, in the transaction on `conn`
/// until it ends: `SHARE ROW EXCLUSIVE` on `outbox_operator`, which conflicts with itself and
/// with every write of the table but not with reads (tokens keep being checked meanwhile).
pub async fn lock_operators(conn: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::query("LOCK TABLE outbox_operator IN SHARE ROW EXCLUSIVE MODE")
        .execute(conn)
        .await
        .context("lock the operators")?;
    Ok(())
}

/// Who made a new operator: the admin whose token was given, or nobody (the first operator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedOperator {
    /// The new operator's token, shown once: it is not stored and cannot be shown again.
    pub token: String,
    /// Who added it: an admin's name, or `bootstrap` for the first operator.
    pub by: String,
}

/// `outbox operator add`: add operator `name` with `role` as the holder of `token`, with its
/// audit row, in one transaction holding [`lock_operators`]. While no operator exists (checked
/// under the lock) the first one needs no token and must be an admin (it is audited as itself,
/// made by `bootstrap`); once one exists, `token` must be an admin's. Of several adds racing on
/// an empty table exactly one bootstraps; the others are refused like any add without an
/// admin's token. Nothing is kept unless the audit row is.
pub async fn add_operator_audited(
    pool: &PgPool,
    token: Option<&str>,
    name: &str,
    role: Role,
) -> Result<AddedOperator, AccessError> {
    let mut tx = pool.begin().await.context("begin adding an operator")?;
    lock_operators(&mut tx).await?;
    let any: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM outbox_operator)")
        .fetch_one(&mut *tx)
        .await
        .context("look for operators")?;
    let (by, auditor) = if any {
        let admin = authorize_on(&mut tx, token, Role::Admin, "operator add").await?;
        (admin.name.clone(), admin)
    } else {
        if role != Role::Admin {
            return Err(AccessError::Invalid(format!(
                "no operator exists yet: the first one must be an admin (`outbox operator add {name} --role admin`)"
            )));
        }
        let first = Operator {
            name: name.to_string(),
            role,
        };
        (BOOTSTRAP.to_string(), first)
    };
    let token = insert_operator(&mut tx, name, role, &by).await?;
    record_audit(
        &mut *tx,
        &auditor,
        "operator add",
        &serde_json::json!({ "name": name, "role": role }),
        false,
        1,
    )
    .await?;
    tx.commit().await.context(format!("add operator {name}"))?;
    Ok(AddedOperator { token, by })
}

/// Who made the first operator, as `created_by` and [`AddedOperator::by`] say.
pub const BOOTSTRAP: &str = "bootstrap";

/// `outbox operator revoke`: revoke operator `name` as the holder of `token` (an admin's), with
/// its audit row, in one transaction holding [`lock_operators`]. The last active admin is never
/// revoked: checked under the lock, so two admins revoking each other at once leave one. Nothing
/// is kept unless the audit row is.
pub async fn revoke_operator_audited(
    pool: &PgPool,
    token: Option<&str>,
    name: &str,
) -> Result<(), AccessError> {
    let mut tx = pool.begin().await.context("begin revoking an operator")?;
    lock_operators(&mut tx).await?;
    let admin = authorize_on(&mut tx, token, Role::Admin, "operator revoke").await?;
    let role: Option<String> = sqlx::query_scalar(
        "SELECT role FROM outbox_operator WHERE name = $1 AND revoked_at IS NULL",
    )
    .bind(name)
    .fetch_optional(&mut *tx)
    .await
    .context(format!("look up operator {name}"))?;
    let Some(role) = role else {
        return Err(AccessError::Invalid(format!(
            "no active operator named {name} (nothing was changed)"
        )));
    };
    if role == Role::Admin.as_str() {
        let other_admins: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM outbox_operator
             WHERE role = 'admin' AND revoked_at IS NULL AND name <> $1",
        )
        .bind(name)
        .fetch_one(&mut *tx)
        .await
        .context("count the other admins")?;
        if other_admins == 0 {
            return Err(AccessError::Invalid(format!(
                "{name} is the last admin: add another admin before revoking it (nothing was changed)"
            )));
        }
    }
    revoke_operator(&mut *tx, name).await?;
    record_audit(
        &mut *tx,
        &admin,
        "operator revoke",
        &serde_json::json!({ "name": name }),
        false,
        1,
    )
    .await?;
    tx.commit()
        .await
        .context(format!("revoke operator {name}"))?;
    Ok(())
}

/// Add operator `name` with `role`, made by `by`, without any check of who asks or audit row
/// (seeding; the `operator add` command is [`add_operator_audited`]); returns its token, which
/// is not stored and cannot be shown again.
pub async fn add_operator(
    pool: &PgPool,
    name: &str,
    role: Role,
    by: &str,
) -> Result<String, AccessError> {
    let mut conn = pool
        .acquire()
        .await
        .context(format!("add operator {name}"))?;
    insert_operator(&mut conn, name, role, by).await
}

/// Insert operator `name` on `conn`; its new token.
async fn insert_operator(
    conn: &mut PgConnection,
    name: &str,
    role: Role,
    by: &str,
) -> Result<String, AccessError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.@-".contains(c));
    if !valid {
        return Err(AccessError::Invalid(format!(
            "operator name {name:?}: 1 to 64 letters, digits, '_', '.', '@' or '-'"
        )));
    }
    let token = new_token();
    let added = sqlx::query(
        "INSERT INTO outbox_operator (name, role, token_sha256, created_by) VALUES ($1, $2, $3, $4)
         ON CONFLICT (name) DO NOTHING",
    )
    .bind(name)
    .bind(role.as_str())
    .bind(token_hash(&token))
    .bind(by)
    .execute(conn)
    .await
    .context(format!("add operator {name}"))?;
    if added.rows_affected() == 0 {
        return Err(AccessError::Invalid(format!(
            "operator {name} exists already (revoke it and add another name to replace its token)"
        )));
    }
    Ok(token)
}

/// One operator as `outbox operator list` shows it (never its token).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct OperatorInfo {
    /// Name.
    pub name: String,
    /// `admin` or `viewer`.
    pub role: String,
    /// When it was made.
    pub created_at: DateTime<Utc>,
    /// Who made it.
    pub created_by: String,
    /// When it was revoked, if it was.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Every operator, by name.
pub async fn list_operators(pool: &PgPool) -> Result<Vec<OperatorInfo>, StoreError> {
    let rows = sqlx::query(
        "SELECT name, role, created_at, created_by, revoked_at FROM outbox_operator ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .context("list operators")?;
    Ok(rows
        .iter()
        .map(|row| OperatorInfo {
            name: row.get("name"),
            role: row.get("role"),
            created_at: row.get("created_at"),
            created_by: row.get("created_by"),
            revoked_at: row.get("revoked_at"),
        })
        .collect())
}

/// Revoke operator `name` without any check or audit row (the `operator revoke` command is
/// [`revoke_operator_audited`]): its token stops working at once. False when there is no such
/// operator or it was revoked already.
pub async fn revoke_operator<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    name: &str,
) -> Result<bool, StoreError> {
    let revoked = sqlx::query(
        "UPDATE outbox_operator SET revoked_at = now() WHERE name = $1 AND revoked_at IS NULL",
    )
    .bind(name)
    .execute(executor)
    .await
    .context(format!("revoke operator {name}"))?;
    Ok(revoked.rows_affected() == 1)
}

/// One destructive command as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditEntry {
    /// When it ran.
    pub at: DateTime<Utc>,
    /// Who ran it.
    pub operator: String,
    /// The command (`requeue`, `cancel`, `dead-letter replay`, ...).
    pub command: String,
    /// Its arguments (the filter, the limit, ...).
    pub arguments: serde_json::Value,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// Rows (or entries) it changed, or would change for a dry run.
    pub rows_affected: i64,
}

/// Record that `operator` ran `command` with `arguments`.
pub async fn record_audit<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    operator: &Operator,
    command: &str,
    arguments: &serde_json::Value,
    dry_run: bool,
    rows_affected: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO outbox_audit (operator, command, arguments, dry_run, rows_affected)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&operator.name)
    .bind(command)
    .bind(arguments)
    .bind(dry_run)
    .bind(crate::numeric::u64_as_i64(rows_affected))
    .execute(executor)
    .await
    .context(format!(
        "record {command} by {} in the audit trail",
        operator.name
    ))?;
    Ok(())
}

/// `outbox release --worker ID`: give back the claims of host `worker`
/// ([`release_claims`](super::release_claims)) and write its audit row (with `force`, as the
/// operator asked), in one transaction: nothing is released unless the audit row is written.
/// Returns how many claims were released.
pub async fn release_claims_audited(
    pool: &PgPool,
    operator: &Operator,
    worker: &str,
    force: bool,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await.context("begin a release")?;
    let released =
        super::release_claims(&mut *tx, worker, super::ClaimHorizon::everything()).await?;
    record_audit(
        &mut *tx,
        operator,
        "release",
        &serde_json::json!({ "worker": worker, "force": force }),
        false,
        released,
    )
    .await?;
    tx.commit()
        .await
        .context(format!("release the claims of {worker}"))?;
    Ok(released)
}

/// The audit trail, newest first, at most `limit` entries.
pub async fn audit_trail(pool: &PgPool, limit: i64) -> Result<Vec<AuditEntry>, StoreError> {
    let rows = sqlx::query(
        "SELECT at, operator, command, arguments, dry_run, rows_affected
         FROM outbox_audit ORDER BY id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await
    .context("read the audit trail")?;
    Ok(rows
        .iter()
        .map(|row| AuditEntry {
            at: row.get("at"),
            operator: row.get("operator"),
            command: row.get("command"),
            arguments: row.get("arguments"),
            dry_run: row.get("dry_run"),
            rows_affected: row.get("rows_affected"),
        })
        .collect())
}
