//! The rendered batch scripts, run by bash with stand-ins for `srun` and `herd`: the
//! command reaches srun byte for byte in every launch mode, whatever it contains, and the
//! script runs from the snapshot with the variables it promises.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use herd_plan::{render_script, resolve, JobKeys, Plan, ScriptParams};
use proptest::prelude::*;

/// A folder with a fake `srun` (records its arguments and environment) and a fake herd
/// (answers `hostlist expand`, fails anything else), under names that need quoting.
struct Bed {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    herd: PathBuf,
    snapshot: PathBuf,
    exp: PathBuf,
    out: PathBuf,
}

fn write_exe(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
}

fn bed() -> Bed {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let root = dir.path().to_path_buf();
    let bin = root.join("bin");
    let herd_dir = root.join("h e'rd $(x)");
    // The snapshot is the experiment's `code/`: the quote and backquote test its `cd`.
    let exp = root.join("exp dir's `y` 100% ~");
    let snapshot = herd_exp::ExperimentDir::new(&exp).code();
    let out = root.join("out");
    for d in [&bin, &herd_dir, &snapshot, &exp, &out] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    write_exe(
        &bin.join("srun"),
        "#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$HERD_TEST_OUT/argv\"\n\
         { printf 'PWD=%s\\n' \"$PWD\"; printf 'HERD_EXP_DIR=%s\\n' \"${HERD_EXP_DIR-}\";\n\
           printf 'HERD_CHECKPOINT_DIR=%s\\n' \"${HERD_CHECKPOINT_DIR-}\";\n\
           printf 'HERD_JOB_SECRET=%s\\n' \"${HERD_JOB_SECRET-}\";\n\
           printf 'MASTER_ADDR=%s\\n' \"${MASTER_ADDR-}\"; printf 'MASTER_PORT=%s\\n' \"${MASTER_PORT-}\"; } > \"$HERD_TEST_OUT/env\"\n",
    );
    let herd = herd_dir.join("herd");
    write_exe(
        &herd,
        "#!/bin/bash\nif [ \"$1 $2 $3\" = 'hostlist expand --' ] && [ \"$4\" = 'gpu-a[01-02]' ]; then printf 'gpu-a01\\ngpu-a02\\n';\n\
         else exit 3; fi\n",
    );
    Bed {
        _dir: dir,
        bin,
        herd,
        snapshot,
        exp,
        out,
    }
}

struct Ran {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
}

fn run(bed: &Bed, plan: &Plan) -> Ran {
    run_as_job(bed, plan, 4242)
}

