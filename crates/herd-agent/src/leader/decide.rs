//! The leader's decisions while an attempt runs: what a signal means for the job (from the
//! scheduler's facts), the stop before a time limit or on preemption, and the hang
//! watchdog's verdict and report; and when it ends, whether restarts that made no progress
//! go on (`stall`'s rule); each a method of [`Lead`], the leader's state.

use std::collections::HashSet;
use std::time::Duration;

use herd_exp::timeline::{self, RequeuedBy, SeenIn};
use herd_slurm::scheduler::lifecycle::{Cause, JobFacts};
use nix::sys::signal::Signal;

use super::links::{broadcast, live};
use super::stall::Done;
use super::state::{End, Lead, Stopping};
use crate::attempt::Attempt;
use crate::config::KeepAlive;
use crate::event::Event;
use crate::keep::{adopt_requeue, job_facts, requeue_recorded, unix_now};
use crate::message::{Msg, RankProgress, RankStack};
use crate::pace::{self, AutoRule, How, Limit};
use crate::signals::{self, Action};
use crate::words::{cancelled, say};
use herd_exp::failure::{Exit, FailureReport};

/// The signal that ended a worker (`exit`), when it is one that ends a job: SIGTERM,
/// SIGINT or SIGHUP, which SLURM sends every process of a job it cancels, preempts or ends
/// at its time limit. Killed by it, or exited with 128 + its number (143, 130, 129): how a
/// shell reports a child the signal killed, and what a launcher or a training script that
/// catches the signal exits with. A crash (SIGSEGV, SIGABRT), the OOM killer's SIGKILL and
/// any other code are the worker's own.
fn job_signal(exit: Option<&Exit>) -> Option<Signal> {
    let sig = match exit? {
        Exit::Signal(name) => name.parse::<Signal>().ok()?,
        Exit::Code(code) => Signal::try_from(code.checked_sub(128)?).ok()?,
    };
    (signals::action(sig) == Some(Action::Terminate)).then_some(sig)
}

/// How close to its time limit a job SLURM is ending must be for that end to be the time
/// limit: SLURM ends a job at its limit (`RunTime` = `TimeLimit`), give or take its own tick.
const AT_THE_LIMIT: Duration = Duration::from_secs(5);

/// Why SLURM is ending the job, from `scontrol show job` read while the job got SIGTERM,
/// SIGINT or SIGHUP (an agent's, or a worker's death by it: [`job_signal`]): what
/// [`JobFacts::cause`] says, except that a job `COMPLETING` is one SLURM is ending by a
/// cancel (`scancel`, `herd cancel`: while any process of a cancelled job runs, SLURM
/// 22.05 shows it as `COMPLETING`, not `CANCELLED`; a job that ends by itself has no worker
/// left to kill) unless it is preempted or at its very limit ([`AT_THE_LIMIT`]): near the
/// limit is not enough, or an `scancel` in a job's last minutes would be taken for the
/// time limit and requeued. A job still `RUNNING` is near its limit when the signal is the
/// job's own `--signal` (`TERM@90`).
fn ended_by_slurm(facts: &JobFacts, near: Duration) -> Option<Cause> {
    let ending = facts.state == "COMPLETING";
    let at_limit = facts.time_left.is_none_or(|t| t <= AT_THE_LIMIT);
    if ending && !facts.preempted && !at_limit {
        return Some(Cause::Cancelled);
    }
    facts
        .cause(near)
        .or_else(|| ending.then_some(Cause::Cancelled))
}

/// The job's time left as SLURM said it, and when it was asked; `None` without an answer.
pub(super) type TimeLeft = tokio::task::JoinHandle<Option<(tokio::time::Instant, Duration)>>;

/// One running rank as the hang watchdog sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Silence {
    pub(super) rank: u32,
    pub(super) node: u32,
    pub(super) pid: i32,
    /// Milliseconds since its last progress, or since its start when it has made none.
    pub(super) silent_ms: u64,
    /// Whether it has made progress since it started.
    pub(super) started: bool,
    /// Its timeout now, and how it was derived ([`pace::limit`]): the start timeout until
    /// its first progress (imports, dataset indexing, NCCL setup), then the hang timeout,
    /// fixed or its own (`auto`).
    pub(super) limit: Limit,
}

