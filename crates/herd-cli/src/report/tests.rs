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

    /// A new experiment `name`.
    fn exp(&self, name: &str) -> Exp {
        let project = self.tmp.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let created = herd_exp::NewExperiment::new(
            &self.root,
            name,
            &project,
            json!({"nodes": 2}),
            herd_exp::Invocation::current("test"),
        )
        .create()
        .expect("experiment");
        Exp {
            exp: created.experiment,
        }
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
            herd_exp::timeline::append(self.exp.dir(), name, fields).expect("event");
            return;
        };
        let mut m = fields.as_object().cloned().unwrap_or_default();
        m.insert("unix_ms".into(), json!(ms));
        m.insert("event".into(), json!(name));
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
        attempts: vec![attempt],
        events: Vec::new(),
        history: Default::default(),
        runs: Vec::new(),
        failure: None,
        goodput: Default::default(),
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

/// A time limit then the end: attempt 1 resumes from step 15 after attempt 0 reached 20.
fn time_limited(root: &Root, name: &str) -> Exp {
    let e = root.exp(name);
    let t = |s: f64| 1_800_000_000_000u64 + (s * 1000.0) as u64;
    let mut lines = String::new();
    let mut event = |s: f64, event: &str, fields: serde_json::Value| {
        let mut m = fields.as_object().cloned().unwrap_or_default();
        m.insert("unix_ms".into(), json!(t(s)));
        m.insert("time".into(), json!(herd_exp::timeline::rfc3339(t(s))));
        m.insert("event".into(), json!(event));
        lines.push_str(&serde_json::to_string(&m).expect("json"));
        lines.push('\n');
    };
    event(0.0, "started", json!({"job_id": "42", "requeue": 0}));
    event(
        0.5,
        "rendezvous",
        json!({"world_size": 1, "nodes": [{"node": 0, "host": "a", "ranks": [0]}]}),
    );
    event(1.0, "attempt_started", json!({"attempt": 0}));
    event(
        23.5,
        "warning",
        json!({"attempt": 0, "cause": "time_limit"}),
    );
    event(26.0, "teardown", json!({"attempt": 0}));
    event(
        26.5,
        "requeue",
        json!({"attempt": 0, "cause": "time_limit"}),
    );
    event(36.0, "started", json!({"job_id": "42", "requeue": 1}));
    event(37.0, "attempt_started", json!({"attempt": 1}));
    event(56.0, "finished", json!({"attempt": 1, "ok": true}));
    std::fs::write(e.exp.paths().timeline(), lines).expect("timeline");
    let rows = |from: u64, steps: std::ops::RangeInclusive<u64>, t0: f64| -> Vec<Reading> {
        steps
            .enumerate()
            .map(|(i, s)| {
                (
                    t(t0 + i as f64),
                    Some(s),
                    vec![("loss", 1.0 / (s + from) as f64)],
                )
            })
            .collect()
    };
    e.metrics(0, 0, &rows(0, 1..=20, 4.0));
    e.metrics(1, 0, &rows(0, 16..=30, 40.0));
    e
}

