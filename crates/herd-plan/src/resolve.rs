//! Resolution: flags, job file, cluster profile and herd's defaults merged into one
//! [`Plan`], every value checked, every key's origin recorded.
//!
//! Precedence, per key: a flag, else the job file, else the profile chosen by the login
//! host's name, else herd's default. Two lists add up instead: `sbatch_args` (profile,
//! then file, then flags) and `exclude` (herd's `*.out`, then profile, file, flags). The
//! command from the flags replaces the job file's whole command.
//!
//! Resolution fails only on values that cannot make a plan (malformed, out of range,
//! unusable in a batch script) and reports all of them at once; a plan that is well-formed
//! but unwise (GPUs that do not divide, too little memory) resolves, and
//! [`crate::check()`] reports it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use herd_slurm::GpuBind;
use serde::{Deserialize, Serialize};

use crate::job::{select_profile, JobFile, Profile};
use crate::keep::resolve_keep;
pub use crate::keep::Keep;
use crate::keys::{JobKeys, Key, Source};
use crate::values::{non_negative, positive, Signal, TextOrNumber, ValueError};
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

/// Split a `--param NAME=VALUE` argument (the value may contain `=`).
pub fn parse_param(arg: &str) -> Result<(String, String), ValueError> {
    match arg.split_once('=') {
        Some((name, value)) if valid_param_name(name) => Ok((name.to_owned(), value.to_owned())),
        _ => Err(ValueError {
            message: format!("`{arg}` is not NAME=VALUE with NAME made of letters, digits and `_`"),
        }),
    }
}

fn valid_param_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

/// herd's default folder for experiment folders, relative to where `herd submit` runs.
pub const DEFAULT_EXP_ROOT: &str = "herd-exp";
/// Globs always left out of the snapshot: SLURM's own `%j.out` logs (as the seed's
/// `rsync --exclude='*.out'`).
pub const DEFAULT_EXCLUDE: &[&str] = &["*.out"];
/// Most workers a plan may have (a bound on the rank table, far above any cluster).
pub const MAX_RANKS: u64 = 1_000_000;
/// Longest single argument Linux passes to a program (`MAX_ARG_STRLEN` − 1).
pub const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
/// Longest job name: it names a folder and a SLURM job.
pub const MAX_JOB_NAME: usize = 128;

/// A resolved, well-formed job: what the batch script asks for and runs.
///
/// Counts are SLURM's: `cpus_per_task` is per SLURM task, which is one agent (or one
/// torchrun) per node in agent and torchrun mode and one worker in srun mode.
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
    /// CPUs per SLURM task.
    pub cpus_per_task: Option<u32>,
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
    /// How the agents read metrics from the workers' lines (`auto`, …; docs/metrics.md).
    #[serde(default = "default_metrics")]
    pub metrics: String,
    /// How herd keeps the job alive: requeues, the time-limit warning, the stop, the hang
    /// watchdog (older manifests have none: herd's defaults).
    #[serde(default)]
    pub keep: Keep,
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

/// The layers in precedence order: flags, job file, profile.
pub(crate) struct Layers<'a> {
    list: Vec<(&'a JobKeys, Source)>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) sources: BTreeMap<Key, Vec<Source>>,
}

impl<'a> Layers<'a> {
    /// The highest layer's raw value for `key`.
    pub(crate) fn first<T: ?Sized + 'a>(
        &self,
        get: impl Fn(&'a JobKeys) -> Option<&'a T>,
    ) -> Option<(&'a T, Source)> {
        self.list
            .iter()
            .find_map(|(keys, src)| get(keys).map(|v| (v, src.clone())))
    }

    /// The highest layer's value for `key`, parsed; a parse failure is a problem.
    pub(crate) fn take<R: ?Sized + 'a, T>(
        &mut self,
        key: Key,
        get: impl Fn(&'a JobKeys) -> Option<&'a R>,
        parse: impl Fn(&R) -> Result<T, ValueError>,
    ) -> Option<T> {
        let (raw, src) = self.first(get)?;
        match parse(raw) {
            Ok(v) => {
                self.sources.insert(key, vec![src]);
                Some(v)
            }
            Err(e) => {
                self.problem(key, Some(src), e.message);
                None
            }
        }
    }

    pub(crate) fn problem(&mut self, key: Key, origin: Option<Source>, message: impl Into<String>) {
        self.problems.push(Problem {
            key,
            origin,
            message: message.into(),
        });
    }

    pub(crate) fn set_source(&mut self, key: Key, src: Source) {
        self.sources.insert(key, vec![src]);
    }
}

