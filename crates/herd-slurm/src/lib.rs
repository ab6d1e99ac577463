//! Everything herd knows about SLURM, in three folders:
//!
//! - [`scheduler`]: talking to SLURM and reading what it says. Every SLURM command herd
//!   runs goes through one helper ([`scheduler::command`]: timeouts, typed errors, the
//!   `HERD_LOG=debug` trace); one reader of `scontrol`'s `Key=Value` lines
//!   ([`scheduler::fields`]); the partition table from `scontrol` and `sinfo`
//!   ([`scheduler::partition`]); the queue in one `squeue` call ([`scheduler::queue`]); why
//!   a job's attempt ends and its requeue, from `scontrol show job`
//!   ([`scheduler::lifecycle`]); SLURM's time and memory formats ([`TimeLimit`],
//!   [`Memory`]).
//! - [`allocation`]: the allocation model, what SLURM tells a process about its job and
//!   step in its variables, checked for consistency: [`Allocation`], tasks per node
//!   ([`allocation::counts`]), a node's address that other nodes reach
//!   ([`allocation::addr`]).
//! - [`worker`]: the worker environment, the variables of docs/design.md §3
//!   ([`worker_env`]), herd's own `HERD_*` names ([`worker::vars`]), and the checkpoint a new
//!   attempt resumes from ([`worker::checkpoint`]).

pub mod allocation;
pub mod scheduler;
pub mod worker;

pub use allocation::counts::{format_counts, parse_counts};
pub use allocation::{Allocation, AllocationError, Gpus, HetGroup, Layout, Task, Vars};
pub use scheduler::command::SlurmError;
pub use scheduler::values::{FormatError, Memory, TimeLimit};
pub use worker::{user_program, worker_env, GpuBind, GpuBindError, LaunchInfo, Position};
