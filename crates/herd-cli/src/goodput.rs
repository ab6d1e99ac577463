//! An experiment's goodput as `herd report`, `herd status` and `herd top` show it: the
//! timeline and, for each attempt, the step readings of its lowest rank that has any
//! ([`herd_exp::goodput`] does the accounting; docs/report.md says how).

use std::collections::BTreeMap;

use herd_exp::goodput::{self, Accounting, Steps};
use herd_exp::timeline::Entry;
use herd_exp::Experiment;
use herd_metrics::store::{self, Series};

/// The readings of `series` that have a step and a time, as `(ms, step)`.
pub fn steps_of(series: &Series) -> Steps {
    series
        .time_ms
        .iter()
        .zip(&series.step)
        .filter_map(|(&t, s)| Some((t, (*s)?)).filter(|_| t > 0))
        .collect()
}

/// The steps of the lowest rank that has any, of the ranks given in rank order.
pub fn first_with_steps<'a>(ranks: impl IntoIterator<Item = &'a Series>) -> Steps {
    ranks
        .into_iter()
        .map(steps_of)
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// Attempt `k`'s steps, read from its folder: one rank's file, the next only when that
/// one has no step (a worker that does not print them). Unreadable: none.
pub fn read_steps(exp: &Experiment, k: u32) -> Steps {
    let dir = exp.paths().logs().attempt(k);
    let ranks = store::ranks(dir.path()).unwrap_or_default();
    for r in ranks {
        if let Ok(series) = store::read_rank(dir.path(), r) {
            let steps = steps_of(&series);
            if !steps.is_empty() {
                return steps;
            }
        }
    }
    Vec::new()
}

/// Every attempt's steps, read from the experiment's folder.
pub fn read_all_steps(exp: &Experiment) -> BTreeMap<u32, Steps> {
    exp.paths()
        .logs()
        .attempts()
        .unwrap_or_default()
        .into_iter()
        .map(|k| (k, read_steps(exp, k)))
        .collect()
}

/// `exp`'s accounting as of now, from its timeline `events` and its folder's readings.
pub fn load(exp: &Experiment, events: &[Entry]) -> Accounting {
    goodput::account(events, &read_all_steps(exp), herd_exp::timeline::now().1)
}
