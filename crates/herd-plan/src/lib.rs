//! Job plans: a job file, `herd submit`'s flags and a cluster profile resolved into one
//! checked [`Plan`]; the checks before queueing that need no cluster (docs/design.md §5);
//! the batch script for each launch mode (§2), with every user value quoted so no shell
//! re-reads it.
//!
//! ```
//! use std::path::Path;
//! use herd_plan::{check, render_script, resolve, CheckContext, JobFile, JobKeys, ScriptParams};
//!
//! let job = JobFile::parse(
//!     r#"
//! nodes = 2
//! gpus_per_node = 8
//! cpus_per_task = 64
//! mem = "240GB"
//! time = "2-00:00:00"
//! command = ["python", "-u", "train.py", "--lr", "0.1"]
//! "#,
//!     Path::new("train.toml"),
//! )?;
//! let plan = resolve(Some(&job), &JobKeys::default(), &[], "login1")?;
//! assert_eq!(plan.world_size(), 16);
//! assert!(check(&plan, &CheckContext::default()).is_empty());
//! let script = render_script(
//!     &plan,
//!     &ScriptParams {
//!         exp_dir: Path::new("/scratch/exp/train"),
//!         herd: Path::new("/opt/herd/bin/herd"),
//!         dependency: None,
//!     },
//! )?;
//! assert!(script.starts_with("#!/bin/bash\n#SBATCH --job-name=train\n"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The pieces, in the order `herd submit` uses them:
//!
//! - [`keys`]: [`JobKeys`], the keys as the flags ([`PlanArgs`]), a job file or a profile
//!   give them; [`Key`] and [`Source`].
//! - [`job`]: [`JobFile`] and [`Profile`] (TOML, unknown keys refused), [`load_profiles`].
//! - [`layers`](mod@layers): the flags, the job file and the profile in precedence order,
//!   and what each key's value came from.
//! - [`resolve`](mod@resolve): the flags' [`JobKeys`] + job file + profile →
//!   [`Plan`] ([`plan`](mod@plan)), recording each key's [`Source`]; [`ResolveError`]
//!   lists every bad value.
//! - [`cpus`](mod@cpus): `cpus_per_worker` or `cpus_per_task` → SLURM's
//!   `--cpus-per-task` in each launch mode, and [`cpus_line`], what each worker gets.
//! - [`keep`]: the staying-alive keys: requeue budget, warning, stop, hang watchdog,
//!   `herd submit`'s defaults for them and their checks.
//! - [`launch`]: the agent's options ([`AgentOptions`], [`KeepAlive`]): `herd launch`'s
//!   flags, defined once, which the batch script's `herd launch` line and `herd run` are
//!   made from.
//! - [`names`]: what a name or an `#SBATCH` value must be (resolution and rendering check
//!   the same rules).
//! - [`values`]: SLURM's [`Signal`] format and counts, parsed strictly; SLURM's
//!   [`TimeLimit`] and [`Memory`] are herd-slurm's (its formats), re-exported here.
//! - [`check`](mod@check): [`check()`] → [`Finding`]s, each naming the keys to change; the
//!   partitions it compares with are herd-slurm's partition table
//!   (`herd_slurm::scheduler::partition`).
//! - [`avoid`](mod@avoid): which nodes of the user's record of bad nodes the job leaves out
//!   ([`Plan::avoided_nodes`]), checked against the cluster's nodes.
//! - [`render`]: [`render_script`] → the batch script.
//! - [`ranks`]: [`rank_table`] for `--dry-run`.
//! - [`sweep`](mod@sweep): a sweep's spec ([`SweepSpec`]: `--sweep` flags and a sweep file),
//!   its runs and their names, the command's `{KEY}` placeholders, the grid table;
//!   [`array`](mod@array): [`render_array_script`], the array job that runs them.
//! - [`quote`](mod@quote): the POSIX single-quoting every user value goes through.
//! - [`torchrun`]: what starts torchrun in torchrun mode (the command's python, or `torchrun`).
//!
//! The keys (job file, profile and flags alike) are declared once, in [`keys`]: each is a
//! field of [`JobKeys`] and a [`Key`]; docs/submit.md's table lists them with their flags,
//! examples and meanings, and a test keeps that table in step with the definition.

pub mod array;
pub mod avoid;
pub mod check;
pub mod cpus;
pub mod job;
pub mod keep;
pub mod keys;
pub mod launch;
pub mod layers;
pub mod names;
pub mod plan;
pub mod quote;
pub mod ranks;
pub mod render;
pub mod resolve;
pub mod sweep;
pub mod torchrun;
pub mod values;

pub use array::{array_spec, render_array_script, shapes, ArrayParams};
pub use check::{
    check, check_script, has_errors, CheckContext, Finding, MemoryPolicy, ProgramLookup, Severity,
};
pub use cpus::cpus_line;
pub use herd_slurm::{Memory, TimeLimit};
pub use job::{
    load_profiles, profile_dir, select_profile, JobFile, LoadError, Profile, EXAMPLE_PROFILE,
};
pub use keys::{JobKeys, Key, PlanArgs, Source};
pub use launch::{
    AgentOptions, GpuBindArg, HangTimeout, KeepAlive, OnHang, Preflight, Seconds, StopSignal, Warm,
};
pub use plan::{Mode, Plan, Problem, ResolveError, DEFAULT_EXP_ROOT, MAX_JOB_NAME};
pub use quote::{quote, quote_if_needed, quote_words, NulError};
pub use ranks::{format_rank_table, rank_table, RankRow};
pub use render::{render_script, RenderError, ScriptParams};
pub use resolve::{parse_param, resolve};
pub use sweep::{SweepError, SweepFile, SweepRunSpec, SweepSpec};
pub use values::{Signal, TextOrNumber, ValueError};
