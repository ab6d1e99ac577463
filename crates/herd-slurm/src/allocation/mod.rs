//! The allocation as SLURM describes it to a process, read from its environment.
//!
//! Job variables (`SLURM_JOB_NODELIST`, `SLURM_JOB_NUM_NODES`) describe the whole allocation;
//! inside an `srun` step the step variables (`SLURM_STEP_NODELIST`, `SLURM_STEP_TASKS_PER_NODE`,
//! …) describe the step, and the unprefixed ones (`SLURM_NNODES`, `SLURM_NTASKS`,
//! `SLURM_TASKS_PER_NODE`) follow the step, while `SLURM_NODELIST` still names the job's
//! nodes. A batch script is not a task even though SLURM sets `SLURM_PROCID=0` there.
//!
//! - [`counts`]: `SLURM_TASKS_PER_NODE`-style lists (`2(x3),1`).
//! - [`addr`]: the address other nodes reach one of the allocation's nodes at (never
//!   loopback): the agents' leader and the workers' `MASTER_ADDR` both come from it.
//! - [`net`]: the interface on the route to the master, which the collectives use on a
//!   node with several networks (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`).

pub mod addr;
pub mod counts;
pub mod net;

use std::collections::BTreeMap;

use herd_hostlist::HostList;
use serde::Serialize;

use counts::{parse_counts, CountsError};

/// `SLURM_STEP_ID` when this process is a task of an `srun` step: a step number (0, 1, …).
/// Slurm 26.05's batch script has `SLURM_STEP_ID=-5` (the batch step; `-4` is the extern
/// step, `-6` salloc's interactive step, written unsigned, `4294967291`…, by some builds),
/// which 22.05 and 24.11 leave unset: those are not srun steps.
pub fn srun_step_id(vars: &Vars) -> Option<&str> {
    vars.get("SLURM_STEP_ID")
        .filter(|id| id.parse::<u32>().is_ok_and(|n| n < 0xffff_fff0))
}

/// Environment variables to read the allocation from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vars(pub BTreeMap<String, String>);

impl Vars {
    /// This process's environment (variables that are not UTF-8 are left out).
    pub fn from_env() -> Vars {
        Vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        )
    }

    /// `KEY=VALUE` entries separated by newlines (`env` output) or NULs
    /// (`/proc/PID/environ`). Lines without `=` are ignored.
    pub fn parse(text: &str) -> Vars {
        let sep = if text.contains('\0') { '\0' } else { '\n' };
        Vars(
            text.split(sep)
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        )
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
}

/// Why the environment does not describe a usable allocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// No SLURM job in the environment.
    #[error(
        "not inside a SLURM allocation: SLURM_JOB_ID is not set (run under sbatch, salloc or srun)"
    )]
    NotInAllocation,
    /// A variable the model needs is missing.
    #[error("{var} is not set, but {context}")]
    Missing {
        /// The variable.
        var: &'static str,
        /// Why it was expected.
        context: String,
    },
    /// A variable's value cannot be parsed.
    #[error("{var}={value:?} is invalid: {why}")]
    Invalid {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong.
        why: String,
    },
    /// Variables disagree with each other.
    #[error("SLURM variables disagree: {0}")]
    Inconsistent(String),
}

/// Nodes and the number of tasks on each, in SLURM's node order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// Node names, in order (node rank = index).
    pub nodes: Vec<String>,
    /// Tasks on each node, same order.
    pub tasks_per_node: Vec<u32>,
}

impl Layout {
    /// Total number of tasks.
    pub fn world_size(&self) -> u32 {
        self.tasks_per_node.iter().sum()
    }

    /// The first rank on `node_rank` under block distribution (ranks fill nodes in order).
    pub fn first_rank(&self, node_rank: usize) -> u32 {
        self.tasks_per_node[..node_rank].iter().sum()
    }
}

/// Where one task sits in its step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Task {
    /// `SLURM_PROCID`: global rank.
    pub rank: u32,
    /// `SLURM_LOCALID`: rank on its node.
    pub local_rank: u32,
    /// `SLURM_NODEID`: index of its node in the step.
    pub node_rank: u32,
    /// Its node's name.
    pub node: String,
    /// Tasks on its node.
    pub local_world_size: u32,
}

/// GPU information SLURM gives a process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Gpus {
    /// `SLURM_GPUS_ON_NODE`.
    pub on_node: Option<u32>,
    /// `SLURM_GPUS_PER_NODE` as given (`4`, `a100:4`).
    pub per_node: Option<String>,
    /// `CUDA_VISIBLE_DEVICES`, split at commas.
    pub visible: Option<Vec<String>>,
}

