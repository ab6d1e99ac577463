use super::gpus::Gpu;
use super::model::{sort_rows, Reader, Sort, State, Thresholds};
use super::*;
use crate::test_support::Exp;
use herd_exp::gpus::{Flag, Sample};
use herd_exp::logs::{self as exp_logs, Stream};
use herd_metrics::store;
use herd_metrics::Record;
use ratatui::backend::TestBackend;
use serde_json::json;
use std::path::PathBuf;

/// "Now" in these tests: every time is relative to it.
const NOW: u64 = 1_796_060_000_000;

impl Exp {
    fn record(&self, name: &str, fields: serde_json::Value) {
        let event = crate::test_support::event(name, fields);
        herd_exp::timeline::append(&self.dir, event).expect("event");
    }

    /// `started`, a `rendezvous` of `ranks` ranks on two nodes, `attempt_started` K.
    fn start(&self, k: u32, ranks: u32) {
        let half = ranks.div_ceil(2);
        self.record("started", json!({"job_id": "4242"}));
        self.record(
            "rendezvous",
            json!({"world_size": ranks, "nodes": [
                {"node": 0, "host": "gpu-a01", "ranks": (0..half).collect::<Vec<_>>()},
                {"node": 1, "host": "gpu-a02", "ranks": (half..ranks).collect::<Vec<_>>()},
            ]}),
        );
        self.record("attempt_started", json!({"attempt": k}));
        self.attempt_dir(k);
    }

    /// A stdout line of rank `rank` marked at `ms`.
    fn line(&self, k: u32, rank: u32, text: &str, ms: u64) {
        let d = self.attempt_dir(k);
        let open = |p: PathBuf| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("open")
        };
        let mut log = open(d.log(rank, Stream::Out));
        let offset = log.metadata().expect("len").len();
        open(d.times(rank))
            .write_all(exp_logs::format_mark(Stream::Out, offset, ms).as_bytes())
            .expect("mark");
        log.write_all(format!("{text}\n").as_bytes()).expect("line");
    }

    /// Readings of rank `rank` at `rates` (one a second, ending at `end`), with output
    /// lines marked at the same times.
    fn readings(&self, k: u32, rank: u32, rates: &[f64], end: u64) {
        let dir = self.attempt_dir(k);
        let mut w = store::Writer::new(dir.metrics(rank));
        let n = rates.len() as u64;
        for (i, &rate) in rates.iter().enumerate() {
            let ms = end - (n - 1 - i as u64) * 1000;
            let step = 10 * (i as u64 + 1);
            let loss = 2.0 - i as f64 * 0.1 - f64::from(rank) * 0.01;
            w.write(
                ms,
                &Record {
                    step: Some(step),
                    values: vec![("loss".into(), loss), ("samples_per_s".into(), rate)],
                },
            )
            .expect("reading");
            self.line(k, rank, &format!("step {step} loss {loss}"), ms);
        }
    }

    fn reader(&self, silent_after: Option<u64>) -> Reader {
        let exp = herd_exp::Experiment::open(&self.root, "train").expect("open");
        Reader::new(
            exp,
            None,
            Thresholds {
                silent_after: silent_after.map(Duration::from_secs),
                ..Thresholds::default()
            },
        )
    }
}

fn state_of(frame: &Frame, rank: u32) -> State {
    frame
        .rows
        .iter()
        .find(|r| r.rank == rank)
        .unwrap_or_else(|| panic!("no row for rank {rank}: {frame:?}"))
        .state
        .clone()
}

