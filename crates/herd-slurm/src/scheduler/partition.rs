//! The partition table herd-plan's checks compare a plan with: [`query`] asks
//! `scontrol show partition -o` for the limits and `sinfo` ([`SINFO_FORMAT`]) for the nodes'
//! CPUs, memory and GPUs, and reads both.
//!
//! The readers are pure functions of the commands' text, tested on pasted real output. Keys
//! SLURM adds in later versions are ignored; a key herd reads with a value it cannot read is
//! an error naming the line and key.

use std::ffi::OsStr;

use serde::Serialize;

use crate::scheduler::command::{run, SlurmError, QUERY_TIMEOUT};
use crate::scheduler::fields::fields;
use crate::scheduler::values::{Memory, TimeLimit};

/// Largest scheduler output read (far above any real cluster's partition list).
pub const MAX_OUTPUT_BYTES: usize = 16 << 20;

/// The `sinfo` format [`parse_sinfo`] reads: run `sinfo -h -e -o '%R|%a|%l|%D|%c|%m|%G|%N'`
/// (partition, availability, time limit, node count, CPUs, memory in MB, GRES, nodes; one
/// line per group of nodes with the same configuration).
pub const SINFO_FORMAT: &str = "%R|%a|%l|%D|%c|%m|%G|%N";

/// The cluster's partitions as SLURM reports them now.
#[derive(Debug)]
pub struct PartitionTable {
    /// Every partition, each with its node groups when `sinfo` answered.
    pub partitions: Vec<Partition>,
    /// Why the partitions have no node groups: `sinfo` failed, timed out or printed what
    /// herd cannot read (the limits from `scontrol` are still there).
    pub node_sizes_unknown: Option<PartitionError>,
}

/// Why the partition table could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    /// The command failed, timed out or is not installed.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// The command printed what herd cannot read.
    #[error(transparent)]
    Output(#[from] OutputError),
}

impl PartitionError {
    /// Whether SLURM is not installed here (a laptop): nothing to check, nothing to say.
    pub fn is_not_installed(&self) -> bool {
        matches!(self, PartitionError::Slurm(e) if e.is_not_installed())
    }
}

/// The partition table: `scontrol show partition -o` for the partitions and their limits
/// (an error when it fails or cannot be read), then `sinfo` for their node groups (when it
/// fails, the table comes without them and says why in
/// [`PartitionTable::node_sizes_unknown`]).
pub fn query() -> Result<PartitionTable, PartitionError> {
    let text = run(
        "scontrol",
        &["show".as_ref(), "partition".as_ref(), "-o".as_ref()],
        None,
        QUERY_TIMEOUT,
    )?;
    let mut partitions = parse_scontrol_partitions(&text)?;
    let sinfo = run(
        "sinfo",
        &[
            "-h".as_ref(),
            "-e".as_ref(),
            "-o".as_ref(),
            OsStr::new(SINFO_FORMAT),
        ],
        None,
        QUERY_TIMEOUT,
    )
    .map_err(PartitionError::from)
    .and_then(|text| parse_sinfo(&text).map_err(PartitionError::from));
    let node_sizes_unknown = match sinfo {
        Ok(rows) => {
            add_node_groups(&mut partitions, &rows);
            None
        }
        Err(e) => Some(e),
    };
    Ok(PartitionTable {
        partitions,
        node_sizes_unknown,
    })
}

/// One partition and its limits. `None` limits are unlimited (or not reported).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// `PartitionName`.
    pub name: String,
    /// `Default=YES`: jobs without `--partition` go here.
    pub default: bool,
    /// `State`: `UP`, `DOWN`, `DRAIN` or `INACTIVE`.
    pub state: String,
    /// `MaxNodes` per job.
    pub max_nodes: Option<u32>,
    /// `MinNodes` per job.
    pub min_nodes: u32,
    /// `MaxTime`.
    pub max_time: Option<TimeLimit>,
    /// `TotalNodes`.
    pub total_nodes: Option<u32>,
    /// `TotalCPUs`.
    pub total_cpus: Option<u32>,
    /// `MaxCPUsPerNode`.
    pub max_cpus_per_node: Option<u32>,
    /// `MaxMemPerNode`.
    pub max_mem_per_node: Option<Memory>,
    /// GPUs in the partition, from `TRES=…,gres/gpu=N` (when SLURM tracks GPUs as a TRES).
    pub total_gpus: Option<u32>,
    /// `Nodes`, a hostlist expression.
    pub nodes: Option<String>,
    /// Groups of nodes with the same CPUs, memory and GPUs (from `sinfo`; empty when not
    /// known).
    pub node_groups: Vec<NodeGroup>,
}

