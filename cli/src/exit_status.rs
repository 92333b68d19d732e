//! Exit status: how a command asks `main` for an exit status other than 0 (success) or 1 (an
//! error `main` prints).
//!
//! Owns [`ExitStatus`]. It never prints: the command has said what it had to say.

/// A command that ends with a specific exit status and has printed what it had to say.
#[derive(Debug)]
pub(crate) struct ExitStatus(pub(crate) u8);

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit status {}", self.0)
    }
}

impl std::error::Error for ExitStatus {}
