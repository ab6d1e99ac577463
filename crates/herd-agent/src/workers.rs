//! Spawning one node's workers and carrying their output.
//!
//! Each worker runs in its own process group (so a signal reaches the worker and the
//! children it did not move elsewhere) and dies with the agent (parent-death signal), so a
//! killed agent never leaves workers holding GPUs. Its stdout and stderr go, line by line,
//! to the rank's two log files in the attempt folder (`herd_exp::layout::AttemptDir::log`)
//! and to the agent's console (with `R: ` labels when asked); a line is always written
//! whole, so ranks never interleave mid-line.
//!
//! The log files stay raw (users `tail` them); beside them the rank's time marks
//! (`AttemptDir::times`) let `herd logs` merge ranks in time order: lines `o OFFSET UNIX_MS`
//! / `e OFFSET UNIX_MS` (the stream, the byte offset in its log where a line starts, and
//! the milliseconds since the epoch when the agent read it), one for a stream's first line
//! and for each later line that comes at least `herd_exp::logs::MARK_GAP_MS` (100 ms) after
//! that stream's previous mark. A mark is one append, written before its line, so a reader
//! that sees a line sees its mark. The format is herd_exp::logs's (docs/logs.md).

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use herd_exp::layout::{AttemptDir, Stream};
use herd_slurm::worker::vars::{
    HERD_CHECKPOINT_DIR, HERD_EXP_DIR, HERD_HEARTBEAT_FILE, HERD_LOG_DIR, HERD_METRICS_FILE,
    HERD_STOP_SIGNAL, TORCHELASTIC_ERROR_FILE,
};

use crate::config::ContainerState;
use herd_slurm::{worker_env, LaunchInfo, Layout, Position};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

/// Every variable an agent sets for its worker at `pos` of `layout` in the attempt whose
/// folder is `dir`: the rank variables ([`herd_slurm::worker_env`] of `info`), where the
/// worker's logs, heartbeat, metrics and torch error file are, and the signal that asks it
/// to stop. The worker gets them on top of the agent's environment, less what no user
/// program gets ([`herd_slurm::user_program`]); `herd env --agent` shows the same.
pub fn agent_worker_env(
    layout: &Layout,
    pos: Position,
    info: &LaunchInfo,
    dir: &AttemptDir,
    stop_signal: &str,
) -> BTreeMap<String, String> {
    let mut env = worker_env(layout, pos, info);
    let mut set = |k: &str, v: String| {
        env.insert(k.to_owned(), v);
    };
    set(HERD_LOG_DIR, dir.path().display().to_string());
    set(
        HERD_HEARTBEAT_FILE,
        dir.heartbeat(pos.rank).display().to_string(),
    );
    set(
        HERD_METRICS_FILE,
        dir.worker_metrics(pos.rank).display().to_string(),
    );
    set(
        TORCHELASTIC_ERROR_FILE,
        dir.error_file(pos.rank).display().to_string(),
    );
    set(HERD_STOP_SIGNAL, stop_signal.to_owned());
    env
}

/// Longest line carried whole; longer ones are carried in pieces of this size.
pub const MAX_LINE: usize = 1 << 20;
/// Lines of stderr kept per rank for the failure report.
pub const TAIL_LINES: usize = 20;

/// One worker to start.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// Global rank.
    pub rank: u32,
    /// Local rank.
    pub local_rank: u32,
    /// Variables set on top of the agent's environment.
    pub env: BTreeMap<String, String>,
}

/// A started worker.
#[derive(Debug)]
pub struct Running {
    /// Global rank.
    pub rank: u32,
    /// Local rank.
    pub local_rank: u32,
    /// Its pid (also its process group id).
    pub pid: i32,
    /// Last lines of its stderr.
    pub stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Resolves when its stderr has reached end of file.
    pub stderr_closed: Option<oneshot::Receiver<()>>,
    /// When it last wrote a line (stdout or stderr), milliseconds since the Unix epoch; 0
    /// until its first. The hang watchdog's measure of progress.
    pub last_output_ms: Arc<AtomicU64>,
    /// When it started, milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Started through a program that is not the worker itself (`podman exec`): the file
    /// the worker's own pid arrives in. Until it has, `pid` is that program's, which
    /// signals must not reach ([`Running::resolve_pid`]).
    pub pid_file: Option<PathBuf>,
    /// Its program exits 128 + N when signal N killed the worker.
    pub signal_as_code: bool,
}