impl Gpus {
    /// This node's GPUs as `vars` describe them: the part of [`Allocation::from_vars`]
    /// that means something outside an allocation too (`herd run`'s simulated nodes see
    /// this machine's `CUDA_VISIBLE_DEVICES`). A blank `CUDA_VISIBLE_DEVICES` names none.
    pub fn from_vars(vars: &Vars) -> Result<Gpus, AllocationError> {
        Ok(Gpus {
            on_node: number(vars, "SLURM_GPUS_ON_NODE")?,
            per_node: vars.get("SLURM_GPUS_PER_NODE").map(str::to_owned),
            visible: vars
                .get("CUDA_VISIBLE_DEVICES")
                .filter(|v| !v.trim().is_empty())
                .map(|v| v.split(',').map(|d| d.trim().to_owned()).collect()),
        })
    }

    /// How many GPUs the node has: those visible, else `SLURM_GPUS_ON_NODE`; `None` when
    /// neither names one.
    pub fn count(&self) -> Option<u32> {
        match &self.visible {
            Some(v) if !v.is_empty() => Some(v.len() as u32),
            _ => self.on_node.filter(|&g| g > 0),
        }
    }
}

/// `SLURM_CPUS_ON_NODE`: read like [`Allocation::from_vars`] reads it, for a node outside
/// an allocation too.
pub fn cpus_on_node(vars: &Vars) -> Result<Option<u32>, AllocationError> {
    number(vars, "SLURM_CPUS_ON_NODE")
}

/// One component of a heterogeneous job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HetGroup {
    /// Component index.
    pub index: u32,
    /// `SLURM_JOB_NODELIST_HET_GROUP_<i>`, expanded.
    pub nodes: Vec<String>,
    /// `SLURM_TASKS_PER_NODE_HET_GROUP_<i>`, when set.
    pub tasks_per_node: Option<Vec<u32>>,
}

/// The id herd names this process's job by, from `vars`: `ARRAYID_TASK` (`1234_5`, from
/// `SLURM_ARRAY_JOB_ID` and `SLURM_ARRAY_TASK_ID`) for a task of a job array, else
/// `SLURM_JOB_ID`; `None` outside a job. `herd submit` records an array task by this id,
/// and SLURM's commands take it for exactly that task, where the task's own `SLURM_JOB_ID`
/// names the whole array when it equals the array's id (`scontrol requeue 1234` requeues
/// every task of array 1234, finished ones too).
pub fn job_ref(vars: &Vars) -> Option<String> {
    let whole = |var: &str| {
        vars.get(var)
            .map(str::trim)
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
    };
    match (whole("SLURM_ARRAY_JOB_ID"), whole("SLURM_ARRAY_TASK_ID")) {
        (Some(array), Some(task)) => Some(format!("{array}_{task}")),
        _ => whole("SLURM_JOB_ID")
            .or_else(|| whole("SLURM_JOBID"))
            .map(str::to_owned),
    }
}

/// The allocation as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job_id: u64,
    /// `SLURM_JOB_NODELIST`, expanded.
    pub job_nodes: Vec<String>,
    /// `SLURM_STEP_ID` when this process is a task of an `srun` step.
    pub step_id: Option<String>,
    /// The step's layout in a step; the job's otherwise.
    pub layout: Layout,
    /// This task, in a step.
    pub task: Option<Task>,
    /// `SLURM_CPUS_PER_TASK`.
    pub cpus_per_task: Option<u32>,
    /// `SLURM_CPUS_ON_NODE`.
    pub cpus_on_node: Option<u32>,
    /// GPUs.
    pub gpus: Gpus,
    /// Heterogeneous job components (empty for an ordinary job).
    pub het_groups: Vec<HetGroup>,
}

fn invalid(var: &str, value: &str, why: impl Into<String>) -> AllocationError {
    AllocationError::Invalid {
        var: var.to_owned(),
        value: value.to_owned(),
        why: why.into(),
    }
}

fn number<T: std::str::FromStr>(vars: &Vars, var: &str) -> Result<Option<T>, AllocationError> {
    vars.get(var)
        .map(|v| {
            v.trim()
                .parse::<T>()
                .map_err(|_| invalid(var, v, "expected a whole number"))
        })
        .transpose()
}

fn hostlist(vars: &Vars, var: &str) -> Result<Option<Vec<String>>, AllocationError> {
    vars.get(var)
        .map(|v| {
            HostList::parse(v)
                .map(|h| h.hosts())
                .map_err(|e| invalid(var, v, e.to_string()))
        })
        .transpose()
}

fn counts(vars: &Vars, var: &str) -> Result<Option<Vec<u32>>, AllocationError> {
    vars.get(var)
        .map(|v| parse_counts(v).map_err(|e: CountsError| invalid(var, v, e.why)))
        .transpose()
}

