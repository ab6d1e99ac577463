//! What the GPUs are doing: each node's agent samples the GPUs its workers were given every
//! few seconds with one long-running `nvidia-smi --query-gpu=… --format=csv,noheader,nounits
//! -lms N` (every NVIDIA GPU node has it: it comes with the driver), reads each CSV line
//! into a [`Sample`] and appends the samples to the attempt's `node-N.gpus.jsonl`
//! ([`crate::layout::AttemptDir::gpus`]), one JSON object a line. `herd top` reads them as
//! they grow ([`Tail`]); `herd report` reads them whole and sums them up per GPU
//! ([`summarize`], [`flags`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::stats::median;

/// The fields asked of `nvidia-smi --query-gpu`, in the order [`parse_line`] reads them.
/// Newer drivers call the throttle reasons "clock event reasons"
/// (`clocks_event_reasons.active`); older ones know only `clocks_throttle_reasons.active`,
/// which newer ones still accept.
pub const QUERY: [&str; 14] = [
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "memory.used",
    "memory.total",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "clocks.sm",
    "clocks_throttle_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "pci.bus_id",
];

/// `--query-gpu`'s value: [`QUERY`] joined by commas.
pub fn query_arg() -> String {
    QUERY.join(",")
}

/// A GPU's utilisation below this fraction of the median over the job's GPUs is idle
/// (far below the others), when that median is at least [`BUSY_UTIL`].
pub const IDLE_RATIO: f64 = 0.5;
/// The median utilisation (%) over the job's GPUs above which a GPU far below it is
/// flagged: a job whose GPUs are all quiet (starting, evaluating, data-bound everywhere)
/// has no GPU that stands out.
pub const BUSY_UTIL: f64 = 20.0;
/// Memory used at or above this fraction of the GPU's total is near its limit.
pub const NEAR_MEMORY: f64 = 0.95;

/// One reading of one GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Sample {
    /// When it was read, milliseconds since the Unix epoch.
    pub t: u64,
    /// `nvidia-smi`'s index of the GPU on its node.
    pub gpu: u32,
    /// Its UUID (`GPU-…`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uuid: String,
    /// Its product name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The ranks whose device it is (torch's `cuda:LOCAL_RANK` of the node's GPUs); empty
    /// when none is known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<u32>,
    /// Utilisation: the percentage of the last sample period a kernel ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub util: Option<f64>,
    /// Memory used, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used: Option<f64>,
    /// Memory in all, MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total: Option<f64>,
    /// Power drawn, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<f64>,
    /// Its power limit, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit: Option<f64>,
    /// Temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temp: Option<f64>,
    /// SM clock, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock: Option<f64>,
    /// Why its clocks are held down now ([`REASONS`]'s names; `gpu_idle` included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// Uncorrectable ECC errors since the driver loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
    /// Pages waiting to be retired at the next driver reload (a memory fault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_pending: Option<bool>,
    /// Its PCI bus id (`00000000:3B:00.0`): what the kernel log's Xid lines name it by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
}

/// The clock event (throttle) reasons of NVML's bit mask, by bit, with herd's names and
/// whether each one slows the GPU down (idle, application clocks, sync boost and display
/// clocks do not).
pub const REASONS: [(u64, &str, bool); 9] = [
    (0x1, "gpu_idle", false),
    (0x2, "applications_clocks", false),
    (0x4, "sw_power_cap", true),
    (0x8, "hw_slowdown", true),
    (0x10, "sync_boost", false),
    (0x20, "sw_thermal", true),
    (0x40, "hw_thermal", true),
    (0x80, "hw_power_brake", true),
    (0x100, "display_clocks", false),
];

/// The names of the reasons set in `mask`, in [`REASONS`]' order.
pub fn reasons(mask: u64) -> Vec<String> {
    REASONS
        .iter()
        .filter(|(bit, _, _)| mask & bit != 0)
        .map(|(_, name, _)| (*name).to_owned())
        .collect()
}

/// A value of `nvidia-smi`'s CSV, `None` where it has none (`[N/A]`, `[Not Supported]`,
/// `N/A`, blank).
fn value(field: &str) -> Option<&str> {
    let f = field.trim();
    (!f.is_empty() && !f.starts_with('[') && f != "N/A").then_some(f)
}