/// Where a worker's own pid stands ([`Running::poll_pid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PidFile {
    /// Arrived: it is the worker's `pid` now.
    Arrived(i32),
    /// Not yet: the program that starts the worker still runs.
    Waiting,
    /// Never: the program ended first (its exit says why), or there is nothing to wait for.
    Never,
}

impl Running {
    /// The worker's own pid from its [`Running::pid_file`], when it is there.
    pub fn poll_pid(&mut self) -> PidFile {
        let Some(file) = &self.pid_file else {
            return PidFile::Never;
        };
        if let Some(pid) = std::fs::read_to_string(file)
            .ok()
            .filter(|s| s.ends_with('\n'))
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            self.pid = pid;
            self.pid_file = None;
            return PidFile::Arrived(pid);
        }
        if crate::procs::running(self.pid) {
            PidFile::Waiting
        } else {
            self.pid_file = None;
            PidFile::Never
        }
    }
}

/// Milliseconds since the Unix epoch, now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where output goes.
#[derive(Debug, Clone)]
pub struct OutputConfig {
    /// The attempt's folder, where each rank's logs, time marks and metrics go.
    pub dir: AttemptDir,
    /// Prefix console lines with `R: `.
    pub label: bool,
    /// Copy worker output to the agent's console at all.
    pub console: bool,
    /// How to read metrics from the workers' lines into `rank-R.metrics` (docs/metrics.md);
    /// [`herd_metrics::Format::Off`]: not at all.
    pub metrics: herd_metrics::Format,
}

struct OutLine {
    rank: u32,
    stream: Stream,
    bytes: Vec<u8>,
    /// When it was read, milliseconds since the epoch.
    ms: u64,
}

/// One rank's stream as the sink writes it: the file, where the next line starts, and the
/// time of its last mark.
struct StreamFile {
    file: std::fs::File,
    offset: u64,
    last_mark: Option<u64>,
}

/// Where the sink writes one rank: its two log files and its time marks (each `None` when
/// it could not be opened).
struct RankFiles {
    out: Option<StreamFile>,
    err: Option<StreamFile>,
    times: Option<std::fs::File>,
    /// The rank's metrics reader and file, unless metrics are off.
    metrics: Option<(Box<dyn herd_metrics::Reader>, herd_metrics::store::Writer)>,
}

impl RankFiles {
    fn open(dir: &AttemptDir, rank: u32, metrics: &herd_metrics::Format) -> RankFiles {
        let append = |path: std::path::PathBuf| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        };
        let stream = |s: Stream| -> Option<StreamFile> {
            let file = append(dir.log(rank, s)).ok()?;
            let offset = file.metadata().ok()?.len();
            Some(StreamFile {
                file,
                offset,
                last_mark: None,
            })
        };
        RankFiles {
            out: stream(Stream::Out),
            err: stream(Stream::Err),
            times: append(dir.times(rank)).ok(),
            metrics: (*metrics != herd_metrics::Format::Off).then(|| {
                (
                    herd_metrics::read::reader(metrics),
                    herd_metrics::store::Writer::new(dir.metrics(rank)),
                )
            }),
        }
    }

    /// Reads `line` for metrics and stores what it holds (a file that cannot be written
    /// loses the reading, never the line); the step it names, if any.
    fn read_metrics(&mut self, line: &OutLine) -> Option<u64> {
        let (reader, writer) = self.metrics.as_mut()?;
        let bytes = line.bytes.strip_suffix(b"\n").unwrap_or(&line.bytes);
        let text = std::str::from_utf8(bytes).ok()?;
        let record = reader.line(text)?;
        let _ = writer.write(line.ms, &record);
        record.step
    }

    /// Append `line` to its stream's file, with a time mark first when one is due.
    fn write(&mut self, line: &OutLine) {
        let sf = match line.stream {
            Stream::Out => self.out.as_mut(),
            Stream::Err => self.err.as_mut(),
        };
        let Some(sf) = sf else { return };
        let due = sf
            .last_mark
            .is_none_or(|last| line.ms.saturating_sub(last) >= herd_exp::logs::MARK_GAP_MS);
        if due {
            if let Some(times) = self.times.as_mut() {
                let mark = herd_exp::logs::format_mark(line.stream, sf.offset, line.ms);
                if times.write_all(mark.as_bytes()).is_ok() {
                    sf.last_mark = Some(line.ms);
                }
            }
        }
        match sf.file.write_all(&line.bytes) {
            Ok(()) => sf.offset += line.bytes.len() as u64,
            // Part of it may be written: the file's length says where the next line starts.
            Err(_) => {
                if let Ok(m) = sf.file.metadata() {
                    sf.offset = m.len();
                }
                sf.last_mark = None;
            }
        }
    }
}

