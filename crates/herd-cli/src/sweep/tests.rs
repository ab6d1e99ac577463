//! Tests of the sweep views on real experiment folders made here: four runs of a 2×2 grid
//! (`lr` × `seed`) with different losses, one with a restart, one failed, one queued.

use std::path::PathBuf;

use herd_metrics::store;
use herd_metrics::Record;
use serde_json::{json, Value};

use super::report::{self, loss_text, Options};
use super::state::{self, spec_holds, task_id, task_job, Answer};
use super::status;
use super::{Sweep, SweepRun};
use crate::report::plot::{self, rank_colour, rework_colour};

/// A sweep folder under a temporary root.
struct Fixture {
    tmp: tempfile::TempDir,
    /// The sweep's folder: one experiment per run in it.
    dir: PathBuf,
}

/// The time the fixture's runs start, ms since the epoch.
const T0: u64 = 1_800_000_000_000;

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("exps/grid");
        std::fs::create_dir_all(tmp.path().join("project")).expect("project");
        Fixture { tmp, dir }
    }

    /// A run's experiment, its manifest recording `job_id` when given.
    fn run(&self, index: u32, values: &[(&str, &str)], job_id: Option<&str>) -> SweepRun {
        let name = values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let created = herd_exp::NewExperiment::new(
            &self.dir,
            name.as_str(),
            self.tmp.path().join("project"),
            json!({"nodes": 1}),
            herd_exp::Invocation::current("test"),
        )
        .create()
        .expect("experiment");
        if let Some(id) = job_id {
            created.experiment.record_job_id(1, id).expect("job id");
        }
        SweepRun {
            index,
            name,
            values: values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            experiment: created.experiment,
        }
    }
}

/// Appends event `name` at `ms` to `run`'s timeline.
fn event(run: &SweepRun, ms: u64, name: &str, fields: Value) {
    let mut m = fields.as_object().cloned().unwrap_or_default();
    m.insert("unix_ms".into(), json!(ms));
    m.insert("time".into(), json!(herd_exp::timeline::rfc3339(ms)));
    m.insert("event".into(), json!(name));
    crate::test_support::entry(Value::Object(m.clone()));
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run.experiment.paths().timeline())
        .expect("timeline");
    std::io::Write::write_all(&mut file, format!("{}\n", Value::Object(m)).as_bytes())
        .expect("event");
}

/// Rank `rank`'s readings in attempt `k`: (ms, step, loss), each with 100 samples/s.
fn readings(run: &SweepRun, k: u32, rank: u32, rows: &[(u64, u64, f64)]) {
    let dir = run.experiment.paths().logs().attempt(k);
    std::fs::create_dir_all(dir.path()).expect("attempt dir");
    let mut w = store::Writer::new(dir.metrics(rank));
    for (ms, step, loss) in rows {
        let record = Record {
            step: Some(*step),
            values: vec![("loss".into(), *loss), ("samples_per_s".into(), 100.0)],
        };
        w.write(*ms, &record).expect("reading");
    }
}

fn rendezvous(run: &SweepRun, ms: u64, workers: u32) {
    let nodes: Vec<Value> = (0..workers.div_ceil(2))
        .map(
            |n| json!({"node": n, "host": format!("gpu-a0{}", n + 1), "ranks": [2 * n, 2 * n + 1]}),
        )
        .collect();
    event(
        run,
        ms,
        "rendezvous",
        json!({"world_size": workers, "master_addr": "gpu-a01", "nodes": nodes}),
    );
}

/// One attempt of `run` on 2 ranks, steps `steps` one second apart from `from` ms:
/// rank 0 reads `loss(step)`, rank 1 half a unit more (the report reads rank 0's).
fn attempt(
    run: &SweepRun,
    k: u32,
    from: u64,
    steps: std::ops::RangeInclusive<u64>,
    loss: fn(u64) -> f64,
) {
    event(run, from, "attempt_started", json!({"attempt": k}));
    let first = *steps.start();
    for rank in 0..2 {
        let rows: Vec<(u64, u64, f64)> = steps
            .clone()
            .map(|s| {
                (
                    from + 1000 * (s - first + 1),
                    s,
                    loss(s) + 0.5 * f64::from(rank),
                )
            })
            .collect();
        readings(run, k, rank, &rows);
    }
}

