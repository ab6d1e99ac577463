//! Checks before queueing (docs/design.md §5) that need no cluster: the seeds' pitfall list
//! made mechanical. [`check()`] returns every finding at once; each names the keys to change
//! and where they were set.
//!
//! What the world contributes is passed in, so every check is testable without a cluster or
//! a file system: the partition table (read from `scontrol`/`sinfo` by
//! [`herd_slurm::scheduler::partition`]), a program lookup (snapshot folder, `PATH`, and a
//! closure that says whether a file exists), and the rendered script.
//!
//! Memory: a node's memory must cover [`MemoryPolicy::min_per_cpu_mb`] (default 1 GiB) for
//! each CPU the job asks for there, plus [`MemoryPolicy::per_worker_mb`] (default 0) of data
//! cache for each worker. 1 GiB per CPU is a floor, not advice: below it dataloader workers
//! (one per CPU is the usual setting) run out of memory on most image and video pipelines;
//! the seeds ask for 3.75 GB (`run.py`: 240 GB / 64 CPUs) and 7 GB (SwAV: 450 GB / 64).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::keys::Key;
use crate::resolve::{Mode, Plan};
use herd_slurm::scheduler::partition::Partition;
use herd_slurm::GpuBind;
use herd_slurm::Memory;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The job would fail, never start, or run wrong: nothing is submitted.
    Error,
    /// Worth a look; the job is submitted anyway.
    Warning,
}

/// One problem found, with the keys to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Error or warning.
    pub severity: Severity,
    /// A stable name for the check (`gpus-not-divisible`), for tests and JSON output.
    pub code: &'static str,
    /// The keys to change (empty for a problem in a script herd did not render from keys).
    pub keys: Vec<Key>,
    /// What is wrong and what to change, naming each key with where it was set.
    pub message: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{level}: {}", self.message)
    }
}

fn error(code: &'static str, keys: &[Key], message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        code,
        keys: keys.to_vec(),
        message,
    }
}

fn warning(code: &'static str, keys: &[Key], message: String) -> Finding {
    Finding {
        severity: Severity::Warning,
        code,
        keys: keys.to_vec(),
        message,
    }
}

/// Whether any finding is an error.
pub fn has_errors(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.severity == Severity::Error)
}

/// The memory a node needs (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPolicy {
    /// Megabytes needed for each CPU asked for on a node (default 1024).
    pub min_per_cpu_mb: u64,
    /// Megabytes of data cache each worker needs on top (default 0).
    pub per_worker_mb: u64,
}

impl Default for MemoryPolicy {
    fn default() -> MemoryPolicy {
        MemoryPolicy {
            min_per_cpu_mb: 1024,
            per_worker_mb: 0,
        }
    }
}

/// How to tell whether the command's program (and its script) exist where the job runs.
#[derive(Clone, Copy)]
pub struct ProgramLookup<'a> {
    /// The code snapshot: the job runs from here, so relative paths resolve here.
    pub snapshot: &'a Path,
    /// `PATH` directories searched for a bare program name (the submitting shell's `PATH`;
    /// sbatch passes the environment on by default).
    pub path: &'a [PathBuf],
    /// Whether `path` is a file the job can use (the CLI passes a real file-system test;
    /// tests pass a list).
    pub exists: &'a dyn Fn(&Path) -> bool,
}

impl fmt::Debug for ProgramLookup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgramLookup")
            .field("snapshot", &self.snapshot)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// What the checks may compare the plan with; every part is optional.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckContext<'a> {
    /// The memory rule.
    pub memory: MemoryPolicy,
    /// The cluster's partitions (`None`: partitions are not checked).
    pub partitions: Option<&'a [Partition]>,
    /// Where to look for the program (`None`: not checked).
    pub programs: Option<ProgramLookup<'a>>,
    /// The rendered batch script (`None`: not checked).
    pub script: Option<&'a str>,
}

/// Every finding for `plan`, errors first, in a stable order.
pub fn check(plan: &Plan, ctx: &CheckContext<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    check_counts(plan, &mut out);
    check_gpu_bind(plan, &mut out);
    check_memory(plan, ctx.memory, &mut out);
    check_sbatch_args(plan, &mut out);
    if let Some(parts) = ctx.partitions {
        check_partitions(plan, parts, &mut out);
    }
    if let Some(lookup) = &ctx.programs {
        check_program(plan, lookup, &mut out);
    }
    if let Some(script) = ctx.script {
        out.extend(check_script(script));
    }
    out.sort_by_key(|f| f.severity);
    out
}

