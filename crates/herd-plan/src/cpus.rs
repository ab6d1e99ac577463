//! CPUs: the two keys that ask for them, what SLURM is asked for, and how `herd check`
//! says what each worker gets.
//!
//! `cpus_per_worker` is the CPUs of each training process, in every mode. `cpus_per_task`
//! is SLURM's own count per task: herd runs one task per node in agent and torchrun mode
//! (the agent, or torchrun, starts the node's workers), so there it is the whole node's,
//! shared by its workers, and one task per worker in srun mode, so there it is each
//! worker's. herd makes `cpus_per_worker` into SLURM's `--cpus-per-task`: × the workers
//! per node in agent and torchrun mode, × 1 in srun mode. [`Plan::cpus_per_task`] is always
//! SLURM's value, whichever key gave it; the batch script passes it to sbatch and to the
//! srun that starts the tasks.
//!
//! Layering: the highest layer (flags, then the job file, then the profile) that sets
//! either key decides, so a job file's `cpus_per_worker` replaces a profile's
//! `cpus_per_task`, and a `--cpus-per-task` flag replaces a job file's `cpus_per_worker`.
//! A layer that sets both is a problem naming both.

use crate::keys::{Key, Source};
use crate::layers::Layers;
use crate::plan::{Mode, Plan};
use crate::values::positive;

/// The CPUs a plan asks for: SLURM's per task, and each worker's when that key gave them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cpus {
    /// SLURM's `--cpus-per-task`.
    pub(crate) per_task: Option<u32>,
    /// `cpus_per_worker` as given.
    pub(crate) per_worker: Option<u32>,
}

/// Workers each SLURM task starts: all of the node's in agent and torchrun mode, one in
/// srun mode.
fn workers_per_task(mode: Mode, workers: u32) -> u32 {
    match mode {
        Mode::Srun => 1,
        Mode::Agent | Mode::Torchrun => workers,
    }
}

/// The one task per node, for a message: "herd's agent" or "torchrun".
fn node_task(mode: Mode) -> &'static str {
    match mode {
        Mode::Torchrun => "torchrun",
        _ => "herd's agent",
    }
}

