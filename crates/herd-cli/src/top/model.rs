//! What `herd top` shows, read from the experiment folder alone (no terminal): a
//! [`Reader`] keeps what it read of the folder between refreshes and makes a [`Frame`].
//!
//! A refresh costs what changed: each rank's metrics file is read from where the last read
//! stopped ([`store::Tail`]), its `.times` file only at its end and only when its size
//! changed, the timeline and the manifest only when the timeline's size changed, each
//! node's GPU samples from where the last read stopped ([`super::gpus::Files`]).

use herd_metrics::median;
use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_exp::failure::Exit;
use herd_exp::layout::AttemptDir;
use herd_exp::logs::{self as exp_logs, History};
use herd_exp::progress::Progress;
use herd_exp::timeline::{During, Entry, Event};
use herd_exp::Experiment;
use herd_metrics::store::{Series, Tail};

use super::gpus::{Files as GpuFiles, Gpu};

/// The least silence that makes a running rank `SILENT` when `--silent-after` is not given.
pub const SILENT_FLOOR: Duration = Duration::from_secs(60);
/// Without `--silent-after`: silent after this many of the rank's own typical gaps between
/// lines (when that is longer than [`SILENT_FLOOR`]).
pub const SILENT_GAPS: u32 = 10;
/// A rank whose recent rate is below this fraction of the median over ranks is `SLOW`.
pub const SLOW_RATIO: f64 = 0.7;
/// How many of a rank's newest rate readings make its recent rate (their median).
pub const RECENT: usize = 5;

/// How a [`Reader`] judges the ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// A running rank with no output for longer is `SILENT`; `None`: the default
    /// (max([`SILENT_FLOOR`], [`SILENT_GAPS`] × the rank's typical gap)).
    pub silent_after: Option<Duration>,
    /// [`SLOW_RATIO`].
    pub slow_ratio: f64,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            silent_after: None,
            slow_ratio: SLOW_RATIO,
        }
    }
}

/// A rank's state in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// No output yet.
    Waiting,
    /// Output comes.
    Running,
    /// Exited 0 (the attempt finished well).
    Done,
    /// Ended by herd with the attempt (stop, teardown after another rank failed).
    Stopped,
    /// Exited with this code.
    Failed(i32),
    /// Killed by this signal (`SIGKILL`).
    Killed(String),
    /// Running, but no output for this long.
    Silent(Duration),
    /// Running at this percentage of the median rate over ranks.
    Slow(u32),
}

/// How a state is highlighted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Nothing to see.
    Normal,
    /// Not running (waiting, done, stopped).
    Quiet,
    /// A straggler.
    Warn,
    /// Silent or failed.
    Bad,
}

impl State {
    /// The state as the table shows it: `SILENT 75s`, `SLOW 42%`, `failed 1`.
    pub fn text(&self) -> String {
        match self {
            State::Waiting => "waiting".into(),
            State::Running => "running".into(),
            State::Done => "done".into(),
            State::Stopped => "stopped".into(),
            State::Failed(code) => format!("failed {code}"),
            State::Killed(sig) => format!("killed {sig}"),
            State::Silent(d) => format!("SILENT {}s", d.as_secs()),
            State::Slow(pct) => format!("SLOW {pct}%"),
        }
    }

    /// Its highlight.
    pub fn level(&self) -> Level {
        match self {
            State::Running => Level::Normal,
            State::Waiting | State::Done | State::Stopped => Level::Quiet,
            State::Slow(_) => Level::Warn,
            State::Failed(_) | State::Killed(_) | State::Silent(_) => Level::Bad,
        }
    }
}

/// One rank's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Global rank.
    pub rank: u32,
    /// Its node's host (from the attempt's `rendezvous`).
    pub host: Option<String>,
    /// Its state.
    pub state: State,
    /// The newest step it reported.
    pub step: Option<u64>,
    /// Its recent rate: the median of its newest [`RECENT`] readings of the rate column.
    pub rate: Option<f64>,
    /// Its newest loss.
    pub loss: Option<f64>,
    /// How long since its last output line (or reading).
    pub since: Option<Duration>,
    /// Its GPU (the one whose samples name the rank), when the attempt has GPU samples.
    pub gpu: Option<Gpu>,
}