#[test]
fn the_report_says_where_the_time_went_in_text_json_and_page() {
    let root = Root::new();
    time_limited(&root, "gp");
    let mut out = Vec::new();
    let page = root.tmp.path().join("gp.html");
    run(
        root.args(&["gp", "--html", page.to_str().expect("utf-8")]),
        &mut out,
    )
    .expect("report");
    let out = String::from_utf8(out).expect("utf-8");
    // Training: 4 → 23 s and 44 → 54 s; the wall time 0 → 56 s.
    assert!(
        out.contains("gp: goodput 51.8 % of 56.0 s (62.4 % of the 46.5 s allocated)"),
        "{out}"
    );
    assert!(
        out.contains("  training 29.0 s · rework 4.0 s (5 steps) · stop 2.5 s · start 8.0 s · queue 9.5 s · other 3.0 s"),
        "{out}"
    );
    let mut json_out = Vec::new();
    run(root.args(&["gp", "--json"]), &mut json_out).expect("report");
    let doc: serde_json::Value = serde_json::from_slice(&json_out).expect("JSON");
    let g = &doc["runs"][0]["goodput"];
    assert_eq!(g["wall_s"], 56.0);
    assert_eq!(g["parts"]["training"], 29.0);
    assert_eq!(g["parts"]["rework"], 4.0);
    assert_eq!(g["rework_steps"], 5);
    assert_eq!(g["attempts"][0]["ended"], "requeue: time limit");
    assert_eq!(g["attempts"][1]["ended"], "finished");
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(html.contains("<h3>Goodput</h3>"), "{html}");
    assert!(html.contains("goodput 51.8 % of 56.0 s"), "{html}");
    assert_eq!(html.matches("class=\"span rework\"").count(), 1, "{html}");
    assert!(html.contains("<td>requeue: time limit</td>"), "{html}");
    assert!(
        html.contains("title=\"queue 9.5 s (+0:26 → +0:36)\""),
        "{html}"
    );
}
/// `requeued`: 2 ranks, attempt 0 from step 0 to 235, then a requeue (time limit) and
/// attempt 1 resuming from the checkpoint at step 220: it computes steps 221..=235 again
/// and goes on to 400. Attempt 1's first reading is slow (warm-up), as after a real resume.
/// The timeline's times: attempt 0 started 10:00:04, torn down 1:17 later; attempt 1 began
/// at +1:26 and finished at +1:03:29.
fn requeued(root: &Root, name: &str) -> Exp {
    let e = root.exp(name);
    let at = |t: &str| format!("2026-12-02T{t}.000Z");
    e.event(
        "started",
        json!({"job_id": "7", "requeue": 0, "time": at("10:00:01")}),
    );
    e.event(
        "rendezvous",
        json!({"world_size": 2, "nodes": [{"node": 0, "host": "node-a", "ranks": [0, 1]}]}),
    );
    e.event(
        "attempt_started",
        json!({"attempt": 0, "restarts": 0, "time": at("10:00:04")}),
    );
    let throughput = |rank: u32, step: u64, first: bool| {
        let mut r = reading(rank, step);
        if first {
            r[1].1 = 3.0;
        }
        r
    };
    for rank in 0..2 {
        let rows: Vec<_> = (0..=235)
            .map(|s| (1_000_000 + s * 100, Some(s), throughput(rank, s, s == 0)))
            .collect();
        e.metrics(0, rank, &rows);
    }
    e.event("teardown", json!({"attempt": 0, "time": at("10:01:21")}));
    e.event("requeue", json!({"cause": "time_limit"}));
    e.event(
        "started",
        json!({"job_id": "7", "requeue": 1, "time": at("10:01:27")}),
    );
    e.event(
        "attempt_started",
        json!({"attempt": 1, "restarts": 0, "time": at("10:01:30")}),
    );
    for rank in 0..2 {
        let rows: Vec<_> = (221..=400)
            .map(|s| (2_000_000 + s * 100, Some(s), throughput(rank, s, s == 221)))
            .collect();
        e.metrics(1, rank, &rows);
    }
    e.event(
        "finished",
        json!({"attempt": 1, "ok": true, "time": at("11:03:33")}),
    );
    e
}

/// The x pixel coordinates of each polyline of the SVG drawn in one of `colours`.
fn polyline_xs(svg: &str, colours: &[(u8, u8, u8)]) -> Vec<Vec<f64>> {
    let doc = roxmltree::Document::parse(svg).expect("SVG parses");
    doc.descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("stroke")
                .is_some_and(|s| colours.iter().any(|c| s.eq_ignore_ascii_case(&hex(*c))))
        })
        .map(|n| {
            n.attribute("points")
                .expect("points")
                .split_whitespace()
                .map(|p| p.split(',').next().expect("x").parse().expect("a number"))
                .collect()
        })
        .collect()
}

