//! The experiment folder's layout: the one place where the files and folders inside an
//! experiment are named. Everything else (the agents that write logs, the views that read
//! them, the batch script, the metrics store) asks for paths here.
//!
//! - [`ExperimentDir`]: `<exp_root>/<name>/` and what it holds directly;
//! - [`LogsDir`]: its `logs/` (or the folder `herd run --log-dir` names), holding the batch
//!   step's output, the latest failure report and one [`AttemptDir`] per attempt;
//! - [`AttemptDir`]: `logs/attempt-K/`, one [`RankFile`] of each kind per rank and the
//!   attempt's failure report.
//!
//! [`entries`] lists every path with what it holds: docs/design.md §4's table is that list
//! (a test keeps the two equal).

use std::fmt::Display;
use std::io;
use std::path::{Path, PathBuf};

/// The code snapshot's folder inside an experiment.
const CODE: &str = "code";
/// The rendered batch script.
pub(crate) const JOB_SCRIPT: &str = "job.sbatch";
/// A sweep's array script of one resource shape among several: `job-SHAPE.sbatch`.
const SHAPE_SCRIPT_PREFIX: &str = "job-";
const SHAPE_SCRIPT_EXT: &str = "sbatch";
/// The manifest.
const MANIFEST: &str = "manifest.json";
/// The lock file taken while the manifest is updated.
const LOCK: &str = ".lock";
/// The event timeline.
const TIMELINE: &str = "timeline.jsonl";
/// The checkpoints folder (`HERD_CHECKPOINT_DIR` of the experiment's jobs).
const CHECKPOINTS: &str = "checkpoints";
/// The logs folder.
const LOGS: &str = "logs";
/// A failure report, in the logs folder (the latest) and in each attempt's folder.
const FAILURE: &str = "failure.json";
/// How an attempt's folder name starts: `attempt-K`.
const ATTEMPT_PREFIX: &str = "attempt-";
/// How a rank's file names start: `rank-R.…`.
const RANK_PREFIX: &str = "rank-";
/// A node's GPU samples in an attempt folder: `node-N.gpus.jsonl`.
const NODE_PREFIX: &str = "node-";
const GPUS_SUFFIX: &str = ".gpus.jsonl";

/// How the temporary folder of an experiment being created starts (`<exp_root>/.herd-new-…`,
/// renamed into place when it is whole).
pub const NEW_EXPERIMENT_PREFIX: &str = ".herd-new-";

/// Names herd uses directly inside an experiment folder; a file added to it may not take
/// them.
pub(crate) const TAKEN: [&str; 5] = [CODE, LOGS, CHECKPOINTS, MANIFEST, LOCK];

/// An experiment folder's paths: `<exp_root>/<name>/` and what it holds. The folder need
/// not exist (a batch script names its paths before `herd submit` creates it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExperimentDir {
    dir: PathBuf,
}

impl ExperimentDir {
    /// The experiment folder `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> ExperimentDir {
        ExperimentDir { dir: dir.into() }
    }

    /// The folder itself.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `code/`: the code snapshot the job runs (the batch script `cd`s into it).
    pub fn code(&self) -> PathBuf {
        self.dir.join(CODE)
    }

    /// `job.sbatch`: the rendered batch script.
    pub fn job_script(&self) -> PathBuf {
        self.dir.join(JOB_SCRIPT)
    }

    /// The name of [`ExperimentDir::job_script`] inside the folder.
    pub fn job_script_name() -> &'static str {
        JOB_SCRIPT
    }

    /// `manifest.json`.
    pub fn manifest(&self) -> PathBuf {
        self.dir.join(MANIFEST)
    }

    /// The name of [`ExperimentDir::manifest`] inside the folder.
    pub fn manifest_name() -> &'static str {
        MANIFEST
    }

    /// `.lock`: taken while the manifest is updated.
    pub fn lock(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    /// `timeline.jsonl`: the job's events.
    pub fn timeline(&self) -> PathBuf {
        self.dir.join(TIMELINE)
    }

    /// `checkpoints/`: where the job writes checkpoints (`HERD_CHECKPOINT_DIR`).
    pub fn checkpoints(&self) -> PathBuf {
        self.dir.join(CHECKPOINTS)
    }

    /// `logs/`.
    pub fn logs(&self) -> LogsDir {
        LogsDir::new(self.dir.join(LOGS))
    }

    /// The folders [`crate::NewExperiment::create`] makes (empty, or filled by the
    /// snapshot), in the order it makes them.
    pub(crate) fn folders(&self) -> [PathBuf; 3] {
        [self.dir.join(LOGS), self.checkpoints(), self.code()]
    }
}