/// Merge `flags`, the `job` file and the first of `profiles` whose `match` fits `host`
/// (the login host's name) into a checked [`Plan`].
///
/// Defaults: mode `agent`, 1 node, no GPUs, `max_restarts` 0, `exp_root` `herd-exp`,
/// `exclude` `*.out`, job name the job file's name (else the program's). When `gpus` (total)
/// is given without `nodes`, nodes are `gpus ÷ gpus_per_node` (rounded up; [`crate::check()`]
/// reports a remainder); without `gpus_per_node`, it is `gpus ÷ nodes`.
pub fn resolve(
    job: Option<&JobFile>,
    flags: &JobKeys,
    profiles: &[Profile],
    host: &str,
) -> Result<Plan, ResolveError> {
    let profile = select_profile(profiles, host);
    let mut list: Vec<(&JobKeys, Source)> = vec![(flags, Source::Flag)];
    if let Some(job) = job {
        list.push((
            &job.keys,
            Source::File {
                path: job.path.clone(),
            },
        ));
    }
    if let Some(p) = profile {
        list.push((
            &p.keys,
            Source::Profile {
                path: p.path.clone(),
            },
        ));
    }
    let mut l = Layers {
        list,
        problems: Vec::new(),
        sources: BTreeMap::new(),
    };

    let mode = l
        .take(
            Key::Mode,
            |k| k.mode.as_deref(),
            |s: &str| s.parse::<Mode>(),
        )
        .unwrap_or_else(|| {
            if l.first(|k| k.mode.as_deref()).is_none() {
                l.set_source(Key::Mode, Source::Default);
            }
            Mode::Agent
        });

    let count = |v: &i64| positive(*v);
    let nodes_raw = l.take(Key::Nodes, |k| k.nodes.as_ref(), count);
    let gpus = l.take(Key::Gpus, |k| k.gpus.as_ref(), count);
    let gpn_raw = l.take(Key::GpusPerNode, |k| k.gpus_per_node.as_ref(), count);
    let ntasks_per_node = l.take(Key::NtasksPerNode, |k| k.ntasks_per_node.as_ref(), count);
    let cpus_per_task = l.take(Key::CpusPerTask, |k| k.cpus_per_task.as_ref(), count);
    let max_restarts = l.take(
        Key::MaxRestarts,
        |k| k.max_restarts.as_ref(),
        |v: &i64| non_negative(*v),
    );
    let max_restarts = max_restarts.unwrap_or_else(|| {
        if l.first(|k| k.max_restarts.as_ref()).is_none() {
            l.set_source(Key::MaxRestarts, Source::Default);
        }
        0
    });
    let metrics = l
        .take(
            Key::Metrics,
            |k| k.metrics.as_deref(),
            |s: &str| {
                s.parse::<herd_metrics::Format>()
                    .map(|f| f.to_string())
                    .map_err(|e| ValueError::new(e.to_string()))
            },
        )
        .unwrap_or_else(|| {
            if l.first(|k| k.metrics.as_deref()).is_none() {
                l.set_source(Key::Metrics, Source::Default);
            }
            default_metrics()
        });

    // Nodes and GPUs per node, derived from the total where one is missing.
    let derived = |from: &[Key]| Source::Derived {
        from: from.to_vec(),
    };
    let (nodes, gpus_per_node) = match (nodes_raw, gpus, gpn_raw) {
        (Some(n), _, Some(g)) => (n, Some(g)),
        (Some(n), Some(total), None) => {
            l.set_source(Key::GpusPerNode, derived(&[Key::Gpus, Key::Nodes]));
            (n, Some(total.div_ceil(n)))
        }
        (Some(n), None, None) => (n, None),
        (None, Some(total), Some(g)) => {
            l.set_source(Key::Nodes, derived(&[Key::Gpus, Key::GpusPerNode]));
            (total.div_ceil(g), Some(g))
        }
        (None, Some(total), None) => {
            l.set_source(Key::Nodes, Source::Default);
            l.set_source(Key::GpusPerNode, derived(&[Key::Gpus]));
            (1, Some(total))
        }
        (None, None, g) => {
            if l.first(|k| k.nodes.as_ref()).is_none() {
                l.set_source(Key::Nodes, Source::Default);
            }
            (1, g)
        }
    };

    let gpu_type = l.take(
        Key::GpuType,
        |k| k.gpu_type.as_deref(),
        |s: &str| simple_name(s, "GPU type", false),
    );
    let gpu_bind = l
        .take(
            Key::GpuBind,
            |k| k.gpu_bind.as_deref(),
            |s: &str| {
                s.parse::<GpuBind>().map_err(|e| ValueError {
                    message: e.to_string(),
                })
            },
        )
        .unwrap_or_else(|| {
            if l.first(|k| k.gpu_bind.as_deref()).is_none() {
                l.set_source(Key::GpuBind, Source::Default);
            }
            GpuBind::All
        });
    let partition = l.take(
        Key::Partition,
        |k| k.partition.as_deref(),
        |s: &str| simple_name(s, "partition name", true),
    );
    let constraint = l.take(
        Key::Constraint,
        |k| k.constraint.as_deref(),
        |s: &str| sbatch_safe(s, "constraint").map(|()| s.to_owned()),
    );
    let mem = l.take(
        Key::Mem,
        |k| k.mem.as_ref(),
        |v: &TextOrNumber| match v {
            TextOrNumber::Text(t) => t.parse::<Memory>().map_err(ValueError::from),
            TextOrNumber::Number(n) => Memory::from_number(*n).map_err(ValueError::from),
        },
    );
    let time = l.take(
        Key::Time,
        |k| k.time.as_ref(),
        |v: &TextOrNumber| match v {
            TextOrNumber::Text(t) => t.parse::<TimeLimit>().map_err(ValueError::from),
            TextOrNumber::Number(n) => TimeLimit::from_minutes(*n).map_err(ValueError::from),
        },
    );
    let signal = l.take(
        Key::Signal,
        |k| k.signal.as_deref(),
        |s: &str| s.parse::<Signal>(),
    );
    // `--no-requeue` is the flags' spelling of `requeue = false`.
    let requeue = l.take(
        Key::Requeue,
        |k| k.requeue.as_ref().or(k.no_requeue.then_some(&false)),
        |b: &bool| Ok(*b),
    );
    let keep = resolve_keep(&mut l, mode, time.as_ref(), requeue);
    let after = l
        .take(
            Key::After,
            |k| k.after.as_ref(),
            |v: &Vec<String>| Ok(v.clone()),
        )
        .unwrap_or_default();
    let exp_root = l
        .take(
            Key::ExpRoot,
            |k| k.exp_root.as_ref(),
            |p: &PathBuf| {
                if p.as_os_str().is_empty() {
                    Err(ValueError {
                        message: "is empty: give the folder experiment folders are made in".into(),
                    })
                } else {
                    Ok(p.clone())
                }
            },
        )
        .unwrap_or_else(|| {
            if l.first(|k| k.exp_root.as_ref()).is_none() {
                l.set_source(Key::ExpRoot, Source::Default);
            }
            PathBuf::from(DEFAULT_EXP_ROOT)
        });

    // Lists that add up: profile first, then job file, then flags.
    let mut sbatch_args = Vec::new();
    let mut exclude: Vec<String> = DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect();
    let mut exclude_sources = vec![Source::Default];
    let mut sbatch_sources = Vec::new();
    let layers: Vec<(JobKeys, Source)> = l
        .list
        .iter()
        .rev()
        .map(|(k, s)| ((*k).clone(), s.clone()))
        .collect();
    for (keys, src) in layers {
        if let Some(args) = keys.sbatch_args {
            for a in &args {
                if let Err(e) = sbatch_arg(a) {
                    l.problem(Key::SbatchArgs, Some(src.clone()), e.message);
                }
            }
            sbatch_args.extend(args);
            sbatch_sources.push(src.clone());
        }
        if let Some(globs) = keys.exclude {
            for g in &globs {
                if g.starts_with('!') {
                    l.problem(
                        Key::Exclude,
                        Some(src.clone()),
                        format!(
                            "`{g}`: these globs only leave files out; `!` cannot bring one back"
                        ),
                    );
                } else if let Err(e) = globset::Glob::new(g) {
                    l.problem(
                        Key::Exclude,
                        Some(src.clone()),
                        format!("`{g}` is not a valid glob: {}", e.kind()),
                    );
                }
                if !exclude.contains(g) {
                    exclude.push(g.clone());
                }
            }
            exclude_sources.push(src);
        }
    }
    if !sbatch_sources.is_empty() {
        l.sources.insert(Key::SbatchArgs, sbatch_sources);
    }
    l.sources.insert(Key::Exclude, exclude_sources);

    // The command, with params substituted when it comes from the job file.
    let (command, params) = resolve_command(&mut l, job, flags);

    // Job name: given, else the job file's name, else the program's.
    let job_name = match l.take(
        Key::JobName,
        |k| k.job_name.as_deref(),
        |s: &str| job_name(s),
    ) {
        Some(n) => n,
        None if l.first(|k| k.job_name.as_deref()).is_some() => String::new(),
        None => {
            l.set_source(Key::JobName, Source::Default);
            let base = job
                .and_then(|j| j.stem())
                .map(str::to_owned)
                .or_else(|| {
                    command
                        .first()
                        .map(|p| p.rsplit('/').next().unwrap_or(p).to_owned())
                })
                .unwrap_or_else(|| "job".to_owned());
            sanitize_job_name(&base)
        }
    };

    let workers = match mode {
        Mode::Srun => ntasks_per_node.or(gpus_per_node).unwrap_or(1),
        Mode::Agent | Mode::Torchrun => gpus_per_node.unwrap_or(1),
    };
    if u64::from(nodes) * u64::from(workers) > MAX_RANKS {
        let origin = l.sources.get(&Key::Nodes).and_then(|s| s.last()).cloned();
        l.problem(
            Key::Nodes,
            origin,
            format!(
                "{nodes} nodes × {workers} workers is more than herd's limit of {MAX_RANKS} workers"
            ),
        );
    }

    if !l.problems.is_empty() {
        let mut problems = l.problems;
        problems.sort_by_key(|p| p.key);
        return Err(ResolveError { problems });
    }
    Ok(Plan {
        job_name,
        mode,
        nodes,
        gpus,
        gpus_per_node,
        gpu_type,
        gpu_bind,
        ntasks_per_node,
        cpus_per_task,
        mem,
        time,
        partition,
        constraint,
        after,
        requeue,
        signal,
        command,
        params,
        sbatch_args,
        exp_root,
        exclude,
        max_restarts,
        metrics,
        keep,
        profile: profile.map(|p| p.path.clone()),
        sources: l.sources,
    })
}

