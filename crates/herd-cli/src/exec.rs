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
use herd_slurm::allocation::addr::{self, AddrError};
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
    let master_addr = task_master_addr(&alloc)?;
    let (env, warning) = task_env(
        &alloc,
        &task,
        &vars,
        (master_addr, Some(port)),
        args.gpus.gpu_bind,
    );
    if let Some(w) = warning {
        eprintln!("herd: rank {}: {w}", task.rank);
    }
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| CliError::Usage("no command given after `--`".into()))?;
    let err = worker_command(program, rest, &env).exec();
    Err(CliError::System {
        action: format!("cannot run `{}`", program.to_string_lossy()),
        source: err,
    })
}

/// The master's address as every task of `alloc` is given it: loopback when the step has
/// one node, else an address of the master node that the other nodes reach.
pub(crate) fn task_master_addr(alloc: &Allocation) -> Result<String, AddrError> {
    if alloc.layout.nodes.len() == 1 {
        return Ok("127.0.0.1".to_owned());
    }
    Ok(addr::reachable_addr(alloc.master_node())?.to_string())
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
    (master_addr, master_port): (String, Option<u16>),
    gpu_bind: GpuBind,
) -> (BTreeMap<String, String>, Option<String>) {
    let mut info = LaunchInfo {
        gpu_bind,
        ..LaunchInfo::for_task(alloc, vars, master_addr, master_port)
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
