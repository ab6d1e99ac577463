//! Warm workers (docs/launch.md, "Warm starts"): the next attempt's Python interpreters,
//! started ahead of time with the modules the job needs already imported.
//!
//! For a worker command that is a plain interpreter run on a script or a module
//! (`python [-u|-B|-O|-OO] SCRIPT …`, `python -m MODULE …`, [`python_entry`]), once an
//! attempt's workers are past their imports (each has written a line, or one a step; else
//! 30 s after they started) and another attempt can follow in the allocation, the agent
//! starts one standby per local rank: `python -c LOADER SCRIPT ARGS…`, which reads its
//! program (`warm/standby.py`) from its stdin, with that worker's whole environment; it
//! imports the modules that rank had loaded (learned in
//! `rank-R.modules` of the attempt folder; before anything is learned, torch and the installed
//! modules the script imports at its top level, [`FIRST_GUESS`]) and waits on
//! its stdin. When the next attempt starts in the same allocation, each worker whose command
//! and environment are the same but for the attempt's own variables ([`LATE`]) and, where
//! the standby's imports did not read them, the variables of its place in the job
//! ([`PLACE`]: a spare's, or after a spare took a node's place) is that standby, handed
//! those variables and its command line; it runs the script as `python` would have. A
//! standby that does not fit is ended and its worker starts as before. A spare's agent
//! starts standbys too, as if it ran the last node's workers ([`crate::attempt`]).
//!
//! Standbys are the agent's children in process groups of their own, which the teardown of
//! an attempt leaves alone ([`crate::procs::keep`]); they die with the agent (parent-death
//! signal) and are ended when it ends ([`Pool::end`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use herd_slurm::worker::vars::{
    HERD_ATTEMPT, HERD_HEARTBEAT_FILE, HERD_LOG_DIR, HERD_METRICS_FILE, HERD_RESUME_FROM,
    TORCHELASTIC_ERROR_FILE,
};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

/// The standby's program, which [`LOADER`] reads from its stdin.
const STANDBY: &str = include_str!("warm/standby.py");

/// What `python -c` runs in a standby: read the standby's program from stdin (its length,
/// a line, then the program) and run it. Short, so `ps` shows the worker's command line
/// after it; the comment marks a standby in `ps`.
pub const LOADER: &str =
    "import sys;exec(sys.stdin.buffer.read(int(sys.stdin.buffer.readline())))  # herd standby";

/// Interpreter flags a warm start keeps (the standby is started with them).
const FLAGS: [&str; 4] = ["-u", "-B", "-O", "-OO"];

/// The variables that may differ between the environment a standby was started with and
/// the worker it becomes: each attempt's own (its number and restart count, the master's
/// address and port and the interface to it, its folders, the checkpoint it resumes from).
/// No library reads them when it is imported. A difference in any other variable starts
/// that worker cold.
pub const LATE: [&str; 11] = [
    HERD_ATTEMPT,
    "TORCHELASTIC_RESTART_COUNT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "GLOO_SOCKET_IFNAME",
    "NCCL_SOCKET_IFNAME",
    HERD_LOG_DIR,
    HERD_HEARTBEAT_FILE,
    HERD_METRICS_FILE,
    TORCHELASTIC_ERROR_FILE,
    HERD_RESUME_FROM,
];

/// The variables that give a worker its place in the job: which ranks and node it is, and
/// the attempt's node list. They change for the workers of a spare that takes a node's
/// place (its standbys were started as if for another node) and for every worker after
/// such a replacement (the node list). They may differ between a standby and its worker
/// when the standby's imports did not read them from `os.environ` (it says which it read;
/// Lightning, for one, reads `RANK` and `SLURM_PROCID` when imported). No library reads
/// them from C when loaded; any other variable must match (C libraries read `OMP_*`,
/// `CUDA_*`, `LD_*` when they load).
pub const PLACE: [&str; 9] = [
    "RANK",
    "ROLE_RANK",
    "GROUP_RANK",
    "NODE_RANK",
    "SLURM_PROCID",
    "SLURM_NODEID",
    "SLURM_STEP_NODELIST",
    herd_slurm::worker::vars::HERD_NODE_RANK,
    herd_slurm::worker::vars::HERD_MASTER_NODE,
];

