//! `herd launch` (the per-node agent) and `herd run` (launch here, or on the allocation).

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use herd_agent::signals::Forwarder;
use herd_agent::Signal;
use herd_agent::{Config, KeepAlive, OnHang, Outcome};
use herd_rendezvous::JobKey;
use herd_slurm::allocation::addr;
use herd_slurm::scheduler::command;
use herd_slurm::worker::vars::{HERD_EXP_DIR, HERD_JOB_SECRET};
use herd_slurm::{Allocation, AllocationError, GpuBind, Gpus, LaunchInfo, Vars};

use crate::{CliError, ExitStatus};

/// Options shared by `herd launch` and `herd run`.
#[derive(Debug, Clone, Args)]
pub struct LaunchOptions {
    /// Workers per node (default: the node's GPUs, else 1). `--nproc_per_node` works too.
    #[arg(long, alias = "nproc_per_node", value_name = "G")]
    pub nproc_per_node: Option<u32>,
    /// GPUs each worker sees: `all` of its node's (as torchrun and srun show them, so
    /// `cuda:LOCAL_RANK` works) or `per-rank` (only its own share, for code that always
    /// uses `cuda:0`).
    #[arg(long, default_value = "all", value_name = "all|per-rank")]
    pub gpu_bind: GpuBind,
    /// Restart all workers up to N times after a failure (fresh port, next attempt).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_restarts: u32,
    /// Prefix each console line with the worker's rank (`3: …`), like `srun --label`.
    #[arg(long)]
    pub label: bool,
    /// How to read training metrics from the workers' lines into the logs folder:
    /// auto, json, kv, torchtitan, deepspeed, megatron, swav, off, or regex:RE.
    #[arg(long, default_value = "auto", value_name = "FORMAT")]
    pub metrics: herd_metrics::Format,
    /// Folder for per-rank logs (default: $HERD_EXP_DIR/logs, else ./herd-logs/RUN_ID).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// Seconds between SIGTERM and SIGKILL when tearing workers down.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub kill_grace: f64,
    /// Seconds the nodes may take to find each other.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    pub rendezvous_timeout: f64,
    /// Seconds of silence after which another node's agent counts as lost (a crashed or
    /// frozen node ends the attempt this long after it stopped answering).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub heartbeat_timeout: f64,
    /// In a SLURM job with a time limit: stop the workers this many seconds before it (ask
    /// them to checkpoint, then requeue within --max-requeues); 0: no warning of herd's own.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    pub warn_before: f64,
    /// The signal that asks every worker to checkpoint and exit (time limit, preemption).
    #[arg(long, default_value = "USR1", value_name = "SIGNAL", value_parser = stop_signal)]
    pub stop_signal: Signal,
    /// Seconds the workers have after the stop signal before they are torn down.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub stop_grace: f64,
    /// Requeues of the job allowed for each cause: time limits, preemptions and node
    /// failures are counted apart (needs a requeueable job: `sbatch --requeue`).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub max_requeues: u32,
    /// Seconds without progress of any rank (no output line, no touch of
    /// $HERD_HEARTBEAT_FILE) that make a hang: herd names the rank that went silent first
    /// and dumps every rank's stack with py-spy; 0: no watchdog.
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    pub hang_timeout: f64,
    /// What a hang does: `fail` the job or `restart` its workers (within --max-restarts).
    #[arg(long, default_value = "fail", value_name = "fail|restart")]
    pub on_hang: OnHang,
    /// The worker command and its arguments (after `--`), passed as they are, never
    /// through a shell.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `herd launch` arguments.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    #[command(flatten)]
    opts: LaunchOptions,
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
    opts: LaunchOptions,
}

fn seconds(name: &str, v: f64) -> Result<Duration, CliError> {
    if (0.0..1e7).contains(&v) {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(CliError::Usage(format!(
            "--{name} must be a number of seconds ≥ 0, not {v}"
        )))
    }
}

/// `USR1`, `SIGUSR1` or a number: a signal the workers can be stopped with.
fn stop_signal(s: &str) -> Result<Signal, String> {
    let named = if s.starts_with("SIG") {
        s.to_owned()
    } else {
        format!("SIG{s}")
    };
    let sig = match s.parse::<i32>() {
        Ok(n) => Signal::try_from(n).map_err(|_| format!("{n} is not a signal number"))?,
        Err(_) => named
            .parse::<Signal>()
            .map_err(|_| format!("`{s}` is not a signal name (USR1, USR2, TERM, INT, …)"))?,
    };
    if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP) {
        return Err(format!(
            "{} cannot be handled, so no worker can checkpoint on it",
            sig.as_str()
        ));
    }
    Ok(sig)
}

