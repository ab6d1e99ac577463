//! `herd cancel NAME|ID…`: cancel jobs by experiment name, job name or id, with one queue
//! query and one `scancel` call; `--chain` also cancels the jobs that wait for them.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use herd_exp::progress::{self, Progress};
use herd_exp::Experiment;
use herd_slurm::scheduler::queue::{self, QueueRow, Scope};

use crate::site::exp_root;
use crate::{CliError, ExitStatus};

/// `herd cancel` arguments.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Experiment names, sweep names (every run; `SWEEP/RUN`: one run), job names or job
    /// ids.
    #[arg(value_name = "NAME|ID", required = true)]
    pub targets: Vec<String>,
    /// Also cancel every job that waits for these (chains of `herd submit --then`,
    /// `--after`), however deep.
    #[arg(long)]
    pub chain: bool,
    /// Where the experiments are (as for `herd status`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Seconds the scheduler has to answer one call.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

/// A job to cancel and why; `exps`: the experiments it runs, each with the job id its
/// timeline knows the job by (a sweep's array runs one experiment per task, `ID_INDEX`).
struct Pick {
    id: String,
    exps: Vec<(Experiment, String)>,
    why: String,
}

impl Pick {
    fn of(id: String, exp: Option<Experiment>, why: String) -> Pick {
        Pick {
            exps: exp.into_iter().map(|e| (e, id.clone())).collect(),
            id,
            why,
        }
    }
}

/// A sweep (`NAME`) or one of its runs (`NAME/RUN`) under `root` as the jobs to cancel:
/// every array of the newest submission (one per resource shape), every run recording its
/// own task; or the run's task.
fn sweep_pick(root: &std::path::Path, target: &str) -> Option<Result<Vec<Pick>, String>> {
    if let Some((sweep, run)) = crate::site::sweep_run(root, target) {
        let exp = match Experiment::open(&root.join(sweep), run) {
            Ok(e) => e,
            Err(e) => return Some(Err(format!("{target}: {e}"))),
        };
        return Some(match Progress::read(&exp).ok().and_then(|p| p.job_id) {
            Some(id) => Ok(vec![Pick::of(id, Some(exp), format!("run {target}"))]),
            None => Err(format!(
                "{target}: the run was never submitted (no job id in its manifest)"
            )),
        });
    }
    if !herd_exp::sweep::is_sweep(&root.join(target)) {
        return None;
    }
    let folder = match herd_exp::sweep::Sweep::open(root, target) {
        Ok(f) => f,
        Err(e) => return Some(Err(format!("{target}: {e}"))),
    };
    let (manifest, runs) = match (folder.manifest(), folder.runs()) {
        (Ok(m), Ok(r)) => (m, r),
        (Err(e), _) | (_, Err(e)) => return Some(Err(format!("{target}: {e}"))),
    };
    let Some(newest) = manifest.submissions.last() else {
        return Some(Err(format!(
            "{target}: the sweep was never submitted (no job id in its sweep.json)"
        )));
    };
    let recorded: Vec<(Experiment, String)> = runs
        .into_iter()
        .filter_map(|(_, exp)| {
            let run_id = Progress::read(&exp).ok()?.job_id?;
            Some((exp, run_id))
        })
        .collect();
    Some(Ok(sweep_arrays(&newest.arrays(), &recorded, target)))
}

/// One pick per array of a sweep's submission, each with the runs (of `recorded`, each
/// with its job id) whose task is of that array.
fn sweep_arrays(
    arrays: &[herd_exp::sweep::SweepArray],
    recorded: &[(Experiment, String)],
    target: &str,
) -> Vec<Pick> {
    arrays
        .iter()
        .map(|a| Pick {
            id: a.job_id.clone(),
            exps: recorded
                .iter()
                .filter(|(_, run_id)| run_id.split('_').next() == Some(a.job_id.as_str()))
                .cloned()
                .collect(),
            why: format!("sweep {target}"),
        })
        .collect()
}

/// The ids of `rows` that wait, directly or through others, for one of `ids`.
pub fn dependents(rows: &[QueueRow], ids: &[String]) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut frontier: Vec<String> = ids.to_vec();
    while let Some(id) = frontier.pop() {
        for r in rows {
            let waits = r.depends_on().contains(&id);
            let new =
                !ids.contains(&r.array_job_id) && !found.iter().any(|(f, _)| f == &r.array_job_id);
            if waits && new && !r.job_state().is_final() {
                found.push((r.array_job_id.clone(), id.clone()));
                frontier.push(r.array_job_id.clone());
            }
        }
    }
    found
}

