//! Readers of metrics lines, one per [`Format`], and of the metrics files some trainers
//! write ([`read_scalars_json`], [`read_lightning_csv`]).
//!
//! A reader gets one worker's output a line at a time, as the worker wrote it: no `0: `
//! label, but maybe a logging prefix (`[rank0]:`, `[titan] 2026-12-01 14:00:00,123 - root -
//! INFO - `, `INFO - 12/01/20 14:00:00 - 0:01:23 - `) and ANSI colour codes, which every
//! reader skips. A line that is not a metrics line of the reader's format gives `None`,
//! cheaply: each reader first looks for its format's key words in the raw line and
//! allocates nothing when they are not there.
//!
//! # Names
//!
//! Where the formats agree on a meaning the name is herd's: `step` (the global
//! step/iteration, into [`Record::step`], never among the values), `loss`,
//! `samples_per_s`, `tokens_per_s`, `lr`, `epoch`. Every other number keeps the trainer's
//! name, lowercased, `%` read as `pct`, each run of other characters that are not
//! letters or digits turned into one `_` (`elapsed time per iteration (ms)` →
//! `elapsed_time_per_iteration_ms`); a unit written after the number joins the name
//! (`memory: 12.3GiB(45.6%)` → `memory_gib` 12.3, `memory_pct` 45.6; `mfu: 41.2%` →
//! `mfu_pct` 41.2). Numbers may be written `1,234` (thousands separators), `1.2E+01`,
//! `-0.5`; `nan`, `inf` and `-` are no number and are left out. Steps are whole numbers,
//! 0 or more.
//!
//! herd's own JSON convention keeps the names as the program wrote them (it chose them for
//! herd), nested objects flattened with `.` (`{"train": {"loss": 1}}` → `train.loss`).
//!
//! # Formats
//!
//! | format | recognised shape | step | names |
//! |---|---|---|---|
//! | `json` | a JSON object, the rest of the line after any prefix, with a whole-number `step` at its top level | `step` (required) | every other number by its key, as written; nested objects `a.b`; strings, booleans, `null`, arrays skipped; Python's `NaN`/`Infinity` skipped, not the line |
//! | `kv` | whitespace-separated `key=value` words with `step=N` and one more number | `step` (required) | each key normalised; `rank`, `local_rank`, `global_rank`, `node_rank`, `world_size`, `local_world_size`, `pid` dropped; non-numeric values skipped |
//! | `torchtitan` | `step: N  loss: X  grad_norm: X  memory: XGiB(Y%)  tps: N  tflops: X  mfu: X%` (colour codes between fields); `validate step: N  loss: X  memory: …  tps: N` | `step` (required) | `loss`; `tps` (and the older `wps`) → `tokens_per_s`; `memory` → `memory_gib`, `memory_pct`; `mfu` → `mfu_pct` (`N/A` skipped); `grad_norm`, `tflops`; validation lines prefix each name with `val_` |
//! | `deepspeed` | `epoch=E/micro_step=M/global_step=N, RunningAvgSamplesPerSec=X, CurrSamplesPerSec=X, MemAllocated=XGB, MaxMemAllocated=XGB` (and `…, vm %: X, swap %: X`); `step=N, skipped=K, lr=[X, …], mom=[(B1, B2)]`; the pipeline engine's `steps: N loss: X [name: X …] iter time (s): X samples/sec: X` | `global_step`, `step`, `steps` | `RunningAvgSamplesPerSec` → `samples_per_s`, `CurrSamplesPerSec` → `curr_samples_per_s`, `MemAllocated` → `mem_allocated_gb`, `MaxMemAllocated` → `max_mem_allocated_gb`, `epoch`, `micro_step`, `vm_pct`, `swap_pct`; `skipped`; `lr`, `mom`: the first number of the list; `samples/sec` → `samples_per_s`, `iter time (s)` → `iter_time_s`, `loss` |
//! | `megatron` | ` [date] iteration N/ TOTAL \| label: value \| … \|`; ` validation[-NAME] loss at iteration N [on validation set\|on test set] \| KEY value: X \| KEY PPL: X \|` | `iteration` | `lm loss` → `loss`, `learning rate` → `lr`, `samples per second` → `samples_per_s` (Megatron-DeepSpeed), `TOTAL` → `train_iters`, others normalised (`elapsed_time_per_iteration_ms`, `throughput_per_gpu_tflop_s_gpu`, `global_batch_size`, `consumed_samples`, `loss_scale`, `grad_norm`, `number_of_skipped_iterations`, …); `samples_per_s` = `global_batch_size` / (`elapsed_time_per_iteration_ms` / 1000) when the line has no samples per second of its own; validation: `lm loss value` → `val_loss`, `lm loss PPL` → `val_ppl`, other keys `val_KEY`, `val_KEY_ppl`; `test_` for the test set, `val_NAME_` for a named set |
//! | `swav` | `Epoch: [E][I]\tTime X (AVG)\tData X (AVG)\tLoss X (AVG)\tLr: X` (main_swav.py, main_deepclusterv2.py); `Epoch[E] - Iter: [I/PER_EPOCH]\tTime …\tLoss …\tPrec X (AVG)\tLR X` (eval_linear.py) | none for `Epoch: [E][I]` (the line does not say how many iterations an epoch has; `iter` counts within the epoch); E × PER_EPOCH + I for `Epoch[E] - Iter: [I/PER_EPOCH]` | `epoch`, `iter`; `Time` → `batch_time_s`, `batch_time_avg_s`; `Data` → `data_time_s`, `data_time_avg_s`; `Loss` → `loss`, `loss_avg`; `Lr`/`LR` → `lr`; others `NAME`, `NAME_avg` (`prec`, `prec_avg`) |
//! | `regex:RE` | the first match of RE in the line (colour codes stripped) | the group `step`, when it is a whole number | each other named group that is a number, by the group's name; a match with neither a step nor a number is no record |
//! | `auto` | herd's `json` on every line; the other line formats tried in turn (kv, torchtitan, deepspeed, megatron, swav) until one reads a line, then only that one; once a line of the convention came, only the convention (a program printing its numbers both ways is read once; see [`Auto`]) | as the format | as the format |
//! | `off` | nothing | | |
//!
//! Files: [`read_scalars_json`] (mmengine's `scalars.json`: the `json` shape a line, names
//! normalised: `coco/bbox_mAP` → `coco_bbox_map`; `epoch`, `iter` kept) and
//! [`read_lightning_csv`] (Lightning's `CSVLogger` `metrics.csv`: the `step` column is the
//! step, every other non-empty numeric cell a value: `lr-SGD` → `lr_sgd`).
//!
//! # Sources
//!
//! The shapes were checked against the trainers' code:
//! - torchtitan: pytorch/torchtitan, torchtitan/components/metrics.py (`MetricsProcessor.log`,
//!   `log_validation`), torchtitan/tools/utils.py (`Color`), torchtitan/tools/logging.py
//!   (the `[titan]` prefix).
//! - DeepSpeed: deepspeedai/DeepSpeed, deepspeed/runtime/engine.py (`_report_progress`),
//!   deepspeed/utils/timer.py (`ThroughputTimer.stop`), deepspeed/runtime/pipe/engine.py
//!   (`train_batch`), deepspeed/utils/logging.py (the `[date] [INFO] [file:line:func]` and
//!   `[Rank 0]` prefixes).
//! - Megatron-LM: NVIDIA/Megatron-LM, megatron/training/training.py (`training_log`,
//!   `evaluate_and_print_results`).
//! - SwAV: facebookresearch/swav, main_swav.py (`train`), eval_linear.py (`train`),
//!   src/logger.py (`LogFormatter`).
//! - mmengine: open-mmlab/mmengine, mmengine/visualization/vis_backend.py
//!   (`LocalVisBackend.add_scalars`).
//! - Lightning: Lightning-AI/pytorch-lightning, src/lightning/fabric/loggers/csv_logs.py
//!   (`_ExperimentWriter`).
//! - kv: examples/train_ddp.py in this repository.

