//! `herd env`: what SLURM says about this process, and the variables herd gives a worker.

use std::io::Write;
use std::path::PathBuf;

use std::collections::BTreeMap;

use clap::Args;
use herd_hostlist::compress;
use herd_plan::{GpuBindArg, KeepAlive, StopSignal};
use herd_slurm::allocation::net;
use herd_slurm::worker::vars::WITHHELD;
use herd_slurm::{format_counts, Allocation, GpuBind, LaunchInfo, Layout, Position, Vars};
use serde_json::json;

use crate::{CliError, ExitStatus};

/// `herd env` arguments.
#[derive(Debug, Args)]
pub struct EnvArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Read the environment from FILE (`env` output, or NUL-separated like
    /// /proc/PID/environ) instead of this process's.
    #[arg(long, value_name = "FILE")]
    pub from: Option<PathBuf>,
    /// The GPU binding to show, as given to `herd submit`, `herd launch` or `herd exec`.
    #[command(flatten)]
    pub gpus: GpuBindArg,
    /// Show the workers an agent on this node would start (`herd launch`, agent mode, as
    /// `herd submit` runs jobs) instead of this task as a worker itself (`herd exec`, srun
    /// mode). The options below are those of `herd launch` that change what a worker gets.
    #[arg(long)]
    pub agent: bool,
    /// Agent mode: workers per node, as `herd launch --nproc-per-node` (default: the
    /// node's GPUs, else 1).
    #[arg(long, value_name = "G", requires = "agent", value_parser = clap::value_parser!(u32).range(1..))]
    pub nproc_per_node: Option<u32>,
    /// Agent mode: as `herd launch --spare-nodes` (the last K nodes stand by).
    #[arg(long, value_name = "K", requires = "agent", default_value_t = 0)]
    pub spare_nodes: u32,
    /// Agent mode: as `herd launch --max-restarts`.
    #[arg(long, value_name = "N", requires = "agent", default_value_t = 0)]
    pub max_restarts: u32,
    /// Agent mode: as `herd launch --stop-signal`.
    #[arg(long, value_name = "SIGNAL", requires = "agent", default_value_t = KeepAlive::LAUNCH.stop_signal)]
    pub stop_signal: StopSignal,
    /// Agent mode: as `herd launch --log-dir` (default: $HERD_EXP_DIR/logs, else
    /// ./herd-logs/JOB_ID).
    #[arg(long, value_name = "DIR", requires = "agent")]
    pub log_dir: Option<PathBuf>,
}

/// What an agent on this node would give its workers (`herd env --agent`).
struct AgentView {
    /// This node's rank among the step's (or the job's) nodes.
    node_rank: u32,
    /// The nodes that run workers, and how many each.
    layout: Layout,
    /// The attempt the variables are shown for: the next of the log folder.
    attempt: u32,
    /// Its folder.
    attempt_dir: PathBuf,
    /// Each local rank's variables; none on a spare.
    workers: Vec<BTreeMap<String, String>>,
}

/// This process's node among `alloc`'s: a task's own; a batch or salloc shell runs on one
/// of the job's nodes (`SLURMD_NODENAME`), the first when that is not known.
fn this_node_rank(alloc: &Allocation, vars: &Vars) -> u32 {
    match &alloc.task {
        Some(t) => t.node_rank,
        None => vars
            .get("SLURMD_NODENAME")
            .and_then(|me| alloc.layout.nodes.iter().position(|n| n == me))
            .unwrap_or(0) as u32,
    }
}

/// The workers an agent of `alloc` on this node would start with `args`' options: the same
/// reading of the allocation, the same log folder and the same variables
/// ([`herd_agent::workers::agent_worker_env`]) as `herd launch`'s, for the attempt its log
/// folder would hold next. The port is the leader's to claim when the attempt starts.
fn agent_view(args: &EnvArgs, alloc: &Allocation, vars: &Vars) -> AgentView {
    let nodes = &alloc.layout.nodes;
    let node_rank = this_node_rank(alloc, vars);
    let nproc = args
        .nproc_per_node
        .unwrap_or_else(|| alloc.gpus.count().unwrap_or(1));
    let working = (nodes.len() as u32).saturating_sub(args.spare_nodes).max(1) as usize;
    let layout = Layout {
        nodes: nodes[..working.min(nodes.len())].to_vec(),
        tasks_per_node: vec![nproc; working.min(nodes.len())],
    };
    // The master and this node's interface on the route to it, as the agents find them;
    // the master's name when the route is not known here (`--from`).
    let (master_addr, socket_ifname) = match net::master_route(&layout.nodes, node_rank) {
        Ok((addr, route)) => (addr.to_string(), Some(route.ifname)),
        Err(_) => (alloc.master_node().to_owned(), None),
    };
    let task_info = LaunchInfo {
        socket_ifname,
        ..LaunchInfo::for_task(alloc, vars, master_addr, None)
    };
    let logs = crate::launch::agent_logs(args.log_dir.as_deref(), vars, &task_info.run_id);
    let attempt = logs.next_attempt();
    let dir = logs.attempt(attempt);
    let info = LaunchInfo {
        max_restarts: args.max_restarts,
        gpu_bind: args.gpus.gpu_bind,
        restart_count: 0,
        attempt,
        resume_from: task_info.newest_checkpoint().ok().flatten(),
        ..task_info
    };
    let stop = args.stop_signal.to_string();
    let workers = if (node_rank as usize) < layout.nodes.len() {
        let first = layout.first_rank(node_rank as usize);
        (0..nproc)
            .map(|l| {
                let pos = Position {
                    rank: first + l,
                    local_rank: l,
                    node_rank,
                };
                herd_agent::workers::agent_worker_env(&layout, pos, &info, &dir, &stop)
            })
            .collect()
    } else {
        Vec::new()
    };
    AgentView {
        node_rank,
        layout,
        attempt,
        attempt_dir: dir.path().to_owned(),
        workers,
    }
}

