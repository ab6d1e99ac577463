//! One attempt on this node: start its workers (each with its variables, log files and
//! torch error file), hear how they exit, forward signals to them, tear them all down, and
//! turn a failed worker into its [`FailureReport`].

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use herd_slurm::vars::HERD_LOG_DIR;
use herd_slurm::{worker_env, LaunchInfo, Layout, Position};
use nix::sys::signal::Signal;
use tokio::sync::mpsc;

use crate::agent::{Config, Event};
use crate::error_file::{error_file_path, WorkerError};
use crate::procs;
use crate::report::{Exit, FailureReport};
use crate::workers::{spawn, OutputConfig, OutputSink, Running, WorkerSpec};

/// This node's running attempt.
pub(crate) struct Attempt {
    pub(crate) number: u32,
    /// `LOG_DIR/attempt-K`: its per-rank logs and error files.
    dir: PathBuf,
    /// Workers still running, by rank.
    pub(crate) running: HashMap<u32, Running>,
    groups: Vec<i32>,
    managed: HashSet<i32>,
    sink: Option<OutputSink>,
}

impl Attempt {
    /// Start attempt `number`'s workers of this node; every exit arrives on `tx` as
    /// [`Event::WorkerExited`]. A worker that cannot start fails the attempt.
    pub(crate) async fn start(
        cfg: &Config,
        number: u32,
        layout: &Layout,
        master: (&str, u16),
        resume_from: Option<String>,
        tx: &mpsc::UnboundedSender<Event>,
    ) -> Result<Attempt, FailureReport> {
        let host = cfg.host();
        let failed = |cause: String| FailureReport::other(number, cfg.node_rank, host, cause);
        let dir = cfg.log_dir.join(format!("attempt-{number}"));
        let sink = OutputSink::start(OutputConfig {
            dir: dir.clone(),
            label: cfg.label,
            console: true,
        })
        .map_err(|e| failed(format!("cannot write logs into {}: {e}", dir.display())))?;
        let info = LaunchInfo {
            master_addr: master.0.to_owned(),
            master_port: Some(master.1),
            restart_count: number,
            resume_from: resume_from.map(PathBuf::from),
            ..cfg.launch.clone()
        };
        let first = layout.first_rank(cfg.node_rank as usize);
        let mut attempt = Attempt {
            number,
            dir: dir.clone(),
            running: HashMap::new(),
            groups: Vec::new(),
            managed: HashSet::new(),
            sink: Some(sink),
        };
        for local_rank in 0..layout.tasks_per_node[cfg.node_rank as usize] {
            let pos = Position {
                rank: first + local_rank,
                local_rank,
                node_rank: cfg.node_rank,
            };
            let mut env = worker_env(layout, pos, &info);
            env.insert(HERD_LOG_DIR.into(), dir.display().to_string());
            // torch's @record writes the exception here, as under torchrun; a file left by
            // an earlier run with the same log folder must not be taken for this one's.
            let error_file = error_file_path(&dir, pos.rank);
            match std::fs::remove_file(&error_file) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(failed(format!(
                        "cannot remove the stale error file {}: {e}",
                        error_file.display()
                    )))
                }
            }
            env.insert(
                "TORCHELASTIC_ERROR_FILE".into(),
                error_file.display().to_string(),
            );
            let spec = WorkerSpec {
                rank: pos.rank,
                local_rank,
                env,
            };
            let sink = attempt
                .sink
                .as_ref()
                .ok_or_else(|| failed("output closed".into()))?;
            match spawn(&cfg.argv, &spec, sink) {
                Ok((running, mut child)) => {
                    attempt.groups.push(running.pid);
                    attempt.managed.insert(running.pid);
                    let tx = tx.clone();
                    let rank = running.rank;
                    tokio::spawn(async move {
                        let status = child.wait().await;
                        let _ = tx.send(Event::WorkerExited {
                            attempt: number,
                            rank,
                            status,
                        });
                    });
                    attempt.running.insert(pos.rank, running);
                }
                Err(e) => {
                    let cmd = cfg
                        .argv
                        .first()
                        .map(|a| a.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    return Err(failed(format!(
                        "cannot start rank {} (`{cmd}`): {e}",
                        pos.rank
                    )));
                }
            }
        }
        Ok(attempt)
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
            Ok(s) => Exit::from_status(s),
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
        let error = WorkerError::read(&error_file_path(&self.dir, rank));
        Some(FailureReport::worker(
            self.number,
            (rank, w.local_rank, cfg.node_rank),
            cfg.host(),
            exit,
            error,
            tail,
        ))
    }

    /// Pass `sig` on to the workers' process groups.
    pub(crate) fn forward(&self, sig: Signal) {
        procs::forward(&self.groups, sig);
    }

    /// End every process of this attempt on this node, then flush its output.
    pub(crate) async fn teardown(&mut self, grace: Duration) {
        procs::terminate_all(&self.groups, &self.managed, grace).await;
        self.running.clear();
        // Those groups are gone; never signal their ids again (they may be reused).
        self.groups.clear();
        if let Some(sink) = self.sink.take() {
            // Pipes held by killed processes are closed now; give the readers a moment.
            let _ = tokio::time::timeout(Duration::from_secs(2), sink.finish()).await;
        }
    }

    /// Every worker exited 0: wait for the rest of their output.
    pub(crate) async fn finish_output(&mut self) {
        if let Some(sink) = self.sink.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), sink.finish()).await;
        }
    }
}
