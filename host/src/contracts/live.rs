//! The live contracts: the registry in force and the mode, shared by everything that checks
//! payloads (publish, dispatch), swapped as a whole by a reload.
//!
//! Owns the reload rule (a folder that fails to load leaves the previous registry serving;
//! strict mode refuses an empty registry) and the check counters
//! (`outbox_contract_unregistered_total`, `outbox_contract_rejected_total`). It never parses a
//! contract file itself (that is [`super::ContractRegistry::load_dir`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Conformance, ContractError, ContractMode, ContractRegistry, ContractViolation};

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
