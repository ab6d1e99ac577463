//! The `herd` binary's command line, run as a user runs it: here the commands, hostlists,
//! `env`, `exec`, completions and the man page; `submit` and `check` in `submit.rs` (the
//! CPUs they ask for per worker in `cpus.rs`); the views of a job (`status`, `logs`, `top`)
//! in `views.rs`; the record of bad nodes (`herd nodes`, `submit --avoid-bad-nodes`) in
//! `nodes.rs`; herd's own SLURM commands with fake ones on PATH in `slurm.rs`.

mod containers;
mod cpus;
mod gpus;
mod hangs;
mod nodes;
mod slurm;
mod submit;
mod sweeps;
mod views;

use std::process::Command;

fn herd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .output()
        .expect("the herd binary runs")
}

/// docs/design.md §1's commands, in the order `herd --help` lists them.
const COMMANDS: [&str; 15] = [
    "submit",
    "run",
    "launch",
    "exec",
    "status",
    "logs",
    "cancel",
    "top",
    "report",
    "nodes",
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

/// `herd run` gives its agents the job's secret; the workers they start get their own
/// variables and never the secret (docs/env.md).
#[test]
fn a_worker_never_sees_the_job_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--nodes", "2", "--log-dir"])
        .arg(dir.path().join("logs"))
        .args(["--", "sh", "-c", "env > env-$RANK"])
        .env_remove("SLURM_JOB_ID")
        .env_remove("HERD_JOB_SECRET")
        .current_dir(dir.path())
        .output()
        .expect("herd run");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for rank in 0..2 {
        let env = std::fs::read_to_string(dir.path().join(format!("env-{rank}")))
            .expect("the worker's environment");
        assert!(env.lines().any(|l| l == format!("RANK={rank}")), "{env}");
        assert!(
            env.lines().any(|l| l.starts_with("HERD_NODE_RANK=")),
            "{env}"
        );
        assert!(
            !env.lines().any(|l| l.starts_with("HERD_JOB_SECRET=")),
            "rank {rank} got the secret:\n{env}"
        );
    }
}

/// A worker whose stderr shows a failure herd knows: the agent's report says the likely
/// cause and its fix after the headline, and `failure.json` keeps it as `hint`.
#[test]
fn a_known_failure_is_explained_in_the_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let logs = dir.path().join("logs");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--log-dir"])
        .arg(&logs)
        .args([
            "--",
            "sh",
            "-c",
            "echo \"ModuleNotFoundError: No module named 'timm'\" >&2; exit 1",
        ])
        .env_remove("SLURM_JOB_ID")
        .current_dir(dir.path())
        .output()
        .expect("herd run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.starts_with("herd: job failed (attempt 0): rank 0"))
        .collect();
    assert!(report[0].contains("exited with code 1 at "), "{stderr}");
    assert!(
        report[1].starts_with(
            "herd: likely cause: the Python that ran on the compute node lacks the package"
        ),
        "{stderr}"
    );
    let json: serde_json::Value = serde_json::from_slice(
        &std::fs::read(herd_exp::layout::LogsDir::new(&logs).failure_report()).expect("report"),
    )
    .expect("json");
    assert!(
        json["hint"]
            .as_str()
            .is_some_and(|h| h.contains(" — fix: name the environment's python by its path")),
        "{json}"
    );
}

/// Three simulated nodes whose Python has no torch (a venv with nothing in it; the workers
/// need none): every node's preflight finds the same, which is the job's, and the workers
/// of every node start (they once started on node 0 only, and the job hung).
#[test]
fn a_run_whose_python_has_no_torch_starts_the_workers_of_every_node() {
    let dir = tempfile::tempdir().expect("tmp");
    let venv = dir.path().join("venv");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .expect("python3 runs (the CLI tests need python3 with its venv module)");
    assert!(made.success(), "python3 -m venv --without-pip");
    let script = dir.path().join("hello.py");
    std::fs::write(
        &script,
        "import os\nprint('node', os.environ['GROUP_RANK'], 'rank', os.environ['RANK'], flush=True)\n",
    )
    .expect("write");
    let python = venv.join("bin/python");
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "-N", "3", "--nproc-per-node", "2", "--log-dir"])
        .arg(dir.path().join("logs"))
        .arg("--")
        .arg(&python)
        .arg(&script)
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("herd runs");
    // A run of a few workers that print one line each: 120 s tells a hang from a slow start.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "herd run hangs: still running after 120 s\n{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("every node fails check `python`"),
        "{stderr}"
    );
    for rank in 0..6 {
        assert!(
            stdout.contains(&format!("node {} rank {rank}\n", rank / 2)),
            "rank {rank} ran:\n{stdout}\n{stderr}"
        );
    }
}
