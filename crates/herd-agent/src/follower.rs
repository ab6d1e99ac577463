//! A node's agent other than node 0's: joins the leader, starts each attempt it is told to,
//! reports its workers' failures and completion, tears down when told (or when the leader
//! is lost) and ends when the leader says the job is over.

use std::time::Duration;

use herd_rendezvous::NodeInfo;
use herd_slurm::Layout;
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use crate::attempt::Attempt;
use crate::config::Config;
use crate::error::AgentError;
use crate::event::Event;
use crate::keep::{no_longer_running, record_run, requeue, write_report};
use crate::message::Msg;
use crate::outcome::Outcome;
use crate::protocol::{read_peer, send};
use crate::report::FailureReport;
use crate::signals::{self, Action};
use crate::words::{cancelled, say};
use herd_slurm::lifecycle::Cause;

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
    let (r, mut w) = link.into_split();
    read_peer(r, 0, cfg.heartbeat_timeout, true, tx.clone());
    let mut heartbeat = tokio::time::interval(cfg.heartbeat_timeout / 4);
    let mut watchdog = tokio::time::interval(Duration::from_secs(1));
    let mut attempt: Option<Attempt> = None;
    // Once this node has failed or been told to stop, only the leader's word moves on.
    let mut stopped = false;
    // The leader asked the workers to checkpoint and stop: their exits are expected.
    let mut stopping = false;
    // This agent got SIGTERM/SIGINT/SIGHUP and told the leader; if the leader says nothing
    // by then, this node ends its workers by itself.
    let mut on_my_own: Option<tokio::time::Instant> = None;
    loop {
        let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
        let event = tokio::select! {
            e = rx.recv() => e,
            _ = tokio::time::sleep_until(on_my_own.unwrap_or(far)) => {
                let n = attempt.as_ref().map_or(0, |a| a.number);
                if let Some(a) = attempt.as_mut() { a.teardown(cfg.kill_grace).await; }
                say(format!("node {} ({host}): no word from the leader after the signal: tore down this node's workers", cfg.node_rank));
                let report = FailureReport::other(n, cfg.node_rank, &host, format!("the agent on {host} was signalled and the leader did not answer"));
                let _ = send(&mut w, &Msg::Failed { report }).await;
                return Ok(Outcome::Failed(None));
            }
            _ = watchdog.tick(), if cfg.keep.hang_timeout.is_some() => {
                if let Some(a) = attempt.as_ref().filter(|_| !stopped) {
                    let ranks = a.progress();
                    if send(&mut w, &Msg::Progress { attempt: a.number, ranks }).await.is_err() {
                        continue;
                    }
                }
                continue;
            }
            _ = heartbeat.tick() => {
                if send(&mut w, &Msg::Heartbeat).await.is_err() {
                    if let Some(a) = attempt.as_mut() { a.teardown(cfg.kill_grace).await; }
                    say(format!("node {}: lost the leader (cannot write to it): tore down this node's workers", cfg.node_rank));
                    return Ok(lost_leader(&cfg, attempt.as_ref(), "cannot write to it").await);
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
                        restarts,
                        resume_from,
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
                stopping = false;
                match Attempt::start(
                    &cfg,
                    (n, restarts),
                    &layout,
                    (&master_addr, master_port),
                    resume_from,
                    &tx,
                )
                .await
                {
                    Ok(a) => attempt = Some(a),
                    Err(report) => {
                        stopped = true;
                        let _ = send(&mut w, &Msg::Failed { report }).await;
                        let _ = send(&mut w, &Msg::TornDown { attempt: n }).await;
                    }
                }
            }
            Event::Peer {
                msg: Some(Msg::Stop { attempt: n, signal }),
                ..
            } => {
                let Some(a) = attempt.as_ref().filter(|a| a.number == n) else {
                    continue;
                };
                stopping = true;
                if let Ok(sig) = signal.parse::<Signal>() {
                    a.forward(sig);
                }
                if a.running.is_empty() && !stopped {
                    stopped = true;
                    let _ = send(&mut w, &Msg::NodeDone { attempt: n }).await;
                }
            }
            Event::Peer {
                msg: Some(Msg::Dump { attempt: n }),
                ..
            } => {
                if let Some(a) = attempt.as_ref().filter(|a| a.number == n) {
                    let stacks = a.stacks(&cfg).await;
                    let _ = send(&mut w, &Msg::Stacks { attempt: n, stacks }).await;
                }
            }
            Event::Peer {
                msg: Some(Msg::Teardown { attempt: n, signal }),
                ..
            } => {
                on_my_own = None;
                if let Some(a) = attempt.as_mut() {
                    let first = signal.and_then(|s| s.parse::<Signal>().ok());
                    a.teardown_with(first.unwrap_or(Signal::SIGTERM), cfg.kill_grace)
                        .await;
                }
                stopped = true;
                let _ = send(&mut w, &Msg::TornDown { attempt: n }).await;
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
                return Ok(lost_leader(&cfg, attempt.as_ref(), &why).await);
            }
            Event::WorkerExited {
                attempt: n,
                rank,
                status,
            } => {
                let Some(a) = attempt.as_mut().filter(|a| a.number == n && !stopped) else {
                    continue;
                };
                if stopping {
                    // Stopped as asked (whatever the status): done once all are gone.
                    let _ = a.exited(&cfg, rank, status).await;
                    if a.running.is_empty() {
                        stopped = true;
                        a.finish_output().await;
                        let _ = send(&mut w, &Msg::NodeDone { attempt: n }).await;
                    }
                    continue;
                }
                if let Some(report) = a.exited(&cfg, rank, status).await {
                    stopped = true;
                    // Tell the leader first (it starts every other node's teardown), then
                    // end this node's workers.
                    let _ = send(&mut w, &Msg::Failed { report }).await;
                    a.teardown(cfg.kill_grace).await;
                    let _ = send(&mut w, &Msg::TornDown { attempt: n }).await;
                } else if a.running.is_empty() {
                    a.finish_output().await;
                    let _ = send(&mut w, &Msg::NodeDone { attempt: n }).await;
                }
            }
            Event::Signal(sig) => match signals::action(sig) {
                Some(Action::Terminate) => {
                    // The leader decides (a cancel, a preemption, the time limit: the same
                    // signal reaches every agent of the job); alone after the stop's grace.
                    let told = send(
                        &mut w,
                        &Msg::Signalled {
                            signal: sig.as_str().to_owned(),
                        },
                    )
                    .await;
                    if told.is_ok() {
                        if on_my_own.is_none() {
                            on_my_own = Some(
                                tokio::time::Instant::now()
                                    + cfg.keep.stop_grace
                                    + cfg.kill_grace
                                    + Duration::from_secs(10),
                            );
                        }
                        continue;
                    }
                    if let Some(a) = attempt.as_mut() {
                        a.teardown_with(sig, cfg.kill_grace).await;
                    }
                    say(format!(
                        "node {} ({host}): {}; the leader cannot be told: tore down this node's workers",
                        cfg.node_rank,
                        cancelled(&host, sig)
                    ));
                    return Ok(Outcome::Failed(None));
                }
                // The leader gets the same SIGCONT from SLURM and asks the scheduler.
                Some(Action::Notice) => {}
                Some(Action::Forward) | None => {
                    if let Some(a) = attempt.as_ref() {
                        a.forward(sig);
                    }
                }
            },
        }
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
    let job = cfg.launch.job_id.map(|j| j.to_string());
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
    write_report(cfg, &report);
    let record = |event: &str, fields: serde_json::Value| cfg.record_here(event, fields);
    record(
        "failed",
        serde_json::json!({"attempt": number, "cause": report.cause, "kind": Cause::NodeFailure, "node": cfg.node_rank}),
    );
    let requeued = requeue(
        cfg,
        job.as_deref(),
        number,
        Cause::NodeFailure,
        Some(&leader),
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
            "finished",
            serde_json::json!({"attempt": number, "ok": false, "cause": Cause::NodeFailure}),
        );
        Outcome::Failed(Some(report))
    }
}