/// Modules a standby imports before anything is learned of the job: torch; torch._dynamo,
/// which torch's optimizers import when the first is made (seconds: sympy, the compiler's
/// configuration); and `*`, the installed modules the script (or `-m` module) imports in
/// its statements outside functions, found where its `python` would find them
/// (`warm/standby.py`). A module that is not installed is passed over.
pub const FIRST_GUESS: [&str; 3] = ["torch", "torch._dynamo", "*"];

/// A worker command a standby can become: the interpreter, its flags, and what follows
/// them (`SCRIPT ARGS…` or `-m MODULE ARGS…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    program: OsString,
    flags: Vec<OsString>,
    rest: Vec<String>,
}

/// `argv` as a plain Python run of a script or a module, or `None` (it starts cold): the
/// program is named `python`, `python3` or `python3.N`, only [`FLAGS`] come before the
/// script (or `-m MODULE`), and every argument is text.
pub fn python_entry(argv: &[OsString]) -> Option<Entry> {
    let (program, args) = argv.split_first()?;
    let name = Path::new(program).file_name()?.to_str()?;
    let version_ok = |v: &str| {
        v.is_empty()
            || v.strip_prefix('.')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    if name != "python" && !name.strip_prefix("python3").is_some_and(version_ok) {
        return None;
    }
    let flags = args
        .iter()
        .take_while(|a| a.to_str().is_some_and(|a| FLAGS.contains(&a)))
        .count();
    let rest = args[flags..]
        .iter()
        .map(|a| a.to_str().map(str::to_owned))
        .collect::<Option<Vec<String>>>()?;
    let runnable = |s: &String| !s.is_empty() && !s.starts_with('-');
    let ok = match rest.first().map(String::as_str) {
        Some("-m") => rest.get(1).is_some_and(runnable),
        Some(_) => runnable(&rest[0]),
        None => false,
    };
    ok.then(|| Entry {
        program: program.clone(),
        flags: args[..flags].to_vec(),
        rest,
    })
}

impl Entry {
    /// The standby's command line: the same interpreter and flags, the [`LOADER`], and
    /// what follows them in the worker's (so `ps` and `pgrep -f` show the script).
    pub fn standby_argv(&self) -> Vec<OsString> {
        let mut argv = vec![self.program.clone()];
        argv.extend(self.flags.iter().cloned());
        argv.extend(["-c".into(), LOADER.into()]);
        argv.extend(self.rest.iter().map(OsString::from));
        argv
    }

    /// What a standby reads first: its program (length, then text), the modules to
    /// import (one line) and the file to name the variables those imports read in (one
    /// line).
    fn payload(modules: &[String], reads: &Path) -> Vec<u8> {
        format!(
            "{}\n{STANDBY}{}\n{}\n",
            STANDBY.len(),
            modules.join(" "),
            reads.display()
        )
        .into_bytes()
    }
}

/// The modules learned in `file` (one name a line), or [`FIRST_GUESS`] when there is none.
pub fn learned(file: &Path) -> Vec<String> {
    let names: Vec<String> = std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|n| {
            !n.is_empty()
                && n.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        })
        .map(str::to_owned)
        .collect();
    if names.is_empty() {
        FIRST_GUESS.iter().map(|s| (*s).to_owned()).collect()
    } else {
        names
    }
}