/// The table's sort orders, in the order `s` cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sort {
    /// By rank.
    #[default]
    Rank,
    /// Slowest first.
    Rate,
    /// Highest loss first.
    Loss,
    /// Longest silent first.
    Silence,
}

impl Sort {
    /// The next order.
    pub fn next(self) -> Sort {
        match self {
            Sort::Rank => Sort::Rate,
            Sort::Rate => Sort::Loss,
            Sort::Loss => Sort::Silence,
            Sort::Silence => Sort::Rank,
        }
    }

    /// Its name in the footer.
    pub fn name(self) -> &'static str {
        match self {
            Sort::Rank => "rank",
            Sort::Rate => "rate",
            Sort::Loss => "loss",
            Sort::Silence => "silence",
        }
    }
}

/// Sorts `rows` by `sort`; rows without the value go last, ties by rank.
pub fn sort_rows(rows: &mut [Row], sort: Sort) {
    let key = |r: &Row| -> Option<f64> {
        match sort {
            Sort::Rank => None,
            Sort::Rate => r.rate.map(|v| -v),
            Sort::Loss => r.loss,
            Sort::Silence => r.since.map(|d| d.as_secs_f64()),
        }
    };
    rows.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        match (ka, kb) {
            // Descending by the key (the rate is negated: ascending).
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
        .then(a.rank.cmp(&b.rank))
    });
}

/// Everything one screen shows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Frame {
    /// The experiment.
    pub name: String,
    /// Its job ids, oldest first.
    pub job_ids: Vec<String>,
    /// The scheduler's state of the current job (`RUNNING`), when asked.
    pub slurm: Option<String>,
    /// Since the current job's agents started (to its end, once it ended).
    pub elapsed: Option<Duration>,
    /// The attempt shown.
    pub attempt: Option<u32>,
    /// Every attempt folder.
    pub attempts: Vec<u32>,
    /// Restarts inside the allocation (current job).
    pub restarts: usize,
    /// Requeues (current job).
    pub requeues: usize,
    /// Nodes a spare took the place of (current job): (node, spare).
    pub replaced: Vec<(String, String)>,
    /// World size of the attempt.
    pub world_size: Option<usize>,
    /// Nodes of the attempt.
    pub nodes: Option<usize>,
    /// The rate's column: `samples_per_s` or `tokens_per_s`.
    pub rate_name: &'static str,
    /// Median of the ranks' recent rates.
    pub median_rate: Option<f64>,
    /// Sum of the ranks' recent rates.
    pub total_rate: Option<f64>,
    /// How the job ended, when the timeline says it did.
    pub ended: Option<String>,
    /// Training over the wall time so far, when the job has step readings
    /// (`goodput 77.5 %`, `… so far` while it runs).
    pub goodput: Option<String>,
    /// A line about what is missing (no attempt yet, a file that does not read).
    pub note: Option<String>,
    /// The ranks, by rank.
    pub rows: Vec<Row>,
    /// Every GPU of the attempt with a sample, by node and index (none: no GPU samples).
    pub gpus: Vec<Gpu>,
}

impl Frame {
    /// Whether the job is over (no more scheduler queries are needed).
    pub fn is_over(&self) -> bool {
        self.ended.is_some()
    }
}

/// One rank's `.times` file, read at its end.
#[derive(Debug, Default)]
struct Times {
    len: u64,
    last_ms: Option<u64>,
    /// Median gap between its newest marks.
    gap_ms: Option<u64>,
}

/// Bytes read from the end of a `.times` file: some 40 marks.
const TIMES_TAIL: u64 = 1024;

