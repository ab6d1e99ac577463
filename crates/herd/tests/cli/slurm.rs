//! herd's own SLURM commands with fake ones first on PATH: the `srun` that `herd run`
//! starts its agents with inside an allocation.

use super::*;

/// A folder with `bin/NAME`, a fake SLURM command running `body` (a shell script).
fn fake_bin(name: &str, body: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let path = bin.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("fake command");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    dir
}

/// `herd ARGS` in `dir` with `dir/bin` first on PATH, in a batch shell of a two-node
/// allocation (job 7) as SLURM's variables describe it, and `env` set.
fn herd_in_allocation(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", dir.join("bin").display()),
        )
        .envs([
            ("SLURM_JOB_ID", "7"),
            ("SLURM_JOB_NODELIST", "n[1-2]"),
            ("SLURM_JOB_NUM_NODES", "2"),
        ])
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("herd runs")
}

/// Inside an allocation `herd run` starts one agent per node with `srun`: its arguments
/// passed as they are (no shell), the job's secret in HERD_JOB_SECRET, and srun's failure
/// is herd run's (exit 1).
#[test]
fn herd_run_in_an_allocation_starts_its_agents_with_srun() {
    let dir = fake_bin(
        "srun",
        "for a in \"$@\"; do printf '%s\\n' \"$a\"; done > args\n\
         [ ${#HERD_JOB_SECRET} -ge 32 ] && echo secret > env\n\
         exit 5",
    );
    let out = herd_in_allocation(
        dir.path(),
        &["run", "--", "sh", "-c", "echo 'a b' $(id)"],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let args = std::fs::read_to_string(dir.path().join("args")).expect("srun ran");
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args[..4],
        [
            "--nodes=2",
            "--ntasks=2",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1"
        ],
        "{args:?}"
    );
    assert_eq!(args[4], env!("CARGO_BIN_EXE_herd"), "{args:?}");
    assert_eq!(args[5], "launch", "{args:?}");
    let log_dir = args
        .iter()
        .position(|a| *a == "--log-dir")
        .expect("--log-dir");
    assert_eq!(
        args[log_dir + 1],
        dir.path().join("herd-logs/7").display().to_string()
    );
    assert_eq!(
        args[log_dir + 2..],
        ["--", "sh", "-c", "echo 'a b' $(id)"],
        "the command as given"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("env"))
            .ok()
            .as_deref(),
        Some("secret\n"),
        "HERD_JOB_SECRET reaches srun"
    );
}
