//! The end of an attempt, step by step: the failure recorded, the teardown everywhere, the
//! report, then a restart, a requeue or the job's end.

use std::time::Duration;

use herd_exp::timeline;
use herd_slurm::scheduler::lifecycle::Cause;
use nix::sys::signal::Signal;

use super::links::{broadcast, live};
use super::state::{End, Lead};
use crate::event::Event;
use crate::keep::{no_longer_running, record_run, requeue, requeue_recorded};
use crate::message::Msg;
use crate::outcome::Outcome;
use crate::words::{count, say};
use herd_exp::failure::FailureReport;

impl Lead {
    /// Act on the attempt's end: the job's outcome, or `None` when the next attempt
    /// starts (a restart).
    pub(super) async fn end_attempt(&mut self, end: End) -> Option<Outcome> {
        let end = self.reread_failure(end).await;
        let (mut report, retryable, mut cause) = match end {
            End::Success => return Some(self.succeed().await),
            End::Failed {
                report,
                retryable,
                cause,
            } => (Some(*report), retryable, cause),
            End::Stopped { cause } => (None, false, cause),
        };
        // A node failure is recorded once the teardown is done and the job is known not to
        // be requeued for it already: a frozen leader wakes up (SLURM's SIGCONT) to a job
        // that node 1 requeued for it, and must not act again.
        if cause != Cause::NodeFailure {
            self.record_failed(report.as_ref(), cause);
        }
        self.failed_nodes.clear();
        if let Some(r) = report.as_ref().filter(|_| cause == Cause::WorkerFailure) {
            self.failed_nodes.insert(r.node_rank);
        }
        self.teardown_everywhere().await;
        if let Some(r) = report.as_mut() {
            self.gpu_hint(r);
        }
        let blamed = self.blamed_by(report.as_ref(), cause);
        if cause == Cause::NodeFailure {
            if self
                .requeued_already(blamed.is_some() && self.spare_left())
                .await
            {
                return Some(Outcome::Requeued(cause));
            }
            self.record_failed(report.as_ref(), cause);
        }
        self.cfg.record(timeline::Teardown {
            attempt: self.number,
        });
        // A blamed node is replaced by a spare, or left out of a requeue when one is left;
        // only with neither are the workers restarted on it.
        let replace = blamed.as_ref().is_some_and(|b| self.can_replace(b));
        let requeue = blamed.is_some() && !replace && self.may_requeue_without_it();
        let restart = retryable && !replace && !requeue && self.may_restart();
        let stalled = self.stalled(restart);
        if let Some(r) = report.as_mut() {
            r.restarts_stopped.clone_from(&stalled);
        }
        if let Some(r) = &report {
            eprint!("{}", r.human());
            r.write(&self.cfg.log_dir);
        }
        self.record_checkpoint();
        if let Some(b) = &blamed {
            self.blame(b.node, b.kind, &b.why);
            if replace && self.replace(b, cause).await {
                return None;
            }
            if requeue {
                // No spare left: the job is requeued without the blamed node.
                cause = Cause::NodeFailure;
            }
        }
        if restart && stalled.is_none() {
            self.restart(cause);
            return None;
        }
        Some(self.requeue_or_end(report, cause).await)
    }

    /// The attempt's GPU errors (a hardware one first) lead the failure report's hint: the
    /// GPU, its node and ranks, what the Xid means and whose fault it is.
    fn gpu_hint(&self, r: &mut FailureReport) {
        let Some((node, e)) = self
            .gpu_errors
            .iter()
            .find(|(_, e)| e.hardware)
            .or_else(|| self.gpu_errors.first())
        else {
            return;
        };
        let whose = if e.hardware {
            "a fault of the node's hardware, not of the code: the node is blamed".to_owned()
        } else {
            "the application's own fault on the GPU: the CUDA error in its rank's log says where"
                .to_owned()
        };
        let gpu = format!("{}: {} ({whose})", self.host_of(*node), e.words());
        r.hint = Some(
            match r.hint.take() {
                Some(h) => format!("{gpu}; {h}"),
                None => gpu,
            }
            .into(),
        );
    }