impl Times {
    fn refresh(&mut self, path: &Path) {
        let Ok(mut file) = std::fs::File::open(path) else {
            return;
        };
        let Ok(len) = file.metadata().map(|m| m.len()) else {
            return;
        };
        if len == self.len {
            return;
        }
        self.len = len;
        let from = len.saturating_sub(TIMES_TAIL);
        let mut bytes = Vec::new();
        if file.seek(SeekFrom::Start(from)).is_err() || file.read_to_end(&mut bytes).is_err() {
            return;
        }
        let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
        // The first piece may be a line cut by the start of the tail; the last one is
        // not whole yet (or empty).
        if from > 0 && !lines.is_empty() {
            lines.remove(0);
        }
        lines.pop();
        let mut ms: Vec<u64> = lines
            .iter()
            .filter_map(|l| exp_logs::parse_mark(l))
            .map(|(_, _, ms)| ms)
            .collect();
        ms.sort_unstable();
        if let Some(&last) = ms.last() {
            self.last_ms = Some(self.last_ms.map_or(last, |l| l.max(last)));
        }
        let mut gaps: Vec<u64> = ms.windows(2).map(|w| w[1] - w[0]).collect();
        if !gaps.is_empty() {
            gaps.sort_unstable();
            self.gap_ms = Some(gaps[gaps.len() / 2]);
        }
    }
}

/// One rank's readings: only the newest few are kept.
#[derive(Debug)]
struct Metrics {
    tail: Tail,
    step: Option<u64>,
    loss: Option<f64>,
    samples: VecDeque<f64>,
    tokens: VecDeque<f64>,
    last_ms: Option<u64>,
    error: Option<String>,
}

impl Metrics {
    fn new(path: PathBuf) -> Metrics {
        Metrics {
            tail: Tail::new(path),
            step: None,
            loss: None,
            samples: VecDeque::new(),
            tokens: VecDeque::new(),
            last_ms: None,
            error: None,
        }
    }

    fn refresh(&mut self) {
        if self.error.is_some() {
            return;
        }
        let mut new = Series::default();
        if let Err(e) = self.tail.read(&mut new) {
            self.error = Some(e.to_string());
        }
        self.fold(&new);
    }

    fn fold(&mut self, s: &Series) {
        for (i, &ms) in s.time_ms.iter().enumerate() {
            if let Some(step) = s.step[i] {
                self.step = Some(step);
            }
            if ms > 0 {
                self.last_ms = Some(ms);
            }
        }
        let last = |name: &str| {
            s.column(name)
                .and_then(|c| c.iter().rev().find(|v| !v.is_nan()).copied())
        };
        if let Some(v) = last("loss") {
            self.loss = Some(v);
        }
        for (name, keep) in [
            ("samples_per_s", &mut self.samples),
            ("tokens_per_s", &mut self.tokens),
        ] {
            if let Some(col) = s.column(name) {
                for &v in col.iter().filter(|v| !v.is_nan()) {
                    keep.push_back(v);
                    if keep.len() > RECENT {
                        keep.pop_front();
                    }
                }
            }
        }
    }
}

#[derive(Debug)]
struct RankFiles {
    metrics: Metrics,
    times: Times,
    times_path: PathBuf,
}

/// What the timeline says, re-read when its size changes.
#[derive(Debug, Default)]
struct Timeline {
    len: Option<u64>,
    events: Vec<Entry>,
    history: History,
    progress: Progress,
    job_ids: Vec<String>,
    error: Option<String>,
}

/// Reads an experiment folder refresh after refresh.
#[derive(Debug)]
pub struct Reader {
    exp: Experiment,
    pinned: Option<u32>,
    attempt: Option<u32>,
    thresholds: Thresholds,
    timeline: Timeline,
    ranks: BTreeMap<u32, RankFiles>,
    /// The attempt's GPU samples.
    gpus: GpuFiles,
    /// The goodput shown and when it was counted (ms since the epoch): it reads every
    /// attempt's steps, so it is counted again at most every [`GOODPUT_EVERY_MS`].
    goodput: Option<(u64, Option<String>)>,
}

/// How often `herd top` counts the goodput again.
pub const GOODPUT_EVERY_MS: u64 = 10_000;

