//! `herd logs NAME`: an experiment's per-rank logs by attempt, merged in time order by the
//! agents' time marks, filtered, followed as they grow; the failure report with the failing
//! rank's last lines; SLURM's batch-step output (docs/logs.md). Reading the folder is
//! [`herd_exp::logs`]'s; this module picks what to read and prints it.

use std::collections::{BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use herd_exp::logs::{self as exp_logs, AttemptInfo, History, Line, Merge, Source, Stream};

use crate::{CliError, ExitStatus};

mod batch;
mod failed;
mod follow;

use batch::batch;
use failed::failed;
use follow::{follow, wait_for_first_attempt};

/// Lines of the failing rank `--failed` prints unless `--tail` says otherwise.
pub const FAILED_TAIL: usize = 40;

/// `herd logs` arguments.
#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// The experiment: its folder's name under the experiment root.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The experiment root (default: herd-exp/ in this folder, as for `herd submit`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Only this rank (repeatable, or a list: `--rank 0,3`). With exactly one, its lines
    /// are printed raw, without the `R: ` label.
    #[arg(long = "rank", value_name = "R", value_delimiter = ',')]
    pub ranks: Vec<u32>,
    /// Only the ranks of this node: its node rank or host name (repeatable, or a list).
    #[arg(long = "node", value_name = "N|HOST", value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Attempt K (`logs/attempt-K`) instead of the latest.
    #[arg(long, value_name = "K", conflicts_with = "all_attempts")]
    pub attempt: Option<u32>,
    /// Every attempt, each after a marker line saying how it began.
    #[arg(long)]
    pub all_attempts: bool,
    /// Only stdout.
    #[arg(long, conflicts_with = "stderr")]
    pub stdout: bool,
    /// Only stderr.
    #[arg(long)]
    pub stderr: bool,
    /// Only lines matching this regular expression.
    #[arg(long, value_name = "RE")]
    pub grep: Option<String>,
    /// Only lines since WHEN: `30s`, `10m`, `2h`, `1d` ago, or an RFC 3339 time
    /// (`2026-12-01T14:00:00Z`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only the last N lines (after --grep and --since); with --failed, the failing rank's
    /// last N lines (default 40).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// The failure report of the attempt and the failing rank's last lines.
    #[arg(long, conflicts_with_all = ["follow", "batch", "all_attempts"])]
    pub failed: bool,
    /// SLURM's batch-step output (`logs/JOBID.out`, `.err`) of the latest submission (every
    /// one with --all-attempts).
    #[arg(long, conflicts_with_all = ["ranks", "nodes", "attempt"])]
    pub batch: bool,
    /// Print what is there, then new lines as they come, across new attempts, until the
    /// job is over (exit 0 if it finished ok, 1 otherwise).
    #[arg(short = 'f', long)]
    pub follow: bool,
}

/// How a follow polls; tests make it quicker.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// How often the files are read again.
    pub files: Duration,
    /// How often the timeline (and the attempt's rank files) are read again.
    pub timeline: Duration,
    /// How often the `done` hook is asked.
    pub done: Duration,
}

impl Default for Polling {
    fn default() -> Polling {
        Polling {
            files: Duration::from_millis(200),
            timeline: Duration::from_secs(1),
            done: Duration::from_secs(3),
        }
    }
}

/// `herd logs`.
pub fn run(args: LogsArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = crate::status::exp_root(args.exp_root.as_deref())?;
    let args = LogsArgs {
        exp_root: Some(root.clone()),
        ..args
    };
    // While following: the scheduler's word on whether the job left the queue, one
    // `squeue` call for the experiment's current job, the pause between two doubling from
    // 3 s to a minute (the agents' `finished` in the timeline usually ends a follow first).
    let exp = herd_exp::Experiment::open(&root, &args.name).ok();
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
        crate::status::DEFAULT_TIMEOUT,
    )
    .ok()?;
    let job = crate::status::SchedJob::group(rows)
        .into_iter()
        .find(|j| j.id == id);
    match job {
        Some(job) if job.state().is_final() => Some(job.exit_code() == Some(0)),
        Some(_) => None,
        // Gone from the queue: the folder says how it ended, else it did not end well.
        None => {
            Some(crate::status::view(Some(exp), Some(&progress), None, true).exit_code == Some(0))
        }
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
    let logs_dir = exp.logs_dir();
    let mut attempts = exp_logs::attempts(&logs_dir).map_err(read_error(&logs_dir))?;
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
                "herd: note: {} has no attempt-* folders (srun or torchrun mode, or not started): showing SLURM's batch output (--batch)",
                ctx.logs_dir.display()
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
        let mut merge =
            Merge::new(ctx.sources(k, &ranks), !args.follow).map_err(read_error(&ctx.logs_dir))?;
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

/// The exit status of a follow that saw the job end, well or not.
fn ended(ok: bool) -> ExitStatus {
    if ok {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    }
}

/// What every part of the command shares.
struct Ctx<'a> {
    args: &'a LogsArgs,
    exp_dir: PathBuf,
    logs_dir: PathBuf,
    streams: Vec<Stream>,
}

