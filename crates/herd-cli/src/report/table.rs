//! The scaling table: one row per experiment, as markdown or JSON (docs/report.md).

use herd_metrics::median;
use std::borrow::Borrow;

use herd_metrics::store::Series;
use serde_json::{json, Value};

/// One run's line of the scaling table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The experiment.
    pub name: String,
    /// Nodes it ran on.
    pub nodes: u32,
    /// Workers (GPUs) over all nodes.
    pub gpus: u32,
    /// Whether its workers were GPUs (the plan asked for GPUs); else CPU workers.
    pub on_gpus: bool,
    /// Samples per second of the whole job: the sum over ranks of each rank's median rate.
    pub samples_per_s: f64,
    /// Per GPU: `samples_per_s / gpus`.
    pub per_gpu: f64,
    /// Per-GPU rate against the smallest run's (1.0 = perfect scaling).
    pub efficiency: f64,
    /// Median wall time of an epoch (`epoch_time_s` readings), when the job reports it.
    pub epoch_time_s: Option<f64>,
    /// Readings the rates came from.
    pub readings: usize,
}

/// A run's rate and epoch time from its ranks' readings: each rank's median
/// `samples_per_s` (its first reading left out when it has more: the warm-up), summed; the
/// median over all ranks' `epoch_time_s`.
pub fn measure<S: Borrow<Series>>(ranks: &[S]) -> (Option<f64>, Option<f64>, usize) {
    let mut total = 0.0;
    let mut any = false;
    let mut readings = 0;
    let mut epochs = Vec::new();
    for s in ranks {
        let s: &Series = s.borrow();
        if let Some(col) = s.column("samples_per_s") {
            let mut rates: Vec<f64> = col.iter().copied().filter(|v| v.is_finite()).collect();
            if rates.len() > 1 {
                rates.remove(0);
            }
            readings += rates.len();
            if let Some(m) = median(rates) {
                total += m;
                any = true;
            }
        }
        if let Some(col) = s.column("epoch_time_s") {
            epochs.extend(col.iter().copied());
        }
    }
    (any.then_some(total), median(epochs), readings)
}

/// The table's rows from each run's (name, nodes, workers, whether they were GPUs, ranks'
/// series), efficiency against the run with the fewest GPUs.
#[allow(clippy::type_complexity)]
pub fn rows<S: Borrow<Series>>(mut runs: Vec<(String, u32, u32, bool, Vec<S>)>) -> Vec<Row> {
    runs.sort_by_key(|(name, nodes, gpus, _, _)| (*gpus, *nodes, name.clone()));
    let mut out: Vec<Row> = runs
        .into_iter()
        .map(|(name, nodes, gpus, on_gpus, ranks)| {
            let (rate, epoch, readings) = measure(&ranks);
            let rate = rate.unwrap_or(f64::NAN);
            Row {
                name,
                nodes,
                gpus,
                on_gpus,
                samples_per_s: rate,
                per_gpu: rate / f64::from(gpus.max(1)),
                efficiency: f64::NAN,
                epoch_time_s: epoch,
                readings,
            }
        })
        .collect();
    let base = out.iter().map(|r| r.per_gpu).find(|v| v.is_finite());
    for r in &mut out {
        r.efficiency = base.map_or(f64::NAN, |b| r.per_gpu / b);
    }
    out
}

/// `1:02:03` for seconds.
pub(crate) fn hms(s: f64) -> String {
    let s = s.round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

pub(crate) fn num(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "—".into()
    }
}

/// What the table calls its workers: `GPUs` (`per GPU`) when every run's workers were
/// GPUs, else `workers` (`per worker`).
pub fn worker_words(rows: &[Row]) -> (&'static str, &'static str) {
    if rows.iter().all(|r| r.on_gpus) {
        ("GPUs", "per GPU")
    } else {
        ("workers", "per worker")
    }
}

/// The markdown table.
pub fn markdown(rows: &[Row], epochs: Option<u32>) -> String {
    let (workers, per) = worker_words(rows);
    let mut s =
        format!("| run | nodes | {workers} | samples/s | {per} | efficiency | time/epoch |");
    if let Some(e) = epochs {
        s.push_str(&format!(" {e} epochs |"));
    }
    s.push_str("\n|---|---:|---:|---:|---:|---:|---:|");
    if epochs.is_some() {
        s.push_str("---:|");
    }
    s.push('\n');
    for r in rows {
        let epoch = r
            .epoch_time_s
            .map_or_else(|| "—".into(), |t| format!("{t:.1} s"));
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            r.name,
            r.nodes,
            r.gpus,
            num(r.samples_per_s, 1),
            num(r.per_gpu, 1),
            if r.efficiency.is_finite() {
                format!("{:.0}%", r.efficiency * 100.0)
            } else {
                "—".into()
            },
            epoch
        ));
        if let Some(e) = epochs {
            let p = r
                .epoch_time_s
                .map_or_else(|| "—".into(), |t| hms(t * f64::from(e)));
            s.push_str(&format!(" {p} |"));
        }
        s.push('\n');
    }
    s
}