/// Runs the script as job `job_id` would (`SLURM_JOB_ID`).
fn run_as_job(bed: &Bed, plan: &Plan, job_id: u32) -> Ran {
    let script = render_script(
        plan,
        &ScriptParams {
            exp_dir: &bed.exp,
            herd: &bed.herd,
            dependency: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let path = bed.out.join("job.sh");
    std::fs::write(&path, &script).unwrap_or_else(|e| panic!("{e}"));
    let status = Command::new("bash")
        .arg(&path)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bed.bin.display()))
        .env("SLURM_JOB_ID", job_id.to_string())
        .env("SLURM_JOB_NODELIST", "gpu-a[01-02]")
        .env("HERD_TEST_OUT", &bed.out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
    assert!(status.success(), "script failed:\n{script}");
    let raw = std::fs::read(bed.out.join("argv")).unwrap_or_else(|e| panic!("{e}"));
    let mut argv: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    assert_eq!(argv.pop().as_deref(), Some(""));
    let env = std::fs::read_to_string(bed.out.join("env"))
        .unwrap_or_else(|e| panic!("{e}"))
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Ran { argv, env }
}

fn plan(mode: &str, command: Vec<String>) -> Plan {
    let flags = JobKeys {
        mode: Some(mode.to_owned()),
        nodes: Some(2),
        gpus_per_node: Some(4),
        cpus_per_task: Some(8),
        max_restarts: (mode != "srun").then_some(1),
        job_name: Some("t".into()),
        command: Some(command),
        ..JobKeys::default()
    };
    resolve(None, &flags, &[], "login1").unwrap_or_else(|e| panic!("{e}"))
}

fn nasty() -> Vec<String> {
    [
        "python3",
        "-u",
        "train.py",
        "",
        "a b",
        "it's",
        "\"q\"",
        "$(touch pwned)",
        "`touch pwned`",
        "${HOME}",
        "*",
        "~",
        "line\nbreak",
        "tab\there",
        "日本語 ✓",
        "--lr=0.1",
        "\\",
        ";",
        "|",
        "#",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn agent_mode_runs_the_snapshot_with_a_fresh_secret() {
    let bed = bed();
    let cmd = nasty();
    let ran = run(&bed, &plan("agent", cmd.clone()));
    let logs = format!("{}/logs", bed.exp.display());
    let herd = bed.herd.display().to_string();
    let mut want: Vec<String> = [
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=8",
        "--kill-on-bad-exit=1",
        &herd,
        "launch",
        "--nproc-per-node",
        "4",
        "--max-restarts",
        "1",
        "--warn-before",
        "120",
        "--max-requeues",
        "3",
        "--log-dir",
        &logs,
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    want.extend(cmd);
    assert_eq!(ran.argv, want);
    assert_eq!(ran.env["PWD"], bed.snapshot.display().to_string());
    assert_eq!(ran.env["HERD_EXP_DIR"], bed.exp.display().to_string());
    // The experiment's checkpoint folder, its path (with a `%`, a space and a `~`) intact.
    assert_eq!(
        ran.env["HERD_CHECKPOINT_DIR"],
        bed.exp.join("checkpoints").display().to_string()
    );
    let secret = &ran.env["HERD_JOB_SECRET"];
    assert_eq!(secret.len(), 32, "{secret:?}");
    assert!(secret.bytes().all(|b| b.is_ascii_hexdigit()), "{secret:?}");
    let again = run(&bed, &plan("agent", vec!["x".into()]));
    assert_ne!(&again.env["HERD_JOB_SECRET"], secret);
    assert!(!bed.snapshot.join("pwned").exists());
}

#[test]
fn srun_mode_gives_one_task_per_gpu_and_a_master() {
    let bed = bed();
    let cmd = nasty();
    let ran = run(&bed, &plan("srun", cmd.clone()));
    let herd = bed.herd.display().to_string();
    let mut want: Vec<String> = [
        "--nodes=2",
        "--ntasks=8",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
        "--kill-on-bad-exit=1",
        &herd,
        "exec",
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    want.extend(cmd);
    assert_eq!(ran.argv, want);
    assert_eq!(ran.env["MASTER_ADDR"], "gpu-a01");
    let port: u32 = ran.env["MASTER_PORT"].parse().unwrap_or(0);
    // 20000 + 4242, or a few above it when something listens there on this machine.
    assert!((24242..24242 + 32).contains(&port), "{port}");
    assert_eq!(ran.env["HERD_JOB_SECRET"], "");
}

#[test]
fn torchrun_mode_renders_the_seed_line() {
    let bed = bed();
    let herd = bed.herd.display().to_string();
    let torchrun_argv = |ran: &Ran, launcher: &[&str]| -> Vec<String> {
        let port = &ran.env["MASTER_PORT"];
        let endpoint = format!("--rdzv_endpoint=gpu-a01:{port}");
        let mut want: Vec<&str> = vec![
            "--nodes=2",
            "--ntasks=2",
            "--ntasks-per-node=1",
            "--cpus-per-task=8",
            "--kill-on-bad-exit=1",
        ];
        // Each node's torchrun through herd exec --network-only (the collectives' interface).
        want.extend([herd.as_str(), "exec", "--network-only", "--"]);
        want.extend(launcher);
        want.extend([
            "--nnodes=2",
            "--nproc_per_node=4",
            "--rdzv_id=4242",
            "--rdzv_backend=c10d",
            &endpoint,
            "--max_restarts=1",
            "--no_python",
        ]);
        want.iter().map(|s| s.to_string()).collect()
    };
    // A python command: that python runs torchrun's module, then the command as given.
    let cmd = nasty();
    let ran = run(&bed, &plan("torchrun", cmd.clone()));
    let mut want = torchrun_argv(&ran, &["python3", "-m", "torch.distributed.run"]);
    want.extend(cmd);
    assert_eq!(ran.argv, want);
    // A venv's python named by a path no shell may touch: the same path, byte for byte.
    let mut cmd = nasty();
    cmd[0] = "/scratch/it's a $(venv)/`x`/bin/python3.11".into();
    let ran = run(&bed, &plan("torchrun", cmd.clone()));
    let mut want = torchrun_argv(&ran, &[&cmd[0], "-m", "torch.distributed.run"]);
    want.extend(cmd);
    assert_eq!(ran.argv, want);
    // Any other program: torchrun from PATH.
    let mut cmd = nasty();
    cmd[0] = "./run me.sh".into();
    let ran = run(&bed, &plan("torchrun", cmd.clone()));
    let mut want = torchrun_argv(&ran, &["torchrun"]);
    want.extend(cmd);
    assert_eq!(ran.argv, want);
    assert!(!bed.snapshot.join("pwned").exists());
}

#[test]
fn a_busy_port_is_skipped() {
    use herd_plan::render::{PORT_BASE, PORT_SPAN};
    let bed = bed();
    // A port the OS says is free, held here, in the scripts' range (not its last 32 ports,
    // so the ones above it are in range too); the job whose id leads to it must move past it.
    let range = PORT_BASE..PORT_BASE + PORT_SPAN - 32;
    let listener = (0..1000)
        .map(|_| std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind a free port"))
        .find(|l| range.contains(&l.local_addr().expect("local addr").port()))
        .expect("the OS gave no free port in the scripts' range in 1000 tries");
    let held = listener.local_addr().expect("local addr").port();
    let ran = run_as_job(
        &bed,
        &plan("torchrun", vec!["x".into()]),
        u32::from(held - PORT_BASE),
    );
    drop(listener);
    let port: u16 = ran.env["MASTER_PORT"]
        .parse()
        .expect("MASTER_PORT is a port");
    assert!(
        port > held && port < held + 32,
        "the job's own port {held} is held: MASTER_PORT={port}"
    );
}

proptest! {
    // No failure file: an integration test has no src/ for proptest to put it beside.
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn any_command_reaches_srun_byte_for_byte(
        program in "[a-zA-Z0-9_./][^\u{0}]{0,10}",
        args in proptest::collection::vec("[^\u{0}]{0,12}|['\"$`\\\\*?~!#;&|<>(){} \n\t]{0,8}", 0..6),
        mode in prop_oneof![Just("agent"), Just("srun"), Just("torchrun")],
    ) {
        let bed = bed();
        let mut cmd = vec![program];
        cmd.extend(args);
        let ran = run(&bed, &plan(mode, cmd.clone()));
        prop_assert!(ran.argv.len() >= cmd.len());
        prop_assert_eq!(&ran.argv[ran.argv.len() - cmd.len()..], &cmd[..]);
    }
}
