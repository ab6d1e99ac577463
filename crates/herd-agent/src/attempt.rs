//! One attempt on this node: start its workers (each with its variables, log files and
//! torch error file), hear how they exit, forward signals to them, tear them all down, and
//! turn a failed worker into its [`FailureReport`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use herd_slurm::{LaunchInfo, Layout, Position};
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use crate::config::Config;
use crate::event::Event;
use crate::exit::exit_of;
use crate::message::{RankProgress, RankStack};
use crate::pace::Pace;
use crate::procs;
use crate::workers::{
    agent_worker_env, spawn, unix_ms, HighestStep, OutputConfig, OutputSink, PidFile, Running,
    WorkerSpec,
};

/// How long a worker started through `podman exec` may take to say its own pid.
const PID_FILE_LIMIT: Duration = Duration::from_secs(60);

/// A worker's exit as told by a program that exits 128 + N when signal N killed it.
fn signal_from_code(exit: Exit) -> Exit {
    match exit {
        Exit::Code(code @ 129..=192) => Exit::Signal(crate::exit::signal_name(code - 128)),
        other => other,
    }
}
use herd_exp::failure::{Exit, FailureReport, WorkerError};
use herd_exp::layout::AttemptDir;

/// This node's running attempt.
pub(crate) struct Attempt {
    pub(crate) number: u32,
    /// When it started, seconds since the Unix epoch.
    pub(crate) started_unix: u64,
    /// The checkpoint its workers resume from.
    pub(crate) resume_from: Option<String>,
    /// Its folder: per-rank logs, heartbeats and error files.
    dir: AttemptDir,
    /// Workers still running, by rank.
    pub(crate) running: HashMap<u32, Running>,
    groups: Vec<i32>,
    managed: HashSet<i32>,
    /// Each rank's pace, as the hang watchdog's polls see it ([`Attempt::progress`]).
    paces: HashMap<u32, Pace>,
    /// The highest training step its workers printed.
    step: HighestStep,
    sink: Option<OutputSink>,
    /// The node's container, released after the teardown ([`Attempt::teardown_with`]).
    container: Option<std::sync::Arc<herd_container::Container>>,
    /// Starts the next attempt's standbys once this one trains (`crate::warm`); stopped
    /// at the teardown.
    refill: Option<tokio::task::JoinHandle<()>>,
    /// Samples the node's GPUs (`crate::gpus`) until the teardown.
    gpus: Option<crate::gpus::Sampler>,
    /// The GPU errors the sampler's last look found at the teardown, for the agent to
    /// report ([`Attempt::take_gpu_errors`]).
    last_gpu_errors: Vec<herd_exp::gpus::GpuError>,
}

impl Attempt {
    /// Start attempt `number`'s workers of this node, the `slot`-th node of the attempt's
    /// `layout` (its nodes that run workers); every exit arrives on `tx` as
    /// [`Event::WorkerExited`]. A worker that cannot start fails the attempt.
    pub(crate) async fn start(
        cfg: &Config,
        (number, restarts): (u32, u32),
        (layout, slot): (&Layout, usize),
        master: (&str, u16),
        resume_from: Option<String>,
        tx: &mpsc::UnboundedSender<Event>,
    ) -> Result<Attempt, FailureReport> {
        let host = cfg.host();
        let failed = |cause: String| FailureReport::other(number, cfg.node_rank, host, cause);
        let dir = cfg.log_dir.attempt(number);
        let sink = OutputSink::start(OutputConfig {
            dir: dir.clone(),
            label: cfg.label,
            console: true,
            metrics: cfg.metrics.clone(),
        })
        .map_err(|e| {
            failed(format!(
                "cannot write logs into {}: {e}",
                dir.path().display()
            ))
        })?;
        let info = launch_info(cfg, (number, restarts), master, &resume_from);
        let first = layout.first_rank(slot);
        let mut attempt = Attempt {
            number,
            started_unix: crate::keep::unix_now(),
            resume_from,
            dir: dir.clone(),
            running: HashMap::new(),
            groups: Vec::new(),
            managed: HashSet::new(),
            paces: HashMap::new(),
            step: sink.highest_step(),
            sink: Some(sink),
            container: match &cfg.container {
                Some(crate::config::ContainerState::Ready(c)) => Some(c.clone()),
                _ => None,
            },
            refill: None,
            gpus: None,
            last_gpu_errors: Vec::new(),
        };
        let mut envs = Vec::new();
        let mut warm = Vec::new();
        for local_rank in 0..layout.tasks_per_node[slot] {
            let pos = Position {
                rank: first + local_rank,
                local_rank,
                node_rank: slot as u32,
            };
            let env = attempt.env_of(cfg, layout, pos, &info).map_err(&failed)?;
            if attempt
                .spawn_worker(cfg, pos, env.clone(), tx)
                .await
                .map_err(&failed)?
            {
                warm.push(pos.rank);
            }
            envs.push((pos, env));
        }
        attempt.resolve_pids().await;
        let local = layout.tasks_per_node[slot];
        let report = crate::gpus::Report {
            attempt: number,
            tx: tx.clone(),
        };
        attempt.gpus = crate::gpus::start(cfg, &dir, slot as u32, (first, local), report);
        if !warm.is_empty() {
            let ranks: Vec<String> = warm.iter().map(u32::to_string).collect();
            crate::words::say(format!(
                "{host}: rank{} {} started warm (from standbys with their modules imported)",
                if warm.len() == 1 { "" } else { "s" },
                ranks.join(", "),
            ));
        }
        attempt.refill = attempt.refill_task(cfg, restarts, envs);
        Ok(attempt)
    }