#[test]
fn states_come_from_the_files_and_the_timeline() {
    let e = Exp::new();
    e.start(1, 8);
    let steady = [100.0, 101.0, 99.0, 100.0, 100.0];
    e.readings(1, 0, &steady, NOW - 1000);
    e.readings(1, 1, &steady, NOW - 2000);
    // Recent rate: the median of its last five readings (one fast reading does not hide it).
    e.readings(1, 2, &[100.0, 40.0, 41.0, 39.0, 150.0, 40.0], NOW - 1000);
    // Silent for 2 minutes, lines usually every second.
    e.readings(1, 3, &steady, NOW - 120_000);
    // Rank 4: nothing yet.
    e.readings(1, 5, &steady, NOW - 5000);
    e.record(
        "worker_exit",
        json!({"attempt": 1, "rank": 5, "how": "rank 5 (local rank 1 on gpu-a02) exited with code 3"}),
    );
    e.readings(1, 6, &steady, NOW - 5000);
    e.record(
        "worker_exit",
        json!({"attempt": 1, "rank": 6, "how": "rank 6 (local rank 2 on gpu-a02) killed by SIGKILL (killed: out of memory, or by hand)"}),
    );
    // Quiet for 2 minutes, but its lines come every 30 s: silent only after 300 s.
    for i in 0..5 {
        e.line(1, 7, "epoch", NOW - 120_000 - (4 - i) * 30_000);
    }
    let mut reader = e.reader(None);
    let frame = reader.frame(NOW);
    assert_eq!(frame.rows.len(), 8, "{frame:?}");
    assert_eq!(state_of(&frame, 0), State::Running);
    assert_eq!(state_of(&frame, 1), State::Running);
    assert_eq!(state_of(&frame, 2), State::Slow(40));
    assert_eq!(state_of(&frame, 3), State::Silent(Duration::from_secs(120)));
    assert_eq!(state_of(&frame, 4), State::Waiting);
    assert_eq!(state_of(&frame, 5), State::Failed(3));
    assert_eq!(state_of(&frame, 6), State::Killed("SIGKILL".into()));
    assert_eq!(state_of(&frame, 7), State::Running);
    assert_eq!(state_of(&frame, 3).text(), "SILENT 120s");
    assert_eq!(state_of(&frame, 2).text(), "SLOW 40%");

    let r0 = &frame.rows[0];
    assert_eq!(r0.host.as_deref(), Some("gpu-a01"));
    assert_eq!(frame.rows[7].host.as_deref(), Some("gpu-a02"));
    assert_eq!(r0.step, Some(50));
    assert_eq!(r0.rate, Some(100.0));
    assert_eq!(r0.since, Some(Duration::from_secs(1)));
    assert_eq!(frame.world_size, Some(8));
    assert_eq!(frame.nodes, Some(2));
    assert_eq!(frame.attempt, Some(1));
    assert_eq!(frame.job_ids, ["4242"]);
    // Running ranks 0, 1, 2 (40), 3 (silent, 100): median 100, total 340.
    assert_eq!(frame.median_rate, Some(100.0));
    assert_eq!(frame.total_rate, Some(340.0));

    // A tighter --silent-after: rank 7 is silent too, the rank 0 a second ago is not.
    let frame = e.reader(Some(60)).frame(NOW);
    assert_eq!(state_of(&frame, 7), State::Silent(Duration::from_secs(120)));
    assert_eq!(state_of(&frame, 0), State::Running);

    // The attempt finishes well: every rank that did not fail is done.
    e.record("finished", json!({"attempt": 1, "ok": true}));
    let frame = reader.frame(NOW);
    assert_eq!(state_of(&frame, 0), State::Done);
    assert_eq!(state_of(&frame, 3), State::Done);
    assert_eq!(state_of(&frame, 5), State::Failed(3));
    assert_eq!(frame.ended.as_deref(), Some("finished ok"));
    // No rank runs any more: the header keeps the rates the ranks ended at (2 at 40; 0, 1,
    // 3, 5 and 6 at 100; 4 and 7 never reported one).
    assert_eq!(frame.median_rate, Some(100.0));
    assert_eq!(frame.total_rate, Some(540.0), "{:?}", frame.rows);

    // Once `herd status` recorded SLURM's word on the job, the header says that instead
    // (docs/top.md, "The header").
    e.record(
        "ended",
        json!({"job_id": "4242", "state": "COMPLETED", "exit_code": 0, "reason": "None"}),
    );
    let frame = reader.frame(NOW);
    assert_eq!(frame.ended.as_deref(), Some("ended COMPLETED (exit 0)"));
}

