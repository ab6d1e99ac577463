use super::*;
use crate::test_support::Exp;
use clap::Parser;
use herd_exp::failure::{Exit, FailureReport};
use herd_exp::logs::Stream;
use serde_json::json;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Parser)]
struct Cmd {
    #[command(flatten)]
    logs: LogsArgs,
}

impl Exp {
    fn event(&self, fields: serde_json::Value) {
        let mut fields = fields;
        let name = fields
            .as_object_mut()
            .and_then(|o| o.remove("event"))
            .and_then(|e| e.as_str().map(str::to_owned))
            .expect("event name");
        let event = crate::test_support::event(&name, fields);
        herd_exp::timeline::append(&self.dir, event).expect("event");
    }

    /// Appends `lines` to rank `rank`'s `stream` of attempt `k`, each with a mark at its
    /// time (`None`: no mark).
    fn write(&self, k: u32, rank: u32, stream: Stream, lines: &[(&[u8], Option<u64>)]) {
        use std::io::Write as _;
        let d = self.attempt_dir(k);
        let open = |p: PathBuf| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .expect("open")
        };
        let mut log = open(d.log(rank, stream));
        let mut times = open(d.times(rank));
        let mut offset = log.metadata().expect("len").len();
        for (bytes, ms) in lines {
            if let Some(ms) = ms {
                times
                    .write_all(exp_logs::format_mark(stream, offset, *ms).as_bytes())
                    .expect("mark");
            }
            log.write_all(bytes).expect("line");
            offset += bytes.len() as u64;
        }
    }

    fn args(&self, extra: &[&str]) -> LogsArgs {
        let root = self.root.to_str().expect("utf-8");
        let mut argv = vec!["logs", "train", "--exp-root", root];
        argv.extend(extra);
        Cmd::try_parse_from(argv).expect("parses").logs
    }

    fn logs(&self, extra: &[&str]) -> (Result<ExitStatus, CliError>, String) {
        let mut out = Vec::new();
        let mut done = || None;
        let r = run_with(&self.args(extra), &mut out, &mut done, quick());
        (r, String::from_utf8_lossy(&out).into_owned())
    }

    fn ok(&self, extra: &[&str]) -> String {
        let (r, out) = self.logs(extra);
        assert_eq!(r.expect("runs"), ExitStatus::Success, "{extra:?}: {out}");
        out
    }

    fn usage(&self, extra: &[&str]) -> String {
        let (r, out) = self.logs(extra);
        let e = r.expect_err("a usage error");
        assert_eq!(e.exit_status(), ExitStatus::Usage, "{e}");
        assert!(out.is_empty(), "{out}");
        e.to_string()
    }
}

fn quick() -> Polling {
    Polling {
        files: Duration::from_millis(10),
        timeline: Duration::from_millis(20),
        done: Duration::from_millis(50),
    }
}

/// Two nodes, one rank each; attempt 0 as in a real run.
fn two_ranks() -> Exp {
    let e = Exp::new();
    e.event(json!({"event": "queued", "submission": 1, "job_id": "4242"}));
    e.event(json!({"event": "started", "job_id": 4242, "requeue": 0}));
    e.event(
        json!({"event": "rendezvous", "world_size": 2, "master_addr": "10.0.0.1",
        "nodes": [{"node": 0, "host": "gpu-a01", "ranks": [0]},
                  {"node": 1, "host": "gpu-a02", "ranks": [1]}]}),
    );
    e.event(json!({"event": "attempt_started", "attempt": 0, "restarts": 0}));
    e.write(
        0,
        0,
        Stream::Out,
        &[
            (b"a1\n", Some(1000)),
            (b"a2\n", Some(3000)),
            (b"a3\n", None),
        ],
    );
    e.write(0, 0, Stream::Err, &[(b"warn a\n", Some(2500))]);
    e.write(
        0,
        1,
        Stream::Out,
        &[(b"b1\n", Some(2000)), (b"b2\n", Some(4000))],
    );
    e.write(0, 1, Stream::Err, &[]);
    e
}

