//! The agent: one per node. Node 0's agent leads (`leader`), the others follow
//! (`follower`).
//!
//! 1. Rendezvous: the leader claims a port ([`herd_rendezvous::Leader::bind`]); followers
//!    find it and authenticate. The leader learns every node's worker count and the address
//!    followers reached it at, which becomes `MASTER_ADDR`.
//! 2. Each attempt (`attempt`): the leader claims a fresh `MASTER_PORT` and sends
//!    `Start` (`message`); every agent spawns its workers with the full variable
//!    set ([`herd_slurm::worker_env`]).
//! 3. Supervision: a worker that exits non-zero or by a signal is reported to the leader;
//!    the leader tells every agent to tear down; every agent ends all its workers' processes
//!    (SIGTERM, grace, SIGKILL); the leader prints and writes the failure report and either
//!    restarts (`--max-restarts`) or ends the job: every agent exits non-zero.
//! 4. A follower that loses its leader tears down instead of hanging; the leader treats a
//!    lost follower as a failure.
//! 5. Signals ([`crate::signals`]): SIGUSR1/SIGUSR2 are forwarded to the workers;
//!    SIGTERM, SIGINT and SIGHUP end the job like a failure that is not retried.

use tokio::sync::mpsc;

use crate::config::Config;
use crate::error::AgentError;
use crate::event::Event;
use crate::outcome::Outcome;
use crate::{follower, leader, procs, signals};

/// Run this node's agent to the end of the job.
pub async fn run(cfg: Config) -> Result<Outcome, AgentError> {
    procs::become_subreaper();
    std::fs::create_dir_all(cfg.log_dir.path()).map_err(|source| AgentError::Logs {
        path: cfg.log_dir.path().to_owned(),
        source,
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    signals::watch(tx.clone(), Event::Signal);
    let pool = cfg.warm.clone();
    let outcome = if cfg.node_rank == 0 {
        leader::lead(cfg, tx, rx).await
    } else {
        follower::follow(cfg, tx, rx).await
    };
    // Unused standbys end with the agent (not only by their parent-death signal, which
    // comes as the agent's process goes).
    if let Some(pool) = pool {
        pool.end().await;
    }
    outcome
}
