//! `herd status` and its watch (`-w`, `herd submit --wait`): every experiment's job from one
//! batched `squeue` call plus the experiment folders (docs/status.md).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use herd_exp::progress::{self, Progress};
use herd_exp::Experiment;
use herd_slurm::queue::{self, JobState, QueueRow, Scope};
use serde_json::{json, Value};

use crate::{CliError, ExitStatus};

/// How long the scheduler has to answer one query, unless `--timeout` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The schema version of `herd status --json`.
pub const JSON_FORMAT: u32 = 1;

/// `herd status` arguments.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Experiment names or job ids; none: every experiment under the experiment root and
    /// your other jobs.
    #[arg(value_name = "NAME|ID")]
    pub targets: Vec<String>,
    /// Where the experiments are (default: the profile's `exp_root`, else `herd-exp` in
    /// the working folder, as for `herd submit`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Print JSON (schema in docs/status.md) instead of a table.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Watch: one live line per job until every one has ended; exit with the job's exit
    /// code. Ctrl-C stops watching, never the job.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Seconds the scheduler has to answer one query.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

/// The experiment root: `--exp-root`, else the matching cluster profile's `exp_root`, else
/// `herd-exp`; relative to the working folder.
pub fn exp_root(given: Option<&Path>) -> Result<PathBuf, CliError> {
    let root = match given {
        Some(p) => p.to_path_buf(),
        None => {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default();
            let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
            let profiles =
                herd_plan::load_profiles(&herd_plan::profile_dir(xdg.as_deref(), &home))?;
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            herd_plan::select_profile(&profiles, host.trim())
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

/// One job as the scheduler shows it: a plain job's row, or an array's rows together.
#[derive(Debug, Clone)]
pub struct SchedJob {
    /// The id sbatch printed (an array's job id).
    pub id: String,
    /// Its rows (one for a plain job).
    pub rows: Vec<QueueRow>,
}

impl SchedJob {
    /// Groups `rows` by the id sbatch printed, in the order first seen.
    pub fn group(rows: Vec<QueueRow>) -> Vec<SchedJob> {
        let mut jobs: Vec<SchedJob> = Vec::new();
        for row in rows {
            match jobs.iter_mut().find(|j| j.id == row.array_job_id) {
                Some(j) => j.rows.push(row),
                None => jobs.push(SchedJob {
                    id: row.array_job_id.clone(),
                    rows: vec![row],
                }),
            }
        }
        jobs
    }

    fn is_array(&self) -> bool {
        self.rows.iter().any(|r| r.array_task.is_some())
    }

    /// The state of the job as a whole: running while any task runs, queued while any
    /// waits, then failed, cancelled or finished.
    pub fn state(&self) -> JobState {
        let states: Vec<JobState> = self.rows.iter().map(QueueRow::job_state).collect();
        for s in [
            JobState::Running,
            JobState::Suspended,
            JobState::Queued,
            JobState::Failed,
            JobState::Cancelled,
        ] {
            if states.contains(&s) {
                return s;
            }
        }
        JobState::Finished
    }

    /// The row that speaks for the job: the first in its state.
    fn lead(&self) -> &QueueRow {
        let state = self.state();
        self.rows
            .iter()
            .find(|r| r.job_state() == state)
            .unwrap_or(&self.rows[0])
    }

    /// Its exit code, once it has ended: the highest of its tasks'.
    pub fn exit_code(&self) -> Option<i32> {
        if !self.state().is_final() {
            return None;
        }
        self.rows.iter().filter_map(QueueRow::exit_code).max()
    }

    /// `2 running, 6 queued, 2 failed` for an array.
    fn task_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.rows {
            let n = match &r.array_task {
                Some(t) if r.job_state() == JobState::Queued => pending_tasks(t),
                _ => 1,
            };
            *counts.entry(r.job_state().word()).or_default() += n;
        }
        counts
    }
}

/// How many tasks an array's pending rest (`4-9%2`, `1,3,5`, `7`) stands for.
fn pending_tasks(spec: &str) -> usize {
    let spec = spec.split('%').next().unwrap_or(spec);
    spec.split(',')
        .map(|part| {
            let part = part.split(':').next().unwrap_or(part);
            match part.split_once('-') {
                Some((a, b)) => match (a.parse::<usize>(), b.parse::<usize>()) {
                    (Ok(a), Ok(b)) if b >= a => b - a + 1,
                    _ => 1,
                },
                None => 1,
            }
        })
        .sum()
}

/// `1:02:03`, `2-00:00:00`, `0:42` like SLURM.
pub fn clock(d: Duration) -> String {
    let s = d.as_secs();
    let (days, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if days > 0 {
        format!("{days}-{h:02}:{m:02}:{sec:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{sec:02}")
    } else {
        format!("{m}:{sec:02}")
    }
}

/// What one experiment (or job) is doing, as shown and as `--json` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The experiment's name (`None` for a job that is no experiment).
    pub name: Option<String>,
    /// Its folder.
    pub dir: Option<PathBuf>,
    /// The job id (the current submission's).
    pub job_id: Option<String>,
    /// The job's name in the queue, for jobs that are no experiment.
    pub job_name: Option<String>,
    /// `queued`, `running`, `suspended`, `finished`, `failed`, `cancelled` or `unknown`.
    pub state: &'static str,
    /// SLURM's state, when the scheduler answered for the job.
    pub slurm_state: Option<String>,
    /// SLURM's reason code.
    pub reason: Option<String>,
    /// The detail in words: pending reason, time and nodes, exit code and cause.
    pub detail: String,
    /// Whether the scheduler answered for this job (else: the folder alone).
    pub from_scheduler: bool,
    /// Time run, and the limit.
    pub elapsed: Option<Duration>,
    /// The time limit.
    pub time_limit: Option<Duration>,
    /// Its nodes.
    pub nodes: Option<String>,
    /// Exit code, once ended.
    pub exit_code: Option<i32>,
    /// Attempts started over the experiment.
    pub attempts: usize,
    /// Submissions.
    pub submissions: usize,
    /// The phase inside the allocation: `started`, `rendezvous`, `output`.
    pub phase: Option<&'static str>,
    /// How the agents said it ended (cause name), when not ok.
    pub cause: Option<String>,
    /// The newest failure, in one line.
    pub last_failure: Option<String>,
    /// Array tasks by state, for an array job.
    pub tasks: BTreeMap<&'static str, usize>,
}

impl View {
    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "dir": self.dir.as_ref().map(|d| d.display().to_string()),
            "job_id": self.job_id,
            "job_name": self.job_name,
            "state": self.state,
            "slurm_state": self.slurm_state,
            "reason": self.reason,
            "detail": self.detail,
            "from_scheduler": self.from_scheduler,
            "elapsed_s": self.elapsed.map(|d| d.as_secs()),
            "time_limit_s": self.time_limit.map(|d| d.as_secs()),
            "nodes": self.nodes,
            "exit_code": self.exit_code,
            "attempts": self.attempts,
            "submissions": self.submissions,
            "phase": self.phase,
            "cause": self.cause,
            "last_failure": self.last_failure,
            "tasks": self.tasks,
        })
    }
}