/// Which output stream of a worker (or of the batch step).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stream {
    /// stdout: `rank-R.out`, `JOBID.out`.
    Out,
    /// stderr: `rank-R.err`, `JOBID.err`.
    Err,
}

impl Stream {
    /// Both, stdout first.
    pub const BOTH: [Stream; 2] = [Stream::Out, Stream::Err];

    /// `out` or `err`: the log file's extension.
    pub fn ext(self) -> &'static str {
        match self {
            Stream::Out => "out",
            Stream::Err => "err",
        }
    }
}

/// A logs folder: an experiment's `logs/`, or whatever folder `herd launch --log-dir` or
/// `herd run` writes (same layout inside).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LogsDir {
    dir: PathBuf,
}

impl LogsDir {
    /// The logs folder `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> LogsDir {
        LogsDir { dir: dir.into() }
    }

    /// The folder itself.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `attempt-K/`: attempt K's per-rank files.
    pub fn attempt(&self, attempt: u32) -> AttemptDir {
        AttemptDir::new(self.dir.join(attempt_name(attempt)))
    }

    /// `failure.json`: the latest attempt's failure report.
    pub fn failure_report(&self) -> PathBuf {
        self.dir.join(FAILURE)
    }

    /// `JOBID.out` / `JOBID.err`: SLURM's output of the batch step of job `job_id`
    /// (appended across requeues).
    pub fn batch_log(&self, job_id: impl Display, stream: Stream) -> PathBuf {
        self.dir.join(batch_log_name(job_id, stream))
    }

    /// The file name pattern `sbatch --output`/`--error` gets for [`LogsDir::batch_log`]:
    /// `%j.out`, `%j.err` (SLURM puts the job id for `%j`).
    pub fn batch_log_pattern(stream: Stream) -> String {
        batch_log_name("%j", stream)
    }

    /// The attempt numbers K of the `attempt-K` folders, ascending; none when the folder
    /// does not exist.
    pub fn attempts(&self) -> io::Result<Vec<u32>> {
        let mut found = numbered(&self.dir, |name| name.strip_prefix(ATTEMPT_PREFIX))?;
        found.dedup();
        Ok(found)
    }

    /// The lowest attempt number not used yet (after the highest `attempt-K`): attempts are
    /// counted over the whole experiment, so a restart, a requeue or a `herd submit
    /// --resume` never writes into an earlier attempt's logs. 0 when there is none (or the
    /// folder cannot be read).
    pub fn next_attempt(&self) -> u32 {
        self.attempts()
            .ok()
            .and_then(|a| a.last().copied())
            .map_or(0, |k| k + 1)
    }
}

/// `attempt-K`.
fn attempt_name(attempt: impl Display) -> String {
    format!("{ATTEMPT_PREFIX}{attempt}")
}

/// `JOBID.out` / `JOBID.err`.
fn batch_log_name(job_id: impl Display, stream: Stream) -> String {
    format!("{job_id}.{}", stream.ext())
}

/// One attempt's folder, `logs/attempt-K/`: each rank's files ([`RankFile`]) and the
/// attempt's failure report.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AttemptDir {
    dir: PathBuf,
}

