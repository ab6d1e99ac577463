//! The manifest (`manifest.json`) and the project's git state.

use std::ffi::OsString;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::text::LosslessText;
use crate::{io_error, Error};

/// The manifest format this crate writes; it refuses to change a manifest of a newer one.
/// Format 2 calls the submissions `submissions`; format 1 called them `attempts`, which
/// this crate still reads (and rewrites as format 2 when it changes such a manifest).
pub const MANIFEST_FORMAT: u32 = 2;

/// `manifest.json`: what was submitted, from where, and every submission.
///
/// Written when the experiment is created; afterwards only [`Submission`]s are appended,
/// each submission's job id is filled in once and its [`Run`]s appended
/// ([`crate::Experiment::add_submission`], [`crate::Experiment::record_run`],
/// [`crate::Experiment::record_job_id`]), every change a write to a temporary file and a
/// rename over the old one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`] when written.
    pub format: u32,
    /// The job name, also the experiment folder's name.
    pub name: String,
    /// When the experiment was created, seconds since the Unix epoch.
    pub created_unix: u64,
    /// The herd version that created it.
    pub herd_version: String,
    /// The command line that created it, every argument as given.
    pub argv: Vec<LosslessText>,
    /// The project the code snapshot was taken from.
    pub project: Project,
    /// What the code snapshot holds.
    pub snapshot: SnapshotSummary,
    /// The resolved job plan, as the plan crate gave it.
    pub plan: Value,
    /// Every submission (one sbatch, one job id), the first one made with the experiment,
    /// in order. Format 1 named them `attempts`.
    #[serde(alias = "attempts")]
    pub submissions: Vec<Submission>,
    /// Fields this version does not know (written by a newer herd), kept as they are.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// The project a snapshot was taken from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Project {
    /// The project root's canonical path.
    pub root: LosslessText,
    /// Its git state; `None` when the project is not in a git work tree.
    pub git: Option<GitState>,
}

/// The git state of the project when it was snapshotted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitState {
    /// `git rev-parse HEAD`; `None` in a repository without commits.
    pub commit: Option<String>,
    /// Whether `diff` is non-empty (tracked files differ from the commit).
    pub dirty: bool,
    /// `git diff HEAD`: the uncommitted changes to tracked files (untracked files are in the
    /// snapshot, not here); empty when clean, `None` without a commit.
    pub diff: Option<LosslessText>,
}

/// Counts of the code snapshot (`code/`), as [`crate::SnapshotReport`] gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotSummary {
    /// Regular files.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Files copied from the project.
    pub copied: u64,
    /// Files hard-linked from an earlier experiment's snapshot (unchanged since).
    pub linked: u64,
    /// That earlier experiment's name.
    pub linked_from: Option<String>,
    /// Sockets, FIFOs and devices left out, relative to the project root.
    pub skipped: Vec<LosslessText>,
    /// What herd wrote itself and the snapshot left out, relative to the project root, a
    /// folder's path ending in `/` ([`crate::SnapshotReport::herd_outputs`]); absent from
    /// manifests written before herd left these out, and when there was none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub herd_outputs: Vec<LosslessText>,
    /// The Python environments (venv, conda) the snapshot left out, relative to the project
    /// root ([`crate::SnapshotReport::python_envs`]); absent when there was none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_envs: Vec<LosslessText>,
}

/// One submission of the experiment: the first, or one `herd submit --resume`; one sbatch
/// and so one job id (a requeue keeps the id: same submission).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    /// 1 for the first submission, then 2, 3, …
    pub number: u32,
    /// When it was added, seconds since the Unix epoch.
    pub created_unix: u64,
    /// The herd version that added it.
    pub herd_version: String,
    /// Its command line, every argument as given.
    pub argv: Vec<LosslessText>,
    /// The scheduler's job id, once known; set once, never replaced.
    pub job_id: Option<String>,
    /// The Slurm release it was submitted to (`26.05.5`), as the cluster's `scontrol
    /// --version` said; `None` when it was not known or the manifest predates it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_version: Option<String>,
    /// Every attempt of its workers, in order: one per start inside an allocation (the
    /// first, each restart) and so one more per requeue; appended by the leader agent as
    /// each ends.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<Run>,
    /// Fields this version does not know (written by a newer herd), kept as they are.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Submission {
    pub(crate) fn new(number: u32, herd_version: &str, argv: &[OsString]) -> Submission {
        Submission {
            number,
            created_unix: unix_now(),
            herd_version: herd_version.to_owned(),
            argv: argv
                .iter()
                .map(|a| LosslessText::from(a.as_os_str()))
                .collect(),
            job_id: None,
            slurm_version: None,
            runs: Vec::new(),
            other: Map::new(),
        }
    }
}