/// `n` and `word`, plural unless `n` is 1: "1 worker", "4 workers".
fn count(n: u64, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// `cpus_per_worker` or `cpus_per_task` from the highest layer that sets either, for a job
/// of `workers` per node in `mode` (`gpus_per_node` as resolved, for the derived source);
/// every layer that sets both is a problem.
pub(crate) fn resolve_cpus(
    l: &mut Layers<'_>,
    mode: Mode,
    workers: u32,
    gpus_per_node: Option<u32>,
) -> Cpus {
    let per_task_workers = workers_per_task(mode, workers);
    let mut decided = None;
    for (keys, src) in l.top_down() {
        let (w, t) = (keys.cpus_per_worker, keys.cpus_per_task);
        if let (Some(w), Some(t)) = (w, t) {
            let meaning = match mode {
                Mode::Srun => format!("{t} for each task, one per worker in srun mode"),
                Mode::Agent | Mode::Torchrun => format!(
                    "{t} for the node's one task in {mode} mode, shared by its {}",
                    count(u64::from(workers), "worker")
                ),
            };
            let slurm = i64::from(per_task_workers).saturating_mul(w);
            l.problem(
                Key::CpusPerWorker,
                Some(src.clone()),
                format!(
                    "set together with {}: they are two ways to ask for the same CPUs (cpus_per_worker = {w}: {w} for each worker, SLURM's --cpus-per-task={slurm} here; cpus_per_task = {t}: {meaning}); keep one of them and remove the other",
                    src.describe(Key::CpusPerTask)
                ),
            );
        }
        if decided.is_none() && (w.is_some() || t.is_some()) {
            decided = Some((w, t, src));
        }
    }
    let Some((w, t, src)) = decided else {
        return Cpus::default();
    };
    match (w, t) {
        (Some(w), None) => {
            let per_worker = match positive(w) {
                Ok(v) => v,
                Err(e) => {
                    l.problem(Key::CpusPerWorker, Some(src), e.message);
                    return Cpus::default();
                }
            };
            let Some(per_task) = per_worker.checked_mul(per_task_workers) else {
                l.problem(
                    Key::CpusPerWorker,
                    Some(src),
                    format!(
                        "{per_worker} CPUs × {} per task is more than SLURM can be asked for",
                        count(u64::from(per_task_workers), "worker")
                    ),
                );
                return Cpus::default();
            };
            l.set_source(Key::CpusPerWorker, src);
            let mut from = vec![Key::CpusPerWorker];
            if mode != Mode::Srun && gpus_per_node.is_some() {
                from.push(Key::GpusPerNode);
            }
            l.set_source(Key::CpusPerTask, Source::Derived { from });
            Cpus {
                per_task: Some(per_task),
                per_worker: Some(per_worker),
            }
        }
        (None, Some(t)) => match positive(t) {
            Ok(per_task) => {
                l.set_source(Key::CpusPerTask, src);
                Cpus {
                    per_task: Some(per_task),
                    per_worker: None,
                }
            }
            Err(e) => {
                l.problem(Key::CpusPerTask, Some(src), e.message);
                Cpus::default()
            }
        },
        // Both in the deciding layer: a problem already.
        _ => Cpus::default(),
    }
}

/// CPUs per worker, `per_node` ÷ `workers`: whole when it divides, else to two decimals
/// ("1.5", "0.5", "2.67").
fn per_worker_text(per_node: u64, workers: u32) -> String {
    let workers = u64::from(workers.max(1));
    if per_node.is_multiple_of(workers) {
        return (per_node / workers).to_string();
    }
    let text = format!("{:.2}", per_node as f64 / workers as f64);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// What `herd check` (and `herd submit --dry-run`) says of the CPUs: per node and per
/// worker, from which key, and what SLURM is asked for, in every mode:
///
/// `CPUs: 20 per node (5 per worker × 4 workers): --cpus-per-worker = 5, asked of SLURM as
/// --cpus-per-task=20 for the node's one task (herd's agent, which starts its 4 workers)`
///
/// With neither key, what SLURM's default (1 CPU per task) means in the plan's mode.
pub fn cpus_line(plan: &Plan) -> String {
    let workers = plan.workers_per_node();
    let tasks = plan.tasks_per_node();
    let for_tasks = match plan.mode {
        Mode::Srun => format!(
            "for each of the node's {} (one per worker)",
            count(u64::from(tasks), "task")
        ),
        Mode::Agent | Mode::Torchrun => format!(
            "for the node's one task ({}, which starts its {})",
            node_task(plan.mode),
            count(u64::from(workers), "worker")
        ),
    };
    let Some(per_task) = plan.cpus_per_task else {
        let share = match plan.mode {
            Mode::Srun => format!(
                "{} per node (1 per worker × {}, one task each)",
                tasks,
                count(u64::from(workers), "worker")
            ),
            Mode::Agent | Mode::Torchrun if workers == 1 => format!(
                "the node's one worker gets 1 CPU (its one task, {}, starts it)",
                node_task(plan.mode)
            ),
            Mode::Agent | Mode::Torchrun => format!(
                "the node's {workers} workers share 1 CPU (its one task, {}, starts them all)",
                node_task(plan.mode)
            ),
        };
        return format!(
            "CPUs: neither cpus_per_worker nor cpus_per_task is set, so SLURM's default of 1 per task: {share}, unless the site's default is higher; set cpus_per_worker to give each worker more"
        );
    };
    let per_node = u64::from(per_task) * u64::from(tasks);
    let head = format!(
        "CPUs: {per_node} per node ({} per worker × {})",
        per_worker_text(per_node, workers),
        count(u64::from(workers), "worker")
    );
    match plan.cpus_per_worker {
        Some(w) => format!(
            "{head}: {} = {w}, asked of SLURM as --cpus-per-task={per_task} {for_tasks}",
            plan.describe(Key::CpusPerWorker)
        ),
        None => format!(
            "{head}: {} = {per_task} {for_tasks}",
            plan.describe(Key::CpusPerTask)
        ),
    }
}

/// The key the plan's CPUs were asked for with, for a finding: `cpus_per_worker` when it
/// was given, else `cpus_per_task`.
pub(crate) fn cpus_key(plan: &Plan) -> Key {
    if plan.cpus_per_worker.is_some() {
        Key::CpusPerWorker
    } else {
        Key::CpusPerTask
    }
}

/// How the CPUs per node were asked for, for a check's message: "--cpus-per-worker = 5 × 8
/// workers", "`cpus_per_task` in job.toml = 8 × 1 task", or SLURM's default.
pub(crate) fn cpus_asked(plan: &Plan) -> String {
    match (plan.cpus_per_worker, plan.cpus_per_task) {
        (Some(w), _) => format!(
            "{} = {w} × {}",
            plan.describe(Key::CpusPerWorker),
            count(u64::from(plan.workers_per_node()), "worker")
        ),
        (None, Some(t)) => format!(
            "{} = {t} × {}",
            plan.describe(Key::CpusPerTask),
            count(u64::from(plan.tasks_per_node()), "task")
        ),
        (None, None) => format!(
            "SLURM's default of 1 per task × {}; neither cpus_per_worker nor cpus_per_task is set",
            count(u64::from(plan.tasks_per_node()), "task")
        ),
    }
}

#[cfg(test)]
mod tests;
