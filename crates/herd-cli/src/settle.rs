//! `herd settle -- srun …` (hidden): the batch script of a job with spare nodes runs its
//! agents' step through it. A spare's replacement ends the replaced node's agent (a frozen
//! or dead node's cannot end by itself), and srun then exits non-zero although the job
//! finished: herd settle passes every signal the batch shell gets on to srun, waits for it,
//! and exits 0 when the experiment's timeline says this allocation finished (or requeued
//! the job); otherwise with srun's own status, as `exec srun` would.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use clap::Args;
use herd_agent::signals::Forwarder;
use herd_slurm::worker::vars::HERD_EXP_DIR;

use crate::{CliError, ExitStatus};

/// `herd settle` arguments.
#[derive(Debug, Args)]
pub struct SettleArgs {
    /// The step to run (`srun …`), as given.
    #[arg(required = true, last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Run `herd settle`.
pub fn run(args: SettleArgs) -> Result<ExitStatus, CliError> {
    let forwarder =
        Forwarder::install().map_err(CliError::system("cannot install the signal handlers"))?;
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| CliError::Usage("herd settle needs a command".into()))?;
    let mut child = std::process::Command::new(program)
        .args(rest)
        .spawn()
        .map_err(CliError::system("cannot start the step"))?;
    forwarder.forward_to(vec![child.id() as i32]);
    let status = child
        .wait()
        .map_err(CliError::system("cannot wait for the step"))?;
    if status.success() {
        return Ok(ExitStatus::Success);
    }
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    // As the agents name the job in the timeline: an array task as `ARRAYID_TASK`.
    let job = herd_slurm::allocation::job_ref(&herd_slurm::Vars::from_env()).unwrap_or_default();
    let requeues: u64 = std::env::var("SLURM_RESTART_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if let Some(exp) = std::env::var_os(HERD_EXP_DIR).filter(|e| !e.is_empty()) {
        if let Some(end) = settled(Path::new(&exp), &job, requeues) {
            eprintln!(
                "herd: the step exited {code} because a replaced node's agent was ended; the job {end}: exit 0"
            );
            return Ok(ExitStatus::Success);
        }
    }
    Ok(ExitStatus::Job(u8::try_from(code).unwrap_or(1)))
}

/// How this allocation (job `job`, requeued `requeues` times) ended by the experiment's
/// timeline, when it ended well: "finished" or "was requeued"; `None` otherwise.
fn settled(exp: &Path, job: &str, requeues: u64) -> Option<&'static str> {
    use herd_exp::timeline::Event;
    let events = herd_exp::timeline::read(exp).ok()?;
    let this = |e: &herd_exp::timeline::Entry| {
        matches!(&e.event, Event::Started(s)
            if s.job_id.as_ref().is_some_and(|j| j == job) && u64::from(s.requeue) == requeues)
    };
    let start = events.iter().rposition(this)?;
    events[start..].iter().rev().find_map(|e| match &e.event {
        Event::Finished(f) if f.ok => Some("finished"),
        Event::Requeue(_) => Some("was requeued"),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_allocation_that_finished_or_requeued_settles() {
        let dir = tempfile::tempdir().expect("temp dir");
        let write = |lines: &[&str]| {
            std::fs::write(dir.path().join("timeline.jsonl"), lines.join("\n") + "\n")
                .expect("writes")
        };
        let started = r#"{"event":"started","job_id":41,"requeue":0}"#;
        write(&[
            started,
            r#"{"event":"replace","node":"b"}"#,
            r#"{"event":"finished","ok":true}"#,
        ]);
        assert_eq!(settled(dir.path(), "41", 0), Some("finished"));
        // Another job's allocation, or a later requeue of this one: not this allocation.
        assert_eq!(settled(dir.path(), "42", 0), None);
        assert_eq!(settled(dir.path(), "41", 1), None);
        write(&[started, r#"{"event":"finished","ok":false}"#]);
        assert_eq!(settled(dir.path(), "41", 0), None);
        write(&[started, r#"{"event":"requeue","cause":"node_failure"}"#]);
        assert_eq!(settled(dir.path(), "41", 0), Some("was requeued"));
        write(&[started]);
        assert_eq!(settled(dir.path(), "41", 0), None);
        // An array task's agents name it as `herd submit` recorded it.
        write(&[
            r#"{"event":"started","job_id":"40_2","requeue":0}"#,
            r#"{"event":"finished","ok":true}"#,
        ]);
        assert_eq!(settled(dir.path(), "40_2", 0), Some("finished"));
        assert_eq!(settled(dir.path(), "40", 0), None);
    }
}