fn number(field: &str) -> Option<f64> {
    value(field)?.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// One line of `nvidia-smi --query-gpu=`[`query_arg`]` --format=csv,noheader,nounits`, read
/// at `t` (ms since the Unix epoch); `None` for any other line (a header, an error).
pub fn parse_line(line: &str, t: u64) -> Option<Sample> {
    parse_fields(&QUERY, line, t)
}

/// What a driver that refuses `field` in `--query-gpu` may know it as instead: the newer
/// name of the clock event reasons; `None`: leave the field out.
pub fn other_name(field: &str) -> Option<&'static str> {
    (field == "clocks_throttle_reasons.active").then_some("clocks_event_reasons.active")
}

/// One line of `nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits` where
/// `fields` are the fields asked, in order (any of [`QUERY`]'s, or their [`other_name`]s):
/// those not asked stay `None`. `None` for a line that is not one GPU's values.
pub fn parse_fields(fields: &[&str], line: &str, t: u64) -> Option<Sample> {
    let values: Vec<&str> = line.split(',').collect();
    if values.len() != fields.len() {
        return None;
    }
    let get = |name: &str| {
        fields
            .iter()
            .position(|f| *f == name || other_name(name) == Some(*f))
            .and_then(|i| value(values[i]))
    };
    let num = |name: &str| get(name).and_then(number);
    let gpu = get("index")?.parse::<u32>().ok()?;
    let mask = get("clocks_throttle_reasons.active").and_then(|m| {
        let m = m.trim_start_matches("0x").trim_start_matches("0X");
        u64::from_str_radix(m, 16).ok()
    });
    Some(Sample {
        t,
        gpu,
        uuid: get("uuid").unwrap_or_default().to_owned(),
        name: get("name").map(str::to_owned),
        ranks: Vec::new(),
        util: num("utilization.gpu"),
        mem_used: num("memory.used"),
        mem_total: num("memory.total"),
        power: num("power.draw"),
        power_limit: num("power.limit"),
        temp: num("temperature.gpu"),
        sm_clock: num("clocks.sm"),
        reasons: mask.map(reasons).unwrap_or_default(),
        ecc_uncorrected: get("ecc.errors.uncorrected.volatile.total").and_then(|v| v.parse().ok()),
        retired_pending: get("retired_pages.pending").map(|v| v.eq_ignore_ascii_case("yes")),
        pci: get("pci.bus_id").map(str::to_owned),
    })
}

/// Whether `id`, an entry of `CUDA_VISIBLE_DEVICES`, names the GPU `nvidia-smi` lists
/// with index `index` and UUID `uuid`: an index by its number, a UUID (`GPU-…`, `MIG-…`)
/// by it or a prefix of it, as CUDA takes them. `None` for an entry of another form, which
/// is not judged.
pub fn names_gpu(id: &str, index: Option<u32>, uuid: Option<&str>) -> Option<bool> {
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
        return Some(index.is_some() && id.parse::<u32>().ok() == index);
    }
    if id.starts_with("GPU-") || id.starts_with("MIG-") {
        return Some(uuid.is_some_and(|u| u.starts_with(id)));
    }
    None
}

impl Sample {
    /// The reasons that slow it down now (power cap, thermal, hardware slowdown), not idle.
    pub fn throttled_by(&self) -> Vec<&str> {
        self.reasons
            .iter()
            .filter(|r| REASONS.iter().any(|(_, name, slows)| *slows && name == r))
            .map(String::as_str)
            .collect()
    }

    /// Memory used as a fraction of its total.
    pub fn mem_fraction(&self) -> Option<f64> {
        match (self.mem_used, self.mem_total) {
            (Some(u), Some(t)) if t > 0.0 => Some(u / t),
            _ => None,
        }
    }
}

