//! `herd submit --resume NAME` of a sweep: the runs that did not finish, submitted again as
//! one array job of those tasks only per resource shape (each shape's own array script),
//! each run a new submission of its experiment (its own folder, snapshot and script, as
//! `--resume` of one experiment).

use std::io::Write;
use std::path::Path;

use super::run::Sweep;
use super::state::Answer;
use crate::submit::record_task;
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

/// `tasks` grouped by the array script that runs each (the first submission's arrays say
/// which: every run is a task of it), each group's tasks in order; the groups in the order
/// of those arrays. A task no array names goes with `job.sbatch`.
fn by_script(tasks: &[u32], arrays: &[herd_exp::sweep::SweepArray]) -> Vec<(String, Vec<u32>)> {
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    for &t in tasks {
        let script = arrays.iter().find(|a| a.tasks.contains(&t)).map_or_else(
            || herd_exp::ExperimentDir::job_script_name().to_owned(),
            |a| a.script.clone(),
        );
        match groups.iter_mut().find(|(s, _)| *s == script) {
            Some((_, g)) => g.push(t),
            None => groups.push((script, vec![t])),
        }
    }
    let order = |s: &str| {
        arrays
            .iter()
            .position(|a| a.script == s)
            .unwrap_or(usize::MAX)
    };
    groups.sort_by_key(|(s, _)| order(s));
    for (_, g) in &mut groups {
        g.sort_unstable();
    }
    groups
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
    // Each run's shape: the script of its array in the first submission (which ran all).
    let first: Vec<herd_exp::sweep::SweepArray> = manifest
        .submissions
        .first()
        .map(|s| s.arrays())
        .unwrap_or_default();
    let groups = by_script(&tasks, &first);
    let mut arrays: Vec<herd_exp::sweep::SweepArray> = Vec::with_capacity(groups.len());
    for (script, group) in &groups {
        let array = array_arg(group, manifest.max_parallel);
        match herd_slurm::scheduler::command::sbatch_with(
            &folder.dir().join(script),
            folder.dir(),
            &[&array],
        ) {
            Ok(id) => arrays.push(herd_exp::sweep::SweepArray {
                job_id: id,
                script: script.clone(),
                tasks: group.clone(),
            }),
            Err(source) if arrays.is_empty() => {
                return Err(CliError::Sbatch {
                    what: format!("the runs of sweep {name} that did not finish"),
                    source,
                })
            }
            Err(source) => {
                // The arrays queued before run; record them, and say which runs did not go.
                eprintln!(
                    "herd: error: sbatch refused {script} (tasks {}) of sweep {name}: {source}; the other arrays are queued",
                    herd_plan::array_spec(group)
                );
            }
        }
    }
    let tasks: Vec<u32> = arrays.iter().flat_map(|a| a.tasks.clone()).collect();
    let ids: Vec<String> = arrays.iter().map(|a| a.job_id.clone()).collect();
    folder
        .record_arrays(&arrays)
        .map_err(|source| CliError::RecordJobId {
            job_id: ids.join(","),
            source,
        })?;
    let invocation = herd_exp::Invocation::current(env!("CARGO_PKG_VERSION"));
    let mut unrecorded = None;
    for run in &sweep.runs {
        let Some(array) = arrays.iter().find(|a| a.tasks.contains(&run.index)) else {
            continue;
        };
        let task = format!("{}_{}", array.job_id, run.index);
        record_task(
            &run.experiment,
            || run.experiment.add_submission(&invocation),
            task,
            &mut unrecorded,
        );
    }
    for id in &ids {
        writeln!(out, "{id}")?;
    }
    let names: Vec<&str> = again
        .iter()
        .filter(|r| tasks.contains(&r.index))
        .map(|r| r.name.as_str())
        .collect();
    let jobs = match &ids[..] {
        [one] => format!("job {one}"),
        _ => format!("jobs {} ({} shapes)", ids.join(", "), ids.len()),
    };
    let partly = tasks.len() < again.len();
    eprintln!(
        "herd: submitted {jobs}: {} of the {} runs of sweep {name} again ({}): {}",
        tasks.len(),
        sweep.runs.len(),
        names.join(", "),
        folder.dir().display()
    );
    match unrecorded {
        Some(e) => Err(e),
        None if partly => Ok(ExitStatus::Failure),
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

    fn array(id: &str, script: &str, tasks: &[u32]) -> herd_exp::sweep::SweepArray {
        herd_exp::sweep::SweepArray {
            job_id: id.into(),
            script: script.into(),
            tasks: tasks.to_vec(),
        }
    }

    /// The runs to run again go with their shape's script, one array each, in the order of
    /// the first submission's arrays; a sweep of one shape (or an older sweep.json) is one
    /// array of `job.sbatch`.
    #[test]
    fn runs_to_run_again_are_grouped_by_their_shapes_script() {
        let first = [
            array("51", "job-1.sbatch", &[0, 2]),
            array("52", "job-2.sbatch", &[1, 3]),
        ];
        assert_eq!(
            by_script(&[3, 2, 1], &first),
            [
                ("job-1.sbatch".to_owned(), vec![2]),
                ("job-2.sbatch".to_owned(), vec![1, 3])
            ]
        );
        assert_eq!(
            by_script(&[3, 1], &first),
            [("job-2.sbatch".to_owned(), vec![1, 3])]
        );
        let one = [array("51", "job.sbatch", &[0, 1, 2])];
        assert_eq!(
            by_script(&[2, 0], &one),
            [("job.sbatch".to_owned(), vec![0, 2])]
        );
        assert_eq!(by_script(&[1], &[]), [("job.sbatch".to_owned(), vec![1])]);
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
