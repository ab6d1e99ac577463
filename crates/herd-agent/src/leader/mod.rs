//! Node 0's agent: gathers the followers, runs every attempt (a fresh `MASTER_PORT`,
//! `Start` to all, supervision of the whole job), tears the job down everywhere on the
//! first failure, prints and writes the failure report, and restarts or ends the job.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use herd_rendezvous::{Leader, RendezvousError};
use herd_slurm::lifecycle::Cause;
use herd_slurm::Layout;
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::attempt::Attempt;
use crate::config::{Config, OnHang};
use crate::error::AgentError;
use crate::event::Event;
use crate::keep::{
    job_facts, next_attempt, no_longer_running, record_run, requeue, unix_now, write_report,
};
use crate::message::Msg;
use crate::outcome::Outcome;
use crate::protocol::{read_peer, send};
use crate::report::FailureReport;
use crate::words::{count, say};

mod decide;
use decide::{hang_report, End, Lead};

/// The leader's link to one follower.
pub(super) struct Follower {
    node_rank: u32,
    host: String,
    writer: OwnedWriteHalf,
    alive: bool,
}

pub(super) async fn broadcast(followers: &mut [Follower], msg: &Msg) {
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
            "leader on {}: rendezvous port {}, waiting for {}",
            cfg.host(),
            leader.port,
            count(nnodes - 1, "node")
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
    let requeue_count: u32 = cfg.launch.requeues;
    cfg.record(
        "started",
        json!({"job_id": cfg.launch.job_id, "host": host, "nodes": cfg.node_names,
               "requeue": requeue_count}),
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
        json!({"world_size": layout.world_size(), "master_addr": master_addr,
               "nodes": node_ranks(&layout)}),
    );
    say(format!(
        "{} on {}, master {master_addr}",
        count(layout.world_size(), "worker"),
        count(layout.nodes.len() as u64, "node")
    ));
    let mut heartbeat = tokio::time::interval(cfg.heartbeat_timeout / 4);
    let mut watchdog = tokio::time::interval(Duration::from_secs(1));
    let max_restarts = cfg.launch.max_restarts;
    let first = next_attempt(&cfg.log_dir);
    let mut lead = Lead {
        cfg: &cfg,
        host: host.clone(),
        job_id: cfg.launch.job_id.map(|j| j.to_string()),
        number: first,
        stopping: None,
        warn_at: None,
        progress: HashMap::new(),
        cancelled_by: None,
    };
    loop {
        let number = lead.number;
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
                restarts: number - first,
                resume_from: resume.clone(),
            },
        )
        .await;
        cfg.record(
            "attempt_started",
            json!({"attempt": number, "master_port": port, "resume_from": resume,
                   "restarts": number - first, "requeue": requeue_count}),
        );
        let started_unix = unix_now();
        // The attempt's entry in the manifest, once its end is known.
        let record_end = |cause: Option<Cause>, then: &str| {
            record_run(
                &cfg,
                &layout,
                (number, requeue_count),
                started_unix,
                cause,
                then,
                &resume,
            )
        };
        lead.stopping = None;
        lead.progress.clear();
        lead.arm_warning().await;
        let mut first_output = false;
        let mut end: Option<End> = None;
        let mut attempt = match Attempt::start(
            &cfg,
            (number, number - first),
            &layout,
            (&master_addr, port),
            resume.clone(),
            &tx,
        )
        .await
        {
            Ok(a) => Some(a),
            Err(report) => {
                end = Some(End::Failed {
                    report,
                    retryable: false,
                    cause: Cause::WorkerFailure,
                });
                None
            }
        };
        let mut done_nodes: HashSet<u32> = HashSet::new();
        // Supervise until success, the first failure, or the end of a stop.
        while end.is_none() {
            let Some(a) = attempt.as_mut() else { break };
            let all_done = a.running.is_empty()
                && followers
                    .iter()
                    .filter(|f| f.alive)
                    .all(|f| done_nodes.contains(&f.node_rank));
            if all_done && done_nodes.len() == followers.len() {
                end = Some(match &lead.stopping {
                    Some(s) => End::Stopped { cause: s.cause },
                    None => End::Success,
                });
                break;
            }
            let far = tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
            let warn_at = lead
                .warn_at
                .filter(|_| lead.stopping.is_none())
                .unwrap_or(far);
            let stop_at = lead.stopping.as_ref().map_or(far, |s| s.deadline);
            let event = tokio::select! {
                e = rx.recv() => e,
                _ = heartbeat.tick() => { broadcast(&mut followers, &Msg::Heartbeat).await; continue; }
                _ = tokio::time::sleep_until(warn_at) => {
                    lead.warn_at = None;
                    // The limit may have moved (an admin's update): ask again.
                    let warn = cfg.keep.warn_before;
                    let left = match lead.job_id.as_deref() {
                        Some(id) => job_facts(id).await.and_then(|f| f.time_left),
                        None => None,
                    };
                    match left {
                        Some(l) if l > warn + Duration::from_secs(5) => {
                            lead.warn_at = Some(tokio::time::Instant::now() + (l - warn));
                        }
                        _ => lead.begin_stop(Cause::TimeLimit, &mut followers, a).await,
                    }
                    continue;
                }
                _ = tokio::time::sleep_until(stop_at) => {
                    let cause = lead.stopping.as_ref().map_or(Cause::TimeLimit, |s| s.cause);
                    say(format!(
                        "the stop's grace is over: tearing down the workers left ({} on this node)",
                        a.running.len()
                    ));
                    end = Some(End::Stopped { cause });
                    break;
                }
                _ = watchdog.tick() => {
                    if !first_output && a.has_output() {
                        first_output = true;
                        cfg.record("first_output", json!({"attempt": number}));
                    }
                    if lead.stopping.is_some() {
                        continue;
                    }
                    let expected: HashSet<u32> = followers
                        .iter()
                        .filter(|f| f.alive && !done_nodes.contains(&f.node_rank))
                        .map(|f| f.node_rank)
                        .collect();
                    if let Some((rank, node, pid, silent)) = lead.hung(a, &expected) {
                        let report = hang_report(&lead, &mut followers, &mut rx, a, (rank, node, pid, silent)).await;
                        end = Some(End::Failed {
                            report,
                            retryable: cfg.keep.on_hang == OnHang::Restart,
                            cause: Cause::Hang,
                        });
                        break;
                    }
                    continue;
                }
            };
            let Some(event) = event else { break };
            match event {
                Event::WorkerExited {
                    attempt: n,
                    rank,
                    status,
                } if n == a.number => {
                    let report = a.exited(&cfg, rank, status).await;
                    if lead.stopping.is_some() {
                        let how = report
                            .as_ref()
                            .map_or("exited 0".to_owned(), |r| r.cause.clone());
                        cfg.record(
                            "worker_exit",
                            json!({"attempt": n, "rank": rank, "during": "stop", "how": how}),
                        );
                    } else if let Some(report) = report {
                        cfg.record(
                            "worker_exit",
                            json!({"attempt": n, "rank": rank, "how": report.cause}),
                        );
                        end = Some(End::Failed {
                            report,
                            retryable: true,
                            cause: Cause::WorkerFailure,
                        });
                    }
                }
                Event::WorkerExited { .. } => {}
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::NodeDone { attempt: n } | Msg::TornDown { attempt: n }),
                    ..
                } if n == number => {
                    done_nodes.insert(node_rank);
                }
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::Failed { report }),
                    ..
                } if report.attempt == number => {
                    if lead.stopping.is_some() {
                        cfg.record("worker_exit", json!({"attempt": number, "rank": report.rank, "during": "stop", "how": report.cause}));
                    } else {
                        cfg.record("worker_exit", json!({"attempt": number, "rank": report.rank, "node": node_rank, "how": report.cause}));
                        end = Some(End::Failed {
                            report,
                            retryable: true,
                            cause: Cause::WorkerFailure,
                        });
                    }
                }
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::Progress { attempt: n, ranks }),
                    ..
                } if n == number => {
                    let now = tokio::time::Instant::now();
                    for r in ranks {
                        lead.progress
                            .insert(r.rank, (node_rank, r.pid, r.silent_ms, now));
                    }
                }
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::Signalled { signal }),
                    ..
                } => {
                    if let Ok(sig) = signal.parse::<Signal>() {
                        if let Some((report, retryable, cause)) =
                            lead.signal(sig, Some(node_rank), &mut followers, a).await
                        {
                            end = Some(End::Failed {
                                report,
                                retryable,
                                cause,
                            });
                        }
                    }
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
                    end = Some(End::Failed {
                        report: FailureReport::other(
                            number,
                            node_rank,
                            &lost_host,
                            format!("lost node {node_rank} ({lost_host}): {why}"),
                        ),
                        retryable: false,
                        cause: Cause::NodeFailure,
                    });
                }
                Event::Signal(sig) => {
                    if let Some((report, retryable, cause)) =
                        lead.signal(sig, None, &mut followers, a).await
                    {
                        end = Some(End::Failed {
                            report,
                            retryable,
                            cause,
                        });
                    }
                }
            }
        }
        let end = end.unwrap_or(End::Failed {
            report: FailureReport::other(number, 0, &host, "the agent's event loop closed".into()),
            retryable: false,
            cause: Cause::WorkerFailure,
        });
        let end = lead.reread_failure(end).await;
        if let End::Success = end {
            if let Some(a) = attempt.as_mut() {
                a.finish_output().await;
            }
            broadcast(&mut followers, &Msg::Finish { ok: true }).await;
            say(match layout.world_size() {
                1 => "the worker finished".to_owned(),
                n => format!("all {n} workers finished"),
            });
            record_end(None, "end");
            cfg.record("finished", json!({"attempt": number, "ok": true}));
            return Ok(Outcome::Success);
        }
        let (report, retryable, cause) = match end {
            End::Failed {
                report,
                retryable,
                cause,
            } => (Some(report), retryable, cause),
            End::Stopped { cause } => (None, false, cause),
            End::Success => unreachable!("handled above"),
        };
        // A node failure is recorded once the teardown is done and the job is known not to
        // be requeued for it already: a frozen leader wakes up (SLURM's SIGCONT) to a job
        // that node 1 requeued for it, and must not act again.
        let record_failed = |r: &FailureReport| {
            cfg.record(
                "failed",
                json!({"attempt": number, "cause": r.cause, "kind": cause}),
            );
        };
        if cause != Cause::NodeFailure {
            report.iter().for_each(record_failed);
        }
        // Teardown everywhere: followers first (they work in parallel), then this node.
        let cancelled_by = lead.cancelled_by.take();
        broadcast(
            &mut followers,
            &Msg::Teardown {
                attempt: number,
                signal: cancelled_by.map(|s| s.as_str().to_owned()),
            },
        )
        .await;
        if let Some(a) = attempt.as_mut() {
            a.teardown_with(cancelled_by.unwrap_or(Signal::SIGTERM), cfg.kill_grace)
                .await;
        }
        wait_torn_down(
            &mut followers,
            &mut rx,
            number,
            cfg.kill_grace + Duration::from_secs(5),
        )
        .await;
        if cause == Cause::NodeFailure {
            let id = lead.job_id.as_deref();
            if let Some(state) = no_longer_running(id, Duration::from_secs(2)).await {
                say(format!(
                    "job {} is {state} already (requeued for this node's loss by another agent): ending here",
                    id.unwrap_or("?")
                ));
                return Ok(Outcome::Requeued(cause));
            }
            report.iter().for_each(record_failed);
        }
        cfg.record("teardown", json!({"attempt": number}));
        if let Some(r) = &report {
            eprint!("{}", r.human());
            write_report(&cfg, r);
        }
        let newest = cfg.launch.newest_checkpoint().ok().flatten();
        let newest = newest.and_then(|p| p.to_str().map(str::to_owned));
        if newest.is_some() && newest != resume {
            cfg.record("checkpoint", json!({"attempt": number, "path": newest}));
        }
        if retryable && number - first < max_restarts && followers.iter().all(|f| f.alive) {
            record_end(Some(cause), "restart");
            lead.number += 1;
            say(format!(
                "restarting all workers: attempt {} ({} of at most {})",
                lead.number,
                lead.number - first,
                count(max_restarts, "restart")
            ));
            cfg.record("restart", json!({"attempt": lead.number}));
            continue;
        }
        let requeued = if Cause::REQUEUED.contains(&cause) {
            // A lost node is left out of the next allocation (this node is never lost).
            let lost = report
                .as_ref()
                .filter(|r| cause == Cause::NodeFailure && r.node_rank != 0)
                .map(|r| r.host.clone());
            let record = |event: &str, fields: serde_json::Value| cfg.record(event, fields);
            requeue(
                &cfg,
                lead.job_id.as_deref(),
                number,
                cause,
                lost.as_deref(),
                &record,
            )
            .await
        } else {
            false
        };
        record_end(Some(cause), if requeued { "requeue" } else { "end" });
        broadcast(&mut followers, &Msg::Finish { ok: false }).await;
        if requeued {
            return Ok(Outcome::Requeued(cause));
        }
        cfg.record(
            "finished",
            json!({"attempt": number, "ok": false, "cause": cause}),
        );
        let report = report.unwrap_or_else(|| {
            FailureReport::other(
                number,
                0,
                &host,
                format!(
                    "{}: the workers were stopped and the job is not requeued",
                    cause.words()
                ),
            )
        });
        return Ok(Outcome::Failed(Some(report)));
    }
}

/// Which ranks run where, for the `rendezvous` event (and `herd logs --node`): one entry per
/// node in node-rank order, `{"node": 0, "host": "gpu-a01", "ranks": [0, 1]}`.
fn node_ranks(layout: &Layout) -> serde_json::Value {
    layout
        .nodes
        .iter()
        .zip(&layout.tasks_per_node)
        .enumerate()
        .map(|(i, (host, &n))| {
            let first = layout.first_rank(i);
            json!({"node": i, "host": host, "ranks": (first..first + n).collect::<Vec<u32>>()})
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendezvous_says_which_ranks_run_where() {
        let layout = Layout {
            nodes: vec!["gpu-a01".into(), "gpu-a02".into(), "gpu-a03".into()],
            tasks_per_node: vec![2, 1, 2],
        };
        assert_eq!(
            node_ranks(&layout),
            json!([
                {"node": 0, "host": "gpu-a01", "ranks": [0, 1]},
                {"node": 1, "host": "gpu-a02", "ranks": [2]},
                {"node": 2, "host": "gpu-a03", "ranks": [3, 4]},
            ])
        );
    }
}
