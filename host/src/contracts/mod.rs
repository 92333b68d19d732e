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

pub mod compat;
pub mod evolution;
pub mod pattern_budget;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::Deserialize;

use crate::naming::validate_event_type;

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

/// One validation error as `path: what was expected (rule: keyword)`; `additionalProperties`
/// gives one line per unexpected field.
fn describe_error(error: &jsonschema::ValidationError<'_>) -> Vec<String> {
    use jsonschema::error::{TypeKind, ValidationErrorKind as Kind};
    let path = instance_path(error.instance_path());
    let rule = error.kind().keyword().to_string();
    let line = |path: &str, what: String| clip(format!("{path}: {what} (rule: {rule})"));
    match error.kind() {
        Kind::Type { kind } => {
            let expected = match kind {
                TypeKind::Single(t) => t.to_string(),
                TypeKind::Multiple(set) => set
                    .iter()
                    .map(|t| t.to_string())
                    .collect::<Vec<_>>()
                    .join(" or "),
            };
            vec![line(
                &path,
                format!("expected {expected}, got {}", json_type(error.instance())),
            )]
        }
        Kind::Required { property } => {
            let name = property.as_str().map(str::to_string).unwrap_or_default();
            vec![line(
                &join_path(&path, &name),
                "required field is missing".into(),
            )]
        }
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            unexpected
                .iter()
                .map(|name| line(&join_path(&path, name), "field is not allowed".into()))
                .collect()
        }
        Kind::Enum { options } => vec![line(
            &path,
            format!("expected one of {}, got {}", options, error.instance()),
        )],
        Kind::Constant { expected_value } => vec![line(
            &path,
            format!("expected {expected_value}, got {}", error.instance()),
        )],
        _ => vec![line(&path, error.to_string())],
    }
}

