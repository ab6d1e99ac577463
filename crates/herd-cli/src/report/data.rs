//! One experiment as the report reads it: every attempt's per-rank readings
//! (`logs/attempt-K/rank-R.metrics`) and GPU samples ([`super::gpus`]), the timeline, the
//! manifest's runs and the failure report.

use std::collections::BTreeSet;

use herd_exp::failure::FailureReport;
use herd_exp::goodput::Accounting;
use herd_exp::logs::{Began, History};
use herd_exp::timeline::{Entry, Event};
use herd_exp::Experiment;
use herd_metrics::store::{self, Series};
use serde_json::Value;

use super::gpus::{self, Gpus};
use crate::CliError;

/// One attempt (`logs/attempt-K`) and its ranks' readings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AttemptData {
    /// K.
    pub number: u32,
    /// Each rank's readings, in rank order.
    pub ranks: Vec<(u32, Series)>,
}

/// The latest failure report, as the logs folder has it.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The report.
    Report(Box<FailureReport>),
    /// The file is there but is no report this herd reads (why).
    Unreadable(String),
}

/// Everything `herd report` shows of one experiment.
#[derive(Debug, Clone)]
pub struct ExpData {
    /// The experiment's name.
    pub name: String,
    /// Nodes and workers of the newest rendezvous (`None`: the agents never met).
    pub size: Option<(u32, u32)>,
    /// Whether its workers are GPUs: its plan asked for GPUs ([`on_gpus`]).
    pub on_gpus: bool,
    /// Every attempt with a log folder, in order.
    pub attempts: Vec<AttemptData>,
    /// The timeline's events, in order.
    pub events: Vec<Entry>,
    /// What the timeline says about each attempt.
    pub history: History,
    /// The manifest's runs of every submission, in order (one per attempt that ended).
    pub runs: Vec<herd_exp::Run>,
    /// The latest failure report, when there is one.
    pub failure: Option<Failure>,
    /// Where its time went ([`crate::goodput`]).
    pub goodput: Accounting,
    /// Its GPUs, from every attempt's samples (empty without samples).
    pub gpus: Gpus,
}

/// Nodes and workers of the newest `rendezvous` event (the agents' count, not the plan's:
/// a run with a node left out counts what ran).
pub fn size(events: &[Entry]) -> Option<(u32, u32)> {
    let r = events.iter().rev().find_map(|e| match &e.event {
        Event::Rendezvous(r) => Some(r),
        _ => None,
    })?;
    let nodes = r
        .nodes
        .as_ref()
        .map_or(1, |n| u32::try_from(n.len()).unwrap_or(1));
    // A line without its world size (0) says nothing of the size.
    Some((nodes, r.world_size)).filter(|_| r.world_size > 0)
}

/// Whether a manifest's plan asked for GPUs (`gpus_per_node` or `gpus` above 0); a plan
/// this herd cannot read counts as none, so its workers are called workers.
pub fn on_gpus(plan: &Value) -> bool {
    ["gpus_per_node", "gpus"]
        .iter()
        .any(|k| plan.get(k).and_then(Value::as_u64).is_some_and(|n| n > 0))
}

/// Reads `exp`. A timeline or manifest that cannot be read counts as empty (the report
/// says what it can); metrics that cannot be read are an error.
pub fn load(exp: &Experiment) -> Result<ExpData, CliError> {
    let events = herd_exp::timeline::read(exp.dir()).unwrap_or_default();
    let history = History::from_events(&events);
    let logs = exp.paths().logs();
    let mut attempts = Vec::new();
    for k in logs.attempts().unwrap_or_default() {
        let dir = logs.attempt(k);
        let ranks = store::read_attempt(dir.path()).map_err(|e| CliError::Input(e.to_string()))?;
        attempts.push(AttemptData { number: k, ranks });
    }
    let numbers: Vec<u32> = attempts.iter().map(|a| a.number).collect();
    let gpus = gpus::load(&logs, &numbers, &history, &events)
        .map_err(|e| CliError::Input(format!("cannot read GPU samples: {e}")))?;
    let manifest = exp.manifest().ok();
    let on_gpus = manifest.as_ref().is_some_and(|m| on_gpus(&m.plan));
    let runs = manifest
        .map(|m| m.submissions.into_iter().flat_map(|a| a.runs).collect())
        .unwrap_or_default();
    let path = logs.failure_report();
    let failure = match FailureReport::read(&path) {
        Ok(report) => report.map(|r| Failure::Report(Box::new(r))),
        Err(e) => Some(Failure::Unreadable(format!(
            "{}: {e}",
            relative_to(&path, exp.dir()).display()
        ))),
    };
    let steps = attempts
        .iter()
        .map(|a| {
            let steps = crate::goodput::first_with_steps(a.ranks.iter().map(|(_, s)| s));
            (a.number, steps)
        })
        .collect();
    let mut goodput = herd_exp::goodput::account(&events, &steps, herd_exp::timeline::now().1);
    let saves = herd_exp::goodput::advice::read_saves(&logs);
    goodput.advice =
        herd_exp::goodput::advice::advise(&saves, &goodput.faults, goodput.allocated_ms());
    Ok(ExpData {
        goodput,
        gpus,
        name: exp.name().to_owned(),
        size: size(&events),
        on_gpus,
        attempts,
        events,
        history,
        runs,
        failure,
    })
}

/// `path` inside `dir` as relative to it (`logs/failure.json`), else whole.
fn relative_to<'p>(path: &'p std::path::Path, dir: &std::path::Path) -> &'p std::path::Path {
    path.strip_prefix(dir).unwrap_or(path)
}