fn phase(p: &Progress) -> Option<&'static str> {
    if p.first_output_ms.is_some() {
        Some("output")
    } else if p.rendezvous_ms.is_some() {
        Some("rendezvous")
    } else if p.started_ms.is_some() {
        Some("started")
    } else {
        None
    }
}

fn phase_words(phase: Option<&str>) -> &'static str {
    match phase {
        Some("output") => "workers writing output",
        Some("rendezvous") => "agents met, workers starting",
        Some("started") => "agents starting",
        _ => "batch script starting",
    }
}

/// The view of a job from the scheduler's rows and, for an experiment, its folder.
pub fn view(
    exp: Option<&Experiment>,
    progress: Option<&Progress>,
    job: Option<&SchedJob>,
    scheduler_answered: bool,
) -> View {
    let mut v = View {
        name: exp.map(|e| e.name().to_owned()),
        dir: exp.map(|e| e.dir().to_owned()),
        job_id: progress
            .and_then(|p| p.job_id.clone())
            .or_else(|| job.map(|j| j.id.clone())),
        job_name: None,
        state: "unknown",
        slurm_state: None,
        reason: None,
        detail: String::new(),
        from_scheduler: job.is_some(),
        elapsed: None,
        time_limit: None,
        nodes: None,
        exit_code: None,
        attempts: progress.map_or(0, |p| p.attempts),
        submissions: progress.map_or(0, |p| p.submissions),
        phase: progress.and_then(phase),
        cause: progress
            .and_then(|p| p.finished.as_ref())
            .and_then(|(ok, c)| if *ok { None } else { c.clone() }),
        last_failure: progress.and_then(|p| p.last_failure.clone()),
        tasks: BTreeMap::new(),
    };
    let failure = |v: &View| {
        v.last_failure
            .clone()
            .or_else(|| v.cause.clone())
            .map(|f| format!(": {f}"))
            .unwrap_or_default()
    };
    if let Some(job) = job {
        let lead = job.lead();
        let state = job.state();
        v.state = state.word();
        v.slurm_state = Some(lead.state.clone());
        v.reason = lead.reason.clone();
        v.elapsed = lead.elapsed;
        v.time_limit = lead.time_limit;
        v.nodes = (!lead.nodes.is_empty()).then(|| lead.nodes.clone());
        v.exit_code = job.exit_code();
        v.job_name = exp.is_none().then(|| lead.name.clone());
        if job.is_array() {
            v.tasks = job.task_counts();
        }
        let limit = lead.time_limit.map_or_else(|| "no limit".to_owned(), clock);
        let requeued = progress
            .map(|p| p.requeues)
            .filter(|&n| n > 0)
            .map(|n| format!("requeued {n}×; "))
            .unwrap_or_default();
        v.detail = match state {
            // The agents wrote that they started: the folder is newer than the queue.
            JobState::Queued if v.phase.is_some() => {
                v.state = "running";
                format!("{requeued}starting: {}", phase_words(v.phase))
            }
            JobState::Queued => format!(
                "{requeued}{}",
                lead.reason
                    .as_deref()
                    .map_or_else(
                        || "waiting for the scheduler's next pass".to_owned(),
                        queue::reason_words
                    )
                    .replace(
                        "scontrol release ID",
                        &format!("scontrol release {}", job.id)
                    )
            ),
            JobState::Running | JobState::Suspended => {
                let mut d = format!(
                    "{} of {limit} on {} node{} {}",
                    clock(lead.elapsed.unwrap_or_default()),
                    lead.node_count,
                    if lead.node_count == 1 { "" } else { "s" },
                    lead.nodes
                );
                if exp.is_some() {
                    d.push_str(", ");
                    d.push_str(phase_words(v.phase));
                }
                if let Some(a) = progress.and_then(|p| p.attempt) {
                    d.push_str(&format!(" (attempt {a})"));
                }
                format!("{requeued}{d}")
            }
            JobState::Finished => {
                format!("exit 0 after {}", clock(lead.elapsed.unwrap_or_default()))
            }
            JobState::Failed | JobState::Cancelled => {
                // SLURM's state when it says more than the word (TIMEOUT, NODE_FAIL, …).
                let special = if matches!(lead.state.as_str(), "FAILED" | "CANCELLED") {
                    String::new()
                } else {
                    format!("{}, ", lead.state)
                };
                let ran = match lead.elapsed {
                    Some(d) if !d.is_zero() => format!(" after {}", clock(d)),
                    _ => " before it started".to_owned(),
                };
                let by_herd = progress.is_some_and(|p| p.cancelled_ms.is_some());
                let mut d = if state == JobState::Cancelled {
                    format!("{special}cancelled{ran}")
                } else {
                    format!("{special}exit {}{ran}", v.exit_code.unwrap_or(1))
                };
                if state == JobState::Cancelled && by_herd {
                    d.push_str(", by herd cancel");
                }
                if state == JobState::Failed {
                    d.push_str(&failure(&v));
                }
                d
            }
        };
        if job.is_array() {
            let counts: Vec<String> = v.tasks.iter().map(|(s, n)| format!("{n} {s}")).collect();
            v.detail = format!("array: {}; {}", counts.join(", "), v.detail);
        }
        return v;
    }
    // Not in the queue (or no answer): the folder says what it knows.
    let Some(p) = progress else {
        return v;
    };
    if p.job_id.is_none() {
        v.detail = "never submitted (no job id in the manifest)".into();
        return v;
    }
    let not_here = if scheduler_answered {
        "no longer in the queue"
    } else {
        "scheduler did not answer"
    };
    let last_seen = match phase(p) {
        Some(ph) => phase_words(Some(ph)),
        None => "queued",
    };
    v.detail = if let Some(end) = &p.ended {
        v.state = JobState::of(&end.state).word();
        v.slurm_state = Some(end.state.clone());
        v.reason = end.reason.clone();
        v.exit_code = i32::try_from(end.exit_code).ok();
        let special = if matches!(end.state.as_str(), "FAILED" | "CANCELLED" | "COMPLETED") {
            String::new()
        } else {
            format!("{}, ", end.state)
        };
        let words = match v.state {
            "cancelled" if p.cancelled_ms.is_some() => "cancelled by herd cancel".to_owned(),
            "cancelled" => "cancelled".to_owned(),
            "failed" => format!("exit {}{}", end.exit_code, failure(&v)),
            _ => format!("exit {}", end.exit_code),
        };
        format!("{special}{words} ({not_here})")
    } else if let Some((ok, _)) = &p.finished {
        v.state = if *ok { "finished" } else { "failed" };
        v.exit_code = Some(if *ok { 0 } else { 1 });
        if *ok {
            format!("the agents reported success ({not_here})")
        } else {
            format!("the agents reported failure{} ({not_here})", failure(&v))
        }
    } else if p.cancelled_ms.is_some() {
        v.state = "cancelled";
        format!("cancelled by herd cancel ({not_here})")
    } else if scheduler_answered {
        format!("{not_here}, and nothing in the folder says how it ended (last seen: {last_seen})")
    } else {
        format!("{not_here}; last in the folder: {last_seen}")
    };
    v
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

/// Appends the scheduler's final word on a job to the experiment's timeline, once: when
/// the job leaves the queue later, the folder still knows how it ended.
fn record_end(exp: &Experiment, progress: &Progress, job: &SchedJob) {
    if progress.ended.is_some() || !job.state().is_final() {
        return;
    }
    let lead = job.lead();
    let fields = json!({
        "job_id": job.id,
        "state": lead.state,
        "exit_code": job.exit_code(),
        "reason": lead.reason,
    });
    // The folder may be another user's, read-only: the answer is shown either way.
    let _ = herd_exp::timeline::append(exp.dir(), "ended", fields);
}

/// What the targets name: experiments, and job ids that are not in one.
struct Targets {
    entries: Vec<Entry>,
    ids: Vec<String>,
    names: Vec<String>,
}

fn is_id(t: &str) -> bool {
    !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
}

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

/// Run `herd status`.
pub fn run(args: StatusArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = exp_root(args.exp_root.as_deref())?;
    let timeout = Duration::from_secs(args.timeout.max(1));
    let targets = resolve_targets(&root, &args.targets)?;
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
    let scope = if args.targets.is_empty() || !targets.names.is_empty() {
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
                views.push(view(Some(&e.exp), Some(p), job, answered));
            }
            Err(err) => {
                let mut v = view(Some(&e.exp), None, None, answered);
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
    let other_views: Vec<View> = others
        .iter()
        .map(|j| view(None, None, Some(j), answered))
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
            "jobs": other_views.iter().map(View::json).collect::<Vec<_>>(),
            "not_found": missing,
        });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?
        )?;
    } else {
        print_table(out, &root, &views, &other_views, args.targets.is_empty())?;
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
    others: &[View],
    everything: bool,
) -> std::io::Result<()> {
    let rows: Vec<[String; 5]> = views
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
    if everything && views.is_empty() {
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

/// A job being watched.
pub struct Watched {
    exp: Option<Experiment>,
    id: String,
    last: Option<View>,
    done: bool,
    seen_in_queue: bool,
}

impl Watched {
    /// Watch job `id`, of experiment `exp` when it is one.
    pub fn new(exp: Option<Experiment>, id: String) -> Watched {
        Watched {
            exp,
            id,
            last: None,
            done: false,
            seen_in_queue: false,
        }
    }

    fn label(&self) -> String {
        match &self.exp {
            Some(e) => format!("{} ({})", e.name(), self.id),
            None => format!("job {}", self.id),
        }
    }
}

/// The first and longest pause between two scheduler queries while watching.
const POLL_FIRST: Duration = Duration::from_secs(2);
const POLL_MAX: Duration = Duration::from_secs(30);

/// Watch `jobs` until every one has ended: one `squeue` call per tick for all of them,
/// the pause doubling from 2 s to 30 s while nothing changes, back to 2 s when something
/// does; the folders (rendezvous, first output, the agents' end) are read every half
/// second. Each change is printed as a line (on a terminal the line is redrawn in place).
/// Returns the job's exit code (the highest of several).
pub fn watch(
    jobs: &mut [Watched],
    timeout: Duration,
    out: &mut dyn Write,
    tty: bool,
) -> Result<ExitStatus, CliError> {
    let names: Vec<String> = jobs.iter().map(Watched::label).collect();
    writeln!(
        out,
        "herd: watching {} (Ctrl-C stops watching, never the job)",
        names.join(", ")
    )?;
    out.flush()?;
    let mut pause = POLL_FIRST;
    let mut next_query = Instant::now();
    let mut rows: Vec<SchedJob> = Vec::new();
    let mut answered = false;
    let mut sched_note: Option<String> = None;
    let mut codes: Vec<i32> = Vec::new();
    loop {
        let mut changed = false;
        if Instant::now() >= next_query {
            let ids: Vec<String> = jobs
                .iter()
                .filter(|j| !j.done)
                .map(|j| j.id.clone())
                .collect();
            match queue::query(Scope::Jobs(&ids), timeout) {
                Ok(r) => {
                    rows = SchedJob::group(r);
                    answered = true;
                    if sched_note.take().is_some() {
                        changed = true;
                    }
                }
                Err(e) => {
                    answered = false;
                    let note = format!("{}; trying again", scheduler_trouble(&e));
                    if sched_note.as_deref() != Some(note.as_str()) {
                        writeln!(out, "herd: {note}")?;
                        sched_note = Some(note);
                    }
                }
            }
        }
        for j in jobs.iter_mut().filter(|j| !j.done) {
            let progress = j.exp.as_ref().and_then(|e| Progress::read(e).ok());
            let job = rows.iter().find(|r| r.id == j.id);
            j.seen_in_queue |= job.is_some();
            let v = view(j.exp.as_ref(), progress.as_ref(), job, answered);
            // What a change is: not the clock ticking.
            let key = |v: &View| {
                let running = v.state == "running";
                (
                    v.state,
                    v.reason.clone(),
                    running.then_some(v.phase),
                    v.nodes.clone(),
                )
            };
            // Ended: the scheduler said so, or (gone from the queue) the folder does.
            let ended = match job {
                Some(job) => job.state().is_final(),
                None => answered && v.state != "unknown" && v.exit_code.is_some(),
            };
            let lost = answered && job.is_none() && v.exit_code.is_none();
            if j.last.as_ref().map(key) != Some(key(&v)) {
                changed = true;
                if tty {
                    write!(out, "\r\x1b[K{}: {} {}", j.label(), v.state, v.detail)?;
                } else if !ended && !lost {
                    writeln!(out, "{}: {} {}", j.label(), v.state, v.detail)?;
                }
            } else if tty && v.state == "running" {
                write!(out, "\r\x1b[K{}: {} {}", j.label(), v.state, v.detail)?;
            }
            if ended || lost {
                if let (Some(exp), Some(p), Some(job)) = (&j.exp, &progress, job) {
                    record_end(exp, p, job);
                }
                let code = if lost { 1 } else { v.exit_code.unwrap_or(1) };
                if tty {
                    writeln!(out)?;
                }
                writeln!(
                    out,
                    "herd: {} {}: {}{}",
                    j.label(),
                    if lost { "left the queue" } else { v.state },
                    if lost {
                        "the scheduler no longer knows it and the folder does not say how it ended"
                            .to_owned()
                    } else {
                        v.detail.clone()
                    },
                    if lost {
                        String::new()
                    } else {
                        format!(" — exit code {code}")
                    }
                )?;
                codes.push(code);
                j.done = true;
            } else if let Some(r) = job {
                // A chain's job whose dependency failed never starts: stop waiting.
                if r.rows
                    .iter()
                    .all(|r| r.reason.as_deref() == Some("DependencyNeverSatisfied"))
                {
                    if tty {
                        writeln!(out)?;
                    }
                    writeln!(out, "herd: {} will never start: {}", j.label(), v.detail)?;
                    codes.push(1);
                    j.done = true;
                }
            }
            j.last = Some(v);
        }
        out.flush()?;
        if jobs.iter().all(|j| j.done) {
            let worst = codes.iter().copied().max().unwrap_or(0);
            return Ok(match worst {
                0 => ExitStatus::Success,
                _ => ExitStatus::Job(u8::try_from(worst.clamp(1, 255)).unwrap_or(1)),
            });
        }
        if Instant::now() >= next_query {
            pause = if changed {
                POLL_FIRST
            } else {
                (pause * 2).min(POLL_MAX)
            };
            next_query = Instant::now() + pause;
        } else if changed {
            // A change in a folder (the agents met, output came, the agents ended): ask
            // the scheduler soon, for the state that goes with it.
            next_query = next_query.min(Instant::now() + POLL_FIRST);
            pause = POLL_FIRST;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(text: &str) -> Vec<QueueRow> {
        queue::parse(text).expect("parses")
    }

    #[test]
    fn arrays_are_one_job_with_counts() {
        let jobs = SchedJob::group(rows(
            "8|5|0|FAILED|NonZeroExitCode|0:02|1:00|a01|1|768|u|(null)|N/A|arr|\n\
             5|5|4-9%2|PENDING|JobArrayTaskLimit|0:00|1:00||1|0|u|(null)|N/A|arr|\n\
             10|5|2|RUNNING|None|0:01|1:00|a01|1|0|u|(null)|N/A|arr|\n\
             12|12|N/A|COMPLETED|None|0:09|1:00|a02|1|0|u|(null)|N/A|plain|\n",
        ));
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].state(), JobState::Running);
        let counts = jobs[0].task_counts();
        assert_eq!(counts.get("queued"), Some(&6));
        assert_eq!(counts.get("running"), Some(&1));
        assert_eq!(counts.get("failed"), Some(&1));
        assert_eq!(jobs[0].exit_code(), None);
        let v = view(None, None, Some(&jobs[0]), true);
        assert!(
            v.detail
                .starts_with("array: 1 failed, 6 queued, 1 running;"),
            "{}",
            v.detail
        );
        assert_eq!(jobs[1].exit_code(), Some(0));
        assert_eq!(pending_tasks("1,3,5-7%2"), 5);
    }

    #[test]
    fn a_queued_job_says_why_in_words() {
        let jobs = SchedJob::group(rows(
            "3|3|N/A|PENDING|BeginTime|0:00|1:00||1|0|u|(null)|N/A|x|\n",
        ));
        let v = view(None, None, Some(&jobs[0]), true);
        assert_eq!(v.state, "queued");
        assert_eq!(v.detail, "waiting for its begin time (BeginTime)");
    }

    #[test]
    fn a_job_gone_from_the_queue_is_answered_from_the_folder() {
        let events = |e: &[(&str, Value)]| {
            e.iter()
                .enumerate()
                .map(|(i, (name, f))| {
                    let mut m = serde_json::Map::new();
                    m.insert("event".into(), (*name).into());
                    m.insert("unix_ms".into(), (i as u64).into());
                    if let Value::Object(f) = f {
                        m.extend(f.clone());
                    }
                    m
                })
                .collect::<Vec<_>>()
        };
        let failed = Progress::from_events(
            Some("7".into()),
            1,
            &events(&[
                ("queued", json!({"job_id": "7"})),
                ("started", json!({"job_id": "7"})),
                ("attempt_started", json!({"attempt": 0})),
                (
                    "failed",
                    json!({"cause": "rank 1 (local rank 1 on a01) exited with code 3"}),
                ),
                ("finished", json!({"ok": false, "cause": "worker_failure"})),
            ]),
        );
        let v = view(None, Some(&failed), None, true);
        assert_eq!(v.state, "failed");
        assert_eq!(v.exit_code, Some(1));
        assert!(v.detail.contains("exited with code 3"), "{}", v.detail);
        assert!(
            v.detail.ends_with("(no longer in the queue)"),
            "{}",
            v.detail
        );
        let v = view(None, Some(&failed), None, false);
        assert!(
            v.detail.ends_with("(scheduler did not answer)"),
            "{}",
            v.detail
        );

        let lost = Progress::from_events(
            Some("8".into()),
            1,
            &events(&[
                ("queued", json!({"job_id": "8"})),
                ("started", json!({"job_id": "8"})),
            ]),
        );
        let v = view(None, Some(&lost), None, true);
        assert_eq!((v.state, v.exit_code), ("unknown", None));
        assert_eq!(
            v.detail,
            "no longer in the queue, and nothing in the folder says how it ended (last seen: agents starting)"
        );
    }

    #[test]
    fn clocks_read_like_slurm() {
        assert_eq!(clock(Duration::from_secs(42)), "0:42");
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
        assert_eq!(clock(Duration::from_secs(2 * 86_400)), "2-00:00:00");
    }
}
