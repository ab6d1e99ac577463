//! herd's own SLURM commands with fake ones first on PATH: the `srun` that `herd run`
//! starts its agents with inside an allocation, and the `HERD_LOG=debug` trace of every
//! SLURM command herd runs.

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

/// `herd status --exp-root exps` in `dir` (with an empty `exps`), `dir/bin` first on PATH
/// and `env` set.
fn status_in(dir: &std::path::Path, env: &[(&str, &str)]) -> std::process::Output {
    std::fs::create_dir_all(dir.join("exps")).expect("exps");
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["status", "--exp-root", "exps"])
        .current_dir(dir)
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", dir.join("bin").display()),
        )
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("HERD_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("herd runs")
}

/// The `herd: debug:` line of `stderr` for the command line `command`: what it says in
/// brackets (how long it took, and how it failed).
fn traced<'a>(stderr: &'a str, command: &str) -> &'a str {
    let prefix = format!("herd: debug: {command} (");
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no debug line for `{command}` in:\n{stderr}"));
    line[prefix.len()..]
        .strip_suffix(')')
        .unwrap_or_else(|| panic!("{line}"))
}

/// herd's squeue call as the debug line shows it (its format quoted: it holds `|`).
fn squeue_line() -> String {
    format!(
        "squeue -h --states=all --me -O '{}'",
        herd_slurm::scheduler::queue::FORMAT
    )
}

/// With HERD_LOG=debug every SLURM command herd runs is written on stderr with its command
/// line and how long it took, and one that fails says so; without it, nothing is.
#[test]
fn herd_log_debug_traces_each_slurm_command_and_its_duration() {
    let dir = fake_bin("squeue", "sleep 0.05");
    let out = status_in(dir.path(), &[("HERD_LOG", "debug")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let how = traced(&stderr, &squeue_line());
    let ms: u64 = how
        .strip_suffix(" ms")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a duration: {how}"));
    assert!(ms >= 50, "squeue slept 50 ms: {how}");

    let out = status_in(dir.path(), &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("herd: debug:"), "{stderr}");

    let failing = fake_bin(
        "squeue",
        "echo 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1",
    );
    let out = status_in(failing.path(), &[("HERD_LOG", "debug")]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let how = traced(&stderr, &squeue_line());
    assert!(how.ends_with(" ms, failed: exit status: 1"), "{how}");
}

/// The srun of `herd run` in an allocation is traced as it starts and when it ends.
#[test]
fn herd_log_debug_traces_the_srun_of_herd_run() {
    let dir = fake_bin("srun", "exit 0");
    let out = herd_in_allocation(dir.path(), &["run", "--", "true"], &[("HERD_LOG", "debug")]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let srun = format!(
        "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {} launch",
        env!("CARGO_BIN_EXE_herd")
    );
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with(&format!("herd: debug: {srun} ")))
        .collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].ends_with(" -- true (started)"), "{stderr}");
    assert!(
        lines[1].contains(" -- true (") && lines[1].ends_with(" ms)"),
        "{stderr}"
    );
    assert!(!stderr.contains("HERD_JOB_SECRET"), "{stderr}");
}