#[test]
fn merges_ranks_and_streams_in_time_order_with_labels() {
    let e = two_ranks();
    assert_eq!(
        e.ok(&[]),
        "0: a1\n1: b1\n0: warn a\n0: a2\n0: a3\n1: b2\n",
        "b1 (t=2000) comes between a1 (1000) and a2 (3000)"
    );
    assert_eq!(e.ok(&["--rank", "1"]), "b1\nb2\n", "one rank: raw");
    assert_eq!(e.ok(&["--rank", "1,0", "--stderr"]), "0: warn a\n");
    assert_eq!(
        e.ok(&["--rank", "0", "--rank", "1", "--stdout"]),
        "0: a1\n1: b1\n0: a2\n0: a3\n1: b2\n"
    );
    assert_eq!(e.ok(&["--stdout", "--tail", "2"]), "0: a3\n1: b2\n");
    let err = e.usage(&["--rank", "7"]);
    assert!(
        err.contains("no rank 7 in attempt 0 of train (ranks in attempt 0: 0-1)"),
        "{err}"
    );
}

#[test]
fn node_picks_the_ranks_of_the_rendezvous() {
    let e = two_ranks();
    assert_eq!(e.ok(&["--node", "1"]), "1: b1\n1: b2\n");
    assert_eq!(
        e.ok(&["--node", "gpu-a01", "--stdout"]),
        "0: a1\n0: a2\n0: a3\n"
    );
    assert_eq!(
        e.ok(&["--node", "gpu-a02", "--rank", "0", "--grep", "2$"]),
        "0: a2\n1: b2\n"
    );
    let err = e.usage(&["--node", "gpu-b07"]);
    assert!(
        err.contains(
            "--node gpu-b07: no such node in attempt 0 of train (nodes: 0 (gpu-a01), 1 (gpu-a02))"
        ),
        "{err}"
    );

    // An older timeline: a rendezvous without nodes.
    let old = Exp::new();
    old.event(json!({"event": "rendezvous", "world_size": 1}));
    old.event(json!({"event": "attempt_started", "attempt": 0}));
    old.write(0, 0, Stream::Out, &[(b"x\n", None)]);
    let err = old.usage(&["--node", "0"]);
    assert!(
        err.contains("does not say which node ran which rank"),
        "{err}"
    );
}

#[test]
fn attempts_one_or_all_with_markers() {
    let e = two_ranks();
    e.event(json!({"event": "restart", "attempt": 1}));
    e.event(json!({"event": "attempt_started", "attempt": 1, "restarts": 1}));
    e.write(1, 0, Stream::Out, &[(b"again a\n", Some(9000))]);
    e.write(1, 1, Stream::Out, &[(b"again b\n", Some(8000))]);
    e.event(json!({"event": "requeue", "attempt": 1, "cause": "time_limit"}));
    e.event(json!({"event": "started", "job_id": 4242, "requeue": 1}));
    e.event(json!({"event": "rendezvous", "world_size": 1,
        "nodes": [{"node": 0, "host": "gpu-a02", "ranks": [0]}]}));
    e.event(json!({"event": "attempt_started", "attempt": 2, "restarts": 0}));
    e.write(2, 0, Stream::Out, &[(b"third\n", Some(20000))]);
    assert_eq!(e.ok(&[]), "0: third\n", "the latest attempt");
    assert_eq!(e.ok(&["--attempt", "1"]), "1: again b\n0: again a\n");
    assert_eq!(
        e.ok(&["--all-attempts", "--stdout", "--grep", "a|third"]),
        "── attempt 0 (job 4242) ──\n0: a1\n0: a2\n0: a3\n\
         ── attempt 1 (restart 1, job 4242) ──\n1: again b\n0: again a\n\
         ── attempt 2 (requeued after time limit, job 4242) ──\n0: third\n"
    );
    // Node 1 of attempt 0 is gpu-a02, which is node 0 in attempt 2.
    assert_eq!(
        e.ok(&["--all-attempts", "--node", "gpu-a02"]),
        "── attempt 0 (job 4242) ──\n1: b1\n1: b2\n── attempt 1 (restart 1, job 4242) ──\n1: again b\n── attempt 2 (requeued after time limit, job 4242) ──\n0: third\n"
    );
    assert_eq!(
        e.ok(&["--all-attempts", "--tail", "2"]),
        "── attempt 1 (restart 1, job 4242) ──\n0: again a\n── attempt 2 (requeued after time limit, job 4242) ──\n0: third\n"
    );
    let err = e.usage(&["--attempt", "5"]);
    assert!(
        err.contains("train has no attempt 5 (its attempts: 0-2)"),
        "{err}"
    );
    let parse = Cmd::try_parse_from(["logs", "x", "--attempt", "1", "--all-attempts"]);
    assert!(parse.is_err(), "--attempt and --all-attempts conflict");
}

