//! Node 0's agent: gathers the followers, runs every attempt (a fresh `MASTER_PORT`,
//! `Start` to all, supervision of the whole job), tears the job down everywhere on the
//! first failure, prints and writes the failure report, and restarts or ends the job.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use herd_rendezvous::{Leader, RendezvousError};
use herd_slurm::lifecycle::{self, Cause, JobFacts};
use herd_slurm::Layout;
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;

use crate::agent::{cancelled, say, AgentError, Config, Event, OnHang, Outcome};
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

/// How one attempt ended.
enum End {
    /// Every worker exited 0.
    Success,
    /// The first failure, whether a restart may retry it, and its cause.
    Failed {
        report: FailureReport,
        retryable: bool,
        cause: Cause,
    },
    /// herd stopped the workers (they were asked to checkpoint) for `cause`.
    Stopped { cause: Cause },
}

/// The attempt's stop in progress: why, and when what is left is torn down.
struct Stopping {
    cause: Cause,
    deadline: tokio::time::Instant,
}

/// The leader's view of the job while an attempt runs.
struct Lead<'a> {
    cfg: &'a Config,
    host: String,
    job_id: Option<String>,
    number: u32,
    stopping: Option<Stopping>,
    /// When herd's own warning before the time limit is due.
    warn_at: Option<tokio::time::Instant>,
    /// Each follower rank's last progress report: (node rank, pid, silent ms, when heard).
    progress: HashMap<u32, (u32, i32, u64, tokio::time::Instant)>,
}

/// Ask slurmctld about job `id` without blocking the event loop; a failure is said and
/// taken as "no facts".
async fn job_facts(id: &str) -> Option<JobFacts> {
    let id = id.to_owned();
    match tokio::task::spawn_blocking(move || JobFacts::query(&id)).await {
        Ok(Ok(f)) => Some(f),
        Ok(Err(e)) => {
            say(format!("cannot ask SLURM about the job: {e}"));
            None
        }
        Err(_) => None,
    }
}

