//! The cluster's nodes as SLURM sees them now: [`query`] asks `sinfo` for every node, one
//! line per node and partition ([`SINFO_NODES_FORMAT`]), and [`parse_nodes`] reads it into
//! one [`Node`] per node: its partitions, state, the reason an administrator gave, and its
//! CPUs, memory and GPUs. `herd nodes` shows the states; `herd submit` checks the nodes it
//! would leave out against them.
//!
//! `sinfo --all` is asked, so nodes of hidden partitions count as known too. A node that is
//! in no partition is not listed by `sinfo`.

use std::ffi::OsStr;
use std::time::Duration;

use serde::Serialize;

use crate::scheduler::command::run;
use crate::scheduler::partition::{
    at_least, parse_gres_gpus, GpuCount, OutputError, PartitionError, MAX_OUTPUT_BYTES,
};

/// The `sinfo` format [`parse_nodes`] reads: run `sinfo --all -h -N -o
/// '%N|%P|%T|%c|%m|%G|%E'` (node, partition with `*` on the default one, state in long
/// form, CPUs, memory in MB, GRES, reason; one line per node and partition). The reason
/// comes last: it is an administrator's free text and may hold `|`.
pub const SINFO_NODES_FORMAT: &str = "%N|%P|%T|%c|%m|%G|%E";

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// The node's name (`gpu-a01`).
    pub name: String,
    /// The partitions it is in, in `sinfo`'s order, without the default's `*`.
    pub partitions: Vec<String>,
    /// Its state in `sinfo`'s long form: `idle`, `mixed`, `allocated`, `drained`, `down*`
    /// (`*`: not responding), ….
    pub state: String,
    /// Why it is down or drained, as an administrator wrote it (`None` when SLURM says
    /// `none`).
    pub reason: Option<String>,
    /// CPUs.
    pub cpus: u32,
    /// Memory in MB.
    pub mem_mb: u64,
    /// GPUs, per type.
    pub gpus: Vec<GpuCount>,
}

impl Node {
    /// GPUs on the node, of `kind` when given.
    pub fn gpus(&self, kind: Option<&str>) -> u32 {
        self.gpus
            .iter()
            .filter(|g| kind.is_none() || g.kind.as_deref() == kind)
            .map(|g| g.count)
            .sum()
    }

    /// The state, with the reason when there is one: `drained (bad GPU 3)`.
    pub fn describe(&self) -> String {
        match &self.reason {
            Some(r) => format!("{} ({r})", self.state),
            None => self.state.clone(),
        }
    }
}

/// The nodes `sinfo` lists, and the default partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NodeTable {
    /// Every node, once, in `sinfo`'s order.
    pub nodes: Vec<Node>,
    /// The partition jobs go to without `--partition` (marked `*` by `sinfo`).
    pub default_partition: Option<String>,
}