    /// The workers started through a program that is not the worker (`podman exec`): wait
    /// (all at once) for each worker's own pid, which signals, stack dumps and reports use
    /// from then on. One whose program ended first never started: its exit tells why.
    async fn resolve_pids(&mut self) {
        let deadline = tokio::time::Instant::now() + PID_FILE_LIMIT;
        loop {
            let mut waiting = false;
            for w in self.running.values_mut().filter(|w| w.pid_file.is_some()) {
                match w.poll_pid() {
                    PidFile::Arrived(pid) => self.groups.push(pid),
                    PidFile::Waiting => waiting = true,
                    PidFile::Never => {}
                }
            }
            if !waiting || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Worker `pos`'s variables ([`agent_worker_env`]). A stale error file left by an
    /// earlier run in the same folder is removed first, so it is never taken for this run's.
    fn env_of(
        &self,
        cfg: &Config,
        layout: &Layout,
        pos: Position,
        info: &LaunchInfo,
    ) -> Result<BTreeMap<String, String>, String> {
        let error_file = self.dir.error_file(pos.rank);
        match std::fs::remove_file(&error_file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "cannot remove the stale error file {}: {e}",
                    error_file.display()
                ))
            }
        }
        let stop = cfg.keep.stop_signal.to_string();
        Ok(agent_worker_env(layout, pos, info, &self.dir, &stop))
    }

    /// Starts worker `pos` with `env`, from this node's standby for its local rank when one
    /// fits (`crate::warm`; `Ok(true)`), else anew; its exit arrives on `tx` as
    /// [`Event::WorkerExited`].
    async fn spawn_worker(
        &mut self,
        cfg: &Config,
        pos: Position,
        env: BTreeMap<String, String>,
        tx: &mpsc::UnboundedSender<Event>,
    ) -> Result<bool, String> {
        let spec = WorkerSpec {
            rank: pos.rank,
            local_rank: pos.local_rank,
            env,
        };
        let sink = self.sink.as_ref().ok_or("output closed")?;
        let cmd = || {
            cfg.argv
                .first()
                .map(|a| a.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let (running, mut child, warm) = match self.standby(cfg, &spec).await {
            Some(h) => {
                crate::workers::create_logs(sink, spec.rank)
                    .map_err(|e| format!("cannot start rank {} (`{}`): {e}", pos.rank, cmd()))?;
                let running = crate::workers::adopt(h.pid, (h.stdout, h.stderr), &spec, sink);
                (running, h.child, true)
            }
            None => {
                let (running, child) = spawn(&cfg.argv, &spec, sink, cfg.container.as_ref())
                    .map_err(|e| format!("cannot start rank {} (`{}`): {e}", pos.rank, cmd()))?;
                (running, child, false)
            }
        };
        if running.pid_file.is_none() {
            self.groups.push(running.pid);
        }
        self.managed.insert(running.pid);
        let (tx, number, rank) = (tx.clone(), self.number, running.rank);
        tokio::spawn(async move {
            let status = child.wait().await;
            let _ = tx.send(Event::WorkerExited {
                attempt: number,
                rank,
                status,
            });
        });
        self.running.insert(pos.rank, running);
        Ok(warm)
    }

    /// This node's standby for `spec`'s local rank, handed `spec`'s variables, when warm
    /// starts are on, the command is a plain Python run and the standby fits; a standby
    /// that does not fit is ended and says why.
    async fn standby(&self, cfg: &Config, spec: &WorkerSpec) -> Option<crate::warm::HandedOff> {
        let pool = cfg.warm.as_ref()?;
        let entry = crate::warm::python_entry(&cfg.argv)?;
        let standby = match pool.take(spec.local_rank, &cfg.argv, &spec.env) {
            Ok(standby) => standby?,
            Err(why) => {
                crate::words::say(format!(
                    "rank {} starts cold: its standby cannot run this attempt ({why})",
                    spec.rank
                ));
                return None;
            }
        };
        let learn = self.dir.modules(spec.rank);
        match standby.hand_off(&entry, &spec.env, &learn).await {
            Ok(h) => Some(h),
            Err(e) => {
                crate::words::say(format!(
                    "rank {} starts cold: its standby did not take the attempt ({e})",
                    spec.rank
                ));
                None
            }
        }
    }

    /// A spare's standbys, started at once (a spare's node is idle) for the workers it
    /// would run in the place of the last node of attempt `number`'s `layout` (this node
    /// put there): in any node's place they fit, unless their imports read the worker's
    /// place ([`crate::warm::PLACE`]), so that its workers start warm when it takes one.
    /// Each local rank that has a standby already keeps it. `None` when warm starts are
    /// off or cannot be had.
    pub(crate) fn spare_standbys(
        cfg: &Config,
        (number, restarts): (u32, u32),
        layout: &Layout,
        master: (&str, u16),
    ) -> Option<tokio::task::JoinHandle<()>> {
        let pool = cfg.warm.clone()?;
        let entry = crate::warm::python_entry(&cfg.argv).filter(|_| cfg.container.is_none())?;
        let slot = layout.nodes.len().checked_sub(1)?;
        let info = launch_info(cfg, (number, restarts), master, &None);
        let dir = cfg.log_dir.attempt(number);
        let stop = cfg.keep.stop_signal.to_string();
        let first = layout.first_rank(slot);
        let workers: Vec<_> = (0..layout.tasks_per_node[slot])
            .filter(|&local_rank| !pool.has(local_rank))
            .map(|local_rank| {
                let pos = Position {
                    rank: first + local_rank,
                    local_rank,
                    node_rank: slot as u32,
                };
                (pos, agent_worker_env(layout, pos, &info, &dir, &stop))
            })
            .collect();
        let argv = cfg.argv.clone();
        Some(tokio::spawn(async move {
            start_standbys(&pool, (&entry, &argv), &dir, workers, |pos| {
                format!("local rank {} of this spare", pos.local_rank)
            })
            .await;
        }))
    }

    /// The task that starts the next attempt's standbys of `workers` (their positions and
    /// variables) once this attempt trains: once each of its workers here has written a
    /// line or one has printed a step, or 30 s after it started, so their imports do not
    /// slow this attempt's own start. `None` when warm starts are
    /// off or cannot be had (not a plain Python run, a container), or when no attempt can
    /// follow in this allocation (no restart left after `restarts`, no spare).
    fn refill_task(
        &self,
        cfg: &Config,
        restarts: u32,
        workers: Vec<(Position, BTreeMap<String, String>)>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if restarts >= cfg.launch.max_restarts && cfg.spare_nodes == 0 {
            return None;
        }
        let pool = cfg.warm.clone()?;
        let entry = crate::warm::python_entry(&cfg.argv).filter(|_| cfg.container.is_none())?;
        let argv = cfg.argv.clone();
        let step = self.step.clone();
        let dir = self.dir.clone();
        let outputs: Vec<_> = self
            .running
            .values()
            .map(|w| w.last_output_ms.clone())
            .collect();
        // Past their imports: every worker here has written a line, or one a step.
        let trains = move || {
            step.get().is_some()
                || outputs
                    .iter()
                    .all(|o| o.load(std::sync::atomic::Ordering::Relaxed) > 0)
        };
        Some(tokio::spawn(async move {
            let until = tokio::time::Instant::now() + Duration::from_secs(30);
            while !trains() && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            start_standbys(&pool, (&entry, &argv), &dir, workers, |pos| {
                format!("rank {}'s next start", pos.rank)
            })
            .await;
        }))
    }

    /// A worker exited: `None` if that was fine, the report if it failed.
    pub(crate) async fn exited(
        &mut self,
        cfg: &Config,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    ) -> Option<FailureReport> {
        let mut w = self.running.remove(&rank)?;
        let exit = match status {
            Ok(s) if w.signal_as_code => signal_from_code(exit_of(s)),
            Ok(s) => exit_of(s),
            Err(_) => Exit::Code(-1),
        };
        if exit.success() {
            return None;
        }
        // Let the reader drain what the worker wrote last (children may hold the pipe).
        if let Some(closed) = w.stderr_closed.take() {
            let _ = tokio::time::timeout(Duration::from_millis(150), closed).await;
        }
        let tail = w
            .stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
        let error = WorkerError::read(&self.dir.error_file(rank));
        Some(FailureReport::worker(
            self.number,
            (rank, w.local_rank, cfg.node_rank),
            cfg.host(),
            exit,
            error,
            tail,
        ))
    }

    /// How long each running rank has made no progress (no output line and no touch of
    /// its heartbeat file), and its pace so far: each call is a poll of the hang watchdog
    /// (every second), which also measures the gaps between a rank's progress events.
    pub(crate) fn progress(&mut self) -> Vec<RankProgress> {
        let now = unix_ms();
        let paces = &mut self.paces;
        let mut out: Vec<RankProgress> = self
            .running
            .values()
            .map(|w| {
                let output = w.last_output_ms.load(std::sync::atomic::Ordering::Relaxed);
                let beat = std::fs::metadata(self.dir.heartbeat(w.rank))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
                let last = output.max(beat);
                let started = last >= w.started_ms && last > 0;
                let pace = paces.entry(w.rank).or_default();
                if started {
                    pace.observe(last);
                }
                RankProgress {
                    rank: w.rank,
                    pid: w.pid,
                    silent_ms: now.saturating_sub(last.max(w.started_ms)),
                    started,
                    longest_gap_ms: pace.longest_gap_ms,
                    gaps: pace.gaps,
                    progress_ms: pace.progress_ms(),
                }
            })
            .collect();
        out.sort_by_key(|p| p.rank);
        out
    }

    /// The highest training step this node's workers have printed in this attempt.
    pub(crate) fn highest_step(&self) -> Option<u64> {
        self.step.get()
    }

    /// Whether any of this node's workers has written a line yet.
    pub(crate) fn has_output(&self) -> bool {
        self.running
            .values()
            .any(|w| w.last_output_ms.load(std::sync::atomic::Ordering::Relaxed) > 0)
    }

    /// Every running rank's Python stack, by `py-spy dump` when it is installed (on PATH
    /// or beside the worker command), each within 10 s.
    pub(crate) async fn stacks(&self, cfg: &Config) -> Vec<RankStack> {
        let py_spy = find_py_spy(cfg.argv.first().map(PathBuf::from));
        let mut ranks: Vec<(u32, i32)> = self.running.values().map(|w| (w.rank, w.pid)).collect();
        ranks.sort_unstable();
        // One task per rank, so the dumps run at the same time; collected in rank order.
        let dumps: Vec<_> = ranks
            .iter()
            .map(|&(rank, pid)| {
                let py_spy = py_spy.clone();
                let host = cfg.host().to_owned();
                tokio::spawn(async move {
                    let stack = match py_spy {
                        None => "no stack: py-spy is not installed (pip install py-spy)".to_owned(),
                        Some(tool) => dump_stack(&tool, pid).await,
                    };
                    RankStack {
                        rank,
                        host,
                        pid,
                        stack,
                    }
                })
            })
            .collect();
        let mut out = Vec::with_capacity(dumps.len());
        for (d, &(rank, pid)) in dumps.into_iter().zip(&ranks) {
            out.push(d.await.unwrap_or_else(|e| RankStack {
                rank,
                host: cfg.host().to_owned(),
                pid,
                stack: format!("no stack: {e}"),
            }));
        }
        out
    }

    /// Pass `sig` on to the workers' process groups.
    pub(crate) fn forward(&self, sig: Signal) {
        procs::forward(&self.groups, sig);
    }

    /// End every process of this attempt on this node (SIGTERM, SIGKILL after `grace`),
    /// then flush its output.
    pub(crate) async fn teardown(&mut self, grace: Duration) {
        self.teardown_with(Signal::SIGTERM, grace).await;
    }

    /// [`Attempt::teardown`] with `first` instead of SIGTERM: a job cancelled by SIGINT or
    /// SIGHUP ends its workers with that signal, as torchrun's agent does, so a worker
    /// that handles it (KeyboardInterrupt) has the grace to do so.
    pub(crate) async fn teardown_with(&mut self, first: Signal, grace: Duration) {
        if let Some(refill) = self.refill.take() {
            refill.abort();
        }
        if let Some(gpus) = self.gpus.take() {
            // Read the kernel log a last time before the workers go: a GPU's fault that
            // ended them is there already.
            self.last_gpu_errors = gpus.stop().await;
        }
        procs::terminate_all(&self.groups, &self.managed, first, grace).await;
        if let Some(c) = self.container.clone() {
            // Podman's record of the attempt's container, removed before the agent goes on
            // (or ends: SLURM may kill it soon after).
            let _ = tokio::task::spawn_blocking(move || c.release_ended()).await;
        }
        self.running.clear();
        // Those groups are gone; never signal their ids again (they may be reused).
        self.groups.clear();
        if let Some(sink) = self.sink.take() {
            // Pipes held by killed processes are closed now; give the readers a moment.
            let _ = tokio::time::timeout(Duration::from_secs(2), sink.finish()).await;
        }
    }

    /// The GPU errors the teardown's last look at the kernel log found (once).
    pub(crate) fn take_gpu_errors(&mut self) -> Vec<herd_exp::gpus::GpuError> {
        std::mem::take(&mut self.last_gpu_errors)
    }

    /// Every worker exited 0: wait for the rest of their output.
    pub(crate) async fn finish_output(&mut self) {
        self.gpus = None;
        if let Some(sink) = self.sink.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), sink.finish()).await;
        }
    }
}

