//! `herd launch` (the per-node agent) and `herd run` (launch here, or on the allocation).

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use herd_agent::signals::Forwarder;
use herd_agent::{Config, ContainerState, Outcome};
use herd_exp::layout::{ExperimentDir, LogsDir};
use herd_plan::AgentOptions;
use herd_rendezvous::JobKey;
use herd_slurm::allocation::addr;
use herd_slurm::scheduler::command;
use herd_slurm::worker::vars::{HERD_EXP_DIR, HERD_JOB_SECRET};
use herd_slurm::{Allocation, AllocationError, Gpus, LaunchInfo, Vars};

use crate::{CliError, ExitStatus};

/// `herd launch` arguments.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    #[command(flatten)]
    opts: AgentOptions,
    #[command(flatten)]
    run: RunFiles,
    /// Set by `herd run`: this agent's node rank among local simulated nodes.
    #[arg(long, hide = true, requires_all = ["local_nnodes", "run_id"])]
    local_node_rank: Option<u32>,
    /// Set by `herd run`: the number of local simulated nodes.
    #[arg(long, hide = true)]
    local_nnodes: Option<u32>,
    /// Set by `herd run`: the run's id.
    #[arg(long, hide = true)]
    run_id: Option<String>,
}

/// `herd run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Nodes: simulated on this machine outside SLURM; inside an allocation, how many of
    /// its nodes to use (default: all of them).
    #[arg(long, short = 'N', value_name = "N")]
    nodes: Option<u32>,
    #[command(flatten)]
    opts: AgentOptions,
    #[command(flatten)]
    run: RunFiles,
}

/// What each run has of its own: where its logs go and what its workers run.
#[derive(Debug, Clone, Args)]
pub struct RunFiles {
    /// Folder for per-rank logs (default: $HERD_EXP_DIR/logs, else ./herd-logs/RUN_ID).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// The worker command and its arguments (after `--`), passed as they are, never
    /// through a shell.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn secret(vars: &Vars) -> Option<Vec<u8>> {
    vars.get(HERD_JOB_SECRET)
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes().to_vec())
}

/// An agent's log folder: `given` (`--log-dir`), else the experiment's `logs/`, else
/// `herd-logs/RUN_ID` here.
pub(crate) fn agent_logs(given: Option<&std::path::Path>, vars: &Vars, run_id: &str) -> LogsDir {
    match (given, vars.get(HERD_EXP_DIR)) {
        (Some(d), _) => LogsDir::new(d),
        (None, Some(exp)) => ExperimentDir::new(exp).logs(),
        (None, None) => LogsDir::new(PathBuf::from("herd-logs").join(run_id)),
    }
}

/// The agent's configuration from the options and this node's `gpus` and `launch` (built
/// once, from the allocation or, for a simulated node, from the same reading of `vars`).
fn base_config(
    opts: &AgentOptions,
    run: &RunFiles,
    vars: &Vars,
    gpus: &Gpus,
    launch: LaunchInfo,
) -> Result<Config, CliError> {
    let nproc = opts
        .nproc_per_node
        .unwrap_or_else(|| gpus.count().unwrap_or(1));
    let log_dir = agent_logs(run.log_dir.as_deref(), vars, &launch.run_id);
    Ok(Config {
        node_rank: 0,
        node_names: Vec::new(),
        leader_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        nproc,
        argv: run.command.clone(),
        key: JobKey {
            id: String::new(),
            secret: Vec::new(),
        },
        log_dir,
        label: opts.label,
        metrics: opts.metrics.clone(),
        kill_grace: opts.kill_grace.duration(),
        rendezvous_timeout: opts.rendezvous_timeout.duration(),
        // Below 0.4 s, heartbeats every 0.1 s would be lost to scheduling on a busy node.
        heartbeat_timeout: opts
            .heartbeat_timeout
            .duration()
            .max(Duration::from_millis(400)),
        spare_nodes: opts.spare_nodes,
        port_candidates: 32,
        keep: opts.keep.clone(),
        exp_dir: vars
            .get(HERD_EXP_DIR)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
        container: opts.container.spec().map(|spec| {
            // What it mounts is named for the run and this agent, unique on the node.
            let tag = format!("{}-{}", launch.run_id, std::process::id());
            let node = herd_container::Node {
                gpus: !launch.node_gpus.is_empty(),
                job_id: launch.job_id,
                host: vars.get("SLURMD_NODENAME").map(str::to_owned),
                cpus_per_worker: launch.node_cpus.map(|c| (c / nproc.max(1)).max(1)),
            };
            ContainerState::start(&spec, &tag, &node)
        }),
        warm: opts
            .keep
            .warm
            .is_on()
            .then(|| std::sync::Arc::new(herd_agent::warm::Pool::default())),
        launch: LaunchInfo {
            max_restarts: opts.max_restarts,
            gpu_bind: opts.gpus.gpu_bind,
            ..launch
        },
    })
}

