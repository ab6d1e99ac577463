//! The preflight's `container` check (a job with `--container`): the image is ready on
//! this node, the runtime starts it, and inside, the worker's program is there (a Python
//! finds `torch` and its `-m` module), `/dev/shm` is large enough, and CUDA sees the GPUs
//! SLURM gave the node.

use std::ffi::OsString;
use std::time::Duration;

use herd_container::Runtime;

use super::find_modules::FIND_MODULES;
use crate::config::ContainerState;

/// What the worker command runs, as the check needs it: a Python with its options that
/// change where it finds modules and the module `-m` runs, or another program.
pub(super) enum Probe {
    /// A Python: its options, and the module `-m` runs.
    Python {
        /// `-E`, `-I`, `-s`, `-S`, `-P` as given.
        options: Vec<OsString>,
        /// The module `-m` runs.
        module: Option<String>,
    },
    /// Any other program.
    Other,
}

/// What the `container` check adds to [`FIND_MODULES`] inside the image: a line
/// `shm<tab>BYTES`, the size of `/dev/shm` there.
const SHM_SIZE: &str = "import os\n\
s = os.statvfs('/dev/shm')\n\
print('shm\\t%d' % (s.f_frsize * s.f_blocks))\n";

/// What the `container` check adds when the node's GPUs are checked: a line
/// `gpus<tab>N`, the GPUs CUDA's driver library sees inside with the workers'
/// `CUDA_VISIBLE_DEVICES` (what `torch.cuda.device_count()` will say), or
/// `gpus<tab>nolib<tab>WHY` when the image has no `libcuda.so.1`, or
/// `gpus<tab>error<tab>CODE<tab>NAME` when `cuInit` fails. Through `ctypes`, never torch:
/// no import of seconds, no CUDA context (`cuInit` makes none), nothing left on the GPU.
pub(super) const CUDA_COUNT: &str = "def _herd_gpus():\n    \
import ctypes\n    \
try:\n        \
cu = ctypes.CDLL('libcuda.so.1')\n    \
except OSError as e:\n        \
return 'nolib\\t%s' % e\n    \
n = ctypes.c_int(0)\n    \
r = cu.cuInit(0)\n    \
if r == 0:\n        \
r = cu.cuDeviceGetCount(ctypes.byref(n))\n    \
if r == 0:\n        \
return '%d' % n.value\n    \
name = ctypes.c_char_p()\n    \
cu.cuGetErrorName(r, ctypes.byref(name))\n    \
return 'error\\t%d\\t%s' % (r, (name.value or b'unknown').decode('ascii', 'replace'))\n\
try:\n    \
print('gpus\\t' + _herd_gpus())\n\
except Exception as e:\n    \
print('gpus\\terror\\t-1\\t%s: %s' % (type(e).__name__, e))\n";

/// For a command that is not Python: its program is found inside (exit 4 when it
/// is not), then the size of `/dev/shm`, then, when the GPUs are checked, [`CUDA_COUNT`]
/// (given as `$1`) with the image's `python3`, where it has one.
const PROBE_SHELL: &str = "command -v \"$0\" >/dev/null 2>&1 || exit 4; \
printf 'shm\\t%s\\n' \"$(($(stat -f -c '%S * %b' /dev/shm)))\"; \
[ -z \"$1\" ] || ! command -v python3 >/dev/null 2>&1 || python3 -c \"$1\" || true";

