//! CPUs with `herd check` and `herd submit --dry-run`, with fake SLURM commands: the line
//! that says what each worker gets in every launch mode, whichever key gave the CPUs,
//! what the batch script asks SLURM for, the two keys refused together, and how a job
//! file, a profile and the flags layer them.

use super::submit::{fake_command, herd_here, slurm_called, submit_project};

/// 2 nodes × 4 workers of `true` in `mode`, with `cpus` flags.
fn two_by_four<'a>(mode: &'a str, cpus: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "-J",
        "cpus",
        "--mode",
        mode,
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
    ];
    args.extend(cpus);
    args.extend(["--", "true"]);
    args
}

/// `herd check ARGS` in a project whose PATH has a `torchrun` (so torchrun mode passes).
fn check(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    fake_command(dir, "torchrun", "exit 0");
    let argv: Vec<&str> = std::iter::once("check")
        .chain(args.iter().copied())
        .collect();
    herd_here(dir, &argv, &[])
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `herd check` of 2 nodes × 4 workers with `--cpus-per-worker 5` says, in each mode, 20
/// CPUs a node, 5 for each worker, and the `--cpus-per-task` SLURM is asked for: 20 for
/// the node's one task in agent and torchrun mode, 5 for each task in srun mode.
#[test]
fn check_says_each_workers_cpus_from_cpus_per_worker_in_every_mode() {
    let dir = submit_project(&[("train.py", 10)]);
    for (mode, line) in [
        (
            "agent",
            "CPUs: 20 per node (5 per worker × 4 workers): --cpus-per-worker = 5, asked of SLURM as --cpus-per-task=20 for the node's one task (herd's agent, which starts its 4 workers)",
        ),
        (
            "srun",
            "CPUs: 20 per node (5 per worker × 4 workers): --cpus-per-worker = 5, asked of SLURM as --cpus-per-task=5 for each of the node's 4 tasks (one per worker)",
        ),
        (
            "torchrun",
            "CPUs: 20 per node (5 per worker × 4 workers): --cpus-per-worker = 5, asked of SLURM as --cpus-per-task=20 for the node's one task (torchrun, which starts its 4 workers)",
        ),
    ] {
        let out = check(dir.path(), &two_by_four(mode, &["--cpus-per-worker", "5"]));
        assert!(out.status.success(), "{mode}: {out:?}");
        assert_eq!(
            stdout(&out),
            format!("{line}\ncheck passed (0 warnings)\n"),
            "{mode}"
        );
    }
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "nothing queued"
    );
}

/// With `--cpus-per-task` (`-c`) the line says what each worker ends up with: the node's
/// count shared by its workers in agent and torchrun mode, each task's own in srun mode;
/// the warning of fewer CPUs than workers stays.
#[test]
fn check_says_each_workers_cpus_from_cpus_per_task_in_every_mode() {
    let dir = submit_project(&[("train.py", 10)]);
    for (mode, line) in [
        (
            "agent",
            "CPUs: 8 per node (2 per worker × 4 workers): --cpus-per-task = 8 for the node's one task (herd's agent, which starts its 4 workers)",
        ),
        (
            "srun",
            "CPUs: 32 per node (8 per worker × 4 workers): --cpus-per-task = 8 for each of the node's 4 tasks (one per worker)",
        ),
        (
            "torchrun",
            "CPUs: 8 per node (2 per worker × 4 workers): --cpus-per-task = 8 for the node's one task (torchrun, which starts its 4 workers)",
        ),
    ] {
        let out = check(dir.path(), &two_by_four(mode, &["-c", "8"]));
        assert!(out.status.success(), "{mode}: {out:?}");
        assert_eq!(
            stdout(&out),
            format!("{line}\ncheck passed (0 warnings)\n"),
            "{mode}"
        );
    }
    let out = check(dir.path(), &two_by_four("agent", &["-c", "2"]));
    assert!(
        stdout(&out).starts_with("CPUs: 2 per node (0.5 per worker × 4 workers)")
            && stdout(&out).ends_with("check passed (1 warning)\n"),
        "{out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("herd: warning: --cpus-per-task = 2 CPUs per node for 4 workers"),
        "{out:?}"
    );
}

/// Without either key the line says what SLURM's default of 1 CPU per task means: the
/// node's workers share one in agent and torchrun mode, each has one in srun mode.
#[test]
fn check_says_what_slurms_default_means_in_every_mode() {
    let dir = submit_project(&[("train.py", 10)]);
    for (mode, share) in [
        (
            "agent",
            "the node's 4 workers share 1 CPU (its one task, herd's agent, starts them all)",
        ),
        (
            "srun",
            "4 per node (1 per worker × 4 workers, one task each)",
        ),
        (
            "torchrun",
            "the node's 4 workers share 1 CPU (its one task, torchrun, starts them all)",
        ),
    ] {
        let out = check(dir.path(), &two_by_four(mode, &[]));
        assert!(out.status.success(), "{mode}: {out:?}");
        assert_eq!(
            stdout(&out),
            format!("CPUs: neither cpus_per_worker nor cpus_per_task is set, so SLURM's default of 1 per task: {share}, unless the site's default is higher; set cpus_per_worker to give each worker more\ncheck passed (0 warnings)\n"),
            "{mode}"
        );
    }
}