/// One row of `--json`.
pub fn row_json(r: &Row, epochs: Option<u32>) -> Value {
    let f = |v: f64| if v.is_finite() { json!(v) } else { Value::Null };
    json!({
        "name": r.name,
        "nodes": r.nodes,
        "gpus": r.gpus,
        "samples_per_s": f(r.samples_per_s),
        "per_gpu_samples_per_s": f(r.per_gpu),
        "efficiency": f(r.efficiency),
        "epoch_time_s": r.epoch_time_s,
        "projected_s": epochs.and_then(|e| r.epoch_time_s.map(|t| t * f64::from(e))),
        "readings": r.readings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use herd_metrics::Record;

    fn series(rates: &[f64], epoch: Option<f64>) -> Series {
        let mut s = Series::default();
        for (i, r) in rates.iter().enumerate() {
            s.push(
                0,
                &Record {
                    step: Some(i as u64 * 10),
                    values: vec![("samples_per_s".into(), *r)],
                },
            );
        }
        if let Some(t) = epoch {
            s.push(
                0,
                &Record {
                    step: Some(99),
                    values: vec![("epoch_time_s".into(), t)],
                },
            );
        }
        s
    }

    #[test]
    fn efficiency_is_per_gpu_rate_against_the_smallest_run() {
        let rows = rows(vec![
            (
                "two".into(),
                2,
                4,
                true,
                // warm-up first, then 90 per rank
                (0..4)
                    .map(|_| series(&[10.0, 90.0, 90.0], Some(12.0)))
                    .collect(),
            ),
            (
                "one".into(),
                1,
                2,
                true,
                (0..2)
                    .map(|_| series(&[5.0, 100.0, 100.0, 100.0], Some(20.0)))
                    .collect(),
            ),
        ]);
        assert_eq!(rows[0].name, "one", "smallest first");
        assert_eq!(rows[0].samples_per_s, 200.0);
        assert_eq!(rows[0].per_gpu, 100.0);
        assert_eq!(rows[0].efficiency, 1.0);
        assert_eq!(rows[1].samples_per_s, 360.0);
        assert_eq!(rows[1].per_gpu, 90.0);
        assert!((rows[1].efficiency - 0.9).abs() < 1e-12);
        assert_eq!(rows[1].epoch_time_s, Some(12.0));
        let table = markdown(&rows, Some(100));
        assert_eq!(
            table,
            "| run | nodes | GPUs | samples/s | per GPU | efficiency | time/epoch | 100 epochs |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n\
             | one | 1 | 2 | 200.0 | 100.0 | 100% | 20.0 s | 0:33:20 |\n\
             | two | 2 | 4 | 360.0 | 90.0 | 90% | 12.0 s | 0:20:00 |\n"
        );
    }

    #[test]
    fn a_run_without_rates_has_dashes_not_zeros() {
        let rows = rows(vec![("quiet".into(), 1, 1, true, vec![Series::default()])]);
        let table = markdown(&rows, None);
        assert!(
            table.ends_with("| quiet | 1 | 1 | — | — | — | — |\n"),
            "{table}"
        );
    }

    #[test]
    fn cpu_workers_are_called_workers_not_gpus() {
        let run = |name: &str, on_gpus| {
            (
                name.to_owned(),
                1,
                2,
                on_gpus,
                vec![series(&[5.0, 10.0], None), series(&[5.0, 10.0], None)],
            )
        };
        let cpu = markdown(&rows(vec![run("cpu", false)]), None);
        assert!(
            cpu.starts_with("| run | nodes | workers | samples/s | per worker | efficiency |"),
            "{cpu}"
        );
        assert!(!cpu.contains("GPU"), "{cpu}");
        let gpu = markdown(&rows(vec![run("gpu", true)]), None);
        assert!(
            gpu.starts_with("| run | nodes | GPUs | samples/s | per GPU | efficiency |"),
            "{gpu}"
        );
        // A table with any CPU run counts workers: GPUs would be wrong for that run.
        let mixed = markdown(&rows(vec![run("cpu", false), run("gpu", true)]), None);
        assert!(mixed.starts_with("| run | nodes | workers |"), "{mixed}");
    }
}
