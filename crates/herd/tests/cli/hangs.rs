//! The hang watchdog told from slow starts, with real agents (`herd run`, 2 simulated
//! nodes, the follower's progress reports included): silence before a rank's first progress
//! counts against `--start-timeout`, silence after it against `--hang-timeout`.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `herd run --nodes 2 --nproc-per-node 1 ARGS -- sh -c SCRIPT` (the script reads `$RANK`),
/// and how long it took.
fn run(args: &[&str], script: &str) -> (Output, Duration) {
    let dir = tempfile::tempdir().expect("tempdir");
    let began = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--nodes", "2", "--nproc-per-node", "1", "--log-dir"])
        .arg(dir.path().join("logs"))
        .args(args)
        .args(["--", "sh", "-c", script])
        .current_dir(dir.path())
        .output()
        .expect("herd run");
    (out, began.elapsed())
}

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
    // The watchdog, not the workers' own end (120 s), ended it.
    assert!(took < Duration::from_secs(60), "took {took:?}: {stderr}");
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
