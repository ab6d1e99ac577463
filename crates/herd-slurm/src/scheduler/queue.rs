//! The queue as `squeue` shows it: one call for every job herd shows or watches, parsed
//! into [`QueueRow`]s, and what a row means in words ([`reason_words`], [`JobState`]).
//!
//! One call, however many jobs: `squeue --states=all` for this user (or for a list of job
//! ids), which also answers for jobs that ended a few minutes ago (slurmctld keeps them
//! for `MinJobAge`, 300 s by default) with their exit code. Jobs older than that are the
//! experiment folder's to answer; no accounting database is needed.

use std::ffi::OsStr;
use std::time::Duration;

use crate::scheduler::command::{run, SlurmError};
use crate::scheduler::values::parse_duration;

/// The `squeue -O` fields herd reads, each ended by `|`; the name is last, since it may
/// itself contain `|`. A field with a suffix and no width is printed whole.
pub const FORMAT: &str = "JobID:|,ArrayJobID:|,ArrayTaskID:|,State:|,Reason:|,TimeUsed:|,\
TimeLimit:|,NodeList:|,NumNodes:|,exit_code:|,UserName:|,Dependency:|,StartTime:|,Name:|";

/// How many `|`-ended fields [`FORMAT`] has before the name.
const FIELDS_BEFORE_NAME: usize = 13;

/// One job (or one array task, or the not-yet-started rest of an array) in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    /// Its own job id (an array task has its own, e.g. `4243` for `4242_1`).
    pub job_id: String,
    /// The array's job id (the id sbatch printed); equal to `job_id` for a plain job.
    pub array_job_id: String,
    /// The array task (`3`) or the pending rest (`4-9%2`); `None` for a plain job.
    pub array_task: Option<String>,
    /// SLURM's state, e.g. `PENDING`, `RUNNING`, `COMPLETED`, `FAILED`.
    pub state: String,
    /// Why it is in that state (`Priority`, `Resources`, …; `None` when there is none).
    pub reason: Option<String>,
    /// How long it has run.
    pub elapsed: Option<Duration>,
    /// Its time limit; `None` when unlimited.
    pub time_limit: Option<Duration>,
    /// Its nodes as a hostlist (empty while pending).
    pub nodes: String,
    /// How many nodes it has or asks for.
    pub node_count: u32,
    /// How it ended, once it has: `(code, signal)`.
    pub exit: Option<(i32, i32)>,
    /// Its owner.
    pub user: String,
    /// Its dependency as SLURM shows it (`afterok:12(unfulfilled)`); `None` without one.
    pub dependency: Option<String>,
    /// When it started or is expected to (`2026-12-01T14:25:14`, local time).
    pub start_time: Option<String>,
    /// Its name.
    pub name: String,
}

/// Which jobs one query asks for.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// Every job of the user running herd.
    Mine,
    /// These job ids (any user's).
    Jobs(&'a [String]),
}

/// The queue rows of `scope`, finished jobs slurmctld still knows included, with one
/// `squeue` call that may take `timeout`. Job ids slurmctld no longer knows are simply
/// not in the answer.
pub fn query(scope: Scope<'_>, timeout: Duration) -> Result<Vec<QueueRow>, SlurmError> {
    let jobs;
    let mut args: Vec<&OsStr> = vec!["-h".as_ref(), "--states=all".as_ref()];
    match scope {
        Scope::Mine => args.push("--me".as_ref()),
        Scope::Jobs([]) => return Ok(Vec::new()),
        Scope::Jobs(ids) => {
            jobs = format!("--jobs={}", ids.join(","));
            args.push(jobs.as_ref());
        }
    }
    args.extend([OsStr::new("-O"), OsStr::new(FORMAT)]);
    match run("squeue", &args, None, timeout) {
        Ok(text) => parse(&text),
        // One id slurmctld has forgotten makes squeue fail; several just print nothing.
        Err(SlurmError::Failed { stderr, .. }) if stderr.contains("Invalid job id specified") => {
            Ok(Vec::new())
        }
        Err(e) => Err(e),
    }
}

