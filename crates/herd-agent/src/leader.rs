//! Node 0's agent: gathers the followers, runs every attempt (a fresh `MASTER_PORT`,
//! `Start` to all, supervision of the whole job), tears the job down everywhere on the
//! first failure, prints and writes the failure report, and restarts or ends the job.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use herd_rendezvous::{Leader, RendezvousError};
use herd_slurm::Layout;
use serde_json::json;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::agent::{cancelled, say, AgentError, Config, Event, Outcome};
use crate::attempt::Attempt;
use crate::protocol::{read_peer, send, Msg};
use crate::report::FailureReport;
use crate::signals::{self, Action};

/// The leader's link to one follower.
struct Follower {
    node_rank: u32,
    host: String,
    writer: OwnedWriteHalf,
    alive: bool,
}

async fn broadcast(followers: &mut [Follower], msg: &Msg) {
    for f in followers.iter_mut().filter(|f| f.alive) {
        if send(&mut f.writer, msg).await.is_err() {
            f.alive = false;
        }
    }
}

/// A port nobody holds right now, for the workers' TCPStore (rank 0 binds it right after).
fn claim_port() -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))?;
    Ok(l.local_addr()?.port())
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

/// The rendezvous: every follower joined, with its worker count; the address they reached
/// this node at becomes `MASTER_ADDR` (127.0.0.1 for a single node).
async fn gather(
    cfg: &Config,
    tx: &mpsc::UnboundedSender<Event>,
) -> Result<(Vec<Follower>, Layout, String), AgentError> {
    let nnodes = cfg.node_names.len() as u32;
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
            "leader on {}: rendezvous port {}, waiting for {} nodes",
            cfg.host(),
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
        tasks_per_node,
    };
    Ok((followers, layout, master_addr))
}

/// Lead the job to its end.
pub(crate) async fn lead(
    cfg: Config,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Outcome, AgentError> {
    let host = cfg.host().to_owned();
    cfg.record(
        "started",
        json!({"job_id": cfg.launch.job_id, "host": host, "nodes": cfg.node_names}),
    );
    let (mut followers, layout, master_addr) = match gather(&cfg, &tx).await {
        Ok(g) => g,
        Err(e) => {
            cfg.record("failed", json!({"attempt": 0, "cause": e.to_string()}));
            cfg.record("finished", json!({"attempt": 0, "ok": false}));
            return Err(e);
        }
    };
    cfg.record(
        "rendezvous",
        json!({"world_size": layout.world_size(), "master_addr": master_addr}),
    );
    say(format!(
        "{} workers on {} nodes, master {master_addr}",
        layout.world_size(),
        layout.nodes.len()
    ));
    let mut heartbeat = tokio::time::interval(cfg.heartbeat_timeout / 4);
    let max_restarts = cfg.launch.max_restarts;
    let mut number = 0;
    loop {
        let port = claim_port()
            .map_err(|e| AgentError::Layout(format!("cannot claim a MASTER_PORT: {e}")))?;
        let resume = resume_from(&cfg, number);
        broadcast(
            &mut followers,
            &Msg::Start {
                attempt: number,
                master_addr: master_addr.clone(),
                master_port: port,
                tasks_per_node: layout.tasks_per_node.clone(),
                resume_from: resume.clone(),
            },
        )
        .await;
        cfg.record(
            "attempt_started",
            json!({"attempt": number, "master_port": port, "resume_from": resume}),
        );
        // The first failure, and whether a restart may retry it.
        let mut failure: Option<(FailureReport, bool)> = None;
        let mut attempt =
            match Attempt::start(&cfg, number, &layout, (&master_addr, port), resume, &tx).await {
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
                Event::Signal(sig) => match signals::action(sig) {
                    Some(Action::Terminate) => {
                        cfg.record(
                            "signal",
                            json!({"attempt": number, "signal": sig.as_str(), "action": "terminate"}),
                        );
                        a.forward(sig);
                        failure = Some((
                            FailureReport::other(number, 0, &host, cancelled(&host, sig)),
                            false,
                        ));
                    }
                    Some(Action::Forward) | None => {
                        say(format!("forwarding {} to the workers", sig.as_str()));
                        cfg.record(
                            "signal",
                            json!({"attempt": number, "signal": sig.as_str(), "action": "forward"}),
                        );
                        a.forward(sig);
                    }
                },
            }
        }
        let Some((report, retryable)) = failure else {
            if let Some(a) = attempt.as_mut() {
                a.finish_output().await;
            }
            broadcast(&mut followers, &Msg::Finish { ok: true }).await;
            say(format!("all {} workers finished", layout.world_size()));
            cfg.record("finished", json!({"attempt": number, "ok": true}));
            return Ok(Outcome::Success);
        };
        cfg.record("failed", json!({"attempt": number, "cause": report.cause}));
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
        cfg.record("teardown", json!({"attempt": number}));
        eprint!("{}", report.human());
        write_report(&cfg, &report);
        if retryable && number < max_restarts && followers.iter().all(|f| f.alive) {
            number += 1;
            say(format!(
                "restarting all workers: attempt {number} of at most {max_restarts}"
            ));
            cfg.record("restart", json!({"attempt": number}));
            continue;
        }
        broadcast(&mut followers, &Msg::Finish { ok: false }).await;
        cfg.record("finished", json!({"attempt": number, "ok": false}));
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