/// The grid: `lr` × `seed`, the array job 500.
///
/// - task 0, `lr=0.1,seed=1`: finished; loss down to 1.2 at step 15, then up to 1.7;
/// - task 1, `lr=0.01,seed=1`: failed at step 12, restarted from the checkpoint at step 10,
///   finished at step 20 with loss 0.7 (its manifest records its task id, `500_1`);
/// - task 2, `lr=0.1,seed=2`: failed at step 8, loss 2.5 (its manifest records no job id:
///   the sweep's says it);
/// - task 3, `lr=0.01,seed=2`: queued, no readings.
fn grid(f: &Fixture) -> Sweep {
    let run = |i: u32, lr: &str, seed: &str, id: Option<&str>| {
        f.run(i, &[("lr", lr), ("seed", seed)], id)
    };
    // Made in another order than their index: the views order them.
    let r2 = run(2, "0.1", "2", None);
    // As `herd submit --sweep` records them: each its task's id (task 2's lost: the
    // sweep's array id and its index name it then).
    let r0 = run(0, "0.1", "1", Some("500_0"));
    let r3 = run(3, "0.01", "2", Some("500_3"));
    let r1 = run(1, "0.01", "1", Some("500_1"));
    for r in [&r0, &r1, &r2, &r3] {
        let task = format!("500_{}", r.index);
        event(r, T0, "queued", json!({"submission": 1, "job_id": task}));
    }

    event(&r0, T0 + 1000, "started", json!({"job_id": "500_0"}));
    rendezvous(&r0, T0 + 1500, 2);
    attempt(&r0, 0, T0 + 2000, 1..=20, |s| {
        1.2 + 0.1 * (s as f64 - 15.0).abs()
    });
    event(
        &r0,
        T0 + 23_000,
        "finished",
        json!({"attempt": 0, "ok": true}),
    );

    event(&r1, T0 + 1000, "started", json!({"job_id": "500_1"}));
    rendezvous(&r1, T0 + 1500, 2);
    attempt(&r1, 0, T0 + 2000, 1..=12, |s| 2.0 - 0.1 * s as f64);
    event(
        &r1,
        T0 + 15_000,
        "failed",
        json!({"attempt": 0, "kind": "worker_failure", "cause": "rank 1 exited with code 1"}),
    );
    event(&r1, T0 + 15_500, "restart", json!({"attempt": 1}));
    attempt(&r1, 1, T0 + 16_000, 11..=20, |s| {
        1.0 - 0.03 * (s as f64 - 10.0)
    });
    event(
        &r1,
        T0 + 27_000,
        "finished",
        json!({"attempt": 1, "ok": true}),
    );

    event(&r2, T0 + 1000, "started", json!({"job_id": "500_2"}));
    rendezvous(&r2, T0 + 1500, 2);
    attempt(&r2, 0, T0 + 2000, 1..=8, |s| 2.9 - 0.05 * s as f64);
    event(
        &r2,
        T0 + 11_000,
        "failed",
        json!({"attempt": 0, "kind": "worker_failure", "cause": "rank 0 (local rank 0 on gpu-a01) exited with code 1"}),
    );
    event(
        &r2,
        T0 + 11_500,
        "finished",
        json!({"attempt": 0, "ok": false, "cause": "worker_failure"}),
    );

    Sweep {
        name: "grid".into(),
        keys: vec!["lr".into(), "seed".into()],
        job_id: Some("500".into()),
        arrays: Vec::new(),
        submitted: Vec::new(),
        runs: vec![r2, r0, r3, r1],
    }
}

/// squeue's rows for the array 500, as `squeue -O` prints them.
fn answer(text: &str) -> Answer {
    Answer::of_rows(herd_slurm::scheduler::queue::parse(text).expect("rows"))
}

/// The scheduler after the runs above: tasks 0 and 1 completed, 2 failed, 3 waiting.
fn ended() -> Answer {
    answer(
        "501|500|0|COMPLETED|None|0:22|1:00|gpu-a01|1|0|u|(null)|N/A|grid|\n\
         502|500|1|COMPLETED|None|0:26|1:00|gpu-a02|1|0|u|(null)|N/A|grid|\n\
         503|500|2|FAILED|NonZeroExitCode|0:10|1:00|gpu-a01|1|256|u|(null)|N/A|grid|\n\
         500|500|3%2|PENDING|Resources|0:00|1:00||1|0|u|(null)|N/A|grid|\n",
    )
}

