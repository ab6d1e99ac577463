//! `herd logs NAME`: an experiment's per-rank logs by attempt, merged in time order by the
//! agents' time marks, filtered, followed as they grow; the failure report with the failing
//! rank's last lines; SLURM's batch-step output (docs/logs.md). Reading the folder is
//! [`herd_exp::logs`]'s; this module picks what to read and prints it.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use herd_exp::logs::{self as exp_logs, History, Merge};

use crate::{CliError, ExitStatus};

mod args;
mod batch;
mod failed;
mod follow;
mod print;

pub use args::{LogsArgs, Polling, FAILED_TAIL};
pub use print::parse_since;

use batch::batch;
use failed::failed;
use follow::{follow, wait_for_first_attempt};
use print::{
    find_node, label, marker, numbers, read_error, select, streams, Chosen, Ctx, Filter, Printer,
};

/// `herd logs`.
pub fn run(args: LogsArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = crate::site::exp_root(args.exp_root.as_deref())?;
    let args = LogsArgs {
        exp_root: Some(root.clone()),
        ..args
    };
    // While following: the scheduler's word on whether the job left the queue, one
    // `squeue` call for the experiment's current job, the pause between two doubling from
    // 3 s to a minute (the agents' `finished` in the timeline usually ends a follow first).
    let exp = crate::site::open_experiment(&root, &args.name).ok();
    let mut pause = Duration::from_secs(3);
    let mut next = Instant::now();
    let mut done = || {
        if Instant::now() < next {
            return None;
        }
        pause = (pause * 2).min(Duration::from_secs(60));
        next = Instant::now() + pause;
        scheduler_says_over(exp.as_ref()?)
    };
    run_with(&args, out, &mut done, Polling::default())
}

/// `Some(ok)` once the experiment's current job has ended (or left the queue, when the
/// folder then tells how it ended: `ok` is whether it did so well); `None` while it is
/// queued or running, or when the scheduler does not answer.
fn scheduler_says_over(exp: &herd_exp::Experiment) -> Option<bool> {
    use herd_slurm::scheduler::queue::{self, Scope};
    let progress = herd_exp::progress::Progress::read(exp).ok()?;
    let id = progress.job_id.clone()?;
    let rows = queue::query(
        Scope::Jobs(std::slice::from_ref(&id)),
        crate::site::DEFAULT_TIMEOUT,
    )
    .ok()?;
    let job = crate::status::SchedJob::group(rows)
        .into_iter()
        .find(|j| j.id == id);
    match job {
        Some(job) if job.state().is_final() => Some(job.exit_code() == Some(0)),
        Some(_) => None,
        // Gone from the queue: the folder says how it ended, else it did not end well.
        None => Some(
            crate::status::view(Some(exp), Some(&progress), None, true, None).exit_code == Some(0),
        ),
    }
}

/// `herd logs` with `done`, polled every few seconds while following: `Some(ok)` when the
/// scheduler says the job left the queue (ok: it completed), `None` while it is there or
/// not known.
pub fn run_with(
    args: &LogsArgs,
    out: &mut dyn Write,
    done: &mut dyn FnMut() -> Option<bool>,
    polling: Polling,
) -> Result<ExitStatus, CliError> {
    let root = args
        .exp_root
        .clone()
        .unwrap_or_else(|| herd_plan::DEFAULT_EXP_ROOT.into());
    let exp = open_experiment(&root, &args.name)?;
    let filter = Filter::new(args)?;
    let logs_dir = exp.paths().logs();
    let mut attempts = logs_dir.attempts().map_err(read_error(logs_dir.path()))?;
    // The attempt to start from: the one asked for, else the latest.
    let mut from = args.attempt;
    if args.follow && !args.batch && attempts.is_empty() && is_agent_mode(&exp) {
        // Queued, or its agents not started yet: the attempt folders come with them, and
        // the follow starts from the first (a quick job may be at its second by then).
        attempts = wait_for_first_attempt(args, &logs_dir, done, &polling)?;
        from = attempts.first().copied();
    }
    exp_logs::raise_open_file_limit();
    let ctx = Ctx {
        args,
        exp_dir: exp.dir().to_owned(),
        logs_dir,
        streams: streams(args),
    };
    if args.batch || attempts.is_empty() {
        if !args.batch {
            eprintln!(
                "herd: note: {} has no attempt folders (srun or torchrun mode, or not started): showing SLURM's batch output (--batch)",
                ctx.logs_dir.path().display()
            );
        }
        return batch(&ctx, &exp, &filter, out, done, polling);
    }
    let history = History::read(&ctx.exp_dir).map_err(read_error(&ctx.exp_dir))?;
    let latest = attempts[attempts.len() - 1];
    if let Some(k) = args.attempt {
        if !attempts.contains(&k) {
            return Err(CliError::Usage(format!(
                "--attempt {k}: {} has no attempt {k} (its attempts: {})",
                args.name,
                numbers(&attempts)
            )));
        }
    }
    if args.failed {
        return failed(&ctx, &history, args.attempt.unwrap_or(latest), out);
    }
    let chosen: Vec<u32> = if args.all_attempts {
        attempts.clone()
    } else {
        vec![from.unwrap_or(latest)]
    };
    let chosen = chosen
        .iter()
        .map(|&k| Chosen::read(&ctx, &history, k))
        .collect::<Result<Vec<_>, _>>()?;
    check_selection(args, &chosen)?;
    let mut printer = Printer::new(out, label(args), filter);
    let last = chosen.last().map(|c| c.info.number);
    for c in &chosen {
        let k = c.info.number;
        let ranks = select(args, c, !args.follow).unwrap_or_default();
        if args.all_attempts {
            printer.marker(marker(&c.info))?;
        }
        let mut merge = Merge::new(ctx.sources(k, &ranks), !args.follow)
            .map_err(read_error(ctx.logs_dir.path()))?;
        printer.drain(&mut merge)?;
        // A follow goes on from the last attempt printed to every newer one.
        if args.follow && Some(k) == last {
            printer.flush_tail()?;
            return follow(&ctx, printer, merge, (k, ranks), done, polling);
        }
    }
    printer.flush_tail()?;
    Ok(ExitStatus::Success)
}

