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
    use herd_slurm::queue::{self, Scope};
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

/// Waits until the first attempt folder appears; when the job ends first (`done`), the
/// batch output is what there is (no attempt folders are returned).
fn wait_for_first_attempt(
    args: &LogsArgs,
    logs_dir: &Path,
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
        let attempts = exp_logs::attempts(logs_dir).map_err(read_error(logs_dir))?;
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
fn open_experiment(root: &Path, name: &str) -> Result<herd_exp::Experiment, CliError> {
    let dir = herd_exp::experiment_dir(root, name).map_err(herd_exp::Error::from)?;
    if dir.join(herd_exp::MANIFEST_FILE).is_file() {
        return Ok(herd_exp::Experiment::open(root, name)?);
    }
    let shown = std::path::absolute(root).unwrap_or_else(|_| root.to_owned());
    let there = match std::fs::read_dir(root) {
        Err(_) => "that folder does not exist or cannot be read".to_owned(),
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join(herd_exp::MANIFEST_FILE).is_file())
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect();
            names.sort();
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

/// `-f`: keep printing the attempt's new lines, move on to each new attempt, end when the
/// timeline says the job is over (or `done` says it left the queue).
fn follow(
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
        merge.again().map_err(read_error(&ctx.logs_dir))?;
        printer.drain(&mut merge)?;
        printer.out.flush()?;
        if let Some(ok) = over {
            // One more round after the end was seen, with partial last lines as they are.
            merge.set_last(true);
            merge.again().map_err(read_error(&ctx.logs_dir))?;
            printer.drain(&mut merge)?;
            printer.out.flush()?;
            return Ok(if ok {
                ExitStatus::Success
            } else {
                ExitStatus::Failure
            });
        }
        std::thread::sleep(polling.files);
        let newer = exp_logs::attempts(&ctx.logs_dir)
            .map_err(read_error(&ctx.logs_dir))?
            .into_iter()
            .find(|&k| k > attempt);
        let timeline_due = last_timeline.is_none_or(|t| t.elapsed() >= polling.timeline);
        if newer.is_some() || timeline_due {
            last_timeline = Some(Instant::now());
            let history = History::read(&ctx.exp_dir).map_err(read_error(&ctx.exp_dir))?;
            if let Some(k) = newer {
                // The old attempt's writers are done: its partial last lines are whole.
                merge.set_last(true);
                merge.again().map_err(read_error(&ctx.logs_dir))?;
                printer.drain(&mut merge)?;
                attempt = k;
                let info = history.attempt(k);
                printer.marker(marker(&info))?;
                ranks = follow_ranks(ctx, &history, k)?;
                merge =
                    Merge::new(ctx.sources(k, &ranks), false).map_err(read_error(&ctx.logs_dir))?;
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
    let dir = exp_logs::attempt_dir(&ctx.logs_dir, attempt);
    for r in now {
        if !ranks.contains(&r) {
            ranks.push(r);
            for &s in &ctx.streams {
                merge
                    .add(Source::new(&dir, r, s))
                    .map_err(read_error(&ctx.logs_dir))?;
            }
        }
    }
    Ok(())
}

/// `--failed`: the attempt's failure report for people, then the failing rank's last lines.
fn failed(
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

/// `--batch`: SLURM's `logs/JOBID.out` and `.err` of the latest submission, or of every one.
fn batch(
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
                Merge::new(sources, !ctx.args.follow).map_err(read_error(&ctx.logs_dir))?;
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
    ctx.logs_dir.join(format!("{job}.{}", stream.ext()))
}

/// (submission, job id) of every submission with one, in order.
fn job_ids(exp: &herd_exp::Experiment) -> Result<Vec<(u32, String)>, CliError> {
    Ok(exp
        .manifest()?
        .attempts
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
        merge.again().map_err(read_error(&ctx.logs_dir))?;
        printer.drain(&mut merge)?;
        printer.out.flush()?;
        if let Some(ok) = over {
            merge.set_last(true);
            merge.again().map_err(read_error(&ctx.logs_dir))?;
            printer.drain(&mut merge)?;
            printer.out.flush()?;
            return Ok(if ok {
                ExitStatus::Success
            } else {
                ExitStatus::Failure
            });
        }
        std::thread::sleep(polling.files);
        if last_timeline.is_none_or(|t| t.elapsed() >= polling.timeline) {
            last_timeline = Some(Instant::now());
            if let Some((submission, newer)) = job_ids(exp)?.pop().filter(|(_, j)| *j != job) {
                merge.set_last(true);
                merge.again().map_err(read_error(&ctx.logs_dir))?;
                printer.drain(&mut merge)?;
                printer.marker(format!("── submission {submission} (job {newer}) ──"))?;
                job = newer;
                let sources = ctx
                    .streams
                    .iter()
                    .map(|&s| Source::plain(batch_path(ctx, &job, s), 0, s))
                    .collect();
                merge = Merge::new(sources, false).map_err(read_error(&ctx.logs_dir))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::json;
    use std::sync::{Arc, Mutex};

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        logs: LogsArgs,
    }

    /// An experiment `train` under a temporary root, submitted as job 4242.
    struct Exp {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        dir: PathBuf,
    }

    impl Exp {
        fn new() -> Exp {
            let tmp = tempfile::tempdir().expect("tempdir");
            let project = tmp.path().join("project");
            std::fs::create_dir_all(&project).expect("project");
            let root = tmp.path().join("exps");
            let created = herd_exp::NewExperiment::new(
                &root,
                "train",
                &project,
                json!({"nodes": 2}),
                herd_exp::Invocation::current("test"),
            )
            .create()
            .expect("experiment");
            created.experiment.record_job_id(1, "4242").expect("job id");
            let dir = created.experiment.dir().to_owned();
            Exp {
                _tmp: tmp,
                root,
                dir,
            }
        }

        fn event(&self, fields: serde_json::Value) {
            let mut fields = fields;
            let name = fields
                .as_object_mut()
                .and_then(|o| o.remove("event"))
                .and_then(|e| e.as_str().map(str::to_owned))
                .expect("event name");
            herd_exp::timeline::append(&self.dir, &name, fields).expect("event");
        }

        fn attempt_dir(&self, k: u32) -> PathBuf {
            let d = exp_logs::attempt_dir(&self.dir.join("logs"), k);
            std::fs::create_dir_all(&d).expect("attempt dir");
            d
        }

        /// Appends `lines` to rank `rank`'s `stream` of attempt `k`, each with a mark at its
        /// time (`None`: no mark).
        fn write(&self, k: u32, rank: u32, stream: Stream, lines: &[(&[u8], Option<u64>)]) {
            use std::io::Write as _;
            let d = self.attempt_dir(k);
            let open = |p: PathBuf| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .expect("open")
            };
            let mut log = open(exp_logs::rank_log(&d, rank, stream));
            let mut times = open(exp_logs::rank_times(&d, rank));
            let mut offset = log.metadata().expect("len").len();
            for (bytes, ms) in lines {
                if let Some(ms) = ms {
                    times
                        .write_all(exp_logs::format_mark(stream, offset, *ms).as_bytes())
                        .expect("mark");
                }
                log.write_all(bytes).expect("line");
                offset += bytes.len() as u64;
            }
        }

        fn args(&self, extra: &[&str]) -> LogsArgs {
            let root = self.root.to_str().expect("utf-8");
            let mut argv = vec!["logs", "train", "--exp-root", root];
            argv.extend(extra);
            Cmd::try_parse_from(argv).expect("parses").logs
        }

        fn logs(&self, extra: &[&str]) -> (Result<ExitStatus, CliError>, String) {
            let mut out = Vec::new();
            let mut done = || None;
            let r = run_with(&self.args(extra), &mut out, &mut done, quick());
            (r, String::from_utf8_lossy(&out).into_owned())
        }

        fn ok(&self, extra: &[&str]) -> String {
            let (r, out) = self.logs(extra);
            assert_eq!(r.expect("runs"), ExitStatus::Success, "{extra:?}: {out}");
            out
        }

        fn usage(&self, extra: &[&str]) -> String {
            let (r, out) = self.logs(extra);
            let e = r.expect_err("a usage error");
            assert_eq!(e.exit_status(), ExitStatus::Usage, "{e}");
            assert!(out.is_empty(), "{out}");
            e.to_string()
        }
    }

    fn quick() -> Polling {
        Polling {
            files: Duration::from_millis(10),
            timeline: Duration::from_millis(20),
            done: Duration::from_millis(50),
        }
    }

    /// Two nodes, one rank each; attempt 0 as in a real run.
    fn two_ranks() -> Exp {
        let e = Exp::new();
        e.event(json!({"event": "queued", "submission": 1, "job_id": "4242"}));
        e.event(json!({"event": "started", "job_id": 4242, "requeue": 0}));
        e.event(
            json!({"event": "rendezvous", "world_size": 2, "master_addr": "10.0.0.1",
            "nodes": [{"node": 0, "host": "gpu-a01", "ranks": [0]},
                      {"node": 1, "host": "gpu-a02", "ranks": [1]}]}),
        );
        e.event(json!({"event": "attempt_started", "attempt": 0, "restarts": 0}));
        e.write(
            0,
            0,
            Stream::Out,
            &[
                (b"a1\n", Some(1000)),
                (b"a2\n", Some(3000)),
                (b"a3\n", None),
            ],
        );
        e.write(0, 0, Stream::Err, &[(b"warn a\n", Some(2500))]);
        e.write(
            0,
            1,
            Stream::Out,
            &[(b"b1\n", Some(2000)), (b"b2\n", Some(4000))],
        );
        e.write(0, 1, Stream::Err, &[]);
        e
    }

    #[test]
    fn merges_ranks_and_streams_in_time_order_with_labels() {
        let e = two_ranks();
        assert_eq!(
            e.ok(&[]),
            "0: a1\n1: b1\n0: warn a\n0: a2\n0: a3\n1: b2\n",
            "b1 (t=2000) comes between a1 (1000) and a2 (3000)"
        );
        assert_eq!(e.ok(&["--rank", "1"]), "b1\nb2\n", "one rank: raw");
        assert_eq!(e.ok(&["--rank", "1,0", "--stderr"]), "0: warn a\n");
        assert_eq!(
            e.ok(&["--rank", "0", "--rank", "1", "--stdout"]),
            "0: a1\n1: b1\n0: a2\n0: a3\n1: b2\n"
        );
        assert_eq!(e.ok(&["--stdout", "--tail", "2"]), "0: a3\n1: b2\n");
        let err = e.usage(&["--rank", "7"]);
        assert!(
            err.contains("no rank 7 in attempt 0 of train (ranks in attempt 0: 0-1)"),
            "{err}"
        );
    }

    #[test]
    fn node_picks_the_ranks_of_the_rendezvous() {
        let e = two_ranks();
        assert_eq!(e.ok(&["--node", "1"]), "1: b1\n1: b2\n");
        assert_eq!(
            e.ok(&["--node", "gpu-a01", "--stdout"]),
            "0: a1\n0: a2\n0: a3\n"
        );
        assert_eq!(
            e.ok(&["--node", "gpu-a02", "--rank", "0", "--grep", "2$"]),
            "0: a2\n1: b2\n"
        );
        let err = e.usage(&["--node", "gpu-b07"]);
        assert!(err.contains("--node gpu-b07: no such node in attempt 0 of train (nodes: 0 (gpu-a01), 1 (gpu-a02))"), "{err}");

        // An older timeline: a rendezvous without nodes.
        let old = Exp::new();
        old.event(json!({"event": "rendezvous", "world_size": 1}));
        old.event(json!({"event": "attempt_started", "attempt": 0}));
        old.write(0, 0, Stream::Out, &[(b"x\n", None)]);
        let err = old.usage(&["--node", "0"]);
        assert!(
            err.contains("does not say which node ran which rank"),
            "{err}"
        );
    }

    #[test]
    fn attempts_one_or_all_with_markers() {
        let e = two_ranks();
        e.event(json!({"event": "restart", "attempt": 1}));
        e.event(json!({"event": "attempt_started", "attempt": 1, "restarts": 1}));
        e.write(1, 0, Stream::Out, &[(b"again a\n", Some(9000))]);
        e.write(1, 1, Stream::Out, &[(b"again b\n", Some(8000))]);
        e.event(json!({"event": "requeue", "attempt": 1, "cause": "time_limit"}));
        e.event(json!({"event": "started", "job_id": 4242, "requeue": 1}));
        e.event(json!({"event": "rendezvous", "world_size": 1,
            "nodes": [{"node": 0, "host": "gpu-a02", "ranks": [0]}]}));
        e.event(json!({"event": "attempt_started", "attempt": 2, "restarts": 0}));
        e.write(2, 0, Stream::Out, &[(b"third\n", Some(20000))]);
        assert_eq!(e.ok(&[]), "0: third\n", "the latest attempt");
        assert_eq!(e.ok(&["--attempt", "1"]), "1: again b\n0: again a\n");
        assert_eq!(
            e.ok(&["--all-attempts", "--stdout", "--grep", "a|third"]),
            "── attempt 0 (job 4242) ──\n0: a1\n0: a2\n0: a3\n\
             ── attempt 1 (restart 1, job 4242) ──\n1: again b\n0: again a\n\
             ── attempt 2 (requeued after time limit, job 4242) ──\n0: third\n"
        );
        // Node 1 of attempt 0 is gpu-a02, which is node 0 in attempt 2.
        assert_eq!(
            e.ok(&["--all-attempts", "--node", "gpu-a02"]),
            "── attempt 0 (job 4242) ──\n1: b1\n1: b2\n── attempt 1 (restart 1, job 4242) ──\n1: again b\n── attempt 2 (requeued after time limit, job 4242) ──\n0: third\n"
        );
        assert_eq!(
            e.ok(&["--all-attempts", "--tail", "2"]),
            "── attempt 1 (restart 1, job 4242) ──\n0: again a\n── attempt 2 (requeued after time limit, job 4242) ──\n0: third\n"
        );
        let err = e.usage(&["--attempt", "5"]);
        assert!(
            err.contains("train has no attempt 5 (its attempts: 0-2)"),
            "{err}"
        );
        let parse = Cmd::try_parse_from(["logs", "x", "--attempt", "1", "--all-attempts"]);
        assert!(parse.is_err(), "--attempt and --all-attempts conflict");
    }

    #[test]
    fn grep_since_and_bytes() {
        let e = two_ranks();
        assert_eq!(e.ok(&["--grep", "^[ab]2"]), "0: a2\n1: b2\n");
        let err = e.usage(&["--grep", "a("]);
        assert!(
            err.starts_with("--grep \"a(\": not a valid regular expression"),
            "{err}"
        );
        assert_eq!(
            e.ok(&["--since", "1970-01-01T00:00:02.500Z"]),
            "0: warn a\n0: a2\n0: a3\n1: b2\n"
        );
        let err = e.usage(&["--since", "yesterday"]);
        assert!(err.contains("--since \"yesterday\""), "{err}");
        assert_eq!(parse_since("30s", 100_000), Some(70_000));
        assert_eq!(parse_since("10m", 3_600_000), Some(3_000_000));
        assert_eq!(parse_since("2h", 86_400_000), Some(79_200_000));
        assert_eq!(parse_since("1d", 86_400_000), Some(0));
        assert_eq!(parse_since("5x", 1), None);
        assert_eq!(parse_since("m", 1), None);
        // Now-relative: marks of just now are kept, old ones not.
        let now = herd_exp::timeline::now().1;
        e.write(0, 1, Stream::Out, &[(b"\xfe\xffnew\n", Some(now))]);
        let mut out = Vec::new();
        let mut done = || None;
        run_with(&e.args(&["--since", "1h"]), &mut out, &mut done, quick()).expect("runs");
        assert_eq!(out, b"1: \xfe\xffnew\n", "bytes pass through");
    }

    fn report(e: &Exp, attempt: u32) -> herd_agent::FailureReport {
        let r = herd_agent::FailureReport::worker(
            attempt,
            (1, 0, 1),
            "gpu-a02",
            herd_agent::Exit::Signal("SIGSEGV".into()),
            None,
            vec!["Segmentation fault".into()],
        );
        let text = serde_json::to_string_pretty(&r).expect("json");
        std::fs::write(e.attempt_dir(attempt).join("failure.json"), &text).expect("write");
        std::fs::write(e.dir.join("logs/failure.json"), &text).expect("write");
        r
    }

    #[test]
    fn failed_prints_the_report_and_the_failing_ranks_tail() {
        let e = two_ranks();
        let (r, out) = e.logs(&["--failed"]);
        assert_eq!(r.expect("runs"), ExitStatus::Failure, "no report: {out}");
        assert!(out.is_empty());
        let r = report(&e, 0);
        let out = e.ok(&["--failed"]);
        assert_eq!(
            out,
            format!(
                "{}herd: last 2 lines of rank 1 (stdout and stderr, logs/attempt-0):\n  | b1\n  | b2\n",
                r.human()
            )
        );
        assert!(out.starts_with(
            "herd: job failed (attempt 0): rank 1 (local rank 0 on gpu-a02) killed by SIGSEGV"
        ));
        let out = e.ok(&["--failed", "--tail", "1"]);
        assert!(
            out.ends_with(
                "herd: last 1 lines of rank 1 (stdout and stderr, logs/attempt-0):\n  | b2\n"
            ),
            "{out}"
        );
        // A later attempt without a report.
        e.write(1, 0, Stream::Out, &[(b"ok\n", Some(1))]);
        let (r, out) = e.logs(&["--failed"]);
        assert_eq!(r.expect("runs"), ExitStatus::Failure);
        assert!(out.is_empty());
        assert!(e
            .ok(&["--failed", "--attempt", "0"])
            .contains("rank 1 (local rank 0 on gpu-a02)"));
    }

    #[test]
    fn batch_output_of_the_submission() {
        let e = two_ranks();
        std::fs::write(
            e.dir.join("logs/4242.out"),
            "herd: leader on gpu-a01\nstep 1\n",
        )
        .expect("out");
        std::fs::write(e.dir.join("logs/4242.err"), "srun: error: x").expect("err");
        assert_eq!(
            e.ok(&["--batch"]),
            "── 4242.out ──\nherd: leader on gpu-a01\nstep 1\n── 4242.err ──\nsrun: error: x\n"
        );
        assert_eq!(e.ok(&["--batch", "--stdout", "--grep", "step"]), "step 1\n");
        let parse = Cmd::try_parse_from(["logs", "x", "--batch", "--rank", "1"]);
        assert!(parse.is_err(), "--batch has no ranks");

        // srun mode: no attempt folders, so the batch output is shown.
        let srun = Exp::new();
        std::fs::write(srun.dir.join("logs/4242.out"), "0: hello\n1: hello\n").expect("out");
        assert_eq!(srun.ok(&["--stdout"]), "0: hello\n1: hello\n");
        // A resume's job: --all-attempts shows every submission.
        let exp = herd_exp::Experiment::open(&srun.root, "train").expect("opens");
        let n = exp
            .add_attempt(&herd_exp::Invocation::current("test"))
            .expect("resume");
        exp.record_job_id(n, "4250").expect("id");
        std::fs::write(srun.dir.join("logs/4250.out"), "again\n").expect("out");
        assert_eq!(srun.ok(&["--stdout"]), "again\n");
        assert_eq!(
            srun.ok(&["--stdout", "--all-attempts"]),
            "── submission 1 (job 4242) ──\n0: hello\n1: hello\n── submission 2 (job 4250) ──\nagain\n"
        );
    }

    #[test]
    fn a_name_that_is_no_experiment_lists_what_is_there() {
        let e = two_ranks();
        let err = e.usage_named("trian");
        let root = e.root.display().to_string();
        assert_eq!(
            err,
            format!("no experiment named \"trian\" in {root} (experiments there: train; --exp-root DIR looks elsewhere)")
        );
        let empty = tempfile::tempdir().expect("tempdir");
        let args = Cmd::try_parse_from([
            "logs",
            "x",
            "--exp-root",
            empty.path().to_str().expect("utf-8"),
        ])
        .expect("parses")
        .logs;
        let err = run(args, &mut Vec::new()).expect_err("none");
        assert_eq!(err.exit_status(), ExitStatus::Usage);
        assert!(
            err.to_string().contains("there are no experiments there"),
            "{err}"
        );
        let err = e.usage_named("../x");
        assert!(!err.is_empty());
    }

    impl Exp {
        fn usage_named(&self, name: &str) -> String {
            let root = self.root.to_str().expect("utf-8");
            let args = Cmd::try_parse_from(["logs", name, "--exp-root", root])
                .expect("parses")
                .logs;
            let e = run(args, &mut Vec::new()).expect_err("not an experiment");
            assert_eq!(e.exit_status(), ExitStatus::Usage, "{e}");
            e.to_string()
        }
    }

    /// A `Write` the test reads while the follow writes.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
        }

        /// Waits (at most 20 s) until the output is `want`.
        fn wait_for(&self, want: &str) {
            let deadline = Instant::now() + Duration::from_secs(20);
            while self.text() != want {
                assert!(
                    Instant::now() < deadline,
                    "waited for {want:?}, have {:?}",
                    self.text()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    #[test]
    fn follow_prints_new_lines_and_attempts_and_ends_at_finished() {
        let e = two_ranks();
        let args = e.args(&["-f", "--stdout"]);
        let out = Shared::default();
        let mut writer = out.clone();
        let follower = std::thread::spawn(move || {
            let mut done = || None;
            run_with(&args, &mut writer, &mut done, quick()).map_err(|e| e.to_string())
        });
        out.wait_for("0: a1\n1: b1\n0: a2\n0: a3\n1: b2\n");
        // A partial line is held until its newline comes.
        e.write(0, 1, Stream::Out, &[(b"b3 start", Some(5000))]);
        e.write(0, 0, Stream::Out, &[(b"a4\n", Some(5100))]);
        let before = "0: a1\n1: b1\n0: a2\n0: a3\n1: b2\n0: a4\n";
        out.wait_for(before);
        e.write(0, 1, Stream::Out, &[(b", end\n", None)]);
        let before = format!("{before}1: b3 start, end\n");
        out.wait_for(&before);
        // A restart: a new attempt folder, followed from its first line.
        e.event(json!({"event": "restart", "attempt": 1}));
        e.write(1, 1, Stream::Out, &[(b"fresh b\n", Some(9000))]);
        let before = format!("{before}── attempt 1 (restart 1, job 4242) ──\n1: fresh b\n");
        out.wait_for(&before);
        e.event(json!({"event": "attempt_started", "attempt": 1, "restarts": 1}));
        // A rank whose files appear later is picked up.
        e.write(1, 0, Stream::Out, &[(b"fresh a\n", Some(9100))]);
        let before = format!("{before}0: fresh a\n");
        out.wait_for(&before);
        assert!(!follower.is_finished(), "the job is not over");
        e.event(json!({"event": "finished", "attempt": 1, "ok": true}));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !follower.is_finished() {
            assert!(Instant::now() < deadline, "follow did not end at finished");
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = follower.join().expect("thread").expect("follow");
        assert_eq!(status, ExitStatus::Success);
        assert_eq!(out.text(), before);
    }

    #[test]
    fn follow_ends_failed_at_a_failed_finish_or_when_the_job_left_the_queue() {
        let e = two_ranks();
        e.event(json!({"event": "finished", "attempt": 0, "ok": false}));
        let mut out = Vec::new();
        let mut done = || None;
        let status = run_with(
            &e.args(&["-f", "--rank", "1"]),
            &mut out,
            &mut done,
            quick(),
        )
        .expect("follows");
        assert_eq!(status, ExitStatus::Failure);
        assert_eq!(String::from_utf8_lossy(&out), "b1\nb2\n");

        let e = two_ranks();
        let mut asked = 0;
        let mut done = || {
            asked += 1;
            (asked == 3).then_some(true)
        };
        let mut out = Vec::new();
        let status = run_with(
            &e.args(&["--follow", "--rank", "0", "--stderr"]),
            &mut out,
            &mut done,
            quick(),
        )
        .expect("follows");
        assert_eq!(
            status,
            ExitStatus::Success,
            "the scheduler says it completed"
        );
        assert_eq!(asked, 3);
        assert_eq!(String::from_utf8_lossy(&out), "warn a\n");
    }

    #[test]
    fn follow_from_an_older_attempt_goes_on_to_the_newer_ones() {
        let e = two_ranks();
        e.event(json!({"event": "requeue", "attempt": 0, "cause": "preemption"}));
        e.event(json!({"event": "started", "job_id": 4242, "requeue": 1}));
        e.event(json!({"event": "attempt_started", "attempt": 1, "restarts": 0}));
        e.write(1, 0, Stream::Out, &[(b"resumed\n", Some(50_000))]);
        e.event(json!({"event": "finished", "attempt": 1, "ok": true}));
        let mut out = Vec::new();
        let mut done = || None;
        let status = run_with(
            &e.args(&["-f", "--attempt", "0", "--stdout", "--rank", "0"]),
            &mut out,
            &mut done,
            quick(),
        )
        .expect("follows");
        assert_eq!(status, ExitStatus::Success);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "a1\na2\na3\n── attempt 1 (requeued after preemption, job 4242) ──\nresumed\n"
        );
    }

    #[test]
    fn output_errors_are_output_errors() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let e = two_ranks();
        let mut done = || None;
        let err = run_with(&e.args(&[]), &mut Closed, &mut done, quick()).expect_err("closed");
        assert!(
            matches!(err, CliError::Output(ref io) if io.kind() == std::io::ErrorKind::BrokenPipe),
            "{err:?}"
        );
    }
}
