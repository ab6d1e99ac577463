//! Podman: one container per node per attempt, every worker of the node `podman exec`'d
//! into it.
//!
//! The container (`podman run -d`) keeps the host's PID, IPC, network and UTS namespaces
//! (`--pid host --ipc host --network host --uts host`): the workers' pids are host pids
//! (the agent signals Python itself, py-spy reads it from the host), `/dev/shm` is the
//! host's (never Podman's 64 MB default), NCCL and gloo see the node's interfaces and the
//! workers its host name. Its main process is a guard: a shell that waits on a FIFO the agent holds open. When the agent dies however
//! it dies (SIGKILL, a node freeze ended by SLURM), the FIFO reaches end of file and the
//! guard kills every process of its container's cgroup, so no worker outlives its agent
//! even where SLURM does not track the processes Podman starts. At the end of each attempt
//! the agent's teardown ends every process it started (Podman's `conmon` re-parents to the
//! agent, a child subreaper) and removes the container; the next attempt starts a fresh
//! one. When the agent ends after a successful attempt, its container's guard ends with
//! the FIFO, and Podman's own cleanup (`--rm`) removes it.
//!
//! Each worker is `podman exec --workdir CWD [--env NAME]… CONTAINER /bin/sh -c
//! 'echo $$ > "$0" && exec "$@"' PIDFILE ARGV…`: the shell writes its pid, a host pid, and
//! execs the worker in place, so the pid file holds Python's own pid. `podman exec` exits
//! with the worker's code, or 128 + N when signal N killed it, which is all Podman tells.
//! The variables are passed by name (`--env NAME`, the value taken from `podman exec`'s own
//! environment), never on the command line where `ps` would show them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::mounts::own_path_binds;
use crate::Mount;

/// The guard, the container's main process: wait until the agent is gone (its end of the
/// FIFO `$0` closes), then kill every other process of this container's cgroup. The pid
/// namespace is the host's, so `/proc` lists every process of the node; the ones whose
/// `/proc/PID/cgroup` reads as the guard's own are this container's. A container that
/// has no cgroup of its own (`libpod-ID`: rootless Podman on cgroup v1, `--cgroups
/// disabled`) shares its cgroup with others: then the guard kills nothing.
pub(crate) const GUARD: &str = "read -r _ < \"$0\"; \
me=$(cat /proc/self/cgroup); \
case \"$me\" in *libpod-*) ;; *) exit 0 ;; esac; \
for p in /proc/[0-9]*; do \
pid=${p#/proc/}; \
[ \"$pid\" = \"$$\" ] && continue; \
[ \"$(cat \"$p/cgroup\" 2>/dev/null)\" = \"$me\" ] && kill -9 \"$pid\" 2>/dev/null; \
done; rm -rf \"${0%/*}\"; exit 0";

/// The worker's wrapper: its pid into the file `$0`, then the worker in its place.
pub(crate) const PID_WRAPPER: &str = "echo $$ > \"$0\" && exec \"$@\"";

/// [`PID_WRAPPER`] with `env`: the arguments start with `NAME=VALUE`s set on the worker.
pub(crate) const PID_WRAPPER_ENV: &str = "echo $$ > \"$0\" && exec env \"$@\"";

/// The image Podman runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Image {
    /// A name in the node's image store (`localhost/torch:24.05`, `nvcr.io/nvidia/pytorch:…`).
    Name(String),
    /// An unpacked root folder, run with `--rootfs DIR:O` (an overlay: the folder itself is
    /// never written).
    Rootfs(PathBuf),
}

/// Whether the node's GPUs go into the container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gpus {
    /// No GPU allocated, or no NVIDIA driver on the node.
    None,
    /// Through the node's CDI spec: `--device nvidia.com/gpu=all` (SLURM's
    /// `CUDA_VISIBLE_DEVICES` then picks each worker's).
    Cdi,
}

/// One container instance: its name, its main process (the guard) and the host folders
/// it binds at their own paths.
#[derive(Debug)]
struct Instance {
    name: String,
    guard_pid: i32,
    binds: Vec<PathBuf>,
}