/// Appends `samples` to the file `path` as JSON lines, in one write (the file is created).
pub fn append(path: &Path, samples: &[Sample]) -> io::Result<()> {
    let mut text = String::new();
    for s in samples {
        text.push_str(&serde_json::to_string(s).map_err(io::Error::other)?);
        text.push('\n');
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(text.as_bytes())
}

/// Every sample in the file `path` (none when it does not exist); lines that are not a
/// sample (a partial last line) are skipped.
pub fn read(path: &Path) -> io::Result<Vec<Sample>> {
    let mut tail = Tail::new(path.to_owned());
    let mut out = Vec::new();
    tail.read(&mut out)?;
    Ok(out)
}

/// Reads a node's samples file as it grows: each [`Tail::read`] parses only the whole lines
/// appended since the last one.
#[derive(Debug, Clone)]
pub struct Tail {
    path: PathBuf,
    offset: u64,
}

impl Tail {
    /// A tail of `path` from its beginning (a file that does not exist yet is empty).
    pub fn new(path: PathBuf) -> Tail {
        Tail { path, offset: 0 }
    }

    /// Appends the samples of the whole lines written since the last read to `out`;
    /// returns how many. A file that shrank is read again from its start.
    pub fn read(&mut self, out: &mut Vec<Sample>) -> io::Result<usize> {
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        if len < self.offset {
            self.offset = 0;
        }
        if len == self.offset {
            return Ok(0);
        }
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::with_capacity((len - self.offset) as usize);
        file.take(len - self.offset).read_to_end(&mut bytes)?;
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let before = out.len();
        for line in bytes[..whole].split(|&b| b == b'\n') {
            if let Ok(s) = serde_json::from_slice::<Sample>(line) {
                out.push(s);
            }
        }
        self.offset += whole as u64;
        Ok(out.len() - before)
    }
}

/// One GPU over an attempt (or a job): its identity and what its samples add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Its node's index in the attempt.
    pub node: u32,
    /// `nvidia-smi`'s index of it on the node.
    pub gpu: u32,
    /// Its UUID.
    pub uuid: String,
    /// Its product name, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The ranks whose device it is.
    pub ranks: Vec<u32>,
    /// How many samples.
    pub samples: usize,
    /// Mean utilisation, %.
    pub mean_util: Option<f64>,
    /// The most memory it used, MiB, and its total.
    pub max_mem_used: Option<f64>,
    /// Its memory in all, MiB.
    pub mem_total: Option<f64>,
    /// Mean power drawn, W.
    pub mean_power: Option<f64>,
    /// The highest temperature, °C.
    pub max_temp: Option<f64>,
    /// The fraction of its samples in which it was throttled, and by what.
    pub throttled: f64,
    /// Every reason that slowed it down in any sample.
    pub throttled_by: Vec<String>,
    /// Uncorrectable ECC errors at its last sample.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected: Option<u64>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn max(values: impl Iterator<Item = f64>) -> Option<f64> {
    values.reduce(f64::max)
}

/// Node `node`'s `samples` summed up per GPU, by GPU index.
pub fn summarize(node: u32, samples: &[Sample]) -> Vec<Summary> {
    let mut gpus: Vec<u32> = samples.iter().map(|s| s.gpu).collect();
    gpus.sort_unstable();
    gpus.dedup();
    gpus.into_iter()
        .map(|gpu| {
            let of: Vec<&Sample> = samples.iter().filter(|s| s.gpu == gpu).collect();
            let last = of.last().copied().cloned().unwrap_or_default();
            let throttled = of.iter().filter(|s| !s.throttled_by().is_empty()).count();
            let mut by: Vec<String> = Vec::new();
            for s in &of {
                for r in s.throttled_by() {
                    if !by.iter().any(|b| b == r) {
                        by.push(r.to_owned());
                    }
                }
            }
            Summary {
                node,
                gpu,
                uuid: last.uuid.clone(),
                name: last.name.clone(),
                ranks: last.ranks.clone(),
                samples: of.len(),
                mean_util: mean(of.iter().filter_map(|s| s.util)),
                max_mem_used: max(of.iter().filter_map(|s| s.mem_used)),
                mem_total: last.mem_total,
                mean_power: mean(of.iter().filter_map(|s| s.power)),
                max_temp: max(of.iter().filter_map(|s| s.temp)),
                throttled: throttled as f64 / of.len().max(1) as f64,
                throttled_by: by,
                ecc_uncorrected: last.ecc_uncorrected,
            }
        })
        .collect()
}