/// The metrics format a plan has unless a key says otherwise (and an older manifest's).
fn default_metrics() -> String {
    herd_metrics::Format::Auto.to_string()
}

fn resolve_command(
    l: &mut Layers<'_>,
    job: Option<&JobFile>,
    flags: &JobKeys,
) -> (Vec<String>, BTreeMap<String, String>) {
    // The flags give params' values (`--param NAME=VALUE`), the job file their names.
    let mut given: BTreeMap<String, String> = BTreeMap::new();
    for arg in flags.params.iter().flatten() {
        let (name, value) = match parse_param(arg) {
            Ok(p) => p,
            Err(e) => {
                l.problem(Key::Params, Some(Source::Flag), e.message);
                continue;
            }
        };
        if given.insert(name.clone(), value).is_some() {
            l.problem(
                Key::Params,
                Some(Source::Flag),
                format!("`{name}` is given twice"),
            );
        }
    }
    let file_src = job.map(|j| Source::File {
        path: j.path.clone(),
    });
    let declared: Vec<String> = job.and_then(|j| j.keys.params.clone()).unwrap_or_default();
    for (i, name) in declared.iter().enumerate() {
        if !valid_param_name(name) {
            l.problem(
                Key::Params,
                file_src.clone(),
                format!("`{name}` is not a param name: use letters, digits and `_`"),
            );
        } else if declared[..i].contains(name) {
            l.problem(
                Key::Params,
                file_src.clone(),
                format!("`{name}` is declared twice"),
            );
        }
    }

    let (mut command, src) = match (&flags.command, job.and_then(|j| j.keys.command.as_ref())) {
        (Some(cmd), _) => {
            for name in given.keys() {
                l.problem(
                    Key::Params,
                    Some(Source::Flag),
                    format!(
                        "--param {name}: the command comes from after `--`, which takes no params (write the value into it)"
                    ),
                );
            }
            (cmd.clone(), Source::Flag)
        }
        (None, Some(cmd)) => {
            let src = file_src.clone().unwrap_or(Source::Default);
            for name in given.keys() {
                if !declared.contains(name) {
                    let known = if declared.is_empty() {
                        "it declares none".to_owned()
                    } else {
                        format!("it declares {}", declared.join(", "))
                    };
                    l.problem(
                        Key::Params,
                        Some(Source::Flag),
                        format!("--param {name}: the job file has no param `{name}` ({known})"),
                    );
                }
            }
            let mut cmd = cmd.clone();
            for name in &declared {
                let placeholder = format!("{{{name}}}");
                if !cmd.iter().any(|w| w.contains(&placeholder)) {
                    l.problem(
                        Key::Params,
                        file_src.clone(),
                        format!(
                            "`{name}` is declared but `{placeholder}` appears nowhere in `command`"
                        ),
                    );
                }
                match given.get(name) {
                    Some(value) => {
                        for w in &mut cmd {
                            *w = w.replace(&placeholder, value);
                        }
                    }
                    None => l.problem(
                        Key::Params,
                        file_src.clone(),
                        format!(
                            "the command needs a value for `{name}`: give --param {name}=VALUE"
                        ),
                    ),
                }
            }
            if !declared.is_empty() {
                l.set_source(Key::Params, Source::Flag);
            }
            (cmd, src)
        }
        (None, None) => {
            l.problem(
                Key::Command,
                None,
                "no command: set `command = [\"python\", \"train.py\"]` in the job file or give it after `--`",
            );
            return (Vec::new(), given);
        }
    };
    let mut ok = true;
    if command.is_empty() || command.first().is_some_and(|p| p.is_empty()) {
        l.problem(
            Key::Command,
            Some(src.clone()),
            "the command is empty: its first word is the program to run",
        );
        ok = false;
    } else if command.first().is_some_and(|p| p.starts_with('-')) {
        l.problem(
            Key::Command,
            Some(src.clone()),
            format!(
                "the program `{}` starts with `-`: the first word is the program, not an option",
                command[0]
            ),
        );
        ok = false;
    }
    for (i, w) in command.iter().enumerate() {
        if w.contains('\0') {
            l.problem(
                Key::Command,
                Some(src.clone()),
                format!(
                    "argument {} contains a NUL byte, which no program argument can hold",
                    i + 1
                ),
            );
            ok = false;
        } else if w.len() > MAX_ARG_BYTES {
            l.problem(
                Key::Command,
                Some(src.clone()),
                format!(
                    "argument {} is {} bytes, more than Linux passes to a program ({MAX_ARG_BYTES})",
                    i + 1,
                    w.len()
                ),
            );
            ok = false;
        }
    }
    if ok {
        l.set_source(Key::Command, src);
    } else {
        command.clear();
    }
    let used = if flags.command.is_some() {
        BTreeMap::new()
    } else {
        given
            .into_iter()
            .filter(|(k, _)| declared.contains(k))
            .collect()
    };
    (command, used)
}

