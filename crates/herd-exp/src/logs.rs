//! Reading an experiment's logs: the attempt folders, each rank's time marks, a merge of
//! many ranks' lines in time order, and where each attempt stands from the timeline
//! (`herd logs`, docs/logs.md).
//!
//! # The folder
//!
//! Each attempt's folder ([`AttemptDir`]) holds, per rank, the worker's stdout and stderr,
//! raw and in whole lines, and time marks for both (below), written by its node's agent.
//!
//! # Time marks: `rank-R.times`
//!
//! Text, one mark a line, `STREAM OFFSET UNIX_MS`:
//!
//! ```text
//! o 0 1796060412123
//! e 0 1796060412130
//! o 5120 1796060412245
//! ```
//!
//! `STREAM` is `o` (`rank-R.out`) or `e` (`rank-R.err`), `OFFSET` the byte offset in that
//! file where a line starts, `UNIX_MS` the milliseconds since the Unix epoch when the agent
//! received that line. A stream's first line always has a mark; a later line has one when
//! at least [`MARK_GAP_MS`] passed since that stream's previous mark. A reader gives each
//! line the time of the last mark of its stream at or before its offset, so a time is at
//! most [`MARK_GAP_MS`] early. The agent appends the mark before the line, so a reader that
//! sees a line sees its mark. Lines without marks (logs of a herd before marks, or a file
//! not written by an agent) have no time: a merge puts them in rank order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

/// A stream's next line gets a time mark when at least this long passed since its last.
pub const MARK_GAP_MS: u64 = 100;

use crate::layout::AttemptDir;
pub use crate::layout::Stream;
pub use crate::timeline::NodeRanks;
use crate::timeline::{Entry, Event};

impl Stream {
    /// `o` or `e`: the stream's letter in a time mark.
    pub fn letter(self) -> u8 {
        match self {
            Stream::Out => b'o',
            Stream::Err => b'e',
        }
    }
}

/// One time mark as its line, `o 5120 1796060412245\n`.
pub fn format_mark(stream: Stream, offset: u64, unix_ms: u64) -> String {
    format!("{} {offset} {unix_ms}\n", stream.letter() as char)
}

/// A time mark's line (without or with its newline) as (stream, offset, unix_ms); `None`
/// when it is not one.
pub fn parse_mark(line: &[u8]) -> Option<(Stream, u64, u64)> {
    let text = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = text.split(' ');
    let stream = match parts.next()? {
        "o" => Stream::Out,
        "e" => Stream::Err,
        _ => return None,
    };
    let offset = parts.next()?.parse().ok()?;
    let ms = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((stream, offset, ms))
}

/// Lets this process open as many files as the hard limit allows: a merge holds four per
/// rank (two logs, their marks twice), and the usual soft limit of 1,024 is 256 ranks.
pub fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    // `None` is unlimited.
    let raise = match (limit.current, limit.maximum) {
        (None, _) => false,
        (Some(c), Some(m)) => c < m,
        (Some(_), None) => true,
    };
    if raise {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        // Not raised: a merge of very many ranks may then fail with "too many open files".
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// One line of a rank's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// Global rank.
    pub rank: u32,
    /// Which stream.
    pub stream: Stream,
    /// When it arrived (milliseconds since the epoch), from the marks; `None` without.
    pub time: Option<u64>,
    /// The line's bytes, without its newline (not necessarily UTF-8).
    pub bytes: Vec<u8>,
}

/// A file read line by line as it grows: a partial last line is held until its newline
/// comes (or, at the end, given as it is).
#[derive(Debug)]
pub struct Growing {
    path: PathBuf,
    reader: Option<BufReader<File>>,
    offset: u64,
    pending: Vec<u8>,
}

