//! DeepSpeed's progress lines: the engine's `_report_progress` (deepspeed/runtime/engine.py),
//! the throughput timer's (deepspeed/utils/timer.py, `ThroughputTimer.stop`), and the
//! pipeline engine's (deepspeed/runtime/pipe/engine.py, `train_batch`).

use crate::read::text::{
    find_word, label_values, norm, norm_camel, num, split_num, step_of, strip_ansi,
};
use crate::Record;

pub(crate) fn line(line: &str) -> Option<Record> {
    if line.contains("/global_step=") {
        throughput(&strip_ansi(line))
    } else if line.contains("skipped=") {
        progress(&strip_ansi(line))
    } else if line.contains("samples/sec:") {
        pipe(&strip_ansi(line))
    } else {
        None
    }
}

/// `epoch=0/micro_step=20/global_step=10, RunningAvgSamplesPerSec=35.2, CurrSamplesPerSec=36.1,
/// MemAllocated=1.2GB, MaxMemAllocated=2.3GB` (and the `vm %: 12.3, swap %: 0.0` variant).
fn throughput(t: &str) -> Option<Record> {
    let at = find_word(t, "epoch=")?;
    let mut parts = split_top(&t[at..]);
    let head = parts.next()?;
    let mut step = None;
    let mut values = Vec::new();
    for kv in head.split('/') {
        let (k, v) = kv.split_once('=')?;
        let v = num(v)?;
        match k {
            "global_step" => step = Some(step_of(v)?),
            "epoch" => values.push(("epoch".to_owned(), v)),
            _ => values.push((norm_camel(k), v)),
        }
    }
    for part in parts {
        let (k, v) = match part.split_once('=') {
            Some(kv) => kv,
            None => part.split_once(": ")?,
        };
        let (n, unit) = split_num(v.trim());
        let Some(v) = num(n) else { continue };
        let name = match k.trim() {
            "RunningAvgSamplesPerSec" => "samples_per_s".to_owned(),
            "CurrSamplesPerSec" => "curr_samples_per_s".to_owned(),
            k => {
                let (k, unit) = (norm_camel(k), norm(unit));
                if unit.is_empty() {
                    k
                } else {
                    format!("{k}_{unit}")
                }
            }
        };
        values.push((name, v));
    }
    Some(Record {
        step: Some(step?),
        values,
    })
}

/// `step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]`: lists give their first number.
fn progress(t: &str) -> Option<Record> {
    let at = find_word(t, "step=")?;
    let mut step = None;
    let mut values = Vec::new();
    for part in split_top(&t[at..]) {
        let Some((k, v)) = part.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = if v.starts_with('[') || v.starts_with('(') {
            first_number(v)
        } else {
            num(v)
        };
        match k.trim() {
            "step" => step = Some(step_of(v?)?),
            k => {
                if let Some(v) = v {
                    values.push((norm_camel(k), v));
                }
            }
        }
    }
    if !values.iter().any(|(n, _)| n == "skipped") {
        return None;
    }
    Some(Record {
        step: Some(step?),
        values,
    })
}

/// `steps: 10 loss: 2.3456 iter time (s): 0.123 samples/sec: 123.400`, additional losses
/// between the loss and the time.
fn pipe(t: &str) -> Option<Record> {
    let at = find_word(t, "steps: ")?;
    let mut step = None;
    let mut values = Vec::new();
    for (label, value) in label_values(&t[at..]) {
        let Some(v) = num(value) else { continue };
        let name = match label {
            "steps" => {
                step = Some(step_of(v)?);
                continue;
            }
            "samples/sec" => "samples_per_s".to_owned(),
            l => norm(l),
        };
        values.push((name, v));
    }
    if !values.iter().any(|(n, _)| n == "samples_per_s") {
        return None;
    }
    Some(Record {
        step: Some(step?),
        values,
    })
}

