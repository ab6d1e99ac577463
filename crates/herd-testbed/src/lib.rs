//! Client for herd's local SLURM test bed (`testbed/up`), used by the end-to-end tests.
//!
//! [`Bed::require`] reaches the cluster or fails the test with a message saying how to bring
//! it up: a test against the bed never passes by skipping. Everything else is thin, logged
//! wrappers around the real SLURM commands (`sbatch`, `scontrol`, `scancel`) with deadlines.
//!
//! The bed has two real cores: tests that use it run one at a time whatever runs them
//! (nextest's `bed` group, plain `cargo test` threads, two test binaries at once), because
//! [`Bed::require`] and [`exclusive`] hold it for the calling test alone.
//!
//! No test leaves the bed broken for the next: [`Bed::require`] first repairs what an
//! earlier test, killed before its guards ran, left frozen, stopped, drained or queued
//! ([`repair`]). No single wait of a test lasts longer than [`MAX_WAIT`], well inside the
//! time nextest gives a test.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use herd_slurm::scheduler::command;
use herd_slurm::scheduler::fields::fields;

pub mod docs;
mod freeze;
pub mod repair;
pub use freeze::Frozen;

/// Errors talking to the bed. Each carries the command and what it printed.
#[derive(Debug, thiserror::Error)]
pub enum BedError {
    /// A command could not be started at all (not installed, not on PATH).
    #[error("could not run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// Why it could not start.
        #[source]
        source: std::io::Error,
    },
    /// A command ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it wrote on stderr (trimmed).
        stderr: String,
    },
    /// A command did not finish within its deadline and was killed.
    #[error("`{command}` did not finish within {timeout:?}")]
    Timeout {
        /// The command line.
        command: String,
        /// The deadline it had.
        timeout: Duration,
    },
    /// The scheduler said something this client does not understand.
    #[error("unexpected output from `{command}`: {output}")]
    Parse {
        /// The command line.
        command: String,
        /// What it printed.
        output: String,
    },
    /// A SLURM command failed, timed out or printed something unexpected.
    #[error(transparent)]
    Slurm(#[from] herd_slurm::SlurmError),
    /// A job did not reach a final state in time (it has been cancelled).
    #[error("job {job} still {state} after {timeout:?}; cancelled")]
    JobTimeout {
        /// The job id.
        job: JobId,
        /// Its last state.
        state: String,
        /// The deadline it had.
        timeout: Duration,
    },
    /// Writing or reading the test's own files failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}

/// A SLURM job id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobId(pub u64);

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A job's state as `scontrol show job` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// `JobState`, e.g. `COMPLETED`.
    pub state: String,
    /// `ExitCode` as `code:signal`, e.g. `0:0`.
    pub exit_code: String,
    /// `Reason`.
    pub reason: String,
    /// `NodeList` (a hostlist expression; empty while pending).
    pub node_list: String,
    /// Every `key=value` field, for assertions this struct does not name.
    pub fields: BTreeMap<String, String>,
}

impl JobInfo {
    /// Whether the job will not change state any more (short of a requeue).
    pub fn is_final(&self) -> bool {
        matches!(
            self.state.as_str(),
            "COMPLETED"
                | "FAILED"
                | "CANCELLED"
                | "TIMEOUT"
                | "NODE_FAIL"
                | "PREEMPTED"
                | "OUT_OF_MEMORY"
                | "BOOT_FAIL"
                | "DEADLINE"
        )
    }

    /// Completed with exit code 0 and no signal.
    pub fn succeeded(&self) -> bool {
        self.state == "COMPLETED" && self.exit_code == "0:0"
    }
}

/// Parse one line of `scontrol show job -o` with herd-slurm's `Key=Value` reader
/// ([`herd_slurm::scheduler::fields`]); a key printed twice keeps its last value.
pub fn parse_scontrol_job(line: &str) -> Option<JobInfo> {
    let fields: BTreeMap<String, String> = fields(line)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let get = |k: &str| fields.get(k).cloned();
    Some(JobInfo {
        state: get("JobState")?,
        exit_code: get("ExitCode")?,
        reason: get("Reason").unwrap_or_default(),
        node_list: get("NodeList").unwrap_or_default(),
        fields,
    })
}

