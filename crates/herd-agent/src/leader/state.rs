//! The leader's state ([`Lead`]): what it knows of the whole job (its followers, the
//! layout, the master) and of the attempt that runs now; and the start of each attempt.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use herd_exp::timeline;
use herd_slurm::scheduler::lifecycle::Cause;
use herd_slurm::Layout;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{Instant, Interval};

use super::links::{broadcast, Follower};
use super::stall::Stall;
use crate::attempt::Attempt;
use crate::config::Config;
use crate::error::AgentError;
use crate::event::Event;
use crate::keep::unix_now;
use crate::message::{Msg, RankProgress};
use crate::words::say;
use herd_exp::failure::FailureReport;

/// How one attempt ended.
pub(super) enum End {
    /// Every worker exited 0.
    Success,
    /// The first failure, whether a restart may retry it, and its cause.
    Failed {
        report: Box<FailureReport>,
        retryable: bool,
        cause: Cause,
    },
    /// herd stopped the workers (they were asked to checkpoint) for `cause`.
    Stopped { cause: Cause },
}

/// Why a node is blamed: the kind (`lost`, `failures`, `preflight`) and the words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Blamed {
    pub(super) node: u32,
    pub(super) kind: &'static str,
    pub(super) why: String,
}

/// The attempt's stop in progress: why, and when what is left is torn down.
pub(super) struct Stopping {
    pub(super) cause: Cause,
    pub(super) deadline: Instant,
}

/// The leader's view of the job: the whole job's facts, then the attempt that runs now
/// (each attempt starts from fresh ones, [`Lead::start_attempt`]).
pub(super) struct Lead {
    pub(super) cfg: Config,
    /// This node's name.
    pub(super) host: String,
    /// SLURM's job id, when there is a job to ask SLURM about.
    pub(super) job_id: Option<String>,
    /// SLURM's requeue count of this job (`SLURM_RESTART_COUNT`).
    pub(super) requeue_count: u32,
    /// Where this node's workers send their exits (each attempt's start needs it).
    pub(super) tx: mpsc::UnboundedSender<Event>,
    /// Everything the leader hears: workers, followers, signals.
    pub(super) rx: mpsc::UnboundedReceiver<Event>,
    pub(super) followers: Vec<Follower>,
    /// Every node of the step and its worker count, by node rank.
    pub(super) layout: Layout,
    /// The node ranks that run workers, in the order their workers are ranked: node 0 and
    /// the next ones at first, a spare in a replaced node's place later.
    pub(super) active: Vec<u32>,
    /// Nodes that stand by (`--spare-nodes`), first to be used first.
    pub(super) spares: Vec<u32>,
    /// Nodes replaced in this allocation: (node rank, why).
    pub(super) replaced: Vec<(u32, String)>,
    /// The last worker failures, for blame: (node rank, failures in a row there).
    pub(super) failure_streak: Option<(u32, u32)>,
    /// Ranks whose failures blamed a node already: a rank that fails again on its new node
    /// is the code's fault, not a node's.
    pub(super) blamed_ranks: HashSet<u32>,
    /// The nodes whose workers failed by themselves in the attempt that just ended (the
    /// first failure's, and any other's heard during the teardown).
    pub(super) failed_nodes: HashSet<u32>,
    /// Nodes blamed in this allocation: a requeue leaves them out.
    pub(super) blamed_hosts: Vec<String>,
    /// The node the last preflight blamed, for the attempt's end to act on.
    pub(super) preflight_blame: Option<Blamed>,
    pub(super) master_addr: String,
    /// Each second: the first output, the hang watchdog.
    pub(super) watchdog: Interval,
    /// The first attempt's number in this allocation: restarts count from it.
    pub(super) first: u32,
    /// The current attempt's number.
    pub(super) number: u32,
    /// The checkpoint its workers resume from.
    pub(super) resume: Option<String>,
    /// When it started, seconds since the Unix epoch (for the manifest).
    pub(super) started_unix: u64,
    /// This node's share of it; `None` when its workers could not start.
    pub(super) attempt: Option<Attempt>,
    pub(super) stopping: Option<Stopping>,
    /// When herd's own warning before the time limit is due.
    pub(super) warn_at: Option<Instant>,
    /// Each follower rank's last progress report: (node rank, the report, when heard).
    pub(super) progress: HashMap<u32, (u32, RankProgress, Instant)>,
    /// The signal that cancelled this attempt: the followers pass it on before teardown.
    pub(super) cancelled_by: Option<Signal>,
    /// Followers whose workers all exited 0 (or stopped as asked), or tore down.
    pub(super) done_nodes: HashSet<u32>,
    /// Whether any of this node's workers has written a line (recorded once).
    pub(super) first_output: bool,
    /// The job was requeued by its own code during this attempt and herd took that as the
    /// attempt's requeue: `Some(true)`, or `Some(false)` when the budget refused it (the job
    /// was cancelled); herd then never requeues it itself.
    pub(super) requeued_by_job: Option<bool>,
    /// The attempts' progress in this allocation: restarts that make none stop early.
    pub(super) stall: Stall,
    /// The GPU errors of this attempt, by node rank: a hardware one blames its node when
    /// the attempt fails, and every one goes into the failure report's hint.
    pub(super) gpu_errors: Vec<(u32, herd_exp::gpus::GpuError)>,
}

