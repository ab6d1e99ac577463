//! The preflight's `container` check (a job with `--container`): the image is ready on
//! this node, the runtime starts it, and inside, the worker's program is there (a Python
//! finds `torch` and its `-m` module) and `/dev/shm` is large enough.

use std::ffi::OsString;
use std::time::Duration;

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

/// For a command that is not Python: its program is found inside (exit 4 when it
/// is not), then the size of `/dev/shm`.
const PROBE_SHELL: &str = "command -v \"$0\" >/dev/null 2>&1 || exit 4; \
printf 'shm\\t%s\\n' \"$(($(stat -f -c '%S * %b' /dev/shm)))\"";

/// The `container` check: the image is ready here, the runtime starts it, and inside the
/// worker's program (`argv[0]`, run as `probe` says) is found (a Python finds `torch` and
/// its `-m` module) and `/dev/shm` has at least `min_shm` bytes; each process waits at
/// most `timeout`. What is wrong and what to change, when something is.
pub(super) async fn check_container(
    container: &ContainerState,
    argv: &[OsString],
    probe: Probe,
    timeout: Duration,
    min_shm: u64,
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
        let mut p = vec![program.clone()];
        p.extend(options);
        p.extend(["-c".into(), format!("{FIND_MODULES}{SHM_SIZE}").into()]);
        p.extend(modules.into_iter().map(OsString::from));
        p
    } else {
        vec![
            "/bin/sh".into(),
            "-c".into(),
            PROBE_SHELL.into(),
            program.clone(),
        ]
    };
    let wrapped = crate::workers::container_command(container, &probe, &Default::default())?;
    let mut cmd =
        tokio::process::Command::from(herd_slurm::user_program(&wrapped.program, &wrapped.env));
    cmd.args(&wrapped.args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(timeout, cmd.output()).await {
        Err(_) => {
            return Err(finding(format!(
                    "{runtime} did not start the image {image} within {} s: the node is overloaded or the file system the image is on hangs",
                    timeout.as_secs()
                ),
            ))
        }
        Ok(Err(e)) => {
            return Err(finding(format!(
                    "{} cannot be started on this node ({e}): reinstall {runtime} here",
                    wrapped.program.display()
                ),
            ))
        }
        Ok(Ok(out)) => out,
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        let shm = stdout
            .lines()
            .find_map(|l| l.strip_prefix("shm\t"))
            .and_then(|n| n.trim().parse::<u64>().ok());
        return match shm {
            Some(bytes) if bytes < min_shm => Err(finding(format!(
                    "/dev/shm inside the image has {} MiB, less than the {} MiB NCCL and DataLoader workers need: give this node a larger /dev/shm (`mount -o remount,size=8G /dev/shm`)",
                    bytes >> 20,
                    min_shm >> 20
                ),
            )),
            _ => Ok(()),
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

/// A finding's text.
fn finding(text: impl Into<String>) -> String {
    text.into()
}