/// A rank's end comes from the event's `exit` (and `failed`'s `rank`), not from its words:
/// an exception whose message says `exited with code 3` leaves the exit code 1, and a cause
/// that does not start with the rank still names it.
#[test]
fn exits_are_read_from_the_events_fields_not_their_words() {
    let e = Exp::new();
    e.start(1, 5);
    for r in 0..5 {
        e.readings(1, r, &[100.0], NOW - 1000);
    }
    e.record(
        "worker_exit",
        json!({"attempt": 1, "rank": 1, "exit": {"code": 1},
               "how": "rank 1 (local rank 1 on gpu-a01) raised RuntimeError: child exited with code 3 (exited with code 1)"}),
    );
    e.record(
        "worker_exit",
        json!({"attempt": 1, "rank": 2, "exit": {"signal": "SIGSEGV"}, "how": "segfault"}),
    );
    e.record(
        "failed",
        json!({"attempt": 1, "rank": 3, "exit": {"code": 9}, "kind": "worker_failure",
               "cause": "the worker of rank 3 exited with code 9"}),
    );
    e.record(
        "worker_exit",
        json!({"attempt": 1, "rank": 4, "exit": {"signal": "SIGTERM"}, "during": "stop",
               "how": "rank 4 (local rank 0 on gpu-a02) killed by SIGTERM"}),
    );
    let frame = e.reader(None).frame(NOW);
    assert_eq!(state_of(&frame, 0), State::Running);
    assert_eq!(state_of(&frame, 1), State::Failed(1));
    assert_eq!(state_of(&frame, 2), State::Killed("SIGSEGV".into()));
    assert_eq!(state_of(&frame, 3), State::Failed(9));
    assert_eq!(state_of(&frame, 4), State::Stopped);
}

#[test]
fn a_failed_attempt_stops_the_others_and_a_new_attempt_is_followed() {
    let e = Exp::new();
    e.start(1, 3);
    for r in 0..3 {
        e.readings(1, r, &[100.0], NOW - 1000);
    }
    e.record(
        "failed",
        json!({"attempt": 1, "cause": "rank 1 (local rank 1 on gpu-a01) exited with code 7", "kind": "worker_failure"}),
    );
    let mut reader = e.reader(None);
    let frame = reader.frame(NOW);
    assert_eq!(state_of(&frame, 1), State::Failed(7));
    assert_eq!(state_of(&frame, 0), State::Running);

    e.record("restart", json!({"attempt": 2}));
    e.record("attempt_started", json!({"attempt": 2}));
    e.attempt_dir(2);
    let frame = reader.frame(NOW);
    assert_eq!(frame.attempt, Some(2));
    assert_eq!(frame.attempts, [1, 2]);
    assert_eq!(frame.restarts, 1);
    assert!(frame.replaced.is_empty());
    // A spare takes a node's place: the header says which replaced which.
    e.record(
        "replace",
        json!({"attempt": 2, "node": "gpu-a02", "by": "gpu-a03"}),
    );
    let replaced = reader.frame(NOW);
    assert_eq!(
        replaced.replaced,
        [("gpu-a02".to_owned(), "gpu-a03".to_owned())]
    );
    assert!(
        crate::top::view::header(&replaced)
            .contains(&"replaced: gpu-a02 by spare gpu-a03".to_owned()),
        "{:?}",
        crate::top::view::header(&replaced)
    );
    // The rendezvous before it names the ranks: they wait for their first line.
    assert_eq!(state_of(&frame, 0), State::Waiting);
    assert_eq!(frame.rows.len(), 3);

    // Pinned to the first attempt: its ranks that did not fail were stopped with it.
    reader.pin(Some(1));
    let frame = reader.frame(NOW);
    assert_eq!(frame.attempt, Some(1));
    assert_eq!(state_of(&frame, 0), State::Stopped);
    assert_eq!(state_of(&frame, 1), State::Failed(7));
    assert_eq!(switch(&frame.attempts, Some(1), Action::NextAttempt), None);
    assert_eq!(
        switch(&frame.attempts, Some(2), Action::PrevAttempt),
        Some(1)
    );
    assert_eq!(
        switch(&frame.attempts, Some(1), Action::PrevAttempt),
        Some(1)
    );
}