impl Partition {
    /// Whether jobs can start here now (`State=UP`).
    pub fn is_up(&self) -> bool {
        self.state.eq_ignore_ascii_case("up")
    }
}

/// Nodes of a partition that share one configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeGroup {
    /// How many nodes.
    pub count: u32,
    /// CPUs on each.
    pub cpus: u32,
    /// Memory on each, in MB.
    pub mem_mb: u64,
    /// GPUs on each, per type (`None`: untyped `gpu:4`).
    pub gpus: Vec<GpuCount>,
}

impl NodeGroup {
    /// GPUs on each node of the group, of `kind` when given.
    pub fn gpus(&self, kind: Option<&str>) -> u32 {
        self.gpus
            .iter()
            .filter(|g| kind.is_none() || g.kind.as_deref() == kind)
            .map(|g| g.count)
            .sum()
    }
}

/// GPUs of one type in a GRES string (`gpu:a100:4`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuCount {
    /// The type, if named.
    pub kind: Option<String>,
    /// How many.
    pub count: u32,
}

/// Scheduler output herd cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{source_name} output, line {line}: {message}")]
pub struct OutputError {
    /// Which command's output (`scontrol show partition`, `sinfo`).
    pub source_name: &'static str,
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn limit_u32(value: &str) -> Result<Option<u32>, String> {
    match value {
        "UNLIMITED" | "INFINITE" | "NONE" | "N/A" => Ok(None),
        v => v
            .parse()
            .map(Some)
            .map_err(|_| format!("`{v}` is not a number or UNLIMITED")),
    }
}

fn limit_time(value: &str) -> Result<Option<TimeLimit>, String> {
    match value.to_ascii_uppercase().as_str() {
        "UNLIMITED" | "INFINITE" | "NONE" | "N/A" => Ok(None),
        _ => value.parse::<TimeLimit>().map(Some).map_err(|e| e.message),
    }
}

/// Read `scontrol show partition -o` (one partition per line). Blank lines are skipped.
pub fn parse_scontrol_partitions(text: &str) -> Result<Vec<Partition>, OutputError> {
    let err = |line: usize, message: String| OutputError {
        source_name: "scontrol show partition",
        line,
        message,
    };
    if text.len() > MAX_OUTPUT_BYTES {
        return Err(err(0, format!("more than {MAX_OUTPUT_BYTES} bytes")));
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut p = Partition::default();
        let mut named = false;
        for (key, value) in fields(line) {
            let bad = |m: String| err(n, format!("{key}: {m}"));
            match key {
                "PartitionName" => {
                    p.name = value.to_owned();
                    named = true;
                }
                "Default" => p.default = value == "YES",
                "State" => p.state = value.to_owned(),
                "MaxNodes" => p.max_nodes = limit_u32(value).map_err(bad)?,
                "MinNodes" => p.min_nodes = limit_u32(value).map_err(bad)?.unwrap_or(0),
                "MaxTime" => p.max_time = limit_time(value).map_err(bad)?,
                "TotalNodes" => p.total_nodes = limit_u32(value).map_err(bad)?,
                "TotalCPUs" => p.total_cpus = limit_u32(value).map_err(bad)?,
                "MaxCPUsPerNode" => p.max_cpus_per_node = limit_u32(value).map_err(bad)?,
                "MaxMemPerNode" => {
                    p.max_mem_per_node = match value {
                        "UNLIMITED" => None,
                        v => Some(v.parse::<Memory>().map_err(|e| bad(e.message))?),
                    }
                }
                "Nodes" => p.nodes = (value != "(null)").then(|| value.to_owned()),
                "TRES" => {
                    for item in value.split(',') {
                        if let Some(v) = item.strip_prefix("gres/gpu=") {
                            let count = v
                                .parse()
                                .map_err(|_| bad(format!("gres/gpu=`{v}` is not a number")))?;
                            p.total_gpus = Some(count);
                        }
                    }
                }
                _ => {}
            }
        }
        if !named || p.name.is_empty() {
            return Err(err(
                n,
                "no PartitionName=: not `scontrol show partition -o` output".into(),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

/// One line of [`SINFO_FORMAT`] output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinfoRow {
    /// Partition (`%R`).
    pub partition: String,
    /// Availability (`%a`: up, down, drain, inact).
    pub available: String,
    /// Time limit (`%l`; `None` for infinite).
    pub time_limit: Option<TimeLimit>,
    /// Nodes, CPUs, memory and GPUs of the group.
    pub group: NodeGroup,
    /// The nodes (`%N`).
    pub nodes: String,
}

/// `8` or `8+` (sinfo marks a minimum over differing nodes with `+`).
pub(crate) fn at_least<T: std::str::FromStr>(v: &str) -> Option<T> {
    v.strip_suffix('+').unwrap_or(v).parse().ok()
}

/// GPUs in a GRES string: `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2,gpu:v100:2`, `(null)`.
pub fn parse_gres_gpus(gres: &str) -> Result<Vec<GpuCount>, String> {
    let mut out = Vec::new();
    if gres == "(null)" || gres.is_empty() {
        return Ok(out);
    }
    // Commas also appear inside the socket suffix `(S:0,1)`: split at top level only.
    let mut depth = 0usize;
    let mut items = Vec::new();
    let mut start = 0;
    for (i, c) in gres.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&gres[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&gres[start..]);
    for item in items {
        let item = item.split('(').next().unwrap_or(item);
        let fields: Vec<&str> = item.split(':').collect();
        if fields.first() != Some(&"gpu") {
            continue;
        }
        let (kind, count) = match fields.as_slice() {
            ["gpu"] => (None, "1"),
            ["gpu", n] if n.bytes().all(|b| b.is_ascii_digit()) => (None, *n),
            ["gpu", kind] => (Some(*kind), "1"),
            ["gpu", kind, n] => (Some(*kind), *n),
            _ => {
                return Err(format!(
                    "`{item}` is not a GPU GRES like gpu:4 or gpu:a100:4"
                ))
            }
        };
        let count = count
            .parse()
            .map_err(|_| format!("`{item}`: `{count}` is not a GPU count"))?;
        out.push(GpuCount {
            kind: kind.map(str::to_owned),
            count,
        });
    }
    Ok(out)
}

/// Read `sinfo -h -e -o '`[`SINFO_FORMAT`]`'` output.
pub fn parse_sinfo(text: &str) -> Result<Vec<SinfoRow>, OutputError> {
    let err = |line: usize, message: String| OutputError {
        source_name: "sinfo",
        line,
        message,
    };
    if text.len() > MAX_OUTPUT_BYTES {
        return Err(err(0, format!("more than {MAX_OUTPUT_BYTES} bytes")));
    }
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.trim().split('|').collect();
        let [partition, available, limit, count, cpus, mem, gres, nodes] = f.as_slice() else {
            return Err(err(
                n,
                format!(
                    "expected 8 fields separated by `|` (format {SINFO_FORMAT}), got {}",
                    f.len()
                ),
            ));
        };
        let time_limit = limit_time(limit).map_err(|m| err(n, format!("time limit: {m}")))?;
        let count = at_least(count)
            .ok_or_else(|| err(n, format!("node count `{count}` is not a number")))?;
        let cpus =
            at_least(cpus).ok_or_else(|| err(n, format!("CPUs `{cpus}` is not a number")))?;
        let mem_mb =
            at_least(mem).ok_or_else(|| err(n, format!("memory `{mem}` is not a number of MB")))?;
        let gpus = parse_gres_gpus(gres).map_err(|m| err(n, format!("GRES: {m}")))?;
        out.push(SinfoRow {
            partition: partition.trim_end_matches('*').to_owned(),
            available: (*available).to_owned(),
            time_limit,
            group: NodeGroup {
                count,
                cpus,
                mem_mb,
                gpus,
            },
            nodes: (*nodes).to_owned(),
        });
    }
    Ok(out)
}

/// Give each partition the node groups `sinfo` lists for it.
pub fn add_node_groups(partitions: &mut [Partition], rows: &[SinfoRow]) {
    for p in partitions.iter_mut() {
        p.node_groups.extend(
            rows.iter()
                .filter(|r| r.partition == p.name)
                .map(|r| r.group.clone()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scontrol show partition -o` on the test bed (slurm-wlm 22.05.8), pasted as printed.
    const BED_SCONTROL: &str = "\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
PartitionName=dev AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=00:05:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
";

    /// `sinfo -h -o '%R|%a|%l|%D|%c|%m|%G|%N'` on the test bed, pasted as printed.
    const BED_SINFO: &str = "\
gpu|up|infinite|3|8|16000|gpu:4|gpu-a[01-03]
dev|up|5:00|3|8|16000|gpu:4|gpu-a[01-03]
";

    fn bed() -> Vec<Partition> {
        parse_scontrol_partitions(BED_SCONTROL).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn reads_the_bed_partitions() {
        let parts = bed();
        assert_eq!(parts.len(), 2);
        let gpu = &parts[0];
        assert_eq!(gpu.name, "gpu");
        assert!(gpu.default && gpu.is_up());
        assert_eq!(gpu.max_nodes, None);
        assert_eq!(gpu.max_time, None);
        assert_eq!(gpu.total_nodes, Some(3));
        assert_eq!(gpu.total_cpus, Some(24));
        assert_eq!(gpu.max_mem_per_node, None);
        assert_eq!(gpu.max_cpus_per_node, None);
        assert_eq!(gpu.total_gpus, None);
        assert_eq!(gpu.nodes.as_deref(), Some("gpu-a[01-03]"));
        let dev = &parts[1];
        assert!(!dev.default);
        assert_eq!(dev.max_time.map(|t| t.seconds()), Some(300));
    }

    #[test]
    fn reads_the_bed_sinfo() {
        let rows = parse_sinfo(BED_SINFO).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].time_limit, None);
        assert_eq!(rows[1].time_limit.map(|t| t.seconds()), Some(300));
        assert_eq!(
            rows[0].group,
            NodeGroup {
                count: 3,
                cpus: 8,
                mem_mb: 16000,
                gpus: vec![GpuCount {
                    kind: None,
                    count: 4
                }]
            }
        );
        let mut parts = bed();
        add_node_groups(&mut parts, &rows);
        assert_eq!(parts[0].node_groups.len(), 1);
        assert_eq!(parts[1].node_groups[0].gpus(None), 4);
    }

    /// The bed's line with the limits a production partition has (values edited).
    #[test]
    fn reads_limits() {
        let text = BED_SCONTROL
            .lines()
            .next()
            .unwrap_or_default()
            .replace("MaxNodes=UNLIMITED", "MaxNodes=2")
            .replace("MaxTime=UNLIMITED", "MaxTime=2-00:00:00")
            .replace("MinNodes=0", "MinNodes=1")
            .replace("MaxCPUsPerNode=UNLIMITED", "MaxCPUsPerNode=6")
            .replace("MaxMemPerNode=UNLIMITED", "MaxMemPerNode=12000")
            .replace("State=UP", "State=DRAIN")
            .replace("billing=24", "billing=24,gres/gpu=12");
        let parts = parse_scontrol_partitions(&text).unwrap_or_else(|e| panic!("{e}"));
        let p = &parts[0];
        assert_eq!(p.max_nodes, Some(2));
        assert_eq!(p.min_nodes, 1);
        assert_eq!(p.max_time.map(|t| t.seconds()), Some(2 * 86_400));
        assert_eq!(p.max_cpus_per_node, Some(6));
        assert_eq!(p.max_mem_per_node.map(|m| m.megabytes()), Some(12000));
        assert_eq!(p.total_gpus, Some(12));
        assert!(!p.is_up());
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        let e = parse_scontrol_partitions("PartitionName=x MaxNodes=lots\n").expect_err("bad");
        assert_eq!(
            e.to_string(),
            "scontrol show partition output, line 1: MaxNodes: `lots` is not a number or UNLIMITED"
        );
        let e = parse_scontrol_partitions("\nNodeName=gpu-a01 Arch=x86_64\n").expect_err("bad");
        assert_eq!(e.line, 2);
        assert!(parse_scontrol_partitions("").is_ok_and(|p| p.is_empty()));
        assert!(parse_sinfo("gpu|up|infinite|3|8|16000|gpu:4").is_err());
        assert!(parse_sinfo("gpu|up|forever|3|8|16000|gpu:4|n1").is_err());
        assert!(parse_sinfo("gpu|up|infinite|x|8|16000|gpu:4|n1").is_err());
        assert!(parse_sinfo("gpu|up|infinite|3|8|16000|gpu:a:b:c|n1").is_err());
        let big = "x".repeat(MAX_OUTPUT_BYTES + 1);
        assert!(parse_sinfo(&big).is_err());
    }

    #[test]
    fn gres_forms() {
        let g = |s: &str| parse_gres_gpus(s).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(g("(null)"), vec![]);
        assert_eq!(
            g("gpu:8"),
            vec![GpuCount {
                kind: None,
                count: 8
            }]
        );
        let mixed = g("gpu:a100:4(S:0,1),gpu:v100:2,nic:1");
        assert_eq!(mixed.len(), 2);
        let group = NodeGroup {
            count: 1,
            cpus: 1,
            mem_mb: 1,
            gpus: mixed,
        };
        assert_eq!(group.gpus(None), 6);
        assert_eq!(group.gpus(Some("a100")), 4);
        assert_eq!(group.gpus(Some("h100")), 0);
        assert_eq!(at_least::<u32>("8+"), Some(8));
    }
}