mod deepspeed;
mod files;
mod json;
mod kv;
mod megatron;
mod pattern;
mod swav;
mod text;
mod torchtitan;

pub use files::{read_lightning_csv, read_scalars_json};

use std::str::FromStr;

use crate::Record;

/// Which shape a job's metrics lines have (`metrics` key, `--metrics`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Format {
    /// Detect it from the lines: herd's JSON lines always (and, once one came, nothing
    /// else), else the first other format a line matches, from then on.
    #[default]
    Auto,
    /// herd's convention: a JSON object a line with a numeric `step` (mmengine's
    /// `scalars.json` lines have this shape too).
    Json,
    /// `key=value` words (`step=10 loss=2.31 samples_per_s=512`), as examples/train_ddp.py.
    Kv,
    /// torchtitan: `step: 10  loss:  2.31  memory: … tps: 1,234  mfu: 41.2%`.
    Torchtitan,
    /// DeepSpeed: `… global_step=10, RunningAvgSamplesPerSec=35.2, CurrSamplesPerSec=…`.
    Deepspeed,
    /// Megatron-LM: ` iteration       10/     100 | … | lm loss: 2.31E+00 | …`.
    Megatron,
    /// SwAV's `Epoch: [0][50]\tTime 0.123 (0.456)\t… Loss 8.0 (8.1)\tLr: 0.3`.
    Swav,
    /// A user's regular expression whose named groups are the values (`step` among them).
    Regex(String),
    /// Read nothing.
    Off,
}

/// A `--metrics` value that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// The names `--metrics` takes.
pub const FORMAT_NAMES: &str =
    "auto, json, kv, torchtitan, deepspeed, megatron, swav, off, or regex:RE";