fn run_agent(cfg: Config) -> Result<ExitStatus, CliError> {
    // The agent's own loop runs on this thread (`block_on`); the links' readers, their
    // heartbeats and the workers' output run on two threads of their own, so a loop
    // waiting on a slow file system (the timeline on a shared one) neither stops this
    // node's heartbeats nor makes a peer's look late.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("herd-agent")
        .enable_all()
        .build()
        .map_err(CliError::system("cannot start the agent's event loop"))?;
    match runtime.block_on(herd_agent::run(cfg))? {
        Outcome::Success => Ok(ExitStatus::Success),
        // The agent has reported the failure.
        Outcome::Failed(_) => Ok(ExitStatus::Failure),
        // Requeued: the job runs again; this run ended as it should.
        Outcome::Requeued(_) => Ok(ExitStatus::Success),
    }
}

/// Run `herd launch`.
pub fn launch(args: LaunchArgs) -> Result<ExitStatus, CliError> {
    let vars = Vars::from_env();
    if let (Some(rank), Some(nnodes), Some(run_id)) =
        (args.local_node_rank, args.local_nnodes, &args.run_id)
    {
        // A simulated node of `herd run` on this machine: no allocation, this machine's
        // GPUs and CPUs read the way an allocation's are.
        let gpus = Gpus::from_vars(&vars)?;
        let cpus = herd_slurm::allocation::cpus_on_node(&vars)?;
        let launch = LaunchInfo::for_node(&gpus, cpus, &vars, run_id.clone(), None);
        let mut cfg = base_config(&args.opts, &args.run, &vars, &gpus, launch)?;
        if nnodes == 0 || rank >= nnodes {
            return Err(CliError::Usage(format!(
                "--local-node-rank {rank} is not below --local-nnodes {nnodes}"
            )));
        }
        cfg.node_rank = rank;
        cfg.node_names = (0..nnodes).map(|i| format!("local-{i}")).collect();
        cfg.key = JobKey {
            id: format!("local-{run_id}"),
            secret: secret(&vars).ok_or_else(|| {
                CliError::Usage(format!(
                    "{HERD_JOB_SECRET} is not set: local agents are started by `herd run`"
                ))
            })?,
        };
        return run_agent(cfg);
    }

    let alloc = Allocation::from_vars(&vars).map_err(|e| match e {
        AllocationError::NotInAllocation => CliError::Usage(
            "herd launch is the per-node agent inside a SLURM job: start it with `srun --ntasks-per-node=1 herd launch -- CMD`, or use `herd run -- CMD` (here or in an allocation)".into(),
        ),
        e => CliError::Allocation(e),
    })?;
    let task = alloc.task.clone().ok_or_else(|| {
        CliError::Usage("herd launch must run as an srun task, one per node: `srun --ntasks-per-node=1 herd launch -- CMD` (or use `herd run`)".into())
    })?;
    if let Some((i, &n)) = alloc
        .layout
        .tasks_per_node
        .iter()
        .enumerate()
        .find(|(_, &n)| n != 1)
    {
        return Err(CliError::Usage(format!(
            "herd launch runs one agent per node, but this step runs {n} tasks on {}: use `srun --ntasks-per-node=1`",
            alloc.layout.nodes[i]
        )));
    }
    let step = alloc.step_id.clone().unwrap_or_default();
    let launch = LaunchInfo::for_task(&alloc, &vars, String::new(), None);
    let mut cfg = base_config(&args.opts, &args.run, &vars, &alloc.gpus, launch)?;
    cfg.node_rank = task.node_rank;
    cfg.node_names = alloc.layout.nodes.clone();
    let id = format!("slurm-{}.{step}", alloc.job_id);
    let secret = secret(&vars).unwrap_or_else(|| {
        if task.node_rank == 0 {
            eprintln!("herd: note: {HERD_JOB_SECRET} is not set; the agents authenticate with a secret derived from the job id (herd run and herd submit set a random one)");
        }
        format!("derived:{id}:{}", vars.get("SLURM_JOB_UID").unwrap_or("")).into_bytes()
    });
    cfg.key = JobKey { id, secret };
    if task.node_rank != 0 {
        let master = alloc.master_node();
        cfg.leader_ip = addr::reachable_addr(master)?;
    }
    run_agent(cfg)
}