/// `--cpus-per-worker` with `--cpus-per-task`, or both in one job file, is refused (exit
/// 2) naming both, and nothing is written or submitted.
#[test]
fn both_cpu_keys_from_one_source_are_refused_naming_both() {
    let dir = submit_project(&[("train.py", 10)]);
    let exps = dir.path().join("project/herd-exp");
    for command in ["check", "submit"] {
        let mut args = vec![command];
        args.extend(two_by_four("agent", &["--cpus-per-worker", "5", "-c", "8"]));
        let out = herd_here(dir.path(), &args, &[]);
        assert_eq!(out.status.code(), Some(2), "{command}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("herd: error: --cpus-per-worker: set together with --cpus-per-task: they are two ways to ask for the same CPUs")
                && stderr.contains("keep one of them and remove the other"),
            "{command}: {stderr}"
        );
    }
    std::fs::write(
        dir.path().join("project/job.toml"),
        "nodes = 2\ngpus_per_node = 4\ncpus_per_worker = 5\ncpus_per_task = 8\ncommand = [\"true\"]\n",
    )
    .expect("job file");
    let out = herd_here(dir.path(), &["submit", "job.toml"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "`cpus_per_worker` in job.toml: set together with `cpus_per_task` in job.toml"
        ),
        "{stderr}"
    );
    assert!(!exps.exists(), "nothing written");
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "nothing queued"
    );
}

/// A later layer's key replaces an earlier layer's other key: the flags over the job file
/// over the cluster profile, and `herd check` says which key gave the CPUs.
#[test]
fn a_later_layers_cpu_key_replaces_an_earlier_layers_other() {
    let dir = submit_project(&[("train.py", 10)]);
    let profiles = dir.path().join("config/herd/profiles");
    std::fs::create_dir_all(&profiles).expect("profiles");
    std::fs::write(
        profiles.join("10-site.toml"),
        "match = \"*\"\ncpus_per_task = 64\n",
    )
    .expect("profile");
    std::fs::write(
        dir.path().join("project/job.toml"),
        "nodes = 2\ngpus_per_node = 4\ncpus_per_worker = 5\ncommand = [\"true\"]\n",
    )
    .expect("job file");
    // The job file's cpus_per_worker over the profile's cpus_per_task.
    let out = check(dir.path(), &["job.toml"]);
    assert!(
        stdout(&out).starts_with("CPUs: 20 per node (5 per worker × 4 workers): `cpus_per_worker` in job.toml = 5, asked of SLURM as --cpus-per-task=20"),
        "{out:?}"
    );
    // The flag's cpus_per_task over the job file's cpus_per_worker.
    let out = check(dir.path(), &["job.toml", "-c", "12"]);
    assert!(
        stdout(&out).starts_with("CPUs: 12 per node (3 per worker × 4 workers): --cpus-per-task = 12 for the node's one task"),
        "{out:?}"
    );
    // The profile's cpus_per_task where nothing above it says otherwise.
    let out = check(
        dir.path(),
        &["-N", "2", "--gpus-per-node", "4", "--", "true"],
    );
    assert!(
        stdout(&out).starts_with(
            "CPUs: 64 per node (16 per worker × 4 workers): `cpus_per_task` in profile "
        ),
        "{out:?}"
    );
}

/// `herd submit --dry-run` prints the batch script with the `--cpus-per-task` made from
/// `--cpus-per-worker` on its `#SBATCH` line and its srun line, and the CPU line.
#[test]
fn dry_run_asks_sbatch_and_srun_for_the_cpus_made_from_cpus_per_worker() {
    let dir = submit_project(&[("train.py", 10)]);
    for (mode, per_task) in [("agent", 20), ("srun", 5), ("torchrun", 20)] {
        let mut args = vec!["submit", "--dry-run"];
        args.extend(two_by_four(mode, &["--cpus-per-worker", "5"]));
        fake_command(dir.path(), "torchrun", "exit 0");
        let out = herd_here(dir.path(), &args, &[]);
        assert!(out.status.success(), "{mode}: {out:?}");
        let text = stdout(&out);
        assert!(
            text.contains(&format!("\n#SBATCH --cpus-per-task={per_task}\n")),
            "{mode}: {text}"
        );
        let srun: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("exec srun "))
            .collect();
        assert!(
            srun.len() == 1 && srun[0].contains(&format!(" --cpus-per-task={per_task} ")),
            "{mode}: {text}"
        );
        assert!(
            text.contains("\nCPUs: 20 per node (5 per worker × 4 workers): --cpus-per-worker = 5"),
            "{mode}: {text}"
        );
    }
}

/// A sweep over `cpus_per_worker` is one array job per resource shape, and `--dry-run`
/// says after each shape's array script what its workers get; beside `--cpus-per-task`
/// it is refused naming both.
#[test]
fn a_sweep_over_cpus_per_worker_says_each_shapes_cpus() {
    let dir = submit_project(&[("train.py", 10)]);
    let mut args = vec!["submit", "--dry-run", "--sweep", "cpus_per_worker=2,4"];
    args.extend(two_by_four("agent", &[]));
    let out = herd_here(dir.path(), &args, &[]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("CPUs: ")).collect();
    assert_eq!(
        lines,
        [
            "CPUs: 8 per node (2 per worker × 4 workers): --cpus-per-worker = 2, asked of SLURM as --cpus-per-task=8 for the node's one task (herd's agent, which starts its 4 workers)",
            "CPUs: 16 per node (4 per worker × 4 workers): --cpus-per-worker = 4, asked of SLURM as --cpus-per-task=16 for the node's one task (herd's agent, which starts its 4 workers)",
        ],
        "{text}"
    );
    let mut args = vec!["submit", "--dry-run", "--sweep", "cpus_per_worker=2,4"];
    args.extend(two_by_four("agent", &["-c", "8"]));
    let out = herd_here(dir.path(), &args, &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("`cpus_per_worker` is swept and --cpus-per-task is given"),
        "{out:?}"
    );
}
