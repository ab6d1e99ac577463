//! The node preflight (docs/launch.md, "Preflight"): before an attempt's workers start,
//! each agent checks, in a fraction of a second, that its node can run them.
//!
//! - `container` (a job with `--container`): the image is ready on this node (found, a
//!   SquashFS file mounted) and the runtime starts it; inside, the worker's program is
//!   there and, for a Python command, its interpreter finds `torch` and the module `-m`
//!   runs; `/dev/shm` inside has at least [`MIN_SHM`]; when SLURM gave the node GPUs and
//!   it has NVIDIA's driver, CUDA inside sees every one. With a container, this check takes
//!   the place of `python` and `command`, which look at the host.
//! - `python`: a Python command's interpreter starts with the workers' environment and
//!   finds `torch` and the module `-m` runs, without importing them
//!   (`importlib.util.find_spec` takes milliseconds, `import torch` seconds), and its
//!   script can be read. A script whose `#!` line names a Python counts as a Python command.
//! - `command`: any other program resolves the way the OS resolves it (a path, or a PATH
//!   search) and may be executed, and so may the interpreter its `#!` line names.
//! - `gpus`: the GPUs SLURM gave this node are there: as many in `CUDA_VISIBLE_DEVICES` as
//!   `SLURM_GPUS_ON_NODE` says, and each one listed by `nvidia-smi -L` when `nvidia-smi`
//!   is on PATH; and healthy, where the driver says ([`gpu_health`]): no uncorrectable ECC
//!   error, no page waiting to be retired, no process holding a tenth of one's memory before
//!   the workers start. No GPU asked for: nothing to check.
//! - `folders`: the log folder and the checkpoint folder exist or can be created, a file can
//!   be written in each, and each has at least [`MIN_FREE`] free.
//! - `network`: an interface the user named for the collectives (`GLOO_SOCKET_IFNAME`,
//!   `NCCL_SOCKET_IFNAME`, which herd then leaves as they are) exists on this node.
//! - `port`: the master's rendezvous port answers from this node (the leader holds it open
//!   with [`hold_port`] while the agents check).
//!
//! All checks run at once; each waits at most [`CHECK_TIMEOUT`] for any process, file
//! system or connection, so a hung mount or a dropped connection is a finding, never a hang.
//! File system calls run on threads of their own, never joined: a thread stuck on a hung
//! mount cannot hold up the agent's exit.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use herd_plan::torchrun::is_python;

use crate::config::{Config, ContainerState};

mod container;
mod find_modules;
mod gpu_health;
mod port;
use find_modules::FIND_MODULES;
pub(crate) use port::{claim_master_port, HeldPort};

/// How long each check waits for a process, a file system or a connection to answer.
pub(crate) const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// The free space a log or checkpoint folder must have (bytes available to the job's
/// user): 1 GiB. A fixed floor, not a share of the file system: 1 % of a shared file
/// system of petabytes would be terabytes, of a node's small disk a few megabytes.
pub(crate) const MIN_FREE: u64 = 1 << 30;

/// The checks by name, in the order a finding is chosen when several fail.
pub(crate) const CHECKS: [&str; 7] = [
    "container",
    "python",
    "command",
    "gpus",
    "folders",
    "network",
    "port",
];

/// The least `/dev/shm` a container's workers get: 1 GiB. NCCL's shared-memory transport
/// and DataLoader workers put buffers there; Docker's and Podman's default of 64 MiB makes
/// them fail with "No space left on device" or a bus error.
pub(crate) const MIN_SHM: u64 = 1 << 30;

/// What is wrong with this node: which check failed and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// One of [`CHECKS`]: `container`, `python`, `command`, `gpus`, `folders`, `network`,
    /// `port`.
    pub(crate) check: &'static str,
    /// What is wrong and what to change, one line, naming the path, command or value.
    pub(crate) detail: String,
}

impl Finding {
    fn new(check: &'static str, detail: impl Into<String>) -> Finding {
        Finding {
            check,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "preflight check `{}` failed: {}",
            self.check, self.detail
        )
    }
}

