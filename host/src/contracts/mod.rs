//! Contracts: the registry of event types, their versions and a JSON Schema per version.
//!
//! Owns the `contracts/` folder beside `routes.toml` (one file per event type, `TYPE.toml` or
//! `TYPE.json`), loading and bounding it ([`ContractRegistry::load_dir`]: a file, a type's
//! versions and the folder are capped, every schema is compiled once with the `jsonschema`
//! crate, which never fetches a remote or file `$ref`), the check of one payload against its
//! type and version ([`ContractRegistry::check`]) with errors that name the field path and the
//! rule (`payload.user_id: expected integer, got string (rule: type)`), the mode
//! ([`ContractMode`]: `strict` rejects an unknown type or version, `permissive` accepts and
//! counts it), and the live handle ([`Contracts`]) that a reload swaps as a whole. A folder
//! with one broken file is refused whole and the previous registry keeps serving. A schema's
//! `pattern`s run under a per-match and a per-payload budget of regex backtracking
//! ([`pattern_budget`]); a payload past either is refused ([`ContractViolation::TooCostly`]).
//!
//! It never writes an event, never decides a retry and never keeps anything a file hands it
//! beyond the caps.
//!
//! Layout: this module holds the types, the folder loader and the schema compiler;
//! `validation_errors` turns a schema failure into `path: expected (rule)` lines, `live` is the
//! handle a reload swaps, `compat` and `evolution` compare two editions of a contract, and
//! `pattern_budget` bounds regex backtracking.

pub mod compat;
pub mod evolution;
mod live;
pub mod pattern_budget;
#[cfg(test)]
mod tests;
mod validation_errors;

pub use live::Contracts;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::naming::validate_event_type;
use validation_errors::describe_error;

/// Largest contract file read, in bytes.
pub const MAX_CONTRACT_FILE_BYTES: u64 = 1024 * 1024;
/// Most contract files in the folder.
pub const MAX_CONTRACTS: usize = 10_000;
/// Most versions one event type may declare.
pub const MAX_VERSIONS_PER_TYPE: usize = 100;
/// Most validation errors reported for one payload (the rest are counted).
pub const MAX_REPORTED_ERRORS: usize = 10;
/// Longest single validation error message, in bytes (longer ones are clipped).
const MAX_ERROR_BYTES: usize = 300;

/// What happens to an event whose type or version has no contract (a setting, defined in
/// [`crate::config`]).
pub use crate::config::ContractMode;

/// Why the contracts folder was not loaded. Nothing of it is used then.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    /// The folder or a file could not be read.
    #[error("contracts: cannot read {path}: {source}")]
    Io {
        /// The folder or file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file breaks the contract file format or a rule.
    #[error("contracts: {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the field.
        message: String,
    },
}

/// Why a payload was refused by its contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractViolation {
    /// The payload does not meet the schema of its type and version.
    #[error("{event_type} v{version} breaks its contract: {}", errors.join("; "))]
    Invalid {
        /// The event's type.
        event_type: String,
        /// The event's version.
        version: i32,
        /// One line per failed rule: path, what was expected, the rule.
        errors: Vec<String>,
    },
    /// Checking the payload's `pattern`s would take more regex backtracking than a budget
    /// allows (see [`pattern_budget`]): the payload is refused, whatever the rest of the check.
    #[error("{event_type} v{version}: payload refused by its contract: {refusal}")]
    TooCostly {
        /// The event's type.
        event_type: String,
        /// The event's version.
        version: i32,
        /// Which budget ran out, on which pattern.
        refusal: pattern_budget::PatternRefusal,
    },
    /// Strict mode: the type has no contract.
    #[error(
        "{event_type} has no contract (contracts mode is strict: add contracts/{event_type}.toml)"
    )]
    UnknownType {
        /// The event's type.
        event_type: String,
    },
    /// Strict mode: the type has a contract, but not this version.
    #[error(
        "{event_type} v{version} is not a registered version (registered: {})",
        versions_list(known)
    )]
    UnknownVersion {
        /// The event's type.
        event_type: String,
        /// The event's version.
        version: i32,
        /// The versions the contract declares.
        known: Vec<i32>,
    },
}

