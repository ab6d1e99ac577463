//! Charliecloud: `ch-run [-b SRC:DST]… -c CWD ROOT -- CMD…`.
//!
//! ch-run enters a mount namespace of its own and execs the command in place: the worker
//! keeps ch-run's pid, its exit code and signal are its own, and the host's PID, IPC and
//! network namespaces, `/dev` (GPUs, `/dev/shm`), `/proc`, `/sys` and `/tmp` are the
//! worker's. It passes the environment through unchanged; the image's own variables are
//! in its `/ch/environment`, which herd reads and applies under its own
//! ([`crate::worker_env`]), never with `--set-env` (that would let the image's win).
//!
//! A SquashFS image is mounted once per node with `squashfuse` (kept in the foreground as
//! a child of the agent, which ends it and so unmounts) and run as the folder it gives,
//! so every worker still execs in place: ch-run's own SquashFS mode forks a FUSE parent
//! between the agent and Python, which loses Python's signal and exit code.
//!
//! ch-run cannot create mount points in a read-only image: each folder the job needs is
//! bound at its own path when the image has that path, else its deepest ancestor the image
//! has is bound (e.g. all of `/home` for `/home/alice/proj`), never a system folder.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::mounts::{is_system, outermost};
use crate::{find_program, ImageKind, Mount};

/// How long squashfuse may take to mount an image.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(20);

/// A Charliecloud image ready to run: its root folder and its own variables.
#[derive(Debug)]
pub(crate) struct Ready {
    /// The image as the user gave it (what messages name).
    image: PathBuf,
    /// The folder ch-run runs: the image itself, or where its SquashFS file is mounted.
    root: PathBuf,
    image_env: Vec<(String, String)>,
    /// Held for its drop, which unmounts.
    _mount: Option<SquashMount>,
}

impl Ready {
    /// `image` of `kind` made ready; `path` is the node's PATH (for squashfuse), `tag` the
    /// mount folder's name.
    pub(crate) fn start(
        image: &Path,
        kind: ImageKind,
        path: Option<&OsStr>,
        tag: &str,
    ) -> Result<Ready, String> {
        let (root, mount) = match kind {
            ImageKind::Directory => (image.to_owned(), None),
            ImageKind::SquashFs => {
                let m = SquashMount::start(image, path, tag)?;
                (m.dir.clone(), Some(m))
            }
            ImageKind::Sif => {
                return Err(format!(
                    "{} is a SIF file, which Charliecloud cannot run: use --container-runtime \
                     apptainer, or convert it to a folder or SquashFS file",
                    image.display()
                ))
            }
        };
        if !root.join("bin").exists() && !root.join("usr/bin").exists() {
            return Err(format!(
                "{} holds no root file system (no bin/ nor usr/bin/): give the image's top folder",
                image.display()
            ));
        }
        let image_env = read_environment(&root.join("ch/environment"));
        Ok(Ready {
            image: image.to_owned(),
            root,
            image_env,
            _mount: mount,
        })
    }

    /// The image's own variables (`/ch/environment`), in order.
    pub(crate) fn image_env(&self) -> &[(String, String)] {
        &self.image_env
    }

    /// ch-run's arguments for `argv` in `cwd` with the folders `need` and `mounts`.
    pub(crate) fn args(
        &self,
        argv: &[OsString],
        cwd: &Path,
        need: &[PathBuf],
        mounts: &[Mount],
    ) -> Result<Vec<OsString>, String> {
        let mut wanted: Vec<PathBuf> = need.to_vec();
        wanted.push(cwd.to_owned());
        let mut binds = Vec::new();
        for p in outermost(&wanted) {
            if let Some(b) = self.bind_for(&p)? {
                binds.push(b);
            }
        }
        let mut args: Vec<OsString> = Vec::new();
        for b in outermost(&binds) {
            args.push("-b".into());
            args.push(format!("{}:{}", b.display(), b.display()).into());
        }
        for m in mounts {
            if m.read_only {
                return Err(format!(
                    "container mount `{m}`: Charliecloud's binds cannot be read-only; drop `:ro`"
                ));
            }
            if !self.in_image(&m.dst) {
                return Err(format!(
                    "container mount `{m}`: the image {} has no {}; create it in the image or \
                     mount at a folder it has (/mnt/0 … /mnt/9 in Charliecloud's images)",
                    self.image.display(),
                    m.dst.display()
                ));
            }
            args.push("-b".into());
            args.push(format!("{}:{}", m.src.display(), m.dst.display()).into());
        }
        args.push("-c".into());
        args.push(cwd.as_os_str().to_owned());
        args.push(self.root.as_os_str().to_owned());
        args.push("--".into());
        args.extend(argv.iter().cloned());
        Ok(args)
    }

