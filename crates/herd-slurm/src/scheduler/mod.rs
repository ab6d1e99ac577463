//! Talking to SLURM and reading what it says: every command herd runs (`sbatch`, `squeue`,
//! `scontrol`, `sinfo`, `scancel`, `srun`) and every parser of their output.
//!
//! - [`command`]: the one helper every SLURM command goes through (no shell, timeouts,
//!   typed [`SlurmError`](command::SlurmError)s) and the thin wrappers of each command.
//! - [`fields`]: the one reader of `scontrol -o` lines (`Key=Value` fields), for jobs,
//!   partitions and the test bed alike.
//! - [`node`]: every node, its partitions, state and size (`sinfo -N`).
//! - [`partition`]: the partitions, their limits and node sizes (`scontrol show partition`,
//!   `sinfo`).
//! - [`queue`]: the queue in one `squeue` call, states and pending reasons in words.
//! - [`lifecycle`]: why a job's attempt ends ([`lifecycle::Cause`]), decided from what
//!   `scontrol show job` says, and the requeue that brings it back.
//! - [`version`]: the Slurm release ([`version::detect`], read once) and every behaviour
//!   that differs between the releases herd supports.
//! - [`values`]: SLURM's time and memory formats ([`TimeLimit`](values::TimeLimit),
//!   [`Memory`](values::Memory), durations in its output), one reading each.

pub mod command;
pub mod fields;
pub mod lifecycle;
pub mod node;
pub mod partition;
pub mod queue;
pub mod values;
pub mod version;
