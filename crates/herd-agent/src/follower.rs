//! A node's agent other than node 0's: joins the leader, starts each attempt it is told to,
//! reports its workers' failures and completion, tears down when told (or when the leader
//! is lost) and ends when the leader says the job is over.
//!
//! A small state machine: [`Follow`] holds this node's state and each event goes to its
//! handler (`on_start`, `on_stop`, `on_worker_exit`, `on_lost_leader`, `on_signal`, …).

use std::time::Duration;

use herd_rendezvous::NodeInfo;
use herd_slurm::scheduler::lifecycle::Cause;
use herd_slurm::Layout;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::attempt::Attempt;
use crate::config::Config;
use crate::error::AgentError;
use crate::event::Event;
use crate::keep::{no_longer_running, record_run, requeue};
use crate::message::Msg;
use crate::outcome::Outcome;
use crate::protocol::{heartbeat_every, read_peer, send, Writer};
use crate::signals::{self, Action};
use crate::words::{cancelled, say};
use herd_exp::failure::FailureReport;
use herd_exp::timeline;

/// Follow the leader to the end of the job.
pub(crate) async fn follow(
    cfg: Config,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Outcome, AgentError> {
    let host = cfg.host().to_owned();
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
    let (r, w) = link.into_split();
    read_peer(r, 0, cfg.heartbeat_timeout, true, tx.clone());
    let w = Writer::new(w);
    w.beat(heartbeat_every(cfg.heartbeat_timeout), 0, tx.clone());
    let mut watchdog = tokio::time::interval(Duration::from_secs(1));
    let hang_watch = cfg.keep.watchdog().is_some();
    let mut me = Follow {
        cfg,
        host,
        tx,
        w,
        attempt: None,
        stopped: false,
        stopping: false,
        on_my_own: None,
        pending: None,
    };
    loop {
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        let done = tokio::select! {
            e = rx.recv() => match e {
                Some(event) => me.on_event(event).await?,
                None => Some(Outcome::Failed(None)),
            },
            _ = tokio::time::sleep_until(me.on_my_own.unwrap_or(far)) => {
                Some(me.on_no_word_after_signal().await)
            }
            _ = watchdog.tick(), if hang_watch => {
                me.on_progress_tick().await;
                None
            }
        };
        if let Some(outcome) = done {
            return Ok(outcome);
        }
    }
}

/// A follower's state.
struct Follow {
    cfg: Config,
    /// This node's name.
    host: String,
    /// Where this node's workers send their exits (each attempt's start needs it).
    tx: mpsc::UnboundedSender<Event>,
    /// The link to the leader (its heartbeats go from a task of their own).
    w: Writer,
    attempt: Option<Attempt>,
    /// Once this node has failed or been told to stop, only the leader's word moves on.
    stopped: bool,
    /// The leader asked the workers to checkpoint and stop: their exits are expected.
    stopping: bool,
    /// This agent got SIGTERM/SIGINT/SIGHUP and told the leader; if the leader says nothing
    /// by then, this node ends its workers by itself.
    on_my_own: Option<Instant>,
    /// An attempt whose preflight this node ran: it starts at the leader's `Go`.
    pending: Option<Pending>,
}

/// The leader's `Start`, as this node keeps it until it starts the workers.
struct Pending {
    attempt: u32,
    master: (String, u16),
    /// Tasks per node, and the nodes that run workers (all when empty).
    layout: (Vec<u32>, Vec<u32>),
    restarts: u32,
    resume_from: Option<String>,
}

impl Follow {
    /// One event; `Some` when this agent's part of the job is over.
    async fn on_event(&mut self, event: Event) -> Result<Option<Outcome>, AgentError> {
        Ok(match event {
            Event::Peer { msg: Some(msg), .. } => return self.on_message(msg).await,
            Event::Peer { msg: None, why, .. } => Some(self.on_lost_leader(&why).await),
            Event::WorkerExited {
                attempt,
                rank,
                status,
            } => {
                self.on_worker_exit(attempt, rank, status).await;
                None
            }
            Event::Signal(sig) => self.on_signal(sig).await,
            Event::GpuError { attempt, error } => {
                let _ = send(&self.w, &Msg::GpuError { attempt, error }).await;
                None
            }
        })
    }

    /// The leader's word.
    async fn on_message(&mut self, msg: Msg) -> Result<Option<Outcome>, AgentError> {
        match msg {
            Msg::Start {
                attempt,
                master_addr,
                master_port,
                tasks_per_node,
                restarts,
                resume_from,
                nodes,
                preflight,
            } => {
                let start = Pending {
                    attempt,
                    master: (master_addr, master_port),
                    layout: (tasks_per_node, nodes),
                    restarts,
                    resume_from,
                };
                if preflight {
                    self.on_preflight(start).await;
                } else {
                    self.on_start(start).await?;
                }
            }
            Msg::Go { attempt } => {
                if let Some(start) = self.pending.take().filter(|p| p.attempt == attempt) {
                    self.on_start(start).await?;
                }
            }
            Msg::Stop { attempt, signal } => self.on_stop(attempt, &signal).await,
            Msg::Dump { attempt } => self.on_dump(attempt).await,
            Msg::Teardown { attempt, signal } => self.on_teardown(attempt, signal).await,
            Msg::Finish { ok } => return Ok(Some(self.on_finish(ok).await)),
            Msg::Dismiss { why } => return Ok(Some(self.on_dismiss(&why).await)),
            _ => {}
        }
        Ok(None)
    }

    /// Start attempt `n`'s workers of this node (the last attempt's are torn down first),
    /// on the attempt's nodes `nodes` (all when empty) with `tasks_per_node` each; a node
    /// not among them stands by. A worker that cannot start fails this node's part at once.
    async fn on_start(&mut self, start: Pending) -> Result<(), AgentError> {
        let Pending {
            attempt: n,
            master: (master_addr, master_port),
            layout: (tasks_per_node, nodes),
            restarts,
            resume_from,
        } = start;
        let master = (master_addr.as_str(), master_port);
        if let Some(a) = self.attempt.as_mut() {
            a.teardown(self.cfg.kill_grace).await;
        }
        self.attempt = None;
        let nodes: Vec<u32> = if nodes.is_empty() {
            (0..self.cfg.node_names.len() as u32).collect()
        } else {
            nodes
        };
        let names: Option<Vec<String>> = nodes
            .iter()
            .map(|&r| self.cfg.node_names.get(r as usize).cloned())
            .collect();
        let (Some(names), true) = (names, tasks_per_node.len() == nodes.len()) else {
            return Err(AgentError::Layout(
                "leader sent a layout for another node count".into(),
            ));
        };
        let Some(slot) = nodes.iter().position(|&r| r == self.cfg.node_rank) else {
            // A spare: it stands by until the leader puts it in a node's place, with its
            // standbys ready for the workers it would run there.
            self.stopped = true;
            let mut as_if = names;
            if let Some(last) = as_if.last_mut() {
                *last = self.cfg.host().to_owned();
            }
            let as_if = Layout {
                nodes: as_if,
                tasks_per_node,
            };
            if let Some(task) = Attempt::spare_standbys(&self.cfg, (n, restarts), &as_if, master) {
                // Left to finish: what it starts is the pool's, which the agent ends.
                drop(task);
            }
            return Ok(());
        };
        let layout = Layout {
            nodes: names,
            tasks_per_node,
        };
        self.stopped = false;
        self.stopping = false;
        match Attempt::start(
            &self.cfg,
            (n, restarts),
            (&layout, slot),
            master,
            resume_from,
            &self.tx,
        )
        .await
        {
            Ok(a) => self.attempt = Some(a),
            Err(report) => {
                self.stopped = true;
                let _ = send(
                    &self.w,
                    &Msg::Failed {
                        report: Box::new(report),
                    },
                )
                .await;
                let torn_down = Msg::TornDown {
                    attempt: n,
                    step: None,
                };
                let _ = send(&self.w, &torn_down).await;
            }
        }
        Ok(())
    }

    /// Check this node before attempt `start` (the last attempt's workers are torn down
    /// first) and tell the leader; the workers start at the leader's `Go`, whatever this
    /// node's check found.
    async fn on_preflight(&mut self, start: Pending) {
        if let Some(a) = self.attempt.as_mut() {
            a.teardown(self.cfg.kill_grace).await;
        }
        self.attempt = None;
        self.stopped = true;
        let master = Some(start.master.clone());
        let failed = match crate::preflight::check_node(&self.cfg, master).await {
            Ok(_) => None,
            Err(f) => {
                say(format!("{}: {f}", self.host));
                Some((f.check.to_owned(), f.detail))
            }
        };
        // Kept whatever the check found: the leader decides for the whole job (a check every
        // node fails alike is the job's, and the workers start everywhere at its `Go`; a node
        // it blames gets `Teardown`, which drops this).
        let attempt = start.attempt;
        self.pending = Some(start);
        let _ = send(&self.w, &Msg::Preflight { attempt, failed }).await;
    }

    /// The leader asks attempt `n`'s workers to checkpoint and stop, with `signal`: from
    /// now on their exits are expected.
    async fn on_stop(&mut self, n: u32, signal: &str) {
        let Some(a) = self.attempt.as_ref().filter(|a| a.number == n) else {
            return;
        };
        self.stopping = true;
        if let Ok(sig) = signal.parse::<Signal>() {
            a.forward(sig);
        }
        if a.running.is_empty() && !self.stopped {
            self.stopped = true;
            let _ = send(&self.w, &Msg::NodeDone { attempt: n }).await;
        }
    }

    /// The leader wants every rank's stack (the job hangs).
    async fn on_dump(&mut self, n: u32) {
        // A node without this attempt's workers (a spare) answers too, with no stack: the
        // leader waits for every node's answer before it decides.
        let stacks = match self.attempt.as_ref().filter(|a| a.number == n) {
            Some(a) => a.stacks(&self.cfg).await,
            None => Vec::new(),
        };
        let _ = send(&self.w, &Msg::Stacks { attempt: n, stacks }).await;
    }

    /// The leader ends attempt `n`: this node's workers go, with `signal` first when the
    /// job was cancelled by one; then the leader is told.
    async fn on_teardown(&mut self, n: u32, signal: Option<String>) {
        self.on_my_own = None;
        self.pending = None;
        if let Some(a) = self.attempt.as_mut() {
            let first = signal.and_then(|s| s.parse::<Signal>().ok());
            a.teardown_with(first.unwrap_or(Signal::SIGTERM), self.cfg.kill_grace)
                .await;
            send_gpu_errors(&self.w, a).await;
        }
        self.stopped = true;
        let step = self.attempt.as_ref().and_then(Attempt::highest_step);
        let _ = send(&self.w, &Msg::TornDown { attempt: n, step }).await;
    }

    /// The job is over, `ok` or not.
    async fn on_finish(&mut self, ok: bool) -> Outcome {
        if let Some(a) = self.attempt.as_mut() {
            if ok {
                a.finish_output().await;
            } else {
                a.teardown(self.cfg.kill_grace).await;
            }
        }
        if ok {
            Outcome::Success
        } else {
            Outcome::Failed(None)
        }
    }

    /// A spare takes this node's place: its workers go, and this agent ends without
    /// failing the job (the others carry on).
    async fn on_dismiss(&mut self, why: &str) -> Outcome {
        if let Some(a) = self.attempt.as_mut() {
            a.teardown(self.cfg.kill_grace).await;
        }
        say(format!(
            "node {} ({}): a spare takes this node's place ({why}); ending here",
            self.cfg.node_rank, self.host
        ));
        Outcome::Success
    }

    /// The leader is lost (its connection closed, or it went silent): this node's workers
    /// go, and node 1 acts for the leader ([`lost_leader`]).
    async fn on_lost_leader(&mut self, why: &str) -> Outcome {
        if let Some(a) = self.attempt.as_mut() {
            a.teardown(self.cfg.kill_grace).await;
        }
        say(format!(
            "node {} ({}): lost the leader: {why}; tore down this node's workers",
            self.cfg.node_rank, self.host
        ));
        lost_leader(&self.cfg, self.attempt.as_ref(), why).await
    }

    /// One of this node's workers exited. During a stop, whatever its status, as asked;
    /// otherwise a failure is told to the leader and ends this node's workers, and the
    /// last worker exiting 0 makes this node done.
    async fn on_worker_exit(
        &mut self,
        n: u32,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    ) {
        let stopped = self.stopped;
        let Some(a) = self.attempt.as_mut().filter(|a| a.number == n && !stopped) else {
            return;
        };
        if self.stopping {
            // Stopped as asked (whatever the status): done once all are gone.
            let _ = a.exited(&self.cfg, rank, status).await;
            if a.running.is_empty() {
                self.stopped = true;
                a.finish_output().await;
                let _ = send(&self.w, &Msg::NodeDone { attempt: n }).await;
            }
            return;
        }
        if let Some(report) = a.exited(&self.cfg, rank, status).await {
            self.stopped = true;
            // Tell the leader first (it starts every other node's teardown), then
            // end this node's workers.
            let _ = send(
                &self.w,
                &Msg::Failed {
                    report: Box::new(report),
                },
            )
            .await;
            a.teardown(self.cfg.kill_grace).await;
            send_gpu_errors(&self.w, a).await;
            let step = a.highest_step();
            let _ = send(&self.w, &Msg::TornDown { attempt: n, step }).await;
        } else if a.running.is_empty() {
            a.finish_output().await;
            let _ = send(&self.w, &Msg::NodeDone { attempt: n }).await;
        }
    }

    /// This agent received a handled signal: SIGTERM, SIGINT or SIGHUP go to the leader,
    /// SIGCONT is the leader's to read, the others are forwarded to this node's workers.
    async fn on_signal(&mut self, sig: Signal) -> Option<Outcome> {
        match signals::action(sig) {
            Some(Action::Terminate) => self.on_terminate(sig).await,
            // The leader gets the same SIGCONT from SLURM and asks the scheduler.
            Some(Action::Notice) => None,
            Some(Action::Forward) | None => {
                if let Some(a) = self.attempt.as_ref() {
                    a.forward(sig);
                }
                None
            }
        }
    }

    /// SIGTERM, SIGINT or SIGHUP: the leader decides (a cancel, a preemption, the time
    /// limit: the same signal reaches every agent of the job); this node acts alone after
    /// the stop's grace, or at once when the leader cannot be told.
    async fn on_terminate(&mut self, sig: Signal) -> Option<Outcome> {
        let told = send(
            &self.w,
            &Msg::Signalled {
                signal: sig.as_str().to_owned(),
            },
        )
        .await;
        if told.is_ok() {
            if self.on_my_own.is_none() {
                self.on_my_own = Some(
                    Instant::now()
                        + self.cfg.keep.stop_grace.duration()
                        + self.cfg.kill_grace
                        + Duration::from_secs(10),
                );
            }
            return None;
        }
        if let Some(a) = self.attempt.as_mut() {
            a.teardown_with(sig, self.cfg.kill_grace).await;
        }
        say(format!(
            "node {} ({}): {}; the leader cannot be told: tore down this node's workers",
            self.cfg.node_rank,
            self.host,
            cancelled(&self.host, sig)
        ));
        Some(Outcome::Failed(None))
    }

    /// The leader said nothing within the grace after this agent's signal: this node's
    /// workers go, and the leader (if it hears) gets this node's failure.
    async fn on_no_word_after_signal(&mut self) -> Outcome {
        let n = self.attempt.as_ref().map_or(0, |a| a.number);
        if let Some(a) = self.attempt.as_mut() {
            a.teardown(self.cfg.kill_grace).await;
        }
        let (node_rank, host) = (self.cfg.node_rank, &self.host);
        say(format!("node {node_rank} ({host}): no word from the leader after the signal: tore down this node's workers"));
        let report = FailureReport::other(
            n,
            node_rank,
            host,
            format!("the agent on {host} was signalled and the leader did not answer"),
        );
        let _ = send(
            &self.w,
            &Msg::Failed {
                report: Box::new(report),
            },
        )
        .await;
        Outcome::Failed(None)
    }

    /// Each second while the hang watchdog is on: how long each rank has made no progress,
    /// to the leader.
    async fn on_progress_tick(&mut self) {
        if let Some(a) = self.attempt.as_mut().filter(|_| !self.stopped) {
            let ranks = a.progress();
            let _ = send(
                &self.w,
                &Msg::Progress {
                    attempt: a.number,
                    ranks,
                },
            )
            .await;
        }
    }
}

/// The GPU errors `a`'s teardown found, to the leader (before the node says it is torn
/// down, so the leader has them when it decides what the attempt's end was).
async fn send_gpu_errors(w: &Writer, a: &mut Attempt) {
    for error in a.take_gpu_errors() {
        let attempt = a.number;
        let _ = send(w, &Msg::GpuError { attempt, error }).await;
    }
}

/// The leader is lost (its node crashed or froze) during attempt `number`: node 1's agent
/// acts for it, as the leader does for a lost follower. It writes the failure report naming
/// node 0, records the attempt, and requeues the job without node 0 when the budget for node
/// failures allows. Every other follower just ends.
async fn lost_leader(cfg: &Config, attempt: Option<&Attempt>, why: &str) -> Outcome {
    let Some(a) = attempt.filter(|_| cfg.node_rank == 1) else {
        return Outcome::Failed(None);
    };
    let number = a.number;
    let job = cfg.launch.job_ref.clone();
    // This node may have been the frozen one, woken by the leader's requeue.
    if let Some(state) = no_longer_running(job.as_deref(), Duration::from_secs(2)).await {
        say(format!(
            "node 1: job {} is {state} already: the leader acted; ending here",
            job.as_deref().unwrap_or("?")
        ));
        return Outcome::Requeued(Cause::NodeFailure);
    }
    let leader = cfg.node_names[0].clone();
    let report = FailureReport::other(
        number,
        0,
        &leader,
        format!("lost node 0 ({leader}), the leader: {why}"),
    );
    eprint!("{}", report.human());
    report.write(&cfg.log_dir);
    let record = |event: timeline::Event| cfg.record_here(event);
    record(
        timeline::Failed {
            attempt: number,
            cause: report.cause.clone(),
            kind: Some(Cause::NodeFailure.name().to_owned()),
            node: Some(cfg.node_rank),
            ..timeline::Failed::default()
        }
        .into(),
    );
    let requeued = requeue(
        cfg,
        job.as_deref(),
        number,
        Cause::NodeFailure,
        std::slice::from_ref(&leader),
        &record,
    )
    .await;
    let layout = Layout {
        nodes: cfg.node_names.clone(),
        tasks_per_node: Vec::new(),
    };
    let requeue_count = cfg.launch.requeues;
    record_run(
        cfg,
        &layout,
        (number, requeue_count),
        a.started_unix,
        Some(Cause::NodeFailure),
        if requeued { "requeue" } else { "end" },
        &a.resume_from,
    );
    if requeued {
        Outcome::Requeued(Cause::NodeFailure)
    } else {
        record(
            timeline::Finished {
                attempt: number,
                ok: false,
                cause: Some(Cause::NodeFailure.name().to_owned()),
            }
            .into(),
        );
        Outcome::Failed(Some(Box::new(report)))
    }
}
