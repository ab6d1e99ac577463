//! herd's per-node agent (SPEC §2 agent mode, §3, §6).
//!
//! - [`agent`]: rendezvous, attempts, supervision, teardown, restarts, the failure report.
//! - [`workers`]: spawning workers (own process group, parent-death signal) and carrying
//!   their output line by line to per-rank files and the console.
//! - [`procs`]: finding and ending every process a node's workers started.
//! - [`report`]: the failure report.

pub mod agent;
pub mod procs;
pub mod report;
pub mod workers;

pub use agent::{run, AgentError, Config, Outcome};
pub use report::{Exit, FailureReport};