/// squeue's `exit_code` field as `(code, signal)`. Slurm 22.05 prints the raw wait status
/// (`768`: the code in the high byte, the signal in the low bits); 24.11 and 26.05 print
/// `CODE:SIGNAL` (`3:0`, `0:15`), as `scontrol show job` does (docs/slurm.md).
pub fn parse_exit(field: &str) -> Option<(i32, i32)> {
    match field.split_once(':') {
        Some((code, signal)) => Some((code.parse().ok()?, signal.parse().ok()?)),
        None => {
            let w = field.parse::<i32>().ok()?;
            Some(((w >> 8) & 0xff, w & 0x7f))
        }
    }
}

/// Rows of `squeue -h -O FORMAT` output; a line with too few fields is an error naming it.
pub fn parse(text: &str) -> Result<Vec<QueueRow>, SlurmError> {
    let bad = |line: &str| SlurmError::Output {
        command: "squeue",
        output: line.chars().take(300).collect(),
    };
    let mut rows = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = line.splitn(FIELDS_BEFORE_NAME + 1, '|');
        let mut f: Vec<&str> = fields.by_ref().take(FIELDS_BEFORE_NAME).collect();
        let name = fields.next().ok_or_else(|| bad(line))?;
        if f.len() != FIELDS_BEFORE_NAME {
            return Err(bad(line));
        }
        for v in &mut f {
            *v = v.trim();
        }
        let opt = |v: &str| {
            (!v.is_empty() && !matches!(v, "N/A" | "(null)" | "None")).then(|| v.to_owned())
        };
        let job_id = f[0].to_owned();
        if job_id.is_empty() || !job_id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(line));
        }
        let exit = parse_exit(f[9]);
        rows.push(QueueRow {
            array_job_id: opt(f[1]).unwrap_or_else(|| job_id.clone()),
            job_id,
            array_task: opt(f[2]),
            state: f[3].to_owned(),
            reason: opt(f[4]),
            elapsed: parse_duration(f[5]),
            time_limit: parse_duration(f[6]),
            nodes: opt(f[7]).unwrap_or_default(),
            node_count: f[8].parse().unwrap_or(0),
            exit,
            user: f[10].to_owned(),
            dependency: opt(f[11]),
            start_time: opt(f[12]),
            name: name.strip_suffix('|').unwrap_or(name).to_owned(),
        });
    }
    Ok(rows)
}

/// What a SLURM job state means to the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState {
    /// Waiting to start (also after a requeue).
    Queued,
    /// Running (also completing: its processes are being cleaned up).
    Running,
    /// Suspended or stopped by an administrator.
    Suspended,
    /// Ended with exit code 0.
    Finished,
    /// Ended otherwise: non-zero exit, time limit, node failure, out of memory, …
    Failed,
    /// Cancelled (by `scancel`, `herd cancel` or an administrator).
    Cancelled,
}

impl JobState {
    /// The state SLURM's `state` text stands for; unknown states count as running, the
    /// state a job that has not ended is in.
    pub fn of(state: &str) -> JobState {
        match state {
            "PENDING" | "REQUEUED" | "REQUEUE_FED" | "REQUEUE_HOLD" | "PREEMPTED"
            | "RESV_DEL_HOLD" | "CONFIGURING" => JobState::Queued,
            "SUSPENDED" | "STOPPED" => JobState::Suspended,
            "COMPLETED" => JobState::Finished,
            "CANCELLED" => JobState::Cancelled,
            "FAILED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY" | "BOOT_FAIL" | "DEADLINE"
            | "REVOKED" | "SPECIAL_EXIT" => JobState::Failed,
            _ => JobState::Running,
        }
    }

    /// Whether the job has ended for good.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            JobState::Finished | JobState::Failed | JobState::Cancelled
        )
    }

    /// The word herd shows.
    pub fn word(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Suspended => "suspended",
            JobState::Finished => "finished",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }
}