impl Reader {
    /// A reader of `exp`; `pinned`: always this attempt, else the newest (following new
    /// ones as they appear).
    pub fn new(exp: Experiment, pinned: Option<u32>, thresholds: Thresholds) -> Reader {
        Reader {
            exp,
            pinned,
            attempt: None,
            thresholds,
            timeline: Timeline::default(),
            ranks: BTreeMap::new(),
            gpus: GpuFiles::default(),
            goodput: None,
        }
    }

    /// The experiment.
    pub fn experiment(&self) -> &Experiment {
        &self.exp
    }

    /// The attempt shown, once there is one.
    pub fn attempt(&self) -> Option<u32> {
        self.attempt
    }

    /// Shows attempt `k` from now on (`a`/`A`), or the newest again (`None`).
    pub fn pin(&mut self, k: Option<u32>) {
        self.pinned = k;
    }

    /// The attempt folder shown.
    pub fn attempt_dir(&self) -> Option<AttemptDir> {
        self.attempt.map(|k| self.exp.paths().logs().attempt(k))
    }

    fn refresh_timeline(&mut self) {
        let path = self.exp.paths().timeline();
        let len = std::fs::metadata(&path).map(|m| m.len()).ok();
        if self.timeline.len.is_some() && len == self.timeline.len {
            return;
        }
        let t = &mut self.timeline;
        t.len = len.or(Some(0));
        t.error = None;
        match herd_exp::timeline::read(self.exp.dir()) {
            Ok(events) => t.events = events,
            Err(e) => t.error = Some(format!("cannot read {}: {e}", path.display())),
        }
        let manifest = self.exp.manifest();
        let (job_id, submissions) = match &manifest {
            Ok(m) => {
                t.job_ids = m
                    .submissions
                    .iter()
                    .filter_map(|a| a.job_id.clone())
                    .collect();
                (t.job_ids.last().cloned(), m.submissions.len())
            }
            Err(e) => {
                t.error = Some(e.to_string());
                (None, 0)
            }
        };
        t.progress = Progress::from_events(job_id, submissions, &t.events);
        t.history = History::from_events(&t.events);
    }

    /// The goodput line, counted again when [`GOODPUT_EVERY_MS`] passed.
    fn goodput(&mut self, now_ms: u64) -> Option<String> {
        if let Some((at, words)) = &self.goodput {
            if now_ms.saturating_sub(*at) < GOODPUT_EVERY_MS {
                return words.clone();
            }
        }
        let steps = crate::goodput::read_all_steps(&self.exp);
        let acc = herd_exp::goodput::account(&self.timeline.events, &steps, now_ms);
        let words = acc.goodput().map(|g| {
            format!(
                "goodput {}{}",
                herd_exp::goodput::percent(g),
                if acc.running { " so far" } else { "" }
            )
        });
        self.goodput = Some((now_ms, words.clone()));
        words
    }