    /// Every worker exited 0: their last output, `Finish` to every follower, the record.
    async fn succeed(&mut self) -> Outcome {
        if let Some(a) = self.attempt.as_mut() {
            a.finish_output().await;
        }
        broadcast(&mut self.followers, &Msg::Finish { ok: true }).await;
        say(match self.attempt_layout().world_size() {
            1 => "the worker finished".to_owned(),
            n => format!("all {n} workers finished"),
        });
        self.record_run_end(None, "end");
        self.cfg.record(timeline::Finished {
            attempt: self.number,
            ok: true,
            cause: None,
        });
        Outcome::Success
    }

    /// The attempt's `failed` event, when it has a report.
    fn record_failed(&self, report: Option<&FailureReport>, cause: Cause) {
        if let Some(r) = report {
            self.cfg.record(timeline::Failed {
                attempt: self.number,
                cause: r.cause.clone(),
                kind: Some(cause.name().to_owned()),
                rank: r.rank,
                exit: r.exit.clone(),
                hint: r.hint.as_deref().map(str::to_owned),
                node: None,
            });
        }
    }

    /// Teardown everywhere: followers first (they work in parallel), then this node; then
    /// wait for the followers to confirm theirs.
    async fn teardown_everywhere(&mut self) {
        let cancelled_by = self.cancelled_by.take();
        broadcast(
            &mut self.followers,
            &Msg::Teardown {
                attempt: self.number,
                signal: cancelled_by.map(|s| s.as_str().to_owned()),
            },
        )
        .await;
        let mut last = Vec::new();
        if let Some(a) = self.attempt.as_mut() {
            a.teardown_with(cancelled_by.unwrap_or(Signal::SIGTERM), self.cfg.kill_grace)
                .await;
            last = a.take_gpu_errors();
        }
        for e in last {
            self.on_gpu_error(0, self.number, e);
        }
        self.wait_torn_down(self.cfg.kill_grace + Duration::from_secs(5))
            .await;
    }

