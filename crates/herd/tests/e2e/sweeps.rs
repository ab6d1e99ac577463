//! Sweeps on the bed (issue #29): a 2×2 grid of `examples/train_ddp.py` as one SLURM array
//! job, one experiment per run, at most 2 runs at once.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use herd_testbed::{parse_scontrol_job, read_lossy, Bed, JobId};
use serde_json::Value;

use crate::staying_alive::{args, project};
use crate::support::{events, job_id, names, submit, timeline};

/// `squeue -h -r -j ID -o '%F %K'`: each task still in the queue as (array id, task).
fn queued_tasks(job: JobId) -> Vec<(String, String)> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-j", &job.to_string(), "-o", "%F %K"])
        .output()
        .expect("squeue runs");
    assert!(
        out.status.success(),
        "squeue: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (a, t) = l.trim().split_once(' ')?;
            Some((a.to_owned(), t.to_owned()))
        })
        .collect()
}

/// `lr` × `seed` (2 × 2) of train_ddp.py, 1 node × 2 workers, `--max-parallel 2`: one array
/// job in the queue (one id, 4 tasks); 4 run folders, each worker printing its own values;
/// every run's agents name its task as submit recorded it; never more than 2 runs between
/// their `started` and `finished`; every run finished ok. A misspelled placeholder exits 2
/// with nothing written.
#[test]
fn a_grid_is_one_array_job_with_one_experiment_per_run() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "sweep_grid");
    let exp_root = exps.display().to_string();
    // Each worker says its values (the `{KEY}`s inside one word), then trains with them.
    let cmd = [
        "sh",
        "-c",
        "echo \"values lr={lr} seed={seed}\"; exec python train_ddp.py --steps 60 --log-every 10 --lr {lr} --seed {seed}",
    ];
    let common = [
        "-J",
        "grid",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--time",
        "10",
        "--sweep",
        "lr=0.05,0.1",
        "--sweep",
        "seed=1,2",
        "--max-parallel",
        "2",
    ];

    // --- a misspelled placeholder: exit 2, nothing written ---------------------------
    let bad_cmd = ["python", "train_ddp.py", "--lr", "{lr}", "--seed", "{sede}"];
    let out = submit(&bed, &project, &args(&common, &exp_root, &bad_cmd));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the command has `{sede}`, which is no sweep key (lr, seed)"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(!exps.join("grid").exists(), "nothing written");

    // --- the sweep ---------------------------------------------------------------------
    let job = job_id(&submit(&bed, &project, &args(&common, &exp_root, &cmd)));
    let sweep = exps.join("grid");
    let in_queue = queued_tasks(job);
    let arrays: BTreeSet<&str> = in_queue.iter().map(|(a, _)| a.as_str()).collect();
    let tasks: BTreeSet<&str> = in_queue.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        arrays,
        BTreeSet::from([job.to_string().as_str()]),
        "one array job: {in_queue:?}"
    );
    assert_eq!(tasks, BTreeSet::from(["0", "1", "2", "3"]), "{in_queue:?}");

    let deadline = Instant::now() + Duration::from_secs(900);
    while !queued_tasks(job).is_empty() {
        assert!(Instant::now() < deadline, "the sweep did not end in 15 min");
        std::thread::sleep(Duration::from_millis(500));
    }

    let runs = [
        ("lr=0.05,seed=1", "0.05", "1"),
        ("lr=0.05,seed=2", "0.05", "2"),
        ("lr=0.1,seed=1", "0.1", "1"),
        ("lr=0.1,seed=2", "0.1", "2"),
    ];
    let manifest: Value =
        serde_json::from_str(&read_lossy(sweep.join("sweep.json"))).expect("sweep.json");
    assert_eq!(
        manifest["submissions"][0]["job_id"],
        Value::from(job.to_string())
    );
    let mut spans = Vec::new();
    let mut checksums = BTreeSet::new();
    for (i, (name, lr, seed)) in runs.iter().enumerate() {
        let exp = sweep.join(name);
        let task = format!("{job}_{i}");
        assert_eq!(manifest["runs"][i]["name"], *name);
        let info = herd_slurm::scheduler::command::show_job(&task)
            .ok()
            .and_then(|t| parse_scontrol_job(t.lines().next().unwrap_or_default()));
        let all = timeline(&exp);
        assert!(
            info.as_ref().is_some_and(|i| i.succeeded()),
            "task {task}: {info:?}\n{:?}\n{}",
            names(&all),
            read_lossy(exp.join(format!("logs/{task}.err")))
        );
        let run: Value =
            serde_json::from_str(&read_lossy(exp.join("manifest.json"))).expect("manifest");
        assert_eq!(run["attempts"][0]["job_id"], Value::from(task.clone()));
        assert_eq!(
            events(&all, "queued")[0]["job_id"],
            Value::from(task.clone())
        );
        let started = events(&all, "started");
        assert_eq!(started.len(), 1, "{:?}", names(&all));
        assert_eq!(
            started[0]["job_id"],
            Value::from(task.clone()),
            "the agents name the task as submit did"
        );
        let finished = events(&all, "finished");
        assert_eq!(finished.len(), 1, "{:?}", names(&all));
        assert_eq!(finished[0]["ok"], Value::Bool(true), "{:?}", names(&all));
        spans.push((
            started[0]["unix_ms"].as_u64().expect("ms"),
            finished[0]["unix_ms"].as_u64().expect("ms"),
        ));
        // Each worker ran with its own run's values.
        for rank in 0..2 {
            let out = read_lossy(exp.join(format!("logs/attempt-0/rank-{rank}.out")));
            assert!(
                out.contains(&format!("values lr={lr} seed={seed}\n")),
                "{name} rank {rank}:\n{out}"
            );
            if rank == 0 {
                let done = herd_testbed::rank_lines(&out, "done");
                checksums.insert(done[&0]["checksum"].clone());
            }
        }
        assert!(
            Path::new(&exp.join(format!("logs/{task}.out"))).exists(),
            "the task's batch output is in its run's logs"
        );
    }
    assert_eq!(checksums.len(), 4, "4 different trainings: {checksums:?}");
    // Never more than 2 runs at once: at each run's start, at most 2 are between their
    // `started` and `finished`.
    for &(start, _) in &spans {
        let running = spans
            .iter()
            .filter(|&&(s, f)| s <= start && start <= f)
            .count();
        assert!(running <= 2, "{running} runs at once: {spans:?}");
    }
}