#[test]
fn refreshes_read_only_what_was_appended_and_agree_with_a_full_read() {
    let e = Exp::new();
    e.start(1, 1);
    let dir = e.attempt_dir(1);
    let path = dir.metrics(0);
    let mut reader = e.reader(None);
    assert_eq!(reader.frame(NOW).rows[0].state, State::Waiting);
    let mut file = std::fs::File::create(&path).expect("metrics");
    let pieces = [
        "# herd metrics 1\n@\tloss\tsamples_per_s\n",
        &format!("{}\t1\t2.5\t100\n{}\t2\t2.4\t9", NOW - 3000, NOW - 2000),
        "0\n",
        &format!(
            "@\tloss\tval_loss\n{}\t3\t2.25\t-\n{}\t4",
            NOW - 1500,
            NOW - 1000
        ),
        "\t2.125\t3.5\n",
    ];
    for piece in pieces {
        file.write_all(piece.as_bytes()).expect("append");
        let frame = reader.frame(NOW);
        let full = store::read_rank(dir.path(), 0).expect("full read");
        let row = &frame.rows[0];
        let last_step = full.step.iter().rev().find_map(|s| *s);
        assert_eq!(row.step, last_step, "after {piece:?}");
        assert_eq!(
            row.loss,
            full.last("loss").map(|(_, v)| v),
            "after {piece:?}"
        );
        let rates: Vec<f64> = full
            .column("samples_per_s")
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .collect();
        let mid = (!rates.is_empty()).then(|| {
            let mut r = rates.clone();
            r.sort_by(f64::total_cmp);
            if r.len() % 2 == 1 {
                r[r.len() / 2]
            } else {
                (r[r.len() / 2 - 1] + r[r.len() / 2]) / 2.0
            }
        });
        assert_eq!(row.rate, mid, "after {piece:?}");
    }
    let row = &reader.frame(NOW).rows[0];
    assert_eq!(row.step, Some(4));
    assert_eq!(row.loss, Some(2.125));
    assert_eq!(row.rate, Some(95.0));
    // No output lines, but readings: their time counts as output.
    assert_eq!(row.since, Some(Duration::from_secs(1)));
    assert_eq!(row.state, State::Running);
}

fn screen(frame: &Frame, ui: &mut Ui, w: u16, h: u16) -> Vec<String> {
    let mut term = ratatui::Terminal::new(TestBackend::new(w, h)).expect("terminal");
    term.draw(|f| view::draw(f, frame, ui)).expect("draw");
    let buf = term.backend().buffer().clone();
    (0..h)
        .map(|y| {
            (0..w)
                .map(|x| buf[(x, y)].symbol().to_owned())
                .collect::<String>()
        })
        .collect()
}

#[test]
fn an_80_by_24_screen_shows_every_rank_and_the_silent_one_in_words() {
    let e = Exp::new();
    e.start(1, 3);
    e.readings(1, 0, &[100.0; 3], NOW - 1000);
    e.readings(1, 1, &[100.0; 3], NOW - 95_000);
    e.readings(1, 2, &[100.0; 3], NOW - 2000);
    let frame = e.reader(Some(30)).frame(NOW);
    let mut ui = Ui::default();
    let lines = screen(&frame, &mut ui, 80, 24);
    let text = lines.join("\n");
    assert!(text.contains("herd top  train  job 4242"), "{text}");
    assert!(text.contains("world 3  nodes 2"), "{text}");
    assert!(text.contains("SILENT 95s"), "{text}");
    for r in 0..3 {
        let row = lines
            .iter()
            .find(|l| {
                l.trim_start_matches("> ")
                    .trim_start()
                    .starts_with(&format!("{r} "))
            })
            .unwrap_or_else(|| panic!("no row for rank {r}:\n{text}"));
        assert!(row.contains("gpu-a0"), "{row}");
    }
    let silent = lines
        .iter()
        .find(|l| l.contains("SILENT"))
        .expect("silent row");
    assert!(
        silent.contains("1 ") && silent.contains("1m35s"),
        "{silent}"
    );
    assert!(lines[23].contains("q quit"), "{text}");
    // The silent state is red.
    let mut term = ratatui::Terminal::new(TestBackend::new(80, 24)).expect("terminal");
    term.draw(|f| view::draw(f, &frame, &mut ui)).expect("draw");
    let buf = term.backend().buffer();
    let y = lines
        .iter()
        .position(|l| l.contains("SILENT"))
        .expect("row") as u16;
    let x = lines[y as usize].find("SILENT").expect("col") as u16;
    assert_eq!(buf[(x, y)].fg, ratatui::style::Color::Red);
}

