//! Framework jobs lose no step (issue #26), on the bed: PyTorch Lightning with
//! `herd.lightning.HerdCallback`, HF Transformers' Trainer with
//! `herd.transformers.HerdCallback`, an HF Accelerate loop with the documented recipe and a
//! plain torch loop with `herd.stop_requested()` + `herd.save_atomic`, 2 nodes × 1 worker
//! each, all four at once, each through a preemption (an urgent job over every node) and a
//! time limit: every rank computes every step exactly once over the attempts (each rank's
//! own step log) and ends with the parameters of an uninterrupted run. Then Lightning
//! written for srun (`plugins=[SLURMEnvironment()]`, no herd import) through a time limit:
//! Lightning saves and requeues the job itself, herd takes that requeue as the attempt's
//! (no second requeue, no `requeue_failed`, no false `finished`) and makes the job eligible
//! at once: it runs again well before the two minutes slurmctld would otherwise hold a
//! requeued job back (how soon is printed: the rest is slurmctld's scheduling cycle).
//!
//! One run serves every assertion: the jobs share the bed's nodes, so one urgent job
//! preempts them all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use herd_testbed::{read_lossy, repo_root, Bed, JobId};
use serde_json::Value;

use crate::support::{events, job_id, names, submit, timeline, Job};

/// Steps of each framework job: more than a preempted first attempt and a whole 2-minute
/// attempt can train, so a time limit comes too.
const STEPS: u32 = 260;
const STEP_TIME: &str = "0.25";

/// (job name, worker script, extra arguments after OUT STEPS STEP_TIME)
const JOBS: [(&str, &str, &[&str]); 4] = [
    ("plain", "plain_torch.py", &[]),
    ("lightning", "lightning_herd.py", &["2", "1"]),
    ("transformers", "transformers_herd.py", &[]),
    ("accelerate", "accelerate_herd.py", &[]),
];

/// A project with the stop workers and the `herd` Python module (as `pip install` of the
/// wheel would put it on the import path), and an experiment root, in scratch `name`.
fn project(bed: &Bed, name: &str) -> (PathBuf, PathBuf) {
    let dir = bed.scratch(name).expect("scratch");
    let project = dir.join("project");
    let module = project.join("herd");
    std::fs::create_dir_all(&module).expect("project");
    let copy_all = |from: &Path, to: &Path| {
        for entry in std::fs::read_dir(from).expect("read dir").flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "py") {
                std::fs::copy(&path, to.join(entry.file_name())).expect("copy");
            }
        }
    };
    copy_all(
        &repo_root().join("crates/herd/tests/e2e/workers/stop"),
        &project,
    );
    copy_all(&repo_root().join("python/herd"), &module);
    (project, dir.join("exps"))
}

/// Each rank's step log: (attempt, step) a line, in the order computed.
fn step_log(out: &Path, rank: u32) -> Vec<(String, u32)> {
    read_lossy(out.join(format!("rank-{rank}.steps")))
        .lines()
        .filter_map(|l| {
            let (a, s) = l.split_once(' ')?;
            Some((a.to_owned(), s.trim().parse().ok()?))
        })
        .collect()
}

fn final_state(out: &Path, rank: u32) -> Value {
    let text = read_lossy(out.join(format!("final-{rank}.json")));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("no final state of rank {rank} in {}: {e}", out.display()))
}

