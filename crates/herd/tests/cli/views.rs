//! The views of a job without a cluster: `herd status` with a fake `squeue`, `herd logs` and
//! `herd top --once` of an experiment folder made by hand.

use super::*;

/// `herd status` with a fake `squeue` on PATH that prints `answer` (or, with `fail`, fails
/// as with slurmctld down), in a folder with an empty experiment root.
fn status_with_fake_squeue(args: &[&str], fail: bool) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let body = if fail {
        "echo 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1"
    } else {
        "exit 0"
    };
    let path = bin.join("squeue");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("fake squeue");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::create_dir(dir.path().join("exps")).expect("exps");
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("status")
        .args(["--exp-root", "exps"])
        .args(args)
        .current_dir(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .output()
        .expect("herd runs")
}

#[test]
fn status_of_an_unknown_name_says_where_it_looked() {
    let out = status_with_fake_squeue(&["no-such-exp"], false);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-exp: no experiment of that name under /")
            && stderr.contains(
                "/exps and no job of yours with that name or id (experiments there: none)"
            ),
        "{stderr}"
    );
}

#[test]
fn status_without_a_scheduler_answers_from_the_folders_and_exits_1() {
    let out = status_with_fake_squeue(&[], true);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("no experiments under /"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("herd: error: the scheduler did not answer: squeue: error: Unable to contact slurm controller (connect failure); states above are from the experiment folders only"),
        "{stderr}"
    );
}

/// An experiment `train` as a 2-rank agent-mode job leaves it: rank files with time marks,
/// the timeline with its rendezvous, a failure report.
fn logs_experiment() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).expect("project");
    let root = tmp.path().join("exps");
    let exp = herd_exp::NewExperiment::new(
        &root,
        "train",
        &project,
        serde_json::json!({}),
        herd_exp::Invocation::current("test"),
    )
    .create()
    .expect("experiment")
    .experiment;
    exp.record_job_id(1, "4242").expect("job id");
    let dir = exp.dir().to_owned();
    let event = |name: &str, fields: serde_json::Value| {
        let mut m = fields.as_object().cloned().expect("an object");
        m.insert("event".into(), name.into());
        let event: herd_exp::timeline::Event =
            serde_json::from_value(serde_json::Value::Object(m)).expect("a timeline event");
        herd_exp::timeline::append(&dir, event).expect("event");
    };
    event("started", serde_json::json!({"job_id": 4242, "requeue": 0}));
    event(
        "rendezvous",
        serde_json::json!({"world_size": 2, "nodes": [
            {"node": 0, "host": "gpu-a01", "ranks": [0]},
            {"node": 1, "host": "gpu-a02", "ranks": [1]}]}),
    );
    event("attempt_started", serde_json::json!({"attempt": 0}));
    let a = dir.join("logs/attempt-0");
    std::fs::create_dir_all(&a).expect("attempt");
    std::fs::write(a.join("rank-0.out"), "step 1\nstep 2\n").expect("log");
    std::fs::write(a.join("rank-0.err"), "").expect("log");
    std::fs::write(a.join("rank-0.times"), "o 0 1000\no 7 3000\n").expect("marks");
    std::fs::write(a.join("rank-1.out"), "step 1\n").expect("log");
    std::fs::write(a.join("rank-1.err"), "boom\n").expect("log");
    std::fs::write(a.join("rank-1.times"), "o 0 2000\ne 0 4000\n").expect("marks");
    event("finished", serde_json::json!({"attempt": 0, "ok": false}));
    (tmp, root)
}

#[test]
fn top_once_prints_a_frame_and_needs_a_terminal_otherwise() {
    let (_tmp, root) = logs_experiment();
    let root = root.to_str().expect("utf-8");
    let out = herd(&["top", "train", "--exp-root", root, "--once"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout_of(&out);
    assert!(text.starts_with("herd top  train  job 4242"), "{text}");
    assert!(text.contains("attempt 0 of 1"), "{text}");
    assert!(text.contains("job failed"), "{text}");
    let row = |r: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{r} ")))
            .unwrap_or_else(|| panic!("no row {r}: {text}"))
            .to_owned()
    };
    assert!(
        row("0").contains("gpu-a01") && row("0").contains("stopped"),
        "{text}"
    );
    assert!(row("1").contains("gpu-a02"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    // stdout is a pipe here: the live view refuses and says what to use.
    let out = herd(&["top", "train", "--exp-root", root]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--once"), "{stderr}");

    let out = herd(&["top", "trian", "--exp-root", root, "--once"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("experiments there: train"),
        "{out:?}"
    );
}

#[test]
fn logs_merges_ranks_filters_and_follows_to_the_end() {
    let (_tmp, root) = logs_experiment();
    let root = root.to_str().expect("utf-8");
    let out = herd(&["logs", "train", "--exp-root", root]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_of(&out),
        "0: step 1\n1: step 1\n0: step 2\n1: boom\n"
    );
    let out = herd(&[
        "logs",
        "train",
        "--exp-root",
        root,
        "--node",
        "gpu-a02",
        "--stderr",
    ]);
    assert_eq!(stdout_of(&out), "1: boom\n");
    let out = herd(&[
        "logs",
        "train",
        "--exp-root",
        root,
        "--rank",
        "0",
        "--tail",
        "1",
    ]);
    assert_eq!(stdout_of(&out), "step 2\n");
    // The job is over (failed): a follow prints everything and exits 1.
    let out = herd(&["logs", "train", "--exp-root", root, "-f", "--grep", "boom"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1: boom\n");
    // No failure report: exit 1, saying so.
    let out = herd(&["logs", "train", "--exp-root", root, "--failed"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("attempt 0 of train has no failure report")
    );
}

#[test]
fn logs_of_no_experiment_or_with_bad_flags_is_a_usage_error() {
    let (_tmp, root) = logs_experiment();
    let root = root.to_str().expect("utf-8");
    for (args, says) in [
        (vec!["nope"], "no experiment named \"nope\" in "),
        (
            vec!["train", "--grep", "("],
            "--grep \"(\": not a valid regular expression",
        ),
        (vec!["train", "--since", "soon"], "--since \"soon\""),
        (vec!["train", "--attempt", "3"], "train has no attempt 3"),
    ] {
        let mut argv = vec!["logs", "--exp-root", root];
        argv.extend(&args);
        let out = herd(&argv);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("herd: error: "), "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = herd(&["logs", "nope", "--exp-root", root]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("experiments there: train"));
}

#[test]
fn logs_into_a_closed_pipe_exits_0() {
    let (_tmp, root) = logs_experiment();
    let dir = root.join("train/logs/attempt-0");
    let line = "x".repeat(100) + "\n";
    std::fs::write(dir.join("rank-0.out"), line.repeat(20_000)).expect("big log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["logs", "train", "--exp-root", root.to_str().expect("utf-8")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("herd runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}