/// `payload.user.id`, `payload.items[2]`, `payload["odd key"]`.
fn instance_path(location: &jsonschema::paths::Location) -> String {
    use jsonschema::paths::LocationSegment;
    let mut path = String::from("payload");
    for segment in location.iter() {
        match segment {
            LocationSegment::Property(name) => path = join_path(&path, &name),
            LocationSegment::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    path
}

fn join_path(path: &str, name: &str) -> String {
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{path}.{name}")
    } else {
        format!("{path}[{}]", serde_json::Value::String(name.to_string()))
    }
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

fn clip(mut text: String) -> String {
    if text.len() > MAX_ERROR_BYTES {
        let kept = crate::naming::clip(&text, MAX_ERROR_BYTES).len();
        text.truncate(kept);
        text.push('…');
    }
    text
}

/// The contracts in force and the mode, shared by everything that checks payloads; a reload
/// swaps the registry as a whole. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Contracts {
    dir: Option<PathBuf>,
    mode: ContractMode,
    current: Arc<ArcSwap<ContractRegistry>>,
}

impl Contracts {
    /// Load `dir` (`None`: no folder, no contracts) under `mode`. Strict mode without a folder
    /// is refused: it would reject every event.
    pub fn load(dir: Option<PathBuf>, mode: ContractMode) -> Result<Self, ContractError> {
        let registry = match &dir {
            Some(dir) => ContractRegistry::load_dir(dir)?,
            None => ContractRegistry::empty(),
        };
        if mode == ContractMode::Strict && registry.is_empty() {
            return Err(ContractError::Invalid {
                path: dir.clone().unwrap_or_else(|| PathBuf::from("contracts")),
                message: "contracts mode is strict but no contract is registered: every event would be rejected".into(),
            });
        }
        Ok(Self::with_registry(dir, mode, registry))
    }

    /// A handle on an already loaded registry.
    pub fn with_registry(
        dir: Option<PathBuf>,
        mode: ContractMode,
        registry: ContractRegistry,
    ) -> Self {
        Self {
            dir,
            mode,
            current: Arc::new(ArcSwap::from_pointee(registry)),
        }
    }

    /// No contracts, permissive: nothing is checked.
    pub fn none() -> Self {
        Self::with_registry(None, ContractMode::Permissive, ContractRegistry::empty())
    }

    /// The folder watched for changes.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The mode in force.
    pub fn mode(&self) -> ContractMode {
        self.mode
    }

    /// The registry in force.
    pub fn current(&self) -> Arc<ContractRegistry> {
        self.current.load_full()
    }

    /// Load the folder again and swap it in; on an error the previous registry keeps serving.
    /// A folder that is gone or holds no contract is no contracts, as at start-up: accepted in
    /// permissive mode, refused in strict mode (every event would be rejected). Returns how
    /// many types the new registry holds.
    pub fn reload(&self) -> Result<usize, ContractError> {
        let Some(dir) = &self.dir else {
            return Ok(0);
        };
        let registry = ContractRegistry::load_dir(dir)?;
        if self.mode == ContractMode::Strict && registry.is_empty() {
            return Err(ContractError::Invalid {
                path: dir.clone(),
                message: "contracts mode is strict but the folder is gone or holds no contract: every event would be rejected".into(),
            });
        }
        let count = registry.len();
        self.current.store(Arc::new(registry));
        Ok(count)
    }

    /// Check one payload under the mode in force, counting unregistered events and rejections
    /// (`stage` labels where: `publish` or `dispatch`).
    pub fn check(
        &self,
        event_type: &str,
        version: i32,
        payload: &serde_json::Value,
        stage: &'static str,
    ) -> Result<Conformance, ContractViolation> {
        let checked = self
            .current()
            .check(event_type, version, payload, self.mode);
        count(&checked, stage);
        checked
    }

    /// [`check`](Self::check) for a payload held as JSON text (the dispatcher's claimed rows):
    /// parsed only when its type has a contract.
    pub fn check_text(
        &self,
        event_type: &str,
        version: i32,
        payload: &str,
        stage: &'static str,
    ) -> Result<Conformance, ContractViolation> {
        let registry = self.current();
        if !registry.covers(event_type) {
            let checked = registry.check(event_type, version, &serde_json::Value::Null, self.mode);
            count(&checked, stage);
            return checked;
        }
        let checked = match serde_json::from_str::<serde_json::Value>(payload) {
            Ok(value) => registry.check(event_type, version, &value, self.mode),
            Err(e) => Err(ContractViolation::Invalid {
                event_type: event_type.to_string(),
                version,
                errors: vec![format!("payload: not valid JSON ({e})")],
            }),
        };
        count(&checked, stage);
        checked
    }
}

fn count(checked: &Result<Conformance, ContractViolation>, stage: &'static str) {
    match checked {
        Ok(conformance) => {
            if let Some(reason) = conformance.unregistered_reason() {
                metrics::counter!("outbox_contract_unregistered_total", "reason" => reason, "stage" => stage)
                    .increment(1);
            }
        }
        Err(_) => {
            metrics::counter!("outbox_contract_rejected_total", "stage" => stage).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const WELCOME: &str = r#"
event_type = "mail.welcome"
owner = "growth"
description = "A user confirmed their address."

[versions.1.schema]
type = "object"
required = ["user_id", "email"]
[versions.1.schema.properties]
user_id = { type = "integer" }
email = { type = "string", format = "email" }
tags = { type = "array", items = { type = "string" } }

[versions.2]
description = "adds locale"
[versions.2.schema]
type = "object"
required = ["user_id"]
additionalProperties = false
properties = { user_id = { type = "integer" }, locale = { enum = ["en", "fr"] } }
"#;

    fn registry() -> ContractRegistry {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "mail.welcome.toml", WELCOME);
        ContractRegistry::load_dir(dir.path()).unwrap()
    }

    #[test]
    fn valid_payload_passes() {
        let r = registry();
        let ok = json!({"user_id": 7, "email": "a@example.com", "tags": ["x"]});
        assert_eq!(
            r.check("mail.welcome", 1, &ok, ContractMode::Strict),
            Ok(Conformance::Valid)
        );
    }

    #[test]
    fn errors_name_the_field_path_and_the_rule() {
        let r = registry();
        let bad = json!({"user_id": "7", "tags": ["x", 3]});
        let err = r
            .check("mail.welcome", 1, &bad, ContractMode::Permissive)
            .unwrap_err();
        let ContractViolation::Invalid { errors, .. } = &err else {
            panic!("{err}")
        };
        assert!(
            errors.contains(&"payload.user_id: expected integer, got string (rule: type)".into()),
            "{errors:?}"
        );
        assert!(
            errors.contains(&"payload.email: required field is missing (rule: required)".into()),
            "{errors:?}"
        );
        assert!(
            errors.contains(&"payload.tags[1]: expected string, got integer (rule: type)".into()),
            "{errors:?}"
        );
        let bad = json!({"user_id": 1, "locale": "de", "extra": true});
        let err = r
            .check("mail.welcome", 2, &bad, ContractMode::Permissive)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("payload.extra: field is not allowed (rule: additionalProperties)"),
            "{err}"
        );
        assert!(
            err.contains(
                "payload.locale: expected one of [\"en\",\"fr\"], got \"de\" (rule: enum)"
            ),
            "{err}"
        );
        let bad = json!({"user_id": 1, "email": "not-an-address"});
        let err = r
            .check("mail.welcome", 1, &bad, ContractMode::Permissive)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("payload.email:") && err.contains("(rule: format)"),
            "{err}"
        );
    }

    #[test]
    fn unknown_types_and_versions_follow_the_mode() {
        let r = registry();
        let p = json!({});
        assert_eq!(
            r.check("mail.other", 1, &p, ContractMode::Permissive),
            Ok(Conformance::UnknownType)
        );
        assert_eq!(
            r.check("mail.welcome", 9, &p, ContractMode::Permissive),
            Ok(Conformance::UnknownVersion)
        );
        let err = r
            .check("mail.other", 1, &p, ContractMode::Strict)
            .unwrap_err();
        assert!(err.to_string().contains("has no contract"), "{err}");
        let err = r
            .check("mail.welcome", 9, &p, ContractMode::Strict)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "mail.welcome v9 is not a registered version (registered: v1, v2)"
        );
    }

    #[test]
    fn many_errors_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let props: Vec<String> = (0..30)
            .map(|i| format!("f{i} = {{ type = \"integer\" }}"))
            .collect();
        let text = format!(
            "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1.schema]\ntype = \"object\"\n[versions.1.schema.properties]\n{}\n",
            props.join("\n")
        );
        write(dir.path(), "a.b.toml", &text);
        let r = ContractRegistry::load_dir(dir.path()).unwrap();
        let payload: serde_json::Map<String, serde_json::Value> =
            (0..30).map(|i| (format!("f{i}"), json!("x"))).collect();
        let Err(ContractViolation::Invalid { errors, .. }) =
            r.check("a.b", 1, &payload.into(), ContractMode::Strict)
        else {
            panic!("expected invalid")
        };
        assert_eq!(errors.len(), MAX_REPORTED_ERRORS + 1);
        assert_eq!(errors.last().unwrap(), "... and 20 more");
    }

    #[test]
    fn json_files_load_like_toml() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "user.deleted.json",
            r#"{"event_type": "user.deleted", "owner": "accounts", "description": "gone",
                "versions": {"1": {"schema": {"type": "object", "properties": {"reason": {"type": ["string", "null"]}}}}}}"#,
        );
        let r = ContractRegistry::load_dir(dir.path()).unwrap();
        assert_eq!(
            r.check(
                "user.deleted",
                1,
                &json!({"reason": null}),
                ContractMode::Strict
            ),
            Ok(Conformance::Valid)
        );
    }

    #[test]
    fn bad_files_are_refused_with_the_reason() {
        let cases = [
            ("a.b.toml", "event_type = \"a.c\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n", "must match the file name"),
            ("a.b.toml", "event_type = \"a.b\"\nowner = \"\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n", "owner must not be empty"),
            ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\nversions = {}\n", "declares no versions"),
            ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.x]\nschema = { type = \"object\" }\n", "version \"x\" must be a whole number"),
            ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"objekt\" }\n", "versions.1.schema"),
            ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { \"$ref\" = \"https://example.com/s.json\" }\n", "versions.1.schema"),
            ("a.b.toml", "event_type = \"a.b\"\nowner = \"o\"\ndescription = \"d\"\ncolour = 1\n[versions.1]\nschema = { type = \"object\" }\n", "unknown field"),
            ("Bad.type.toml", "event_type = \"Bad.type\"\nowner = \"o\"\ndescription = \"d\"\n[versions.1]\nschema = { type = \"object\" }\n", "invalid event type"),
        ];
        for (name, text, expected) in cases {
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), name, text);
            let err = ContractRegistry::load_dir(dir.path())
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(expected),
                "{name}: {err} (expected {expected:?})"
            );
        }
    }

    #[test]
    fn a_failed_reload_keeps_the_previous_registry() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "mail.welcome.toml", WELCOME);
        let contracts =
            Contracts::load(Some(dir.path().to_path_buf()), ContractMode::Strict).unwrap();
        write(dir.path(), "mail.broken.toml", "not toml [");
        assert!(contracts.reload().is_err());
        assert!(contracts.current().get("mail.welcome").is_some());
        std::fs::remove_file(dir.path().join("mail.broken.toml")).unwrap();
        std::fs::remove_file(dir.path().join("mail.welcome.toml")).unwrap();
        let err = contracts.reload().unwrap_err();
        assert!(
            err.to_string().contains("every event would be rejected"),
            "{err}"
        );
        assert!(contracts.current().get("mail.welcome").is_some());
    }

    #[test]
    fn a_folder_gone_or_emptied_is_no_contracts_in_permissive_mode() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("contracts");
        std::fs::create_dir(&dir).unwrap();
        write(&dir, "mail.welcome.toml", WELCOME);
        let contracts = Contracts::load(Some(dir.clone()), ContractMode::Permissive).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(contracts.reload().unwrap(), 0);
        assert!(contracts.current().is_empty());
    }

    #[test]
    fn strict_mode_needs_contracts() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            Contracts::load(Some(dir.path().to_path_buf()), ContractMode::Strict).unwrap_err();
        assert!(
            err.to_string().contains("every event would be rejected"),
            "{err}"
        );
    }

    #[test]
    fn check_text_parses_only_covered_types() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "mail.welcome.toml", WELCOME);
        let contracts =
            Contracts::load(Some(dir.path().to_path_buf()), ContractMode::Permissive).unwrap();
        assert_eq!(
            contracts.check_text("x.y", 1, "not json at all", "dispatch"),
            Ok(Conformance::UnknownType)
        );
        let err = contracts
            .check_text("mail.welcome", 1, "{not json", "dispatch")
            .unwrap_err();
        assert!(err.to_string().contains("payload: not valid JSON"), "{err}");
    }
}