/// The task that writes every worker's lines; dropping all senders ends it.
pub struct OutputSink {
    dir: AttemptDir,
    tx: mpsc::Sender<OutLine>,
    done: tokio::task::JoinHandle<()>,
    highest_step: HighestStep,
}

/// The highest training step any of a node's workers has printed (a metrics line with a
/// step, docs/metrics.md), shared with the task that reads their lines.
#[derive(Debug, Clone, Default)]
pub struct HighestStep(Arc<AtomicU64>);

impl HighestStep {
    /// The highest step so far; `None` before any.
    pub fn get(&self) -> Option<u64> {
        self.0.load(Ordering::Relaxed).checked_sub(1)
    }

    fn saw(&self, step: u64) {
        self.0.fetch_max(step.saturating_add(1), Ordering::Relaxed);
    }
}

impl OutputSink {
    /// Start writing into `cfg.dir` (created if missing).
    pub fn start(cfg: OutputConfig) -> std::io::Result<OutputSink> {
        std::fs::create_dir_all(cfg.dir.path())?;
        let (tx, mut rx) = mpsc::channel::<OutLine>(1024);
        let dir = cfg.dir.clone();
        let highest_step = HighestStep::default();
        let highest = highest_step.clone();
        let done = tokio::spawn(async move {
            let mut files: BTreeMap<u32, RankFiles> = BTreeMap::new();
            while let Some(line) = rx.recv().await {
                let rank = files
                    .entry(line.rank)
                    .or_insert_with(|| RankFiles::open(&cfg.dir, line.rank, &cfg.metrics));
                rank.write(&line);
                if let Some(step) = rank.read_metrics(&line) {
                    highest.saw(step);
                }
                if cfg.console {
                    let mut whole = Vec::with_capacity(line.bytes.len() + 8);
                    if cfg.label {
                        whole.extend_from_slice(format!("{}: ", line.rank).as_bytes());
                    }
                    whole.extend_from_slice(&line.bytes);
                    // One write per line: nothing else writes worker output to this stream.
                    let _ = match line.stream {
                        Stream::Out => std::io::stdout().lock().write_all(&whole),
                        Stream::Err => std::io::stderr().lock().write_all(&whole),
                    };
                }
            }
            let _ = std::io::stdout().flush();
        });
        Ok(OutputSink {
            dir,
            tx,
            done,
            highest_step,
        })
    }

    /// The highest step the workers have printed, as it grows.
    pub fn highest_step(&self) -> HighestStep {
        self.highest_step.clone()
    }

    /// Wait until every line sent so far is written (all workers' pipes closed).
    pub async fn finish(self) {
        drop(self.tx);
        let _ = self.done.await;
    }
}

