//! `herd submit --sweep` with fake SLURM commands: the refusals that write nothing and
//! submit nothing, the dry run, a sweep queued by a fake sbatch (its folder, each run's job
//! id and `queued` event), a sweep over `nodes` queued as one array job per resource shape,
//! and an sbatch that refuses it (nothing kept).

use super::submit::{fake_command, herd_here, slurm_called, submit_project};
use super::*;

/// Names in `dir`, sorted; none when it does not exist.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut n: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    n.sort();
    n
}

fn sweep_here(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    sweep_here_with(dir, args, &[])
}

/// [`sweep_here`] with `env` set.
fn sweep_here_with(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let exps = dir.join("exps");
    let argv: Vec<&str> = ["submit", "--exp-root", exps.to_str().expect("utf-8")]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    herd_here(dir, &argv, env)
}

/// Every refusal of a sweep exits 2 with a message naming what to change, writes nothing
/// and calls no sbatch.
#[test]
fn sweep_refusals_exit_2_writing_nothing() {
    let dir = submit_project(&[("train.sh", 10)]);
    std::fs::write(dir.path().join("project/grid.toml"), "[grid]\nlr = [1]\n").expect("file");
    let cases: [(&[&str], &str); 8] = [
        (
            &["-J", "g", "--sweep", "lr=1,2", "--", "sh", "train.sh", "{lr}", "{sed}"],
            "herd: error: the command has `{sed}`, which is no sweep key (lr): fix its name or add `--sweep sed=…`",
        ),
        (
            &["-J", "g", "--sweep", "lr=1,2", "--sweep", "seed=1", "--", "sh", "train.sh", "{lr}"],
            "herd: error: sweep key `seed` appears nowhere in the command as `{seed}`",
        ),
        (
            &["-J", "g", "--sweep", "lr=1", "--", "sh", "train.sh", "{lr}"],
            "the sweep has one run: submit it as a single job (without --sweep)",
        ),
        (
            &["-J", "g", "--max-parallel", "2", "--", "sh", "train.sh"],
            "--max-parallel 2 limits a sweep's runs at once: give --sweep KEY=V1,V2 or --sweep-file FILE",
        ),
        (
            &["-J", "g", "--sweep", "lr=1,2", "--resume", "g"],
            "cannot be used with",
        ),
        (
            &["-J", "g", "--sweep", "lr=1,2", "--then", "next.toml", "--", "sh", "{lr}"],
            "cannot be used with",
        ),
        (
            &["-J", "g", "--sweep", "lr=1,2", "--wait", "--", "sh", "train.sh", "{lr}"],
            "--wait does not watch a sweep yet",
        ),
        (
            &["-J", "g", "--sweep-file", "grid.toml", "--sweep", "lr=2,3", "--max-parallel", "0", "--", "sh", "train.sh", "{lr}"],
            "herd: error: --max-parallel 0: give at least 1\nherd: error: key `lr` is given both in the sweep file's [grid] and by --sweep: keep one\n",
        ),
    ];
    for (args, want) in cases {
        let out = sweep_here(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert!(!dir.path().join("exps").exists(), "{args:?}: written");
    }
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
}

/// `--dry-run` prints the grid table and the array script and writes nothing.
#[test]
fn sweep_dry_run_prints_the_grid_and_the_array_script() {
    let dir = submit_project(&[("train.sh", 10)]);
    let out = sweep_here(
        dir.path(),
        &[
            "--dry-run",
            "-J",
            "grid",
            "--sweep",
            "lr=0.1,0.01",
            "--sweep",
            "seed=1,2",
            "--max-parallel",
            "2",
            "--",
            "sh",
            "train.sh",
            "--lr={lr}",
            "{seed}",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout_of(&out);
    assert!(
        text.starts_with(
            "#  run             lr    seed\n0  lr=0.1,seed=1   0.1   1\n1  lr=0.1,seed=2   0.1   2\n2  lr=0.01,seed=1  0.01  1\n3  lr=0.01,seed=2  0.01  2\n\n#!/bin/bash\n"
        ),
        "{text}"
    );
    assert!(text.contains("#SBATCH --array=0-3%2\n"), "{text}");
    assert!(
        text.contains("/exps/grid/lr=0.01,seed=2/job.sbatch' "),
        "{text}"
    );
    assert!(text.contains("sweep folder (not created): "), "{text}");
    assert!(
        !dir.path().join("exps").exists(),
        "a dry run writes nothing"
    );
    assert!(!slurm_called(dir.path()).contains("sbatch"));
}

/// A sweep queued by a (fake) sbatch: one array job from the sweep folder, `sweep.json`
/// with the submission, every run an experiment whose job id is `ARRAYID_INDEX`, with its
/// `queued` event and its own values in its script; stdout the array's id. Submitted from
/// inside another array's task, whose identity sbatch does not pass on.
#[test]
fn a_sweep_is_one_array_job_and_each_run_records_its_task() {
    let dir = submit_project(&[("train.sh", 10)]);
    let called = dir.path().join("sbatch-args");
    fake_command(
        dir.path(),
        "sbatch",
        &format!("echo \"$PWD $*\" > '{}'\necho 4242", called.display()),
    );
    let out = sweep_here(
        dir.path(),
        &[
            "-J",
            "grid",
            "--sweep",
            "lr=0.1,0.01",
            "--sweep",
            "seed=1,2",
            "--max-parallel",
            "2",
            "--",
            "sh",
            "train.sh",
            "--lr={lr}",
            "--seed",
            "{seed}",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout_of(&out), "4242\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let sweep = std::fs::canonicalize(dir.path().join("exps/grid")).expect("sweep folder");
    assert!(
        stderr.contains(&format!(
            "herd: submitted sweep grid: job 4242, 4 runs (at most 2 at once): experiment folder {}\n",
            sweep.display()
        )),
        "{stderr}"
    );
    let script = sweep.join("job.sbatch");
    assert_eq!(
        std::fs::read_to_string(&called).expect("sbatch ran"),
        format!("{} --parsable {}\n", sweep.display(), script.display()),
        "from the sweep folder, and no SLURM_ARRAY_* of the submitter's own"
    );
    assert_eq!(
        names(&sweep),
        [
            ".lock",
            "job.sbatch",
            "logs",
            "lr=0.01,seed=1",
            "lr=0.01,seed=2",
            "lr=0.1,seed=1",
            "lr=0.1,seed=2",
            "sweep.json"
        ]
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweep.join("sweep.json")).expect("sweep.json"))
            .expect("json");
    assert_eq!(
        manifest["submissions"],
        serde_json::json!([{"number": 1, "job_id": "4242", "tasks": [0, 1, 2, 3]}])
    );
    assert_eq!(manifest["keys"], serde_json::json!(["lr", "seed"]));
    assert_eq!(manifest["max_parallel"], 2);
    let array = std::fs::read_to_string(&script).expect("array script");
    assert!(array.contains("#SBATCH --array=0-3%2\n"), "{array}");
    for (i, (run, lr, seed)) in [
        ("lr=0.1,seed=1", "0.1", "1"),
        ("lr=0.1,seed=2", "0.1", "2"),
        ("lr=0.01,seed=1", "0.01", "1"),
        ("lr=0.01,seed=2", "0.01", "2"),
    ]
    .into_iter()
    .enumerate()
    {
        let exp = sweep.join(run);
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(exp.join("manifest.json")).expect("manifest"))
                .expect("json");
        let task = format!("4242_{i}");
        assert_eq!(m["submissions"][0]["job_id"], task.as_str(), "{run}");
        assert_eq!(m["plan"]["exp_root"], sweep.display().to_string().as_str());
        assert_eq!(
            m["plan"]["command"],
            serde_json::json!(["sh", "train.sh", format!("--lr={lr}"), "--seed", seed])
        );
        let timeline = std::fs::read_to_string(exp.join("timeline.jsonl")).expect("timeline");
        let queued: serde_json::Value =
            serde_json::from_str(timeline.lines().next().expect("one event")).expect("json");
        assert_eq!(queued["event"], "queued");
        assert_eq!(queued["job_id"], task.as_str());
        let run_script = std::fs::read_to_string(exp.join("job.sbatch")).expect("run script");
        assert!(
            run_script.contains(&format!("'sh' 'train.sh' '--lr={lr}' '--seed' '{seed}'")),
            "{run_script}"
        );
        assert!(array.contains(&format!("  {i}) script='{}/job.sbatch'", exp.display())));
        assert_eq!(names(&exp.join("code")), ["train.sh"]);
    }
}

/// An sbatch that refuses the array: exit 1 saying so, the sweep folder removed.
#[test]
fn a_refused_array_keeps_no_sweep_folder() {
    let dir = submit_project(&[("train.sh", 10)]);
    let out = sweep_here(
        dir.path(),
        &[
            "-J", "grid", "--sweep", "lr=1,2", "--", "sh", "train.sh", "{lr}",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "herd: error: sbatch refused the sweep's array job, so no sweep folder was kept"
        ),
        "{stderr}"
    );
    assert!(slurm_called(dir.path()).contains("sbatch"));
    assert!(
        names(&dir.path().join("exps")).is_empty(),
        "{:?}",
        names(&dir.path().join("exps"))
    );
    assert!(out.stdout.is_empty());
}

/// A sweep over plan keys that cannot be: a key also given as a flag, a key no sweep may
/// set, a value its flag refuses. Each exits 2, writes nothing, calls no sbatch.
#[test]
fn plan_key_refusals_exit_2_writing_nothing() {
    let dir = submit_project(&[("train.sh", 10)]);
    let cases: [(&[&str], &str); 3] = [
        (
            &[
                "-J",
                "g",
                "--nodes",
                "2",
                "--sweep",
                "nodes=1,2",
                "--",
                "sh",
                "train.sh",
            ],
            "herd: error: `nodes` is given both by --nodes and by the sweep (`nodes=…`): keep one",
        ),
        (
            &[
                "-J",
                "g",
                "--sweep",
                "job_name=a,b",
                "--",
                "sh",
                "train.sh",
                "{job_name}",
            ],
            "herd: error: plan key `job_name` cannot be swept (it names the sweep and its folder)",
        ),
        (
            &["-J", "g", "--sweep", "nodes=1,two", "--", "sh", "train.sh"],
            "herd: error: sweep values --nodes=two: invalid value 'two' for '--nodes <N>'",
        ),
    ];
    for (args, want) in cases {
        let out = sweep_here(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
        assert!(!dir.path().join("exps").exists(), "{args:?}: written");
    }
    assert!(!slurm_called(dir.path()).contains("sbatch"));
}

/// `--sweep seed=1,2 --sweep nodes=1,2`: two resource shapes, so two array scripts
/// (`job-1.sbatch` with tasks 0,2 on 1 node, `job-2.sbatch` with tasks 1,3 on 2 nodes),
/// each queued as an array of its own; stdout both ids; `sweep.json` the one submission
/// with both arrays; every run's job id its own array's task; `--dry-run` prints both
/// scripts.
#[test]
fn a_sweep_over_nodes_is_one_array_job_per_shape() {
    let dir = submit_project(&[("train.sh", 10)]);
    let args = [
        "-J",
        "scale",
        "--gpus-per-node",
        "2",
        "--sweep",
        "seed=1,2",
        "--sweep",
        "nodes=1,2",
        "--max-parallel",
        "1",
        "--",
        "sh",
        "train.sh",
        "--seed",
        "{seed}",
    ];
    let dry: Vec<&str> = std::iter::once("--dry-run").chain(args).collect();
    let out = sweep_here(dir.path(), &dry);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = stdout_of(&out);
    assert!(
        text.starts_with("#  run             seed  nodes\n0  seed=1,nodes=1  1     1\n1  seed=1,nodes=2  1     2\n"),
        "{text}"
    );
    let one =
        text.find("# job-1.sbatch: runs 0,2 (one resource shape, one array job)\n#!/bin/bash\n");
    let two =
        text.find("# job-2.sbatch: runs 1,3 (one resource shape, one array job)\n#!/bin/bash\n");
    assert!(matches!((one, two), (Some(a), Some(b)) if a < b), "{text}");
    assert!(
        text.contains("#SBATCH --array=0,2%1\n") && text.contains("#SBATCH --array=1,3%1\n"),
        "{text}"
    );
    assert!(
        !dir.path().join("exps").exists(),
        "a dry run writes nothing"
    );

    let called = dir.path().join("sbatch-args");
    fake_command(
        dir.path(),
        "sbatch",
        &format!(
            "echo \"$*\" >> '{}'\nn=$(wc -l < '{}')\necho 500$n",
            called.display(),
            called.display()
        ),
    );
    let out = sweep_here(dir.path(), &args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(stdout_of(&out), "5001\n5002\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("herd: submitted sweep scale: jobs 5001, 5002 (2 shapes), 4 runs (at most 1 at once in each job): "),
        "{stderr}"
    );
    let sweep = std::fs::canonicalize(dir.path().join("exps/scale")).expect("sweep folder");
    assert_eq!(
        std::fs::read_to_string(&called).expect("sbatch ran"),
        format!(
            "--parsable {}\n--parsable {}\n",
            sweep.join("job-1.sbatch").display(),
            sweep.join("job-2.sbatch").display()
        )
    );
    assert!(!sweep.join("job.sbatch").exists());
    for (file, nodes, tasks) in [("job-1.sbatch", 1, "0,2"), ("job-2.sbatch", 2, "1,3")] {
        let script = std::fs::read_to_string(sweep.join(file)).expect("array script");
        assert!(
            script.contains(&format!("#SBATCH --nodes={nodes}\n")),
            "{script}"
        );
        assert!(
            script.contains(&format!("#SBATCH --array={tasks}%1\n")),
            "{script}"
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sweep.join("sweep.json")).expect("sweep.json"))
            .expect("json");
    assert_eq!(
        manifest["submissions"],
        serde_json::json!([{"number": 1, "job_id": "5001", "tasks": [0, 2, 1, 3], "arrays": [
            {"job_id": "5001", "script": "job-1.sbatch", "tasks": [0, 2]},
            {"job_id": "5002", "script": "job-2.sbatch", "tasks": [1, 3]}
        ]}])
    );
    for (run, task, nodes) in [
        ("seed=1,nodes=1", "5001_0", 1),
        ("seed=1,nodes=2", "5002_1", 2),
        ("seed=2,nodes=1", "5001_2", 1),
        ("seed=2,nodes=2", "5002_3", 2),
    ] {
        let m: serde_json::Value = serde_json::from_slice(
            &std::fs::read(sweep.join(run).join("manifest.json")).expect("manifest"),
        )
        .expect("json");
        assert_eq!(m["submissions"][0]["job_id"], task, "{run}");
        assert_eq!(m["plan"]["nodes"], nodes, "{run}");
    }
}
