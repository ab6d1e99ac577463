//! `--failed`: the attempt's failure report and the failing rank's last lines.

use std::collections::VecDeque;
use std::io::Write;

use herd_exp::logs::{History, Line, Merge, Source, Stream};

use super::args::FAILED_TAIL;
use super::print::*;
use crate::{CliError, ExitStatus};
use herd_exp::failure::FailureReport;

/// `--failed`: the attempt's failure report for people, then the failing rank's last lines.
pub(super) fn failed(
    ctx: &Ctx<'_>,
    history: &History,
    attempt: u32,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    let dir = ctx.logs_dir.attempt(attempt);
    let path = dir.failure_report();
    let report = match FailureReport::read(&path) {
        Ok(Some(r)) => r,
        Ok(None) => {
            let latest = FailureReport::read(&ctx.logs_dir.failure_report())
                .ok()
                .flatten();
            let hint = match latest {
                Some(r) if r.attempt != attempt => format!(
                    "; the latest failure report is attempt {}'s: herd logs {} --failed --attempt {}",
                    r.attempt, ctx.args.name, r.attempt
                ),
                _ => String::new(),
            };
            let how = match history.finished {
                Some((a, true)) if a == attempt => " (it finished ok)",
                _ => "",
            };
            eprintln!(
                "herd: attempt {attempt} of {} has no failure report{how}: no {}{hint}",
                ctx.args.name,
                path.display()
            );
            return Ok(ExitStatus::Failure);
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(CliError::System {
                action: format!("cannot read the failure report {}", path.display()),
                source: e,
            })
        }
        Err(e) => return Err(read_error(&path)(e)),
    };
    out.write_all(report.human().as_bytes())?;
    let Some(rank) = report.rank else {
        return Ok(ExitStatus::Success);
    };
    let n = ctx.args.tail.unwrap_or(FAILED_TAIL);
    let sources = ctx
        .streams
        .iter()
        .map(|&s| Source::new(&dir, rank, s))
        .collect();
    let mut merge = Merge::new(sources, true).map_err(read_error(dir.path()))?;
    let mut filter = Filter::new(ctx.args)?;
    let mut tail: VecDeque<Line> = VecDeque::with_capacity(n.min(1 << 16));
    while let Some(line) = merge.next_line().map_err(read_error(dir.path()))? {
        if n == 0 || !filter.keeps(&line) {
            continue;
        }
        if tail.len() == n {
            tail.pop_front();
        }
        tail.push_back(line);
    }
    let what = match ctx.streams.as_slice() {
        [Stream::Out] => "stdout",
        [Stream::Err] => "stderr",
        _ => "stdout and stderr",
    };
    if tail.is_empty() {
        writeln!(out, "herd: rank {rank} wrote nothing to {what}")?;
    } else {
        writeln!(
            out,
            "herd: last {} lines of rank {rank} ({what}, {}):",
            tail.len(),
            relative_attempt_dir(attempt).display()
        )?;
        for line in tail {
            out.write_all(b"  | ")?;
            out.write_all(&line.bytes)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(ExitStatus::Success)
}

/// Attempt `attempt`'s folder as the experiment folder names it (`logs/attempt-K`).
fn relative_attempt_dir(attempt: u32) -> std::path::PathBuf {
    let dir = herd_exp::ExperimentDir::new("").logs().attempt(attempt);
    dir.path().to_owned()
}
