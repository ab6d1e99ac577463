//! The timeline's events as one type: [`Event`], a serde-tagged enum (`"event": "…"`) of
//! one struct per kind, and [`Entry`], a line of the file (the envelope, `time` and
//! `unix_ms`, with its event). The same definitions give [`kinds`], the description that
//! docs/design.md's event table is made of.
//!
//! Older files read: every field of a kind may be missing (its default: `0`, `false`, empty,
//! none), a job id is read as a string or a number ([`JobRef`]), and a line that is not one
//! of these kinds (an unknown kind, a field of another type, not JSON at all) is an
//! [`Event::Other`] that every reader passes over.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::failure::Exit;

/// A job as the timeline names it: SLURM's job id, `"41"`, or `"40_2"` for task 2 of job
/// array 40, as `herd submit` recorded it in the manifest.
///
/// Written as a string. Read from a string or a number: agents before this type wrote a
/// plain job's id as a number (`41`) and an array task's as a string.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JobRef(String);

impl JobRef {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for JobRef {
    fn from(id: String) -> JobRef {
        JobRef(id)
    }
}

impl From<&str> for JobRef {
    fn from(id: &str) -> JobRef {
        JobRef(id.to_owned())
    }
}

impl From<u64> for JobRef {
    fn from(id: u64) -> JobRef {
        JobRef(id.to_string())
    }
}

impl PartialEq<str> for JobRef {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl Serialize for JobRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JobRef, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            Text(String),
            Number(u64),
        }
        Ok(match Either::deserialize(d)? {
            Either::Text(s) => JobRef(s),
            Either::Number(n) => JobRef(n.to_string()),
        })
    }
}

/// One node of an attempt, as the leader's `rendezvous` event lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRanks {
    /// Node rank.
    pub node: u32,
    /// Host name.
    pub host: String,
    /// Global ranks of its workers.
    pub ranks: Vec<u32>,
}

/// What the leader did about a signal (`signal`'s `action`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Action {
    /// Passed on to the workers.
    #[default]
    #[serde(rename = "forward")]
    Forward,
    /// Ends the job: the workers are torn down.
    #[serde(rename = "terminate")]
    Terminate,
    /// The time limit or a preemption is near: the workers are asked to checkpoint and stop.
    #[serde(rename = "stop")]
    Stop,
    /// The job's own code requeued it (SLURM is ending its tasks): taken as the requeue.
    #[serde(rename = "requeued")]
    Requeued,
    /// The workers are stopping already.
    #[serde(rename = "ignored (stopping)")]
    IgnoredStopping,
}

/// Who requeued the job when herd did not (`requeue`'s and `requeue_refused`'s `by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequeuedBy {
    /// The job's own code (Lightning's SLURM plugin, a user's `scontrol requeue`).
    #[serde(rename = "job")]
    Job,
}

/// When a worker exited (`worker_exit`'s `during`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum During {
    /// While the workers were asked to stop: any exit is expected.
    #[serde(rename = "stop")]
    Stop,
}

/// How the leader learnt of a signal it did not receive itself (`signal`'s `seen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeenIn {
    /// A worker died of it (or exited with 128 + it).
    #[serde(rename = "worker_exit")]
    WorkerExit,
}

/// How a field's type reads in the docs' event table.
pub trait FieldType {
    /// `integer`, `string`, `[string]`, …; `?` at the end: may be `null` or left out.
    fn word() -> String;
}

macro_rules! field_types {
    ($($t:ty => $word:expr),* $(,)?) => {
        $(impl FieldType for $t {
            fn word() -> String {
                $word.to_owned()
            }
        })*
    };
}

field_types! {
    u16 => "integer",
    u32 => "integer",
    u64 => "integer",
    i32 => "integer",
    f64 => "number",
    bool => "bool",
    String => "string",
    JobRef => "job id",
    Exit => "exit",
    NodeRanks => "{node, host, ranks}",
    Action => "`forward` \\| `terminate` \\| `stop` \\| `requeued` \\| `ignored (stopping)`",
    RequeuedBy => "`job`",
    During => "`stop`",
    SeenIn => "`worker_exit`",
}

impl<T: FieldType> FieldType for Option<T> {
    fn word() -> String {
        format!("{}?", T::word())
    }
}

impl<T: FieldType> FieldType for Vec<T> {
    fn word() -> String {
        format!("[{}]", T::word())
    }
}

