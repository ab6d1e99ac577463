//! Signals reaching `herd run` on this machine (no SLURM, no test bed): the workers are
//! plain `sleep`s, so nothing but herd's own handling can end them. And the one order of a
//! SLURM cancel the bed cannot produce on demand, a worker ending on the job's signal
//! before any agent has its own copy: `herd launch` in a one-node allocation described by
//! its variables, with a `scontrol` that says what SLURM would.
//!
//! Deadlines here tell herd's handling from its absence (a signal never passed on, a
//! worker never ended, a `herd run` that never exits: each would wait for ever, the workers
//! sleep 1000 s), never how fast herd is on a loaded machine; the times seen are printed.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

/// Whether process `pid` runs (exists and is no zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, t)| !t.trim_start().starts_with('Z'))
    })
}

/// Pids of live processes whose command line is exactly `argv`.
fn processes(argv: &[&str]) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = raw
            .strip_suffix(b"\0")
            .unwrap_or(&raw)
            .split(|&b| b == 0)
            .collect();
        if alive(pid)
            && args.len() == argv.len()
            && args.iter().zip(argv).all(|(a, b)| *a == b.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

fn signal(pid: i32, name: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status();
}

/// `herd run` of 2 simulated nodes x 2 workers, ended whatever happens to the test.
struct Run {
    herd: Child,
    dir: tempfile::TempDir,
    /// The workers' command line, which no other process here has.
    worker: Vec<String>,
    /// A folder the workers write into, kept until the run is dropped.
    keep: Option<tempfile::TempDir>,
}

/// A worker that writes each signal it gets (USR1, USR2, TERM, INT, HUP) as a line into
/// `DIR/signals-RANK`, and exits 0 after TERM, INT or HUP; `DIR/ready-RANK` (its pid) once its traps
/// are set.
const RECORDER: &str = r#"dir=$1
log="$dir/signals-$RANK"
trap 'echo USR1 >> "$log"' USR1
trap 'echo USR2 >> "$log"' USR2
trap 'echo TERM >> "$log"; exit 0' TERM
trap 'echo INT >> "$log"; exit 0' INT
trap 'echo HUP >> "$log"; exit 0' HUP
echo $$ > "$dir/ready-$RANK"
while :; do sleep 0.05 & wait $!; done
"#;

impl Run {
    /// Start it (through `wrapper`, such as `nohup`, when given) with `sleep` workers and
    /// wait for its 4 workers.
    fn start(wrapper: Option<&str>) -> Run {
        let worker = vec!["sleep".to_owned(), format!("1000.{}", std::process::id())];
        Run::start_with(wrapper, worker, |_| true)
    }

    /// Start it with [`RECORDER`] workers and wait until each has set its traps.
    fn start_recording() -> Run {
        let tag = format!("recorder-{}", std::process::id());
        let dir = tempfile::tempdir().expect("temp dir");
        let out = dir.path().join("signals");
        std::fs::create_dir(&out).expect("mkdir");
        let worker = vec![
            "bash".to_owned(),
            "-c".to_owned(),
            RECORDER.to_owned(),
            tag,
            out.display().to_string(),
        ];
        let mut run = Run::start_with(None, worker, move |_| {
            (0..4).all(|r| out.join(format!("ready-{r}")).exists())
        });
        run.keep = Some(dir);
        run
    }

    /// The lines rank `rank`'s [`RECORDER`] wrote.
    fn recorded(&self, rank: u32) -> Vec<String> {
        let dir = self.keep.as_ref().expect("a recording run").path();
        std::fs::read_to_string(dir.join(format!("signals/signals-{rank}")))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// How many of the 4 [`RECORDER`]s still run, by the pids they wrote (a count of
    /// command lines would also count a fork of bash for `sleep`, before its exec).
    fn recorders_alive(&self) -> usize {
        let dir = self.keep.as_ref().expect("a recording run").path();
        (0..4)
            .filter_map(|r| std::fs::read_to_string(dir.join(format!("signals/ready-{r}"))).ok())
            .filter_map(|pid| pid.trim().parse::<i32>().ok())
            .filter(|&pid| alive(pid))
            .count()
    }

    /// Waits (30 s at most: a signal not passed on never comes) until every rank recorded
    /// `name` `times` times.
    fn wait_recorded(&self, name: &str, times: usize) {
        let start = Instant::now();
        loop {
            let counts: Vec<usize> = (0..4)
                .map(|r| self.recorded(r).iter().filter(|l| *l == name).count())
                .collect();
            if counts.iter().all(|&c| c == times) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{name} recorded {counts:?} times by ranks 0-3 after 30 s, want {times} each:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start it with `worker`, and wait until its 4 workers run and `ready(&run)` holds.
    fn start_with(wrapper: Option<&str>, worker: Vec<String>, ready: impl Fn(&Run) -> bool) -> Run {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cmd = match wrapper {
            Some(w) => {
                let mut c = Command::new(w);
                c.arg(HERD);
                c
            }
            None => Command::new(HERD),
        };
        cmd.args(["run", "--nodes", "2", "--nproc-per-node", "2", "--log-dir"])
            .arg(dir.path().join("logs"))
            .arg("--")
            .args(&worker)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            // A file, not a pipe: agents that outlive herd run must not keep the test waiting.
            .stderr(std::fs::File::create(dir.path().join("stderr")).expect("stderr file"));
        for var in ["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID"] {
            cmd.env_remove(var);
        }
        let mut run = Run {
            herd: cmd.spawn().expect("herd run starts"),
            dir,
            worker,
            keep: None,
        };
        let start = Instant::now();
        while run.workers().len() < 4 || !ready(&run) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the 4 workers did not start (or get ready): {:?}\n{}",
                run.workers(),
                run.stderr()
            );
            assert!(
                run.herd.try_wait().expect("try_wait").is_none(),
                "herd run ended before its workers started:\n{}",
                run.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        run
    }

    fn workers(&self) -> Vec<i32> {
        let argv: Vec<&str> = self.worker.iter().map(String::as_str).collect();
        processes(&argv)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    fn signal(&self, name: &str) {
        signal(self.herd.id() as i32, name);
    }

    /// Its exit status, within `limit`.
    fn wait(&mut self, limit: Duration) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.herd.try_wait().expect("try_wait") {
                return s;
            }
            assert!(
                start.elapsed() < limit,
                "herd run still runs after {limit:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// herd run ended as a job cancelled by `SIGNAL` (`SIGTERM`…) ends: exit 1 (not killed
    /// by the signal), the report saying so, and no worker left.
    fn assert_cancelled_by(&self, status: std::process::ExitStatus, signal: &str) {
        let stderr = self.stderr();
        assert_eq!(
            (status.code(), status.signal()),
            (Some(1), None),
            "herd run exits 1 on {signal}, not killed by it:\n{stderr}"
        );
        self.assert_no_worker_left();
        assert!(
            stderr.contains(&format!("received {signal}: job cancelled")),
            "the report says why:\n{stderr}"
        );
    }

    /// Every worker is gone (the agents end them before they exit; the kernel may take a
    /// moment to remove them; a worker left behind would sleep on for 1000 s).
    fn assert_no_worker_left(&self) {
        let start = Instant::now();
        while !self.workers().is_empty() && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(25));
        }
        let left = self.workers();
        assert!(
            left.is_empty(),
            "workers left 30 s after herd run exited: {left:?}\n{}",
            self.stderr()
        );
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.herd.try_wait() {
            self.signal("TERM");
            let _ = self.herd.wait();
        }
        for pid in self.workers() {
            signal(pid, "KILL");
        }
    }
}

/// SIGHUP (the terminal or ssh session of a `herd run` closes, `scancel --signal=HUP`)
/// ends the job like SIGTERM: herd run passes it on, every worker on every node gets it
/// (and nothing else before it), herd run exits 1 instead of dying by the signal, and no
/// worker is left.
#[test]
fn sighup_tears_the_job_down_like_sigterm() {
    let mut run = Run::start_recording();
    run.signal("HUP");
    let sent = Instant::now();
    let status = run.wait(Duration::from_secs(60));
    let took = sent.elapsed().as_secs_f64();
    run.assert_cancelled_by(status, "SIGHUP");
    for rank in 0..4 {
        assert_eq!(
            run.recorded(rank),
            ["HUP"],
            "rank {rank} got the signal itself"
        );
    }
    eprintln!("SIGHUP: herd run and every worker gone {took:.3} s after the signal");
}

/// Under `nohup` SIGHUP stays ignored, as before herd handled it: the job goes on, and
/// SIGTERM still ends it.
#[test]
fn sighup_under_nohup_is_ignored() {
    let mut run = Run::start(Some("nohup"));
    run.signal("HUP");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        run.herd.try_wait().expect("try_wait").is_none(),
        "herd run ended on SIGHUP under nohup:\n{}",
        run.stderr()
    );
    assert_eq!(run.workers().len(), 4, "every worker still runs");
    run.signal("TERM");
    let status = run.wait(Duration::from_secs(60));
    run.assert_cancelled_by(status, "SIGTERM");
}

/// SIGUSR1 and SIGUSR2 (SLURM's warning, `scancel --signal`) reach every worker, each
/// once, and the job goes on; then SIGTERM (`scancel`, the time limit's end) reaches every
/// worker too and ends the job: herd run exits 1, saying why, and no worker is left, even
/// though every worker exited 0 on it.
#[test]
fn usr1_and_usr2_reach_every_worker_and_sigterm_ends_the_job() {
    let mut run = Run::start_recording();
    run.signal("USR1");
    run.wait_recorded("USR1", 1);
    run.signal("USR2");
    run.wait_recorded("USR2", 1);
    run.wait_recorded("USR1", 1);
    assert!(
        run.herd.try_wait().expect("try_wait").is_none(),
        "herd run ended on SIGUSR1 or SIGUSR2:\n{}",
        run.stderr()
    );
    assert_eq!(run.recorders_alive(), 4, "every worker still runs");
    run.signal("TERM");
    let status = run.wait(Duration::from_secs(60));
    run.wait_recorded("TERM", 1);
    run.assert_cancelled_by(status, "SIGTERM");
    for rank in 0..4 {
        assert_eq!(run.recorded(rank), ["USR1", "USR2", "TERM"], "rank {rank}");
    }
}

/// SIGINT (Ctrl-C on a `herd run`) is forwarded to every worker and ends the job like
/// SIGTERM: exit 1, the reason said, no worker left.
#[test]
fn sigint_reaches_every_worker_and_ends_the_job() {
    let mut run = Run::start_recording();
    run.signal("INT");
    let status = run.wait(Duration::from_secs(60));
    run.assert_cancelled_by(status, "SIGINT");
    for rank in 0..4 {
        assert_eq!(run.recorded(rank), ["INT"], "rank {rank}");
    }
}

/// `herd launch` of 2 workers running `sh -c SCRIPT` in a one-node allocation (job 7)
/// described by SLURM's variables, with `scontrol` a script that logs its arguments and
/// prints `job` as `scontrol show job -o` would. Returns herd's exit status, its stderr and
/// the `scontrol` calls.
fn launch_ending(script: &str, job: &str) -> (std::process::ExitStatus, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let calls = dir.path().join("calls");
    let scontrol = bin.join("scontrol");
    std::fs::write(
        &scontrol,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\necho '{job}'\n",
            calls.display()
        ),
    )
    .expect("scontrol");
    let mut perms = std::fs::metadata(&scontrol).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&scontrol, perms).expect("chmod");
    let out = Command::new(HERD)
        .args([
            "launch",
            "--nproc-per-node",
            "2",
            "--max-requeues",
            "3",
            "--log-dir",
        ])
        .arg(dir.path().join("logs"))
        .args(["--", "sh", "-c", script])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .envs([
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "n1"),
            ("SLURM_JOB_NUM_NODES", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_NODELIST", "n1"),
            ("SLURM_STEP_TASKS_PER_NODE", "1"),
            ("SLURM_PROCID", "0"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_NODEID", "0"),
            ("HERD_JOB_SECRET", "0123456789abcdef0123456789abcdef"),
        ])
        .stdin(Stdio::null())
        .output()
        .expect("herd launch runs");
    let called = std::fs::read_to_string(&calls).unwrap_or_default();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
        called,
    )
}

/// `scontrol show job -o` of a job SLURM is cancelling, from the test bed (Slurm 22.05),
/// shortened; and of one running with no end in sight.
const COMPLETING: &str = "JobId=7 JobName=wrap UserId=root(0) GroupId=root(0) JobState=COMPLETING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A PreemptTime=None SuspendTime=None Partition=gpu NodeList=n1 NumNodes=1";
const RUNNING: &str = "JobId=7 JobName=wrap UserId=root(0) GroupId=root(0) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A PreemptTime=None SuspendTime=None Partition=gpu NodeList=n1 NumNodes=1";

/// A worker killed by the SIGTERM of a `scancel`, or one that caught it and exited 143 (a
/// shell with a trap), before any agent handled its own copy: herd asks SLURM once, which
/// is ending the job, and ends it as cancelled, not as that worker's failure.
#[test]
fn a_worker_ended_by_slurms_sigterm_before_the_agents_ends_the_job_as_cancelled() {
    for (script, said) in [
        ("exit 143", "exited with code 143"),
        ("kill -TERM $$", "killed by SIGTERM"),
    ] {
        let (status, stderr, calls) = launch_ending(script, COMPLETING);
        assert_eq!(status.code(), Some(1), "{script}: {stderr}");
        assert!(
            stderr.contains("herd: 2 workers on 1 node, master 127.0.0.1\n"),
            "{stderr}"
        );
        assert_eq!(
            calls.lines().collect::<Vec<_>>(),
            ["show job -o 7"],
            "{script}: {stderr}"
        );
        let cancel = format!("{said} with the rest of the job, which SLURM is ending");
        assert!(
            stderr.contains("job cancelled: rank ") && stderr.contains(&cancel),
            "{script}: {stderr}"
        );
    }
}

/// slurmctld chose the job for preemption (`PreemptTime` set) and SLURM's SIGTERM killed
/// a worker before any agent handled its own: the job is stopped and requeued (its own id,
/// eligible 5 s later), not failed, and the step ends 0 for its next run to go on.
#[test]
fn a_worker_killed_by_a_preemptions_sigterm_before_the_agents_requeues_the_job() {
    let preempted = RUNNING.replace("PreemptTime=None", "PreemptTime=2026-12-02T04:00:00");
    let (status, stderr, calls) = launch_ending("kill -TERM $$", &preempted);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        [
            "show job -o 7",
            // Asked again right before the requeue: was it requeued by its own code?
            "show job -o 7",
            "requeue 7",
            "update JobId=7 StartTime=now+5"
        ],
        "{stderr}"
    );
    assert!(
        stderr.contains("preemption: rank ")
            && stderr.contains("killed by SIGTERM with the rest of the job; the job is requeued")
            && stderr.contains("requeuing job 7 (1 of 3 requeues for preemption)"),
        "{stderr}"
    );
}

