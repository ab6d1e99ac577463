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

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// `77.5 %`.
pub fn percent(r: f64) -> String {
    format!("{:.1} %", r * 100.0)
}

/// A duration as people read it: `4.2 s` under a minute, else `3:52` or `1:02:03`.
pub fn duration(ms: u64) -> String {
    if ms < 60_000 {
        return format!("{:.1} s", ms as f64 / 1000.0);
    }
    let s = (ms + 500) / 1000;
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{sec:02}")
    } else {
        format!("{m}:{sec:02}")
    }
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
            Event::Warning(_) => {
                self.stop.get_or_insert(t);
            }
            Event::Hang(h) => {
                self.stop.get_or_insert(t);
                let silent = t.saturating_sub((h.silent_s * 1000.0) as u64);
                self.detect.get_or_insert((t, Some(silent)));
            }
            Event::Failed(f) => {
                self.stop.get_or_insert(t);
                if f.kind.as_deref() == Some("node_failure") {
                    self.detect.get_or_insert((t, None));
                }
                if self.ended.is_none() {
                    self.ended = cause(&f.cause).map(|c| format!("failed: {c}"));
                }
            }
            Event::Signal(s) if s.action == Action::Terminate => {
                self.stop.get_or_insert(t);
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
    Accounting {
        segments,
        parts,
        rework_steps: attempts.iter().map(|a| a.rework_steps).sum(),
        attempts,
        split,
        running,
    }
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
