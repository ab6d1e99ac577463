//! Across attempts: where the time went (goodput), plots that break at each attempt and
//! mark the steps computed again, and the page's times since the job's first start.

use super::*;

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
