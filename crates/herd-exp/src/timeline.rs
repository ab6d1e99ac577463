//! The experiment's event timeline, `timeline.jsonl`: one JSON object a line, appended by
//! whoever knows the moment — `herd submit` when it queues a job, the leader agent as the
//! job runs, `herd cancel` and `herd status` when they learn its end — and never rewritten.
//!
//! Every kind of event and its fields are one type, [`Event`] (a serde-tagged enum: the
//! line's `event` names the kind), in an [`Entry`] with the envelope every line has: `time`
//! (RFC 3339, UTC, milliseconds) and `unix_ms`. [`append`] writes one, [`read`] reads them
//! all back; docs/design.md's event table is [`table`], made from [`kinds`] (a test keeps
//! the two equal).
//!
//! Each line is one `write` to a file opened with `O_APPEND`, so lines of two writers never
//! interleave on a local file system (on NFS, appends of two clients may; here the writers
//! of one moment are one process).

use std::io::{self, Write as _};
use std::path::Path;

use crate::ExperimentDir;

pub(crate) mod clock;
mod event;
mod table;

pub use clock::{now, parse_rfc3339, rfc3339};
pub use event::{
    kinds, Action, AttemptStarted, Blame, Cancelled, Checkpoint, During, Ended, Entry, Event,
    Failed, Field, FieldType, Finished, FirstOutput, GpuError, Hang, JobRef, Kind, NodeRanks,
    Other, PreflightFailed, Queued, Rendezvous, Replace, Requeue, RequeueFailed, RequeueRefused,
    RequeuedBy, Restart, RestartsStopped, SeenIn, Signal, Started, Teardown, Warning, WorkerExit,
};
pub use table::table;

/// Appends `event`, as of now, to `<exp_dir>/timeline.jsonl`, creating it.
pub fn append(exp_dir: &Path, event: impl Into<Event>) -> io::Result<()> {
    let mut text = Entry::now(event.into()).line().map_err(io::Error::other)?;
    text.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ExperimentDir::new(exp_dir).timeline())?
        .write_all(text.as_bytes())
}

/// Every line of `<exp_dir>/timeline.jsonl`, in order (none when it does not exist). A line
/// that is not an event this herd knows — half written, not JSON, not UTF-8, an unknown
/// kind — is an [`Event::Other`]: readers pass over it, as over blank lines, which are left
/// out. Only a file that cannot be read is an error.
pub fn read(exp_dir: &Path) -> io::Result<Vec<Entry>> {
    let text = match std::fs::read(ExperimentDir::new(exp_dir).timeline()) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(text
        .split(|&b| b == b'\n')
        .map(String::from_utf8_lossy)
        .filter(|l| !l.trim().is_empty())
        .map(|l| Entry::parse(&l))
        .collect())
}

#[cfg(test)]
mod tests;
