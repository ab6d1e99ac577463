//! What resolution makes: the [`Plan`] (what the batch script asks for and runs, and what
//! the manifest records), its launch [`Mode`], herd's limits and defaults for it, and the
//! [`Problem`]s that keep a job from being one.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use herd_slurm::GpuBind;
use serde::{Deserialize, Serialize};

use crate::keys::{Key, Source};
use crate::launch::{AgentOptions, ContainerArgs, GpuBindArg, KeepAlive};
use crate::values::{Signal, ValueError};
use herd_slurm::{Memory, TimeLimit};

/// How the batch script starts the workers (docs/design.md §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One `herd launch` agent per node spawns and supervises the node's workers (default).
    #[default]
    Agent,
    /// One SLURM task per GPU, each running `herd exec` (the seeds' `slurm_train.sh`).
    Srun,
    /// One `torchrun` per node with c10d rendezvous (the seeds' `submit.sh`).
    Torchrun,
}

impl Mode {
    /// The name used in job files and flags.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Agent => "agent",
            Mode::Srun => "srun",
            Mode::Torchrun => "torchrun",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = ValueError;

    fn from_str(s: &str) -> Result<Mode, ValueError> {
        match s {
            "agent" => Ok(Mode::Agent),
            "srun" => Ok(Mode::Srun),
            "torchrun" => Ok(Mode::Torchrun),
            _ => Err(ValueError {
                message: format!("`{s}` is not a launch mode: use agent, srun or torchrun"),
            }),
        }
    }
}

/// herd's default folder for experiment folders, relative to where `herd submit` runs.
pub const DEFAULT_EXP_ROOT: &str = "herd-exp";
/// Globs always left out of the snapshot: SLURM's own `%j.out` logs (as the seed's
/// `rsync --exclude='*.out'`).
pub const DEFAULT_EXCLUDE: &[&str] = &["*.out"];
/// How long a blame in the user's record of bad nodes keeps a node out of the next jobs
/// (`avoid_bad_nodes`), unless set: 24 hours.
pub const DEFAULT_AVOID_BAD_NODES: u64 = 86_400;
/// Most workers a plan may have (a bound on the rank table, far above any cluster).
pub const MAX_RANKS: u64 = 1_000_000;
/// Longest single argument Linux passes to a program (`MAX_ARG_STRLEN` − 1).
pub const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
/// Longest job name: it names a folder and a SLURM job.
pub const MAX_JOB_NAME: usize = 128;

/// A resolved, well-formed job: what the batch script asks for and runs.
///
/// Counts are SLURM's: `cpus_per_task` is per SLURM task, which is one agent (or one
/// torchrun) per node in agent and torchrun mode and one worker in srun mode; when
/// `cpus_per_worker` was given, `cpus_per_task` is made from it ([`crate::cpus`]).
///
/// Serializes to JSON for the manifest, and reads back from it (`herd submit --resume`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// SLURM job name and experiment folder name.
    pub job_name: String,
    /// Launch mode.
    pub mode: Mode,
    /// Number of nodes.
    pub nodes: u32,
    /// Total GPUs as asked (`gpus`); `None` when only nodes × gpus_per_node was given.
    pub gpus: Option<u32>,
    /// GPUs per node; `None`: no GPUs asked for (one worker per node).
    pub gpus_per_node: Option<u32>,
    /// GPU type in the GRES request.
    pub gpu_type: Option<String>,
    /// Which of its node's GPUs each worker sees (`all` when an older manifest has none).
    #[serde(default)]
    pub gpu_bind: GpuBind,
    /// SLURM tasks per node as asked (srun mode; see [`Plan::tasks_per_node`]).
    pub ntasks_per_node: Option<u32>,
    /// CPUs per SLURM task: sbatch's and srun's `--cpus-per-task`, as given or made from
    /// `cpus_per_worker`.
    pub cpus_per_task: Option<u32>,
    /// CPUs for each worker as given (`cpus_per_worker`), which `cpus_per_task` was made
    /// from; `None` when `cpus_per_task` was given itself, or neither (older manifests).
    #[serde(default)]
    pub cpus_per_worker: Option<u32>,
    /// Memory per node.
    pub mem: Option<Memory>,
    /// Time limit.
    pub time: Option<TimeLimit>,
    /// Partition (or comma-separated partitions).
    pub partition: Option<String>,
    /// Node features.
    pub constraint: Option<String>,
    /// Jobs to wait for, free-form.
    pub after: Vec<String>,
    /// `Some(true)`: `--requeue`; `Some(false)`: `--no-requeue`; `None`: the cluster's
    /// default.
    pub requeue: Option<bool>,
    /// Early-warning signal.
    pub signal: Option<Signal>,
    /// Worker program and arguments, params substituted.
    pub command: Vec<String>,
    /// Param values used in `command`.
    pub params: BTreeMap<String, String>,
    /// Extra sbatch options, verbatim.
    pub sbatch_args: Vec<String>,
    /// Folder experiment folders are made in (relative to where herd runs, unless
    /// absolute).
    pub exp_root: PathBuf,
    /// Globs left out of the code snapshot.
    pub exclude: Vec<String>,
    /// Restarts of all workers inside the allocation.
    pub max_restarts: u32,
    /// Nodes asked for beyond `nodes` that stand by, to replace a lost, frozen or blamed
    /// one inside the allocation (agent mode).
    #[serde(default)]
    pub spare_nodes: u32,
    /// How the agents read metrics from the workers' lines (`auto`, …; docs/metrics.md).
    #[serde(default, with = "metrics_format")]
    pub metrics: herd_metrics::Format,
    /// How herd keeps the job alive: requeues, the time-limit warning, the stop, the hang
    /// watchdog (older manifests have none: `herd submit`'s defaults).
    #[serde(default = "submit_keep")]
    pub keep: KeepAlive,
    /// Seconds a blame in the user's record of bad nodes keeps a node out of the job
    /// (`avoid_bad_nodes`; 0: the record is not read).
    #[serde(default = "default_avoid_bad_nodes")]
    pub avoid_bad_nodes: u64,
    /// The nodes the job leaves out because the record blames them: no key sets these;
    /// `herd submit` fills them in from the record ([`crate::avoid`]). The batch script
    /// excludes them together with any `--exclude` of `sbatch_args`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoided_nodes: Vec<String>,
    /// The container image the workers run in, its runtime and extra mounts
    /// (`container`, `container_runtime`, `container_mounts`; docs/containers.md).
    #[serde(default, skip_serializing_if = "ContainerArgs::is_empty")]
    pub container: ContainerArgs,
    /// The cluster profile that filled defaults, if one matched the host.
    pub profile: Option<PathBuf>,
    /// Where each set key came from; lists that add up have one source per layer that
    /// contributed.
    pub sources: BTreeMap<Key, Vec<Source>>,
}

