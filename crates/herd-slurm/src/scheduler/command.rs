//! The one way herd runs a SLURM command: [`run`] for `sbatch`, `squeue`, `scontrol`,
//! `sinfo` and `scancel` (output captured, with a timeout), [`run_attached`] for an `srun`
//! step that runs as long as the job; every failure a typed [`SlurmError`]. The thin
//! wrappers of the commands herd runs below them.
//!
//! Nothing here goes through a shell: arguments are passed as they are. A command that does
//! not answer within its timeout (slurmctld down, overloaded or rate-limiting) is killed and
//! reported as [`SlurmError::Timeout`], so no herd command hangs on the scheduler.

use std::ffi::OsStr;
use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a query (`squeue`, `scontrol show`, `sinfo`, `scancel`) may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long `sbatch` may take: it retries by itself while slurmctld is busy.
pub const SUBMIT_TIMEOUT: Duration = Duration::from_secs(120);

/// Most bytes of a command's stderr kept in an error.
const STDERR_KEPT: usize = 2000;

/// How a SLURM command failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The command could not be started (not installed, not on PATH, …).
    #[error("cannot run {command}: {source}")]
    Start {
        /// The program, e.g. `sbatch`.
        command: &'static str,
        /// Why it did not start.
        #[source]
        source: std::io::Error,
    },
    /// The command did not finish in time and was killed.
    #[error(
        "`{command}` did not answer within {timeout:?} (is slurmctld up? `scontrol ping` tells)"
    )]
    Timeout {
        /// The program and its arguments.
        command: String,
        /// The time it was given.
        timeout: Duration,
    },
    /// The command exited with an error; its stderr says why.
    #[error("{}", if stderr.is_empty() { format!("{command} failed ({status}) and said nothing") } else { stderr.clone() })]
    Failed {
        /// The program.
        command: &'static str,
        /// How it exited.
        status: ExitStatus,
        /// What it printed on stderr, trimmed (its last 2,000 bytes).
        stderr: String,
    },
    /// The command succeeded but printed something it does not print.
    #[error("unexpected {command} output {output:?}")]
    Output {
        /// The program.
        command: &'static str,
        /// Its stdout, trimmed.
        output: String,
    },
}

