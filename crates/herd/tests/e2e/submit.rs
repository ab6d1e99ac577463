//! `herd submit` on the bed (issue #5): experiment folders, snapshots, the three launch
//! modes, dependencies, refusals.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use herd_testbed::{rank_lines, read_lossy, Bed, JobId};

use crate::support::{herd_with_path, job_id, project_with, submit, wait_ok};
use serde_json::Value;

/// A project folder with the example and the probe, and an experiment root beside it.
fn project(bed: &Bed, name: &str) -> (PathBuf, PathBuf) {
    project_with(
        bed,
        name,
        &[
            ("examples/train_ddp.py", "train_ddp.py"),
            ("crates/herd/tests/e2e/workers/probe.py", "probe.py"),
            ("crates/herd/tests/e2e/workers/waiter.py", "waiter.py"),
        ],
    )
}

fn checksum(output: &str, world: usize) -> String {
    let done = rank_lines(output, "done");
    assert_eq!(done.len(), world, "{output}");
    let sums: BTreeSet<String> = done.values().map(|f| f["checksum"].clone()).collect();
    assert_eq!(sums.len(), 1, "{output}");
    sums.into_iter().next().unwrap_or_default()
}

/// Agent, srun and torchrun mode each run examples/train_ddp.py (2 nodes × 2 GPUs) from the
/// snapshot to the same checksum; the folder holds per-rank logs, manifest and script.
#[test]
fn three_launch_modes_train_to_one_checksum_from_the_experiment_folder() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_modes");
    let exp_root = exps.display().to_string();
    let mut sums = BTreeSet::new();
    for mode in ["agent", "srun", "torchrun"] {
        let name = format!("ddp-{mode}");
        let out = submit(
            &bed,
            &project,
            &[
                "-J",
                &name,
                "--mode",
                mode,
                "--nodes",
                "2",
                "--gpus-per-node",
                "2",
                "--partition",
                "gpu",
                "--time",
                "10",
                "--exp-root",
                &exp_root,
                "--",
                "python",
                "train_ddp.py",
                "--steps",
                "20",
                "--log-every",
                "10",
            ],
        );
        let job = job_id(&out);
        let said = String::from_utf8_lossy(&out.stderr);
        let exp = exps.join(&name);
        assert!(
            said.contains(&format!("herd: code snapshot in {}/code: ", exp.display()))
                && said.contains(" copied"),
            "{mode}: submit does not say what it copied:\n{said}"
        );
        // The code folder is made at submit, before the job starts.
        assert!(
            exp.join("code/train_ddp.py").is_file(),
            "{mode}: no code/ right after submit"
        );
        let output = wait_ok(&bed, job, &exp);
        sums.insert(checksum(&output, 4));
        assert!(exp.join("job.sbatch").is_file());
        assert!(
            exp.join("code/train_ddp.py").is_file(),
            "the job ran from the snapshot"
        );
        let manifest: Value = serde_json::from_str(
            &std::fs::read_to_string(exp.join("manifest.json")).expect("manifest"),
        )
        .expect("manifest json");
        assert!(
            manifest.to_string().contains(&format!("\"{job}\"")),
            "job id recorded: {manifest:#}"
        );
        if mode == "agent" {
            for rank in 0..4 {
                let log = read_lossy(exp.join(format!("logs/attempt-0/rank-{rank}.out")));
                assert!(
                    log.contains(&format!("rank={rank} done")),
                    "rank {rank} log: {log}"
                );
                // The agents read the convention lines into the metrics store: steps 10
                // and 20, each once (train_ddp prints them as key=value too).
                let metrics = herd_metrics::store::read_rank(&exp.join("logs/attempt-0"), rank)
                    .expect("metrics");
                assert_eq!(metrics.step, [Some(10), Some(20)], "rank {rank}");
                let rate = metrics.column("samples_per_s").expect("samples_per_s");
                assert!(rate.iter().all(|r| *r > 0.0), "rank {rank}: {rate:?}");
                assert_eq!(metrics.column("loss").map(<[f64]>::len), Some(2));
            }
        }
    }
    assert_eq!(sums.len(), 1, "modes disagree: {sums:?}");
}