fn names(r: &report::SweepReport) -> Vec<&str> {
    r.rows.iter().map(|r| r.name.as_str()).collect()
}

#[test]
fn the_table_is_sorted_by_final_loss_and_a_run_without_loss_is_last() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let r = report::load(&sweep, &ended());
    assert_eq!(
        names(&r),
        [
            "lr=0.01,seed=1",
            "lr=0.1,seed=1",
            "lr=0.1,seed=2",
            "lr=0.01,seed=2"
        ]
    );
    let losses: Vec<(Option<f64>, Option<f64>)> =
        r.rows.iter().map(|r| (r.final_loss, r.best_loss)).collect();
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
    // Rank 0's losses (rank 1 reads half a unit more); the final one is the newest
    // attempt's last, the best the smallest of every attempt.
    assert!(
        close(losses[0].0, 0.7) && close(losses[0].1, 0.7),
        "{losses:?}"
    );
    assert!(
        close(losses[1].0, 1.7) && close(losses[1].1, 1.2),
        "{losses:?}"
    );
    assert!(
        close(losses[2].0, 2.5) && close(losses[2].1, 2.5),
        "{losses:?}"
    );
    assert_eq!(losses[3], (None, None));
    let states: Vec<&str> = r.rows.iter().map(|r| r.view.state).collect();
    assert_eq!(states, ["finished", "finished", "failed", "queued"]);
}

#[test]
fn runs_without_a_loss_keep_their_index_order_at_the_end() {
    let f = Fixture::new();
    let runs: Vec<SweepRun> = [(3, "c"), (1, "a"), (2, "b")]
        .into_iter()
        .map(|(i, v)| f.run(i, &[("model", v)], Some("9")))
        .collect();
    let with_loss = f.run(7, &[("model", "z")], Some("9"));
    event(&with_loss, T0, "started", json!({"job_id": 9}));
    attempt(&with_loss, 0, T0 + 100, 1..=3, |_| 5.0);
    let mut all = runs;
    all.push(with_loss);
    let sweep = Sweep {
        name: "models".into(),
        keys: vec!["model".into()],
        job_id: Some("9".into()),
        arrays: Vec::new(),
        submitted: Vec::new(),
        runs: all,
    };
    let r = report::load(&sweep, &Answer::none());
    assert_eq!(names(&r), ["model=z", "model=a", "model=b", "model=c"]);
}

#[test]
fn the_table_has_the_values_first_numbers_right_aligned() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let r = report::load(&sweep, &ended());
    let table = r.markdown();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "|   lr | seed | final loss | best loss | samples/s | goodput | state    |"
    );
    assert_eq!(
        lines[1],
        "|-----:|-----:|-----------:|----------:|----------:|--------:|----------|"
    );
    let goodput = |i: usize| herd_exp::goodput::percent(r.rows[i].goodput.expect("goodput"));
    assert_eq!(
        lines[2],
        format!(
            "| 0.01 |    1 |     0.7000 |    0.7000 |     200.0 | {:>7} | finished |",
            goodput(0)
        )
    );
    assert_eq!(
        lines[3],
        format!(
            "|  0.1 |    1 |      1.700 |     1.200 |     200.0 | {:>7} | finished |",
            goodput(1)
        )
    );
    assert!(
        lines[4].starts_with("|  0.1 |    2 |      2.500 |     2.500 |     200.0 |"),
        "{table}"
    );
    assert!(lines[4].ends_with("| failed   |"), "{table}");
    assert_eq!(
        lines[5],
        "| 0.01 |    2 |          — |         — |         — |       — | queued   |"
    );
    assert_eq!(lines.len(), 6, "{table}");
    // A column of words stays left-aligned.
    let words = Fixture::new();
    let sweep = Sweep {
        name: "w".into(),
        keys: vec!["model".into()],
        job_id: None,
        arrays: Vec::new(),
        submitted: Vec::new(),
        runs: vec![words.run(0, &[("model", "small")], None)],
    };
    let t = report::load(&sweep, &Answer::none()).markdown();
    assert!(t.starts_with("| model | final loss |"), "{t}");
    assert!(
        t.lines().nth(1).is_some_and(|l| l.starts_with("|-------|")),
        "{t}"
    );
}