impl QueueRow {
    /// Its id as squeue's `%i` shows it, the form `--dependency` and `scancel` take:
    /// `4242`, an array task's `4242_3`, the array's pending rest `4242_[4-9%2]`.
    pub fn id(&self) -> String {
        match &self.array_task {
            None => self.job_id.clone(),
            Some(t) if t.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{}_{t}", self.array_job_id)
            }
            Some(t) => format!("{}_[{t}]", self.array_job_id),
        }
    }

    /// What its state means.
    pub fn job_state(&self) -> JobState {
        JobState::of(&self.state)
    }

    /// The exit code a shell would give for how it ended: the code, 128 + the signal when
    /// a signal ended it, and at least 1 when SLURM calls the job failed or cancelled (a
    /// job killed at its time limit may show code 0).
    pub fn exit_code(&self) -> Option<i32> {
        let state = self.job_state();
        if !state.is_final() {
            return None;
        }
        let (code, signal) = self.exit.unwrap_or((0, 0));
        let code = if signal != 0 { 128 + signal } else { code };
        Some(if state != JobState::Finished && code == 0 {
            1
        } else {
            code
        })
    }

    /// The ids this job waits for, from its dependency (`afterok:12_*(unfulfilled),afterany:13`).
    pub fn depends_on(&self) -> Vec<String> {
        let Some(dep) = &self.dependency else {
            return Vec::new();
        };
        dep.split([',', '?'])
            .flat_map(|part| part.split(':').skip(1))
            .filter_map(|id| {
                let id: String = id.chars().take_while(char::is_ascii_digit).collect();
                (!id.is_empty()).then_some(id)
            })
            .collect()
    }
}

