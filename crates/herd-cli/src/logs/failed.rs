//! `--failed`: the attempt's failure report and the failing rank's last lines.

use super::*;

/// `--failed`: the attempt's failure report for people, then the failing rank's last lines.
pub(super) fn failed(
    ctx: &Ctx<'_>,
    history: &History,
    attempt: u32,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    let dir = exp_logs::attempt_dir(&ctx.logs_dir, attempt);
    let path = dir.join("failure.json");
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let latest = read_report(&ctx.logs_dir.join("failure.json"));
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
        Err(e) => return Err(read_error(&path)(e)),
    };
    let report: herd_agent::FailureReport =
        serde_json::from_slice(&text).map_err(|e| CliError::System {
            action: format!("cannot read the failure report {}", path.display()),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })?;
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
    let mut merge = Merge::new(sources, true).map_err(read_error(&dir))?;
    let mut filter = Filter::new(ctx.args)?;
    let mut tail: VecDeque<Line> = VecDeque::with_capacity(n.min(1 << 16));
    while let Some(line) = merge.next_line().map_err(read_error(&dir))? {
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
            exp_logs::attempt_dir(Path::new("logs"), attempt).display()
        )?;
        for line in tail {
            out.write_all(b"  | ")?;
            out.write_all(&line.bytes)?;
            out.write_all(b"\n")?;
        }
    }
    Ok(ExitStatus::Success)
}

fn read_report(path: &Path) -> Option<herd_agent::FailureReport> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}