/// Refuse what would break or change an `#SBATCH` line: whitespace, quotes, `#` (starts a
/// comment there), backslash, control characters; and empty values.
pub(crate) fn sbatch_safe(s: &str, what: &str) -> Result<(), ValueError> {
    if s.is_empty() {
        return Err(ValueError {
            message: format!("the {what} is empty"),
        });
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '#' | '\\'))
    {
        return Err(ValueError {
            message: format!(
                "the {what} `{}` contains {}, which an #SBATCH line cannot carry",
                s.escape_debug(),
                describe_char(c)
            ),
        });
    }
    Ok(())
}

fn describe_char(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '\n' => "a newline".to_owned(),
        '#' => "`#` (it starts a comment in an #SBATCH line)".to_owned(),
        c if c.is_control() || c.is_whitespace() => format!("the character U+{:04X}", c as u32),
        c => format!("`{c}`"),
    }
}

/// A partition or GPU type: letters, digits, `_`, `.`, `-` (and `,` between partitions).
fn simple_name(s: &str, what: &str, list: bool) -> Result<String, ValueError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    let parts: Vec<&str> = if list {
        s.split(',').collect()
    } else {
        vec![s]
    };
    if parts.iter().all(|p| !p.is_empty() && p.chars().all(ok)) {
        Ok(s.to_owned())
    } else {
        Err(ValueError {
            message: format!(
                "`{}` is not a {what}: use letters, digits, `_`, `.` and `-`{}",
                s.escape_debug(),
                if list {
                    " (several separated by `,`)"
                } else {
                    ""
                }
            ),
        })
    }
}

