//! The error every host call (publish, kv, http) can return.

use std::fmt;

use crate::bindings::handler::outbox::plugin::types::HostError as WitHostError;

/// Why a host call did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// The capability policy refused the call; the reason says which grant is missing.
    Denied(String),
    /// The call was allowed but failed (bad input, Redis or network error, ...).
    Failed(String),
}

impl HostError {
    /// True when the capability policy refused the call (retrying will not help).
    pub fn is_denied(&self) -> bool {
        matches!(self, Self::Denied(_))
    }
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied(reason) => write!(f, "denied: {reason}"),
            Self::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

impl std::error::Error for HostError {}

impl From<WitHostError> for HostError {
    fn from(e: WitHostError) -> Self {
        match e {
            WitHostError::Denied(reason) => Self::Denied(reason),
            WitHostError::Failed(reason) => Self::Failed(reason),
        }
    }
}
