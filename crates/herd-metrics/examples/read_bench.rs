//! Times the `auto` reader on a million mixed worker-output lines and prints lines/s.
//!
//! `cargo run --release -p herd-metrics --example read_bench`

use std::hint::black_box;
use std::time::Instant;

use herd_metrics::read::{reader, Format};

const LINES: usize = 1_000_000;

/// What a worker's output looks like: mostly not metrics.
const NOISE: &[&str] = &[
    "node001:12345:12345 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
    "[rank0]:[titan] 2025-10-30 14:32:58,897 - root - INFO - Synchronizing and adjusting timeout for all ProcessGroups to 0:01:40",
    "  File \"/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1736, in _wrapped_call_impl",
    "\x1b[1m\x1b[33mWARNING\x1b[0m: torch.distributed.run: Setting OMP_NUM_THREADS environment variable for each process to be 1",
    "[2024-01-01 00:00:00,000] [INFO] [config.py:1000:print]   steps_per_print .............. 10",
    " > building train, validation, and test datasets ...",
    "Epoch 3 done: saved checkpoint to /scratch/exp/ckpt/epoch_3.pt",
    "",
];

fn main() {
    let metrics = [
        "[rank0]:[titan] 2025-10-30 14:32:58,990 - root - INFO - \x1b[31mstep:  2  \x1b[32mloss:  6.10980  \x1b[38;2;180;60;0mgrad_norm:  4.6416  \x1b[38;2;54;234;195mmemory:  2.49GiB(3.15%)  \x1b[34mtps: 177,138  \x1b[36mtflops: 96.17  \x1b[35mmfu: 9.72%\x1b[39m",
        r#"{"step": 10, "loss": 0.53, "samples_per_s": 1557.1}"#,
    ];
    // one metrics line in ten
    let lines: Vec<&str> = (0..LINES)
        .map(|i| {
            if i % 10 == 0 {
                metrics[(i / 10) % metrics.len()]
            } else {
                NOISE[i % NOISE.len()]
            }
        })
        .collect();
    for (what, format) in [
        ("auto", Format::Auto),
        ("kv", Format::Kv),
        ("megatron", Format::Megatron),
    ] {
        let mut r = reader(&format);
        let start = Instant::now();
        let mut records = 0usize;
        for l in &lines {
            if black_box(r.line(black_box(l))).is_some() {
                records += 1;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "{what:>9}: {LINES} lines ({records} records) in {secs:.3} s: {:.0} lines/s",
            LINES as f64 / secs
        );
    }
    for (what, format) in [
        ("json", Format::Json),
        ("kv", Format::Kv),
        ("torchtitan", Format::Torchtitan),
        ("deepspeed", Format::Deepspeed),
        ("megatron", Format::Megatron),
        ("swav", Format::Swav),
    ] {
        let mut r = reader(&format);
        let start = Instant::now();
        for i in 0..LINES {
            black_box(r.line(black_box(NOISE[i % NOISE.len()])));
        }
        let secs = start.elapsed().as_secs_f64();
        println!("{what:>10} noise: {:.0} lines/s", LINES as f64 / secs);
    }
    for (i, m) in metrics.iter().enumerate() {
        let mut r = reader(&Format::Auto);
        let start = Instant::now();
        for _ in 0..LINES / 10 {
            black_box(r.line(black_box(m)));
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "metrics line {i}: {:.0} lines/s",
            (LINES / 10) as f64 / secs
        );
    }
    // the worst case for auto: nothing settled yet, every line tried by every format
    let mut r = reader(&Format::Auto);
    let start = Instant::now();
    for i in 0..LINES {
        black_box(r.line(black_box(NOISE[i % NOISE.len()])));
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "auto, unsettled, noise only: {:.0} lines/s",
        LINES as f64 / secs
    );
}
