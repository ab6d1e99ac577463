//! Tests of the plots, the page and `herd report --plots/--html` on experiment folders
//! made here.

use super::data::{self, ExpData};
use super::plot::{self, downsample, rank_colour, Metric, MAX_POINTS, PALETTE};
use super::*;
use clap::Parser;
use herd_metrics::store::{self, Series};
use herd_metrics::Record;
use serde_json::json;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    report: ReportArgs,
}

/// Experiments under a temporary root.
struct Root {
    tmp: tempfile::TempDir,
    root: PathBuf,
}

impl Root {
    fn new() -> Root {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("exps");
        Root { tmp, root }
    }

    /// A new experiment `name` (its plan asks for 2 nodes, no GPUs).
    fn exp(&self, name: &str) -> Exp {
        self.exp_with_plan(name, json!({"nodes": 2}))
    }

    /// A new experiment `name` of `plan`.
    fn exp_with_plan(&self, name: &str, plan: serde_json::Value) -> Exp {
        let project = self.tmp.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let created = herd_exp::NewExperiment::new(
            &self.root,
            name,
            &project,
            plan,
            herd_exp::Invocation::current("test"),
        )
        .create()
        .expect("experiment");
        Exp {
            exp: created.experiment,
        }
    }

    /// Experiment `name` opened again.
    fn exp_open(&self, name: &str) -> herd_exp::Experiment {
        herd_exp::Experiment::open(&self.root, name).expect("open")
    }

    fn args(&self, extra: &[&str]) -> ReportArgs {
        let root = self.root.to_str().expect("utf-8");
        let mut argv = vec!["report", "--exp-root", root];
        argv.extend(extra);
        Cmd::try_parse_from(argv).expect("parses").report
    }
}

struct Exp {
    exp: herd_exp::Experiment,
}

/// One reading: (ms since the epoch, step, values).
type Reading<'a> = (u64, Option<u64>, Vec<(&'a str, f64)>);

impl Exp {
    /// Appends event `name`; one with a `time` is dated then (`unix_ms` agreeing).
    fn event(&self, name: &str, fields: serde_json::Value) {
        let dated = fields
            .get("time")
            .and_then(serde_json::Value::as_str)
            .and_then(herd_exp::timeline::parse_rfc3339);
        let Some(ms) = dated else {
            let event = crate::test_support::event(name, fields);
            herd_exp::timeline::append(self.exp.dir(), event).expect("event");
            return;
        };
        let mut m = fields.as_object().cloned().unwrap_or_default();
        m.insert("unix_ms".into(), json!(ms));
        m.insert("event".into(), json!(name));
        crate::test_support::entry(serde_json::Value::Object(m.clone()));
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.exp.paths().timeline())
            .expect("timeline");
        std::io::Write::write_all(
            &mut file,
            format!("{}\n", serde_json::Value::Object(m)).as_bytes(),
        )
        .expect("event");
    }

    /// Rank `rank`'s readings in attempt `k`.
    fn metrics(&self, k: u32, rank: u32, readings: &[Reading]) {
        let dir = self.exp.paths().logs().attempt(k);
        std::fs::create_dir_all(dir.path()).expect("attempt dir");
        let mut w = store::Writer::new(dir.metrics(rank));
        for (ms, step, values) in readings {
            let record = Record {
                step: *step,
                values: values.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            };
            w.write(*ms, &record).expect("reading");
        }
    }

    fn data(&self) -> ExpData {
        data::load(&self.exp).expect("loads")
    }
}

/// Loss and samples/s of rank `rank` at `step`: each rank on its own level, so lines do
/// not cover each other.
fn reading(rank: u32, step: u64) -> Vec<(&'static str, f64)> {
    let r = f64::from(rank);
    vec![
        ("loss", 4.0 - 0.6 * r - step as f64 * 0.001),
        ("samples_per_s", 100.0 + 25.0 * r + (step % 7) as f64),
    ]
}