/// Quote `s` for a POSIX shell (single quotes; embedded ones as `'\''`).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_owned();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Quote each argument with [`shell_quote`] and join them with spaces.
pub fn shell_join<S: AsRef<str>>(args: &[S]) -> String {
    args.iter()
        .map(|a| shell_quote(a.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A bash batch script: shebang, one `#SBATCH` line per directive, `set -euo pipefail`, body.
pub fn batch_script<S: AsRef<str>>(directives: &[S], body: &str) -> String {
    let mut text = String::from("#!/bin/bash\n");
    for d in directives {
        text.push_str("#SBATCH ");
        text.push_str(d.as_ref());
        text.push('\n');
    }
    text.push_str("set -euo pipefail\n");
    text.push_str(body);
    if !body.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// The `key=value` fields of the lines examples/train_ddp.py prints, by rank, for the lines
/// whose first word after `rank=R` is `marker` (`start`, `done`, `stopping`, …). A leading
/// `srun --label` prefix (`N: `) is ignored; for a rank with several such lines the last wins.
pub fn rank_lines(output: &str, marker: &str) -> BTreeMap<u32, BTreeMap<String, String>> {
    let mut by_rank = BTreeMap::new();
    for line in output.lines() {
        let line = match line.split_once(": ") {
            Some((label, rest)) if label.trim().parse::<u32>().is_ok() => rest,
            _ => line,
        };
        let mut words = line.split_whitespace();
        let Some(rank) = words.next().and_then(|w| w.strip_prefix("rank=")) else {
            continue;
        };
        let Ok(rank) = rank.parse::<u32>() else {
            continue;
        };
        if words.next() != Some(marker) {
            continue;
        }
        let fields = words
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        by_rank.insert(rank, fields);
    }
    by_rank
}

fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(
        cmd.get_args()
            .map(|a| shell_quote(&a.to_string_lossy()).to_string()),
    );
    parts.join(" ")
}

/// The longest one wait of a test may be: 8 minutes, well inside the 10 minutes nextest
/// gives a test (`.config/nextest.toml`), so that the test's own deadline fires first and
/// says what it waited for; a test that needs longer needs an override there too.
pub const MAX_WAIT: Duration = Duration::from_secs(480);

/// Fails the calling test when a wait for `what` of `timeout` is longer than [`MAX_WAIT`].
pub fn within_max_wait(timeout: Duration, what: &str) {
    assert!(
        timeout <= MAX_WAIT,
        "a wait of {} s for {what} is longer than herd_testbed::MAX_WAIT ({} s), past which nextest may kill the test without its deadline's message: wait less, or raise both with a nextest override",
        timeout.as_secs(),
        MAX_WAIT.as_secs()
    );
}

/// Run `cmd` to completion within `timeout`, capturing output; non-zero exit is an error
/// carrying stderr. Every command is echoed to stderr (visible in the test's output).
pub fn run_cmd(cmd: &mut Command, timeout: Duration) -> Result<Output, BedError> {
    let command = describe(cmd);
    within_max_wait(timeout, &command);
    eprintln!("+ {command}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BedError::Spawn {
            command: command.clone(),
            source,
        })?;
    // Read both pipes on threads so a chatty child cannot block on a full pipe.
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = std::io::Read::read_to_end(p, &mut buf);
        }
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = std::io::Read::read_to_end(p, &mut buf);
        }
        buf
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BedError::Timeout { command, timeout });
            }
            Err(source) => return Err(BedError::Spawn { command, source }),
        }
    };
    let output = Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    if !output.status.success() {
        return Err(BedError::Failed {
            command,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(output)
}

/// The python of the test venv with torch and the pinned frameworks, as `testbed/venv`
/// prints it. `testbed/up` (and so `scripts/test-all`) made the venv already, and then this
/// only prints its path; one that has to be installed now (~5 GB) may not fit in a test's
/// time: run `testbed/venv` first.
pub fn venv_python() -> Result<PathBuf, BedError> {
    let venv = run_cmd(
        &mut Command::new(repo_root().join("testbed/venv")),
        Duration::from_secs(480),
    )?;
    let python = PathBuf::from(String::from_utf8_lossy(&venv.stdout).trim());
    if !python.is_file() {
        return Err(BedError::Parse {
            command: "testbed/venv".into(),
            output: format!("it printed {}, which is no file", python.display()),
        });
    }
    Ok(python)
}

/// The bed's container image (`testbed/image`): a Debian 12 root with Debian's
/// python3-torch, as a folder; the same root as one SquashFS file is beside it
/// ([`bed_image_squashfs`]). Its own environment sets `RANK=99`, `LOCAL_RANK=99`,
/// `WORLD_SIZE=99` and `MASTER_ADDR=wrong`. `scripts/test-all` builds it before the tests;
/// one that has to be built now takes minutes.
pub fn bed_image() -> Result<PathBuf, BedError> {
    let out = run_cmd(
        &mut Command::new(repo_root().join("testbed/image")),
        Duration::from_secs(480),
    )?;
    let image = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !image.join("usr/bin/python3").is_file() {
        return Err(BedError::Parse {
            command: "testbed/image".into(),
            output: format!(
                "it printed {}, which holds no usr/bin/python3",
                image.display()
            ),
        });
    }
    Ok(image)
}

/// The bed's image in Podman's store (`BED_PODMAN_IMAGE` in testbed/lib.sh), imported by
/// `testbed/image` from [`bed_image`]'s folder with the same environment (`ENV RANK=99`,
/// `MASTER_ADDR=wrong`, …). An error when Podman does not have it.
pub fn bed_podman_image() -> Result<String, BedError> {
    const NAME: &str = "localhost/herd-bed-torch:bookworm";
    bed_image()?;
    run_cmd(
        Command::new("podman").args(["image", "exists", NAME]),
        Duration::from_secs(60),
    )?;
    Ok(NAME.to_owned())
}

/// The bed's image as one SquashFS file: [`bed_image`]'s folder with `.sqfs` added.
pub fn bed_image_squashfs(image: &Path) -> PathBuf {
    let mut name = image.as_os_str().to_owned();
    name.push(".sqfs");
    PathBuf::from(name)
}

/// A stand-in for NVIDIA's driver library, built with `cc` into `dir` as `libcuda.so.1`
/// (`fake_libcuda.c`: `cuInit`, `cuDeviceGetCount` and `cuGetErrorName` with CUDA's rules
/// for `CUDA_VISIBLE_DEVICES`; 4 devices, or 1 on the node `HERD_FAKE_CUDA_SHORT` names).
/// Put `dir` on `LD_LIBRARY_PATH` where a Python's `ctypes` should load it. Returns `dir`.
pub fn fake_libcuda(dir: &Path) -> Result<PathBuf, BedError> {
    let io = |source| BedError::Io {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let source = dir.join("fake_libcuda.c");
    std::fs::write(&source, include_str!("fake_libcuda.c")).map_err(io)?;
    let mut cc = std::process::Command::new("cc");
    cc.args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join("libcuda.so.1"))
        .arg(&source);
    run_cmd(&mut cc, Duration::from_secs(60))?;
    Ok(dir.to_owned())
}

/// The interface of the network the bed's nodes share, inside each node (`BED_IFNAME` in
/// testbed/lib.sh). Each node also has a `docker0` before it that reaches no other node.
pub const BED_IFNAME: &str = "eth0";

/// Node `name`'s address on the network the nodes share, as SLURM has it (`NodeAddr`).
pub fn node_addr(name: &str) -> String {
    let out = std::process::Command::new("scontrol")
        .args(["show", "node", "-o", name])
        .output()
        .expect("scontrol runs");
    let text = String::from_utf8_lossy(&out.stdout);
    fields(&text)
        .into_iter()
        .find(|(k, _)| *k == "NodeAddr")
        .map(|(_, v)| v.to_owned())
        .unwrap_or_else(|| panic!("no NodeAddr for {name}: {text}"))
}

/// The repository root (for `examples/` and `testbed/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

/// The calling test's turn on the bed: other tests of this process wait for it to end
/// (dropped), other processes for this process to end. Hold it for the whole test.
#[derive(Debug)]
pub struct BedTurn {
    _thread: MutexGuard<'static, ()>,
}

/// Waits for, then takes, the calling test's turn on the bed ([`BedTurn`]): the bed is
/// shared by the whole machine, and its two real cores cannot run two bed tests at once.
/// Across processes an exclusive lock on `herd-testbed.lock` in the temporary folder is
/// taken once and held until the process exits (nextest runs each test in a process of
/// its own); within a process, one test at a time.
pub fn exclusive() -> BedTurn {
    static PROCESS: OnceLock<std::fs::File> = OnceLock::new();
    static THREAD: Mutex<()> = Mutex::new(());
    PROCESS.get_or_init(|| {
        let path = std::env::temp_dir().join("herd-testbed.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("cannot open the bed's lock {}: {e}", path.display()));
        if file.try_lock().is_err() {
            eprintln!(
                "waiting for another test process to finish with the bed ({})",
                path.display()
            );
            let asked = Instant::now();
            file.lock()
                .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
            eprintln!(
                "the bed is this process's after {:.1} s of waiting",
                asked.elapsed().as_secs_f64()
            );
        }
        file
    });
    assert!(
        !HOLDS_TURN.get(),
        "this test holds the bed already: pass its Bed on instead of taking it again"
    );
    let turn = BedTurn {
        // A test that panicked while it held the bed leaves the bed usable: take it anyway.
        _thread: THREAD.lock().unwrap_or_else(PoisonError::into_inner),
    };
    HOLDS_TURN.set(true);
    turn
}

thread_local! {
    /// Whether this thread (a test) holds its [`BedTurn`]: taking it twice would wait forever.
    static HOLDS_TURN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Drop for BedTurn {
    fn drop(&mut self) {
        HOLDS_TURN.set(false);
    }
}

/// The bed, the calling test's alone while this lives ([`Bed::require`]); dropped, it
/// cancels the jobs the test left behind.
#[derive(Debug)]
pub struct ExclusiveBed {
    bed: Bed,
    _turn: BedTurn,
}

impl Drop for ExclusiveBed {
    /// The test is over, passed or failed: its jobs that still wait or run are cancelled,
    /// so the next test starts with an empty queue (a failed test's job would otherwise
    /// hold the nodes until its time limit).
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        let Ok(me) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
            return;
        };
        let _ = Command::new("scancel")
            .arg(format!("--user={me}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl std::ops::Deref for ExclusiveBed {
    type Target = Bed;
    fn deref(&self) -> &Bed {
        &self.bed
    }
}

/// Every bed test gets a record of bad nodes of its own (`HERD_NODE_RECORD`, which sbatch
/// passes on to the job's agents): a node one test's job blames must not be left out of the
/// next test's jobs, nor written into the user's own record. A test that sets the variable
/// itself keeps its own.
fn isolate_node_record() {
    const VAR: &str = "HERD_NODE_RECORD";
    if std::env::var_os(VAR).is_some() {
        return;
    }
    let base = std::env::var_os("HERD_BED_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/bed-scratch"));
    let path = base.join(format!("node-record-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // One test per process (nextest), set before the test starts any thread of its own.
    std::env::set_var(VAR, path);
}

/// The reachable test bed.
#[derive(Debug, Clone)]
pub struct Bed {
    nodes: Vec<String>,
    python: PathBuf,
}

impl Bed {
    /// Reach the bed: `sinfo` must answer and list idle nodes; the torch venv must exist.
    pub fn connect() -> Result<Bed, BedError> {
        let listed = command::node_states("gpu")?;
        let mut nodes = Vec::new();
        for (node, state) in &listed {
            if repair::node_state(state) != repair::NodeState::Usable {
                return Err(BedError::Parse {
                    command: "sinfo".into(),
                    output: format!("node {node} is {state}; run `testbed/up` to repair the bed"),
                });
            }
            nodes.push(node.clone());
        }
        if nodes.is_empty() {
            return Err(BedError::Parse {
                command: "sinfo".into(),
                output: "no nodes in partition gpu".into(),
            });
        }
        nodes.sort();
        let python = venv_python()?;
        Ok(Bed { nodes, python })
    }

    /// [`Bed::connect`], or fail the calling test with a message saying what to do; the
    /// bed is the calling test's alone until the returned value is dropped ([`exclusive`]).
    /// Once the bed is the test's, and before anything looks at it, what an earlier test
    /// left broken is repaired ([`repair`], one line on stderr when it did anything).
    /// Connects once per test binary; later calls reuse it.
    pub fn require() -> ExclusiveBed {
        static BED: OnceLock<Result<Bed, String>> = OnceLock::new();
        let turn = exclusive();
        repair::repair("an earlier test", Duration::from_secs(60));
        match BED.get_or_init(|| Bed::connect().map_err(|e| e.to_string())) {
            Ok(bed) => {
                isolate_node_record();
                ExclusiveBed {
                    bed: bed.clone(),
                    _turn: turn,
                }
            }
            Err(e) => panic!(
                "the SLURM test bed is not reachable: {e}\n\
                 bring it up with `sudo testbed/up` (tests against the bed never skip)"
            ),
        }
    }

    /// Node names, sorted (`gpu-a01`, …).
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The venv's python, with torch.
    pub fn python(&self) -> &Path {
        &self.python
    }

    /// A fresh, empty folder that every node sees (the bed's nodes share this filesystem).
    /// Left in place after the test for debugging; emptied when the test runs again.
    pub fn scratch(&self, name: &str) -> Result<PathBuf, BedError> {
        let base = std::env::var_os("HERD_BED_SCRATCH")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/bed-scratch"));
        let dir = base.join(name);
        let io = |source| BedError::Io {
            path: dir.clone(),
            source,
        };
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io)?;
        }
        std::fs::create_dir_all(&dir).map_err(io)?;
        Ok(dir)
    }

    /// `sbatch --parsable SCRIPT` from `workdir`; returns the job id.
    pub fn sbatch(&self, script: &Path, workdir: &Path) -> Result<JobId, BedError> {
        let id = command::sbatch(script, workdir)?;
        id.parse().map(JobId).map_err(|_| BedError::Parse {
            command: format!("sbatch --parsable {}", script.display()),
            output: id,
        })
    }

    /// `scontrol show job -o ID`.
    pub fn job(&self, job: JobId) -> Result<JobInfo, BedError> {
        let text = command::show_job(&job.to_string())?;
        parse_scontrol_job(text.lines().next().unwrap_or_default()).ok_or(BedError::Parse {
            command: format!("scontrol show job -o {job}"),
            output: text,
        })
    }

    /// Wait for `job` to reach a final state; past `timeout` (at most [`MAX_WAIT`]) it is
    /// cancelled and an error.
    pub fn wait(&self, job: JobId, timeout: Duration) -> Result<JobInfo, BedError> {
        within_max_wait(timeout, &format!("job {job}"));
        let deadline = Instant::now() + timeout;
        let mut last_state = String::new();
        loop {
            let info = self.job(job)?;
            if info.is_final() {
                return Ok(info);
            }
            if info.state != last_state {
                eprintln!("job {job}: {} ({})", info.state, info.reason);
                last_state = info.state.clone();
            }
            if Instant::now() >= deadline {
                let _ = self.cancel(job);
                return Err(BedError::JobTimeout {
                    job,
                    state: info.state,
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `scancel --signal=SIGNAL ID`: the signal reaches every task of the job's steps (not
    /// the batch shell), as SLURM's own preemption warning does with `--signal=SIG@T`.
    pub fn signal(&self, job: JobId, signal: &str) -> Result<(), BedError> {
        Ok(command::scancel(&[&job.to_string()], Some(signal))?)
    }

    /// Processes on the bed's nodes whose command line contains `needle`, as
    /// `node pid cmdline` lines (every node's process table, read through its namespace).
    /// A namespace that cannot be listed is an error, never an empty list: "nothing left"
    /// must mean the tables were read. A process that ends while they are read is left out.
    pub fn node_processes(&self, needle: &str) -> Result<Vec<String>, BedError> {
        let mut found = Vec::new();
        for node in &self.nodes {
            let ns = format!("herd-{node}");
            // Polled every few milliseconds by teardown tests: not logged like run_cmd.
            let command = format!("ip netns pids {ns}");
            let out = Command::new("ip")
                .args(["netns", "pids", &ns])
                .output()
                .map_err(|source| BedError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            if !out.status.success() {
                return Err(BedError::Failed {
                    command,
                    status: out.status.to_string(),
                    stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                });
            }
            for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                    continue;
                };
                let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
                if cmdline.contains(needle) {
                    found.push(format!("{node} {pid} {}", cmdline.trim_end()));
                }
            }
        }
        Ok(found)
    }

    /// The id the next submitted job will get (`scontrol show config`: NEXT_JOB_ID).
    pub fn next_job_id(&self) -> Result<JobId, BedError> {
        let text = command::show_config()?;
        text.lines()
            .find_map(|l| {
                let (k, v) = l.split_once('=')?;
                (k.trim() == "NEXT_JOB_ID").then(|| v.trim().parse().ok())?
            })
            .map(JobId)
            .ok_or(BedError::Parse {
                command: "scontrol show config".into(),
                output: "no NEXT_JOB_ID".into(),
            })
    }

    /// `scancel ID`.
    pub fn cancel(&self, job: JobId) -> Result<(), BedError> {
        Ok(command::scancel(&[&job.to_string()], None)?)
    }
}

/// Write `text` to `path` with the given Unix permission bits.
pub fn write_file(path: &Path, text: &str, mode: u32) -> Result<(), BedError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| BedError::Io {
        path: path.to_path_buf(),
        source,
    };
    std::fs::write(path, text).map_err(io)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io)
}

/// Read a file the job wrote, as text (lossy); a missing file reads as empty.
pub fn read_lossy(path: impl AsRef<OsStr>) -> String {
    std::fs::read(Path::new(path.as_ref()))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Pasted from `scontrol show job -o` on the bed (slurm 22.05.8).
    const RUNNING: &str = "JobId=1 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901759 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-30T17:20:19 EligibleTime=2026-11-30T17:20:19 AccrueTime=2026-11-30T17:20:19 StartTime=2026-11-30T17:20:22 EndTime=Unknown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-30T17:20:22 Scheduler=Main Partition=gpu AllocNode:Sid=localhost:1092 ReqNodeList=(null) ExcNodeList=(null) NodeList=gpu-a01 BatchHost=gpu-a01 NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=1000M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=1000M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp StdErr=/tmp/x.out StdIn=/dev/null StdOut=/tmp/x.out Power= ";

    #[test]
    fn parses_running_job() {
        let info = parse_scontrol_job(RUNNING).expect("parses");
        assert_eq!(info.state, "RUNNING");
        assert_eq!(info.exit_code, "0:0");
        assert_eq!(info.node_list, "gpu-a01");
        assert_eq!(info.fields["TRES"], "cpu=1,mem=1000M,node=1,billing=1");
        assert_eq!(info.fields["CPUs/Task"], "1");
        assert!(!info.is_final());
    }

    #[test]
    fn final_states_and_success() {
        let done = RUNNING.replace("JobState=RUNNING", "JobState=COMPLETED");
        let info = parse_scontrol_job(&done).expect("parses");
        assert!(info.is_final() && info.succeeded());
        let failed = RUNNING
            .replace("JobState=RUNNING", "JobState=FAILED")
            .replace("ExitCode=0:0", "ExitCode=7:0");
        let info = parse_scontrol_job(&failed).expect("parses");
        assert!(info.is_final() && !info.succeeded());
    }

    #[test]
    fn rejects_output_without_state() {
        assert!(parse_scontrol_job("slurm_load_jobs error: Invalid job id specified").is_none());
    }

    #[test]
    fn rank_lines_reads_labelled_and_plain_output() {
        let out = "3: rank=3 start host=gpu-a02 world_size=6\n\
                   rank=0 start host=gpu-a01 world_size=6\n\
                   1: rank=1 step=10 loss=0.5\n\
                   2: [W socket.cpp:207] rank=9 start host=x\n";
        let starts = rank_lines(out, "start");
        assert_eq!(starts.keys().copied().collect::<Vec<_>>(), vec![0, 3]);
        assert_eq!(starts[&3]["host"], "gpu-a02");
        assert!(rank_lines(out, "done").is_empty());
    }

    #[test]
    fn batch_script_puts_shebang_first() {
        let text = batch_script(&["--nodes=2"], "srun true");
        assert_eq!(
            text,
            "#!/bin/bash\n#SBATCH --nodes=2\nset -euo pipefail\nsrun true\n"
        );
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        for s in [
            "plain",
            "a b",
            "it's",
            "$(rm -rf /)",
            "new\nline",
            "ünï",
            "",
        ] {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("printf %s {}", shell_quote(s)))
                .output()
                .expect("sh runs");
            assert_eq!(String::from_utf8_lossy(&out.stdout), s);
        }
    }
}
