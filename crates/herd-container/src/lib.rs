//! Training in containers (docs/containers.md): what the user asks for ([`Spec`]: an image,
//! a runtime, extra mounts), which runtime a node has ([`detect`]), and on each node the
//! image made ready once ([`Container::start`]) and each worker's command line inside it
//! ([`Container::wrap`]).
//!
//! What holds for every runtime:
//! - herd's own binary never runs inside the image: the agent stays on the host (where
//!   `scontrol`, py-spy and the node's tools are) and starts each worker through the
//!   runtime, which execs the worker's own program, so the worker's pid, exit code and
//!   signal are Python's, never a wrapper's.
//! - Workers keep the host's PID, IPC and network namespaces: intra-node collectives,
//!   `/dev/shm`, signals and host-side stack dumps work as on bare metal.
//! - The worker's environment ([`worker_env`]): the host's, then the image's own (its
//!   `ENV`: `PATH` and the like must be the image's), then herd's variables, which always
//!   win (an image's `RANK=…` or `MASTER_ADDR=…` never reaches the worker), and
//!   `PYTHONNOUSERSITE=1` unless the job sets it (a home folder's `~/.local` packages never
//!   shadow the image's).
//! - The folders the job uses (its working folder, the experiment, log and checkpoint
//!   folders) are at the same paths inside ([`Container::wrap`]'s `need`), and so are the
//!   user's `container_mounts`.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

mod charliecloud;
mod mounts;
mod podman;
mod pyxis;

pub use mounts::{Mount, Mounts};

/// The variables no program but herd's own gets (`herd_slurm::worker::vars::WITHHELD`,
/// which herd-agent checks this against): the runtimes' own commands run without them.
pub const WITHHELD: [&str; 1] = ["HERD_JOB_SECRET"];

/// The container runtimes herd starts workers with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// Charliecloud's `ch-run`: a directory image, or a SquashFS file herd mounts with
    /// `squashfuse` once per node.
    Charliecloud,
    /// Podman: one `podman run` per node per attempt, each worker `podman exec`'d into it;
    /// the image is a name in the node's store, or a root folder (`--rootfs`).
    Podman,
    /// `apptainer exec` (or `singularity exec`).
    Apptainer,
    /// Pyxis, enroot's SLURM plugin: each worker a job step of its own, `srun --overlap
    /// --container-image` (not run in herd's CI).
    Pyxis,
}

impl Runtime {
    /// Every runtime, in the order [`detect`] prefers them.
    pub const ALL: [Runtime; 4] = [
        Runtime::Charliecloud,
        Runtime::Apptainer,
        Runtime::Podman,
        Runtime::Pyxis,
    ];

    /// The name the job key and flag take.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Charliecloud => "charliecloud",
            Runtime::Podman => "podman",
            Runtime::Apptainer => "apptainer",
            Runtime::Pyxis => "pyxis",
        }
    }

    /// The programs that tell it is there, in the order looked for on PATH (Pyxis: enroot;
    /// it starts workers with srun).
    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Runtime::Charliecloud => &["ch-run"],
            Runtime::Podman => &["podman"],
            Runtime::Apptainer => &["apptainer", "singularity"],
            Runtime::Pyxis => &["enroot"],
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Runtime {
    type Err = String;

    fn from_str(s: &str) -> Result<Runtime, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "charliecloud" | "ch-run" => Ok(Runtime::Charliecloud),
            "podman" => Ok(Runtime::Podman),
            "apptainer" | "singularity" => Ok(Runtime::Apptainer),
            "pyxis" | "enroot" => Ok(Runtime::Pyxis),
            other => Err(format!(
                "unknown container runtime `{other}`: choose charliecloud, podman, apptainer or pyxis"
            )),
        }
    }
}

