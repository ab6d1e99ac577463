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

    // The markdown table: a header, a rule and the three rows, in the same order.
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["report", "--exp-root", &root])
        .args(names)
        .current_dir(&project)
        .output()
        .expect("herd report");
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 5, "{text}");
    assert!(rows[0].starts_with("| run | nodes | GPUs | samples/s | per GPU | efficiency |"));
    assert!(
        rows[2].starts_with("| swav-1n | 1 | 1 | ") && rows[2].contains(" | 100% | "),
        "{text}"
    );
    assert!(rows[3].starts_with("| swav-2n | 2 | 2 | "), "{text}");
    assert!(rows[4].starts_with("| swav-3n | 3 | 3 | "), "{text}");
}

/// Pixels of `img` (RGB or RGBA, 8-bit) within `tol` of `colour` in every channel.
fn count_colour(img: &(png::OutputInfo, Vec<u8>), colour: (u8, u8, u8), tol: u8) -> usize {
    let (info, buf) = img;
    let step = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        other => panic!("unexpected PNG colour type {other:?}"),
    };
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let near = |a: u8, b: u8| a.abs_diff(b) <= tol;
    buf[..info.buffer_size()]
        .chunks_exact(step)
        .filter(|p| near(p[0], colour.0) && near(p[1], colour.1) && near(p[2], colour.2))
        .count()
}

fn decode_png(path: &Path) -> (png::OutputInfo, Vec<u8>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder
        .read_info()
        .unwrap_or_else(|e| panic!("{} is no PNG: {e}", path.display()));
    let mut buf = vec![0; reader.output_buffer_size().expect("size")];
    let info = reader.next_frame(&mut buf).expect("PNG frame");
    (info, buf)
}

/// After a 2-node job of 2 workers a node, `herd report --plots` writes a loss and a
/// throughput plot as PNG and SVG: the PNG decodes and has the line colour of each of the
/// 4 ranks (and not of a 5th), the SVG parses and has one line per rank with as many points
/// as that rank stored readings; `--html` writes one page that headless Chromium renders to
/// a screenshot showing each rank's colour, and that references nothing outside itself.
#[test]
fn plots_and_the_html_page_of_a_two_node_job_have_one_series_per_rank() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "report_plots",
        &[("examples/train_ddp.py", "train_ddp.py")],
    );
    let root = exps.display().to_string();
    let out = submit(
        &bed,
        &project,
        &[
            "-J",
            "plotted",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--partition",
            "gpu",
            "--time",
            "10",
            "--exp-root",
            &root,
            "--",
            "python",
            "train_ddp.py",
            "--steps",
            "60",
            "--log-every",
            "5",
        ],
    );
    let job = job_id(&out);
    let exp = exps.join("plotted");
    wait_ok(&bed, job, &exp);
    let stored = herd_metrics::store::read_attempt(&exp.join("logs/attempt-0")).expect("metrics");
    assert_eq!(
        stored.iter().map(|(r, _)| *r).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "every rank's readings stored"
    );

    let plots = project.join("plots");
    let html = project.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["report", "plotted", "--exp-root", &root, "--plots"])
        .arg(&plots)
        .arg("--html")
        .arg(&html)
        .current_dir(&project)
        .output()
        .expect("herd report");
    assert!(out.status.success(), "{out:?}");

    use herd_cli::report::plot::rank_colour;
    for what in ["loss", "throughput"] {
        let png_path = plots.join(format!("plotted.{what}.png"));
        let img = decode_png(&png_path);
        for r in 0..4 {
            let n = count_colour(&img, rank_colour(r), 0);
            assert!(n >= 50, "{what}: rank {r}'s colour has {n} pixels");
        }
        let n = count_colour(&img, rank_colour(4), 0);
        assert_eq!(n, 0, "{what}: a 5th rank's colour in a 4-rank plot");

        let svg_path = plots.join(format!("plotted.{what}.svg"));
        let text = std::fs::read_to_string(&svg_path).expect("svg");
        let doc = roxmltree::Document::parse(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", svg_path.display()));
        for (r, series) in &stored {
            let (cr, cg, cb) = rank_colour(*r);
            let want = format!("#{cr:02X}{cg:02X}{cb:02X}");
            let lines: Vec<_> = doc
                .descendants()
                .filter(|n| n.has_tag_name("polyline"))
                .filter(|n| {
                    n.attribute("stroke")
                        .is_some_and(|s| s.eq_ignore_ascii_case(&want))
                })
                .collect();
            assert_eq!(lines.len(), 1, "{what}: rank {r} ({want}): {lines:?}");
            let points = lines[0]
                .attribute("points")
                .unwrap_or_default()
                .split_whitespace()
                .count();
            let col = if what == "loss" {
                "loss"
            } else {
                "samples_per_s"
            };
            let readings = series
                .column(col)
                .expect("column")
                .iter()
                .filter(|v| v.is_finite())
                .count();
            assert_eq!(points, readings, "{what}: rank {r}'s points");
        }
    }

    // The page: self-contained, and rendered by a real browser.
    let page = std::fs::read_to_string(&html).expect("html");
    for needle in [
        "src=\"http",
        "href=\"http",
        "src='http",
        "url(http",
        "@import",
    ] {
        assert!(
            !page.contains(needle),
            "the page fetches something: {needle}"
        );
    }
    assert_eq!(page.matches("<svg").count(), 2, "one inline SVG per plot");
    let shot = project.join("shot.png");
    let profile = project.join("chromium-profile");
    let mut chromium = Command::new("chromium");
    chromium
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,3000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", html.display()));
    herd_testbed::run_cmd(&mut chromium, std::time::Duration::from_secs(120))
        .expect("headless chromium (scripts/test-all installs it)");
    let img = decode_png(&shot);
    let white = count_colour(&img, (255, 255, 255), 0);
    let total = img.1.len()
        / if img.0.color_type == png::ColorType::Rgb {
            3
        } else {
            4
        };
    assert!(white < total * 99 / 100, "the screenshot is blank");
    for r in 0..4 {
        let n = count_colour(&img, rank_colour(r), 12);
        assert!(n >= 30, "screenshot: rank {r}'s colour has {n} pixels");
    }
}
