//! A node's agent other than node 0's: joins the leader, starts each attempt it is told to,
//! reports its workers' failures and completion, tears down when told (or when the leader
//! is lost) and ends when the leader says the job is over.

use herd_rendezvous::NodeInfo;
use herd_slurm::Layout;
use tokio::sync::mpsc;

use crate::agent::{cancelled, say, AgentError, Config, Event, Outcome};
use crate::attempt::Attempt;
use crate::protocol::{read_peer, send, Msg};
use crate::report::FailureReport;
use crate::signals::{self, Action};

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
    let mut attempt: Option<Attempt> = None;
    // Once this node has failed or been told to stop, only the leader's word moves on.
    let mut stopped = false;
    loop {
        let event = tokio::select! {
            e = rx.recv() => e,
            _ = heartbeat.tick() => {
                if send(&mut w, &Msg::Heartbeat).await.is_err() {
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
                match Attempt::start(
                    &cfg,
                    n,
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
                msg: Some(Msg::Teardown { attempt: n }),
                ..
            } => {
                if let Some(a) = attempt.as_mut() {
                    a.teardown(cfg.kill_grace).await;
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
                    let n = attempt.as_ref().map_or(0, |a| a.number);
                    if let Some(a) = attempt.as_mut() {
                        a.forward(sig);
                        a.teardown(cfg.kill_grace).await;
                    }
                    if !stopped {
                        stopped = true;
                        let report =
                            FailureReport::other(n, cfg.node_rank, &host, cancelled(&host, sig));
                        let _ = send(&mut w, &Msg::Failed { report }).await;
                        let _ = send(&mut w, &Msg::TornDown { attempt: n }).await;
                    }
                }
                Some(Action::Forward) | None => {
                    if let Some(a) = attempt.as_ref() {
                        a.forward(sig);
                    }
                }
            },
        }
    }
}