/// What the user asked for: `--container IMAGE`, `--container-runtime`,
/// `--container-mounts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The image: the absolute path of a directory, a SquashFS file or a SIF file, or the
    /// name of an image in Podman's store.
    pub image: String,
    /// The runtime; `None`: the first of [`Runtime::ALL`] the node has.
    pub runtime: Option<Runtime>,
    /// Host folders mounted inside beside the job's own.
    pub mounts: Vec<Mount>,
}

/// What an image is, by what is at its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// A folder holding an unpacked root (Charliecloud's directory image).
    Directory,
    /// A SquashFS file (`.sqfs`, `.squashfs`, enroot's `.sqsh`, or its magic).
    SquashFs,
    /// An Apptainer/Singularity image file.
    Sif,
}

impl ImageKind {
    /// What `image` is, or why it is none that herd can run.
    pub fn of(image: &Path) -> Result<ImageKind, String> {
        let meta = std::fs::metadata(image).map_err(|e| {
            format!(
                "the container image {} cannot be read here: {e}; give the path of an image \
                 folder or file that every node sees",
                image.display()
            )
        })?;
        if meta.is_dir() {
            return Ok(ImageKind::Directory);
        }
        let mut magic = [0u8; 4];
        let read = std::fs::File::open(image)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
            .map_err(|e| format!("cannot read the container image {}: {e}", image.display()));
        let ext = image
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if read.is_ok() && &magic == b"hsqs" {
            return Ok(ImageKind::SquashFs);
        }
        if ext == "sif" || ext == "simg" {
            return Ok(ImageKind::Sif);
        }
        read?;
        Err(format!(
            "the container image {} is neither a folder, a SquashFS file nor a SIF file",
            image.display()
        ))
    }
}

/// `image` as `--container` takes it: an absolute path (the workers start in another
/// folder, on every node), or the name of an image in Podman's store
/// (`localhost/torch:24.05`, `nvcr.io/nvidia/pytorch:24.05-py3`); or what to change.
pub fn image_ref(image: &str) -> Result<(), String> {
    if image.starts_with('/') {
        return Ok(());
    }
    let path_like = image.starts_with('.')
        || image.starts_with('~')
        || [".sqfs", ".squashfs", ".sqsh", ".sif", ".simg"]
            .iter()
            .any(|e| image.to_ascii_lowercase().ends_with(e));
    let name_chars = !image.is_empty()
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:@#".contains(c));
    if path_like || !name_chars {
        return Err(format!(
            "`{image}` is not an absolute path: give the image as /path/to/image, at the same \
             path on every node (or, for podman or pyxis, the name of an image)"
        ));
    }
    Ok(())
}

/// Whether `image` names an image in Podman's store rather than a path.
pub fn is_image_name(image: &str) -> bool {
    !image.starts_with('/')
}

/// The runtime `spec` asks for that can run its image: a name is Podman's (an image in its
/// store) or Pyxis' (an enroot URI), Podman when not said; `None` when any may be
/// detected.
pub fn runtime_for(image: &str, runtime: Option<Runtime>) -> Result<Option<Runtime>, String> {
    if !is_image_name(image) {
        return Ok(runtime);
    }
    match runtime {
        None | Some(Runtime::Podman) => Ok(Some(Runtime::Podman)),
        Some(Runtime::Pyxis) => Ok(Some(Runtime::Pyxis)),
        Some(other) => Err(format!(
            "{other} runs an image folder or file, and `{image}` is an image name: give the \
             image's absolute path, or --container-runtime podman (or pyxis)"
        )),
    }
}

/// What a node's agent knows that a runtime may need.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Node {
    /// The job has GPUs on this node.
    pub gpus: bool,
    /// The SLURM job the agent runs in (its own id, for `srun --jobid`); `None` outside
    /// SLURM (`herd run`).
    pub job_id: Option<u64>,
    /// This node's name as SLURM knows it (`SLURMD_NODENAME`).
    pub host: Option<String>,
    /// The CPUs each worker may use.
    pub cpus_per_worker: Option<u32>,
}