    /// Whether `p` (absolute) is a folder inside the image.
    fn in_image(&self, p: &Path) -> bool {
        let rel = p.strip_prefix("/").unwrap_or(p);
        // Each step must be a real folder of the image: a link would be followed on the
        // host, not inside.
        let mut at = self.root.clone();
        for c in rel.components() {
            at.push(c);
            match std::fs::symlink_metadata(&at) {
                Ok(m) if m.is_dir() => {}
                _ => return false,
            }
        }
        true
    }

    /// The host folder to bind (at its own path) so that `p` is seen inside, or `None`
    /// when ch-run shows it already (`/tmp`).
    fn bind_for(&self, p: &Path) -> Result<Option<PathBuf>, String> {
        if p.starts_with("/tmp") {
            return Ok(None);
        }
        let mut q = p.to_owned();
        while !self.in_image(&q) {
            if !q.pop() {
                break;
            }
        }
        if q == p {
            return Ok(Some(q));
        }
        let first_missing = p
            .components()
            .take(q.components().count() + 1)
            .collect::<PathBuf>();
        if q.as_os_str() == "/" || is_system(&q) {
            return Err(format!(
                "the image {} has no {} for {}: make that folder in the image (for a folder \
                 image: `mkdir -p {}{}`), or keep the job's folders under one the image has \
                 (/home, /mnt, /tmp)",
                self.image.display(),
                first_missing.display(),
                p.display(),
                self.image.display(),
                first_missing.display()
            ));
        }
        Ok(Some(q))
    }
}

/// `/ch/environment`'s `NAME=VALUE` lines (none when there is no such file).
fn read_environment(file: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            let k = k.trim();
            (!k.is_empty()).then(|| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// A SquashFS image mounted by `squashfuse -f`, a child of this process that dies with it
/// (parent-death signal) and so unmounts even when the agent is killed.
#[derive(Debug)]
struct SquashMount {
    dir: PathBuf,
    child: Child,
}

impl SquashMount {
    fn start(image: &Path, path: Option<&OsStr>, tag: &str) -> Result<SquashMount, String> {
        let program = find_program(&["squashfuse_ll", "squashfuse"], path).ok_or_else(|| {
            format!(
                "{} is a SquashFS file and squashfuse is not on this node's PATH: install \
                 squashfuse, or give the image as a folder",
                image.display()
            )
        })?;
        let dir = std::env::temp_dir().join(format!("herd-image-{tag}"));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot make the mount folder {}: {e}", dir.display()))?;
        let mut cmd = std::process::Command::new(&program);
        // squashfuse needs nothing of the agent's environment (which holds the job's secret).
        cmd.env_clear()
            .arg("-f")
            .arg(image)
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let parent = std::process::id() as i32;
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (prctl, getppid, _exit through nix wrappers that allocate nothing).
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)?;
                if nix::unistd::getppid().as_raw() != parent {
                    nix::libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let mut m = SquashMount { dir, child };
        let start = Instant::now();
        loop {
            if m.mounted() {
                return Ok(m);
            }
            if let Ok(Some(status)) = m.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = m.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!(
                    "squashfuse could not mount {} ({status}): {}",
                    image.display(),
                    err.trim()
                ));
            }
            if start.elapsed() > MOUNT_TIMEOUT {
                return Err(format!(
                    "squashfuse did not mount {} within {} s",
                    image.display(),
                    MOUNT_TIMEOUT.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether something is mounted at the folder (its device differs from its parent's).
    fn mounted(&self) -> bool {
        let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
        match (dev(&self.dir), self.dir.parent().and_then(dev)) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        }
    }
}

impl Drop for SquashMount {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self.mounted() {
            // squashfuse died without unmounting: a lazy unmount frees the folder.
            for (program, args) in [("fusermount3", ["-uz"]), ("fusermount", ["-uz"])] {
                let ok = std::process::Command::new(program)
                    .env_clear()
                    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                    .args(args)
                    .arg(&self.dir)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if ok {
                    break;
                }
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
