//! Signals reaching `herd run` on this machine (no SLURM, no test bed): the workers are
//! plain `sleep`s, so nothing but herd's own handling can end them.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

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
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, t)| t.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if !zombie
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

/// `herd run` of 2 simulated nodes x 2 `sleep` workers, ended whatever happens to the test.
struct Run {
    herd: Child,
    dir: tempfile::TempDir,
    /// The workers' command line: a duration no other process here sleeps for.
    worker: [String; 2],
}

impl Run {
    /// Start it (through `wrapper`, such as `nohup`, when given) and wait for its 4 workers.
    fn start(wrapper: Option<&str>) -> Run {
        let dir = tempfile::tempdir().expect("temp dir");
        let worker = ["sleep".to_owned(), format!("1000.{}", std::process::id())];
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
        };
        let start = Instant::now();
        while run.workers().len() < 4 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the 4 workers did not start: {:?}\n{}",
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
        processes(&[&self.worker[0], &self.worker[1]])
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

    /// Every worker is gone (the agents end them before they exit; the kernel may take a
    /// moment to remove them).
    fn assert_no_worker_left(&self) {
        let start = Instant::now();
        while !self.workers().is_empty() && start.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(25));
        }
        let left = self.workers();
        assert!(
            left.is_empty(),
            "workers left 2 s after herd run exited: {left:?}\n{}",
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
/// ends the job like SIGTERM: herd run passes it on, every agent forwards it and tears its
/// workers down, herd run exits 1 instead of dying by the signal, and no worker is left.
#[test]
fn sighup_tears_the_job_down_like_sigterm() {
    let mut run = Run::start(None);
    run.signal("HUP");
    let sent = Instant::now();
    let status = run.wait(Duration::from_secs(10));
    let took = sent.elapsed().as_secs_f64();
    let stderr = run.stderr();
    assert_eq!(
        (status.code(), status.signal()),
        (Some(1), None),
        "herd run exits 1, not killed by SIGHUP:\n{stderr}"
    );
    run.assert_no_worker_left();
    assert!(
        stderr.contains("received SIGHUP: job cancelled"),
        "the report says why:\n{stderr}"
    );
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
    let status = run.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{}", run.stderr());
    run.assert_no_worker_left();
    assert!(
        run.stderr().contains("received SIGTERM: job cancelled"),
        "{}",
        run.stderr()
    );
}
