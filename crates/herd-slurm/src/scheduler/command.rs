//! The one way herd runs a SLURM command: [`run`] for `sbatch`, `squeue`, `scontrol`,
//! `sinfo` and `scancel` (output captured, with a timeout), [`run_attached`] for an `srun`
//! step that runs as long as the job; every failure a typed [`SlurmError`]. The thin
//! wrappers of the commands herd runs below them.
//!
//! Nothing here goes through a shell: arguments are passed as they are. A command that does
//! not answer within its timeout (slurmctld down, overloaded or rate-limiting) is killed and
//! reported as [`SlurmError::Timeout`], so no herd command hangs on the scheduler.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::worker::vars::HERD_LOG;

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

/// The array task variables of the process that submits, which never reach the new job.
const SUBMITTER_ARRAY_VARS: [&str; 6] = [
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_COUNT",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_STEP",
];

/// Runs `program args…` (in `cwd` when given) and returns its stdout; a non-zero exit is
/// [`SlurmError::Failed`] with its stderr, no answer within `timeout` is
/// [`SlurmError::Timeout`] (the process is killed). With `HERD_LOG=debug` the command line
/// and how long it took are written on stderr.
pub fn run(
    program: &'static str,
    args: &[&OsStr],
    cwd: Option<&Path>,
    timeout: Duration,
) -> Result<String, SlurmError> {
    run_traced(program, args, cwd, timeout, &mut Trace::from_env())
}

/// [`run`], its debug line going to `trace`.
fn run_traced(
    program: &'static str,
    args: &[&OsStr],
    cwd: Option<&Path>,
    timeout: Duration,
    trace: &mut Trace<'_>,
) -> Result<String, SlurmError> {
    let started = Instant::now();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    if program == "sbatch" {
        // sbatch passes the environment on, and SLURM sets these again only for the tasks
        // of an array: a job submitted from inside an array task would carry that task's
        // identity, and its agents would take it for theirs (allocation::job_ref).
        for var in SUBMITTER_ARRAY_VARS {
            cmd.env_remove(var);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(source) => {
            trace.ended(program, args, started, Ended::NotStarted(&source));
            return Err(SlurmError::Start {
                command: program,
                source,
            });
        }
    };
    // Both pipes read on threads, so a chatty command never blocks on a full pipe. Each
    // thread says when its pipe closed: the command exits then (they are its only copies),
    // so waiting for that, not polling, learns of the exit at once. A poll of the exit
    // alone, backing off to 50 ms, added up to 50 ms to every command (and so to a
    // launch, which waits for `scontrol show job`).
    let (closed_tx, closed) = std::sync::mpsc::channel::<()>();
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        let closed_tx = closed_tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            let _ = closed_tx.send(());
            buf
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    drop(closed_tx);
    let deadline = started + timeout;
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        if closed.recv_timeout(left).is_err() {
            // The deadline, or a pipe a child of the command keeps open: the poll below
            // decides.
            break;
        }
    }
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
                trace.ended(program, args, started, Ended::TimedOut);
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
    trace.ended(program, args, started, Ended::Exited(status));
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
/// how it exited; [`SlurmError::Start`] when it cannot start. With `HERD_LOG=debug` the
/// command line is written on stderr as it starts and again, with how long it took, when it
/// ends (the variables' values never: one is the job's secret).
pub fn run_attached(
    program: &'static str,
    args: &[&OsStr],
    envs: &[(&str, &OsStr)],
) -> Result<ExitStatus, SlurmError> {
    run_attached_traced(program, args, envs, &mut Trace::from_env())
}

/// [`run_attached`], its debug lines going to `trace`.
fn run_attached_traced(
    program: &'static str,
    args: &[&OsStr],
    envs: &[(&str, &OsStr)],
    trace: &mut Trace<'_>,
) -> Result<ExitStatus, SlurmError> {
    let started = Instant::now();
    // It may run for hours: say what runs before it ends, too.
    trace.started(program, args);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    match cmd.status() {
        Ok(status) => {
            trace.ended(program, args, started, Ended::Exited(status));
            Ok(status)
        }
        Err(source) => {
            trace.ended(program, args, started, Ended::NotStarted(&source));
            Err(SlurmError::Start {
                command: program,
                source,
            })
        }
    }
}

/// Where the helper's debug lines go: stderr when `HERD_LOG=debug`, nowhere otherwise, or
/// (in tests) a list.
enum Trace<'a> {
    /// No debug lines.
    Off,
    /// `herd: debug: …` lines on stderr.
    Stderr,
    /// The lines, collected.
    #[cfg_attr(not(test), allow(dead_code))]
    Lines(&'a mut Vec<String>),
}

/// How a command ended, as its debug line says.
enum Ended<'a> {
    /// It exited (well or not).
    Exited(ExitStatus),
    /// It did not answer within its timeout and was killed.
    TimedOut,
    /// It could not be started.
    NotStarted(&'a std::io::Error),
}

impl Trace<'_> {
    /// From `HERD_LOG`, read at every command and never cached, so whoever sets it (a
    /// test, a process starting herd) is heard at once.
    fn from_env() -> Trace<'static> {
        if wants_debug(std::env::var_os(HERD_LOG).as_deref()) {
            Trace::Stderr
        } else {
            Trace::Off
        }
    }

    /// `herd: debug: PROGRAM ARGS… (started)`.
    fn started(&mut self, program: &str, args: &[&OsStr]) {
        if !matches!(self, Trace::Off) {
            self.write(format!(
                "herd: debug: {} (started)",
                command_line(program, args)
            ));
        }
    }

    /// `herd: debug: PROGRAM ARGS… (12 ms)`, and how it failed when it did.
    fn ended(&mut self, program: &str, args: &[&OsStr], started: Instant, ended: Ended<'_>) {
        if matches!(self, Trace::Off) {
            return;
        }
        let took = took(started.elapsed());
        let how = match ended {
            Ended::Exited(status) if status.success() => took,
            Ended::Exited(status) => format!("{took}, failed: {status}"),
            Ended::TimedOut => format!("{took}, timed out: killed"),
            Ended::NotStarted(e) => format!("{took}, could not start: {e}"),
        };
        self.write(format!(
            "herd: debug: {} ({how})",
            command_line(program, args)
        ));
    }

    fn write(&mut self, line: String) {
        match self {
            Trace::Off => {}
            // A closed stderr is no reason to fail the command: the line is dropped.
            Trace::Stderr => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
            Trace::Lines(lines) => lines.push(line),
        }
    }
}

