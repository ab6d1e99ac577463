//! Megatron-LM's training log line (megatron/training/training.py, `training_log`) and its
//! validation line (`evaluate_and_print_results`).

use crate::read::text::{find_word, norm, num, step_of, strip_ansi};
use crate::Record;

pub(crate) fn line(line: &str) -> Option<Record> {
    if !line.contains("iteration") || !line.contains(" |") {
        return None;
    }
    let t = strip_ansi(line);
    if let Some(at) = find_word(&t, "validation") {
        if t[at..].contains(" loss at ") {
            return validation(&t[at..]);
        }
    }
    train(&t)
}

/// ` [2024-01-01 00:00:00.123456] iteration       10/     500 | consumed samples: 1280 |
/// elapsed time per iteration (ms): 1234.5 | … | lm loss: 1.023456E+01 | …`
fn train(t: &str) -> Option<Record> {
    let at = find_word(t, "iteration ")?;
    let mut segments = t[at..].split('|');
    let head = segments.next()?["iteration ".len()..].trim();
    let (done, total) = head.split_once('/')?;
    let step = step_of(num(done)?)?;
    let mut values = Vec::new();
    if let Some(total) = num(total) {
        values.push(("train_iters".to_owned(), total));
    }
    for seg in segments {
        let Some((label, value)) = seg.rsplit_once(": ") else {
            continue;
        };
        let Some(v) = num(value) else { continue };
        let name = match label.trim() {
            "lm loss" => "loss".to_owned(),
            "learning rate" => "lr".to_owned(),
            "samples per second" => "samples_per_s".to_owned(),
            "tokens per second" => "tokens_per_s".to_owned(),
            l => norm(l),
        };
        values.push((name, v));
    }
    let get = |n: &str| values.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    if let (None, Some(batch), Some(ms)) = (
        get("samples_per_s"),
        get("global_batch_size"),
        get("elapsed_time_per_iteration_ms"),
    ) {
        if ms > 0.0 {
            values.push(("samples_per_s".to_owned(), batch / (ms / 1000.0)));
        }
    }
    // the head alone (`iteration 3/ 10 |` of something else) is not a metrics line
    if values.len() <= 1 {
        return None;
    }
    Some(Record {
        step: Some(step),
        values,
    })
}