/// Why a standby cannot become a worker: the variables whose values differ, or that one
/// of the two lacks, other than [`LATE`] and, when `read` says what the standby's imports
/// read (`None`: not known, they may not be done), the [`PLACE`] ones they did not read.
/// Empty: it can.
pub fn misfit(
    started: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
    read: Option<&HashSet<String>>,
) -> Vec<String> {
    let may_differ =
        |k: &str| LATE.contains(&k) || (PLACE.contains(&k) && read.is_some_and(|r| !r.contains(k)));
    let mut keys: Vec<String> = started
        .keys()
        .chain(now.keys())
        .filter(|k| !may_differ(k) && started.get(*k) != now.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// One standby: started for `argv` with `env` on top of the agent's environment.
pub struct Standby {
    child: Child,
    pid: i32,
    stdin: ChildStdin,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    argv: Vec<OsString>,
    env: BTreeMap<String, String>,
    /// Where it names the variables its imports read, once they are done: a file without
    /// a name ([`unnamed_file`]), gone when the last of its two holders closes it. `None`
    /// where one cannot be made: every variable then holds.
    record: Option<std::fs::File>,
}

/// A standby that became a worker: its child, pid and output.
pub struct HandedOff {
    /// The process to wait on.
    pub child: Child,
    /// Its pid, also its process group's.
    pub pid: i32,
    /// Its stdout, unread since it started.
    pub stdout: Option<ChildStdout>,
    /// Its stderr, unread since it started.
    pub stderr: Option<ChildStderr>,
}

impl Standby {
    /// Start a standby for worker command `argv` (a [`python_entry`]) with `env`, importing
    /// `modules`: own process group, parent-death signal, kept through teardowns.
    pub async fn start(
        entry: &Entry,
        argv: &[OsString],
        env: &BTreeMap<String, String>,
        modules: &[String],
    ) -> std::io::Result<Standby> {
        let mut cmd = tokio::process::Command::from(herd_slurm::user_program(&entry.program, env));
        cmd.args(&entry.standby_argv()[1..]);
        crate::procs::own_group_dying_with_agent(&mut cmd);
        cmd.stdin(std::process::Stdio::piped());
        let mut child = cmd.spawn()?;
        let pid = child.id().map_or(-1, |p| p as i32);
        crate::procs::keep(pid);
        let Some(mut stdin) = child.stdin.take() else {
            end_child(child, pid);
            return Err(std::io::Error::other("no stdin"));
        };
        let record = unnamed_file();
        // The standby opens it by its name in this agent's table of files.
        let reads = record.as_ref().map_or_else(PathBuf::new, |r| {
            PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), r.as_raw_fd()))
        });
        if let Err(e) = stdin.write_all(&Entry::payload(modules, &reads)).await {
            end_child(child, pid);
            return Err(e);
        }
        Ok(Standby {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            pid,
            stdin,
            argv: argv.to_vec(),
            env: env.clone(),
            record,
        })
    }

    /// The variables its imports read, once they are done (`None` before: the record
    /// ends with a NUL once it is whole).
    fn read(&self) -> Option<HashSet<String>> {
        let record = self.record.as_ref()?;
        let len = record.metadata().ok()?.len();
        let mut buf = vec![0; usize::try_from(len).ok()?];
        record.read_exact_at(&mut buf, 0).ok()?;
        let text = String::from_utf8_lossy(buf.strip_suffix(b"\0")?).into_owned();
        Some(text.lines().map(str::to_owned).collect())
    }

    /// Make this standby worker command `entry` with `env`: it gets the variables to set
    /// and unset, its command line, and the file to learn its modules into. An error: it
    /// could not be told (it died); it is ended.
    pub async fn hand_off(
        mut self,
        entry: &Entry,
        env: &BTreeMap<String, String>,
        learn: &Path,
    ) -> std::io::Result<HandedOff> {
        let unset: Vec<&String> = self.env.keys().filter(|k| !env.contains_key(*k)).collect();
        let msg = serde_json::json!({
            "set": env,
            "unset": unset,
            "argv": entry.rest,
            "learn": learn.to_str(),
        });
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        let told = async {
            self.stdin.write_all(&line).await?;
            self.stdin.flush().await
        }
        .await;
        crate::procs::unkeep(self.pid);
        if let Err(e) = told {
            end_child(self.child, self.pid);
            return Err(e);
        }
        drop(self.stdin);
        Ok(HandedOff {
            child: self.child,
            pid: self.pid,
            stdout: self.stdout,
            stderr: self.stderr,
        })
    }
}

