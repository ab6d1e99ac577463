//! `herd report` on the bed (issue #15): runs of examples/swav_mini.py at 1, 2 and 3 nodes,
//! their metrics as the agents stored them, and the scaling table made from them.

use std::path::Path;
use std::process::Command;

use herd_testbed::Bed;
use serde_json::Value;

use crate::support::{job_id, project_with, submit, wait_ok};

/// Each rank's median `samples_per_s` (its first reading left out), summed: the rate the
/// table must show, computed here from the stored readings themselves.
fn rate_from_store(exp: &Path) -> f64 {
    let dir = exp.join("logs/attempt-0");
    let all = herd_metrics::store::read_attempt(&dir).expect("metrics");
    assert!(!all.is_empty(), "no metrics in {}", dir.display());
    all.iter()
        .map(|(rank, s)| {
            let mut v: Vec<f64> = s
                .column("samples_per_s")
                .unwrap_or_else(|| panic!("rank {rank}: no samples_per_s"))
                .iter()
                .copied()
                .filter(|x| x.is_finite())
                .collect();
            assert!(v.len() >= 2, "rank {rank}: {v:?}");
            v.remove(0);
            v.sort_by(f64::total_cmp);
            let n = v.len();
            if n % 2 == 1 {
                v[n / 2]
            } else {
                (v[n / 2 - 1] + v[n / 2]) / 2.0
            }
        })
        .sum()
}

/// swav_mini at 1, 2 and 3 nodes (one worker each; an epoch is a pass over 768 images, so
/// more ranks make shorter epochs): the table has one row per run in
/// size order, GPUs and nodes as they ran, the rates the stored readings give, efficiency
/// per GPU against the 1-node run, a time per epoch and its projection.
#[test]
fn the_scaling_table_of_swav_mini_at_one_two_and_three_nodes() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "report_scaling",
        &[("examples/swav_mini.py", "swav_mini.py")],
    );
    let root = exps.display().to_string();
    let names = ["swav-3n", "swav-1n", "swav-2n"];
    for name in names {
        let nodes = &name[5..6];
        let out = submit(
            &bed,
            &project,
            &[
                "-J",
                name,
                "--nodes",
                nodes,
                "--partition",
                "gpu",
                "--time",
                "10",
                "--exp-root",
                &root,
                "--",
                "python",
                "swav_mini.py",
                "--epochs",
                "2",
                "--dataset-size",
                "768",
                "--log-every",
                "2",
            ],
        );
        let job = job_id(&out);
        wait_ok(&bed, job, &exps.join(name));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["report", "--json", "--epochs", "100", "--exp-root", &root])
        .args(names)
        .current_dir(&project)
        .output()
        .expect("herd report");
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("json");
    let runs = doc["runs"].as_array().expect("runs");
    let got: Vec<(&str, u64, u64)> = runs
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default(),
                r["nodes"].as_u64().unwrap_or_default(),
                r["gpus"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [("swav-1n", 1, 1), ("swav-2n", 2, 2), ("swav-3n", 3, 3)],
        "{doc:#}"
    );
    let base = rate_from_store(&exps.join("swav-1n"));
    for r in runs {
        let name = r["name"].as_str().unwrap_or_default();
        let rate = rate_from_store(&exps.join(name));
        let shown = r["samples_per_s"].as_f64().expect("rate");
        assert!(
            (shown - rate).abs() < 1e-6 * rate.max(1.0),
            "{name}: {shown} vs {rate}"
        );
        let gpus = r["gpus"].as_f64().expect("gpus");
        let eff = r["efficiency"].as_f64().expect("efficiency");
        assert!(
            (eff - (rate / gpus) / base).abs() < 1e-9,
            "{name}: efficiency {eff} vs {}",
            (rate / gpus) / base
        );
        let epoch = r["epoch_time_s"].as_f64().expect("time per epoch");
        assert!(epoch > 0.0, "{r:#}");
        let projected = r["projected_s"].as_f64().expect("projected");
        assert!((projected - 100.0 * epoch).abs() < 1e-9, "{r:#}");
    }
    assert_eq!(runs[0]["efficiency"], 1.0);

    // The markdown table: a header, a rule and the three rows, in the same order; then
    // each run's goodput.
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["report", "--exp-root", &root])
        .args(names)
        .current_dir(&project)
        .output()
        .expect("herd report");
    let text = String::from_utf8_lossy(&out.stdout);
    let (table, goodput) = text
        .split_once("\n\n")
        .expect("the table, then the goodput");
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 5, "{text}");
    // Each run's goodput, two lines, in the table's order.
    let said: Vec<&str> = goodput.lines().collect();
    assert_eq!(said.len(), 6, "{text}");
    for (i, name) in ["swav-1n", "swav-2n", "swav-3n"].iter().enumerate() {
        assert!(
            said[2 * i].starts_with(&format!("{name}: goodput ")),
            "{text}"
        );
        assert!(said[2 * i + 1].starts_with("  training "), "{text}");
    }
    // The jobs asked for no GPUs: their workers are counted as workers.
    assert!(
        rows[0].starts_with("| run | nodes | workers | samples/s | per worker | efficiency |"),
        "{text}"
    );
    assert!(
        rows[2].starts_with("| swav-1n | 1 | 1 | ") && rows[2].contains(" | 100% | "),
        "{text}"
    );
    assert!(rows[3].starts_with("| swav-2n | 2 | 2 | "), "{text}");
    assert!(rows[4].starts_with("| swav-3n | 3 | 3 | "), "{text}");
}
