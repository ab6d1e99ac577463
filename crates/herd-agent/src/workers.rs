//! Spawning one node's workers and carrying their output.
//!
//! Each worker runs in its own process group (so a signal reaches the worker and the
//! children it did not move elsewhere) and dies with the agent (parent-death signal), so a
//! killed agent never leaves workers holding GPUs. Its stdout and stderr go, line by line,
//! to `rank-R.out` / `rank-R.err` and to the agent's console (with `R: ` labels when asked);
//! a line is always written whole, so ranks never interleave mid-line.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};

/// Longest line carried whole; longer ones are carried in pieces of this size.
pub const MAX_LINE: usize = 1 << 20;
/// Lines of stderr kept per rank for the failure report.
pub const TAIL_LINES: usize = 20;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// stdout
    Out,
    /// stderr
    Err,
}

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
    /// Folder for this attempt's `rank-R.out` / `rank-R.err`.
    pub dir: PathBuf,
    /// Prefix console lines with `R: `.
    pub label: bool,
    /// Copy worker output to the agent's console at all.
    pub console: bool,
}

struct OutLine {
    rank: u32,
    stream: Stream,
    bytes: Vec<u8>,
}

/// The task that writes every worker's lines; dropping all senders ends it.
pub struct OutputSink {
    dir: PathBuf,
    tx: mpsc::Sender<OutLine>,
    done: tokio::task::JoinHandle<()>,
}

impl OutputSink {
    /// Start writing into `cfg.dir` (created if missing).
    pub fn start(cfg: OutputConfig) -> std::io::Result<OutputSink> {
        std::fs::create_dir_all(&cfg.dir)?;
        let (tx, mut rx) = mpsc::channel::<OutLine>(1024);
        let dir = cfg.dir.clone();
        let done = tokio::spawn(async move {
            let mut files: BTreeMap<(u32, bool), std::fs::File> = BTreeMap::new();
            while let Some(line) = rx.recv().await {
                let is_err = line.stream == Stream::Err;
                let file = match files.entry((line.rank, is_err)) {
                    std::collections::btree_map::Entry::Occupied(e) => Some(e.into_mut()),
                    std::collections::btree_map::Entry::Vacant(e) => {
                        let path = log_path(&cfg.dir, line.rank, line.stream);
                        std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(&path)
                            .ok()
                            .map(|f| e.insert(f))
                    }
                };
                if let Some(f) = file {
                    let _ = f.write_all(&line.bytes);
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
        Ok(OutputSink { dir, tx, done })
    }

    /// Wait until every line sent so far is written (all workers' pipes closed).
    pub async fn finish(self) {
        drop(self.tx);
        let _ = self.done.await;
    }
}

/// `DIR/rank-R.out` or `DIR/rank-R.err`.
pub fn log_path(dir: &Path, rank: u32, stream: Stream) -> PathBuf {
    dir.join(format!(
        "rank-{rank}.{}",
        if stream == Stream::Out { "out" } else { "err" }
    ))
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
        last_output_ms.store(unix_ms(), Ordering::Relaxed);
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

/// Start `argv` as worker `spec`: own process group, parent-death signal, stdin closed,
/// output carried to `sink`. Returns the handle and the child to wait on.
pub fn spawn(
    argv: &[OsString],
    spec: &WorkerSpec,
    sink: &OutputSink,
) -> std::io::Result<(Running, Child)> {
    let (program, args) = argv.split_first().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "no command to run")
    })?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(&spec.env)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let agent = std::process::id() as i32;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit via nix wrappers that allocate nothing).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The agent may have died between fork and prctl: then nobody would kill us.
            if nix::unistd::getppid().as_raw() != agent {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
    // Both log files exist from the start, even for a rank that never writes.
    for stream in [Stream::Out, Stream::Err] {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log_path(&sink.dir, spec.rank, stream))?;
    }
    let mut child = cmd.spawn()?;
    let pid = child.id().map(|p| p as i32).unwrap_or(-1);
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));
    let (closed_tx, closed_rx) = oneshot::channel();
    let last_output_ms = Arc::new(AtomicU64::new(0));
    let started_ms = unix_ms();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(carry(
            out,
            spec.rank,
            Stream::Out,
            sink.sender(),
            None,
            last_output_ms.clone(),
        ));
    }
    if let Some(err) = child.stderr.take() {
        let tx = sink.sender();
        let t = tail.clone();
        let rank = spec.rank;
        let last = last_output_ms.clone();
        tokio::spawn(async move {
            carry(err, rank, Stream::Err, tx, Some(t), last).await;
            let _ = closed_tx.send(());
        });
    }
    Ok((
        Running {
            rank: spec.rank,
            local_rank: spec.local_rank,
            pid,
            stderr_tail: tail,
            stderr_closed: Some(closed_rx),
            last_output_ms,
            started_ms,
        },
        child,
    ))
}