#[test]
fn goodput_and_throughput_are_the_reports_own() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let r = report::load(&sweep, &ended());
    for row in &r.rows {
        let run = sweep.runs.iter().find(|s| s.name == row.name).expect("run");
        let d = crate::report::data::load(&run.experiment).expect("loads");
        assert_eq!(row.goodput, d.goodput.goodput(), "{}", row.name);
        assert_eq!(
            row.throughput,
            crate::report::measure(&d.rank_series()).0,
            "{}",
            row.name
        );
    }
    assert!(r.rows[1].goodput.is_some_and(|g| g > 0.0 && g < 1.0));
    assert_eq!(r.rows[3].goodput, None, "queued: no wall time");
}

#[test]
fn json_has_each_run_in_the_tables_order() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let doc = report::load(&sweep, &ended()).json(None);
    assert_eq!(doc["format"], 1);
    assert_eq!(doc["sweep"], "grid");
    assert_eq!(doc["keys"], json!(["lr", "seed"]));
    let runs = doc["runs"].as_array().expect("runs");
    let order: Vec<&str> = runs
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        order,
        [
            "lr=0.01,seed=1",
            "lr=0.1,seed=1",
            "lr=0.1,seed=2",
            "lr=0.01,seed=2"
        ]
    );
    assert_eq!(runs[0]["values"], json!({"lr": "0.01", "seed": "1"}));
    assert_eq!(runs[0]["index"], 1);
    assert_eq!(runs[0]["state"], "finished");
    assert!((runs[1]["final_loss"].as_f64().expect("final") - 1.7).abs() < 1e-9);
    assert!((runs[1]["best_loss"].as_f64().expect("best") - 1.2).abs() < 1e-9);
    assert_eq!(runs[1]["throughput"], 200.0);
    assert!(runs[1]["goodput"].is_f64());
    assert_eq!(runs[2]["state"], "failed");
    let queued = &runs[3];
    assert_eq!(queued["state"], "queued");
    for k in ["final_loss", "best_loss", "throughput", "goodput"] {
        assert_eq!(queued[k], Value::Null, "{k}");
    }
    assert_eq!(doc["scaling"], Value::Null, "every run at one size");
}

fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

/// The SVG's polylines drawn in `colour`, each as its number of points.
fn polylines(doc: &roxmltree::Document, colour: (u8, u8, u8)) -> Vec<usize> {
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("stroke")
                .is_some_and(|s| s.eq_ignore_ascii_case(&hex(colour)))
        })
        .map(|n| {
            n.attribute("points")
                .expect("points")
                .split_whitespace()
                .count()
        })
        .collect()
}

fn texts(svg: &str) -> Vec<String> {
    let doc = roxmltree::Document::parse(svg).expect("SVG parses");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_owned())
        .collect()
}

