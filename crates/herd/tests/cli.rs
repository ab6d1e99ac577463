//! The `herd` binary's command line, run as a user runs it.

use std::process::Command;

fn herd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .output()
        .expect("the herd binary runs")
}

/// docs/design.md §1's commands, in the order `herd --help` lists them.
const COMMANDS: [&str; 14] = [
    "submit",
    "run",
    "launch",
    "exec",
    "status",
    "logs",
    "cancel",
    "top",
    "report",
    "check",
    "hostlist",
    "env",
    "completions",
    "man",
];

#[test]
fn help_lists_every_spec_command() {
    let out = herd(&["--help"]);
    assert!(out.status.success(), "herd --help failed: {out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let listed: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, COMMANDS, "herd --help:\n{help}");
}

#[test]
fn version_prints_package_version() {
    let out = herd(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("herd {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unknown_command_is_a_usage_error() {
    let out = herd(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unrecognized subcommand"));
}

fn herd_stdin(args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("herd runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("herd finishes")
}

fn stdout_of(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn hostlist_expand_compress_count() {
    assert_eq!(
        stdout_of(&herd(&["hostlist", "expand", "gpu-a[01-03],login1"])),
        "gpu-a01\ngpu-a02\ngpu-a03\nlogin1\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "expand", "-s", ",", "n[1-3]", "m1"])),
        "n1,n2,n3,m1\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "compress", "n2,n1,n3,n4"])),
        "n[2,1,3-4]\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "compress", "--sort", "n2,n1,n3,n4"])),
        "n[1-4]\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "compress", "--unique", "n1,n2,n1"])),
        "n[1-2]\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "count", "n[1-1000000][1-1000]", "x"])),
        "1000000001\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "expand", "--json", "n[1-2]"])),
        "[\"n1\",\"n2\"]\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "compress", "--json", "n[1-2]"])),
        "\"n[1-2]\"\n"
    );
    assert_eq!(
        stdout_of(&herd(&["hostlist", "count", "--json", "n[1-2]"])),
        "2\n"
    );
}

#[test]
fn hostlist_set_operations() {
    let op = |flag: &str| stdout_of(&herd(&["hostlist", "compress", flag, "n[1-5]", "n[4-8]"]));
    assert_eq!(op("--union"), "n[1-8]\n");
    assert_eq!(op("--intersection"), "n[4-5]\n");
    assert_eq!(op("--difference"), "n[1-3]\n");
    assert_eq!(op("--xor"), "n[1-3,6-8]\n");
    let both = herd(&["hostlist", "count", "-u", "-i", "n1", "n2"]);
    assert_eq!(both.status.code(), Some(2), "one set operation at a time");
}

#[test]
fn hostlist_reads_stdin() {
    let out = herd_stdin(&["hostlist", "compress", "-"], "n1\nn2 n3,m[1-2]\n");
    assert_eq!(stdout_of(&out), "n[1-3],m[1-2]\n");
    let out = herd_stdin(&["hostlist", "compress", "-d", "-", "n2"], "n[1-3]");
    assert_eq!(stdout_of(&out), "n[1,3]\n");
}

#[test]
fn hostlist_bad_input_is_a_clear_error() {
    let out = herd(&["hostlist", "expand", "n[1-2]", "gpu[1-x]"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "nothing printed before the error: {out:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "herd: error: invalid hostlist in argument 2: expected a number inside `[…]`, found `x` at column 7 of `gpu[1-x]`\n"
    );
    let out = herd(&["hostlist", "expand", "--max-hosts", "10", "n[1-11]"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("more than 10 hosts"),
        "{out:?}"
    );
    let out = herd(&["hostlist", "expand"]);
    assert_eq!(out.status.code(), Some(2), "an expression is required");
}

#[test]
fn env_outside_slurm_says_so() {
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("env")
        .env_clear()
        .output()
        .expect("herd runs");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not inside a SLURM allocation"));
}

#[test]
fn env_from_file_describes_that_task() {
    let dir = std::env::temp_dir().join(format!("herd-env-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let file = dir.join("environ");
    // NUL-separated, as /proc/PID/environ.
    let vars = [
        "SLURM_JOB_ID=7",
        "SLURM_JOB_NODELIST=gpu-a[01-02]",
        "SLURM_STEP_ID=0",
        "SLURM_STEP_NODELIST=gpu-a[01-02]",
        "SLURM_STEP_TASKS_PER_NODE=2(x2)",
        "SLURM_PROCID=3",
        "SLURM_LOCALID=1",
        "SLURM_NODEID=1",
        "MASTER_PORT=29511",
    ];
    std::fs::write(&file, vars.join("\0")).expect("write");
    let out = herd(&["env", "--json", "--from", file.to_str().expect("utf-8")]);
    let v: serde_json::Value = serde_json::from_str(&stdout_of(&out)).expect("json");
    assert_eq!(v["task"]["rank"], 3);
    assert_eq!(v["task"]["node"], "gpu-a02");
    assert_eq!(v["worker_env"]["LOCAL_WORLD_SIZE"], "2");
    assert_eq!(v["worker_env"]["MASTER_PORT"], "29511");
    assert_eq!(v["worker_env"]["SLURM_TASKS_PER_NODE"], "2(x2)");

    // What each worker of the node sees, by default and with --gpu-bind per-rank.
    std::fs::write(
        &file,
        [&vars[..], &["CUDA_VISIBLE_DEVICES=0,1"]]
            .concat()
            .join("\0"),
    )
    .expect("write");
    let from = file.to_str().expect("utf-8");
    let text = stdout_of(&herd(&["env", "--from", from]));
    assert!(
        text.contains("gpu bind    all: each of the 2 workers on this node sees 0,1"),
        "{text}"
    );
    assert!(text.contains("  CUDA_VISIBLE_DEVICES=0,1\n"), "{text}");
    let text = stdout_of(&herd(&["env", "--gpu-bind", "per-rank", "--from", from]));
    assert!(
        text.contains("gpu bind    per-rank: local rank 0 sees 0, local rank 1 sees 1"),
        "{text}"
    );
    assert!(
        text.contains("  CUDA_VISIBLE_DEVICES=1\n"),
        "task 3 is local rank 1: {text}"
    );
    let v: serde_json::Value = serde_json::from_str(&stdout_of(&herd(&[
        "env",
        "--json",
        "--gpu-bind",
        "per-rank",
        "--from",
        from,
    ])))
    .expect("json");
    assert_eq!(v["gpu_bind"], "per-rank");
    assert_eq!(v["worker_gpus"], serde_json::json!([["0"], ["1"]]));

    std::fs::write(
        &file,
        "SLURM_JOB_ID=7\nSLURM_JOB_NODELIST=n[1-2]\nSLURM_JOB_NUM_NODES=3\n",
    )
    .expect("write");
    let out = herd(&["env", "--from", file.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("SLURM_JOB_NUM_NODES=3 but SLURM_JOB_NODELIST gives 2"),
        "{out:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exec_needs_a_slurm_task_and_a_port() {
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["exec", "--", "true"])
        .env_clear()
        .output()
        .expect("herd runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("run it under srun"),
        "{out:?}"
    );
    let task = [
        ("SLURM_JOB_ID", "7"),
        ("SLURM_JOB_NODELIST", "n1"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEP_NODELIST", "n1"),
        ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ("SLURM_PROCID", "0"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "0"),
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["exec", "--", "true"])
        .env_clear()
        .envs(task)
        .output()
        .expect("herd runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("MASTER_PORT is not set"),
        "{out:?}"
    );
    // With a port, a one-task step becomes the command, with the rank variables set.
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args([
            "exec",
            "--master-port",
            "29400",
            "--",
            "sh",
            "-c",
            "echo $RANK/$WORLD_SIZE@$MASTER_ADDR:$MASTER_PORT",
        ])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(task)
        .output()
        .expect("herd runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "0/1@127.0.0.1:29400\n",
        "{out:?}"
    );
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("herd-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn submit_dry_run_prints_script_and_ranks_and_writes_nothing() {
    let dir = temp_dir("dry-run");
    let exps = dir.join("exps");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args([
            "submit",
            "--dry-run",
            "-J",
            "demo",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--exp-root",
        ])
        .arg(&exps)
        .args(["--", "sh", "-c", "echo $(id) 'x'"])
        .current_dir(&dir)
        .output()
        .expect("herd runs");
    let text = stdout_of(&out);
    assert!(text.starts_with("#!/bin/bash\n"), "{text}");
    assert!(text.contains("#SBATCH --nodes=2"), "{text}");
    assert!(
        text.contains("'sh' '-c' 'echo $(id) '\\''x'\\'''"),
        "arguments are single-quoted words: {text}"
    );
    // Every worker sees both GPUs of its node by default.
    assert!(
        text.contains(
            "node  rank  local_rank  CUDA_VISIBLE_DEVICES\n   0     0           0  0,1\n   0     1           1  0,1\n"
        ),
        "{text}"
    );
    assert!(!exps.exists(), "a dry run writes nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--gpu-bind per-rank` reaches the script and the rank table; a value that is not a binding
/// (SLURM's own `--gpu-bind=closest`) is refused naming the two there are.
#[test]
fn submit_gpu_bind_per_rank_shows_each_ranks_share() {
    let dir = temp_dir("gpu-bind");
    let exps = dir.join("exps");
    std::fs::write(dir.join("train.py"), "").expect("train.py");
    let dry_run = |bind: &str| {
        Command::new(env!("CARGO_BIN_EXE_herd"))
            .args([
                "submit",
                "--dry-run",
                "-J",
                "bind",
                "--nodes",
                "1",
                "--gpus-per-node",
                "4",
                "--gpu-bind",
                bind,
                "--exp-root",
            ])
            .arg(&exps)
            .args(["--", "python", "train.py"])
            .current_dir(&dir)
            .output()
            .expect("herd runs")
    };
    let out = dry_run("per-rank");
    let text = stdout_of(&out);
    assert!(
        text.contains("launch --nproc-per-node 4 --gpu-bind per-rank"),
        "{text}"
    );
    assert!(
        text.contains("   0     1           1  1\n   0     2           2  2\n"),
        "{text}"
    );
    let out = dry_run("closest");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--gpu-bind: `closest` is not a GPU binding")
            && err.contains("use `all`")
            && err.contains("`per-rank`"),
        "{err}"
    );
    assert!(!exps.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_names_the_key_to_change_and_fails() {
    let dir = temp_dir("check");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args([
            "check",
            "-J",
            "x",
            "--gpus",
            "3",
            "--gpus-per-node",
            "2",
            "--",
            "no-such-program-here",
        ])
        .current_dir(&dir)
        .output()
        .expect("herd runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--gpus = 3 GPUs is not a multiple of --gpus-per-node = 2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`no-such-program-here` is not on PATH"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nothing written, nothing submitted"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_snapshot_store_commands_are_gone() {
    // The code folder is made at submit and freed with its experiment: no `materialize`,
    // no `gc`.
    for gone in ["materialize", "gc"] {
        let out = herd(&[gone]);
        assert_eq!(out.status.code(), Some(2), "{gone}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("unrecognized subcommand '{gone}'")),
            "{gone}: {stderr}"
        );
    }
}

/// A tmpfs mounted on a folder for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs with `options` (`size=64k`, `ro,size=64k`) on `dir`, made if missing.
    /// Mounting needs root, as CI runs the tests: without it the test fails, never skips.
    fn mount(dir: &std::path::Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(out) if out.status.success() => Tmpfs(dir.to_owned()),
            other => panic!(
                "this test makes the file system fail with a small tmpfs (`mount -t tmpfs -o {options}`), which needs root (CI runs the tests as root): {other:?}"
            ),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let done = |args: &[&str]| {
            Command::new("umount")
                .args(args)
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !done(&[]) && !done(&["--lazy"]) {
            eprintln!(
                "warning: cannot unmount the test's tmpfs {}",
                self.0.display()
            );
        }
    }
}

/// A project with `files` (name, size in bytes), and `bin/` holding a fake `sbatch`,
/// `squeue` and `scontrol` that fail as with slurmctld down and write their name into
/// `called`: `herd submit` with [`submit_here`] never reaches a cluster.
fn submit_project(files: &[(&str, usize)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    for fake in ["sbatch", "squeue", "scontrol"] {
        let path = bin.join(fake);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho {fake} >> '{}'\necho '{fake}: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n",
                dir.path().join("called").display()
            ),
        )
        .expect("fake command");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("project");
    for (name, size) in files {
        // Not zeros: every byte takes room on any file system.
        let bytes: Vec<u8> = (0..*size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(project.join(name), bytes).expect("project file");
    }
    dir
}

/// `herd submit ARGS` run in `dir`'s project with only its fake SLURM commands (and the
/// system's) on PATH and no cluster profiles.
fn submit_here(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("submit")
        .args(args)
        .current_dir(dir.join("project"))
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", dir.join("bin").display()),
        )
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("SLURM_JOB_ID")
        .output()
        .expect("herd runs")
}

/// The fake SLURM commands [`submit_here`] ran.
fn slurm_called(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("called")).unwrap_or_default()
}

/// stderr of a [`submit_here`], less the note that the partitions were not checked (the
/// fake scontrol fails), which must be there once, with scontrol's message.
fn stderr_less_note(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let note = "herd: note: partitions not checked: scontrol: error: Unable to contact slurm controller (connect failure)\n";
    assert_eq!(stderr.matches(note).count(), 1, "{stderr}");
    stderr.replacen(note, "", 1)
}

/// Names in `exp_root`.
fn left_in(exp_root: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(exp_root)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// `herd submit --resume NAME` and `herd report NAME` of a folder that is there but holds no
/// manifest say it is no experiment folder (not that it does not exist), and of a missing
/// one that it does not exist; exit 2, nothing submitted, the folder left as it was.
#[test]
fn resume_of_a_folder_that_is_no_experiment_says_so_and_touches_nothing() {
    let dir = submit_project(&[("train.py", 10)]);
    let exps = dir.path().join("exps");
    std::fs::create_dir_all(exps.join("half")).expect("mkdir");
    std::fs::write(exps.join("half/notes.txt"), "mine\n").expect("write");
    let exp_root = exps.to_str().expect("utf-8");
    let report = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(["report", name, "--exp-root", exp_root])
            .output()
            .expect("herd runs")
    };
    for out in [
        submit_here(dir.path(), &["--resume", "half", "--exp-root", exp_root]),
        report("half"),
    ] {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("/half is not an experiment folder: it has no manifest.json (only `herd submit` makes experiment folders)"),
            "{stderr}"
        );
        assert!(!stderr.contains("does not exist"), "{stderr}");
    }
    for out in [
        submit_here(dir.path(), &["--resume", "gone", "--exp-root", exp_root]),
        report("gone"),
    ] {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/gone does not exist"), "{stderr}");
    }
    assert_eq!(left_in(&exps), ["half"]);
    assert_eq!(left_in(&exps.join("half")), ["notes.txt"]);
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
}

/// A full disk while `herd submit` snapshots the code is a failure (1), not a usage error:
/// the message says what failed and where, sbatch is never called, nothing is left behind.
#[test]
fn submit_onto_a_full_disk_exits_1_naming_the_path_and_leaves_nothing() {
    let dir = submit_project(&[("big.bin", 256 << 10), ("train.py", 10)]);
    let exps = dir.path().join("exps");
    let _fs = Tmpfs::mount(&exps, "size=64k");
    let exp_root = exps.to_str().expect("utf-8");
    let out = submit_here(
        dir.path(),
        &["-J", "full", "--exp-root", exp_root, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = stderr_less_note(&out);
    assert!(
        stderr.starts_with("herd: error: cannot ")
            && stderr.contains(&format!(" {exp_root}/"))
            && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, the cause once: {stderr}"
    );
    assert!(out.stdout.is_empty(), "no job id: {out:?}");
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
    assert_eq!(
        left_in(&exps),
        Vec::<String>::new(),
        "no experiment folder, no .herd-new-* folder"
    );
}

/// A read-only file system (root cannot write there either): exit 1, naming the folder.
#[test]
fn submit_onto_a_read_only_file_system_exits_1_naming_the_path() {
    let dir = submit_project(&[("train.py", 10)]);
    let ro = dir.path().join("ro");
    let _fs = Tmpfs::mount(&ro, "ro,size=64k");
    let exps = ro.join("exps");
    let exp_root = exps.to_str().expect("utf-8");
    let out = submit_here(
        dir.path(),
        &["-J", "ro", "--exp-root", exp_root, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = stderr_less_note(&out);
    assert_eq!(
        stderr,
        format!("herd: error: cannot create the experiment root {exp_root}: Read-only file system (os error 30)\n")
    );
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
    assert_eq!(left_in(&ro), Vec::<String>::new(), "nothing written");
}

/// What the user got wrong still exits 2: a job name that is no folder name (found by the
/// plan) and an experiment root that is the project itself (found making the experiment).
#[test]
fn submit_with_bad_input_exits_2_writing_nothing() {
    let dir = submit_project(&[("train.py", 10)]);
    let exps = dir.path().join("exps");
    let exp_root = exps.to_str().expect("utf-8");
    let out = submit_here(
        dir.path(),
        &["-J", "a/b", "--exp-root", exp_root, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("herd: error: --job-name: `a/b` is not a job name"),
        "{out:?}"
    );
    assert!(!exps.exists(), "nothing written");

    let out = submit_here(dir.path(), &["-J", "here", "--exp-root", ".", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is the project root"),
        "{out:?}"
    );
    let project: Vec<_> = std::fs::read_dir(dir.path().join("project"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(project, ["train.py"], "nothing written into the project");
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
}

/// `herd submit --help` and `herd check --help` list every key's flag (the command as
/// `-- <CMD>...`), and every flag they list is a key's, a `--no-KEY`, or one of the
/// command's own.
#[test]
fn submit_and_check_help_list_every_key() {
    use herd_plan::Key;
    for (command, own) in [
        (
            "submit",
            &[
                "--dry-run",
                "--resume",
                "--then",
                "--wait",
                "--help",
                "--version",
            ][..],
        ),
        ("check", &["--help", "--version"][..]),
    ] {
        let out = herd(&[command, "--help"]);
        assert!(out.status.success(), "herd {command} --help: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        // Option lines: `  -N, --nodes <N>  Nodes` or `      --requeue  …`.
        let listed: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.starts_with("Options:"))
            .filter(|l| l.trim_start().starts_with('-'))
            .filter_map(|l| {
                l.trim_start()
                    .split([' ', ','])
                    .find(|w| w.starts_with("--"))
            })
            .collect();
        for key in Key::ALL {
            if key == Key::Command {
                assert!(
                    help.contains("[-- <CMD>...]"),
                    "herd {command} --help:\n{help}"
                );
            } else {
                assert!(
                    listed.contains(&key.flag()),
                    "herd {command} --help does not list {}:\n{help}",
                    key.flag()
                );
            }
        }
        for flag in &listed {
            let is_key = Key::ALL.iter().any(|k| k.flag() == *flag);
            let negates_key = flag
                .strip_prefix("--no-")
                .is_some_and(|f| Key::ALL.iter().any(|k| k.flag() == format!("--{f}")));
            assert!(
                is_key || negates_key || own.contains(flag),
                "herd {command} --help lists {flag}, which is no key:\n{help}"
            );
        }
    }
}

/// `herd status` with a fake `squeue` on PATH that prints `answer` (or, with `fail`, fails
/// as with slurmctld down), in a folder with an empty experiment root.
fn status_with_fake_squeue(args: &[&str], fail: bool) -> std::process::Output {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    let body = if fail {
        "echo 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1"
    } else {
        "exit 0"
    };
    let path = bin.join("squeue");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("fake squeue");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::create_dir(dir.path().join("exps")).expect("exps");
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg("status")
        .args(["--exp-root", "exps"])
        .args(args)
        .current_dir(dir.path())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .output()
        .expect("herd runs")
}

#[test]
fn status_of_an_unknown_name_says_where_it_looked() {
    let out = status_with_fake_squeue(&["no-such-exp"], false);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-exp: no experiment of that name under /")
            && stderr.contains(
                "/exps and no job of yours with that name or id (experiments there: none)"
            ),
        "{stderr}"
    );
}

#[test]
fn status_without_a_scheduler_answers_from_the_folders_and_exits_1() {
    let out = status_with_fake_squeue(&[], true);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("no experiments under /"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("herd: error: the scheduler did not answer: squeue: error: Unable to contact slurm controller (connect failure); states above are from the experiment folders only"),
        "{stderr}"
    );
}

/// An experiment `train` as a 2-rank agent-mode job leaves it: rank files with time marks,
/// the timeline with its rendezvous, a failure report.
fn logs_experiment() -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).expect("project");
    let root = tmp.path().join("exps");
    let exp = herd_exp::NewExperiment::new(
        &root,
        "train",
        &project,
        serde_json::json!({}),
        herd_exp::Invocation::current("test"),
    )
    .create()
    .expect("experiment")
    .experiment;
    exp.record_job_id(1, "4242").expect("job id");
    let dir = exp.dir().to_owned();
    let event = |name: &str, fields: serde_json::Value| {
        herd_exp::timeline::append(&dir, name, fields).expect("event");
    };
    event("started", serde_json::json!({"job_id": 4242, "requeue": 0}));
    event(
        "rendezvous",
        serde_json::json!({"world_size": 2, "nodes": [
            {"node": 0, "host": "gpu-a01", "ranks": [0]},
            {"node": 1, "host": "gpu-a02", "ranks": [1]}]}),
    );
    event("attempt_started", serde_json::json!({"attempt": 0}));
    let a = dir.join("logs/attempt-0");
    std::fs::create_dir_all(&a).expect("attempt");
    std::fs::write(a.join("rank-0.out"), "step 1\nstep 2\n").expect("log");
    std::fs::write(a.join("rank-0.err"), "").expect("log");
    std::fs::write(a.join("rank-0.times"), "o 0 1000\no 7 3000\n").expect("marks");
    std::fs::write(a.join("rank-1.out"), "step 1\n").expect("log");
    std::fs::write(a.join("rank-1.err"), "boom\n").expect("log");
    std::fs::write(a.join("rank-1.times"), "o 0 2000\ne 0 4000\n").expect("marks");
    event("finished", serde_json::json!({"attempt": 0, "ok": false}));
    (tmp, root)
}

#[test]
fn top_once_prints_a_frame_and_needs_a_terminal_otherwise() {
    let (_tmp, root) = logs_experiment();
    let root = root.to_str().expect("utf-8");
    let out = herd(&["top", "train", "--exp-root", root, "--once"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout_of(&out);
    assert!(text.starts_with("herd top  train  job 4242"), "{text}");
    assert!(text.contains("attempt 0 of 1"), "{text}");
    assert!(text.contains("job failed"), "{text}");
    let row = |r: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{r} ")))
            .unwrap_or_else(|| panic!("no row {r}: {text}"))
            .to_owned()
    };
    assert!(
        row("0").contains("gpu-a01") && row("0").contains("stopped"),
        "{text}"
    );
    assert!(row("1").contains("gpu-a02"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");

    // stdout is a pipe here: the live view refuses and says what to use.
    let out = herd(&["top", "train", "--exp-root", root]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--once"), "{stderr}");

    let out = herd(&["top", "trian", "--exp-root", root, "--once"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("experiments there: train"),
        "{out:?}"
    );
}

#[test]
fn logs_merges_ranks_filters_and_follows_to_the_end() {
    let (_tmp, root) = logs_experiment();
    let root = root.to_str().expect("utf-8");
    let out = herd(&["logs", "train", "--exp-root", root]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout_of(&out),
        "0: step 1\n1: step 1\n0: step 2\n1: boom\n"
    );
    let out = herd(&[
        "logs",
        "train",
        "--exp-root",
        root,
        "--node",
        "gpu-a02",
        "--stderr",
    ]);
    assert_eq!(stdout_of(&out), "1: boom\n");
    let out = herd(&[
        "logs",
        "train",
        "--exp-root",
        root,
        "--rank",
        "0",
        "--tail",
        "1",
    ]);
    assert_eq!(stdout_of(&out), "step 2\n");
    // The job is over (failed): a follow prints everything and exits 1.
    let out = herd(&["logs", "train", "--exp-root", root, "-f", "--grep", "boom"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1: boom\n");
    // No failure report: exit 1, saying so.
    let out = herd(&["logs", "train", "--exp-root", root, "--failed"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("attempt 0 of train has no failure report")
    );
}

#[test]
fn logs_of_no_experiment_or_with_bad_flags_is_a_usage_error() {
    let (_tmp, root) = logs_experiment();
    let root = root.to_str().expect("utf-8");
    for (args, says) in [
        (vec!["nope"], "no experiment named \"nope\" in "),
        (
            vec!["train", "--grep", "("],
            "--grep \"(\": not a valid regular expression",
        ),
        (vec!["train", "--since", "soon"], "--since \"soon\""),
        (vec!["train", "--attempt", "3"], "train has no attempt 3"),
    ] {
        let mut argv = vec!["logs", "--exp-root", root];
        argv.extend(&args);
        let out = herd(&argv);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("herd: error: "), "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = herd(&["logs", "nope", "--exp-root", root]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("experiments there: train"));
}

#[test]
fn logs_into_a_closed_pipe_exits_0() {
    let (_tmp, root) = logs_experiment();
    let dir = root.join("train/logs/attempt-0");
    let line = "x".repeat(100) + "\n";
    std::fs::write(dir.join("rank-0.out"), line.repeat(20_000)).expect("big log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["logs", "train", "--exp-root", root.to_str().expect("utf-8")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("herd runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// The completion script loads in bash and registers `herd`, offering its commands.
#[test]
fn bash_completions_load_and_complete_the_commands() {
    let script = format!(
        "source <({} completions bash) && complete -p herd && \
         COMP_WORDS=(herd st) COMP_CWORD=1 COMP_LINE='herd st' COMP_POINT=7 && \
         _herd herd st herd && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        env!("CARGO_BIN_EXE_herd")
    );
    let out = Command::new("bash")
        .args(["--norc", "-c", &script])
        .output()
        .expect("bash runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("complete") && text.contains(" herd"),
        "{text}"
    );
    let offered: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(offered, ["status"], "herd st<TAB>: {text}");
}

#[test]
fn zsh_and_fish_completions_name_every_command() {
    for shell in ["zsh", "fish"] {
        let out = herd(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for c in COMMANDS {
            assert!(text.contains(c), "{shell}: no {c}");
        }
    }
    let out = herd(&["completions", "tcsh"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// `herd man` is a roff page man renders: a section per command, nested ones included,
/// each with the options its `--help` lists.
#[test]
fn the_man_page_has_a_section_per_command_with_its_options() {
    let out = herd(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH herd 1"), "{page}");
    for c in COMMANDS {
        assert!(
            page.contains(&format!(".SH \"HERD {}\"", c.to_uppercase())),
            "no section for {c}"
        );
    }
    assert!(page.contains(".SH \"HERD HOSTLIST EXPAND\""));
    assert!(page.contains("silent\\-after"), "herd top's options");
    // man renders it without complaint.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("herd.1");
    std::fs::write(&path, page.as_bytes()).expect("write");
    let rendered = Command::new("man")
        .arg("-l")
        .arg(&path)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
        .expect("man runs");
    assert!(rendered.status.success(), "{rendered:?}");
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(text.contains("HERD TOP"), "{text}");
    assert!(
        String::from_utf8_lossy(&rendered.stderr).trim().is_empty(),
        "{rendered:?}"
    );
}
