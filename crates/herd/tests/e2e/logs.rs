//! `herd logs` on the bed (issue #14): real agents' rank files and time marks, a follow
//! through a `--max-restarts` restart, the filters, `--failed`, `--batch`.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use herd_testbed::Bed;

use crate::support::{job_id, submit, waiter_project as project};

/// `herd logs NAME ARGS…` (not following): its output, which must succeed.
fn logs(project: &Path, exps: &Path, name: &str, args: &[&str]) -> Vec<String> {
    let out = logs_output(project, exps, name, args);
    assert!(
        out.status.success(),
        "herd logs {name} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn logs_output(project: &Path, exps: &Path, name: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["logs", name, "--exp-root"])
        .arg(exps)
        .args(args)
        .current_dir(project)
        .output()
        .expect("herd logs runs")
}

fn submit_waiter(
    bed: &Bed,
    project: &Path,
    exps: &Path,
    name: &str,
    flags: &[&str],
    waiter: &[&str],
) -> String {
    let root = exps.display().to_string();
    let mut args = vec![
        "-J",
        name,
        "--partition",
        "gpu",
        "--time",
        "5",
        "--exp-root",
        &root,
    ];
    args.extend(flags);
    args.extend(["--", "python", "waiter.py"]);
    args.extend(waiter);
    job_id(&submit(bed, project, &args)).to_string()
}

/// Where each line is in `lines` (panics naming the missing one).
fn pos(lines: &[String], line: &str) -> usize {
    lines
        .iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("{line:?} missing from:\n{}", lines.join("\n")))
}