impl Silence {
    /// Rank `p` of node `node`, heard `since_ms` ago, under `keep`'s timeouts.
    fn of(node: u32, p: &RankProgress, since_ms: u64, keep: &KeepAlive) -> Silence {
        Silence {
            rank: p.rank,
            node,
            pid: p.pid,
            silent_ms: p.silent_ms.saturating_add(since_ms),
            started: p.started,
            limit: pace::limit(keep, &AutoRule::get(), p),
        }
    }
}

/// The watchdog's verdict over every running rank: a hang when every rank is silent past
/// its own timeout; then the rank that went silent first (the longest silence, then the
/// lowest rank). Ranks that exited 0 are not running and do not hold a hang off; a slow
/// start does (its timeout is the start timeout).
pub(super) fn verdict(all: &[Silence]) -> Option<Silence> {
    let overdue = |r: &Silence| r.silent_ms >= r.limit.timeout_ms;
    if all.is_empty() || !all.iter().all(overdue) {
        return None;
    }
    all.iter()
        .copied()
        .max_by_key(|r| (r.silent_ms, std::cmp::Reverse(r.rank)))
}

impl Lead {
    /// Ask SLURM for the job's time left, in the background, for herd's warning before
    /// the time limit ([`Lead::arm_warning`]): the query is no part of the path to the
    /// workers' start. `None` when there is no warning to arm (no job, `--warn-before 0`).
    pub(super) fn ask_time_left(&mut self) -> Option<TimeLeft> {
        self.warn_at = None;
        let warn = self.cfg.keep.warn_before.duration();
        let id = self.job_id.clone().filter(|_| !warn.is_zero())?;
        Some(tokio::spawn(async move {
            let asked = tokio::time::Instant::now();
            job_facts(&id)
                .await
                .and_then(|f| f.time_left)
                .map(|left| (asked, left))
        }))
    }

    /// When herd's warning is due, from the time left the query `asked` found (counted
    /// from when it was asked).
    pub(super) async fn arm_warning(&mut self, asked: Option<TimeLeft>) {
        let Some(asked) = asked else { return };
        let warn = self.cfg.keep.warn_before.duration();
        if let Ok(Some((at, left))) = asked.await {
            self.warn_at = Some(at + left.saturating_sub(warn));
        }
    }

    /// Ask every worker to checkpoint and stop, for `cause`.
    pub(super) async fn begin_stop(&mut self, cause: Cause) {
        if self.stopping.is_some() {
            return;
        }
        let keep = &self.cfg.keep;
        let sig = keep.stop_signal.signal();
        say(format!(
            "{}: asking every worker to checkpoint and stop ({}); they have {:?}",
            cause.words(),
            sig.as_str(),
            keep.stop_grace.duration()
        ));
        self.cfg.record(timeline::Warning {
            attempt: self.number,
            cause: cause.name().to_owned(),
            stop_signal: sig.as_str().to_owned(),
            grace_s: keep.stop_grace.duration().as_secs_f64(),
        });
        broadcast(
            &mut self.followers,
            &Msg::Stop {
                attempt: self.number,
                signal: sig.as_str().to_owned(),
            },
        )
        .await;
        if let Some(a) = self.attempt.as_ref() {
            a.forward(sig);
        }
        self.stopping = Some(Stopping {
            cause,
            deadline: tokio::time::Instant::now() + self.cfg.keep.stop_grace.duration(),
        });
    }