/// `train`: 4 ranks on 2 nodes, attempt 0 (steps 0..500), a restart, attempt 1 (steps
/// 400..1000, from a checkpoint at 400), finished.
fn two_attempts(root: &Root, name: &str) -> Exp {
    let e = root.exp(name);
    e.event(
        "started",
        json!({"job_id": "42", "host": "node-a", "requeue": 0}),
    );
    e.event(
        "rendezvous",
        json!({"world_size": 4, "master_addr": "node-a", "nodes": [
            {"node": 0, "host": "node-a", "ranks": [0, 1]},
            {"node": 1, "host": "node-b", "ranks": [2, 3]}]}),
    );
    e.event("attempt_started", json!({"attempt": 0, "restarts": 0}));
    for rank in 0..4 {
        let rows: Vec<_> = (0..500)
            .map(|s| (1_000_000 + s * 100, Some(s), reading(rank, s)))
            .collect();
        e.metrics(0, rank, &rows);
    }
    e.event(
        "failed",
        json!({"attempt": 0, "cause": "rank 2 exited with code 1", "kind": "worker_failure"}),
    );
    e.event("restart", json!({"attempt": 1}));
    e.event("attempt_started", json!({"attempt": 1, "restarts": 1}));
    for rank in 0..4 {
        let rows: Vec<_> = (400..1000)
            .map(|s| (2_000_000 + s * 100, Some(s), reading(rank, s)))
            .collect();
        e.metrics(1, rank, &rows);
    }
    e.event("finished", json!({"attempt": 1, "ok": true}));
    e
}

fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

/// Pixels exactly `colour`.
fn count(rgb: &[u8], colour: (u8, u8, u8)) -> usize {
    rgb.chunks_exact(3)
        .filter(|p| (p[0], p[1], p[2]) == colour)
        .count()
}

fn hex((r, g, b): (u8, u8, u8)) -> String {
    format!("#{r:02x}{g:02x}{b:02x}")
}

#[test]
fn the_palette_is_distinct_for_16_ranks_then_cycles() {
    let first: std::collections::BTreeSet<_> = (0..16).map(rank_colour).collect();
    assert_eq!(first.len(), 16);
    assert_eq!(rank_colour(16), rank_colour(0));
    assert_eq!(rank_colour(37), PALETTE[5]);
    for c in PALETTE {
        assert_ne!(c, (255, 255, 255), "not the background");
        assert_ne!(c, (0, 0, 0), "not the text");
        assert_ne!(c, plot::MARKER_COLOUR);
    }
}

#[test]
fn downsampling_keeps_each_buckets_min_and_max() {
    // A wave with spikes.
    let points: Vec<(f64, f64)> = (0..10_007)
        .map(|i| {
            let y = (i as f64 / 50.0).sin() + if i % 997 == 0 { 50.0 } else { 0.0 };
            (i as f64, y)
        })
        .collect();
    let out = downsample(&points, MAX_POINTS);
    assert!(out.len() <= MAX_POINTS, "{}", out.len());
    assert!(out.len() > MAX_POINTS / 2);
    assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "in order");
    let buckets = MAX_POINTS / 2;
    let n = points.len();
    for b in 0..buckets {
        let chunk = &points[b * n / buckets..(b + 1) * n / buckets];
        let lo = chunk.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = chunk.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        let kept: Vec<f64> = out
            .iter()
            .filter(|p| p.0 >= chunk[0].0 && p.0 <= chunk[chunk.len() - 1].0)
            .map(|p| p.1)
            .collect();
        assert!(kept.contains(&lo) && kept.contains(&hi), "bucket {b}");
    }
    let spikes = out.iter().filter(|p| p.1 > 40.0).count();
    assert_eq!(spikes, points.iter().filter(|p| p.1 > 40.0).count());
    // Short series stay as they are.
    assert_eq!(
        downsample(&points[..100], MAX_POINTS),
        points[..100].to_vec()
    );
}