#[test]
fn the_overlay_has_one_series_per_run_and_the_legend_says_its_values() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let r = report::load(&sweep, &ended());
    let o = r.overlay();
    let p = o.plot.as_ref().expect("a plot");
    assert_eq!(p.title, "grid: loss per run");
    assert_eq!(p.x_label, "step");
    let svg = plot::svg(p).expect("draws");
    let doc = roxmltree::Document::parse(&svg).expect("SVG parses");
    // Colours by index order: task 0 blue, 1 orange, 2 green; task 3 has no readings.
    assert_eq!(
        polylines(&doc, rank_colour(0)),
        [20],
        "task 0: one attempt, every step"
    );
    // Task 1: attempt 0 (steps 1–12), attempt 1 from step 12, where its steps computed
    // again (11–12) meet the new ones, to 20: never one line across the restart.
    assert_eq!(
        polylines(&doc, rank_colour(1)),
        [12, 9],
        "task 1: each attempt its own line"
    );
    assert!(
        !polylines(&doc, rework_colour(1)).is_empty(),
        "task 1's steps 11–12 dashed"
    );
    assert_eq!(polylines(&doc, rank_colour(2)), [8], "task 2");
    assert!(
        polylines(&doc, rank_colour(3)).is_empty(),
        "task 3 drew nothing"
    );
    // One legend entry per run with a line, saying its values, in the table's order.
    let t = texts(&svg);
    let legend: Vec<&String> = t.iter().filter(|s| s.starts_with("lr=")).collect();
    assert_eq!(
        legend,
        ["lr=0.01, seed=1", "lr=0.1, seed=1", "lr=0.1, seed=2"],
        "{t:?}"
    );
    assert!(t.iter().any(|s| s == "restart (lr=0.01, seed=1)"), "{t:?}");
    // The legend's `computed again` swatch is in the lighter colour of the run that was.
    let swatches = |c: (u8, u8, u8)| {
        doc.descendants()
            .filter(|n| n.has_tag_name("rect"))
            .filter(|n| {
                n.attribute("fill")
                    .is_some_and(|f| f.eq_ignore_ascii_case(&hex(c)))
            })
            .count()
    };
    assert_eq!(
        swatches(rework_colour(1)),
        2,
        "two dashes in task 1's lighter colour"
    );
    assert_eq!(swatches(rework_colour(0)), 0);
    assert_eq!(
        o.notes,
        ["grid/lr=0.01,seed=2: no loss readings: not in the overlay"]
    );
    assert_eq!(
        o.rework_note.as_deref(),
        Some(
            "Lighter dashes on a shaded band: steps computed again after a resume from a \
             checkpoint (lr=0.01, seed=1: attempt 1: steps 11–12)."
        )
    );
}

fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn plots_and_page_are_written_and_listed() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let dir = f.tmp.path().join("plots");
    let page = f.tmp.path().join("grid.html");
    let opts = Options {
        plots: Some(dir.clone()),
        html: Some(page.clone()),
        ..Options::default()
    };
    let mut out = Vec::new();
    report::run(&sweep, &ended(), &opts, &mut out).expect("report");
    let out = String::from_utf8(out).expect("utf-8");
    let tail: Vec<&str> = out[out.rfind("\n\n").expect("a blank line") + 2..]
        .lines()
        .collect();
    let files = [
        dir.join("grid.loss.png"),
        dir.join("grid.loss.svg"),
        page.clone(),
    ];
    let mut expected =
        vec!["note: grid/lr=0.01,seed=2: no loss readings: not in the overlay".to_owned()];
    expected.extend(files.iter().map(|p| p.display().to_string()));
    assert_eq!(tail, expected, "{out}");
    let (w, h, rgb) = decode_png(&std::fs::read(&files[0]).expect("png"));
    assert_eq!((w, h), (plot::WIDTH, plot::HEIGHT));
    let pixels = |c: (u8, u8, u8)| {
        rgb.chunks_exact(3)
            .filter(|p| (p[0], p[1], p[2]) == c)
            .count()
    };
    for key in 0..3 {
        assert!(pixels(rank_colour(key)) > 200, "run {key}'s line");
    }
    assert_eq!(pixels(rank_colour(3)), 0, "no line of the queued run");
    let svg = std::fs::read_to_string(&files[1]).expect("svg");
    assert_eq!(
        texts(&svg).iter().filter(|t| t.starts_with("lr=")).count(),
        3
    );

    let html = std::fs::read_to_string(&page).expect("page");
    assert!(html.contains("<h2>Sweep grid</h2>"), "{html}");
    assert!(
        html.contains("<p>4 runs: 1 queued, 2 finished, 1 failed</p>"),
        "{html}"
    );
    assert!(html.contains("<table class=\"sweep\"><tr><th>lr</th><th>seed</th><th>final loss</th>"));
    assert!(
        html.contains(
            "<tr><td class=\"n\">0.01</td><td class=\"n\">1</td><td class=\"n\">0.7000</td>"
        ),
        "{html}"
    );
    // The overlay first, then each run's loss and throughput plots (the queued one has
    // none).
    assert_eq!(html.matches("<svg").count(), 1 + 3 * 2);
    let sweep_at = html.find("<section class=\"sweep\">").expect("the sweep");
    let run_at = html
        .find("<h2>lr=0.01,seed=1</h2>")
        .expect("a run's section");
    assert!(sweep_at < run_at);
    assert!(
        html.contains("lr=0.01, seed=1: attempt 1: steps 11–12"),
        "{html}"
    );
    for external in ["src=", "href=", "<script"] {
        assert!(!html.contains(external), "{external}");
    }
}

