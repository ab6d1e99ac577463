//! The names of herd's own environment variables (`HERD_*`), in one place: the ones herd
//! sets for every worker (docs/env.md), and the ones it reads or passes between its own
//! processes.

/// The attempt (restart count) a worker belongs to, from 0.
pub const HERD_ATTEMPT: &str = "HERD_ATTEMPT";
/// The worker's node rank.
pub const HERD_NODE_RANK: &str = "HERD_NODE_RANK";
/// The number of nodes of the job.
pub const HERD_NUM_NODES: &str = "HERD_NUM_NODES";
/// The name of node 0, where rank 0 runs.
pub const HERD_MASTER_NODE: &str = "HERD_MASTER_NODE";
/// The SLURM job id, when under SLURM.
pub const HERD_JOB_ID: &str = "HERD_JOB_ID";
/// Agent mode: this attempt's log folder (`LOG_DIR/attempt-K`).
pub const HERD_LOG_DIR: &str = "HERD_LOG_DIR";
/// The experiment folder: exported by the batch script `herd submit` writes; its `logs/`
/// is the agents' default log folder.
pub const HERD_EXP_DIR: &str = "HERD_EXP_DIR";
/// Where the job writes its checkpoints, passed through to the workers when set.
pub const HERD_CHECKPOINT_DIR: &str = "HERD_CHECKPOINT_DIR";
/// The checkpoint a resumed job starts from, passed through to the workers when set.
pub const HERD_RESUME_FROM: &str = "HERD_RESUME_FROM";
/// A file a worker may touch to say it is making progress without printing a line
/// (`pathlib.Path(os.environ["HERD_HEARTBEAT_FILE"]).touch()`), read by the hang watchdog.
pub const HERD_HEARTBEAT_FILE: &str = "HERD_HEARTBEAT_FILE";
/// A file a worker may append herd's metrics convention to (one JSON object a line with a
/// numeric `step`), instead of or besides printing it (docs/metrics.md).
pub const HERD_METRICS_FILE: &str = "HERD_METRICS_FILE";
/// Agent mode: the signal herd sends every worker to ask it to checkpoint and stop before
/// a time limit or at a preemption (`USR1`, `--stop-signal`), as SLURM's name without `SIG`;
/// the `herd` Python module handles it (`herd.stop_requested()`).
pub const HERD_STOP_SIGNAL: &str = "HERD_STOP_SIGNAL";
/// Agent mode: where torch's `@record` writes a worker's exception (as under torchrun),
/// `LOG_DIR/attempt-K/rank-R.error.json`, read for the failure report.
pub const TORCHELASTIC_ERROR_FILE: &str = "TORCHELASTIC_ERROR_FILE";
/// The job's secret, with which its agents prove to each other that they belong to it
/// (set by `herd run` and by the batch script of `herd submit`).
pub const HERD_JOB_SECRET: &str = "HERD_JOB_SECRET";

/// `debug`: herd writes every SLURM command it runs, with how long it took, on stderr
/// (`herd: debug: squeue … (12 ms)`).
pub const HERD_LOG: &str = "HERD_LOG";

/// Variables of herd's own environment that no worker gets: the job's secret is the
/// agents' proof that they belong to the job, and nothing a worker runs needs it (a worker
/// that could read it could pose as an agent).
pub const WITHHELD: [&str; 1] = [HERD_JOB_SECRET];