/// torchrun mode with the venv's python named by its path and neither the venv nor any
/// `torchrun` on PATH: herd runs `PYTHON -m torch.distributed.run`, and the job trains to
/// the end; a command that is no python is refused before queueing, naming the fix.
#[test]
fn torchrun_mode_runs_a_venv_python_named_by_path_without_torchrun_on_path() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_torchrun_venv");
    let exp_root = exps.display().to_string();
    let python = bed.python().display().to_string();
    assert!(bed.python().is_absolute(), "{python}");
    // PATH as the test has it, less the venv's bin and any folder with a torchrun in it.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path)
        .filter(|d| Some(d.as_path()) != bed.python().parent() && !d.join("torchrun").exists())
        .collect();
    let path = std::env::join_paths(&kept)
        .expect("PATH")
        .into_string()
        .expect("PATH is UTF-8");
    let refused = herd_with_path(
        "check",
        &project,
        &["--mode", "torchrun", "--nodes", "1", "--", "./missing.sh"],
        &path,
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains("`torchrun` is not on PATH here")
            && said.contains("-m torch.distributed.run"),
        "{said}"
    );
    let name = "ddp-torchrun-venv";
    let out = herd_with_path(
        "submit",
        &project,
        &[
            "-J",
            name,
            "--mode",
            "torchrun",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--partition",
            "gpu",
            "--time",
            "10",
            "--exp-root",
            &exp_root,
            "--",
            &python,
            "train_ddp.py",
            "--steps",
            "4",
            "--log-every",
            "2",
        ],
        &path,
    );
    let job = job_id(&out);
    let exp = exps.join(name);
    let script = std::fs::read_to_string(exp.join("job.sbatch")).expect("job.sbatch");
    assert!(
        script.contains(&format!("'{python}' -m torch.distributed.run --nnodes=2")),
        "{script}"
    );
    let output = wait_ok(&bed, job, &exp);
    checksum(&output, 4);
}