    /// Reads what changed and makes the frame as of `now_ms` (ms since the epoch).
    pub fn frame(&mut self, now_ms: u64) -> Frame {
        self.refresh_timeline();
        let goodput = self.goodput(now_ms);
        let logs_dir = self.exp.paths().logs();
        let mut note = None;
        let attempts = logs_dir.attempts().unwrap_or_default();
        let attempt = match self.pinned {
            Some(k) if attempts.contains(&k) => Some(k),
            Some(k) => {
                note = Some(format!("attempt {k} has no folder yet"));
                None
            }
            None => attempts.last().copied(),
        };
        if attempt != self.attempt {
            self.attempt = attempt;
            self.ranks.clear();
            self.gpus = GpuFiles::default();
        }
        let t = &self.timeline;
        let p = &t.progress;
        let ended = ended_words(p);
        let mut frame = Frame {
            name: self.exp.name().to_owned(),
            job_ids: t.job_ids.clone(),
            elapsed: p.started_ms.map(|s| {
                let end = if ended.is_some() {
                    last_event_ms(&t.events).unwrap_or(now_ms)
                } else {
                    now_ms
                };
                Duration::from_millis(end.saturating_sub(s))
            }),
            attempts: attempts.clone(),
            restarts: p.restarts,
            requeues: p.requeues,
            replaced: p.replaced.clone(),
            goodput,
            rate_name: "samples_per_s",
            ended,
            note: t.error.clone().or(note),
            ..Frame::default()
        };
        let Some(k) = attempt else {
            if frame.note.is_none() {
                frame.note = Some(if frame.ended.is_some() {
                    "the job ended before any worker started (`herd logs --batch` shows why)".into()
                } else {
                    format!(
                        "the job has not started yet: no attempt folder in {} (`herd status {}` says why it waits)",
                        logs_dir.path().display(),
                        frame.name
                    )
                });
            }
            return frame;
        };
        frame.attempt = Some(k);
        let dir = logs_dir.attempt(k);
        let info = t.history.attempt(k);
        let mut hosts: BTreeMap<u32, String> = BTreeMap::new();
        let mut node_hosts: BTreeMap<u32, String> = BTreeMap::new();
        if let Some(nodes) = &info.nodes {
            frame.nodes = Some(nodes.len());
            for n in nodes {
                node_hosts.insert(n.node, n.host.clone());
                for &r in &n.ranks {
                    hosts.insert(r, n.host.clone());
                }
            }
            frame.world_size = Some(hosts.len());
        }
        let mut ranks: Vec<u32> = hosts.keys().copied().collect();
        ranks.extend(dir.ranks().unwrap_or_default());
        ranks.sort_unstable();
        ranks.dedup();
        for &r in &ranks {
            let files = self.ranks.entry(r).or_insert_with(|| RankFiles {
                metrics: Metrics::new(dir.metrics(r)),
                times: Times::default(),
                times_path: dir.times(r),
            });
            files.metrics.refresh();
            files.times.refresh(&files.times_path);
        }
        // The rate column: samples/s when any rank has it, else tokens/s.
        let tokens = !self.ranks.values().any(|f| !f.metrics.samples.is_empty())
            && self.ranks.values().any(|f| !f.metrics.tokens.is_empty());
        if tokens {
            frame.rate_name = "tokens_per_s";
        }
        self.gpus.refresh(&dir);
        if let Some(e) = self.gpus.error() {
            frame.note.get_or_insert_with(|| e.to_owned());
        }
        frame.gpus = self.gpus.gpus(&node_hosts);
        // Each rank's GPU: the first whose samples name it.
        let mut gpu_of: BTreeMap<u32, &Gpu> = BTreeMap::new();
        for g in &frame.gpus {
            for &r in &g.sample.ranks {
                gpu_of.entry(r).or_insert(g);
            }
        }
        let exits = exits(&t.events, k);
        let over = attempt_over(&t.history, &attempts, k, frame.ended.is_some());
        let mut rows = Vec::with_capacity(ranks.len());
        for &r in &ranks {
            let f = &self.ranks[&r];
            let m = &f.metrics;
            let rate = median(if tokens { &m.tokens } else { &m.samples }.iter().copied());
            let last = f.times.last_ms.max(m.last_ms);
            let since = last.map(|l| Duration::from_millis(now_ms.saturating_sub(l)));
            let state = if let Some(s) = exits.get(&r) {
                s.clone()
            } else if let Some(ok) = over {
                if ok {
                    State::Done
                } else {
                    State::Stopped
                }
            } else if last.is_none() {
                State::Waiting
            } else {
                let limit = self.thresholds.silent_after.unwrap_or_else(|| {
                    let own = f
                        .times
                        .gap_ms
                        .map_or(Duration::ZERO, |g| Duration::from_millis(g) * SILENT_GAPS);
                    own.max(SILENT_FLOOR)
                });
                match since {
                    Some(s) if s > limit => State::Silent(s),
                    _ => State::Running,
                }
            };
            if let Some(e) = &m.error {
                frame.note.get_or_insert_with(|| e.clone());
            }
            rows.push(Row {
                rank: r,
                host: hosts.get(&r).cloned(),
                state,
                step: m.step,
                rate,
                loss: m.loss,
                since,
                gpu: gpu_of.get(&r).map(|g| (*g).clone()),
            });
        }
        // Stragglers: against the median of the running ranks' rates.
        let running = |r: &Row| matches!(r.state, State::Running | State::Silent(_));
        let rates: Vec<f64> = rows
            .iter()
            .filter(|r| running(r))
            .filter_map(|r| r.rate)
            .collect();
        // Once no rank runs (the attempt ended), the header keeps the rates they ended at.
        let shown: Vec<f64> = if rates.is_empty() {
            rows.iter().filter_map(|r| r.rate).collect()
        } else {
            rates.clone()
        };
        frame.median_rate = median(shown.iter().copied());
        frame.total_rate = (!shown.is_empty()).then(|| shown.iter().sum());
        if let (Some(med), true) = (frame.median_rate, rates.len() >= 2) {
            for row in &mut rows {
                if let (State::Running, Some(rate)) = (&row.state, row.rate) {
                    if med > 0.0 && rate < med * self.thresholds.slow_ratio {
                        row.state = State::Slow((rate / med * 100.0).round() as u32);
                    }
                }
            }
        }
        frame.rows = rows;
        frame
    }