/// Whether `s` is a usable partition name (`list`: or comma-separated names) or GPU type.
pub(crate) fn simple_name_ok(s: &str, list: bool) -> bool {
    simple_name(s, "name", list).is_ok()
}

/// Whether `s` is a usable job name.
pub(crate) fn job_name_ok(s: &str) -> bool {
    job_name(s).is_ok()
}

/// A job name: it names the SLURM job and the experiment folder.
fn job_name(s: &str) -> Result<String, ValueError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+');
    if !s.is_empty()
        && s.len() <= MAX_JOB_NAME
        && s.chars().all(ok)
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
    {
        Ok(s.to_owned())
    } else {
        Err(ValueError {
            message: format!(
                "`{}` is not a job name: use up to {MAX_JOB_NAME} letters, digits, `_`, `.`, `+` and `-`, starting with a letter or digit (it names the experiment folder)",
                s.escape_debug()
            ),
        })
    }
}

/// A default job name made from a file or program name.
fn sanitize_job_name(base: &str) -> String {
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_JOB_NAME)
        .collect();
    if !name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        name.insert(0, 'j');
        name.truncate(MAX_JOB_NAME);
    }
    name
}

/// An extra sbatch option: an option (starts with `-`) on one line.
pub(crate) fn sbatch_arg(a: &str) -> Result<(), ValueError> {
    if a.contains(['\n', '\r', '\0']) {
        return Err(ValueError {
            message: format!(
                "`{}` contains a line break or NUL: each entry becomes one #SBATCH line",
                a.escape_debug()
            ),
        });
    }
    if !a.starts_with('-') {
        return Err(ValueError {
            message: format!(
                "`{a}` is not an sbatch option: options start with `-` (e.g. \"--account=vision\")"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn file(text: &str) -> JobFile {
        JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn profile(text: &str) -> Profile {
        Profile::parse(text, Path::new("profiles/login.toml")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn ok(job: Option<&JobFile>, flags: &JobKeys, profiles: &[Profile], host: &str) -> Plan {
        resolve(job, flags, profiles, host).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(job: Option<&JobFile>, flags: &JobKeys) -> ResolveError {
        resolve(job, flags, &[], "login1").expect_err("should not resolve")
    }

    const BASIC: &str = "nodes = 2\ngpus_per_node = 4\ncommand = [\"python\", \"train.py\"]\n";

    #[test]
    fn staying_alive_has_defaults_and_checks_its_keys_against_each_other() {
        let plan = ok(Some(&file(BASIC)), &JobKeys::default(), &[], "login1");
        assert_eq!(plan.keep, Keep::default());
        assert_eq!(plan.keep.max_requeues, 3);
        assert_eq!(plan.source(Key::MaxRequeues), Some(&Source::Default));
        let job = file(&format!(
            "max_requeues = 10\nwarn_before = 300\nstop_signal = \"SIGUSR2\"\nstop_grace = 120\nhang_timeout = 600\non_hang = \"restart\"\ntime = \"24:00:00\"\n{BASIC}"
        ));
        let keep = ok(Some(&job), &JobKeys::default(), &[], "login1").keep;
        assert_eq!(
            keep,
            Keep {
                max_requeues: 10,
                warn_before: 300,
                stop_signal: "USR2".into(),
                stop_grace: 120,
                hang_timeout: 600,
                on_hang: "restart".into(),
            }
        );
        // `requeue = false` turns the default budget off and refuses an explicit one.
        let job = file(&format!("requeue = false\n{BASIC}"));
        assert_eq!(
            ok(Some(&job), &JobKeys::default(), &[], "login1")
                .keep
                .max_requeues,
            0
        );
        let job = file(&format!("requeue = false\nmax_requeues = 2\n{BASIC}"));
        let e = err(Some(&job), &JobKeys::default()).to_string();
        assert!(
            e.contains("`requeue = false` forbids them: set max_requeues = 0"),
            "{e}"
        );
        // The grace must fit in the warning, the warning in the time limit.
        let job = file(&format!("warn_before = 60\nstop_grace = 60\n{BASIC}"));
        let e = err(Some(&job), &JobKeys::default()).to_string();
        assert!(e.contains("lower stop_grace or raise warn_before"), "{e}");
        // The defaults shrink to fit a short limit; a warning set to 120 s does not fit 2 min.
        let job = file(&format!("time = 2\n{BASIC}"));
        let keep = ok(Some(&job), &JobKeys::default(), &[], "login1").keep;
        assert_eq!((keep.warn_before, keep.stop_grace), (30, 15));
        let long = file(&format!("time = 600\n{BASIC}"));
        let keep = ok(Some(&long), &JobKeys::default(), &[], "login1").keep;
        assert_eq!((keep.warn_before, keep.stop_grace), (120, 60));
        let flags = JobKeys {
            warn_before: Some(120),
            ..JobKeys::default()
        };
        let e = err(Some(&job), &flags).to_string();
        assert!(
            e.contains("--warn-before") && e.contains("lower warn_before or raise time"),
            "{e}"
        );
        let flags = JobKeys {
            warn_before: Some(30),
            stop_grace: Some(10),
            ..JobKeys::default()
        };
        assert_eq!(ok(Some(&job), &flags, &[], "login1").keep.warn_before, 30);
        // Signals no worker can checkpoint on, unknown hang actions, and agent-only keys
        // in another mode are refused, each naming its key.
        for (bad, key) in [
            ("stop_signal = \"KILL\"", "stop_signal"),
            ("on_hang = \"ignore\"", "on_hang"),
            ("mode = \"srun\"\nhang_timeout = 60", "hang_timeout"),
            ("mode = \"torchrun\"\nmax_requeues = 2", "max_requeues"),
        ] {
            let e = err(Some(&file(&format!("{bad}\n{BASIC}"))), &JobKeys::default()).to_string();
            assert!(
                e.contains(&format!("`{key}` in jobs/train.toml")),
                "{bad}: {e}"
            );
        }
        // In srun mode nobody requeues: the default budget is not used.
        let job = file(&format!("mode = \"srun\"\n{BASIC}"));
        assert_eq!(
            ok(Some(&job), &JobKeys::default(), &[], "login1")
                .keep
                .max_requeues,
            0
        );
    }

    #[test]
    fn gpu_bind_defaults_to_all_and_a_flag_overrides_the_file() {
        let plan = ok(Some(&file(BASIC)), &JobKeys::default(), &[], "login1");
        assert_eq!(plan.gpu_bind, GpuBind::All);
        assert_eq!(plan.source(Key::GpuBind), Some(&Source::Default));
        let job = file(&format!("gpu_bind = \"per-rank\"\n{BASIC}"));
        let plan = ok(Some(&job), &JobKeys::default(), &[], "login1");
        assert_eq!(plan.gpu_bind, GpuBind::PerRank);
        let flags = JobKeys {
            gpu_bind: Some("all".into()),
            ..JobKeys::default()
        };
        let plan = ok(Some(&job), &flags, &[], "login1");
        assert_eq!(plan.gpu_bind, GpuBind::All);
        assert_eq!(plan.source(Key::GpuBind), Some(&Source::Flag));
        // A manifest written before the key existed reads back with the default.
        let mut json = serde_json::to_value(&plan).unwrap_or_default();
        json.as_object_mut().map(|o| o.remove("gpu_bind"));
        let back: Plan = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.gpu_bind, GpuBind::All);
    }

    /// A job file with every key resolves, and the plan says where each came from.
    #[test]
    fn every_key_resolves_with_its_source() {
        let job = file(&crate::keys::every_key_job_file());
        let flags = JobKeys {
            params: Some(vec!["DATA=/datasets/imagenet".into()]),
            ..JobKeys::default()
        };
        let plan = ok(Some(&job), &flags, &[], "login1");
        for key in Key::ALL {
            assert!(plan.source(key).is_some(), "`{key}` has no source");
        }
        assert_eq!(plan.source(Key::Params), Some(&Source::Flag));
        assert_eq!(
            plan.command.last().map(String::as_str),
            Some("/datasets/imagenet")
        );
    }

    #[test]
    fn defaults() {
        let plan = ok(Some(&file(BASIC)), &JobKeys::default(), &[], "login1");
        assert_eq!(plan.mode, Mode::Agent);
        assert_eq!(plan.job_name, "train");
        assert_eq!(plan.nodes, 2);
        assert_eq!(plan.workers_per_node(), 4);
        assert_eq!(plan.tasks_per_node(), 1);
        assert_eq!(plan.world_size(), 8);
        assert_eq!(plan.exp_root, PathBuf::from("herd-exp"));
        assert_eq!(plan.exclude, vec!["*.out".to_owned()]);
        assert_eq!(plan.max_restarts, 0);
        assert_eq!(plan.source(Key::Mode), Some(&Source::Default));
        assert_eq!(plan.describe(Key::Nodes), "`nodes` in jobs/train.toml");
        assert_eq!(plan.describe(Key::Partition), "`partition` (not set)");
        assert_eq!(plan.profile, None);
    }

    #[test]
    fn flags_over_file_over_profile() {
        let job = file(
            "nodes = 2\ngpus_per_node = 4\nmem = \"100G\"\ncommand = [\"python\", \"train.py\"]\n",
        );
        let profiles = [profile(
            "match = \"login*\"\npartition = \"gpu\"\nmem = \"240GB\"\ncpus_per_task = 64\ntime = \"2-00:00:00\"\nsbatch_args = [\"--account=lab\"]\nexclude = [\"data/**\"]\n",
        )];
        let flags = JobKeys {
            nodes: Some(4),
            sbatch_args: Some(vec!["--qos=high".into()]),
            exclude: Some(vec!["*.ckpt".into()]),
            ..JobKeys::default()
        };
        let plan = ok(Some(&job), &flags, &profiles, "login3.cluster.org");
        assert_eq!(plan.nodes, 4);
        assert_eq!(plan.source(Key::Nodes), Some(&Source::Flag));
        assert_eq!(plan.mem.map(|m| m.megabytes()), Some(100 * 1024));
        assert!(matches!(plan.source(Key::Mem), Some(Source::File { .. })));
        assert_eq!(plan.cpus_per_task, Some(64));
        assert_eq!(plan.partition.as_deref(), Some("gpu"));
        assert_eq!(
            plan.describe(Key::Partition),
            "`partition` in profile profiles/login.toml"
        );
        assert_eq!(plan.time.map(|t| t.seconds()), Some(2 * 86_400));
        assert_eq!(plan.sbatch_args, vec!["--account=lab", "--qos=high"]);
        assert_eq!(plan.exclude, vec!["*.out", "data/**", "*.ckpt"]);
        assert_eq!(plan.sources.get(&Key::Exclude).map(Vec::len), Some(3));
        assert_eq!(plan.profile, Some(PathBuf::from("profiles/login.toml")));

        // Another host: no profile, so nothing fills partition.
        let plan = ok(Some(&job), &flags, &profiles, "gpu-a01");
        assert_eq!(plan.partition, None);
        assert_eq!(plan.profile, None);
    }

    #[test]
    fn gpus_total_derives_nodes() {
        let job = file("gpus = 16\ngpus_per_node = 8\ncommand = [\"python\", \"t.py\"]\n");
        let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
        assert_eq!(
            (plan.nodes, plan.gpus, plan.gpus_per_node),
            (2, Some(16), Some(8))
        );
        assert_eq!(
            plan.source(Key::Nodes),
            Some(&Source::Derived {
                from: vec![Key::Gpus, Key::GpusPerNode]
            })
        );
        let job = file("gpus = 16\nnodes = 4\ncommand = [\"python\", \"t.py\"]\n");
        let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
        assert_eq!(plan.gpus_per_node, Some(4));
        let job = file("gpus = 4\ncommand = [\"python\", \"t.py\"]\n");
        let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
        assert_eq!((plan.nodes, plan.gpus_per_node), (1, Some(4)));
        // A remainder resolves (rounded up); check() reports it.
        let job = file("gpus = 12\ngpus_per_node = 8\ncommand = [\"python\", \"t.py\"]\n");
        assert_eq!(ok(Some(&job), &JobKeys::default(), &[], "h").nodes, 2);
    }

    #[test]
    fn srun_mode_counts() {
        let job = file("mode = \"srun\"\nnodes = 2\ngpus_per_node = 8\ncpus_per_task = 5\ncommand = [\"python\", \"t.py\"]\n");
        let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
        assert_eq!(plan.tasks_per_node(), 8);
        assert_eq!(plan.workers_per_node(), 8);
        assert_eq!(plan.cpus_per_node(), 40);
        let flags = JobKeys {
            mode: Some("agent".into()),
            ..JobKeys::default()
        };
        let plan = ok(Some(&job), &flags, &[], "h");
        assert_eq!((plan.tasks_per_node(), plan.cpus_per_node()), (1, 5));
    }

    #[test]
    fn every_bad_value_is_reported_with_key_and_origin() {
        let job = file(
            r#"
nodes = 0
gpus_per_node = -1
cpus_per_task = 0
mem = "1.5G"
time = "50h"
signal = "USR9"
mode = "mpi"
partition = "gpu debug"
constraint = "a#b"
gpu_type = "a100 80gb"
gpu_bind = "closest"
job_name = "my job"
max_restarts = -1
sbatch_args = ["--comment=a\nb", "account=x"]
exclude = ["a[b", "!keep.out"]
command = ["python", "train.py"]
"#,
        );
        let e = err(Some(&job), &JobKeys::default());
        let keys: Vec<Key> = e.problems.iter().map(|p| p.key).collect();
        for k in [
            Key::Nodes,
            Key::GpusPerNode,
            Key::CpusPerTask,
            Key::Mem,
            Key::Time,
            Key::Signal,
            Key::Mode,
            Key::Partition,
            Key::Constraint,
            Key::GpuType,
            Key::GpuBind,
            Key::JobName,
            Key::MaxRestarts,
            Key::SbatchArgs,
            Key::Exclude,
        ] {
            assert!(keys.contains(&k), "{k} not reported: {e}");
        }
        let text = e.to_string();
        assert!(
            text.contains("`time` in jobs/train.toml: `50h` is not a SLURM time"),
            "{text}"
        );
        assert!(
            text.contains("`mode` in jobs/train.toml: `mpi` is not a launch mode"),
            "{text}"
        );
        assert!(
            text.contains("`gpu_bind` in jobs/train.toml: `closest` is not a GPU binding"),
            "{text}"
        );
        assert!(
            text.contains("`constraint` in jobs/train.toml: the constraint `a#b` contains `#`"),
            "{text}"
        );
        assert_eq!(
            e.problems
                .iter()
                .filter(|p| p.key == Key::SbatchArgs)
                .count(),
            2
        );
        let count = |k: Key| e.problems.iter().filter(|p| p.key == k).count();
        assert_eq!(count(Key::Exclude), 2);
        assert!(
            text.contains("`!keep.out`: these globs only leave files out"),
            "{text}"
        );
    }

    #[test]
    fn bad_flag_values_name_the_flag() {
        let flags = JobKeys {
            nodes: Some(0),
            time: Some(TextOrNumber::Text("forever".into())),
            mem: Some(TextOrNumber::Text("lots".into())),
            ..JobKeys::default()
        };
        let text = err(Some(&file(BASIC)), &flags).to_string();
        assert!(
            text.contains("--nodes: must be a whole number from 1"),
            "{text}"
        );
        assert!(
            text.contains("--time: `forever` is not a SLURM time"),
            "{text}"
        );
        assert!(
            text.contains("--mem: `lots` is not a SLURM memory size"),
            "{text}"
        );
    }

    #[test]
    fn command_rules() {
        let e = err(Some(&file("nodes = 1\n")), &JobKeys::default());
        assert!(e.to_string().contains("no command"), "{e}");
        let e = err(Some(&file("command = []\n")), &JobKeys::default());
        assert!(e.to_string().contains("the command is empty"), "{e}");
        let e = err(Some(&file("command = [\"--x\"]\n")), &JobKeys::default());
        assert!(e.to_string().contains("starts with `-`"), "{e}");
        let flags = JobKeys {
            command: Some(vec!["python".into(), "a\0b".into()]),
            ..JobKeys::default()
        };
        let e = err(None, &flags);
        assert!(
            e.to_string()
                .contains("-- CMD ARGS…: argument 2 contains a NUL byte"),
            "{e}"
        );
        // The flags' command replaces the file's, and names the job when no file does.
        let flags = JobKeys {
            command: Some(vec!["/opt/bin/my train".into(), "x".into()]),
            ..JobKeys::default()
        };
        let plan = ok(Some(&file(BASIC)), &flags, &[], "h");
        assert_eq!(plan.command, vec!["/opt/bin/my train", "x"]);
        let plan = ok(None, &flags, &[], "h");
        assert_eq!(plan.job_name, "my_train");
    }

    #[test]
    fn params_fill_placeholders() {
        let job = file(
            "params = [\"CHECKPOINT\"]\ncommand = [\"python\", \"test.py\", \"{CHECKPOINT}\", \"--out={CHECKPOINT}.pkl\", \"{OTHER}\"]\n",
        );
        let flags = JobKeys {
            params: Some(vec!["CHECKPOINT=work dirs/epoch_5.pth".into()]),
            ..JobKeys::default()
        };
        let plan = ok(Some(&job), &flags, &[], "h");
        assert_eq!(
            plan.command,
            vec![
                "python",
                "test.py",
                "work dirs/epoch_5.pth",
                "--out=work dirs/epoch_5.pth.pkl",
                "{OTHER}"
            ]
        );
        assert_eq!(
            plan.params.get("CHECKPOINT").map(String::as_str),
            Some("work dirs/epoch_5.pth")
        );

        let e = err(Some(&job), &JobKeys::default());
        assert!(
            e.to_string()
                .contains("needs a value for `CHECKPOINT`: give --param CHECKPOINT=VALUE"),
            "{e}"
        );
        let flags2 = JobKeys {
            params: Some(vec!["CHECKPOINT=a".into(), "CKPT=b".into()]),
            ..JobKeys::default()
        };
        let e = err(Some(&job), &flags2);
        assert!(
            e.to_string().contains(
                "--param CKPT: the job file has no param `CKPT` (it declares CHECKPOINT)"
            ),
            "{e}"
        );
        let unused = file("params = [\"X\"]\ncommand = [\"python\"]\n");
        let flags3 = JobKeys {
            params: Some(vec!["X=1".into()]),
            ..JobKeys::default()
        };
        let e = err(Some(&unused), &flags3);
        assert!(e.to_string().contains("`{X}` appears nowhere"), "{e}");
        assert_eq!(parse_param("A=b=c"), Ok(("A".into(), "b=c".into())));
        assert!(parse_param("=x").is_err());
        assert!(parse_param("a b=x").is_err());
        assert!(parse_param("noequals").is_err());
    }

    #[test]
    fn plan_serializes_for_the_manifest() {
        let job = file("nodes = 2\ngpus_per_node = 4\nmem = \"240GB\"\ntime = \"50:00:00\"\nsignal = \"USR1\"\ncommand = [\"python\", \"train.py\"]\n");
        let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
        let json = serde_json::to_value(&plan).unwrap_or_default();
        assert_eq!(json["mem"], "240G");
        assert_eq!(json["time"], "2-02:00:00");
        assert_eq!(json["signal"], "USR1@60");
        assert_eq!(json["mode"], "agent");
        assert_eq!(json["sources"]["nodes"][0]["kind"], "file");
        assert_eq!(json["sources"]["nodes"][0]["path"], "jobs/train.toml");
        assert_eq!(json["sources"]["mode"][0]["kind"], "default");
        let back: Plan = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, plan);
    }
}
