//! Readers of metrics lines, one per [`Format`]. (Being filled in: only the JSON-lines
//! convention reads anything yet.)

use std::str::FromStr;

use crate::Record;

/// Which shape a job's metrics lines have (`metrics` key, `--metrics`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Format {
    /// Detect it from the lines: herd's JSON lines always, and the first other format a
    /// line matches from then on.
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

/// The reader for `format`.
pub fn reader(format: &Format) -> Box<dyn Reader> {
    match format {
        Format::Off => Box::new(Off),
        _ => Box::new(Json),
    }
}

struct Off;

impl Reader for Off {
    fn line(&mut self, _line: &str) -> Option<Record> {
        None
    }
}

/// herd's convention.
struct Json;

impl Reader for Json {
    fn line(&mut self, line: &str) -> Option<Record> {
        let t = line.trim();
        if !t.starts_with('{') || !t.contains("\"step\"") {
            return None;
        }
        let serde_json::Value::Object(map) = serde_json::from_str(t).ok()? else {
            return None;
        };
        let step = map.get("step")?.as_f64().filter(|s| *s >= 0.0)? as u64;
        let values: Vec<(String, f64)> = map
            .iter()
            .filter(|(k, _)| *k != "step")
            .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
            .collect();
        Some(Record {
            step: Some(step),
            values,
        })
    }
}
