//! The GPUs of one experiment as `herd report` reads them (docs/report.md, "GPUs"): every
//! attempt's `node-N.gpus.jsonl` read whole, summed up per GPU
//! ([`herd_exp::gpus::summarize`]), each attempt's GPUs flagged together
//! ([`herd_exp::gpus::flags_over`]), and a short series of each GPU's utilisation and
//! memory used for the plots and `--json`.

use std::collections::BTreeMap;
use std::io;

use herd_exp::gpus::{self, Flag, Sample, Summary};
use herd_exp::layout::LogsDir;
use herd_exp::logs::History;
use herd_exp::timeline::{Entry, Event};
use serde_json::{json, Value};

use super::thin::keep;

/// The most points of one GPU's series in one attempt: the smallest and the largest
/// utilisation of each of half as many buckets (a dip stays in sight).
pub const SERIES_POINTS: usize = 500;

/// One point of a GPU's series: when (ms since the Unix epoch), its utilisation (%) and
/// memory used (MiB).
pub type Point = (u64, Option<f64>, Option<f64>);

/// One GPU in one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// The attempt (K of `logs/attempt-K`).
    pub attempt: u32,
    /// Its node's host, when the timeline names it.
    pub host: Option<String>,
    /// What its samples add up to.
    pub summary: Summary,
    /// What stands out about it over the attempt, judged with the attempt's other GPUs.
    pub flags: Vec<Flag>,
    /// Its utilisation and memory over the attempt, at most [`SERIES_POINTS`] points.
    pub series: Vec<Point>,
}

impl Gpu {
    /// Its node: the host, else `node N`.
    fn node_name(&self) -> String {
        self.host
            .clone()
            .unwrap_or_else(|| format!("node {}", self.summary.node))
    }

    /// `(rank 3)`, `(ranks 3, 4)`, `(no rank)`; `attempt`: with its attempt
    /// (`(rank 3, attempt 1)`).
    fn ranks_words(&self, attempt: bool) -> String {
        let mut w = match self.summary.ranks.as_slice() {
            [] => "no rank".to_owned(),
            [r] => format!("rank {r}"),
            many => {
                let list: Vec<String> = many.iter().map(u32::to_string).collect();
                format!("ranks {}", list.join(", "))
            }
        };
        if attempt {
            w.push_str(&format!(", attempt {}", self.attempt));
        }
        format!("({w})")
    }

    /// The legend's name of it: `gpu-a02/1 (rank 3)` (node/GPU (ranks)).
    pub fn label(&self) -> String {
        format!(
            "{}/{} {}",
            self.node_name(),
            self.summary.gpu,
            self.ranks_words(false)
        )
    }
}

/// Every GPU of an experiment with samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gpus {
    /// The job's first sample, ms since the Unix epoch (the series' zero).
    pub first_ms: Option<u64>,
    /// The mean utilisation over every sample of every GPU, %.
    pub mean_util: Option<f64>,
    /// Each GPU of each attempt, by attempt, node and index.
    pub per_gpu: Vec<Gpu>,
}

/// Each node's host in attempt `k`, by node index: from the attempt's `rendezvous` (its
/// nodes and their node ranks), else from the allocation's nodes in the latest `started`
/// before the attempt began (by node rank).
pub fn hosts(history: &History, events: &[Entry], k: u32) -> BTreeMap<u32, String> {
    if let Some(nodes) = history.attempt(k).nodes {
        return nodes.into_iter().map(|n| (n.node, n.host)).collect();
    }
    let upto = events
        .iter()
        .position(|e| matches!(&e.event, Event::AttemptStarted(a) if a.attempt == k))
        .unwrap_or(events.len());
    events[..upto]
        .iter()
        .rev()
        .find_map(|e| match &e.event {
            Event::Started(s) => Some(s.nodes.clone()),
            _ => None,
        })
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, h)| (u32::try_from(i).unwrap_or(u32::MAX), h))
        .collect()
}

/// A GPU's samples (in time order) as at most [`SERIES_POINTS`] points.
fn series(of: &[&Sample]) -> Vec<Point> {
    keep(of.len(), SERIES_POINTS, |i| of[i].util.unwrap_or(0.0))
        .into_iter()
        .map(|i| (of[i].t, of[i].util, of[i].mem_used))
        .collect()
}

/// Reads the GPU samples of `attempts` (each `logs/attempt-K/node-N.gpus.jsonl`, whole),
/// naming each node by [`hosts`]. No samples: an empty [`Gpus`].
pub fn load(
    logs: &LogsDir,
    attempts: &[u32],
    history: &History,
    events: &[Entry],
) -> io::Result<Gpus> {
    let mut out = Gpus::default();
    let (mut sum, mut n) = (0.0, 0usize);
    for &k in attempts {
        let dir = logs.attempt(k);
        let hosts = hosts(history, events, k);
        let mut mine: Vec<Gpu> = Vec::new();
        for node in dir.gpu_nodes()? {
            let path = dir.gpus(node);
            let mut samples = gpus::read(&path)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
            samples.sort_by_key(|s| s.t);
            for s in &samples {
                if let Some(u) = s.util {
                    sum += u;
                    n += 1;
                }
                out.first_ms = Some(out.first_ms.map_or(s.t, |f| f.min(s.t)));
            }
            for summary in gpus::summarize(node, &samples) {
                let of: Vec<&Sample> = samples.iter().filter(|s| s.gpu == summary.gpu).collect();
                mine.push(Gpu {
                    attempt: k,
                    host: hosts.get(&node).cloned(),
                    series: series(&of),
                    summary,
                    flags: Vec::new(),
                });
            }
        }
        let summaries: Vec<Summary> = mine.iter().map(|g| g.summary.clone()).collect();
        for (g, flags) in mine.iter_mut().zip(gpus::flags_over(&summaries)) {
            g.flags = flags;
        }
        out.per_gpu.extend(mine);
    }
    out.mean_util = (n > 0).then(|| sum / n as f64);
    Ok(out)
}

