//! What went wrong, said once, precisely: the failure report.

use serde::{Deserialize, Serialize};

use crate::error_file::WorkerError;

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
    /// From a wait status.
    pub fn from_status(status: std::process::ExitStatus) -> Exit {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Exit::Code(code),
            (None, Some(sig)) => Exit::Signal(signal_name(sig)),
            (None, None) => Exit::Code(-1),
        }
    }

    /// Exit code 0.
    pub fn success(&self) -> bool {
        *self == Exit::Code(0)
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

/// `SIGSEGV` for 11, `signal 99` for unknown numbers.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {sig}"))
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
    /// Every rank's Python stack when the job hung (`py-spy dump`), in rank order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<RankStack>,
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
            stacks: Vec::new(),
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
            stacks: Vec::new(),
            time,
            unix_ms,
        }
    }

    /// The report for people: cause and time, where the exception was raised (from the
    /// error file), and the stderr tail.
    pub fn human(&self) -> String {
        let mut s = format!(
            "herd: job failed (attempt {}): {} at {}\n",
            self.attempt, self.cause, self.time
        );
        if let Some(frame) = self.error.as_ref().and_then(|e| e.frame.as_ref()) {
            s.push_str(&format!("herd: raised at {frame}\n"));
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
        s
    }
}

pub use herd_exp::timeline::{now, rfc3339};

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
    }

    #[test]
    fn names_signals() {
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(
            Exit::Signal("SIGSEGV".into()).to_string(),
            "killed by SIGSEGV (segmentation fault)"
        );
        assert_eq!(Exit::Code(7).to_string(), "exited with code 7");
    }
}