impl Plan {
    /// Workers on each node: one per GPU (one when no GPUs are asked for); in srun mode the
    /// SLURM tasks per node.
    pub fn workers_per_node(&self) -> u32 {
        match self.mode {
            Mode::Srun => self.ntasks_per_node.or(self.gpus_per_node).unwrap_or(1),
            Mode::Agent | Mode::Torchrun => self.gpus_per_node.unwrap_or(1),
        }
    }

    /// SLURM tasks on each node: the workers in srun mode, one agent or torchrun otherwise.
    pub fn tasks_per_node(&self) -> u32 {
        match self.mode {
            Mode::Srun => self.workers_per_node(),
            Mode::Agent | Mode::Torchrun => 1,
        }
    }

    /// Nodes the job asks SLURM for: `nodes` and the spares.
    pub fn alloc_nodes(&self) -> u32 {
        self.nodes.saturating_add(self.spare_nodes)
    }

    /// All workers of the job.
    pub fn world_size(&self) -> u64 {
        u64::from(self.nodes) * u64::from(self.workers_per_node())
    }

    /// CPUs the job asks for on each node: `cpus_per_task` (SLURM's default 1) × tasks per
    /// node.
    pub fn cpus_per_node(&self) -> u64 {
        u64::from(self.cpus_per_task.unwrap_or(1)) * u64::from(self.tasks_per_node())
    }

    /// Where `key`'s value came from (for a list that adds up, the highest layer).
    pub fn source(&self, key: Key) -> Option<&Source> {
        self.sources.get(&key).and_then(|s| s.last())
    }

    /// What the batch script tells each node's `herd launch` agent ([`AgentOptions`]): the
    /// workers per node, their GPUs, restarts, metrics and staying alive; every other
    /// option at `herd launch`'s default.
    pub fn agent_options(&self) -> AgentOptions {
        AgentOptions {
            nproc_per_node: Some(self.workers_per_node()),
            gpus: GpuBindArg {
                gpu_bind: self.gpu_bind,
            },
            max_restarts: self.max_restarts,
            spare_nodes: self.spare_nodes,
            metrics: self.metrics.clone(),
            keep: self.keep.clone(),
            container: self.container.clone(),
            ..AgentOptions::default()
        }
    }

    /// `key` named for a message, with where it was set: "`mem` in job.toml", "--mem",
    /// "`mem` (not set)".
    pub fn describe(&self, key: Key) -> String {
        match self.source(key) {
            Some(s) => s.describe(key),
            None => format!("`{key}` (not set)"),
        }
    }
}

/// One value that cannot make a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key to change.
    pub key: Key,
    /// Where the bad value was set (`None`: nowhere, e.g. a missing command).
    pub origin: Option<Source>,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Some(o) => write!(f, "{}: {}", o.describe(self.key), self.message),
            None => write!(f, "`{}`: {}", self.key, self.message),
        }
    }
}

/// The values that cannot make a plan, all of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join_problems(.problems))]
pub struct ResolveError {
    /// Every problem found, in key order.
    pub problems: Vec<Problem>,
}

fn join_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `avoid_bad_nodes` of a manifest written before herd had a record of bad nodes.
fn default_avoid_bad_nodes() -> u64 {
    DEFAULT_AVOID_BAD_NODES
}

/// `keep` of a manifest written before herd kept jobs alive: `herd submit`'s defaults.
fn submit_keep() -> KeepAlive {
    KeepAlive::submit(None)
}

/// The metrics format in a manifest: its name (`auto`, `regex:RE`), as the key takes it.
mod metrics_format {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        f: &herd_metrics::Format,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_str(f)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<herd_metrics::Format, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}
