//! Where an experiment's time went: its wall time split into training, rework, start, stop,
//! detection, queue and other, from the timeline and the step readings the agents stored
//! (docs/report.md, "Goodput").
//!
//! Each moment of the wall time belongs to exactly one part, so the parts add up to it:
//! every part claims spans of time ([`Span`]), and where two claim the same moment the one
//! earlier in [`Part::ALL`] has it; a moment nobody claims is `other`. The spans:
//!
//! - **training** and **rework**: between two step readings of an attempt, the steps
//!   computed in between; those at or below the highest step any earlier attempt reached
//!   are rework (a share of the gap when it crosses that step), the others training.
//! - **detection**: a hang or a lost node, from the attempt's last progress (for a hang,
//!   the silent rank's last sign of life) to herd's decision.
//! - **stop**: from the stop's start (the time-limit or preemption warning, a failure,
//!   herd's decision on a hang, a cancel) to the attempt's workers gone.
//! - **start**: from the attempt's beginning (its allocation's start, or the previous
//!   attempt's end for a restart in the same allocation) to its first step reading.
//! - **queue**: a requeued job, from the requeue to its agents running again.
//! - **running**: only without any step reading: the workers ran, and training, rework and
//!   start cannot be told apart.
//!
//! The wall time runs from a submission's first start (its agents' `started`) to its end
//! (its last attempt's end; now while it runs); the time between two submissions
//! (`herd submit --resume`) is no part of it.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::timeline::{Action, Entry, Event, JobRef};

pub mod advice;
mod faults;
mod words;

pub use faults::{Fault, Phase};
use words::secs;
pub use words::{duration, percent};

/// One part of the wall time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Part {
    /// Steps computed for the first time.
    Training,
    /// Steps computed again after a resume from an older checkpoint.
    Rework,
    /// A fault herd had not noticed yet: last progress → herd's decision.
    Detection,
    /// Stop signal or fault → workers gone (the checkpoint on the way out included).
    Stop,
    /// Attempt begins → first step reading.
    Start,
    /// Workers running, without step readings to split training, rework and start.
    Running,
    /// Requeued → running again.
    Queue,
    /// What no other part claims.
    Other,
}

impl Part {
    /// Every part, the first one winning a moment two claim.
    pub const ALL: [Part; 8] = [
        Part::Training,
        Part::Rework,
        Part::Detection,
        Part::Stop,
        Part::Start,
        Part::Running,
        Part::Queue,
        Part::Other,
    ];

    /// Its name: `training`, `rework`, …
    pub fn name(self) -> &'static str {
        match self {
            Part::Training => "training",
            Part::Rework => "rework",
            Part::Detection => "detection",
            Part::Stop => "stop",
            Part::Start => "start",
            Part::Running => "running",
            Part::Queue => "queue",
            Part::Other => "other",
        }
    }

    fn index(self) -> usize {
        Part::ALL.iter().position(|p| *p == self).unwrap_or(7)
    }
}

/// Milliseconds of each part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts([u64; 8]);

impl Parts {
    /// The milliseconds of `part`.
    pub fn get(&self, part: Part) -> u64 {
        self.0[part.index()]
    }

    fn add(&mut self, part: Part, ms: u64) {
        self.0[part.index()] += ms;
    }

    /// Their sum.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `{"training": seconds, …}`, every part.
    pub fn json(&self) -> Value {
        let mut m = Map::new();
        for p in Part::ALL {
            m.insert(p.name().into(), json!(secs(self.get(p))));
        }
        Value::Object(m)
    }
}

/// A span of time one part has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The part.
    pub part: Part,
    /// From (ms since the epoch).
    pub from_ms: u64,
    /// To (ms since the epoch).
    pub to_ms: u64,
}

/// One attempt's time: from its beginning to the next attempt's (the queue after a requeue
/// included), or to the end.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptTime {
    /// K of `logs/attempt-K`.
    pub attempt: u32,
    /// Its beginning (ms since the epoch).
    pub from_ms: u64,
    /// Its end (ms since the epoch).
    pub to_ms: u64,
    /// Its time in order, one span after the other, neighbours of one part merged.
    pub spans: Vec<Span>,
    /// Its time by part.
    pub parts: Parts,
    /// Steps it computed again.
    pub rework_steps: u64,
    /// How it ended: `finished`, `failed`, `requeue`, `restart`, `replace`, each with its
    /// cause when known (`requeue: time limit`); `running` while it runs.
    pub ended: String,
}

