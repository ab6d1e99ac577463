//! The node preflight on the bed, with `srun … herd launch` as a user types it: a job whose
//! Python has no torch on any node (its workers need none) runs on every node, one whose
//! Python lacks torch on one node only blames that node before any worker starts; and no
//! program of the user's that herd starts (the workers, the preflight's Python, nvidia-smi,
//! py-spy) ever sees the job's secret.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use herd_testbed::{run_cmd, write_file, Bed, BedError};
use serde_json::Value;

use crate::spares::BrokenVenv;
use crate::support::worker;

/// A venv with nothing installed (`--without-pip`, no system packages): a plain Python
/// without torch, as a JAX, NumPy or data-processing job's would be. Its python.
fn venv_without_torch(bed: &Bed, dir: &Path) -> PathBuf {
    let venv = dir.join("venv");
    let out = Command::new(bed.python())
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .output()
        .expect("python runs");
    assert!(out.status.success(), "python -m venv: {out:?}");
    let python = venv.join("bin/python");
    let found = Command::new(&python)
        .args([
            "-c",
            "import importlib.util as u; print(u.find_spec('torch'))",
        ])
        .output()
        .expect("the new venv's python runs");
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).trim(),
        "None",
        "the venv has no torch"
    );
    python
}

/// `srun -N3 --ntasks-per-node=1 --gres=gpu:2 [--export …] herd launch ARGS -- CMD` from
/// `dir`, with `env` added to srun's environment: srun's output, or why it failed.
pub(crate) fn srun_launch(
    dir: &Path,
    env: &[(&str, &str)],
    launch: &[&str],
    cmd: &[String],
) -> Result<String, BedError> {
    let mut c = Command::new("srun");
    c.args(["--nodes=3", "--ntasks-per-node=1", "--gres=gpu:2"])
        .arg(env!("CARGO_BIN_EXE_herd"))
        .arg("launch")
        .args(launch)
        .arg("--")
        .args(cmd)
        .current_dir(dir)
        .envs(env.iter().copied());
    run_cmd(&mut c, Duration::from_secs(180)).map(|out| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Every `worker-RANK.json` env_dump.py wrote in `dir`, by rank.
fn workers(dir: &Path) -> BTreeMap<u32, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("the output folder").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rank) = name
            .strip_prefix("worker-")
            .and_then(|r| r.strip_suffix(".json"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).expect("read");
        let rank: u32 = rank.parse().expect("a rank");
        out.insert(rank, serde_json::from_str(&text).expect("json"));
    }
    out
}

#[test]
fn a_job_whose_python_has_no_torch_anywhere_runs_on_all_three_nodes() {
    let bed = Bed::require();
    let dir = bed.scratch("preflight_no_torch").expect("scratch");
    let python = venv_without_torch(&bed, &dir);
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).expect("out");
    let cmd = [
        python.display().to_string(),
        worker("env_dump.py"),
        out_dir.display().to_string(),
    ];
    let log_dir = dir.join("logs").display().to_string();
    let said = srun_launch(
        &dir,
        &[],
        &["--nproc-per-node", "2", "--log-dir", &log_dir],
        &cmd,
    )
    .unwrap_or_else(|e| panic!("the job fails: {e}"));
    assert!(
        said.contains("every node fails check `python`") && said.contains("starting the workers"),
        "the leader says the finding is the job's:\n{said}"
    );
    let ran = workers(&out_dir);
    assert_eq!(
        ran.keys().copied().collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>(),
        "every worker of every node ran:\n{said}"
    );
    let hosts: BTreeSet<&str> = ran.values().filter_map(|w| w["host"].as_str()).collect();
    assert_eq!(hosts.len(), 3, "on three nodes: {hosts:?}");
}

#[test]
fn a_node_whose_python_lacks_torch_is_blamed_before_any_worker_starts() {
    let bed = Bed::require();
    let dir = bed.scratch("preflight_one_node").expect("scratch");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).expect("out");
    let broken_node = bed.nodes()[1].clone();
    let broken = BrokenVenv::on(&bed, &broken_node, &dir.join("empty-site-packages"));
    let cmd = [
        bed.python().display().to_string(),
        worker("env_dump.py"),
        out_dir.display().to_string(),
    ];
    let log_dir = dir.join("logs").display().to_string();
    let result = srun_launch(
        &dir,
        &[],
        &["--nproc-per-node", "2", "--log-dir", &log_dir],
        &cmd,
    );
    drop(broken);
    let said = match result {
        Ok(out) => panic!("the job should fail without starting, but it ran:\n{out}"),
        Err(BedError::Failed { stderr, .. }) => stderr,
        Err(e) => panic!("{e}"),
    };
    assert!(
        said.contains(&format!("{broken_node}: preflight check `python` failed"))
            && said.contains("torch"),
        "names the node and the check:\n{said}"
    );
    assert!(
        said.contains(&format!("blaming node 1 ({broken_node})")),
        "blames that node:\n{said}"
    );
    assert!(
        workers(&out_dir).is_empty(),
        "no worker started anywhere:\n{said}"
    );
}