/// Whether a `HERD_LOG` value asks for debug lines: `debug`, in any case.
fn wants_debug(value: Option<&OsStr>) -> bool {
    value.is_some_and(|v| v.eq_ignore_ascii_case("debug"))
}

/// `program args…` as a shell would need it typed (for reading and pasting only: herd never
/// runs it through a shell), each argument that holds anything but `[A-Za-z0-9_@%+=:,./-]`
/// single-quoted.
fn command_line(program: &str, args: &[&OsStr]) -> String {
    let mut line = program.to_owned();
    for a in args {
        let a = a.to_string_lossy();
        let plain = !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
        line.push(' ');
        if plain {
            line.push_str(&a);
        } else {
            line.push('\'');
            line.push_str(&a.replace('\'', "'\\''"));
            line.push('\'');
        }
    }
    line
}

/// A command's duration: milliseconds under 10 s, else seconds to a tenth.
fn took(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// `sbatch --parsable SCRIPT` from `workdir`: the new job's id.
pub fn sbatch(script: &Path, workdir: &Path) -> Result<String, SlurmError> {
    sbatch_with(script, workdir, &[])
}

/// [`sbatch`] with options `before` the script, which override its `#SBATCH` lines
/// (`--array=1,3%2`).
pub fn sbatch_with(script: &Path, workdir: &Path, before: &[&str]) -> Result<String, SlurmError> {
    let mut args: Vec<&OsStr> = vec!["--parsable".as_ref()];
    args.extend(before.iter().map(|a| -> &OsStr { a.as_ref() }));
    args.push(script.as_os_str());
    let text = run("sbatch", &args, Some(workdir), SUBMIT_TIMEOUT)?;
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

    /// What the one debug line of `lines`, for `command`, says in its brackets.
    fn traced<'a>(lines: &'a [String], command: &str) -> &'a str {
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines[0]
            .strip_prefix(&format!("herd: debug: {command} ("))
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("not a debug line of `{command}`: {lines:?}"))
    }

    #[test]
    fn every_command_run_is_traced_with_its_line_and_duration() {
        let mut lines = Vec::new();
        let out = run_traced(
            "sh",
            &["-c".as_ref(), "sleep 0.05; echo hi".as_ref()],
            None,
            QUERY_TIMEOUT,
            &mut Trace::Lines(&mut lines),
        );
        assert_eq!(out.expect("runs"), "hi\n");
        let how = traced(&lines, "sh -c 'sleep 0.05; echo hi'");
        let ms: u64 = how
            .strip_suffix(" ms")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{how}"));
        assert!((50..10_000).contains(&ms), "{how}");
    }

    #[test]
    fn a_failed_a_timed_out_and_a_missing_command_are_traced_as_such() {
        let mut lines = Vec::new();
        let _ = run_traced(
            "sh",
            &["-c".as_ref(), "exit 3".as_ref()],
            None,
            QUERY_TIMEOUT,
            &mut Trace::Lines(&mut lines),
        );
        let how = traced(&lines, "sh -c 'exit 3'");
        assert!(how.ends_with(" ms, failed: exit status: 3"), "{how}");

        let mut lines = Vec::new();
        let _ = run_traced(
            "sleep",
            &["30".as_ref()],
            None,
            Duration::from_millis(200),
            &mut Trace::Lines(&mut lines),
        );
        let how = traced(&lines, "sleep 30");
        assert!(how.ends_with(" ms, timed out: killed"), "{how}");

        let mut lines = Vec::new();
        let _ = run_traced(
            "herd-no-such-command",
            &["--x".as_ref()],
            None,
            QUERY_TIMEOUT,
            &mut Trace::Lines(&mut lines),
        );
        let how = traced(&lines, "herd-no-such-command --x");
        assert!(how.contains(" ms, could not start: "), "{how}");
    }

    #[test]
    fn an_attached_command_is_traced_as_it_starts_and_ends_without_its_variables() {
        let mut lines = Vec::new();
        let status = run_attached_traced(
            "sh",
            &["-c".as_ref(), "exit 0".as_ref()],
            &[("HERD_TEST_SECRET", "s3cr3t".as_ref())],
            &mut Trace::Lines(&mut lines),
        )
        .expect("sh runs");
        assert!(status.success());
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert_eq!(lines[0], "herd: debug: sh -c 'exit 0' (started)");
        let how = traced(&lines[1..], "sh -c 'exit 0'");
        assert!(how.ends_with(" ms"), "{how}");
        assert!(!lines.concat().contains("s3cr3t"), "{lines:?}");
    }

    #[test]
    fn herd_log_debug_in_any_case_asks_for_the_trace() {
        assert!(wants_debug(Some("debug".as_ref())));
        assert!(wants_debug(Some("DEBUG".as_ref())));
        for off in [None, Some(""), Some("info"), Some("debugx"), Some("1")] {
            assert!(!wants_debug(off.map(OsStr::new)), "{off:?}");
        }
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_read() {
        let line = command_line(
            "sinfo",
            &[
                "-h".as_ref(),
                "%N %t".as_ref(),
                "JobID:|,Name:|".as_ref(),
                "it's".as_ref(),
                "".as_ref(),
                "--jobs=12,13".as_ref(),
            ],
        );
        assert_eq!(
            line,
            "sinfo -h '%N %t' 'JobID:|,Name:|' 'it'\\''s' '' --jobs=12,13"
        );
        assert_eq!(took(Duration::from_millis(12)), "12 ms");
        assert_eq!(took(Duration::from_millis(12_340)), "12.3 s");
    }

    #[test]
    fn a_command_that_hangs_is_killed_at_its_timeout() {
        let start = Instant::now();
        let err = run("sleep", &["30".as_ref()], None, Duration::from_millis(300))
            .expect_err("sleep 30 outlives 300 ms");
        // Killed, not waited for: well before sleep's own end at 30 s.
        eprintln!("sleep 30 killed after {:?}", start.elapsed());
        assert!(start.elapsed() < Duration::from_secs(20), "{err}");
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