#[test]
fn the_png_has_each_ranks_colour_and_no_other_palette_colour() {
    let root = Root::new();
    let e = two_attempts(&root, "train");
    for metric in Metric::ALL {
        let p = plot::build(&e.data(), metric).expect("a plot");
        let (w, h, rgb) = decode_png(&plot::png(&p).expect("draws"));
        assert_eq!((w, h), (plot::WIDTH, plot::HEIGHT));
        for rank in 0..4 {
            let n = count(&rgb, rank_colour(rank));
            // A line across the chart is thousands of pixels; the legend's swatch is 69.
            assert!(n > 1000, "{metric:?}: rank {rank}: {n} pixels");
        }
        assert_eq!(
            count(&rgb, rank_colour(4)),
            0,
            "{metric:?}: rank 4 is not there"
        );
    }
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

#[test]
fn the_svg_has_each_ranks_attempts_with_every_point() {
    let root = Root::new();
    let e = two_attempts(&root, "train");
    let p = plot::build(&e.data(), Metric::Loss).expect("a plot");
    assert_eq!(p.title, "train: loss");
    assert_eq!(p.x_label, "step");
    let svg = plot::svg(&p).expect("draws");
    let doc = roxmltree::Document::parse(&svg).expect("SVG parses");
    for rank in 0..4 {
        // Attempt 0 (steps 0..500); attempt 1 from step 499 (where its steps computed
        // again, 400..500, meet the new ones) to 999.
        assert_eq!(
            polylines(&doc, rank_colour(rank)),
            [500, 501],
            "rank {rank}: each attempt its own line, every reading"
        );
        // Steps 400..500 computed again: dashes, over the line of attempt 0.
        let dashes = polylines(&doc, plot::rework_colour(rank));
        assert!(dashes.len() > 3, "rank {rank}: {dashes:?}");
    }
    assert!(polylines(&doc, rank_colour(4)).is_empty(), "no rank 4");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for rank in 0..4 {
        assert!(
            texts.contains(&format!("rank {rank}").as_str()),
            "{texts:?}"
        );
    }
    // The restart: one marker at the second attempt's first step, labelled.
    assert_eq!(p.markers.len(), 1);
    assert_eq!((p.markers[0].attempt, p.markers[0].x), (1, 400.0));
    assert_eq!(p.markers[0].label, "restart");
    assert!(texts.contains(&"restart"), "{texts:?}");
    let dashes = doc
        .descendants()
        .filter(|n| {
            n.attribute("stroke")
                .is_some_and(|s| s.eq_ignore_ascii_case(&hex(plot::MARKER_COLOUR)))
        })
        .count();
    assert!(dashes > 5, "a dashed line: {dashes} dashes");
}

/// An experiment in memory: `ranks` ranks, `steps` steps, one attempt.
fn big(ranks: u32, steps: u64) -> ExpData {
    let mut attempt = data::AttemptData {
        number: 0,
        ranks: Vec::new(),
    };
    for rank in 0..ranks {
        let mut s = Series::default();
        for step in 0..steps {
            s.push(
                1_000 + step,
                &Record {
                    step: Some(step),
                    values: reading(rank, step)
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect(),
                },
            );
        }
        attempt.ranks.push((rank, s));
    }
    ExpData {
        name: "big".into(),
        size: Some((ranks.div_ceil(8), ranks)),
        on_gpus: true,
        attempts: vec![attempt],
        events: Vec::new(),
        history: Default::default(),
        runs: Vec::new(),
        failure: None,
        goodput: Default::default(),
        gpus: Default::default(),
    }
}

#[test]
fn long_series_are_downsampled_and_the_legend_is_capped() {
    let exp = big(20, 5_000);
    let p = plot::build(&exp, Metric::Throughput).expect("a plot");
    assert_eq!(p.column, "samples_per_s");
    assert_eq!(p.lines.len(), 20);
    assert!(p.lines.iter().all(|l| l.points.len() == MAX_POINTS));
    let svg = plot::svg(&p).expect("draws");
    let doc = roxmltree::Document::parse(&svg).expect("SVG parses");
    let ranks_lines = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("points")
                .is_some_and(|pts| pts.split_whitespace().count() == MAX_POINTS)
        })
        .count();
    assert_eq!(ranks_lines, 20);
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    assert!(
        texts.contains(&"rank 15") && !texts.contains(&"rank 16"),
        "{texts:?}"
    );
    assert!(texts.contains(&"+4 more"), "{texts:?}");
}

