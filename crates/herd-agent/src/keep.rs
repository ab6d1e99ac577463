//! Keeping a job alive across allocations: attempt numbers over the whole experiment, the
//! requeue budget per cause (counted from the timeline), the requeue itself, the manifest's
//! record of each attempt, and the scheduler's facts about the job.

use std::time::Duration;

use herd_exp::timeline::{self, Event, RequeuedBy};
use herd_slurm::scheduler::lifecycle::{self, Cause, JobFacts};
use herd_slurm::Layout;

use crate::config::Config;
use crate::words::say;

/// Ask slurmctld about job `id` without blocking the event loop; a failure is said and
/// taken as "no facts".
pub(crate) async fn job_facts(id: &str) -> Option<JobFacts> {
    // When SLURM ends the job it signals every process of it, a `scontrol` just started
    // included: ask again, a moment later, up to 5 times.
    for tries_left in (0..5).rev() {
        let id = id.to_owned();
        match tokio::task::spawn_blocking(move || JobFacts::query(&id)).await {
            Ok(Ok(f)) => return Some(f),
            Ok(Err(e)) if e.was_killed() && tries_left > 0 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Ok(Err(e)) => {
                say(format!("cannot ask SLURM about the job: {e}"));
                return None;
            }
            Err(_) => return None,
        }
    }
    None
}

/// Requeues of this experiment so far, by cause (from its timeline); without an
/// experiment, SLURM's requeue count stands for every cause.
pub(crate) fn requeues_so_far(cfg: &Config, cause: Cause) -> u32 {
    let slurm = cfg.launch.requeues;
    let Some(dir) = &cfg.exp_dir else {
        return slurm;
    };
    match herd_exp::timeline::read(dir) {
        Ok(events) => events
            .iter()
            .filter(|e| matches!(&e.event, Event::Requeue(r) if r.cause == cause.name()))
            .count() as u32,
        Err(_) => slurm,
    }
}

/// Whether attempt `attempt`'s requeue is in the experiment's timeline already: another
/// agent took the attempt's end (node 1 acting for a lost leader, which records its requeue
/// before it asks for it). A leader that was frozen wakes up (SLURM's SIGCONT, then SIGTERM
/// to every task of the requeued job) to that record and must not requeue, adopt or record
/// the attempt's end again, whichever of the signal, its workers' deaths or its lost links
/// it sees first. False without an experiment, or when the timeline cannot be read.
pub(crate) fn requeue_recorded(cfg: &Config, attempt: u32) -> bool {
    let Some(dir) = &cfg.exp_dir else {
        return false;
    };
    herd_exp::timeline::read(dir).is_ok_and(|events| {
        events
            .iter()
            .any(|e| matches!(&e.event, Event::Requeue(r) if r.attempt == attempt))
    })
}

