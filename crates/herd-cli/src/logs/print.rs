//! What every part of `herd logs` shares: the context (arguments, folders, streams), the
//! attempts and ranks chosen, the filter (`--grep`, `--since`) and the printer (labels,
//! markers, `--tail`).

use std::collections::{BTreeSet, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use herd_exp::layout::LogsDir;
use herd_exp::logs::{AttemptInfo, History, Line, Merge, NodeRanks, Source, Stream};

use super::args::LogsArgs;
use crate::{CliError, ExitStatus};

/// The exit status of a follow that saw the job end, well or not.
pub(super) fn ended(ok: bool) -> ExitStatus {
    if ok {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    }
}

/// What every part of the command shares.
pub(super) struct Ctx<'a> {
    pub(super) args: &'a LogsArgs,
    pub(super) exp_dir: PathBuf,
    pub(super) logs_dir: LogsDir,
    pub(super) streams: Vec<Stream>,
}

impl Ctx<'_> {
    pub(super) fn sources(&self, attempt: u32, ranks: &[u32]) -> Vec<Source> {
        let dir = self.logs_dir.attempt(attempt);
        ranks
            .iter()
            .flat_map(|&r| self.streams.iter().map(move |&s| (r, s)))
            .map(|(r, s)| Source::new(&dir, r, s))
            .collect()
    }
}

pub(super) fn streams(args: &LogsArgs) -> Vec<Stream> {
    match (args.stdout, args.stderr) {
        (true, false) => vec![Stream::Out],
        (false, true) => vec![Stream::Err],
        _ => Stream::BOTH.to_vec(),
    }
}

/// Lines are labelled `R: ` unless exactly one rank was asked for with --rank.
pub(super) fn label(args: &LogsArgs) -> bool {
    !(args.ranks.len() == 1 && args.nodes.is_empty())
}

pub(super) fn read_error(path: &Path) -> impl Fn(std::io::Error) -> CliError + '_ {
    move |source| CliError::System {
        action: format!("cannot read {}", path.display()),
        source,
    }
}

/// `0-3, 7`: numbers, runs compressed.
pub(super) fn numbers(list: &[u32]) -> String {
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

/// One attempt to print: what the timeline says of it and the ranks with files there.
pub(super) struct Chosen {
    pub(super) info: AttemptInfo,
    pub(super) present: Vec<u32>,
}

impl Chosen {
    pub(super) fn read(ctx: &Ctx<'_>, history: &History, k: u32) -> Result<Chosen, CliError> {
        let present = ctx
            .logs_dir
            .attempt(k)
            .ranks()
            .map_err(read_error(ctx.logs_dir.path()))?;
        Ok(Chosen {
            info: history.attempt(k),
            present,
        })
    }
}

/// The ranks of one attempt that --rank and --node select (all when neither is given);
/// with `only_present`, only those with files there. `None` when --node is given and the
/// timeline does not say which ranks ran where.
pub(super) fn select(args: &LogsArgs, c: &Chosen, only_present: bool) -> Option<Vec<u32>> {
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
pub(super) fn find_node<'n>(nodes: &'n [NodeRanks], spec: &str) -> Option<&'n NodeRanks> {
    match spec.parse::<u32>() {
        Ok(n) => nodes.iter().find(|x| x.node == n),
        Err(_) => nodes.iter().find(|x| x.host == spec),
    }
}

/// The marker line before an attempt's lines: `── attempt 1 (restart 1, job 4242) ──`.
pub(super) fn marker(info: &AttemptInfo) -> String {
    let words = info.describe();
    if words.is_empty() {
        format!("── attempt {} ──", info.number)
    } else {
        format!("── attempt {} ({words}) ──", info.number)
    }
}

/// --grep and --since.
pub(super) struct Filter {
    pub(super) grep: Option<regex::bytes::Regex>,
    pub(super) since: Option<u64>,
    pub(super) tail: Option<usize>,
    /// Lines without a time were kept despite --since.
    pub(super) untimed: bool,
}

impl Filter {
    pub(super) fn new(args: &LogsArgs) -> Result<Filter, CliError> {
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

    pub(super) fn keeps(&mut self, line: &Line) -> bool {
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
pub(super) struct Printer<'o> {
    pub(super) out: &'o mut dyn Write,
    pub(super) label: bool,
    pub(super) filter: Filter,
    /// With --tail: (the marker before it, the line).
    pub(super) held: VecDeque<(Option<usize>, Line)>,
    pub(super) markers: Vec<String>,
    /// Lines print as they come (a follow after its first tail).
    pub(super) streaming: bool,
}

impl<'o> Printer<'o> {
    pub(super) fn new(out: &'o mut dyn Write, label: bool, filter: Filter) -> Printer<'o> {
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

    pub(super) fn marker(&mut self, text: String) -> Result<(), CliError> {
        if self.streaming {
            writeln!(self.out, "{text}")?;
        } else {
            self.markers.push(text);
        }
        Ok(())
    }

    pub(super) fn line(&mut self, line: Line) -> Result<(), CliError> {
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

    pub(super) fn write_line(&mut self, line: &Line) -> Result<(), CliError> {
        if self.label {
            write!(self.out, "{}: ", line.rank)?;
        }
        self.out.write_all(&line.bytes)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    /// Reads what the files have grown by and prints it; `whole`: their writers are done,
    /// so a partial last line is printed as it is.
    pub(super) fn round(
        &mut self,
        merge: &mut Merge,
        logs_dir: &LogsDir,
        whole: bool,
    ) -> Result<(), CliError> {
        if whole {
            merge.set_last(true);
        }
        merge.again().map_err(read_error(logs_dir.path()))?;
        self.drain(merge)
    }

    /// Every line `merge` has now.
    pub(super) fn drain(&mut self, merge: &mut Merge) -> Result<(), CliError> {
        while let Some(line) = merge
            .next_line()
            .map_err(CliError::system("cannot read the logs"))?
        {
            self.line(line)?;
        }
        Ok(())
    }

    /// Print what --tail held; from now on lines print as they come.
    pub(super) fn flush_tail(&mut self) -> Result<(), CliError> {
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