/// One attempt: one start of a job's workers (a `logs/attempt-K` folder), as the leader
/// agent saw it end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    /// K of `logs/attempt-K`: counted over the whole experiment, from 0.
    pub attempt: u32,
    /// SLURM's requeue count of the job when it ran (`SLURM_RESTART_COUNT`).
    pub requeue: u32,
    /// The nodes it ran on.
    pub nodes: Vec<String>,
    /// When its workers started and when they were gone, seconds since the Unix epoch.
    pub started_unix: u64,
    /// See `started_unix`.
    pub ended_unix: u64,
    /// `None` when every worker exited 0; else why it ended: `time_limit`, `preemption`,
    /// `node_failure`, `worker_failure`, `hang` or `cancelled`.
    pub cause: Option<String>,
    /// What happened next: `restart`, `requeue` or `end`.
    pub then: String,
    /// The checkpoint it resumed from.
    pub resume_from: Option<String>,
    /// Fields this version does not know (written by a newer herd), kept as they are.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Reads and parses a manifest.
pub(crate) fn read(path: &Path) -> Result<Manifest, Error> {
    let bytes = fs::read(path).map_err(|e| io_error("cannot read", path, e))?;
    serde_json::from_slice(&bytes).map_err(|source| Error::ManifestParse {
        path: path.to_owned(),
        source,
    })
}

/// Writes a new manifest (inside the experiment's temporary folder).
pub(crate) fn write_new(path: &Path, manifest: &Manifest) -> Result<(), Error> {
    fs::write(path, to_bytes(path, manifest)?).map_err(|e| io_error("cannot write", path, e))
}

/// Replaces the manifest at `path`: a temporary file in the same folder, written, synced,
/// given the old file's mode and renamed over it, so a reader sees the old manifest or the
/// new one, never a part.
pub(crate) fn replace<T: serde::Serialize>(path: &Path, manifest: &T) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let bytes = to_bytes(path, manifest)?;
    let mode = fs::metadata(path)
        .map_err(|e| io_error("cannot read", path, e))?
        .permissions()
        .mode();
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(crate::name::RESERVED_PREFIX)
        .suffix(".json")
        .tempfile_in(dir)
        .map_err(|e| io_error("cannot create a temporary file in", dir, e))?;
    let written = tmp
        .write_all(&bytes)
        .and_then(|()| {
            tmp.as_file()
                .set_permissions(fs::Permissions::from_mode(mode))
        })
        .and_then(|()| tmp.as_file().sync_all());
    written.map_err(|e| io_error("cannot write", tmp.path(), e))?;
    tmp.persist(path)
        .map_err(|e| io_error("cannot replace", path, e.error))?;
    Ok(())
}

pub(crate) fn to_bytes<T: serde::Serialize>(path: &Path, manifest: &T) -> Result<Vec<u8>, Error> {
    let mut bytes = serde_json::to_vec_pretty(manifest).map_err(|source| Error::ManifestParse {
        path: path.to_owned(),
        source,
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// The project's git state: `None` when `root` is in no git work tree. Any other failure of
/// git (not installed, a repository owned by someone else) is an error with git's stderr.
pub(crate) fn git_state(root: &Path) -> Result<Option<GitState>, Error> {
    // No `.git` in the root or above: no repository, and no need to start git.
    if !root
        .ancestors()
        .any(|dir| fs::symlink_metadata(dir.join(".git")).is_ok())
    {
        return Ok(None);
    }
    let commit = match git(root, &["rev-parse", "--verify", "--quiet", "HEAD"]) {
        Ok(out) => String::from_utf8_lossy(&out).trim().to_owned(),
        // `--quiet`: a repository without commits fails with no message. (A broken one
        // fails below, in `git diff`.)
        Err(Error::Git { status, stderr, .. }) if status.code() == Some(1) && stderr.is_empty() => {
            return Ok(Some(GitState {
                commit: None,
                dirty: false,
                diff: None,
            }))
        }
        Err(Error::Git { stderr, .. }) if stderr.contains("not a git repository") => {
            return Ok(None)
        }
        Err(e) => return Err(e),
    };
    let diff = git(
        root,
        &[
            "diff",
            "HEAD",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            // Only the project's part of the repository: what the snapshot holds (a
            // project in a sub-folder of a monorepo does not record its neighbours' edits).
            "--",
            ".",
        ],
    )?;
    Ok(Some(GitState {
        commit: Some(commit),
        dirty: !diff.is_empty(),
        diff: Some(LosslessText::from_bytes(&diff)),
    }))
}

/// Runs `git -C ROOT ARGS…` and returns its stdout; a failure to start git or a non-zero
/// exit is an error carrying the command and git's stderr.
fn git(root: &Path, args: &[&str]) -> Result<Vec<u8>, Error> {
    let command = || {
        let mut c = format!("git -C {}", root.display());
        for a in args {
            c.push(' ');
            c.push_str(a);
        }
        c
    };
    let out = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(args)
        // The repository is the one at ROOT, whatever the environment says; messages in
        // English (one of them is matched); no index refresh (it would write `.git/index`).
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env("LC_ALL", "C")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::GitStart {
            command: command(),
            source,
        })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stderr = stderr.trim();
    // Keep the end: git's last lines say what went wrong.
    let stderr = match stderr.char_indices().nth_back(2000) {
        Some((cut, _)) => format!("…{}", &stderr[cut..]),
        None => stderr.to_owned(),
    };
    Err(Error::Git {
        command: command(),
        status: out.status,
        stderr,
    })
}
