//! Hangs told from slow starts on the bed: one rank's slow start is no hang, a rank stuck
//! after its first steps is, with a fixed hang timeout and with `--hang-timeout auto`.

use std::path::Path;
use std::time::Duration;

use herd_testbed::{read_lossy, Bed};
use serde_json::Value;

use crate::staying_alive::{args, wait_final};
use crate::support::{events, job_id, names, project_with, submit, timeline};

/// Submit slow_then_stuck.py (rank 3 silent `slow` s at its start, rank 1 stuck after
/// round `stuck_after`) on 2 nodes × 2 workers with `flags`; the job's `hang` event once it
/// failed.
fn hang_of(
    bed: &Bed,
    project: &Path,
    exps: &Path,
    name: &str,
    flags: &[&str],
    (slow, stuck_after): (&str, &str),
) -> Value {
    let exp_root = exps.display().to_string();
    let mut common = vec![
        "-J",
        name,
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--max-requeues",
        "0",
    ];
    common.extend(flags);
    let job = job_id(&submit(
        bed,
        project,
        &args(
            &common,
            &exp_root,
            &[
                "python",
                "slow_then_stuck.py",
                "--slow",
                slow,
                "--stuck-after",
                stuck_after,
            ],
        ),
    ));
    let exp = exps.join(name);
    let info = wait_final(bed, job, &exp, Duration::from_secs(300));
    let all = timeline(&exp);
    assert!(!info.succeeded(), "the hang fails the job: {info:?}");
    let hangs = events(&all, "hang");
    assert_eq!(hangs.len(), 1, "one hang: {:?}", names(&all));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    let last = out.lines().rfind(|l| l.contains("rank=1 round="));
    assert_eq!(
        last.map(str::trim),
        Some(format!("rank=1 round={stuck_after} tick=3").as_str()),
        "rank 1 got stuck in round {stuck_after}:\n{out}"
    );
    hangs[0].clone().into()
}

/// With `--hang-timeout 5`: rank 3's 20 s of silence at its start (its peers, which said
/// they started, waiting for it) is no hang; rank 1 stuck after 5 rounds is caught by that
/// 5 s timeout (silent at least 5 s when caught, and not the tens of seconds another
/// timeout would take), and named. With `--hang-timeout auto` (its floor
/// scaled to 1 s for the test), the stuck rank is caught too, the report saying how the
/// timeout was derived from the ranks' own pace.
#[test]
fn a_slow_start_is_no_hang_and_a_stuck_rank_is_caught_fixed_or_auto() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "hangs_slow_start",
        &[(
            "crates/herd/tests/e2e/workers/slow_then_stuck.py",
            "slow_then_stuck.py",
        )],
    );
    let fixed = hang_of(
        &bed,
        &project,
        &exps,
        "fixed",
        &["--hang-timeout", "5"],
        ("20", "5"),
    );
    assert_eq!(
        fixed["rank"], 1,
        "the stuck rank went silent first: {fixed}"
    );
    assert_eq!(fixed["started"], true, "{fixed}");
    let silent = fixed["silent_s"].as_f64().expect("silent_s");
    eprintln!("fixed: caught {silent} s after rank 1's last progress (timeout 5 s)");
    assert_eq!(fixed["timeout_s"], 5.0, "the flag's timeout: {fixed}");
    assert!(
        (5.0..35.0).contains(&silent),
        "caught {silent} s after rank 1's last progress: not before the 5 s timeout, and by \
         it: {fixed}"
    );
    // The test's scale for the auto rule (sbatch passes the environment on to the agents):
    // floor 1 s, warm-up 5 s and 10 gaps; a rank's timeout is 5 × its longest gap after
    // that. Rank 1 gets stuck in round 12 (about 12 s in), past the warm-up.
    std::env::set_var("HERD_HANG_AUTO_FLOOR", "1");
    let auto = hang_of(
        &bed,
        &project,
        &exps,
        "auto",
        &["--hang-timeout", "auto"],
        ("0", "12"),
    );
    assert_eq!(auto["rank"], 1, "{auto}");
    assert!(
        auto["timeout"]
            .as_str()
            .unwrap_or_default()
            .starts_with("auto: "),
        "the timeout says how it was derived: {auto}"
    );
    let (silent, timeout) = (
        auto["silent_s"].as_f64().expect("silent_s"),
        auto["timeout_s"].as_f64().expect("timeout_s"),
    );
    eprintln!("auto: caught {silent} s after the last progress, timeout {timeout} s");
    // Derived from the pace (the unscaled rule's floor is 60 s), and acted on: not tens of
    // seconds past it.
    assert!(
        timeout < 60.0 && silent < timeout + 30.0,
        "caught {silent} s after the last progress, timeout {timeout} s: {auto}"
    );
}

/// A hang in a job with a spare node (2 nodes × 2 workers and one spare standing by): the
/// spare, which runs no worker, answers the leader's call for stacks with none, so the
/// leader decides once the working nodes have answered instead of waiting out its 15 s for
/// the spare (it names a node that sends none), and the failure report has every working
/// rank's stack.
#[test]
fn a_spare_answers_the_call_for_stacks_with_none() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "hangs_spare",
        &[(
            "crates/herd/tests/e2e/workers/slow_then_stuck.py",
            "slow_then_stuck.py",
        )],
    );
    let hang = hang_of(
        &bed,
        &project,
        &exps,
        "spare",
        &["--hang-timeout", "5", "--spare-nodes", "1"],
        ("0", "5"),
    );
    assert_eq!(hang["rank"], 1, "{hang}");
    let logs = exps.join("spare/logs");
    let err: String = std::fs::read_dir(&logs)
        .expect("the job's logs")
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "err"))
        .map(|e| read_lossy(e.path()))
        .collect();
    assert!(err.contains("collecting stacks"), "{err}");
    assert!(
        !err.contains("sent no stacks"),
        "every node answered the call for stacks:\n{err}"
    );
    let report: Value = serde_json::from_str(&read_lossy(logs.join("attempt-0/failure.json")))
        .expect("failure.json parses");
    let ranks: Vec<u64> = report["stacks"]
        .as_array()
        .expect("stacks")
        .iter()
        .filter_map(|s| s["rank"].as_u64())
        .collect();
    assert_eq!(ranks, [0, 1, 2, 3], "{report}");
}
