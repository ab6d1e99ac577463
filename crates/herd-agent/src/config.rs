//! What an agent is told: its [`Config`], and the staying-alive settings ([`KeepAlive`],
//! [`OnHang`]) within it.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use herd_rendezvous::JobKey;
use herd_slurm::LaunchInfo;
use nix::sys::signal::Signal;

use crate::words::say;

/// Everything an agent needs to know.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's rank (0 leads).
    pub node_rank: u32,
    /// Every node's name, by node rank.
    pub node_names: Vec<String>,
    /// Where followers find the leader (node 0's address).
    pub leader_ip: IpAddr,
    /// Workers on this node.
    pub nproc: u32,
    /// The worker command.
    pub argv: Vec<OsString>,
    /// The job's identity and secret.
    pub key: JobKey,
    /// Per-rank logs go to `log_dir/attempt-K/rank-R.{out,err}`.
    pub log_dir: PathBuf,
    /// Label console lines with the rank.
    pub label: bool,
    /// How to read metrics from the workers' lines (docs/metrics.md).
    pub metrics: herd_metrics::Format,
    /// Time between SIGTERM and SIGKILL at teardown.
    pub kill_grace: Duration,
    /// How long nodes may take to find each other.
    pub rendezvous_timeout: Duration,
    /// Silence after which a peer counts as lost.
    pub heartbeat_timeout: Duration,
    /// Candidate rendezvous ports to try.
    pub port_candidates: usize,
    /// What happens before the time limit, on preemption and when ranks hang.
    pub keep: KeepAlive,
    /// The experiment folder (a submitted job's `HERD_EXP_DIR`): the leader appends the
    /// job's events to its `timeline.jsonl`.
    pub exp_dir: Option<PathBuf>,
    /// What this node's workers are told beyond their place in the layout: the run id,
    /// `max_restarts` (also the restarts the leader allows), this node's GPUs and how they
    /// are bound, its CPUs, the user's `OMP_NUM_THREADS`, the job id. Each attempt sets
    /// `master_addr`, `master_port` and `restart_count` itself.
    pub launch: LaunchInfo,
}

impl Config {
    /// This node's name.
    pub(crate) fn host(&self) -> &str {
        &self.node_names[self.node_rank as usize]
    }

    /// The leader's record of `event` in the experiment's timeline, when there is an
    /// experiment; a timeline that cannot be written is said once and never stops the job.
    pub(crate) fn record(&self, event: &str, fields: serde_json::Value) {
        if self.node_rank == 0 {
            self.record_here(event, fields);
        }
    }

    /// This agent's record of `event`, whichever node it runs on: a follower that acts for
    /// a lost leader.
    pub(crate) fn record_here(&self, event: &str, fields: serde_json::Value) {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let Some(dir) = &self.exp_dir else { return };
        if let Err(e) = herd_exp::timeline::append(dir, event, fields) {
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                say(format!(
                    "cannot write the timeline in {}: {e}; the job goes on",
                    dir.display()
                ));
            }
        }
    }
}

/// Staying alive: the warning before the time limit, the stop that asks workers to
/// checkpoint, the requeue budget, the hang watchdog (docs/launch.md, "Staying alive").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeepAlive {
    /// How long before the job's time limit herd stops the workers (zero: no warning of
    /// herd's own; a SLURM `--signal` is still read for what it is).
    pub warn_before: Duration,
    /// The signal that asks every worker to checkpoint and exit.
    pub stop_signal: Signal,
    /// How long workers have, after the stop signal, before they are torn down.
    pub stop_grace: Duration,
    /// Requeues allowed per cause (time limit, preemption, node failure).
    pub max_requeues: u32,
    /// No progress of any rank for this long is a hang (`None`: no watchdog).
    pub hang_timeout: Option<Duration>,
    /// What a hang does: fail the job, or restart its workers (within `max_restarts`).
    pub on_hang: OnHang,
}

impl Default for KeepAlive {
    fn default() -> KeepAlive {
        KeepAlive {
            warn_before: Duration::ZERO,
            stop_signal: Signal::SIGUSR1,
            stop_grace: Duration::from_secs(60),
            max_requeues: 0,
            hang_timeout: None,
            on_hang: OnHang::Fail,
        }
    }
}

/// What the hang watchdog does once it has reported a hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnHang {
    /// End the job (exit 1).
    #[default]
    Fail,
    /// Restart all workers, as after a failure (counts against `--max-restarts`).
    Restart,
}

impl std::str::FromStr for OnHang {
    type Err = String;
    fn from_str(s: &str) -> Result<OnHang, String> {
        match s {
            "fail" => Ok(OnHang::Fail),
            "restart" => Ok(OnHang::Restart),
            _ => Err(format!("`{s}` is not `fail` or `restart`")),
        }
    }
}

impl std::fmt::Display for OnHang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OnHang::Fail => "fail",
            OnHang::Restart => "restart",
        })
    }
}