#[test]
fn tokens_when_no_samples_and_seconds_when_no_steps() {
    let root = Root::new();
    let e = root.exp("llm");
    e.event("rendezvous", json!({"world_size": 1, "nodes": []}));
    let rows: Vec<_> = (0..10)
        .map(|i| {
            (
                5_000 + i * 1000,
                None,
                vec![("tokens_per_s", 900.0 + i as f64)],
            )
        })
        .collect();
    e.metrics(0, 0, &rows);
    let d = e.data();
    assert!(plot::build(&d, Metric::Loss).is_none(), "no loss readings");
    let p = plot::build(&d, Metric::Throughput).expect("a plot");
    assert_eq!(p.column, "tokens_per_s");
    assert_eq!(p.x_label, "seconds since the first reading");
    assert_eq!(p.lines[0].points[0], (0.0, 900.0));
    assert_eq!(p.lines[0].points[9], (9.0, 909.0));
}

/// SwAV's own `Epoch: [E][I]` line (no step) read before the job's first convention line:
/// the plot stays on steps and leaves that reading out.
#[test]
fn a_reading_without_a_step_among_stepped_ones_keeps_the_step_axis() {
    let root = Root::new();
    let e = root.exp("swav");
    e.event("rendezvous", json!({"world_size": 1, "nodes": []}));
    let mut rows = vec![(5_000, None, vec![("loss", 4.6)])];
    rows.extend((0..5).map(|i| {
        (
            6_000 + i * 1000,
            Some(i * 10),
            vec![("loss", 4.5 - i as f64 * 0.1)],
        )
    }));
    e.metrics(0, 0, &rows);
    let p = plot::build(&e.data(), Metric::Loss).expect("a plot");
    assert_eq!(p.x_label, "step");
    assert_eq!(p.lines[0].points.len(), 5, "{:?}", p.lines[0].points);
    assert_eq!(p.lines[0].points[0], (0.0, 4.5));
}

#[test]
fn the_page_is_self_contained_and_escapes_what_the_job_wrote() {
    let root = Root::new();
    let a = two_attempts(&root, "swav-1n");
    let _b = two_attempts(&root, "swav-2n");
    let failure = herd_exp::failure::FailureReport::worker(
        0,
        (2, 0, 1),
        "node-b",
        herd_exp::failure::Exit::Code(1),
        None,
        vec![
            "Traceback (most recent call last):".into(),
            "ValueError: <script>alert('x')</script> & more".into(),
        ],
    );
    std::fs::write(
        a.exp.paths().logs().failure_report(),
        serde_json::to_vec(&failure).expect("json"),
    )
    .expect("failure.json");
    let page_path = root.tmp.path().join("out/report.html");
    std::fs::create_dir_all(page_path.parent().expect("parent")).expect("out");
    let mut out = Vec::new();
    let args = root.args(&[
        "swav-1n",
        "swav-2n",
        "--html",
        page_path.to_str().expect("utf-8"),
    ]);
    run(args, &mut out).expect("report");
    let out = String::from_utf8(out).expect("utf-8");
    assert!(
        out.ends_with(&format!("\n{}\n", page_path.display())),
        "{out}"
    );
    let html = std::fs::read_to_string(&page_path).expect("the page");
    let lower = html.to_lowercase();
    for external in [
        "src=", "href=", "http:", "https:", "url(", "@import", "<script", "<link",
    ] {
        assert!(!lower.contains(external), "{external} in the page");
    }
    assert!(html.contains("ValueError: &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"));
    assert_eq!(html.matches("<svg").count(), 4, "2 plots of 2 experiments");
    assert_eq!(html.matches("</svg>").count(), 4);
    assert!(html.contains("<table class=\"scaling\">"));
    assert!(html.contains("<td>swav-1n</td>"));
    // The attempt table: attempt 1 began with a restart; attempt 0 failed.
    assert!(html.contains("<td>restart 1</td>"), "{html}");
    assert!(html.contains("<td>failed (worker_failure)</td>"), "{html}");
    assert!(html.contains("<td>node-a, node-b</td>"));
    assert!(html.contains("<th>exit</th><td>exited with code 1</td>"));
    // Nothing else left beside it.
    let names: Vec<_> = std::fs::read_dir(page_path.parent().expect("parent"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("report.html")]);
}

