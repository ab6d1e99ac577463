//! torchtitan's training log line (torchtitan/components/metrics.py, `MetricsProcessor.log`
//! and `log_validation`).

use crate::read::text::{find_word, label_values, norm_into, num, split_num, step_of, strip_ansi};
use crate::Record;

pub(crate) fn line(line: &str) -> Option<Record> {
    if !line.contains("step:") || !line.contains("loss:") {
        return None;
    }
    let t = strip_ansi(line);
    let at = find_word(&t, "step:")?;
    let prefix = if t[..at].trim_end().ends_with("validate") {
        "val"
    } else {
        ""
    };
    let mut step = None;
    let mut values = Vec::with_capacity(8);
    for (label, value) in label_values(&t[at..]) {
        if label == "step" {
            step = Some(step_of(num(value)?)?);
            continue;
        }
        let (n, unit) = split_num(value);
        let Some(v) = num(n) else { continue };
        // `29.81GiB(31.38%)`: the unit joins the name, the parenthesised share is `_pct`
        let (unit, inner) = match unit.split_once('(') {
            Some((u, rest)) => (u, rest.strip_suffix(')')),
            None => (unit, None),
        };
        let mut name = String::with_capacity(prefix.len() + label.len() + 8);
        name.push_str(prefix);
        match label {
            "tps" | "wps" => norm_into(&mut name, "tokens_per_s", false),
            _ => norm_into(&mut name, label, false),
        }
        let base = name.len();
        norm_into(&mut name, unit, false);
        if let Some((n, u)) = inner.map(split_num) {
            if let Some(inner_v) = num(n) {
                let mut other = String::with_capacity(base + 4);
                other.push_str(&name[..base]);
                norm_into(&mut other, u, false);
                if other.len() > base {
                    values.push((name, v));
                    values.push((other, inner_v));
                    continue;
                }
            }
        }
        values.push((name, v));
    }
    if values.is_empty() {
        return None;
    }
    Some(Record {
        step: Some(step?),
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rec;

    /// The colours of torchtitan/tools/utils.py `Color`.
    fn coloured(step: &str, rest: &str) -> String {
        format!("\x1b[31mstep: {step}  \x1b[32m{rest}\x1b[39m")
    }

    #[test]
    fn train_line() {
        let l = "[rank0]:[titan] 2025-10-30 14:32:58,990 - root - INFO - \x1b[31mstep:  2  \
                 \x1b[32mloss:  6.10980  \x1b[38;2;180;60;0mgrad_norm:  4.6416  \
                 \x1b[38;2;54;234;195mmemory:  2.49GiB(3.15%)  \x1b[34mtps: 177,138  \
                 \x1b[36mtflops: 96.17  \x1b[35mmfu: 9.72%\x1b[39m";
        assert_eq!(
            line(l),
            Some(rec(
                2,
                &[
                    ("loss", 6.1098),
                    ("grad_norm", 4.6416),
                    ("memory_gib", 2.49),
                    ("memory_pct", 3.15),
                    ("tokens_per_s", 177138.0),
                    ("tflops", 96.17),
                    ("mfu_pct", 9.72),
                ]
            ))
        );
        // without colour, with the quantised `mfu: N/A`, tflops with a thousands comma
        let l = "[titan] 2026-01-01 00:00:00,000 - root - INFO - step: 10  loss:  2.31000  \
                 grad_norm:  0.5000  memory: 29.81GiB(31.38%)  tps: 1,234  tflops: 1,045.60  mfu: N/A";
        assert_eq!(
            line(l),
            Some(rec(
                10,
                &[
                    ("loss", 2.31),
                    ("grad_norm", 0.5),
                    ("memory_gib", 29.81),
                    ("memory_pct", 31.38),
                    ("tokens_per_s", 1234.0),
                    ("tflops", 1045.6),
                ]
            ))
        );
    }

    #[test]
    fn older_and_validation() {
        // older torchtitan: `wps` and no grad_norm
        assert_eq!(
            line(&coloured(
                " 1",
                "loss: 10.8479  memory:  9.09GiB(11.53%)  wps: 1,144  mfu: 2.13%"
            )),
            Some(rec(
                1,
                &[
                    ("loss", 10.8479),
                    ("memory_gib", 9.09),
                    ("memory_pct", 11.53),
                    ("tokens_per_s", 1144.0),
                    ("mfu_pct", 2.13),
                ]
            ))
        );
        let l = "[titan] 2026-01-01 00:00:00,000 - root - INFO - \x1b[33mvalidate step: 100  \
                 \x1b[32mloss:  2.1234  \x1b[38;2;54;234;195mmemory: 30.00GiB(31.58%)  \
                 \x1b[34mtps: 5,000\x1b[39m";
        assert_eq!(
            line(l),
            Some(rec(
                100,
                &[
                    ("val_loss", 2.1234),
                    ("val_memory_gib", 30.0),
                    ("val_memory_pct", 31.58),
                    ("val_tokens_per_s", 5000.0),
                ]
            ))
        );
    }

    #[test]
    fn not_metrics() {
        for l in [
            "[titan] 2025-10-30 14:32:58,897 - root - INFO - Synchronizing and adjusting timeout for all ProcessGroups to 0:01:40",
            "[titan] 2026-01-01 00:00:00,000 - root - INFO - Training starts at step 1",
            "[titan] 2026-01-01 00:00:00,000 - root - INFO - step: 1 saved checkpoint loss: unknown",
            "global_step: 3 loss: 1.0",
        ] {
            assert_eq!(line(l), None, "{l}");
        }
    }
}