fn versions_list(versions: &[i32]) -> String {
    versions
        .iter()
        .map(|v| format!("v{v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A payload that passed its contract check, or why there was nothing to check it against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conformance {
    /// Valid under the schema of its type and version.
    Valid,
    /// Permissive mode: the type has no contract (accepted, counted).
    UnknownType,
    /// Permissive mode: the type has a contract, but not this version (accepted, counted).
    UnknownVersion,
}

impl Conformance {
    /// The metric label of an unregistered event (`None` when it was checked).
    pub fn unregistered_reason(&self) -> Option<&'static str> {
        match self {
            Self::Valid => None,
            Self::UnknownType => Some("unknown_type"),
            Self::UnknownVersion => Some("unknown_version"),
        }
    }
}

/// One contract file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ContractFile {
    event_type: String,
    owner: String,
    description: String,
    versions: BTreeMap<String, VersionFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionFile {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    deprecated: bool,
    schema: serde_json::Value,
}

/// One event type's contract.
#[derive(Debug, Clone)]
pub struct EventContract {
    /// The event type (`mail.welcome`), equal to the file's name.
    pub event_type: String,
    /// Who owns the type (a team, a service).
    pub owner: String,
    /// What the event means.
    pub description: String,
    /// The file it came from.
    pub path: PathBuf,
    /// Its versions, by number.
    pub versions: BTreeMap<i32, ContractVersion>,
}

/// One version of an event type.
#[derive(Debug, Clone)]
pub struct ContractVersion {
    /// The version number (>= 1).
    pub version: i32,
    /// What changed in it.
    pub description: Option<String>,
    /// Still accepted, but producers should move on.
    pub deprecated: bool,
    /// The JSON Schema of the payload.
    pub schema: serde_json::Value,
    validator: Arc<jsonschema::Validator>,
}

/// Why a payload does not pass one version's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaFailure {
    /// It breaks rules: one line per failed rule, naming the field path and the rule (at most
    /// [`MAX_REPORTED_ERRORS`], then a count of the rest).
    Invalid(Vec<String>),
    /// Checking its `pattern`s ran out of a backtracking budget.
    TooCostly(pattern_budget::PatternRefusal),
}

impl ContractVersion {
    /// Check `payload` against this version's schema, its `pattern` matches all within one
    /// payload budget of [`pattern_budget::PATTERN_STEPS_PER_PAYLOAD`] backtracking steps.
    pub fn validate(&self, payload: &serde_json::Value) -> Result<(), SchemaFailure> {
        pattern_budget::within_payload_budget(pattern_budget::PATTERN_STEPS_PER_PAYLOAD, || {
            self.rule_errors(payload)
        })
        .map_err(SchemaFailure::TooCostly)?
        .map_err(SchemaFailure::Invalid)
    }

    /// The rules `payload` breaks (none: `Ok`).
    fn rule_errors(&self, payload: &serde_json::Value) -> Result<(), Vec<String>> {
        if self.validator.is_valid(payload) {
            return Ok(());
        }
        let mut errors = Vec::new();
        let mut more = 0usize;
        for error in self.validator.iter_errors(payload) {
            if errors.len() < MAX_REPORTED_ERRORS {
                errors.extend(describe_error(&error));
            } else {
                more += 1;
            }
        }
        errors.truncate(MAX_REPORTED_ERRORS);
        if more > 0 {
            errors.push(format!("... and {more} more"));
        }
        Err(errors)
    }
}

/// The loaded contracts: event type -> contract. Immutable; a reload builds a new one.
#[derive(Debug, Clone, Default)]
pub struct ContractRegistry {
    types: BTreeMap<String, EventContract>,
}