/// Submitting an existing name is refused and the folder stays byte-for-byte the same; a
/// misspelled dependency is refused before anything is written.
#[test]
fn existing_names_and_unknown_dependencies_are_refused_writing_nothing() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_refusals");
    let exp_root = exps.display().to_string();
    let base = ["--nodes", "1", "--exp-root", &exp_root];
    let first = submit(
        &bed,
        &project,
        &[
            &["-J", "taken"][..],
            &base,
            &["--", "python", "probe.py", "."],
        ]
        .concat(),
    );
    let job = job_id(&first);
    wait_ok(&bed, job, &exps.join("taken"));
    let before = tree_digest(&exps.join("taken"));
    let again = submit(
        &bed,
        &project,
        &[&["-J", "taken"][..], &base, &["--", "true"]].concat(),
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists and is never overwritten"));
    assert_eq!(
        tree_digest(&exps.join("taken")),
        before,
        "the existing folder changed"
    );

    let typo = submit(
        &bed,
        &project,
        &[
            &["-J", "eval", "--after", "pretrian"][..],
            &base,
            &["--", "true"],
        ]
        .concat(),
    );
    assert_eq!(typo.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(
        stderr.contains("no queued or running job of yours is named \"pretrian\""),
        "{stderr}"
    );
    assert!(
        !exps.join("eval").exists(),
        "nothing written after a failed check"
    );
}

/// `herd submit -J NAME --nodes 1 --exp-root ROOT FLAGS… -- true` from `project`.
fn submit_true(bed: &Bed, project: &Path, exp_root: &str, name: &str, flags: &[&str]) -> Output {
    let head = ["-J", name, "--nodes", "1", "--exp-root", exp_root];
    submit(bed, project, &[&head[..], flags, &["--", "true"]].concat())
}

/// `sbatch --hold --job-name=NAME --wrap=true` from `dir`: a job that waits, by name.
fn held_job(dir: &Path, name: &str) -> JobId {
    let out = Command::new("sbatch")
        .args(["--parsable", "--hold", "--job-name", name, "--wrap=true"])
        .current_dir(dir)
        .output()
        .expect("sbatch runs");
    assert!(out.status.success(), "sbatch: {out:?}");
    JobId(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("job id"),
    )
}

/// What sbatch itself refuses (a node the cluster does not have, which herd does not
/// check) leaves no experiment folder behind: the one just created is removed, and the
/// error is sbatch's own.
#[test]
fn a_job_sbatch_refuses_leaves_no_experiment_folder() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_sbatch_refuses");
    let exp_root = exps.display().to_string();
    let out = submit_true(
        &bed,
        &project,
        &exp_root,
        "refused",
        &["--sbatch-arg=--nodelist=gpu-z99"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Invalid node name specified"),
        "sbatch's own words: {stderr}"
    );
    let left: Vec<_> = std::fs::read_dir(&exps)
        .map(|d| d.map(|e| e.expect("entry").file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left in the experiment root: {left:?}");
}

/// `--after NAME:any` and `NAME:notok` become SLURM's afterany and afternotok on the jobs
/// of those names; a name that several jobs have is refused, listing their ids, and
/// nothing is written or submitted.
#[test]
fn after_kinds_by_name_and_a_name_of_several_jobs() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_after_kinds");
    let exp_root = exps.display().to_string();
    let scratch = project.parent().expect("scratch").to_path_buf();
    let (pa, pb) = (
        held_job(&scratch, "after-pa"),
        held_job(&scratch, "after-pb"),
    );
    let dups = [
        held_job(&scratch, "after-dup"),
        held_job(&scratch, "after-dup"),
    ];

    let out = submit_true(
        &bed,
        &project,
        &exp_root,
        "kinds",
        &["--after", "after-pa:any", "--after", "after-pb:notok"],
    );
    let kinds = job_id(&out);
    let info = bed.job(kinds).expect("the job");
    let dependency = info.fields.get("Dependency").cloned().unwrap_or_default();
    assert!(
        dependency.contains(&format!("afterany:{pa}(unfulfilled)"))
            && dependency.contains(&format!("afternotok:{pb}(unfulfilled)")),
        "{dependency}"
    );

    let out = submit_true(
        &bed,
        &project,
        &exp_root,
        "ambiguous",
        &["--after", "after-dup"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--after after-dup: 2 jobs are named \"after-dup\" (ids {}, {}); give the id instead",
            dups[0], dups[1]
        )),
        "{stderr}"
    );
    assert!(!exps.join("ambiguous").exists(), "nothing written");
    let queued = Command::new("squeue")
        .args(["-h", "-n", "ambiguous", "-o", "%i"])
        .output()
        .expect("squeue");
    assert!(
        String::from_utf8_lossy(&queued.stdout).trim().is_empty(),
        "nothing submitted"
    );
}

/// A submitted job checkpoints into its experiment's `checkpoints/` (HERD_CHECKPOINT_DIR);
/// stopped by SIGUSR1 and queued again with `--resume`, its workers get the newest complete
/// checkpoint as HERD_RESUME_FROM (chosen by the leader and said in the log) and the run
/// ends with the checksum of an uninterrupted one.
#[test]
fn a_resumed_experiment_starts_from_its_newest_checkpoint() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_resume_checkpoint");
    let exp_root = exps.display().to_string();
    let args = |name: &'static str, slow: bool| -> Vec<String> {
        let mut a: Vec<String> = [
            "-J",
            name,
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--time",
            "10",
            "--exp-root",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(exp_root.clone());
        a.extend(
            [
                "--",
                "python",
                "train_ddp.py",
                "--steps",
                "60",
                "--log-every",
                "5",
                "--ckpt-every",
                "20",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        if slow {
            a.extend(["--step-time".to_owned(), "0.2".to_owned()]);
        }
        a
    };
    let exp = exps.join("ckpt");
    let first = job_id(&submit(&bed, &project, &strs(&args("ckpt", true))));
    let rank0 = exp.join("logs/attempt-0/rank-0.out");
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while !read_lossy(&rank0).contains("rank=0 step=25 ") {
        assert!(
            std::time::Instant::now() < deadline,
            "no step 25 in {}:\n{}",
            rank0.display(),
            read_lossy(&rank0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    bed.signal(first, "USR1").expect("scancel --signal=USR1");
    let out = wait_ok(&bed, first, &exp);
    let stops = rank_lines(&out, "stopping");
    assert_eq!(stops.len(), 4, "every rank stops on SIGUSR1:\n{out}");
    let stop: u32 = stops[&0]["step"].parse().expect("step");
    let mut ckpts: Vec<String> = std::fs::read_dir(exp.join("checkpoints"))
        .expect("checkpoints/ of the experiment")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    ckpts.sort();
    assert_eq!(
        ckpts.last(),
        Some(&format!("ckpt-{stop:09}.pt")),
        "the stop checkpoint is the newest: {ckpts:?}"
    );
    assert!(ckpts.contains(&"ckpt-000000020.pt".to_owned()), "{ckpts:?}");

    let again = submit(
        &bed,
        &project,
        &["--resume", "ckpt", "--exp-root", &exp_root],
    );
    let second = job_id(&again);
    let straight = job_id(&submit(&bed, &project, &strs(&args("straight", false))));
    let resumed = wait_ok(&bed, second, &exp);
    let newest = exp.join(format!("checkpoints/ckpt-{stop:09}.pt"));
    let said = read_lossy(exp.join(format!("logs/{second}.err")));
    assert!(
        said.contains(&format!("attempt 1 resumes from {}", newest.display())),
        "the leader names the checkpoint it gives the workers:\n{said}"
    );
    let resumes = rank_lines(&resumed, "resumed");
    assert_eq!(resumes.len(), 4, "every rank resumes:\n{resumed}");
    assert!(
        resumes
            .values()
            .all(|f| f["from"] == newest.display().to_string() && f["step"] == stop.to_string()),
        "{resumed}"
    );
    let reference = wait_ok(&bed, straight, &exps.join("straight"));
    assert!(
        rank_lines(&reference, "resumed").is_empty(),
        "a new experiment starts fresh: {reference}"
    );
    assert_eq!(
        checksum(&resumed, 4),
        checksum(&reference, 4),
        "the resumed run diverged from the uninterrupted one"
    );
    // The timeline tells both jobs' story, in order, from herd submit and the leader.
    let events = herd_exp::timeline::read(&exp).expect("timeline.jsonl");
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        names,
        [
            "queued",
            "started",
            "rendezvous",
            "attempt_started",
            "first_output",
            "signal",
            "finished",
            "queued",
            "started",
            "rendezvous",
            "attempt_started",
            "first_output",
            "finished"
        ],
        "{events:#?}"
    );
    let job = |e: &serde_json::Map<String, Value>| e["job_id"].to_string().replace('"', "");
    assert_eq!(
        (job(&events[0]), &events[0]["submission"]),
        (first.to_string(), &Value::from(1))
    );
    assert_eq!(job(&events[1]), first.to_string());
    assert_eq!(events[2]["world_size"], 4);
    assert_eq!(events[3]["resume_from"], Value::Null, "{:?}", events[3]);
    assert_eq!(
        (&events[5]["signal"], &events[5]["action"]),
        (&Value::from("SIGUSR1"), &Value::from("forward")),
        "a user's USR1 long before the time limit is passed on: {:?}",
        events[5]
    );
    assert_eq!(events[6]["ok"], true);
    assert_eq!(
        (job(&events[7]), &events[7]["submission"]),
        (second.to_string(), &Value::from(2))
    );
    assert_eq!(job(&events[8]), second.to_string());
    assert_eq!(
        (&events[10]["attempt"], &events[10]["resume_from"]),
        (&Value::from(1), &Value::from(newest.display().to_string())),
        "the second job's attempt is the experiment's second: {:?}",
        events[10]
    );
    assert_eq!(events[12]["ok"], true);
    let times: Vec<u64> = events
        .iter()
        .map(|e| e["unix_ms"].as_u64().expect("unix_ms"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Each attempt has its own log folder: the first one's is kept as it was.
    let log = read_lossy(&rank0);
    assert!(
        log.contains(&format!("stopping on SIGUSR1 step={stop}")) && !log.contains("resumed"),
        "{log}"
    );
    let log = read_lossy(exp.join("logs/attempt-1/rank-0.out"));
    assert!(
        log.contains("resumed from=") && log.contains("done steps=60"),
        "{log}"
    );
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `herd check ARGS` from `project` on the bed.
fn check(project: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("check")
        .args(args)
        .current_dir(project)
        .output()
        .expect("herd check runs")
}

/// `herd check` asks the bed's slurmctld for its partitions and node sizes (`sinfo`): a job
/// that no node can hold is refused naming the key, with the bed's real sizes (8 CPUs,
/// 16000 MB, 4 GPUs a node), and one that fits passes.
#[test]
fn check_refuses_what_no_node_of_the_partition_has() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "check_node_sizes");
    let exp_root = exps.display().to_string();
    let base = ["--nodes", "2", "--exp-root", &exp_root];
    let run = ["--", "true"];
    let gpus = check(
        &project,
        &[&base[..], &["--gpus-per-node", "8"], &run].concat(),
    );
    assert_eq!(gpus.status.code(), Some(1), "{gpus:?}");
    let stderr = String::from_utf8_lossy(&gpus.stderr);
    assert!(
        stderr.contains("no node of partition gpu has 8 GPUs (the most is 4)"),
        "{stderr}"
    );
    let mem = check(
        &project,
        &[&base[..], &["--gpus-per-node", "4", "--mem", "20G"], &run].concat(),
    );
    assert_eq!(mem.status.code(), Some(1), "{mem:?}");
    let stderr = String::from_utf8_lossy(&mem.stderr);
    assert!(
        stderr.contains("no node of partition gpu has more than 16000M"),
        "{stderr}"
    );
    let nodes = check(
        &project,
        &[
            "--nodes",
            "4",
            "--gpus-per-node",
            "4",
            "--exp-root",
            &exp_root,
            "--",
            "true",
        ],
    );
    assert_eq!(nodes.status.code(), Some(1), "{nodes:?}");
    let fits = check(
        &project,
        &[&base[..], &["--gpus-per-node", "4"], &run].concat(),
    );
    assert!(
        fits.status.success() && String::from_utf8_lossy(&fits.stdout).contains("check passed"),
        "{fits:?}"
    );
    assert!(
        !String::from_utf8_lossy(&fits.stderr).contains("not checked"),
        "scontrol and sinfo both answered: {fits:?}"
    );
    assert!(!exps.exists(), "herd check writes nothing");
}

/// A chain: eval starts only after pretrain ends (`--after pretrain`, by name).
#[test]
fn a_dependency_by_name_runs_the_chain_in_order() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_chain");
    let exp_root = exps.display().to_string();
    // pretrain runs until the test says go: the dependency is unfulfilled while it checks.
    let go = project.with_file_name("go");
    let pre = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "pretrain-chain",
            "--nodes",
            "1",
            "--exp-root",
            &exp_root,
            "--",
            "python",
            "waiter.py",
            "--lines",
            "0",
            "--go",
            go.to_str().expect("utf-8"),
        ],
    ));
    let eval = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "eval-chain",
            "--nodes",
            "1",
            "--after",
            "pretrain-chain",
            "--exp-root",
            &exp_root,
            "--",
            "true",
        ],
    ));
    let info = bed.job(eval).expect("eval job");
    assert_eq!(
        info.fields.get("Dependency").map(String::as_str),
        Some(format!("afterok:{pre}(unfulfilled)").as_str()),
        "{:?}",
        info.fields
    );
    std::fs::write(&go, "").expect("go");
    let pre_info = bed
        .wait(pre, Duration::from_secs(120))
        .expect("pretrain ends");
    let eval_info = bed.wait(eval, Duration::from_secs(120)).expect("eval ends");
    assert!(pre_info.succeeded() && eval_info.succeeded());
    assert!(
        eval_info.fields["StartTime"] >= pre_info.fields["EndTime"],
        "eval started {} before pretrain ended {}",
        eval_info.fields["StartTime"],
        pre_info.fields["EndTime"]
    );
}

