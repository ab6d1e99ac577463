use std::process::Command;

use super::*;
use crate::job::JobFile;
use crate::keys::JobKeys;
use crate::render::{render_script, ScriptParams};
use crate::resolve::resolve;

/// Run `name`'s script: the plan of `command`, rendered as a single job in the run's folder
/// of `sweep`.
fn run_script(sweep: &Path, name: &str, command: &[&str]) -> (String, String) {
    shaped_script(sweep, name, 1, command)
}

/// Run `name`'s script on `nodes` nodes.
fn shaped_script(sweep: &Path, name: &str, nodes: u32, command: &[&str]) -> (String, String) {
    let text = format!(
        "job_name = \"grid\"\nnodes = {nodes}\ngpus_per_node = 2\ntime = 30\ncommand = [{}]\n",
        command
            .iter()
            .map(|w| format!("{w:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let job = JobFile::parse(&text, Path::new("grid.toml")).unwrap_or_else(|e| panic!("{e}"));
    let plan =
        resolve(Some(&job), &JobKeys::default(), &[], "login1").unwrap_or_else(|e| panic!("{e}"));
    let exp = sweep.join(name);
    let script = render_script(
        &plan,
        &ScriptParams {
            exp_dir: &exp,
            herd: Path::new("/opt/herd/bin/herd"),
            dependency: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (name.to_owned(), script)
}

fn indexed(runs: Vec<(String, String)>) -> Vec<(u32, String, String)> {
    runs.into_iter()
        .enumerate()
        .map(|(i, (n, s))| (i as u32, n, s))
        .collect()
}

fn runs(sweep: &Path) -> Vec<(u32, String, String)> {
    indexed(vec![
        run_script(
            sweep,
            "lr=0.1,seed=1",
            &["python", "train.py", "--lr", "0.1"],
        ),
        run_script(
            sweep,
            "lr=0.1,seed=2",
            &["python", "train.py", "--lr", "0.1"],
        ),
        run_script(
            sweep,
            "lr=it's $(x)",
            &["python", "train.py", "--lr", "$(x)"],
        ),
    ])
}

#[test]
fn the_array_script_has_the_runs_resources_the_array_and_a_case_per_run() {
    let sweep = Path::new("/scratch/exp/grid");
    let runs = runs(sweep);
    let s = render_array_script(&ArrayParams {
        sweep_dir: sweep,
        runs: &runs,
        max_parallel: Some(2),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let head: Vec<&str> = s.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(
        head,
        [
            "#!/bin/bash",
            "#SBATCH --job-name=grid",
            "#SBATCH --nodes=1",
            "#SBATCH --ntasks-per-node=1",
            "#SBATCH --gres=gpu:2",
            "#SBATCH --time=00:30:00",
            "#SBATCH --open-mode=append",
            "#SBATCH --requeue",
            "#SBATCH --signal=CONT@120",
            "#SBATCH --array=0-2%2",
            "#SBATCH --output=\"/scratch/exp/grid/logs/%A_%a.out\"",
            "#SBATCH --error=\"/scratch/exp/grid/logs/%A_%a.err\"",
        ],
        "{s}"
    );
    assert!(s.contains("sweep='/scratch/exp/grid'\n"), "{s}");
    assert!(
        s.contains("  0) script='/scratch/exp/grid/lr=0.1,seed=1/job.sbatch' logs='/scratch/exp/grid/lr=0.1,seed=1/logs' ;;\n"),
        "{s}"
    );
    assert!(
        s.contains("  2) script='/scratch/exp/grid/lr=it'\\''s $(x)/job.sbatch' logs='/scratch/exp/grid/lr=it'\\''s $(x)/logs' ;;\n"),
        "a user's value is one single-quoted word: {s}"
    );
    assert!(s.ends_with("exec /bin/bash -- \"$script\"\n"), "{s}");

    let unlimited = render_array_script(&ArrayParams {
        sweep_dir: sweep,
        runs: &runs,
        max_parallel: None,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(unlimited.contains("#SBATCH --array=0-2\n"), "{unlimited}");

    let out = Command::new("bash")
        .args(["-n", "-c", &s])
        .output()
        .expect("bash");
    assert!(
        out.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn runs_that_ask_for_other_resources_are_refused() {
    let sweep = Path::new("/scratch/exp/grid");
    let mut runs = runs(sweep);
    runs[1].2 = runs[1]
        .2
        .replace("#SBATCH --gres=gpu:2", "#SBATCH --gres=gpu:4");
    let err = render_array_script(&ArrayParams {
        sweep_dir: sweep,
        runs: &runs,
        max_parallel: None,
    })
    .expect_err("other resources");
    let msg = err.to_string();
    assert!(
        msg.contains("run lr=0.1,seed=2 asks for other resources than run lr=0.1,seed=1")
            && msg.contains("`#SBATCH --gres=gpu:2` against `#SBATCH --gres=gpu:4`"),
        "{msg}"
    );
    let err = render_array_script(&ArrayParams {
        sweep_dir: sweep,
        runs: &runs[..1],
        max_parallel: Some(0),
    })
    .expect_err("refused");
    assert!(err.to_string().contains("at least 1"), "{err}");
    let mut own_array = runs[..1].to_vec();
    own_array[0].2 = own_array[0]
        .2
        .replace("#SBATCH --open-mode=append", "#SBATCH --array=1-9");
    let err = render_array_script(&ArrayParams {
        sweep_dir: sweep,
        runs: &own_array,
        max_parallel: None,
    })
    .expect_err("an --array of its own");
    assert!(
        err.to_string()
            .contains("a sweep is an array job of its own"),
        "{err}"
    );
    let relative = render_array_script(&ArrayParams {
        sweep_dir: Path::new("exp/grid"),
        runs: &runs[..1],
        max_parallel: None,
    });
    assert!(matches!(relative, Err(RenderError::RelativePath { .. })));
}

/// The dispatcher, run by bash with a fake task id against fake run scripts: task 1 runs
/// run 1's script, whose output lands in run 1's `logs/ARRAYID_1.out`/`.err` (appended); an
/// unknown task exits 2 and says so.
#[test]
fn each_task_runs_its_own_run_script_with_its_output_in_the_runs_logs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sweep = tmp.path().join("grid");
    let runs = runs(&sweep);
    for (i, name, _) in &runs {
        let exp = ExperimentDir::new(sweep.join(name));
        std::fs::create_dir_all(exp.logs().path()).expect("logs");
        std::fs::write(
            exp.job_script(),
            format!("echo \"out of run {i} task $SLURM_ARRAY_TASK_ID\"\necho \"err of run {i}\" >&2\nexit 3\n"),
        )
        .expect("fake script");
    }
    let script = render_array_script(&ArrayParams {
        sweep_dir: &sweep,
        runs: &runs,
        max_parallel: Some(1),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let task = |id: &str| {
        Command::new("bash")
            .args(["-c", &script])
            .env("SLURM_ARRAY_JOB_ID", "77")
            .env("SLURM_ARRAY_TASK_ID", id)
            .output()
            .expect("bash")
    };
    for _ in 0..2 {
        let out = task("2");
        assert_eq!(out.status.code(), Some(3), "the run script's own exit");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    }
    let logs = ExperimentDir::new(sweep.join(&runs[2].1)).logs();
    let read = |s: Stream| std::fs::read_to_string(logs.batch_log("77_2", s)).expect("log");
    assert_eq!(
        read(Stream::Out),
        "out of run 2 task 2\nout of run 2 task 2\n",
        "appended"
    );
    assert_eq!(read(Stream::Err), "err of run 2\nerr of run 2\n");
    for other in &runs[..2] {
        let logs = ExperimentDir::new(sweep.join(&other.1)).logs();
        assert!(!logs.batch_log("77_2", Stream::Out).exists());
    }

    let out = task("3");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("herd: array task '3' is no run of sweep") && err.contains("grid (tasks 0-2)"),
        "{err}"
    );
}

/// Runs on 1 node and runs on 2 are two shapes, in the order of their first run; each
/// shape's script has its own `#SBATCH --nodes`, its tasks alone in `--array` (a list that
/// is not contiguous) and a `case` of its runs alone.
#[test]
fn runs_of_two_shapes_are_two_arrays_of_their_own_tasks() {
    let sweep = Path::new("/scratch/exp/scale");
    let all = indexed(vec![
        shaped_script(sweep, "nodes=1,seed=1", 1, &["python", "t.py"]),
        shaped_script(sweep, "nodes=2,seed=1", 2, &["python", "t.py"]),
        shaped_script(sweep, "nodes=1,seed=2", 1, &["python", "t.py"]),
        shaped_script(sweep, "nodes=2,seed=2", 2, &["python", "t.py"]),
    ]);
    let scripts: Vec<&str> = all.iter().map(|(_, _, s)| s.as_str()).collect();
    assert_eq!(shapes(&scripts), [vec![0, 2], vec![1, 3]]);
    let same = [scripts[0], scripts[2]];
    assert_eq!(shapes(&same), [vec![0, 1]], "one shape: one array");
    let second: Vec<(u32, String, String)> = [1, 3].iter().map(|&i| all[i].clone()).collect();
    let s = render_array_script(&ArrayParams {
        sweep_dir: sweep,
        runs: &second,
        max_parallel: Some(1),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(s.contains("#SBATCH --nodes=2\n"), "{s}");
    assert!(s.contains("#SBATCH --array=1,3%1\n"), "{s}");
    assert!(
        s.contains("  1) script='/scratch/exp/scale/nodes=2,seed=1/job.sbatch'"),
        "{s}"
    );
    assert!(
        s.contains("  3) script='/scratch/exp/scale/nodes=2,seed=2/job.sbatch'"),
        "{s}"
    );
    assert!(!s.contains("  0) ") && !s.contains("  2) "), "{s}");
    assert!(s.contains("(tasks 1,3)"), "{s}");
}

#[test]
fn the_array_list_names_ranges_and_single_tasks() {
    assert_eq!(array_spec(&[0, 1, 2, 3]), "0-3");
    assert_eq!(array_spec(&[2, 0]), "0,2");
    assert_eq!(array_spec(&[1, 2, 5]), "1-2,5");
    assert_eq!(array_spec(&[7]), "7");
}