/// Run `herd env`.
pub fn run(args: EnvArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let vars = match &args.from {
        None => Vars::from_env(),
        Some(path) => {
            let bytes = std::fs::read(path).map_err(|source| CliError::EnvFile {
                path: path.clone(),
                source,
            })?;
            Vars::parse(&String::from_utf8_lossy(&bytes))
        }
    };
    let alloc = Allocation::from_vars(&vars)?;
    let master = alloc.master_node().to_owned();
    // The master as this node reaches it, and this node's interface on that route: what
    // herd gives the workers here (herd_slurm::allocation::net).
    let route = net::master_route(&alloc.layout.nodes, this_node_rank(&alloc, &vars));
    let master_addr = route.as_ref().map(|(addr, _)| *addr);
    let socket_ifname = route.as_ref().ok().map(|(_, r)| r.ifname.clone());
    let master_port = match vars.get("MASTER_PORT") {
        None => None,
        Some(p) => Some(p.trim().parse::<u16>().map_err(|_| {
            CliError::Input(format!("MASTER_PORT={p:?} is not a port number (1-65535)"))
        })?)
        .filter(|&p| p != 0),
    };

    // srun mode: this task is the worker, with what `herd exec` would set.
    let mut warning = None;
    let worker = match (&alloc.task, args.agent) {
        (Some(task), false) => {
            // As `herd exec` finds it; the name when the route is not known here (`--from`).
            let task_master = crate::exec::task_master(&alloc, task).unwrap_or_else(|_| {
                crate::exec::TaskMaster {
                    addr: master.clone(),
                    ifname: None,
                }
            });
            let (env, w) = crate::exec::task_env(
                &alloc,
                task,
                &vars,
                (task_master, master_port),
                args.gpus.gpu_bind,
            );
            warning = w;
            Some(env)
        }
        _ => None,
    };
    let agent = if args.agent {
        Some(agent_view(&args, &alloc, &vars))
    } else {
        None
    };
    if let Some(w) = &warning {
        eprintln!("herd: warning: {w}");
    }

    // What each worker of this node sees. In a task, every task of the node is a worker
    // (srun mode); in a batch or salloc shell, an agent would start one per GPU.
    let node_gpus = alloc.gpus.visible.clone().unwrap_or_default();
    let workers = match (&agent, &alloc.task) {
        (Some(a), _) => a.workers.len() as u32,
        (None, Some(t)) => t.local_world_size,
        (None, None) => node_gpus.len() as u32,
    };
    let worker_gpus: Vec<Vec<String>> = (0..workers)
        .map(|l| args.gpus.gpu_bind.visible(&node_gpus, l, workers))
        .collect();

    let nodelist = compress(&alloc.layout.nodes);
    let tpn = format_counts(&alloc.layout.tasks_per_node);
    if args.json {
        let value = json!({
            "job_id": alloc.job_id,
            "step_id": alloc.step_id,
            "job_nodelist": compress(&alloc.job_nodes),
            "nodelist": nodelist,
            "nodes": alloc.layout.nodes,
            "tasks_per_node": alloc.layout.tasks_per_node,
            "num_nodes": alloc.layout.nodes.len(),
            "world_size": alloc.layout.world_size(),
            "master_node": master,
            "master_addr": master_addr.as_ref().ok().map(|a| a.to_string()),
            "master_addr_error": master_addr.as_ref().err().map(|e| e.to_string()),
            "socket_ifname": socket_ifname,
            "master_port": master_port,
            "task": alloc.task,
            "gpus": alloc.gpus,
            "gpu_bind": args.gpus.gpu_bind,
            "worker_gpus": worker_gpus,
            "cpus_per_task": alloc.cpus_per_task,
            "cpus_on_node": alloc.cpus_on_node,
            "het_groups": alloc.het_groups,
            "worker_env": worker,
            "agent": agent.as_ref().map(|a| json!({
                "node_rank": a.node_rank,
                "nodes": a.layout.nodes,
                "tasks_per_node": a.layout.tasks_per_node,
                "attempt": a.attempt,
                "attempt_dir": a.attempt_dir,
                "workers": a.workers,
            })),
            "withheld": WITHHELD,
        });
        writeln!(out, "{value}")?;
        return Ok(ExitStatus::Success);
    }

    let scope = match &alloc.step_id {
        Some(step) => format!("job {}, step {step}", alloc.job_id),
        None => format!("job {} (batch or salloc shell, not a task)", alloc.job_id),
    };
    writeln!(
        out,
        "{scope}: {} tasks on {} nodes {nodelist} (tasks per node {tpn})",
        alloc.layout.world_size(),
        alloc.layout.nodes.len()
    )?;
    match &master_addr {
        Ok(a) => writeln!(out, "master      {master} ({a})")?,
        Err(e) => writeln!(out, "master      {master} (no reachable address: {e})")?,
    }
    if let Some(ifname) = &socket_ifname {
        writeln!(
            out,
            "network     {ifname}: this node's interface on the route to the master (the workers' GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME, unless set)"
        )?;
    }
    if let Some(t) = &alloc.task {
        writeln!(
            out,
            "this task   rank {} of {}, local rank {} of {}, node rank {} ({})",
            t.rank,
            alloc.layout.world_size(),
            t.local_rank,
            t.local_world_size,
            t.node_rank,
            t.node
        )?;
    }
    if let Some(visible) = &alloc.gpus.visible {
        writeln!(
            out,
            "gpus        CUDA_VISIBLE_DEVICES={}",
            visible.join(",")
        )?;
        writeln!(
            out,
            "gpu bind    {}",
            describe_binding(args.gpus.gpu_bind, &worker_gpus)
        )?;
    }
    for g in &alloc.het_groups {
        writeln!(out, "het group {} {}", g.index, compress(&g.nodes))?;
    }
    let withheld = WITHHELD.join(", ");
    match (&agent, worker) {
        (Some(a), _) => {
            if a.workers.is_empty() {
                writeln!(
                    out,
                    "\nagent mode: node rank {} stands by as a spare (the workers run on {})",
                    a.node_rank,
                    compress(&a.layout.nodes)
                )?;
            } else {
                writeln!(
                    out,
                    "\nagent mode: {} workers on node rank {} of {} ({} in all), attempt {} in {}",
                    a.workers.len(),
                    a.node_rank,
                    a.layout.nodes.len(),
                    a.layout.world_size(),
                    a.attempt,
                    a.attempt_dir.display()
                )?;
            }
            for (l, env) in a.workers.iter().enumerate() {
                writeln!(out, "\nworker environment herd sets, local rank {l}:")?;
                for (k, v) in env {
                    writeln!(out, "  {k}={v}")?;
                }
            }
            writeln!(
                out,
                "\n(MASTER_PORT: claimed by the leader when each attempt starts; every other variable is the agent's, less {withheld})"
            )?;
        }
        (None, Some(env)) => {
            writeln!(out, "\nworker environment herd sets:")?;
            for (k, v) in &env {
                writeln!(out, "  {k}={v}")?;
            }
            if master_port.is_none() {
                writeln!(
                    out,
                    "  (MASTER_PORT: claimed by `herd launch` on the master when the job starts)"
                )?;
            }
            writeln!(out, "\n(every other variable is the task's, less {withheld})")?;
        }
        (None, None) => writeln!(
            out,
            "\n(run `srun herd env` to see a task's worker variables, `herd env --agent` an agent's workers')"
        )?,
    }
    Ok(ExitStatus::Success)
}

/// `all: each of the 2 workers on this node sees 0,1` or
/// `per-rank: local rank 0 sees 0, local rank 1 sees 1`.
fn describe_binding(bind: GpuBind, worker_gpus: &[Vec<String>]) -> String {
    let shown = |g: &[String]| g.join(",");
    match bind {
        GpuBind::All => match (worker_gpus.len(), worker_gpus.first()) {
            (1, Some(g)) => format!("all: the one worker on this node sees {}", shown(g)),
            (n, Some(g)) => format!(
                "all: each of the {n} workers on this node sees {} (cuda:LOCAL_RANK is its own GPU)",
                shown(g)
            ),
            (_, None) => "all: no workers on this node".to_owned(),
        },
        GpuBind::PerRank => {
            let each: Vec<String> = worker_gpus
                .iter()
                .enumerate()
                .map(|(l, g)| format!("local rank {l} sees {}", shown(g)))
                .collect();
            format!("per-rank: {}", each.join(", "))
        }
    }
}