impl Growing {
    /// `path`, from its start; it need not exist yet.
    pub fn new(path: PathBuf) -> Growing {
        Growing {
            path,
            reader: None,
            offset: 0,
            pending: Vec::new(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next whole line as (offset of its start, bytes with the newline stripped);
    /// `None` when no whole line is there now. With `last`, a partial last line counts as
    /// whole (the file is complete).
    pub fn next_line(&mut self, last: bool) -> io::Result<Option<(u64, Vec<u8>)>> {
        self.read_line(last)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", self.path.display())))
    }

    fn read_line(&mut self, last: bool) -> io::Result<Option<(u64, Vec<u8>)>> {
        if self.reader.is_none() {
            match File::open(&self.path) {
                Ok(f) => self.reader = Some(BufReader::with_capacity(1 << 15, f)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let Some(reader) = self.reader.as_mut() else {
            return Ok(None);
        };
        reader.read_until(b'\n', &mut self.pending)?;
        if self.pending.last() == Some(&b'\n') || (last && !self.pending.is_empty()) {
            let start = self.offset;
            self.offset += self.pending.len() as u64;
            let mut bytes = std::mem::take(&mut self.pending);
            if bytes.last() == Some(&b'\n') {
                bytes.pop();
            }
            return Ok(Some((start, bytes)));
        }
        Ok(None)
    }
}

/// The marks of one stream of one rank, read as the lines are.
#[derive(Debug)]
struct Marks {
    file: Growing,
    stream: Stream,
    /// The last mark at or before the last line asked about.
    current: Option<(u64, u64)>,
    /// The mark after it, once read.
    next: Option<(u64, u64)>,
    /// Reached the file's end in this round: no more reads until [`Marks::again`].
    ended: bool,
    /// Seen any mark at all.
    any: bool,
}

impl Marks {
    fn new(path: PathBuf, stream: Stream) -> Marks {
        Marks {
            file: Growing::new(path),
            stream,
            current: None,
            next: None,
            ended: false,
            any: false,
        }
    }

    fn read_next(&mut self) -> io::Result<Option<(u64, u64)>> {
        while !self.ended {
            match self.file.next_line(false)? {
                None => self.ended = true,
                Some((_, line)) => {
                    if let Some((s, off, ms)) = parse_mark(&line) {
                        if s == self.stream {
                            self.any = true;
                            return Ok(Some((off, ms)));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    /// The time of the last mark at or before `offset`.
    fn time_at(&mut self, offset: u64) -> io::Result<Option<u64>> {
        loop {
            if self.next.is_none() {
                self.next = self.read_next()?;
            }
            match self.next {
                Some((off, _)) if off <= offset => self.current = self.next.take(),
                _ => break,
            }
        }
        Ok(self.current.map(|(_, ms)| ms))
    }

    fn again(&mut self) {
        self.ended = false;
    }
}

/// One stream of one rank of an attempt, read line by line with each line's time.
#[derive(Debug)]
pub struct Source {
    rank: u32,
    stream: Stream,
    log: Growing,
    marks: Marks,
    last_time: Option<u64>,
}

impl Source {
    /// Stream `stream` of rank `rank` in the attempt folder `dir`.
    pub fn new(dir: &AttemptDir, rank: u32, stream: Stream) -> Source {
        Source {
            rank,
            stream,
            log: Growing::new(dir.log(rank, stream)),
            marks: Marks::new(dir.times(rank), stream),
            last_time: None,
        }
    }

    /// A file without marks (SLURM's batch output, say), read as `rank`'s `stream`.
    pub fn plain(path: PathBuf, rank: u32, stream: Stream) -> Source {
        Source {
            rank,
            stream,
            log: Growing::new(path),
            // A file that does not exist: no marks.
            marks: Marks::new(PathBuf::new(), stream),
            last_time: None,
        }
    }

    /// Its rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Its stream.
    pub fn stream(&self) -> Stream {
        self.stream
    }

    /// Whether any time mark of this stream was read so far.
    pub fn has_marks(&self) -> bool {
        self.marks.any
    }

    /// The next whole line there now (with `last`, also a partial last one).
    pub fn next_line(&mut self, last: bool) -> io::Result<Option<Line>> {
        let Some((offset, bytes)) = self.log.next_line(last)? else {
            return Ok(None);
        };
        let mut time = self.marks.time_at(offset)?;
        // A clock stepped back never reorders one stream's lines.
        if let (Some(t), Some(prev)) = (time, self.last_time) {
            time = Some(t.max(prev));
        }
        if time.is_some() {
            self.last_time = time;
        }
        Ok(Some(Line {
            rank: self.rank,
            stream: self.stream,
            time,
            bytes,
        }))
    }

    /// A new round of reading (following a growing file): read on past what was the end.
    pub fn again(&mut self) {
        self.marks.again();
    }
}

/// Many sources merged in time order, streaming: one line per source is held. Lines of the
/// same time come in rank order, stdout before stderr; lines without a time count as time
/// 0, so files without marks come rank by rank.
#[derive(Debug)]
pub struct Merge {
    sources: Vec<Source>,
    heads: Vec<Option<Line>>,
    heap: BinaryHeap<Reverse<(u64, u32, Stream, usize)>>,
    last: bool,
}

impl Merge {
    /// Merge `sources`; with `last`, the files are complete (a partial last line counts).
    pub fn new(sources: Vec<Source>, last: bool) -> io::Result<Merge> {
        let n = sources.len();
        let mut merge = Merge {
            sources,
            heads: (0..n).map(|_| None).collect(),
            heap: BinaryHeap::with_capacity(n),
            last,
        };
        for i in 0..n {
            merge.fill(i)?;
        }
        Ok(merge)
    }

    fn fill(&mut self, i: usize) -> io::Result<()> {
        if self.heads[i].is_some() {
            return Ok(());
        }
        if let Some(line) = self.sources[i].next_line(self.last)? {
            self.heap
                .push(Reverse((line.time.unwrap_or(0), line.rank, line.stream, i)));
            self.heads[i] = Some(line);
        }
        Ok(())
    }

    /// The next line in time order of those there now; `None` when every source is read
    /// to its end (for now).
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        let Some(Reverse((_, _, _, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let line = self.heads[i].take();
        self.fill(i)?;
        Ok(line)
    }

    /// A new round (following growing files): every source is read on from where it is.
    pub fn again(&mut self) -> io::Result<()> {
        for i in 0..self.sources.len() {
            self.sources[i].again();
            self.fill(i)?;
        }
        Ok(())
    }

    /// Add a source (a rank whose files appeared).
    pub fn add(&mut self, source: Source) -> io::Result<()> {
        self.sources.push(source);
        self.heads.push(None);
        self.fill(self.sources.len() - 1)
    }

    /// The sources, in the order given.
    pub fn sources(&self) -> &[Source] {
        &self.sources
    }

    /// From now on the files are complete (`true`): a partial last line counts as whole.
    pub fn set_last(&mut self, last: bool) {
        self.last = last;
    }

    /// Whether any source has read a time mark so far.
    pub fn has_marks(&self) -> bool {
        self.sources.iter().any(Source::has_marks)
    }
}

/// How an attempt came to start, from the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Began {
    /// The first attempt of the experiment.
    First,
    /// A restart inside the allocation: the Nth of this allocation.
    Restart(u32),
    /// The job was requeued (for this cause, when the timeline says).
    Requeue(Option<String>),
    /// `herd submit --resume`: this submission's first attempt.
    Resume(u32),
    /// The timeline does not say (no `attempt_started` for it).
    Unknown,
}

/// What the timeline says about one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptInfo {
    /// K.
    pub number: u32,
    /// How it began.
    pub began: Began,
    /// The SLURM job it ran in, when known.
    pub job_id: Option<String>,
    /// Its nodes (the latest `rendezvous` before it started); `None` when that event has
    /// no node list (a herd before it had one) or there is none.
    pub nodes: Option<Vec<NodeRanks>>,
}

impl AttemptInfo {
    /// The words in its marker line: `restart 1, job 4242`.
    pub fn describe(&self) -> String {
        let how = match &self.began {
            Began::First | Began::Unknown => None,
            Began::Restart(n) => Some(format!("restart {n}")),
            Began::Requeue(Some(cause)) => Some(format!("requeued after {}", cause_words(cause))),
            Began::Requeue(None) => Some("requeued".to_owned()),
            Began::Resume(n) => Some(format!("resumed: submission {n}")),
        };
        let job = self.job_id.as_ref().map(|j| format!("job {j}"));
        [how, job]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn cause_words(cause: &str) -> String {
    cause.replace('_', " ")
}

/// Where a job stands, from its timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Every attempt that started, by number.
    pub attempts: BTreeMap<u32, AttemptInfo>,
    /// The job is over for good: (its last attempt, ok). A `queued` after a `finished`
    /// (a resume) clears it.
    pub finished: Option<(u32, bool)>,
    /// What an attempt that starts now would be: how it begins (by the events since the
    /// last `attempt_started`: a `restart`, a `requeue`, a `queued`), its job, its nodes.
    next: Option<AttemptInfo>,
}

/// The timeline read so far, for [`History::from_events`].
#[derive(Default)]
struct Reading {
    submission: u32,
    queued_job: Option<String>,
    job: Option<String>,
    nodes: Option<Vec<NodeRanks>>,
    slurm_requeue: u64,
    /// The first attempt of the current allocation.
    alloc_first: Option<u32>,
    // Since the last attempt_started:
    restart: Option<u32>,
    requeue: Option<Option<String>>,
    queued_since: bool,
    started_since: bool,
    any_attempt: bool,
}

impl Reading {
    fn info(&self, number: u32, restarts: Option<u32>) -> AttemptInfo {
        let began = if self.restart == Some(number) {
            Began::Restart(restarts.unwrap_or_else(|| {
                self.alloc_first
                    .map_or(0, |first| number.saturating_sub(first))
            }))
        } else if self.queued_since && self.submission > 1 {
            Began::Resume(self.submission)
        } else if let Some(cause) = &self.requeue {
            Began::Requeue(cause.clone())
        } else if self.started_since && self.slurm_requeue > 0 {
            Began::Requeue(None)
        } else if !self.any_attempt {
            Began::First
        } else {
            Began::Unknown
        };
        AttemptInfo {
            number,
            began,
            job_id: self.job.clone().or_else(|| self.queued_job.clone()),
            nodes: self.nodes.clone(),
        }
    }
}

impl History {
    /// `<exp_dir>/timeline.jsonl` read (none when it does not exist); lines that are no
    /// event (a line being written) are passed over.
    pub fn read(exp_dir: &Path) -> io::Result<History> {
        Ok(History::from_events(&crate::timeline::read(exp_dir)?))
    }

    /// From the timeline's events (in order).
    pub fn from_events(events: &[Entry]) -> History {
        let mut h = History::default();
        let mut r = Reading {
            submission: 1,
            ..Reading::default()
        };
        let id = |j: Option<&crate::timeline::JobRef>| j.map(|j| j.as_str().to_owned());
        for e in events {
            match &e.event {
                Event::Queued(q) => {
                    // Submissions count from 1: 0 is a line without one.
                    if q.submission > 0 {
                        r.submission = q.submission;
                    }
                    r.queued_job = id(q.job_id.as_ref());
                    r.job = None;
                    r.queued_since = true;
                    h.finished = None;
                }
                Event::Started(s) => {
                    r.job = id(s.job_id.as_ref());
                    r.slurm_requeue = u64::from(s.requeue);
                    r.started_since = true;
                    r.nodes = None;
                    r.alloc_first = None;
                }
                Event::Rendezvous(v) => r.nodes.clone_from(&v.nodes),
                Event::Restart(x) => r.restart = Some(x.attempt),
                Event::Requeue(q) => {
                    r.requeue = Some(Some(q.cause.clone()).filter(|c| !c.is_empty()));
                }
                Event::AttemptStarted(a) => {
                    let k = a.attempt;
                    h.attempts.insert(k, r.info(k, a.restarts));
                    r.alloc_first.get_or_insert(k);
                    r.restart = None;
                    r.requeue = None;
                    r.queued_since = false;
                    r.started_since = false;
                    r.any_attempt = true;
                    h.finished = None;
                }
                Event::Finished(f) => h.finished = Some((f.attempt, f.ok)),
                _ => {}
            }
        }
        let next = h.attempts.keys().next_back().map_or(0, |k| k + 1);
        h.next = Some(r.info(next, None));
        h
    }

    /// The attempt's info; for one after every attempt that started, what it would be if
    /// it started now (its folder can appear before the leader records it).
    pub fn attempt(&self, number: u32) -> AttemptInfo {
        if let Some(info) = self.attempts.get(&number) {
            return info.clone();
        }
        let later = self.attempts.keys().next_back().is_none_or(|&k| number > k);
        match &self.next {
            Some(next) if later => AttemptInfo {
                number,
                ..next.clone()
            },
            _ => AttemptInfo {
                number,
                began: Began::Unknown,
                job_id: None,
                nodes: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(path: &Path, text: &[u8]) {
        std::fs::write(path, text).expect("write");
    }

    fn texts(merge: &mut Merge) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = merge.next_line().expect("reads") {
            out.push(format!(
                "{}{} {}",
                l.rank,
                if l.stream == Stream::Out { "o" } else { "e" },
                String::from_utf8_lossy(&l.bytes)
            ));
        }
        out
    }

    #[test]
    fn marks_round_trip() {
        let line = format_mark(Stream::Err, 5120, 1_796_060_412_245);
        assert_eq!(line, "e 5120 1796060412245\n");
        assert_eq!(
            parse_mark(line.as_bytes()),
            Some((Stream::Err, 5120, 1_796_060_412_245))
        );
        for bad in ["x 1 2", "o 1", "o 1 2 3", "o a 2", ""] {
            assert_eq!(parse_mark(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn merges_ranks_and_streams_by_their_marks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = &AttemptDir::new(dir.path());
        write(&d.log(0, Stream::Out), b"a1\na2\na3\n");
        write(&d.log(0, Stream::Err), b"ae\n");
        // a1 at 1000, a2 (and a3, no mark of its own) at 3000.
        write(&d.times(0), b"o 0 1000\ne 0 2500\no 3 3000\n");
        write(&d.log(1, Stream::Out), b"b1\nb2\n");
        write(&d.log(1, Stream::Err), b"");
        write(&d.times(1), b"o 0 2000\no 3 4000\n");
        let sources = [0, 1]
            .into_iter()
            .flat_map(|r| Stream::BOTH.map(|s| Source::new(d, r, s)))
            .collect();
        let mut m = Merge::new(sources, true).expect("merge");
        assert_eq!(
            texts(&mut m),
            ["0o a1", "1o b1", "0e ae", "0o a2", "0o a3", "1o b2"]
        );
        assert!(m.has_marks());
    }

    #[test]
    fn without_marks_ranks_come_in_order_and_a_partial_line_waits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = &AttemptDir::new(dir.path());
        write(&d.log(1, Stream::Out), b"b1\n");
        write(&d.log(0, Stream::Out), b"a1\na\xff2\npart");
        let sources = vec![
            Source::new(d, 1, Stream::Out),
            Source::new(d, 0, Stream::Out),
        ];
        let mut m = Merge::new(sources, false).expect("merge");
        let mut got = Vec::new();
        while let Some(l) = m.next_line().expect("reads") {
            got.push(l.bytes);
        }
        assert_eq!(got, [b"a1".to_vec(), b"a\xff2".to_vec(), b"b1".to_vec()]);
        assert!(!m.has_marks());
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .append(true)
            .open(d.log(0, Stream::Out))
            .and_then(|mut f| f.write_all(b"ial\n"))
            .expect("append");
        m.again().expect("again");
        let l = m.next_line().expect("reads").expect("the completed line");
        assert_eq!(l.bytes, b"partial");
        assert_eq!(m.next_line().expect("reads"), None);
    }

    #[test]
    fn lists_attempts_and_ranks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = crate::layout::LogsDir::new(dir.path());
        assert!(crate::layout::LogsDir::new(dir.path().join("none"))
            .attempts()
            .expect("missing is none")
            .is_empty());
        for k in [0, 2, 10] {
            std::fs::create_dir_all(logs.attempt(k).path()).expect("mkdir");
        }
        std::fs::create_dir_all(dir.path().join("attempt-x")).expect("mkdir");
        assert_eq!(logs.attempts().expect("lists"), [0, 2, 10]);
        let a = logs.attempt(2);
        for f in [
            "rank-0.out",
            "rank-0.err",
            "rank-11.err",
            "rank-2.times",
            "rank-3.error.json",
        ] {
            write(&a.path().join(f), b"");
        }
        assert_eq!(a.ranks().expect("lists"), [0, 11]);
    }

    #[test]
    fn history_tells_how_each_attempt_began() {
        let ev = |v: serde_json::Value| {
            let e = Entry::parse(&v.to_string());
            assert!(!matches!(e.event, Event::Other(_)), "{v}: {e:?}");
            e
        };
        let nodes = json!([{"node": 0, "host": "a", "ranks": [0, 1]}, {"node": 1, "host": "b", "ranks": [2, 3]}]);
        let events = vec![
            ev(json!({"event": "queued", "submission": 1, "job_id": "4242"})),
            ev(json!({"event": "started", "job_id": 4242, "requeue": 0})),
            ev(json!({"event": "rendezvous", "world_size": 4, "nodes": nodes})),
            ev(json!({"event": "attempt_started", "attempt": 0, "restarts": 0})),
            ev(json!({"event": "restart", "attempt": 1})),
            ev(json!({"event": "attempt_started", "attempt": 1, "restarts": 1})),
            ev(json!({"event": "requeue", "attempt": 1, "cause": "time_limit"})),
            ev(json!({"event": "started", "job_id": 4242, "requeue": 1})),
            ev(json!({"event": "rendezvous", "world_size": 2})),
            ev(json!({"event": "attempt_started", "attempt": 2, "restarts": 0})),
            ev(json!({"event": "finished", "attempt": 2, "ok": false})),
        ];
        let h = History::from_events(&events);
        assert_eq!(h.attempt(0).describe(), "job 4242");
        assert_eq!(h.attempt(0).began, Began::First);
        assert_eq!(h.attempt(1).describe(), "restart 1, job 4242");
        assert_eq!(h.attempt(1).nodes.as_ref().map(Vec::len), Some(2));
        assert_eq!(
            h.attempt(2).describe(),
            "requeued after time limit, job 4242"
        );
        assert_eq!(h.attempt(2).nodes, None, "no node list in that rendezvous");
        assert_eq!(h.finished, Some((2, false)));
        let mut more = events.clone();
        more.push(ev(
            json!({"event": "queued", "submission": 2, "job_id": "4250"}),
        ));
        assert_eq!(History::from_events(&more).finished, None, "resumed");
        more.push(ev(
            json!({"event": "started", "job_id": "4250", "requeue": 0}),
        ));
        more.push(ev(json!({"event": "attempt_started", "attempt": 3})));
        more.push(ev(json!({"event": "finished", "attempt": 3, "ok": true})));
        let h = History::from_events(&more);
        assert_eq!(h.attempt(3).describe(), "resumed: submission 2, job 4250");
        assert_eq!(h.finished, Some((3, true)));
        assert_eq!(h.attempt(9).describe(), "job 4250", "nothing new since");
        more.push(ev(json!({"event": "restart", "attempt": 4})));
        let h = History::from_events(&more);
        assert_eq!(
            h.attempt(4).describe(),
            "restart 1, job 4250",
            "before its attempt_started"
        );
        assert_eq!(h.attempt(1).began, Began::Restart(1));
    }
}