/// What stands out about a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "flag", rename_all = "snake_case")]
pub enum Flag {
    /// Its utilisation is far below the other GPUs' (below [`IDLE_RATIO`] × their median,
    /// which is at least [`BUSY_UTIL`]): a data-bound rank, a rank on the wrong device.
    Idle {
        /// Its utilisation, %.
        util: f64,
        /// The median over the job's GPUs, %.
        median: f64,
    },
    /// Its clocks are held down by power or heat (a straggler's usual cause).
    Throttled {
        /// By what.
        by: Vec<String>,
    },
    /// Its memory is nearly full (at least [`NEAR_MEMORY`] of it): the next step may not fit.
    NearMemory {
        /// Used, MiB.
        used: f64,
        /// In all, MiB.
        total: f64,
    },
}

impl Flag {
    /// A short word for a table cell: `IDLE`, `THROTTLED`, `MEM`.
    pub fn word(&self) -> &'static str {
        match self {
            Flag::Idle { .. } => "IDLE",
            Flag::Throttled { .. } => "THROTTLED",
            Flag::NearMemory { .. } => "MEM",
        }
    }

    /// What it means, in words.
    pub fn words(&self) -> String {
        match self {
            Flag::Idle { util, median } => format!(
                "idle: {util:.0} % busy where the job's GPUs are {median:.0} % (a data-bound rank, or one on the wrong device?)"
            ),
            Flag::Throttled { by } => format!("throttled by {}", by.join(", ")),
            Flag::NearMemory { used, total } => format!(
                "memory nearly full: {:.1} of {:.1} GiB",
                used / 1024.0,
                total / 1024.0
            ),
        }
    }
}

/// What the flags of one GPU are judged on: a sample's figures or a summary's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reading {
    /// Utilisation, %.
    pub util: Option<f64>,
    /// What slows it down (empty: nothing).
    pub throttled_by: Vec<String>,
    /// Memory used, MiB.
    pub mem_used: Option<f64>,
    /// Memory in all, MiB.
    pub mem_total: Option<f64>,
}

/// What stands out about each GPU of `gpus`: the same rules for `top`'s newest samples and
/// the report's whole run. Returned in `gpus`' order.
pub fn flags(gpus: &[Reading]) -> Vec<Vec<Flag>> {
    let mid = median(gpus.iter().filter_map(|g| g.util));
    gpus.iter()
        .map(|g| {
            let mut out = Vec::new();
            if let (Some(u), Some(m)) = (g.util, mid) {
                if m >= BUSY_UTIL && u < IDLE_RATIO * m {
                    out.push(Flag::Idle { util: u, median: m });
                }
            }
            if !g.throttled_by.is_empty() {
                out.push(Flag::Throttled {
                    by: g.throttled_by.clone(),
                });
            }
            if let (Some(u), Some(t)) = (g.mem_used, g.mem_total) {
                if t > 0.0 && u / t >= NEAR_MEMORY {
                    out.push(Flag::NearMemory { used: u, total: t });
                }
            }
            out
        })
        .collect()
}

/// The flags of the newest sample of each GPU in `latest` (what `herd top` shows).
pub fn flags_now(latest: &[&Sample]) -> Vec<Vec<Flag>> {
    let rows: Vec<Reading> = latest
        .iter()
        .map(|s| Reading {
            util: s.util,
            throttled_by: s.throttled_by().into_iter().map(str::to_owned).collect(),
            mem_used: s.mem_used,
            mem_total: s.mem_total,
        })
        .collect();
    flags(&rows)
}

/// A GPU throttled in at least this fraction of its samples is throttled over the run.
pub const THROTTLED_OFTEN: f64 = 0.25;

/// The flags of each GPU over the whole run (what `herd report` names): idle on its mean
/// utilisation, throttled in at least [`THROTTLED_OFTEN`] of its samples, near its memory
/// limit at its peak.
pub fn flags_over(summaries: &[Summary]) -> Vec<Vec<Flag>> {
    let rows: Vec<Reading> = summaries
        .iter()
        .map(|s| Reading {
            util: s.mean_util,
            throttled_by: if s.throttled >= THROTTLED_OFTEN {
                s.throttled_by.clone()
            } else {
                Vec::new()
            },
            mem_used: s.max_mem_used,
            mem_total: s.mem_total,
        })
        .collect();
    flags(&rows)
}

mod errors;
pub use errors::{parse_xid, same_bus, xid_meaning, GpuError};

#[cfg(test)]
mod tests;