impl FromStr for Format {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Format, FormatError> {
        Ok(match s {
            "auto" => Format::Auto,
            "json" => Format::Json,
            "kv" => Format::Kv,
            "torchtitan" => Format::Torchtitan,
            "deepspeed" => Format::Deepspeed,
            "megatron" => Format::Megatron,
            "swav" => Format::Swav,
            "off" => Format::Off,
            _ => match s.strip_prefix("regex:") {
                Some(re) => {
                    regex::Regex::new(re).map_err(|e| FormatError(format!("regex:{re}: {e}")))?;
                    Format::Regex(re.to_owned())
                }
                None => {
                    return Err(FormatError(format!(
                        "{s:?} is no metrics format: give {FORMAT_NAMES}"
                    )))
                }
            },
        })
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::Auto => f.write_str("auto"),
            Format::Json => f.write_str("json"),
            Format::Kv => f.write_str("kv"),
            Format::Torchtitan => f.write_str("torchtitan"),
            Format::Deepspeed => f.write_str("deepspeed"),
            Format::Megatron => f.write_str("megatron"),
            Format::Swav => f.write_str("swav"),
            Format::Regex(re) => write!(f, "regex:{re}"),
            Format::Off => f.write_str("off"),
        }
    }
}

/// Reads one worker's lines, one at a time, in order.
pub trait Reader: Send {
    /// One line (without its newline): a record when it holds metrics.
    fn line(&mut self, line: &str) -> Option<Record>;
}

/// The reader for `format`. A `Regex` whose expression does not compile reads nothing
/// (`Format::from_str` refuses such an expression, so only a `Format` built by hand can
/// have one).
pub fn reader(format: &Format) -> Box<dyn Reader> {
    match format {
        Format::Auto => Box::new(Auto::new()),
        Format::Json => Box::new(Fixed(Kind::Json)),
        Format::Kv => Box::new(Fixed(Kind::Kv)),
        Format::Torchtitan => Box::new(Fixed(Kind::Torchtitan)),
        Format::Deepspeed => Box::new(Fixed(Kind::Deepspeed)),
        Format::Megatron => Box::new(Fixed(Kind::Megatron)),
        Format::Swav => Box::new(Fixed(Kind::Swav)),
        Format::Regex(re) => match pattern::Pattern::new(re) {
            Some(p) => Box::new(Regex(p)),
            None => Box::new(Off),
        },
        Format::Off => Box::new(Off),
    }
}

/// The formats with a fixed shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Json,
    Kv,
    Torchtitan,
    Deepspeed,
    Megatron,
    Swav,
}

impl Kind {
    fn read(self, line: &str) -> Option<Record> {
        match self {
            Kind::Json => json::line(line),
            Kind::Kv => kv::line(line),
            Kind::Torchtitan => torchtitan::line(line),
            Kind::Deepspeed => deepspeed::line(line),
            Kind::Megatron => megatron::line(line),
            Kind::Swav => swav::line(line),
        }
    }

    fn format(self) -> Format {
        match self {
            Kind::Json => Format::Json,
            Kind::Kv => Format::Kv,
            Kind::Torchtitan => Format::Torchtitan,
            Kind::Deepspeed => Format::Deepspeed,
            Kind::Megatron => Format::Megatron,
            Kind::Swav => Format::Swav,
        }
    }
}

/// The line formats [`Auto`] tries, in this order.
const DETECT: [Kind; 5] = [
    Kind::Kv,
    Kind::Torchtitan,
    Kind::Deepspeed,
    Kind::Megatron,
    Kind::Swav,
];

struct Fixed(Kind);

impl Reader for Fixed {
    fn line(&mut self, line: &str) -> Option<Record> {
        self.0.read(line)
    }
}

struct Regex(pattern::Pattern);

impl Reader for Regex {
    fn line(&mut self, line: &str) -> Option<Record> {
        self.0.line(line)
    }
}

struct Off;

impl Reader for Off {
    fn line(&mut self, _line: &str) -> Option<Record> {
        None
    }
}

/// `auto`: herd's JSON convention on every line; the other line formats (kv, torchtitan,
/// deepspeed, megatron, swav, in that order) tried on each line until one reads it, and
/// from then on only that one, so a line of another format later (a library that logs in
/// another trainer's shape) never mixes its numbers in.
#[derive(Debug, Default)]
pub struct Auto {
    settled: Option<Kind>,
    /// A line of herd's convention came: the worker speaks it, and nothing else is read
    /// (a program that prints its numbers both ways is not read twice).
    convention: bool,
}

impl Auto {
    /// A reader that has settled on nothing yet.
    pub fn new() -> Auto {
        Auto::default()
    }

    /// The line format this reader settled on: `None` until a line of one was read; JSON
    /// once a line of herd's convention came (from then on only the convention is read).
    pub fn detected(&self) -> Option<Format> {
        if self.convention {
            return Some(Format::Json);
        }
        self.settled.map(Kind::format)
    }
}

impl Reader for Auto {
    fn line(&mut self, line: &str) -> Option<Record> {
        if let Some(r) = json::line(line) {
            self.convention = true;
            return Some(r);
        }
        if self.convention {
            return None;
        }
        match self.settled {
            Some(kind) => kind.read(line),
            None => DETECT.iter().find_map(|&kind| {
                let r = kind.read(line)?;
                self.settled = Some(kind);
                Some(r)
            }),
        }
    }
}

#[cfg(test)]
mod tests;