impl NodeTable {
    /// The node named `name`.
    pub fn get(&self, name: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

/// Every node of the cluster from one `sinfo` call, given `timeout` to answer.
pub fn query(timeout: Duration) -> Result<NodeTable, PartitionError> {
    let text = run(
        "sinfo",
        &[
            "--all".as_ref(),
            "-h".as_ref(),
            "-N".as_ref(),
            "-o".as_ref(),
            OsStr::new(SINFO_NODES_FORMAT),
        ],
        None,
        timeout,
    )?;
    Ok(parse_nodes(&text)?)
}

/// Read `sinfo --all -h -N -o '`[`SINFO_NODES_FORMAT`]`'` output: the lines of one node
/// (one per partition) become one [`Node`].
pub fn parse_nodes(text: &str) -> Result<NodeTable, OutputError> {
    let err = |line: usize, message: String| OutputError {
        source_name: "sinfo -N",
        line,
        message,
    };
    if text.len() > MAX_OUTPUT_BYTES {
        return Err(err(0, format!("more than {MAX_OUTPUT_BYTES} bytes")));
    }
    let mut table = NodeTable::default();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.splitn(7, '|').collect();
        let [name, partition, state, cpus, mem, gres, reason] = f.as_slice() else {
            return Err(err(
                n,
                format!(
                    "expected 7 fields separated by `|` (format {SINFO_NODES_FORMAT}), got {}",
                    f.len()
                ),
            ));
        };
        let name = name.trim();
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(err(n, format!("`{name}` is not a node name")));
        }
        let cpus =
            at_least(cpus).ok_or_else(|| err(n, format!("CPUs `{cpus}` is not a number")))?;
        let mem_mb =
            at_least(mem).ok_or_else(|| err(n, format!("memory `{mem}` is not a number of MB")))?;
        let gpus = parse_gres_gpus(gres).map_err(|m| err(n, format!("GRES: {m}")))?;
        let partition = partition.trim();
        let bare = partition.trim_end_matches('*');
        if bare.len() != partition.len() && table.default_partition.is_none() {
            table.default_partition = Some(bare.to_owned());
        }
        let reason = reason.trim();
        let reason = (!reason.is_empty() && reason != "none").then(|| reason.to_owned());
        match table.nodes.iter_mut().find(|node| node.name == name) {
            Some(node) => {
                if !bare.is_empty() && !node.partitions.iter().any(|p| p == bare) {
                    node.partitions.push(bare.to_owned());
                }
            }
            None => table.nodes.push(Node {
                name: name.to_owned(),
                partitions: if bare.is_empty() {
                    Vec::new()
                } else {
                    vec![bare.to_owned()]
                },
                state: state.trim().to_owned(),
                reason,
                cpus,
                mem_mb,
                gpus,
            }),
        }
    }
    Ok(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sinfo --all -h -N -o '%N|%P|%T|%c|%m|%G|%E'` on the test bed (slurm-wlm 22.05.8),
    /// pasted as printed, with gpu-a03 drained by hand
    /// (`scontrol update nodename=gpu-a03 state=drain reason='bad GPU | ask ops'`).
    const BED: &str = "\
gpu-a01|dev|idle|8|16000|gpu:4|none
gpu-a01|urgent|idle|8|16000|gpu:4|none
gpu-a01|gpu*|idle|8|16000|gpu:4|none
gpu-a02|dev|mixed|8|16000|gpu:4|none
gpu-a02|urgent|mixed|8|16000|gpu:4|none
gpu-a02|gpu*|mixed|8|16000|gpu:4|none
gpu-a03|dev|drained|8|16000|gpu:a100:2(S:0-1),gpu:v100:2|bad GPU | ask ops
gpu-a03|gpu*|drained|8|16000|gpu:a100:2(S:0-1),gpu:v100:2|bad GPU | ask ops
";

    #[test]
    fn reads_one_node_per_name_with_its_partitions_and_reason() {
        let t = parse_nodes(BED).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.default_partition.as_deref(), Some("gpu"));
        let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["gpu-a01", "gpu-a02", "gpu-a03"]);
        let a01 = t.get("gpu-a01").expect("gpu-a01");
        assert_eq!(a01.partitions, ["dev", "urgent", "gpu"]);
        assert_eq!((a01.cpus, a01.mem_mb, a01.gpus(None)), (8, 16000, 4));
        assert_eq!(a01.describe(), "idle");
        let a03 = t.get("gpu-a03").expect("gpu-a03");
        assert_eq!(a03.reason.as_deref(), Some("bad GPU | ask ops"));
        assert_eq!(a03.describe(), "drained (bad GPU | ask ops)");
        assert_eq!((a03.gpus(None), a03.gpus(Some("a100"))), (4, 2));
        assert!(t.get("gpu-a04").is_none());
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let e = parse_nodes("gpu-a01|gpu*|idle|8|16000|gpu:4\n").expect_err("6 fields");
        assert_eq!(e.line, 1);
        assert!(e.to_string().contains("expected 7 fields"), "{e}");
        let e = parse_nodes("\ngpu-a01|gpu*|idle|many|16000|gpu:4|none\n").expect_err("cpus");
        assert_eq!(e.line, 2);
        assert!(parse_nodes("a b|gpu|idle|8|1|gpu:4|none").is_err());
        assert!(parse_nodes("n1|gpu|idle|8|1|gpu:a:b:c|none").is_err());
        assert!(parse_nodes(&"x".repeat(MAX_OUTPUT_BYTES + 1)).is_err());
        assert_eq!(parse_nodes(""), Ok(NodeTable::default()));
    }
}