/// An experiment's time ([`account`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Accounting {
    /// The wall time's spans: one per submission that started (ms since the epoch).
    pub segments: Vec<(u64, u64)>,
    /// The wall time by part.
    pub parts: Parts,
    /// Each attempt's time.
    pub attempts: Vec<AttemptTime>,
    /// Steps computed again, over the experiment.
    pub rework_steps: u64,
    /// Whether step readings split training, rework and start (else: `running`).
    pub split: bool,
    /// Whether the job still runs (the end is now).
    pub running: bool,
    /// Each fault that ended an attempt, and where its cost went.
    pub faults: Vec<Fault>,
    /// What the job's timed saves and its faults say about its checkpoint interval; set
    /// by the caller that read the saves ([`advice::advise`]).
    pub advice: Option<advice::Advice>,
}

/// One attempt's step readings, of one rank: `(ms since the epoch, step)` in the order
/// they were read.
pub type Steps = Vec<(u64, u64)>;

impl Accounting {
    /// The wall time, ms.
    pub fn wall_ms(&self) -> u64 {
        self.segments.iter().map(|(a, b)| b - a).sum()
    }

    /// The allocated time: the wall time but the queue, ms.
    pub fn allocated_ms(&self) -> u64 {
        self.wall_ms().saturating_sub(self.parts.get(Part::Queue))
    }

    /// Training over the wall time (`None` without step readings or wall time).
    pub fn goodput(&self) -> Option<f64> {
        ratio(self.split, self.parts.get(Part::Training), self.wall_ms())
    }

    /// Training over the allocated time.
    pub fn goodput_allocated(&self) -> Option<f64> {
        ratio(
            self.split,
            self.parts.get(Part::Training),
            self.allocated_ms(),
        )
    }

    /// One line: `goodput 77.5 % of 3:52 (82.1 % of the 3:39 allocated)`, `so far` while
    /// it runs; without step readings, what is known.
    pub fn summary(&self) -> String {
        let so_far = if self.running { " so far" } else { "" };
        match (self.goodput(), self.goodput_allocated()) {
            (Some(g), Some(a)) => format!(
                "goodput {}{so_far} of {} ({} of the {} allocated)",
                percent(g),
                duration(self.wall_ms()),
                percent(a),
                duration(self.allocated_ms())
            ),
            _ if !self.split => format!(
                "goodput unknown: no step readings to split training, rework and start \
                 ({} of {} running{so_far})",
                duration(self.parts.get(Part::Running)),
                duration(self.wall_ms())
            ),
            _ => format!("goodput unknown: no wall time yet{so_far}"),
        }
    }

    /// The parts with time, in order: `training 3:00 · rework 5.1 s (17 steps) · …`.
    pub fn split_line(&self) -> String {
        parts_line(&self.parts, self.rework_steps)
    }

    /// `2 faults, 1:00 from fault to training again in all`, or `None` without a fault.
    pub fn faults_line(&self) -> Option<String> {
        if self.faults.is_empty() {
            return None;
        }
        let n = self.faults.len();
        let costs: Vec<u64> = self.faults.iter().filter_map(Fault::cost_ms).collect();
        let mut s = format!("{n} fault{}", if n == 1 { "" } else { "s" });
        if !costs.is_empty() {
            s.push_str(&format!(
                ", {} from fault to training again{}",
                duration(costs.iter().sum()),
                if costs.len() == 1 { "" } else { " in all" }
            ));
            if costs.len() < n {
                s.push_str(&format!(" ({} of them trained again)", costs.len()));
            }
        }
        Some(s)
    }

