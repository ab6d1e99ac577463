//! Which blamed nodes a job leaves out (`avoid_bad_nodes`): the user's record of bad nodes
//! (`herd_exp::nodes`), summarised over the window, checked against the cluster's nodes
//! (`herd_slurm::scheduler::node`) and the plan. [`decide`] is a pure function of the
//! three; `herd submit` prints its [`Decision`]s and puts the nodes left out into
//! [`Plan::avoided_nodes`], which [`crate::render_script`] writes as one `#SBATCH
//! --exclude=` line, merged with an `--exclude` of `sbatch_args` ([`merged_exclude`]).
//!
//! A blamed node is left out unless:
//!
//! - SLURM does not know it (any more): excluding an unknown node makes `sbatch` refuse the
//!   job ([`Verdict::Unknown`]);
//! - `sbatch_args` exclude it already ([`Verdict::Excluded`]), or ask for it by
//!   `--nodelist`/`-w` ([`Verdict::Kept`]);
//! - leaving out every blamed node would leave fewer nodes that fit the job (its GPUs of
//!   `gpu_type`, CPUs and memory per node) in its partition than it needs: then the fewest
//!   are kept, the least blamed first (fewest blames, then the oldest), so the job can
//!   still run ([`Verdict::Kept`]). With several partitions, the one that needs the fewest
//!   kept counts, as SLURM runs the job in one it fits.
//!
//! When the cluster cannot be asked (no SLURM here, `sinfo` failing) every blamed node is
//! left out unchecked.

use std::collections::BTreeSet;

use herd_exp::nodes::NodeSummary;
use herd_slurm::scheduler::node::{Node, NodeTable};

use crate::plan::Plan;

/// What happens to one blamed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Left out of the job.
    LeftOut,
    /// SLURM does not know the node: not left out.
    Unknown,
    /// `sbatch_args` exclude it already.
    Excluded,
    /// Kept in, and why.
    Kept(String),
}

/// One blamed node and what happens to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// What the record says of the node (within the window).
    pub node: NodeSummary,
    /// What happens to it.
    pub verdict: Verdict,
}

/// What the blamed nodes `blamed` (the record's summary within the plan's window) mean for
/// `plan` on the cluster `cluster` (`None`: not known), in `blamed`'s order.
pub fn decide(plan: &Plan, blamed: &[NodeSummary], cluster: Option<&NodeTable>) -> Vec<Decision> {
    let excluded = expand_all(option_values(&plan.sbatch_args, "--exclude", 'x').last());
    let asked: BTreeSet<String> = option_values(&plan.sbatch_args, "--nodelist", 'w')
        .iter()
        .flat_map(|v| expand_all(Some(v)))
        .collect();
    let mut out: Vec<Decision> = blamed
        .iter()
        .map(|b| {
            let verdict = if excluded.contains(&b.node) {
                Verdict::Excluded
            } else if cluster.is_some_and(|t| t.get(&b.node).is_none()) {
                Verdict::Unknown
            } else if asked.contains(&b.node) {
                Verdict::Kept("the job asks for it by --nodelist in `sbatch_args`".into())
            } else {
                Verdict::LeftOut
            };
            Decision {
                node: b.clone(),
                verdict,
            }
        })
        .collect();
    if let Some(table) = cluster {
        keep_enough(plan, table, &excluded, &mut out);
    }
    out
}

