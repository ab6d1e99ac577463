//! The hang watchdog told from slow starts, with real agents (`herd run`, 2 simulated
//! nodes, the follower's progress reports included): silence before a rank's first progress
//! counts against `--start-timeout`, silence after it against `--hang-timeout`, fixed or
//! `auto` (each rank's own from its pace). And restarts that make no progress stop early.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `herd run --nodes 2 --nproc-per-node 1 ARGS -- sh -c SCRIPT` (the script reads `$RANK`),
/// and how long it took.
fn run(args: &[&str], script: &str) -> (Output, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    run_in(dir.path(), &[], args, script)
}

/// [`run`] in `dir` (logs in `dir/logs`) with `env` added.
fn run_in(dir: &Path, env: &[(&str, &str)], args: &[&str], script: &str) -> (Output, Duration) {
    let began = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--nodes", "2", "--nproc-per-node", "1", "--log-dir"])
        .arg(dir.join("logs"))
        .args(args)
        .args(["--", "sh", "-c", script])
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .expect("herd run");
    (out, began.elapsed())
}

/// The events named `name` in the experiment folder's timeline (`HERD_EXP_DIR` = `dir`).
fn events(dir: &Path, name: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("timeline.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == name)
        .collect()
}

/// `auto`'s rule in seconds instead of minutes, for these tests: floor 1 s, warm-up 5 s of
/// progress (and 10 gaps) with a 10 s timeout (`HERD_HANG_AUTO_FLOOR`, docs/launch.md).
const AUTO_IN_SECONDS: (&str, &str) = ("HERD_HANG_AUTO_FLOOR", "1");

/// Rank 1 is silent for its first 8 s (imports, dataset indexing), while rank 0, which
/// printed at once, waits for it as in `init_process_group`: with `--hang-timeout 3` both
/// are silent past 3 s, but rank 1 has not started, so it is no hang; the job trains and
/// ends 0. Before `--start-timeout` this was declared a hang.
#[test]
fn a_rank_silent_at_its_start_is_no_hang() {
    let script = r#"if [ "$RANK" = 0 ]; then echo ready; sleep 9; echo step 1; else sleep 8; for i in 1 2 3; do echo step $i; sleep 0.5; done; fi"#;
    let (out, _) = run(&["--hang-timeout", "3", "--start-timeout", "60"], script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("hang"), "{stderr}");
}

/// Both ranks train, then rank 1 is stuck and rank 0 blocks (as at the next collective):
/// a hang, caught about the hang timeout after the last line, naming rank 1's silence.
#[test]
fn a_rank_stuck_after_its_first_steps_is_a_hang() {
    let script = r#"echo step 1; echo step 2; if [ "$RANK" = 1 ]; then sleep 120; else sleep 0.5; echo step 3; sleep 120; fi"#;
    let (out, took) = run(&["--hang-timeout", "3", "--start-timeout", "60"], script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("hang: no rank made progress for 3 s; rank 1 ")
            && stderr.contains("went silent first"),
        "{stderr}"
    );
    // Exit 1 and the hang line show the watchdog ended it: at the workers' own end (their
    // 120 s sleep) the run would have exited 0 saying nothing of a hang.
    eprintln!("herd run ended {took:?} after it started (hang timeout 3 s)");
}

/// A start that never makes progress is caught by the start timeout, and says so.
#[test]
fn a_start_silent_past_the_start_timeout_is_a_hang() {
    let (out, _) = run(
        &["--hang-timeout", "2", "--start-timeout", "4"],
        "sleep 120",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        // Whichever rank started first has been silent longest.
        stderr.contains("hang: no rank made progress for 4 s; rank ")
            && stderr.contains("made no progress since it started (--start-timeout)"),
        "{stderr}"
    );
}

/// `--start-timeout 0`: a start's silence counts like any other, against the hang timeout
/// (30 s here); a start of 4 s is no hang.
#[test]
fn a_start_timeout_of_0_counts_the_start_against_the_hang_timeout() {
    let (out, _) = run(
        &["--hang-timeout", "30", "--start-timeout", "0"],
        "sleep 4; echo step 1",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("hang"), "{stderr}");
}

/// `--hang-timeout auto`: both ranks print a line every 0.5 s for 20 s (well past the
/// warm-up: 5 s and 10 gaps), then rank 1 is stuck and rank 0, one line later, blocks. Each
/// rank's timeout is 5 × its longest gap (the watchdog polls each second, so about 1 s:
/// 5 s), and the report and the `hang` event say so. The workers' own end (120 s) never
/// comes.
#[test]
fn auto_catches_a_rank_that_stops_after_a_steady_pace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exp = dir.path().to_str().expect("utf-8");
    let script = r#"i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo step $i; sleep 0.5; done
        if [ "$RANK" = 1 ]; then sleep 120; else echo step 41; sleep 120; fi"#;
    let env = [AUTO_IN_SECONDS, ("HERD_EXP_DIR", exp)];
    let (out, took) = run_in(dir.path(), &env, &["--hang-timeout", "auto"], script);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("hang: no rank made progress for ")
            && stderr.contains(" (auto: 5 × longest gap ")
            && stderr.contains("; rank 1 (pid ")
            && stderr.contains("went silent first"),
        "{stderr}"
    );
    // Exit 1 and the hang line show the watchdog, not the workers' own end (20 s of lines,
    // then a 120 s sleep), ended it.
    eprintln!("herd run ended {took:?} after it started");
    let hang = events(dir.path(), "hang");
    assert_eq!(hang.len(), 1, "{hang:?}");
    let how = hang[0]["timeout"].as_str().unwrap_or_default();
    assert!(how.starts_with("auto: 5 × longest gap "), "{hang:?}");
    // Derived from the pace (a gap of about a second, more when a poll came late), far
    // below the 120 s the workers would have slept.
    let timeout = hang[0]["timeout_s"].as_f64().unwrap_or_default();
    assert!((2.5..=30.0).contains(&timeout), "{hang:?}");
}