impl AttemptDir {
    /// The attempt folder `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> AttemptDir {
        AttemptDir { dir: dir.into() }
    }

    /// The folder itself.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Rank `rank`'s file of kind `file`.
    pub fn rank_file(&self, rank: u32, file: RankFile) -> PathBuf {
        self.dir.join(file.name(rank))
    }

    /// `rank-R.out` / `rank-R.err`: the worker's stdout or stderr, raw.
    pub fn log(&self, rank: u32, stream: Stream) -> PathBuf {
        self.rank_file(rank, RankFile::log(stream))
    }

    /// `rank-R.times`: the time marks of both streams.
    pub fn times(&self, rank: u32) -> PathBuf {
        self.rank_file(rank, RankFile::Times)
    }

    /// `rank-R.metrics`: the metrics the agent read from the rank's lines.
    pub fn metrics(&self, rank: u32) -> PathBuf {
        self.rank_file(rank, RankFile::Metrics)
    }

    /// `rank-R.metrics.jsonl`: what the worker wrote itself (`HERD_METRICS_FILE`).
    pub fn worker_metrics(&self, rank: u32) -> PathBuf {
        self.rank_file(rank, RankFile::WorkerMetrics)
    }

    /// `rank-R.heartbeat`: the file the worker may touch (`HERD_HEARTBEAT_FILE`).
    pub fn heartbeat(&self, rank: u32) -> PathBuf {
        self.rank_file(rank, RankFile::Heartbeat)
    }

    /// `rank-R.modules`: the installed modules the rank had loaded, one name a line (a
    /// warm-started worker writes it; the next standby imports them ahead).
    pub fn modules(&self, rank: u32) -> PathBuf {
        self.rank_file(rank, RankFile::Modules)
    }

    /// `checkpoints.jsonl`: each checkpoint `herd.save_atomic` published in this attempt,
    /// when it began and how long it took (`{"path", "started", "seconds"}`).
    pub fn saves(&self) -> PathBuf {
        self.dir.join("checkpoints.jsonl")
    }

    /// `rank-R.error.json`: torch's error file (`TORCHELASTIC_ERROR_FILE`).
    pub fn error_file(&self, rank: u32) -> PathBuf {
        self.rank_file(rank, RankFile::ErrorFile)
    }

    /// `failure.json`: this attempt's failure report.
    pub fn failure_report(&self) -> PathBuf {
        self.dir.join(FAILURE)
    }

    /// `node-N.gpus.jsonl`: node `node`'s GPU samples ([`crate::gpus`]).
    pub fn gpus(&self, node: u32) -> PathBuf {
        self.dir.join(format!("{NODE_PREFIX}{node}{GPUS_SUFFIX}"))
    }

    /// The nodes N with GPU samples (`node-N.gpus.jsonl`) here, ascending; none when the
    /// folder does not exist.
    pub fn gpu_nodes(&self) -> io::Result<Vec<u32>> {
        numbered(&self.dir, |name| {
            name.strip_prefix(NODE_PREFIX)?.strip_suffix(GPUS_SUFFIX)
        })
    }

    /// The ranks R with a file of one of the kinds `files` here, ascending; none when the
    /// folder does not exist.
    pub fn ranks_with(&self, files: &[RankFile]) -> io::Result<Vec<u32>> {
        let mut found = numbered(&self.dir, |name| {
            let (rank, kind) = RankFile::split(name)?;
            files.contains(&kind).then_some(rank)
        })?;
        found.dedup();
        Ok(found)
    }

    /// The ranks R with a log (`rank-R.out` or `rank-R.err`), ascending.
    pub fn ranks(&self) -> io::Result<Vec<u32>> {
        self.ranks_with(&[RankFile::Out, RankFile::Err])
    }
}

