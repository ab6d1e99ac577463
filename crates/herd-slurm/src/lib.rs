//! The SLURM allocation model: what SLURM tells a process about its job and step, checked
//! for consistency, and the environment herd gives each worker.
//!
//! - [`counts`]: `SLURM_TASKS_PER_NODE`-style lists (`2(x3),1`).
//! - [`allocation`]: [`Allocation`] read from job and step variables.
//! - [`worker`]: [`worker_env`], the variables of docs/design.md §3.
//! - [`addr`]: a node's address that other nodes reach (never loopback).
//! - [`checkpoint`]: the newest complete checkpoint, which a new attempt resumes from.
//! - [`commands`]: `sbatch`, `squeue`, `scontrol`, `sinfo`, `scancel`, with timeouts and
//!   typed errors.
//! - [`lifecycle`]: why a job's attempt ends ([`lifecycle::Cause`]), decided from what
//!   `scontrol show job` says, and the requeue that brings it back.
//! - [`queue`]: the queue in one `squeue` call, states and pending reasons in words.
//! - [`vars`]: the names of herd's own variables (`HERD_*`).

pub mod addr;
pub mod allocation;
pub mod checkpoint;
pub mod commands;
pub mod counts;
pub mod lifecycle;
pub mod queue;
pub mod vars;
pub mod worker;

pub use allocation::{Allocation, AllocationError, Gpus, HetGroup, Layout, Task, Vars};
pub use commands::SlurmError;
pub use counts::{format_counts, parse_counts};
pub use worker::{worker_env, GpuBind, GpuBindError, LaunchInfo, Position};
