//! Spare nodes and blame: which node an attempt's end blames (lost, frozen, or its
//! workers failing twice in a row while the others' did not), the record of the blame,
//! and a spare put in a blamed node's place, so the next attempt starts at once in the same
//! allocation instead of a requeue.

use herd_exp::failure::FailureReport;
use herd_exp::timeline;
use herd_slurm::scheduler::lifecycle::{self, Cause};

use std::collections::BTreeMap;
use std::time::Duration;

use super::links::live;
use super::state::{Blamed, End, Lead};
use crate::event::Event;
use crate::message::Msg;
use crate::protocol::send;
use crate::words::{count, say};

/// Failures in a row on one node that blame it.
const FAILURES_TO_BLAME: u32 = 2;

/// The streak of worker failures after one on `node` of `rank` (`last`: the streak so far,
/// `(node, failures)`), and whether it blames the node: the second failure in a row there,
/// unless `rank` blamed a node already (it failed again after moving to a new node: the
/// code's fault, not a node's). Node 0's agent leads and is never blamed for its workers.
pub(super) fn failure_streak(
    last: Option<(u32, u32)>,
    node: u32,
    rank_blamed_before: bool,
) -> ((u32, u32), bool) {
    let n = match last {
        Some((prev, n)) if prev == node => n + 1,
        _ => 1,
    };
    let blames = n >= FAILURES_TO_BLAME && node != 0 && !rank_blamed_before;
    ((node, n), blames)
}

impl Lead {
    /// The node this attempt's end blames, if any: a lost node (a crash, a freeze), or one
    /// whose workers failed twice in a row ([`failure_streak`]); a success or any other
    /// end clears the streak.
    pub(super) fn blamed_by(
        &mut self,
        report: Option<&FailureReport>,
        cause: Cause,
    ) -> Option<Blamed> {
        if let Some(b) = self.preflight_blame.take() {
            return Some(b);
        }
        let Some(r) = report else {
            self.failure_streak = None;
            return None;
        };
        // A GPU's hardware fault during the attempt (an Xid, ECC errors, a lost GPU): its
        // node, whatever the workers' deaths look like.
        if let Some((node, e)) = self.gpu_errors.iter().find(|(_, e)| e.hardware) {
            self.failure_streak = None;
            return Some(Blamed {
                node: *node,
                kind: "gpu",
                why: e.words(),
            });
        }
        match cause {
            Cause::NodeFailure if r.node_rank != 0 => Some(Blamed {
                node: r.node_rank,
                kind: "lost",
                why: r.cause.clone(),
            }),
            // Workers on other nodes failed too: the code's fault, or the job's, not a node's.
            Cause::WorkerFailure if self.failed_nodes.len() > 1 => {
                self.failure_streak = None;
                None
            }
            Cause::WorkerFailure => {
                let rank = r.rank.unwrap_or(u32::MAX);
                let before = self.blamed_ranks.contains(&rank);
                let (streak, blames) = failure_streak(self.failure_streak, r.node_rank, before);
                self.failure_streak = Some(streak);
                if !blames {
                    return None;
                }
                self.blamed_ranks.insert(rank);
                self.failure_streak = None;
                Some(Blamed {
                    node: r.node_rank,
                    kind: "failures",
                    why: format!(
                        "its workers failed {FAILURES_TO_BLAME} times in a row, last: {}",
                        r.cause
                    ),
                })
            }
            _ => {
                self.failure_streak = None;
                None
            }
        }
    }

    /// Whether blamed node `b` can be replaced by a spare now (never node 0, whose agent
    /// leads).
    pub(super) fn can_replace(&self, b: &Blamed) -> bool {
        b.node != 0 && self.active.contains(&b.node) && self.spare_left()
    }

    /// Whether the job can be requeued without a blamed node: a SLURM job with a requeue
    /// for node failures left (`--max-requeues`); otherwise the blame is recorded and the
    /// workers are restarted as before.
    pub(super) fn may_requeue_without_it(&self) -> bool {
        self.job_id.is_some()
            && crate::keep::requeues_so_far(&self.cfg, Cause::NodeFailure)
                < self.cfg.keep.max_requeues
    }

    /// Whether a spare is left to take a node's place.
    pub(super) fn spare_left(&self) -> bool {
        let live = live(&self.followers);
        self.spares.iter().any(|r| live.contains(r))
    }