impl SlurmError {
    /// Whether the program is not installed here (no SLURM on this machine).
    pub fn is_not_installed(&self) -> bool {
        matches!(self, SlurmError::Start { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether the command was killed by a signal: run inside a job that SLURM is ending
    /// (scancel, preemption, time limit), it got the signal every process of the job gets.
    pub fn was_killed(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        matches!(self, SlurmError::Failed { status, .. } if status.signal().is_some())
    }
}

/// Runs `program args…` (in `cwd` when given) and returns its stdout; a non-zero exit is
/// [`SlurmError::Failed`] with its stderr, no answer within `timeout` is
/// [`SlurmError::Timeout`] (the process is killed).
pub fn run(
    program: &'static str,
    args: &[&OsStr],
    cwd: Option<&Path>,
    timeout: Duration,
) -> Result<String, SlurmError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let mut child = cmd.spawn().map_err(|source| SlurmError::Start {
        command: program,
        source,
    })?;
    // Both pipes read on threads, so a chatty command never blocks on a full pipe.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let mut command = program.to_owned();
                for a in args {
                    command.push(' ');
                    command.push_str(&a.to_string_lossy());
                }
                return Err(SlurmError::Timeout { command, timeout });
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if !status.success() {
        let text = String::from_utf8_lossy(&stderr);
        let text = text.trim();
        let start = text.len().saturating_sub(STDERR_KEPT);
        let start = (start..=text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        return Err(SlurmError::Failed {
            command: program,
            status,
            stderr: text[start..].to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

/// Runs `program args…` attached to herd's own stdin, stdout and stderr, with `envs` added
/// to its environment and no timeout (an `srun` step lasts as long as its job), and returns
/// how it exited; [`SlurmError::Start`] when it cannot start.
pub fn run_attached(
    program: &'static str,
    args: &[&OsStr],
    envs: &[(&str, &OsStr)],
) -> Result<ExitStatus, SlurmError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    cmd.status().map_err(|source| SlurmError::Start {
        command: program,
        source,
    })
}

/// `sbatch --parsable SCRIPT` from `workdir`: the new job's id.
pub fn sbatch(script: &Path, workdir: &Path) -> Result<String, SlurmError> {
    let text = run(
        "sbatch",
        &["--parsable".as_ref(), script.as_os_str()],
        Some(workdir),
        SUBMIT_TIMEOUT,
    )?;
    parse_sbatch(&text).ok_or_else(|| SlurmError::Output {
        command: "sbatch",
        output: text.trim().to_owned(),
    })
}

/// The job id in `sbatch --parsable` output (`ID` or `ID;CLUSTER`).
pub fn parse_sbatch(text: &str) -> Option<String> {
    let id = text.trim().split(';').next()?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then(|| id.to_owned())
}

/// `scontrol show job -o ID`: the job's one line of `Key=Value` fields.
pub fn show_job(id: &str) -> Result<String, SlurmError> {
    run(
        "scontrol",
        &["show".as_ref(), "job".as_ref(), "-o".as_ref(), id.as_ref()],
        None,
        QUERY_TIMEOUT,
    )
}

/// `scontrol show config`.
pub fn show_config() -> Result<String, SlurmError> {
    run(
        "scontrol",
        &["show".as_ref(), "config".as_ref()],
        None,
        QUERY_TIMEOUT,
    )
}

/// `sinfo -h -N -p PARTITION -o '%N %t'`: each node of the partition and its state.
pub fn node_states(partition: &str) -> Result<Vec<(String, String)>, SlurmError> {
    let text = run(
        "sinfo",
        &[
            "-h".as_ref(),
            "-N".as_ref(),
            "-p".as_ref(),
            partition.as_ref(),
            "-o".as_ref(),
            "%N %t".as_ref(),
        ],
        None,
        QUERY_TIMEOUT,
    )?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_owned(), it.next()?.to_owned()))
        })
        .collect())
}

/// `scancel [--signal=SIGNAL] ID…`: cancels the jobs, or with a signal sends it to every
/// task of their steps (not the batch shell).
pub fn scancel(ids: &[&str], signal: Option<&str>) -> Result<(), SlurmError> {
    let flag = signal.map(|s| format!("--signal={s}"));
    let mut args: Vec<&OsStr> = flag.iter().map(OsStr::new).collect();
    args.extend(ids.iter().map(OsStr::new));
    run("scancel", &args, None, QUERY_TIMEOUT).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_killed_by_a_signal_is_told_from_one_that_failed() {
        use std::os::unix::process::ExitStatusExt;
        let failed = |raw: i32| SlurmError::Failed {
            command: "scontrol",
            status: ExitStatus::from_raw(raw),
            stderr: String::new(),
        };
        assert!(failed(15).was_killed(), "killed by SIGTERM");
        assert!(!failed(1 << 8).was_killed(), "exited 1");
        assert!(!SlurmError::Output {
            command: "scontrol",
            output: String::new()
        }
        .was_killed());
    }

    #[test]
    fn sbatch_output_is_an_id() {
        assert_eq!(parse_sbatch("4242\n").as_deref(), Some("4242"));
        assert_eq!(parse_sbatch("4242;cluster\n").as_deref(), Some("4242"));
        assert_eq!(parse_sbatch("Submitted batch job 4242"), None);
        assert_eq!(parse_sbatch(""), None);
    }

    #[test]
    fn an_attached_command_gets_the_extra_variables_and_says_how_it_exited() {
        let status = run_attached(
            "sh",
            &[
                "-c".as_ref(),
                "test \"$HERD_TEST_SECRET\" = 's e c' && exit 3".as_ref(),
            ],
            &[("HERD_TEST_SECRET", "s e c".as_ref())],
        )
        .expect("sh runs");
        assert_eq!(status.code(), Some(3), "the variable reached it");
        let err = run_attached("herd-no-such-command", &[], &[]).expect_err("missing");
        assert!(
            matches!(
                &err,
                SlurmError::Start {
                    command: "herd-no-such-command",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.is_not_installed(), "{err:?}");
    }

    #[test]
    fn a_command_that_hangs_is_killed_at_its_timeout() {
        let start = Instant::now();
        let err = run("sleep", &["30".as_ref()], None, Duration::from_millis(300))
            .expect_err("sleep 30 outlives 300 ms");
        assert!(start.elapsed() < Duration::from_secs(10), "{err}");
        assert!(matches!(err, SlurmError::Timeout { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("`sleep 30` did not answer within 300ms"),
            "{msg}"
        );
    }

    #[test]
    fn a_failing_command_keeps_its_stderr_and_a_missing_one_says_so() {
        let err = run(
            "sh",
            &[
                "-c".as_ref(),
                "echo out; echo 'sbatch: error: bad' >&2; exit 1".as_ref(),
            ],
            None,
            QUERY_TIMEOUT,
        )
        .expect_err("exit 1");
        assert!(
            matches!(&err, SlurmError::Failed { stderr, .. } if stderr == "sbatch: error: bad"),
            "{err:?}"
        );
        let err = run("herd-no-such-command", &[], None, QUERY_TIMEOUT).expect_err("missing");
        assert!(err.is_not_installed(), "{err:?}");
        let ok = run(
            "sh",
            &["-c".as_ref(), "echo hi".as_ref()],
            None,
            QUERY_TIMEOUT,
        );
        assert_eq!(ok.expect("runs"), "hi\n");
    }
}