#[test]
fn grep_since_and_bytes() {
    let e = two_ranks();
    assert_eq!(e.ok(&["--grep", "^[ab]2"]), "0: a2\n1: b2\n");
    let err = e.usage(&["--grep", "a("]);
    assert!(
        err.starts_with("--grep \"a(\": not a valid regular expression"),
        "{err}"
    );
    assert_eq!(
        e.ok(&["--since", "1970-01-01T00:00:02.500Z"]),
        "0: warn a\n0: a2\n0: a3\n1: b2\n"
    );
    let err = e.usage(&["--since", "yesterday"]);
    assert!(err.contains("--since \"yesterday\""), "{err}");
    assert_eq!(parse_since("30s", 100_000), Some(70_000));
    assert_eq!(parse_since("10m", 3_600_000), Some(3_000_000));
    assert_eq!(parse_since("2h", 86_400_000), Some(79_200_000));
    assert_eq!(parse_since("1d", 86_400_000), Some(0));
    assert_eq!(parse_since("5x", 1), None);
    assert_eq!(parse_since("m", 1), None);
    // Now-relative: marks of just now are kept, old ones not.
    let now = herd_exp::timeline::now().1;
    e.write(0, 1, Stream::Out, &[(b"\xfe\xffnew\n", Some(now))]);
    let mut out = Vec::new();
    let mut done = || None;
    run_with(&e.args(&["--since", "1h"]), &mut out, &mut done, quick()).expect("runs");
    assert_eq!(out, b"1: \xfe\xffnew\n", "bytes pass through");
}

fn report(e: &Exp, attempt: u32) -> FailureReport {
    let r = FailureReport::worker(
        attempt,
        (1, 0, 1),
        "gpu-a02",
        Exit::Signal("SIGSEGV".into()),
        None,
        vec!["Segmentation fault".into()],
    );
    let text = serde_json::to_string_pretty(&r).expect("json");
    std::fs::write(e.attempt_dir(attempt).failure_report(), &text).expect("write");
    std::fs::write(e.dir.join("logs/failure.json"), &text).expect("write");
    r
}

#[test]
fn failed_prints_the_report_and_the_failing_ranks_tail() {
    let e = two_ranks();
    let (r, out) = e.logs(&["--failed"]);
    assert_eq!(r.expect("runs"), ExitStatus::Failure, "no report: {out}");
    assert!(out.is_empty());
    let r = report(&e, 0);
    let out = e.ok(&["--failed"]);
    assert_eq!(
        out,
        format!(
            "{}herd: last 2 lines of rank 1 (stdout and stderr, logs/attempt-0):\n  | b1\n  | b2\n",
            r.human()
        )
    );
    assert!(out.starts_with(
        "herd: job failed (attempt 0): rank 1 (local rank 0 on gpu-a02) killed by SIGSEGV"
    ));
    let out = e.ok(&["--failed", "--tail", "1"]);
    assert!(
        out.ends_with(
            "herd: last 1 lines of rank 1 (stdout and stderr, logs/attempt-0):\n  | b2\n"
        ),
        "{out}"
    );
    // A later attempt without a report.
    e.write(1, 0, Stream::Out, &[(b"ok\n", Some(1))]);
    let (r, out) = e.logs(&["--failed"]);
    assert_eq!(r.expect("runs"), ExitStatus::Failure);
    assert!(out.is_empty());
    assert!(e
        .ok(&["--failed", "--attempt", "0"])
        .contains("rank 1 (local rank 0 on gpu-a02)"));
}

