//! herd's per-node agent (docs/design.md §2 agent mode, §3, §6).
//!
//! - [`run`] (`agent`): the agent's start, which leads on node 0 and follows elsewhere.
//! - `leader`, `follower`: node 0's agent (rendezvous, attempts, job-wide teardown,
//!   restarts, the failure report) and every other node's, each a small state machine
//!   whose event handlers have names (`on_worker_exit`, `on_lost_node`, `on_signal`, …).
//!   `leader::decide` holds its decisions while an attempt runs: what a signal means, the
//!   stop before a time limit or on preemption, the hang watchdog.
//! - What they share: [`Config`] (`config`; its [`KeepAlive`] and [`OnHang`] are
//!   `herd_plan::launch`'s), the events
//!   their loops hear (`event`), [`AgentError`] (`error`), [`Outcome`] (`outcome`), the
//!   messages between agents (`message`) and what they say on stderr (`words`).
//! - `keep`: staying alive across allocations: attempt numbers, the requeue budget and
//!   the requeue, the manifest's record of each attempt.
//! - `attempt`: one attempt on one node: start its workers, hear their exits, tear down.
//! - `preflight`: the node's checks before an attempt (its worker command and Python, its
//!   GPUs, its folders, the master's port) and the leader's held port they connect to.
//! - `pace`: the pace of each rank's progress and the hang timeout it earns (`--hang-timeout
//!   auto`).
//! - `protocol`: how the messages travel between agents.
//! - [`signals`]: the signals herd handles and what each means, for `herd launch` and
//!   `herd run` alike.
//! - [`workers`]: spawning workers (own process group, parent-death signal) and carrying
//!   their output line by line to per-rank files and the console.
//! - [`procs`]: finding and ending every process a node's workers started.
//! - [`warm`]: warm starts: standby interpreters for the next attempt's workers, with the
//!   job's modules imported ahead.
//! - [`exit`]: how a worker ended, for the failure report (`herd_exp::failure`, which the
//!   leader writes into the logs folder).

mod agent;
mod attempt;
mod config;
mod error;
mod event;
pub mod exit;
mod follower;
mod gpus;
mod keep;
mod leader;
mod message;
mod outcome;
mod pace;
mod preflight;
pub mod procs;
mod protocol;
pub mod signals;
pub mod warm;
mod words;
pub mod workers;

pub use agent::run;
pub use config::{Config, ContainerState, KeepAlive, OnHang};
pub use error::AgentError;
/// Signals as the agent names them (`--stop-signal`).
pub use nix::sys::signal::Signal;
pub use outcome::Outcome;
