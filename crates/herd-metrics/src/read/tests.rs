//! Readers through [`reader`]: each format's lines read by its own reader only, and
//! [`Auto`]'s detection.

use super::*;
use crate::rec;

const KV: &str = "rank=0 step=10 loss=0.530095 samples_per_s=1557.1";
const TORCHTITAN: &str = "[rank0]:[titan] 2025-10-30 14:32:58,897 - root - INFO - \x1b[31mstep:  1  \x1b[32mloss:  8.16610  \x1b[38;2;180;60;0mgrad_norm:  3.6855  \x1b[38;2;54;234;195mmemory:  2.47GiB(3.12%)  \x1b[34mtps: 3,502  \x1b[36mtflops: 1.90  \x1b[35mmfu: 0.19%\x1b[39m";
const DEEPSPEED: &str = "[2024-01-01 00:00:00,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=20/global_step=10, RunningAvgSamplesPerSec=35.2, CurrSamplesPerSec=36.1, MemAllocated=1.2GB, MaxMemAllocated=2.3GB";
const DEEPSPEED_PROGRESS: &str = "[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]";
const DEEPSPEED_PIPE: &str = "steps: 10 loss: 2.3456 iter time (s): 0.123 samples/sec: 260.163";
const MEGATRON: &str = " [2026-01-01 00:00:00.123456] iteration       10/     500 | consumed samples:         1280 | elapsed time per iteration (ms): 1000.0 | learning rate: 1.000000E-04 | global batch size:   128 | lm loss: 1.023456E+01 | loss scale: 1.0 | grad norm: 2.345 | number of skipped iterations:   0 | number of nan iterations:   0 |";
const MEGATRON_VALIDATION: &str = " validation loss at iteration 100 on validation set | lm loss value: 2.345600E+00 | lm loss PPL: 1.043860E+01 | ";
const SWAV: &str = "INFO - 12/01/20 14:00:00 - 0:01:23 - Epoch: [0][50]\tTime 0.123 (0.456)\tData 0.010 (0.020)\tLoss 8.0000 (8.1000)\tLr: 0.3000";
const SWAV_LINEAR: &str = "Epoch[2] - Iter: [100/5005]\tTime 0.200 (0.210)\tData 0.050 (0.060)\tLoss 1.2000 (1.3000)\tPrec 70.000 (68.500)\tLR 0.3";
const JSON: &str = r#"{"step": 7, "loss": 0.25}"#;

/// Every sample line, with the one format that reads it.
fn samples() -> Vec<(Format, &'static str)> {
    vec![
        (Format::Json, JSON),
        (Format::Kv, KV),
        (Format::Torchtitan, TORCHTITAN),
        (Format::Deepspeed, DEEPSPEED),
        (Format::Deepspeed, DEEPSPEED_PROGRESS),
        (Format::Deepspeed, DEEPSPEED_PIPE),
        (Format::Megatron, MEGATRON),
        (Format::Megatron, MEGATRON_VALIDATION),
        (Format::Swav, SWAV),
        (Format::Swav, SWAV_LINEAR),
    ]
}

/// Lines of the same programs that are no metrics lines, and others.
const NOISE: &[&str] = &[
    "",
    "   ",
    " > building train, validation, and test datasets ...",
    "[titan] 2025-10-30 14:32:58,897 - root - INFO - Synchronizing and adjusting timeout for all ProcessGroups to 0:01:40",
    "[2024-01-01 00:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed Flops Profiler Enabled: False",
    "INFO - 12/01/20 14:00:00 - 0:00:05 - ============ Starting epoch 0 ... ============",
    "rank=0 checkpoint step=10 path=/scratch/ckpt/step_10.pt",
    "node001:12345:12345 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
    "Traceback (most recent call last):",
    "  File \"train.py\", line 12, in <module>",
    "{\"event\": \"start\", \"time\": 12.5}",
    "\x1b[1m\x1b[31mWARNING\x1b[0m: something step: happened",
];

#[test]
fn each_format_reads_its_own_lines_only() {
    let formats = [
        Format::Json,
        Format::Kv,
        Format::Torchtitan,
        Format::Deepspeed,
        Format::Megatron,
        Format::Swav,
    ];
    for (own, line) in samples() {
        for f in &formats {
            let got = reader(f).line(line);
            if *f == own {
                assert!(got.is_some(), "{f} should read {line:?}");
            } else {
                assert_eq!(got, None, "{f} read {own}'s {line:?}");
            }
        }
    }
    for line in NOISE {
        for f in formats.iter().chain([&Format::Auto, &Format::Off]) {
            assert_eq!(reader(f).line(line), None, "{f} read {line:?}");
        }
    }
}