/// Check this node for an attempt of `cfg`'s job: its worker command, its GPUs, its log
/// and checkpoint folders, and, when `master` is given (the master's address and a port
/// the leader holds open, [`hold_port`]), that the port answers from here. Every check runs
/// at once; returns the time they took, or the finding of the first failing one in the
/// order of [`CHECKS`].
pub(crate) async fn check_node(
    cfg: &Config,
    master: Option<(String, u16)>,
) -> Result<Duration, Finding> {
    Node::of(cfg, master).check().await
}

/// What one node's preflight looks at.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// The worker command.
    pub(crate) argv: Vec<OsString>,
    /// The workers' PATH (they inherit the agent's environment).
    pub(crate) path: Option<OsString>,
    /// The GPUs the workers get (`CUDA_VISIBLE_DEVICES`).
    pub(crate) gpus: Vec<String>,
    /// `SLURM_GPUS_ON_NODE`: how many GPUs SLURM gave this node.
    pub(crate) gres: Option<u32>,
    /// The folders the job writes: what each is, and where.
    pub(crate) folders: Vec<(&'static str, PathBuf)>,
    /// This node's name, which makes the name of the file written in each folder unique
    /// among nodes sharing it.
    pub(crate) host: String,
    /// The master's address and held port.
    pub(crate) master: Option<(String, u16)>,
    /// The collectives' interface variables the user set (`GLOO_SOCKET_IFNAME`,
    /// `NCCL_SOCKET_IFNAME`) and their values.
    pub(crate) ifnames: Vec<(&'static str, String)>,
    /// The container the workers run in, when the job has one.
    pub(crate) container: Option<ContainerState>,
}

impl Node {
    /// What `cfg`'s node is checked for, from `cfg` and this agent's environment, which
    /// its workers inherit.
    pub(crate) fn of(cfg: &Config, master: Option<(String, u16)>) -> Node {
        let vars = herd_slurm::Vars::from_env();
        let gres = herd_slurm::Gpus::from_vars(&vars)
            .ok()
            .and_then(|g| g.on_node);
        let mut folders = vec![("log folder", cfg.log_dir.path().to_owned())];
        if let Some(dir) = &cfg.launch.checkpoint_dir {
            folders.push(("checkpoint folder", dir.clone()));
        }
        Node {
            argv: cfg.argv.clone(),
            path: std::env::var_os("PATH"),
            gpus: cfg.launch.node_gpus.clone(),
            gres,
            folders,
            host: cfg
                .node_names
                .get(cfg.node_rank as usize)
                .cloned()
                .unwrap_or_else(|| format!("node-{}", cfg.node_rank)),
            master,
            ifnames: herd_slurm::allocation::net::IFNAME_VARS
                .into_iter()
                .filter_map(|var| Some((var, vars.get(var)?.to_owned())))
                .collect(),
            container: cfg.container.clone(),
        }
    }

    /// Run every check at once: the time they took, or the first finding by [`CHECKS`].
    pub(crate) async fn check(&self) -> Result<Duration, Finding> {
        let start = Instant::now();
        let port = async {
            match &self.master {
                Some((addr, port)) => check_port(addr, *port).await,
                None => Ok(()),
            }
        };
        let command = async {
            match &self.container {
                Some(c) => {
                    // CUDA inside is asked when SLURM gave GPUs and the node has NVIDIA's
                    // driver (its `nvidia-smi`), as the `gpus` check asks on the host.
                    let gpus = if self.gpus.is_empty() {
                        None
                    } else {
                        let path = self.path.clone();
                        blocking("container", "the PATH search for nvidia-smi", move || {
                            resolve(OsStr::new("nvidia-smi"), path.as_deref()).is_ok()
                        })
                        .await?
                        .then_some(self.gpus.as_slice())
                    };
                    let probe = match self.argv.first() {
                        Some(p) if is_python(&p.to_string_lossy()) => {
                            let (options, module, _) = python_args(&self.argv[1..]);
                            container::Probe::Python { options, module }
                        }
                        _ => container::Probe::Other,
                    };
                    container::check_container(
                        c,
                        &self.argv,
                        probe,
                        CHECK_TIMEOUT * 2,
                        MIN_SHM,
                        gpus,
                    )
                    .await
                    .map_err(|e| Finding::new("container", e))
                }
                None => check_command(&self.argv, self.path.as_deref()).await,
            }
        };
        let (command, gpus, folders, port) = tokio::join!(
            command,
            check_gpus(&self.gpus, self.gres, self.path.as_deref()),
            check_folders(&self.folders, &self.host, MIN_FREE),
            port,
        );
        let network = check_network(&self.ifnames);
        let mut findings: Vec<Finding> = [command, gpus, folders, network, port]
            .into_iter()
            .filter_map(Result::err)
            .collect();
        findings.sort_by_key(|f| CHECKS.iter().position(|c| *c == f.check));
        match findings.into_iter().next() {
            Some(f) => Err(f),
            None => Ok(start.elapsed()),
        }
    }
}

/// Every interface the user named for the collectives exists here
/// ([`herd_slurm::allocation::net::check_ifname`]); nothing named: nothing to check (herd
/// picks the interface on the route to the master).
fn check_network(ifnames: &[(&'static str, String)]) -> Result<(), Finding> {
    use herd_slurm::allocation::net;
    if ifnames.is_empty() {
        return Ok(());
    }
    let have = net::interfaces().map(|i| net::names(&i)).map_err(|e| {
        Finding::new(
            "network",
            format!("cannot list this node's interfaces: {e}"),
        )
    })?;
    for (var, value) in ifnames {
        net::check_ifname(var, value, &have).map_err(|e| Finding::new("network", e))?;
    }
    Ok(())
}

/// `f` started on a thread of its own; its answer comes on the receiver. The thread is
/// never joined: one stuck on a hung mount is left to finish, or to hang, by itself.
fn on_thread<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<tokio::sync::oneshot::Receiver<T>> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("herd-preflight".into())
        .spawn(move || {
            let _ = tx.send(f());
        })?;
    Ok(rx)
}

/// The answer of a thread started with [`on_thread`] (or why there is none) by
/// `deadline`, as a finding of `check` about `what` when there is none.
async fn answer<T>(
    check: &'static str,
    what: impl fmt::Display,
    started: std::io::Result<tokio::sync::oneshot::Receiver<T>>,
    deadline: tokio::time::Instant,
) -> Result<T, Finding> {
    let rx = started.map_err(|e| {
        Finding::new(
            check,
            format!("cannot start a thread to check {what} ({e}): the node is out of resources"),
        )
    })?;
    match tokio::time::timeout_at(deadline, rx).await {
        Ok(Ok(v)) => Ok(v),
        // The thread panicked, or did not answer in time.
        Ok(Err(_)) | Err(_) => Err(Finding::new(
            check,
            format!(
                "{what} did not answer within {} s: a file system hangs or the node is overloaded",
                CHECK_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// `f` on a thread of its own, its answer awaited at most [`CHECK_TIMEOUT`].
async fn blocking<T: Send + 'static>(
    check: &'static str,
    what: impl fmt::Display,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Finding> {
    let deadline = tokio::time::Instant::now() + CHECK_TIMEOUT;
    answer(check, what, on_thread(f), deadline).await
}

// ---------------------------------------------------------------------------------------
// python, command

/// What the worker command runs, as far as the preflight checks it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Program {
    /// A Python interpreter: its path, the name the command gives it (`python3`, or a
    /// path), the options of the command that change where it finds modules, the module
    /// `-m` runs.
    Python {
        interpreter: PathBuf,
        named: OsString,
        options: Vec<OsString>,
        module: Option<String>,
    },
    /// Any other program, resolved.
    Other(PathBuf),
}

/// The `python` or `command` check of `argv`, with the workers' `path`.
async fn check_command(argv: &[OsString], path: Option<&OsStr>) -> Result<(), Finding> {
    let Some(program) = argv.first() else {
        return Err(Finding::new("command", "the worker command is empty"));
    };
    let check = if is_python(&program.to_string_lossy()) {
        "python"
    } else {
        "command"
    };
    let (argv_owned, path_owned) = (argv.to_vec(), path.map(OsStr::to_owned));
    let what = format!("finding `{}`", program.to_string_lossy());
    let program = blocking(check, what, move || {
        plan_command(&argv_owned, path_owned.as_deref())
    })
    .await??;
    match program {
        Program::Other(_) => Ok(()),
        Program::Python {
            interpreter,
            named,
            options,
            module,
        } => {
            let mut modules = vec!["torch".to_owned()];
            if let Some(top) = module.as_deref().and_then(|m| m.split('.').next()) {
                if !modules.iter().any(|m| m == top) {
                    modules.push(top.to_owned());
                }
            }
            find_modules(&interpreter, &options, &modules, path, &named).await
        }
    }
}

/// Run `interpreter` with `options` on [`FIND_MODULES`] for `modules`.
async fn find_modules(
    interpreter: &Path,
    options: &[OsString],
    modules: &[String],
    path: Option<&OsStr>,
    given: &OsStr,
) -> Result<(), Finding> {
    let shown = interpreter.display();
    let mut cmd =
        tokio::process::Command::from(herd_slurm::user_program(interpreter, &Default::default()));
    cmd.args(options)
        .arg("-c")
        .arg(FIND_MODULES)
        .args(modules)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    match path {
        Some(p) => cmd.env("PATH", p),
        None => cmd.env_remove("PATH"),
    };
    let out = match tokio::time::timeout(CHECK_TIMEOUT, cmd.output()).await {
        Err(_) => {
            return Err(Finding::new(
                "python",
                format!(
                    "{shown} did not answer within {} s when asked to find {}: the node is overloaded or a file system its environment is on hangs",
                    CHECK_TIMEOUT.as_secs(),
                    modules.join(", ")
                ),
            ))
        }
        Ok(Err(e)) => {
            return Err(Finding::new(
                "python",
                format!("{shown} cannot be started on this node ({e}): reinstall that environment or fix PATH on this node"),
            ))
        }
        Ok(Ok(out)) => out,
    };
    if out.status.success() {
        return Ok(());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(3) {
        if let Some((module, why)) = stdout.lines().next().and_then(|l| l.split_once('\t')) {
            let fix = if given.as_bytes().contains(&b'/') {
                format!("install {module} in that environment")
            } else {
                format!(
                    "install {module} in that environment, or fix PATH on this node so `{}` is the environment's python (or name it by its path: `-- /path/venv/bin/python …`)",
                    given.to_string_lossy()
                )
            };
            return Err(Finding::new(
                "python",
                format!("{shown} cannot import {module} ({why}): {fix}"),
            ));
        }
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    Err(Finding::new(
        "python",
        format!(
            "{shown} does not start on this node ({}: {}): its environment is broken here; reinstall it or fix PATH on this node",
            crate::exit::exit_of(out.status),
            last.trim()
        ),
    ))
}

/// What `argv` runs, checked as far as the file system tells: its program resolves and
/// may be executed; a Python's script can be read; a `#!` line's interpreter exists.
fn plan_command(argv: &[OsString], path: Option<&OsStr>) -> Result<Program, Finding> {
    let Some((program, args)) = argv.split_first() else {
        return Err(Finding::new("command", "the worker command is empty"));
    };
    let python = is_python(&program.to_string_lossy());
    let check = if python { "python" } else { "command" };
    let resolved = resolve(program, path).map_err(|e| Finding::new(check, e))?;
    if python {
        let (options, module, script) = python_args(args);
        if let Some(script) = &script {
            readable(script)?;
        }
        return Ok(Program::Python {
            interpreter: resolved,
            named: program.clone(),
            options,
            module,
        });
    }
    let Some(line) = shebang(&resolved) else {
        return Ok(Program::Other(resolved));
    };
    let shown = program.to_string_lossy();
    let mut words = line.split_ascii_whitespace();
    let Some(interpreter) = words.next() else {
        return Ok(Program::Other(resolved));
    };
    let rest: Vec<&str> = words.collect();
    // `#!/usr/bin/env [-S] [VAR=value…] NAME ARGS…`: NAME is looked for on PATH.
    let (name, args): (&str, &[&str]) =
        if Path::new(interpreter).file_name() == Some(OsStr::new("env")) {
            match rest
                .iter()
                .position(|w| !w.starts_with('-') && !w.contains('='))
            {
                Some(i) => (rest[i], &rest[i + 1..]),
                None => (interpreter, &[]),
            }
        } else {
            (interpreter, &rest[..])
        };
    let interp = resolve(OsStr::new(name), path).map_err(|e| {
        Finding::new(
            if is_python(name) { "python" } else { "command" },
            format!("`{shown}` starts with `#!{line}`, and {e}"),
        )
    })?;
    if !is_python(name) {
        return Ok(Program::Other(resolved));
    }
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let (options, _, _) = python_args(&args);
    Ok(Program::Python {
        interpreter: interp,
        named: OsString::from(name),
        options,
        module: None,
    })
}

/// The `#!` line of `file` (without `#!`), when it has one.
fn shebang(file: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let text = std::str::from_utf8(&line[..end]).ok()?.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// A Python command's arguments after the interpreter: the options that change where it
/// finds modules (`-E`, `-I`, `-s`, `-S`, `-P`, which the check is run with too), the module
/// of `-m`, the script. As Python reads them: options cluster (`-uS`), `-c`, `-m`, `-W`
/// and `-X` take the rest of the cluster or the next argument, and the first other
/// argument is the script (`-` is standard input: none).
fn python_args(args: &[OsString]) -> (Vec<OsString>, Option<String>, Option<PathBuf>) {
    let mut options = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let bytes = arg.as_bytes();
        if bytes == b"--" {
            let script = it.next().filter(|s| s.as_bytes() != b"-");
            return (options, None, script.map(PathBuf::from));
        }
        if let Some(long) = bytes.strip_prefix(b"--") {
            // `--check-hash-based-pycs MODE` takes a value; `--help`, `--version` end it.
            if long == b"check-hash-based-pycs" {
                it.next();
                continue;
            }
            return (options, None, None);
        }
        let Some(cluster) = bytes.strip_prefix(b"-").filter(|c| !c.is_empty()) else {
            let script = (bytes != b"-").then(|| PathBuf::from(arg));
            return (options, None, script);
        };
        for (i, &c) in cluster.iter().enumerate() {
            match c {
                b'c' | b'm' | b'W' | b'X' => {
                    let rest = &cluster[i + 1..];
                    let value = if rest.is_empty() {
                        it.next().map(|v| v.to_string_lossy().into_owned())
                    } else {
                        Some(String::from_utf8_lossy(rest).into_owned())
                    };
                    match c {
                        b'c' => return (options, None, None),
                        b'm' => return (options, value, None),
                        _ => break,
                    }
                }
                b'E' | b'I' | b's' | b'S' | b'P' => {
                    options.push(OsString::from(format!("-{}", char::from(c))))
                }
                _ => {}
            }
        }
    }
    (options, None, None)
}

/// `script` can be opened for reading here.
fn readable(script: &Path) -> Result<(), Finding> {
    std::fs::File::open(script).map(drop).map_err(|e| {
        let cwd = std::env::current_dir()
            .map(|d| format!(" (in {})", d.display()))
            .unwrap_or_default();
        let cwd = if script.is_absolute() { String::new() } else { cwd };
        Finding::new(
            "python",
            format!(
                "the script {}{cwd} cannot be read on this node ({e}): the job's code must be on a file system every node mounts",
                script.display()
            ),
        )
    })
}

/// `program` as the OS finds it to execute it: a name with a `/` as it is (from the
/// working folder), any other in the folders of `path` (an empty entry is the working
/// folder; no PATH: `/bin:/usr/bin`), the first that is a file this user may execute.
pub(crate) fn resolve(program: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, String> {
    let shown = program.to_string_lossy();
    if program.as_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return match executable(&p) {
            Ok(()) => Ok(p),
            Err(why) => Err(format!("`{shown}` {why}")),
        };
    }
    let path = path.unwrap_or(OsStr::new("/bin:/usr/bin"));
    let mut not_executable = None;
    for dir in std::env::split_paths(path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(why) if candidate.exists() && not_executable.is_none() => {
                not_executable = Some(format!("{} {why}", candidate.display()));
            }
            Err(_) => {}
        }
    }
    Err(match not_executable {
        Some(found) => format!(
            "`{shown}` is found on PATH only as {found}: make it executable (chmod +x) or fix PATH on this node"
        ),
        None => format!(
            "`{shown}` is not on PATH on this node (searched {}): install it here, or name it by its path",
            path.to_string_lossy()
        ),
    })
}

/// Why `file` cannot be executed by this user, if it cannot.
fn executable(file: &Path) -> Result<(), &'static str> {
    match std::fs::metadata(file) {
        Err(_) => Err("does not exist on this node (or is a link to nothing)"),
        Ok(m) if !m.is_file() => Err("is not a file"),
        Ok(_) => nix::unistd::access(file, nix::unistd::AccessFlags::X_OK)
            .map_err(|_| "may not be executed (no execute permission)"),
    }
}

// ---------------------------------------------------------------------------------------
// gpus

/// One device `nvidia-smi -L` lists: a GPU's index, and its UUID or a MIG device's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    index: Option<String>,
    uuid: Option<String>,
}

/// The devices in `nvidia-smi -L`'s output: `GPU 0: NAME (UUID: GPU-…)` lines and their
/// `  MIG … Device 0: (UUID: MIG-…)` lines.
fn listed(out: &str) -> Vec<Listed> {
    out.lines()
        .filter_map(|line| {
            let line = line.trim();
            let uuid = line
                .split_once("(UUID: ")
                .and_then(|(_, u)| u.split(')').next())
                .map(|u| u.trim().to_owned());
            let index = line
                .strip_prefix("GPU ")
                .and_then(|r| r.split_once(':'))
                .map(|(i, _)| i.trim().to_owned())
                .filter(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
            (index.is_some() || uuid.is_some()).then_some(Listed { index, uuid })
        })
        .collect()
}

/// Whether `id` (an entry of `CUDA_VISIBLE_DEVICES`) is among `devices`: an index by its
/// number, a UUID (`GPU-…`, `MIG-…`) by it or a prefix of it, as CUDA takes them. An
/// entry of another form is not judged.
fn is_listed(id: &str, devices: &[Listed]) -> bool {
    use herd_exp::gpus::names_gpu;
    if names_gpu(id, None, None).is_none() {
        return true;
    }
    devices.iter().any(|d| {
        let index = d.index.as_deref().and_then(|i| i.parse().ok());
        names_gpu(id, index, d.uuid.as_deref()) == Some(true)
    })
}

/// The `gpus` check: `gpus` (`CUDA_VISIBLE_DEVICES`) as many as `gres`
/// (`SLURM_GPUS_ON_NODE`) says, and each listed by `nvidia-smi -L` when it is on `path`.
async fn check_gpus(
    gpus: &[String],
    gres: Option<u32>,
    path: Option<&OsStr>,
) -> Result<(), Finding> {
    let given = gres.filter(|&n| n > 0);
    if gpus.is_empty() && given.is_none() {
        return Ok(());
    }
    let visible = if gpus.is_empty() {
        "CUDA_VISIBLE_DEVICES names none".to_owned()
    } else {
        format!("CUDA_VISIBLE_DEVICES={}", gpus.join(","))
    };
    if let Some(n) = given.filter(|&n| n as usize != gpus.len()) {
        let names = if gpus.is_empty() {
            visible
        } else {
            format!(
                "{visible} names {}",
                crate::words::count(gpus.len() as u64, "GPU")
            )
        };
        return Err(Finding::new(
            "gpus",
            format!("SLURM gave this node {n} GPUs (SLURM_GPUS_ON_NODE={n}) but {names}: its GPUs are not bound as SLURM says (check the node's gres.conf and the job's --gres)"),
        ));
    }
    let path_owned = path.map(OsStr::to_owned);
    let smi = blocking("gpus", "the PATH search for nvidia-smi", move || {
        resolve(OsStr::new("nvidia-smi"), path_owned.as_deref()).ok()
    })
    .await?;
    let Some(smi) = smi else {
        return Ok(());
    };
    let run = tokio::process::Command::from(herd_slurm::user_program(&smi, &Default::default()))
        .arg("-L")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(CHECK_TIMEOUT, run).await {
        Err(_) => {
            return Err(Finding::new(
                "gpus",
                format!(
                    "`{} -L` did not answer within {} s: the GPU driver hangs on this node; leave the node out and tell its admins",
                    smi.display(),
                    CHECK_TIMEOUT.as_secs()
                ),
            ))
        }
        Ok(Err(e)) => {
            return Err(Finding::new(
                "gpus",
                format!("cannot run `{} -L` ({e})", smi.display()),
            ))
        }
        Ok(Ok(out)) => out,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let said = said
            .lines()
            .chain(stdout.lines())
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output")
            .trim()
            .to_owned();
        return Err(Finding::new(
            "gpus",
            format!(
                "`{} -L` failed on this node ({}: {said}): the GPU driver does not answer; leave the node out and tell its admins",
                smi.display(),
                crate::exit::exit_of(out.status)
            ),
        ));
    }
    let devices = listed(&stdout);
    if let Some(missing) = gpus.iter().find(|id| !is_listed(id, &devices)) {
        let shown: Vec<String> = devices
            .iter()
            .filter_map(|d| d.index.clone().or_else(|| d.uuid.clone()))
            .collect();
        let lists = if shown.is_empty() {
            "none".to_owned()
        } else {
            shown.join(", ")
        };
        return Err(Finding::new(
            "gpus",
            format!(
                "{visible}, but `nvidia-smi -L` does not list GPU {missing} on this node (it lists {lists}): the GPU is lost or its driver does not see it; leave the node out and tell its admins"
            ),
        ));
    }
    gpu_health::check(&smi, gpus, CHECK_TIMEOUT)
        .await
        .map_err(|why| Finding::new("gpus", why))
}

// ---------------------------------------------------------------------------------------
// folders

/// The `folders` check: each folder can be created, written and has `min_free` bytes free.
/// All are checked at once, each on a thread of its own.
async fn check_folders(
    folders: &[(&'static str, PathBuf)],
    host: &str,
    min_free: u64,
) -> Result<(), Finding> {
    let probe = format!(".herd-preflight-{host}-{}", std::process::id());
    let deadline = tokio::time::Instant::now() + CHECK_TIMEOUT;
    let started: Vec<_> = folders
        .iter()
        .map(|(what, dir)| {
            let (what, dir, probe) = (*what, dir.clone(), probe.clone());
            on_thread(move || check_folder(what, &dir, &probe, min_free))
        })
        .collect();
    for ((what, dir), started) in folders.iter().zip(started) {
        let shown = format!("the {what} {}", dir.display());
        answer("folders", shown, started, deadline)
            .await?
            .map_err(|detail| Finding::new("folders", detail))?;
    }
    Ok(())
}

/// One folder: created if missing, a file `probe` written in it and removed, `min_free`
/// bytes available to this user.
fn check_folder(what: &str, dir: &Path, probe: &str, min_free: u64) -> Result<(), String> {
    let shown = dir.display();
    let elsewhere = match what {
        "log folder" => "--log-dir",
        _ => "HERD_CHECKPOINT_DIR",
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        format!("cannot create the {what} {shown} on this node ({e}): make it writable here or point {elsewhere} elsewhere")
    })?;
    let file = dir.join(probe);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut f| f.write_all(b"herd preflight\n"));
    let removed = std::fs::remove_file(&file);
    if let Err(e) = written {
        return Err(format!(
            "cannot write in the {what} {shown} on this node ({e}): make it writable here or point {elsewhere} elsewhere"
        ));
    }
    if let Err(e) = removed {
        return Err(format!(
            "cannot remove a file from the {what} {shown} on this node ({e}): make it writable here or point {elsewhere} elsewhere"
        ));
    }
    let stat = nix::sys::statvfs::statvfs(dir).map_err(|e| {
        format!("cannot read the free space of the {what} {shown} on this node ({e})")
    })?;
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    if free < min_free {
        return Err(format!(
            "the {what} {shown} has {} free on this node, below the {} herd asks for: free space there (`df -h {shown}`) or point {elsewhere} elsewhere",
            size(free),
            size(min_free)
        ));
    }
    Ok(())
}

/// `bytes` for a message: `512 MiB`, `3.2 GiB`.
fn size(bytes: u64) -> String {
    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    let b = bytes as f64;
    if b >= GIB {
        let g = b / GIB;
        if g.fract() == 0.0 {
            format!("{g:.0} GiB")
        } else {
            format!("{g:.1} GiB")
        }
    } else {
        format!("{:.0} MiB", (b / MIB).floor())
    }
}

/// The `port` check: `addr:port` accepts a connection from this node within
/// [`CHECK_TIMEOUT`]; the connection is closed at once.
async fn check_port(addr: &str, port: u16) -> Result<(), Finding> {
    port::check_port(addr, port, CHECK_TIMEOUT)
        .await
        .map_err(|detail| Finding::new("port", detail))
}

/// Bind a free port on all interfaces of `master_addr`'s family (IPv4 unless it is an IPv6
/// address) and hold it open while the agents check it answers from their nodes.
pub(crate) async fn hold_port(master_addr: &str) -> std::io::Result<HeldPort> {
    port::hold_port(master_addr, CHECK_TIMEOUT).await
}

#[cfg(test)]
mod tests;