/// The case (#28): after a requeue the steps from the checkpoint on are computed
/// again, and the plot must not run back from step 235 to 221 (a throughput "collapse"
/// that never happened).
#[test]
fn a_requeue_with_rework_draws_no_line_going_back_in_steps() {
    let root = Root::new();
    let e = requeued(&root, "requeued");
    let d = e.data();
    for metric in Metric::ALL {
        let p = plot::build(&d, metric).expect("a plot");
        assert_eq!(p.lines, plot::lines(&d, metric), "lines() is what is drawn");
        for l in &p.lines {
            assert!(
                l.points.windows(2).all(|w| w[0].0 <= w[1].0),
                "{metric:?}: rank {} attempt {} goes back: {:?}",
                l.rank,
                l.attempt,
                l.points
            );
            // No line spans two attempts: each stays within its attempt's steps.
            let (lo, hi) = if l.attempt == 0 {
                (0.0, 235.0)
            } else {
                (221.0, 400.0)
            };
            assert!(
                l.points.iter().all(|p| (lo..=hi).contains(&p.0)),
                "{metric:?}: rank {} attempt {}: {:?}",
                l.rank,
                l.attempt,
                l.points
            );
        }
        for rank in 0..2 {
            let mine = |attempt: u32, rework: bool| -> Vec<&plot::Line> {
                p.lines
                    .iter()
                    .filter(|l| (l.rank, l.attempt, l.rework) == (rank, attempt, rework))
                    .collect()
            };
            assert_eq!(
                mine(0, false).len(),
                1,
                "{metric:?}: rank {rank}: attempt 0"
            );
            assert!(mine(0, true).is_empty(), "attempt 0 computes nothing again");
            let again = mine(1, true);
            assert_eq!(again.len(), 1, "{metric:?}: rank {rank}: one rework line");
            let steps: Vec<f64> = again[0].points.iter().map(|p| p.0).collect();
            let want: Vec<f64> = (221..=235).map(|s| s as f64).collect();
            assert_eq!(steps, want, "{metric:?}: rank {rank}: steps 221..=235");
            let fresh = mine(1, false);
            assert_eq!(fresh.len(), 1, "{metric:?}: rank {rank}");
            // The fresh part continues from the last point computed again.
            assert_eq!(
                fresh[0].points[0],
                *again[0].points.last().expect("a point")
            );
            assert_eq!(fresh[0].points[1].0, 236.0);
            assert_eq!(fresh[0].points.last().expect("a point").0, 400.0);
        }
        assert_eq!(
            p.rework,
            [plot::Rework {
                attempt: 1,
                from: 221.0,
                to: 235.0
            }]
        );
        assert_eq!(p.markers.len(), 1, "the requeue's marker stays");
        assert_eq!(
            (p.markers[0].x, p.markers[0].label.as_str()),
            (221.0, "requeue")
        );
        // The drawing: no polyline of the SVG goes back on the x axis.
        let svg = plot::svg(&p).expect("draws");
        let colours: Vec<_> = (0..2)
            .flat_map(|r| [rank_colour(r), plot::rework_colour(r)])
            .collect();
        let xs = polyline_xs(&svg, &colours);
        let solid = (0..2).map(|r| {
            polylines(
                &roxmltree::Document::parse(&svg).expect("SVG parses"),
                rank_colour(r),
            )
            .len()
        });
        assert!(solid.eq([2, 2]), "each rank: a line an attempt");
        assert!(xs.len() > 4, "and the dashes of the steps computed again");
        for x in &xs {
            assert!(x.windows(2).all(|w| w[0] <= w[1]), "{metric:?}: {x:?}");
        }
        assert!(
            svg.contains("computed"),
            "the legend says what the lighter part is"
        );
        let note = p.rework_note().expect("a note");
        assert!(note.contains("attempt 1: steps 221–235"), "{note}");
    }
    // The PNG is still written, with both shades of each rank.
    let dir = root.tmp.path().join("plots");
    let written = plot::write(&d, &dir).expect("writes");
    assert_eq!(written.files.len(), 4, "{written:?}");
    let (w, h, rgb) = decode_png(&std::fs::read(dir.join("requeued.throughput.png")).expect("png"));
    assert_eq!((w, h), (plot::WIDTH, plot::HEIGHT));
    for rank in 0..2 {
        assert!(count(&rgb, rank_colour(rank)) > 1000, "rank {rank}");
        let light = count(&rgb, plot::rework_colour(rank));
        assert!(
            light > 100,
            "rank {rank}: its steps computed again: {light} pixels"
        );
    }
}

#[test]
fn a_run_of_one_attempt_has_no_rework_line() {
    let exp = big(3, 300);
    for metric in Metric::ALL {
        let p = plot::build(&exp, metric).expect("a plot");
        assert_eq!(p.lines.len(), 3, "one line a rank");
        assert!(p.lines.iter().all(|l| !l.rework && l.attempt == 0));
        assert!(p.rework.is_empty());
        assert_eq!(p.rework_note(), None);
        let (_, _, rgb) = decode_png(&plot::png(&p).expect("draws"));
        for rank in 0..3 {
            assert_eq!(count(&rgb, plot::rework_colour(rank)), 0, "rank {rank}");
        }
    }
}

/// An attempt that starts after the highest step reached computes nothing again, yet its
/// line is not joined to the attempt before; the same without steps (seconds on x).
#[test]
fn attempts_break_the_line_without_rework() {
    let mut exp = big(2, 100);
    let mut second = exp.attempts[0].clone();
    second.number = 1;
    for (_, s) in &mut second.ranks {
        for step in s.step.iter_mut().flatten() {
            *step += 100;
        }
        for t in &mut s.time_ms {
            *t += 10_000;
        }
    }
    exp.attempts.push(second);
    let p = plot::build(&exp, Metric::Loss).expect("a plot");
    assert_eq!(p.lines.len(), 4, "2 ranks × 2 attempts");
    assert!(p.lines.iter().all(|l| !l.rework && l.points.len() == 100));
    assert!(p.rework.is_empty());
    // Step 100 is the first after 99: no rework at the boundary.
    assert_eq!(p.lines[1].points[0].0, 100.0);
    for a in &mut exp.attempts {
        for (_, s) in &mut a.ranks {
            s.step.iter_mut().for_each(|s| *s = None);
        }
    }
    let p = plot::build(&exp, Metric::Loss).expect("a plot");
    assert_eq!(p.x_label, "seconds since the first reading");
    assert_eq!(p.lines.len(), 4);
    assert!(p.lines.iter().all(|l| !l.rework));
    assert_eq!(
        p.lines[1].points[0].0, 10.0,
        "attempt 1 of rank 0, 10 s later"
    );
}