#[test]
fn many_ranks_scroll_with_the_selection_and_fit_80_columns() {
    let e = Exp::new();
    e.start(1, 64);
    for r in 0..64 {
        e.readings(1, r, &[1000.0 + f64::from(r)], NOW - 1000);
    }
    let frame = e.reader(None).frame(NOW);
    assert_eq!(frame.rows.len(), 64);
    let mut ui = Ui::default();
    let first = screen(&frame, &mut ui, 80, 24).join("\n");
    assert!(
        first.contains("gpu-a01") && !first.contains("gpu-a02"),
        "{first}"
    );
    for _ in 0..63 {
        key(&mut ui, &frame, KeyEvent::from(KeyCode::Down));
    }
    assert_eq!(view::selected_rank(&frame, &ui), Some(63));
    let lines = screen(&frame, &mut ui, 80, 24);
    let selected = lines
        .iter()
        .find(|l| l.starts_with("> "))
        .expect("selected row shown");
    assert!(
        selected.contains("63 ") && selected.contains("gpu-a02"),
        "{selected}"
    );
    // Every cell fits: the rightmost column (LAST) is on screen.
    assert!(selected.trim_end().ends_with("1s"), "{selected}");
}

#[test]
fn sorting_orders_by_rate_loss_and_silence() {
    let e = Exp::new();
    e.start(1, 3);
    e.readings(1, 0, &[300.0], NOW - 1000);
    e.readings(1, 1, &[100.0], NOW - 9000);
    e.readings(1, 2, &[200.0], NOW - 5000);
    let mut frame = e.reader(None).frame(NOW);
    let order = |f: &Frame| f.rows.iter().map(|r| r.rank).collect::<Vec<_>>();
    sort_rows(&mut frame.rows, Sort::Rate);
    assert_eq!(order(&frame), [1, 2, 0], "slowest first");
    sort_rows(&mut frame.rows, Sort::Silence);
    assert_eq!(order(&frame), [1, 2, 0], "longest silent first");
    sort_rows(&mut frame.rows, Sort::Loss);
    assert_eq!(order(&frame), [0, 1, 2], "highest loss first");
    sort_rows(&mut frame.rows, Sort::Rank);
    assert_eq!(order(&frame), [0, 1, 2]);
    let mut ui = Ui::default();
    for want in [Sort::Rate, Sort::Loss, Sort::Silence, Sort::Rank] {
        assert_eq!(
            key(&mut ui, &frame, KeyEvent::from(KeyCode::Char('s'))),
            Action::None
        );
        assert_eq!(ui.sort, want);
    }
    assert_eq!(
        key(&mut ui, &frame, KeyEvent::from(KeyCode::Char('q'))),
        Action::Quit
    );
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(key(&mut ui, &frame, ctrl_c), Action::Quit);
    // Enter opens the selected rank's log, Esc goes back to the table, then quits.
    key(&mut ui, &frame, KeyEvent::from(KeyCode::Down));
    key(&mut ui, &frame, KeyEvent::from(KeyCode::Enter));
    assert_eq!(ui.pane.as_ref().map(|p| p.0), Some(1));
    assert_eq!(
        key(&mut ui, &frame, KeyEvent::from(KeyCode::Esc)),
        Action::None
    );
    assert!(ui.pane.is_none());
    assert_eq!(
        key(&mut ui, &frame, KeyEvent::from(KeyCode::Esc)),
        Action::Quit
    );
}

#[test]
fn the_log_pane_shows_the_last_lines_of_both_streams_in_time_order() {
    let e = Exp::new();
    e.start(1, 1);
    let dir = e.attempt_dir(1);
    e.line(1, 0, "first", NOW - 3000);
    let mut err = std::fs::File::create(dir.log(0, Stream::Err)).expect("err");
    err.write_all(b"warning: slow\n").expect("write");
    let mut times = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.times(0))
        .expect("times");
    times
        .write_all(exp_logs::format_mark(Stream::Err, 0, NOW - 2000).as_bytes())
        .expect("mark");
    e.line(1, 0, "second", NOW - 1000);
    let lines = model::log_tail(&dir, 0, 10);
    assert_eq!(lines, ["first", "err| warning: slow", "second"]);
    assert_eq!(
        model::log_tail(&dir, 0, 2),
        ["err| warning: slow", "second"]
    );
    let mut ui = Ui {
        pane: Some((0, lines)),
        ..Ui::default()
    };
    let frame = e.reader(None).frame(NOW);
    let text = screen(&frame, &mut ui, 80, 24).join("\n");
    assert!(
        text.contains("rank 0: last lines") && text.contains("err| warning: slow"),
        "{text}"
    );
    assert!(text.contains("Esc/l back"), "{text}");
}

