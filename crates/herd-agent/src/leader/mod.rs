//! Node 0's agent: gathers the followers, runs every attempt (a fresh `MASTER_PORT`,
//! `Start` to all, supervision of the whole job), tears the job down everywhere on the
//! first failure, prints and writes the failure report, and restarts or ends the job.
//!
//! A small state machine: [`Lead`] holds the job's and the current attempt's
//! state; each attempt starts (`state`), is supervised by an event loop that hands each
//! event to its handler (`supervise`; the decisions about signals, the stop and hangs in
//! `decide`) until one ends it, and its end is acted upon step by step (`end`; whether
//! restarts that make no progress go on, `stall`).

use herd_exp::timeline::{self, NodeRanks};
use herd_slurm::Layout;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::error::AgentError;
use crate::event::Event;
use crate::outcome::Outcome;
use crate::words::{count, say};

mod decide;
mod end;
mod links;
mod rendezvous;
mod spares;
mod stall;
mod state;
mod supervise;

use state::Lead;

/// Lead the job to its end.
pub(crate) async fn lead(
    cfg: Config,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Outcome, AgentError> {
    cfg.record(timeline::Started {
        job_id: cfg.job_id_field(),
        host: cfg.host().to_owned(),
        nodes: cfg.node_names.clone(),
        requeue: cfg.launch.requeues,
    });
    let (followers, layout, master_addr) = match rendezvous::gather(&cfg, &tx).await {
        Ok(g) => g,
        Err(e) => {
            cfg.record(timeline::Failed {
                attempt: 0,
                cause: e.to_string(),
                ..timeline::Failed::default()
            });
            cfg.record(timeline::Finished {
                attempt: 0,
                ok: false,
                cause: None,
            });
            return Err(e);
        }
    };
    let lead = Lead::new(cfg, (tx, rx), followers, layout, master_addr);
    let working = lead.attempt_layout();
    let spares: Vec<String> = lead.spares.iter().map(|&r| lead.host_of(r)).collect();
    lead.cfg.record(timeline::Rendezvous {
        world_size: working.world_size(),
        master_addr: lead.master_addr.clone(),
        nodes: Some(node_ranks(&working)),
        spares: Some(spares.clone()).filter(|s| !s.is_empty()),
    });
    say(format!(
        "{} on {}, master {}{}",
        count(working.world_size(), "worker"),
        count(working.nodes.len() as u64, "node"),
        lead.master_addr,
        if spares.is_empty() {
            String::new()
        } else {
            format!(
                "; {} standing by ({})",
                count(spares.len() as u64, "spare"),
                spares.join(", ")
            )
        }
    ));
    let mut lead = lead;
    loop {
        let end = match lead.start_attempt().await? {
            // This node's workers could not start: nothing to supervise.
            Some(end) => end,
            None => lead.supervise().await,
        };
        if let Some(outcome) = lead.end_attempt(end).await {
            return Ok(outcome);
        }
    }
}

/// Which ranks run where, for the `rendezvous` event (and `herd logs --node`): one entry per
/// node in node-rank order, `{"node": 0, "host": "gpu-a01", "ranks": [0, 1]}`.
fn node_ranks(layout: &Layout) -> Vec<NodeRanks> {
    layout
        .nodes
        .iter()
        .zip(&layout.tasks_per_node)
        .enumerate()
        .map(|(i, (host, &n))| {
            let first = layout.first_rank(i);
            NodeRanks {
                node: i as u32,
                host: host.clone(),
                ranks: (first..first + n).collect(),
            }
        })
        .collect()
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
            serde_json::to_value(node_ranks(&layout)).expect("JSON"),
            serde_json::json!([
                {"node": 0, "host": "gpu-a01", "ranks": [0, 1]},
                {"node": 1, "host": "gpu-a02", "ranks": [2]},
                {"node": 2, "host": "gpu-a03", "ranks": [3, 4]},
            ])
        );
    }
}
