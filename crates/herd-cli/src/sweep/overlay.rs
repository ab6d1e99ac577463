//! The overlay plot of a sweep: every run's loss on one axis, one colour per run, the
//! legend saying each run's values. Drawn by the report's plotting ([`crate::report::plot`]),
//! so every convention of its plots holds: each run's attempts are lines of their own
//! (no segment joins one attempt to the next), steps computed again after a resume are
//! dashed and lighter over a shaded band, each attempt after the first is a dashed
//! marker labelled with what started it (and here whose it is), long series are cut.

use crate::report::data::{AttemptData, ExpData};
use crate::report::plot::{self, Metric, Plot};

/// One run as the overlay gets it.
pub struct Entry<'a> {
    /// Its colour's key ([`plot::rank_colour`] of it): its place among the sweep's runs
    /// in index order, so a run keeps its colour from one report to the next.
    pub key: u32,
    /// Its values, as the legend says them: `lr=3e-4, seed=1`.
    pub label: String,
    /// What its folder holds.
    pub data: &'a ExpData,
}

/// The overlay and what it leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    /// The plot (`None` when no run has a loss reading).
    pub plot: Option<Plot>,
    /// Runs that are not in it, and why: `NAME/RUN: no loss readings: not in the overlay`.
    pub notes: Vec<String>,
    /// What the lighter dashes are, when a run has any: `Lighter dashes on a shaded band:
    /// steps computed again after a resume from a checkpoint (lr=3e-4, seed=1: attempt 1:
    /// steps 221–235).`
    pub rework_note: Option<String>,
}

/// `exp` with each attempt's readings of one rank only: the lowest rank that has a finite
/// loss reading in that attempt (in data-parallel training every rank takes each step
/// together; the loss a run prints is its lowest rank's). Attempts without one are left
/// out.
pub fn loss_rank(exp: &ExpData) -> ExpData {
    let attempts = exp
        .attempts
        .iter()
        .filter_map(|a| {
            let (rank, s) = a.ranks.iter().find(|(_, s)| {
                s.column("loss")
                    .is_some_and(|c| c.iter().any(|v| v.is_finite()))
            })?;
            Some(AttemptData {
                number: a.number,
                ranks: vec![(*rank, s.clone())],
            })
        })
        .collect();
    ExpData {
        attempts,
        ..exp.clone()
    }
}

/// A run's final loss (the last finite reading of its newest attempt that has one) and
/// its best (the smallest of all its attempts'), of its [`loss_rank`].
pub fn losses(exp: &ExpData) -> (Option<f64>, Option<f64>) {
    let one = loss_rank(exp);
    let all = || {
        one.attempts
            .iter()
            .flat_map(|a| a.ranks.iter())
            .filter_map(|(_, s)| s.column("loss"))
            .flat_map(|c| c.iter().copied())
            .filter(|v| v.is_finite())
    };
    let last = all().next_back();
    let best = all().reduce(f64::min);
    (last, best)
}

/// The overlay of `entries`' loss, titled `NAME: loss per run`; `legend`: the entries'
/// keys in the legend's order (the report's table order). x is the step when any run's
/// loss readings have steps (runs without are left out, with a note); else each run's
/// seconds since its own first reading.
pub fn overlay(name: &str, entries: &[Entry], legend: &[u32]) -> Overlay {
    let mut notes = Vec::new();
    let mut built: Vec<(&Entry, Plot)> = Vec::new();
    for e in entries {
        match plot::build(&loss_rank(e.data), Metric::Loss) {
            Some(p) => built.push((e, p)),
            None => notes.push(format!(
                "{name}/{}: no loss readings: not in the overlay",
                e.data.name
            )),
        }
    }
    let by_step = built.iter().any(|(_, p)| p.x_label == "step");
    if by_step {
        built.retain(|(e, p)| {
            let keep = p.x_label == "step";
            if !keep {
                notes.push(format!(
                    "{name}/{}: no loss reading with a step: not in the overlay (its other runs' are by step)",
                    e.data.name
                ));
            }
            keep
        });
    }
    if built.is_empty() {
        return Overlay {
            plot: None,
            notes,
            rework_note: None,
        };
    }
    let mut lines = Vec::new();
    let mut markers = Vec::new();
    let mut rework = Vec::new();
    let mut redone = Vec::new();
    for (e, p) in &built {
        lines.extend(p.lines.iter().cloned().map(|mut l| {
            l.rank = e.key;
            l
        }));
        markers.extend(p.markers.iter().cloned().map(|mut m| {
            m.label = format!("{} ({})", m.label, e.label);
            m
        }));
        rework.extend(p.rework.iter().cloned());
        for r in &p.rework {
            redone.push(if r.from == r.to {
                format!("{}: attempt {}: step {}", e.label, r.attempt, r.from)
            } else {
                format!(
                    "{}: attempt {}: steps {}–{}",
                    e.label, r.attempt, r.from, r.to
                )
            });
        }
    }
    let drawn: Vec<u32> = built.iter().map(|(e, _)| e.key).collect();
    let mut order: Vec<u32> = legend
        .iter()
        .copied()
        .filter(|k| drawn.contains(k))
        .collect();
    order.extend(drawn.iter().filter(|k| !legend.contains(k)));
    let label = |k: u32| {
        built
            .iter()
            .find(|(e, _)| e.key == k)
            .map(|(e, _)| e.label.clone())
            .unwrap_or_default()
    };
    let plot = Plot {
        name: name.to_owned(),
        metric: Metric::Loss,
        column: "loss".to_owned(),
        title: format!("{name}: loss per run"),
        x_label: if by_step {
            "step".to_owned()
        } else {
            "seconds since the run's first reading".to_owned()
        },
        y_label: "loss".to_owned(),
        lines,
        markers,
        rework,
        legend: order.into_iter().map(|k| (k, label(k))).collect(),
        y_range: None,
    };
    let rework_note = (!redone.is_empty()).then(|| {
        format!(
            "Lighter dashes on a shaded band: steps computed again after a resume from a \
             checkpoint ({}).",
            redone.join("; ")
        )
    });
    Overlay {
        plot: Some(plot),
        notes,
        rework_note,
    }
}
