//! Where each run of a sweep stands, by `herd status`'s own machinery
//! ([`crate::status::view`]): the scheduler's row for the run's array task when it
//! answered for it (the task's own row, or the array's pending rest that holds the task),
//! else the run's folder.

use std::time::Duration;

use herd_exp::goodput::Accounting;
use herd_exp::progress::Progress;
use herd_slurm::scheduler::queue::{self, Scope};
use herd_slurm::SlurmError;

use super::run::{Sweep, SweepRun};
use crate::status::{view_apart, SchedJob, View};

/// What the scheduler answered for a sweep's jobs, from one `squeue` call
/// ([`Answer::ask`]), or nothing ([`Answer::none`]: states from the run folders alone).
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// Its jobs ([`SchedJob::group`]: an array's rows are one job).
    pub jobs: Vec<SchedJob>,
    /// Whether it answered.
    pub answered: bool,
}

impl Answer {
    /// No answer: each run's state from its folder alone (a run whose folder does not say
    /// how it ended is `unknown`, as `herd status` says when the scheduler does not
    /// answer).
    pub fn none() -> Answer {
        Answer::default()
    }

    /// The scheduler's rows for `rows` (`squeue`'s, for the sweep's jobs).
    pub fn of_rows(rows: Vec<queue::QueueRow>) -> Answer {
        Answer {
            jobs: SchedJob::group(rows),
            answered: true,
        }
    }

    /// Asks the scheduler once for every job the sweep's runs name (the array's id and
    /// any other id their manifests record), within `timeout`. When it does not answer:
    /// no answer, and why.
    pub fn ask(sweep: &Sweep, timeout: Duration) -> (Answer, Option<SlurmError>) {
        let mut ids: Vec<String> = sweep.job_ids();
        for run in &sweep.runs {
            if let Some(id) = recorded_job_id(&run.experiment) {
                let array = id.split('_').next().unwrap_or(&id).to_owned();
                if !ids.contains(&array) {
                    ids.push(array);
                }
            }
        }
        match queue::query(Scope::Jobs(&ids), timeout) {
            Ok(rows) => (Answer::of_rows(rows), None),
            Err(e) => (Answer::none(), Some(e)),
        }
    }
}

/// The newest job id the experiment's manifest records.
fn recorded_job_id(exp: &herd_exp::Experiment) -> Option<String> {
    exp.manifest()
        .ok()?
        .submissions
        .iter()
        .rev()
        .find_map(|a| a.job_id.clone())
}

/// The run's job id: the one its manifest records (its task's, `ARRAY_INDEX`; a plain job's
/// after `herd submit --resume NAME/RUN`), else task `index` of the sweep's array.
pub fn task_id(recorded: Option<&str>, sweep_job: Option<&str>, index: u32) -> Option<String> {
    match (recorded, sweep_job) {
        (Some(id), _) => Some(id.to_owned()),
        (None, Some(array)) => Some(format!("{array}_{index}")),
        (None, None) => None,
    }
}

/// Whether array spec `spec` (`3`, `4-9%2`, `1,3,5-7`, `0-15:4`) holds task `index`.
pub fn spec_holds(spec: &str, index: u32) -> bool {
    let spec = spec.split('%').next().unwrap_or(spec);
    spec.split(',').any(|part| {
        let (range, step) = match part.split_once(':') {
            Some((r, s)) => (r, s.parse::<u32>().unwrap_or(1).max(1)),
            None => (part, 1),
        };
        match range.split_once('-') {
            Some((a, b)) => match (a.parse::<u32>(), b.parse::<u32>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&index) && (index - a).is_multiple_of(step),
                _ => false,
            },
            None => range.parse::<u32>() == Ok(index),
        }
    })
}

/// The scheduler's word on task `task` (`ARRAY_INDEX`) as a job of its own: the task's row
/// when it has one, else the array's pending rest that holds it; `None` when the scheduler
/// says nothing of it. A plain job of that id (no array) is taken as it is.
pub fn task_job(jobs: &[SchedJob], task: &str) -> Option<SchedJob> {
    let (array, index) = task.split_once('_')?;
    let index: u32 = index.parse().ok()?;
    let job = jobs.iter().find(|j| j.id == array)?;
    let row = job
        .rows
        .iter()
        .find(|r| r.array_task.as_deref() == Some(&index.to_string()))
        .or_else(|| {
            job.rows.iter().find(|r| {
                r.array_task
                    .as_deref()
                    .is_some_and(|s| spec_holds(s, index))
            })
        })?;
    let mut row = row.clone();
    // One task is one job to the view, not an array.
    row.array_task = None;
    Some(SchedJob {
        id: task.to_owned(),
        rows: vec![row],
    })
}

