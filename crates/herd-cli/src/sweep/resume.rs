//! `herd submit --resume NAME` of a sweep: the runs that did not finish, submitted again as
//! one array job of those tasks only, each run a new attempt of its experiment (its own
//! folder, snapshot and script, as `--resume` of one experiment).

use std::io::Write;
use std::path::Path;

use super::run::Sweep;
use super::state::Answer;
use crate::submit::record_queued;
use crate::{CliError, ExitStatus};

/// A run's state (`herd status`'s word) that `--resume` runs again: it ended without
/// finishing.
fn runs_again(state: &str) -> bool {
    matches!(state, "failed" | "cancelled")
}

/// The `--array` of tasks `tasks`, at most `max_parallel` at once: `1,3%2`.
fn array_arg(tasks: &[u32], max_parallel: Option<u32>) -> String {
    let list: Vec<String> = tasks.iter().map(u32::to_string).collect();
    let limit = max_parallel.map_or_else(String::new, |p| format!("%{p}"));
    format!("--array={}{limit}", list.join(","))
}

/// Whether `herd submit --resume NAME` names a sweep: then [`run`] resumes it.
pub fn applies(args: &crate::submit::SubmitArgs) -> bool {
    args.resumes()
        .is_some_and(|(name, root)| root.is_ok_and(|r| herd_exp::sweep::is_sweep(&r.join(name))))
}

/// `herd submit --resume NAME` of a sweep ([`resume`]); `--wait` does not watch a sweep yet.
pub fn run(args: &crate::submit::SubmitArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let Some((name, root)) = args.resumes() else {
        return Err(CliError::Usage("--resume NAME: no name given".into()));
    };
    if args.waits() {
        return Err(CliError::Usage(format!(
            "--wait does not watch a sweep yet: leave it out and follow {name} with `herd status {name}`"
        )));
    }
    resume(&root?, name, out)
}

/// Resubmit sweep `name` under `root`: every run that failed or was cancelled, as tasks of
/// one new array job of the sweep's own script. Refused while the scheduler does not say
/// which runs are still queued or running, and when no run is left to run.
pub fn resume(root: &Path, name: &str, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let folder = herd_exp::sweep::Sweep::open(root, name)?;
    let manifest = folder.manifest()?;
    let sweep = Sweep::from_folder(&folder)?;
    let (answer, trouble) = Answer::ask(&sweep, crate::site::DEFAULT_TIMEOUT);
    if let Some(e) = trouble {
        return Err(CliError::Input(format!(
            "sweep {name}: cannot tell which runs are still queued or running ({}); nothing submitted, try again",
            crate::site::scheduler_trouble(&e)
        )));
    }
    let status = super::status::status(&sweep, &answer);
    let again: Vec<&super::status::RunStatus> = status
        .runs
        .iter()
        .filter(|r| runs_again(r.view.state))
        .collect();
    if again.is_empty() {
        return Err(CliError::Input(format!(
            "sweep {name}: no run failed or was cancelled ({}); nothing submitted",
            status.summary()
        )));
    }
    let tasks: Vec<u32> = again.iter().map(|r| r.index).collect();
    let array = array_arg(&tasks, manifest.max_parallel);
    let id = herd_slurm::scheduler::command::sbatch_with(
        &folder.paths().job_script(),
        folder.dir(),
        &[&array],
    )
    .map_err(|source| CliError::Sbatch {
        what: format!("the runs of sweep {name} that did not finish"),
        source,
    })?;
    folder
        .record_submission(&id, &tasks)
        .map_err(|source| CliError::RecordJobId {
            job_id: id.clone(),
            source,
        })?;
    let invocation = herd_exp::Invocation::current(env!("CARGO_PKG_VERSION"));
    let mut unrecorded = None;
    for run in sweep.runs.iter().filter(|r| tasks.contains(&r.index)) {
        let task = format!("{id}_{}", run.index);
        let recorded = run.experiment.add_attempt(&invocation).and_then(|attempt| {
            run.experiment.record_job_id(attempt, &task)?;
            Ok(attempt)
        });
        match recorded {
            Ok(attempt) => record_queued(&run.experiment, attempt, &task),
            Err(source) => {
                unrecorded.get_or_insert(CliError::RecordJobId {
                    job_id: task,
                    source,
                });
            }
        }
    }
    writeln!(out, "{id}")?;
    let names: Vec<&str> = again.iter().map(|r| r.name.as_str()).collect();
    eprintln!(
        "herd: submitted job {id}: {} of the {} runs of sweep {name} again ({}): {}",
        tasks.len(),
        sweep.runs.len(),
        names.join(", "),
        folder.dir().display()
    );
    match unrecorded {
        Some(e) => Err(e),
        None => Ok(ExitStatus::Success),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_array_names_the_tasks_and_the_limit() {
        assert_eq!(array_arg(&[1, 3], Some(2)), "--array=1,3%2");
        assert_eq!(array_arg(&[0], None), "--array=0");
    }

    #[test]
    fn only_runs_that_ended_unfinished_run_again() {
        for s in ["failed", "cancelled"] {
            assert!(runs_again(s), "{s}");
        }
        for s in ["finished", "running", "queued", "suspended", "unknown"] {
            assert!(!runs_again(s), "{s}");
        }
    }
}
