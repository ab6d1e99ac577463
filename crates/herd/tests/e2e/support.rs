//! Helpers shared by the end-to-end tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use herd_testbed::{
    batch_script, read_lossy, repo_root, shell_join, write_file, Bed, JobId, JobInfo,
};

/// `python examples/train_ddp.py ARGS…` with the bed's venv.
pub fn train_command(bed: &Bed, args: &[&str]) -> Vec<String> {
    let mut argv = vec![
        bed.python().display().to_string(),
        repo_root()
            .join("examples/train_ddp.py")
            .display()
            .to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv
}

/// The seeds-style SLURM → torch variable wrapper (replaced by herd in later tests).
pub fn slurm_torch_wrapper() -> String {
    repo_root()
        .join("testbed/slurm-torch-env")
        .display()
        .to_string()
}

/// A submitted batch job whose output goes to `<dir>/<id>.out`.
pub struct Job {
    pub id: JobId,
    pub dir: std::path::PathBuf,
}

impl Job {
    /// Write `<dir>/<name>.sbatch` with `directives` (plus `--output`) and `body`, submit it.
    pub fn submit(bed: &Bed, dir: &Path, name: &str, directives: &[&str], body: &str) -> Job {
        let mut all: Vec<String> = directives.iter().map(|d| d.to_string()).collect();
        all.push(format!("--job-name=herd-e2e-{name}"));
        all.push(format!("--output={}/%j.out", dir.display()));
        let script = dir.join(format!("{name}.sbatch"));
        write_file(&script, &batch_script(&all, body), 0o755).expect("write batch script");
        let id = bed.sbatch(&script, dir).expect("sbatch");
        Job {
            id,
            dir: dir.to_path_buf(),
        }
    }

    /// What the job has written so far.
    pub fn output(&self) -> String {
        read_lossy(self.dir.join(format!("{}.out", self.id)))
    }

    /// Wait for the end; panics (with the job's output) on timeout or unsuccessful end.
    pub fn wait_success(&self, bed: &Bed, timeout: Duration) -> String {
        let info: JobInfo = bed
            .wait(self.id, timeout)
            .unwrap_or_else(|e| panic!("{e}\njob output:\n{}", self.output()));
        let output = self.output();
        assert!(
            info.succeeded(),
            "job {} ended {} exit {}:\n{output}",
            self.id,
            info.state,
            info.exit_code
        );
        output
    }

    /// Poll the output until `pred` holds; panics after `timeout`.
    pub fn wait_output(&self, timeout: Duration, what: &str, pred: impl Fn(&str) -> bool) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let out = self.output();
            if pred(&out) {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "job {}: no {what} after {timeout:?}; output:\n{out}",
                self.id
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// `herd run --nodes N --nproc-per-node G -- CMD…` on this machine (no SLURM), from `dir`
/// with logs in `dir/local-logs`; panics unless it succeeds; returns its stdout.
pub fn local_herd_run(dir: &Path, nodes: u32, nproc: u32, cmd: &[String]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herd"))
        .args([
            "run",
            "--nodes",
            &nodes.to_string(),
            "--nproc-per-node",
            &nproc.to_string(),
        ])
        .arg("--log-dir")
        .arg(dir.join("local-logs"))
        .arg("--")
        .args(cmd)
        .current_dir(dir)
        .output()
        .expect("herd run");
    assert!(
        out.status.success(),
        "local herd run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A project folder (the files of `files`, `(from repo root, to project)`) and an experiment
/// root beside it, in a fresh scratch folder `name`.
pub fn project_with(bed: &Bed, name: &str, files: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let dir = bed.scratch(name).expect("scratch");
    let project = dir.join("project");
    std::fs::create_dir_all(&project).expect("project");
    for (from, to) in files {
        std::fs::copy(repo_root().join(from), project.join(to)).expect("copy");
    }
    (project, dir.join("exps"))
}

/// `herd submit ARGS` from `project`, with the venv's bin first on PATH (sbatch passes the
/// environment on, so the job finds python and torchrun there).
pub fn submit(bed: &Bed, project: &Path, args: &[&str]) -> Output {
    let venv_bin = bed.python().parent().expect("venv bin").to_path_buf();
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    herd_with_path("submit", project, args, &path)
}

/// `herd COMMAND ARGS` (`submit`, `check`) from `project` with exactly `path` as PATH
/// (sbatch passes it on to the job).
pub fn herd_with_path(command: &str, project: &Path, args: &[&str], path: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .arg(command)
        .args(args)
        .env("PATH", path)
        .current_dir(project)
        .output()
        .expect("herd runs")
}

/// The job id `herd submit` printed; panics (with its stderr) if it failed.
pub fn job_id(out: &Output) -> JobId {
    assert!(
        out.status.success(),
        "herd submit failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    JobId(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("job id on stdout"),
    )
}

/// Wait for a submitted job to succeed; returns its batch step's stdout (`logs/%j.out`).
pub fn wait_ok(bed: &Bed, job: JobId, exp: &Path) -> String {
    let info: JobInfo = bed.wait(job, Duration::from_secs(300)).expect("job ends");
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    let err = read_lossy(exp.join(format!("logs/{job}.err")));
    assert!(
        info.succeeded(),
        "job {job} {} {}:\n{out}\n{err}",
        info.state,
        info.exit_code
    );
    out
}

/// A project with the waiter worker (`workers/waiter.py`) and its `ready/` folder, and an
/// experiment root beside it, in a fresh scratch folder `name`.
pub fn waiter_project(bed: &Bed, name: &str) -> (PathBuf, PathBuf) {
    let (project, exps) = project_with(
        bed,
        name,
        &[("crates/herd/tests/e2e/workers/waiter.py", "waiter.py")],
    );
    std::fs::create_dir_all(project.join("ready")).expect("ready dir");
    (project, exps)
}

/// The test worker `name` of `crates/herd/tests/e2e/workers/`, by absolute path.
pub fn worker(name: &str) -> String {
    repo_root()
        .join("crates/herd/tests/e2e/workers")
        .join(name)
        .display()
        .to_string()
}

/// `herd run ARGS… -- CMD…` as a batch-script line (the test's own quoting).
pub fn herd_run(args: &[&str], cmd: &[String]) -> String {
    let mut argv: Vec<String> = vec![env!("CARGO_BIN_EXE_herd").into(), "run".into()];
    argv.extend(args.iter().map(|a| a.to_string()));
    argv.push("--".into());
    argv.extend(cmd.iter().cloned());
    shell_join(&argv)
}

/// `--nodelist=` of the bed's first 3 nodes (the bed must have them).
pub fn three_nodes(bed: &Bed) -> String {
    assert!(
        bed.nodes().len() >= 3,
        "these tests need 3 nodes: {:?}",
        bed.nodes()
    );
    format!("--nodelist={}", herd_hostlist::compress(&bed.nodes()[..3]))
}

/// The experiment's timeline events, as the file has them (one JSON object a line; none
/// before it exists): these tests check the format itself, not only herd's reading of it.
pub fn timeline(exp: &Path) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let path = herd_exp::ExperimentDir::new(exp).timeline();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("{path:?}: {e}"),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path:?}: {l}: {e}")))
        .collect()
}

/// The events named `name`.
pub fn events<'a>(
    all: &'a [serde_json::Map<String, serde_json::Value>],
    name: &str,
) -> Vec<&'a serde_json::Map<String, serde_json::Value>> {
    all.iter()
        .filter(|e| e["event"].as_str() == Some(name))
        .collect()
}

/// The events' names, each with its cause when it has one (`requeue(time_limit)`), for
/// messages.
pub fn names(all: &[serde_json::Map<String, serde_json::Value>]) -> Vec<String> {
    all.iter()
        .map(|e| {
            let name = e["event"].as_str().unwrap_or("?");
            match e.get("cause").and_then(serde_json::Value::as_str) {
                Some(c) => format!("{name}({c})"),
                None => name.to_owned(),
            }
        })
        .collect()
}