#[test]
fn a_scaling_sweep_reads_as_a_scaling_table() {
    let f = Fixture::new();
    let runs: Vec<SweepRun> = [(0, "1", 2), (1, "2", 4)]
        .into_iter()
        .map(|(i, n, workers)| {
            let r = f.run(i, &[("nodes", n)], Some("77"));
            event(&r, T0, "started", json!({"job_id": 77}));
            rendezvous(&r, T0 + 100, workers);
            attempt(&r, 0, T0 + 200, 1..=5, |s| 3.0 - 0.1 * s as f64);
            r
        })
        .collect();
    let sweep = Sweep {
        name: "scale".into(),
        keys: vec!["nodes".into()],
        job_id: Some("77".into()),
        arrays: Vec::new(),
        submitted: Vec::new(),
        runs,
    };
    let mut out = Vec::new();
    report::run(&sweep, &Answer::none(), &Options::default(), &mut out).expect("report");
    let out = String::from_utf8(out).expect("utf-8");
    assert!(out.starts_with("| nodes | final loss |"), "{out}");
    // Both read the same losses; the scaling table follows, by workers (the runs' plans
    // ask for no GPUs).
    assert!(
        out.contains(
            "\n| run | nodes | workers | samples/s | per worker | efficiency | time/epoch |\n\
             |---|---:|---:|---:|---:|---:|---:|\n\
             | nodes=1 | 1 | 2 | 200.0 | 100.0 | 100% | — |\n"
        ),
        "{out}"
    );
    let doc = report::load(&sweep, &Answer::none()).json(None);
    assert_eq!(doc["scaling"][1]["gpus"], 4);
}

#[test]
fn the_status_row_counts_the_runs_by_state() {
    let f = Fixture::new();
    let sweep = grid(&f);
    // Tasks 1 and 2 running again (the scheduler is newer than their folders), 3 waits
    // for the array's limit.
    let a = answer(
        "501|500|0|COMPLETED|None|0:22|1:00|gpu-a01|1|0|u|(null)|N/A|grid|\n\
         502|500|1|RUNNING|None|0:40|1:00|gpu-a02|1|0|u|(null)|N/A|grid|\n\
         503|500|2|RUNNING|None|0:08|1:00|gpu-a01|1|0|u|(null)|N/A|grid|\n\
         500|500|3%2|PENDING|JobArrayTaskLimit|0:00|1:00||1|0|u|(null)|N/A|grid|\n",
    );
    let s = status::status(&sweep, &a);
    assert_eq!(s.counts(), [("running", 2), ("queued", 1), ("finished", 1)]);
    assert_eq!(s.summary(), "4 runs: 2 running, 1 queued, 1 finished");
    assert_eq!(s.state(), "running");
    assert_eq!(
        s.row(),
        [
            "grid".to_owned(),
            "500".to_owned(),
            "running".to_owned(),
            // Attempts started: 1 + 2 + 1 + 0.
            "4".to_owned(),
            "sweep: 4 runs: 2 running, 1 queued, 1 finished".to_owned()
        ]
    );
    let j = s.row_json();
    assert_eq!(j["kind"], "sweep");
    assert_eq!(j["run_count"], 4);
    assert_eq!(
        j["tasks"],
        json!({"running": 2, "queued": 1, "finished": 1})
    );
    // Three tasks ended, one waits: the sweep is queued, as an array with a waiting task.
    let s = status::status(&sweep, &ended());
    assert_eq!(s.summary(), "4 runs: 1 queued, 2 finished, 1 failed");
    assert_eq!(s.state(), "queued");
}

