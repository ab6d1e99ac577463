//! What went wrong, said once, precisely: the failure report, as the agents write it into
//! the logs folder (`failure.json`, [`crate::layout`]) and the views read it back.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::layout::LogsDir;
use crate::timeline::clock::now;

mod error_file;
pub mod hints;

pub use error_file::{innermost_frame, Frame, WorkerError, MAX_ERROR_FILE, MAX_TRACEBACK};

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exit {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal (`SIGKILL`, `SIGSEGV`, …).
    Signal(String),
}

impl Exit {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
    }

    /// Killed by SIGABRT, or exit code 134 (128 + SIGABRT, as a shell that ran it says).
    pub fn aborted(&self) -> bool {
        matches!(self, Exit::Signal(s) if s == "SIGABRT") || *self == Exit::Code(134)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exited with code {c}"),
            Exit::Signal(s) => {
                let what = match s.as_str() {
                    "SIGSEGV" => " (segmentation fault)",
                    "SIGKILL" => " (killed: out of memory, or by hand)",
                    "SIGABRT" => " (aborted)",
                    "SIGBUS" => " (bus error)",
                    "SIGFPE" => " (arithmetic error)",
                    _ => "",
                };
                write!(f, "killed by {s}{what}")
            }
        }
    }
}

/// One rank's Python stack, as `py-spy dump` printed it (or why there is none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankStack {
    /// Global rank.
    pub rank: u32,
    /// Its node's host name.
    pub host: String,
    /// Its pid there.
    pub pid: i32,
    /// `py-spy dump`'s output, or the reason it could not run.
    pub stack: String,
}

/// The first failure of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    /// Attempt number (0 for the first run).
    pub attempt: u32,
    /// What failed, in one line.
    pub cause: String,
    /// Global rank of the failing worker, when a worker failed.
    pub rank: Option<u32>,
    /// Its local rank.
    pub local_rank: Option<u32>,
    /// Its node's rank.
    pub node_rank: u32,
    /// Its node's host name.
    pub host: String,
    /// How it ended, when a worker failed.
    pub exit: Option<Exit>,
    /// What it recorded in its error file (torch's `@record`), when it wrote one.
    #[serde(default)]
    pub error: Option<Box<WorkerError>>,
    /// The last lines of its stderr.
    pub stderr_tail: Vec<String>,
    /// The likely cause and its fix, in one line, when what the worker left matches a
    /// failure herd knows ([`hints`]); never a guess otherwise. (Boxed: the report travels
    /// in the agents' enums, which clippy keeps small.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<Box<str>>,
    /// Every rank's Python stack when the job hung (`py-spy dump`), in rank order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<RankStack>,
    /// Why the job ends here though restarts were left (`--max-restarts`): restarts in a
    /// row made no progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts_stopped: Option<String>,
    /// When (UTC, RFC 3339 with milliseconds).
    pub time: String,
    /// When, as milliseconds since the Unix epoch.
    pub unix_ms: u64,
}

impl FailureReport {
    /// A worker's failure; `error` is what it wrote to its error file, if anything.
    pub fn worker(
        attempt: u32,
        (rank, local_rank, node_rank): (u32, u32, u32),
        host: &str,
        exit: Exit,
        error: Option<WorkerError>,
        stderr_tail: Vec<String>,
    ) -> FailureReport {
        let (time, unix_ms) = now();
        let who = format!("rank {rank} (local rank {local_rank} on {host})");
        let cause = match &error {
            Some(e) => format!("{who} raised {} ({exit})", e.headline()),
            None => format!("{who} {exit}"),
        };
        let hint =
            hints::find(exit.aborted(), error.as_ref(), &stderr_tail).map(|h| h.line().into());
        FailureReport {
            attempt,
            cause,
            rank: Some(rank),
            local_rank: Some(local_rank),
            node_rank,
            host: host.to_owned(),
            exit: Some(exit),
            error: error.map(Box::new),
            stderr_tail,
            hint,
            stacks: Vec::new(),
            restarts_stopped: None,
            time,
            unix_ms,
        }
    }

    /// A failure that is not one worker's (lost node, signal, rendezvous).
    pub fn other(attempt: u32, node_rank: u32, host: &str, cause: String) -> FailureReport {
        let (time, unix_ms) = now();
        FailureReport {
            attempt,
            cause,
            rank: None,
            local_rank: None,
            node_rank,
            host: host.to_owned(),
            exit: None,
            error: None,
            stderr_tail: Vec::new(),
            hint: None,
            stacks: Vec::new(),
            restarts_stopped: None,
            time,
            unix_ms,
        }
    }

