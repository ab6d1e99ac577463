//! The keys of a plan and where each value came from.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One key of a job file, with its job-file name and its `herd submit` flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    /// `job_name`: SLURM job name and experiment folder name.
    JobName,
    /// `mode`: how workers are launched (`agent`, `srun`, `torchrun`).
    Mode,
    /// `nodes`: number of nodes.
    Nodes,
    /// `gpus`: total GPUs of the job (nodes × gpus_per_node), the seeds' `GPUS`.
    Gpus,
    /// `gpus_per_node`: GPUs on each node, and workers per node.
    GpusPerNode,
    /// `gpu_type`: GPU type in the GRES request (`gpu:a100:8`).
    GpuType,
    /// `gpu_bind`: which of its node's GPUs each worker sees (`all`, `per-rank`).
    GpuBind,
    /// `ntasks_per_node`: SLURM tasks per node (srun mode only).
    NtasksPerNode,
    /// `cpus_per_task`: CPUs of each SLURM task.
    CpusPerTask,
    /// `mem`: memory per node.
    Mem,
    /// `time`: time limit.
    Time,
    /// `partition`: SLURM partition.
    Partition,
    /// `constraint`: SLURM node features.
    Constraint,
    /// `after`: jobs this one waits for (resolved to `--dependency` elsewhere).
    After,
    /// `requeue`: whether SLURM may requeue the job.
    Requeue,
    /// `signal`: early-warning signal before the time limit.
    Signal,
    /// `command`: the worker program and its arguments.
    Command,
    /// `params`: names the command takes values for (`{NAME}`).
    Params,
    /// `sbatch_args`: extra sbatch options, verbatim.
    SbatchArgs,
    /// `exp_root`: folder experiment folders are made in.
    ExpRoot,
    /// `exclude`: globs left out of the code snapshot.
    Exclude,
    /// `max_restarts`: restarts of all workers inside the allocation.
    MaxRestarts,
}

impl Key {
    /// Every key, in job-file order.
    pub const ALL: [Key; 22] = [
        Key::JobName,
        Key::Mode,
        Key::Nodes,
        Key::Gpus,
        Key::GpusPerNode,
        Key::GpuType,
        Key::GpuBind,
        Key::NtasksPerNode,
        Key::CpusPerTask,
        Key::Mem,
        Key::Time,
        Key::Partition,
        Key::Constraint,
        Key::After,
        Key::Requeue,
        Key::Signal,
        Key::Command,
        Key::Params,
        Key::SbatchArgs,
        Key::ExpRoot,
        Key::Exclude,
        Key::MaxRestarts,
    ];

    /// The key's name in a job file or profile (`gpus_per_node`).
    pub fn name(self) -> &'static str {
        match self {
            Key::JobName => "job_name",
            Key::Mode => "mode",
            Key::Nodes => "nodes",
            Key::Gpus => "gpus",
            Key::GpusPerNode => "gpus_per_node",
            Key::GpuType => "gpu_type",
            Key::GpuBind => "gpu_bind",
            Key::NtasksPerNode => "ntasks_per_node",
            Key::CpusPerTask => "cpus_per_task",
            Key::Mem => "mem",
            Key::Time => "time",
            Key::Partition => "partition",
            Key::Constraint => "constraint",
            Key::After => "after",
            Key::Requeue => "requeue",
            Key::Signal => "signal",
            Key::Command => "command",
            Key::Params => "params",
            Key::SbatchArgs => "sbatch_args",
            Key::ExpRoot => "exp_root",
            Key::Exclude => "exclude",
            Key::MaxRestarts => "max_restarts",
        }
    }

    /// The `herd submit` flag that sets the key (sbatch's and torchrun's names where they
    /// exist). `command` is given after `--`; `params` by `--param NAME=VALUE`.
    pub fn flag(self) -> &'static str {
        match self {
            Key::JobName => "--job-name",
            Key::Mode => "--mode",
            Key::Nodes => "--nodes",
            Key::Gpus => "--gpus",
            Key::GpusPerNode => "--gpus-per-node",
            Key::GpuType => "--gpu-type",
            Key::GpuBind => "--gpu-bind",
            Key::NtasksPerNode => "--ntasks-per-node",
            Key::CpusPerTask => "--cpus-per-task",
            Key::Mem => "--mem",
            Key::Time => "--time",
            Key::Partition => "--partition",
            Key::Constraint => "--constraint",
            Key::After => "--after",
            Key::Requeue => "--requeue",
            Key::Signal => "--signal",
            Key::Command => "-- CMD ARGS…",
            Key::Params => "--param",
            Key::SbatchArgs => "--sbatch-arg",
            Key::ExpRoot => "--exp-root",
            Key::Exclude => "--exclude",
            Key::MaxRestarts => "--max-restarts",
        }
    }
}

impl fmt::Display for Key {
    /// The job-file name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// The job file at `path`.
    File {
        /// The job file.
        path: PathBuf,
    },
    /// A `herd submit` flag.
    Flag,
    /// The cluster profile at `path`, chosen by the login host's name.
    Profile {
        /// The profile file.
        path: PathBuf,
    },
    /// herd's built-in default.
    Default,
    /// Computed from other keys (e.g. `nodes` from `gpus` ÷ `gpus_per_node`).
    Derived {
        /// The keys it was computed from.
        from: Vec<Key>,
    },
}

impl Source {
    /// How to name `key` set here in a message: "`mem` in job.toml", "--mem",
    /// "`mem` in profile login.toml", "`mem` (herd's default)",
    /// "`nodes` (derived from gpus, gpus_per_node)".
    pub fn describe(&self, key: Key) -> String {
        match self {
            Source::File { path } => format!("`{key}` in {}", path.display()),
            Source::Flag => key.flag().to_owned(),
            Source::Profile { path } => format!("`{key}` in profile {}", path.display()),
            Source::Default => format!("`{key}` (herd's default)"),
            Source::Derived { from } => {
                let names: Vec<&str> = from.iter().map(|k| k.name()).collect();
                format!("`{key}` (derived from {})", names.join(", "))
            }
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File { path } => write!(f, "job file {}", path.display()),
            Source::Flag => f.write_str("flag"),
            Source::Profile { path } => write!(f, "profile {}", path.display()),
            Source::Default => f.write_str("herd's default"),
            Source::Derived { from } => {
                let names: Vec<&str> = from.iter().map(|k| k.name()).collect();
                write!(f, "derived from {}", names.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flags_are_distinct() {
        let mut names: Vec<&str> = Key::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Key::ALL.len());
        for k in Key::ALL {
            assert!(k.flag().starts_with("--"), "{k}");
            let json = serde_json::to_string(&k).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", k.name()));
        }
    }

    #[test]
    fn describes_origins() {
        let file = Source::File {
            path: "runs/a.toml".into(),
        };
        assert_eq!(file.describe(Key::Mem), "`mem` in runs/a.toml");
        assert_eq!(Source::Flag.describe(Key::Mem), "--mem");
        assert_eq!(
            Source::Derived {
                from: vec![Key::Gpus, Key::GpusPerNode]
            }
            .describe(Key::Nodes),
            "`nodes` (derived from gpus, gpus_per_node)"
        );
        let json = serde_json::to_string(&file).unwrap_or_default();
        assert_eq!(json, r#"{"kind":"file","path":"runs/a.toml"}"#);
    }
}
