//! `herd submit` on the bed (issue #5): experiment folders, snapshots, the three launch
//! modes, names, refusals. Dependencies, chains and resume: `chains.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use herd_testbed::{rank_lines, read_lossy, Bed};

use crate::support::{herd_with_path, job_id, project_with, submit, wait_ok};
use serde_json::Value;

/// A project folder with the example and the probe, and an experiment root beside it.
pub(crate) fn project(bed: &Bed, name: &str) -> (PathBuf, PathBuf) {
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

pub(crate) fn checksum(output: &str, world: usize) -> String {
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

    // A job id SLURM does not know (ended long ago, or a typo): Slurm 22.05 dropped such a
    // dependency and ran the job at once, 23.02 and later refuse it at sbatch; herd refuses
    // it before anything is written, on every release.
    let forgotten = submit(
        &bed,
        &project,
        &[
            &["-J", "late", "--after", "999999"][..],
            &base,
            &["--", "true"],
        ]
        .concat(),
    );
    assert_eq!(forgotten.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&forgotten.stderr);
    assert!(
        stderr.contains("SLURM does not know job 999999"),
        "{stderr}"
    );
    assert!(
        !exps.join("late").exists(),
        "nothing written for a forgotten job"
    );
    // A job that completed can never meet `notok`: SLURM would hold the new one for ever.
    let never = submit(
        &bed,
        &project,
        &[
            &["-J", "cleanup", "--after", &format!("{job}:notok")][..],
            &base,
            &["--", "true"],
        ]
        .concat(),
    );
    assert_eq!(never.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&never.stderr);
    assert!(
        stderr.contains(&format!("job {job} has ended (COMPLETED)")),
        "{stderr}"
    );
    assert!(!exps.join("cleanup").exists());
    // …while `ok` on it is met at once.
    let next = job_id(&submit(
        &bed,
        &project,
        &[
            &["-J", "next", "--after", &job.to_string()][..],
            &base,
            &["--", "true"],
        ]
        .concat(),
    ));
    wait_ok(&bed, next, &exps.join("next"));
}

/// `herd submit -J NAME --nodes 1 --exp-root ROOT FLAGS… -- true` from `project`.
pub(crate) fn submit_true(
    bed: &Bed,
    project: &Path,
    exp_root: &str,
    name: &str,
    flags: &[&str],
) -> Output {
    let head = ["-J", name, "--nodes", "1", "--exp-root", exp_root];
    submit(bed, project, &[&head[..], flags, &["--", "true"]].concat())
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

/// README's flow on the bed: a venv made in the project folder and put first on PATH (as
/// `. .venv/bin/activate` does), then `herd submit -- python train.py`: the snapshot is the
/// code alone, one line says the venv was left out, and the job's workers run the
/// project's own venv (a `.pth` in it marks each interpreter that starts in a job).
#[test]
fn a_venv_in_the_project_is_left_out_of_the_snapshot_and_the_job_runs_from_it() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "submit_venv",
        &[("examples/train_ddp.py", "train.py")],
    );
    let venv = project.join(".venv");
    let made = Command::new(bed.python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python runs");
    assert!(made.success(), "python -m venv .venv");
    let site = Command::new(venv.join("bin/python"))
        .args(["-c", "import site; print(site.getsitepackages()[0])"])
        .output()
        .expect("the venv's python runs");
    let site = PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    let torch_site = Command::new(bed.python())
        .args(["-c", "import site; print(site.getsitepackages()[0])"])
        .output()
        .expect("the bed's python runs");
    let marks = exps.parent().expect("scratch").join("marks");
    std::fs::create_dir_all(&marks).expect("marks");
    // torch from the bed's venv (no 5 GB install), and a mark from every job's interpreter.
    std::fs::write(
        site.join("bed-torch.pth"),
        format!("{}\n", String::from_utf8_lossy(&torch_site.stdout).trim()),
    )
    .expect("pth");
    std::fs::write(
        site.join("zz-mark.pth"),
        format!(
            "import os; os.environ.get('HERD_ATTEMPT') and open(os.path.join({:?}, 'rank-' + os.environ['RANK']), 'w').close()\n",
            marks.display().to_string()
        ),
    )
    .expect("pth");
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let exp_root = exps.display().to_string();
    let out = herd_with_path(
        "submit",
        &project,
        &[
            "-J",
            "venv",
            "--exp-root",
            &exp_root,
            "--nodes",
            "2",
            "--gpus-per-node",
            "1",
            "--",
            "python",
            "train.py",
            "--steps",
            "10",
        ],
        &path,
    );
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let job = job_id(&out);
    assert!(
        said.contains("herd: code snapshot: left out the Python environment .venv/ (a job runs its Python from where it is installed, never from code/): it holds pyvenv.cfg"),
        "{said}"
    );
    let exp = exps.join("venv");
    let code: Vec<String> = std::fs::read_dir(exp.join("code"))
        .expect("code")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(code, ["train.py"], "only the code is snapshotted");
    wait_ok(&bed, job, &exp);
    let mut ran: Vec<String> = std::fs::read_dir(&marks)
        .expect("marks")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    ran.sort();
    assert_eq!(
        ran,
        ["rank-0", "rank-1"],
        "both workers ran the project's venv"
    );
}