    /// A handled signal reached this agent (`from` = None) or a follower: decide from the
    /// scheduler's facts whether it is the time limit, a preemption, a cancel or the user's
    /// own signal, and act on it. Returns the attempt's end it makes, if any.
    pub(super) async fn on_signal(&mut self, sig: Signal, from: Option<u32>) -> Option<End> {
        let action = signals::action(sig)?;
        let ignored = |lead: &Lead| {
            lead.cfg.record(timeline::Signal {
                attempt: lead.number,
                signal: sig.as_str().to_owned(),
                action: timeline::Action::IgnoredStopping,
                node: from,
                ..timeline::Signal::default()
            });
        };
        // While stopping only a signal that ends the job is looked into: the job's own code
        // may have requeued it (SLURM then ends its tasks).
        if self.stopping.is_some() && action != Action::Terminate {
            ignored(self);
            return None;
        }
        // SLURM's --signal may come up to a minute before the time it was asked for.
        let near = self.cfg.keep.warn_before.duration() + Duration::from_secs(90);
        let facts = match self.job_id.as_deref() {
            Some(id) => job_facts(id).await,
            None => None,
        };
        if let Some(f) = facts
            .as_ref()
            .filter(|f| f.requeued_since(self.requeue_count))
        {
            let cause = self.requeue_cause(f, near);
            return Some(self.adopt_requeue(cause, sig, from, None).await);
        }
        if self.stopping.is_some() {
            ignored(self);
            return None;
        }
        let cause = facts.as_ref().and_then(|f| match action {
            Action::Terminate => ended_by_slurm(f, near),
            _ => f.cause(near),
        });
        if action == Action::Notice && !self.notice_stops(cause, facts.as_ref()) {
            return None;
        }
        let record = |action: timeline::Action| {
            self.cfg.record(timeline::Signal {
                attempt: self.number,
                signal: sig.as_str().to_owned(),
                action,
                cause: cause.map(|c| c.name().to_owned()),
                node: from,
                ..timeline::Signal::default()
            });
        };
        match (action, cause) {
            (_, Some(c @ (Cause::TimeLimit | Cause::Preemption))) => {
                record(timeline::Action::Stop);
                self.begin_stop(c).await;
                None
            }
            (Action::Terminate, _) => {
                // Passed on to the workers by the teardown, on every node.
                record(timeline::Action::Terminate);
                self.cancelled_by = Some(sig);
                Some(self.cancel(sig, from))
            }
            (Action::Notice, _) => None,
            (Action::Forward, _) => {
                if from.is_none() {
                    say(format!("forwarding {} to the workers", sig.as_str()));
                    record(timeline::Action::Forward);
                    if let Some(a) = self.attempt.as_ref() {
                        a.forward(sig);
                    }
                }
                None
            }
        }
    }

    /// Whether SIGCONT, with the job's `cause` and `facts`, is a stop now. A preemption
    /// stops the job now; a coming time limit is met by herd's own timer at `warn_before`
    /// (SLURM's notice comes up to a minute early), re-armed here; anything else is nothing
    /// to act on.
    fn notice_stops(&mut self, cause: Option<Cause>, facts: Option<&JobFacts>) -> bool {
        let left = facts.and_then(|f| f.time_left);
        let warn = self.cfg.keep.warn_before.duration();
        match cause {
            Some(Cause::Preemption) => true,
            Some(Cause::TimeLimit) if left.is_some_and(|l| l <= warn + Duration::from_secs(2)) => {
                true
            }
            Some(Cause::TimeLimit) => {
                if let Some(l) = left.filter(|_| !warn.is_zero()) {
                    self.warn_at = Some(tokio::time::Instant::now() + (l - warn));
                }
                false
            }
            _ => false,
        }
    }

    /// Why a job that was requeued by someone else (its own code, a user) stops: the stop
    /// in progress, else a time limit or preemption SLURM's facts show, else `Requeued`.
    fn requeue_cause(&self, facts: &JobFacts, near: Duration) -> Cause {
        self.stopping
            .as_ref()
            .map(|s| s.cause)
            .or_else(|| {
                facts
                    .cause(near)
                    .filter(|c| matches!(c, Cause::TimeLimit | Cause::Preemption))
            })
            .unwrap_or(Cause::Requeued)
    }