/// ` validation loss at iteration 100 on validation set | lm loss value: 2.345600E+00 |
/// lm loss PPL: 1.043860E+01 | `; `on test set` gives `test_` names, a named set
/// (`validation-wiki loss at …`) `val_wiki_` names.
fn validation(t: &str) -> Option<Record> {
    let (head, rest) = t.split_once('|')?;
    let (which, at) = head.split_once(" loss at ")?;
    let suffix = norm(which.trim_start_matches("validation"));
    let prefix = if at.contains("test set") {
        "test_".to_owned()
    } else if suffix.is_empty() {
        "val_".to_owned()
    } else {
        format!("val_{suffix}_")
    };
    let it = find_word(at, "iteration ")?;
    let n = at[it + "iteration ".len()..].split_whitespace().next()?;
    let step = step_of(num(n)?)?;
    let mut values = Vec::new();
    for seg in rest.split('|') {
        let Some((label, value)) = seg.rsplit_once(": ") else {
            continue;
        };
        let Some(v) = num(value) else { continue };
        let label = label.trim();
        let name = if let Some(key) = label.strip_suffix(" value") {
            if key == "lm loss" {
                "loss".to_owned()
            } else {
                norm(key)
            }
        } else if let Some(key) = label.strip_suffix(" PPL") {
            if key == "lm loss" {
                "ppl".to_owned()
            } else {
                format!("{}_ppl", norm(key))
            }
        } else {
            norm(label)
        };
        values.push((format!("{prefix}{name}"), v));
    }
    if values.is_empty() {
        return None;
    }
    Some(Record {
        step: Some(step),
        values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rec;

    #[test]
    fn training_log() {
        let l = " [2026-01-01 00:00:00.123456] iteration       10/     500 | consumed samples:         1280 | \
                 elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | \
                 learning rate: 1.000000E-04 | global batch size:   128 | lm loss: 1.023456E+01 | \
                 loss scale: 1.0 | grad norm: 2.345 | number of skipped iterations:   0 | \
                 number of nan iterations:   0 |";
        assert_eq!(
            line(l),
            Some(rec(
                10,
                &[
                    ("train_iters", 500.0),
                    ("consumed_samples", 1280.0),
                    ("elapsed_time_per_iteration_ms", 1234.5),
                    ("throughput_per_gpu_tflop_s_gpu", 123.4),
                    ("lr", 1e-4),
                    ("global_batch_size", 128.0),
                    ("loss", 10.23456),
                    ("loss_scale", 1.0),
                    ("grad_norm", 2.345),
                    ("number_of_skipped_iterations", 0.0),
                    ("number_of_nan_iterations", 0.0),
                    ("samples_per_s", 128.0 / 1.2345),
                ]
            ))
        );
    }

    #[test]
    fn megatron_deepspeed_variant() {
        // Megatron-DeepSpeed prints its own samples per second: not derived again
        let l = "[rank7]: iteration      200/    1000 | consumed samples:        25600 | \
                 elapsed time per iteration (ms): 500.0 | learning rate: 6.000E-05 | \
                 global batch size:   128 | lm loss: 3.210000E+00 | loss scale: 4096.0 | \
                 grad norm: 0.812 | num zeros: 0.0 | number of skipped iterations:   0 | \
                 number of nan iterations:   0 | samples per second: 250.000 | TFLOPs: 150.25 |";
        assert_eq!(
            line(l),
            Some(rec(
                200,
                &[
                    ("train_iters", 1000.0),
                    ("consumed_samples", 25600.0),
                    ("elapsed_time_per_iteration_ms", 500.0),
                    ("lr", 6e-5),
                    ("global_batch_size", 128.0),
                    ("loss", 3.21),
                    ("loss_scale", 4096.0),
                    ("grad_norm", 0.812),
                    ("num_zeros", 0.0),
                    ("number_of_skipped_iterations", 0.0),
                    ("number_of_nan_iterations", 0.0),
                    ("samples_per_s", 250.0),
                    ("tflops", 150.25),
                ]
            ))
        );
    }

    #[test]
    fn validation_lines() {
        assert_eq!(
            line(" validation loss at iteration 100 on validation set | lm loss value: 2.345600E+00 | lm loss PPL: 1.043860E+01 | "),
            Some(rec(100, &[("val_loss", 2.3456), ("val_ppl", 10.4386)]))
        );
        assert_eq!(
            line(" validation loss at iteration 500 on test set | lm loss value: 2.000000E+00 | lm loss PPL: 7.389056E+00 | "),
            Some(rec(500, &[("test_loss", 2.0), ("test_ppl", 7.389056)]))
        );
        assert_eq!(
            line(" validation-wiki loss at iteration 100 | mtp loss value: 1.500000E+00 | mtp loss PPL: 4.481689E+00 | "),
            Some(rec(
                100,
                &[("val_wiki_mtp_loss", 1.5), ("val_wiki_mtp_loss_ppl", 4.481689)]
            ))
        );
    }

    #[test]
    fn not_metrics() {
        for l in [
            " > building train, validation, and test datasets ...",
            "[after training is done] datetime: 2026-01-01 00:00:00 ",
            " [2026-01-01 00:00:00] iteration 3/ 10 |",
            "(min, max) time across ranks (ms):",
            "    forward-backward ...............................: (1200.12, 1201.34)",
            "successfully saved checkpoint from iteration     100 to /ckpt [ t 1/2, p 1/1 ]",
        ] {
            assert_eq!(line(l), None, "{l}");
        }
    }
}
