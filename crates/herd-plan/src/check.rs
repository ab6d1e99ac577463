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

use crate::cpus::{cpus_asked, cpus_key};
use crate::keys::Key;
use crate::plan::{Mode, Plan};
use herd_slurm::scheduler::partition::Partition;
use herd_slurm::GpuBind;
use herd_slurm::Memory;

mod finding;
mod program;

use finding::{error, warning};
pub use finding::{has_errors, Finding, Severity};
pub use program::ProgramLookup;

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
        program::check_programs(plan, lookup, &mut out);
    }
    if let Some(script) = ctx.script {
        out.extend(check_script(script));
    }
    out.sort_by_key(|f| f.severity);
    out
}

/// The nodes the job asks SLURM for, named for a message: "`nodes` = 4", or with spares
/// "`nodes` = 4 + `spare_nodes` = 1 (5 nodes)" (where each was set).
fn nodes_asked(plan: &Plan) -> String {
    let nodes = format!("{} = {}", plan.describe(Key::Nodes), plan.nodes);
    if plan.spare_nodes == 0 {
        return nodes;
    }
    format!(
        "{nodes} + {} = {} ({} nodes)",
        plan.describe(Key::SpareNodes),
        plan.spare_nodes,
        plan.alloc_nodes()
    )
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
    if plan.spare_nodes > 0 && plan.mode != Mode::Agent {
        out.push(error(
                "spares-need-agent-mode",
                &[Key::SpareNodes, Key::Mode],
                format!(
                    "{} = {}, but only herd's agents can start a spare in a lost node's place ({}): use mode = \"agent\", or set spare_nodes = 0",
                    d(Key::SpareNodes),
                    plan.spare_nodes,
                    d(Key::Mode)
                ),
            ));
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
                        "{} = {c} CPUs per node for {workers} workers: in {} mode cpus_per_task counts the whole node, so each worker gets less than one CPU; raise it to at least {workers}, or give cpus_per_worker instead (CPUs for each worker, in every mode)",
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
            &[Key::Mem, cpus_key(plan)],
            format!(
                "{} = {mem} per node is less than the {need_text} the job needs there: {cpus} CPUs ({}) × {} MB per CPU{cache}; raise mem or lower {}",
                plan.describe(Key::Mem),
                cpus_asked(plan),
                policy.min_per_cpu_mb,
                cpus_key(plan)
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
    if let Some(max) = p.max_nodes.filter(|m| plan.alloc_nodes() > *m) {
        out.push(error(
            "partition-max-nodes",
            &[Key::Nodes, Key::Partition],
            format!(
                "{} is more than partition {name}'s MaxNodes={max}",
                nodes_asked(plan)
            ),
        ));
    }
    if p.min_nodes > plan.alloc_nodes() {
        out.push(error(
            "partition-min-nodes",
            &[Key::Nodes, Key::Partition],
            format!(
                "{} is fewer than partition {name}'s MinNodes={}",
                nodes_asked(plan),
                p.min_nodes
            ),
        ));
    }
    let too_few_total = p.total_nodes.is_some_and(|t| plan.alloc_nodes() > t);
    if let Some(total) = p.total_nodes.filter(|t| plan.alloc_nodes() > *t) {
        out.push(error(
            "partition-too-few-nodes",
            &[Key::Nodes, Key::Partition],
            format!(
                "{}, but partition {name} has only {total} nodes",
                nodes_asked(plan)
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
            &[cpus_key(plan), Key::Partition],
            format!(
                "the job asks for {cpus} CPUs per node ({}), more than partition {name}'s MaxCPUsPerNode={max}",
                cpus_asked(plan)
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
                &[cpus_key(plan), Key::Partition],
                format!(
                    "the job asks for {cpus} CPUs per node ({}), but no node of partition {name} has more than {most_cpus}",
                    cpus_asked(plan)
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
            if fitting < u64::from(plan.alloc_nodes()) {
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
                        "{}, but only {fitting} nodes of partition {name} have {} each",
                        nodes_asked(plan),
                        need.join(", ")
                    ),
                ));
            }
        }
    }
    out
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
mod tests;