/// Whether the experiment's plan starts agents (which write `attempt-K` folders).
fn is_agent_mode(exp: &herd_exp::Experiment) -> bool {
    exp.manifest()
        .is_ok_and(|m| m.plan.get("mode").and_then(|v| v.as_str()) == Some("agent"))
}

/// The experiment `name` under `root`, or an error naming the folder looked in and the
/// experiments there.
pub(crate) fn open_experiment(root: &Path, name: &str) -> Result<herd_exp::Experiment, CliError> {
    if crate::site::sweep_run(root, name).is_some() {
        return Ok(crate::site::open_experiment(root, name)?);
    }
    let dir = herd_exp::experiment_dir(root, name).map_err(herd_exp::Error::from)?;
    if herd_exp::ExperimentDir::new(&dir).manifest().is_file() {
        return Ok(herd_exp::Experiment::open(root, name)?);
    }
    let shown = std::path::absolute(root).unwrap_or_else(|_| root.to_owned());
    let listed = root
        .is_dir()
        .then(|| herd_exp::progress::list(root).ok())
        .flatten();
    let there = match listed {
        None => "that folder does not exist or cannot be read".to_owned(),
        Some(exps) => {
            let names: Vec<&str> = exps.iter().map(herd_exp::Experiment::name).collect();
            match names.len() {
                0 => "there are no experiments there".to_owned(),
                n if n > 50 => format!(
                    "experiments there: {} … and {} more",
                    names[..50].join(", "),
                    n - 50
                ),
                _ => format!("experiments there: {}", names.join(", ")),
            }
        }
    };
    Err(CliError::Input(format!(
        "no experiment named {name:?} in {} ({there}; --exp-root DIR looks elsewhere)",
        shown.display()
    )))
}

/// A --node or --rank that is in none of the chosen attempts is a usage error naming what
/// is there.
fn check_selection(args: &LogsArgs, chosen: &[Chosen]) -> Result<(), CliError> {
    let attempts = || {
        chosen
            .iter()
            .map(|c| format!("attempt {}", c.info.number))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !args.nodes.is_empty() {
        let known: Vec<&[exp_logs::NodeRanks]> = chosen
            .iter()
            .filter_map(|c| c.info.nodes.as_deref())
            .collect();
        if known.is_empty() {
            return Err(CliError::Usage(format!(
                "--node: the timeline of {} does not say which node ran which rank in {} (no rendezvous event with a node list: the job ran under an older herd, or did not get that far); use --rank",
                args.name,
                attempts()
            )));
        }
        for spec in &args.nodes {
            if !known.iter().any(|nodes| find_node(nodes, spec).is_some()) {
                let listed: Vec<String> = known[known.len() - 1]
                    .iter()
                    .map(|n| format!("{} ({})", n.node, n.host))
                    .collect();
                return Err(CliError::Usage(format!(
                    "--node {spec}: no such node in {} of {} (nodes: {})",
                    attempts(),
                    args.name,
                    listed.join(", ")
                )));
            }
        }
    }
    if args.follow {
        // A rank's files may appear later: a follow waits for them.
        return Ok(());
    }
    for r in &args.ranks {
        if !chosen.iter().any(|c| c.present.contains(r)) {
            let there: Vec<String> = chosen
                .iter()
                .map(|c| format!("attempt {}: {}", c.info.number, numbers(&c.present)))
                .collect();
            return Err(CliError::Usage(format!(
                "--rank {r}: no rank {r} in {} of {} (ranks in {})",
                attempts(),
                args.name,
                there.join("; ")
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
