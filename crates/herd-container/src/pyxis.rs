//! Pyxis (enroot's SLURM plugin): every worker a one-task job step of its own, started by
//! the node's agent with `srun --overlap --container-image=…`.
//!
//! Pyxis makes containers only inside a job step (`srun`), so the agent, which stays on
//! the host, starts each of its node's workers as a step on its own node:
//!
//! ```text
//! srun --jobid=JOB --overlap --nodelist=HOST --nodes=1 --ntasks=1 --ntasks-per-node=1
//!      --cpus-per-task=N --mem=0 --quiet
//!      --container-image=IMAGE --container-name=herd-TAG --container-workdir=CWD
//!      --container-mounts=DIR:DIR,…,MOUNTS --no-container-mount-home
//!      /bin/sh -c 'echo $$ > "$0" && exec env "$@"' PIDFILE NAME=VALUE… ARGV…
//! ```
//!
//! - One image import per node: the steps share a named container (`--container-name`),
//!   which the first (the preflight's probe) makes and the others reuse; the agent removes
//!   it when it ends (`enroot remove`).
//! - Pyxis has no PID namespace: the pid the wrapper writes is the worker's host pid, which
//!   the agent signals and py-spy reads.
//! - Pyxis sets the host's variables under the image's (`ENV` wins), and for PyTorch
//!   images remaps `RANK`/`LOCAL_RANK` from the step's own one-task `SLURM_PROCID`/
//!   `SLURM_LOCALID`; slurmstepd sets the step's own `SLURM_*` too. herd's variables are
//!   therefore set last, by `env` in the container, right before the worker: they win over
//!   all of these. (They are on that command line; the job's secret never is.)
//! - `srun` exits with the task's code, or 128 + N when signal N killed it.
//!
//! Pyxis cannot run on herd's test bed: this is built from Pyxis' documentation and
//! source (0.24), and its command line is what the unit tests check.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::mounts::own_path_binds;
use crate::podman::PID_WRAPPER_ENV;
use crate::Mount;

/// Pyxis ready on one node: the job step details and the container's name.
#[derive(Debug)]
pub(crate) struct Pyxis {
    srun: PathBuf,
    image: String,
    job_id: u64,
    host: String,
    cpus_per_worker: Option<u32>,
    /// `--container-name`: `herd-TAG`, one per agent.
    name: String,
    /// This agent's folder, bound inside: the workers' pid files.
    dir: PathBuf,
    counter: AtomicU32,
}

impl Pyxis {
    /// Pyxis for `image` from `srun` on node `host` of job `job_id`; `tag` is unique per
    /// agent. Says what to change when this srun has no Pyxis.
    pub(crate) fn start(
        srun: &Path,
        image: &str,
        tag: &str,
        job_id: Option<u64>,
        host: Option<&str>,
        cpus_per_worker: Option<u32>,
    ) -> Result<Pyxis, String> {
        let (Some(job_id), Some(host)) = (job_id, host) else {
            return Err(
                "pyxis starts containers only in a SLURM job step: outside SLURM (herd run) \
                 run the same image with podman or charliecloud"
                    .to_owned(),
            );
        };
        let help = crate::podman::without_withheld(Command::new(srun))
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start {}: {e}", srun.display()))?;
        if !String::from_utf8_lossy(&help.stdout).contains("--container-image") {
            return Err(format!(
                "{} has no --container-image: Pyxis is not installed on this cluster's nodes; \
                 use podman, charliecloud or apptainer",
                srun.display()
            ));
        }
        let dir = std::env::temp_dir().join(format!("herd-pyxis-{tag}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        Ok(Pyxis {
            srun: srun.to_owned(),
            image: image.to_owned(),
            job_id,
            host: host.to_owned(),
            cpus_per_worker,
            name: format!("herd-{tag}"),
            dir,
            counter: AtomicU32::new(0),
        })
    }

    /// `srun`'s arguments for `argv` in `cwd` with herd's variables `env`, the folders
    /// `need` and `mounts` inside; and the file that will hold the worker's pid.
    pub(crate) fn args(
        &self,
        argv: &[OsString],
        env: &BTreeMap<String, String>,
        cwd: &Path,
        need: &[PathBuf],
        mounts: &[Mount],
    ) -> Result<(Vec<OsString>, PathBuf), String> {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let pid_file = self.dir.join(format!("worker-{n}.pid"));
        let mut wanted: Vec<PathBuf> = need.to_vec();
        wanted.push(cwd.to_owned());
        let binds = own_path_binds(&wanted, &self.dir);
        let step = Step {
            job_id: self.job_id,
            host: &self.host,
            cpus_per_worker: self.cpus_per_worker,
            image: &self.image,
            name: &self.name,
        };
        Ok((
            srun_args(&step, cwd, &binds, mounts, env, &pid_file, argv)?,
            pid_file,
        ))
    }

