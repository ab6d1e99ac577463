//! How often a job should checkpoint (docs/report.md, "Checkpoint interval"): from the
//! saves `herd.save_atomic` timed (each attempt's `checkpoints.jsonl`) and the faults that
//! cost the job work ([`super::Fault`]), Young's interval √(2 × save time × mean time
//! between faults), the one that loses the least time to saving and redoing steps.

use serde_json::{json, Value};

use super::faults::Fault;
use super::words::{duration, percent};
use crate::layout::LogsDir;
use crate::median;

/// One checkpoint `herd.save_atomic` published.
#[derive(Debug, Clone, PartialEq)]
pub struct Save {
    /// The attempt that saved it.
    pub attempt: u32,
    /// When the save began (ms since the epoch).
    pub started_ms: u64,
    /// How long it took, written, published and synced (seconds).
    pub seconds: f64,
}

/// Every save recorded in the attempts' `checkpoints.jsonl` under `logs`, in attempt and
/// file order; lines that do not parse are skipped.
pub fn read_saves(logs: &LogsDir) -> Vec<Save> {
    let mut out = Vec::new();
    for attempt in logs.attempts().unwrap_or_default() {
        let Ok(text) = std::fs::read_to_string(logs.attempt(attempt).saves()) else {
            continue;
        };
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let (Some(started), Some(seconds)) = (v["started"].as_f64(), v["seconds"].as_f64())
            else {
                continue;
            };
            if started >= 0.0 && seconds >= 0.0 {
                out.push(Save {
                    attempt,
                    started_ms: (started * 1000.0) as u64,
                    seconds,
                });
            }
        }
    }
    out
}

/// What the job's saves and faults say about its checkpoint interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Advice {
    /// Saves recorded.
    pub saves: usize,
    /// The median save's time (seconds).
    pub save_s: f64,
    /// The median time from one save's start to the next one's in the same attempt
    /// (seconds); `None` with no two saves in one attempt.
    pub every_s: Option<f64>,
    /// Faults that cost work: every fault but a time limit's or a preemption's, which
    /// herd announces so that the job checkpoints on its way out.
    pub lossy_faults: usize,
    /// The job's allocated time (seconds).
    pub allocated_s: f64,
    /// The allocated time over the lossy faults (seconds); `None` without one.
    pub mtbf_s: Option<f64>,
    /// Young's interval, √(2 × `save_s` × `mtbf_s`) (seconds).
    pub best_every_s: Option<f64>,
}

impl Advice {
    /// The share of the time lost to saving every `every_s` and to redoing, on average,
    /// half an interval at each fault: `save_s / every_s + every_s / (2 × mtbf_s)`.
    pub fn waste(&self, every_s: f64) -> Option<f64> {
        let m = self.mtbf_s?;
        (every_s > 0.0 && m > 0.0).then(|| self.save_s / every_s + every_s / (2.0 * m))
    }

    /// The share the job loses now, with its own interval.
    pub fn waste_now(&self) -> Option<f64> {
        self.waste(self.every_s?)
    }

    /// The share it would lose with Young's interval.
    pub fn waste_best(&self) -> Option<f64> {
        self.waste(self.best_every_s?)
    }

    /// The report's line: the numbers, then the advice they give.
    pub fn line(&self) -> String {
        let every = match self.every_s {
            Some(e) => format!("one every {}, ", secs_words(e)),
            None => String::new(),
        };
        let mut s = format!(
            "checkpoints: {} save{}, {every}{} each (medians)",
            self.saves,
            if self.saves == 1 { "" } else { "s" },
            secs_words(self.save_s)
        );
        let (Some(m), Some(best)) = (self.mtbf_s, self.best_every_s) else {
            s.push_str("; no fault has cost work yet: nothing to weigh the saves against");
            return s;
        };
        s.push_str(&format!(
            "; {} fault{} cost work in {} allocated, one every {}: best one every {} \
             (Young: √(2 × {} × {}))",
            self.lossy_faults,
            if self.lossy_faults == 1 { "" } else { "s" },
            duration((self.allocated_s * 1000.0) as u64),
            secs_words(m),
            secs_words(best),
            secs_words(self.save_s),
            secs_words(m)
        ));
        if let (Some(now), Some(then)) = (self.waste_now(), self.waste_best()) {
            s.push_str(&format!(
                ", losing {} of the time to saves and redone steps instead of {}",
                percent(then),
                percent(now)
            ));
        }
        s
    }

    /// For `--json`: every number and the advice.
    pub fn json(&self) -> Value {
        json!({
            "saves": self.saves,
            "save_s": self.save_s,
            "every_s": self.every_s,
            "lossy_faults": self.lossy_faults,
            "allocated_s": self.allocated_s,
            "mtbf_s": self.mtbf_s,
            "best_every_s": self.best_every_s,
            "waste_now": self.waste_now(),
            "waste_best": self.waste_best(),
        })
    }
}

/// Seconds in words: `0.31 s`, `8.3 s`, `1:50`.
fn secs_words(s: f64) -> String {
    if s < 1.0 {
        format!("{s:.2} s")
    } else {
        duration((s * 1000.0).round() as u64)
    }
}

/// The advice from `saves`, the job's `faults` and its allocated time (ms, the
/// accounting's [`super::Accounting::allocated_ms`]); `None` without a save.
pub fn advise(saves: &[Save], faults: &[Fault], allocated_ms: u64) -> Option<Advice> {
    let save_s = median(saves.iter().map(|s| s.seconds))?;
    let gaps: Vec<f64> = saves
        .windows(2)
        .filter(|w| w[0].attempt == w[1].attempt && w[1].started_ms > w[0].started_ms)
        .map(|w| (w[1].started_ms - w[0].started_ms) as f64 / 1000.0)
        .collect();
    let lossy_faults = faults
        .iter()
        .filter(|f| f.kind != "time limit" && f.kind != "preemption")
        .count();
    let allocated_s = allocated_ms as f64 / 1000.0;
    let mtbf_s = (lossy_faults > 0 && allocated_s > 0.0).then(|| allocated_s / lossy_faults as f64);
    Some(Advice {
        saves: saves.len(),
        save_s,
        every_s: median(gaps),
        lossy_faults,
        allocated_s,
        mtbf_s,
        best_every_s: mtbf_s.map(|m| (2.0 * save_s * m).sqrt()),
    })
}