/// A file with no name (`O_TMPFILE`) in `/dev/shm` (memory), or else in the temporary
/// folder: nothing a killed agent could leave behind. (`memfd_create` would do too, but it
/// came in glibc 2.27, and herd's release build runs on 2.17.)
fn unnamed_file() -> Option<std::fs::File> {
    [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .iter()
        .find_map(|dir| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .mode(0o600)
                .custom_flags(nix::libc::O_TMPFILE)
                .open(dir)
                .ok()
        })
}

/// End a standby's process group and reap it.
fn end(standby: Standby) {
    end_child(standby.child, standby.pid);
}

/// End a standby's process and reap it.
fn end_child(mut child: Child, pid: i32) {
    crate::procs::unkeep(pid);
    if pid > 0 {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
}

/// One agent's standbys, by local rank.
#[derive(Default)]
pub struct Pool {
    standbys: Mutex<HashMap<u32, Standby>>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ranks: Vec<u32> = self
            .standbys
            .lock()
            .map(|s| s.keys().copied().collect())
            .unwrap_or_default();
        f.debug_struct("Pool").field("ready", &ranks).finish()
    }
}

impl Pool {
    /// Keep `standby` for local rank `local_rank` (one there is ended).
    pub fn put(&self, local_rank: u32, standby: Standby) {
        let old = self
            .standbys
            .lock()
            .ok()
            .and_then(|mut s| s.insert(local_rank, standby));
        if let Some(old) = old {
            end(old);
        }
    }

    /// Whether a standby for `local_rank` is kept.
    pub fn has(&self, local_rank: u32) -> bool {
        self.standbys
            .lock()
            .is_ok_and(|s| s.contains_key(&local_rank))
    }

    /// The standby of `local_rank` if it can become worker `argv` with `env`: alive, for
    /// the same command, with the same environment but for what [`misfit`] lets differ.
    /// `Err` says why not (the standby is ended); `Ok(None)`: there was none.
    pub fn take(
        &self,
        local_rank: u32,
        argv: &[OsString],
        env: &BTreeMap<String, String>,
    ) -> Result<Option<Standby>, String> {
        let Some(mut standby) = self
            .standbys
            .lock()
            .ok()
            .and_then(|mut s| s.remove(&local_rank))
        else {
            return Ok(None);
        };
        let why = if standby.argv != argv {
            Some("the command changed".to_owned())
        } else if !matches!(standby.child.try_wait(), Ok(None)) {
            Some("it ended".to_owned())
        } else {
            let read = standby.read();
            let keys = misfit(&standby.env, env, read.as_ref());
            let place = keys.iter().any(|k| PLACE.contains(&k.as_str()));
            (!keys.is_empty()).then(|| {
                format!(
                    "{} changed{}",
                    keys.join(", "),
                    match (place, &read) {
                        (false, _) => "",
                        (true, None) => "; its imports were not done",
                        (true, Some(_)) => "; its imports read the worker's place",
                    }
                )
            })
        };
        match why {
            None => Ok(Some(standby)),
            Some(why) => {
                end(standby);
                Err(why)
            }
        }
    }

    /// End every standby (the agent is ending).
    pub async fn end(&self) {
        let all: Vec<Standby> = self
            .standbys
            .lock()
            .map(|mut s| s.drain().map(|(_, v)| v).collect())
            .unwrap_or_default();
        for mut s in all {
            crate::procs::unkeep(s.pid);
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(s.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = s.child.wait().await;
        }
    }
}

#[cfg(test)]
mod tests;