/// Run `herd run`.
pub fn run(args: RunArgs) -> Result<ExitStatus, CliError> {
    let vars = Vars::from_env();
    let herd =
        std::env::current_exe().map_err(CliError::system("cannot find the herd binary's path"))?;
    let secret =
        herd_rendezvous::new_secret().map_err(CliError::system("cannot make the job's secret"))?;
    // The agents get these options as the batch script gives them: from the definition.
    let forwarded: Vec<OsString> = args
        .opts
        .to_args()
        .into_iter()
        .map(OsString::from)
        .collect();
    let o = &args.run;

    if vars.get("SLURM_JOB_ID").is_some() || vars.get("SLURM_JOBID").is_some() {
        // Inside an allocation: one agent per allocated node, through srun itself.
        if herd_slurm::allocation::srun_step_id(&vars).is_some() {
            return Err(CliError::Usage(
                "herd run is already inside an srun step: run it from the batch script or the salloc shell".into(),
            ));
        }
        let alloc = Allocation::from_vars(&vars)?;
        let available = alloc.job_nodes.len() as u32;
        let nodes = args.nodes.unwrap_or(available);
        if nodes == 0 || nodes > available {
            return Err(CliError::Usage(format!(
                "--nodes {nodes}: the allocation has {available} nodes ({})",
                herd_hostlist::compress(&alloc.job_nodes)
            )));
        }
        let log_dir = o
            .log_dir
            .clone()
            .unwrap_or_else(|| match vars.get(HERD_EXP_DIR) {
                Some(exp) => ExperimentDir::new(exp).logs().path().to_owned(),
                None => PathBuf::from("herd-logs").join(alloc.job_id.to_string()),
            });
        let log_dir = std::path::absolute(&log_dir).unwrap_or(log_dir);
        let mut args: Vec<OsString> = vec![
            format!("--nodes={nodes}").into(),
            format!("--ntasks={nodes}").into(),
            "--ntasks-per-node=1".into(),
            "--kill-on-bad-exit=1".into(),
        ];
        // The step says its CPUs itself: srun inherits the job's cpus-per-task only from
        // Slurm 23.11, and from then refuses a job whose two CPU variables disagree unless
        // the step gives its own (herd_slurm::scheduler::version).
        if let Some(c) = alloc.cpus_per_task {
            args.push(format!("--cpus-per-task={c}").into());
        }
        args.extend([herd.into(), "launch".into()]);
        args.extend(forwarded);
        args.extend(["--log-dir".into(), log_dir.into(), "--".into()]);
        args.extend(o.command.iter().cloned());
        let args: Vec<&OsStr> = args.iter().map(OsString::as_os_str).collect();
        let status = command::run_attached("srun", &args, &[(HERD_JOB_SECRET, secret.as_ref())])
            .map_err(CliError::Slurm)?;
        return Ok(if status.success() {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        });
    }

    // Outside SLURM: N simulated nodes on this machine, the same agents over loopback.
    let nodes = args.nodes.unwrap_or(1);
    if nodes == 0 {
        return Err(CliError::Usage("--nodes must be at least 1".into()));
    }
    let run_id = format!(
        "run-{}",
        &herd_rendezvous::nonce().map_err(CliError::system("cannot make a run id"))?[..8]
    );
    let log_dir = o
        .log_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("herd-logs").join(&run_id));
    let log_dir = std::path::absolute(&log_dir).unwrap_or(log_dir);
    eprintln!(
        "herd: run {run_id}: {nodes} simulated node{} on this machine, logs in {}",
        if nodes == 1 { "" } else { "s" },
        log_dir.display()
    );
    // Handlers first: a signal while the agents start is forwarded to them once they run.
    let forwarder =
        Forwarder::install().map_err(CliError::system("cannot install the signal handlers"))?;
    let mut children = Vec::new();
    for rank in 0..nodes {
        let mut cmd = std::process::Command::new(&herd);
        cmd.arg("launch")
            .args(&forwarded)
            .arg("--log-dir")
            .arg(&log_dir)
            .arg("--local-node-rank")
            .arg(rank.to_string())
            .arg("--local-nnodes")
            .arg(nodes.to_string())
            .arg("--run-id")
            .arg(&run_id)
            .arg("--")
            .args(&o.command)
            .env(HERD_JOB_SECRET, &secret);
        // Own process group: a terminal's Ctrl-C reaches herd run once, and herd run
        // forwards it to every agent once.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        children.push(
            cmd.spawn()
                .map_err(CliError::system("cannot start an agent"))?,
        );
    }
    // The agents act on each signal as herd_agent::signals says (SIGHUP like SIGTERM).
    forwarder.forward_to(children.iter().map(|c| c.id() as i32).collect());
    let mut ok = true;
    for mut c in children {
        ok &= c.wait().map(|s| s.success()).unwrap_or(false);
    }
    Ok(if ok {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}