/// The first program of `names` on `path` (a PATH value) that is an executable file.
pub fn find_program(names: &[&str], path: Option<&OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = path?;
    names.iter().find_map(|name| {
        std::env::split_paths(path)
            .filter(|dir| dir.is_absolute())
            .map(|dir| dir.join(name))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    })
}

/// The runtime a node with `path` (its PATH) has: the first of [`Runtime::ALL`] whose
/// program is there.
pub fn detect(path: Option<&OsStr>) -> Result<Runtime, String> {
    Runtime::ALL
        .into_iter()
        .find(|r| find_program(r.programs(), path).is_some())
        .ok_or_else(|| {
            "no container runtime here: neither ch-run (Charliecloud), apptainer, podman nor \
             enroot (Pyxis) is on PATH; install one, or name the runtime with \
             --container-runtime"
                .to_owned()
        })
}

/// A worker's environment inside the image, set on top of the host's: the image's own
/// variables, then herd's (`herd_env`, which win), then `PYTHONNOUSERSITE=1` unless the
/// host's environment (`host_has`) or herd's sets it.
pub fn worker_env(
    image_env: &[(String, String)],
    herd_env: &BTreeMap<String, String>,
    host_has: impl Fn(&str) -> bool,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = image_env.iter().cloned().collect();
    env.extend(herd_env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if !host_has("PYTHONNOUSERSITE") && !herd_env.contains_key("PYTHONNOUSERSITE") {
        env.insert("PYTHONNOUSERSITE".into(), "1".into());
    }
    env
}

/// A worker's command line through the runtime: the program to start (an absolute path),
/// its arguments, and the environment to set on top of the host's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    /// The runtime's program, found on the host's PATH.
    pub program: PathBuf,
    /// Its arguments: the runtime's options, the image, then the worker's own command.
    pub args: Vec<OsString>,
    /// Set on top of the host's environment.
    pub env: BTreeMap<String, String>,
    /// Where the worker's own pid will be written, when the runtime's program is not the
    /// worker itself (Podman: `podman exec` starts it in a container of its own); `None`:
    /// the program execs the worker in place and keeps its pid.
    pub pid_file: Option<PathBuf>,
    /// The program exits 128 + N when signal N killed the worker (Podman), instead of
    /// dying of that signal itself.
    pub signal_as_code: bool,
}

/// The image made ready on one node: found, mounted when it is a SquashFS file, its own
/// environment read. Dropping it unmounts what it mounted.
#[derive(Debug)]
pub struct Container {
    runtime: Runtime,
    image: PathBuf,
    program: PathBuf,
    mounts: Vec<Mount>,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Charliecloud(charliecloud::Ready),
    Apptainer,
    Podman(podman::Podman),
    Pyxis(pyxis::Pyxis),
}