/// Long series with rework: at most MAX_POINTS points a rank over all its lines, and the
/// parts of an attempt still meet.
#[test]
fn downsampling_keeps_the_rank_budget_and_the_joins() {
    let mut exp = big(2, 6_000);
    let mut second = exp.attempts[0].clone();
    second.number = 1;
    for (_, s) in &mut second.ranks {
        for step in s.step.iter_mut().flatten() {
            *step += 4_000;
        }
    }
    exp.attempts.push(second);
    let p = plot::build(&exp, Metric::Throughput).expect("a plot");
    for rank in 0..2 {
        let mine: Vec<_> = p.lines.iter().filter(|l| l.rank == rank).collect();
        let drawn: usize = mine.iter().map(|l| l.points.len()).sum();
        assert!(drawn <= MAX_POINTS, "rank {rank}: {drawn} points");
        assert!(drawn > MAX_POINTS / 2, "rank {rank}: {drawn} points");
        let flags: Vec<_> = mine.iter().map(|l| (l.attempt, l.rework)).collect();
        assert_eq!(flags, [(0, false), (1, true), (1, false)]);
        assert_eq!(mine[2].points[0], *mine[1].points.last().expect("a point"));
        assert!(mine[1].points.iter().all(|p| p.0 <= 5_999.0));
        assert!(mine[2].points[1..].iter().all(|p| p.0 > 5_999.0));
    }
    assert_eq!(p.rework.len(), 1);
    assert_eq!((p.rework[0].from, p.rework[0].to), (4_000.0, 5_999.0));
}

#[test]
fn times_read_as_time_since_the_start() {
    use super::html::since;
    assert_eq!(since(5_000, 5_000), "+0:00");
    assert_eq!(since(5_000 + 77_400, 5_000), "+1:17");
    assert_eq!(since(3_723_000, 0), "+1:02:03");
    assert_eq!(since(0, 2_000), "-0:02");
}

#[test]
fn the_attempt_table_gives_times_since_the_jobs_first_start_and_exact_stamps_on_hover() {
    let root = Root::new();
    // The job first started at 10:00:01 (`started`), its first attempt at 10:00:04.
    let e = requeued(&root, "requeued");
    let mut html = String::new();
    html::attempts_table(&e.data(), &mut html);
    let row = |k: u32| {
        let start = html
            .find(&format!("<tr><td class=\"n\">{k}</td>"))
            .unwrap_or_else(|| panic!("attempt {k}: {html}"));
        let end = start + html[start..].find("</tr>").expect("row end");
        html[start..end].to_owned()
    };
    let zero = row(0);
    assert!(
        zero.contains("<td class=\"n\" title=\"2026-12-02T10:00:04.000Z\">+0:03</td>"),
        "{zero}"
    );
    assert!(zero.contains("<td class=\"n\">1:17</td>"), "ran: {zero}");
    assert!(
        zero.contains("<td class=\"n\" title=\"2026-12-02T10:01:21.000Z\">+1:20</td>"),
        "{zero}"
    );
    assert!(
        zero.contains("<td class=\"stamp\">2026-12-02T10:00:04.000Z</td>"),
        "the exact start stays visible: {zero}"
    );
    let one = row(1);
    assert!(one.contains("<td>requeue (time_limit)</td>"), "{one}");
    assert!(
        one.contains("<td class=\"n\" title=\"2026-12-02T10:01:30.000Z\">+1:29</td>"),
        "{one}"
    );
    assert!(one.contains("<td class=\"n\">1:02:03</td>"), "ran: {one}");
    assert!(
        one.contains("<td class=\"n\" title=\"2026-12-02T11:03:33.000Z\">+1:03:32</td>"),
        "{one}"
    );
    assert!(one.contains("<td>finished</td>"), "{one}");
    // No raw stamp outside the hover and the exact column.
    let bare = html.matches(">2026-").count();
    assert_eq!(bare, 2, "only the started-at column: {html}");
}
