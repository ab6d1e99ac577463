//! The leader's side of the rendezvous: every follower joins, with its worker count.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use herd_rendezvous::{Leader, RendezvousError};
use herd_slurm::Layout;
use tokio::sync::mpsc;

use super::links::Follower;
use crate::config::Config;
use crate::error::AgentError;
use crate::event::Event;
use crate::protocol::{heartbeat_every, read_peer, Writer};
use crate::words::{count, say};

/// The rendezvous: every follower joined, with its worker count; the address they reached
/// this node at becomes `MASTER_ADDR` (127.0.0.1 for a single node).
pub(super) async fn gather(
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
            let writer = Writer::new(w);
            writer.beat(
                heartbeat_every(cfg.heartbeat_timeout),
                info.node_rank,
                tx.clone(),
            );
            followers.push(Follower {
                node_rank: info.node_rank,
                host: info.host,
                pid: info.pid,
                writer,
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
