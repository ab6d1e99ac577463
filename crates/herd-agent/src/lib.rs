//! herd's per-node agent (docs/design.md §2 agent mode, §3, §6).
//!
//! - [`agent`]: the agent's configuration, outcome and [`run`], which leads on node 0 and
//!   follows elsewhere.
//! - `leader`, `follower`: node 0's agent (rendezvous, attempts, job-wide teardown,
//!   restarts, the failure report) and every other node's.
//!   `leader::decide` holds its decisions while an attempt runs: what a signal means, the
//!   stop before a time limit or on preemption, the hang watchdog.
//! - `keep`: staying alive across allocations: attempt numbers, the requeue budget and
//!   the requeue, the manifest's record of each attempt.
//! - `attempt`: one attempt on one node: start its workers, hear their exits, tear down.
//! - `protocol`: the messages between agents and how they travel.
//! - [`signals`]: the signals herd handles and what each means, for `herd launch` and
//!   `herd run` alike.
//! - [`workers`]: spawning workers (own process group, parent-death signal) and carrying
//!   their output line by line to per-rank files and the console.
//! - [`procs`]: finding and ending every process a node's workers started.
//! - [`exit`]: how a worker ended, for the failure report (`herd_exp::failure`, which the
//!   leader writes into the logs folder).

pub mod agent;
mod attempt;
pub mod exit;
mod follower;
mod keep;
mod leader;
pub mod procs;
mod protocol;
pub mod signals;
pub mod workers;

pub use agent::{run, AgentError, Config, KeepAlive, OnHang, Outcome};
/// Signals as the agent names them (`--stop-signal`).
pub use nix::sys::signal::Signal;