    /// The last `n` lines of rank `rank`'s stdout and stderr in the attempt shown, in time
    /// order by the rank's time marks (stderr lines start `err| `).
    pub fn log_tail(&self, rank: u32, n: usize) -> Vec<String> {
        let Some(dir) = self.attempt_dir() else {
            return vec!["(no attempt yet)".into()];
        };
        log_tail(&dir, rank, n)
    }
}

/// Bytes read from the end of each log for the log pane.
const LOG_TAIL: u64 = 64 * 1024;

/// The last `n` lines of a rank's stdout and stderr, merged by the time marks at the end
/// of its `.times` file.
pub fn log_tail(dir: &AttemptDir, rank: u32, n: usize) -> Vec<String> {
    use exp_logs::Stream;
    let marks = read_tail(&dir.times(rank), 16 * 1024)
        .map(|(_, bytes)| {
            bytes
                .split(|&b| b == b'\n')
                .filter_map(exp_logs::parse_mark)
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut lines: Vec<(u64, u8, String)> = Vec::new();
    for (stream, prefix) in [(Stream::Out, ""), (Stream::Err, "err| ")] {
        let Some((from, bytes)) = read_tail(&dir.log(rank, stream), LOG_TAIL) else {
            continue;
        };
        let mut at = from;
        let mut pieces: Vec<(u64, &[u8])> = Vec::new();
        for piece in bytes.split(|&b| b == b'\n') {
            pieces.push((at, piece));
            at += piece.len() as u64 + 1;
        }
        // A line cut by the start of the tail, and the empty piece after the last newline.
        if from > 0 && !pieces.is_empty() {
            pieces.remove(0);
        }
        if pieces.last().is_some_and(|(_, p)| p.is_empty()) {
            pieces.pop();
        }
        let skip = pieces.len().saturating_sub(n);
        for &(offset, piece) in &pieces[skip..] {
            // The time of the newest mark of this stream at or before the line.
            let ms = marks
                .iter()
                .filter(|(s, o, _)| *s == stream && *o <= offset)
                .map(|&(_, _, ms)| ms)
                .max()
                .unwrap_or(0);
            let text = String::from_utf8_lossy(piece).replace('\t', "    ");
            let text: String = text.chars().filter(|c| !c.is_control()).collect();
            lines.push((ms, stream.letter(), format!("{prefix}{text}")));
        }
    }
    // Stable: within a stream the file's order stays.
    lines.sort_by_key(|&(ms, _, _)| ms);
    let skip = lines.len().saturating_sub(n);
    lines.into_iter().skip(skip).map(|(_, _, l)| l).collect()
}

/// The file's last `max` bytes and where they start.
fn read_tail(path: &Path, max: u64) -> Option<(u64, Vec<u8>)> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(max);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).ok()?;
    Some((from, bytes))
}