impl Container {
    /// `spec`'s image made ready on this node, whose PATH is `path`; `tag` names what it
    /// mounts (unique per agent); `node` is what the agent knows of the node. Says what to
    /// change when the runtime or the image is not usable here.
    pub fn start(
        spec: &Spec,
        path: Option<&OsStr>,
        tag: &str,
        node: &Node,
    ) -> Result<Container, String> {
        let gpus = node.gpus;
        image_ref(&spec.image)?;
        let runtime = match runtime_for(&spec.image, spec.runtime)? {
            Some(r) => r,
            None => detect(path)?,
        };
        let program = find_program(runtime.programs(), path).ok_or_else(|| {
            format!(
                "container runtime {runtime}: `{}` is not on this node's PATH; install it or \
                 choose another with --container-runtime",
                runtime.programs().join("` or `")
            )
        })?;
        let image = PathBuf::from(&spec.image);
        let inner = match runtime {
            Runtime::Charliecloud => Inner::Charliecloud(charliecloud::Ready::start(
                &image,
                ImageKind::of(&image)?,
                path,
                tag,
            )?),
            Runtime::Apptainer => {
                ImageKind::of(&image)?;
                Inner::Apptainer
            }
            Runtime::Podman => {
                let what = if is_image_name(&spec.image) {
                    podman::Image::Name(spec.image.clone())
                } else {
                    match ImageKind::of(&image)? {
                        ImageKind::Directory => podman::Image::Rootfs(image.clone()),
                        _ => {
                            return Err(format!(
                                "podman runs a root folder or an image in its store, not the \
                                 file {}: give the folder, load the image into the store \
                                 (`podman load`, `podman import`), or use charliecloud or \
                                 apptainer",
                                image.display()
                            ))
                        }
                    }
                };
                let gpus = if !gpus {
                    podman::Gpus::None
                } else if podman::has_nvidia_cdi() {
                    podman::Gpus::Cdi
                } else if find_program(&["nvidia-smi"], path).is_some() {
                    return Err(
                        "this node has NVIDIA GPUs but no CDI spec for them, which podman needs \
                         to put them in the container: generate it with `nvidia-ctk cdi \
                         generate --output=/etc/cdi/nvidia.yaml`"
                            .to_owned(),
                    );
                } else {
                    // GPUs SLURM hands out, but no NVIDIA driver here: nothing to put in.
                    podman::Gpus::None
                };
                Inner::Podman(podman::Podman::start(&program, what, tag, gpus)?)
            }
            Runtime::Pyxis => {
                if !is_image_name(&spec.image) && ImageKind::of(&image)? != ImageKind::SquashFs {
                    return Err(format!(
                        "pyxis runs a SquashFS file (enroot's .sqsh) or an image name \
                         (`nvcr.io#nvidia/pytorch:24.05-py3`), not {}",
                        image.display()
                    ));
                }
                let srun = find_program(&["srun"], path)
                    .ok_or_else(|| "pyxis: `srun` is not on this node's PATH".to_owned())?;
                Inner::Pyxis(pyxis::Pyxis::start(
                    &srun,
                    &spec.image,
                    tag,
                    node.job_id,
                    node.host.as_deref(),
                    node.cpus_per_worker,
                )?)
            }
        };
        Ok(Container {
            runtime,
            image,
            program,
            mounts: spec.mounts.clone(),
            inner,
        })
    }

    /// After an attempt's teardown: forget what the runtime made for it and what ended
    /// with it (Podman: remove its container). Blocks while the runtime does so.
    pub fn release_ended(&self) {
        if let Inner::Podman(p) = &self.inner {
            p.release_ended();
        }
    }

    /// The runtime in use.
    pub fn runtime(&self) -> Runtime {
        self.runtime
    }