/// Edits to the source after submitting change nothing the job runs; arguments with spaces,
/// quotes, `$()`, newlines and non-ASCII reach every worker byte for byte, in each launch
/// mode (agent, srun's one task per GPU, torchrun), through the real sbatch and srun.
#[test]
fn the_job_runs_the_snapshot_with_arguments_intact() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_snapshot");
    let exp_root = exps.display().to_string();
    std::fs::write(
        project.join("show.py"),
        // One write of both lines: in torchrun mode the ranks of a node share one stdout,
        // and print's pieces (unbuffered) would interleave with another rank's.
        "import json, os, sys, time\ntime.sleep(2)\nrank = os.environ['RANK']\n\
         sys.stdout.write(f\"VERSION {rank} {open('version.txt').read()}\\n\"\n\
         f\"ARGV {rank} {json.dumps(sys.argv[1:])}\\n\")\nsys.stdout.flush()\n",
    )
    .expect("write");
    let args = [
        "with space",
        "it's \"q\"",
        "$(touch pwned)",
        "`touch pwned`",
        "*",
        "new\nline",
        "ünï ✓",
        "",
        "--",
        ";|&>x",
    ];
    for mode in ["agent", "srun", "torchrun"] {
        std::fs::write(project.join("version.txt"), "v1").expect("write");
        let name = format!("snap-{mode}");
        let mut argv: Vec<&str> = vec![
            "-J",
            &name,
            "--mode",
            mode,
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--exp-root",
            &exp_root,
            "--",
            "python",
            "show.py",
        ];
        argv.extend(args);
        let job = job_id(&submit(&bed, &project, &argv));
        std::fs::write(project.join("version.txt"), "v2").expect("edit after submit");
        let exp = exps.join(&name);
        let batch = wait_ok(&bed, job, &exp);
        // Each rank's own output: the agent's rank logs, or the batch output (srun,
        // torchrun) with every rank's lines.
        let mut out = batch;
        for rank in 0..4 {
            out.push_str(&read_lossy(
                exp.join(format!("logs/attempt-0/rank-{rank}.out")),
            ));
        }
        let versions: BTreeSet<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("VERSION "))
            .collect();
        assert_eq!(
            versions,
            ["0 v1", "1 v1", "2 v1", "3 v1"].into(),
            "{mode}: every rank runs the snapshot:\n{out}"
        );
        let mut ranks = BTreeSet::new();
        for line in out.lines().filter_map(|l| l.strip_prefix("ARGV ")) {
            let (rank, json) = line.split_once(' ').expect("ARGV RANK JSON");
            let got: Vec<String> = serde_json::from_str(json).expect("argv json");
            assert_eq!(got, args, "{mode}: rank {rank}'s argv");
            ranks.insert(rank.to_owned());
        }
        assert_eq!(
            ranks.len(),
            4,
            "{mode}: an argv line from every rank:\n{out}"
        );
        assert!(
            !exp.join("code/pwned").exists() && !project.join("pwned").exists(),
            "{mode}: an argument ran"
        );
    }
    // No store beside the experiments: everything is in the experiment folder.
    let mut names: Vec<_> = std::fs::read_dir(&exps)
        .expect("experiment root")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["snap-agent", "snap-srun", "snap-torchrun"],
        "the experiment root holds only the experiments"
    );
}