/// A rank's file in an attempt folder: `rank-R.` and the kind's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RankFile {
    /// `rank-R.out`: stdout, raw.
    Out,
    /// `rank-R.err`: stderr, raw.
    Err,
    /// `rank-R.times`: the time marks of both logs.
    Times,
    /// `rank-R.metrics`: the metrics the agent read from the rank's lines.
    Metrics,
    /// `rank-R.metrics.jsonl`: metrics the worker wrote itself.
    WorkerMetrics,
    /// `rank-R.heartbeat`: touched by the worker to show progress.
    Heartbeat,
    /// `rank-R.error.json`: torch's error file.
    ErrorFile,
    /// `rank-R.modules`: the installed modules the rank had loaded (warm starts).
    Modules,
}

impl RankFile {
    /// Every kind, in the order the docs list them.
    pub const ALL: [RankFile; 8] = [
        RankFile::Out,
        RankFile::Err,
        RankFile::Times,
        RankFile::Metrics,
        RankFile::WorkerMetrics,
        RankFile::Heartbeat,
        RankFile::ErrorFile,
        RankFile::Modules,
    ];

    /// The log of `stream`.
    pub fn log(stream: Stream) -> RankFile {
        match stream {
            Stream::Out => RankFile::Out,
            Stream::Err => RankFile::Err,
        }
    }

    /// What follows `rank-R`.
    fn suffix(self) -> &'static str {
        match self {
            RankFile::Out => ".out",
            RankFile::Err => ".err",
            RankFile::Times => ".times",
            RankFile::Metrics => ".metrics",
            RankFile::WorkerMetrics => ".metrics.jsonl",
            RankFile::Heartbeat => ".heartbeat",
            RankFile::ErrorFile => ".error.json",
            RankFile::Modules => ".modules",
        }
    }

    /// Its file name for rank `rank`: `rank-3.out`.
    pub fn name(self, rank: impl Display) -> String {
        format!("{RANK_PREFIX}{rank}{}", self.suffix())
    }

    /// The rank and kind of a file name made by [`RankFile::name`]; `None` for any other
    /// name.
    pub fn parse(name: &str) -> Option<(u32, RankFile)> {
        let (rank, kind) = RankFile::split(name)?;
        Some((rank.parse().ok()?, kind))
    }

    /// A rank file's name as (the rank's digits, kind).
    fn split(name: &str) -> Option<(&str, RankFile)> {
        let rest = name.strip_prefix(RANK_PREFIX)?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (rank, suffix) = rest.split_at(digits);
        let kind = RankFile::ALL.into_iter().find(|k| k.suffix() == suffix)?;
        (!rank.is_empty()).then_some((rank, kind))
    }
}

/// The numbers `n` of the entries of `dir` whose name `number` turns into digits, ascending
/// (duplicates kept); none when `dir` does not exist.
fn numbered(dir: &Path, number: impl Fn(&str) -> Option<&str>) -> io::Result<Vec<u32>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(n) = name
            .to_str()
            .and_then(&number)
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        found.push(n);
    }
    found.sort_unstable();
    Ok(found)
}

/// The sweep's own file in a sweep folder: its runs, their values and its submissions.
const SWEEP_MANIFEST: &str = "sweep.json";
/// The file name pattern of an array task's batch output in the sweep's `logs/`: `%A_%a`
/// (SLURM puts the array's job id and the task's index).
const ARRAY_TASK_PATTERN: &str = "%A_%a";

/// A sweep folder's paths: `<exp_root>/<name>/` holding the sweep's manifest, the array's
/// batch script, the array's own SLURM output and one experiment folder per run
/// ([`SweepDir::run`]). The folder need not exist.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SweepDir {
    dir: PathBuf,
}