impl Lead<'_> {
    /// When herd's warning is due, from the job's time left now.
    async fn arm_warning(&mut self) {
        self.warn_at = None;
        let warn = self.cfg.keep.warn_before;
        let Some(id) = self.job_id.as_deref().filter(|_| !warn.is_zero()) else {
            return;
        };
        if let Some(left) = job_facts(id).await.and_then(|f| f.time_left) {
            self.warn_at = Some(tokio::time::Instant::now() + left.saturating_sub(warn));
        }
    }

    /// Ask every worker to checkpoint and stop, for `cause`.
    async fn begin_stop(&mut self, cause: Cause, followers: &mut [Follower], a: &Attempt) {
        if self.stopping.is_some() {
            return;
        }
        let keep = &self.cfg.keep;
        let sig = keep.stop_signal;
        say(format!(
            "{}: asking every worker to checkpoint and stop ({}); they have {:?}",
            cause.words(),
            sig.as_str(),
            keep.stop_grace
        ));
        self.cfg.record(
            "warning",
            json!({"attempt": self.number, "cause": cause, "stop_signal": sig.as_str(),
                   "grace_s": keep.stop_grace.as_secs_f64()}),
        );
        broadcast(
            followers,
            &Msg::Stop {
                attempt: self.number,
                signal: sig.as_str().to_owned(),
            },
        )
        .await;
        a.forward(sig);
        self.stopping = Some(Stopping {
            cause,
            deadline: tokio::time::Instant::now() + keep.stop_grace,
        });
    }

    /// A handled signal reached this agent (`from` = None) or a follower: decide from the
    /// scheduler's facts whether it is the time limit, a preemption, a cancel or the user's
    /// own signal, and act on it. Returns the failure it makes, if any.
    async fn signal(
        &mut self,
        sig: Signal,
        from: Option<u32>,
        followers: &mut [Follower],
        a: &Attempt,
    ) -> Option<(FailureReport, bool, Cause)> {
        let action = signals::action(sig)?;
        if self.stopping.is_some() {
            self.cfg.record(
                "signal",
                json!({"attempt": self.number, "signal": sig.as_str(), "action": "ignored (stopping)", "node": from}),
            );
            return None;
        }
        // SLURM's --signal may come up to a minute before the time it was asked for.
        let near = self.cfg.keep.warn_before + Duration::from_secs(90);
        let facts = match self.job_id.as_deref() {
            Some(id) => job_facts(id).await,
            None => None,
        };
        let cause = facts.as_ref().and_then(|f| f.cause(near));
        if action == Action::Notice {
            // SIGCONT: a preemption stops the job now; a coming time limit is met by
            // herd's own timer at `warn_before` (SLURM's notice comes up to a minute early);
            // anything else is nothing to act on.
            let left = facts.as_ref().and_then(|f| f.time_left);
            let warn = self.cfg.keep.warn_before;
            match cause {
                Some(Cause::Preemption) => {}
                Some(Cause::TimeLimit)
                    if left.is_some_and(|l| l <= warn + Duration::from_secs(2)) => {}
                Some(Cause::TimeLimit) => {
                    if let Some(l) = left.filter(|_| !warn.is_zero()) {
                        self.warn_at = Some(tokio::time::Instant::now() + (l - warn));
                    }
                    return None;
                }
                _ => return None,
            }
        }
        let record = |what: &str| {
            self.cfg.record(
                "signal",
                json!({"attempt": self.number, "signal": sig.as_str(), "action": what,
                       "cause": cause, "node": from}),
            );
        };
        match (action, cause) {
            (_, Some(c @ (Cause::TimeLimit | Cause::Preemption))) => {
                record("stop");
                self.begin_stop(c, followers, a).await;
                None
            }
            (Action::Terminate, _) => {
                record("terminate");
                a.forward(sig);
                let who = match from {
                    None => self.host.clone(),
                    Some(n) => followers
                        .iter()
                        .find(|f| f.node_rank == n)
                        .map_or_else(|| format!("node {n}"), |f| f.host.clone()),
                };
                Some((
                    FailureReport::other(
                        self.number,
                        from.unwrap_or(0),
                        &who,
                        cancelled(&who, sig),
                    ),
                    false,
                    Cause::Cancelled,
                ))
            }
            (Action::Notice, _) => None,
            (Action::Forward, _) => {
                if from.is_none() {
                    say(format!("forwarding {} to the workers", sig.as_str()));
                    record("forward");
                    a.forward(sig);
                }
                None
            }
        }
    }

    /// The hang watchdog's verdict: when no rank has made progress for the hang timeout,
    /// the rank that went silent first (rank, node rank, pid, silent for).
    /// `expected`: the nodes whose ranks still run; each must have reported.
    fn hung(&self, a: &Attempt, expected: &HashSet<u32>) -> Option<(u32, u32, i32, Duration)> {
        let timeout = self.cfg.keep.hang_timeout?;
        let reported: HashSet<u32> = self.progress.values().map(|p| p.0).collect();
        if !expected.is_subset(&reported) {
            return None;
        }
        let now = tokio::time::Instant::now();
        let mut all: Vec<(u32, u32, i32, u64)> = a
            .progress()
            .into_iter()
            .map(|p| (p.rank, self.cfg.node_rank, p.pid, p.silent_ms))
            .collect();
        all.extend(
            self.progress
                .iter()
                .map(|(&rank, &(node, pid, silent, heard))| {
                    let since = u64::try_from(now.duration_since(heard).as_millis()).unwrap_or(0);
                    (rank, node, pid, silent + since)
                }),
        );
        // Every rank must be known and silent (ranks that exited 0 count as silent).
        let limit = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        if all.is_empty() || all.iter().any(|r| r.3 < limit) {
            return None;
        }
        all.iter()
            .max_by_key(|r| (r.3, std::cmp::Reverse(r.0)))
            .map(|&(rank, node, pid, silent)| (rank, node, pid, Duration::from_millis(silent)))
    }
}

/// The lowest attempt number not used yet in `log_dir` (`attempt-K` folders): attempts are
/// counted over the whole experiment, so a requeue or a `herd submit --resume` never
/// writes into an earlier attempt's logs.
fn next_attempt(log_dir: &Path) -> u32 {
    std::fs::read_dir(log_dir)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_prefix("attempt-")?
                        .parse::<u32>()
                        .ok()
                })
                .map(|n| n + 1)
                .max()
                .unwrap_or(0)
        })
        .unwrap_or(0)
}