/// A run's folder as the views read it: its progress (as the job of its task id) and its
/// timeline.
pub struct Folder {
    /// Where its job stands, from the folder.
    pub progress: Progress,
    /// Its timeline's events.
    pub events: Vec<herd_exp::timeline::Entry>,
}

/// Reads `run`'s manifest and timeline: its progress is that of its task's job
/// ([`task_id`]), so what `herd status` records of that task (`ended`) is found again.
pub fn folder(sweep: &Sweep, run: &SweepRun) -> Result<Folder, String> {
    let exp = &run.experiment;
    let manifest = exp.manifest().map_err(|e| e.to_string())?;
    let events = herd_exp::timeline::read(exp.dir())
        .map_err(|e| format!("cannot read {}: {e}", exp.paths().timeline().display()))?;
    let recorded = manifest
        .submissions
        .iter()
        .rev()
        .find_map(|a| a.job_id.clone());
    let id = task_id(recorded.as_deref(), sweep.array_of(run.index), run.index);
    let mut progress = Progress::from_events(id, manifest.submissions.len(), &events);
    progress.created_unix = manifest.created_unix;
    Ok(Folder { progress, events })
}

/// Where `run` stands, as `herd status` words it ([`crate::status::view`]), its goodput in
/// [`View::goodput`] (not said in the detail): `goodput` when the caller has it, else read
/// from its folder.
pub fn run_view(
    sweep: &Sweep,
    run: &SweepRun,
    answer: &Answer,
    goodput: Option<&Accounting>,
) -> View {
    let exp = &run.experiment;
    match folder(sweep, run) {
        Ok(f) => {
            let job = f
                .progress
                .job_id
                .as_deref()
                .and_then(|id| task_job(&answer.jobs, id));
            let loaded;
            let acc = match goodput {
                Some(a) => a,
                None => {
                    loaded = crate::goodput::load(exp, &f.events);
                    &loaded
                }
            };
            view_apart(
                Some(exp),
                Some(&f.progress),
                job.as_ref(),
                answer.answered,
                Some(acc),
            )
        }
        Err(err) => {
            let mut v = view_apart(Some(exp), None, None, answer.answered, None);
            v.detail = format!("cannot read the experiment: {err}");
            v
        }
    }
}

/// Records the scheduler's final word on each run's task in the run's timeline, once, as
/// `herd status` does for an experiment (`ended`): a run whose task left the queue still
/// says how it ended.
pub fn record_ends(sweep: &Sweep, answer: &Answer) {
    for run in &sweep.runs {
        let Ok(f) = folder(sweep, run) else { continue };
        let Some(job) = f
            .progress
            .job_id
            .as_deref()
            .and_then(|id| task_job(&answer.jobs, id))
        else {
            continue;
        };
        crate::status::record_end(&run.experiment, &f.progress, &job);
    }
}

/// The states in the order a sweep's counts say them.
pub const STATE_ORDER: [&str; 7] = [
    "running",
    "suspended",
    "queued",
    "finished",
    "failed",
    "cancelled",
    "unknown",
];

/// How many runs are in each state, in [`STATE_ORDER`], the states no run is in left out.
pub fn counts<'a>(states: impl IntoIterator<Item = &'a str>) -> Vec<(&'static str, usize)> {
    let states: Vec<&str> = states.into_iter().collect();
    STATE_ORDER
        .iter()
        .map(|s| (*s, states.iter().filter(|t| *t == s).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The state of the sweep as a whole, as `herd status` says an array's: running while any
/// run runs, then suspended, queued, failed, cancelled, unknown; finished when every run
/// finished (and when it has none).
pub fn overall<'a>(states: impl IntoIterator<Item = &'a str>) -> &'static str {
    let states: Vec<&str> = states.into_iter().collect();
    [
        "running",
        "suspended",
        "queued",
        "failed",
        "cancelled",
        "unknown",
    ]
    .into_iter()
    .find(|s| states.contains(s))
    .unwrap_or("finished")
}