    /// The job was requeued by its own code (Lightning's `SLURMEnvironment` at SLURM's
    /// signal, a user's `scontrol requeue`) and SLURM is ending its tasks, which `sig`
    /// (seen by this agent, a follower `from`, or a worker's death: `seen`) says: take it as
    /// this attempt's requeue at once, while the job is still on its nodes (made eligible
    /// now, counted against `cause`'s budget), and end the attempt; herd does not requeue it
    /// again.
    pub(super) async fn adopt_requeue(
        &mut self,
        cause: Cause,
        sig: Signal,
        from: Option<u32>,
        seen: Option<SeenIn>,
    ) -> End {
        // The requeue is node 1's, for this node's loss while it was frozen: nothing to
        // record or adopt. The end of a lost node is how the attempt ends here too.
        if requeue_recorded(&self.cfg, self.number) {
            return End::Stopped {
                cause: Cause::NodeFailure,
            };
        }
        self.cfg.record(timeline::Signal {
            attempt: self.number,
            signal: sig.as_str().to_owned(),
            action: timeline::Action::Requeued,
            cause: Some(cause.name().to_owned()),
            node: from,
            by: Some(RequeuedBy::Job),
            seen,
        });
        if self.requeued_by_job.is_none() {
            let id = self.job_id.clone().unwrap_or_default();
            let record = |event: timeline::Event| self.cfg.record(event);
            let adopted = adopt_requeue(&self.cfg, &id, self.number, cause, &[], &record).await;
            self.requeued_by_job = Some(adopted);
        }
        End::Stopped { cause }
    }

    /// The attempt's end when `sig`, received by this agent (`from` = None) or a
    /// follower's, cancels the job.
    fn cancel(&self, sig: Signal, from: Option<u32>) -> End {
        let who = match from {
            None => self.host.clone(),
            Some(n) => self
                .followers
                .iter()
                .find(|f| f.node_rank == n)
                .map_or_else(|| format!("node {n}"), |f| f.host.clone()),
        };
        End::Failed {
            report: Box::new(FailureReport::other(
                self.number,
                from.unwrap_or(0),
                &who,
                cancelled(&who, sig),
            )),
            retryable: false,
            cause: Cause::Cancelled,
        }
    }

    /// A worker's failure, read for what it is: a worker killed by SIGTERM, SIGINT or
    /// SIGHUP, or exiting with 128 + one of them ([`job_signal`]), may have got it from SLURM
    /// with every other process of the job (`scancel`, a preemption, the time limit's end)
    /// before the agents' own copies were handled. Then
    /// what SLURM says about the job decides, as for a signal an agent receives: a cancel
    /// ends the job as cancelled, a preemption or the time limit stops and requeues it.
    /// Anything else stays the worker's failure. One `scontrol` call, only for such a death.
    pub(super) async fn reread_failure(&mut self, end: End) -> End {
        let End::Failed {
            report,
            cause: Cause::WorkerFailure,
            ..
        } = &end
        else {
            return end;
        };
        let (Some(sig), Some(id)) = (job_signal(report.exit.as_ref()), self.job_id.clone()) else {
            return end;
        };
        let near = self.cfg.keep.warn_before.duration() + Duration::from_secs(90);
        let facts = job_facts(&id).await;
        if let Some(f) = facts
            .as_ref()
            .filter(|f| f.requeued_since(self.requeue_count))
        {
            let cause = self.requeue_cause(f, near);
            let (node, seen) = (Some(report.node_rank), Some(SeenIn::WorkerExit));
            return self.adopt_requeue(cause, sig, node, seen).await;
        }
        let cause = facts.and_then(|f| ended_by_slurm(&f, near));
        let record = |action: timeline::Action| {
            self.cfg.record(timeline::Signal {
                attempt: self.number,
                signal: sig.as_str().to_owned(),
                action,
                cause: cause.map(|c| c.name().to_owned()),
                node: Some(report.node_rank),
                by: None,
                seen: Some(SeenIn::WorkerExit),
            });
        };
        match cause {
            Some(Cause::Cancelled) => {
                record(timeline::Action::Terminate);
                let why = format!(
                    "job cancelled: {} with the rest of the job, which SLURM is ending",
                    report.cause
                );
                let report = FailureReport::other(self.number, report.node_rank, &report.host, why);
                self.cancelled_by = Some(sig);
                End::Failed {
                    report: Box::new(report),
                    retryable: false,
                    cause: Cause::Cancelled,
                }
            }
            Some(c @ (Cause::Preemption | Cause::TimeLimit)) => {
                record(timeline::Action::Stop);
                say(format!(
                    "{}: {} with the rest of the job; the job is requeued",
                    c.words(),
                    report.cause
                ));
                End::Stopped { cause: c }
            }
            _ => end,
        }
    }