#[test]
fn failed_prints_the_likely_cause_when_herd_knows_the_failure() {
    let e = two_ranks();
    let r = FailureReport::worker(
        0,
        (1, 0, 1),
        "gpu-a02",
        Exit::Code(1),
        None,
        vec!["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.".into()],
    );
    let text = serde_json::to_string_pretty(&r).expect("json");
    std::fs::write(e.attempt_dir(0).failure_report(), &text).expect("write");
    let out = e.ok(&["--failed"]);
    let second = out.lines().nth(1).unwrap_or_default();
    assert!(
        second.starts_with(
            "herd: likely cause: the GPU ran out of memory — fix: use a smaller per-GPU batch"
        ),
        "{out}"
    );
}

#[test]
fn batch_output_of_the_submission() {
    let e = two_ranks();
    std::fs::write(
        e.dir.join("logs/4242.out"),
        "herd: leader on gpu-a01\nstep 1\n",
    )
    .expect("out");
    std::fs::write(e.dir.join("logs/4242.err"), "srun: error: x").expect("err");
    assert_eq!(
        e.ok(&["--batch"]),
        "── 4242.out ──\nherd: leader on gpu-a01\nstep 1\n── 4242.err ──\nsrun: error: x\n"
    );
    assert_eq!(e.ok(&["--batch", "--stdout", "--grep", "step"]), "step 1\n");
    let parse = Cmd::try_parse_from(["logs", "x", "--batch", "--rank", "1"]);
    assert!(parse.is_err(), "--batch has no ranks");

    // srun mode: no attempt folders, so the batch output is shown.
    let srun = Exp::new();
    std::fs::write(srun.dir.join("logs/4242.out"), "0: hello\n1: hello\n").expect("out");
    assert_eq!(srun.ok(&["--stdout"]), "0: hello\n1: hello\n");
    // A resume's job: --all-attempts shows every submission.
    let exp = herd_exp::Experiment::open(&srun.root, "train").expect("opens");
    let n = exp
        .add_submission(&herd_exp::Invocation::current("test"))
        .expect("resume");
    exp.record_job_id(n, "4250").expect("id");
    std::fs::write(srun.dir.join("logs/4250.out"), "again\n").expect("out");
    assert_eq!(srun.ok(&["--stdout"]), "again\n");
    assert_eq!(
        srun.ok(&["--stdout", "--all-attempts"]),
        "── submission 1 (job 4242) ──\n0: hello\n1: hello\n── submission 2 (job 4250) ──\nagain\n"
    );
}

#[test]
fn a_name_that_is_no_experiment_lists_what_is_there() {
    let e = two_ranks();
    let err = e.usage_named("trian");
    let root = e.root.display().to_string();
    assert_eq!(
        err,
        format!("no experiment named \"trian\" in {root} (experiments there: train; --exp-root DIR looks elsewhere)")
    );
    let empty = tempfile::tempdir().expect("tempdir");
    let args = Cmd::try_parse_from([
        "logs",
        "x",
        "--exp-root",
        empty.path().to_str().expect("utf-8"),
    ])
    .expect("parses")
    .logs;
    let err = run(args, &mut Vec::new()).expect_err("none");
    assert_eq!(err.exit_status(), ExitStatus::Usage);
    assert!(
        err.to_string().contains("there are no experiments there"),
        "{err}"
    );
    let err = e.usage_named("../x");
    assert!(!err.is_empty());
}

impl Exp {
    fn usage_named(&self, name: &str) -> String {
        let root = self.root.to_str().expect("utf-8");
        let args = Cmd::try_parse_from(["logs", name, "--exp-root", root])
            .expect("parses")
            .logs;
        let e = run(args, &mut Vec::new()).expect_err("not an experiment");
        assert_eq!(e.exit_status(), ExitStatus::Usage, "{e}");
        e.to_string()
    }
}