impl Instance {
    /// Whether its guard still runs (a teardown ends it with the attempt's processes).
    fn alive(&self) -> bool {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.guard_pid));
        stat.is_ok_and(|s| {
            s.rsplit_once(')')
                .and_then(|(_, t)| t.split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X")
        })
    }

    /// Whether `p` is inside one of its binds.
    fn shows(&self, p: &Path) -> bool {
        self.binds.iter().any(|b| p.starts_with(b))
    }
}

/// Podman ready on one node: the image found, the image's own variables read, the guard's
/// FIFO held open; container instances made as the attempts need them.
#[derive(Debug)]
pub(crate) struct Podman {
    program: PathBuf,
    image: Image,
    image_env: Vec<(String, String)>,
    gpus: Gpus,
    /// Names this agent's containers (`herd-TAG-N`).
    tag: String,
    /// This agent's folder: the FIFO and the workers' pid files, bound inside.
    dir: PathBuf,
    fifo: PathBuf,
    /// The agent's end of the guard's FIFO, held for its life.
    _fifo_end: std::fs::File,
    instances: Mutex<Vec<Instance>>,
    counter: AtomicU32,
}

impl Podman {
    /// `image` ready for `program` (podman on this node); `tag` is unique per agent.
    pub(crate) fn start(
        program: &Path,
        image: Image,
        tag: &str,
        gpus: Gpus,
    ) -> Result<Podman, String> {
        let image_env = match &image {
            Image::Name(name) => image_env(program, name)?,
            Image::Rootfs(_) => Vec::new(),
        };
        // Leftovers of agents killed on this node before: removed beside the job's start,
        // never in its way.
        let prune = program.to_owned();
        std::thread::spawn(move || {
            remove_ended_herd_containers(&prune);
            remove_abandoned_folders(&std::env::temp_dir());
        });
        let dir = std::env::temp_dir().join(format!("herd-podman-{tag}"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let fifo = dir.join("guard");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU)
            .map_err(|e| format!("cannot make the FIFO {}: {e}", fifo.display()))?;
        // Read and write: opening never blocks, and the guard's read sees end of file
        // exactly when this process (the only writer) is gone.
        let fifo_end = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&fifo)
            .map_err(|e| format!("cannot open the FIFO {}: {e}", fifo.display()))?;
        Ok(Podman {
            program: program.to_owned(),
            image,
            image_env,
            gpus,
            tag: tag.to_owned(),
            dir,
            fifo,
            _fifo_end: fifo_end,
            instances: Mutex::new(Vec::new()),
            counter: AtomicU32::new(0),
        })
    }

    /// The image's own variables (its `ENV`), in order.
    pub(crate) fn image_env(&self) -> &[(String, String)] {
        &self.image_env
    }

    /// Remove the containers whose guard has ended (an attempt's teardown ends every
    /// process the agent started, the guard with them): Podman's record of each and its
    /// writable layer, which its own cleanup never got to.
    pub(crate) fn release_ended(&self) {
        let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        let (alive, ended): (Vec<Instance>, Vec<Instance>) =
            instances.drain(..).partition(Instance::alive);
        *instances = alive;
        drop(instances);
        for i in ended {
            remove(&self.program, &i.name);
        }
    }

    /// The running container that shows every folder of `wanted`, started when there is
    /// none (the first worker or preflight of an attempt: the last attempt's teardown ended
    /// the one before). Its name.
    fn instance(&self, wanted: &[PathBuf], mounts: &[Mount]) -> Result<String, String> {
        self.release_ended();
        let mut instances = self.instances.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = instances.iter().find(|i| wanted.iter().all(|p| i.shows(p))) {
            return Ok(i.name.clone());
        }
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let name = format!("herd-{}-{n}", self.tag);
        let binds = own_path_binds(wanted, &self.dir);
        let pid_file = self.dir.join(format!("{name}.pid"));
        let args = run_args(
            &name,
            &pid_file,
            &self.image,
            &binds,
            mounts,
            self.gpus,
            nix::unistd::geteuid().is_root(),
            &self.fifo,
        );
        let out = podman(&self.program)
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
        if !out.status.success() {
            remove(&self.program, &name);
            return Err(run_failed(&String::from_utf8_lossy(&out.stderr)));
        }
        let guard_pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or_else(|| {
                remove(&self.program, &name);
                format!(
                    "podman started the container {name} but wrote no pid to {}",
                    pid_file.display()
                )
            })?;
        instances.push(Instance {
            name: name.clone(),
            guard_pid,
            binds,
        });
        Ok(name)
    }