#[test]
fn plots_are_written_and_listed_after_the_table() {
    let root = Root::new();
    two_attempts(&root, "train");
    let quiet = root.exp("quiet");
    quiet.event("rendezvous", json!({"world_size": 1, "nodes": []}));
    quiet.metrics(0, 0, &[(1000, Some(1), vec![("loss", 2.5)])]);
    let dir = root.tmp.path().join("plots/new");
    let mut out = Vec::new();
    let args = root.args(&["train", "quiet", "--plots", dir.to_str().expect("utf-8")]);
    run(args, &mut out).expect("report");
    let out = String::from_utf8(out).expect("utf-8");
    // The table, a blank line, each experiment's goodput, a blank line, the files.
    assert!(out.contains("\ntrain: goodput "), "{out}");
    let table_end = out.rfind("\n\n").expect("a blank line before the files");
    let listed: Vec<&str> = out[table_end + 2..].lines().collect();
    let mut expected = vec![
        "note: quiet: no samples_per_s or tokens_per_s readings: no throughput plot".to_owned(),
    ];
    for f in [
        "train.loss.png",
        "train.loss.svg",
        "train.throughput.png",
        "train.throughput.svg",
        "quiet.loss.png",
        "quiet.loss.svg",
    ] {
        expected.push(dir.join(f).display().to_string());
    }
    assert_eq!(listed, expected, "{out}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names.len(), 6, "no temporary files left: {names:?}");
    let (w, _, rgb) = decode_png(&std::fs::read(dir.join("quiet.loss.png")).expect("png"));
    assert_eq!(w, plot::WIDTH);
    assert!(count(&rgb, rank_colour(0)) > 0, "the single rank's swatch");
}

#[test]
fn without_plots_the_output_is_the_table_alone() {
    let root = Root::new();
    two_attempts(&root, "train");
    let mut out = Vec::new();
    run(root.args(&["train", "--json"]), &mut out).expect("report");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("only JSON");
    assert_eq!(doc["runs"][0]["gpus"], 4);
    assert_eq!(doc["runs"][0]["nodes"], 2);
}

/// A restart does not add ranks: each rank's rate is the median of its readings over every
/// attempt, summed over the 4 ranks (not over 4 ranks × 2 attempts).
#[test]
fn a_restarted_rank_counts_once_in_the_rate() {
    let root = Root::new();
    two_attempts(&root, "train");
    let mut out = Vec::new();
    run(root.args(&["train", "--json"]), &mut out).expect("report");
    let doc: serde_json::Value = serde_json::from_slice(&out).expect("only JSON");
    let expected: f64 = (0..4)
        .map(|rank| {
            // Attempt 0's steps 0..500, then attempt 1's 400..1000; the first left out.
            let rates = (0..500u64)
                .chain(400..1000)
                .skip(1)
                .map(|s| reading(rank, s)[1].1);
            herd_metrics::median(rates).expect("a median")
        })
        .sum();
    let shown = doc["runs"][0]["samples_per_s"].as_f64().expect("rate");
    assert!((shown - expected).abs() < 1e-9, "{shown} vs {expected}");
    // About 4 ranks' rates of 100–175 each, not twice that.
    assert!(shown < 4.0 * 190.0, "{shown}");
}

mod attempts;
mod gpus;

#[test]
fn a_plan_that_asked_for_gpus_runs_on_gpus() {
    assert!(data::on_gpus(&json!({"nodes": 2, "gpus_per_node": 4})));
    assert!(data::on_gpus(
        &json!({"nodes": 2, "gpus": 8, "gpus_per_node": null})
    ));
    assert!(!data::on_gpus(
        &json!({"nodes": 2, "gpus_per_node": null, "gpus": null})
    ));
    assert!(!data::on_gpus(&json!({"nodes": 2})));
    assert!(!data::on_gpus(&json!({"gpus_per_node": 0})));
}

/// `herd report` of a CPU job says workers; of a job that asked for GPUs, GPUs.
#[test]
fn a_cpu_jobs_report_counts_workers_and_a_gpu_jobs_gpus() {
    let root = Root::new();
    two_attempts(&root, "cpu");
    let mut out = Vec::new();
    run(root.args(&["cpu"]), &mut out).expect("report");
    let out = String::from_utf8(out).expect("utf-8");
    assert!(
        out.starts_with("| run | nodes | workers | samples/s | per worker |"),
        "{out}"
    );
    assert!(!out.contains("GPU"), "{out}");

    let gpu = root.exp_with_plan("gpu", json!({"nodes": 2, "gpus_per_node": 2}));
    assert!(gpu.data().on_gpus, "the plan asked for GPUs");
    assert!(!root.exp("cpu-2").data().on_gpus);
}

/// Every file `--plots` and `--html` write carries herd's mark where a code snapshot looks
/// for it, so the next `herd submit` of the project leaves them out, and says so; the
/// user's own pages and images beside them are snapshotted.
#[test]
fn what_the_report_writes_is_marked_and_left_out_of_the_next_snapshot() {
    use herd_exp::outputs::{MarkedKind, HEAD_BYTES, SVG_MARK};
    let root = Root::new();
    two_attempts(&root, "train");
    let project = root.tmp.path().join("project");
    std::fs::write(project.join("train.py"), "print('train')\n").expect("train.py");
    std::fs::create_dir_all(project.join("figures")).expect("figures");
    std::fs::write(project.join("figures/mine.svg"), "<svg></svg>\n").expect("svg");
    std::fs::write(project.join("index.html"), "<!DOCTYPE html>\n<p>mine</p>\n").expect("html");
    let plots = project.join("plots");
    let page = project.join("report.html");
    let args = root.args(&[
        "train",
        "--plots",
        plots.to_str().expect("utf-8"),
        "--html",
        page.to_str().expect("utf-8"),
    ]);
    run(args, &mut Vec::new()).expect("report");

    let mut written: Vec<PathBuf> = std::fs::read_dir(&plots)
        .expect("plots")
        .map(|e| e.expect("entry").path())
        .collect();
    written.sort();
    assert_eq!(written.len(), 4, "{written:?}");
    written.push(page.clone());
    for path in &written {
        let bytes = std::fs::read(path).expect("read");
        let kind = MarkedKind::of_name(path.file_name().expect("name")).expect("a marked kind");
        assert!(
            kind.is_marked(&bytes[..bytes.len().min(HEAD_BYTES)]),
            "{} carries no mark in its first {HEAD_BYTES} bytes",
            path.display()
        );
    }
    let (w, h, _) = decode_png(&std::fs::read(&written[0]).expect("png"));
    assert_eq!(
        (w, h),
        (plot::WIDTH, plot::HEIGHT),
        "the marked PNG still reads"
    );
    let svg = std::fs::read_to_string(&written[1]).expect("svg");
    roxmltree::Document::parse(&svg).expect("the marked SVG still parses as XML");
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(
        !html.contains(SVG_MARK),
        "the page's inline plots start at their <svg>"
    );

    let created = herd_exp::NewExperiment::new(
        &root.root,
        "next",
        &project,
        json!({}),
        herd_exp::Invocation::current("test"),
    )
    .create()
    .expect("the next experiment");
    let code = created.experiment.paths().code();
    let mut names: Vec<String> = std::fs::read_dir(&code)
        .expect("code")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["figures", "index.html", "train.py"]);
    assert!(code.join("figures/mine.svg").is_file());
    assert_eq!(
        crate::snapshot_lines::left_out_line(&created.snapshot.herd_outputs).as_deref(),
        Some("herd: code snapshot: left out 2 things herd wrote (experiments, logs, report pages and plots are never snapshotted): plots/ and report.html")
    );
}