impl Gpus {
    /// Whether there is no GPU sample at all (a CPU job, nodes without `nvidia-smi`).
    pub fn is_empty(&self) -> bool {
        self.per_gpu.is_empty()
    }

    /// Seconds since the job's first sample.
    fn secs(&self, t: u64) -> f64 {
        t.saturating_sub(self.first_ms.unwrap_or(t)) as f64 / 1000.0
    }

    /// Whether the samples span more than one attempt (then each GPU is named with its).
    fn several_attempts(&self) -> bool {
        self.per_gpu
            .windows(2)
            .any(|w| w[0].attempt != w[1].attempt)
    }

    /// The GPUs, counted once over the attempts (by node and index).
    fn count(&self) -> usize {
        let mut seen: Vec<(String, u32)> = self
            .per_gpu
            .iter()
            .map(|g| (g.node_name(), g.summary.gpu))
            .collect();
        seen.sort();
        seen.dedup();
        seen.len()
    }

    /// The section's first line, `None` without samples: `mean utilisation 76.4 % over 5
    /// GPUs; 2 flagged:` (`…; none flagged`).
    pub fn headline(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let n = self.count();
        let mean = self
            .mean_util
            .map_or_else(|| "unknown".to_owned(), |u| format!("{u:.1} %"));
        let flagged = self.per_gpu.iter().filter(|g| !g.flags.is_empty()).count();
        Some(format!(
            "mean utilisation {mean} over {n} GPU{}; {}",
            if n == 1 { "" } else { "s" },
            if flagged == 0 {
                "none flagged".to_owned()
            } else {
                format!("{flagged} flagged:")
            }
        ))
    }

    /// One line per flagged GPU: `gpu-a02 GPU 1 (rank 3): idle: 4 % busy where the job's
    /// GPUs are 91 % (…)`, its flags' words joined by `; ` (with its attempt when the
    /// samples span several: `(rank 3, attempt 1)`).
    pub fn flagged(&self) -> Vec<String> {
        let attempt = self.several_attempts();
        self.per_gpu
            .iter()
            .filter(|g| !g.flags.is_empty())
            .map(|g| {
                let words: Vec<String> = g.flags.iter().map(Flag::words).collect();
                format!(
                    "{} GPU {} {}: {}",
                    g.node_name(),
                    g.summary.gpu,
                    g.ranks_words(attempt),
                    words.join("; ")
                )
            })
            .collect()
    }

    /// `--json`'s `gpu_usage` (docs/report.md): `mean_util` and `per_gpu`, each GPU of each
    /// attempt with its summary's fields, `attempt`, `host`, `flags` (each with `words`)
    /// and `series` (`[seconds since the job's first sample, util, mem_used]`); `None`
    /// without samples.
    pub fn json(&self) -> Option<Value> {
        if self.is_empty() {
            return None;
        }
        let per_gpu: Vec<Value> = self
            .per_gpu
            .iter()
            .map(|g| {
                let mut v = serde_json::to_value(&g.summary).unwrap_or_else(|_| json!({}));
                v["attempt"] = json!(g.attempt);
                v["host"] = json!(g.host);
                v["flags"] = g
                    .flags
                    .iter()
                    .map(|f| {
                        let mut o = serde_json::to_value(f).unwrap_or_else(|_| json!({}));
                        o["words"] = json!(f.words());
                        o
                    })
                    .collect();
                v["series"] = g
                    .series
                    .iter()
                    .map(|&(t, u, m)| json!([self.secs(t), u, m]))
                    .collect();
                v
            })
            .collect();
        Some(json!({"mean_util": self.mean_util, "per_gpu": per_gpu}))
    }

    /// What the plots draw: the legend (each GPU's key and [`Gpu::label`], keys in order of
    /// first appearance) and one line per GPU per attempt (key, attempt, points: seconds
    /// since the job's first sample against utilisation %, or memory used GiB with
    /// `memory`; points without the figure left out).
    #[allow(clippy::type_complexity)]
    pub fn plot_lines(
        &self,
        memory: bool,
    ) -> (Vec<(u32, String)>, Vec<(u32, u32, Vec<(f64, f64)>)>) {
        let mut legend: Vec<(u32, String)> = Vec::new();
        let mut lines = Vec::new();
        for g in &self.per_gpu {
            let label = g.label();
            let key = match legend.iter().find(|(_, l)| *l == label) {
                Some((k, _)) => *k,
                None => {
                    let k = u32::try_from(legend.len()).unwrap_or(u32::MAX);
                    legend.push((k, label));
                    k
                }
            };
            let points: Vec<(f64, f64)> = g
                .series
                .iter()
                .filter_map(|&(t, u, m)| {
                    let y = if memory { m.map(|m| m / 1024.0) } else { u };
                    Some((self.secs(t), y?))
                })
                .collect();
            if !points.is_empty() {
                lines.push((key, g.attempt, points));
            }
        }
        legend.retain(|(k, _)| lines.iter().any(|(key, _, _)| key == k));
        (legend, lines)
    }
}
