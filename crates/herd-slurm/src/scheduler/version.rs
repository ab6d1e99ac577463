//! The Slurm release herd talks to, and every behaviour of SLURM that differs between the
//! releases herd supports (22.05 to 26.05).
//!
//! The version is read once per process ([`detect`]), from `scontrol --version` (the client
//! commands herd runs are the ones that matter: `sbatch`, `srun` and `squeue` read their own
//! environment and options); `herd check` prints it and the manifest records it. herd
//! handles every difference the same way on every release, so no code branches on the
//! version: it reads both forms where the output changed, and says what a step needs where
//! inheritance changed. What differs, and where herd handles it:
//!
//! - From 23.02 `--dependency=afterok:ID` naming a job SLURM no longer knows (ended and
//!   purged after `MinJobAge`) is refused at submit; 22.05 accepted it and dropped it. herd
//!   refuses such a dependency itself on every release, before anything is written
//!   (`herd submit`'s `after`), so no release runs the job early.
//! - From 23.11 srun reads `SLURM_CPUS_PER_TASK` again (22.05 and 23.02 read only
//!   `SRUN_CPUS_PER_TASK`) and `-c` also sets `SLURM_TRES_PER_TASK`; from 26.05 a step's
//!   `--gres=gpu:N` is refused when `SLURM_GPUS_PER_NODE` is in its environment. herd's steps
//!   never lean on what a child srun inherits: each says its nodes, tasks and CPUs.
//! - `squeue --json`/`scontrol --json` change shape with every release (data_parser v0.0.38
//!   in 22.05 … v0.0.45 in 26.05): herd reads only `--format`/`-o` text.
//! - 26.05's batch script has `SLURM_STEP_ID=-5` (the batch step), which 22.05 and 24.11
//!   leave unset: only a step number makes a process an srun task
//!   ([`crate::allocation::srun_step_id`]).
//! - 24.11 and 26.05's `squeue -O exit_code` is `CODE:SIGNAL` (`3:0`) where 22.05's is the
//!   raw wait status (`768`): [`crate::scheduler::queue::parse_exit`] reads both.
//! - From 23.02 every job has `SLURM_JOB_START_TIME` and `SLURM_JOB_END_TIME`; herd's
//!   agents read the time left from `scontrol show job` (`RunTime`, `TimeLimit`) on every
//!   release.

use std::fmt;
use std::sync::OnceLock;

use crate::scheduler::command::{run, QUERY_TIMEOUT};

/// A Slurm release: `22.05.8`, `24.11.5`, `26.05.5`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlurmVersion {
    /// The year of the release (`22`, `24`, `26`).
    pub major: u16,
    /// The month (`05`, `11`; `02` and `08` before 24.05).
    pub minor: u16,
    /// The maintenance release.
    pub micro: u16,
}

impl SlurmVersion {
    /// A release by its numbers.
    pub const fn new(major: u16, minor: u16, micro: u16) -> SlurmVersion {
        SlurmVersion {
            major,
            minor,
            micro,
        }
    }

    /// The version in what `scontrol --version` (or any client's `--version`) prints:
    /// `slurm 23.02.7`, `slurm-wlm 24.11.5` (Debian's and Ubuntu's packages), `slurm
    /// 26.05.0-0rc1`. The last line that has one counts (a client may warn first).
    pub fn parse(text: &str) -> Option<SlurmVersion> {
        text.lines().rev().find_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            if !name.starts_with("slurm") {
                return None;
            }
            let numbers = words.next()?;
            let mut parts = numbers.splitn(3, '.');
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            let micro = parts
                .next()
                .map(|m| {
                    let digits: String = m.chars().take_while(char::is_ascii_digit).collect();
                    digits.parse().unwrap_or(0)
                })
                .unwrap_or(0);
            Some(SlurmVersion::new(major, minor, micro))
        })
    }
}

impl fmt::Display for SlurmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}.{}", self.major, self.minor, self.micro)
    }
}

/// The Slurm release of this machine's client commands, read once per process (one
/// `scontrol --version`; it reads slurm.conf but asks slurmctld nothing): `None` when there
/// is no SLURM here, an error when it does not answer. Every later call returns the same.
pub fn detect() -> Result<Option<SlurmVersion>, String> {
    static VERSION: OnceLock<Result<Option<SlurmVersion>, String>> = OnceLock::new();
    VERSION
        .get_or_init(|| {
            match run(
                "scontrol",
                &[std::ffi::OsStr::new("--version")],
                None,
                QUERY_TIMEOUT,
            ) {
                Ok(out) => SlurmVersion::parse(&out)
                    .map(Some)
                    .ok_or_else(|| format!("`scontrol --version` printed {:?}", out.trim())),
                Err(e) if e.is_not_installed() => Ok(None),
                Err(e) => Err(format!("`scontrol --version` failed: {e}")),
            }
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    // What `scontrol --version` printed on the test bed: Debian 12's, 13's and forky's
    // packages (testbed/up --slurm 22.05|24.11|26.05), and SchedMD's own builds.
    #[test]
    fn each_releases_version_line_is_read() {
        assert_eq!(
            SlurmVersion::parse("slurm-wlm 22.05.8\n"),
            Some(SlurmVersion::new(22, 5, 8))
        );
        assert_eq!(
            SlurmVersion::parse("slurm-wlm 24.11.5\n"),
            Some(SlurmVersion::new(24, 11, 5))
        );
        assert_eq!(
            SlurmVersion::parse("slurm-wlm 26.05.5\n"),
            Some(SlurmVersion::new(26, 5, 5))
        );
        assert_eq!(
            SlurmVersion::parse("slurm 23.02.7\n"),
            Some(SlurmVersion::new(23, 2, 7))
        );
        assert_eq!(
            SlurmVersion::parse("slurm 26.05.0-0rc1\n"),
            Some(SlurmVersion::new(26, 5, 0))
        );
        assert_eq!(
            SlurmVersion::parse("scontrol: warning: something\nslurm 25.11.2\n"),
            Some(SlurmVersion::new(25, 11, 2))
        );
        assert_eq!(SlurmVersion::parse("scontrol: fatal: no config"), None);
        assert_eq!(SlurmVersion::parse(""), None);
    }

    #[test]
    fn a_version_prints_as_slurm_writes_it() {
        assert_eq!(SlurmVersion::new(22, 5, 8).to_string(), "22.05.8");
        assert_eq!(SlurmVersion::new(25, 11, 2).to_string(), "25.11.2");
    }
}