/// A `Write` the test reads while the follow writes.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("lock")).into_owned()
    }

    /// Waits (at most 20 s) until the output is `want`.
    fn wait_for(&self, want: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.text() != want {
            assert!(
                Instant::now() < deadline,
                "waited for {want:?}, have {:?}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn follow_prints_new_lines_and_attempts_and_ends_at_finished() {
    let e = two_ranks();
    let args = e.args(&["-f", "--stdout"]);
    let out = Shared::default();
    let mut writer = out.clone();
    let follower = std::thread::spawn(move || {
        let mut done = || None;
        run_with(&args, &mut writer, &mut done, quick()).map_err(|e| e.to_string())
    });
    out.wait_for("0: a1\n1: b1\n0: a2\n0: a3\n1: b2\n");
    // A partial line is held until its newline comes.
    e.write(0, 1, Stream::Out, &[(b"b3 start", Some(5000))]);
    e.write(0, 0, Stream::Out, &[(b"a4\n", Some(5100))]);
    let before = "0: a1\n1: b1\n0: a2\n0: a3\n1: b2\n0: a4\n";
    out.wait_for(before);
    e.write(0, 1, Stream::Out, &[(b", end\n", None)]);
    let before = format!("{before}1: b3 start, end\n");
    out.wait_for(&before);
    // A restart: a new attempt folder, followed from its first line.
    e.event(json!({"event": "restart", "attempt": 1}));
    e.write(1, 1, Stream::Out, &[(b"fresh b\n", Some(9000))]);
    let before = format!("{before}── attempt 1 (restart 1, job 4242) ──\n1: fresh b\n");
    out.wait_for(&before);
    e.event(json!({"event": "attempt_started", "attempt": 1, "restarts": 1}));
    // A rank whose files appear later is picked up.
    e.write(1, 0, Stream::Out, &[(b"fresh a\n", Some(9100))]);
    let before = format!("{before}0: fresh a\n");
    out.wait_for(&before);
    assert!(!follower.is_finished(), "the job is not over");
    e.event(json!({"event": "finished", "attempt": 1, "ok": true}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !follower.is_finished() {
        assert!(Instant::now() < deadline, "follow did not end at finished");
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = follower.join().expect("thread").expect("follow");
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(out.text(), before);
}

/// `-f` of attempt 0 that looks for new ranks once, at its start, and then not for an hour;
/// asks `done` every 10 ms (`left` set: the job left the queue). Returns once the first look
/// is behind it (`done` is asked only after it), so what the test writes next is seen only
/// by what `-f` does at an attempt's or the job's end.
fn follow_after_its_first_look(
    e: &Exp,
    left: Arc<std::sync::atomic::AtomicBool>,
) -> (Shared, std::thread::JoinHandle<Result<ExitStatus, String>>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let args = e.args(&["-f", "--stdout"]);
    let out = Shared::default();
    let mut writer = out.clone();
    let asked = Arc::new(AtomicBool::new(false));
    let asked_here = asked.clone();
    let follower = std::thread::spawn(move || {
        let mut done = || {
            asked_here.store(true, Ordering::SeqCst);
            left.load(Ordering::SeqCst).then_some(true)
        };
        let polling = Polling {
            files: Duration::from_millis(10),
            timeline: Duration::from_secs(3600),
            done: Duration::from_millis(10),
        };
        run_with(&args, &mut writer, &mut done, polling).map_err(|e| e.to_string())
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !asked.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "-f never asked whether the job is done"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (out, follower)
}

/// Ranks whose files appear just before the next attempt starts (a short first attempt:
/// one rank fails as soon as all have printed) are still printed for the old attempt before
/// `-f` moves on, though the periodic look for new ranks has not come round yet.
#[test]
fn follow_prints_ranks_that_appeared_just_before_the_next_attempt() {
    let e = Exp::new();
    e.event(json!({"event": "queued", "submission": 1, "job_id": "4242"}));
    e.event(json!({"event": "started", "job_id": 4242, "requeue": 0}));
    e.event(json!({"event": "attempt_started", "attempt": 0, "restarts": 0}));
    e.write(0, 0, Stream::Out, &[(b"a1\n", Some(1000))]);
    let (out, follower) = follow_after_its_first_look(&e, Arc::default());
    e.write(0, 1, Stream::Out, &[(b"b1\n", Some(2000))]);
    e.event(json!({"event": "restart", "attempt": 1}));
    e.event(json!({"event": "finished", "attempt": 1, "ok": true}));
    e.write(1, 0, Stream::Out, &[(b"fresh a\n", Some(9000))]);
    let status = follower.join().expect("thread").expect("follow");
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(
        out.text(),
        "0: a1\n1: b1\n── attempt 1 (restart 1, job 4242) ──\n0: fresh a\n"
    );
}

/// A rank whose files appear just before the job leaves the queue is printed before `-f`
/// ends, though the periodic look for new ranks has not come round yet.
#[test]
fn follow_prints_ranks_that_appeared_just_before_the_job_left_the_queue() {
    let e = Exp::new();
    e.event(json!({"event": "queued", "submission": 1, "job_id": "4242"}));
    e.event(json!({"event": "attempt_started", "attempt": 0, "restarts": 0}));
    e.write(0, 0, Stream::Out, &[(b"a1\n", Some(1000))]);
    let left = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (out, follower) = follow_after_its_first_look(&e, left.clone());
    e.write(0, 1, Stream::Out, &[(b"b1\n", Some(2000))]);
    left.store(true, std::sync::atomic::Ordering::SeqCst);
    let status = follower.join().expect("thread").expect("follow");
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(out.text(), "0: a1\n1: b1\n");
}

#[test]
fn follow_ends_failed_at_a_failed_finish_or_when_the_job_left_the_queue() {
    let e = two_ranks();
    e.event(json!({"event": "finished", "attempt": 0, "ok": false}));
    let mut out = Vec::new();
    let mut done = || None;
    let status = run_with(
        &e.args(&["-f", "--rank", "1"]),
        &mut out,
        &mut done,
        quick(),
    )
    .expect("follows");
    assert_eq!(status, ExitStatus::Failure);
    assert_eq!(String::from_utf8_lossy(&out), "b1\nb2\n");

    let e = two_ranks();
    let mut asked = 0;
    let mut done = || {
        asked += 1;
        (asked == 3).then_some(true)
    };
    let mut out = Vec::new();
    let status = run_with(
        &e.args(&["--follow", "--rank", "0", "--stderr"]),
        &mut out,
        &mut done,
        quick(),
    )
    .expect("follows");
    assert_eq!(
        status,
        ExitStatus::Success,
        "the scheduler says it completed"
    );
    assert_eq!(asked, 3);
    assert_eq!(String::from_utf8_lossy(&out), "warn a\n");
}

#[test]
fn follow_from_an_older_attempt_goes_on_to_the_newer_ones() {
    let e = two_ranks();
    e.event(json!({"event": "requeue", "attempt": 0, "cause": "preemption"}));
    e.event(json!({"event": "started", "job_id": 4242, "requeue": 1}));
    e.event(json!({"event": "attempt_started", "attempt": 1, "restarts": 0}));
    e.write(1, 0, Stream::Out, &[(b"resumed\n", Some(50_000))]);
    e.event(json!({"event": "finished", "attempt": 1, "ok": true}));
    let mut out = Vec::new();
    let mut done = || None;
    let status = run_with(
        &e.args(&["-f", "--attempt", "0", "--stdout", "--rank", "0"]),
        &mut out,
        &mut done,
        quick(),
    )
    .expect("follows");
    assert_eq!(status, ExitStatus::Success);
    assert_eq!(
        String::from_utf8_lossy(&out),
        "a1\na2\na3\n── attempt 1 (requeued after preemption, job 4242) ──\nresumed\n"
    );
}

#[test]
fn output_errors_are_output_errors() {
    struct Closed;
    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let e = two_ranks();
    let mut done = || None;
    let err = run_with(&e.args(&[]), &mut Closed, &mut done, quick()).expect_err("closed");
    assert!(
        matches!(err, CliError::Output(ref io) if io.kind() == std::io::ErrorKind::BrokenPipe),
        "{err:?}"
    );
}