    /// The hang watchdog's verdict: when every rank is silent past its timeout, the rank
    /// that went silent first (rank, node rank, pid, silent for, its timeout). This node's
    /// ranks are polled on every call (each poll measures their pace); `expected`: the
    /// nodes whose ranks still run, each of which must have reported.
    pub(super) fn hung(&mut self, expected: &HashSet<u32>) -> Option<Silence> {
        self.cfg.keep.watchdog()?;
        let mine = self.attempt.as_mut()?.progress();
        let reported: HashSet<u32> = self.progress.values().map(|p| p.0).collect();
        if !expected.is_subset(&reported) {
            return None;
        }
        let (now, keep, node) = (
            tokio::time::Instant::now(),
            &self.cfg.keep,
            self.cfg.node_rank,
        );
        let mut all: Vec<Silence> = mine.iter().map(|p| Silence::of(node, p, 0, keep)).collect();
        all.extend(self.progress.values().map(|(node, p, heard)| {
            let since = u64::try_from(now.duration_since(*heard).as_millis()).unwrap_or(0);
            Silence::of(*node, p, since, keep)
        }));
        verdict(&all)
    }

    /// The hang report: which rank went silent first, its timeout and how it was derived,
    /// with every rank's stack.
    pub(super) async fn hang_report(&mut self, first: Silence) -> FailureReport {
        let Silence {
            rank,
            node,
            pid,
            silent_ms,
            started,
            limit,
        } = first;
        let silent = Duration::from_millis(silent_ms);
        let host = self
            .cfg
            .node_names
            .get(node as usize)
            .cloned()
            .unwrap_or_default();
        let what = match limit.how {
            How::Start => "made no progress since it started (--start-timeout)",
            _ => "went silent first",
        };
        // A fixed timeout is the flag's; an `auto` one says how it was derived.
        let derived = match limit.how {
            How::Fixed | How::Start => String::new(),
            _ => format!(" ({limit})"),
        };
        let timeout = pace::secs(limit.timeout_ms);
        say(format!(
            "hang: no rank has made progress for {timeout}{derived}; rank {rank} (pid {pid} on {host}) {what}, {:.0} s ago; collecting stacks",
            silent.as_secs_f64()
        ));
        self.cfg.record(timeline::Hang {
            attempt: self.number,
            rank,
            host: host.clone(),
            pid,
            silent_s: silent.as_secs_f64(),
            started,
            timeout_s: limit.timeout().as_secs_f64(),
            timeout: limit.to_string(),
        });
        let mut stacks = self.collect_stacks().await;
        stacks.sort_by_key(|s| s.rank);
        let mut report = FailureReport::other(
            self.number,
            node,
            &host,
            format!(
                "hang: no rank made progress for {timeout}{derived}; rank {rank} (pid {pid} on {host}) {what}"
            ),
        );
        report.rank = Some(rank);
        report.stacks = stacks;
        report
    }