/// One kind of event, as docs/design.md's event table shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    /// Its `event` value.
    pub name: &'static str,
    /// Who writes it.
    pub writer: &'static str,
    /// What it says.
    pub what: &'static str,
    /// Its own fields, in the order they are described.
    pub fields: Vec<Field>,
}

/// One field of a kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its key in the line.
    pub name: &'static str,
    /// Its type, in words ([`FieldType`]).
    pub ty: String,
    /// What it holds.
    pub what: &'static str,
}

/// Defines the kinds: each one's struct, its variant of [`Event`] and its [`Kind`].
macro_rules! events {
    ($(
        $name:ident $tag:literal by $writer:literal : $what:literal {
            $( $(#[$attr:meta])* $field:ident : $ty:ty => $fwhat:literal ),* $(,)?
        }
    )*) => {
        /// One event of the timeline: its kind (the line's `event`) and that kind's fields.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "event")]
        pub enum Event {
            $(
                #[doc = $what]
                #[serde(rename = $tag)]
                $name($name),
            )*
            /// A line that is none of the kinds above (an unknown kind, a field of another
            /// type, not JSON): kept as read, passed over by every reader.
            #[serde(skip)]
            Other(Other),
        }

        $(
            #[doc = $what]
            #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
            #[serde(default)]
            pub struct $name {
                $(
                    $(#[$attr])*
                    #[doc = $fwhat]
                    pub $field: $ty,
                )*
            }

            impl From<$name> for Event {
                fn from(e: $name) -> Event {
                    Event::$name(e)
                }
            }
        )*

        impl Event {
            /// Its kind's name: the line's `event` (an [`Event::Other`]'s as read, if any).
            pub fn kind(&self) -> &str {
                match self {
                    $(Event::$name(_) => $tag,)*
                    Event::Other(o) => o.kind.as_deref().unwrap_or(""),
                }
            }
        }

        /// Every kind of event, in the order docs/design.md's table lists them.
        pub fn kinds() -> Vec<Kind> {
            vec![$(
                Kind {
                    name: $tag,
                    writer: $writer,
                    what: $what,
                    fields: vec![$(
                        Field {
                            name: stringify!($field),
                            ty: <$ty as FieldType>::word(),
                            what: $fwhat,
                        },
                    )*],
                },
            )*]
        }
    };
}

/// A line that is no event this herd knows.
#[derive(Debug, Clone, PartialEq)]
pub struct Other {
    /// Its `event`, when it is a JSON object that has one.
    pub kind: Option<String>,
    /// The line as read.
    pub line: String,
    /// Why it is none of the kinds.
    pub error: String,
}

events! {
    Queued "queued" by "`herd submit`": "sbatch queued the job: one a submission (a sweep's run: its array task)" {
        submission: u32 => "the manifest's submission number: 1, then one more each `herd submit --resume`",
        #[serde(skip_serializing_if = "Option::is_none")]
        job_id: Option<JobRef> => "the job",
    }
    Started "started" by "leader": "the agents started in an allocation: again after each requeue" {
        job_id: Option<JobRef> => "the job, as `herd submit` recorded it (`null`: not a SLURM job)",
        host: String => "the leader's node",
        nodes: Vec<String> => "the allocation's nodes, by node rank",
        requeue: u32 => "SLURM's requeue count",
    }
    Rendezvous "rendezvous" by "leader": "the agents met: which ranks run where, for the attempts that follow" {
        world_size: u32 => "workers in all",
        master_addr: String => "the address the workers meet at",
        #[serde(skip_serializing_if = "Option::is_none")]
        nodes: Option<Vec<NodeRanks>> => "each node running workers, in node-rank order: `{\"node\": 0, \"host\": \"gpu-a01\", \"ranks\": [0, 1]}`",
        #[serde(skip_serializing_if = "Option::is_none")]
        spares: Option<Vec<String>> => "the spare nodes standing by (`--spare-nodes`), when any",
    }
    PreflightFailed "preflight_failed" by "leader": "a node failed a check before the attempt's workers start (`--preflight`): it is blamed" {
        attempt: u32 => "the attempt about to start",
        node: String => "the node's host name",
        check: String => "the check that failed: `python`, `command`, `gpus`, `folders`, `network`, `port`, or `answer` (the node did not answer in time)",
        detail: String => "what is wrong and what to change",
    }
    AttemptStarted "attempt_started" by "leader": "an attempt's workers start" {
        attempt: u32 => "its number K, counted over the experiment (its log folder's)",
        master_port: u16 => "the workers' `MASTER_PORT`",
        resume_from: Option<String> => "the checkpoint it resumes from (`HERD_RESUME_FROM`)",
        #[serde(skip_serializing_if = "Option::is_none")]
        restarts: Option<u32> => "restarts before it in this allocation (left out by the first herd with a timeline)",
        requeue: u32 => "SLURM's requeue count",
        #[serde(skip_serializing_if = "Option::is_none")]
        nodes: Option<Vec<String>> => "the nodes it runs on, when spares are (or were) in play",
        #[serde(skip_serializing_if = "Option::is_none")]
        spares: Option<Vec<String>> => "the spares still standing by, then",
    }
    FirstOutput "first_output" by "leader": "the attempt's first worker line" {
        attempt: u32 => "the attempt",
    }
    Signal "signal" by "leader": "a signal reached an agent, or killed a worker, and what the leader did" {
        attempt: u32 => "the attempt",
        signal: String => "`SIGTERM`, `SIGUSR1`, …",
        action: Action => "what the leader did",
        cause: Option<String> => "what SLURM's facts say it is: `time_limit`, `preemption`, `cancelled`, …",
        node: Option<u32> => "the node rank that got it (`null`: the leader)",
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<RequeuedBy> => "with `requeued`: who requeued the job",
        #[serde(skip_serializing_if = "Option::is_none")]
        seen: Option<SeenIn> => "how the leader learnt of it when no agent received it: a worker's death",
    }
    Warning "warning" by "leader": "the stop begins: the workers are asked to checkpoint and stop" {
        attempt: u32 => "the attempt",
        cause: String => "`time_limit` or `preemption`",
        stop_signal: String => "the signal the workers get",
        grace_s: f64 => "seconds they have before the teardown",
    }
    WorkerExit "worker_exit" by "leader": "a worker exited non-zero, or any exit while stopping" {
        attempt: u32 => "the attempt",
        rank: Option<u32> => "its global rank",
        how: String => "in words: `exited with code 1`, `killed by SIGKILL (…)`, `exited 0`",
        #[serde(skip_serializing_if = "Option::is_none")]
        exit: Option<Exit> => "how, as data (from this herd on; older lines have `how` alone)",
        #[serde(skip_serializing_if = "Option::is_none")]
        during: Option<During> => "`stop` when the workers were asked to stop",
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<u32> => "its node rank, when a follower's",
    }
    Hang "hang" by "leader": "no rank made progress for the hang timeout: the rank that went silent first" {
        attempt: u32 => "the attempt",
        rank: u32 => "the rank",
        host: String => "its node",
        pid: i32 => "its pid there",
        silent_s: f64 => "seconds it had been silent",
        started: bool => "whether it had made progress before",
        timeout_s: f64 => "the timeout, in seconds",
        timeout: String => "how the timeout was derived: `auto: 5 × longest gap 7.5 s = 37.5 s`",
    }
    GpuError "gpu_error" by "leader": "a GPU of the job raised an error while it ran: an Xid in the node's kernel log, or uncorrectable ECC errors counted up between two samples" {
        attempt: u32 => "the attempt",
        node: String => "the node's host name",
        gpu: u32 => "`nvidia-smi`'s index of the GPU on its node",
        uuid: String => "its UUID",
        ranks: Vec<u32> => "the ranks whose device it is",
        #[serde(skip_serializing_if = "Option::is_none")]
        xid: Option<u32> => "the Xid, when the driver raised one",
        what: String => "what it means",
        hardware: bool => "whether the hardware is at fault (the node is blamed when the attempt ends), not the application",
    }
    Failed "failed" by "leader (node 1 for a lost leader)": "the attempt failed" {
        attempt: u32 => "the attempt",
        cause: String => "the failure report's cause line",
        #[serde(skip_serializing_if = "Option::is_none")]
        kind: Option<String> => "the cause's name: `worker_failure`, `node_failure`, `hang`, …",
        #[serde(skip_serializing_if = "Option::is_none")]
        rank: Option<u32> => "the failing worker's global rank, when a worker failed",
        #[serde(skip_serializing_if = "Option::is_none")]
        exit: Option<Exit> => "how that worker ended, when a worker failed",
        #[serde(skip_serializing_if = "Option::is_none")]
        hint: Option<String> => "the likely cause and its fix, when herd knows the failure",
        #[serde(skip_serializing_if = "Option::is_none")]
        node: Option<u32> => "the node rank that wrote it, when not the leader",
    }
    Blame "blame" by "leader": "a node is blamed: it goes into the record of bad nodes (`herd nodes`)" {
        attempt: u32 => "the attempt",
        node: String => "the node's host name",
        kind: String => "`lost` (a crash or a freeze), `failures` (its workers failed twice in a row), `preflight`, or `gpu` (a GPU's hardware fault: an Xid, uncorrectable ECC errors, a lost GPU)",
        why: String => "in words",
    }
    Teardown "teardown" by "leader": "the attempt's workers are gone on every node" {
        attempt: u32 => "the attempt",
    }
    Checkpoint "checkpoint" by "leader": "the attempt left a newer checkpoint than it resumed from" {
        attempt: u32 => "the attempt",
        path: String => "the newest checkpoint",
    }
    Replace "replace" by "leader": "a spare takes a blamed node's place; the next attempt starts at once" {
        attempt: u32 => "the attempt that ended",
        node: String => "the blamed node's host name",
        by: String => "the spare's",
        kind: String => "the blame's kind",
        why: String => "the blame, in words",
        spares_left: u32 => "spares still standing by",
    }
    Restart "restart" by "leader": "the workers restart in the same allocation" {
        attempt: u32 => "the new attempt",
    }
    RestartsStopped "restarts_stopped" by "leader": "no restart though some were left: restarts in a row made no progress" {
        attempt: u32 => "the attempt",
        restarts: u32 => "restarts in a row without progress",
        step: Option<u64> => "the highest step seen",
        max_restarts: u32 => "`--max-restarts`",
        left: u32 => "restarts left",
    }
    Requeue "requeue" by "leader (node 1 for a lost leader)": "the job goes back to the queue" {
        attempt: u32 => "the attempt",
        cause: String => "why: `time_limit`, `preemption`, `node_failure`, …",
        count: u32 => "requeues for this cause so far, this one included",
        budget: u32 => "`--max-requeues`",
        exclude: Vec<String> => "the nodes the next allocation leaves out",
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<RequeuedBy> => "when the job's own code requeued it and herd took that as the requeue",
    }
    RequeueRefused "requeue_refused" by "leader (node 1 for a lost leader)": "no requeue left for the cause: the job ends" {
        attempt: u32 => "the attempt",
        cause: String => "the cause",
        used: u32 => "requeues used for it",
        budget: u32 => "`--max-requeues`",
        #[serde(skip_serializing_if = "Option::is_none")]
        by: Option<RequeuedBy> => "when the job's own code requeued it",
    }
    RequeueFailed "requeue_failed" by "leader (node 1 for a lost leader)": "the requeue herd asked for failed" {
        attempt: u32 => "the attempt",
        error: String => "SLURM's answer",
    }
    Finished "finished" by "leader (node 1 for a lost leader)": "the job ends in this allocation" {
        attempt: u32 => "the last attempt",
        ok: bool => "whether it succeeded",
        #[serde(skip_serializing_if = "Option::is_none")]
        cause: Option<String> => "why not, when not ok",
    }
    Cancelled "cancelled" by "`herd cancel`": "herd cancelled the job" {
        #[serde(skip_serializing_if = "Option::is_none")]
        job_id: Option<JobRef> => "the job",
        by: String => "`herd cancel`",
        user: Option<String> => "the user who cancelled it",
        why: String => "`experiment NAME`, `waits for ID`, …",
    }
    Ended "ended" by "`herd status` (its `--watch` too)": "the scheduler's word on the job's end, written once" {
        #[serde(skip_serializing_if = "Option::is_none")]
        job_id: Option<JobRef> => "the job",
        state: String => "SLURM's final state: `COMPLETED`, `FAILED`, `TIMEOUT`, …",
        exit_code: Option<i32> => "the exit code as a shell gives it",
        reason: Option<String> => "SLURM's reason, when it gave one",
    }
}

impl Event {
    /// The attempt (K of `logs/attempt-K`) the event is about, for the kinds that name one.
    pub fn attempt(&self) -> Option<u32> {
        match self {
            Event::PreflightFailed(e) => Some(e.attempt),
            Event::AttemptStarted(e) => Some(e.attempt),
            Event::FirstOutput(e) => Some(e.attempt),
            Event::Signal(e) => Some(e.attempt),
            Event::Warning(e) => Some(e.attempt),
            Event::WorkerExit(e) => Some(e.attempt),
            Event::Hang(e) => Some(e.attempt),
            Event::GpuError(e) => Some(e.attempt),
            Event::Failed(e) => Some(e.attempt),
            Event::Blame(e) => Some(e.attempt),
            Event::Teardown(e) => Some(e.attempt),
            Event::Checkpoint(e) => Some(e.attempt),
            Event::Replace(e) => Some(e.attempt),
            Event::Restart(e) => Some(e.attempt),
            Event::RestartsStopped(e) => Some(e.attempt),
            Event::Requeue(e) => Some(e.attempt),
            Event::RequeueRefused(e) => Some(e.attempt),
            Event::RequeueFailed(e) => Some(e.attempt),
            Event::Finished(e) => Some(e.attempt),
            Event::Queued(_)
            | Event::Started(_)
            | Event::Rendezvous(_)
            | Event::Cancelled(_)
            | Event::Ended(_)
            | Event::Other(_) => None,
        }
    }

    /// The job the event names, for the kinds that name one.
    pub fn job_id(&self) -> Option<&JobRef> {
        match self {
            Event::Queued(e) => e.job_id.as_ref(),
            Event::Started(e) => e.job_id.as_ref(),
            Event::Cancelled(e) => e.job_id.as_ref(),
            Event::Ended(e) => e.job_id.as_ref(),
            _ => None,
        }
    }
}

/// One line of `timeline.jsonl`: when, and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// RFC 3339, UTC, milliseconds (`2026-11-30T17:40:12.123Z`); every line herd writes has
    /// it.
    pub time: Option<String>,
    /// The same moment as milliseconds since the Unix epoch; every line herd writes has it.
    pub unix_ms: Option<u64>,
    /// The event.
    pub event: Event,
}

/// The envelope's keys, which no kind's field may take.
pub(crate) const TIME: &str = "time";
pub(crate) const UNIX_MS: &str = "unix_ms";
/// The key that names the kind.
pub(crate) const TAG: &str = "event";

impl Entry {
    /// `event` as of now.
    pub fn now(event: Event) -> Entry {
        let (time, unix_ms) = super::clock::now();
        Entry {
            time: Some(time),
            unix_ms: Some(unix_ms),
            event,
        }
    }

    /// One line of the file, read: never an error. A line that is not a JSON object, or
    /// whose event is no kind this herd knows, is an [`Event::Other`] (with the envelope's
    /// fields when it has them).
    pub fn parse(line: &str) -> Entry {
        let other = |kind: Option<String>, error: String| {
            Event::Other(Other {
                kind,
                line: line.to_owned(),
                error,
            })
        };
        let mut fields: Map<String, Value> = match serde_json::from_str(line) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Entry {
                    time: None,
                    unix_ms: None,
                    event: other(None, "not a JSON object".to_owned()),
                }
            }
            Err(e) => {
                return Entry {
                    time: None,
                    unix_ms: None,
                    event: other(None, e.to_string()),
                }
            }
        };
        let time = match fields.remove(TIME) {
            Some(Value::String(t)) => Some(t),
            _ => None,
        };
        let unix_ms = fields.remove(UNIX_MS).and_then(|v| v.as_u64());
        let kind = fields.get(TAG).and_then(Value::as_str).map(str::to_owned);
        let event = match serde_json::from_value::<Event>(Value::Object(fields)) {
            Ok(e) => e,
            Err(e) => other(kind, e.to_string()),
        };
        Entry {
            time,
            unix_ms,
            event,
        }
    }

    /// The entry as one line of the file (no newline): the envelope and the event's fields,
    /// keys in alphabetical order (as herd has always written them). An [`Event::Other`] is
    /// its line as read.
    pub fn line(&self) -> Result<String, serde_json::Error> {
        if let Event::Other(o) = &self.event {
            return Ok(o.line.clone());
        }
        let mut fields = match serde_json::to_value(&self.event)? {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        if let Some(t) = &self.time {
            fields.insert(TIME.into(), t.clone().into());
        }
        if let Some(ms) = self.unix_ms {
            fields.insert(UNIX_MS.into(), ms.into());
        }
        serde_json::to_string(&Value::Object(fields))
    }
}