    /// Writes the report as `failure.json` into its attempt's folder and into `logs` (the
    /// latest), each to a temporary name renamed into place: a reader never sees half a
    /// report. Best effort: a report that cannot be written was printed already.
    pub fn write(&self, logs: &LogsDir) {
        let text = match serde_json::to_string_pretty(self) {
            Ok(t) => t + "\n",
            Err(_) => return,
        };
        for path in [
            logs.attempt(self.attempt).failure_report(),
            logs.failure_report(),
        ] {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let tmp = path.with_extension("json.tmp");
            if std::fs::write(&tmp, &text).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
    }

    /// Reads the report at `path` (a `failure.json`); `Ok(None)` when there is none, an
    /// error of kind `InvalidData` when the file is not a report this herd reads.
    pub fn read(path: &Path) -> io::Result<Option<FailureReport>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// The report for people: cause and time, where the exception was raised (from the
    /// error file), the likely cause and its fix when herd knows the failure, and the
    /// stderr tail.
    pub fn human(&self) -> String {
        let mut s = format!(
            "herd: job failed (attempt {}): {} at {}\n",
            self.attempt, self.cause, self.time
        );
        if let Some(frame) = self.error.as_ref().and_then(|e| e.frame.as_ref()) {
            s.push_str(&format!("herd: raised at {frame}\n"));
        }
        if let Some(hint) = &self.hint {
            s.push_str(&format!("herd: likely cause: {hint}\n"));
        }
        if let Some(rank) = self.rank {
            if self.stderr_tail.is_empty() {
                s.push_str(&format!("herd: rank {rank} wrote nothing to stderr\n"));
            } else {
                s.push_str(&format!("herd: last lines of rank {rank}'s stderr:\n"));
                for line in &self.stderr_tail {
                    s.push_str("  | ");
                    s.push_str(line);
                    s.push('\n');
                }
            }
        }
        for st in &self.stacks {
            s.push_str(&format!(
                "herd: stack of rank {} (pid {} on {}):\n",
                st.rank, st.pid, st.host
            ));
            for line in st.stack.lines() {
                s.push_str("  | ");
                s.push_str(line);
                s.push('\n');
            }
        }
        if let Some(why) = &self.restarts_stopped {
            s.push_str(&format!("herd: {why}\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_file_leads_the_report() {
        let error = WorkerError::parse(
            r#"{"message": {"message": "ValueError: bad shard 7", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/exp/code/fail.py\", line 6, in load_shard\n    raise ValueError(f\"bad shard {i}\")\nValueError: bad shard 7\n"}}}"#,
            std::path::Path::new("/exp/logs/attempt-0/rank-4.error.json"),
        );
        let r = FailureReport::worker(
            0,
            (4, 0, 2),
            "gpu-a03",
            Exit::Code(1),
            error,
            vec![
                "Traceback (most recent call last):".into(),
                "ValueError: bad shard 7".into(),
            ],
        );
        assert_eq!(
            r.cause,
            "rank 4 (local rank 0 on gpu-a03) raised ValueError: bad shard 7 (exited with code 1)"
        );
        let text = r.human();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("herd: job failed (attempt 0): rank 4 (local rank 0 on gpu-a03) raised ValueError: bad shard 7"), "{text}");
        assert_eq!(
            lines[1],
            "herd: raised at /exp/code/fail.py:6 in load_shard: raise ValueError(f\"bad shard {i}\")"
        );
        assert_eq!(lines[2], "herd: last lines of rank 4's stderr:");
        let json = serde_json::to_value(&r).unwrap_or_default();
        assert_eq!(json["error"]["exception"], "ValueError");
        assert_eq!(json["error"]["frame"]["line"], 6);

        let plain = FailureReport::worker(0, (4, 0, 2), "gpu-a03", Exit::Code(1), None, vec![]);
        assert_eq!(
            plain.cause,
            "rank 4 (local rank 0 on gpu-a03) exited with code 1"
        );
        assert!(!plain.human().contains("raised"));
        assert!(
            json.get("restarts_stopped").is_none(),
            "absent when restarting"
        );
    }

    #[test]
    fn restarts_that_stopped_for_no_progress_end_the_report_and_read_back() {
        let mut r = FailureReport::worker(3, (0, 0, 0), "gpu-a01", Exit::Code(1), None, vec![]);
        let why = "3 restarts in a row made no progress (no step beyond 120); not restarting again (--max-restarts 10 left 7)";
        r.restarts_stopped = Some(why.into());
        let text = r.human();
        assert_eq!(text.lines().last(), Some(format!("herd: {why}").as_str()));
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = LogsDir::new(dir.path().join("logs"));
        r.write(&logs);
        let back = FailureReport::read(&logs.failure_report()).expect("reads");
        assert_eq!(back.and_then(|b| b.restarts_stopped).as_deref(), Some(why));
    }

    #[test]
    fn exits_are_said_in_words() {
        assert_eq!(
            Exit::Signal("SIGSEGV".into()).to_string(),
            "killed by SIGSEGV (segmentation fault)"
        );
        assert_eq!(Exit::Code(7).to_string(), "exited with code 7");
    }

    #[test]
    fn a_written_report_is_read_back_from_both_places() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = LogsDir::new(dir.path().join("logs"));
        assert_eq!(
            FailureReport::read(&logs.failure_report()).expect("none is no error"),
            None
        );
        let r = FailureReport::other(2, 1, "gpu-a02", "lost node 1 (gpu-a02)".into());
        r.write(&logs);
        for path in [logs.failure_report(), logs.attempt(2).failure_report()] {
            assert_eq!(
                FailureReport::read(&path).expect("reads").as_ref(),
                Some(&r),
                "{}",
                path.display()
            );
        }
        std::fs::write(logs.failure_report(), "{\"not\": \"a report\"}").expect("write");
        let err = FailureReport::read(&logs.failure_report()).expect_err("not a report");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