impl SweepDir {
    /// The sweep folder `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> SweepDir {
        SweepDir { dir: dir.into() }
    }

    /// The folder itself.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `sweep.json`: the sweep's keys, runs and submissions.
    pub fn manifest(&self) -> PathBuf {
        self.dir.join(SWEEP_MANIFEST)
    }

    /// `job.sbatch`: the array's batch script.
    pub fn job_script(&self) -> PathBuf {
        self.dir.join(JOB_SCRIPT)
    }

    /// The array script of resource shape `shape` (1, 2, … in the order of each shape's
    /// first run) of a sweep with `shapes` shapes: `job.sbatch` when there is one,
    /// `job-SHAPE.sbatch` when there are several. Its file name is
    /// [`SweepDir::array_script_name`]'s.
    pub fn array_script(&self, shape: usize, shapes: usize) -> PathBuf {
        self.dir.join(SweepDir::array_script_name(shape, shapes))
    }

    /// The file name of shape `shape`'s array script among `shapes`: `job.sbatch` or
    /// `job-SHAPE.sbatch`.
    pub fn array_script_name(shape: usize, shapes: usize) -> String {
        if shapes <= 1 {
            JOB_SCRIPT.to_owned()
        } else {
            format!("{SHAPE_SCRIPT_PREFIX}{shape}.{SHAPE_SCRIPT_EXT}")
        }
    }

    /// Whether `name` is an array script's file name: `job.sbatch` or `job-N.sbatch`.
    pub fn is_array_script_name(name: &str) -> bool {
        name == JOB_SCRIPT
            || name
                .strip_prefix(SHAPE_SCRIPT_PREFIX)
                .and_then(|n| n.strip_suffix(&format!(".{SHAPE_SCRIPT_EXT}")))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }

    /// `.lock`: taken while `sweep.json` is updated.
    pub fn lock(&self) -> PathBuf {
        self.dir.join(LOCK)
    }

    /// `logs/`: the array script's own SLURM output, one pair of files per task.
    pub fn logs(&self) -> PathBuf {
        self.dir.join(LOGS)
    }

    /// The file name pattern `sbatch --output`/`--error` gets for the array's tasks:
    /// `%A_%a.out`, `%A_%a.err`.
    pub fn array_log_pattern(stream: Stream) -> String {
        batch_log_name(ARRAY_TASK_PATTERN, stream)
    }

    /// Run `name`'s experiment folder, `<name>/` inside the sweep folder.
    pub fn run(&self, name: &str) -> ExperimentDir {
        ExperimentDir::new(self.dir.join(name))
    }

    /// Whether `dir` looks like a sweep folder: it holds a `sweep.json`.
    pub fn is_sweep(dir: &Path) -> bool {
        SweepDir::new(dir).manifest().is_file()
    }
}

/// Every path inside a sweep folder and what it holds, in the order docs/sweeps.md lists
/// them: `RUN` stands for a run's name, `ARRAYID` and `TASK` for the array's job id and a
/// task's index; folders end with `/`.
pub fn sweep_entries() -> Vec<(String, &'static str)> {
    vec![
        (
            SWEEP_MANIFEST.to_owned(),
            "the sweep: its keys, each run's index, name and values, `max_parallel`, when it was made, herd's version, and every submission with each array job it made, its script and tasks",
        ),
        (
            JOB_SCRIPT.to_owned(),
            "the array's batch script: the runs' `#SBATCH` lines, `--array`, and a `case` from the task's index to its run",
        ),
        (
            SweepDir::array_script_name(1, 2).replace('1', "SHAPE"),
            "when the runs ask for different resources (a sweep over plan keys such as `nodes`): one array script per resource shape in place of `job.sbatch`, `SHAPE` = 1, 2, … in the order of each shape's first run, each with its shape's `#SBATCH` lines and a `case` of its runs alone",
        ),
        (
            format!("{LOGS}/"),
            "the array script's own SLURM output",
        ),
        (
            format!(
                "{LOGS}/{}, {LOGS}/{}",
                batch_log_name("ARRAYID_TASK", Stream::Out),
                batch_log_name("ARRAYID_TASK", Stream::Err)
            ),
            "task TASK's output before it hands over to its run (`%A_%a`): empty unless the task could not start its run",
        ),
        (
            LOCK.to_owned(),
            "taken while `sweep.json` is updated (made by the first update)",
        ),
        (
            "RUN/".to_owned(),
            "one run: a whole experiment folder (its own `code/`, `job.sbatch`, `manifest.json`, `timeline.jsonl`, `checkpoints/`, `logs/`); its batch output goes to `RUN/logs/ARRAYID_TASK.out`, `.err`",
        ),
    ]
}

