//! The agent: one per node. Node 0's agent leads.
//!
//! 1. Rendezvous: the leader claims a port ([`herd_rendezvous::Leader::bind`]); followers
//!    find it and authenticate. The leader learns every node's worker count and the address
//!    followers reached it at, which becomes `MASTER_ADDR`.
//! 2. Each attempt: the leader claims a fresh `MASTER_PORT` and sends `Start`; every agent
//!    spawns its workers with the full variable set ([`herd_slurm::worker_env`]).
//! 3. Supervision: a worker that exits non-zero or by a signal is reported to the leader;
//!    the leader tells every agent to tear down; every agent ends all its workers' processes
//!    (SIGTERM, grace, SIGKILL); the leader prints and writes the failure report and either
//!    restarts (`--max-restarts`) or ends the job: every agent exits non-zero.
//! 4. A follower that loses its leader tears down instead of hanging; the leader treats a
//!    lost follower as a failure.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use herd_rendezvous::{read_frame, write_frame, JobKey, Leader, NodeInfo, RendezvousError};
use herd_slurm::{worker_env, GpuBind, LaunchInfo, Layout, Position};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use crate::error_file::{error_file_path, WorkerError};
use crate::procs;
use crate::report::{Exit, FailureReport};
use crate::workers::{spawn, OutputConfig, OutputSink, Running, WorkerSpec};

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
    /// `TORCHELASTIC_RUN_ID`.
    pub run_id: String,
    /// Per-rank logs go to `log_dir/attempt-K/rank-R.{out,err}`.
    pub log_dir: PathBuf,
    /// Label console lines with the rank.
    pub label: bool,
    /// Restarts of all workers allowed after a failure.
    pub max_restarts: u32,
    /// Time between SIGTERM and SIGKILL at teardown.
    pub kill_grace: Duration,
    /// How long nodes may take to find each other.
    pub rendezvous_timeout: Duration,
    /// Silence after which a peer counts as lost.
    pub heartbeat_timeout: Duration,
    /// Candidate rendezvous ports to try.
    pub port_candidates: usize,
    /// This node's GPUs (device ids).
    pub node_gpus: Vec<String>,
    /// Which of them each worker sees.
    pub gpu_bind: GpuBind,
    /// This node's CPUs for the workers.
    pub node_cpus: Option<u32>,
    /// `OMP_NUM_THREADS` the user set (kept).
    pub user_omp_threads: Option<String>,
    /// SLURM job id, when under SLURM.
    pub job_id: Option<u64>,
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every worker on every node exited 0.
    Success,
    /// The job failed; the leader has the report, followers may not.
    Failed(Option<FailureReport>),
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

/// Messages between agents after the handshake.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Msg {
    Start {
        attempt: u32,
        master_addr: String,
        master_port: u16,
        tasks_per_node: Vec<u32>,
    },
    /// A follower's worker failed (the follower has already torn its node down).
    Failed {
        report: FailureReport,
    },
    /// All of a follower's workers exited 0.
    NodeDone {
        attempt: u32,
    },
    /// Leader → followers: end your workers now.
    Teardown {
        attempt: u32,
    },
    /// Follower → leader: my workers are gone.
    TornDown {
        attempt: u32,
    },
    /// Leader → followers: the job is over.
    Finish {
        ok: bool,
    },
    Heartbeat,
}

enum Event {
    WorkerExited {
        attempt: u32,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    },
    Peer {
        node_rank: u32,
        msg: Option<Msg>,
        why: String,
    },
    Signal(Signal),
}

/// Read frames from a peer into the event channel; silence past `timeout` or a closed
/// connection ends with `msg: None`. With `patient`, silence counts only after the first
/// message (a follower waits quietly while the leader gathers the other nodes).
fn read_peer(
    mut r: OwnedReadHalf,
    node_rank: u32,
    timeout: Duration,
    patient: bool,
    tx: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let mut heard = !patient;
        loop {
            let limit = if heard {
                timeout
            } else {
                Duration::from_secs(86_400 * 365)
            };
            let read = tokio::time::timeout(limit, read_frame::<_, Msg>(&mut r)).await;
            heard = true;
            let why = match read {
                Ok(Ok(Some(Msg::Heartbeat))) => continue,
                Ok(Ok(Some(msg))) => {
                    if tx
                        .send(Event::Peer {
                            node_rank,
                            msg: Some(msg),
                            why: String::new(),
                        })
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                Ok(Ok(None)) => "its connection closed (agent exited or node died)".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no word from it for {timeout:?}"),
            };
            let _ = tx.send(Event::Peer {
                node_rank,
                msg: None,
                why,
            });
            return;
        }
    });
}