#[test]
fn fixed_formats_through_reader() {
    assert_eq!(
        reader(&Format::Kv).line(KV),
        Some(rec(
            Some(10),
            &[("loss", 0.530095), ("samples_per_s", 1557.1)]
        ))
    );
    assert_eq!(
        reader(&Format::Megatron)
            .line(MEGATRON)
            .and_then(|r| r.get("samples_per_s")),
        Some(128.0)
    );
    assert_eq!(
        reader(&Format::Swav).line(SWAV_LINEAR).map(|r| r.step),
        Some(Some(2 * 5005 + 100))
    );
    assert_eq!(reader(&Format::Off).line(KV), None);
    assert_eq!(reader(&Format::Off).line(JSON), None);
    // a fixed format does not read herd's JSON lines besides its own
    assert_eq!(reader(&Format::Kv).line(JSON), None);
}

#[test]
fn auto_settles_on_the_first_format() {
    let mut auto = Auto::new();
    assert_eq!(auto.detected(), None);
    assert_eq!(auto.line(NOISE[2]), None);
    assert_eq!(auto.detected(), None);
    let r = auto.line(MEGATRON).expect("megatron line");
    assert_eq!(r.step, Some(10));
    assert_eq!(r.get("loss"), Some(10.23456));
    assert_eq!(auto.detected(), Some(Format::Megatron));
    // another format's lines are ignored from now on …
    assert_eq!(auto.line(DEEPSPEED), None);
    assert_eq!(auto.line(KV), None);
    assert_eq!(auto.line(TORCHTITAN), None);
    assert_eq!(auto.detected(), Some(Format::Megatron));
    // … but the settled format and JSON still read
    assert_eq!(
        auto.line(MEGATRON_VALIDATION),
        Some(rec(
            Some(100),
            &[("val_loss", 2.3456), ("val_ppl", 10.4386)]
        ))
    );
    assert_eq!(
        auto.line(r#"[rank0]: {"step": 11, "eval/acc": 0.5}"#),
        Some(rec(Some(11), &[("eval/acc", 0.5)]))
    );
}

#[test]
fn auto_reads_only_the_convention_once_a_line_of_it_came() {
    // train_ddp.py prints each step as JSON, then as key=value: read once.
    let mut auto = Auto::new();
    assert_eq!(auto.line(JSON), Some(rec(Some(7), &[("loss", 0.25)])));
    assert_eq!(auto.detected(), Some(Format::Json));
    assert_eq!(auto.line(KV), None, "the same numbers again, as key=value");
    assert_eq!(auto.line(MEGATRON), None);
    assert_eq!(auto.detected(), Some(Format::Json));
    assert!(auto.line(JSON).is_some());
}

#[test]
fn auto_detects_each_format() {
    for (own, line) in samples() {
        let mut auto = Auto::new();
        let direct = reader(&own).line(line);
        assert_eq!(auto.line(line), direct, "{line:?}");
        assert_eq!(auto.detected(), Some(own), "{line:?}");
    }
    // through `reader` too
    let mut r = reader(&Format::Auto);
    assert_eq!(r.line(SWAV).map(|r| r.values.len()), Some(9));
    assert_eq!(r.line(KV), None);
}

#[test]
fn regex_format() {
    let f: Format = r"regex:it (?P<step>\d+) loss (?P<loss>\S+) tput (?P<tput>[\d,]+)"
        .parse()
        .expect("valid");
    let mut r = reader(&f);
    assert_eq!(
        r.line("\x1b[2m[rank1]:\x1b[0m it 40 loss 0.125 tput 12,500 done"),
        Some(rec(Some(40), &[("loss", 0.125), ("tput", 12500.0)]))
    );
    assert_eq!(
        r.line("it 41 loss inf tput 3"),
        Some(rec(Some(41), &[("tput", 3.0)]))
    );
    assert_eq!(r.line(JSON), None);
    assert_eq!(r.line("nothing here"), None);
    // a Format made by hand with an expression that does not compile reads nothing
    assert_eq!(reader(&Format::Regex("(".into())).line("("), None);
    assert!("regex:(".parse::<Format>().is_err());
}

#[test]
fn format_names_round_trip() {
    for s in [
        "auto",
        "json",
        "kv",
        "torchtitan",
        "deepspeed",
        "megatron",
        "swav",
        "off",
        r"regex:step (?P<step>\d+)",
    ] {
        let f: Format = s.parse().expect("a format");
        assert_eq!(f.to_string(), s);
    }
    assert!("csv".parse::<Format>().is_err());
}
