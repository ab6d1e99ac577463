//! `herd logs`'s arguments, and how a follow polls.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Lines of the failing rank `--failed` prints unless `--tail` says otherwise.
pub const FAILED_TAIL: usize = 40;

/// `herd logs` arguments.
#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// The experiment: its folder's name under the experiment root (`SWEEP/RUN`: a run of
    /// a sweep).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The experiment root (default: herd-exp/ in this folder, as for `herd submit`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Only this rank (repeatable, or a list: `--rank 0,3`). With exactly one, its lines
    /// are printed raw, without the `R: ` label.
    #[arg(long = "rank", value_name = "R", value_delimiter = ',')]
    pub ranks: Vec<u32>,
    /// Only the ranks of this node: its node rank or host name (repeatable, or a list).
    #[arg(long = "node", value_name = "N|HOST", value_delimiter = ',')]
    pub nodes: Vec<String>,
    /// Attempt K (`logs/attempt-K`) instead of the latest.
    #[arg(long, value_name = "K", conflicts_with = "all_attempts")]
    pub attempt: Option<u32>,
    /// Every attempt, each after a marker line saying how it began.
    #[arg(long)]
    pub all_attempts: bool,
    /// Only stdout.
    #[arg(long, conflicts_with = "stderr")]
    pub stdout: bool,
    /// Only stderr.
    #[arg(long)]
    pub stderr: bool,
    /// Only lines matching this regular expression.
    #[arg(long, value_name = "RE")]
    pub grep: Option<String>,
    /// Only lines since WHEN: `30s`, `10m`, `2h`, `1d` ago, or an RFC 3339 time
    /// (`2026-12-01T14:00:00Z`).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only the last N lines (after --grep and --since); with --failed, the failing rank's
    /// last N lines (default 40).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// The failure report of the attempt and the failing rank's last lines.
    #[arg(long, conflicts_with_all = ["follow", "batch", "all_attempts"])]
    pub failed: bool,
    /// SLURM's batch-step output (`logs/JOBID.out`, `.err`) of the latest submission (every
    /// one with --all-attempts).
    #[arg(long, conflicts_with_all = ["ranks", "nodes", "attempt"])]
    pub batch: bool,
    /// Print what is there, then new lines as they come, across new attempts, until the
    /// job is over (exit 0 if it finished ok, 1 otherwise).
    #[arg(short = 'f', long)]
    pub follow: bool,
}

/// How a follow polls; tests make it quicker.
#[derive(Debug, Clone, Copy)]
pub struct Polling {
    /// How often the files are read again.
    pub files: Duration,
    /// How often the timeline (and the attempt's rank files) are read again.
    pub timeline: Duration,
    /// How often the `done` hook is asked.
    pub done: Duration,
}

impl Default for Polling {
    fn default() -> Polling {
        Polling {
            files: Duration::from_millis(200),
            timeline: Duration::from_secs(1),
            done: Duration::from_secs(3),
        }
    }
}