    /// Everything, for `--json`: seconds, ratios, each attempt.
    pub fn json(&self) -> Value {
        json!({
            "wall_s": secs(self.wall_ms()),
            "allocated_s": secs(self.allocated_ms()),
            "goodput": self.goodput(),
            "goodput_allocated": self.goodput_allocated(),
            "split": self.split,
            "running": self.running,
            "parts": self.parts.json(),
            "rework_steps": self.rework_steps,
            "faults": self.faults.iter().map(Fault::json).collect::<Vec<_>>(),
            "checkpoint_advice": self.advice.as_ref().map(advice::Advice::json),
            "attempts": self.attempts.iter().map(|a| json!({
                "attempt": a.attempt,
                "from": crate::timeline::rfc3339(a.from_ms),
                "to": crate::timeline::rfc3339(a.to_ms),
                "parts": a.parts.json(),
                "rework_steps": a.rework_steps,
                "ended": a.ended,
            })).collect::<Vec<_>>(),
        })
    }
}

/// `training 3:00 · rework 5.1 s (17 steps) · start 12.0 s`: the parts with time.
pub fn parts_line(parts: &Parts, rework_steps: u64) -> String {
    Part::ALL
        .iter()
        .filter(|p| parts.get(**p) > 0 || **p == Part::Training && parts.get(Part::Running) == 0)
        .map(|p| {
            let mut s = format!("{} {}", p.name(), duration(parts.get(*p)));
            if *p == Part::Rework {
                s.push_str(&format!(
                    " ({rework_steps} step{})",
                    if rework_steps == 1 { "" } else { "s" }
                ));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

fn ratio(split: bool, part: u64, of: u64) -> Option<f64> {
    (split && of > 0).then(|| part as f64 / of as f64)
}

fn job_of(id: Option<&JobRef>) -> Option<String> {
    id.map(|j| j.as_str().to_owned())
}

fn cause_words(cause: &str) -> String {
    cause.replace('_', " ")
}

/// What the timeline says of one attempt.
#[derive(Debug, Default)]
struct Seen {
    /// `attempt_started`.
    started: u64,
    /// The allocation it is the first attempt of: that allocation's start.
    alloc_start: Option<u64>,
    /// The stop's start: warning, failure, hang, cancel.
    stop: Option<u64>,
    /// A fault herd had to notice (hang, lost node), with the silent rank's last sign of
    /// life when the event says it.
    detect: Option<(u64, Option<u64>)>,
    /// Workers gone: `teardown`, else `finished`.
    gone: Option<u64>,
    /// A requeue of it: when.
    requeue: Option<u64>,
    /// How it ended, in words.
    ended: Option<String>,
    /// The submission it belongs to.
    submission: usize,
    /// The first sign of a fault herd saw: a worker's exit, a hang, a warning, a signal
    /// that ends the job, a failure.
    noticed: Option<u64>,
    /// herd's decision on it: the failure, the warning, the ending signal.
    decided: Option<u64>,
    /// The fault's kind: a failure's (`worker_failure`, `node_failure`, `hang`, …), a
    /// warning's cause (`time_limit`, `preemption`), an ending signal's cause.
    kind: Option<String>,
}

/// One submission's span of wall time, as the timeline says it.
#[derive(Debug, Default)]
struct Submission {
    /// Its job id.
    job: Option<String>,
    /// Its agents' first `started`.
    from: Option<u64>,
    /// Its end: its last attempt's workers gone, its `finished` or `cancelled`.
    to: Option<u64>,
}

/// The timeline read for the accounting: each attempt, each submission.
#[derive(Debug, Default)]
struct Walk {
    seen: BTreeMap<u32, Seen>,
    subs: Vec<Submission>,
    /// The last submission got its `finished` or `cancelled`.
    closed: bool,
    /// The newest event's time.
    last: u64,
}

impl Walk {
    fn read(events: &[Entry]) -> Walk {
        let mut w = Walk::default();
        let mut alloc_start: Option<u64> = None;
        let mut current: Option<u32> = None;
        for e in events {
            let Some(t) = e.unix_ms else { continue };
            match &e.event {
                Event::Queued(q) => {
                    w.queued(job_of(q.job_id.as_ref()));
                    continue;
                }
                Event::Started(s) => {
                    w.started(job_of(s.job_id.as_ref()), t);
                    alloc_start = Some(t);
                    continue;
                }
                // Written by `herd status` whenever it learns the end: no moment of the job.
                Event::Ended(_) => continue,
                _ => {}
            }
            if w.subs.is_empty() {
                w.subs.push(Submission::default());
            }
            let k = e.event.attempt().or(current);
            match &e.event {
                Event::AttemptStarted(a) => {
                    current = Some(a.attempt);
                    let s = w.seen.entry(a.attempt).or_default();
                    s.started = t;
                    s.alloc_start = alloc_start.take();
                    s.submission = w.subs.len() - 1;
                }
                Event::Restart(_) => {
                    // Written with the new attempt's number: the one before it ended so.
                    let before = k.and_then(|k| k.checked_sub(1));
                    if let Some(p) = before.and_then(|p| w.seen.get_mut(&p)) {
                        p.ended = Some(then_words(p.ended.take(), "restart"));
                    }
                }
                event => {
                    if let Some(s) = k.and_then(|k| w.seen.get_mut(&k)) {
                        s.on(event, t);
                    }
                }
            }
            w.closed |= matches!(e.event, Event::Finished(_) | Event::Cancelled(_));
            if w.closed || matches!(e.event, Event::Teardown(_)) {
                let sub = w.subs.last_mut().expect("one submission");
                sub.to = Some(sub.to.map_or(t, |to| to.max(t)));
            }
            w.last = w.last.max(t);
        }
        w
    }

    /// `queued` of job `job`: a new submission, unless the agents' `started` of the same
    /// job came first (`herd submit` writes it once sbatch answered).
    fn queued(&mut self, job: Option<String>) {
        if !self
            .subs
            .last()
            .is_some_and(|s| s.job.is_some() && s.job == job)
        {
            self.subs.push(Submission {
                job,
                ..Submission::default()
            });
            self.closed = false;
        }
    }

    /// `started` of job `job` at `t`: an allocation of the current submission, or of a new
    /// one when the job id changed.
    fn started(&mut self, job: Option<String>, t: u64) {
        let new = self
            .subs
            .last()
            .is_none_or(|s| s.job.is_some() && job.is_some() && s.job != job);
        if new {
            self.subs.push(Submission::default());
            self.closed = false;
        }
        let s = self.subs.last_mut().expect("one submission");
        s.from.get_or_insert(t);
        if s.job.is_none() {
            s.job = job;
        }
    }
}

impl Seen {
    /// Event `event`, at `t`, of this attempt.
    fn on(&mut self, event: &Event, t: u64) {
        let cause = |c: &str| Some(c.to_owned()).filter(|c| !c.is_empty());
        match event {
            Event::Warning(w) => {
                self.stop.get_or_insert(t);
                self.noticed.get_or_insert(t);
                self.decided.get_or_insert(t);
                if self.kind.is_none() {
                    self.kind = cause(&w.cause);
                }
            }
            Event::Hang(h) => {
                self.stop.get_or_insert(t);
                self.noticed.get_or_insert(t);
                if self.kind.is_none() {
                    self.kind = Some("hang".to_owned());
                }
                let silent = t.saturating_sub((h.silent_s * 1000.0) as u64);
                self.detect.get_or_insert((t, Some(silent)));
            }
            Event::WorkerExit(w) if w.during.is_none() && self.decided.is_none() => {
                self.noticed.get_or_insert(t);
            }
            Event::Failed(f) => {
                self.stop.get_or_insert(t);
                self.noticed.get_or_insert(t);
                self.decided.get_or_insert(t);
                if self.kind.is_none() {
                    self.kind = f.kind.clone().or_else(|| Some("failure".to_owned()));
                }
                if f.kind.as_deref() == Some("node_failure") {
                    self.detect.get_or_insert((t, None));
                }
                if self.ended.is_none() {
                    self.ended = cause(&f.cause).map(|c| format!("failed: {c}"));
                }
            }
            Event::Signal(s) if s.action == Action::Terminate => {
                self.stop.get_or_insert(t);
                self.noticed.get_or_insert(t);
                self.decided.get_or_insert(t);
                if self.kind.is_none() {
                    self.kind = s.cause.clone().or_else(|| Some(s.signal.clone()));
                }
            }
            Event::Teardown(_) => self.gone = Some(t),
            Event::Finished(f) => {
                self.gone.get_or_insert(t);
                self.ended = Some(match (f.ok, f.cause.as_deref(), &self.ended) {
                    (true, _, _) => "finished".to_owned(),
                    (false, _, Some(e)) if e.starts_with("failed") => e.clone(),
                    (false, Some(c), _) => format!("failed: {}", cause_words(c)),
                    (false, None, _) => "failed".to_owned(),
                });
            }
            Event::Requeue(r) => {
                self.requeue = Some(t);
                self.ended = Some(match cause(&r.cause) {
                    Some(c) => format!("requeue: {}", cause_words(&c)),
                    None => "requeue".to_owned(),
                });
            }
            Event::Replace(_) => self.ended = Some(then_words(self.ended.take(), "replace")),
            _ => {}
        }
    }
}

/// The spans that claim an attempt's time, `from..to`, neighbours of one part merged.
struct Claims {
    from: u64,
    to: u64,
    spans: Vec<Span>,
}

impl Claims {
    fn claim(&mut self, part: Part, a: u64, b: u64) {
        let (a, b) = (a.max(self.from), b.min(self.to));
        if a >= b {
            return;
        }
        match self.spans.last_mut() {
            Some(last) if last.part == part && last.to_ms == a => last.to_ms = b,
            _ => self.spans.push(Span {
                part,
                from_ms: a,
                to_ms: b,
            }),
        }
    }

    /// Training and rework between the readings, `best` the highest step of the attempts
    /// before.
    fn steps(&mut self, readings: &[(u64, u64)], best: Option<u64>) {
        for w in readings.windows(2) {
            let ((t0, s0), (t1, s1)) = (w[0], w[1]);
            match best {
                Some(m) if s1 <= m => self.claim(Part::Rework, t0, t1),
                Some(m) if s0 < m && s1 > s0 => {
                    let share = (m - s0) as f64 / (s1 - s0) as f64;
                    let cut = t0 + ((t1 - t0) as f64 * share) as u64;
                    self.claim(Part::Rework, t0, cut);
                    self.claim(Part::Training, cut, t1);
                }
                _ => self.claim(Part::Training, t0, t1),
            }
        }
    }
}

/// The steps an attempt computed again: from its first reading's step less one stride of
/// its readings to the highest step `best` of the attempts before.
fn rework_steps(readings: &[(u64, u64)], best: Option<u64>) -> u64 {
    let (Some(m), Some(&(_, first))) = (best, readings.first()) else {
        return 0;
    };
    if first > m {
        return 0;
    }
    let top = readings.iter().map(|r| r.1).max().unwrap_or(first);
    let stride = readings
        .windows(2)
        .filter_map(|w| w[1].1.checked_sub(w[0].1).filter(|d| *d > 0))
        .min()
        .unwrap_or(1);
    let low = i128::from(first) - i128::from(stride);
    u64::try_from((i128::from(top.min(m)) - low).max(0)).unwrap_or(0)
}

/// The time of an experiment from its timeline's `events` (in order) and, per attempt,
/// one rank's step readings; `now_ms` ends a job that still runs.
pub fn account(events: &[Entry], steps: &BTreeMap<u32, Steps>, now_ms: u64) -> Accounting {
    let mut w = Walk::read(events);
    let running = !w.closed && !w.subs.is_empty() && !ended_by_scheduler(events);
    let last = w.last;
    if let Some(s) = w.subs.last_mut() {
        if running {
            s.to = Some(now_ms.max(s.to.unwrap_or(0)));
        } else if s.to.is_none() {
            s.to = Some(last);
        }
    }
    let segments: Vec<(u64, u64)> = w
        .subs
        .iter()
        .map(|s| {
            let to = s.to.unwrap_or(now_ms);
            let from = s.from.unwrap_or(to);
            (from, to.max(from))
        })
        .collect();
    let split = steps.values().any(|s| !s.is_empty());
    let seen = &w.seen;
    let numbers: Vec<u32> = seen.keys().copied().collect();
    let sub_end = |sub: usize| segments.get(sub).map_or(now_ms, |seg| seg.1);
    // An attempt begins with its allocation, or where the one before it ended.
    let froms: Vec<u64> = numbers
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let s = &seen[k];
            let from = match s.alloc_start {
                Some(a) => a.min(s.started),
                None => i
                    .checked_sub(1)
                    .and_then(|p| seen[&numbers[p]].gone)
                    .map_or(s.started, |g| g.min(s.started)),
            };
            from.min(sub_end(s.submission))
        })
        .collect();
    let mut best_before: Option<u64> = None;
    let mut attempts = Vec::new();
    for (i, &k) in numbers.iter().enumerate() {
        let s = &seen[&k];
        let from = froms[i];
        let next = numbers.get(i + 1).map(|n| &seen[n]);
        let to = match next {
            Some(n) if n.submission == s.submission => froms[i + 1],
            _ => sub_end(s.submission),
        }
        .max(from);
        let gone = s.gone.unwrap_or(to).clamp(from, to);
        let stop = s.stop.map(|t| t.clamp(from, gone));
        let readings: &[(u64, u64)] = steps.get(&k).map_or(&[], Vec::as_slice);
        let mut c = Claims {
            from,
            to,
            spans: Vec::new(),
        };
        match (readings.first(), readings.last()) {
            (Some(&(first_t, _)), Some(&(last_t, _))) => {
                c.claim(Part::Start, from, first_t);
                c.steps(readings, best_before);
                if let Some((decided, silent_since)) = s.detect {
                    let fault = silent_since.unwrap_or(last_t).max(last_t.min(decided));
                    c.claim(Part::Detection, fault, decided);
                }
            }
            _ => {
                let part = if split { Part::Start } else { Part::Running };
                c.claim(part, from, stop.unwrap_or(gone));
            }
        }
        if let Some(t) = stop {
            c.claim(Part::Stop, t, gone);
        }
        if next.is_some_and(|n| n.submission == s.submission && n.alloc_start.is_some()) {
            c.claim(Part::Queue, s.requeue.unwrap_or(gone), to);
        }
        let rework_steps = rework_steps(readings, best_before);
        best_before = best_before.max(readings.iter().map(|r| r.1).max());
        let spans = paint(from, to, &c.spans);
        let mut parts = Parts::default();
        for sp in &spans {
            parts.add(sp.part, sp.to_ms - sp.from_ms);
        }
        let ended = s.ended.clone().unwrap_or_else(|| {
            let words = if running && next.is_none() {
                "running"
            } else {
                "—"
            };
            words.to_owned()
        });
        attempts.push(AttemptTime {
            attempt: k,
            from_ms: from,
            to_ms: to,
            spans,
            parts,
            rework_steps,
            ended,
        });
    }
    // The whole: each attempt's parts, and `other` for wall time outside every attempt (an
    // allocation whose agents never started an attempt).
    let mut parts = Parts::default();
    for a in &attempts {
        for p in Part::ALL {
            parts.add(p, a.parts.get(p));
        }
    }
    let wall: u64 = segments.iter().map(|(a, b)| b - a).sum();
    parts.add(Part::Other, wall.saturating_sub(parts.total()));
    let faults = faults(seen, &numbers, &attempts, steps);
    Accounting {
        segments,
        parts,
        rework_steps: attempts.iter().map(|a| a.rework_steps).sum(),
        attempts,
        split,
        running,
        faults,
        advice: None,
    }
}

/// Each attempt a fault ended, with its phases: `seen` by attempt number, `numbers` their
/// order, `attempts` the same order's accounted time, `steps` the readings.
fn faults(
    seen: &BTreeMap<u32, Seen>,
    numbers: &[u32],
    attempts: &[AttemptTime],
    steps: &BTreeMap<u32, Steps>,
) -> Vec<Fault> {
    let mut out = Vec::new();
    let top = |k: &u32| steps.get(k).and_then(|r| r.iter().map(|r| r.1).max());
    let mut best: Option<u64> = None;
    for (i, &k) in numbers.iter().enumerate() {
        best = best.max(top(&k));
        let s = &seen[&k];
        // A hang is decided by the `failed` after it (older timelines: by itself).
        let decided = s.decided.or(s.detect.map(|d| d.0));
        let (Some(decided), Some(kind)) = (decided, s.kind.as_deref()) else {
            continue;
        };
        let next = numbers
            .get(i + 1)
            .filter(|n| seen[n].submission == s.submission);
        let then = match (next, s.ended.as_deref()) {
            (Some(_), Some(e)) if e.starts_with("replace") => "replace",
            (Some(_), _) if s.requeue.is_some() => "requeue",
            (Some(_), _) => "restart",
            (None, Some(e)) if e.starts_with("requeue") => "requeue",
            (None, _) => "failed",
        };
        // A job cancelled, or a stop that ended it well, is no fault.
        if kind == "cancelled" || (next.is_none() && s.ended.as_deref() == Some("finished")) {
            continue;
        }
        let noticed = s.noticed.unwrap_or(decided).min(decided);
        let readings: &[(u64, u64)] = steps.get(&k).map_or(&[], Vec::as_slice);
        let last_before = readings.iter().map(|r| r.0).filter(|&t| t <= noticed).max();
        let at = match s.detect {
            // A hang: the silent rank's last sign of life, or the last step reading.
            Some((_, Some(silent))) => silent.max(last_before.unwrap_or(0)).min(noticed),
            // A lost node: its attempt's last step reading before the verdict.
            Some((_, None)) => last_before.unwrap_or(noticed),
            None => noticed,
        };
        let mut ends: [Option<u64>; 6] = [Some(noticed), Some(decided), None, None, None, None];
        ends[2] = s.gone.map(|g| g.max(decided));
        if let (Some(gone), Some(n)) = (ends[2], next) {
            let ns = &seen[n];
            ends[3] = Some(ns.started.max(gone));
            let next_readings: &[(u64, u64)] = steps.get(n).map_or(&[], Vec::as_slice);
            if let (Some(relaunched), Some(&(first, _))) = (ends[3], next_readings.first()) {
                ends[4] = Some(first.max(relaunched));
                // Training again: where the next attempt's rework ends, once it computes
                // a step beyond every earlier attempt's.
                if top(n) > best {
                    let redone_to = attempts[i + 1]
                        .spans
                        .iter()
                        .filter(|sp| sp.part == Part::Rework)
                        .map(|sp| sp.to_ms)
                        .max()
                        .unwrap_or(first);
                    ends[5] = Some(redone_to.max(first.max(relaunched)));
                }
            }
        }
        out.push(Fault {
            attempt: k,
            kind: cause_words(kind),
            then: then.to_owned(),
            at_ms: at.min(noticed),
            ends_ms: ends,
            redone_steps: next.map_or(0, |_| attempts[i + 1].rework_steps),
        });
    }
    out
}

/// How an attempt ended when the next one took over (`restart`, `replace`), with the
/// failure's cause: `restart: CAUSE`, not `restart: failed: CAUSE`.
fn then_words(before: Option<String>, then: &str) -> String {
    match before {
        Some(b) => match b.strip_prefix("failed: ") {
            Some(cause) => format!("{then}: {cause}"),
            None => format!("{then}: {b}"),
        },
        None => then.to_owned(),
    }
}

/// Whether the scheduler's end of the current job is in the timeline (`ended` after the
/// last `started`).
fn ended_by_scheduler(events: &[Entry]) -> bool {
    let last_start = events
        .iter()
        .rposition(|e| matches!(e.event, Event::Started(_)));
    let last_end = events
        .iter()
        .rposition(|e| matches!(e.event, Event::Ended(_)));
    matches!((last_start, last_end), (Some(s), Some(e)) if e > s)
        || last_start.is_none() && last_end.is_some()
}

/// `from..to` as consecutive spans: each moment to the first part in [`Part::ALL`] that
/// claims it, else `other`; neighbours of one part merged.
fn paint(from: u64, to: u64, claims: &[Span]) -> Vec<Span> {
    let mut cuts: Vec<u64> = vec![from, to];
    for c in claims {
        cuts.push(c.from_ms);
        cuts.push(c.to_ms);
    }
    cuts.sort_unstable();
    cuts.dedup();
    let mut spans: Vec<Span> = Vec::new();
    for w in cuts.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a < from || b > to || a >= b {
            continue;
        }
        let part = claims
            .iter()
            .filter(|c| c.from_ms <= a && b <= c.to_ms)
            .map(|c| c.part)
            .min()
            .unwrap_or(Part::Other);
        match spans.last_mut() {
            Some(last) if last.part == part && last.to_ms == a => last.to_ms = b,
            _ => spans.push(Span {
                part,
                from_ms: a,
                to_ms: b,
            }),
        }
    }
    spans
}

#[cfg(test)]
mod tests;