async fn carry(
    pipe: impl tokio::io::AsyncRead + Unpin,
    rank: u32,
    stream: Stream,
    tx: mpsc::Sender<OutLine>,
    tail: Option<Arc<Mutex<VecDeque<String>>>>,
    last_output_ms: Arc<AtomicU64>,
) {
    let mut reader = BufReader::with_capacity(1 << 16, pipe);
    loop {
        let mut buf = Vec::new();
        // Read up to and including '\n', at most MAX_LINE bytes.
        let n = match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(n) => n,
            Err(_) => break,
        };
        if n == 0 {
            break;
        }
        let ms = unix_ms();
        last_output_ms.store(ms, Ordering::Relaxed);
        if !buf.ends_with(b"\n") {
            buf.push(b'\n');
        }
        if let Some(tail) = &tail {
            if let Ok(mut t) = tail.lock() {
                if t.len() == TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(String::from_utf8_lossy(&buf[..buf.len() - 1]).into_owned());
            }
        }
        if tx
            .send(OutLine {
                rank,
                stream,
                bytes: buf,
                ms,
            })
            .await
            .is_err()
        {
            break;
        }
    }
}

impl OutputSink {
    fn sender(&self) -> mpsc::Sender<OutLine> {
        self.tx.clone()
    }
}

/// The worker's program and arguments in the agent's environment, `spec.env` on top and
/// the variables workers never get taken out ([`herd_slurm::user_program`]); inside
/// `container` when there is one ([`container_command`]).
fn worker_command(
    argv: &[OsString],
    spec: &WorkerSpec,
    container: Option<&ContainerState>,
) -> std::io::Result<(Command, Option<PathBuf>, bool)> {
    let (program, args) = argv.split_first().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command to run")
    })?;
    let Some(container) = container else {
        let mut cmd = Command::from(herd_slurm::user_program(program, &spec.env));
        cmd.args(args);
        return Ok((cmd, None, false));
    };
    let wrapped = container_command(container, argv, &spec.env).map_err(std::io::Error::other)?;
    let mut cmd = Command::from(herd_slurm::user_program(&wrapped.program, &wrapped.env));
    cmd.args(&wrapped.args);
    Ok((cmd, wrapped.pid_file, wrapped.signal_as_code))
}

/// `argv` through the node's container: in this agent's folder, with the experiment, log
/// and checkpoint folders (from `env`, else the agent's environment) at their own paths
/// inside, `env` winning over the image's variables.
pub fn container_command(
    container: &ContainerState,
    argv: &[OsString],
    env: &BTreeMap<String, String>,
) -> Result<herd_container::Wrapped, String> {
    let c = match container {
        ContainerState::Ready(c) => c,
        ContainerState::Failed { image, why } => {
            return Err(format!(
                "the container image {image} cannot run here: {why}"
            ))
        }
    };
    let cwd = std::env::current_dir()
        .map_err(|e| format!("cannot read the agent's working folder: {e}"))?;
    let need: Vec<std::path::PathBuf> = [HERD_EXP_DIR, HERD_CHECKPOINT_DIR, HERD_LOG_DIR]
        .into_iter()
        .filter_map(|k| {
            env.get(k)
                .cloned()
                .or_else(|| std::env::var(k).ok())
                .filter(|v| v.starts_with('/'))
        })
        .map(std::path::PathBuf::from)
        .collect();
    // What the host gives a worker: its environment less what no user program gets.
    let host_has =
        |k: &str| !herd_slurm::worker::vars::WITHHELD.contains(&k) && std::env::var_os(k).is_some();
    c.wrap(argv, env, host_has, &cwd, &need)
}

/// Start `argv` as worker `spec` (inside `container` when there is one): own process
/// group, parent-death signal, stdin closed, output carried to `sink`. Returns the handle
/// and the child to wait on.
pub fn spawn(
    argv: &[OsString],
    spec: &WorkerSpec,
    sink: &OutputSink,
    container: Option<&ContainerState>,
) -> std::io::Result<(Running, Child)> {
    let (mut cmd, pid_file, signal_as_code) = worker_command(argv, spec, container)?;
    crate::procs::own_group_dying_with_agent(&mut cmd);
    cmd.stdin(std::process::Stdio::null());
    create_logs(sink, spec.rank)?;
    let mut child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or(-1);
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let mut running = adopt(pid, (out, err), spec, sink);
    running.pid_file = pid_file;
    running.signal_as_code = signal_as_code;
    Ok((running, child))
}

/// Both of rank `rank`'s log files exist from its start, even for a rank that never writes.
pub(crate) fn create_logs(sink: &OutputSink, rank: u32) -> std::io::Result<()> {
    for stream in [Stream::Out, Stream::Err] {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(sink.dir.log(rank, stream))?;
    }
    Ok(())
}

