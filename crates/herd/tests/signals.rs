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

/// `herd run` and its workers, ended whatever happens to the test.
struct Run {
    herd: Child,
    worker: Vec<String>,
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.herd.try_wait() {
            signal(self.herd.id() as i32, "TERM");
            let _ = self.herd.wait();
        }
        let worker: Vec<&str> = self.worker.iter().map(String::as_str).collect();
        for pid in processes(&worker) {
            signal(pid, "KILL");
        }
    }
}

/// SIGHUP (the terminal or ssh session of a `herd run` closes, `scancel --signal=HUP`)
/// ends the job like SIGTERM: herd run passes it on, every agent forwards it and tears its
/// workers down, herd run exits 1 instead of dying by the signal, and no worker is left.
#[test]
fn sighup_tears_the_job_down_like_sigterm() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A duration no other process on this machine sleeps for: it names this test's workers.
    let secs = format!("1000.{}", std::process::id());
    let worker = vec!["sleep".to_owned(), secs.clone()];
    let argv = ["sleep", secs.as_str()];
    let mut cmd = Command::new(HERD);
    cmd.args(["run", "--nodes", "2", "--nproc-per-node", "2", "--log-dir"])
        .arg(dir.path().join("logs"))
        .args(["--", "sleep", &secs])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        // A file, not a pipe: agents that outlive herd run must not keep the test waiting.
        .stderr(std::fs::File::create(dir.path().join("stderr")).expect("stderr file"));
    for var in ["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_STEP_ID"] {
        cmd.env_remove(var);
    }
    let mut run = Run {
        herd: cmd.spawn().expect("herd run starts"),
        worker,
    };
    let start = Instant::now();
    while processes(&argv).len() < 4 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the 4 workers did not start: {:?}",
            processes(&argv)
        );
        assert!(
            run.herd.try_wait().expect("try_wait").is_none(),
            "herd run ended before its workers started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    signal(run.herd.id() as i32, "HUP");
    let sent = Instant::now();
    let status = loop {
        if let Some(s) = run.herd.try_wait().expect("try_wait") {
            break s;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "herd run still runs 10 s after SIGHUP"
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
    assert_eq!(
        (status.code(), status.signal()),
        (Some(1), None),
        "herd run exits 1, not killed by SIGHUP:\n{stderr}"
    );
    // The agents end their workers before they exit; allow the kernel a moment.
    let exited = Instant::now();
    while !processes(&argv).is_empty() && exited.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(25));
    }
    let left = processes(&argv);
    assert!(
        left.is_empty(),
        "workers left 2 s after herd run exited: {left:?}\n{stderr}"
    );
    assert!(
        stderr.contains("received SIGHUP: job cancelled"),
        "the report says why:\n{stderr}"
    );
    eprintln!(
        "SIGHUP: herd run and every worker gone {:.3} s after the signal",
        sent.elapsed().as_secs_f64()
    );
}