/// `a` and `b` must be equal when both are known.
fn agree<T: PartialEq + std::fmt::Display>(
    a: (&str, Option<T>),
    b: (&str, T),
) -> Result<(), AllocationError> {
    match a.1 {
        Some(v) if v != b.1 => Err(AllocationError::Inconsistent(format!(
            "{}={v} but {} gives {}",
            a.0, b.0, b.1
        ))),
        _ => Ok(()),
    }
}

impl Allocation {
    /// Read the allocation from `vars`; inconsistent values are an error naming them.
    pub fn from_vars(vars: &Vars) -> Result<Allocation, AllocationError> {
        let job_id = number::<u64>(vars, "SLURM_JOB_ID")?
            .or(number::<u64>(vars, "SLURM_JOBID")?)
            .ok_or(AllocationError::NotInAllocation)?;
        let (job_var, job_nodes) = match hostlist(vars, "SLURM_JOB_NODELIST")? {
            Some(n) => ("SLURM_JOB_NODELIST", n),
            None => (
                "SLURM_NODELIST",
                hostlist(vars, "SLURM_NODELIST")?.ok_or(AllocationError::Missing {
                    var: "SLURM_JOB_NODELIST",
                    context: format!("SLURM_JOB_ID={job_id} is"),
                })?,
            ),
        };
        if job_nodes.is_empty() {
            return Err(invalid(
                job_var,
                vars.get(job_var).unwrap_or(""),
                "names no node",
            ));
        }
        agree(
            (
                "SLURM_JOB_NUM_NODES",
                number::<usize>(vars, "SLURM_JOB_NUM_NODES")?,
            ),
            (job_var, job_nodes.len()),
        )?;

        let step_id = srun_step_id(vars).map(str::to_owned);
        let layout = if step_id.is_some() {
            Self::step_layout(vars, &job_nodes)?
        } else {
            Self::job_layout(vars, job_var, &job_nodes)?
        };
        let task = match step_id {
            Some(_) => Some(Self::task(vars, &layout)?),
            None => None,
        };

        let gpus = Gpus::from_vars(vars)?;
        Ok(Allocation {
            job_id,
            het_groups: Self::het_groups(vars, &job_nodes)?,
            job_nodes,
            step_id,
            layout,
            task,
            cpus_per_task: number(vars, "SLURM_CPUS_PER_TASK")?,
            cpus_on_node: cpus_on_node(vars)?,
            gpus,
        })
    }

    fn step_layout(vars: &Vars, job_nodes: &[String]) -> Result<Layout, AllocationError> {
        let nodes = hostlist(vars, "SLURM_STEP_NODELIST")?.ok_or(AllocationError::Missing {
            var: "SLURM_STEP_NODELIST",
            context: "SLURM_STEP_ID is set (this is an srun step)".into(),
        })?;
        let (tpn_var, tpn) = match counts(vars, "SLURM_STEP_TASKS_PER_NODE")? {
            Some(t) => ("SLURM_STEP_TASKS_PER_NODE", t),
            None => (
                "SLURM_TASKS_PER_NODE",
                counts(vars, "SLURM_TASKS_PER_NODE")?.ok_or(AllocationError::Missing {
                    var: "SLURM_STEP_TASKS_PER_NODE",
                    context: "SLURM_STEP_ID is set (this is an srun step)".into(),
                })?,
            ),
        };
        if tpn.len() != nodes.len() {
            return Err(AllocationError::Inconsistent(format!(
                "{tpn_var}={} covers {} nodes but SLURM_STEP_NODELIST={} names {}",
                vars.get(tpn_var).unwrap_or(""),
                tpn.len(),
                vars.get("SLURM_STEP_NODELIST").unwrap_or(""),
                nodes.len()
            )));
        }
        if let Some(stray) = nodes.iter().find(|n| !job_nodes.contains(n)) {
            return Err(AllocationError::Inconsistent(format!(
                "step node {stray} (SLURM_STEP_NODELIST) is not in the job's node list"
            )));
        }
        let layout = Layout {
            nodes,
            tasks_per_node: tpn,
        };
        let n = layout.nodes.len();
        let world = layout.world_size();
        agree(
            (
                "SLURM_STEP_NUM_NODES",
                number::<usize>(vars, "SLURM_STEP_NUM_NODES")?,
            ),
            ("SLURM_STEP_NODELIST", n),
        )?;
        agree(
            ("SLURM_NNODES", number::<usize>(vars, "SLURM_NNODES")?),
            ("SLURM_STEP_NODELIST", n),
        )?;
        agree(
            (
                "SLURM_STEP_NUM_TASKS",
                number::<u32>(vars, "SLURM_STEP_NUM_TASKS")?,
            ),
            (tpn_var, world),
        )?;
        agree(
            ("SLURM_NTASKS", number::<u32>(vars, "SLURM_NTASKS")?),
            (tpn_var, world),
        )?;
        if tpn_var == "SLURM_STEP_TASKS_PER_NODE" {
            if let Some(plain) = counts(vars, "SLURM_TASKS_PER_NODE")? {
                if plain != layout.tasks_per_node {
                    return Err(AllocationError::Inconsistent(format!(
                        "SLURM_TASKS_PER_NODE={} but SLURM_STEP_TASKS_PER_NODE={}",
                        vars.get("SLURM_TASKS_PER_NODE").unwrap_or(""),
                        vars.get("SLURM_STEP_TASKS_PER_NODE").unwrap_or("")
                    )));
                }
            }
        }
        Ok(layout)
    }