#[test]
fn status_of_the_sweep_has_a_line_per_run_with_its_values() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let s = status::status(&sweep, &ended());
    let text = s.text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "sweep grid (job 500): 4 runs: 1 queued, 2 finished, 1 failed"
    );
    assert!(
        lines[1].starts_with("  lr  seed  JOB    STATE     ATTEMPTS  GOODPUT  DETAIL"),
        "{text}"
    );
    // In index order, each run's task; numbers right-aligned.
    assert!(
        lines[2].starts_with(" 0.1     1  500_0  finished  1 "),
        "{text}"
    );
    assert!(
        lines[3].starts_with("0.01     1  500_1  finished  2 "),
        "{text}"
    );
    assert!(
        lines[4].starts_with(" 0.1     2  500_2  failed    1 "),
        "{text}"
    );
    assert!(
        lines[5].starts_with("0.01     2  500_3  queued    0 "),
        "{text}"
    );
    assert!(lines[3].contains("exit 0 after"), "{text}");
    assert!(lines[4].contains("exited with code 1"), "{text}");
    assert!(
        lines[5].ends_with("        -  waiting for free nodes (Resources)"),
        "{text}"
    );
    // The goodput in its column, not again in the detail.
    assert!(!text.contains("; goodput"), "{text}");
    let g = herd_exp::goodput::percent(s.runs[0].view.goodput.expect("goodput"));
    assert!(lines[2].contains(&format!("  {g}  exit 0")), "{text}");

    let doc = s.json();
    assert_eq!(doc["format"], 1);
    assert_eq!(doc["keys"], json!(["lr", "seed"]));
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 4);
    assert_eq!(runs[1]["run"], "lr=0.01,seed=1");
    assert_eq!(runs[1]["values"], json!({"lr": "0.01", "seed": "1"}));
    assert_eq!(runs[1]["job_id"], "500_1");
    assert_eq!(runs[1]["attempts"], 2);
    assert_eq!(runs[2]["state"], "failed");
    assert_eq!(runs[2]["exit_code"], 1);
    assert_eq!(runs[3]["reason"], "Resources");
    assert!(runs[0]["goodput"].is_f64());
}

#[test]
fn without_the_scheduler_the_folders_say_what_they_know() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let s = status::status(&sweep, &Answer::none());
    let states: Vec<&str> = s.runs.iter().map(|r| r.view.state).collect();
    assert_eq!(states, ["finished", "finished", "failed", "unknown"]);
    assert!(
        s.runs[3].view.detail.contains("scheduler did not answer"),
        "{:?}",
        s.runs[3].view
    );
}