/// `py-spy` on PATH, else beside the worker command (a venv's `bin/`).
fn find_py_spy(command: Option<PathBuf>) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("py-spy"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let cmd = command?;
        let resolved = if cmd.components().count() > 1 {
            cmd
        } else {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join(&cmd))
                .find(|p| p.is_file())?
        };
        let beside = resolved.parent()?.join("py-spy");
        beside.is_file().then_some(beside)
    })
}

/// `py-spy dump --pid PID` (non-blocking: the process is not paused), within 10 s.
async fn dump_stack(tool: &std::path::Path, pid: i32) -> String {
    let run = tokio::process::Command::from(herd_slurm::user_program(tool, &Default::default()))
        .args(["dump", "--nonblocking", "--pid", &pid.to_string()])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(10), run).await {
        Ok(Ok(out)) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        Ok(Ok(out)) => format!(
            "no stack: py-spy dump failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Ok(Err(e)) => format!("no stack: cannot run {}: {e}", tool.display()),
        Err(_) => "no stack: py-spy dump did not answer within 10 s".to_owned(),
    }
}

/// What attempt `number` (after `restarts` restarts) tells its workers beside their
/// places: the master, this node's interface on the route to it (the collectives use it;
/// the master's own address is on the network the followers reached it by), the
/// checkpoint it resumes from.
fn launch_info(
    cfg: &Config,
    (number, restarts): (u32, u32),
    master: (&str, u16),
    resume_from: &Option<String>,
) -> LaunchInfo {
    let socket_ifname = master
        .0
        .parse()
        .ok()
        .and_then(|addr| herd_slurm::allocation::net::route_to(addr).ok())
        .map(|route| route.ifname);
    LaunchInfo {
        master_addr: master.0.to_owned(),
        socket_ifname,
        master_port: Some(master.1),
        restart_count: restarts,
        attempt: number,
        resume_from: resume_from.clone().map(PathBuf::from),
        ..cfg.launch.clone()
    }
}

/// Start a standby of worker command `argv` (`entry`) for each of `workers` (its place and
/// variables), importing what its rank learned in `dir`, into `pool`; one that cannot be
/// started is said (`whose`: for which worker) and its worker will start cold.
async fn start_standbys(
    pool: &crate::warm::Pool,
    (entry, argv): (&crate::warm::Entry, &[std::ffi::OsString]),
    dir: &AttemptDir,
    workers: Vec<(Position, BTreeMap<String, String>)>,
    whose: impl Fn(Position) -> String,
) {
    for (pos, env) in workers {
        let modules = crate::warm::learned(&dir.modules(pos.rank));
        match crate::warm::Standby::start(entry, argv, &env, &modules).await {
            Ok(standby) => pool.put(pos.local_rank, standby),
            Err(e) => crate::words::say(format!("no standby for {}: {e}", whose(pos))),
        }
    }
}