    /// Blame node `node`: said, recorded in the timeline (`blame`) and in the user's record
    /// of bad nodes (`herd nodes`; `herd submit` leaves it out for a while), which a
    /// failure to write never stops the job for.
    pub(super) fn blame(&mut self, node: u32, kind: &str, why: &str) {
        let host = self.host_of(node);
        if !self.blamed_hosts.contains(&host) {
            self.blamed_hosts.push(host.clone());
        }
        say(format!("blaming node {node} ({host}): {why}"));
        self.cfg.record(timeline::Blame {
            attempt: self.number,
            node: host.clone(),
            kind: kind.to_owned(),
            why: why.to_owned(),
        });
        // Only a SLURM job's nodes are the cluster's (herd run's local nodes are not).
        let Some(path) = herd_exp::nodes::record_path().filter(|_| self.job_id.is_some()) else {
            return;
        };
        let blame = herd_exp::nodes::Blame {
            node: host,
            at_unix: herd_exp::nodes::unix_now(),
            why: why.to_owned(),
            kind: kind.to_owned(),
            job: self.job_id.clone(),
            experiment: self.cfg.exp_dir.as_ref().map(|d| d.display().to_string()),
        };
        if let Err(e) = herd_exp::nodes::append(&path, &blame) {
            say(format!(
                "cannot write the blame into the record of bad nodes {}: {e}; the job goes on",
                path.display()
            ));
        }
    }

    /// Put a spare in blamed node `bad`'s place for the next attempt (`cause`: why this
    /// one ended): the blamed node is told to go (or, frozen or dead, ended from SLURM's
    /// side), the replacement recorded and said. False when no spare is left (or `bad`
    /// runs no workers).
    pub(super) async fn replace(&mut self, bad: &Blamed, cause: Cause) -> bool {
        // Node 0's agent leads (and its address is the master's): it is never replaced.
        let Some(slot) = self.active.iter().position(|&r| r == bad.node && r != 0) else {
            return false;
        };
        let live = live(&self.followers);
        let Some(i) = self.spares.iter().position(|r| live.contains(r)) else {
            return false;
        };
        // This attempt's record, with the nodes it ran on.
        self.record_run_end(Some(cause), "replace");
        let spare = self.spares.remove(i);
        self.active[slot] = spare;
        self.replaced.push((bad.node, bad.why.clone()));
        let (bad_host, spare_host) = (self.host_of(bad.node), self.host_of(spare));
        let mut pid = None;
        if let Some(f) = self.followers.iter_mut().find(|f| f.node_rank == bad.node) {
            if f.alive {
                // It ends its workers and itself.
                let _ = send(
                    &f.writer,
                    &Msg::Dismiss {
                        why: bad.why.clone(),
                    },
                )
                .await;
            } else {
                pid = Some(f.pid);
            }
            f.alive = false;
        }
        self.cfg.record(timeline::Replace {
            attempt: self.number,
            node: bad_host.clone(),
            by: spare_host.clone(),
            kind: bad.kind.to_owned(),
            why: bad.why.clone(),
            spares_left: self.spares.len() as u32,
        });
        self.number += 1;
        say(format!(
            "replacing node {} ({bad_host}) with spare node {spare} ({spare_host}): attempt {} starts now ({} left)",
            bad.node,
            self.number,
            count(self.spares.len() as u64, "spare")
        ));
        // srun --jobid takes the job's own number (SLURM 22.05 reads no `ARRAYID_TASK` there).
        if let (Some(pid), Some(id)) = (pid, self.cfg.launch.job_id) {
            end_agent_on(id.to_string(), bad_host, pid);
        }
        true
    }
}

/// End a lost node's agent (pid `pid` on `host`, frozen, or gone with its node) in the
/// background: its srun task must end for the job's step to end, and a frozen agent never
/// will.
fn end_agent_on(job_id: String, host: String, pid: u32) {
    tokio::spawn(async move {
        let h = host.clone();
        let done =
            tokio::task::spawn_blocking(move || lifecycle::kill_on_node(&job_id, &h, pid)).await;
        if let Ok(Err(e)) = done {
            say(format!(
                "cannot end the replaced agent on {host} (pid {pid}): {e}; SLURM ends it with the job"
            ));
        }
    });
}