/// The `container` check: the image is ready here, the runtime starts it, and inside the
/// worker's program (`argv[0]`, run as `probe` says) is found (a Python finds `torch` and
/// its `-m` module), `/dev/shm` has at least `min_shm` bytes and, when `gpus` names the
/// GPUs SLURM gave the node (its `CUDA_VISIBLE_DEVICES`), CUDA sees all of them; each
/// process waits at most `timeout`. What is wrong and what to change, when something is.
pub(super) async fn check_container(
    container: &ContainerState,
    argv: &[OsString],
    probe: Probe,
    timeout: Duration,
    min_shm: u64,
    gpus: Option<&[String]>,
) -> Result<(), String> {
    let (image, runtime) = match container {
        ContainerState::Failed { image, why } => {
            return Err(finding(format!(
                "the image {image} cannot run on this node: {why}"
            )))
        }
        ContainerState::Ready(c) => (c.image().display().to_string(), c.runtime()),
    };
    let Some(program) = argv.first() else {
        return Err(finding("the worker command is empty"));
    };
    let shown = program.to_string_lossy().into_owned();
    let python = matches!(probe, Probe::Python { .. });
    let probe: Vec<OsString> = if let Probe::Python { options, module } = probe {
        let mut modules = vec!["torch".to_owned()];
        if let Some(top) = module.as_deref().and_then(|m| m.split('.').next()) {
            if top != "torch" {
                modules.push(top.to_owned());
            }
        }
        let cuda = if gpus.is_some() { CUDA_COUNT } else { "" };
        let mut p = vec![program.clone()];
        p.extend(options);
        p.extend([
            "-c".into(),
            format!("{FIND_MODULES}{SHM_SIZE}{cuda}").into(),
        ]);
        p.extend(modules.into_iter().map(OsString::from));
        p
    } else {
        let mut p = vec![
            "/bin/sh".into(),
            "-c".into(),
            PROBE_SHELL.into(),
            program.clone(),
        ];
        if gpus.is_some() {
            p.push(CUDA_COUNT.into());
        }
        p
    };
    // The workers' CUDA_VISIBLE_DEVICES, which CUDA's count honours as theirs will.
    let env: std::collections::BTreeMap<String, String> = gpus
        .map(|g| ("CUDA_VISIBLE_DEVICES".to_owned(), g.join(",")))
        .into_iter()
        .collect();
    // Podman starts the attempt's container here (`podman run`, about a second): off the
    // agent's thread, which keeps its links and heartbeats going meanwhile.
    let (c, p) = (container.clone(), probe.clone());
    let wrapped =
        tokio::task::spawn_blocking(move || crate::workers::container_command(&c, &p, &env))
            .await
            .map_err(|e| finding(format!("the container's start panicked: {e}")))??;
    let mut cmd =
        tokio::process::Command::from(herd_slurm::user_program(&wrapped.program, &wrapped.env));
    cmd.args(&wrapped.args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(timeout, cmd.output()).await {
        Err(_) => {
            let or_gpu = if gpus.is_some() {
                ", or its GPU driver hangs"
            } else {
                ""
            };
            return Err(finding(format!(
                    "{runtime} did not start the image {image} within {} s: the node is overloaded or the file system the image is on hangs{or_gpu}",
                    timeout.as_secs()
                ),
            ));
        }
        Ok(Err(e)) => {
            return Err(finding(format!(
                "{} cannot be started on this node ({e}): reinstall {runtime} here",
                wrapped.program.display()
            )))
        }
        Ok(Ok(out)) => out,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        let shm = stdout
            .lines()
            .find_map(|l| l.strip_prefix("shm\t"))
            .and_then(|n| n.trim().parse::<u64>().ok());
        if let Some(bytes) = shm.filter(|&b| b < min_shm) {
            return Err(finding(format!(
                    "/dev/shm inside the image has {} MiB, less than the {} MiB NCCL and DataLoader workers need: give this node a larger /dev/shm (`mount -o remount,size=8G /dev/shm`)",
                    bytes >> 20,
                    min_shm >> 20
                ),
            ));
        }
        return match gpus {
            Some(gpus) => match stdout.lines().find_map(|l| l.strip_prefix("gpus\t")) {
                Some(said) => gpus_inside(said, gpus, runtime, &image),
                // The image has no python3 to ask CUDA with: nothing more to tell.
                None => Ok(()),
            },
            None => Ok(()),
        };
    }
    match out.status.code() {
        Some(3) => {
            if let Some((module, why)) = stdout.lines().next().and_then(|l| l.split_once('\t')) {
                return Err(finding(format!(
                        "`{shown}` in the image {image} cannot import {module} ({why}): install {module} in the image, or give --container an image that has it"
                    ),
                ));
            }
        }
        Some(4) => {
            return Err(finding(format!(
                    "the image {image} has no `{shown}`: install it in the image, or name the program by its path inside"
                ),
            ))
        }
        // ch-run says `can't execve(2): NAME: No such file or directory` and exits 1.
        _ if python && String::from_utf8_lossy(&out.stderr).contains("can't execve") => {
            return Err(finding(format!(
                    "the image {image} has no `{shown}`: name its Python as the image has it (`python3`, or its path inside)"
                ),
            ))
        }
        Some(127) if python => {
            return Err(finding(format!(
                    "the image {image} has no `{shown}`: name its Python as the image has it (`python3`, or its path inside)"
                ),
            ))
        }
        _ => {}
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    Err(finding(format!(
        "{runtime} could not run `{shown}` in the image {image} on this node ({}: {})",
        crate::exit::exit_of(out.status),
        last.trim()
    )))
}

/// What the probe's [`CUDA_COUNT`] `said` inside the image means for a node whose workers
/// get `gpus` (`CUDA_VISIBLE_DEVICES`): nothing when CUDA sees every one, otherwise what is
/// wrong and what to change for `runtime`.
pub(super) fn gpus_inside(
    said: &str,
    gpus: &[String],
    runtime: Runtime,
    image: &str,
) -> Result<(), String> {
    let given = format!(
        "the {} SLURM gave this node (CUDA_VISIBLE_DEVICES={})",
        crate::words::count(gpus.len() as u64, "GPU"),
        gpus.join(",")
    );
    let mut parts = said.trim_end().split('\t');
    let seen = match parts.next() {
        Some("nolib") => {
            let why = parts.next().unwrap_or("not found");
            return Err(finding(format!(
                "the image {image} has no NVIDIA driver library ({why}), so its workers would see none of {given}: {}",
                gpu_fix(runtime, image, true)
            )));
        }
        // 100 is CUDA_ERROR_NO_DEVICE: no device node inside, or none of the visible ones.
        Some("error") if parts.clone().next() == Some("100") => 0,
        Some("error") => {
            let code = parts.next().unwrap_or("?");
            let name = parts.next().unwrap_or("unknown");
            let fix = match code {
                // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
                // the image's forward-compatibility libcuda against this node's driver.
                "803" | "804" => format!(
                    "the image's CUDA driver library does not match this node's driver; use the host's libraries ({}) or an image built for this driver",
                    gpu_fix(runtime, image, true)
                ),
                _ => format!(
                    "CUDA does not start there; check the node's driver with `nvidia-smi`, then {}",
                    gpu_fix(runtime, image, true)
                ),
            };
            return Err(finding(format!(
                "inside the image {image} CUDA failed to start ({name}, error {code}) for {given}: {fix}"
            )));
        }
        Some(n) => match n.parse::<usize>() {
            Ok(n) => n,
            Err(_) => return Ok(()),
        },
        None => return Ok(()),
    };
    if seen >= gpus.len() {
        return Ok(());
    }
    Err(finding(format!(
        "inside the image {image} CUDA sees {seen} of {given}: {}",
        gpu_fix(runtime, image, false)
    )))
}

/// How `runtime` puts a node's GPUs and the driver's libraries into the image `image`;
/// `lib` when what is missing is the driver's library, not devices.
fn gpu_fix(runtime: Runtime, image: &str, lib: bool) -> String {
    match runtime {
        Runtime::Charliecloud if lib => format!(
            "Charliecloud keeps the host's /dev but needs the driver's libraries in the image: `ch-fromhost --nvidia {image}` (for a SquashFS image, on its folder before `mksquashfs`)"
        ),
        Runtime::Charliecloud => "Charliecloud keeps the host's /dev, so this node shows fewer GPUs than SLURM gave: check its /dev/nvidia* and gres.conf, or leave the node out and tell its admins".to_owned(),
        Runtime::Apptainer => format!(
            "herd runs Apptainer with --nv, which binds the driver's libraries the node's nvliblist.conf lists: check that it lists libcuda.so and that `apptainer exec --nv {image} nvidia-smi -L` shows the GPUs"
        ),
        Runtime::Podman => "Podman puts GPUs in through the node's CDI spec (--device nvidia.com/gpu=all): regenerate it after a driver update with `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`".to_owned(),
        Runtime::Pyxis => "enroot puts GPUs in through its NVIDIA hook when the image sets NVIDIA_VISIBLE_DEVICES (NGC images do): set `ENV NVIDIA_VISIBLE_DEVICES=all` in the image, and check the node's enroot hooks and nvidia-container-cli".to_owned(),
    }
}

/// A finding's text.
fn finding(text: impl Into<String>) -> String {
    text.into()
}