    /// Every rank's stack: this node's, and each live follower's (`Dump`; a spare answers
    /// with none), waiting for them at most 15 s; a node that sends none by then is named.
    async fn collect_stacks(&mut self) -> Vec<RankStack> {
        broadcast(
            &mut self.followers,
            &Msg::Dump {
                attempt: self.number,
            },
        )
        .await;
        let mut stacks = match self.attempt.as_ref() {
            Some(a) => a.stacks(&self.cfg).await,
            None => Vec::new(),
        };
        let mut waiting = live(&self.followers);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while !waiting.is_empty() {
            let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.rx.recv()).await else {
                break;
            };
            match event {
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::Stacks { stacks: s, .. }),
                    ..
                } => {
                    waiting.remove(&node_rank);
                    stacks.extend(s);
                }
                Event::Peer {
                    node_rank,
                    msg: None,
                    ..
                } => {
                    waiting.remove(&node_rank);
                }
                _ => {}
            }
        }
        for f in self
            .followers
            .iter()
            .filter(|f| waiting.contains(&f.node_rank))
        {
            say(format!(
                "hang: node {} ({}) sent no stacks within 15 s; the report has the other nodes'",
                f.node_rank, f.host
            ));
        }
        stacks
    }

    /// The attempt that ended made progress or not (every node's highest step, its
    /// checkpoint, how long it ran); when a restart would come (`restart`) but restarts in a
    /// row made none, why the job ends here instead (recorded as `restarts_stopped`).
    pub(super) fn stalled(&mut self, restart: bool) -> Option<String> {
        let own = self.attempt.as_ref().and_then(Attempt::highest_step);
        let newest = self.cfg.launch.newest_checkpoint().ok().flatten();
        let newest = newest.and_then(|p| p.to_str().map(str::to_owned));
        let done = Done {
            step: self.stall.heard.max(own),
            checkpoint: newest.is_some() && newest != self.resume,
            ran: Duration::from_secs(unix_now().saturating_sub(self.started_unix)),
        };
        self.stall.close(done, self.number > self.first);
        let why = self.stall.stuck().filter(|_| restart)?;
        let (max, used) = (self.cfg.launch.max_restarts, self.number - self.first);
        self.cfg.record(timeline::RestartsStopped {
            attempt: self.number,
            restarts: self.stall.restarts,
            step: self.stall.best,
            max_restarts: max,
            left: max - used,
        });
        Some(format!(
            "{why}; not restarting again (--max-restarts {max} left {})",
            max - used
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herd_plan::launch::{HangTimeout, Seconds};

    /// `scontrol show job -o` of a job just cancelled with `scancel`, from the test bed
    /// (Slurm 22.05), shortened: once its processes are gone, and while one still runs.
    const CANCELLED: &str = "JobId=1 JobName=wrap UserId=root(0) JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-12-02T01:17:57 StartTime=2026-12-02T01:17:59 EndTime=2026-12-02T01:17:59 PreemptTime=None SuspendTime=None ExcNodeList=(null) NodeList= NumNodes=1";
    const COMPLETING: &str = "JobId=33 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901731 Nice=0 Account=(null) QOS=(null) JobState=COMPLETING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-12-02T01:21:36 EligibleTime=2026-12-02T01:21:36 AccrueTime=2026-12-02T01:21:36 StartTime=2026-12-02T01:21:36 EndTime=2026-12-02T01:21:39 Deadline=N/A PreemptEligibleTime=2026-12-02T01:21:36 PreemptTime=None SuspendTime=None SecsPreSuspend=0 Partition=gpu ExcNodeList=(null) NodeList=gpu-a01 BatchHost=gpu-a01 NumNodes=1";

    /// A rank as the watchdog sees it, under `keep`: silent for `silent_s`, started or
    /// not, with `auto`'s pace (longest gap `gap_s`, warmed up).
    fn rank(keep: &KeepAlive, r: u32, silent_s: u64, started: bool, gap_s: u64) -> Silence {
        let p = RankProgress {
            rank: r,
            pid: 100 + r as i32,
            silent_ms: silent_s * 1000,
            started,
            longest_gap_ms: gap_s * 1000,
            gaps: if started { 500 } else { 0 },
            progress_ms: if started { 3_600_000 } else { 0 },
        };
        Silence::of(r / 2, &p, 0, keep)
    }

    fn keep(hang: HangTimeout, start_s: u64) -> KeepAlive {
        KeepAlive {
            hang_timeout: hang,
            start_timeout: Seconds::from_secs(start_s),
            ..KeepAlive::LAUNCH
        }
    }

    #[test]
    fn a_slow_start_is_no_hang_and_silence_after_progress_is() {
        let k = keep(HangTimeout::Fixed(Seconds::from_secs(5)), 60);
        let rank = |r, silent_s, started| rank(&k, r, silent_s, started, 0);
        // Rank 1 still importing for 20 s while rank 0, which printed, waits for it.
        let slow_start = [rank(0, 19, true), rank(1, 20, false)];
        assert_eq!(verdict(&slow_start), None);
        // Both have trained; rank 1 stuck first, rank 0 blocked in the next collective.
        let stuck = [rank(0, 6, true), rank(1, 8, true)];
        assert_eq!(verdict(&stuck), Some(rank(1, 8, true)));
        // One rank still within the hang timeout holds it off.
        assert_eq!(verdict(&[rank(0, 4, true), rank(1, 8, true)]), None);
        // A start silent past the start timeout is a hang (stuck in init_process_group).
        let never = [rank(0, 61, false), rank(1, 61, false)];
        let first = verdict(&never).expect("a hang");
        assert_eq!((first.rank, first.limit.how), (0, How::Start));
        assert_eq!(verdict(&[]), None);
    }

    #[test]
    fn with_auto_each_rank_is_held_to_its_own_pace() {
        let k = keep(HangTimeout::Auto, 1800);
        // Rank 0 steps every 2 s (the floor, 60 s, holds); rank 1 has shown a 3-minute
        // checkpoint (5 × 180 s = 15 min).
        let (fast, slow) = (|s| rank(&k, 0, s, true, 2), |s| rank(&k, 1, s, true, 180));
        assert_eq!(fast(61).limit.timeout_ms, 60_000);
        assert_eq!(slow(61).limit.timeout_ms, 900_000);
        // Both silent 2 min: rank 1 may be checkpointing again; no hang.
        assert_eq!(verdict(&[fast(120), slow(120)]), None);
        // Both silent past their own: a hang, rank 1 silent first.
        let hung = verdict(&[fast(899), slow(901)]).expect("a hang");
        assert_eq!(hung.rank, 1);
        assert_eq!(
            hung.limit.to_string(),
            "auto: 5 × longest gap 180 s = 900 s"
        );
        // A rank still starting holds it off with the start timeout.
        assert_eq!(verdict(&[fast(901), rank(&k, 2, 901, false, 0)]), None);
    }

    #[test]
    fn only_the_signals_that_end_a_job_are_read_as_the_jobs() {
        let killed = |s: &str| job_signal(Some(&Exit::Signal(s.into())));
        assert_eq!(killed("SIGTERM"), Some(Signal::SIGTERM));
        assert_eq!(killed("SIGINT"), Some(Signal::SIGINT));
        assert_eq!(killed("SIGHUP"), Some(Signal::SIGHUP));
        // A crash, the OOM killer, a code: the worker's own failure.
        for own in ["SIGSEGV", "SIGABRT", "SIGKILL", "SIGUSR1", "not a signal"] {
            assert_eq!(killed(own), None, "{own}");
        }
        // 128 + the signal: a shell whose child it killed, a script that caught it.
        let exited = |code: i32| job_signal(Some(&Exit::Code(code)));
        assert_eq!(exited(143), Some(Signal::SIGTERM));
        assert_eq!(exited(130), Some(Signal::SIGINT));
        assert_eq!(exited(129), Some(Signal::SIGHUP));
        // Any other code, 128 + a crash or SIGKILL (137: the OOM killer under a shell).
        for own in [0, 1, 2, 7, 128, 134, 137, 139, 255, 15, -1, 128 + 64] {
            assert_eq!(exited(own), None, "exit code {own}");
        }
        assert_eq!(job_signal(None), None);
    }

    #[test]
    fn a_worker_killed_while_slurm_cancels_the_job_is_the_cancel() {
        let near = Duration::from_secs(210);
        let read = |line: &str| ended_by_slurm(&JobFacts::parse(line).expect("parses"), near);
        assert_eq!(read(CANCELLED), Some(Cause::Cancelled));
        assert_eq!(read(COMPLETING), Some(Cause::Cancelled));
        let running = COMPLETING.replace("JobState=COMPLETING", "JobState=RUNNING");
        assert_eq!(read(&running), None, "a worker's own failure");
        // Preempted or at its time limit, COMPLETING or not: a stop and a requeue.
        let preempted = COMPLETING.replace("PreemptTime=None", "PreemptTime=2026-12-02T01:21:39");
        assert_eq!(read(&preempted), Some(Cause::Preemption));
        let at_limit = COMPLETING
            .replace("TimeLimit=UNLIMITED", "TimeLimit=00:01:00")
            .replace("RunTime=00:00:03", "RunTime=00:01:00");
        assert_eq!(read(&at_limit), Some(Cause::TimeLimit));
        // Cancelled 57 s before its limit: near it, but SLURM is ending it, not the limit.
        let cancelled_late = COMPLETING.replace("TimeLimit=UNLIMITED", "TimeLimit=00:01:00");
        assert_eq!(read(&cancelled_late), Some(Cause::Cancelled));
        // Still running 57 s before its limit: the job's own --signal (TERM@90).
        let own_signal = cancelled_late.replace("JobState=COMPLETING", "JobState=RUNNING");
        assert_eq!(read(&own_signal), Some(Cause::TimeLimit));
    }
}
