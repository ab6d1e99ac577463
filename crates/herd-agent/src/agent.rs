//! The agent: one per node. Node 0's agent leads (`leader`), the others follow
//! (`follower`).
//!
//! 1. Rendezvous: the leader claims a port ([`herd_rendezvous::Leader::bind`]); followers
//!    find it and authenticate. The leader learns every node's worker count and the address
//!    followers reached it at, which becomes `MASTER_ADDR`.
//! 2. Each attempt (`attempt`): the leader claims a fresh `MASTER_PORT` and sends
//!    `Start` (`protocol`); every agent spawns its workers with the full variable
//!    set ([`herd_slurm::worker_env`]).
//! 3. Supervision: a worker that exits non-zero or by a signal is reported to the leader;
//!    the leader tells every agent to tear down; every agent ends all its workers' processes
//!    (SIGTERM, grace, SIGKILL); the leader prints and writes the failure report and either
//!    restarts (`--max-restarts`) or ends the job: every agent exits non-zero.
//! 4. A follower that loses its leader tears down instead of hanging; the leader treats a
//!    lost follower as a failure.
//! 5. Signals ([`crate::signals`]): SIGUSR1/SIGUSR2 are forwarded to the workers;
//!    SIGTERM, SIGINT and SIGHUP end the job like a failure that is not retried.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use herd_exp::layout::LogsDir;
pub use herd_plan::launch::{KeepAlive, OnHang};
use herd_rendezvous::{JobKey, RendezvousError};
use herd_slurm::LaunchInfo;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use crate::protocol::Msg;
use crate::{follower, leader, procs, signals};
use herd_exp::failure::FailureReport;

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
    /// Where each attempt's per-rank logs go (`herd_exp::layout`).
    pub log_dir: LogsDir,
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

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every worker on every node exited 0.
    Success,
    /// The job failed; the leader has the report, followers may not.
    Failed(Option<FailureReport>),
    /// The workers were stopped for `cause` and the job requeued: it runs again.
    Requeued(herd_slurm::scheduler::lifecycle::Cause),
}

/// Errors that stop an agent before supervision can say anything better.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Finding the other nodes failed.
    #[error("rendezvous failed: {0}")]
    Rendezvous(#[from] RendezvousError),
    /// A follower announced a node rank that does not fit.
    #[error("{0}")]
    Layout(String),
    /// The log folder cannot be created.
    #[error("cannot create log folder {path}: {source}")]
    Logs {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What an agent's event loop hears about.
pub(crate) enum Event {
    /// One of this node's workers exited.
    WorkerExited {
        attempt: u32,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    },
    /// A peer sent a message (`msg`), or was lost (`msg: None`, `why`).
    Peer {
        node_rank: u32,
        msg: Option<Msg>,
        why: String,
    },
    /// This agent received a signal of [`signals::HANDLED`].
    Signal(Signal),
}

/// The cause in the report when a signal ends the job.
pub(crate) fn cancelled(host: &str, sig: Signal) -> String {
    format!(
        "the agent on {host} received {}: job cancelled",
        sig.as_str()
    )
}

pub(crate) fn say(msg: impl AsRef<str>) {
    eprintln!("herd: {}", msg.as_ref());
}

/// `n` and `noun`, plural unless one: `1 node`, `2 nodes`.
pub(crate) fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Run this node's agent to the end of the job.
pub async fn run(cfg: Config) -> Result<Outcome, AgentError> {
    procs::become_subreaper();
    std::fs::create_dir_all(cfg.log_dir.path()).map_err(|source| AgentError::Logs {
        path: cfg.log_dir.path().to_owned(),
        source,
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    signals::watch(tx.clone(), Event::Signal);
    if cfg.node_rank == 0 {
        leader::lead(cfg, tx, rx).await
    } else {
        follower::follow(cfg, tx, rx).await
    }
}