/// A digest of every path, type, mode and content under `dir`.
fn tree_digest(dir: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg("find . -printf '%p %y %m %s %T@\\n' | sort; find . -type f -print0 | sort -z | xargs -0 sha256sum")
        .current_dir(dir)
        .output()
        .expect("find");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `herd submit pretrain.toml --then eval.toml`: one command, two jobs, the second held until
/// the first succeeds; `--resume NAME` adds an attempt in the same folder with a new job id.
#[test]
fn then_chains_in_one_command_and_resume_adds_a_submission_whose_attempt_all_views_agree_on() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_then");
    let exp_root = exps.display().to_string();
    // then-pre runs until the test says go: the dependency is unfulfilled while it checks.
    let go = project.with_file_name("go");
    std::fs::write(
        project.join("pre.toml"),
        format!(
            "job_name = \"then-pre\"\ncommand = [\"python\", \"waiter.py\", \"--lines\", \"0\", \"--go\", {:?}]\n",
            go.to_str().expect("utf-8")
        ),
    )
    .expect("write");
    std::fs::write(
        project.join("eval.toml"),
        "job_name = \"then-eval\"\ncommand = [\"python\", \"probe.py\", \".\"]\n",
    )
    .expect("write");
    let out = submit(
        &bed,
        &project,
        &["pre.toml", "--then", "eval.toml", "--exp-root", &exp_root],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<JobId> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| JobId(l.trim().parse().expect("id")))
        .collect();
    assert_eq!(ids.len(), 2, "{out:?}");
    let eval = bed.job(ids[1]).expect("eval");
    assert_eq!(
        eval.fields.get("Dependency").map(String::as_str),
        Some(format!("afterok:{}(unfulfilled)", ids[0]).as_str())
    );
    std::fs::write(&go, "").expect("go");
    let pre_info = bed
        .wait(ids[0], Duration::from_secs(120))
        .expect("pre ends");
    let eval_info = bed
        .wait(ids[1], Duration::from_secs(120))
        .expect("eval ends");
    assert!(pre_info.succeeded() && eval_info.succeeded());
    assert!(eval_info.fields["StartTime"] >= pre_info.fields["EndTime"]);

    // A second submission of the finished eval experiment, in the same folder: its workers'
    // start is attempt 1 (the first submission's was attempt 0), and the message, the
    // folder, `herd status` and `herd logs` all say so.
    let again = submit(
        &bed,
        &project,
        &["--resume", "then-eval", "--exp-root", &exp_root],
    );
    let second = job_id(&again);
    assert_ne!(second, ids[1]);
    let said = String::from_utf8_lossy(&again.stderr).into_owned();
    let attempt_dir = exps.join("then-eval/logs/attempt-1");
    assert!(
        said.contains(&format!(
            "submitted job {second}: submission 2 of experiment {}; its workers start as attempt 1 ({})",
            exps.join("then-eval").display(),
            attempt_dir.display()
        )),
        "{said}"
    );
    wait_ok(&bed, second, &exps.join("then-eval"));
    assert!(
        attempt_dir.is_dir(),
        "the resumed workers log to {attempt_dir:?}"
    );
    assert!(!exps.join("then-eval/logs/attempt-2").exists());
    let status = herd_with_path(
        "status",
        &project,
        &["--json", "--exp-root", &exp_root, "then-eval"],
        &std::env::var("PATH").unwrap_or_default(),
    );
    let status: Value = serde_json::from_slice(&status.stdout).expect("status --json");
    let eval = &status["experiments"][0];
    assert_eq!(eval["name"], "then-eval", "{status:#}");
    assert_eq!(eval["submissions"], 2, "{status:#}");
    assert_eq!(eval["attempts"], 2, "attempts 0 and 1: {status:#}");
    let logs = herd_with_path(
        "logs",
        &project,
        &["then-eval", "--all-attempts", "--exp-root", &exp_root],
        &std::env::var("PATH").unwrap_or_default(),
    );
    let logs = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(
        logs.contains(&format!(
            "── attempt 1 (resumed: submission 2, job {second}) ──"
        )),
        "{logs}"
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(exps.join("then-eval/manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["submissions"][1]["number"], 2, "{manifest:#}");
    assert_eq!(
        manifest["submissions"][1]["runs"][0]["attempt"], 1,
        "{manifest:#}"
    );
    let manifest = std::fs::read_to_string(exps.join("then-eval/manifest.json")).expect("manifest");
    assert!(
        manifest.contains(&format!("\"{}\"", ids[1]))
            && manifest.contains(&format!("\"{second}\"")),
        "{manifest}"
    );
    assert!(
        exps.join(format!("then-eval/logs/{}.out", ids[1]))
            .is_file(),
        "attempt 1's log kept"
    );
}

/// A newcomer's loop: the same script submitted twice without `-J`, a report written into
/// the project folder as the README's tour does, then a third submit.
#[test]
fn submits_without_a_name_never_collide_and_reports_stay_out_of_snapshots() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "submit_unnamed",
        &[("examples/train_ddp.py", "train.py")],
    );
    let exp_root = exps.display().to_string();
    let args = [
        "--exp-root",
        &exp_root,
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--",
        "python",
        "train.py",
        "--steps",
        "30",
    ];
    let first = submit(&bed, &project, &args);
    let second = submit(&bed, &project, &args);
    let (a, b) = (job_id(&first), job_id(&second));
    assert_ne!(a, b);
    let said = String::from_utf8_lossy(&second.stderr).into_owned();
    assert!(
        said.contains(&format!(
            "{} exists, so this job is named train-2 (give --job-name NAME to choose)",
            exps.join("train").display()
        )),
        "{said}"
    );
    // Both queued, each in its own experiment, named after the script.
    for (id, name) in [(a, "train"), (b, "train-2")] {
        let job = bed.job(id).expect("queued");
        assert_eq!(job.fields.get("JobName").map(String::as_str), Some(name));
        assert!(exps.join(name).join("manifest.json").is_file(), "{name}");
    }
    wait_ok(&bed, a, &exps.join("train"));
    wait_ok(&bed, b, &exps.join("train-2"));

    // The tour's report, written into the project folder.
    let report = herd_with_path(
        "report",
        &project,
        &[
            "train",
            "--exp-root",
            &exp_root,
            "--plots",
            "plots",
            "--html",
            "report.html",
        ],
        &std::env::var("PATH").unwrap_or_default(),
    );
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(project.join("report.html").is_file() && project.join("plots").is_dir());

    let third = submit(&bed, &project, &args);
    let c = job_id(&third);
    let said = String::from_utf8_lossy(&third.stderr).into_owned();
    assert!(
        said.contains("herd: code snapshot: left out 2 things herd wrote (experiments, logs, report pages and plots are never snapshotted): plots/ and report.html"),
        "{said}"
    );
    let code = exps.join("train-3/code");
    assert!(code.join("train.py").is_file(), "the script is snapshotted");
    assert!(
        !code.join("report.html").exists(),
        "the report page is not snapshotted"
    );
    assert!(
        !code.join("plots").exists(),
        "the report's plots are not snapshotted"
    );
    wait_ok(&bed, c, &exps.join("train-3"));
}
