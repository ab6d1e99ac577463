//! `herd report --plots` and `--html` on the bed (issue #15): a 2-node job's plots, one
//! series per rank in the PNG, the SVG and the HTML page as headless Chromium renders it.

use std::path::Path;
use std::process::Command;

use herd_testbed::Bed;

use crate::support::{job_id, project_with, submit, wait_ok};

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
    let mut buf = vec![0; reader.output_buffer_size()];
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