/// The job's state once it is no longer running (someone requeued or ended it: another
/// agent acting for this one, slurmctld, the user), asking for up to `within`; `None` while
/// it runs or without facts. An agent that was frozen wakes up (SLURM's SIGCONT) to a job
/// another agent has requeued for it, and must not act again: slurmctld signals the job a
/// moment before its state says so, hence the wait.
pub(crate) async fn no_longer_running(job_id: Option<&str>, within: Duration) -> Option<String> {
    let id = job_id?;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let facts = job_facts(id).await?;
        if !facts.state.starts_with("RUNNING") {
            return Some(facts.state);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Requeue job `job_id` after attempt `attempt` ended for `cause`, when the budget for that
/// cause allows; `lost` (the hosts of a node failure, blamed or replaced nodes) are left out
/// of the next allocation,
/// with the nodes the job already excluded. Says what it did and writes it in the timeline
/// (`record`: the leader's, or a follower's that acts for a lost leader); false when the job
/// ends here.
pub(crate) async fn requeue(
    cfg: &Config,
    job_id: Option<&str>,
    attempt: u32,
    cause: Cause,
    lost: &[String],
    record: &dyn Fn(Event),
) -> bool {
    let Some(id) = job_id.map(str::to_owned) else {
        return false;
    };
    // Requeued already, by the job's own code (Lightning's SLURM auto-requeue) or a user:
    // never a second requeue, only what herd's own would do besides.
    let facts = job_facts(&id).await;
    if facts
        .as_ref()
        .is_some_and(|f| f.requeued_since(cfg.launch.requeues))
    {
        return adopt_requeue(cfg, &id, attempt, cause, lost, record).await;
    }
    if !within_budget(cfg, &id, attempt, cause, None, record).await {
        return false;
    }
    let used = requeues_so_far(cfg, cause);
    let budget = cfg.keep.max_requeues;
    let exclude = exclusion(&id, lost, facts).await;
    record(
        timeline::Requeue {
            attempt,
            cause: cause.name().to_owned(),
            count: used + 1,
            budget,
            exclude: exclude.clone(),
            by: None,
        }
        .into(),
    );
    say(format!(
        "{}: requeuing job {id} ({} of {budget} requeues for {}){}",
        cause.words(),
        used + 1,
        cause.words(),
        if exclude.is_empty() {
            String::new()
        } else {
            format!(", without {}", exclude.join(","))
        }
    ));
    let id2 = id.clone();
    let exclude2 = exclude.clone();
    let lost_nodes = !lost.is_empty();
    match tokio::task::spawn_blocking(move || {
        lifecycle::requeue(&id2, &exclude2, lifecycle::requeue_delay(lost_nodes))
    })
    .await
    {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            // The job's own code may have requeued it a moment ago.
            if job_facts(&id)
                .await
                .is_some_and(|f| f.requeued_since(cfg.launch.requeues))
            {
                say(format!(
                    "job {id} was requeued by someone else a moment before herd's requeue ({e}); making it eligible now"
                ));
                return make_eligible(&id, exclude, !lost.is_empty()).await;
            }
            say(format!("cannot requeue job {id}: {e}"));
            record(
                timeline::RequeueFailed {
                    attempt,
                    error: e.to_string(),
                }
                .into(),
            );
            false
        }
        Err(_) => false,
    }
}

/// The nodes the next allocation leaves out: none without `lost` nodes, else those with
/// the ones the job excluded already (from `facts`, or asked for when not known).
async fn exclusion(id: &str, lost: &[String], facts: Option<JobFacts>) -> Vec<String> {
    if lost.is_empty() {
        return Vec::new();
    }
    let excluded = match facts {
        Some(f) => f.excluded,
        None => job_facts(id).await.and_then(|f| f.excluded),
    };
    let mut all: Vec<String> = lost.to_vec();
    if let Some(e) = excluded.filter(|e| !all.contains(e)) {
        all.push(e);
    }
    all
}

/// Whether the budget for `cause` has a requeue left (`--max-requeues`); when it does not,
/// says so, records `requeue_refused` (with `by`, for a requeue the job did itself) and
/// cancels a job that SLURM would requeue regardless (a preemption, a requeue done
/// already).
async fn within_budget(
    cfg: &Config,
    id: &str,
    attempt: u32,
    cause: Cause,
    by: Option<RequeuedBy>,
    record: &dyn Fn(Event),
) -> bool {
    let budget = cfg.keep.max_requeues;
    let used = requeues_so_far(cfg, cause);
    if used >= budget {
        say(format!(
            "{}: no requeue left ({used} of {budget} for {} used, --max-requeues); the job ends here{}",
            cause.words(),
            cause.words(),
            if cfg.exp_dir.is_some() {
                "; `herd submit --resume` runs it again from its newest checkpoint"
            } else {
                ""
            }
        ));
        record(
            timeline::RequeueRefused {
                attempt,
                cause: cause.name().to_owned(),
                used,
                budget,
                by,
            }
            .into(),
        );
        if cause == Cause::Preemption || by.is_some() {
            // slurmctld would run it again by itself: end it for good.
            let id2 = id.to_owned();
            let _ = tokio::task::spawn_blocking(move || {
                herd_slurm::scheduler::command::scancel(&[id2.as_str()], None)
            })
            .await;
        }
        return false;
    }
    true
}

/// A requeue someone else did (the job's own code: Lightning's `SLURMEnvironment` requeues
/// its job at SLURM's signal; a user's `scontrol requeue`), taken as the attempt's requeue
/// for `cause`: counted against that cause's budget (a job over it is cancelled), recorded
/// (`requeue` with `"by": "job"`) and followed by what herd's own requeue does besides:
/// `lost` left out and the job made eligible at once. False when the job ends here.
pub(crate) async fn adopt_requeue(
    cfg: &Config,
    id: &str,
    attempt: u32,
    cause: Cause,
    lost: &[String],
    record: &dyn Fn(Event),
) -> bool {
    if !within_budget(cfg, id, attempt, cause, Some(RequeuedBy::Job), record).await {
        return false;
    }
    let used = requeues_so_far(cfg, cause);
    let budget = cfg.keep.max_requeues;
    let exclude = exclusion(id, lost, None).await;
    record(
        timeline::Requeue {
            attempt,
            cause: cause.name().to_owned(),
            count: used + 1,
            budget,
            exclude: exclude.clone(),
            by: Some(RequeuedBy::Job),
        }
        .into(),
    );
    let when = match cause {
        Cause::TimeLimit => " at its time limit",
        Cause::Preemption => " at its preemption",
        _ => "",
    };
    say(format!(
        "job {id} was requeued by its own code{when}; herd does not requeue it again and makes it eligible now ({} of {budget} requeues for {})",
        used + 1,
        cause.words(),
    ));
    make_eligible(id, exclude, !lost.is_empty()).await
}

/// [`lifecycle::make_eligible`] off the event loop, [`lifecycle::requeue_delay`] from now
/// (longer after `lost_nodes`); a failure is said (the job still runs again, only later).
async fn make_eligible(id: &str, exclude: Vec<String>, lost_nodes: bool) -> bool {
    let id2 = id.to_owned();
    if let Ok(Err(e)) = tokio::task::spawn_blocking(move || {
        lifecycle::make_eligible(&id2, &exclude, lifecycle::requeue_delay(lost_nodes))
    })
    .await
    {
        say(format!(
            "job {id} is requeued, but cannot be made eligible now ({e}): SLURM starts it once it releases it"
        ));
    }
    true
}

pub(crate) fn unix_now() -> u64 {
    crate::workers::unix_ms() / 1000
}

/// The attempt's entry in the manifest (when the job has an experiment).
pub(crate) fn record_run(
    cfg: &Config,
    layout: &Layout,
    (attempt, requeue): (u32, u32),
    started_unix: u64,
    cause: Option<Cause>,
    then: &str,
    resume: &Option<String>,
) {
    let Some(dir) = &cfg.exp_dir else { return };
    let run = herd_exp::Run {
        attempt,
        requeue,
        nodes: layout.nodes.clone(),
        started_unix,
        ended_unix: unix_now(),
        cause: cause.map(|c| c.name().to_owned()),
        then: then.to_owned(),
        resume_from: resume.clone(),
        other: Default::default(),
    };
    let job = cfg.launch.job_ref.clone();
    let written =
        herd_exp::Experiment::open_dir(dir).and_then(|e| e.record_run(job.as_deref(), run));
    if let Err(e) = written {
        say(format!(
            "cannot record attempt {attempt} in the manifest: {e}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requeue(attempt: u32, by: Option<RequeuedBy>) -> timeline::Requeue {
        timeline::Requeue {
            attempt,
            cause: Cause::NodeFailure.name().to_owned(),
            count: 1,
            budget: 1,
            exclude: vec!["gpu-a01".to_owned()],
            by,
        }
    }

    /// A woken leader finds its attempt's requeue when node 1 recorded it, and only that
    /// attempt's: an earlier attempt's requeue, or none, leaves it to act.
    #[test]
    fn an_attempts_requeue_is_found_in_the_timeline_and_only_its_own() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cfg = crate::config::tests::config(Some(7), Some("7"));
        assert!(
            !requeue_recorded(&cfg, 1),
            "no experiment: nothing recorded"
        );
        cfg.exp_dir = Some(dir.path().to_owned());
        assert!(!requeue_recorded(&cfg, 1), "no timeline yet");
        timeline::append(dir.path(), requeue(0, None)).expect("append");
        timeline::append(
            dir.path(),
            timeline::Failed {
                attempt: 1,
                cause: "lost node 0 (gpu-a01), the leader".to_owned(),
                ..timeline::Failed::default()
            },
        )
        .expect("append");
        assert!(
            !requeue_recorded(&cfg, 1),
            "attempt 0's requeue is not attempt 1's"
        );
        timeline::append(dir.path(), requeue(1, None)).expect("append");
        assert!(requeue_recorded(&cfg, 1));
        assert!(!requeue_recorded(&cfg, 2));
    }
}