/// How the timeline says the current job ended, in words.
fn ended_words(p: &Progress) -> Option<String> {
    if let Some(e) = &p.ended {
        return Some(format!("ended {} (exit {})", e.state, e.exit_code));
    }
    match &p.finished {
        Some((true, _)) => Some("finished ok".into()),
        Some((false, cause)) => Some(match cause {
            Some(c) => format!("failed: {c}"),
            None => "failed".into(),
        }),
        None if p.cancelled_ms.is_some() => Some("cancelled".into()),
        None => None,
    }
}

fn last_event_ms(events: &[Entry]) -> Option<u64> {
    events.last()?.unix_ms
}

/// `Some(ok)` when attempt `k` is over: it finished (ok or not), a later attempt began, or
/// the job ended.
fn attempt_over(history: &History, attempts: &[u32], k: u32, job_ended: bool) -> Option<bool> {
    if let Some((a, ok)) = history.finished {
        if a == k {
            return Some(ok);
        }
        if a > k {
            return Some(false);
        }
    }
    if attempts.iter().any(|&a| a > k) || job_ended {
        return Some(false);
    }
    None
}

/// The ranks of attempt `k` that the timeline says exited (`worker_exit`, or the failing
/// rank of `failed`), as states: from the event's `exit`, or, in a line older than that
/// field, from its words (`how`, `cause`).
fn exits(events: &[Entry], k: u32) -> BTreeMap<u32, State> {
    let mut out = BTreeMap::new();
    for e in events {
        let (rank, exit, how, during_stop) = match &e.event {
            Event::WorkerExit(w) if w.attempt == k => (
                w.rank,
                w.exit.as_ref(),
                w.how.as_str(),
                w.during == Some(During::Stop),
            ),
            // An older line names the rank in the cause alone:
            // `rank 3 (local rank 1 on gpu-a02) exited with code 1`.
            Event::Failed(f) if f.attempt == k => (
                f.rank.or_else(|| {
                    f.cause
                        .strip_prefix("rank ")?
                        .split(' ')
                        .next()?
                        .parse::<u32>()
                        .ok()
                }),
                f.exit.as_ref(),
                f.cause.as_str(),
                false,
            ),
            _ => continue,
        };
        let Some(rank) = rank else { continue };
        let state = match exit {
            Some(exit) => exit_state(exit, during_stop),
            None if how.is_empty() => continue,
            None => words_state(how, during_stop),
        };
        // The first word on a rank stands (a `failed` repeats its `worker_exit`).
        out.entry(rank).or_insert(state);
    }
    out
}

/// A worker's end as its state: code 1 → `failed 1`, SIGKILL → `killed SIGKILL`; any
/// signal, and code 0, while the workers were asked to stop: stopped.
fn exit_state(exit: &Exit, during_stop: bool) -> State {
    match exit {
        Exit::Code(0) if during_stop => State::Stopped,
        Exit::Code(0) => State::Done,
        Exit::Code(c) => State::Failed(*c),
        Exit::Signal(_) if during_stop => State::Stopped,
        Exit::Signal(s) => State::Killed(s.clone()),
    }
}

/// The same from the words of a line older than `exit`: `exited with code 1` → `failed 1`,
/// `killed by SIGKILL (…)` → `killed SIGKILL`.
fn words_state(how: &str, during_stop: bool) -> State {
    if let Some(i) = how.find("exited with code ") {
        let code = how[i + "exited with code ".len()..]
            .split(|c: char| !c.is_ascii_digit() && c != '-')
            .next()
            .and_then(|c| c.parse::<i32>().ok());
        return match code {
            Some(0) => State::Done,
            Some(c) => State::Failed(c),
            None => State::Failed(1),
        };
    }
    if let Some(i) = how.find("killed by ") {
        let sig = how[i + "killed by ".len()..]
            .split([' ', ')', ','])
            .next()
            .unwrap_or("?");
        if during_stop {
            return State::Stopped;
        }
        return State::Killed(sig.to_owned());
    }
    if how.contains("exited 0") {
        return if during_stop {
            State::Stopped
        } else {
            State::Done
        };
    }
    if during_stop {
        State::Stopped
    } else {
        State::Failed(1)
    }
}