fn once(e: &Exp, extra: &[&str]) -> Result<String, CliError> {
    use clap::Parser;
    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        top: TopArgs,
    }
    let root = e.root.to_str().expect("utf-8 root");
    let mut argv = vec!["top", "train", "--exp-root", root, "--once"];
    argv.extend(extra);
    let args = Cmd::try_parse_from(argv).expect("parses").top;
    let mut out = Vec::new();
    run(args, &mut out)?;
    Ok(String::from_utf8(out).expect("utf-8"))
}

#[test]
fn once_prints_one_frame_as_text() {
    let e = Exp::new();
    let text = once(&e, &[]).expect("once");
    assert!(text.contains("no attempt yet"), "{text}");
    assert!(text.contains("the job has not started yet"), "{text}");

    e.start(1, 3);
    e.readings(1, 0, &[100.0, 100.0], timeline_now() - 1000);
    e.readings(1, 1, &[100.0, 100.0], timeline_now() - 1000);
    e.readings(1, 2, &[100.0, 100.0], timeline_now() - 200_000);
    let text = once(&e, &["--silent-after", "100"]).expect("once");
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("herd top  train  job 4242"), "{text}");
    assert!(lines.iter().all(|l| l.chars().count() <= 80), "{text}");
    let heading = lines
        .iter()
        .find(|l| l.starts_with("RANK"))
        .expect("heading");
    assert!(heading.contains("SAMPLES/S"), "{heading}");
    let silent = lines
        .iter()
        .find(|l| l.starts_with("2 "))
        .expect("rank 2's row");
    assert!(silent.contains("SILENT 20"), "{silent}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("0 ") && l.contains("running")),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "no escape codes: {text:?}");

    let err = once(&e, &["--attempt", "5"]).expect_err("no attempt 5");
    assert!(err.to_string().contains("its attempts: 1"), "{err}");
}

fn timeline_now() -> u64 {
    herd_exp::timeline::now().1
}

#[test]
fn an_unknown_experiment_lists_the_ones_there() {
    let e = Exp::new();
    use clap::Parser;
    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        top: TopArgs,
    }
    let root = e.root.to_str().expect("utf-8 root");
    let args = Cmd::try_parse_from(["top", "trian", "--exp-root", root, "--once"])
        .expect("parses")
        .top;
    let err = run(args, &mut Vec::new()).expect_err("unknown");
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(
        err.to_string().contains("experiments there: train"),
        "{err}"
    );
}

#[test]
fn the_header_says_the_goodput_so_far() {
    let e = Exp::new();
    // The timeline written by hand, at "now" in these tests.
    let lines: String = [
        (NOW - 30_000, "started", json!({"job_id": "4242"})),
        (NOW - 29_000, "attempt_started", json!({"attempt": 0})),
    ]
    .iter()
    .map(|(ms, event, fields)| {
        let mut m = fields.as_object().cloned().expect("object");
        m.insert("unix_ms".into(), json!(ms));
        m.insert("event".into(), json!(event));
        format!("{}\n", serde_json::Value::Object(m))
    })
    .collect();
    std::fs::write(e.dir.join("timeline.jsonl"), lines).expect("timeline");
    // Ten readings, one a second, the last a second ago: 9 s of steps in 30 s.
    e.readings(0, 0, &[100.0; 10], NOW - 1000);
    let mut reader = e.reader(None);
    let frame = reader.frame(NOW);
    assert_eq!(frame.goodput.as_deref(), Some("goodput 30.0 % so far"));
    assert!(
        view::header(&frame)[1].ends_with("  goodput 30.0 % so far"),
        "{:?}",
        view::header(&frame)
    );
}

/// A sample of GPU `gpu` serving `ranks` at `t`: `util` %, `mem` MiB of 80 GiB, `power` W,
/// clock event reasons `reasons` (NVML's mask).
fn gpu_sample(gpu: u32, ranks: &[u32], util: f64, mem: f64, power: f64, reasons: u64) -> Sample {
    Sample {
        t: NOW - 2000,
        gpu,
        uuid: format!("GPU-{gpu:08}"),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        ranks: ranks.to_vec(),
        util: Some(util),
        mem_used: Some(mem),
        mem_total: Some(81_559.0),
        power: Some(power),
        power_limit: Some(700.0),
        temp: Some(60.0),
        sm_clock: Some(1755.0),
        reasons: herd_exp::gpus::reasons(reasons),
        ..Sample::default()
    }
}