/// A 2-node × 2-worker job whose rank 3 fails in attempt 0 and that restarts once: `-f`,
/// started right after submit, waits for the job, prints every rank of attempt 0 labelled,
/// the restart's marker, attempt 1, and ends with the job (exit 0). Then the filters: one
/// rank raw, one node, one attempt, every attempt with `--grep`, `--failed`, `--batch`.
#[test]
fn follow_through_a_restart_then_filter_by_rank_node_and_attempt() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "logs_restart");
    let ready = project.join("ready").display().to_string();
    let id = submit_waiter(
        &bed,
        &project,
        &exps,
        "restarting",
        &[
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--max-restarts",
            "1",
        ],
        &[
            "--lines",
            "5",
            "--exit",
            "3",
            "--fail-rank",
            "3",
            "--first-attempt-only",
            "--others-wait",
            "--ready",
            &ready,
        ],
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["logs", "restarting", "-f", "--exp-root"])
        .arg(&exps)
        .current_dir(&project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("herd logs -f");
    let stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("herd logs -f did not end with the job");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let followed = reader.join().expect("reader");
    let stderr = std::io::read_to_string(child.stderr.take().expect("stderr")).unwrap_or_default();
    assert_eq!(
        status.code(),
        Some(0),
        "the job finished ok\n{}\n{stderr}",
        followed.join("\n")
    );
    let marker = format!("── attempt 1 (restart 1, job {id}) ──");
    let restart = pos(&followed, &marker);
    for rank in 0..4 {
        let mut last = None;
        for i in 0..5 {
            let at = pos(
                &followed,
                &format!("{rank}: rank {rank} attempt 0 line {i}"),
            );
            assert!(at < restart, "attempt 0 before the marker");
            assert!(last.is_none_or(|l| l < at), "rank {rank}'s lines in order");
            last = Some(at);
        }
        pos(
            &followed,
            &format!("{rank}: rank {rank} attempt 0 on stderr"),
        );
        assert!(pos(&followed, &format!("{rank}: rank {rank} attempt 1 line 0")) > restart);
        assert!(pos(&followed, &format!("{rank}: rank {rank} attempt 1 done")) > restart);
    }
    assert!(pos(&followed, "3: rank 3 attempt 0 exits 3") < restart);
    assert_eq!(
        followed.iter().filter(|l| l.starts_with("── ")).count(),
        1,
        "one marker: {followed:#?}"
    );

    // One rank, raw, in the order it wrote (stdout lines, then its stderr line).
    let mut expected: Vec<String> = (0..5)
        .map(|i| format!("rank 2 attempt 0 line {i}"))
        .collect();
    expected.push("rank 2 attempt 0 on stderr".into());
    assert_eq!(
        logs(
            &project,
            &exps,
            "restarting",
            &["--rank", "2", "--attempt", "0"]
        ),
        expected
    );

    // Node 1 ran ranks 2 and 3 (from the rendezvous): only theirs.
    let node1 = logs(
        &project,
        &exps,
        "restarting",
        &["--node", "1", "--attempt", "0", "--stdout"],
    );
    assert_eq!(node1.len(), 10, "{node1:#?}");
    assert!(
        node1
            .iter()
            .all(|l| l.starts_with("2: ") || l.starts_with("3: ")),
        "{node1:#?}"
    );
    let host = bed.nodes()[1].clone();
    let by_host = logs(
        &project,
        &exps,
        "restarting",
        &["--node", &host, "--attempt", "0", "--stdout"],
    );
    let mut sorted_a = node1.clone();
    let mut sorted_b = by_host.clone();
    sorted_a.sort();
    sorted_b.sort();
    assert_eq!(sorted_a, sorted_b, "node 1 is {host}");

    // The latest attempt by default; every attempt with markers; --grep.
    let latest = logs(&project, &exps, "restarting", &[]);
    assert!(
        latest.iter().all(|l| l.contains("attempt 1")),
        "{latest:#?}"
    );
    let grepped = logs(
        &project,
        &exps,
        "restarting",
        &["--all-attempts", "--grep", "line 4$"],
    );
    let mut want = vec![format!("── attempt 0 (job {id}) ──")];
    let mut a0: Vec<String> = (0..4)
        .map(|r| format!("{r}: rank {r} attempt 0 line 4"))
        .collect();
    let mut a1: Vec<String> = (0..4)
        .map(|r| format!("{r}: rank {r} attempt 1 line 4"))
        .collect();
    let got_a0: Vec<String> = grepped[1..5].to_vec();
    let got_a1: Vec<String> = grepped[6..].to_vec();
    a0.sort();
    a1.sort();
    let (mut g0, mut g1) = (got_a0, got_a1);
    g0.sort();
    g1.sort();
    want.push(marker.clone());
    assert_eq!(
        vec![grepped[0].clone(), grepped[5].clone()],
        want,
        "{grepped:#?}"
    );
    assert_eq!((g0, g1), (a0, a1), "{grepped:#?}");

    // The failure of attempt 0: the report and rank 3's last lines.
    let failed = logs(
        &project,
        &exps,
        "restarting",
        &["--failed", "--attempt", "0"],
    );
    let text = failed.join("\n");
    assert!(
        text.contains("rank 3 (local rank 1 on ") && text.contains("exited with code 3"),
        "{text}"
    );
    assert!(
        failed.iter().any(|l| l == "  | rank 3 attempt 0 exits 3"),
        "{text}"
    );
    assert!(
        failed.iter().any(|l| l == "  | rank 3 attempt 0 line 0"),
        "{text}"
    );

    // Attempt 1 did not fail: no report, said, exit 1.
    let out = logs_output(
        &project,
        &exps,
        "restarting",
        &["--failed", "--attempt", "1"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("attempt 1"),
        "{out:?}"
    );

    // SLURM's batch output of the job: the agents' own lines.
    let batch = logs(&project, &exps, "restarting", &["--batch"]).join("\n");
    assert!(batch.contains("4 workers on 2 nodes"), "{batch}");
}

/// A job that fails for good: `--failed` names the rank, its node and exit code and shows its
/// last lines; the plain view has both ranks labelled.
#[test]
fn failed_shows_the_report_and_the_failing_ranks_tail() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "logs_failed");
    let ready = project.join("ready").display().to_string();
    let id = submit_waiter(
        &bed,
        &project,
        &exps,
        "broken",
        &["--nodes", "2"],
        &[
            "--lines",
            "3",
            "--exit",
            "5",
            "--fail-rank",
            "1",
            "--others-wait",
            "--ready",
            &ready,
        ],
    );
    let info = bed
        .wait(
            herd_testbed::JobId(id.parse().expect("id")),
            Duration::from_secs(180),
        )
        .expect("ends");
    assert_eq!(info.state, "FAILED", "{info:?}");
    let failed = logs(&project, &exps, "broken", &["--failed"]);
    let text = failed.join("\n");
    assert!(
        text.contains(&format!("rank 1 (local rank 0 on {})", bed.nodes()[1]))
            && text.contains("exited with code 5"),
        "{text}"
    );
    let header = failed
        .iter()
        .position(|l| l.starts_with("herd: last 5 lines of rank 1 (stdout and stderr"))
        .unwrap_or_else(|| panic!("no tail header: {text}"));
    let tail: Vec<&str> = failed[header + 1..]
        .iter()
        .filter_map(|l| l.strip_prefix("  | "))
        .collect();
    assert_eq!(
        tail,
        [
            "rank 1 attempt 0 line 0",
            "rank 1 attempt 0 line 1",
            "rank 1 attempt 0 line 2",
            "rank 1 attempt 0 on stderr",
            "rank 1 attempt 0 exits 5",
        ],
        "{text}"
    );
    let all = logs(&project, &exps, "broken", &[]);
    for rank in 0..2 {
        pos(&all, &format!("{rank}: rank {rank} attempt 0 line 2"));
    }
    // An attempt the experiment does not have is a usage error.
    let out = logs_output(&project, &exps, "broken", &["--failed", "--attempt", "9"]);
    assert_eq!(out.status.code(), Some(2), "no attempt 9: {out:?}");
}
