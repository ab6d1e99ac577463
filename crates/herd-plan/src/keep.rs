//! The staying-alive keys of a plan (`max_requeues`, `warn_before`, `stop_signal`,
//! `stop_grace`, `hang_timeout`, `on_hang`): their defaults, which fit a short time limit,
//! and their checks against each other, the time limit and the launch mode.

use serde::{Deserialize, Serialize};

use crate::keys::{Key, Source};
use crate::resolve::{Layers, Mode};
use crate::values::{non_negative, ValueError};
use herd_slurm::TimeLimit;

/// Requeue budget, warning, stop and hang watchdog of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keep {
    /// Requeues per cause (time limit, preemption, node failure).
    pub max_requeues: u32,
    /// Seconds before the time limit at which the workers are stopped.
    pub warn_before: u32,
    /// The stop signal, without `SIG` (`USR1`).
    pub stop_signal: String,
    /// Seconds the workers have after the stop signal.
    pub stop_grace: u32,
    /// Seconds without progress that make a hang; 0: no watchdog.
    pub hang_timeout: u32,
    /// `fail` or `restart`.
    pub on_hang: String,
}

impl Default for Keep {
    fn default() -> Keep {
        Keep {
            max_requeues: DEFAULT_MAX_REQUEUES,
            warn_before: DEFAULT_WARN_BEFORE,
            stop_signal: "USR1".into(),
            stop_grace: DEFAULT_STOP_GRACE,
            hang_timeout: 0,
            on_hang: "fail".into(),
        }
    }
}

/// Requeues per cause unless the plan says otherwise.
pub const DEFAULT_MAX_REQUEUES: u32 = 3;
/// Seconds before the time limit the workers are stopped, unless the plan says otherwise.
pub const DEFAULT_WARN_BEFORE: u32 = 120;
/// Seconds the workers have to checkpoint after the stop signal, unless the plan says
/// otherwise.
pub const DEFAULT_STOP_GRACE: u32 = 60;

/// Signals a worker can be asked to stop with (names without `SIG`).
const STOP_SIGNALS: [&str; 6] = ["USR1", "USR2", "TERM", "INT", "HUP", "CONT"];

/// The keep-alive keys, checked against each other, the time limit and the mode.
pub(crate) fn resolve_keep<'a>(
    l: &mut Layers<'a>,
    mode: Mode,
    time: Option<&TimeLimit>,
    requeue: Option<bool>,
) -> Keep {
    let d = Keep::default();
    let secs = |v: &i64| non_negative(*v);
    let given = |l: &mut Layers<'a>, key: Key, v: Option<u32>, default: u32| match v {
        Some(v) => v,
        None => {
            if !l.sources.contains_key(&key) && !l.problems.iter().any(|p| p.key == key) {
                l.set_source(key, Source::Default);
            }
            default
        }
    };
    let max_requeues_set = l.first(|k| k.max_requeues.as_ref()).is_some();
    let v = l.take(Key::MaxRequeues, |k| k.max_requeues.as_ref(), secs);
    // `requeue = false` without a budget means none; with one, it is a contradiction.
    let default_requeues = if requeue == Some(false) {
        0
    } else {
        d.max_requeues
    };
    let max_requeues = given(l, Key::MaxRequeues, v, default_requeues);
    if requeue == Some(false) && max_requeues > 0 && max_requeues_set {
        let origin = l
            .sources
            .get(&Key::MaxRequeues)
            .and_then(|s| s.last())
            .cloned();
        l.problem(
            Key::MaxRequeues,
            origin,
            format!("{max_requeues} requeues asked for, but `requeue = false` forbids them: set max_requeues = 0 or drop --no-requeue"),
        );
    }
    let v = l.take(Key::WarnBefore, |k| k.warn_before.as_ref(), secs);
    // The defaults fit a short time limit (a test on a `dev` partition): a quarter of it at
    // most for the warning, half the warning at most for the grace.
    let short = time.map_or(u32::MAX, |t| {
        u32::try_from(t.seconds() / 4).unwrap_or(u32::MAX)
    });
    let warn_before = given(l, Key::WarnBefore, v, d.warn_before.min(short));
    let v = l.take(Key::StopGrace, |k| k.stop_grace.as_ref(), secs);
    let stop_grace = given(l, Key::StopGrace, v, d.stop_grace.min(warn_before / 2));
    let v = l.take(Key::HangTimeout, |k| k.hang_timeout.as_ref(), secs);
    let hang_timeout = given(l, Key::HangTimeout, v, d.hang_timeout);
    let v = l.take(
        Key::StopSignal,
        |k| k.stop_signal.as_deref(),
        |s: &str| {
            let name = s.strip_prefix("SIG").unwrap_or(s).to_ascii_uppercase();
            if STOP_SIGNALS.contains(&name.as_str()) {
                Ok(name)
            } else {
                Err(ValueError::new(format!(
                    "`{s}` is not a signal a worker can checkpoint on: use one of {}",
                    STOP_SIGNALS.join(", ")
                )))
            }
        },
    );
    let stop_signal = match v {
        Some(v) => v,
        None => {
            if !l.sources.contains_key(&Key::StopSignal) {
                l.set_source(Key::StopSignal, Source::Default);
            }
            d.stop_signal.clone()
        }
    };
    let v = l.take(
        Key::OnHang,
        |k| k.on_hang.as_deref(),
        |s: &str| match s {
            "fail" | "restart" => Ok(s.to_owned()),
            _ => Err(ValueError::new(format!("`{s}` is not `fail` or `restart`"))),
        },
    );
    let on_hang = match v {
        Some(v) => v,
        None => {
            if !l.sources.contains_key(&Key::OnHang) {
                l.set_source(Key::OnHang, Source::Default);
            }
            d.on_hang.clone()
        }
    };
    let origin = |l: &Layers<'a>, key: Key| l.sources.get(&key).and_then(|s| s.last()).cloned();
    if stop_grace >= warn_before && warn_before > 0 {
        let o = origin(l, Key::StopGrace);
        l.problem(
            Key::StopGrace,
            o,
            format!("the workers' {stop_grace} s to checkpoint do not fit in the {warn_before} s warning before the time limit: lower stop_grace or raise warn_before"),
        );
    }
    if let Some(t) = time {
        if u64::from(warn_before) >= t.seconds() {
            let o = origin(l, Key::WarnBefore);
            l.problem(
                Key::WarnBefore,
                o,
                format!("the warning {warn_before} s before the time limit comes before the job starts (time limit {} s): lower warn_before or raise time", t.seconds()),
            );
        }
    }
    if mode != Mode::Agent {
        for (key, set) in [
            (Key::MaxRequeues, max_requeues_set && max_requeues > 0),
            (Key::HangTimeout, hang_timeout > 0),
        ] {
            if set {
                let o = origin(l, key);
                l.problem(
                    key,
                    o,
                    format!("`{key}` needs mode = \"agent\" (herd's agents do it; in {mode} mode nothing would)"),
                );
            }
        }
    }
    Keep {
        // In srun and torchrun mode no agent requeues: the budget is the user's own.
        max_requeues: if mode == Mode::Agent { max_requeues } else { 0 },
        warn_before,
        stop_signal,
        stop_grace,
        hang_timeout,
        on_hang,
    }
}