impl Lead {
    /// The leader once every follower has joined (`followers`, `layout`, `master_addr`):
    /// the first attempt is the next free one of the log folder.
    pub(super) fn new(
        cfg: Config,
        (tx, rx): (mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Event>),
        followers: Vec<Follower>,
        layout: Layout,
        master_addr: String,
    ) -> Lead {
        let (active, spares) = split_spares(layout.nodes.len() as u32, cfg.spare_nodes);
        let watchdog = tokio::time::interval(Duration::from_secs(1));
        let first = cfg.log_dir.next_attempt();
        Lead {
            host: cfg.host().to_owned(),
            job_id: cfg.launch.job_ref.clone(),
            requeue_count: cfg.launch.requeues,
            cfg,
            tx,
            rx,
            followers,
            layout,
            active,
            spares,
            replaced: Vec::new(),
            failure_streak: None,
            blamed_ranks: HashSet::new(),
            failed_nodes: HashSet::new(),
            blamed_hosts: Vec::new(),
            preflight_blame: None,
            master_addr,
            watchdog,
            first,
            number: first,
            resume: None,
            started_unix: 0,
            attempt: None,
            stopping: None,
            warn_at: None,
            progress: HashMap::new(),
            cancelled_by: None,
            done_nodes: HashSet::new(),
            first_output: false,
            requeued_by_job: None,
            stall: Stall::default(),
            gpu_errors: Vec::new(),
        }
    }

