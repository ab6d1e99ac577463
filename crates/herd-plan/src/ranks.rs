//! The per-rank table `herd submit --dry-run` prints: where every worker of the plan sits
//! and which GPUs it sees, before any node is known.

use std::fmt::Write as _;

use serde::Serialize;

use herd_slurm::GpuBind;

use crate::plan::{Mode, Plan, MAX_RANKS};

/// One worker of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RankRow {
    /// Index of its node in the allocation (`NODE_RANK`).
    pub node: u32,
    /// Global rank (`RANK`).
    pub rank: u32,
    /// Rank on its node (`LOCAL_RANK`).
    pub local_rank: u32,
    /// The GPUs of its node it sees in `CUDA_VISIBLE_DEVICES` (indices; empty when the plan
    /// asks for none): all of them by default, in every mode, as torchrun and srun show
    /// them (`cuda:LOCAL_RANK` is then its own); its equal share with `gpu_bind = per-rank`.
    pub gpus: Vec<u32>,
}

/// Every worker of `plan`, by rank (at most [`MAX_RANKS`] rows).
pub fn rank_table(plan: &Plan) -> Vec<RankRow> {
    let per_node = plan.workers_per_node();
    let gpus = plan.gpus_per_node.unwrap_or(0);
    let node_gpus: Vec<String> = (0..gpus).map(|g| g.to_string()).collect();
    // torchrun gives every worker all of the node's GPUs; `gpu_bind = per-rank` with
    // torchrun is refused by the checks.
    let bind = match plan.mode {
        Mode::Torchrun => GpuBind::All,
        Mode::Agent | Mode::Srun => plan.gpu_bind,
    };
    let mut rows = Vec::new();
    'nodes: for node in 0..plan.nodes {
        for local in 0..per_node {
            if rows.len() as u64 >= MAX_RANKS {
                break 'nodes;
            }
            rows.push(RankRow {
                node,
                rank: node * per_node + local,
                local_rank: local,
                gpus: bind
                    .visible(&node_gpus, local, per_node)
                    .iter()
                    .filter_map(|g| g.parse().ok())
                    .collect(),
            });
        }
    }
    rows
}

/// The table as text, one row per worker under a header:
///
/// ```text
/// node  rank  local_rank  CUDA_VISIBLE_DEVICES
///    0     0           0  0,1
/// ```
pub fn format_rank_table(rows: &[RankRow]) -> String {
    let mut s = String::from("node  rank  local_rank  CUDA_VISIBLE_DEVICES\n");
    for r in rows {
        let gpus = if r.gpus.is_empty() {
            "-".to_owned()
        } else {
            r.gpus
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        let _ = writeln!(
            s,
            "{:>4}  {:>4}  {:>10}  {gpus}",
            r.node, r.rank, r.local_rank
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobFile;
    use crate::keys::JobKeys;
    use crate::resolve::resolve;
    use proptest::prelude::*;
    use std::path::Path;

    fn plan(text: &str) -> Plan {
        let job = JobFile::parse(text, Path::new("j.toml")).unwrap_or_else(|e| panic!("{e}"));
        resolve(Some(&job), &JobKeys::default(), &[], "h").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn agent_table() {
        let rows = rank_table(&plan("nodes = 2\ngpus_per_node = 2\ncommand = [\"x\"]\n"));
        assert_eq!(
            format_rank_table(&rows),
            "node  rank  local_rank  CUDA_VISIBLE_DEVICES\n   0     0           0  0,1\n   0     1           1  0,1\n   1     2           0  0,1\n   1     3           1  0,1\n"
        );
        let rows = rank_table(&plan(
            "nodes = 2\ngpus_per_node = 2\ngpu_bind = \"per-rank\"\ncommand = [\"x\"]\n",
        ));
        assert_eq!(
            format_rank_table(&rows),
            "node  rank  local_rank  CUDA_VISIBLE_DEVICES\n   0     0           0  0\n   0     1           1  1\n   1     2           0  0\n   1     3           1  1\n"
        );
    }

    #[test]
    fn srun_with_fewer_tasks_than_gpus() {
        let text = "mode = \"srun\"\nnodes = 1\ngpus_per_node = 8\nntasks_per_node = 4\n";
        let rows = rank_table(&plan(&format!("{text}command = [\"x\"]\n")));
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[1].gpus, (0..8).collect::<Vec<_>>());
        let rows = rank_table(&plan(&format!(
            "{text}gpu_bind = \"per-rank\"\ncommand = [\"x\"]\n"
        )));
        assert_eq!(rows[1].gpus, vec![2, 3]);
    }

    #[test]
    fn no_gpus_and_torchrun() {
        let rows = rank_table(&plan("nodes = 3\ncommand = [\"x\"]\n"));
        assert_eq!(rows.len(), 3);
        assert!(rows.iter().all(|r| r.gpus.is_empty() && r.local_rank == 0));
        assert!(format_rank_table(&rows).ends_with("   2     2           0  -\n"));
        let rows = rank_table(&plan(
            "mode = \"torchrun\"\nnodes = 2\ngpus_per_node = 4\ncommand = [\"x\"]\n",
        ));
        assert_eq!(
            rows[5].gpus,
            vec![0, 1, 2, 3],
            "torchrun passes all of them on"
        );
    }

    proptest! {
        #[test]
        fn ranks_are_dense_and_ordered(
            nodes in 1u32..20,
            gpn in 1u32..9,
            srun in any::<bool>(),
            per_rank in any::<bool>(),
        ) {
            let mode = if srun { "srun" } else { "agent" };
            let bind = if per_rank { "per-rank" } else { "all" };
            let p = plan(&format!("mode = \"{mode}\"\nnodes = {nodes}\ngpus_per_node = {gpn}\ngpu_bind = \"{bind}\"\ncommand = [\"x\"]\n"));
            let rows = rank_table(&p);
            prop_assert_eq!(rows.len() as u64, p.world_size());
            for (i, r) in rows.iter().enumerate() {
                prop_assert_eq!(r.rank as usize, i);
                prop_assert_eq!(r.node, r.rank / gpn);
                prop_assert_eq!(r.local_rank, r.rank % gpn);
                if per_rank {
                    prop_assert_eq!(r.gpus.clone(), vec![r.local_rank]);
                } else {
                    // cuda:LOCAL_RANK is a device the worker sees.
                    prop_assert_eq!(r.gpus.clone(), (0..gpn).collect::<Vec<_>>());
                    prop_assert!(r.local_rank < r.gpus.len() as u32);
                }
            }
        }
    }
}