/// 5 ranks on 2 nodes (0–2 on gpu-a01, 3–4 on gpu-a02): rank 2 has no GPU sample, rank 3's
/// GPU is at its power cap, gpu-a02's GPU 2 serves no rank and idles.
fn gpu_job(e: &Exp) {
    e.start(1, 5);
    for r in 0..5 {
        e.readings(1, r, &[100.0, 100.0], NOW - 1000);
    }
    let dir = e.attempt_dir(1);
    herd_exp::gpus::append(
        &dir.gpus(0),
        &[
            gpu_sample(0, &[0], 97.0, 61_234.0, 698.12, 0),
            gpu_sample(1, &[1], 95.0, 60_000.0, 690.0, 0),
        ],
    )
    .expect("node 0");
    herd_exp::gpus::append(
        &dir.gpus(1),
        &[
            gpu_sample(0, &[3], 96.0, 61_000.0, 700.0, 0x4),
            gpu_sample(1, &[4], 94.0, 61_000.0, 650.0, 0),
            gpu_sample(2, &[], 0.0, 4.0, 70.0, 0x1),
        ],
    )
    .expect("node 1");
}

fn row_of(frame: &Frame, rank: u32) -> &model::Row {
    frame
        .rows
        .iter()
        .find(|r| r.rank == rank)
        .unwrap_or_else(|| panic!("no row for rank {rank}"))
}

#[test]
fn each_ranks_row_has_its_gpu_and_the_throttled_one_is_flagged() {
    let e = Exp::new();
    gpu_job(&e);
    let frame = e.reader(None).frame(NOW);
    assert_eq!(frame.gpus.len(), 5, "{:?}", frame.gpus);
    let g0 = row_of(&frame, 0).gpu.as_ref().expect("rank 0's GPU");
    assert_eq!((g0.node, g0.sample.gpu), (0, 0));
    assert_eq!(g0.host.as_deref(), Some("gpu-a01"));
    assert_eq!(g0.cell(), "97% 59.8G 698W");
    assert!(row_of(&frame, 2).gpu.is_none(), "rank 2 has no GPU sample");
    let g3 = row_of(&frame, 3).gpu.as_ref().expect("rank 3's GPU");
    assert_eq!(
        g3.flags,
        vec![Flag::Throttled {
            by: vec!["sw_power_cap".into()]
        }]
    );
    assert_eq!(g3.cell(), "THROTTLED");
    // The GPU no rank claims is judged with the others, and named in the header.
    let idle = frame.gpus.iter().find(|g| g.sample.ranks.is_empty());
    assert_eq!(
        idle.map(|g| g.flags.iter().map(Flag::word).collect::<Vec<_>>()),
        Some(vec!["IDLE"])
    );

    let text = view::text(&frame);
    let lines: Vec<&str> = text.lines().collect();
    let heading = lines
        .iter()
        .find(|l| l.starts_with("RANK"))
        .expect("heading");
    assert!(heading.ends_with(" GPU"), "{heading}");
    let row = |r: u32| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("{r} ")))
            .unwrap_or_else(|| panic!("no line for rank {r}:\n{text}"))
    };
    assert!(row(0).ends_with(" 97% 59.8G 698W"), "{}", row(0));
    assert!(row(1).ends_with(" 95% 58.6G 690W"), "{}", row(1));
    assert!(row(2).ends_with(" -"), "{}", row(2));
    assert!(row(3).ends_with(" THROTTLED"), "{}", row(3));
    // The GPU's figures line up under the heading's right edge.
    assert_eq!(row(0).chars().count(), heading.chars().count(), "{text}");
    assert!(lines.iter().all(|l| l.chars().count() <= 100), "{text}");
    assert!(
        text.contains("GPUs: 5  mean util 76%  flagged: rank 3 THROTTLED, gpu-a02 GPU 2 IDLE"),
        "{text}"
    );
}