fn check_counts(plan: &Plan, out: &mut Vec<Finding>) {
    let d = |k: Key| plan.describe(k);
    if let (Some(total), Some(g)) = (plan.gpus, plan.gpus_per_node) {
        let asked = u64::from(plan.nodes) * u64::from(g);
        if total % g != 0 {
            out.push(error(
                "gpus-not-divisible",
                &[Key::Gpus, Key::GpusPerNode],
                format!(
                    "{} = {total} GPUs is not a multiple of {} = {g}: a job gets whole nodes (nodes = gpus / gpus_per_node); use {} or {} GPUs",
                    d(Key::Gpus),
                    d(Key::GpusPerNode),
                    total / g * g,
                    total.div_ceil(g) * g
                ),
            ));
        } else if u64::from(total) != asked {
            out.push(error(
                "gpus-mismatch",
                &[Key::Gpus, Key::Nodes, Key::GpusPerNode],
                format!(
                    "{} = {total} GPUs, but {} × {} = {} × {g} = {asked}: set gpus to {asked} or nodes to {}",
                    d(Key::Gpus),
                    d(Key::Nodes),
                    d(Key::GpusPerNode),
                    plan.nodes,
                    total / g
                ),
            ));
        }
    }
    match plan.mode {
        Mode::Srun => {
            if let (Some(t), Some(g)) = (plan.ntasks_per_node, plan.gpus_per_node) {
                if t != g {
                    out.push(error(
                        "srun-tasks-not-gpus",
                        &[Key::NtasksPerNode, Key::GpusPerNode],
                        format!(
                            "srun mode runs one task per GPU, but {} = {t} and {} = {g}: make them equal (or leave ntasks_per_node out)",
                            d(Key::NtasksPerNode),
                            d(Key::GpusPerNode)
                        ),
                    ));
                }
            }
            if plan.max_restarts > 0 {
                out.push(error(
                    "srun-no-restarts",
                    &[Key::MaxRestarts, Key::Mode],
                    format!(
                        "{} = {}, but srun mode cannot restart workers ({}): use mode = \"agent\", or set max_restarts = 0",
                        d(Key::MaxRestarts),
                        plan.max_restarts,
                        d(Key::Mode)
                    ),
                ));
            }
        }
        Mode::Agent | Mode::Torchrun => {
            if let Some(t) = plan.ntasks_per_node.filter(|t| *t != 1) {
                out.push(error(
                    "ntasks-needs-srun-mode",
                    &[Key::NtasksPerNode, Key::Mode],
                    format!(
                        "{} = {t}, but {} mode runs one task per node that starts gpus_per_node workers: remove ntasks_per_node and set gpus_per_node, or use mode = \"srun\"",
                        d(Key::NtasksPerNode),
                        plan.mode
                    ),
                ));
            }
            let workers = plan.workers_per_node();
            if let Some(c) = plan.cpus_per_task.filter(|c| *c < workers) {
                out.push(warning(
                    "cpus-below-workers",
                    &[Key::CpusPerTask],
                    format!(
                        "{} = {c} CPUs per node for {workers} workers: in {} mode cpus_per_task counts the whole node, so each worker gets less than one CPU; raise it to at least {workers}",
                        d(Key::CpusPerTask),
                        plan.mode
                    ),
                ));
            }
        }
    }
}

fn check_gpu_bind(plan: &Plan, out: &mut Vec<Finding>) {
    if plan.gpu_bind != GpuBind::PerRank {
        return;
    }
    let d = |k: Key| plan.describe(k);
    if plan.mode == Mode::Torchrun {
        out.push(error(
            "gpu-bind-torchrun",
            &[Key::GpuBind, Key::Mode],
            format!(
                "{} = per-rank, but in torchrun mode ({}) torchrun starts the workers and gives each all of its node's GPUs: use mode = \"agent\" (the same workers, each seeing only its share), or set gpu_bind = \"all\"",
                d(Key::GpuBind),
                d(Key::Mode)
            ),
        ));
    } else if plan.gpus_per_node.is_none() {
        out.push(warning(
            "gpu-bind-no-gpus",
            &[Key::GpuBind, Key::GpusPerNode],
            format!(
                "{} = per-rank, but the job asks for no GPUs ({}): there is nothing to bind; set gpus_per_node or leave gpu_bind out",
                d(Key::GpuBind),
                d(Key::GpusPerNode)
            ),
        ));
    }
}

fn check_memory(plan: &Plan, policy: MemoryPolicy, out: &mut Vec<Finding>) {
    let Some(mem) = plan.mem.filter(|m| !m.is_whole_node()) else {
        return;
    };
    let cpus = plan.cpus_per_node();
    let workers = u64::from(plan.workers_per_node());
    let need = cpus
        .saturating_mul(policy.min_per_cpu_mb)
        .saturating_add(workers.saturating_mul(policy.per_worker_mb));
    if mem.megabytes() < need {
        let need_text =
            Memory::from_megabytes(need).map_or_else(|| format!("{need}M"), |m| m.to_string());
        let cache = if policy.per_worker_mb > 0 {
            format!(
                " + {workers} workers × {} MB data cache",
                policy.per_worker_mb
            )
        } else {
            String::new()
        };
        out.push(error(
            "mem-too-small",
            &[Key::Mem, Key::CpusPerTask],
            format!(
                "{} = {mem} per node is less than the {need_text} the job needs there: {cpus} CPUs ({} × {} tasks) × {} MB per CPU{cache}; raise mem or lower cpus_per_task",
                plan.describe(Key::Mem),
                plan.describe(Key::CpusPerTask),
                plan.tasks_per_node(),
                policy.min_per_cpu_mb
            ),
        ));
    }
}