    /// `podman exec`'s arguments for `argv` in `cwd` with `env_names` passed from its own
    /// environment, the folders `need` and `mounts` inside; and the file that will hold the
    /// worker's pid.
    pub(crate) fn args(
        &self,
        argv: &[OsString],
        env_names: &[String],
        cwd: &Path,
        need: &[PathBuf],
        mounts: &[Mount],
    ) -> Result<(Vec<OsString>, PathBuf), String> {
        let mut wanted: Vec<PathBuf> = need.to_vec();
        wanted.push(cwd.to_owned());
        let name = self.instance(&wanted, mounts)?;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let pid_file = self.dir.join(format!("worker-{n}.pid"));
        Ok((exec_args(&name, cwd, env_names, &pid_file, argv), pid_file))
    }
}

impl Drop for Podman {
    /// The agent ends: an ended container is removed now; a running one ends as soon as
    /// the FIFO closes with this drop (its guard kills what is left in it and exits, and
    /// Podman's own cleanup removes it, `--rm`), without the agent waiting for Podman.
    fn drop(&mut self) {
        let instances = self.instances.get_mut().unwrap_or_else(|e| e.into_inner());
        for i in instances.drain(..).filter(|i| !i.alive()) {
            remove(&self.program, &i.name);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Remove the containers an earlier agent of herd's left ended on this node: one killed
/// before it could remove its own (SLURM ends a lost node's agent with SIGKILL), whose
/// guard then ended the workers. A container herd made (`herd-…`) is never started again,
/// so an ended one is only a record and a writable layer.
fn remove_ended_herd_containers(program: &Path) {
    let Ok(out) = podman(program)
        .args([
            "ps",
            "--all",
            "--filter",
            "name=^herd-",
            "--filter",
            "status=exited",
            "--format",
            "{{.Names}}",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    for name in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        remove(program, name);
    }
}

/// Remove the folders (`herd-podman-TAG`, a TAG ending in its agent's pid) of agents
/// killed before they could remove their own, under `tmp`.
pub(crate) fn remove_abandoned_folders(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(tag) = name.strip_prefix("herd-podman-") else {
            continue;
        };
        let agent_gone = tag
            .rsplit_once('-')
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
            .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists());
        if agent_gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Podman's own command (`image inspect`, `run`, `ps`, `rm`).
fn podman(program: &Path) -> Command {
    without_withheld(Command::new(program))
}

/// `cmd` with the agent's environment less what no program but herd's own gets
/// ([`crate::WITHHELD`]): how the runtimes' own commands start.
pub(crate) fn without_withheld(mut cmd: Command) -> Command {
    for var in crate::WITHHELD {
        cmd.env_remove(var);
    }
    cmd
}

/// `podman rm -f -t 0 NAME`: ends whatever of it still runs and forgets it.
fn remove(program: &Path, name: &str) {
    let _ = podman(program)
        .args(["rm", "--force", "--time", "0", "--ignore", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The image's `ENV` from the node's store (`podman image inspect`), or what to change.
fn image_env(program: &Path, name: &str) -> Result<Vec<(String, String)>, String> {
    let out = podman(program)
        .args([
            "image",
            "inspect",
            "--format",
            "{{range .Config.Env}}{{println .}}{{end}}",
            name,
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "the image {name} is not in this node's podman store ({}): `podman pull {name}` \
             (or `podman load`) on every node first; herd never pulls during a job",
            last_line(&String::from_utf8_lossy(&out.stderr))
        ));
    }
    Ok(parse_env_lines(&String::from_utf8_lossy(&out.stdout)))
}

/// `NAME=VALUE` lines as pairs.
pub(crate) fn parse_env_lines(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output")
        .trim()
}

/// What to say when `podman run` failed with `stderr`, with the fix for the failures
/// seen on clusters.
fn run_failed(stderr: &str) -> String {
    let last = last_line(stderr);
    let fix = if last.contains("rlimit") {
        "; this node cannot raise the limits Podman asks for: set `default_ulimits` \
         (nofile, nproc) in containers.conf to at most the node's hard limits"
    } else if last.contains("nvidia.com/gpu") || last.contains("CDI") {
        "; generate the node's CDI spec: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"
    } else if last.contains("crun") || last.contains("cgroup") {
        "; name an OCI runtime that works on this node in containers.conf (`runtime = \"runc\"`)"
    } else {
        ""
    };
    format!("podman could not start the container: {last}{fix}")
}

/// `podman run`'s arguments for the instance `name`: detached and removed when it ends,
/// the host's PID, IPC and network namespaces, never a pull, no log file, the user's own
/// ids when Podman runs rootless (`--userns keep-id`: files in the experiment folder are
/// the user's), the GPUs by CDI, the binds at their own paths and the user's mounts, then
/// the image and the guard.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_args(
    name: &str,
    pid_file: &Path,
    image: &Image,
    binds: &[PathBuf],
    mounts: &[Mount],
    gpus: Gpus,
    root: bool,
    fifo: &Path,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = ["run", "--detach", "--rm", "--name", name, "--pidfile"]
        .map(OsString::from)
        .to_vec();
    a.push(pid_file.as_os_str().to_owned());
    a.extend(
        [
            "--pid",
            "host",
            "--ipc",
            "host",
            "--network",
            "host",
            "--uts",
            "host",
            "--pull",
            "never",
            "--log-driver",
            "none",
        ]
        .map(OsString::from),
    );
    if !root {
        a.extend(["--userns", "keep-id"].map(OsString::from));
    }
    if gpus == Gpus::Cdi {
        a.extend(["--device", "nvidia.com/gpu=all"].map(OsString::from));
    }
    for b in binds {
        a.push("--volume".into());
        a.push(format!("{}:{}", b.display(), b.display()).into());
    }
    for m in mounts {
        a.push("--volume".into());
        let ro = if m.read_only { ":ro" } else { "" };
        a.push(format!("{}:{}{ro}", m.src.display(), m.dst.display()).into());
    }
    match image {
        Image::Name(n) => a.push(n.into()),
        Image::Rootfs(dir) => {
            a.push("--rootfs".into());
            a.push(format!("{}:O", dir.display()).into());
        }
    }
    a.extend(["/bin/sh", "-c", GUARD].map(OsString::from));
    a.push(fifo.as_os_str().to_owned());
    a
}

/// `podman exec`'s arguments for `argv` in container `name`, in `cwd`, with `env_names`
/// passed by name, through [`PID_WRAPPER`] writing `pid_file`.
pub(crate) fn exec_args(
    name: &str,
    cwd: &Path,
    env_names: &[String],
    pid_file: &Path,
    argv: &[OsString],
) -> Vec<OsString> {
    let mut a: Vec<OsString> = vec!["exec".into(), "--workdir".into(), cwd.into()];
    for n in env_names {
        a.push("--env".into());
        a.push(n.into());
    }
    a.push(name.into());
    a.extend(["/bin/sh", "-c", PID_WRAPPER].map(OsString::from));
    a.push(pid_file.as_os_str().to_owned());
    a.extend(argv.iter().cloned());
    a
}

/// Whether the node has a CDI spec for NVIDIA GPUs (what `--device nvidia.com/gpu=all`
/// needs), in the folders Podman reads them from.
pub(crate) fn has_nvidia_cdi() -> bool {
    ["/etc/cdi", "/var/run/cdi"].iter().any(|d| {
        std::fs::read_dir(d).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("nvidia.com/gpu"))
            })
        })
    })
}