    /// The image as given.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// `argv` started inside the image in folder `cwd`, with herd's variables `herd_env`
    /// winning over the image's, the host folders `need` at the same paths inside, and the
    /// user's mounts. `host_has` says whether the host's environment sets a variable.
    pub fn wrap(
        &self,
        argv: &[OsString],
        herd_env: &BTreeMap<String, String>,
        host_has: impl Fn(&str) -> bool,
        cwd: &Path,
        need: &[PathBuf],
    ) -> Result<Wrapped, String> {
        let mounts = &self.mounts;
        match &self.inner {
            Inner::Charliecloud(ready) => {
                let mut env = worker_env(ready.image_env(), herd_env, &host_has);
                if !host_has("USER") && !env.contains_key("USER") {
                    // ch-run refuses to start without $USER.
                    if let Ok(Some(user)) = nix::unistd::User::from_uid(nix::unistd::getuid()) {
                        env.insert("USER".into(), user.name);
                    }
                }
                Ok(Wrapped {
                    program: self.program.clone(),
                    args: ready.args(argv, cwd, need, mounts)?,
                    env,
                    pid_file: None,
                    signal_as_code: false,
                })
            }
            Inner::Podman(podman) => {
                // The image's variables are the container's already; podman exec gets, by
                // name, the host's that the image does not set, then herd's.
                let image_sets: std::collections::BTreeSet<&str> =
                    podman.image_env().iter().map(|(k, _)| k.as_str()).collect();
                let env = worker_env(&[], herd_env, &host_has);
                let mut names: Vec<String> = std::env::vars_os()
                    .filter_map(|(k, _)| k.into_string().ok())
                    .filter(|k| {
                        host_has(k) && !image_sets.contains(k.as_str()) && !env.contains_key(k)
                    })
                    .filter(|k| !PODMAN_OWN.contains(&k.as_str()))
                    .collect();
                names.extend(env.keys().cloned());
                let (args, pid_file) = podman.args(argv, &names, cwd, need, mounts)?;
                Ok(Wrapped {
                    program: self.program.clone(),
                    args,
                    env,
                    pid_file: Some(pid_file),
                    signal_as_code: true,
                })
            }
            Inner::Pyxis(pyxis) => {
                // herd's variables go on `env`'s command line inside, set after Pyxis and
                // slurmstepd set theirs; srun itself runs in the agent's environment.
                let env = worker_env(&[], herd_env, &host_has);
                let (args, pid_file) = pyxis.args(argv, &env, cwd, need, mounts)?;
                Ok(Wrapped {
                    program: pyxis.program().to_owned(),
                    args,
                    env: BTreeMap::new(),
                    pid_file: Some(pid_file),
                    signal_as_code: true,
                })
            }
            Inner::Apptainer => Ok(apptainer(
                &self.program,
                &self.image,
                argv,
                herd_env,
                &host_has,
                cwd,
                need,
                mounts,
            )),
        }
    }
}

/// `apptainer exec` of `argv` in `image`: `--nv` when the worker sees GPUs
/// (`CUDA_VISIBLE_DEVICES` set and not empty), `--bind` of each needed folder at its own
/// path and of the user's mounts (Apptainer makes the mount points), `--pwd` the worker's
/// folder. Apptainer has no PID namespace without `--containall` (never given: it would
/// also drop the environment and give a small private `/dev/shm`). herd's variables and
/// `PYTHONNOUSERSITE` are passed as `APPTAINERENV_NAME`, which wins over the image's own
/// `%environment`.
#[allow(clippy::too_many_arguments)]
fn apptainer(
    program: &Path,
    image: &Path,
    argv: &[OsString],
    herd_env: &BTreeMap<String, String>,
    host_has: &impl Fn(&str) -> bool,
    cwd: &Path,
    need: &[PathBuf],
    mounts: &[Mount],
) -> Wrapped {
    let mut args: Vec<OsString> = vec!["exec".into()];
    if herd_env
        .get("CUDA_VISIBLE_DEVICES")
        .is_some_and(|v| !v.trim().is_empty())
    {
        args.push("--nv".into());
    }
    let mut binds: Vec<String> = mounts::outermost(need)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    binds.extend(mounts.iter().map(Mount::to_string));
    if !binds.is_empty() {
        args.push("--bind".into());
        args.push(binds.join(",").into());
    }
    args.push("--pwd".into());
    args.push(cwd.as_os_str().to_owned());
    args.push(image.as_os_str().to_owned());
    args.extend(argv.iter().cloned());
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in worker_env(&[], herd_env, host_has) {
        env.insert(format!("APPTAINERENV_{k}"), v.clone());
        env.insert(k, v);
    }
    Wrapped {
        program: program.to_owned(),
        args,
        env,
        pid_file: None,
        signal_as_code: false,
    }
}

/// Host variables never passed into a Podman container: Podman's own, and those that
/// describe the host's shell rather than the job.
const PODMAN_OWN: [&str; 5] = [
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "HOSTNAME",
    "container",
];

#[cfg(test)]
mod tests;