/// Run `herd cancel`.
pub fn run(args: CancelArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = exp_root(args.exp_root.as_deref())?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    let exps: Vec<(Experiment, Option<String>)> = progress::list(&root)?
        .into_iter()
        .map(|e| {
            let id = Progress::read(&e).ok().and_then(|p| p.job_id);
            (e, id)
        })
        .collect();
    let rows = queue::query(Scope::Mine, timeout).map_err(CliError::Slurm)?;
    let mut picks: Vec<Pick> = Vec::new();
    let mut problems = Vec::new();
    for t in &args.targets {
        let is_id = crate::site::is_job_id(t);
        if let Some(pick) = sweep_pick(&root, t) {
            match pick {
                Ok(p) => picks.extend(p),
                Err(problem) => problems.push(problem),
            }
        } else if let Some((e, id)) = exps.iter().find(|(e, _)| e.name() == t) {
            match id {
                Some(id) => picks.push(Pick::of(
                    id.clone(),
                    Some(e.clone()),
                    format!("experiment {t}"),
                )),
                None => problems.push(format!(
                    "{t}: the experiment was never submitted (no job id in its manifest)"
                )),
            }
        } else if is_id {
            picks.push(Pick::of(
                t.clone(),
                exps.iter()
                    .find(|(_, id)| id.as_deref() == Some(t.as_str()))
                    .map(|(e, _)| e.clone()),
                format!("job {t}"),
            ));
        } else {
            let mut ids: Vec<&str> = rows
                .iter()
                .filter(|r| &r.name == t && !r.job_state().is_final())
                .map(|r| r.array_job_id.as_str())
                .collect();
            ids.dedup();
            match ids[..] {
                [id] => picks.push(Pick::of(id.to_owned(), None, format!("job name {t}"))),
                [] => problems.push(format!(
                    "{t}: no experiment of that name under {} and no queued or running job of yours named so",
                    root.display()
                )),
                _ => problems.push(format!(
                    "{t}: {} jobs of yours are named so (ids {}); give the id",
                    ids.len(),
                    ids.join(", ")
                )),
            }
        }
    }
    if !problems.is_empty() {
        return Err(CliError::Usage(problems.join("; ")));
    }
    if args.chain {
        let ids: Vec<String> = picks.iter().map(|p| p.id.clone()).collect();
        for (id, waits_for) in dependents(&rows, &ids) {
            let exp = exps
                .iter()
                .find(|(_, e)| e.as_deref() == Some(id.as_str()))
                .map(|(e, _)| e.clone());
            picks.push(Pick::of(id, exp, format!("waits for {waits_for}")));
        }
    }
    // Jobs that have ended are left alone (scancel would refuse them); say so.
    let mut live = Vec::new();
    for p in picks {
        // A job, or an array as a whole (its id), or one task of it (`ID_INDEX`).
        let of_pick = |r: &&QueueRow| r.array_job_id == p.id || r.id() == p.id;
        let ended = rows
            .iter()
            .filter(of_pick)
            .all(|r| r.job_state().is_final());
        let known = rows.iter().any(|r| of_pick(&r));
        if known && ended {
            writeln!(
                out,
                "job {} ({}) has already ended; nothing to cancel",
                p.id, p.why
            )?;
        } else if !live.iter().any(|l: &Pick| l.id == p.id) {
            live.push(p);
        }
    }
    if live.is_empty() {
        return Ok(ExitStatus::Success);
    }
    let ids: Vec<&str> = live.iter().map(|p| p.id.as_str()).collect();
    herd_slurm::scheduler::command::scancel(&ids, None).map_err(CliError::Slurm)?;
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty());
    for p in &live {
        let label = match &p.exps[..] {
            [(e, _)] => format!(" ({})", e.name()),
            _ => String::new(),
        };
        writeln!(out, "cancelled job {}{label}: {}", p.id, p.why)?;
        for (exp, job_id) in &p.exps {
            let cancelled = herd_exp::timeline::Cancelled {
                job_id: Some(job_id.as_str().into()),
                by: "herd cancel".to_owned(),
                user: user.clone(),
                why: p.why.clone(),
            };
            if let Err(e) = herd_exp::timeline::append(exp.dir(), cancelled) {
                eprintln!(
                    "herd: warning: job {} cancelled, but not recorded in {}: {e}",
                    p.id,
                    exp.dir().display()
                );
            }
        }
    }
    Ok(ExitStatus::Success)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `herd cancel NAME` of a sweep of two shapes picks both arrays of its newest
    /// submission, each with the runs that are its tasks (recording their own task ids);
    /// `NAME/RUN` its run's task alone.
    #[test]
    fn a_sweep_of_two_arrays_is_cancelled_as_both() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let project = tmp.path().join("project");
        std::fs::create_dir(&project).expect("project");
        let root = tmp.path().join("exps");
        let run = |name: &str| herd_exp::sweep::NewRun {
            name: name.into(),
            values: vec![("nodes".into(), name[6..].into())],
            plan: json!({}),
            files: Vec::new(),
        };
        let sweep = herd_exp::sweep::NewSweep {
            exp_root: root.clone(),
            name: "scale".into(),
            keys: vec!["nodes".into()],
            runs: vec![run("nodes=1"), run("nodes=2")],
            max_parallel: None,
            project_root: project,
            invocation: herd_exp::Invocation::current("test"),
            snapshot: herd_exp::SnapshotOptions::default(),
            array_scripts: vec![
                ("job-1.sbatch".into(), b"#!/bin/bash\n".to_vec()),
                ("job-2.sbatch".into(), b"#!/bin/bash\n".to_vec()),
            ],
        }
        .create()
        .expect("sweep")
        .sweep;
        let array = |id: &str, script: &str, task: u32| herd_exp::sweep::SweepArray {
            job_id: id.into(),
            script: script.into(),
            tasks: vec![task],
        };
        sweep
            .record_arrays(&[
                array("70", "job-1.sbatch", 0),
                array("71", "job-2.sbatch", 1),
            ])
            .expect("first");
        sweep
            .record_arrays(&[
                array("80", "job-1.sbatch", 0),
                array("81", "job-2.sbatch", 1),
            ])
            .expect("resumed");
        for (run, exp) in sweep.runs().expect("runs") {
            let id = if run.index == 0 { "80_0" } else { "81_1" };
            exp.record_job_id(1, id).expect("job id");
        }
        let picks = sweep_pick(&root, "scale")
            .expect("a sweep")
            .expect("picked");
        let got: Vec<(String, Vec<(String, String)>)> = picks
            .iter()
            .map(|p| {
                (
                    p.id.clone(),
                    p.exps
                        .iter()
                        .map(|(e, id)| (e.name().to_owned(), id.clone()))
                        .collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("80".into(), vec![("nodes=1".into(), "80_0".into())]),
                ("81".into(), vec![("nodes=2".into(), "81_1".into())]),
            ]
        );
        let one = sweep_pick(&root, "scale/nodes=2")
            .expect("a run")
            .expect("picked");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].id, "81_1");
    }

    #[test]
    fn a_chain_is_followed_to_its_end_and_ended_jobs_are_left() {
        let rows = queue::parse(
            "20|20|N/A|RUNNING|None|0:01|1:00|a01|1|0|u|(null)|N/A|first|\n\
             21|21|N/A|PENDING|Dependency|0:00|1:00||1|0|u|afterok:20(unfulfilled)|N/A|second|\n\
             22|22|N/A|PENDING|Dependency|0:00|1:00||1|0|u|afterok:21(unfulfilled)|N/A|third|\n\
             23|23|N/A|PENDING|Dependency|0:00|1:00||1|0|u|afterany:99(unfulfilled)|N/A|other|\n\
             24|24|N/A|CANCELLED|None|0:00|1:00||1|0|u|afterok:20(unfulfilled)|N/A|gone|\n",
        )
        .expect("parses");
        let found = dependents(&rows, &["20".to_owned()]);
        assert_eq!(
            found,
            [
                ("21".to_owned(), "20".to_owned()),
                ("22".to_owned(), "21".to_owned())
            ]
        );
        assert!(dependents(&rows, &["22".to_owned()]).is_empty());
    }
}