    /// The srun program.
    pub(crate) fn program(&self) -> &Path {
        &self.srun
    }
}

impl Drop for Pyxis {
    /// The named container goes with the agent: enroot keeps it as `pyxis_NAME` (or
    /// `pyxis_JOB_NAME` where the cluster scopes containers to the job, which Pyxis then
    /// removes itself at the job's end).
    fn drop(&mut self) {
        if let Some(enroot) = crate::find_program(&["enroot"], std::env::var_os("PATH").as_deref())
        {
            let _ = crate::podman::without_withheld(Command::new(enroot))
                .args(["remove", "--force"])
                .arg(format!("pyxis_{}", self.name))
                .arg(format!("pyxis_{}_{}", self.job_id, self.name))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a worker's step is: its job, node, CPUs, image and container name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Step<'a> {
    pub(crate) job_id: u64,
    pub(crate) host: &'a str,
    pub(crate) cpus_per_worker: Option<u32>,
    pub(crate) image: &'a str,
    pub(crate) name: &'a str,
}

/// `srun`'s arguments for one worker (see the module's doc). `env` are herd's variables,
/// set by `env` inside, after Pyxis and slurmstepd set theirs; a name or value that `env`
/// cannot take on its command line (a name with `=`, a newline anywhere) is refused, as is
/// a program whose name has `=` (`env` would take it for a variable).
pub(crate) fn srun_args(
    step: &Step<'_>,
    cwd: &Path,
    binds: &[PathBuf],
    mounts: &[Mount],
    env: &BTreeMap<String, String>,
    pid_file: &Path,
    argv: &[OsString],
) -> Result<Vec<OsString>, String> {
    let mut a: Vec<OsString> = vec![
        format!("--jobid={}", step.job_id).into(),
        "--overlap".into(),
        format!("--nodelist={}", step.host).into(),
        "--nodes=1".into(),
        "--ntasks=1".into(),
        "--ntasks-per-node=1".into(),
    ];
    if let Some(c) = step.cpus_per_worker {
        a.push(format!("--cpus-per-task={c}").into());
    }
    a.extend(["--mem=0", "--quiet"].map(OsString::from));
    a.push(format!("--container-image={}", step.image).into());
    a.push(format!("--container-name={}", step.name).into());
    a.push(format!("--container-workdir={}", cwd.display()).into());
    let mut all: Vec<String> = binds
        .iter()
        .map(|b| format!("{}:{}", b.display(), b.display()))
        .collect();
    all.extend(mounts.iter().map(|m| {
        let ro = if m.read_only { ":ro" } else { "" };
        format!("{}:{}{ro}", m.src.display(), m.dst.display())
    }));
    if all.iter().any(|m| m.contains(',')) {
        return Err(
            "a folder the job needs has a comma in its path, which Pyxis' --container-mounts \
             cannot take: move it, or use podman or charliecloud"
                .to_owned(),
        );
    }
    if !all.is_empty() {
        a.push(format!("--container-mounts={}", all.join(",")).into());
    }
    a.push("--no-container-mount-home".into());
    a.extend(["/bin/sh", "-c", PID_WRAPPER_ENV].map(OsString::from));
    a.push(pid_file.as_os_str().to_owned());
    for (k, v) in env {
        if crate::WITHHELD.contains(&k.as_str()) {
            continue;
        }
        if k.is_empty() || k.contains('=') || k.contains('\n') || v.contains('\n') {
            return Err(format!(
                "the variable `{k}` cannot be given to a worker through Pyxis (a name with `=` \
                 or a newline in its value)"
            ));
        }
        a.push(format!("{k}={v}").into());
    }
    if argv
        .first()
        .is_some_and(|p| p.to_string_lossy().contains('='))
    {
        return Err(format!(
            "the worker's program `{}` has `=` in its name, which `env` would take for a \
             variable: name it by a path without `=`",
            argv[0].to_string_lossy()
        ));
    }
    a.extend(argv.iter().cloned());
    Ok(a)
}
