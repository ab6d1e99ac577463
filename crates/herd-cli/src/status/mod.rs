//! `herd status` and its watch (`-w`, `herd submit --wait`): every experiment's job from one
//! batched `squeue` call plus the experiment folders (docs/status.md).
//!
//! - [`view`]: what one job is doing, from its queue rows and its folder, in words.
//! - [`watch`]: the live line, polling the scheduler with backoff.

mod view;
mod watch;

pub(crate) use view::record_end;
pub use view::{clock, view, view_apart, SchedJob, View};
pub use watch::{watch, Watched};

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use herd_exp::progress::{self, Progress};
use herd_exp::Experiment;
use herd_slurm::scheduler::queue::{self, Scope};
use serde_json::json;

use crate::site::{exp_root, scheduler_trouble};
use crate::{CliError, ExitStatus};

/// The schema version of `herd status --json`.
pub const JSON_FORMAT: u32 = 1;

/// `herd status` arguments.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Experiment names, sweep names (one line per run) or job ids; none: every experiment
    /// and sweep under the experiment root and your other jobs.
    #[arg(value_name = "NAME|ID")]
    pub targets: Vec<String>,
    /// Where the experiments are (default: the profile's `exp_root`, else `herd-exp` in
    /// the working folder, as for `herd submit`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Print JSON (schema in docs/status.md) instead of a table.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Watch: one live line per job until every one has ended (no NAME: every experiment
    /// that has not ended); exit with the job's exit code. Ctrl-C stops watching, never
    /// the job.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Seconds the scheduler has to answer one query.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

/// One experiment with what its folder tells.
struct Entry {
    exp: Experiment,
    progress: Result<Progress, herd_exp::Error>,
}

/// The experiments with their progress, oldest first (by the manifest's creation time).
fn entries(exps: Vec<Experiment>) -> Vec<Entry> {
    let mut all: Vec<Entry> = exps
        .into_iter()
        .map(|exp| Entry {
            progress: Progress::read(&exp),
            exp,
        })
        .collect();
    // Created in the same second: the job ids tell the order of submission.
    all.sort_by_key(|e| {
        let p = e.progress.as_ref().ok();
        (
            p.map_or(0, |p| p.created_unix),
            p.and_then(|p| p.job_id.as_deref()?.parse::<u64>().ok())
                .unwrap_or(u64::MAX),
            e.exp.name().to_owned(),
        )
    });
    all
}

/// What the targets name: experiments, and job ids that are not in one.
struct Targets {
    entries: Vec<Entry>,
    ids: Vec<String>,
    names: Vec<String>,
}

use crate::site::is_job_id as is_id;

fn resolve_targets(root: &Path, targets: &[String]) -> Result<Targets, CliError> {
    let all = entries(progress::list(root)?);
    if targets.is_empty() {
        return Ok(Targets {
            entries: all,
            ids: Vec::new(),
            names: Vec::new(),
        });
    }
    let mut picked = Vec::new();
    let mut ids = Vec::new();
    let mut names = Vec::new();
    let mut all: Vec<Option<Entry>> = all.into_iter().map(Some).collect();
    for t in targets {
        let pos = all.iter().position(|e| {
            e.as_ref().is_some_and(|e| {
                e.exp.name() == t
                    || (is_id(t)
                        && e.progress.as_ref().ok().and_then(|p| p.job_id.as_deref())
                            == Some(t.as_str()))
            })
        });
        match pos.and_then(|i| all[i].take()) {
            Some(e) => picked.push(e),
            None if is_id(t) => ids.push(t.clone()),
            None => names.push(t.clone()),
        }
    }
    Ok(Targets {
        entries: picked,
        ids,
        names,
    })
}

/// A sweep's row in the job list, as [`Sweeps`] gives it.
pub struct SweepRow {
    /// `EXPERIMENT JOB STATE ATTEMPTS DETAIL`.
    pub row: [String; 5],
    /// Its `--json` entry under `sweeps`.
    pub json: serde_json::Value,
    /// The array job ids of its submissions: those jobs are the sweep's, no other job.
    pub arrays: Vec<String>,
}

