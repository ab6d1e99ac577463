//! This site: the cluster profile that matches this host, the experiment root it names,
//! how long the scheduler has to answer, and what its trouble means in words. Every command
//! that finds experiments or asks the scheduler starts here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_plan::{load_profiles, profile_dir};

use crate::CliError;

/// How long the scheduler has to answer one query, unless `--timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// This host's name (the cluster profiles are matched against it).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// The cluster profiles of this user (`$XDG_CONFIG_HOME/herd/profiles`, else
/// `~/.config/herd/profiles`).
pub(crate) fn cluster_profiles() -> Result<Vec<herd_plan::Profile>, CliError> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
    Ok(load_profiles(&profile_dir(xdg.as_deref(), &home))?)
}

/// The experiment root: `--exp-root`, else the matching cluster profile's `exp_root`, else
/// `herd-exp`; relative to the working folder.
pub fn exp_root(given: Option<&Path>) -> Result<PathBuf, CliError> {
    let root = match given {
        Some(p) => p.to_path_buf(),
        None => {
            let profiles = cluster_profiles()?;
            herd_plan::select_profile(&profiles, &hostname())
                .and_then(|p| p.keys.exp_root.clone())
                .unwrap_or_else(|| PathBuf::from(herd_plan::DEFAULT_EXP_ROOT))
        }
    };
    if root.is_relative() {
        let cwd =
            std::env::current_dir().map_err(CliError::system("cannot find the working folder"))?;
        return Ok(cwd.join(root));
    }
    Ok(root)
}
/// Whether `t` is a job id (digits) rather than a name.
pub(crate) fn is_job_id(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}

/// Experiment `name` under `root`: a plain experiment's name, or `SWEEP/RUN`, a run of the
/// sweep in folder `SWEEP` (docs/sweeps.md).
pub fn open_experiment(root: &Path, name: &str) -> Result<herd_exp::Experiment, herd_exp::Error> {
    match sweep_run(root, name) {
        Some((sweep, run)) => herd_exp::Experiment::open(&root.join(sweep), run),
        None => herd_exp::Experiment::open(root, name),
    }
}

/// `SWEEP/RUN` split in two, when `root/SWEEP` is a sweep's folder.
pub fn sweep_run<'a>(root: &Path, name: &'a str) -> Option<(&'a str, &'a str)> {
    let (sweep, run) = name.split_once('/')?;
    (!run.is_empty() && !run.contains('/') && herd_exp::sweep::is_sweep(&root.join(sweep)))
        .then_some((sweep, run))
}

/// What went wrong with the scheduler, in one line: a timeout without the long command.
pub fn scheduler_trouble(e: &herd_slurm::SlurmError) -> String {
    match e {
        herd_slurm::SlurmError::Timeout { timeout, .. } => format!(
            "the scheduler did not answer within {}s (`squeue` was stopped; is slurmctld up? `scontrol ping` tells; --timeout gives it longer)",
            timeout.as_secs()
        ),
        other => format!("the scheduler did not answer: {other}"),
    }
}