#[test]
fn a_tasks_end_is_recorded_once_in_its_runs_timeline() {
    let f = Fixture::new();
    let sweep = grid(&f);
    let a = ended();
    state::record_ends(&sweep, &a);
    state::record_ends(&sweep, &a);
    let ended_events = |name: &str| {
        let run = sweep.runs.iter().find(|r| r.name == name).expect("run");
        herd_exp::timeline::read(run.experiment.dir())
            .expect("timeline")
            .into_iter()
            .filter_map(|e| match e.event {
                herd_exp::timeline::Event::Ended(x) => Some(x),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let failed = ended_events("lr=0.1,seed=2");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].job_id.as_ref().map(|j| j.as_str()), Some("500_2"));
    assert_eq!(failed[0].state, "FAILED");
    assert_eq!(ended_events("lr=0.01,seed=1").len(), 1);
    assert!(ended_events("lr=0.01,seed=2").is_empty(), "still queued");
    // Gone from the queue: the recorded end answers.
    let s = status::status(&sweep, &answer(""));
    assert_eq!(s.runs[2].view.state, "failed");
    assert!(
        s.runs[2].view.detail.contains("(no longer in the queue)"),
        "{:?}",
        s.runs[2].view
    );
}

#[test]
fn tasks_are_found_in_the_arrays_rows() {
    // A plain id recorded (`herd submit --resume NAME/RUN` submits the run alone) is that job.
    assert_eq!(task_id(Some("777"), Some("500"), 3).as_deref(), Some("777"));
    assert_eq!(
        task_id(Some("500_1"), Some("600"), 3).as_deref(),
        Some("500_1")
    );
    assert_eq!(task_id(None, Some("600"), 2).as_deref(), Some("600_2"));
    assert_eq!(task_id(None, None, 2), None);
    assert!(spec_holds("4-9%2", 4) && spec_holds("4-9%2", 9));
    assert!(!spec_holds("4-9%2", 3) && !spec_holds("4-9%2", 10));
    assert!(spec_holds("1,3,5-7", 6) && !spec_holds("1,3,5-7", 4));
    assert!(spec_holds("0-15:4", 8) && !spec_holds("0-15:4", 6));
    assert!(spec_holds("3", 3) && !spec_holds("3", 30));
    let a = answer(
        "502|500|1|RUNNING|None|0:40|1:00|gpu-a02|1|0|u|(null)|N/A|grid|\n\
         500|500|2-9%2|PENDING|JobArrayTaskLimit|0:00|1:00||1|0|u|(null)|N/A|grid|\n",
    );
    let one = task_job(&a.jobs, "500_1").expect("task 1");
    assert_eq!(one.id, "500_1");
    assert_eq!(one.rows.len(), 1);
    assert_eq!(one.rows[0].state, "RUNNING");
    assert_eq!(one.rows[0].array_task, None, "one task, not an array");
    let rest = task_job(&a.jobs, "500_7").expect("task 7, pending");
    assert_eq!(rest.rows[0].reason.as_deref(), Some("JobArrayTaskLimit"));
    assert!(task_job(&a.jobs, "500_10").is_none());
    assert!(task_job(&a.jobs, "501_1").is_none());
}

#[test]
fn losses_read_as_four_significant_digits() {
    assert_eq!(loss_text(Some(2.31012)), "2.310");
    assert_eq!(loss_text(Some(0.001857)), "0.001857");
    assert_eq!(loss_text(Some(12.3449)), "12.34");
    assert_eq!(loss_text(Some(0.00001234)), "1.234e-5");
    assert_eq!(loss_text(Some(0.0)), "0");
    assert_eq!(loss_text(None), "—");
    assert_eq!(loss_text(Some(f64::NAN)), "—");
}

/// A sweep over `nodes` of two shapes: runs 0 and 2 are tasks of array 600, runs 1 and 3
/// of array 610 (their manifests record no id of their own: the arrays say whose task each
/// is). Its row names both arrays, each run its own array's task; neither array is another
/// job; three arrays read as the first and `+2`.
#[test]
fn a_sweep_of_two_shapes_is_one_row_naming_both_arrays() {
    let f = Fixture::new();
    let runs: Vec<SweepRun> = [(0, "1", "1"), (1, "1", "2"), (2, "2", "1"), (3, "2", "2")]
        .into_iter()
        .map(|(i, seed, nodes)| f.run(i, &[("seed", seed), ("nodes", nodes)], None))
        .collect();
    let mut sweep = Sweep {
        name: "scale".into(),
        keys: vec!["seed".into(), "nodes".into()],
        job_id: Some("600".into()),
        arrays: vec![("600".into(), vec![0, 2]), ("610".into(), vec![1, 3])],
        submitted: vec!["600".into(), "610".into()],
        runs,
    };
    let a = answer(
        "601|600|0|COMPLETED|None|0:22|1:00|gpu-a01|1|0|u|(null)|N/A|scale|\n\
         602|600|2|RUNNING|None|0:40|1:00|gpu-a01|1|0|u|(null)|N/A|scale|\n\
         610|610|1,3%1|PENDING|Resources|0:00|1:00||2|0|u|(null)|N/A|scale|\n",
    );
    let s = status::status(&sweep, &a);
    assert_eq!(s.row()[1], "600,610");
    assert_eq!(s.row_json()["job_ids"], json!(["600", "610"]));
    assert_eq!(s.row_json()["job_id"], "600");
    let tasks: Vec<(Option<&str>, &str)> = s
        .runs
        .iter()
        .map(|r| (r.view.job_id.as_deref(), r.view.state))
        .collect();
    assert_eq!(
        tasks,
        [
            (Some("600_0"), "finished"),
            (Some("610_1"), "queued"),
            (Some("600_2"), "running"),
            (Some("610_3"), "queued")
        ]
    );
    assert!(
        s.text().starts_with("sweep scale (jobs 600, 610): "),
        "{}",
        s.text()
    );
    assert_eq!(status::arrays(&sweep), ["600", "610"], "no other job");
    sweep.arrays.push(("620".into(), vec![]));
    assert_eq!(status::status(&sweep, &a).row()[1], "600+2");
}
