//! The staying-alive keys of a plan (`max_requeues`, `warn_before`, `stop_signal`,
//! `stop_grace`, `hang_timeout`, `start_timeout`, `on_hang`, `preflight`): `herd submit`'s defaults for them
//! ([`KeepAlive::submit`], which fit a short time limit), and their checks against each
//! other, the time limit and the launch mode.

use crate::keys::{Key, Source};
use crate::launch::{HangTimeout, KeepAlive, OnHang, Preflight, Seconds, StopSignal, Warm};
use crate::layers::Layers;
use crate::plan::Mode;
use crate::values::{non_negative, TextOrNumber, ValueError};
use herd_slurm::TimeLimit;

/// The keep-alive keys, checked against each other, the time limit and the mode.
pub(crate) fn resolve_keep(
    l: &mut Layers<'_>,
    mode: Mode,
    time: Option<&TimeLimit>,
    requeue: Option<bool>,
) -> KeepAlive {
    let limit = time.map(|t| std::time::Duration::from_secs(t.seconds()));
    let d = KeepAlive::submit(limit);
    let secs = |v: &i64| non_negative(*v).map(|s| Seconds::from_secs(s.into()));
    let max_requeues_set = l.first(|k| k.max_requeues.as_ref()).is_some();
    // `requeue = false` without a budget means none; with one, it is a contradiction.
    let default_requeues = if requeue == Some(false) {
        0
    } else {
        d.max_requeues
    };
    let max_requeues = given(
        l,
        Key::MaxRequeues,
        |l| {
            l.take(
                Key::MaxRequeues,
                |k| k.max_requeues.as_ref(),
                |v: &i64| non_negative(*v),
            )
        },
        default_requeues,
    );
    if requeue == Some(false) && max_requeues > 0 && max_requeues_set {
        let origin = l.origin(Key::MaxRequeues);
        l.problem(
            Key::MaxRequeues,
            origin,
            format!("{max_requeues} requeues asked for, but `requeue = false` forbids them: set max_requeues = 0 or drop --no-requeue"),
        );
    }
    let warn_before = given(
        l,
        Key::WarnBefore,
        |l| l.take(Key::WarnBefore, |k| k.warn_before.as_ref(), secs),
        d.warn_before,
    );
    let stop_grace = given(
        l,
        Key::StopGrace,
        |l| l.take(Key::StopGrace, |k| k.stop_grace.as_ref(), secs),
        KeepAlive::submit_stop_grace(warn_before),
    );
    let hang_timeout = given(
        l,
        Key::HangTimeout,
        |l| l.take(Key::HangTimeout, |k| k.hang_timeout.as_ref(), hang),
        d.hang_timeout,
    );
    let start_timeout = given(
        l,
        Key::StartTimeout,
        |l| l.take(Key::StartTimeout, |k| k.start_timeout.as_ref(), secs),
        d.start_timeout,
    );
    let stop_signal = given(
        l,
        Key::StopSignal,
        |l| {
            l.take(
                Key::StopSignal,
                |k| k.stop_signal.as_deref(),
                |s: &str| s.parse::<StopSignal>().map_err(ValueError::new),
            )
        },
        d.stop_signal,
    );
    let on_hang = given(
        l,
        Key::OnHang,
        |l| {
            l.take(
                Key::OnHang,
                |k| k.on_hang.as_deref(),
                |s: &str| s.parse::<OnHang>().map_err(ValueError::new),
            )
        },
        d.on_hang,
    );
    let preflight = given(
        l,
        Key::Preflight,
        |l| {
            l.take(
                Key::Preflight,
                |k| k.preflight.as_deref(),
                |s: &str| s.parse::<Preflight>().map_err(ValueError::new),
            )
        },
        d.preflight,
    );
    let preflight_set = l.first(|k| k.preflight.as_ref()).is_some();
    let warm = given(
        l,
        Key::Warm,
        |l| {
            l.take(
                Key::Warm,
                |k| k.warm.as_deref(),
                |s: &str| s.parse::<Warm>().map_err(ValueError::new),
            )
        },
        d.warm,
    );
    let warm_set = l.first(|k| k.warm.as_ref()).is_some();
    if stop_grace >= warn_before && !warn_before.is_zero() {
        let o = l.origin(Key::StopGrace);
        l.problem(
            Key::StopGrace,
            o,
            format!("the workers' {stop_grace} s to checkpoint do not fit in the {warn_before} s warning before the time limit: lower stop_grace or raise warn_before"),
        );
    }
    if let Some(t) = time {
        if warn_before.whole() >= t.seconds() {
            let o = l.origin(Key::WarnBefore);
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
            (Key::HangTimeout, hang_timeout.is_on()),
            (Key::Preflight, preflight_set && preflight.is_on()),
            (Key::Warm, warm_set && warm.is_on()),
        ] {
            if set {
                let o = l.origin(key);
                l.problem(
                    key,
                    o,
                    format!("`{key}` needs mode = \"agent\" (herd's agents do it; in {mode} mode nothing would)"),
                );
            }
        }
    }
    KeepAlive {
        // In srun and torchrun mode no agent requeues: the budget is the user's own.
        max_requeues: if mode == Mode::Agent { max_requeues } else { 0 },
        warn_before,
        stop_signal,
        stop_grace,
        hang_timeout,
        start_timeout,
        on_hang,
        // In srun and torchrun mode no agent checks the nodes.
        preflight: if mode == Mode::Agent {
            preflight
        } else {
            Preflight::Off
        },
        // Nor starts workers: srun or torchrun does.
        warm: if mode == Mode::Agent { warm } else { Warm::Off },
    }
}

/// `hang_timeout`: whole seconds (0: no watchdog) or `"auto"`.
fn hang(v: &TextOrNumber) -> Result<HangTimeout, ValueError> {
    match v {
        TextOrNumber::Number(n) => {
            non_negative(*n).map(|s| HangTimeout::Fixed(Seconds::from_secs(s.into())))
        }
        TextOrNumber::Text(t) if t == "auto" => Ok(HangTimeout::Auto),
        TextOrNumber::Text(t) => Err(ValueError::new(format!(
            "`{t}` is not a whole number of seconds or `auto`"
        ))),
    }
}

/// The value `take` finds for `key`, else `default` (herd's default as its source unless
/// a layer set the key and its value was refused).
fn given<'a, T>(
    l: &mut Layers<'a>,
    key: Key,
    take: impl FnOnce(&mut Layers<'a>) -> Option<T>,
    default: T,
) -> T {
    match take(l) {
        Some(v) => v,
        None => {
            if !l.sources.contains_key(&key) && !l.problems.iter().any(|p| p.key == key) {
                l.set_source(key, Source::Default);
            }
            default
        }
    }
}
