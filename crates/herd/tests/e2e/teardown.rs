//! A worker or an agent fails on the bed: every process of the job on every node is gone
//! long before the other workers' own end (they sleep 300 s; the job's limit is 5 minutes),
//! the job fails, and the report names who failed and how (docs/launch.md, "Failure").
//! Every worker is seen in its node's process table before the fault, so "nothing left" is
//! about processes the test saw. How long the teardown took is printed, never asserted (a
//! shared 2-core bed says nothing about herd's speed).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use herd_testbed::Bed;
use serde_json::Value;

use crate::support::{herd_run, three_nodes, worker, Job};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

fn marker_time(dir: &Path, timeout: Duration) -> f64 {
    let path = dir.join("failing");
    let start = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(&path) {
            return t.trim().parse().expect("timestamp");
        }
        assert!(
            start.elapsed() < timeout,
            "the failing rank never reached its failure"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Waits for every rank of a fault.py job to write `up-RANK` ("HOST PID"), then finds each
/// of them in its node's process table (they sleep until the test says go); returns the
/// table's lines for them.
fn workers_seen(bed: &Bed, dir: &Path, marker: &str, world: u32) -> Vec<String> {
    let start = Instant::now();
    let mut ups = BTreeMap::new();
    while ups.len() < world as usize {
        for rank in 0..world {
            if let Ok(text) = std::fs::read_to_string(dir.join(format!("up-{rank}"))) {
                ups.insert(rank, text);
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "only ranks {:?} of {world} came up",
            ups.keys()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let table = bed
        .node_processes(marker)
        .expect("the nodes' process tables");
    ups.iter()
        .map(|(rank, up)| {
            let (host, pid) = up.split_once(' ').expect("up-RANK holds HOST PID");
            table
                .iter()
                .find(|l| l.starts_with(&format!("{host} {pid} ")) && l.contains("fault.py"))
                .unwrap_or_else(|| {
                    panic!(
                        "rank {rank} (pid {pid} on {host}) is not in its node's process table:\n{}",
                        table.join("\n")
                    )
                })
                .clone()
        })
        .collect()
}

/// Submits `herd run` of fault.py in `mode` on 3 nodes × 2 workers, `dir` its marker (in
/// every worker's command line) and its logs' parent.
fn fault_py_job(bed: &Bed, dir: &Path, name: &str, mode: &str) -> Job {
    let cmd = vec![
        bed.python().display().to_string(),
        worker("fault.py"),
        mode.into(),
        dir.display().to_string(),
    ];
    Job::submit(
        bed,
        dir,
        name,
        &["--nodes=3", &three_nodes(bed), "--time=5"],
        &herd_run(
            &[
                "--nproc-per-node",
                "2",
                "--log-dir",
                &dir.join("logs").display().to_string(),
            ],
            &cmd,
        ),
    )
}

/// How long after the fault every process of the job must be gone: far less than the 300 s
/// the other workers sleep and the job's 5-minute limit, so only a teardown explains it.
const GONE_DEADLINE: f64 = 60.0;

/// (c) One worker on the last node fails in `mode`; every process of the job on every node
/// is gone before the other workers' own end, the job fails, and the report names rank 5
/// and the cause.
fn fault(mode: &str, want_exit: Value) {
    let bed = Bed::require();
    let dir = bed.scratch(&format!("launch_c_{mode}")).expect("scratch");
    let marker = dir.display().to_string();
    let job = fault_py_job(&bed, &dir, &format!("fault-{mode}"), mode);
    // Every worker seen in its node's process table before the fault, so that "every
    // process gone" below is about processes this test has seen.
    let seen = workers_seen(&bed, &dir, &marker, 6);
    eprintln!(
        "fault {mode}: every worker seen before the fault:\n{}",
        seen.join("\n")
    );
    std::fs::write(dir.join("go"), "").expect("go");
    let failed_at = marker_time(&dir, Duration::from_secs(120));
    let gone_at = loop {
        let left = bed
            .node_processes(&marker)
            .expect("the nodes' process tables");
        if left.is_empty() {
            break now_secs();
        }
        assert!(
            now_secs() - failed_at < GONE_DEADLINE,
            "processes left {GONE_DEADLINE} s after the failure (no teardown: the other \
             workers sleep 300 s):\n{}",
            left.join("\n")
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let took = gone_at - failed_at;
    eprintln!("fault {mode}: every process of the job gone {took:.3} s after the failure");
    let info = bed.wait(job.id, Duration::from_secs(60)).expect("job ends");
    let output = job.output();
    assert!(
        !info.succeeded(),
        "the job must fail: {} {}\n{output}",
        info.state,
        info.exit_code
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("logs/failure.json")).expect("failure.json"),
    )
    .expect("report json");
    assert_eq!(report["rank"], 5, "{report:#}");
    assert_eq!(report["host"], bed.nodes()[2].as_str(), "{report:#}");
    assert_eq!(report["exit"], want_exit, "{report:#}");
    assert!(
        report["stderr_tail"]
            .to_string()
            .contains(&format!("rank 5 failing: {mode}")),
        "{report:#}"
    );
    assert!(
        output.contains("herd: job failed (attempt 0): rank 5"),
        "{output}"
    );
}

#[test]
fn c1_worker_exit_7_tears_down_every_node() {
    fault("exit7", serde_json::json!({"code": 7}));
}

#[test]
fn c2_worker_killed_by_sigkill_tears_down_every_node() {
    fault("sigkill", serde_json::json!({"signal": "SIGKILL"}));
}

#[test]
fn c3_worker_segfault_tears_down_every_node() {
    fault("segv", serde_json::json!({"signal": "SIGSEGV"}));
}

#[test]
fn c4_child_ignoring_sigterm_is_killed_too() {
    fault("orphan", serde_json::json!({"code": 1}));
}

/// Start 3 nodes × 2 workers that all sleep; returns the job and its marker once all are up.
fn sleeping_job(bed: &Bed, name: &str) -> (Job, PathBuf) {
    let dir = bed.scratch(name).expect("scratch");
    let job = fault_py_job(bed, &dir, name, "none");
    job.wait_output(Duration::from_secs(120), "6 workers up", |out| {
        out.matches(" up on pid ").count() == 6
    });
    (job, dir)
}

/// The `herd launch` agent on `node` (its command line carries the marker too).
fn agent_pid(bed: &Bed, node: &str, marker: &str) -> i32 {
    let procs = bed
        .node_processes(marker)
        .expect("the nodes' process tables");
    let agent = procs
        .iter()
        .find(|l| l.starts_with(&format!("{node} ")) && l.contains(" launch "))
        .unwrap_or_else(|| panic!("no agent on {node} among:\n{}", procs.join("\n")));
    agent
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("pid")
}

/// Waits until no process of the job (`marker` in its command line) is left on any node;
/// returns how long that took (seconds). Fails past [`GONE_DEADLINE`].
fn all_gone(bed: &Bed, marker: &str) -> f64 {
    let start = now_secs();
    loop {
        let left = bed
            .node_processes(marker)
            .expect("the nodes' process tables");
        let took = now_secs() - start;
        if left.is_empty() {
            return took;
        }
        assert!(
            took < GONE_DEADLINE,
            "processes left {GONE_DEADLINE} s after the agent died (no teardown: the \
             workers sleep 300 s):\n{}",
            left.join("\n")
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A follower agent dies (SIGKILL, as when its node fails): its workers die with it, the
/// leader counts the node as lost, ends the job everywhere and says which node.
#[test]
fn g1_lost_follower_ends_the_job() {
    let bed = Bed::require();
    let (job, dir) = sleeping_job(&bed, "launch_g1");
    let marker = dir.display().to_string();
    let node = bed.nodes()[2].clone();
    let pid = agent_pid(&bed, &node, &marker);
    assert!(Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill")
        .success());
    let took = all_gone(&bed, &marker);
    eprintln!("lost follower: every process gone {took:.3} s after its agent was killed");
    let info = bed.wait(job.id, Duration::from_secs(60)).expect("job ends");
    assert!(!info.succeeded(), "{}", job.output());
    let report = std::fs::read_to_string(dir.join("logs/failure.json")).expect("failure.json");
    assert!(
        report.contains(&format!("lost node 2 ({node})")),
        "{report}"
    );
}

/// A `herd run` that is asked to stop (SIGTERM, which it forwards) if the test fails early.
struct TermOnDrop(std::process::Child);

impl Drop for TermOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .status();
            let _ = self.0.wait();
        }
    }
}

/// Processes on this machine whose command line contains `needle`: `pid cmdline` lines.
fn local_processes(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(raw) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(format!("{name} {}", cmdline.trim_end()));
            }
        }
    }
    found
}

/// The leader agent dies: the followers tear their workers down and exit 1 instead of
/// hanging. (Under srun, `--kill-on-bad-exit` ends the followers anyway; this runs the
/// agents without srun, as `herd run` does on one machine, so only herd's own logic acts.)
#[test]
fn g2_lost_leader_stops_the_followers() {
    let bed = Bed::require();
    let dir = bed.scratch("launch_g2").expect("scratch");
    let marker = dir.display().to_string();
    let mut run = TermOnDrop(
        Command::new(HERD)
            .args(["run", "--nodes", "3", "--nproc-per-node", "2", "--log-dir"])
            .arg(dir.join("logs"))
            .arg("--")
            .args([
                bed.python().display().to_string(),
                worker("fault.py"),
                "none".into(),
                marker.clone(),
            ])
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("herd run"),
    );
    let start = Instant::now();
    let leader = loop {
        let procs = local_processes(&marker);
        let workers = procs.iter().filter(|l| !l.contains(HERD)).count();
        let leader = procs
            .iter()
            .find(|l| l.contains(" launch ") && l.contains("--local-node-rank 0 "));
        if let (6, Some(l)) = (workers, leader) {
            break l
                .split_whitespace()
                .next()
                .and_then(|p| p.parse::<i32>().ok())
                .expect("pid");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "workers did not start:\n{}",
            procs.join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(Command::new("kill")
        .args(["-9", &leader.to_string()])
        .status()
        .expect("kill")
        .success());
    let killed = now_secs();
    // The followers end instead of hanging: herd run ends long before its workers' 300 s.
    let status = loop {
        if let Some(status) = run.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            now_secs() - killed < GONE_DEADLINE,
            "herd run still runs {GONE_DEADLINE} s after its leader agent was killed:\n{}",
            local_processes(&marker).join("\n")
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    let took = loop {
        let left = local_processes(&marker);
        if left.is_empty() {
            break now_secs() - killed;
        }
        assert!(
            now_secs() - killed < GONE_DEADLINE,
            "left {GONE_DEADLINE} s after the leader died (the workers sleep 300 s):\n{}",
            left.join("\n")
        );
        std::thread::sleep(Duration::from_millis(25));
    };
    eprintln!("lost leader: every process gone {took:.3} s after the leader agent was killed");
    let mut stderr = String::new();
    std::io::Read::read_to_string(run.0.stderr.as_mut().expect("stderr"), &mut stderr)
        .expect("stderr");
    assert!(!status.success(), "herd run must fail:\n{stderr}");
    assert_eq!(
        stderr.matches("lost the leader").count(),
        2,
        "both followers say so:\n{stderr}"
    );
}