/// sbatch options herd writes itself, with the key that sets each (`None`: herd manages it
/// and there is no key).
const MANAGED: &[(&str, Option<char>, Option<Key>)] = &[
    ("--job-name", Some('J'), Some(Key::JobName)),
    ("--nodes", Some('N'), Some(Key::Nodes)),
    ("--ntasks", Some('n'), Some(Key::Nodes)),
    ("--ntasks-per-node", None, Some(Key::GpusPerNode)),
    ("--gres", None, Some(Key::GpusPerNode)),
    ("--gpus-per-node", None, Some(Key::GpusPerNode)),
    ("--gpus", Some('G'), Some(Key::Gpus)),
    ("--cpus-per-task", Some('c'), Some(Key::CpusPerTask)),
    ("--mem", None, Some(Key::Mem)),
    ("--time", Some('t'), Some(Key::Time)),
    ("--partition", Some('p'), Some(Key::Partition)),
    ("--constraint", Some('C'), Some(Key::Constraint)),
    ("--dependency", Some('d'), Some(Key::After)),
    ("--requeue", None, Some(Key::Requeue)),
    ("--no-requeue", None, Some(Key::Requeue)),
    ("--signal", None, Some(Key::Signal)),
    ("--output", Some('o'), None),
    ("--error", Some('e'), None),
    ("--open-mode", None, None),
    ("--chdir", Some('D'), None),
];

fn option_name(arg: &str) -> (&str, Option<char>) {
    if arg.starts_with("--") {
        let end = arg.find(['=', ' ', '\t']).unwrap_or(arg.len());
        (&arg[..end], None)
    } else {
        (arg, arg.chars().nth(1))
    }
}

fn check_sbatch_args(plan: &Plan, out: &mut Vec<Finding>) {
    let origin = plan.describe(Key::SbatchArgs);
    for a in &plan.sbatch_args {
        let (long, short) = option_name(a);
        let hit = MANAGED.iter().find(|(l, s, _)| {
            if a.starts_with("--") {
                *l == long
            } else {
                s.is_some() && *s == short
            }
        });
        if let Some((l, _, key)) = hit {
            // In srun mode the tasks per node have their own key.
            let key = match (*l, plan.mode) {
                ("--ntasks-per-node", Mode::Srun) => &Some(Key::NtasksPerNode),
                _ => key,
            };
            let instead = match key {
                Some(k) => format!("set {} instead", plan.describe(*k)),
                None => "herd writes it into the experiment folder; remove it".to_owned(),
            };
            let mut keys = vec![Key::SbatchArgs];
            keys.extend(*key);
            out.push(error(
                "sbatch-arg-managed",
                &keys,
                format!(
                    "{origin}: `{a}` is {l}, which herd writes itself from the plan: {instead}"
                ),
            ));
        } else if plan.mem.is_some() && (long == "--mem-per-cpu" || long == "--mem-per-gpu") {
            out.push(error(
                "sbatch-arg-managed",
                &[Key::SbatchArgs, Key::Mem],
                format!(
                    "{origin}: `{a}` and {} exclude each other in SLURM: keep one",
                    plan.describe(Key::Mem)
                ),
            ));
        }
    }
}

