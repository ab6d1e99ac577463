//! `key=value` words, as examples/train_ddp.py prints them.

use crate::read::text::{norm, num, step_of, strip_ansi};
use crate::Record;

/// Keys that say who printed the line, not how training goes.
const NOT_METRICS: &[&str] = &[
    "rank",
    "local_rank",
    "global_rank",
    "node_rank",
    "world_size",
    "local_world_size",
    "pid",
];

pub(crate) fn line(line: &str) -> Option<Record> {
    if !line.contains("step=") {
        return None;
    }
    let t = strip_ansi(line);
    let mut step = None;
    let mut values = Vec::new();
    for word in t.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            continue;
        };
        // a prefix glued to the first key (`[rank0]:step=3`): the key is the trailing run
        // of name characters
        let start = key
            .rfind(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '.' | '-' | '/')))
            .map_or(0, |i| i + 1);
        let key = key[start..].trim_start_matches('-');
        if key.is_empty() {
            continue;
        }
        let key = norm(key);
        if key == "step" {
            step = Some(step_of(num(value)?)?);
            continue;
        }
        if NOT_METRICS.contains(&key.as_str()) {
            continue;
        }
        if let Some(v) = num(value) {
            values.push((key, v));
        }
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

    #[test]
    fn train_ddp() {
        // examples/train_ddp.py: `rank={rank} step={step} loss={loss:.6f} samples_per_s={rate:.1f}`
        assert_eq!(
            line("rank=3 step=10 loss=0.530095 samples_per_s=1557.1"),
            Some(rec(10, &[("loss", 0.530095), ("samples_per_s", 1557.1)]))
        );
        assert_eq!(
            line("[rank3]:rank=3 step=20 loss=0.25 lr=1.0E-03 tokens=1,024 note=warm"),
            Some(rec(20, &[("loss", 0.25), ("lr", 1e-3), ("tokens", 1024.0)]))
        );
        assert_eq!(
            line("2026-12-01 14:00:00,123 - INFO - \x1b[1mstep=30\x1b[0m Loss=nan acc=0.5"),
            Some(rec(30, &[("acc", 0.5)]))
        );
    }

    #[test]
    fn not_metrics() {
        for l in [
            // train_ddp.py's other lines: step but no numbers besides it
            "rank=0 checkpoint step=10 path=/scratch/exp/ckpt/step_10.pt",
            "rank=0 resumed from=/scratch/exp/ckpt/step_10.pt step=10",
            "rank=0 stopping on SIGUSR1 step=42",
            // numbers but no step
            "rank=0 loss=0.5",
            // a step that is not a whole number
            "rank=0 step=ten loss=0.5",
            // DeepSpeed's comma-separated shape is not key=value words
            "[Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]",
            "NCCL INFO Channel 00/02 : 0 1 2 3",
        ] {
            assert_eq!(line(l), None, "{l}");
        }
    }
}