/// Worker `spec`, process `pid` with output `pipes`, from now: its output carried to `sink`.
pub(crate) fn adopt(
    pid: i32,
    (stdout, stderr): (Option<ChildStdout>, Option<ChildStderr>),
    spec: &WorkerSpec,
    sink: &OutputSink,
) -> Running {
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let (closed_tx, closed_rx) = oneshot::channel();
    let last_output_ms = Arc::new(AtomicU64::new(0));
    let started_ms = unix_ms();
    if let Some(out) = stdout {
        tokio::spawn(carry(
            out,
            spec.rank,
            Stream::Out,
            sink.sender(),
            None,
            last_output_ms.clone(),
        ));
    }
    if let Some(err) = stderr {
        let tx = sink.sender();
        let t = tail.clone();
        let rank = spec.rank;
        let last = last_output_ms.clone();
        tokio::spawn(async move {
            carry(err, rank, Stream::Err, tx, Some(t), last).await;
            let _ = closed_tx.send(());
        });
    }
    Running {
        rank: spec.rank,
        local_rank: spec.local_rank,
        pid,
        stderr_tail: tail,
        stderr_closed: Some(closed_rx),
        last_output_ms,
        started_ms,
        pid_file: None,
        signal_as_code: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herd_exp::layout::Stream as LogStream;
    use herd_exp::logs::parse_mark;
    use std::path::Path;

    fn marks(dir: &Path, rank: u32) -> Vec<(LogStream, u64, u64)> {
        std::fs::read(AttemptDir::new(dir).times(rank))
            .expect("times file")
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| parse_mark(l).expect("a mark"))
            .collect()
    }

    #[test]
    fn a_worker_gets_its_variables_but_never_the_job_secret() {
        let spec = WorkerSpec {
            rank: 3,
            local_rank: 1,
            env: BTreeMap::from([
                ("RANK".to_owned(), "3".to_owned()),
                // Even when asked for, the secret is not given.
                (
                    herd_slurm::worker::vars::HERD_JOB_SECRET.to_owned(),
                    "s".to_owned(),
                ),
            ]),
        };
        let argv: Vec<OsString> = vec!["python".into(), "train.py".into()];
        let (cmd, pid_file, _) = worker_command(&argv, &spec, None).expect("a command");
        assert_eq!(pid_file, None, "a bare worker is its own program");
        let envs: BTreeMap<_, _> = cmd.as_std().get_envs().collect();
        assert_eq!(
            envs.get(std::ffi::OsStr::new("RANK")),
            Some(&Some("3".as_ref()))
        );
        assert_eq!(
            envs.get(std::ffi::OsStr::new("HERD_JOB_SECRET")),
            Some(&None),
            "removed from what the agent passes on"
        );
    }

    #[tokio::test]
    async fn marks_point_at_line_starts_every_100ms_per_stream() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = OutputSink::start(OutputConfig {
            dir: AttemptDir::new(dir.path()),
            label: false,
            console: false,
            metrics: herd_metrics::Format::Off,
        })
        .expect("sink");
        let tx = sink.sender();
        let lines: [(u32, Stream, &[u8], u64); 8] = [
            (0, Stream::Out, b"first\n", 1000),
            (0, Stream::Out, b"second\n", 1050),
            (0, Stream::Err, b"oops\n", 1060),
            (0, Stream::Out, b"third\n", 1100),
            (1, Stream::Out, b"\xff not utf-8\n", 1120),
            (0, Stream::Out, b"fourth\n", 1199),
            (0, Stream::Err, b"again\n", 1150),
            (0, Stream::Out, b"fifth\n", 1300),
        ];
        for (rank, stream, bytes, ms) in lines {
            tx.send(OutLine {
                rank,
                stream,
                bytes: bytes.to_vec(),
                ms,
            })
            .await
            .expect("sink listens");
        }
        drop(tx);
        sink.finish().await;
        let out =
            std::fs::read(AttemptDir::new(dir.path()).log(0, Stream::Out)).expect("rank-0.out");
        assert_eq!(
            out, b"first\nsecond\nthird\nfourth\nfifth\n",
            "the log stays raw"
        );
        assert_eq!(
            marks(dir.path(), 0),
            [
                (LogStream::Out, 0, 1000),
                (LogStream::Err, 0, 1060),
                (LogStream::Out, 13, 1100),
                (LogStream::Out, 26, 1300),
            ]
        );
        assert_eq!(marks(dir.path(), 1), [(LogStream::Out, 0, 1120)]);
        for (stream, offset, _) in marks(dir.path(), 0) {
            let file = std::fs::read(AttemptDir::new(dir.path()).log(0, stream)).expect("log");
            let at = usize::try_from(offset).expect("offset");
            assert!(
                at == 0 || file[at - 1] == b'\n',
                "offset {offset} starts a line"
            );
        }
    }

    #[tokio::test]
    async fn a_workers_lines_get_marks() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = OutputSink::start(OutputConfig {
            dir: AttemptDir::new(dir.path()),
            label: false,
            console: false,
            metrics: herd_metrics::Format::Off,
        })
        .expect("sink");
        let spec = WorkerSpec {
            rank: 3,
            local_rank: 0,
            env: BTreeMap::new(),
        };
        let argv: Vec<OsString> = ["sh", "-c", "echo a; echo b >&2; sleep 0.2; echo c"]
            .iter()
            .map(OsString::from)
            .collect();
        let (_running, mut child) = spawn(&argv, &spec, &sink, None).expect("spawns");
        assert!(child.wait().await.expect("waits").success());
        sink.finish().await;
        let got = marks(dir.path(), 3);
        let mut kinds: Vec<(LogStream, u64)> = got.iter().map(|&(s, o, _)| (s, o)).collect();
        kinds.sort();
        // `c` came 200 ms after `a`: a mark of its own, at its offset.
        assert_eq!(
            kinds,
            [
                (LogStream::Out, 0),
                (LogStream::Out, 2),
                (LogStream::Err, 0)
            ],
            "{got:?}"
        );
        let now = unix_ms();
        assert!(got.iter().all(|&(_, _, ms)| ms <= now && now - ms < 60_000));
    }

    #[tokio::test]
    async fn metrics_lines_are_stored_per_rank_and_the_log_stays_raw() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = OutputSink::start(OutputConfig {
            dir: AttemptDir::new(dir.path()),
            label: false,
            console: false,
            metrics: herd_metrics::Format::Auto,
        })
        .expect("sink");
        let tx = sink.sender();
        let lines: [(u32, Stream, &[u8], u64); 4] = [
            (0, Stream::Out, b"{\"step\": 10, \"loss\": 2.5}\n", 1000),
            (0, Stream::Out, b"hello\n", 1001),
            (1, Stream::Err, b"{\"step\": 10, \"loss\": 2.75}\n", 1002),
            (0, Stream::Out, b"{\"step\": 20, \"loss\": 2.25}\n", 1500),
        ];
        for (rank, stream, bytes, ms) in lines {
            tx.send(OutLine {
                rank,
                stream,
                bytes: bytes.to_vec(),
                ms,
            })
            .await
            .expect("sink listens");
        }
        drop(tx);
        let highest = sink.highest_step();
        sink.finish().await;
        assert_eq!(highest.get(), Some(20), "the highest step of any rank");
        let zero = herd_metrics::store::read_rank(dir.path(), 0).expect("rank 0");
        assert_eq!(zero.time_ms, [1000, 1500]);
        assert_eq!(zero.step, [Some(10), Some(20)]);
        assert_eq!(zero.column("loss").expect("loss"), [2.5, 2.25]);
        let one = herd_metrics::store::read_rank(dir.path(), 1).expect("rank 1");
        assert_eq!(
            one.column("loss").expect("loss"),
            [2.75],
            "stderr is read too"
        );
        let out =
            std::fs::read_to_string(AttemptDir::new(dir.path()).log(0, Stream::Out)).expect("log");
        assert_eq!(
            out.lines().count(),
            3,
            "every line in the log, metrics or not"
        );
    }
}