/// Requeues of this experiment so far, by cause (from its timeline); without an
/// experiment, SLURM's requeue count stands for every cause.
fn requeues_so_far(cfg: &Config, cause: Cause) -> u32 {
    let slurm = std::env::var("SLURM_RESTART_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let Some(dir) = &cfg.exp_dir else {
        return slurm;
    };
    match herd_exp::timeline::read(dir) {
        Ok(events) => events
            .iter()
            .filter(|e| e.get("event").and_then(|v| v.as_str()) == Some("requeue"))
            .filter(|e| e.get("cause").and_then(|v| v.as_str()) == Some(cause.name()))
            .count() as u32,
        Err(_) => slurm,
    }
}

/// Lead the job to its end.
pub(crate) async fn lead(
    cfg: Config,
    tx: mpsc::UnboundedSender<Event>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Outcome, AgentError> {
    let host = cfg.host().to_owned();
    let requeue_count: u32 = std::env::var("SLURM_RESTART_COUNT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
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
        json!({"world_size": layout.world_size(), "master_addr": master_addr}),
    );
    say(format!(
        "{} workers on {} nodes, master {master_addr}",
        layout.world_size(),
        layout.nodes.len()
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
        if let End::Success = end {
            if let Some(a) = attempt.as_mut() {
                a.finish_output().await;
            }
            broadcast(&mut followers, &Msg::Finish { ok: true }).await;
            say(format!("all {} workers finished", layout.world_size()));
            record_run(
                &cfg,
                &layout,
                (number, requeue_count),
                started_unix,
                None,
                "end",
                &resume,
            );
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
        if let Some(r) = &report {
            cfg.record(
                "failed",
                json!({"attempt": number, "cause": r.cause, "kind": cause}),
            );
        }
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
            record_run(
                &cfg,
                &layout,
                (number, requeue_count),
                started_unix,
                Some(cause),
                "restart",
                &resume,
            );
            lead.number += 1;
            say(format!(
                "restarting all workers: attempt {} ({} of at most {max_restarts} restarts)",
                lead.number,
                lead.number - first
            ));
            cfg.record("restart", json!({"attempt": lead.number}));
            continue;
        }
        let requeued = if Cause::REQUEUED.contains(&cause) {
            requeue(&cfg, &lead, cause, &followers, report.as_ref()).await
        } else {
            false
        };
        record_run(
            &cfg,
            &layout,
            (number, requeue_count),
            started_unix,
            Some(cause),
            if requeued { "requeue" } else { "end" },
            &resume,
        );
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

/// Requeue the job after an attempt that ended for `cause`, when its budget allows; the
/// lost node of a node failure is left out of the next allocation. Says what it did; false
/// when the job ends here.
async fn requeue(
    cfg: &Config,
    lead: &Lead<'_>,
    cause: Cause,
    followers: &[Follower],
    report: Option<&FailureReport>,
) -> bool {
    let Some(id) = lead.job_id.clone() else {
        return false;
    };
    let budget = cfg.keep.max_requeues;
    let used = requeues_so_far(cfg, cause);
    if used >= budget {
        say(format!(
            "{}: no requeue left ({used} of {budget} for {} used, --max-requeues); the job ends here{}",
            cause.words(),
            cause.words(),
            if cfg.exp_dir.is_some() { "; `herd submit --resume` runs it again from its newest checkpoint" } else { "" }
        ));
        cfg.record(
            "requeue_refused",
            json!({"attempt": lead.number, "cause": cause, "used": used, "budget": budget}),
        );
        if cause == Cause::Preemption {
            // slurmctld would requeue a preempted job by itself: end it for good.
            let id2 = id.clone();
            let _ = tokio::task::spawn_blocking(move || {
                herd_slurm::commands::scancel(&[id2.as_str()], None)
            })
            .await;
        }
        return false;
    }
    let mut exclude: Vec<String> = Vec::new();
    if cause == Cause::NodeFailure {
        if let Some(r) = report {
            if r.node_rank != 0 || followers.is_empty() {
                exclude.push(r.host.clone());
            }
        }
        let id2 = id.clone();
        if let Ok(Ok(before)) =
            tokio::task::spawn_blocking(move || lifecycle::excluded_nodes(&id2)).await
        {
            exclude.extend(before);
        }
    }
    cfg.record(
        "requeue",
        json!({"attempt": lead.number, "cause": cause, "count": used + 1, "budget": budget,
               "exclude": exclude}),
    );
    say(format!(
        "{}: requeuing job {id} ({} of {budget} requeues for {}){}",
        cause.words(),
        used + 1,
        cause.words(),
        if exclude.is_empty() {
            String::new()
        } else {
            format!(", without {}", exclude.join(","))
        }
    ));
    let id2 = id.clone();
    match tokio::task::spawn_blocking(move || {
        lifecycle::requeue(&id2, &exclude, Duration::from_secs(5))
    })
    .await
    {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            say(format!("cannot requeue job {id}: {e}"));
            cfg.record(
                "requeue_failed",
                json!({"attempt": lead.number, "error": e.to_string()}),
            );
            false
        }
        Err(_) => false,
    }
}

/// The hang report: which rank went silent first, with every rank's stack.
async fn hang_report(
    lead: &Lead<'_>,
    followers: &mut [Follower],
    rx: &mut mpsc::UnboundedReceiver<Event>,
    a: &Attempt,
    (rank, node, pid, silent): (u32, u32, i32, Duration),
) -> FailureReport {
    let cfg = lead.cfg;
    let host = cfg
        .node_names
        .get(node as usize)
        .cloned()
        .unwrap_or_default();
    let timeout = cfg.keep.hang_timeout.unwrap_or_default();
    say(format!(
        "hang: no rank has made progress for {timeout:?}; rank {rank} (pid {pid} on {host}) went silent first, {:.0} s ago; collecting stacks",
        silent.as_secs_f64()
    ));
    cfg.record(
        "hang",
        json!({"attempt": lead.number, "rank": rank, "host": host, "pid": pid,
               "silent_s": silent.as_secs_f64()}),
    );
    broadcast(
        followers,
        &Msg::Dump {
            attempt: lead.number,
        },
    )
    .await;
    let mut stacks = a.stacks(cfg).await;
    let mut waiting: HashSet<u32> = followers
        .iter()
        .filter(|f| f.alive)
        .map(|f| f.node_rank)
        .collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !waiting.is_empty() {
        let Ok(Some(event)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
            break;
        };
        match event {
            Event::Peer {
                node_rank,
                msg: Some(Msg::Stacks { stacks: s, .. }),
                ..
            } => {
                waiting.remove(&node_rank);
                stacks.extend(s);
            }
            Event::Peer {
                node_rank,
                msg: None,
                ..
            } => {
                waiting.remove(&node_rank);
            }
            _ => {}
        }
    }
    stacks.sort_by_key(|s| s.rank);
    let mut report = FailureReport::other(
        lead.number,
        node,
        &host,
        format!(
            "hang: no rank made progress for {:.0} s; rank {rank} (pid {pid} on {host}) went silent first",
            timeout.as_secs_f64()
        ),
    );
    report.rank = Some(rank);
    report.stacks = stacks;
    report
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The attempt's entry in the manifest (when the job has an experiment).
fn record_run(
    cfg: &Config,
    layout: &Layout,
    (attempt, requeue): (u32, u32),
    started_unix: u64,
    cause: Option<Cause>,
    then: &str,
    resume: &Option<String>,
) {
    let Some(dir) = &cfg.exp_dir else { return };
    let run = herd_exp::Run {
        attempt,
        requeue,
        nodes: layout.nodes.clone(),
        started_unix,
        ended_unix: unix_now(),
        cause: cause.map(|c| c.name().to_owned()),
        then: then.to_owned(),
        resume_from: resume.clone(),
        other: Default::default(),
    };
    let job = cfg.launch.job_id.map(|j| j.to_string());
    let written =
        herd_exp::Experiment::open_dir(dir).and_then(|e| e.record_run(job.as_deref(), run));
    if let Err(e) = written {
        say(format!(
            "cannot record attempt {attempt} in the manifest: {e}"
        ));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_continue_after_the_highest_log_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(next_attempt(&dir.path().join("missing")), 0);
        assert_eq!(next_attempt(dir.path()), 0);
        for name in ["attempt-0", "attempt-3", "attempt-x", "other-7", "attempt-"] {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        }
        std::fs::write(dir.path().join("attempt-9.txt"), "").expect("file");
        assert_eq!(
            next_attempt(dir.path()),
            4,
            "after attempt-3, gaps and strays aside"
        );
    }
}
