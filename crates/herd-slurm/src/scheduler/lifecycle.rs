//! A running job's end, as the scheduler tells it: why an attempt stops ([`Cause`]), the
//! facts that decide it ([`JobFacts`], from `scontrol show job`), and the requeue that
//! brings the job back ([`requeue`]).
//!
//! A cause is decided from facts, never from timing guesses alone: slurmctld marks a job it
//! preempts (`PreemptTime`), cancels (`JobState=CANCELLED`) or requeues (`PENDING`,
//! `REQUEUED`) before it signals the job's tasks, and its time left is its `TimeLimit` less
//! its `RunTime`.

use std::ffi::OsStr;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::scheduler::command::{run, show_job, SlurmError, QUERY_TIMEOUT};
use crate::scheduler::fields::fields;
use crate::scheduler::values::parse_duration;

/// Why an attempt ended (or is ending): written into the timeline, the manifest and the
/// failure report; the requeue budget is counted per cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The job's time limit is near (herd's warning) or reached.
    TimeLimit,
    /// slurmctld preempts the job for a higher-priority one.
    Preemption,
    /// A node of the job stopped answering (crashed, frozen, cut off).
    NodeFailure,
    /// A worker exited non-zero or was killed by a signal.
    WorkerFailure,
    /// No rank made progress for the hang timeout.
    Hang,
    /// The user (or an admin) cancelled the job, or sent SIGTERM/SIGINT/SIGHUP.
    Cancelled,
    /// The job was requeued by someone other than herd (its own code, a user's `scontrol
    /// requeue`) with no time limit or preemption near.
    Requeued,
}

impl Cause {
    /// Every cause, in the order the docs list them.
    pub const ALL: [Cause; 7] = [
        Cause::TimeLimit,
        Cause::Preemption,
        Cause::NodeFailure,
        Cause::WorkerFailure,
        Cause::Hang,
        Cause::Cancelled,
        Cause::Requeued,
    ];

    /// The causes a requeue budget is counted for, in the order the docs list them.
    pub const REQUEUED: [Cause; 4] = [
        Cause::TimeLimit,
        Cause::Preemption,
        Cause::NodeFailure,
        Cause::Requeued,
    ];

    /// Its name in files and messages (`time_limit`).
    pub fn name(self) -> &'static str {
        match self {
            Cause::TimeLimit => "time_limit",
            Cause::Preemption => "preemption",
            Cause::NodeFailure => "node_failure",
            Cause::WorkerFailure => "worker_failure",
            Cause::Hang => "hang",
            Cause::Cancelled => "cancelled",
            Cause::Requeued => "requeued",
        }
    }

    /// The cause named `name` ([`Cause::name`]).
    pub fn from_name(name: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.name() == name)
    }

    /// In words, for messages ("time limit").
    pub fn words(self) -> &'static str {
        match self {
            Cause::TimeLimit => "time limit",
            Cause::Preemption => "preemption",
            Cause::NodeFailure => "node failure",
            Cause::WorkerFailure => "worker failure",
            Cause::Hang => "hang",
            Cause::Cancelled => "cancelled",
            Cause::Requeued => "the job's own requeue",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `scontrol show job` says about a job, as far as its end is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    /// `JobState` (`RUNNING`, `CANCELLED`, `PENDING`, …).
    pub state: String,
    /// `TimeLimit` less `RunTime`; `None` without a limit (`UNLIMITED`) or when either is
    /// missing.
    pub time_left: Option<Duration>,
    /// `PreemptTime` is set: slurmctld has chosen the job for preemption.
    pub preempted: bool,
    /// `Restarts`: how often the job was requeued.
    pub restarts: Option<u32>,
    /// `ExcNodeList`: the nodes the job leaves out (a hostlist expression), when any.
    pub excluded: Option<String>,
}

