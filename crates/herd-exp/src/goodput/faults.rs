//! A fault's cost, split into the phases that follow one another from the fault to
//! training again ([`Fault`], [`Phase`]); [`super::account`] finds them.

use serde_json::{json, Map, Value};

use super::words::{duration, secs};

/// One phase of a fault's cost ([`Fault`]), in the order they follow one another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The fault → the first sign of it herd saw (a worker's exit, a hang, a lost node's
    /// verdict, a warning).
    Detect,
    /// That sign → herd's decision (the failure, the warning).
    Decide,
    /// The decision → the workers gone on every node (a checkpoint on the way out
    /// included).
    Teardown,
    /// The workers gone → the next attempt's workers start: a restart's rendezvous and
    /// preflight, a requeue's queue and new allocation too.
    Relaunch,
    /// The next attempt's workers start → its first step reading (Python's start,
    /// imports, the model's setup, the checkpoint's load, the first step).
    FirstStep,
    /// The first step reading → the steps computed before the fault computed again.
    Redone,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 6] = [
        Phase::Detect,
        Phase::Decide,
        Phase::Teardown,
        Phase::Relaunch,
        Phase::FirstStep,
        Phase::Redone,
    ];

    /// Its name: `detect`, `decide`, `teardown`, `relaunch`, `first_step`, `redone`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Detect => "detect",
            Phase::Decide => "decide",
            Phase::Teardown => "teardown",
            Phase::Relaunch => "relaunch",
            Phase::FirstStep => "first_step",
            Phase::Redone => "redone",
        }
    }
}

/// A fault that ended an attempt (a failure, a hang, a lost node, a time limit, a
/// preemption) and its cost: from the fault to training again, the first moment a later
/// attempt computes a step no attempt had, split into [`Phase`]s that follow one another.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// The attempt it ended.
    pub attempt: u32,
    /// Its kind, in words: `time limit`, `preemption`, `hang`, `node failure`, `worker
    /// failure`, …
    pub kind: String,
    /// What followed: `restart`, `replace`, `requeue`, or `failed` when the job ended.
    pub then: String,
    /// The fault (ms since the epoch): a hang's silent rank's last sign of life, a lost
    /// node's attempt's last step reading before the verdict, a warning, a worker's exit.
    pub at_ms: u64,
    /// The moment each phase ends, in [`Phase::ALL`]'s order, as far as the timeline
    /// and the readings go (`None` from the first one that did not happen).
    pub ends_ms: [Option<u64>; 6],
    /// Steps computed again.
    pub redone_steps: u64,
}

impl Fault {
    /// The milliseconds of `phase`, when it ended.
    pub fn phase_ms(&self, phase: Phase) -> Option<u64> {
        let i = Phase::ALL.iter().position(|p| *p == phase)?;
        let start = if i == 0 {
            self.at_ms
        } else {
            self.ends_ms[i - 1]?
        };
        Some(self.ends_ms[i]?.saturating_sub(start))
    }

    /// Training again (ms since the epoch), when it was.
    pub fn again_ms(&self) -> Option<u64> {
        self.ends_ms[5]
    }

    /// The whole cost: the fault → training again, ms.
    pub fn cost_ms(&self) -> Option<u64> {
        Some(self.again_ms()?.saturating_sub(self.at_ms))
    }

    /// `attempt 1, node failure → requeue: 27.4 s = detect 10.5 s · decide 0.0 s · …`.
    pub fn line(&self) -> String {
        let phases: Vec<String> = Phase::ALL
            .iter()
            .filter_map(|p| {
                let ms = self.phase_ms(*p)?;
                let name = match p {
                    Phase::Relaunch if self.then == "requeue" => "requeue".to_owned(),
                    Phase::Relaunch => self.then.clone(),
                    Phase::FirstStep => "first step".to_owned(),
                    _ => p.name().to_owned(),
                };
                let mut s = format!("{name} {}", duration(ms));
                if *p == Phase::Redone {
                    s.push_str(&format!(
                        " ({} step{})",
                        self.redone_steps,
                        if self.redone_steps == 1 { "" } else { "s" }
                    ));
                }
                Some(s)
            })
            .collect();
        let cost = match self.cost_ms() {
            Some(ms) => duration(ms),
            None if self.then == "failed" => "the job ended".to_owned(),
            None => "not training again".to_owned(),
        };
        format!(
            "attempt {}, {} → {}: {cost} = {}",
            self.attempt,
            self.kind,
            self.then,
            phases.join(" · ")
        )
    }

    /// For `--json`: seconds of each phase (`null` where it did not happen), the cost.
    pub fn json(&self) -> Value {
        let mut phases = Map::new();
        for p in Phase::ALL {
            phases.insert(p.name().into(), json!(self.phase_ms(p).map(secs)));
        }
        json!({
            "attempt": self.attempt,
            "kind": self.kind,
            "then": self.then,
            "at": crate::timeline::rfc3339(self.at_ms),
            "at_unix_ms": self.at_ms,
            "cost_s": self.cost_ms().map(secs),
            "phases": phases,
            "redone_steps": self.redone_steps,
        })
    }
}