/// The job's own code requeued it (Lightning's `SLURMEnvironment`, a user's `scontrol
/// requeue`: SLURM counts the requeue, `Restarts=1`, and ends the job's tasks): the worker
/// killed by that SIGTERM is the requeue, taken as the attempt's. herd does not requeue
/// again (no `requeue 7`), makes the job eligible at once, and the step ends 0.
#[test]
fn a_job_requeued_by_its_own_code_is_not_requeued_again_and_is_made_eligible() {
    let requeued = COMPLETING.replace("Restarts=0", "Restarts=1");
    let (status, stderr, calls) = launch_ending("kill -TERM $$", &requeued);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["show job -o 7", "update JobId=7 StartTime=now+5"],
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "job 7 was requeued by its own code; herd does not requeue it again and makes it eligible now (1 of 3 requeues for the job's own requeue)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("cancelled"), "{stderr}");
}

/// The same exit while SLURM is not ending the job (a `kill -TERM` of one worker) stays
/// that worker's failure; any other code is the worker's own without asking SLURM.
#[test]
fn a_worker_exiting_143_or_1_otherwise_is_its_own_failure() {
    let (status, stderr, calls) = launch_ending("exit 143", RUNNING);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["show job -o 7"],
        "{stderr}"
    );
    assert!(
        !stderr.contains("cancelled") && stderr.contains("exited with code 143"),
        "{stderr}"
    );
    let (status, stderr, calls) = launch_ending("exit 1", COMPLETING);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert_eq!(calls, "", "no scontrol for a worker's own code: {stderr}");
    assert!(
        !stderr.contains("cancelled") && stderr.contains("exited with code 1"),
        "{stderr}"
    );
}