impl JobFacts {
    /// Parse the one line of `scontrol show job -o ID` (an array's first task when it
    /// prints several); a key printed twice counts where it is first.
    pub fn parse(text: &str) -> Option<JobFacts> {
        let line = text.lines().find(|l| !l.trim().is_empty())?;
        let fields = fields(line);
        let field = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|&(_, v)| v);
        let state = field("JobState")?.to_owned();
        let limit = field("TimeLimit").and_then(parse_duration);
        let run = field("RunTime").and_then(parse_duration);
        let time_left = match (limit, run) {
            (Some(l), Some(r)) => Some(l.saturating_sub(r)),
            _ => None,
        };
        let preempted = field("PreemptTime").is_some_and(|v| !matches!(v, "None" | "Unknown" | ""));
        let restarts = field("Restarts").and_then(|v| v.parse().ok());
        let excluded = field("ExcNodeList")
            .filter(|v| !v.is_empty() && *v != "(null)")
            .map(str::to_owned);
        Some(JobFacts {
            state,
            time_left,
            preempted,
            restarts,
            excluded,
        })
    }

    /// Ask slurmctld about job `id`.
    pub fn query(id: &str) -> Result<JobFacts, SlurmError> {
        let text = show_job(id)?;
        JobFacts::parse(&text).ok_or_else(|| SlurmError::Output {
            command: "scontrol",
            output: text.trim().chars().take(300).collect(),
        })
    }

    /// Whether the job was requeued since an allocation whose requeue count
    /// (`SLURM_RESTART_COUNT`) was `restarts` started: by herd, the job's own code
    /// (Lightning's SLURM auto-requeue) or a user. slurmctld counts the requeue (`Restarts`)
    /// and shows the job `REQUEUED`, then `PENDING`, while its tasks are still being ended.
    pub fn requeued_since(&self, restarts: u32) -> bool {
        self.restarts.is_some_and(|r| r > restarts)
            || self.state.starts_with("REQUEUE")
            || self.state.starts_with("PENDING")
    }

    /// Why the job's tasks were just signalled, from these facts: preempted (slurmctld
    /// marked it), cancelled (its state says so), at its time limit (at most `near` left),
    /// or `None`: none of these, a signal the user sent.
    pub fn cause(&self, near: Duration) -> Option<Cause> {
        if self.preempted || self.state.starts_with("PREEMPT") {
            return Some(Cause::Preemption);
        }
        if self.state.starts_with("CANCEL") {
            return Some(Cause::Cancelled);
        }
        if self.state.starts_with("TIMEOUT") || self.time_left.is_some_and(|t| t <= near) {
            return Some(Cause::TimeLimit);
        }
        None
    }
}

