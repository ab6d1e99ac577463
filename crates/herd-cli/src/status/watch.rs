//! The watch of `herd status -w` and `herd submit --wait`: a live line per job until each
//! has ended, one `squeue` call per tick for all of them.

use std::io::Write;
use std::time::{Duration, Instant};

use herd_exp::progress::Progress;
use herd_exp::Experiment;
use herd_slurm::scheduler::queue::{self, Scope};

use super::view::{record_end, view, SchedJob, View};
use crate::site::scheduler_trouble;
use crate::{CliError, ExitStatus};

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
            let v = view(j.exp.as_ref(), progress.as_ref(), job, answered, None);
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