fn watch_signals(tx: mpsc::UnboundedSender<Event>) {
    use tokio::signal::unix::{signal, SignalKind};
    for (kind, sig) in [
        (SignalKind::terminate(), Signal::SIGTERM),
        (SignalKind::interrupt(), Signal::SIGINT),
        (SignalKind::user_defined1(), Signal::SIGUSR1),
        (SignalKind::user_defined2(), Signal::SIGUSR2),
    ] {
        let Ok(mut stream) = signal(kind) else {
            continue;
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(Event::Signal(sig)).is_err() {
                    return;
                }
            }
        });
    }
}

/// A port nobody holds right now, for the workers' TCPStore (rank 0 binds it right after).
fn claim_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
    Ok(l.local_addr()?.port())
}

/// This node's running attempt.
struct Attempt {
    number: u32,
    /// `LOG_DIR/attempt-K`: its per-rank logs and error files.
    dir: PathBuf,
    running: HashMap<u32, Running>,
    groups: Vec<i32>,
    managed: HashSet<i32>,
    sink: Option<OutputSink>,
}

impl Attempt {
    async fn start(
        cfg: &Config,
        number: u32,
        layout: &Layout,
        master: (&str, u16),
        tx: &mpsc::UnboundedSender<Event>,
    ) -> Result<Attempt, FailureReport> {
        let host = &cfg.node_names[cfg.node_rank as usize];
        let dir = cfg.log_dir.join(format!("attempt-{number}"));
        let sink = OutputSink::start(OutputConfig {
            dir: dir.clone(),
            label: cfg.label,
            console: true,
        })
        .map_err(|e| {
            FailureReport::other(
                number,
                cfg.node_rank,
                host,
                format!("cannot write logs into {}: {e}", dir.display()),
            )
        })?;
        let info = LaunchInfo {
            master_addr: master.0.to_owned(),
            master_port: Some(master.1),
            run_id: cfg.run_id.clone(),
            restart_count: number,
            max_restarts: cfg.max_restarts,
            node_gpus: cfg.node_gpus.clone(),
            gpu_bind: cfg.gpu_bind,
            node_cpus: cfg.node_cpus,
            user_omp_threads: cfg.user_omp_threads.clone(),
            job_id: cfg.job_id,
        };
        let first = layout.first_rank(cfg.node_rank as usize);
        let mut attempt = Attempt {
            number,
            dir: dir.clone(),
            running: HashMap::new(),
            groups: Vec::new(),
            managed: HashSet::new(),
            sink: Some(sink),
        };
        for local_rank in 0..layout.tasks_per_node[cfg.node_rank as usize] {
            let pos = Position {
                rank: first + local_rank,
                local_rank,
                node_rank: cfg.node_rank,
            };
            let mut env = worker_env(layout, pos, &info);
            env.insert("HERD_LOG_DIR".into(), dir.display().to_string());
            // torch's @record writes the exception here, as under torchrun; a file left by
            // an earlier run with the same log folder must not be taken for this one's.
            let error_file = error_file_path(&dir, pos.rank);
            match std::fs::remove_file(&error_file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(FailureReport::other(
                        number,
                        cfg.node_rank,
                        host,
                        format!(
                            "cannot remove the stale error file {}: {e}",
                            error_file.display()
                        ),
                    ))
                }
            }
            env.insert(
                "TORCHELASTIC_ERROR_FILE".into(),
                error_file.display().to_string(),
            );
            let spec = WorkerSpec {
                rank: pos.rank,
                local_rank,
                env,
            };
            let sink = attempt.sink.as_ref().ok_or_else(|| {
                FailureReport::other(number, cfg.node_rank, host, "output closed".into())
            })?;
            match spawn(&cfg.argv, &spec, sink) {
                Ok((running, mut child)) => {
                    attempt.groups.push(running.pid);
                    attempt.managed.insert(running.pid);
                    let tx = tx.clone();
                    let rank = running.rank;
                    tokio::spawn(async move {
                        let status = child.wait().await;
                        let _ = tx.send(Event::WorkerExited {
                            attempt: number,
                            rank,
                            status,
                        });
                    });
                    attempt.running.insert(pos.rank, running);
                }
                Err(e) => {
                    let cmd = cfg
                        .argv
                        .first()
                        .map(|a| a.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    return Err(FailureReport::other(
                        number,
                        cfg.node_rank,
                        host,
                        format!("cannot start rank {} (`{cmd}`): {e}", pos.rank),
                    ));
                }
            }
        }
        Ok(attempt)
    }

