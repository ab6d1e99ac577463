//! `-f`: following an attempt's rank files as they grow, on to each newer attempt, and
//! waiting for a job's first attempt.

use std::time::Instant;

use herd_exp::layout::LogsDir;
use herd_exp::logs::{History, Merge, Source};

use super::args::{LogsArgs, Polling};
use super::print::*;
use crate::{CliError, ExitStatus};

/// Waits until the first attempt folder appears; when the job ends first (`done`), the
/// batch output is what there is (no attempt folders are returned).
pub(super) fn wait_for_first_attempt(
    args: &LogsArgs,
    logs_dir: &LogsDir,
    done: &mut dyn FnMut() -> Option<bool>,
    polling: &Polling,
) -> Result<Vec<u32>, CliError> {
    eprintln!(
        "herd: {} has not started yet; waiting for it (`herd status {}` says why it waits)",
        args.name, args.name
    );
    let mut last_done = Instant::now();
    loop {
        std::thread::sleep(polling.timeline);
        let attempts = logs_dir.attempts().map_err(read_error(logs_dir.path()))?;
        if !attempts.is_empty() {
            return Ok(attempts);
        }
        if last_done.elapsed() >= polling.done {
            last_done = Instant::now();
            if done().is_some() {
                eprintln!(
                    "herd: the job ended before any worker started: its batch output follows"
                );
                return Ok(attempts);
            }
        }
    }
}

/// `-f`: keep printing the attempt's new lines, move on to each new attempt, end when the
/// timeline says the job is over (or `done` says it left the queue).
pub(super) fn follow(
    ctx: &Ctx<'_>,
    mut printer: Printer<'_>,
    mut merge: Merge,
    (mut attempt, mut ranks): (u32, Vec<u32>),
    done: &mut dyn FnMut() -> Option<bool>,
    polling: Polling,
) -> Result<ExitStatus, CliError> {
    let all_ranks = ctx.args.ranks.is_empty() && ctx.args.nodes.is_empty();
    // The timeline is read at once: the job may be over already.
    let mut last_timeline: Option<Instant> = None;
    let mut last_done = Instant::now();
    let mut over: Option<bool> = None;
    loop {
        printer.round(&mut merge, &ctx.logs_dir, false)?;
        printer.out.flush()?;
        if let Some(ok) = over {
            // One more round after the end was seen, with partial last lines as they are,
            // and any rank whose files appeared since the last look.
            let history = History::read(&ctx.exp_dir).map_err(read_error(&ctx.exp_dir))?;
            add_new_ranks(ctx, &history, attempt, all_ranks, &mut ranks, &mut merge)?;
            printer.round(&mut merge, &ctx.logs_dir, true)?;
            printer.out.flush()?;
            return Ok(ended(ok));
        }
        std::thread::sleep(polling.files);
        let newer = ctx
            .logs_dir
            .attempts()
            .map_err(read_error(ctx.logs_dir.path()))?
            .into_iter()
            .find(|&k| k > attempt);
        let timeline_due = last_timeline.is_none_or(|t| t.elapsed() >= polling.timeline);
        if newer.is_some() || timeline_due {
            last_timeline = Some(Instant::now());
            let history = History::read(&ctx.exp_dir).map_err(read_error(&ctx.exp_dir))?;
            if let Some(k) = newer {
                // The old attempt's writers are done: its partial last lines are whole, and
                // ranks whose files appeared since the last look are printed too (a short
                // attempt can end before that look comes round).
                add_new_ranks(ctx, &history, attempt, all_ranks, &mut ranks, &mut merge)?;
                printer.round(&mut merge, &ctx.logs_dir, true)?;
                attempt = k;
                let info = history.attempt(k);
                printer.marker(marker(&info))?;
                ranks = follow_ranks(ctx, &history, k)?;
                merge = Merge::new(ctx.sources(k, &ranks), false)
                    .map_err(read_error(ctx.logs_dir.path()))?;
            } else {
                // Ranks whose files appeared since (nodes start at their own pace).
                add_new_ranks(ctx, &history, attempt, all_ranks, &mut ranks, &mut merge)?;
            }
            if let Some((a, ok)) = history.finished {
                if a >= attempt {
                    over = Some(ok);
                }
            }
        }
        if over.is_none() && last_done.elapsed() >= polling.done {
            last_done = Instant::now();
            over = done();
        }
    }
}

fn follow_ranks(ctx: &Ctx<'_>, history: &History, k: u32) -> Result<Vec<u32>, CliError> {
    let c = Chosen::read(ctx, history, k)?;
    // A node list not known yet: the node's ranks come once it is.
    Ok(select(ctx.args, &c, false).unwrap_or_default())
}

fn add_new_ranks(
    ctx: &Ctx<'_>,
    history: &History,
    attempt: u32,
    all_ranks: bool,
    ranks: &mut Vec<u32>,
    merge: &mut Merge,
) -> Result<(), CliError> {
    let now = if all_ranks || !ctx.args.nodes.is_empty() {
        follow_ranks(ctx, history, attempt)?
    } else {
        return Ok(());
    };
    let dir = ctx.logs_dir.attempt(attempt);
    for r in now {
        if !ranks.contains(&r) {
            ranks.push(r);
            for &s in &ctx.streams {
                merge
                    .add(Source::new(&dir, r, s))
                    .map_err(read_error(ctx.logs_dir.path()))?;
            }
        }
    }
    Ok(())
}
