//! herd's per-node agent (docs/design.md §2 agent mode, §3, §6).
//!
//! - [`agent`]: rendezvous, attempts, supervision, teardown, restarts, the failure report.
//! - [`workers`]: spawning workers (own process group, parent-death signal) and carrying
//!   their output line by line to per-rank files and the console.
//! - [`procs`]: finding and ending every process a node's workers started.
//! - [`report`]: the failure report.
//! - [`error_file`]: torch's `TORCHELASTIC_ERROR_FILE`, which leads the report when the
//!   failing worker wrote one.

pub mod agent;
pub mod error_file;
pub mod procs;
pub mod report;
pub mod workers;

pub use agent::{run, AgentError, Config, Outcome};
pub use error_file::WorkerError;
pub use report::{Exit, FailureReport};
