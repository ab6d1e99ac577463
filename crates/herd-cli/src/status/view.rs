//! What one job is doing, in words and as `--json` gives it: from the scheduler's rows
//! when it answered for the job, else from the experiment folder.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use herd_exp::goodput::{percent, Accounting};
use herd_exp::progress::Progress;
use herd_exp::Experiment;
use herd_slurm::scheduler::queue::{self, JobState, QueueRow};
use serde_json::{json, Value};

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
    pub(crate) fn lead(&self) -> &QueueRow {
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
    /// Its likely cause and fix, when herd knew the failure.
    pub hint: Option<String>,
    /// Array tasks by state, for an array job.
    pub tasks: BTreeMap<&'static str, usize>,
    /// Training over the wall time so far, when the job has step readings.
    pub goodput: Option<f64>,
    /// The wall time from the first start, over every attempt (seconds).
    pub wall_s: Option<u64>,
}

impl View {
    pub(crate) fn json(&self) -> Value {
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
            "hint": self.hint,
            "tasks": self.tasks,
            "goodput": self.goodput,
            "wall_s": self.wall_s,
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
    goodput: Option<&Accounting>,
) -> View {
    with_goodput(
        view_of(exp, progress, job, scheduler_answered, goodput),
        goodput,
        true,
    )
}

/// [`view`], its goodput in [`View::goodput`] and [`View::wall_s`] but not said in the
/// detail: for a table that shows it in a column of its own (a sweep's runs).
pub fn view_apart(
    exp: Option<&Experiment>,
    progress: Option<&Progress>,
    job: Option<&SchedJob>,
    scheduler_answered: bool,
    goodput: Option<&Accounting>,
) -> View {
    with_goodput(
        view_of(exp, progress, job, scheduler_answered, goodput),
        goodput,
        false,
    )
}

/// `v` with the goodput of `goodput` (a job with step readings and wall time), said at the
/// end of its detail when `say` (`; goodput 52.3 %`, `so far` while it runs).
fn with_goodput(mut v: View, goodput: Option<&Accounting>, say: bool) -> View {
    if let Some(acc) = goodput.filter(|a| a.split && a.wall_ms() > 0) {
        v.goodput = acc.goodput();
        v.wall_s = Some(acc.wall_ms() / 1000);
        if say
            && matches!(
                v.state,
                "running" | "finished" | "failed" | "cancelled" | "queued"
            )
            && !v.detail.is_empty()
        {
            v.detail.push_str(&format!(
                "; goodput {}{}",
                percent(acc.goodput().unwrap_or(0.0)),
                if acc.running { " so far" } else { "" }
            ));
        }
    }
    v
}

/// How long a job ran: SLURM's time of its allocation, or with several attempts the whole
/// job's (`3:52 over 3 attempts`), which SLURM does not count.
fn ran_words(elapsed: Option<Duration>, goodput: Option<&Accounting>) -> Option<String> {
    match goodput.filter(|a| a.attempts.len() > 1 && a.wall_ms() > 0) {
        Some(a) => Some(format!(
            "{} over {} attempts",
            clock(Duration::from_millis(a.wall_ms())),
            a.attempts.len()
        )),
        None => elapsed.filter(|d| !d.is_zero()).map(clock),
    }
}

fn view_of(
    exp: Option<&Experiment>,
    progress: Option<&Progress>,
    job: Option<&SchedJob>,
    scheduler_answered: bool,
    goodput: Option<&Accounting>,
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
        hint: progress.and_then(|p| p.last_hint.clone()),
        tasks: BTreeMap::new(),
        goodput: None,
        wall_s: None,
    };
    let failure = |v: &View| {
        let hint = match (&v.last_failure, &v.hint) {
            (Some(_), Some(h)) => format!("; likely cause: {h}"),
            _ => String::new(),
        };
        v.last_failure
            .clone()
            .or_else(|| v.cause.clone())
            .map(|f| format!(": {f}{hint}"))
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
        let mut requeued = progress
            .filter(|p| p.requeues > 0)
            .map(|p| match p.requeues_by_job {
                0 => format!("requeued {}×; ", p.requeues),
                k => format!("requeued {}× ({k} by the job itself); ", p.requeues),
            })
            .unwrap_or_default();
        requeued.push_str(&replaced_words(progress));
        v.detail = match state {
            // The agents wrote that they started: the folder is newer than the queue.
            JobState::Queued if v.phase.is_some() => {
                v.state = "running";
                format!("{requeued}starting on its nodes: {}", phase_words(v.phase))
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
            JobState::Finished => format!(
                "exit 0 after {}",
                ran_words(lead.elapsed, goodput).unwrap_or_else(|| clock(Duration::ZERO))
            ),
            JobState::Failed | JobState::Cancelled => {
                // SLURM's state when it says more than the word (TIMEOUT, NODE_FAIL, …).
                let special = if matches!(lead.state.as_str(), "FAILED" | "CANCELLED") {
                    String::new()
                } else {
                    format!("{}, ", lead.state)
                };
                // SLURM counts whole seconds: a job that failed within its first second
                // ran 0 s, though its agents started (the timeline says so).
                let started = progress.is_some_and(|p| p.started_ms.is_some());
                let ran = match ran_words(lead.elapsed, goodput) {
                    Some(words) => format!(" after {words}"),
                    None if started => " within a second of its start".to_owned(),
                    None => " before it started".to_owned(),
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

/// Appends the scheduler's final word on a job to the experiment's timeline, once: when
/// the job leaves the queue later, the folder still knows how it ended.
pub(crate) fn record_end(exp: &Experiment, progress: &Progress, job: &SchedJob) {
    if progress.ended.is_some() || !job.state().is_final() {
        return;
    }
    let lead = job.lead();
    let ended = herd_exp::timeline::Ended {
        job_id: Some(job.id.as_str().into()),
        state: lead.state.clone(),
        exit_code: job.exit_code(),
        reason: lead.reason.clone(),
    };
    // The folder may be another user's, read-only: the answer is shown either way.
    let _ = herd_exp::timeline::append(exp.dir(), ended);
}

/// The nodes spares took the place of in the current job, for a status line:
/// `gpu-a02 replaced by spare gpu-a03; ` (empty when none).
pub(crate) fn replaced_words(progress: Option<&Progress>) -> String {
    progress
        .map(|p| {
            p.replaced
                .iter()
                .map(|(node, by)| format!("{node} replaced by spare {by}; "))
                .collect()
        })
        .unwrap_or_default()
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
        let v = view(None, None, Some(&jobs[0]), true, None);
        assert!(
            v.detail
                .starts_with("array: 1 failed, 6 queued, 1 running;"),
            "{}",
            v.detail
        );
        assert_eq!(jobs[1].exit_code(), Some(0));
        assert_eq!(pending_tasks("1,3,5-7%2"), 5);
    }

    /// Two attempts: 0 → 36 s (a time limit, requeued at 26.5 s), 36 → 56 s; training
    /// 4 → 23 s and 40 → 50 s.
    fn two_allocations(finished: bool) -> Accounting {
        let ev = |s: u64, event: &str, fields: Value| {
            let mut m = fields.as_object().cloned().unwrap_or_default();
            m.insert("unix_ms".into(), json!(1_000_000 + s * 1000));
            m.insert("event".into(), json!(event));
            crate::test_support::entry(Value::Object(m))
        };
        let mut events = vec![
            ev(0, "started", json!({"job_id": "3"})),
            ev(1, "attempt_started", json!({"attempt": 0})),
            ev(26, "teardown", json!({"attempt": 0})),
            ev(27, "requeue", json!({"attempt": 0, "cause": "time_limit"})),
            ev(36, "started", json!({"job_id": "3"})),
            ev(37, "attempt_started", json!({"attempt": 1})),
        ];
        if finished {
            events.push(ev(56, "finished", json!({"attempt": 1, "ok": true})));
        }
        let steps = (0..2)
            .map(|k| {
                let t0 = [4, 40][k as usize];
                let len = [20, 11][k as usize];
                let s: Vec<(u64, u64)> = (0..len)
                    .map(|i| (1_000_000 + (t0 + i) * 1000, 20 * u64::from(k) + i + 1))
                    .collect();
                (k, s)
            })
            .collect();
        herd_exp::goodput::account(&events, &steps, 1_000_000 + 60_000)
    }

    #[test]
    fn an_ended_job_counts_every_attempt_and_says_its_goodput() {
        let jobs = SchedJob::group(rows(
            "3|3|N/A|COMPLETED|None|0:20|1:00|a01|1|0|u|(null)|N/A|x|\n",
        ));
        let p = Progress {
            job_id: Some("3".into()),
            ..Progress::default()
        };
        let done = two_allocations(true);
        let v = view(None, Some(&p), Some(&jobs[0]), true, Some(&done));
        // SLURM says 0:20, the last allocation's; the job ran 56 s in two.
        assert_eq!(
            v.detail,
            "exit 0 after 0:56 over 2 attempts; goodput 51.8 %"
        );
        assert_eq!(v.wall_s, Some(56));
        assert!((v.goodput.expect("goodput") - 29.0 / 56.0).abs() < 1e-9);
        let running = SchedJob::group(rows(
            "3|3|N/A|RUNNING|None|0:24|1:00|a01|1|0|u|(null)|N/A|x|\n",
        ));
        let v = view(
            None,
            Some(&p),
            Some(&running[0]),
            true,
            Some(&two_allocations(false)),
        );
        assert!(
            v.detail.ends_with("; goodput 48.3 % so far"),
            "{}",
            v.detail
        );
        // Without step readings: no goodput said.
        let none = herd_exp::goodput::account(&[], &BTreeMap::new(), 0);
        let v = view(None, Some(&p), Some(&jobs[0]), true, Some(&none));
        assert_eq!(v.detail, "exit 0 after 0:20");
        assert_eq!(v.goodput, None);
    }

    #[test]
    fn a_running_job_says_which_node_a_spare_replaced() {
        let jobs = SchedJob::group(rows(
            "3|3|N/A|RUNNING|None|0:40|1:00|a[01-03]|3|0|u|(null)|N/A|x|\n",
        ));
        let p = Progress {
            job_id: Some("3".into()),
            replaced: vec![("a02".into(), "a03".into())],
            ..Progress::default()
        };
        let v = view(None, Some(&p), Some(&jobs[0]), true, None);
        assert!(
            v.detail.starts_with("a02 replaced by spare a03; "),
            "{}",
            v.detail
        );
        assert_eq!(replaced_words(None), "");
    }

    #[test]
    fn a_queued_job_says_why_in_words() {
        let jobs = SchedJob::group(rows(
            "3|3|N/A|PENDING|BeginTime|0:00|1:00||1|0|u|(null)|N/A|x|\n",
        ));
        let v = view(None, None, Some(&jobs[0]), true, None);
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
                    crate::test_support::entry(Value::Object(m))
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
        let v = view(None, Some(&failed), None, true, None);
        assert_eq!(v.state, "failed");
        assert_eq!(v.exit_code, Some(1));
        assert!(v.detail.contains("exited with code 3"), "{}", v.detail);
        assert!(
            v.detail.ends_with("(no longer in the queue)"),
            "{}",
            v.detail
        );
        let v = view(None, Some(&failed), None, false, None);
        assert!(
            v.detail.ends_with("(scheduler did not answer)"),
            "{}",
            v.detail
        );

        // The agents' hint follows the failure; a later failure without one drops it.
        let hinted = |extra: &[(&str, Value)]| {
            let mut e = vec![
                ("queued", json!({"job_id": "7"})),
                ("started", json!({"job_id": "7"})),
                (
                    "failed",
                    json!({"cause": "rank 0 (local rank 0 on a01) killed by SIGABRT (aborted)",
                           "hint": "the worker aborted at exit — fix: destroy the process group"}),
                ),
            ];
            e.extend_from_slice(extra);
            e.push(("finished", json!({"ok": false, "cause": "worker_failure"})));
            Progress::from_events(Some("7".into()), 1, &events(&e))
        };
        let v = view(None, Some(&hinted(&[])), None, true, None);
        assert!(
            v.detail.contains(
                "killed by SIGABRT (aborted); likely cause: the worker aborted at exit — fix: destroy the process group ("
            ),
            "{}",
            v.detail
        );
        assert_eq!(
            v.json()["hint"],
            "the worker aborted at exit — fix: destroy the process group"
        );
        let later = hinted(&[("failed", json!({"cause": "lost node 1 (a02)"}))]);
        let v = view(None, Some(&later), None, true, None);
        assert!(!v.detail.contains("likely cause"), "{}", v.detail);
        assert_eq!(v.json()["hint"], Value::Null);

        let lost = Progress::from_events(
            Some("8".into()),
            1,
            &events(&[
                ("queued", json!({"job_id": "8"})),
                ("started", json!({"job_id": "8"})),
            ]),
        );
        let v = view(None, Some(&lost), None, true, None);
        assert_eq!((v.state, v.exit_code), ("unknown", None));
        assert_eq!(
            v.detail,
            "no longer in the queue, and nothing in the folder says how it ended (last seen: agents starting)"
        );
    }

    /// SLURM counts whole seconds: a job that failed within its first second "ran 0:00",
    /// though its agents started; one cancelled while queued never started.
    #[test]
    fn a_job_that_failed_in_its_first_second_had_started() {
        let jobs = SchedJob::group(rows(
            "9|9|N/A|FAILED|NonZeroExitCode|0:00|1:00|a01|1|256|u|(null)|N/A|x|\n\
             10|10|N/A|CANCELLED|None|0:00|1:00||1|0|u|(null)|N/A|y|\n",
        ));
        let started = Progress::from_events(
            Some("9".into()),
            1,
            &[
                json!({"event": "queued", "job_id": "9", "unix_ms": 1}),
                json!({"event": "started", "job_id": 9, "unix_ms": 2}),
            ]
            .map(crate::test_support::entry),
        );
        let v = view(None, Some(&started), Some(&jobs[0]), true, None);
        assert!(
            v.detail.starts_with("exit 1 within a second of its start"),
            "{}",
            v.detail
        );
        let v = view(None, None, Some(&jobs[1]), true, None);
        assert_eq!(v.detail, "cancelled before it started");
    }

    #[test]
    fn clocks_read_like_slurm() {
        assert_eq!(clock(Duration::from_secs(42)), "0:42");
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
        assert_eq!(clock(Duration::from_secs(2 * 86_400)), "2-00:00:00");
    }
}
