//! `herd env`: what SLURM says about this process, and the variables herd gives a worker.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use herd_hostlist::compress;
use herd_plan::GpuBindArg;
use herd_slurm::allocation::addr;
use herd_slurm::{format_counts, worker_env, Allocation, GpuBind, LaunchInfo, Position, Vars};
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
    let master_addr = addr::reachable_addr(&master);
    let master_port = match vars.get("MASTER_PORT") {
        None => None,
        Some(p) => Some(p.trim().parse::<u16>().map_err(|_| {
            CliError::Input(format!("MASTER_PORT={p:?} is not a port number (1-65535)"))
        })?)
        .filter(|&p| p != 0),
    };

    let worker = alloc.task.as_ref().map(|task| {
        let info = LaunchInfo {
            gpu_bind: args.gpus.gpu_bind,
            ..LaunchInfo::for_task(
                &alloc,
                &vars,
                master_addr
                    .as_ref()
                    .map_or_else(|_| master.clone(), |a| a.to_string()),
                master_port,
            )
        };
        let pos = Position {
            rank: task.rank,
            local_rank: task.local_rank,
            node_rank: task.node_rank,
        };
        let mut env = worker_env(&alloc.layout, pos, &info);
        for passthrough in herd_slurm::worker::vars::PASSED_THROUGH {
            if let Some(v) = vars.get(passthrough) {
                env.insert(passthrough.to_owned(), v.to_owned());
            }
        }
        env
    });

    // What each worker of this node sees. In a task, every task of the node is a worker
    // (srun mode); in a batch or salloc shell, an agent would start one per GPU.
    let node_gpus = alloc.gpus.visible.clone().unwrap_or_default();
    let workers = match &alloc.task {
        Some(t) => t.local_world_size,
        None => node_gpus.len() as u32,
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
            "master_port": master_port,
            "task": alloc.task,
            "gpus": alloc.gpus,
            "gpu_bind": args.gpus.gpu_bind,
            "worker_gpus": worker_gpus,
            "cpus_per_task": alloc.cpus_per_task,
            "cpus_on_node": alloc.cpus_on_node,
            "het_groups": alloc.het_groups,
            "worker_env": worker,
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
    match worker {
        Some(env) => {
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
        }
        None => writeln!(
            out,
            "\n(run `srun herd env` to see a task's worker variables)"
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