/// What `herd status` shows of the sweeps under the experiment root (the sweep module
/// gives it: the views of a sweep are built on this module, never the other way round).
pub trait Sweeps {
    /// The names of the sweeps under `root`.
    fn names(&self, root: &Path) -> Vec<String>;
    /// The rows of the sweeps `names` under `root` from the scheduler's `jobs` (its
    /// answer, when `answered`), each run's end recorded as for an experiment.
    fn rows(
        &self,
        root: &Path,
        names: &[String],
        jobs: &[SchedJob],
        answered: bool,
    ) -> Vec<SweepRow>;
}

/// No sweeps.
pub struct NoSweeps;

impl Sweeps for NoSweeps {
    fn names(&self, _: &Path) -> Vec<String> {
        Vec::new()
    }
    fn rows(&self, _: &Path, _: &[String], _: &[SchedJob], _: bool) -> Vec<SweepRow> {
        Vec::new()
    }
}

/// Run `herd status`, the sweeps under the experiment root shown as `sweeps` says (a
/// target that names only sweeps is the sweep module's: `herd status NAME`).
pub fn run(
    args: StatusArgs,
    out: &mut dyn Write,
    sweeps: &dyn Sweeps,
) -> Result<ExitStatus, CliError> {
    let root = exp_root(args.exp_root.as_deref())?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    let all_sweeps = sweeps.names(&root);
    let shown_sweeps: Vec<String> = all_sweeps
        .iter()
        .filter(|n| args.targets.is_empty() || args.targets.contains(n))
        .cloned()
        .collect();
    let plain: Vec<String> = args
        .targets
        .iter()
        .filter(|t| !all_sweeps.contains(t))
        .cloned()
        .collect();
    let targets = resolve_targets(&root, &plain)?;
    if args.watch {
        if !targets.names.is_empty() {
            return Err(no_such(&root, &targets.names));
        }
        // With no target: the experiments whose folder does not say they ended.
        let everything = args.targets.is_empty();
        let mut watched: Vec<Watched> = targets
            .entries
            .into_iter()
            .filter_map(|e| {
                let p = e.progress.ok()?;
                let over = p.finished.is_some() || p.ended.is_some() || p.cancelled_ms.is_some();
                if everything && over {
                    return None;
                }
                Some(Watched::new(Some(e.exp), p.job_id?))
            })
            .collect();
        watched.extend(targets.ids.into_iter().map(|id| Watched::new(None, id)));
        if watched.is_empty() {
            return Err(CliError::Usage(format!(
                "nothing to watch: no experiment under {} is queued or running (give a NAME or job id)",
                root.display()
            )));
        }
        return watch(&mut watched, timeout, out, std::io::stdout().is_terminal());
    }
    // One query: this user's jobs when no target or a name is given (names are matched
    // against the queue), else exactly the jobs asked about.
    let scope_ids: Vec<String>;
    let scope = if args.targets.is_empty() || !targets.names.is_empty() || !shown_sweeps.is_empty()
    {
        Scope::Mine
    } else {
        scope_ids = targets
            .entries
            .iter()
            .filter_map(|e| e.progress.as_ref().ok()?.job_id.clone())
            .chain(targets.ids.iter().cloned())
            .collect();
        Scope::Jobs(&scope_ids)
    };
    let (jobs, sched_error) = match queue::query(scope, timeout) {
        Ok(rows) => (SchedJob::group(rows), None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let answered = sched_error.is_none();
    let mut views = Vec::new();
    let mut claimed: Vec<String> = Vec::new();
    for e in &targets.entries {
        match &e.progress {
            Ok(p) => {
                let job = p
                    .job_id
                    .as_ref()
                    .and_then(|id| jobs.iter().find(|j| &j.id == id));
                if let Some(job) = job {
                    record_end(&e.exp, p, job);
                    claimed.push(job.id.clone());
                }
                let events = herd_exp::timeline::read(e.exp.dir()).unwrap_or_default();
                let goodput = crate::goodput::load(&e.exp, &events);
                views.push(view(Some(&e.exp), Some(p), job, answered, Some(&goodput)));
            }
            Err(err) => {
                let mut v = view(Some(&e.exp), None, None, answered, None);
                v.detail = format!("cannot read the experiment: {err}");
                views.push(v);
            }
        }
    }
    let mut missing = Vec::new();
    // Jobs that are no experiment: the ones asked for by id or name, or with no target
    // every other job of this user.
    let mut others: Vec<&SchedJob> = jobs
        .iter()
        .filter(|j| !claimed.contains(&j.id))
        .filter(|j| {
            args.targets.is_empty()
                || targets.ids.contains(&j.id)
                || targets.names.iter().any(|n| j.rows[0].name == *n)
        })
        .collect();
    others.sort_by_key(|j| j.id.parse::<u64>().unwrap_or(u64::MAX));
    for name in &targets.names {
        if answered && !others.iter().any(|j| j.rows[0].name == *name) {
            missing.push(name.clone());
        }
    }
    for id in &targets.ids {
        if answered && !jobs.iter().any(|j| &j.id == id) {
            missing.push(id.clone());
        }
    }
    let sweep_rows = sweeps.rows(&root, &shown_sweeps, &jobs, answered);
    let other_views: Vec<View> = others
        .iter()
        .filter(|j| {
            !sweep_rows
                .iter()
                .any(|s| j.rows.iter().any(|r| s.arrays.contains(&r.array_job_id)))
        })
        .map(|j| view(None, None, Some(j), answered, None))
        .collect();
    if args.json {
        let doc = json!({
            "format": JSON_FORMAT,
            "exp_root": root.display().to_string(),
            "scheduler": {
                "answered": answered,
                "error": sched_error.as_ref().map(ToString::to_string),
            },
            "experiments": views.iter().map(View::json).collect::<Vec<_>>(),
            "sweeps": sweep_rows.iter().map(|s| s.json.clone()).collect::<Vec<_>>(),
            "jobs": other_views.iter().map(View::json).collect::<Vec<_>>(),
            "not_found": missing,
        });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?
        )?;
    } else {
        let sweep_rows: Vec<[String; 5]> = sweep_rows.iter().map(|s| s.row.clone()).collect();
        print_table(
            out,
            &root,
            &views,
            &sweep_rows,
            &other_views,
            args.targets.is_empty(),
        )?;
    }
    if let Some(e) = &sched_error {
        eprintln!(
            "herd: error: {}; states above are from the experiment folders only",
            scheduler_trouble(e)
        );
        return Ok(ExitStatus::Failure);
    }
    if !missing.is_empty() {
        out.flush()?;
        return Err(no_such(&root, &missing));
    }
    Ok(ExitStatus::Success)
}

fn no_such(root: &Path, names: &[String]) -> CliError {
    let known: Vec<String> = progress::list(root)
        .unwrap_or_default()
        .iter()
        .map(|e| e.name().to_owned())
        .collect();
    CliError::Usage(format!(
        "{}: no experiment of that name under {} and no job of yours with that name or id (experiments there: {})",
        names.join(", "),
        root.display(),
        if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        }
    ))
}