/// The uninterrupted reference of `script`: the same 2 ranks under `herd run` here.
fn reference(project: &Path, python: &Path, script: &str, extra: &[&str]) -> Value {
    let dir = project
        .parent()
        .expect("scratch")
        .join(format!("ref-{script}"));
    let out = dir.join("out");
    std::fs::create_dir_all(&out).expect("ref dir");
    let mut cmd = vec![
        python.display().to_string(),
        project.join(script).display().to_string(),
        out.display().to_string(),
        STEPS.to_string(),
        "0".to_owned(),
    ];
    cmd.extend(extra.iter().map(|s| s.to_string()));
    // Its own checkpoint folder, so it never resumes from anything.
    let ran = std::process::Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--nodes", "2", "--nproc-per-node", "1", "--log-dir"])
        .arg(dir.join("logs"))
        .arg("--")
        .args(&cmd)
        .env("HERD_CHECKPOINT_DIR", dir.join("checkpoints"))
        .current_dir(project)
        .output()
        .expect("herd run");
    assert!(
        ran.status.success(),
        "the reference of {script} failed: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    final_state(&out, 0)
}

/// Once job `id` has been requeued (SLURM's `Restarts` above 0), give it a 5-minute limit:
/// its next allocation then finishes however slowly the loaded bed starts it (two cores, five
/// jobs: a second 1-minute allocation once ran into its own limit, a second requeue), so
/// the one requeue the test asserts is the one it is about.
fn longer_limit_after_a_requeue(id: JobId) {
    let deadline = Instant::now() + Duration::from_secs(480);
    while Instant::now() < deadline {
        let shown = std::process::Command::new("scontrol")
            .args(["show", "job", "-o", &id.to_string()])
            .output();
        let info = shown.ok().and_then(|o| {
            herd_testbed::parse_scontrol_job(String::from_utf8_lossy(&o.stdout).trim())
        });
        if let Some(info) = info {
            if info.fields.get("Restarts").is_some_and(|r| r != "0") {
                let updated = std::process::Command::new("scontrol")
                    .args(["update", &format!("JobId={id}"), "TimeLimit=5"])
                    .status();
                assert!(
                    updated.is_ok_and(|s| s.success()),
                    "scontrol update JobId={id} TimeLimit=5"
                );
                return;
            }
            if info.is_final() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn framework_jobs_lose_no_step_through_a_preemption_and_a_time_limit() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "frameworks_stop");
    let exp_root = exps.display().to_string();
    let python = bed.python().to_path_buf();
    let steps = STEPS.to_string();
    let mut jobs: Vec<(&str, JobId, PathBuf)> = Vec::new();
    for (name, script, extra) in JOBS {
        let out = exps.join(format!("{name}-out"));
        std::fs::create_dir_all(&out).expect("out");
        let out_arg = out.display().to_string();
        let mut argv = vec![
            "-J",
            name,
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--time",
            "2",
            "--warn-before",
            "60",
            "--stop-grace",
            "30",
            "--max-requeues",
            "8",
            "--exp-root",
            &exp_root,
            "--",
            "python",
            script,
            &out_arg,
            &steps,
            STEP_TIME,
        ];
        argv.extend_from_slice(extra);
        let id = job_id(&submit(&bed, &project, &argv));
        jobs.push((name, id, out));
    }

    // Every job trains: then one urgent job over every node preempts them all.
    let deadline = Instant::now() + Duration::from_secs(240);
    for (name, _, out) in &jobs {
        while step_log(out, 0).len() < 3 {
            assert!(
                Instant::now() < deadline,
                "{name} trained no 3 steps: {:?}",
                names(&timeline(&exps.join(name)))
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let urgent_dir = exps.join("urgent");
    std::fs::create_dir_all(&urgent_dir).expect("urgent dir");
    let urgent = Job::submit(
        &bed,
        &urgent_dir,
        "urgent",
        &[
            "--partition=urgent",
            "--nodes=3",
            "--ntasks-per-node=1",
            "--gres=gpu:4",
        ],
        "sleep 5",
    );
    // The references run here meanwhile (no SLURM, no stop).
    let references: BTreeMap<&str, Value> = JOBS
        .iter()
        .map(|(name, script, extra)| (*name, reference(&project, &python, script, extra)))
        .collect();
    urgent.wait_success(&bed, Duration::from_secs(300));

    // Lightning written for srun, through one time limit: it requeues itself.
    let srun_out = exps.join("lightning-slurm-out");
    std::fs::create_dir_all(&srun_out).expect("out");
    let srun_out_arg = srun_out.display().to_string();
    let lightning_slurm = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "lightning-slurm",
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--time",
            "1",
            "--warn-before",
            "25",
            "--stop-grace",
            "20",
            "--exp-root",
            &exp_root,
            "--",
            "python",
            "lightning_slurm.py",
            &srun_out_arg,
            "140",
            STEP_TIME,
            "2",
            "1",
        ],
    ));
    let extend = std::thread::spawn(move || longer_limit_after_a_requeue(lightning_slurm));

    // The four end together, a few minutes in: 8 minutes tells a stuck one (and leaves the
    // wait inside the 10 minutes nextest gives the test).
    for (name, id, out) in &jobs {
        let exp = exps.join(name);
        let info = bed.wait(*id, Duration::from_secs(480)).unwrap_or_else(|e| {
            panic!(
                "{name}: {e}\n{}\n{:?}",
                read_lossy(exp.join(format!("logs/{id}.err"))),
                names(&timeline(&exp))
            )
        });
        let all = timeline(&exp);
        let order = names(&all);
        assert!(info.succeeded(), "{name}: {info:?}\n{order:?}");
        let requeues = events(&all, "requeue");
        for cause in ["preemption", "time_limit"] {
            assert!(
                requeues.iter().any(|r| r["cause"] == cause),
                "{name} went through a {cause}: {order:?}"
            );
        }
        assert!(
            events(&all, "requeue_failed").is_empty(),
            "{name}: {order:?}"
        );
        let finished = events(&all, "finished");
        // Each allocation's `started` (SLURM's requeue count, the time) and the requeues
        // say who ran the job again, should it run once more.
        assert_eq!(
            finished.len(),
            1,
            "{name}: {order:?}\nstarted: {:?}\nrequeues: {requeues:?}\n{}",
            events(&all, "started"),
            read_lossy(exp.join(format!("logs/{id}.err")))
        );
        assert_eq!(finished[0]["ok"], true, "{name}: {order:?}");
        for rank in 0..2 {
            let log = step_log(out, rank);
            let mut computed: Vec<u32> = log.iter().map(|(_, s)| *s).collect();
            computed.sort_unstable();
            let twice: Vec<&(String, u32)> = log
                .iter()
                .filter(|(_, s)| log.iter().filter(|(_, t)| t == s).count() > 1)
                .collect();
            assert!(
                twice.is_empty(),
                "{name} rank {rank} computed steps twice (attempt, step): {twice:?}"
            );
            assert_eq!(
                computed,
                (1..=STEPS).collect::<Vec<_>>(),
                "{name} rank {rank}: every step once"
            );
            let attempts: std::collections::BTreeSet<&str> =
                log.iter().map(|(a, _)| a.as_str()).collect();
            assert!(attempts.len() >= 3, "{name}: {attempts:?} {order:?}");
            let end = final_state(out, rank);
            assert_eq!(
                end["checksum"], references[name]["checksum"],
                "{name} rank {rank} ends as the uninterrupted run"
            );
        }
    }

    // --- Lightning's own SLURM requeue, taken by herd ------------------------------------
    let exp = exps.join("lightning-slurm");
    let info = bed
        .wait(lightning_slurm, Duration::from_secs(400))
        .unwrap_or_else(|e| panic!("{e}: {:?}", names(&timeline(&exp))));
    extend.join().expect("the limit thread");
    let all = timeline(&exp);
    let order = names(&all);
    assert!(info.succeeded(), "{info:?}\n{order:?}");
    let requeues = events(&all, "requeue");
    assert_eq!(requeues.len(), 1, "one requeue: {order:?}");
    assert_eq!(
        (&requeues[0]["cause"], &requeues[0]["by"]),
        (&Value::from("time_limit"), &Value::from("job")),
        "Lightning requeued it, herd took that requeue: {order:?}"
    );
    assert!(events(&all, "requeue_failed").is_empty(), "{order:?}");
    let finished = events(&all, "finished");
    assert_eq!(
        finished.iter().map(|f| f["ok"].clone()).collect::<Vec<_>>(),
        vec![Value::from(true)],
        "no false finished: {order:?}"
    );
    let requeued_at = requeues[0]["unix_ms"].as_u64().expect("unix_ms");
    let next = events(&all, "attempt_started")
        .into_iter()
        .find(|e| e["unix_ms"].as_u64().unwrap_or(0) > requeued_at)
        .and_then(|e| e["unix_ms"].as_u64())
        .unwrap_or_else(|| panic!("no attempt after the requeue: {order:?}"));
    let waited = Duration::from_millis(next - requeued_at);
    eprintln!("lightning-slurm: requeue to running again {waited:?}");
    let said = read_lossy(exp.join(format!("logs/{lightning_slurm}.err")));
    assert!(
        said.contains("was requeued by its own code at its time limit; herd does not requeue it again and makes it eligible now")
            && !said.contains("cannot be made eligible now"),
        "herd made the job eligible at once:\n{said}"
    );
    // slurmctld holds a requeued job back for about two minutes (its credential lifetime)
    // unless it is made eligible: 100 s tells herd's doing from that hold (seen: 7-14 s;
    // the backfill cycle and the nodes' epilogs come before the start).
    assert!(
        waited < Duration::from_secs(100),
        "running again {waited:?} after Lightning's requeue, as if held back: {order:?}"
    );
    let hpc = std::fs::read_dir(exp.join("checkpoints"))
        .expect("checkpoints")
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("hpc_ckpt_"));
    assert!(hpc, "Lightning saved its checkpoint at the stop");
    assert_eq!(final_state(&srun_out, 0)["steps"], 140);
}
