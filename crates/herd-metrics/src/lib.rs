//! Training metrics: what a worker's output says about its progress (step, loss,
//! throughput, anything numeric), read in one of a handful of shapes, stored per rank in
//! the experiment folder so every view works after the job ended (docs/metrics.md).
//!
//! - [`Record`]: one reading, its numbers by name, the step when the line has one.
//! - [`read`]: the readers, one per [`Format`] (herd's JSON-lines convention, key=value,
//!   torchtitan, DeepSpeed, Megatron, SwAV, a user's regex), and [`read::Auto`], which
//!   detects the format from the lines.
//! - [`store`]: the per-rank metrics files an agent writes and the views read.

pub mod read;
/// The per-rank metrics files.
pub mod store;

pub use read::{Format, FormatError, Reader};

/// One metrics reading from one line (or row): its numbers by name, in the order the line
/// gave them. Names are normalised where the formats agree on a meaning: `step`, `loss`,
/// `samples_per_s`, `tokens_per_s`, `lr`, `epoch`; others keep the trainer's name with
/// spaces and punctuation turned into `_`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// The global step (iteration), when the line says it.
    pub step: Option<u64>,
    /// Every other number, by name.
    pub values: Vec<(String, f64)>,
}

impl Record {
    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// The median of the finite values (herd-exp's, shared with the goodput advice).
pub use herd_exp::median;

/// A record of `step` and `values`, for the tests.
#[cfg(test)]
pub(crate) fn rec(step: impl Into<Option<u64>>, values: &[(&str, f64)]) -> Record {
    Record {
        step: step.into(),
        values: values.iter().map(|(n, v)| (n.to_string(), *v)).collect(),
    }
}