    /// Wait until every live follower confirms its teardown (or is lost), at most `limit`;
    /// the GPU errors that come meanwhile (a follower's sampler reads its kernel log a last
    /// time as it tears down, and says what it found before it confirms) are taken.
    async fn wait_torn_down(&mut self, limit: Duration) {
        let mut pending = live(&self.followers);
        let deadline = tokio::time::Instant::now() + limit;
        while !pending.is_empty() {
            let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.rx.recv()).await else {
                break;
            };
            match event {
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::TornDown { attempt, step }),
                    ..
                } if attempt == self.number => {
                    self.stall.heard(step);
                    pending.remove(&node_rank);
                }
                // Another node's worker failed by itself meanwhile: not one node's fault.
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::Failed { report }),
                    ..
                } if report.attempt == self.number => {
                    self.failed_nodes.insert(node_rank);
                }
                Event::WorkerExited {
                    attempt,
                    status: Ok(status),
                    ..
                } if attempt == self.number && status.code().is_some_and(|c| c != 0) => {
                    self.failed_nodes.insert(0);
                }
                Event::GpuError { attempt, error } => self.on_gpu_error(0, attempt, error),
                Event::Peer {
                    node_rank,
                    msg: Some(Msg::GpuError { attempt, error }),
                    ..
                } => self.on_gpu_error(node_rank, attempt, error),
                Event::Peer {
                    node_rank,
                    msg: None,
                    ..
                } => {
                    pending.remove(&node_rank);
                    if let Some(f) = self.followers.iter_mut().find(|f| f.node_rank == node_rank) {
                        f.alive = false;
                    }
                }
                _ => {}
            }
        }
        for f in self
            .followers
            .iter()
            .filter(|f| pending.contains(&f.node_rank))
        {
            say(format!(
                "node {} ({}) did not confirm its teardown in time",
                f.node_rank, f.host
            ));
        }
    }

    /// After a lost node: whether the job is no longer running because another agent
    /// requeued it for this loss already (said, then this agent ends without acting).
    /// With a spare to put in its place (`at_once`) one look, not two seconds: the job is
    /// still running unless another agent requeued it already.
    async fn requeued_already(&self, at_once: bool) -> bool {
        let id = self.job_id.as_deref();
        if requeue_recorded(&self.cfg, self.number) {
            say(format!(
                "job {} was requeued for this node's loss by another agent already: ending here",
                id.unwrap_or("?")
            ));
            return true;
        }
        let within = if at_once {
            Duration::ZERO
        } else {
            Duration::from_secs(2)
        };
        let Some(state) = no_longer_running(id, within).await else {
            return false;
        };
        say(format!(
            "job {} is {state} already (requeued for this node's loss by another agent): ending here",
            id.unwrap_or("?")
        ));
        true
    }

    /// A `checkpoint` event when the attempt left a newer checkpoint than it resumed from.
    fn record_checkpoint(&self) {
        let newest = self.cfg.launch.newest_checkpoint().ok().flatten();
        let newest = newest.and_then(|p| p.to_str().map(str::to_owned));
        if newest.is_some() && newest != self.resume {
            self.cfg.record(timeline::Checkpoint {
                attempt: self.number,
                path: newest.unwrap_or_default(),
            });
        }
    }

    /// Restarts so far in this allocation: attempts after the first, but those a spare's
    /// replacement started.
    fn restarts(&self) -> u32 {
        (self.number - self.first).saturating_sub(self.replaced.len() as u32)
    }

    /// Whether a restart is left (`--max-restarts`) and every node that runs workers is
    /// still there.
    fn may_restart(&self) -> bool {
        self.restarts() < self.cfg.launch.max_restarts
            && self
                .followers
                .iter()
                .filter(|f| self.active.contains(&f.node_rank))
                .all(|f| f.alive)
    }

    /// The next attempt starts: this one's record, then the next number, said.
    fn restart(&mut self, cause: Cause) {
        self.record_run_end(Some(cause), "restart");
        self.number += 1;
        say(format!(
            "restarting all workers: attempt {} ({} of at most {})",
            self.number,
            self.restarts(),
            count(self.cfg.launch.max_restarts, "restart")
        ));
        self.cfg.record(timeline::Restart {
            attempt: self.number,
        });
    }

    /// No restart: the job is requeued when its cause allows one and the budget is not
    /// spent, or it ends here; `Finish` to every follower either way.
    async fn requeue_or_end(&mut self, report: Option<FailureReport>, cause: Cause) -> Outcome {
        let number = self.number;
        let requeued = if let Some(adopted) = self.requeued_by_job {
            adopted
        } else if Cause::REQUEUED.contains(&cause) {
            // A lost or blamed node is left out of the next allocation (this node is never
            // lost), with those blamed and replaced in this one.
            let mut lost = self.blamed_hosts.clone();
            if let Some(r) = report
                .as_ref()
                .filter(|r| cause == Cause::NodeFailure && r.node_rank != 0)
                .filter(|r| !lost.contains(&r.host))
            {
                lost.push(r.host.clone());
            }
            let record = |event: timeline::Event| self.cfg.record(event);
            requeue(
                &self.cfg,
                self.job_id.as_deref(),
                number,
                cause,
                &lost,
                &record,
            )
            .await
        } else {
            false
        };
        self.record_run_end(Some(cause), if requeued { "requeue" } else { "end" });
        broadcast(&mut self.followers, &Msg::Finish { ok: false }).await;
        if requeued {
            return Outcome::Requeued(cause);
        }
        self.cfg.record(timeline::Finished {
            attempt: number,
            ok: false,
            cause: Some(cause.name().to_owned()),
        });
        let report = report.unwrap_or_else(|| {
            FailureReport::other(
                number,
                0,
                &self.host,
                format!(
                    "{}: the workers were stopped and the job is not requeued",
                    cause.words()
                ),
            )
        });
        Outcome::Failed(Some(Box::new(report)))
    }

    /// The attempt's entry in the manifest, once its end is known.
    pub(super) fn record_run_end(&self, cause: Option<Cause>, then: &str) {
        record_run(
            &self.cfg,
            &self.attempt_layout(),
            (self.number, self.requeue_count),
            self.started_unix,
            cause,
            then,
            &self.resume,
        );
    }
}