/// `--hang-timeout auto` with a regular long pause, as for a checkpoint: 8 lines 0.5 s apart,
/// then 7 s of silence, four times over. The first pause comes while the ranks warm up (10 s
/// then); from then on their longest gap is about 7 s, so their timeout is about 35 s and the
/// later pauses, longer than 5 × their usual gap, are no hang: the job ends 0.
#[test]
fn auto_lets_a_regular_long_pause_pass() {
    let script = r#"for round in 1 2 3 4; do
            i=0; while [ $i -lt 8 ]; do i=$((i+1)); echo round $round step $i; sleep 0.5; done
            [ $round = 4 ] || sleep 7
        done"#;
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, took) = run_in(
        dir.path(),
        &[AUTO_IN_SECONDS],
        &["--hang-timeout", "auto"],
        script,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("hang"), "{stderr}");
    // Every rank ran through its four rounds, pauses included: no early end passed for
    // the pauses passing.
    for rank in 0..2 {
        let log =
            std::fs::read_to_string(dir.path().join(format!("logs/attempt-0/rank-{rank}.out")))
                .unwrap_or_default();
        assert!(
            log.contains("round 4 step 8"),
            "rank {rank}:\n{log}\n{stderr}"
        );
    }
    eprintln!("herd run of 4 rounds with 7 s pauses took {took:?}");
}

/// A worker that fails right after it starts, every time, with 10 restarts allowed: after
/// the first attempt, 3 restarts in a row make no progress (no step, no checkpoint, each
/// far shorter than 10 min), and the job ends there, saying why, in the report on stderr,
/// in `failure.json` and in the timeline; 7 restarts are left unused.
#[test]
fn restarts_that_make_no_progress_stop_after_three() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exp = dir.path().to_str().expect("utf-8");
    let (out, _) = run_in(
        dir.path(),
        &[("HERD_EXP_DIR", exp)],
        &["--max-restarts", "10"],
        "echo starting; exit 1",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let why = "3 restarts in a row made no progress (no step in the workers' output, no new \
               checkpoint, none ran 10 min); not restarting again (--max-restarts 10 left 7)";
    assert!(stderr.contains(&format!("herd: {why}")), "{stderr}");
    assert_eq!(
        stderr.matches("restarting all workers").count(),
        3,
        "{stderr}"
    );
    let logs = dir.path().join("logs");
    assert!(logs.join("attempt-3").is_dir() && !logs.join("attempt-4").exists());
    let report = std::fs::read_to_string(logs.join("failure.json")).expect("failure.json");
    let report: serde_json::Value = serde_json::from_str(&report).expect("json");
    assert_eq!(report["restarts_stopped"], why, "{report}");
    let stopped = events(dir.path(), "restarts_stopped");
    assert_eq!(stopped.len(), 1, "{stopped:?}");
    assert_eq!(
        (
            &stopped[0]["attempt"],
            &stopped[0]["restarts"],
            &stopped[0]["left"]
        ),
        (&3.into(), &3.into(), &7.into())
    );
}

/// The steps the workers print (metrics lines) are the measure: every attempt fails at step
/// 5 (it starts from 1 again: no checkpoint), so from the second on none gets beyond 5, and
/// after three such restarts the job ends; workers that get further each time use every
/// restart they are given.
#[test]
fn restarts_stop_when_the_steps_do_not_advance_and_go_on_while_they_do() {
    let stuck = r#"i=0; while [ $i -lt 5 ]; do i=$((i+1)); echo "{\"step\": $i}"; done; exit 1"#;
    let (out, _) = run(&["--max-restarts", "10"], stuck);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "herd: 3 restarts in a row made no progress (no step beyond 5); not restarting again (--max-restarts 10 left 7)"
        ),
        "{stderr}"
    );
    // Each attempt gets 5 steps further than the last (as after resuming from a checkpoint).
    let advancing = r#"echo "{\"step\": $(( (TORCHELASTIC_RESTART_COUNT + 1) * 5 ))}"; exit 1"#;
    let (out, _) = run(&["--max-restarts", "4"], advancing);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert_eq!(
        stderr.matches("restarting all workers").count(),
        4,
        "{stderr}"
    );
    assert!(!stderr.contains("made no progress"), "{stderr}");
}