    fn job_layout(vars: &Vars, job_var: &str, nodes: &[String]) -> Result<Layout, AllocationError> {
        let tpn = counts(vars, "SLURM_TASKS_PER_NODE")?.unwrap_or_else(|| vec![1; nodes.len()]);
        if tpn.len() != nodes.len() {
            return Err(AllocationError::Inconsistent(format!(
                "SLURM_TASKS_PER_NODE={} covers {} nodes but {job_var} names {}",
                vars.get("SLURM_TASKS_PER_NODE").unwrap_or(""),
                tpn.len(),
                nodes.len()
            )));
        }
        let layout = Layout {
            nodes: nodes.to_vec(),
            tasks_per_node: tpn,
        };
        agree(
            ("SLURM_NNODES", number::<usize>(vars, "SLURM_NNODES")?),
            (job_var, nodes.len()),
        )?;
        agree(
            ("SLURM_NTASKS", number::<u32>(vars, "SLURM_NTASKS")?),
            ("SLURM_TASKS_PER_NODE", layout.world_size()),
        )?;
        Ok(layout)
    }

    fn task(vars: &Vars, layout: &Layout) -> Result<Task, AllocationError> {
        let need = |var: &'static str| -> Result<u32, AllocationError> {
            number::<u32>(vars, var)?.ok_or(AllocationError::Missing {
                var,
                context: "SLURM_STEP_ID is set (this is an srun task)".into(),
            })
        };
        let (rank, local_rank, node_rank) = (
            need("SLURM_PROCID")?,
            need("SLURM_LOCALID")?,
            need("SLURM_NODEID")?,
        );
        let world = layout.world_size();
        if rank >= world {
            return Err(AllocationError::Inconsistent(format!(
                "SLURM_PROCID={rank} but the step has {world} tasks"
            )));
        }
        let Some(&local_world_size) = layout.tasks_per_node.get(node_rank as usize) else {
            return Err(AllocationError::Inconsistent(format!(
                "SLURM_NODEID={node_rank} but the step has {} nodes",
                layout.nodes.len()
            )));
        };
        if local_rank >= local_world_size {
            return Err(AllocationError::Inconsistent(format!(
                "SLURM_LOCALID={local_rank} but node {node_rank} runs {local_world_size} tasks"
            )));
        }
        let node = layout.nodes[node_rank as usize].clone();
        if let Some(named) = vars.get("SLURMD_NODENAME") {
            if named != node {
                return Err(AllocationError::Inconsistent(format!(
                    "SLURMD_NODENAME={named} but SLURM_NODEID={node_rank} is {node} in the step's node list"
                )));
            }
        }
        Ok(Task {
            rank,
            local_rank,
            node_rank,
            node,
            local_world_size,
        })
    }

    fn het_groups(vars: &Vars, job_nodes: &[String]) -> Result<Vec<HetGroup>, AllocationError> {
        let Some(size) = number::<u32>(vars, "SLURM_HET_SIZE")? else {
            return Ok(Vec::new());
        };
        (0..size)
            .map(|index| {
                let var = format!("SLURM_JOB_NODELIST_HET_GROUP_{index}");
                let value = vars.get(&var).ok_or_else(|| {
                    AllocationError::Inconsistent(format!(
                        "SLURM_HET_SIZE={size} but {var} is not set"
                    ))
                })?;
                let nodes = HostList::parse(value)
                    .map(|h| h.hosts())
                    .map_err(|e| invalid(&var, value, e.to_string()))?;
                if let Some(stray) = nodes.iter().find(|n| !job_nodes.contains(n)) {
                    return Err(AllocationError::Inconsistent(format!(
                        "{var} names {stray}, which is not in the job's node list"
                    )));
                }
                let tpn_var = format!("SLURM_TASKS_PER_NODE_HET_GROUP_{index}");
                let tasks_per_node = match vars.get(&tpn_var) {
                    Some(v) => Some(parse_counts(v).map_err(|e| invalid(&tpn_var, v, e.why))?),
                    None => None,
                };
                Ok(HetGroup {
                    index,
                    nodes,
                    tasks_per_node,
                })
            })
            .collect()
    }

    /// The node that hosts rank 0 (node rank 0 of the layout).
    pub fn master_node(&self) -> &str {
        &self.layout.nodes[0]
    }
}