/// Every path inside an experiment folder and what it holds, in the order docs/design.md §4
/// lists them: `K` stands for an attempt's number, `R` for a rank, `JOBID` for SLURM's job
/// id; folders end with `/`.
pub fn entries() -> Vec<(String, &'static str)> {
    let attempt = format!("{LOGS}/{}", attempt_name("K"));
    let mut rows = vec![
        (
            format!("{CODE}/"),
            "the code snapshot the job runs (the batch script `cd`s into it)",
        ),
        (JOB_SCRIPT.to_owned(), "the rendered batch script"),
        (
            MANIFEST.to_owned(),
            "the resolved plan with each key's source, the project's git commit and dirty diff, herd's version, the command line, every submission's job id and its runs (one per attempt, with its cause)",
        ),
        (
            LOCK.to_owned(),
            "taken while the manifest is updated (made by the first update)",
        ),
        (
            TIMELINE.to_owned(),
            "the job's events, one JSON line each, appended as they happen (below)",
        ),
        (
            format!("{CHECKPOINTS}/"),
            "where the job's checkpoints go (`HERD_CHECKPOINT_DIR`); every attempt resumes from the newest complete one (§3)",
        ),
        (format!("{LOGS}/"), "the job's logs"),
        (
            format!("{LOGS}/{}, {LOGS}/{}", batch_log_name("JOBID", Stream::Out), batch_log_name("JOBID", Stream::Err)),
            "SLURM's output of the batch step (`sbatch --output`/`--error`), appended across requeues",
        ),
        (
            format!("{LOGS}/{FAILURE}"),
            "the latest failure report (§6): the first failing rank, its node, exit code or signal, its exception and last lines",
        ),
        (
            format!("{attempt}/"),
            "one attempt (agent mode): K counts over the whole experiment, so a restart, a requeue and a `herd submit --resume` each start the next K",
        ),
    ];
    let rank = |k: RankFile| format!("{attempt}/{}", k.name("R"));
    rows.extend([
        (
            format!("{}, {}", rank(RankFile::Out), rank(RankFile::Err)),
            "rank R's stdout and stderr, raw, whole lines",
        ),
        (
            rank(RankFile::Times),
            "time marks: where each line starts and when it came, so `herd logs` merges ranks in time order ([logs.md](logs.md#time-marks-rank-rtimes))",
        ),
        (
            rank(RankFile::Metrics),
            "the training metrics the agent read from the rank's lines: step, loss, throughput, … ([metrics.md](metrics.md))",
        ),
        (
            rank(RankFile::WorkerMetrics),
            "metrics the worker wrote itself to `HERD_METRICS_FILE` (herd's JSON-lines convention)",
        ),
        (
            rank(RankFile::Heartbeat),
            "`HERD_HEARTBEAT_FILE`: a worker touches it to show progress without printing (the hang watchdog reads it)",
        ),
        (
            rank(RankFile::ErrorFile),
            "`TORCHELASTIC_ERROR_FILE`: the exception torch's `@record` wrote; it leads the failure report",
        ),
        (
            rank(RankFile::Modules),
            "the installed modules a warm-started rank had loaded, one a line: the next standby imports them ahead ([launch.md](launch.md#warm-starts))",
        ),
        (
            format!("{attempt}/{NODE_PREFIX}N{GPUS_SUFFIX}"),
            "node N's GPU samples, one JSON line per GPU every few seconds: utilisation, memory, power, temperature, clocks, throttling, ECC errors, the ranks it serves ([top.md](top.md#gpus))",
        ),
        (
            format!("{attempt}/{FAILURE}"),
            "that attempt's failure report",
        ),
    ]);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_named_once_and_read_back() {
        let exp = ExperimentDir::new("/e/train");
        assert_eq!(exp.code(), Path::new("/e/train/code"));
        assert_eq!(exp.job_script(), Path::new("/e/train/job.sbatch"));
        assert_eq!(exp.manifest(), Path::new("/e/train/manifest.json"));
        assert_eq!(exp.timeline(), Path::new("/e/train/timeline.jsonl"));
        assert_eq!(exp.checkpoints(), Path::new("/e/train/checkpoints"));
        let logs = exp.logs();
        assert_eq!(logs.path(), Path::new("/e/train/logs"));
        assert_eq!(
            logs.batch_log(42, Stream::Err),
            Path::new("/e/train/logs/42.err")
        );
        assert_eq!(LogsDir::batch_log_pattern(Stream::Out), "%j.out");
        assert_eq!(
            logs.failure_report(),
            Path::new("/e/train/logs/failure.json")
        );
        let a = logs.attempt(3);
        assert_eq!(a.path(), Path::new("/e/train/logs/attempt-3"));
        assert_eq!(
            a.log(7, Stream::Out),
            Path::new("/e/train/logs/attempt-3/rank-7.out")
        );
        assert_eq!(a.error_file(7), a.path().join("rank-7.error.json"));
        assert_eq!(a.gpus(1), a.path().join("node-1.gpus.jsonl"));
        assert_eq!(a.modules(7), a.path().join("rank-7.modules"));
        assert_eq!(a.worker_metrics(7), a.path().join("rank-7.metrics.jsonl"));
        for kind in RankFile::ALL {
            assert_eq!(
                RankFile::parse(&kind.name(12)),
                Some((12, kind)),
                "{kind:?}"
            );
        }
        for other in [
            "rank-.out",
            "rank-1.outx",
            "rank-1",
            "rank-a.out",
            "x-1.out",
            "rank-1.metrics.json",
        ] {
            assert_eq!(RankFile::parse(other), None, "{other}");
        }
    }

    #[test]
    fn attempts_and_ranks_are_listed_from_their_names() {
        let dir = tempfile::tempdir().expect("tempdir");
        let logs = LogsDir::new(dir.path());
        assert_eq!(LogsDir::new(dir.path().join("missing")).next_attempt(), 0);
        assert_eq!(logs.next_attempt(), 0);
        for name in ["attempt-0", "attempt-3", "attempt-x", "other-7", "attempt-"] {
            std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        }
        std::fs::write(dir.path().join("attempt-9.txt"), "").expect("file");
        assert_eq!(logs.attempts().expect("listed"), [0, 3]);
        assert_eq!(
            logs.next_attempt(),
            4,
            "after attempt-3, gaps and strays aside"
        );

        let a = logs.attempt(3);
        for f in [
            "rank-2.err",
            "rank-0.out",
            "rank-0.err",
            "rank-5.metrics",
            "rank-9.times",
        ] {
            std::fs::write(a.path().join(f), "").expect("file");
        }
        assert_eq!(a.ranks().expect("listed"), [0, 2]);
        assert_eq!(
            a.ranks_with(&[RankFile::Metrics, RankFile::WorkerMetrics])
                .expect("listed"),
            [5]
        );
    }

    /// The table docs/design.md §4 shows, made from [`entries`].
    fn table() -> String {
        let mut t = String::from("| path | what |\n|---|---|\n");
        for (path, what) in entries() {
            let paths: Vec<String> = path.split(", ").map(|p| format!("`{p}`")).collect();
            t.push_str(&format!("| {} | {what} |\n", paths.join(", ")));
        }
        t
    }

    /// docs/design.md's folder table lists exactly the paths named here, in order, each with
    /// what it holds. `HERD_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn the_design_doc_lists_every_path() {
        let want = table();
        let Some(shown) = herd_testbed::docs::table_in("design.md", "layout table", &want) else {
            return;
        };
        assert!(
            shown == want,
            "docs/design.md: the folder table differs from crates/herd-exp/src/layout.rs; rewrite it \
             with `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-exp design_doc`, or paste:\n{want}"
        );
    }

    /// docs/sweeps.md's sweep folder table lists exactly the paths [`sweep_entries`] names,
    /// in order. `HERD_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn the_sweeps_doc_lists_every_path_of_a_sweep_folder() {
        let mut want = String::from("| path | what |\n|---|---|\n");
        for (path, what) in sweep_entries() {
            let paths: Vec<String> = path.split(", ").map(|p| format!("`{p}`")).collect();
            want.push_str(&format!("| {} | {what} |\n", paths.join(", ")));
        }
        let Some(shown) = herd_testbed::docs::table_in("sweeps.md", "sweep table", &want) else {
            return;
        };
        assert!(shown == want, "docs/sweeps.md: the sweep folder table differs from crates/herd-exp/src/layout.rs; rewrite it with `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-exp sweeps_doc`, or paste:\n{want}");
        let sweep = SweepDir::new("/e/grid");
        assert_eq!(sweep.manifest(), Path::new("/e/grid/sweep.json"));
        assert_eq!(sweep.job_script(), Path::new("/e/grid/job.sbatch"));
        assert_eq!(sweep.logs(), Path::new("/e/grid/logs"));
        assert_eq!(
            sweep.run("a=1").job_script(),
            Path::new("/e/grid/a=1/job.sbatch")
        );
        assert_eq!(SweepDir::array_log_pattern(Stream::Out), "%A_%a.out");
    }

    /// One shape: `job.sbatch`; several: `job-1.sbatch`, `job-2.sbatch`…, each taken for an
    /// array script's name and no run's.
    #[test]
    fn array_scripts_are_named_after_their_shape() {
        let sweep = SweepDir::new("/e/grid");
        assert_eq!(sweep.array_script(1, 1), Path::new("/e/grid/job.sbatch"));
        assert_eq!(sweep.array_script(1, 2), Path::new("/e/grid/job-1.sbatch"));
        assert_eq!(sweep.array_script(2, 2), Path::new("/e/grid/job-2.sbatch"));
        for name in ["job.sbatch", "job-1.sbatch", "job-12.sbatch"] {
            assert!(SweepDir::is_array_script_name(name), "{name}");
        }
        for name in [
            "job-.sbatch",
            "job-a.sbatch",
            "job-1.sh",
            "nodes=1",
            "jobs.sbatch",
        ] {
            assert!(!SweepDir::is_array_script_name(name), "{name}");
        }
    }

    /// Each documented path is what the functions give: the table cannot name a file the
    /// agents do not write.
    #[test]
    fn the_table_is_made_of_the_paths_the_functions_give() {
        let exp = ExperimentDir::new("");
        let logs = exp.logs();
        let a = logs.attempt(7);
        let named: Vec<String> = entries()
            .iter()
            .flat_map(|(p, _)| p.split(", ").map(str::to_owned).collect::<Vec<_>>())
            .map(|p| {
                p.trim_end_matches('/')
                    .replace('K', "7")
                    .replace("rank-R", "rank-3")
                    .replace("node-N", "node-1")
                    .replace("JOBID", "42")
            })
            .collect();
        let mut given: Vec<PathBuf> = vec![
            exp.code(),
            exp.job_script(),
            exp.manifest(),
            exp.lock(),
            exp.timeline(),
            exp.checkpoints(),
            logs.path().to_owned(),
            logs.batch_log(42, Stream::Out),
            logs.batch_log(42, Stream::Err),
            logs.failure_report(),
            a.path().to_owned(),
        ];
        given.extend(RankFile::ALL.map(|k| a.rank_file(3, k)));
        given.push(a.gpus(1));
        given.push(a.failure_report());
        let given: Vec<String> = given.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(named, given);
    }
}
