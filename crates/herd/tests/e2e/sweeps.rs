//! Sweeps on the bed (issue #29): a 2×2 grid of `examples/train_ddp.py` as one SLURM array
//! job, one experiment per run, at most 2 runs at once; a scaling sweep over `nodes` as one
//! array job per node count.

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

/// `herd ARGS…` from `dir`.
fn herd(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("herd runs")
}

/// Waits until no task of array `job` is in the queue (8 min at most: its runs take a
/// minute or two; one that never ends is a hang); says how long that took.
fn wait_out_of_queue(job: JobId) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(480);
    while !queued_tasks(job).is_empty() {
        assert!(
            Instant::now() < deadline,
            "job {job} still in the queue after 8 min: {:?}",
            queued_tasks(job)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("job {job} out of the queue after {:?}", started.elapsed());
}

/// `lr` × `seed` (2 × 2) of train_ddp.py, 1 node × 2 workers, `--max-parallel 2`: one array
/// job in the queue (one id, 4 tasks); 4 run folders, each worker printing its own values;
/// every run's agents name its task as submit recorded it; never more than 2 runs between
/// their `started` and `finished`. The run `lr=0.1,seed=2` fails its first time (its workers
/// exit 1), the other three finish: `herd status` shows the sweep as one row (and no other
/// job), `herd status grid` its runs; `herd report grid` compares the three that have a
/// loss, sorted by final loss, and `--plots` overlays the runs' losses, one legend entry
/// per run; `herd submit --resume grid` runs that one run again, alone, as a second
/// attempt, and it finishes. A misspelled placeholder exits 2 with nothing written; `herd
/// cancel` of a sweep cancels every task and says so in every run's timeline.
#[test]
fn a_grid_is_one_array_job_with_one_experiment_per_run() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "sweep_grid");
    let exp_root = exps.display().to_string();
    // Each worker says its values (the `{KEY}`s inside one word), then trains with them.
    // `lr=0.1,seed=2` fails its first time (a marker in its own folder says it did), once
    // both of its workers have said their values: herd tears a node's workers down as soon
    // as one exits, and a worker killed before its `echo` says nothing.
    let cmd = [
        "sh",
        "-c",
        "echo \"values lr={lr} seed={seed}\"; touch \"$HERD_EXP_DIR/said-$RANK\"; \
         if [ {lr},{seed} = 0.1,2 ] && [ ! -e \"$HERD_EXP_DIR/failed-once\" ]; then \
         while [ ! -e \"$HERD_EXP_DIR/said-0\" ] || [ ! -e \"$HERD_EXP_DIR/said-1\" ]; \
         do sleep 0.05; done; \
         touch \"$HERD_EXP_DIR/failed-once\"; exit 1; fi; \
         exec python train_ddp.py --steps 60 --log-every 10 --lr {lr} --seed {seed}",
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

    wait_out_of_queue(job);

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
        let fails = i == 3;
        assert!(
            info.as_ref().is_some_and(|i| i.succeeded() != fails),
            "task {task}: {info:?}\n{:?}\n{}",
            names(&all),
            read_lossy(exp.join(format!("logs/{task}.err")))
        );
        let run: Value =
            serde_json::from_str(&read_lossy(exp.join("manifest.json"))).expect("manifest");
        assert_eq!(run["submissions"][0]["job_id"], Value::from(task.clone()));
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
        assert_eq!(finished[0]["ok"], Value::Bool(!fails), "{:?}", names(&all));
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
            if rank == 0 && !fails {
                let done = herd_testbed::rank_lines(&out, "done");
                checksums.insert(done[&0]["checksum"].clone());
            }
        }
        assert!(
            Path::new(&exp.join(format!("logs/{task}.out"))).exists(),
            "the task's batch output is in its run's logs"
        );
    }
    assert_eq!(checksums.len(), 3, "3 different trainings: {checksums:?}");
    // Never more than 2 runs at once: at each run's start, at most 2 are between their
    // `started` and `finished`.
    for &(start, _) in &spans {
        let running = spans
            .iter()
            .filter(|&&(s, f)| s <= start && start <= f)
            .count();
        assert!(running <= 2, "{running} runs at once: {spans:?}");
    }

    // --- seen as one --------------------------------------------------------------------
    let status = herd(&["status", "--exp-root", &exp_root], &project);
    let text = String::from_utf8_lossy(&status.stdout);
    let mine = text
        .split("other jobs of yours:")
        .next()
        .unwrap_or_default();
    let row: Vec<&str> = mine.lines().filter(|l| l.starts_with("grid ")).collect();
    assert_eq!(row.len(), 1, "one row for the sweep:\n{text}");
    assert!(
        row[0].contains(&job.to_string())
            && row[0].contains("sweep: 4 runs")
            && row[0].contains("3 finished")
            && row[0].contains("1 failed"),
        "{text}"
    );
    // Other jobs of this user may be listed (the bed's recent ones), never the array.
    let others = text
        .split("other jobs of yours:")
        .nth(1)
        .unwrap_or_default();
    assert!(
        !others
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(&job.to_string())),
        "the array is the sweep's, not another job:\n{text}"
    );
    let status = herd(&["status", "grid", "--exp-root", &exp_root], &project);
    let text = String::from_utf8_lossy(&status.stdout);
    for (i, (_, lr, seed)) in runs.iter().enumerate() {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("{job}_{i}")))
            .unwrap_or_else(|| panic!("no line for task {i}:\n{text}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&cells[..2], [*lr, *seed], "{line}");
        assert!(
            line.contains(if i == 3 { "failed" } else { "finished" }),
            "{line}"
        );
    }

    // --- compared as one ------------------------------------------------------------------
    let plots = exps.join("plots");
    let report = herd(
        &[
            "report",
            "grid",
            "--json",
            "--plots",
            &plots.display().to_string(),
            "--exp-root",
            &exp_root,
        ],
        &project,
    );
    assert!(report.status.success(), "{report:?}");
    let doc: Value = serde_json::from_slice(&report.stdout).expect("report --json");
    let rows = doc["runs"].as_array().expect("runs");
    assert_eq!(rows.len(), 4, "{doc:#}");
    let losses: Vec<f64> = rows[..3]
        .iter()
        .map(|r| r["final_loss"].as_f64().expect("a final loss"))
        .collect();
    assert!(
        losses.windows(2).all(|w| w[0] <= w[1]),
        "sorted by final loss: {losses:?}"
    );
    assert_eq!(
        rows[3]["name"], "lr=0.1,seed=2",
        "the failed run without a loss last"
    );

    // --- the failed run again, alone ----------------------------------------------------------
    let resume = submit(
        &bed,
        &project,
        &["--resume", "grid", "--exp-root", &exp_root],
    );
    assert!(resume.status.success(), "{resume:?}");
    let again = job_id(&resume);
    let in_queue = queued_tasks(again);
    assert!(
        in_queue.iter().all(|(_, t)| t == "3") && !in_queue.is_empty(),
        "only the failed run's task: {in_queue:?}"
    );
    wait_out_of_queue(again);
    let redone = sweep.join("lr=0.1,seed=2");
    let all = timeline(&redone);
    let finished = events(&all, "finished");
    assert_eq!(finished.len(), 2, "{:?}", names(&all));
    assert_eq!(finished[1]["ok"], Value::Bool(true), "{:?}", names(&all));
    assert_eq!(
        events(&all, "started")[1]["job_id"],
        Value::from(format!("{again}_3"))
    );
    // All four compared now: sorted by final loss, one colour and legend entry per run.
    let report = herd(
        &[
            "report",
            "grid",
            "--json",
            "--plots",
            &plots.display().to_string(),
            "--exp-root",
            &exp_root,
        ],
        &project,
    );
    assert!(report.status.success(), "{report:?}");
    let doc: Value = serde_json::from_slice(&report.stdout).expect("report --json");
    let losses: Vec<f64> = doc["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["final_loss"].as_f64().expect("a final loss"))
        .collect();
    assert_eq!(losses.len(), 4, "{doc:#}");
    assert!(
        losses.windows(2).all(|w| w[0] <= w[1]),
        "sorted by final loss: {losses:?}"
    );
    let svg = read_lossy(plots.join("grid.loss.svg"));
    assert!(plots.join("grid.loss.png").is_file());
    for (name, lr, seed) in &runs {
        assert!(
            svg.contains(&format!("lr={lr}, seed={seed}")),
            "a legend entry for {name}"
        );
    }
    // Four colours: the runs' lines (black is the axes' and the grid's).
    let colours: BTreeSet<&str> = svg
        .split("<polyline")
        .skip(1)
        .filter_map(|p| p.split("stroke=\"").nth(1)?.split('"').next())
        .filter(|c| *c != "#000000")
        .collect();
    assert_eq!(colours.len(), 4, "one colour per run: {colours:?}");
    for (name, _, _) in &runs[..3] {
        let all = timeline(&sweep.join(name));
        assert_eq!(
            events(&all, "started").len(),
            1,
            "{name} ran once: {:?}",
            names(&all)
        );
    }

    // --- cancelled as one -----------------------------------------------------------------------
    let doomed = [
        "-J",
        "doomed",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--sweep",
        "n=1,2,3",
        "--max-parallel",
        "1",
    ];
    let long = ["sh", "-c", "sleep 300; echo {n}"];
    let doomed_job = job_id(&submit(&bed, &project, &args(&doomed, &exp_root, &long)));
    let cancel = herd(&["cancel", "doomed", "--exp-root", &exp_root], &project);
    assert!(cancel.status.success(), "{cancel:?}");
    wait_out_of_queue(doomed_job);
    for n in 1..=3 {
        let all = timeline(&exps.join(format!("doomed/n={n}")));
        let cancelled = events(&all, "cancelled");
        assert_eq!(cancelled.len(), 1, "n={n}: {:?}", names(&all));
        assert_eq!(cancelled[0]["by"], "herd cancel");
        assert_eq!(
            cancelled[0]["job_id"],
            Value::from(format!("{doomed_job}_{}", n - 1))
        );
    }
}

/// A scaling sweep, `--sweep nodes=1,2` of train_ddp.py with 2 workers a node: two resource
/// shapes, so two array jobs in the queue (stdout names both, one a line), one task each;
/// both runs finish, each run's `started` lists 1 resp. 2 nodes and names its own array's
/// task; `herd report scale` prints the scaling table with both sizes (2 and 4 GPUs);
/// `herd status` shows the sweep as one row naming both arrays, and neither array as
/// another job.
#[test]
fn a_scaling_sweep_is_one_array_job_per_node_count() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "sweep_scale");
    let exp_root = exps.display().to_string();
    let common = [
        "-J",
        "scale",
        "--gpus-per-node",
        "2",
        "--time",
        "10",
        "--sweep",
        "nodes=1,2",
    ];
    let cmd = [
        "python",
        "train_ddp.py",
        "--steps",
        "30",
        "--log-every",
        "10",
    ];
    let out = submit(&bed, &project, &args(&common, &exp_root, &cmd));
    assert!(out.status.success(), "{out:?}");
    let jobs: Vec<JobId> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| JobId(l.trim().parse().expect("a job id a line")))
        .collect();
    assert_eq!(jobs.len(), 2, "one array job per shape: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "herd: submitted sweep scale: jobs {}, {} (2 shapes), 2 runs",
            jobs[0], jobs[1]
        )),
        "{stderr}"
    );
    for (i, job) in jobs.iter().enumerate() {
        let in_queue = queued_tasks(*job);
        // A job that started at once may have left the queue already: none, or its task.
        assert!(
            in_queue
                .iter()
                .all(|(a, t)| *a == job.to_string() && *t == i.to_string()),
            "array {job} holds task {i} alone: {in_queue:?}"
        );
    }
    for job in &jobs {
        wait_out_of_queue(*job);
    }

    let sweep = exps.join("scale");
    assert!(sweep.join("job-1.sbatch").is_file() && sweep.join("job-2.sbatch").is_file());
    for (i, (run, nodes)) in [("nodes=1", 1), ("nodes=2", 2)].into_iter().enumerate() {
        let exp = sweep.join(run);
        let task = format!("{}_{i}", jobs[i]);
        let all = timeline(&exp);
        let started = events(&all, "started");
        assert_eq!(started.len(), 1, "{run}: {:?}", names(&all));
        assert_eq!(started[0]["job_id"], Value::from(task.clone()), "{run}");
        let listed = started[0]["nodes"].as_array().map_or(0, Vec::len);
        assert_eq!(listed, nodes, "{run}: {:?}", started[0]);
        let finished = events(&all, "finished");
        assert_eq!(finished.len(), 1, "{run}: {:?}", names(&all));
        assert_eq!(
            finished[0]["ok"],
            Value::Bool(true),
            "{run}: {:?}\n{}",
            names(&all),
            read_lossy(exp.join(format!("logs/{task}.err")))
        );
    }

    // --- the scaling table -----------------------------------------------------------------
    let report = herd(&["report", "scale", "--exp-root", &exp_root], &project);
    assert!(report.status.success(), "{report:?}");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains("| run | nodes | GPUs | samples/s | per GPU | efficiency | time/epoch |"),
        "the scaling table:\n{text}"
    );
    for (run, nodes, gpus) in [("nodes=1", 1, 2), ("nodes=2", 2, 4)] {
        assert!(
            text.contains(&format!("| {run} | {nodes} | {gpus} | ")),
            "{run} at {nodes} nodes, {gpus} GPUs:\n{text}"
        );
    }

    // --- seen as one ------------------------------------------------------------------------
    let status = herd(&["status", "--exp-root", &exp_root], &project);
    let text = String::from_utf8_lossy(&status.stdout);
    let (mine, others) = text
        .split_once("other jobs of yours:")
        .unwrap_or((&text, ""));
    let row: Vec<&str> = mine.lines().filter(|l| l.starts_with("scale ")).collect();
    assert_eq!(row.len(), 1, "one row for the sweep:\n{text}");
    assert!(
        row[0].contains(&format!("{},{}", jobs[0], jobs[1]))
            && row[0].contains("sweep: 2 runs")
            && row[0].contains("2 finished"),
        "{text}"
    );
    for job in &jobs {
        assert!(
            !others
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(&job.to_string())),
            "array {job} is the sweep's, not another job:\n{text}"
        );
    }
}
