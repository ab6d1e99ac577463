//! Spare nodes on the bed: a node that freezes is replaced by a spare inside the same
//! allocation, with no trip through the queue.

use std::path::Path;
use std::time::{Duration, Instant};

use herd_testbed::{read_lossy, Bed};
use serde_json::Value;

use crate::staying_alive::{args, checksum, project, reference_run, stop, wait_final, wait_for};
use crate::support::{events, job_id, names, submit, timeline};

/// 2 nodes × 2 workers of train_ddp with one spare: node 1's agent and workers freeze
/// (SIGSTOP) after step 15; the leader finds it lost, starts the next attempt at once with
/// the spare in its place, from the last checkpoint, in the same job: no requeue, a
/// `replace` event naming both nodes, every worker of that attempt started warm (the
/// spare's from the standbys it made while standing by, the leader node's although the
/// node list changed), the job COMPLETED (exit 0, although the frozen agent was killed)
/// with the checksum of an uninterrupted run, and nothing left running.
#[test]
fn a_frozen_node_is_replaced_by_a_spare_in_the_same_job() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "spare_frozen");
    let exp_root = exps.display().to_string();
    let train = [
        "python",
        "train_ddp.py",
        "--steps",
        "60",
        "--log-every",
        "1",
        "--ckpt-every",
        "10",
    ];
    let mut slow: Vec<&str> = train.to_vec();
    slow.extend(["--step-time", "0.3"]);
    let job = job_id(&submit(
        &bed,
        &project,
        &args(
            &[
                "-J",
                "spare",
                "--nodes",
                "2",
                "--spare-nodes",
                "1",
                "--gpus-per-node",
                "2",
                "--max-requeues",
                "1",
            ],
            &exp_root,
            &slow,
        ),
    ));
    let exp = exps.join("spare");
    wait_for(
        &exp.join("logs/attempt-0/rank-2.out"),
        "rank=2 step=15 ",
        Duration::from_secs(240),
    );
    let all = timeline(&exp);
    let rendezvous = &events(&all, "rendezvous")[0];
    let host_of = |node: usize| {
        rendezvous["nodes"][node]["host"]
            .as_str()
            .expect("host")
            .to_owned()
    };
    let (frozen_host, spare_host) = (
        host_of(1),
        rendezvous["spares"][0]
            .as_str()
            .expect("a spare")
            .to_owned(),
    );
    standbys_ready(&bed, &spare_host, &exp, 2);
    standbys_ready(&bed, &host_of(0), &exp, 2);
    stop(&bed, &frozen_host, &exp, "train_ddp.py --steps 60 ");
    let stopped = Instant::now();
    // Training again: a step logged by the next attempt's worker on the spare.
    wait_for(
        &exp.join("logs/attempt-1/rank-2.out"),
        "rank=2 step=",
        Duration::from_secs(90),
    );
    eprintln!(
        "freeze → training again on the spare: {:.1} s",
        stopped.elapsed().as_secs_f64()
    );
    let reference = reference_run(&bed, &project, &exps, &train);

    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    assert!(info.succeeded(), "the job ends COMPLETED, exit 0: {info:?}");
    let all = timeline(&exp);
    assert!(events(&all, "requeue").is_empty(), "{:?}", names(&all));
    assert_eq!(
        events(&all, "started").len(),
        1,
        "one allocation: {:?}",
        names(&all)
    );
    let replace = events(&all, "replace");
    assert_eq!(replace.len(), 1, "{:?}", names(&all));
    assert_eq!(replace[0]["node"], Value::from(frozen_host.clone()));
    assert_eq!(replace[0]["by"], Value::from(spare_host.clone()));
    let blame = events(&all, "blame");
    assert_eq!(blame.len(), 1, "{:?}", names(&all));
    assert_eq!(blame[0]["node"], Value::from(frozen_host.clone()));
    assert_eq!(blame[0]["kind"], "lost");
    // Attempt 1 ran on the leader's node and the spare, ranks 2 and 3 on the spare.
    let second = &events(&all, "attempt_started")[1];
    assert_eq!(
        second["nodes"],
        Value::from(vec![host_of(0), spare_host.clone()]),
        "{second:?}"
    );
    assert!(
        read_lossy(exp.join("logs/attempt-1/rank-2.out")).contains("rank=2 step=11 "),
        "attempt 1 resumes after the checkpoint at step 10"
    );
    let manifest: Value =
        serde_json::from_str(&read_lossy(exp.join("manifest.json"))).expect("manifest");
    let runs = manifest["submissions"][0]["runs"].as_array().expect("runs");
    let ends: Vec<(Value, Value)> = runs
        .iter()
        .map(|r| (r["cause"].clone(), r["then"].clone()))
        .collect();
    assert_eq!(
        ends,
        [
            (Value::from("node_failure"), Value::from("replace")),
            (Value::Null, Value::from("end"))
        ],
        "{runs:#?}"
    );
    assert_eq!(
        runs[1]["nodes"],
        Value::from(vec![host_of(0), spare_host.clone()])
    );
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert_eq!(checksum(&out), checksum(&reference));
    let err = read_lossy(exp.join(format!("logs/{job}.err")));
    for (host, ranks) in [(host_of(0), "0, 1"), (spare_host, "2, 3")] {
        assert!(
            err.contains(&format!(
                "herd: {host}: ranks {ranks} started warm (from standbys"
            )),
            "{host}'s workers of attempt 1 started warm:\n{err}"
        );
    }
    let left = bed
        .node_processes("train_ddp.py")
        .expect("the nodes' process tables");
    assert!(
        left.is_empty(),
        "nothing of the frozen attempt is left: {left:?}"
    );
}