/// The word for how an attempt began, as its marker in the plots says it: `restart`,
/// `requeue`, `resume`, `first` or `attempt` (the timeline does not say).
pub fn began_word(began: &Began) -> &'static str {
    match began {
        Began::First => "first",
        Began::Restart(_) => "restart",
        Began::Requeue(_) => "requeue",
        Began::Resume(_) => "resume",
        Began::Unknown => "attempt",
    }
}

/// One line of an experiment's attempt table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRow {
    /// K.
    pub number: u32,
    /// How it began: `first`, `restart 1`, `requeue (preemption)`, `resume (submission 2)`.
    pub began: String,
    /// When its workers started (RFC 3339), when known.
    pub started: Option<String>,
    /// When they were gone, when known.
    pub ended: Option<String>,
    /// How it ended: `restart`, `requeue`, `finished`, `failed`, each with its cause when
    /// there is one; `—` while running or when nothing says.
    pub how: String,
    /// The hosts it ran on.
    pub nodes: Vec<String>,
}

/// `from`'s readings after `to`'s; a column one of them lacks is NaN in its readings.
fn append(to: &mut Series, from: &Series) {
    let before = to.len();
    to.time_ms.extend_from_slice(&from.time_ms);
    to.step.extend_from_slice(&from.step);
    for (name, values) in &from.columns {
        match to.columns.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => v.extend_from_slice(values),
            None => {
                let mut v = vec![f64::NAN; before];
                v.extend_from_slice(values);
                to.columns.push((name.clone(), v));
            }
        }
    }
    let total = to.len();
    for (_, v) in &mut to.columns {
        v.resize(total, f64::NAN);
    }
}

fn event_time(e: &Entry) -> Option<String> {
    e.time.clone()
}

impl ExpData {
    /// Every reading of every rank of every attempt.
    pub fn all_series(&self) -> Vec<&Series> {
        self.attempts
            .iter()
            .flat_map(|a| a.ranks.iter().map(|(_, s)| s))
            .collect()
    }

    /// Each rank's readings over every attempt, in attempt order: one series a rank, in
    /// rank order (a restarted rank is one rank, not one more: its rate counts once).
    pub fn rank_series(&self) -> Vec<Series> {
        let mut by_rank: std::collections::BTreeMap<u32, Series> = Default::default();
        for a in &self.attempts {
            for (rank, s) in &a.ranks {
                append(by_rank.entry(*rank).or_default(), s);
            }
        }
        by_rank.into_values().collect()
    }

    /// The attempt table, from the timeline and the manifest's runs: every attempt that has
    /// a log folder, an `attempt_started` event or a run.
    pub fn attempt_rows(&self) -> Vec<AttemptRow> {
        let mut numbers: BTreeSet<u32> = self.attempts.iter().map(|a| a.number).collect();
        numbers.extend(self.history.attempts.keys().copied());
        numbers.extend(self.runs.iter().map(|r| r.attempt));
        let ms = |s: u64| herd_exp::timeline::rfc3339(s.saturating_mul(1000));
        numbers
            .into_iter()
            .map(|k| {
                let info = self.history.attempts.get(&k);
                let run = self.runs.iter().rev().find(|r| r.attempt == k);
                let began = match info.map(|i| &i.began) {
                    Some(Began::Restart(n)) => format!("restart {n}"),
                    Some(Began::Requeue(Some(c))) => format!("requeue ({c})"),
                    Some(b @ Began::Requeue(None)) => began_word(b).to_owned(),
                    Some(Began::Resume(n)) => format!("resume (submission {n})"),
                    Some(b) => began_word(b).to_owned(),
                    None => "—".to_owned(),
                };
                let mine = || {
                    self.events
                        .iter()
                        .filter(move |e| e.event.attempt() == Some(k))
                };
                let last = |of: fn(&Event) -> bool| mine().rfind(|e| of(&e.event));
                let started = last(|e| matches!(e, Event::AttemptStarted(_)))
                    .and_then(event_time)
                    .or_else(|| run.map(|r| ms(r.started_unix)));
                let ends: [fn(&Event) -> bool; 3] = [
                    |e| matches!(e, Event::Finished(_)),
                    |e| matches!(e, Event::Teardown(_)),
                    |e| matches!(e, Event::Failed(_)),
                ];
                let ended = run
                    .map(|r| ms(r.ended_unix))
                    .or_else(|| ends.iter().find_map(|&of| last(of)).and_then(event_time));
                let with_cause = |word: &str, cause: Option<&str>| match cause {
                    Some(c) => format!("{word} ({c})"),
                    None => word.to_owned(),
                };
                let how = match run {
                    Some(r) => match r.then.as_str() {
                        "end" if r.cause.is_none() => "finished".to_owned(),
                        "end" => with_cause("failed", r.cause.as_deref()),
                        then => with_cause(then, r.cause.as_deref()),
                    },
                    None => {
                        let finished = mine().rev().find_map(|e| match &e.event {
                            Event::Finished(f) => Some(f),
                            _ => None,
                        });
                        let failed = mine().rev().find_map(|e| match &e.event {
                            Event::Failed(f) => Some(f),
                            _ => None,
                        });
                        match (finished, failed) {
                            (Some(f), _) if f.ok => "finished".to_owned(),
                            (Some(f), _) => with_cause("failed", f.cause.as_deref()),
                            (None, Some(f)) => with_cause("failed", f.kind.as_deref()),
                            (None, None) => "—".to_owned(),
                        }
                    }
                };
                let nodes = info
                    .and_then(|i| i.nodes.as_ref())
                    .map(|n| n.iter().map(|n| n.host.clone()).collect())
                    .or_else(|| run.map(|r| r.nodes.clone()))
                    .unwrap_or_default();
                AttemptRow {
                    number: k,
                    began,
                    started,
                    ended,
                    how,
                    nodes,
                }
            })
            .collect()
    }
}