fn print_table(
    out: &mut dyn Write,
    root: &Path,
    views: &[View],
    sweeps: &[[String; 5]],
    others: &[View],
    everything: bool,
) -> std::io::Result<()> {
    let mut rows: Vec<[String; 5]> = views
        .iter()
        .map(|v| {
            [
                v.name.clone().unwrap_or_default(),
                v.job_id.clone().unwrap_or_else(|| "-".into()),
                v.state.to_owned(),
                v.attempts.to_string(),
                v.detail.clone(),
            ]
        })
        .collect();
    rows.extend(sweeps.iter().cloned());
    if everything && rows.is_empty() {
        writeln!(out, "no experiments under {}", root.display())?;
    }
    if !rows.is_empty() {
        table(
            out,
            ["EXPERIMENT", "JOB", "STATE", "ATTEMPTS", "DETAIL"],
            &rows,
        )?;
    }
    if !others.is_empty() {
        if !rows.is_empty() || everything {
            writeln!(out)?;
            writeln!(out, "other jobs of yours:")?;
        }
        let rows: Vec<[String; 5]> = others
            .iter()
            .map(|v| {
                [
                    v.job_name.clone().unwrap_or_default(),
                    v.job_id.clone().unwrap_or_default(),
                    v.state.to_owned(),
                    "-".into(),
                    v.detail.clone(),
                ]
            })
            .collect();
        table(out, ["NAME", "JOB", "STATE", "ATTEMPTS", "DETAIL"], &rows)?;
    }
    Ok(())
}

fn table(out: &mut dyn Write, head: [&str; 5], rows: &[[String; 5]]) -> std::io::Result<()> {
    let mut width = head.map(|h| h.chars().count());
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == 4 {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(head))?;
    for r in rows {
        writeln!(
            out,
            "{}",
            line([&r[0], &r[1], &r[2], &r[3], &r[4]].map(String::as_str))
        )?;
    }
    Ok(())
}