/// Keeps the fewest, least blamed nodes that let the job fit in one of its partitions.
fn keep_enough(plan: &Plan, table: &NodeTable, excluded: &BTreeSet<String>, out: &mut [Decision]) {
    let names: Vec<String> = match &plan.partition {
        Some(p) => p.split(',').map(str::to_owned).collect(),
        None => table.default_partition.iter().cloned().collect(),
    };
    let need = u64::from(plan.alloc_nodes());
    // Per partition: how many blamed nodes must be kept, and which are candidates.
    let mut best: Option<(u64, &str, Vec<usize>)> = None;
    for name in &names {
        let fitting: Vec<&Node> = table
            .nodes
            .iter()
            .filter(|n| n.partitions.iter().any(|p| p == name))
            .filter(|n| !excluded.contains(&n.name) && fits(plan, n))
            .collect();
        if (fitting.len() as u64) < need {
            // Too small with every node: the checks say so; keeping nodes cannot help.
            continue;
        }
        let left_out: Vec<usize> = out
            .iter()
            .enumerate()
            .filter(|(_, d)| d.verdict == Verdict::LeftOut)
            .filter(|(_, d)| fitting.iter().any(|n| n.name == d.node.node))
            .map(|(i, _)| i)
            .collect();
        let free = fitting.len() as u64 - left_out.len() as u64;
        let keep = need.saturating_sub(free);
        if best.as_ref().is_none_or(|(k, _, _)| keep < *k) {
            best = Some((keep, name, left_out));
        }
    }
    let Some((keep, partition, mut candidates)) = best.filter(|(k, _, _)| *k > 0) else {
        return;
    };
    // The least blamed first: fewest blames, then the oldest last blame, then by name.
    candidates.sort_by(|&a, &b| {
        let (a, b) = (&out[a].node, &out[b].node);
        a.count
            .cmp(&b.count)
            .then(a.last_unix.cmp(&b.last_unix))
            .then(a.node.cmp(&b.node))
    });
    let free = need - keep;
    let why = if candidates.len() == 1 {
        format!("without it partition {partition} has {free} of the {need} nodes the job needs")
    } else {
        format!(
            "without all {} blamed nodes partition {partition} has {free} of the {need} nodes the job needs; {}",
            candidates.len(),
            if keep == 1 {
                "the least blamed is kept".to_owned()
            } else {
                format!("the {keep} least blamed are kept")
            }
        )
    };
    for &i in candidates.iter().take(keep as usize) {
        out[i].verdict = Verdict::Kept(why.clone());
    }
}

/// Whether `node` has what the job asks for on each node: GPUs (of `gpu_type`), CPUs and
/// memory.
fn fits(plan: &Plan, node: &Node) -> bool {
    let gpus = plan.gpus_per_node.unwrap_or(0);
    let mem = plan.mem.filter(|m| !m.is_whole_node());
    node.gpus(plan.gpu_type.as_deref()) >= gpus
        && u64::from(node.cpus) >= plan.cpus_per_node()
        && mem.is_none_or(|m| node.mem_mb >= m.megabytes())
}

/// The values of an sbatch option in `args` (each entry one option, as `sbatch_args` holds
/// them): `--long=V`, `--long V`, `-sV`, `-s V`; in order.
pub fn option_values(args: &[String], long: &str, short: char) -> Vec<String> {
    let short = format!("-{short}");
    args.iter()
        .filter_map(|a| {
            let a = a.trim();
            let rest = if let Some(r) = a.strip_prefix(long) {
                r.strip_prefix('=')
                    .or_else(|| r.starts_with(char::is_whitespace).then_some(r.trim_start()))?
            } else {
                let r = a.strip_prefix(short.as_str())?;
                r.trim_start()
            };
            (!rest.is_empty()).then(|| rest.to_owned())
        })
        .collect()
}

/// Whether `arg` (one entry of `sbatch_args`) is an `--exclude`/`-x` option.
fn is_exclude(arg: &str) -> bool {
    !option_values(std::slice::from_ref(&arg.to_owned()), "--exclude", 'x').is_empty()
}

/// The hosts of a hostlist expression (`gpu-a[01-03],b1`); one that does not expand is
/// taken as comma-separated names.
fn expand_all(value: Option<&String>) -> BTreeSet<String> {
    let Some(value) = value else {
        return BTreeSet::new();
    };
    match herd_hostlist::expand(value) {
        Ok(hosts) => hosts.into_iter().collect(),
        Err(_) => value.split(',').map(str::to_owned).collect(),
    }
}

/// The batch script's exclusion when the plan leaves out blamed nodes: the last `--exclude`
/// of `sbatch_args` (the one sbatch would use) with the avoided nodes it lacks added.
/// `None` when the plan avoids no node: `sbatch_args` are written as they are.
pub fn merged_exclude(plan: &Plan) -> Option<String> {
    if plan.avoided_nodes.is_empty() {
        return None;
    }
    let given = option_values(&plan.sbatch_args, "--exclude", 'x').pop();
    let known = expand_all(given.as_ref());
    let mut parts: Vec<String> = given.into_iter().collect();
    let mut added = BTreeSet::new();
    for n in &plan.avoided_nodes {
        if !known.contains(n) && added.insert(n.as_str()) {
            parts.push(n.clone());
        }
    }
    Some(parts.join(","))
}

/// Whether the entry `arg` of `sbatch_args` gives way to [`merged_exclude`] in the script.
pub fn replaced_by_merge(plan: &Plan, arg: &str) -> bool {
    !plan.avoided_nodes.is_empty() && is_exclude(arg)
}

#[cfg(test)]
mod tests;