fn check_partitions(plan: &Plan, parts: &[Partition], out: &mut Vec<Finding>) {
    let names: Vec<String> = match &plan.partition {
        Some(p) => p.split(',').map(str::to_owned).collect(),
        None => match parts.iter().find(|p| p.default) {
            Some(p) => vec![p.name.clone()],
            None => return,
        },
    };
    let known = || {
        parts
            .iter()
            .map(|p| {
                if p.default {
                    format!("{} (default)", p.name)
                } else {
                    p.name.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut per: Vec<Vec<Finding>> = Vec::new();
    for name in &names {
        let Some(p) = parts.iter().find(|p| &p.name == name) else {
            out.push(error(
                "partition-unknown",
                &[Key::Partition],
                format!(
                    "partition `{name}` ({}) does not exist; the cluster has {}",
                    plan.describe(Key::Partition),
                    known()
                ),
            ));
            continue;
        };
        per.push(partition_limits(plan, p));
    }
    // With several partitions SLURM runs the job in one it fits: limits only block when
    // none fits.
    let some_fit = names.len() > 1 && per.iter().any(|f| !has_errors(f));
    for mut f in per.into_iter().flatten() {
        if some_fit {
            f.severity = Severity::Warning;
        }
        out.push(f);
    }
}

fn partition_limits(plan: &Plan, p: &Partition) -> Vec<Finding> {
    let mut out = Vec::new();
    let d = |k: Key| plan.describe(k);
    let name = &p.name;
    match p.state.to_ascii_uppercase().as_str() {
        "UP" | "" => {}
        "DOWN" => out.push(warning(
            "partition-down",
            &[Key::Partition],
            format!("partition {name} is DOWN: the job will queue but not start until it is up"),
        )),
        state => out.push(error(
            "partition-closed",
            &[Key::Partition],
            format!("partition {name} is {state} and takes no new jobs: choose another with `partition`"),
        )),
    }
    if let Some(max) = p.max_nodes.filter(|m| plan.nodes > *m) {
        out.push(error(
            "partition-max-nodes",
            &[Key::Nodes, Key::Partition],
            format!(
                "{} = {} is more than partition {name}'s MaxNodes={max}",
                d(Key::Nodes),
                plan.nodes
            ),
        ));
    }
    if p.min_nodes > plan.nodes {
        out.push(error(
            "partition-min-nodes",
            &[Key::Nodes, Key::Partition],
            format!(
                "{} = {} is fewer than partition {name}'s MinNodes={}",
                d(Key::Nodes),
                plan.nodes,
                p.min_nodes
            ),
        ));
    }
    let too_few_total = p.total_nodes.is_some_and(|t| plan.nodes > t);
    if let Some(total) = p.total_nodes.filter(|t| plan.nodes > *t) {
        out.push(error(
            "partition-too-few-nodes",
            &[Key::Nodes, Key::Partition],
            format!(
                "{} = {}, but partition {name} has only {total} nodes",
                d(Key::Nodes),
                plan.nodes
            ),
        ));
    }
    if let (Some(t), Some(max)) = (plan.time, p.max_time) {
        if t > max {
            out.push(error(
                "partition-max-time",
                &[Key::Time, Key::Partition],
                format!(
                    "{} = {t} is longer than partition {name}'s MaxTime={max}",
                    d(Key::Time)
                ),
            ));
        }
    }
    let mem = plan.mem.filter(|m| !m.is_whole_node());
    if let (Some(m), Some(max)) = (mem, p.max_mem_per_node) {
        if m > max {
            out.push(error(
                "partition-max-mem",
                &[Key::Mem, Key::Partition],
                format!(
                    "{} = {m} is more than partition {name}'s MaxMemPerNode={max}",
                    d(Key::Mem)
                ),
            ));
        }
    }
    let cpus = plan.cpus_per_node();
    if let Some(max) = p.max_cpus_per_node.filter(|m| cpus > u64::from(*m)) {
        out.push(error(
            "partition-max-cpus",
            &[Key::CpusPerTask, Key::Partition],
            format!(
                "the job asks for {cpus} CPUs per node ({}), more than partition {name}'s MaxCPUsPerNode={max}",
                d(Key::CpusPerTask)
            ),
        ));
    }
    let gpn = plan.gpus_per_node.unwrap_or(0);
    let total_gpus = u64::from(plan.nodes) * u64::from(gpn);
    if let Some(have) = p
        .total_gpus
        .filter(|h| gpn > 0 && total_gpus > u64::from(*h))
    {
        out.push(error(
            "partition-too-few-gpus",
            &[Key::Nodes, Key::GpusPerNode, Key::Partition],
            format!("the job asks for {total_gpus} GPUs, but partition {name} has {have}"),
        ));
    }
    if !p.node_groups.is_empty() {
        let kind = plan.gpu_type.as_deref();
        let of_kind = kind.map(|k| format!(" of type {k}")).unwrap_or_default();
        let most_gpus = p
            .node_groups
            .iter()
            .map(|g| g.gpus(kind))
            .max()
            .unwrap_or(0);
        let most_cpus = p.node_groups.iter().map(|g| g.cpus).max().unwrap_or(0);
        let most_mem = p.node_groups.iter().map(|g| g.mem_mb).max().unwrap_or(0);
        let mut single = false;
        if gpn > most_gpus {
            single = true;
            out.push(error(
                "partition-node-gpus",
                &[Key::GpusPerNode, Key::Partition],
                format!(
                    "{} = {gpn}, but no node of partition {name} has {gpn} GPUs{of_kind} (the most is {most_gpus})",
                    d(Key::GpusPerNode)
                ),
            ));
        }
        if cpus > u64::from(most_cpus) {
            single = true;
            out.push(error(
                "partition-node-cpus",
                &[Key::CpusPerTask, Key::Partition],
                format!(
                    "the job asks for {cpus} CPUs per node ({}), but no node of partition {name} has more than {most_cpus}",
                    d(Key::CpusPerTask)
                ),
            ));
        }
        if let Some(m) = mem.filter(|m| m.megabytes() > most_mem) {
            single = true;
            out.push(error(
                "partition-node-mem",
                &[Key::Mem, Key::Partition],
                format!(
                    "{} = {m}, but no node of partition {name} has more than {most_mem}M",
                    d(Key::Mem)
                ),
            ));
        }
        if !single && !too_few_total {
            let fitting: u64 = p
                .node_groups
                .iter()
                .filter(|g| {
                    g.gpus(kind) >= gpn
                        && u64::from(g.cpus) >= cpus
                        && mem.is_none_or(|m| g.mem_mb >= m.megabytes())
                })
                .map(|g| u64::from(g.count))
                .sum();
            if fitting < u64::from(plan.nodes) {
                let mut need = Vec::new();
                if gpn > 0 {
                    need.push(format!("{gpn} GPUs{of_kind}"));
                }
                need.push(format!("{cpus} CPUs"));
                if let Some(m) = mem {
                    need.push(m.to_string());
                }
                out.push(error(
                    "partition-too-few-nodes",
                    &[Key::Nodes, Key::Partition],
                    format!(
                        "{} = {}, but only {fitting} nodes of partition {name} have {} each",
                        d(Key::Nodes),
                        plan.nodes,
                        need.join(", ")
                    ),
                ));
            }
        }
    }
    out
}

/// Interpreters whose first non-option argument is a script the job needs in the snapshot.
fn interpreter(program: &str) -> Option<&'static str> {
    let base = program.rsplit('/').next().unwrap_or(program);
    if base.starts_with("python") {
        Some("python")
    } else if matches!(base, "bash" | "sh" | "zsh" | "dash") {
        Some("sh")
    } else {
        None
    }
}

/// The script an interpreter command runs, with its argument index (1-based).
fn script_argument(kind: &str, args: &[String]) -> Option<(usize, String)> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        match (kind, a.as_str()) {
            (_, "--") => return args.get(i + 1).map(|s| (i + 2, s.clone())),
            ("python", "-m" | "-c") | ("sh", "-c") => return None,
            ("python", "-W" | "-X") | ("sh", "-o" | "+o" | "-O" | "+O") => i += 2,
            ("python", s) if s.starts_with("-m") || s.starts_with("-c") => return None,
            (_, s) if s.starts_with('-') || (kind == "sh" && s.starts_with('+')) => i += 1,
            _ => return Some((i + 2, a.clone())),
        }
    }
    None
}

fn check_program(plan: &Plan, lookup: &ProgramLookup<'_>, out: &mut Vec<Finding>) {
    let Some(program) = plan.command.first() else {
        return;
    };
    let origin = plan.describe(Key::Command);
    let snap = lookup.snapshot.display();
    if program.contains('/') {
        let path = if Path::new(program).is_absolute() {
            PathBuf::from(program)
        } else {
            lookup.snapshot.join(program)
        };
        if !(lookup.exists)(&path) {
            let where_ = if Path::new(program).is_absolute() {
                "does not exist".to_owned()
            } else {
                format!("is not in the snapshot {snap}, where the job runs")
            };
            out.push(error(
                "program-not-found",
                &[Key::Command],
                format!("{origin}: the program `{program}` {where_}"),
            ));
        }
    } else if !lookup
        .path
        .iter()
        .any(|dir| (lookup.exists)(&dir.join(program)))
    {
        out.push(error(
            "program-not-found",
            &[Key::Command],
            format!(
                "{origin}: the program `{program}` is not on PATH ({}); activate its environment before submitting, or give its full path",
                if lookup.path.is_empty() {
                    "PATH is empty".to_owned()
                } else {
                    let dirs: Vec<String> = lookup.path.iter().take(6).map(|p| p.display().to_string()).collect();
                    let more = if lookup.path.len() > 6 { ", …" } else { "" };
                    format!("searched {}{more}", dirs.join(":"))
                }
            ),
        ));
    }
    if let Some(kind) = interpreter(program) {
        if let Some((n, script)) = script_argument(kind, &plan.command[1..]) {
            let path = if Path::new(&script).is_absolute() {
                PathBuf::from(&script)
            } else {
                lookup.snapshot.join(&script)
            };
            if !(lookup.exists)(&path) {
                out.push(error(
                    "script-not-found",
                    &[Key::Command],
                    format!(
                        "{origin}: `{script}` (argument {n}, the script {program} runs) is not in the snapshot {snap}, where the job runs"
                    ),
                ));
            }
        }
    }
}

/// Findings for a batch script: `#!` must be its very first bytes, on a line without a
/// carriage return, and no `#SBATCH` line may follow the first command (sbatch stops
/// reading them there).
pub fn check_script(script: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    // `split`, not `lines`: lines() would drop the `\r` of a CRLF ending.
    let first = script.split('\n').next().unwrap_or("");
    if script.starts_with('\u{feff}') {
        out.push(error(
            "shebang-not-first",
            &[],
            "the batch script starts with a byte-order mark, so `#!` is not its first bytes: save it without one".into(),
        ));
    } else if !first.starts_with("#!") {
        let where_ = script
            .lines()
            .position(|l| l.trim_start().starts_with("#!"))
            .map(|i| format!("it is on line {}", i + 1))
            .unwrap_or_else(|| "there is none".into());
        out.push(error(
            "shebang-not-first",
            &[],
            format!(
                "the batch script's first line is `{}`, not a `#!` line ({where_}): sbatch needs the interpreter line first",
                first.trim_end_matches('\r').chars().take(60).collect::<String>().escape_debug()
            ),
        ));
    }
    if first.ends_with('\r') {
        out.push(error(
            "script-crlf",
            &[],
            "the batch script has Windows (CRLF) line endings: the interpreter would be `/bin/bash\\r`; convert it to LF".into(),
        ));
    }
    let mut first_command: Option<usize> = None;
    for (i, line) in script.lines().enumerate().skip(1) {
        let t = line.trim_start();
        if t.is_empty() || (t.starts_with('#') && !t.starts_with("#SBATCH")) {
            continue;
        }
        if t.starts_with("#SBATCH") {
            if let Some(c) = first_command {
                out.push(error(
                    "sbatch-after-command",
                    &[Key::SbatchArgs],
                    format!(
                        "line {}: `{}` comes after the first command (line {}), where sbatch no longer reads #SBATCH lines: move it up",
                        i + 1,
                        t.escape_debug(),
                        c + 1
                    ),
                ));
            }
        } else if first_command.is_none() {
            first_command = Some(i);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobFile;
    use crate::keys::JobKeys;
    use crate::resolve::resolve;
    use herd_slurm::scheduler::partition::{
        add_node_groups, parse_scontrol_partitions, parse_sinfo,
    };

    fn plan_with(text: &str, flags: &JobKeys) -> Plan {
        let job =
            JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"));
        resolve(Some(&job), flags, &[], "login1").unwrap_or_else(|e| panic!("{e}"))
    }

    fn plan(text: &str) -> Plan {
        plan_with(text, &JobKeys::default())
    }

    fn codes(findings: &[Finding]) -> Vec<&'static str> {
        findings.iter().map(|f| f.code).collect()
    }

    fn run(p: &Plan) -> Vec<Finding> {
        check(p, &CheckContext::default())
    }

    const CMD: &str = "command = [\"python\", \"train.py\"]\n";

    #[test]
    fn clean_plan_has_no_findings() {
        let p = plan(&format!(
            "nodes = 2\ngpus_per_node = 8\ncpus_per_task = 64\nmem = \"240G\"\n{CMD}"
        ));
        assert_eq!(run(&p), vec![]);
    }

    #[test]
    fn gpus_must_divide() {
        let p = plan(&format!("gpus = 12\ngpus_per_node = 8\n{CMD}"));
        let f = run(&p);
        assert_eq!(codes(&f), ["gpus-not-divisible"]);
        assert_eq!(f[0].keys, [Key::Gpus, Key::GpusPerNode]);
        assert!(f[0].message.contains("`gpus` in jobs/train.toml = 12 GPUs is not a multiple of `gpus_per_node` in jobs/train.toml = 8"), "{}", f[0]);
        assert!(f[0].message.contains("use 8 or 16 GPUs"), "{}", f[0]);

        // The file says 64 GPUs on 8 nodes; a flag changes nodes.
        let flags = JobKeys {
            nodes: Some(4),
            ..JobKeys::default()
        };
        let p = plan_with(
            &format!("gpus = 64\nnodes = 8\ngpus_per_node = 8\n{CMD}"),
            &flags,
        );
        let f = run(&p);
        assert_eq!(codes(&f), ["gpus-mismatch"]);
        assert!(f[0].message.contains("--nodes × `gpus_per_node` in jobs/train.toml = 4 × 8 = 32: set gpus to 32 or nodes to 8"), "{}", f[0]);

        // Total given with nodes only: gpus per node derived, remainder reported.
        let p = plan(&format!("gpus = 10\nnodes = 4\n{CMD}"));
        assert_eq!(codes(&run(&p)), ["gpus-not-divisible"]);
    }

    #[test]
    fn per_rank_gpu_binding_needs_a_herd_launch_and_gpus() {
        let p = plan(&format!(
            "mode = \"torchrun\"\nnodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\n{CMD}"
        ));
        let f = run(&p);
        assert_eq!(codes(&f), ["gpu-bind-torchrun"]);
        assert!(
            f[0].message
                .contains("`gpu_bind` in jobs/train.toml = per-rank")
                && f[0].message.contains("use mode = \"agent\""),
            "{}",
            f[0]
        );
        let p = plan(&format!("nodes = 2\ngpu_bind = \"per-rank\"\n{CMD}"));
        let f = run(&p);
        assert_eq!(codes(&f), ["gpu-bind-no-gpus"]);
        assert!(!has_errors(&f));
        for mode in ["agent", "srun"] {
            let p = plan(&format!(
                "mode = \"{mode}\"\nnodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\n{CMD}"
            ));
            assert_eq!(codes(&run(&p)), Vec::<&str>::new(), "{mode}");
        }
    }

    #[test]
    fn srun_mode_rules() {
        let p = plan(&format!("mode = \"srun\"\nnodes = 2\ngpus_per_node = 8\nntasks_per_node = 4\nmax_restarts = 1\n{CMD}"));
        let f = run(&p);
        assert_eq!(codes(&f), ["srun-tasks-not-gpus", "srun-no-restarts"]);
        assert!(
            f[0].message
                .contains("`ntasks_per_node` in jobs/train.toml = 4"),
            "{}",
            f[0]
        );
        let p = plan(&format!(
            "nodes = 2\ngpus_per_node = 8\nntasks_per_node = 8\n{CMD}"
        ));
        assert_eq!(codes(&run(&p)), ["ntasks-needs-srun-mode"]);
        let p = plan(&format!(
            "nodes = 2\ngpus_per_node = 8\ncpus_per_task = 4\n{CMD}"
        ));
        let f = run(&p);
        assert_eq!(codes(&f), ["cpus-below-workers"]);
        assert_eq!(f[0].severity, Severity::Warning);
        assert!(!has_errors(&f));
    }

    #[test]
    fn memory_rule() {
        // run.py's default: 240 GB for 64 CPUs is fine; 32G is not.
        let p = plan(&format!(
            "gpus_per_node = 8\ncpus_per_task = 64\nmem = \"32G\"\n{CMD}"
        ));
        let f = run(&p);
        assert_eq!(codes(&f), ["mem-too-small"]);
        assert!(f[0].message.contains("`mem` in jobs/train.toml = 32G per node is less than the 64G the job needs there: 64 CPUs"), "{}", f[0]);
        // srun mode counts every task's CPUs: 8 tasks × 5 CPUs = 40 CPUs.
        let p = plan(&format!(
            "mode = \"srun\"\ngpus_per_node = 8\ncpus_per_task = 5\nmem = \"39G\"\n{CMD}"
        ));
        assert_eq!(codes(&run(&p)), ["mem-too-small"]);
        let p = plan(&format!(
            "mode = \"srun\"\ngpus_per_node = 8\ncpus_per_task = 5\nmem = \"40G\"\n{CMD}"
        ));
        assert_eq!(run(&p), vec![]);
        // A data cache per worker.
        let ctx = CheckContext {
            memory: MemoryPolicy {
                min_per_cpu_mb: 1024,
                per_worker_mb: 4096,
            },
            ..CheckContext::default()
        };
        let f = check(&p, &ctx);
        assert_eq!(codes(&f), ["mem-too-small"]);
        assert!(
            f[0].message.contains("8 workers × 4096 MB data cache"),
            "{}",
            f[0]
        );
        // mem = 0 is the whole node: nothing to compare.
        let p = plan(&format!("cpus_per_task = 64\nmem = 0\n{CMD}"));
        assert_eq!(run(&p), vec![]);
    }

    #[test]
    fn managed_sbatch_args() {
        let p = plan(&format!(
            "mem = \"10G\"\nsbatch_args = [\"--account=lab\", \"--nodes=4\", \"-N 4\", \"-o x.out\", \"--mem-per-cpu=2G\", \"--gres-flags=enforce-binding\", \"-A lab\"]\n{CMD}"
        ));
        let f = run(&p);
        assert_eq!(codes(&f), ["sbatch-arg-managed"; 4]);
        assert!(f[0].message.contains("`--nodes=4` is --nodes, which herd writes itself from the plan: set `nodes` (herd's default) instead"), "{}", f[0]);
        assert!(f[2].message.contains("remove it"), "{}", f[2]);
    }

    const BED_SCONTROL: &str = "\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
PartitionName=dev AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=00:05:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
";
    const BED_SINFO: &str =
        "gpu|up|infinite|3|8|16000|gpu:4|gpu-a[01-03]\ndev|up|5:00|3|8|16000|gpu:4|gpu-a[01-03]\n";

    fn bed() -> Vec<Partition> {
        let mut parts = parse_scontrol_partitions(BED_SCONTROL).unwrap_or_else(|e| panic!("{e}"));
        let rows = parse_sinfo(BED_SINFO).unwrap_or_else(|e| panic!("{e}"));
        add_node_groups(&mut parts, &rows);
        parts
    }

    fn with_parts(p: &Plan, parts: &[Partition]) -> Vec<Finding> {
        check(
            p,
            &CheckContext {
                partitions: Some(parts),
                ..CheckContext::default()
            },
        )
    }

    #[test]
    fn partitions_on_the_bed() {
        let parts = bed();
        // Fits: 3 nodes × 2 GPUs, 4 CPUs, 8G each, in the default partition.
        let p = plan(&format!(
            "nodes = 3\ngpus_per_node = 2\ncpus_per_task = 4\nmem = \"8G\"\n{CMD}"
        ));
        assert_eq!(with_parts(&p, &parts), vec![]);

        let p = plan(&format!("partition = \"gpus\"\n{CMD}"));
        let f = with_parts(&p, &parts);
        assert_eq!(codes(&f), ["partition-unknown"]);
        assert!(f[0].message.contains("partition `gpus` (`partition` in jobs/train.toml) does not exist; the cluster has gpu (default), dev"), "{}", f[0]);

        let p = plan(&format!(
            "partition = \"dev\"\ntime = \"10:00\"\nnodes = 4\n{CMD}"
        ));
        let f = with_parts(&p, &parts);
        assert_eq!(codes(&f), ["partition-too-few-nodes", "partition-max-time"]);
        assert!(f[1].message.contains("`time` in jobs/train.toml = 00:10:00 is longer than partition dev's MaxTime=00:05:00"), "{}", f[1]);
        assert!(
            f[0].message
                .contains("`nodes` in jobs/train.toml = 4, but partition dev has only 3 nodes"),
            "{}",
            f[0]
        );

        // Enough nodes in all, but not enough with 4 GPUs and 8 CPUs free of other shapes.
        let mut mixed = bed();
        mixed[0].node_groups[0].count = 1;
        mixed[0]
            .node_groups
            .push(herd_slurm::scheduler::partition::NodeGroup {
                count: 2,
                cpus: 8,
                mem_mb: 16000,
                gpus: vec![],
            });
        let p = plan(&format!(
            "nodes = 2\ngpus_per_node = 4\ncpus_per_task = 8\n{CMD}"
        ));
        let f = with_parts(&p, &mixed);
        assert_eq!(codes(&f), ["partition-too-few-nodes"]);
        assert!(f[0].message.contains("`nodes` in jobs/train.toml = 2, but only 1 nodes of partition gpu have 4 GPUs, 8 CPUs each"), "{}", f[0]);

        let p = plan(&format!("gpus_per_node = 8\n{CMD}"));
        let f = with_parts(&p, &parts);
        assert_eq!(codes(&f), ["partition-node-gpus"]);
        assert!(
            f[0].message
                .contains("no node of partition gpu has 8 GPUs (the most is 4)"),
            "{}",
            f[0]
        );

        let p = plan(&format!("cpus_per_task = 16\nmem = \"20G\"\n{CMD}"));
        assert_eq!(
            codes(&with_parts(&p, &parts)),
            ["partition-node-cpus", "partition-node-mem"]
        );

        let p = plan(&format!("gpus_per_node = 4\ngpu_type = \"a100\"\n{CMD}"));
        let f = with_parts(&p, &parts);
        assert!(
            f[0].message.contains("4 GPUs of type a100 (the most is 0)"),
            "{}",
            f[0]
        );

        // Two partitions: dev is too short, gpu fits, so dev's limit is only a warning.
        let p = plan(&format!("partition = \"dev,gpu\"\ntime = \"10:00\"\n{CMD}"));
        let f = with_parts(&p, &parts);
        assert_eq!(codes(&f), ["partition-max-time"]);
        assert_eq!(f[0].severity, Severity::Warning);
    }

    #[test]
    fn partition_limits_and_states() {
        let mut parts = bed();
        parts[0].max_nodes = Some(2);
        parts[0].min_nodes = 2;
        parts[0].max_mem_per_node = Memory::from_megabytes(8000);
        parts[0].max_cpus_per_node = Some(4);
        parts[0].total_gpus = Some(4);
        parts[0].node_groups.clear();
        let p = plan(&format!(
            "nodes = 3\ngpus_per_node = 2\ncpus_per_task = 6\nmem = \"9G\"\n{CMD}"
        ));
        assert_eq!(
            codes(&with_parts(&p, &parts)),
            [
                "partition-max-nodes",
                "partition-max-mem",
                "partition-max-cpus",
                "partition-too-few-gpus"
            ]
        );
        let p = plan(&format!("nodes = 1\n{CMD}"));
        assert_eq!(codes(&with_parts(&p, &parts)), ["partition-min-nodes"]);
        parts[0].min_nodes = 0;
        parts[0].state = "DOWN".into();
        let f = with_parts(&p, &parts);
        assert_eq!(codes(&f), ["partition-down"]);
        assert!(!has_errors(&f));
        parts[0].state = "INACTIVE".into();
        assert_eq!(codes(&with_parts(&p, &parts)), ["partition-closed"]);
        // No partition given and no default: nothing to compare.
        parts[0].default = false;
        assert_eq!(with_parts(&p, &parts), vec![]);
    }

    fn lookup_check(command: &str, files: &[&str]) -> Vec<Finding> {
        let p = plan(&format!("command = {command}\n"));
        let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
        let exists = |path: &Path| files.iter().any(|f| f == path);
        let path = [PathBuf::from("/usr/bin"), PathBuf::from("/opt/conda/bin")];
        let ctx = CheckContext {
            programs: Some(ProgramLookup {
                snapshot: Path::new("/exp/x/code"),
                path: &path,
                exists: &exists,
            }),
            ..CheckContext::default()
        };
        check(&p, &ctx)
    }

    #[test]
    fn programs_and_scripts() {
        let files = [
            "/opt/conda/bin/python",
            "/exp/x/code/train.py",
            "/exp/x/code/run.sh",
            "/usr/bin/bash",
        ];
        assert_eq!(
            lookup_check(r#"["python", "-u", "train.py", "--lr", "1"]"#, &files),
            vec![]
        );
        assert_eq!(
            lookup_check(r#"["python", "-W", "ignore", "train.py"]"#, &files),
            vec![]
        );
        assert_eq!(
            lookup_check(r#"["python", "-m", "torch.utils.collect_env"]"#, &files),
            vec![]
        );
        assert_eq!(lookup_check(r#"["./run.sh", "a"]"#, &files), vec![]);
        assert_eq!(lookup_check(r#"["bash", "-x", "run.sh"]"#, &files), vec![]);
        assert_eq!(lookup_check(r#"["bash", "-c", "echo hi"]"#, &files), vec![]);
        assert_eq!(
            lookup_check(r#"["/opt/conda/bin/python", "--", "train.py"]"#, &files),
            vec![]
        );

        let f = lookup_check(r#"["pythn", "train.py"]"#, &files);
        assert_eq!(codes(&f), ["program-not-found"]);
        assert!(f[0].message.contains("`command` in jobs/train.toml: the program `pythn` is not on PATH (searched /usr/bin:/opt/conda/bin)"), "{}", f[0]);
        let f = lookup_check(r#"["python", "-u", "tools/train.py"]"#, &files);
        assert_eq!(codes(&f), ["script-not-found"]);
        assert!(f[0].message.contains("`tools/train.py` (argument 3, the script python runs) is not in the snapshot /exp/x/code"), "{}", f[0]);
        let f = lookup_check(r#"["./missing.sh"]"#, &files);
        assert!(
            f[0].message
                .contains("is not in the snapshot /exp/x/code, where the job runs"),
            "{}",
            f[0]
        );
        let f = lookup_check(r#"["/opt/none/python3", "train.py"]"#, &files);
        assert!(
            f[0].message.contains("`/opt/none/python3` does not exist"),
            "{}",
            f[0]
        );
    }

    #[test]
    fn scripts() {
        assert_eq!(
            check_script("#!/bin/bash\n#SBATCH --nodes=1\n\n# note\nsrun x\n"),
            vec![]
        );
        let f = check_script("# Copyright\n#!/bin/bash\n#SBATCH --nodes=8\n");
        assert_eq!(codes(&f), ["shebang-not-first"]);
        assert!(
            f[0].message
                .contains("first line is `# Copyright`, not a `#!` line (it is on line 2)"),
            "{}",
            f[0]
        );
        assert_eq!(
            codes(&check_script("\n#!/bin/bash\n")),
            ["shebang-not-first"]
        );
        assert_eq!(codes(&check_script("")), ["shebang-not-first"]);
        assert_eq!(
            codes(&check_script("\u{feff}#!/bin/bash\n")),
            ["shebang-not-first"]
        );
        assert_eq!(
            codes(&check_script("#!/bin/bash\r\n#SBATCH -N1\r\n")),
            ["script-crlf"]
        );
        let f = check_script("#!/bin/bash\n#SBATCH -N 2\nset -e\n#SBATCH --time=5\n");
        assert_eq!(codes(&f), ["sbatch-after-command"]);
        assert!(
            f[0].message
                .contains("line 4: `#SBATCH --time=5` comes after the first command (line 3)"),
            "{}",
            f[0]
        );
        // Through check(): script findings come with the others.
        let p = plan(CMD);
        let ctx = CheckContext {
            script: Some("echo\n"),
            ..CheckContext::default()
        };
        assert_eq!(codes(&check(&p, &ctx)), ["shebang-not-first"]);
    }

    #[test]
    fn findings_serialize() {
        let f = error("x", &[Key::Mem], "m".into());
        let json = serde_json::to_string(&f).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"severity":"error","code":"x","keys":["mem"],"message":"m"}"#
        );
        assert_eq!(f.to_string(), "error: m");
    }
}