#[test]
fn a_job_without_gpu_samples_has_no_gpu_column() {
    let e = Exp::new();
    e.start(1, 2);
    e.readings(1, 0, &[100.0], NOW - 1000);
    e.readings(1, 1, &[100.0], NOW - 1000);
    let frame = e.reader(None).frame(NOW);
    assert!(frame.gpus.is_empty() && frame.rows.iter().all(|r| r.gpu.is_none()));
    let text = view::text(&frame);
    assert!(!text.contains("GPU"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
}

#[test]
fn gpu_refreshes_read_only_the_appended_lines_and_the_newest_sample_wins() {
    let e = Exp::new();
    gpu_job(&e);
    let path = e.attempt_dir(1).gpus(0);
    let mut reader = e.reader(None);
    let frame = reader.frame(NOW);
    assert_eq!(
        row_of(&frame, 0).gpu.as_ref().map(|g| g.sample.util),
        Some(Some(97.0))
    );
    // The line already read is changed in place: a refresh that read the file again would
    // see 13 %; one that reads what was appended never does.
    let old = std::fs::read_to_string(&path).expect("samples");
    let changed = old.replacen("\"util\":97.0", "\"util\":13.0", 1);
    assert_ne!(old, changed);
    assert_eq!(old.len(), changed.len());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open")
        .write_all(changed.as_bytes())
        .expect("rewrite");
    assert_eq!(
        herd_exp::gpus::read(&path).expect("read")[0].util,
        Some(13.0)
    );
    // A newer sample of GPU 1, and one of GPU 0 older than the one shown.
    let mut newer = gpu_sample(1, &[1], 50.0, 1024.0, 300.0, 0);
    newer.t = NOW - 1000;
    let mut older = gpu_sample(0, &[0], 11.0, 1024.0, 100.0, 0);
    older.t = NOW - 5000;
    herd_exp::gpus::append(&path, &[newer, older]).expect("append");
    let frame = reader.frame(NOW);
    let util = |f: &Frame, r: u32| row_of(f, r).gpu.as_ref().and_then(|g| g.sample.util);
    assert_eq!(
        util(&frame, 0),
        Some(97.0),
        "neither re-read nor replaced by older"
    );
    assert_eq!(util(&frame, 1), Some(50.0), "the newest sample wins");
    assert_eq!(
        row_of(&frame, 1).gpu.as_ref().map(Gpu::cell).as_deref(),
        Some("50% 1.0G 300W")
    );
    // Nothing new: the same frame.
    assert_eq!(reader.frame(NOW).gpus, frame.gpus);
}

#[test]
fn a_wide_screen_shows_the_gpu_column_and_a_narrow_one_the_flags_in_the_header() {
    let e = Exp::new();
    gpu_job(&e);
    let frame = e.reader(None).frame(NOW);
    let mut ui = Ui::default();
    let lines = screen(&frame, &mut ui, 100, 24);
    let text = lines.join("\n");
    let heading = lines.iter().find(|l| l.contains("RANK")).expect("heading");
    assert!(heading.trim_end().ends_with("GPU"), "{text}");
    let y = lines
        .iter()
        .position(|l| l.trim_end().ends_with("THROTTLED"))
        .unwrap_or_else(|| panic!("no THROTTLED row:\n{text}"));
    assert!(
        lines[y]
            .trim_start_matches("> ")
            .trim_start()
            .starts_with("3 "),
        "{}",
        lines[y]
    );
    assert!(
        lines
            .iter()
            .any(|l| l.trim_end().ends_with("97% 59.8G 698W")),
        "{text}"
    );
    // The flag is highlighted as a warning.
    let mut term = ratatui::Terminal::new(TestBackend::new(100, 24)).expect("terminal");
    term.draw(|f| view::draw(f, &frame, &mut ui)).expect("draw");
    let x = lines[y].find("THROTTLED").expect("col") as u16;
    assert_eq!(
        term.backend().buffer()[(x, y as u16)].fg,
        ratatui::style::Color::Yellow
    );

    let narrow = screen(&frame, &mut ui, 80, 24).join("\n");
    assert!(!narrow.contains("97% 59.8G"), "{narrow}");
    assert!(narrow.contains("flagged: rank 3 THROTTLED"), "{narrow}");
}

#[test]
fn once_shows_the_gpu_column_and_the_flag() {
    let e = Exp::new();
    gpu_job(&e);
    let text = once(&e, &[]).expect("once");
    let heading = text
        .lines()
        .find(|l| l.starts_with("RANK"))
        .expect("heading");
    assert!(heading.ends_with("GPU"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("3 ") && l.ends_with("THROTTLED")),
        "{text}"
    );
}
