//! `herd exec`: the per-task shim of srun launch mode (one SLURM task per GPU).
//!
//! `srun --ntasks=GPUS --ntasks-per-node=G --kill-on-bad-exit=1 herd exec -- CMD…`: each task
//! reads where SLURM put it, sets the rank variables (the same set `herd launch` gives its
//! workers), leaves it every GPU SLURM gave the task (or, with `--gpu-bind per-rank`, only
//! its local rank's share) and replaces itself with CMD. SLURM then supervises the tasks
//! directly (`--kill-on-bad-exit`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;

use clap::Args;
use herd_plan::GpuBindArg;
use herd_slurm::allocation::net::{self, RouteError};
use herd_slurm::{
    worker_env, Allocation, AllocationError, GpuBind, LaunchInfo, Position, Task, Vars,
};

use crate::{CliError, ExitStatus};

/// `herd exec` arguments.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The port rank 0 listens on (default: $MASTER_PORT, which the batch script sets).
    #[arg(long, value_name = "PORT")]
    pub master_port: Option<u16>,
    /// Which GPUs the task keeps of those SLURM gave it.
    #[command(flatten)]
    pub gpus: GpuBindArg,
    /// Set only the collectives' interface, `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME`
    /// (this node's interface on the route to the step's first node; a value already set
    /// is kept), and run CMD: for a launcher that starts the node's workers and gives them
    /// their ranks itself, such as torchrun (one task per node). herd submit's torchrun
    /// mode runs torchrun this way.
    #[arg(long, conflicts_with_all = ["master_port", "gpu_bind"])]
    pub network_only: bool,
    /// The command and its arguments (after `--`), executed as they are, never by a shell.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Run `herd exec`: on success this never returns (the process becomes CMD).
pub fn run(args: ExecArgs) -> Result<ExitStatus, CliError> {
    let vars = Vars::from_env();
    let alloc = Allocation::from_vars(&vars).map_err(|e| match e {
        AllocationError::NotInAllocation => CliError::Usage(
            "herd exec maps a SLURM task's variables: run it under srun (`srun --ntasks=GPUS --ntasks-per-node=G herd exec -- CMD`), or use `herd run` here".into(),
        ),
        e => CliError::Allocation(e),
    })?;
    let task = alloc.task.clone().ok_or_else(|| {
        CliError::Usage(
            "herd exec runs as an srun task, one per worker: `srun --ntasks-per-node=G herd exec -- CMD`".into(),
        )
    })?;
    if args.network_only {
        let mut env = BTreeMap::new();
        let master = task_master(&alloc, &task)?;
        if let Some(ifname) = master.ifname {
            for var in net::IFNAME_VARS {
                if vars.get(var).is_none() {
                    env.insert(var.to_owned(), ifname.clone());
                }
            }
        }
        return exec_command(&args.command, &env);
    }
    let port = match args.master_port {
        Some(p) => p,
        None => match vars.get("MASTER_PORT") {
            Some(p) => p.trim().parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(|| {
                CliError::Input(format!("MASTER_PORT={p:?} is not a port number (1-65535)"))
            })?,
            None => {
                return Err(CliError::Usage(
                    "MASTER_PORT is not set: in srun mode every task must know rank 0's port before srun starts; herd submit's batch script sets it, or pass --master-port".into(),
                ))
            }
        },
    };
    let master = task_master(&alloc, &task)?;
    let (env, warning) = task_env(
        &alloc,
        &task,
        &vars,
        (master, Some(port)),
        args.gpus.gpu_bind,
    );
    if let Some(w) = warning {
        eprintln!("herd: rank {}: {w}", task.rank);
    }
    exec_command(&args.command, &env)
}

/// Replace this process with `command` in this task's environment, `env` on top: returns
/// only when that fails.
fn exec_command(
    command: &[OsString],
    env: &BTreeMap<String, String>,
) -> Result<ExitStatus, CliError> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| CliError::Usage("no command given after `--`".into()))?;
    let err = worker_command(program, rest, env).exec();
    Err(CliError::System {
        action: format!("cannot run `{}`", program.to_string_lossy()),
        source: err,
    })
}

/// The master as `task` of `alloc` reaches it: loopback when the step has one node, else
/// an address of the master node on the network the nodes share (on the master node too,
/// whose own name may resolve only to loopback there); with this node's interface on that
/// route, which its workers' collectives use (herd_slurm::allocation::net).
pub(crate) fn task_master(alloc: &Allocation, task: &Task) -> Result<TaskMaster, RouteError> {
    let (addr, route) = net::master_route(&alloc.layout.nodes, task.node_rank)?;
    Ok(TaskMaster {
        addr: addr.to_string(),
        ifname: Some(route.ifname),
    })
}

/// The master's address as a task is given it, and this node's interface on the route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TaskMaster {
    /// `MASTER_ADDR`.
    pub(crate) addr: String,
    /// `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME` unless the user set them; `None`
    /// when not known here.
    pub(crate) ifname: Option<String>,
}

/// What `herd exec` sets for `task` of `alloc` (srun mode) on top of the task's own
/// environment: the rank variables, with the master at `master` (address, port), and the
/// checkpoint to resume from, looked for by each task itself (nothing writes checkpoints
/// before its job has started); with a warning when the checkpoint folder cannot be read.
/// `herd env` shows the same.
pub(crate) fn task_env(
    alloc: &Allocation,
    task: &Task,
    vars: &Vars,
    (master, master_port): (TaskMaster, Option<u16>),
    gpu_bind: GpuBind,
) -> (BTreeMap<String, String>, Option<String>) {
    let mut info = LaunchInfo {
        gpu_bind,
        socket_ifname: master.ifname,
        ..LaunchInfo::for_task(alloc, vars, master.addr, master_port)
    };
    let mut warning = None;
    match info.newest_checkpoint() {
        Ok(found) => info.resume_from = found,
        Err(e) => {
            warning = Some(format!(
                "cannot read the checkpoint folder: {e}; HERD_RESUME_FROM is not set"
            ))
        }
    }
    let pos = Position {
        rank: task.rank,
        local_rank: task.local_rank,
        node_rank: task.node_rank,
    };
    (worker_env(&alloc.layout, pos, &info), warning)
}

/// The worker's program and arguments in this task's environment, `env` on top and the
/// variables workers never get taken out ([`herd_slurm::user_program`]).
fn worker_command(
    program: &OsString,
    args: &[OsString],
    env: &std::collections::BTreeMap<String, String>,
) -> std::process::Command {
    let mut cmd = herd_slurm::user_program(program, env);
    cmd.args(args);
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::ffi::OsStr;

    #[test]
    fn an_srun_task_gets_its_variables_but_never_the_job_secret() {
        let env = BTreeMap::from([
            ("RANK".to_owned(), "2".to_owned()),
            ("HERD_JOB_SECRET".to_owned(), "s".to_owned()),
        ]);
        let cmd = worker_command(&"python".into(), &["train.py".into()], &env);
        let envs: BTreeMap<_, _> = cmd.get_envs().collect();
        assert_eq!(envs.get(OsStr::new("RANK")), Some(&Some(OsStr::new("2"))));
        assert_eq!(envs.get(OsStr::new("HERD_JOB_SECRET")), Some(&None));
    }
}
