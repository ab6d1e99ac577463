//! `herd status`, `herd cancel`, `herd submit --wait` and `herd status -w` on the bed
//! (issue #14): real jobs, the real scheduler, its real squeue.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use herd_testbed::{read_lossy, write_file, Bed, JobId};
use serde_json::Value;

use crate::support::{job_id, submit, waiter_project as project};

/// `herd ARGS` from `project` with `path_first` (if any) ahead of PATH; killed and a test
/// failure past `limit`.
fn herd(project: &Path, args: &[&str], path_first: Option<&Path>, limit: Duration) -> Output {
    let mut path = std::env::var("PATH").unwrap_or_default();
    if let Some(first) = path_first {
        path = format!("{}:{path}", first.display());
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .env("PATH", path)
        .current_dir(project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("herd starts");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "herd {args:?} did not end within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `herd status --json NAME…`: the experiments' entries by name.
fn status_json(project: &Path, exps: &Path, names: &[&str]) -> Vec<Value> {
    let root = exps.display().to_string();
    let mut args = vec!["status", "--json", "--exp-root", &root];
    args.extend(names);
    let out = herd(project, &args, None, Duration::from_secs(60));
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "herd status failed:\n{stdout}\n{stderr}"
    );
    let doc: Value = serde_json::from_str(&stdout).expect("status --json is JSON");
    assert_eq!(doc["format"], 1, "{doc:#}");
    assert_eq!(doc["scheduler"]["answered"], true, "{doc:#}");
    names
        .iter()
        .map(|n| {
            doc["experiments"]
                .as_array()
                .and_then(|a| a.iter().find(|e| e["name"] == *n))
                .unwrap_or_else(|| panic!("{n} not in {doc:#}"))
                .clone()
        })
        .collect()
}

/// Polls `herd status --json NAME` until `pred` holds for its entry (or fails past `limit`).
fn wait_status(
    project: &Path,
    exps: &Path,
    name: &str,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let entry = status_json(project, exps, &[name]).remove(0);
        if pred(&entry) {
            return entry;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never became {what} within {limit:?}: {entry:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn waiter(args: &[&str]) -> Vec<String> {
    let mut v = vec!["--".to_owned(), "python".to_owned(), "waiter.py".to_owned()];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

fn submit_job(
    bed: &Bed,
    project: &Path,
    exps: &Path,
    name: &str,
    flags: &[&str],
    cmd: &[String],
) -> JobId {
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
    args.extend(cmd.iter().map(String::as_str));
    job_id(&submit(bed, project, &args))
}

fn events(exp: &Path, event: &str) -> Vec<Value> {
    read_lossy(exp.join("timeline.jsonl"))
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == event)
        .collect()
}

/// A 2-node job seen queued (held, the reason in words), running on its 2 nodes with
/// output, finished; a 2-node job that fails, with its failure in one line; a job cancelled
/// by name, recorded in its experiment.
#[test]
fn status_shows_queued_running_finished_failed_and_cancelled() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "status_states");
    let go = project.join("go");
    let go_arg = go.display().to_string();
    let ok = submit_job(
        &bed,
        &project,
        &exps,
        "ok",
        &["--nodes", "2", "--sbatch-arg=--hold"],
        &waiter(&["--go", &go_arg]),
    );
    let held = wait_status(
        &project,
        &exps,
        "ok",
        "held",
        Duration::from_secs(30),
        |e| e["reason"] == "JobHeldUser",
    );
    assert_eq!(held["state"], "queued", "{held:#}");
    assert_eq!(held["job_id"], ok.to_string());
    assert_eq!(
        held["detail"],
        format!("held by you (scontrol release {ok}) (JobHeldUser)"),
        "{held:#}"
    );
    let bad = submit_job(
        &bed,
        &project,
        &exps,
        "bad",
        &["--nodes", "2"],
        &waiter(&["--exit", "3", "--fail-rank", "1"]),
    );
    let never = project.join("never").display().to_string();
    let victim = submit_job(
        &bed,
        &project,
        &exps,
        "victim",
        &["--nodes", "2"],
        &waiter(&["--go", &never, "--term-exit", "143"]),
    );

    let failed = wait_status(
        &project,
        &exps,
        "bad",
        "failed",
        Duration::from_secs(120),
        |e| e["state"] == "failed",
    );
    assert_eq!(failed["job_id"], bad.to_string());
    assert_eq!(failed["exit_code"], 1, "the agent's exit code: {failed:#}");
    assert_eq!(failed["attempts"], 1, "{failed:#}");
    let line = failed["last_failure"].as_str().unwrap_or_default();
    assert!(
        line.starts_with("rank 1 (local rank 0 on gpu-a0") && line.ends_with("exited with code 3"),
        "the failure in one line: {failed:#}"
    );

    // Cancel by name: recorded in the experiment, shown as cancelled by herd.
    wait_status(
        &project,
        &exps,
        "victim",
        "running",
        Duration::from_secs(120),
        |e| e["phase"] == "output",
    );
    // Its workers on both nodes, seen before the cancel.
    let workers = |bed: &Bed| -> Vec<String> {
        bed.node_processes(&never)
            .expect("the nodes' process tables")
            .into_iter()
            .filter(|l| !l.contains(" launch "))
            .collect()
    };
    let before = workers(&bed);
    let hosts: std::collections::BTreeSet<&str> =
        before.iter().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(hosts.len(), 2, "workers on 2 nodes: {before:#?}");
    let root = exps.display().to_string();
    let out = herd(
        &project,
        &["cancel", "--exp-root", &root, "victim"],
        None,
        Duration::from_secs(60),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.trim(),
        format!("cancelled job {victim} (victim): experiment victim")
    );
    let recorded = events(&exps.join("victim"), "cancelled");
    assert_eq!(recorded.len(), 1, "one cancelled event");
    assert_eq!(recorded[0]["job_id"], victim.to_string());
    let cancelled = wait_status(
        &project,
        &exps,
        "victim",
        "cancelled",
        Duration::from_secs(60),
        |e| e["state"] == "cancelled",
    );
    assert!(
        cancelled["detail"]
            .as_str()
            .unwrap_or_default()
            .ends_with(", by herd cancel"),
        "{cancelled:#}"
    );
    // scancel's SIGTERM reached the agents and the workers (which exit 143 on it, as a
    // shell with a trap does): the leader took it for a cancel (not a preemption, not the
    // time limit, not a worker's failure), whichever came first, and said so; nothing of
    // the job is left.
    let signalled = events(&exps.join("victim"), "signal");
    assert!(
        signalled
            .iter()
            .any(|e| e["signal"] == "SIGTERM" && e["action"] == "terminate"),
        "{signalled:#?}"
    );
    let failed = events(&exps.join("victim"), "failed");
    assert!(
        failed.iter().all(|e| e["kind"] == "cancelled"),
        "a cancel, not a failure: {failed:#?}"
    );
    let said = read_lossy(exps.join(format!("victim/logs/{victim}.err")));
    assert!(
        said.contains("received SIGTERM: job cancelled")
            || said
                .contains("exited with code 143 with the rest of the job, which SLURM is ending"),
        "{said}"
    );
    eprintln!(
        "cancel seen first by {}",
        if said.contains("received SIGTERM: job cancelled") {
            "an agent"
        } else {
            "a worker's exit"
        }
    );
    // The workers would wait for `never` for ever: gone, they were ended. A minute is
    // long past SLURM's SIGKILL (KillWait 5 s after the SIGTERM).
    let start = Instant::now();
    loop {
        let left = workers(&bed);
        if left.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "left 60 s after the cancel: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "victim's workers gone {:?} after the cancel",
        start.elapsed()
    );

    // Released: runs on 2 nodes with output, then finishes when told.
    let released = Command::new("scontrol")
        .args(["release", &ok.to_string()])
        .status()
        .expect("scontrol release");
    assert!(released.success());
    let running = wait_status(
        &project,
        &exps,
        "ok",
        "running with output",
        Duration::from_secs(120),
        |e| e["state"] == "running" && e["phase"] == "output",
    );
    let detail = running["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(" of 5:00 on 2 nodes gpu-a")
            && detail.contains("workers writing output (attempt 0)"),
        "{running:#}"
    );
    assert_eq!(running["time_limit_s"], 300);
    write_file(&go, "", 0o644).expect("go");
    let done = wait_status(
        &project,
        &exps,
        "ok",
        "finished",
        Duration::from_secs(120),
        |e| e["state"] == "finished",
    );
    assert_eq!(done["exit_code"], 0, "{done:#}");
    assert_eq!(done["slurm_state"], "COMPLETED");

    // The scheduler's end is in the folder now, for when the job has left the queue.
    let ended = events(&exps.join("ok"), "ended");
    assert_eq!(ended.len(), 1, "recorded once, however often status ran");
    assert_eq!(ended[0]["state"], "COMPLETED");
    assert_eq!(ended[0]["exit_code"], 0);

    // The table: one line per experiment, in submit order.
    let out = herd(
        &project,
        &["status", "--exp-root", &root],
        None,
        Duration::from_secs(60),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().take(4).collect())
        .collect();
    assert_eq!(
        rows,
        [
            vec!["ok", &ok.to_string(), "finished", "1"],
            vec!["bad", &bad.to_string(), "failed", "1"],
            vec!["victim", &victim.to_string(), "cancelled", "1"],
        ],
        "{stdout}"
    );
}

/// A PATH folder whose `squeue`, `scontrol`, `sacct`, `sinfo` and `scancel` log each call
/// to `calls.log` and run the real command.
fn counting_wrappers(dir: &Path) -> PathBuf {
    let bin = dir.join("wrappers");
    std::fs::create_dir_all(&bin).expect("wrappers");
    for cmd in ["squeue", "scontrol", "sacct", "sinfo", "scancel"] {
        // The command as PATH finds it: the bed's Slurm release may have its own in
        // /usr/local/bin, ahead of the host's.
        let path = std::env::var_os("PATH").unwrap_or_default();
        let real = std::env::split_paths(&path)
            .map(|d| d.join(cmd))
            .find(|p| p.is_file())
            .unwrap_or_else(|| PathBuf::from(format!("/usr/bin/{cmd}")));
        write_file(
            &bin.join(cmd),
            &format!(
                "#!/bin/sh\necho \"{cmd} $*\" >> '{}'\nexec '{}' \"$@\"\n",
                bin.join("calls.log").display(),
                real.display()
            ),
            0o755,
        )
        .expect("wrapper");
    }
    bin
}

fn calls(bin: &Path) -> Vec<String> {
    let log = bin.join("calls.log");
    let text = read_lossy(&log);
    let _ = std::fs::remove_file(&log);
    text.lines().map(str::to_owned).collect()
}

/// Stops slurmctld (SIGSTOP: it accepts connections and never answers) until dropped.
struct FrozenController(i32);

impl FrozenController {
    fn freeze() -> FrozenController {
        let pidfile = "/var/lib/herd-testbed/run/slurmctld.pid";
        let pid: i32 = std::fs::read_to_string(pidfile)
            .expect("slurmctld pid file")
            .trim()
            .parse()
            .expect("pid");
        let ok = Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "cannot stop slurmctld {pid}");
        FrozenController(pid)
    }
}

impl Drop for FrozenController {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// 50 submitted experiments: `herd status` answers for all of them with one squeue call
/// (counted by wrappers on PATH) and `herd cancel` cancels them all with one squeue and one
/// scancel; a controller that does not answer gives a clear error after one squeue call
/// cut at `--timeout` (no retry, no hang), with the folder-based part of the answer.
#[test]
fn fifty_jobs_take_one_squeue_call_and_a_stopped_controller_a_clear_error() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "status_fifty");
    let root = exps.display().to_string();
    let names: Vec<String> = (0..50).map(|i| format!("sweep-{i:02}")).collect();
    for name in &names {
        submit_job(
            &bed,
            &project,
            &exps,
            name,
            &["--nodes", "1", "--sbatch-arg=--hold"],
            &waiter(&[]),
        );
    }
    let bin = counting_wrappers(&project);
    let out = herd(
        &project,
        &["status", "--exp-root", &root],
        Some(&bin),
        Duration::from_secs(60),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let made = calls(&bin);
    assert_eq!(made.len(), 1, "one scheduler call for 50 jobs: {made:#?}");
    assert!(
        made[0].starts_with("squeue ") && made[0].contains("--me"),
        "{made:?}"
    );
    for name in &names {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not shown:\n{stdout}"));
        assert!(
            line.contains(" queued ")
                && line.contains("held by you (scontrol release ")
                && line.ends_with(") (JobHeldUser)"),
            "{line}"
        );
    }

    // Named, they are asked for by id, still in one call.
    let mut args = vec!["status", "--exp-root", &root];
    args.extend(names.iter().map(String::as_str));
    let out = herd(&project, &args, Some(&bin), Duration::from_secs(60));
    assert!(out.status.success(), "{:?}", text(&out));
    let made = calls(&bin);
    assert_eq!(made.len(), 1, "{made:#?}");
    assert!(made[0].contains("--jobs="), "{made:?}");

    let mut args = vec!["cancel", "--exp-root", &root];
    args.extend(names.iter().map(String::as_str));
    let out = herd(&project, &args, Some(&bin), Duration::from_secs(60));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.lines().count(), 50, "{stdout}");
    let made = calls(&bin);
    assert_eq!(
        made.iter()
            .map(|c| c.split(' ').next().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["squeue", "scancel"],
        "{made:#?}"
    );

    // slurmctld stops answering: one squeue call, cut at the 3 s timeout (herd() fails the
    // test if herd hangs on the stopped controller), a clear error, and what the folders
    // know.
    let frozen = FrozenController::freeze();
    let start = Instant::now();
    let out = herd(
        &project,
        &["status", "--timeout", "3", "--exp-root", &root],
        Some(&bin),
        Duration::from_secs(60),
    );
    let took = start.elapsed();
    drop(frozen);
    eprintln!("herd status against the stopped controller ended after {took:?}");
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let made = calls(&bin);
    assert_eq!(
        made.iter()
            .map(|c| c.split(' ').next().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["squeue"],
        "one call, not retried: {made:#?}"
    );
    assert!(
        stderr.contains("the scheduler did not answer within 3s")
            && stderr.contains("states above are from the experiment folders only"),
        "{stderr}"
    );
    for name in &names {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("{name} not shown without the scheduler:\n{stdout}"));
        assert!(
            line.contains(" cancelled ")
                && line.ends_with("cancelled by herd cancel (scheduler did not answer)"),
            "{line}"
        );
    }
}

/// `herd submit --wait` ends with the job's own exit code (3 from an srun-mode job, as
/// SLURM records it, 0 from one that succeeds); `herd status -w` stops watching at Ctrl-C
/// and the job goes on.
#[test]
fn submit_wait_exits_with_the_jobs_code_and_ctrl_c_leaves_the_job_running() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "status_wait");
    let root = exps.display().to_string();
    let args = |name: &'static str, mode: &'static str, nodes: &'static str| {
        [
            "-J",
            name,
            "--mode",
            mode,
            "--nodes",
            nodes,
            "--partition",
            "gpu",
            "--time",
            "5",
            "--exp-root",
            &root,
            "--wait",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect::<Vec<String>>()
    };
    // One srun task, so its code is the job's (with more, srun's kill of the others wins).
    let mut three = args("three", "srun", "1");
    three.extend(waiter(&["--exit", "3"]));
    let out = submit(
        &bed,
        &project,
        &three.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let (stdout, stderr) = text(&out);
    let id = stdout.trim().to_owned();
    let info = bed
        .job(JobId(id.parse().expect("job id on stdout")))
        .expect("scontrol show job");
    assert!(info.is_final(), "--wait returned before the end: {info:?}");
    assert_eq!(info.exit_code, "3:0", "SLURM's exit code: {info:?}");
    assert_eq!(out.status.code(), Some(3), "herd's exit code\n{stderr}");
    assert!(
        stderr.contains(&format!("herd: three ({id}) failed: exit 3"))
            && stderr.ends_with("exit code 3\n"),
        "{stderr}"
    );

    // The live line follows a 2-node agent-mode job to running with output, then its end.
    let go = project.join("go-zero");
    let mut zero = args("zero", "agent", "2");
    zero.extend(waiter(&["--go", &go.display().to_string()]));
    let venv_bin = bed.python().parent().expect("venv bin").to_path_buf();
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("submit")
        .args(&zero)
        .env(
            "PATH",
            format!(
                "{}:{}",
                venv_bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .current_dir(&project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("herd submit --wait");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .expect("herd ended before the job ran")
            .expect("utf-8");
        seen.push(line.clone());
        if line.contains("zero (")
            && line.contains(": running ")
            && line.contains("on 2 nodes")
            && line.contains("workers writing output")
        {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {seen:#?}");
    }
    write_file(&go, "", 0o644).expect("go");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    let id = std::io::read_to_string(stdout).expect("stdout");
    let info = bed
        .job(JobId(id.trim().parse().expect("job id")))
        .expect("job");
    assert!(info.succeeded(), "{info:?}");
    assert_eq!(status.code(), Some(0), "{rest:#?}");
    assert!(
        rest.last()
            .is_some_and(|l| l.contains("finished: exit 0") && l.ends_with("exit code 0")),
        "{rest:#?}"
    );

    // status -w, then Ctrl-C: herd stops watching, the job does not stop.
    let go = project.join("go-long");
    let job = submit_job(
        &bed,
        &project,
        &exps,
        "long",
        &["--nodes", "1"],
        &waiter(&["--go", &go.display().to_string()]),
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["status", "-w", "--exp-root", &root, "long"])
        .current_dir(&project)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("herd status -w");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let line = lines.next().expect("a line").expect("utf-8");
        if line.contains("running") && line.contains("workers writing output") {
            break;
        }
        assert!(Instant::now() < deadline, "never running: {line}");
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill")
        .success());
    let status = child.wait().expect("wait");
    assert!(!status.success(), "Ctrl-C ends the watch");
    let info = bed.job(job).expect("job");
    assert_eq!(info.state, "RUNNING", "the job goes on: {info:?}");
    write_file(&go, "", 0o644).expect("go");
    let info = bed.wait(job, Duration::from_secs(120)).expect("ends");
    assert!(info.succeeded(), "{info:?}");
}

/// A `--then` chain of three: cancelling the first alone leaves the second queued saying it
/// will never start; `herd cancel --chain` of the second cancels it and the third, each
/// recorded in its own experiment.
#[test]
fn cancel_chain_takes_the_jobs_that_wait() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "status_chain");
    let root = exps.display().to_string();
    for name in ["second", "third"] {
        std::fs::write(
            project.join(format!("{name}.toml")),
            format!("job_name = \"{name}\"\ncommand = [\"python\", \"waiter.py\"]\n"),
        )
        .expect("job file");
    }
    let out = submit(
        &bed,
        &project,
        &[
            "-J",
            "first",
            "--sbatch-arg=--hold",
            "--exp-root",
            &root,
            "--then",
            "second.toml",
            "--then",
            "third.toml",
            "--",
            "python",
            "waiter.py",
        ],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let ids: Vec<&str> = stdout.lines().collect();
    assert_eq!(ids.len(), 3, "{stdout}");

    let run = |args: &[&str]| {
        let mut all = vec!["cancel", "--exp-root", &root];
        all.extend(args);
        let out = herd(&project, &all, None, Duration::from_secs(60));
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stdout}\n{stderr}");
        stdout
    };
    assert_eq!(
        run(&["first"]).trim(),
        format!("cancelled job {} (first): experiment first", ids[0])
    );
    let second = wait_status(
        &project,
        &exps,
        "second",
        "never to start",
        Duration::from_secs(60),
        |e| e["reason"] == "DependencyNeverSatisfied",
    );
    assert_eq!(second["state"], "queued");
    assert!(
        second["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("will never start"),
        "{second:#}"
    );
    let said = run(&["--chain", "second"]);
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        [
            format!("cancelled job {} (second): experiment second", ids[1]),
            format!("cancelled job {} (third): waits for {}", ids[2], ids[1]),
        ],
        "{said}"
    );
    for (name, id) in [("second", ids[1]), ("third", ids[2])] {
        let recorded = events(&exps.join(name), "cancelled");
        assert_eq!(recorded.len(), 1, "{name}: {recorded:?}");
        assert_eq!(recorded[0]["job_id"], id);
        wait_status(
            &project,
            &exps,
            name,
            "cancelled",
            Duration::from_secs(60),
            |e| e["state"] == "cancelled",
        );
    }
}
