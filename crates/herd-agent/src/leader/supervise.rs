//! The leader's event loop while an attempt runs: each event goes to its handler, until
//! one says the attempt is over (success, the first failure, or the end of a stop).

use std::collections::HashSet;
use std::time::Duration;

use herd_exp::failure::Exit;
use herd_exp::timeline::{self, During};
use herd_slurm::scheduler::lifecycle::Cause;
use nix::sys::signal::Signal;
use tokio::time::Instant;

use super::state::{End, Lead};
use crate::config::OnHang;
use crate::event::Event;
use crate::keep::job_facts;
use crate::message::Msg;
use crate::words::say;
use herd_exp::failure::FailureReport;

impl Lead {
    /// Supervise the attempt [`Lead::start_attempt`] started until it ends.
    pub(super) async fn supervise(&mut self) -> End {
        loop {
            if let Some(end) = self.attempt_over() {
                return end;
            }
            let far = Instant::now() + Duration::from_secs(86_400 * 365);
            let warn_at = self
                .warn_at
                .filter(|_| self.stopping.is_none())
                .unwrap_or(far);
            let stop_at = self.stopping.as_ref().map_or(far, |s| s.deadline);
            let end = tokio::select! {
                e = self.rx.recv() => match e {
                    Some(event) => self.on_event(event).await,
                    None => Some(self.loop_closed()),
                },
                _ = tokio::time::sleep_until(warn_at) => {
                    self.on_warning_due().await;
                    None
                }
                _ = tokio::time::sleep_until(stop_at) => Some(self.on_stop_grace_over()),
                _ = self.watchdog.tick() => self.on_watchdog_tick().await,
            };
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// The attempt's end when every worker on every node is done (exited 0, or as a stop
    /// asked) and every follower said so.
    fn attempt_over(&self) -> Option<End> {
        let Some(a) = self.attempt.as_ref() else {
            // Nothing to supervise: as if the loop had closed.
            return Some(self.loop_closed());
        };
        let all_done = a.running.is_empty()
            && self
                .followers
                .iter()
                .filter(|f| f.alive)
                .all(|f| self.done_nodes.contains(&f.node_rank));
        if !(all_done && self.done_nodes.len() == self.followers.len()) {
            return None;
        }
        Some(match &self.stopping {
            Some(s) => End::Stopped { cause: s.cause },
            None => End::Success,
        })
    }

    /// The event channel closed: no word can come any more.
    fn loop_closed(&self) -> End {
        End::Failed {
            report: Box::new(FailureReport::other(
                self.number,
                0,
                &self.host,
                "the agent's event loop closed".into(),
            )),
            retryable: false,
            cause: Cause::WorkerFailure,
        }
    }

    async fn on_event(&mut self, event: Event) -> Option<End> {
        match event {
            Event::WorkerExited {
                attempt,
                rank,
                status,
            } => self.on_worker_exit(attempt, rank, status).await,
            Event::Peer {
                node_rank,
                msg: Some(msg),
                ..
            } => self.on_peer_message(node_rank, msg).await,
            Event::Peer {
                node_rank,
                msg: None,
                why,
            } => self.on_lost_node(node_rank, &why),
            Event::Signal(sig) => self.on_signal(sig, None).await,
            Event::GpuError { attempt, error } => {
                self.on_gpu_error(0, attempt, error);
                None
            }
        }
    }

    /// A GPU of node `node_rank` raised `error` during `attempt`: said, recorded, and kept
    /// for the attempt's end (stale attempts' errors are dropped).
    pub(super) fn on_gpu_error(
        &mut self,
        node_rank: u32,
        attempt: u32,
        error: herd_exp::gpus::GpuError,
    ) {
        if attempt != self.number {
            return;
        }
        let host = self.host_of(node_rank);
        crate::words::say(format!(
            "{host}: {}{}",
            error.words(),
            if error.hardware {
                " (a hardware fault: the node is blamed if the attempt fails)"
            } else {
                ""
            }
        ));
        self.cfg.record(timeline::GpuError {
            attempt,
            node: host,
            gpu: error.gpu,
            uuid: error.uuid.clone(),
            ranks: error.ranks.clone(),
            xid: error.xid,
            what: error.what.clone(),
            hardware: error.hardware,
        });
        self.gpu_errors.push((node_rank, error));
    }

    /// One of this node's workers exited: during a stop, whatever its status, as asked;
    /// otherwise a failure ends the attempt.
    async fn on_worker_exit(
        &mut self,
        n: u32,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    ) -> Option<End> {
        let a = self.attempt.as_mut().filter(|a| a.number == n)?;
        let report = a.exited(&self.cfg, rank, status).await;
        if self.stopping.is_some() {
            let (how, exit) = report
                .as_ref()
                .map_or(("exited 0".to_owned(), Some(Exit::Code(0))), |r| {
                    (r.cause.clone(), r.exit.clone())
                });
            self.cfg.record(timeline::WorkerExit {
                attempt: n,
                rank: Some(rank),
                how,
                exit,
                during: Some(During::Stop),
                node: None,
            });
            return None;
        }
        let report = report?;
        self.cfg.record(timeline::WorkerExit {
            attempt: n,
            rank: Some(rank),
            how: report.cause.clone(),
            exit: report.exit.clone(),
            during: None,
            node: None,
        });
        Some(End::Failed {
            report: Box::new(report),
            retryable: true,
            cause: Cause::WorkerFailure,
        })
    }

    /// A follower's word about this attempt: its node is done or torn down, a worker of
    /// it failed, its ranks' progress; or it received a signal. Words about an earlier
    /// attempt are stale.
    async fn on_peer_message(&mut self, node_rank: u32, msg: Msg) -> Option<End> {
        let number = self.number;
        match msg {
            Msg::NodeDone { attempt } | Msg::TornDown { attempt, .. } if attempt == number => {
                self.done_nodes.insert(node_rank);
                None
            }
            Msg::Failed { report } if report.attempt == number => {
                self.on_peer_failed(node_rank, report)
            }
            Msg::Progress { attempt, ranks } if attempt == number => {
                let now = Instant::now();
                for r in ranks {
                    self.progress.insert(r.rank, (node_rank, r, now));
                }
                None
            }
            Msg::GpuError { attempt, error } => {
                self.on_gpu_error(node_rank, attempt, error);
                None
            }
            Msg::Signalled { signal } => match signal.parse::<Signal>() {
                Ok(sig) => self.on_signal(sig, Some(node_rank)).await,
                Err(_) => None,
            },
            _ => None,
        }
    }

    /// A worker of node `node_rank` failed (that node has torn itself down): the attempt's
    /// end, unless the workers are stopping, when any exit is expected.
    fn on_peer_failed(&mut self, node_rank: u32, report: Box<FailureReport>) -> Option<End> {
        let number = self.number;
        if self.stopping.is_some() {
            self.cfg.record(timeline::WorkerExit {
                attempt: number,
                rank: report.rank,
                how: report.cause.clone(),
                exit: report.exit.clone(),
                during: Some(During::Stop),
                node: None,
            });
            return None;
        }
        self.cfg.record(timeline::WorkerExit {
            attempt: number,
            rank: report.rank,
            how: report.cause.clone(),
            exit: report.exit.clone(),
            during: None,
            node: Some(node_rank),
        });
        Some(End::Failed {
            report,
            retryable: true,
            cause: Cause::WorkerFailure,
        })
    }

    /// Node `node_rank` is lost (its connection closed, or it went silent): a node failure,
    /// not retried inside this allocation, unless a spare takes its place (`end`). A spare
    /// or a replaced node that is lost ends nothing: it is no longer counted on.
    fn on_lost_node(&mut self, node_rank: u32, why: &str) -> Option<End> {
        let f = self.followers.iter_mut().find(|f| f.node_rank == node_rank);
        let lost_host = f.as_ref().map(|f| f.host.clone()).unwrap_or_default();
        let was_alive = f.as_ref().is_some_and(|f| f.alive);
        if let Some(f) = f {
            f.alive = false;
        }
        if !self.active.contains(&node_rank) {
            if was_alive && self.spares.contains(&node_rank) {
                self.spares.retain(|&r| r != node_rank);
                say(format!(
                    "spare node {node_rank} ({lost_host}) is lost: {why}; {} left",
                    crate::words::count(self.spares.len() as u64, "spare")
                ));
                self.blame(node_rank, "lost", &format!("spare lost: {why}"));
            }
            return None;
        }
        Some(End::Failed {
            report: Box::new(FailureReport::other(
                self.number,
                node_rank,
                &lost_host,
                format!("lost node {node_rank} ({lost_host}): {why}"),
            )),
            retryable: false,
            cause: Cause::NodeFailure,
        })
    }

    /// Each second: the attempt's first output (recorded once), then, unless the workers
    /// are stopping, the hang watchdog over every node still running.
    async fn on_watchdog_tick(&mut self) -> Option<End> {
        let a = self.attempt.as_ref()?;
        if !self.first_output && a.has_output() {
            self.first_output = true;
            self.cfg.record(timeline::FirstOutput {
                attempt: self.number,
            });
        }
        if self.stopping.is_some() {
            return None;
        }
        let expected: HashSet<u32> = self
            .followers
            .iter()
            .filter(|f| f.alive && !self.done_nodes.contains(&f.node_rank))
            .map(|f| f.node_rank)
            .collect();
        let hung = self.hung(&expected)?;
        let report = self.hang_report(hung).await;
        Some(End::Failed {
            report: Box::new(report),
            retryable: self.cfg.keep.on_hang == OnHang::Restart,
            cause: Cause::Hang,
        })
    }

    /// herd's own warning before the time limit is due: the stop, unless the limit moved.
    async fn on_warning_due(&mut self) {
        self.warn_at = None;
        // The limit may have moved (an admin's update): ask again.
        let warn = self.cfg.keep.warn_before.duration();
        let left = match self.job_id.as_deref() {
            Some(id) => job_facts(id).await.and_then(|f| f.time_left),
            None => None,
        };
        match left {
            Some(l) if l > warn + Duration::from_secs(5) => {
                self.warn_at = Some(Instant::now() + (l - warn));
            }
            _ => self.begin_stop(Cause::TimeLimit).await,
        }
    }

    /// The stop's grace is over: the attempt ends, and what is left is torn down.
    fn on_stop_grace_over(&self) -> End {
        let cause = self.stopping.as_ref().map_or(Cause::TimeLimit, |s| s.cause);
        say(format!(
            "the stop's grace is over: tearing down the workers left ({} on this node)",
            self.attempt.as_ref().map_or(0, |a| a.running.len())
        ));
        End::Stopped { cause }
    }
}