/// A `.pth` file runs in every Python of the venv as it starts (`site`): the preflight's
/// `python -c`, and each worker. It records the process's command line and environment.
const RECORDING_PTH: &str = "import os; d = os.environ.get('PROBE_DIR'); d and open(os.path.join(d, 'python-%d.env' % os.getpid()), 'w').write(open('/proc/self/cmdline').read().replace(chr(0), ' ') + chr(10) + chr(10).join(k + '=' + v for k, v in os.environ.items()))\n";

/// A stand-in for a tool herd finds on the user's PATH: records its environment and its
/// parent's (the agent's, which holds the secret), then does the tool's part.
fn recording_tool(name: &str, then: &str) -> String {
    format!(
        "#!/bin/sh\nenv > \"$PROBE_DIR/{name}-$$.env\"\ntr '\\0' '\\n' < /proc/$PPID/environ > \"$PROBE_DIR/{name}-$$.parent\"\n{then}\n"
    )
}

#[test]
fn no_program_of_the_users_sees_the_job_secret() {
    let bed = Bed::require();
    let dir = bed.scratch("preflight_secret").expect("scratch");
    let python = venv_without_torch(&bed, &dir);
    let bin = python.parent().expect("bin").to_path_buf();
    let probes = dir.join("probes");
    std::fs::create_dir_all(&probes).expect("probes");
    let site = Command::new(&python)
        .args(["-c", "import site; print(site.getsitepackages()[0])"])
        .output()
        .expect("python runs");
    let site = PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    write_file(&site.join("zz_record.pth"), RECORDING_PTH, 0o644).expect("pth");
    write_file(
        &bin.join("nvidia-smi"),
        &recording_tool(
            "nvidia-smi",
            "echo 'GPU 0: Stand-in (UUID: GPU-00000000)'; echo 'GPU 1: Stand-in (UUID: GPU-00000001)'",
        ),
        0o755,
    )
    .expect("nvidia-smi");
    write_file(
        &bin.join("py-spy"),
        &recording_tool("py-spy", "echo 'Thread 1 (idle): \"MainThread\"'"),
        0o755,
    )
    .expect("py-spy");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).expect("out");
    let secret = "not-for-workers-3f9a1c";
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let probe_dir = probes.display().to_string();
    let log_dir = dir.join("logs").display().to_string();
    // Each worker writes its record, then hangs: the watchdog dumps its stack with py-spy.
    let cmd = [
        python.display().to_string(),
        worker("env_dump.py"),
        out_dir.display().to_string(),
        "hang".into(),
    ];
    let result = srun_launch(
        &dir,
        &[
            ("HERD_JOB_SECRET", secret),
            ("PROBE_DIR", &probe_dir),
            ("PATH", &path),
        ],
        &[
            "--nproc-per-node",
            "2",
            "--log-dir",
            &log_dir,
            "--hang-timeout",
            "3",
            "--start-timeout",
            "60",
        ],
        &cmd,
    );
    let said = match result {
        Ok(out) => panic!("the hung job should fail:\n{out}"),
        Err(BedError::Failed { stderr, .. }) => stderr,
        Err(e) => panic!("{e}"),
    };
    assert!(said.contains("hang"), "the watchdog ended the job:\n{said}");

    let mut seen: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for entry in std::fs::read_dir(&probes).expect("probes").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path()).expect("read");
        let kind = name.split('-').next().unwrap_or_default();
        let kind = match (kind, name.ends_with(".parent")) {
            ("python", _) if text.lines().next().is_some_and(|l| l.contains(" -c ")) => {
                "preflight python"
            }
            ("python", _) if text.contains("env_dump.py") => "worker",
            ("python", _) => "other python",
            ("nvidia", false) => "nvidia-smi",
            ("py", false) => "py-spy",
            (_, true) => "parent",
            _ => "unknown",
        };
        seen.entry(kind.to_owned()).or_default().push((name, text));
    }
    let count = |k: &str| seen.get(k).map_or(0, Vec::len);
    assert_eq!(count("worker"), 6, "every worker recorded itself: {seen:?}");
    assert!(
        count("preflight python") >= 3,
        "the preflight's Python ran on every node: {:?}",
        seen.keys()
    );
    assert!(
        count("nvidia-smi") >= 3,
        "the preflight ran nvidia-smi -L on every node: {:?}",
        seen.keys()
    );
    assert!(
        count("py-spy") >= 1,
        "the watchdog ran py-spy: {:?}\n{said}",
        seen.keys()
    );
    // The agents that started them do hold the secret: the test shows what it claims.
    let parents = &seen["parent"];
    assert!(
        parents
            .iter()
            .all(|(_, t)| t.contains(&format!("HERD_JOB_SECRET={secret}"))),
        "the agents have the secret: {parents:?}"
    );
    for (kind, files) in seen.iter().filter(|(k, _)| k.as_str() != "parent") {
        for (name, text) in files {
            assert!(
                !text.contains(secret) && !text.contains("HERD_JOB_SECRET"),
                "{kind} ({name}) saw the job's secret:\n{text}"
            );
        }
    }
    for (rank, w) in workers(&out_dir) {
        assert!(
            w["env"].get("HERD_JOB_SECRET").is_none(),
            "worker {rank} has the secret"
        );
    }
}