/// Requeue job `id` (its own id: an array task's, never the whole array's), so that it
/// runs again: leaving out `exclude` (nodes that failed), eligible `start_in` from now.
///
/// slurmctld holds a requeued job back for its credential lifetime (120 s on most
/// clusters) once it has left its nodes, unless the job's begin time is already in the
/// future then; so the begin time is set right after the requeue, while the job is still
/// completing. Changing the excluded nodes or the begin time is the job owner's right.
pub fn requeue(id: &str, exclude: &[String], start_in: Duration) -> Result<(), SlurmError> {
    let facts = || {
        let text = scontrol_surviving(&["show", "job", "-o", id])?;
        JobFacts::parse(&text).ok_or_else(|| SlurmError::Output {
            command: "scontrol",
            output: text.trim().chars().take(300).collect(),
        })
    };
    match run(
        "scontrol",
        &["requeue".as_ref(), id.as_ref()],
        None,
        QUERY_TIMEOUT,
    ) {
        Ok(_) => {}
        // The requeue ends the job's steps at once: `scontrol requeue` itself, a process
        // of the job, may be killed before it prints its answer. The job's state says:
        // a requeued job completes (or already waits) instead of running.
        Err(e @ SlurmError::Failed { .. }) if killed(&e) => {
            let requeued = |state: &str| {
                ["COMPLETING", "PENDING", "REQUEUE"]
                    .iter()
                    .any(|s| state.starts_with(s))
            };
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let state = facts()?.state;
                if requeued(&state) {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    return Err(SlurmError::Output {
                        command: "scontrol",
                        output: format!(
                            "`scontrol requeue {id}` was killed ({e}) and the job is still {state}"
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(e) => return Err(e),
    }
    make_eligible(id, exclude, start_in)
}

/// After a requeue (herd's own, or one the job did itself): leave out `exclude` (nodes
/// that failed, with those the job excluded already) and make the job eligible `start_in`
/// from now, not after the credential lifetime slurmctld otherwise holds it back for: call
/// it while the job is still completing on its nodes.
pub fn make_eligible(id: &str, exclude: &[String], start_in: Duration) -> Result<(), SlurmError> {
    let job = format!("JobId={id}");
    if !exclude.is_empty() {
        let nodes = format!("ExcNodeList={}", exclude.join(","));
        scontrol_surviving(&["update", &job, &nodes])?;
    }
    let start = format!("StartTime=now+{}", start_in.as_secs().max(1));
    scontrol_surviving(&["update", &job, &start]).map(drop)
}

/// How long from a requeue the job is made eligible: 5 s, enough for a job whose processes
/// end at SLURM's SIGTERM to leave its nodes; after a lost node, whose processes (frozen,
/// or stuck in the kernel) end only at the SIGKILL that follows KillWait later, 5 s more
/// than the cluster's KillWait (`scontrol show config`; 30 s, SLURM's default, when it
/// does not answer). A begin time that passes while the job still completes would let
/// slurmctld hold it back for its credential lifetime instead (about two minutes).
pub fn requeue_delay(lost_nodes: bool) -> Duration {
    const LEFT: Duration = Duration::from_secs(5);
    if !lost_nodes {
        return LEFT;
    }
    let kill_wait = crate::scheduler::command::show_config()
        .ok()
        .and_then(|text| kill_wait(&text))
        .unwrap_or(Duration::from_secs(30));
    LEFT + kill_wait
}

/// `KillWait` from `scontrol show config` (`KillWait                = 5 sec`).
fn kill_wait(config: &str) -> Option<Duration> {
    config.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == "KillWait").then_some(())?;
        let secs = value.split_whitespace().next()?.parse().ok()?;
        Some(Duration::from_secs(secs))
    })
}

/// End process `pid` (a replaced node's agent, frozen or failing) on node `host` of job
/// `id`, by SIGKILL from a step of the job on that node (`srun --overlap`): no other node
/// can signal it, and its srun task must end for the job's step to end. Its workers die
/// with it (their parent-death signal). A node that is dead already cannot be reached:
/// the error says so, and SLURM ends that task when it gives the node up.
pub fn kill_on_node(id: &str, host: &str, pid: u32) -> Result<(), SlurmError> {
    let args = [
        format!("--jobid={id}"),
        "--overlap".to_owned(),
        "--mem=0".to_owned(),
        format!("--nodelist={host}"),
        "--nodes=1".to_owned(),
        "--ntasks=1".to_owned(),
        // Said, not inherited: from Slurm 23.11 a step in a job whose two CPU variables
        // disagree (the controller raised cpus-per-task) fails unless it gives its own.
        "--cpus-per-task=1".to_owned(),
        "--quiet".to_owned(),
        "kill".to_owned(),
        "-KILL".to_owned(),
        pid.to_string(),
    ];
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    run("srun", &args, None, Duration::from_secs(20)).map(drop)
}

/// Whether a command was killed by a signal.
fn killed(e: &SlurmError) -> bool {
    matches!(e, SlurmError::Failed { status, .. }
        if std::os::unix::process::ExitStatusExt::signal(status).is_some())
}

/// `scontrol ARGS` from inside a job that is being requeued: every process of the job, a
/// `scontrol` started a moment later too, gets SIGTERM once as its steps end (SIGKILL only
/// after KillWait); the caller handles it, and a `scontrol` it kills is run again.
fn scontrol_surviving(args: &[&str]) -> Result<String, SlurmError> {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let mut tries = 0;
    loop {
        match run("scontrol", &args, None, QUERY_TIMEOUT) {
            Err(e) if killed(&e) && tries < 25 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_wait_is_read_from_the_config() {
        let config = "Configuration data as of 2026-12-03T04:20:00\nJobCredentialPrivateKey = (null)\nKillOnBadExit           = 0\nKillWait                = 5 sec\nLaunchType              = launch/slurm\n";
        assert_eq!(kill_wait(config), Some(Duration::from_secs(5)));
        assert_eq!(kill_wait("KillOnBadExit = 0\n"), None);
        assert_eq!(kill_wait("KillWait = soon\n"), None);
    }

    const RUNNING: &str = "JobId=7 JobName=train UserId=root(0) JobState=RUNNING Reason=None Restarts=0 RunTime=00:00:40 TimeLimit=00:02:00 TimeMin=N/A SubmitTime=2026-12-01T11:42:28 PreemptEligibleTime=2026-12-01T11:42:28 PreemptTime=None SuspendTime=None ExcNodeList=(null)";

    #[test]
    fn a_running_job_has_its_time_left_and_no_cause() {
        let f = JobFacts::parse(RUNNING).expect("parses");
        assert_eq!(f.state, "RUNNING");
        assert_eq!(f.time_left, Some(Duration::from_secs(80)));
        assert!(!f.preempted);
        assert_eq!(f.restarts, Some(0));
        assert_eq!(f.excluded, None);
        let excluding = RUNNING.replace("ExcNodeList=(null)", "ExcNodeList=gpu-a[01-02]");
        assert_eq!(
            JobFacts::parse(&excluding)
                .expect("parses")
                .excluded
                .as_deref(),
            Some("gpu-a[01-02]")
        );
        assert_eq!(f.cause(Duration::from_secs(30)), None, "a user's signal");
        assert_eq!(f.cause(Duration::from_secs(80)), Some(Cause::TimeLimit));
    }

    #[test]
    fn preemption_and_cancellation_are_read_from_the_job() {
        let pre = RUNNING.replace("PreemptTime=None", "PreemptTime=2026-12-01T11:43:00");
        assert_eq!(
            JobFacts::parse(&pre).expect("parses").cause(Duration::ZERO),
            Some(Cause::Preemption)
        );
        let cancelled = RUNNING.replace("JobState=RUNNING", "JobState=CANCELLED");
        assert_eq!(
            JobFacts::parse(&cancelled)
                .expect("parses")
                .cause(Duration::from_secs(3600)),
            Some(Cause::Cancelled),
            "cancelled wins over a near time limit"
        );
        let unlimited = RUNNING.replace("TimeLimit=00:02:00", "TimeLimit=UNLIMITED");
        let f = JobFacts::parse(&unlimited).expect("parses");
        assert_eq!(f.time_left, None);
        assert_eq!(f.cause(Duration::from_secs(3600)), None);
        assert_eq!(
            JobFacts::parse("slurm_load_jobs error: Invalid job id"),
            None
        );
    }

    #[test]
    fn causes_have_stable_names() {
        for c in Cause::ALL {
            assert_eq!(Cause::from_name(c.name()), Some(c));
            assert_eq!(
                serde_json::to_value(c).expect("serializes"),
                serde_json::Value::from(c.name())
            );
        }
    }
}
