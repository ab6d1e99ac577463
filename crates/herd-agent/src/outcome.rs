//! [`Outcome`]: how the job ended, as an agent returns it.

use herd_exp::failure::FailureReport;

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every worker on every node exited 0.
    Success,
    /// The job failed; the leader has the report, followers may not. (Boxed: the report
    /// is large and clippy keeps enums small.)
    Failed(Option<Box<FailureReport>>),
    /// The workers were stopped for `cause` and the job requeued: it runs again.
    Requeued(herd_slurm::scheduler::lifecycle::Cause),
}