/// `s` split at the `, ` that are not inside brackets or parentheses.
fn split_top(s: &str) -> impl Iterator<Item = &str> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in s.char_indices() {
        match c {
            '[' | '(' | '{' => depth += 1,
            ']' | ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts.into_iter().map(str::trim).filter(|p| !p.is_empty())
}

/// The first number in `[0.0001, 0.0002]` or `[(0.9, 0.999)]`.
fn first_number(s: &str) -> Option<f64> {
    let inner = s.trim_start_matches(['[', '(', ' ']);
    let end = inner.find([',', ']', ')']).unwrap_or(inner.len());
    num(&inner[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rec;

    #[test]
    fn report_progress() {
        // engine.py: log_dist(f"step={step}, skipped={self.skipped_steps}, lr={lr}, mom={mom}", ranks=[0])
        assert_eq!(
            line("[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]"),
            Some(rec(10, &[("skipped", 0.0), ("lr", 1e-4), ("mom", 0.9)]))
        );
        assert_eq!(
            line("[Rank 0] step=20, skipped=1, lr=[2.5e-05, 2.5e-05], mom=[0.9, 0.9]"),
            Some(rec(20, &[("skipped", 1.0), ("lr", 2.5e-5), ("mom", 0.9)]))
        );
    }

    #[test]
    fn throughput_timer() {
        // timer.py: "epoch={}/micro_step={}/global_step={}, RunningAvgSamplesPerSec={}, CurrSamplesPerSec={}, MemAllocated={}GB, MaxMemAllocated={}GB"
        assert_eq!(
            line("[2024-01-01 00:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=20/global_step=10, RunningAvgSamplesPerSec=35.21508516, CurrSamplesPerSec=36.1, MemAllocated=1.2GB, MaxMemAllocated=2.3GB"),
            Some(rec(
                10,
                &[
                    ("epoch", 0.0),
                    ("micro_step", 20.0),
                    ("samples_per_s", 35.21508516),
                    ("curr_samples_per_s", 36.1),
                    ("mem_allocated_gb", 1.2),
                    ("max_mem_allocated_gb", 2.3),
                ]
            ))
        );
        // the running average is -inf before the timer's start step: skipped
        assert_eq!(
            line("epoch=0/micro_step=2/global_step=1, RunningAvgSamplesPerSec=-inf, CurrSamplesPerSec=30.0, MemAllocated=1.2GB, MaxMemAllocated=2.3GB"),
            Some(rec(
                1,
                &[
                    ("epoch", 0.0),
                    ("micro_step", 2.0),
                    ("curr_samples_per_s", 30.0),
                    ("mem_allocated_gb", 1.2),
                    ("max_mem_allocated_gb", 2.3),
                ]
            ))
        );
        assert_eq!(
            line("epoch=1/micro_step=4/global_step=30, vm %: 12.3, swap %: 0.0"),
            Some(rec(
                30,
                &[
                    ("epoch", 1.0),
                    ("micro_step", 4.0),
                    ("vm_pct", 12.3),
                    ("swap_pct", 0.0)
                ]
            ))
        );
    }

    #[test]
    fn pipeline_engine() {
        // pipe/engine.py: f'steps: {self.global_steps} loss: {loss:0.4f} ' + f'iter time (s): {iter_time:0.3f} samples/sec: {tput:0.3f}'
        assert_eq!(
            line("steps: 100 loss: 2.3456 iter time (s): 0.123 samples/sec: 260.163"),
            Some(rec(
                100,
                &[
                    ("loss", 2.3456),
                    ("iter_time_s", 0.123),
                    ("samples_per_s", 260.163)
                ]
            ))
        );
        assert_eq!(
            line("[rank0]: steps: 200 loss: 2.1 moe_loss: 0.0100 iter time (s): 0.100 samples/sec: 320.000"),
            Some(rec(
                200,
                &[
                    ("loss", 2.1),
                    ("moe_loss", 0.01),
                    ("iter_time_s", 0.1),
                    ("samples_per_s", 320.0)
                ]
            ))
        );
    }

    #[test]
    fn not_metrics() {
        for l in [
            "[2024-01-01 00:00:00,000] [INFO] [config.py:1000:print]   steps_per_print .............. 10",
            "[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Flops Profiler Enabled: False",
            "[2024-01-01 00:00:00,000] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768",
            "rank=0 step=10 loss=0.5",
            "skipped=3 but no step",
        ] {
            assert_eq!(line(l), None, "{l}");
        }
    }
}
