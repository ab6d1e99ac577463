//! `--batch`: SLURM's batch-step output of the experiment's submissions, also followed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use herd_exp::logs::{History, Merge, Source, Stream};

use super::args::Polling;
use super::print::*;
use crate::{CliError, ExitStatus};

/// `--batch`: SLURM's `logs/JOBID.out` and `.err` of the latest submission, or of every one.
pub(super) fn batch(
    ctx: &Ctx<'_>,
    exp: &herd_exp::Experiment,
    filter: &Filter,
    out: &mut dyn Write,
    done: &mut dyn FnMut() -> Option<bool>,
    polling: Polling,
) -> Result<ExitStatus, CliError> {
    let jobs = job_ids(exp)?;
    if jobs.is_empty() {
        eprintln!(
            "herd: {} has no job id in its manifest yet (not submitted): no batch output",
            ctx.args.name
        );
        return Ok(ExitStatus::Failure);
    }
    let chosen: Vec<&(u32, String)> = if ctx.args.all_attempts {
        jobs.iter().collect()
    } else {
        jobs.last().into_iter().collect()
    };
    let filter = Filter {
        grep: filter.grep.clone(),
        since: None,
        tail: filter.tail,
        untimed: false,
    };
    if ctx.args.since.is_some() {
        eprintln!("herd: note: SLURM's batch output has no time marks: --since is ignored");
    }
    let mut printer = Printer::new(out, false, filter);
    let both = ctx.streams.len() == 2 && !ctx.args.follow;
    for (i, (submission, job)) in chosen.iter().enumerate() {
        if ctx.args.all_attempts {
            printer.marker(format!("── submission {submission} (job {job}) ──"))?;
        }
        if both {
            for &s in &ctx.streams {
                let path = batch_path(ctx, job, s);
                if !path.exists() {
                    continue;
                }
                printer.marker(format!("── {} ──", file_name(&path)))?;
                let mut merge = Merge::new(vec![Source::plain(path.clone(), 0, s)], true)
                    .map_err(read_error(&path))?;
                printer.drain(&mut merge)?;
            }
        } else {
            let sources = ctx
                .streams
                .iter()
                .map(|&s| Source::plain(batch_path(ctx, job, s), 0, s))
                .collect();
            let mut merge =
                Merge::new(sources, !ctx.args.follow).map_err(read_error(ctx.logs_dir.path()))?;
            printer.drain(&mut merge)?;
            if ctx.args.follow && i + 1 == chosen.len() {
                printer.flush_tail()?;
                return follow_batch(
                    ctx,
                    exp,
                    printer,
                    merge,
                    (*submission, job.clone()),
                    done,
                    polling,
                );
            }
        }
    }
    printer.flush_tail()?;
    Ok(ExitStatus::Success)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn batch_path(ctx: &Ctx<'_>, job: &str, stream: Stream) -> PathBuf {
    ctx.logs_dir.batch_log(job, stream)
}

/// (submission, job id) of every submission with one, in order.
fn job_ids(exp: &herd_exp::Experiment) -> Result<Vec<(u32, String)>, CliError> {
    Ok(exp
        .manifest()?
        .submissions
        .iter()
        .filter_map(|a| a.job_id.clone().map(|j| (a.number, j)))
        .collect())
}

/// `-f --batch`: the latest submission's batch output as it grows; a newer submission
/// (`herd submit --resume`) is followed in turn.
fn follow_batch(
    ctx: &Ctx<'_>,
    exp: &herd_exp::Experiment,
    mut printer: Printer<'_>,
    mut merge: Merge,
    (_, mut job): (u32, String),
    done: &mut dyn FnMut() -> Option<bool>,
    polling: Polling,
) -> Result<ExitStatus, CliError> {
    let mut last_timeline: Option<Instant> = None;
    let mut last_done = Instant::now();
    let mut over: Option<bool> = None;
    loop {
        printer.round(&mut merge, &ctx.logs_dir, false)?;
        printer.out.flush()?;
        if let Some(ok) = over {
            printer.round(&mut merge, &ctx.logs_dir, true)?;
            printer.out.flush()?;
            return Ok(ended(ok));
        }
        std::thread::sleep(polling.files);
        if last_timeline.is_none_or(|t| t.elapsed() >= polling.timeline) {
            last_timeline = Some(Instant::now());
            if let Some((submission, newer)) = job_ids(exp)?.pop().filter(|(_, j)| *j != job) {
                printer.round(&mut merge, &ctx.logs_dir, true)?;
                printer.marker(format!("── submission {submission} (job {newer}) ──"))?;
                job = newer;
                let sources = ctx
                    .streams
                    .iter()
                    .map(|&s| Source::plain(batch_path(ctx, &job, s), 0, s))
                    .collect();
                merge = Merge::new(sources, false).map_err(read_error(ctx.logs_dir.path()))?;
            }
            let history = History::read(&ctx.exp_dir).map_err(read_error(&ctx.exp_dir))?;
            if let Some((_, ok)) = history.finished {
                over = Some(ok);
            }
        }
        if over.is_none() && last_done.elapsed() >= polling.done {
            last_done = Instant::now();
            over = done();
        }
    }
}