impl Ctx<'_> {
    fn sources(&self, attempt: u32, ranks: &[u32]) -> Vec<Source> {
        let dir = exp_logs::attempt_dir(&self.logs_dir, attempt);
        ranks
            .iter()
            .flat_map(|&r| self.streams.iter().map(move |&s| (r, s)))
            .map(|(r, s)| Source::new(&dir, r, s))
            .collect()
    }
}

fn streams(args: &LogsArgs) -> Vec<Stream> {
    match (args.stdout, args.stderr) {
        (true, false) => vec![Stream::Out],
        (false, true) => vec![Stream::Err],
        _ => Stream::BOTH.to_vec(),
    }
}

/// Lines are labelled `R: ` unless exactly one rank was asked for with --rank.
fn label(args: &LogsArgs) -> bool {
    !(args.ranks.len() == 1 && args.nodes.is_empty())
}

fn read_error(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |source| CliError::System {
        action: format!("cannot read {}", path.display()),
        source,
    }
}

/// `0-3, 7`: numbers, runs compressed.
fn numbers(list: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", list[i], list[j])
        } else {
            list[i].to_string()
        });
        i = j + 1;
    }
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// The experiment `name` under `root`, or an error naming the folder looked in and the
/// experiments there.
pub(crate) fn open_experiment(root: &Path, name: &str) -> Result<herd_exp::Experiment, CliError> {
    let dir = herd_exp::experiment_dir(root, name).map_err(herd_exp::Error::from)?;
    if dir.join(herd_exp::MANIFEST_FILE).is_file() {
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

/// One attempt to print: what the timeline says of it and the ranks with files there.
struct Chosen {
    info: AttemptInfo,
    present: Vec<u32>,
}

impl Chosen {
    fn read(ctx: &Ctx<'_>, history: &History, k: u32) -> Result<Chosen, CliError> {
        let present = exp_logs::ranks(&exp_logs::attempt_dir(&ctx.logs_dir, k))
            .map_err(read_error(&ctx.logs_dir))?;
        Ok(Chosen {
            info: history.attempt(k),
            present,
        })
    }
}

/// The ranks of one attempt that --rank and --node select (all when neither is given);
/// with `only_present`, only those with files there. `None` when --node is given and the
/// timeline does not say which ranks ran where.
fn select(args: &LogsArgs, c: &Chosen, only_present: bool) -> Option<Vec<u32>> {
    if args.ranks.is_empty() && args.nodes.is_empty() {
        return Some(c.present.clone());
    }
    let mut wanted: BTreeSet<u32> = args.ranks.iter().copied().collect();
    if !args.nodes.is_empty() {
        let nodes = c.info.nodes.as_ref()?;
        for spec in &args.nodes {
            if let Some(node) = find_node(nodes, spec) {
                wanted.extend(&node.ranks);
            }
        }
    }
    Some(
        wanted
            .into_iter()
            .filter(|r| !only_present || c.present.contains(r))
            .collect(),
    )
}

/// A node given by its node rank or host name.
fn find_node<'n>(nodes: &'n [exp_logs::NodeRanks], spec: &str) -> Option<&'n exp_logs::NodeRanks> {
    match spec.parse::<u32>() {
        Ok(n) => nodes.iter().find(|x| x.node == n),
        Err(_) => nodes.iter().find(|x| x.host == spec),
    }
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

/// The marker line before an attempt's lines: `── attempt 1 (restart 1, job 4242) ──`.
fn marker(info: &AttemptInfo) -> String {
    let words = info.describe();
    if words.is_empty() {
        format!("── attempt {} ──", info.number)
    } else {
        format!("── attempt {} ({words}) ──", info.number)
    }
}

/// --grep and --since.
struct Filter {
    grep: Option<regex::bytes::Regex>,
    since: Option<u64>,
    tail: Option<usize>,
    /// Lines without a time were kept despite --since.
    untimed: bool,
}

impl Filter {
    fn new(args: &LogsArgs) -> Result<Filter, CliError> {
        let grep = match &args.grep {
            Some(re) => Some(regex::bytes::Regex::new(re).map_err(|e| {
                CliError::Usage(format!(
                    "--grep {re:?}: not a valid regular expression: {e}"
                ))
            })?),
            None => None,
        };
        let since = match &args.since {
            Some(when) => Some(parse_since(when, herd_exp::timeline::now().1).ok_or_else(
                || {
                    CliError::Usage(format!(
                        "--since {when:?}: give a time ago (30s, 10m, 2h, 1d) or an RFC 3339 time (2026-12-01T14:00:00Z)"
                    ))
                },
            )?),
            None => None,
        };
        Ok(Filter {
            grep,
            since,
            tail: args.tail,
            untimed: false,
        })
    }

    fn keeps(&mut self, line: &Line) -> bool {
        if let Some(since) = self.since {
            match line.time {
                Some(t) if t < since => return false,
                None => self.untimed = true,
                _ => {}
            }
        }
        self.grep.as_ref().is_none_or(|re| re.is_match(&line.bytes))
    }
}

/// `30s`, `10m`, `2h`, `1d` before `now_ms`, or an RFC 3339 time, as milliseconds since the
/// epoch.
pub fn parse_since(when: &str, now_ms: u64) -> Option<u64> {
    if let Some(t) = herd_exp::timeline::parse_rfc3339(when) {
        return Some(t);
    }
    let split = when.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = when.split_at(split);
    let n: u64 = n.parse().ok()?;
    let unit_ms = match unit {
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(now_ms.saturating_sub(n.saturating_mul(unit_ms)))
}

/// Prints lines (labelled or raw) and markers; with --tail, holds the last N lines until
/// [`Printer::flush_tail`].
struct Printer<'o> {
    out: &'o mut dyn Write,
    label: bool,
    filter: Filter,
    /// With --tail: (the marker before it, the line).
    held: VecDeque<(Option<usize>, Line)>,
    markers: Vec<String>,
    /// Lines print as they come (a follow after its first tail).
    streaming: bool,
}

impl<'o> Printer<'o> {
    fn new(out: &'o mut dyn Write, label: bool, filter: Filter) -> Printer<'o> {
        let streaming = filter.tail.is_none();
        Printer {
            out,
            label,
            filter,
            held: VecDeque::new(),
            markers: Vec::new(),
            streaming,
        }
    }

    fn marker(&mut self, text: String) -> Result<(), CliError> {
        if self.streaming {
            writeln!(self.out, "{text}")?;
        } else {
            self.markers.push(text);
        }
        Ok(())
    }

    fn line(&mut self, line: Line) -> Result<(), CliError> {
        if !self.filter.keeps(&line) {
            return Ok(());
        }
        if self.streaming {
            return self.write_line(&line);
        }
        let n = self.filter.tail.unwrap_or(usize::MAX);
        if n == 0 {
            return Ok(());
        }
        if self.held.len() == n {
            self.held.pop_front();
        }
        let marker = self.markers.len().checked_sub(1);
        self.held.push_back((marker, line));
        Ok(())
    }

    fn write_line(&mut self, line: &Line) -> Result<(), CliError> {
        if self.label {
            write!(self.out, "{}: ", line.rank)?;
        }
        self.out.write_all(&line.bytes)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    /// Reads what the files have grown by and prints it; `whole`: their writers are done,
    /// so a partial last line is printed as it is.
    fn round(&mut self, merge: &mut Merge, logs_dir: &Path, whole: bool) -> Result<(), CliError> {
        if whole {
            merge.set_last(true);
        }
        merge.again().map_err(read_error(logs_dir))?;
        self.drain(merge)
    }

    /// Every line `merge` has now.
    fn drain(&mut self, merge: &mut Merge) -> Result<(), CliError> {
        while let Some(line) = merge
            .next_line()
            .map_err(CliError::system("cannot read the logs"))?
        {
            self.line(line)?;
        }
        Ok(())
    }

    /// Print what --tail held; from now on lines print as they come.
    fn flush_tail(&mut self) -> Result<(), CliError> {
        let mut last_marker = None;
        let held = std::mem::take(&mut self.held);
        for (marker, line) in held {
            if marker.is_some() && marker != last_marker {
                if let Some(text) = marker.and_then(|m| self.markers.get(m)) {
                    writeln!(self.out, "{text}")?;
                }
                last_marker = marker;
            }
            self.write_line(&line)?;
        }
        self.streaming = true;
        self.out.flush()?;
        if self.filter.untimed {
            self.filter.untimed = false;
            eprintln!(
                "herd: note: some lines have no time marks (logs of an older herd): --since kept them all"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