fn secret(vars: &Vars) -> Option<Vec<u8>> {
    vars.get(HERD_JOB_SECRET)
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes().to_vec())
}

/// The agent's configuration from the options and this node's `gpus` and `launch` (built
/// once, from the allocation or, for a simulated node, from the same reading of `vars`).
fn base_config(
    opts: &LaunchOptions,
    vars: &Vars,
    gpus: &Gpus,
    launch: LaunchInfo,
) -> Result<Config, CliError> {
    let nproc = match opts.nproc_per_node {
        Some(0) => {
            return Err(CliError::Usage(
                "--nproc-per-node must be at least 1".into(),
            ))
        }
        Some(n) => n,
        None => gpus.count().unwrap_or(1),
    };
    let log_dir = match (&opts.log_dir, vars.get(HERD_EXP_DIR)) {
        (Some(d), _) => d.clone(),
        (None, Some(exp)) => PathBuf::from(exp).join("logs"),
        (None, None) => PathBuf::from("herd-logs").join(&launch.run_id),
    };
    Ok(Config {
        node_rank: 0,
        node_names: Vec::new(),
        leader_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        nproc,
        argv: opts.command.clone(),
        key: JobKey {
            id: String::new(),
            secret: Vec::new(),
        },
        log_dir,
        label: opts.label,
        metrics: opts.metrics.clone(),
        kill_grace: seconds("kill-grace", opts.kill_grace)?,
        rendezvous_timeout: seconds("rendezvous-timeout", opts.rendezvous_timeout)?,
        heartbeat_timeout: seconds("heartbeat-timeout", opts.heartbeat_timeout)?
            .max(Duration::from_millis(400)),
        port_candidates: 32,
        keep: KeepAlive {
            warn_before: seconds("warn-before", opts.warn_before)?,
            stop_signal: opts.stop_signal,
            stop_grace: seconds("stop-grace", opts.stop_grace)?,
            max_requeues: opts.max_requeues,
            hang_timeout: Some(seconds("hang-timeout", opts.hang_timeout)?)
                .filter(|t| !t.is_zero()),
            on_hang: opts.on_hang,
        },
        exp_dir: vars
            .get(HERD_EXP_DIR)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from),
        launch: LaunchInfo {
            max_restarts: opts.max_restarts,
            gpu_bind: opts.gpu_bind,
            ..launch
        },
    })
}

fn run_agent(cfg: Config) -> Result<ExitStatus, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
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
        let mut cfg = base_config(&args.opts, &vars, &gpus, launch)?;
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
    let mut cfg = base_config(&args.opts, &vars, &alloc.gpus, launch)?;
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
    let mut forwarded: Vec<OsString> = Vec::new();
    let o = &args.opts;
    if let Some(g) = o.nproc_per_node {
        forwarded.extend(["--nproc-per-node".into(), g.to_string().into()]);
    }
    forwarded.extend([
        "--gpu-bind".into(),
        o.gpu_bind.name().into(),
        "--max-restarts".into(),
        o.max_restarts.to_string().into(),
        "--kill-grace".into(),
        o.kill_grace.to_string().into(),
        "--rendezvous-timeout".into(),
        o.rendezvous_timeout.to_string().into(),
        "--heartbeat-timeout".into(),
        o.heartbeat_timeout.to_string().into(),
        "--warn-before".into(),
        o.warn_before.to_string().into(),
        "--stop-signal".into(),
        o.stop_signal.as_str().into(),
        "--stop-grace".into(),
        o.stop_grace.to_string().into(),
        "--max-requeues".into(),
        o.max_requeues.to_string().into(),
        "--hang-timeout".into(),
        o.hang_timeout.to_string().into(),
        "--on-hang".into(),
        o.on_hang.to_string().into(),
    ]);
    if o.label {
        forwarded.push("--label".into());
    }
    forwarded.extend(["--metrics".into(), o.metrics.to_string().into()]);

    if vars.get("SLURM_JOB_ID").is_some() || vars.get("SLURM_JOBID").is_some() {
        // Inside an allocation: one agent per allocated node, through srun itself.
        if vars.get("SLURM_STEP_ID").is_some() {
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
                Some(exp) => PathBuf::from(exp).join("logs"),
                None => PathBuf::from("herd-logs").join(alloc.job_id.to_string()),
            });
        let log_dir = std::path::absolute(&log_dir).unwrap_or(log_dir);
        let mut args: Vec<OsString> = vec![
            format!("--nodes={nodes}").into(),
            format!("--ntasks={nodes}").into(),
            "--ntasks-per-node=1".into(),
            "--kill-on-bad-exit=1".into(),
            herd.into(),
            "launch".into(),
        ];
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