impl ContractRegistry {
    /// No contracts at all.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Load every `*.toml` and `*.json` file of `dir` (other files and sub-folders are ignored;
    /// a folder that does not exist is an empty registry). One bad file fails the whole load.
    pub fn load_dir(dir: &Path) -> Result<Self, ContractError> {
        if !dir.exists() {
            return Ok(Self::empty());
        }
        let io = |source| ContractError::Io {
            path: dir.to_path_buf(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            let is_contract = path.extension().is_some_and(|e| e == "toml" || e == "json");
            let hidden = path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if is_contract && !hidden && path.is_file() {
                files.push(path);
            }
        }
        if files.len() > MAX_CONTRACTS {
            return Err(ContractError::Invalid {
                path: dir.to_path_buf(),
                message: format!(
                    "{} contract files, more than the {MAX_CONTRACTS} allowed",
                    files.len()
                ),
            });
        }
        files.sort();
        let mut types = BTreeMap::new();
        for path in files {
            let contract = load_file(&path)?;
            if let Some(other) = types.get(&contract.event_type) {
                let other: &EventContract = other;
                return Err(ContractError::Invalid {
                    path,
                    message: format!(
                        "{} is also declared by {}",
                        contract.event_type,
                        other.path.display()
                    ),
                });
            }
            types.insert(contract.event_type.clone(), contract);
        }
        Ok(Self { types })
    }

    /// The contract of `event_type`.
    pub fn get(&self, event_type: &str) -> Option<&EventContract> {
        self.types.get(event_type)
    }

    /// Every contract, by type.
    pub fn iter(&self) -> impl Iterator<Item = &EventContract> {
        self.types.values()
    }

    /// How many types have a contract.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// True when no type has a contract.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// Whether [`check`](Self::check) would look at the payload of `event_type` (it has a
    /// contract): lets a caller holding the payload as text skip parsing it.
    pub fn covers(&self, event_type: &str) -> bool {
        self.types.contains_key(event_type)
    }

    /// Check one payload against the schema of its type and version under `mode`.
    pub fn check(
        &self,
        event_type: &str,
        version: i32,
        payload: &serde_json::Value,
        mode: ContractMode,
    ) -> Result<Conformance, ContractViolation> {
        let Some(contract) = self.types.get(event_type) else {
            return match mode {
                ContractMode::Permissive => Ok(Conformance::UnknownType),
                ContractMode::Strict => Err(ContractViolation::UnknownType {
                    event_type: event_type.to_string(),
                }),
            };
        };
        let Some(schema) = contract.versions.get(&version) else {
            return match mode {
                ContractMode::Permissive => Ok(Conformance::UnknownVersion),
                ContractMode::Strict => Err(ContractViolation::UnknownVersion {
                    event_type: event_type.to_string(),
                    version,
                    known: contract.versions.keys().copied().collect(),
                }),
            };
        };
        schema
            .validate(payload)
            .map(|()| Conformance::Valid)
            .map_err(|failure| match failure {
                SchemaFailure::Invalid(errors) => ContractViolation::Invalid {
                    event_type: event_type.to_string(),
                    version,
                    errors,
                },
                SchemaFailure::TooCostly(refusal) => ContractViolation::TooCostly {
                    event_type: event_type.to_string(),
                    version,
                    refusal,
                },
            })
    }
}

/// Read, parse and compile one contract file of the folder (its name must be its type).
pub fn load_file(path: &Path) -> Result<EventContract, ContractError> {
    load_contract(path, true)
}

/// Read, parse and compile one edition of a contract kept under any name (e.g. the main
/// branch's copy that `outbox contracts diff` compares with): every rule but the file name.
pub fn load_edition(path: &Path) -> Result<EventContract, ContractError> {
    load_contract(path, false)
}

fn load_contract(path: &Path, named_after_type: bool) -> Result<EventContract, ContractError> {
    let invalid = |message: String| ContractError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let io = |source| ContractError::Io {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(io)?.len();
    if size > MAX_CONTRACT_FILE_BYTES {
        return Err(invalid(format!(
            "{size} bytes, over the limit of {MAX_CONTRACT_FILE_BYTES} bytes"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    let file: ContractFile = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| invalid(e.to_string()))?
    } else {
        toml::from_str(&text).map_err(|e| invalid(e.message().to_string()))?
    };
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    validate_event_type(&file.event_type).map_err(|e| invalid(e.to_string()))?;
    if named_after_type && file.event_type != stem {
        return Err(invalid(format!(
            "event_type {:?} must match the file name (expected {stem:?})",
            file.event_type
        )));
    }
    if file.owner.trim().is_empty() {
        return Err(invalid("owner must not be empty".into()));
    }
    if file.description.trim().is_empty() {
        return Err(invalid("description must not be empty".into()));
    }
    if file.versions.is_empty() {
        return Err(invalid("declares no versions (add [versions.1])".into()));
    }
    if file.versions.len() > MAX_VERSIONS_PER_TYPE {
        return Err(invalid(format!(
            "{} versions, more than the {MAX_VERSIONS_PER_TYPE} allowed",
            file.versions.len()
        )));
    }
    let mut versions = BTreeMap::new();
    for (key, spec) in file.versions {
        let version: i32 = key
            .parse()
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| invalid(format!("version {key:?} must be a whole number >= 1")))?;
        if versions.contains_key(&version) {
            return Err(invalid(format!("version {version} is declared twice")));
        }
        let validator = compile_schema(&spec.schema)
            .map_err(|message| invalid(format!("versions.{key}.schema: {message}")))?;
        versions.insert(
            version,
            ContractVersion {
                version,
                description: spec.description,
                deprecated: spec.deprecated,
                schema: spec.schema,
                validator: Arc::new(validator),
            },
        );
    }
    Ok(EventContract {
        event_type: file.event_type,
        owner: file.owner,
        description: file.description,
        path: path.to_path_buf(),
        versions,
    })
}

/// Compile a payload schema: its own `$schema` draft (2020-12 when it names none), `format`
/// checked, references resolved only inside the document (this build of `jsonschema` has no
/// HTTP or file retriever), `pattern` under the budgets of [`pattern_budget`] and every other
/// regex (`patternProperties`) on the linear engine. A payload is always an object, so the
/// schema must accept one.
pub fn compile_schema(schema: &serde_json::Value) -> Result<jsonschema::Validator, String> {
    if !schema.is_object() {
        return Err("must be a JSON Schema object (e.g. { type = \"object\" })".into());
    }
    pattern_budget::with_budgeted_patterns(jsonschema::options().should_validate_formats(true))
        .build(schema)
        .map_err(|e| {
            match pattern_budget::backtracking_pattern_property(schema) {
                Some(pattern) => format!(
                    "patternProperties {pattern:?} needs look-around or back-references, which only `pattern` may use (under its backtracking budgets): write the key without them"
                ),
                None => clip(e.to_string()),
            }
        })
}

fn clip(mut text: String) -> String {
    if text.len() > MAX_ERROR_BYTES {
        let kept = crate::naming::clip(&text, MAX_ERROR_BYTES).len();
        text.truncate(kept);
        text.push('…');
    }
    text
}