/// A pending (or ended) job's reason in plain words, with SLURM's own code in brackets
/// so it can be looked up; `None` for no reason.
pub fn reason_words(reason: &str) -> String {
    let words = match reason {
        "Priority" => "jobs of higher priority come first",
        "Resources" => "waiting for free nodes",
        "Dependency" => "waiting for the job it depends on",
        "DependencyNeverSatisfied" => {
            "will never start: the job it depends on did not end as required; cancel it"
        }
        "BeginTime" => "waiting for its begin time",
        "JobHeldUser" => "held by you (scontrol release ID)",
        "JobHeldAdmin" => "held by an administrator",
        "ReqNodeNotAvail" => "a node it needs is down, drained or reserved",
        "NodeDown" => "a node it needs is down",
        "PartitionDown" => "its partition is down",
        "PartitionInactive" => "its partition is inactive",
        "PartitionNodeLimit" => "asks for more nodes than its partition allows now",
        "PartitionTimeLimit" => "asks for more time than its partition allows",
        "JobArrayTaskLimit" => "the array's limit of tasks running at once is reached",
        "Reservation" => "waiting for its reservation",
        "Licenses" => "waiting for a license",
        "BadConstraints" => "its constraints cannot be met",
        "Cleaning" => "requeued, still cleaning up its last run",
        "Prolog" => "its prolog is running",
        "launch failed requeued held" => {
            "its launch failed; requeued and held (scontrol release ID)"
        }
        "InvalidAccount" => "its account is not valid",
        "InvalidQOS" => "its QOS is not valid",
        "QOSJobLimit" | "AssociationJobLimit" => {
            "you have as many jobs running as your limit allows"
        }
        "AssociationResourceLimit" => "your account's resource limit is reached",
        "AssociationTimeLimit" => "your account's time limit is reached",
        "NonZeroExitCode" => "exited with a non-zero code",
        "TimeLimit" => "reached its time limit",
        "NodeFail" => "a node failed",
        "OutOfMemory" => "ran out of memory",
        "Prolog failed" => "its prolog failed",
        _ if reason.starts_with("QOSGrp") => {
            "a limit your QOS puts on all jobs together is reached"
        }
        _ if reason.starts_with("QOSMax") => "asks for more than your QOS allows a job",
        _ if reason.starts_with("AssocGrp") => {
            "a limit your account puts on all jobs together is reached"
        }
        _ if reason.starts_with("AssocMax") => "asks for more than your account allows a job",
        _ => return reason.to_owned(),
    };
    format!("{words} ({reason})")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real `squeue -h --states=all --me -O FORMAT` output from the test bed: a failed job,
    /// an array (two tasks ended, two running, the rest pending), a dependency that will
    /// never be met, and a name with `|` in it.
    const SAMPLE: &str = "\
1|1|N/A|FAILED|NonZeroExitCode|0:02|1:00|gpu-a01|1|768|root|(null)|2026-12-01T14:25:14|j.sh|
8|5|0|FAILED|NonZeroExitCode|0:02|1:00|gpu-a01|1|768|root|(null)|2026-12-01T14:25:20|j.sh|
5|5|4-9%2|PENDING|JobArrayTaskLimit|0:00|1:00||1|0|root|(null)|N/A|j.sh|
7|7|N/A|PENDING|DependencyNeverSatisfied|0:00|UNLIMITED||1|0|root|afterok:1(failed)|N/A|j.sh|
10|5|2|RUNNING|None|1-02:03:04|2-00:00:00|gpu-a[01-02]|2|0|root|(null)|2026-12-01T14:25:24|j.sh|
4|4|N/A|PENDING|BeginTime|0:00|1:00||1|0|root|(null)|2026-12-01T14:35:23|a-very-long-name-with|bar|
12|12|N/A|CANCELLED|None|0:05|1:00|gpu-a03|1|15|root|(null)|2026-12-01T14:25:24|x|
";

    #[test]
    fn parses_every_field_of_real_output() {
        let rows = parse(SAMPLE).expect("parses");
        assert_eq!(rows.len(), 7);
        let failed = &rows[0];
        assert_eq!(failed.job_state(), JobState::Failed);
        assert_eq!(failed.exit, Some((3, 0)));
        assert_eq!(failed.exit_code(), Some(3));
        assert_eq!(failed.elapsed, Some(Duration::from_secs(2)));
        assert_eq!(failed.time_limit, Some(Duration::from_secs(60)));
        assert_eq!(failed.nodes, "gpu-a01");
        assert_eq!(failed.reason.as_deref(), Some("NonZeroExitCode"));
        let task = &rows[1];
        assert_eq!(
            (task.job_id.as_str(), task.array_job_id.as_str()),
            ("8", "5")
        );
        assert_eq!(task.array_task.as_deref(), Some("0"));
        assert_eq!(rows[2].array_task.as_deref(), Some("4-9%2"));
        assert_eq!(rows[2].start_time, None);
        let never = &rows[3];
        assert_eq!(never.time_limit, None, "UNLIMITED");
        assert_eq!(never.depends_on(), ["1"]);
        assert_eq!(never.job_state(), JobState::Queued);
        assert_eq!(never.exit_code(), None, "not ended");
        let running = &rows[4];
        assert_eq!(running.elapsed, Some(Duration::from_secs(93_784)));
        assert_eq!(running.time_limit, Some(Duration::from_secs(172_800)));
        assert_eq!(running.reason, None);
        assert_eq!(running.node_count, 2);
        assert_eq!(running.job_state(), JobState::Running);
        assert_eq!(rows[5].name, "a-very-long-name-with|bar");
        let cancelled = &rows[6];
        assert_eq!(cancelled.exit, Some((0, 15)));
        assert_eq!(cancelled.exit_code(), Some(143), "128 + SIGTERM");
    }

    /// The same kinds of rows from Slurm 26.05.5 (`testbed/up --slurm 26.05`), whose
    /// `exit_code` is `CODE:SIGNAL` where 22.05's is a raw wait status.
    const SAMPLE_26_05: &str = "\
119|119|N/A|FAILED|NonZeroExitCode|0:01|5:00|gpu-a01|1|3:0|root|(null)|2026-12-05T13:35:16|three|
118|118|N/A|CANCELLED|None|0:01|5:00|gpu-a[01-02]|2|1:0|root|(null)|2026-12-05T13:35:08|victim|
64|64|N/A|CANCELLED|DependencyNeverSatisfied|0:00|UNLIMITED||1|0:0|root|afterok:63(failed)|2026-12-05T13:35:02|second|
66|66|N/A|CANCELLED|JobHeldUser|0:00|5:00||1|0:0|root|(null)|2026-12-05T13:35:06|sweep-00|
";

    #[test]
    fn newer_releases_exit_codes_read_as_22_05s() {
        let rows = parse(SAMPLE_26_05).expect("parses");
        assert_eq!(rows[0].exit, Some((3, 0)));
        assert_eq!(rows[0].exit_code(), Some(3), "as 22.05's 768");
        assert_eq!(rows[1].exit, Some((1, 0)));
        assert_eq!(rows[1].exit_code(), Some(1));
        assert_eq!(rows[2].depends_on(), ["63"]);
        assert_eq!(rows[3].exit_code(), Some(1), "cancelled: never 0");
        assert_eq!(parse_exit("0:15"), Some((0, 15)));
        assert_eq!(parse_exit("768"), Some((3, 0)));
        assert_eq!(parse_exit("15"), Some((0, 15)));
        assert_eq!(parse_exit("N/A"), None);
        assert_eq!(parse_exit(""), None);
    }

    #[test]
    fn ids_are_shown_as_squeue_shows_them() {
        let ids: Vec<String> = parse(SAMPLE)
            .expect("parses")
            .iter()
            .map(QueueRow::id)
            .collect();
        assert_eq!(ids, ["1", "5_0", "5_[4-9%2]", "7", "5_2", "4", "12"]);
    }

    #[test]
    fn a_short_line_is_an_error_naming_it() {
        let err = parse("12|12|N/A|RUNNING\n").expect_err("too few fields");
        assert!(err.to_string().contains("12|12|N/A|RUNNING"), "{err}");
        let err = parse("x|1|N/A|RUNNING|None|0:00|1:00||1|0|u|(null)|N/A|n|\n").expect_err("id");
        assert!(
            err.to_string().contains("unexpected squeue output"),
            "{err}"
        );
    }

    #[test]
    fn a_failed_or_cancelled_job_never_exits_0() {
        let mut row = parse(SAMPLE).expect("parses").remove(0);
        row.state = "TIMEOUT".into();
        row.exit = Some((0, 0));
        assert_eq!(row.exit_code(), Some(1));
        row.state = "COMPLETED".into();
        assert_eq!(row.exit_code(), Some(0));
    }

    #[test]
    fn dependencies_name_every_job_waited_for() {
        let mut row = parse(SAMPLE).expect("parses").remove(0);
        row.dependency = Some("afterok:12_*(unfulfilled),afterany:13:14(unfulfilled)".into());
        assert_eq!(row.depends_on(), ["12", "13", "14"]);
        row.dependency = Some("singleton(unfulfilled)".into());
        assert!(row.depends_on().is_empty());
    }

    #[test]
    fn reasons_are_words_with_the_code_kept() {
        assert_eq!(
            reason_words("Resources"),
            "waiting for free nodes (Resources)"
        );
        assert!(reason_words("QOSMaxGRESPerUser").starts_with("asks for more than your QOS"));
        assert!(reason_words("AssocGrpGRES").contains("(AssocGrpGRES)"));
        assert_eq!(reason_words("SomethingNew"), "SomethingNew");
        for state in ["PENDING", "REQUEUED", "PREEMPTED"] {
            assert_eq!(JobState::of(state), JobState::Queued, "{state}");
        }
        assert_eq!(JobState::of("COMPLETING"), JobState::Running);
        assert!(JobState::of("NODE_FAIL").is_final());
    }
}