    /// A worker exited: `None` if that was fine, the report if it failed.
    async fn exited(
        &mut self,
        cfg: &Config,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    ) -> Option<FailureReport> {
        let mut w = self.running.remove(&rank)?;
        let exit = match status {
            Ok(s) => Exit::from_status(s),
            Err(_) => Exit::Code(-1),
        };
        if exit.success() {
            return None;
        }
        // Let the reader drain what the worker wrote last (children may hold the pipe).
        if let Some(closed) = w.stderr_closed.take() {
            let _ = tokio::time::timeout(Duration::from_millis(150), closed).await;
        }
        let tail = w
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let error = WorkerError::read(&error_file_path(&self.dir, rank));
        Some(FailureReport::worker(
            self.number,
            (rank, w.local_rank, cfg.node_rank),
            &cfg.node_names[cfg.node_rank as usize],
            exit,
            error,
            tail,
        ))
    }

    fn forward(&self, sig: Signal) {
        procs::forward(&self.groups, sig);
    }

    /// End every process of this attempt on this node, then flush its output.
    async fn teardown(&mut self, grace: Duration) {
        procs::terminate_all(&self.groups, &self.managed, grace).await;
        self.running.clear();
        // Those groups are gone; never signal their ids again (they may be reused).
        self.groups.clear();
        if let Some(sink) = self.sink.take() {
            // Pipes held by killed processes are closed now; give the readers a moment.
            let _ = tokio::time::timeout(Duration::from_secs(2), sink.finish()).await;
        }
    }

    async fn finish_output(&mut self) {
        if let Some(sink) = self.sink.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), sink.finish()).await;
        }
    }
}

fn say(msg: impl AsRef<str>) {
    eprintln!("herd: {}", msg.as_ref());
}