    /// Start attempt `number` everywhere: a fresh `MASTER_PORT`, the checkpoint to resume
    /// from, `Start` to every follower, then this node's workers. `Some` is the attempt's
    /// end already: this node's workers could not start.
    pub(super) async fn start_attempt(&mut self) -> Result<Option<End>, AgentError> {
        // The last attempt is over (torn down everywhere).
        self.attempt = None;
        let number = self.number;
        let restarts = number - self.first;
        // With the preflight, the port is held while every node checks it answers.
        let held = if self.cfg.keep.preflight.is_on() {
            let held = crate::preflight::hold_port(&self.master_addr)
                .await
                .map_err(|e| AgentError::Layout(format!("cannot claim a MASTER_PORT: {e}")))?;
            Some(held)
        } else {
            None
        };
        let port = match &held {
            Some(h) => h.port(),
            None => claim_port()
                .map_err(|e| AgentError::Layout(format!("cannot claim a MASTER_PORT: {e}")))?,
        };
        let resume = resume_from(&self.cfg, number);
        let layout = self.attempt_layout();
        broadcast(
            &mut self.followers,
            &Msg::Start {
                attempt: number,
                master_addr: self.master_addr.clone(),
                master_port: port,
                tasks_per_node: layout.tasks_per_node.clone(),
                restarts,
                resume_from: resume.clone(),
                nodes: self.active.clone(),
                preflight: held.is_some(),
            },
        )
        .await;
        let spares = !self.spares.is_empty() || !self.replaced.is_empty();
        self.cfg.record(timeline::AttemptStarted {
            attempt: number,
            master_port: port,
            resume_from: resume.clone(),
            restarts: Some(restarts),
            requeue: self.requeue_count,
            nodes: spares.then(|| layout.nodes.clone()),
            spares: spares.then(|| self.spares.iter().map(|&r| self.host_of(r)).collect()),
        });
        self.started_unix = unix_now();
        self.resume = resume;
        self.stopping = None;
        self.progress.clear();
        self.gpu_errors.clear();
        // The time left is asked now and used once the workers run: the query (a process and
        // slurmctld's answer) never holds up their start.
        let time_left = self.ask_time_left();
        self.first_output = false;
        self.done_nodes.clear();
        // Nodes that run no workers in this attempt (spares, replaced ones) are done already.
        let idle: Vec<u32> = self
            .followers
            .iter()
            .map(|f| f.node_rank)
            .filter(|r| !self.active.contains(r))
            .collect();
        self.done_nodes.extend(idle);
        if let Some(held) = held {
            let failed = self.preflight(number, port).await;
            held.release().await;
            if let Some(end) = failed {
                return Ok(Some(end));
            }
            broadcast(&mut self.followers, &Msg::Go { attempt: number }).await;
        }
        match Attempt::start(
            &self.cfg,
            (number, restarts),
            (&layout, 0),
            (&self.master_addr, port),
            self.resume.clone(),
            &self.tx,
        )
        .await
        {
            Ok(a) => {
                self.attempt = Some(a);
                self.arm_warning(time_left).await;
                Ok(None)
            }
            Err(report) => Ok(Some(End::Failed {
                report: Box::new(report),
                retryable: false,
                cause: Cause::WorkerFailure,
            })),
        }
    }
}

/// The node ranks of a step of `nodes` nodes that run workers, and those that stand by:
/// the last `spares` (never node 0, whose agent leads).
pub(super) fn split_spares(nodes: u32, spares: u32) -> (Vec<u32>, Vec<u32>) {
    let working = nodes.saturating_sub(spares).max(1);
    ((0..working).collect(), (working..nodes).collect())
}

impl Lead {
    /// The attempt's layout: the nodes that run workers, in rank order, with their counts.
    pub(super) fn attempt_layout(&self) -> Layout {
        Layout {
            nodes: self.active.iter().map(|&r| self.host_of(r)).collect(),
            tasks_per_node: self
                .active
                .iter()
                .map(|&r| self.layout.tasks_per_node[r as usize])
                .collect(),
        }
    }

    /// Node `rank`'s name.
    pub(super) fn host_of(&self, rank: u32) -> String {
        self.layout
            .nodes
            .get(rank as usize)
            .cloned()
            .unwrap_or_else(|| format!("node {rank}"))
    }
}

/// A port nobody holds right now, for the workers' TCPStore (rank 0 binds it right after).
fn claim_port() -> std::io::Result<u16> {
    crate::preflight::claim_master_port()
}

/// The checkpoint every worker of attempt `number` resumes from (`HERD_RESUME_FROM`): the
/// newest complete one in the checkpoint folder now, decided here once for all nodes (their
/// views of a shared file system may lag) and said in the log.
fn resume_from(cfg: &Config, number: u32) -> Option<String> {
    let dir = cfg.launch.checkpoint_dir.as_ref()?;
    match cfg.launch.newest_checkpoint() {
        Ok(Some(path)) => match path.to_str() {
            Some(p) => {
                say(format!("attempt {number} resumes from {p}"));
                Some(p.to_owned())
            }
            None => {
                say(format!(
                    "attempt {number}: the newest checkpoint {} is not a UTF-8 path; HERD_RESUME_FROM is not set",
                    path.display()
                ));
                None
            }
        },
        Ok(None) => None,
        Err(e) => {
            say(format!(
                "attempt {number}: cannot read the checkpoint folder {}: {e}; HERD_RESUME_FROM is not set",
                dir.display()
            ));
            None
        }
    }
}
