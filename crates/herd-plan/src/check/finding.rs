//! What a check finds: a [`Finding`], an error or a warning, with the keys to change.

use std::fmt;

use serde::Serialize;

use crate::keys::Key;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The job would fail, never start, or run wrong: nothing is submitted.
    Error,
    /// Worth a look; the job is submitted anyway.
    Warning,
}

/// One problem found, with the keys to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// A stable name for the check (`gpus-not-divisible`), for tests and JSON output.
    pub code: &'static str,
    /// The keys to change (empty for a problem in a script herd did not render from keys).
    pub keys: Vec<Key>,
    /// What is wrong and what to change, naming each key with where it was set.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: {}", self.message)
    }
}

pub(super) fn error(code: &'static str, keys: &[Key], message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        code,
        keys: keys.to_vec(),
        message,
    }
}

pub(super) fn warning(code: &'static str, keys: &[Key], message: String) -> Finding {
    Finding {
        severity: Severity::Warning,
        code,
        keys: keys.to_vec(),
        message,
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}