impl Lead {
    /// Every node's preflight for attempt `number`, the master's `port` held meanwhile:
    /// this node's checks, then each live follower's answer. A spare that fails is blamed
    /// and no longer counted on; a node that runs workers and fails is blamed and ends the
    /// attempt before any worker starts (a spare takes its place, or the job is requeued
    /// without it): that end, or `None` to start. A check that every node running workers
    /// fails alike is the job's, not a node's: said, and the workers start (their own
    /// error will say more).
    pub(super) async fn preflight(&mut self, number: u32, port: u16) -> Option<End> {
        let master = Some((self.master_addr.clone(), port));
        let mut failed: BTreeMap<u32, (String, String)> = BTreeMap::new();
        if let Err(f) = crate::preflight::check_node(&self.cfg, master).await {
            failed.insert(0, (f.check.to_owned(), f.detail));
        }
        let mut waiting = live(&self.followers);
        let limit = crate::preflight::CHECK_TIMEOUT * 2 + Duration::from_secs(5);
        let deadline = tokio::time::Instant::now() + limit;
        let mut later = Vec::new();
        while !waiting.is_empty() {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(Event::Peer {
                    node_rank,
                    msg: Some(Msg::Preflight { attempt, failed: f }),
                    ..
                })) if attempt == number => {
                    waiting.remove(&node_rank);
                    if let Some(f) = f {
                        failed.insert(node_rank, f);
                    }
                }
                Ok(Some(event)) => {
                    // A lost node is the attempt's to hear about; anything else waits too.
                    if let Event::Peer {
                        node_rank,
                        msg: None,
                        ..
                    } = &event
                    {
                        waiting.remove(node_rank);
                    }
                    later.push(event);
                }
                Ok(None) => break,
                Err(_) => {
                    for n in waiting.drain() {
                        let why = format!("no answer within {} s", limit.as_secs());
                        failed.insert(n, ("answer".to_owned(), why));
                    }
                }
            }
        }
        for event in later {
            let _ = self.tx.send(event);
        }
        for (&n, (check, detail)) in &failed {
            self.cfg.record(timeline::PreflightFailed {
                attempt: number,
                node: self.host_of(n),
                check: check.clone(),
                detail: detail.clone(),
            });
        }
        let spares: Vec<u32> = failed
            .keys()
            .copied()
            .filter(|n| self.spares.contains(n))
            .collect();
        for n in spares {
            self.spares.retain(|&r| r != n);
            let (check, detail) = failed[&n].clone();
            let why = format!("preflight check `{check}` failed: {detail}");
            self.blame(n, "preflight", &why);
        }
        let working: Vec<u32> = self
            .active
            .iter()
            .copied()
            .filter(|n| failed.contains_key(n))
            .collect();
        let &first = working.first()?;
        let (check, detail) = failed[&first].clone();
        let alike = working.iter().all(|n| failed[n].0 == check);
        if (working.len() == self.active.len() && alike) || self.active.len() == 1 {
            say(format!(
                "preflight: every node fails check `{check}` ({detail}): the job's, not one node's; starting the workers"
            ));
            return None;
        }
        let host = self.host_of(first);
        let why = format!("preflight check `{check}` failed: {detail}");
        self.preflight_blame = Some(Blamed {
            node: first,
            kind: "preflight",
            why: why.clone(),
        });
        Some(End::Failed {
            report: Box::new(FailureReport::other(
                number,
                first,
                &host,
                format!("{host}: {why}"),
            )),
            retryable: false,
            cause: Cause::NodeFailure,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_blamed_for_the_second_failure_in_a_row_there() {
        // Node 1 fails, then again: blamed.
        let (s, blames) = failure_streak(None, 1, false);
        assert_eq!((s, blames), ((1, 1), false));
        assert_eq!(failure_streak(Some(s), 1, false), ((1, 2), true));
        // Node 1, then node 2: each once, nobody blamed.
        assert_eq!(failure_streak(Some((1, 1)), 2, false), ((2, 1), false));
        // A rank that blamed a node before fails again on its new node: the code.
        assert_eq!(failure_streak(Some((2, 1)), 2, true), ((2, 2), false));
        // The leader's node is never blamed for its workers.
        assert_eq!(failure_streak(Some((0, 1)), 0, false), ((0, 2), false));
    }
}