/// Run this node's agent to the end of the job.
pub async fn run(cfg: Config) -> Result<Outcome, AgentError> {
    procs::become_subreaper();
    std::fs::create_dir_all(&cfg.log_dir).map_err(|source| AgentError::Logs {
        path: cfg.log_dir.clone(),
        source,
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    watch_signals(tx.clone());
    if cfg.node_rank == 0 {
        lead(cfg, tx, rx).await
    } else {
        follow(cfg, tx, rx).await
    }
}

struct Follower {
    node_rank: u32,
    host: String,
    writer: OwnedWriteHalf,
    alive: bool,
}

async fn broadcast(followers: &mut [Follower], msg: &Msg) {
    for f in followers.iter_mut().filter(|f| f.alive) {
        if write_frame(&mut f.writer, msg).await.is_err() {
            f.alive = false;
        }
    }
}

fn write_report(cfg: &Config, report: &FailureReport) {
    let text = match serde_json::to_string_pretty(report) {
        Ok(t) => t + "\n",
        Err(_) => return,
    };
    for path in [
        cfg.log_dir
            .join(format!("attempt-{}", report.attempt))
            .join("failure.json"),
        cfg.log_dir.join("failure.json"),
    ] {
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        // Written to a temporary name and renamed: a reader never sees half a report.
        let tmp = path.with_extension("json.tmp");
        if std::fs::write(&tmp, &text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }
}

async fn lead(
    cfg: Config,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Outcome, AgentError> {
    let nnodes = cfg.node_names.len() as u32;
    let host = cfg.node_names[0].clone();
    let mut followers: Vec<Follower> = Vec::new();
    let mut tasks_per_node = vec![cfg.nproc; nnodes as usize];
    let mut master_addr = IpAddr::V4(Ipv4Addr::LOCALHOST).to_string();
    if nnodes > 1 {
        let leader = Leader::bind(
            cfg.key.clone(),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            cfg.port_candidates,
        )
        .await?;
        say(format!(
            "leader on {host}: rendezvous port {}, waiting for {} nodes",
            leader.port,
            nnodes - 1
        ));
        let deadline = tokio::time::Instant::now() + cfg.rendezvous_timeout;
        let mut seen = HashSet::new();
        while followers.len() < (nnodes - 1) as usize {
            let accepted = tokio::time::timeout_at(deadline, leader.accept())
                .await
                .map_err(|_| {
                    let missing: Vec<String> = (1..nnodes)
                        .filter(|r| !seen.contains(r))
                        .map(|r| cfg.node_names[r as usize].clone())
                        .collect();
                    AgentError::Rendezvous(RendezvousError::Timeout(format!(
                        "nodes {} did not join within {:?}",
                        missing.join(", "),
                        cfg.rendezvous_timeout
                    )))
                })??;
            let (link, info) = accepted;
            if info.node_rank == 0 || info.node_rank >= nnodes || !seen.insert(info.node_rank) {
                return Err(AgentError::Layout(format!(
                    "agent on {} claims node rank {} (expected 1..{} once each): is more than one agent running per node?",
                    info.host,
                    info.node_rank,
                    nnodes - 1
                )));
            }
            if followers.is_empty() {
                // The address followers reached us at is one every node can reach.
                master_addr = link.local.ip().to_string();
            }
            tasks_per_node[info.node_rank as usize] = info.nproc;
            let (r, w) = link.into_split();
            read_peer(r, info.node_rank, cfg.heartbeat_timeout, false, tx.clone());
            followers.push(Follower {
                node_rank: info.node_rank,
                host: info.host,
                writer: w,
                alive: true,
            });
        }
    }
    let layout = Layout {
        nodes: cfg.node_names.clone(),
        tasks_per_node: tasks_per_node.clone(),
    };
    say(format!(
        "{} workers on {} nodes, master {master_addr}",
        layout.world_size(),
        nnodes
    ));
    let mut heartbeat = tokio::time::interval(cfg.heartbeat_timeout / 4);
    let mut number = 0;
    loop {
        let port = claim_port()
            .map_err(|e| AgentError::Layout(format!("cannot claim a MASTER_PORT: {e}")))?;
        broadcast(
            &mut followers,
            &Msg::Start {
                attempt: number,
                master_addr: master_addr.clone(),
                master_port: port,
                tasks_per_node: tasks_per_node.clone(),
            },
        )
        .await;
        let mut failure: Option<(FailureReport, bool)> = None;
        let mut attempt =
            match Attempt::start(&cfg, number, &layout, (&master_addr, port), &tx).await {
                Ok(a) => Some(a),
                Err(report) => {
                    failure = Some((report, false));
                    None
                }
            };
        let mut done_nodes: HashSet<u32> = HashSet::new();
        // Supervise until success or the first failure.
        while failure.is_none() {
            let Some(a) = attempt.as_mut() else { break };
            if a.running.is_empty() && done_nodes.len() == followers.len() {
                break;
            }
            let event = tokio::select! {
                e = rx.recv() => e,
                _ = heartbeat.tick() => { broadcast(&mut followers, &Msg::Heartbeat).await; continue; }
            };
            let Some(event) = event else { break };
            match event {
                Event::WorkerExited {
                    attempt: n,
                    rank,
                    status,
                } if n == a.number => {
                    if let Some(report) = a.exited(&cfg, rank, status).await {
                        failure = Some((report, true));
                    }
                }
                Event::WorkerExited { .. } => {}
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::NodeDone { attempt: n }),
                    ..
                } if n == number => {
                    done_nodes.insert(node_rank);
                }
                Event::Peer {
                    msg: Some(Msg::Failed { report }),
                    ..
                } if report.attempt == number => {
                    failure = Some((report, true));
                }
                Event::Peer { msg: Some(_), .. } => {}
                Event::Peer {
                    node_rank,
                    msg: None,
                    why,
                } => {
                    let f = followers.iter_mut().find(|f| f.node_rank == node_rank);
                    let lost_host = f.as_ref().map(|f| f.host.clone()).unwrap_or_default();
                    if let Some(f) = f {
                        f.alive = false;
                    }
                    failure = Some((
                        FailureReport::other(
                            number,
                            node_rank,
                            &lost_host,
                            format!("lost node {node_rank} ({lost_host}): {why}"),
                        ),
                        false,
                    ));
                }
                Event::Signal(sig @ (Signal::SIGTERM | Signal::SIGINT)) => {
                    a.forward(sig);
                    failure = Some((
                        FailureReport::other(
                            number,
                            0,
                            &host,
                            format!(
                                "the agent on {host} received {}: job cancelled",
                                sig.as_str()
                            ),
                        ),
                        false,
                    ));
                }
                Event::Signal(sig) => {
                    say(format!("forwarding {} to the workers", sig.as_str()));
                    a.forward(sig);
                }
            }
        }
        let Some((report, retryable)) = failure else {
            if let Some(a) = attempt.as_mut() {
                a.finish_output().await;
            }
            broadcast(&mut followers, &Msg::Finish { ok: true }).await;
            say(format!("all {} workers finished", layout.world_size()));
            return Ok(Outcome::Success);
        };
        // Teardown everywhere: followers first (they work in parallel), then this node.
        broadcast(&mut followers, &Msg::Teardown { attempt: number }).await;
        if let Some(a) = attempt.as_mut() {
            a.teardown(cfg.kill_grace).await;
        }
        wait_torn_down(
            &mut followers,
            &mut rx,
            number,
            cfg.kill_grace + Duration::from_secs(5),
        )
        .await;
        eprint!("{}", report.human());
        write_report(&cfg, &report);
        if retryable && number < cfg.max_restarts && followers.iter().all(|f| f.alive) {
            number += 1;
            say(format!(
                "restarting all workers: attempt {number} of at most {}",
                cfg.max_restarts
            ));
            continue;
        }
        broadcast(&mut followers, &Msg::Finish { ok: false }).await;
        return Ok(Outcome::Failed(Some(report)));
    }
}

/// Wait until every live follower confirms its teardown (or is lost), at most `limit`.
async fn wait_torn_down(
    followers: &mut [Follower],
    rx: &mut mpsc::UnboundedReceiver<Event>,
    number: u32,
    limit: Duration,
) {
    let mut pending: HashSet<u32> = followers
        .iter()
        .filter(|f| f.alive)
        .map(|f| f.node_rank)
        .collect();
    let deadline = tokio::time::Instant::now() + limit;
    while !pending.is_empty() {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            break;
        };
        match event {
            Event::Peer {
                node_rank,
                msg: Some(Msg::TornDown { attempt }),
                ..
            } if attempt == number => {
                pending.remove(&node_rank);
            }
            Event::Peer {
                node_rank,
                msg: None,
                ..
            } => {
                pending.remove(&node_rank);
                if let Some(f) = followers.iter_mut().find(|f| f.node_rank == node_rank) {
                    f.alive = false;
                }
            }
            _ => {}
        }
    }
    for f in followers.iter().filter(|f| pending.contains(&f.node_rank)) {
        say(format!(
            "node {} ({}) did not confirm its teardown in time",
            f.node_rank, f.host
        ));
    }
}

async fn follow(
    cfg: Config,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Outcome, AgentError> {
    let host = cfg.node_names[cfg.node_rank as usize].clone();
    let info = NodeInfo {
        node_rank: cfg.node_rank,
        host: host.clone(),
        nproc: cfg.nproc,
        pid: std::process::id(),
    };
    let link = herd_rendezvous::connect(
        &cfg.key,
        cfg.leader_ip,
        &info,
        cfg.port_candidates,
        cfg.rendezvous_timeout,
    )
    .await?;
    let (r, mut w) = link.into_split();
    read_peer(r, 0, cfg.heartbeat_timeout, true, tx.clone());
    let mut heartbeat = tokio::time::interval(cfg.heartbeat_timeout / 4);
    let mut attempt: Option<Attempt> = None;
    // Once this node has failed or been told to stop, only the leader's word moves on.
    let mut stopped = false;
    loop {
        let event = tokio::select! {
            e = rx.recv() => e,
            _ = heartbeat.tick() => {
                if write_frame(&mut w, &Msg::Heartbeat).await.is_err() {
                    if let Some(a) = attempt.as_mut() { a.teardown(cfg.kill_grace).await; }
                    say(format!("node {}: lost the leader (cannot write to it): tore down this node's workers", cfg.node_rank));
                    return Ok(Outcome::Failed(None));
                }
                continue;
            }
        };
        let Some(event) = event else {
            return Ok(Outcome::Failed(None));
        };
        match event {
            Event::Peer {
                msg:
                    Some(Msg::Start {
                        attempt: n,
                        master_addr,
                        master_port,
                        tasks_per_node,
                    }),
                ..
            } => {
                if let Some(a) = attempt.as_mut() {
                    a.teardown(cfg.kill_grace).await;
                }
                let layout = Layout {
                    nodes: cfg.node_names.clone(),
                    tasks_per_node,
                };
                if layout.tasks_per_node.len() != layout.nodes.len() {
                    return Err(AgentError::Layout(
                        "leader sent a layout for another node count".into(),
                    ));
                }
                stopped = false;
                match Attempt::start(&cfg, n, &layout, (&master_addr, master_port), &tx).await {
                    Ok(a) => attempt = Some(a),
                    Err(report) => {
                        stopped = true;
                        let _ = write_frame(&mut w, &Msg::Failed { report }).await;
                        let _ = write_frame(&mut w, &Msg::TornDown { attempt: n }).await;
                    }
                }
            }
            Event::Peer {
                msg: Some(Msg::Teardown { attempt: n }),
                ..
            } => {
                if let Some(a) = attempt.as_mut() {
                    a.teardown(cfg.kill_grace).await;
                }
                stopped = true;
                let _ = write_frame(&mut w, &Msg::TornDown { attempt: n }).await;
            }
            Event::Peer {
                msg: Some(Msg::Finish { ok }),
                ..
            } => {
                if let Some(a) = attempt.as_mut() {
                    if ok {
                        a.finish_output().await;
                    } else {
                        a.teardown(cfg.kill_grace).await;
                    }
                }
                return Ok(if ok {
                    Outcome::Success
                } else {
                    Outcome::Failed(None)
                });
            }
            Event::Peer { msg: Some(_), .. } => {}
            Event::Peer { msg: None, why, .. } => {
                if let Some(a) = attempt.as_mut() {
                    a.teardown(cfg.kill_grace).await;
                }
                say(format!(
                    "node {} ({host}): lost the leader: {why}; tore down this node's workers",
                    cfg.node_rank
                ));
                return Ok(Outcome::Failed(None));
            }
            Event::WorkerExited {
                attempt: n,
                rank,
                status,
            } => {
                let Some(a) = attempt.as_mut().filter(|a| a.number == n && !stopped) else {
                    continue;
                };
                if let Some(report) = a.exited(&cfg, rank, status).await {
                    stopped = true;
                    // Tell the leader first (it starts every other node's teardown), then
                    // end this node's workers.
                    let _ = write_frame(&mut w, &Msg::Failed { report }).await;
                    a.teardown(cfg.kill_grace).await;
                    let _ = write_frame(&mut w, &Msg::TornDown { attempt: n }).await;
                } else if a.running.is_empty() {
                    a.finish_output().await;
                    let _ = write_frame(&mut w, &Msg::NodeDone { attempt: n }).await;
                }
            }
            Event::Signal(sig @ (Signal::SIGTERM | Signal::SIGINT)) => {
                let n = attempt.as_ref().map_or(0, |a| a.number);
                if let Some(a) = attempt.as_mut() {
                    a.forward(sig);
                    a.teardown(cfg.kill_grace).await;
                }
                if !stopped {
                    stopped = true;
                    let report = FailureReport::other(
                        n,
                        cfg.node_rank,
                        &host,
                        format!(
                            "the agent on {host} received {}: job cancelled",
                            sig.as_str()
                        ),
                    );
                    let _ = write_frame(&mut w, &Msg::Failed { report }).await;
                    let _ = write_frame(&mut w, &Msg::TornDown { attempt: n }).await;
                }
            }
            Event::Signal(sig) => {
                if let Some(a) = attempt.as_ref() {
                    a.forward(sig);
                }
            }
        }
    }
}