/// Waits (up to 3 minutes) until the agent of `exp` on `host` has `n` standbys whose
/// imports are done: each has written what they read into its record (a file of the
/// agent's without a name, whole once it ends with a NUL). A standby still importing starts its
/// worker cold, and how fast the bed imports torch is not what the test is about.
fn standbys_ready(bed: &Bed, host: &str, exp: &Path, n: usize) {
    let logs = exp.join("logs").display().to_string();
    let until = Instant::now() + Duration::from_secs(180);
    loop {
        let agents: Vec<String> = bed
            .node_processes(&logs)
            .expect("the nodes' process tables")
            .into_iter()
            .filter(|l| {
                let mut words = l.split_whitespace();
                words.next() == Some(host)
                    && words.nth(1).is_some_and(|p| p.ends_with("/herd"))
                    && l.contains(" launch ")
            })
            .collect();
        let ready = agents
            .iter()
            .filter_map(|l| l.split_whitespace().nth(1))
            .flat_map(|pid| {
                std::fs::read_dir(format!("/proc/{pid}/fd"))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .filter(|fd| {
                // A file without a name (O_TMPFILE): `/dev/shm/#INODE (deleted)`.
                std::fs::read_link(fd.path()).is_ok_and(|to| {
                    let to = to.to_string_lossy();
                    to.contains("/#") && to.ends_with(" (deleted)")
                }) && std::fs::read(fd.path()).is_ok_and(|text| text.ends_with(b"\0"))
            })
            .count();
        if ready >= n {
            return;
        }
        assert!(
            Instant::now() < until,
            "{host}'s agent has {ready} of {n} standbys done importing: {agents:#?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A worker that fails only on one host (as on a node with a broken GPU), with a spare and
/// two restarts: its node's workers fail twice in a row, so the node is blamed and the
/// spare takes its place; the job finishes in the same allocation without it.
#[test]
fn a_node_whose_workers_fail_twice_is_blamed_and_replaced() {
    let bed = Bed::require();
    let (project, exps) = crate::support::project_with(
        &bed,
        "spare_blame",
        &[("crates/herd/tests/e2e/workers/bad_host.py", "bad_host.py")],
    );
    let exp_root = exps.display().to_string();
    // The bed's nodes in order: the leader, node 1 (the broken one), the spare.
    let nodes = bed.nodes().to_vec();
    let bad = nodes[1].clone();
    let job = job_id(&submit(
        &bed,
        &project,
        &args(
            &[
                "-J",
                "blame",
                "--nodes",
                "2",
                "--spare-nodes",
                "1",
                "--gpus-per-node",
                "2",
                "--max-restarts",
                "2",
            ],
            &exp_root,
            &["python", "bad_host.py", &bad],
        ),
    ));
    let exp = exps.join("blame");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    let all = timeline(&exp);
    assert!(info.succeeded(), "{info:?}\n{:?}", names(&all));
    let rendezvous = &events(&all, "rendezvous")[0];
    assert_eq!(
        rendezvous["nodes"][1]["host"],
        Value::from(bad.clone()),
        "node 1 is the broken host: {rendezvous:?}"
    );
    // Two failures on it (attempt 0, then its restart), then the blame and the spare.
    let failed = events(&all, "failed");
    assert_eq!(failed.len(), 2, "{:?}", names(&all));
    let blame = events(&all, "blame");
    assert_eq!(blame.len(), 1, "{:?}", names(&all));
    assert_eq!(blame[0]["node"], Value::from(bad.clone()));
    assert_eq!(blame[0]["kind"], "failures");
    assert_eq!(blame[0]["attempt"], 1, "blamed at its second failure");
    let replace = events(&all, "replace");
    assert_eq!(replace.len(), 1, "{:?}", names(&all));
    assert_eq!(replace[0]["node"], Value::from(bad.clone()));
    assert_eq!(replace[0]["by"], Value::from(nodes[2].clone()));
    assert!(events(&all, "requeue").is_empty(), "{:?}", names(&all));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    // Attempt 2 ran on the leader's node and the spare, and finished.
    assert_eq!(
        events(&all, "attempt_started")[2]["nodes"],
        Value::from(vec![nodes[0].clone(), nodes[2].clone()])
    );
    for rank in 0..4 {
        assert!(
            out.contains(&format!("rank={rank} done total=50")),
            "rank {rank} finished:\n{out}"
        );
    }
    // Remembered: the user's record has the blame (this test's own record), `herd nodes`
    // lists it, and the next submit leaves the node out and says so.
    let record = std::env::var("HERD_NODE_RECORD").expect("the bed sets a record per test");
    let lines = read_lossy(&record);
    assert!(
        lines.contains(&format!("\"node\":\"{bad}\"")) && lines.contains("\"kind\":\"failures\""),
        "{record}: {lines}"
    );
    let nodes = std::process::Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("nodes")
        .output()
        .expect("herd nodes runs");
    let listed = String::from_utf8_lossy(&nodes.stdout);
    assert!(
        nodes.status.success() && listed.lines().any(|l| l.starts_with(&bad)),
        "{listed}{}",
        String::from_utf8_lossy(&nodes.stderr)
    );
    let next = submit(
        &bed,
        &project,
        &args(
            &["-J", "next", "--nodes", "2", "--dry-run"],
            &exp_root,
            &["python", "bad_host.py", "none"],
        ),
    );
    let said = String::from_utf8_lossy(&next.stderr);
    let script = String::from_utf8_lossy(&next.stdout);
    assert!(next.status.success(), "{said}");
    assert!(
        said.contains(&format!("leaving out {bad} (blamed")),
        "the next submit says it leaves {bad} out: {said}"
    );
    assert!(
        script.contains(&format!("#SBATCH --exclude={bad}")),
        "{script}"
    );
}

/// Hides the venv's packages from one node (an empty folder bound over its site-packages
/// in that node's mount namespace: the node's venv is broken, the others' are not); undone
/// when dropped.
pub(crate) struct BrokenVenv {
    slurmd: String,
    site: String,
}

impl BrokenVenv {
    pub(crate) fn on(bed: &Bed, node: &str, empty: &std::path::Path) -> BrokenVenv {
        let out = std::process::Command::new(bed.python())
            .args(["-c", "import site; print(site.getsitepackages()[0])"])
            .output()
            .expect("the venv's python runs");
        let site = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(site.ends_with("site-packages"), "{site}");
        let slurmd = bed
            .node_processes("slurmd")
            .expect("the nodes' process tables")
            .into_iter()
            .find(|l| l.starts_with(&format!("{node} ")) && l.contains("slurmd"))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
            .unwrap_or_else(|| panic!("no slurmd on {node}"));
        std::fs::create_dir_all(empty).expect("an empty folder");
        let ok = std::process::Command::new("nsenter")
            .args(["--target", &slurmd, "--mount", "--", "mount", "--bind"])
            .arg(empty)
            .arg(&site)
            .status()
            .expect("nsenter runs")
            .success();
        assert!(ok, "bind an empty folder over {site} on {node}");
        BrokenVenv { slurmd, site }
    }
}

impl Drop for BrokenVenv {
    fn drop(&mut self) {
        let _ = std::process::Command::new("nsenter")
            .args([
                "--target",
                &self.slurmd,
                "--mount",
                "--",
                "umount",
                &self.site,
            ])
            .status();
    }
}

/// One node whose venv cannot import torch (its packages hidden on that node only): the
/// preflight of attempt 0 finds it before any worker starts, blames it (check `python`),
/// and the spare takes its place; the job trains on the other two nodes in the same
/// allocation.
#[test]
fn the_preflight_blames_a_node_whose_python_cannot_import_torch() {
    let bed = Bed::require();
    let (project, exps) = crate::support::project_with(
        &bed,
        "spare_preflight",
        &[("crates/herd/tests/e2e/workers/bad_host.py", "bad_host.py")],
    );
    let exp_root = exps.display().to_string();
    let nodes = bed.nodes().to_vec();
    let broken = BrokenVenv::on(&bed, &nodes[1], &exps.join("empty-site-packages"));
    let job = job_id(&submit(
        &bed,
        &project,
        &args(
            &[
                "-J",
                "preflight",
                "--nodes",
                "2",
                "--spare-nodes",
                "1",
                "--gpus-per-node",
                "2",
            ],
            &exp_root,
            &["python", "bad_host.py", "none"],
        ),
    ));
    let exp = exps.join("preflight");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    drop(broken);
    let all = timeline(&exp);
    assert!(info.succeeded(), "{info:?}\n{:?}", names(&all));
    let found = events(&all, "preflight_failed");
    assert_eq!(found.len(), 1, "{:?}", names(&all));
    assert_eq!(found[0]["node"], Value::from(nodes[1].clone()));
    assert_eq!(found[0]["check"], "python");
    assert!(
        found[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("torch"),
        "{found:?}"
    );
    let blame = events(&all, "blame");
    assert_eq!(blame.len(), 1, "{:?}", names(&all));
    assert_eq!(blame[0]["kind"], "preflight");
    let replace = events(&all, "replace");
    assert_eq!(replace.len(), 1, "{:?}", names(&all));
    assert_eq!(replace[0]["node"], Value::from(nodes[1].clone()));
    assert_eq!(replace[0]["by"], Value::from(nodes[2].clone()));
    // Before any worker started: attempt 0 has no worker output at all.
    assert!(
        events(&all, "worker_exit").is_empty() && events(&all, "first_output").len() == 1,
        "{:?}",
        names(&all)
    );
    assert!(
        !exp.join("logs/attempt-0/rank-0.out").exists(),
        "no worker of attempt 0 started"
    );
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    for rank in 0..4 {
        assert!(
            out.contains(&format!("rank={rank} done total=50")),
            "rank {rank} finished:\n{out}"
        );
    }
}
