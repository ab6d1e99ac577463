//! The experiment folder: created atomically, never overwritten; the code snapshot, the
//! manifest, the logs folder (docs/design.md §4).
//!
//! ```no_run
//! use herd_exp::{Experiment, Invocation, NewExperiment};
//!
//! # fn main() -> Result<(), herd_exp::Error> {
//! let plan = serde_json::json!({"nodes": 2, "gpus_per_node": 8});
//! let new = NewExperiment::new(
//!     "/scratch/me/exp",                       // the experiment root
//!     "resnet50-lr0.1",                        // the job name: the folder's name
//!     ".",                                     // the project root: what is snapshotted
//!     plan,                                    // the resolved plan, as JSON
//!     Invocation::current(env!("CARGO_PKG_VERSION")),
//! );
//! let created = new.create()?;                 // refused if the folder exists
//! println!("{} files, {} linked", created.snapshot.files, created.snapshot.linked);
//! // … queue the job, then:
//! created.experiment.record_job_id(1, "4242")?;
//!
//! // `herd submit --resume resnet50-lr0.1`: a new submission, same folder, same snapshot.
//! let exp = Experiment::open("/scratch/me/exp".as_ref(), "resnet50-lr0.1")?;
//! let submission = exp.add_submission(&Invocation::current(env!("CARGO_PKG_VERSION")))?;
//! exp.record_job_id(submission, "4243")?;
//! # Ok(())
//! # }
//! ```
//!
//! # The folder
//!
//! `<exp_root>/<name>/` holds the code snapshot (`code/`), the [`Manifest`], the event
//! [`timeline`], the checkpoints and logs folders and any [`ExtraFile`] (the rendered batch
//! script). Every path inside it is named in one module, [`layout`]; docs/design.md §4
//! lists them.
//!
//! A sweep's folder ([`sweep`]) holds one such experiment folder per run, beside the
//! sweep's `sweep.json` and array script (docs/sweeps.md).
//!
//! # Guarantees
//!
//! - **Atomic, never overwritten.** [`NewExperiment::create`] builds everything in a hidden
//!   temporary folder `<exp_root>/.herd-new-*` (same file system) and renames it into place
//!   with `renameat2(RENAME_NOREPLACE)`. An existing `<exp_root>/<name>` (folder, file or
//!   symlink) is refused and left untouched, also when another submit creates it at the
//!   same moment. On any error the temporary folder is removed: nothing half-written
//!   remains. (A submit killed by SIGKILL leaves its `.herd-new-*` folder behind; such a
//!   folder is never used and can be deleted.)
//! - **Job names** are one folder name: see [`validate_name`].
//! - **The snapshot** walks the project root, honouring `.gitignore`, `.ignore`,
//!   `.git/info/exclude` and git's global excludes (ignore files of folders above the root
//!   only inside a git work tree), hidden files included, `.git` left out, `*.out` and
//!   [`SnapshotOptions::exclude`] left out, and an experiment root inside the project left
//!   out, as is whatever else herd wrote there ([`outputs`]: other experiment roots, logs
//!   folders, `herd report`'s pages and plots, listed in [`SnapshotReport::herd_outputs`]),
//!   and Python environments (a folder holding `pyvenv.cfg` or `conda-meta/`, listed in
//!   [`SnapshotReport::python_envs`]). Symlinks are recreated as symlinks (never followed);
//!   files keep their permission bits less write permission and their modification time; sockets, FIFOs and devices
//!   are skipped and listed.
//! - **Unchanged files are linked, not copied.** A file whose size, mtime and mode equal
//!   those of its copy in the newest earlier experiment of the same project (same
//!   canonical root, same experiment root) is hard-linked from that copy, unless it was
//!   modified within 2 s before that copy was written (it might have changed again within
//!   the file system's timestamp granularity) or the copy is another user's and unreadable
//!   here; anything that stops the link (too many links, `protected_hardlinks`) means a
//!   copy. So the files of `code/` are read-only: a job that writes into one in place fails
//!   (`Permission denied`) instead of changing other experiments' code. Deleting an
//!   experiment frees the files no other experiment links.
//! - **The manifest** is written with the folder; later changes
//!   ([`Experiment::add_submission`], [`Experiment::record_job_id`]) append or fill in, under
//!   an exclusive lock, through a temporary file renamed over the old manifest.
//! - **Resuming** ([`Experiment::open`] + [`Experiment::add_submission`]) never touches the
//!   snapshot.

pub mod failure;
pub mod goodput;
pub mod gpus;
pub mod layout;
pub mod logs;
mod manifest;
mod name;
pub mod nodes;
pub mod outputs;
pub mod progress;
mod snapshot;
mod stats;
pub mod sweep;
mod text;
pub mod timeline;

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

pub use layout::ExperimentDir;

pub use manifest::{
    GitState, Manifest, Project, Run, SnapshotSummary, Submission, MANIFEST_FORMAT,
};
pub use name::{validate_name, NameError, NameProblem, MAX_NAME_BYTES};
pub use outputs::HerdOutput;
pub use snapshot::{
    LeftOutEnv, PreviousSize, PythonEnv, SnapshotOptions, SnapshotReport, TopEntry,
    ALWAYS_EXCLUDED, BIGGEST, RACY_SECS,
};
pub use stats::median;
pub use text::{BadEscape, LosslessText};

/// Longest job id [`Experiment::record_job_id`] accepts, in bytes.
pub const MAX_JOB_ID_BYTES: usize = 64;

/// Why creating, opening or updating an experiment failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A refused job or file name.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The experiment folder exists already.
    #[error(
        "experiment folder {} already exists and is never overwritten: choose another job name, or submit it again with `herd submit --resume`",
        path.display()
    )]
    AlreadyExists {
        /// The existing folder.
        path: PathBuf,
    },
    /// No experiment folder at this path.
    #[error("experiment folder {} does not exist: give the name of an experiment `herd submit` made", path.display())]
    NotFound {
        /// The folder looked for.
        path: PathBuf,
    },
    /// A folder without a manifest: not one `herd submit` made (or one it is still making).
    #[error("{} is not an experiment folder: it has no {} (only `herd submit` makes experiment folders)", path.display(), ExperimentDir::manifest_name())]
    NotAnExperiment {
        /// The folder.
        path: PathBuf,
    },
    /// A folder without a `sweep.json`: not one `herd submit --sweep` made.
    #[error("{} is not a sweep folder: it has no {} (only `herd submit --sweep` makes sweep folders)", path.display(), layout::SweepDir::new(path).manifest().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())]
    NotASweep {
        /// The folder.
        path: PathBuf,
    },
    /// A sweep asked for with no runs, or runs that cannot be told apart.
    #[error("sweep {name}: {why}")]
    BadSweep {
        /// The sweep's name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A file system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. `cannot copy`.
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Copying a project file into the snapshot failed (a full disk, say).
    #[error("cannot copy {} to {}: {source}", from.display(), to.display())]
    Copy {
        /// The project file.
        from: PathBuf,
        /// Its copy in the new experiment folder (still the temporary one).
        to: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Walking the project failed (a folder or an ignore file that cannot be read).
    #[error("cannot read {} in the project: {message}", path.display())]
    Walk {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// An exclude glob of [`SnapshotOptions::exclude`] is not usable.
    #[error("exclude glob `{glob}` is not usable: {reason}")]
    BadExclude {
        /// The glob.
        glob: String,
        /// Why.
        reason: String,
    },
    /// The experiment root is the project root itself.
    #[error(
        "the experiment root {} is the project root: every experiment would be snapshotted into the next; put experiments in a sub-folder (e.g. experiments/) or elsewhere",
        path.display()
    )]
    ExpRootIsProject {
        /// The folder.
        path: PathBuf,
    },
    /// git could not be started in a project that is in a git work tree.
    #[error("cannot run `{command}` (the project is in a git work tree): {source}")]
    GitStart {
        /// The command line.
        command: String,
        /// Why it did not start.
        #[source]
        source: io::Error,
    },
    /// git failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Git {
        /// The command line.
        command: String,
        /// How it exited.
        status: ExitStatus,
        /// What it printed on stderr (the last 2,000 characters).
        stderr: String,
    },
    /// A manifest that is not valid JSON or not a manifest.
    #[error("manifest {} is not valid: {source}", path.display())]
    ManifestParse {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: serde_json::Error,
    },
    /// A manifest of a newer format than this herd writes.
    #[error(
        "manifest {} has format {found}, newer than this herd's ({MANIFEST_FORMAT}): update it with a newer herd",
        path.display()
    )]
    ManifestFormat {
        /// The manifest.
        path: PathBuf,
        /// Its format.
        found: u32,
    },
    /// [`Experiment::record_job_id`] for a submission that does not exist.
    #[error("experiment {} has no submission {submission} (it has {count})", path.display())]
    NoSuchSubmission {
        /// The experiment folder.
        path: PathBuf,
        /// The submission asked for.
        submission: u32,
        /// How many submissions it has.
        count: usize,
    },
    /// [`Experiment::record_job_id`] for a submission that has another job id already.
    #[error(
        "submission {submission} of experiment {} already has job id {existing}: a job id is recorded once, never replaced",
        path.display()
    )]
    JobIdAlreadySet {
        /// The experiment folder.
        path: PathBuf,
        /// The submission.
        submission: u32,
        /// The job id it has.
        existing: String,
    },
    /// A job id that is empty, too long or has characters job ids do not have.
    #[error("job id {job_id:?} is not a job id: {reason}")]
    BadJobId {
        /// The refused id.
        job_id: String,
        /// Why.
        reason: &'static str,
    },
    /// [`Experiment::add_file`] for a file that exists.
    #[error("{} already exists: files in an experiment are never overwritten", path.display())]
    FileExists {
        /// The existing file.
        path: PathBuf,
    },
}

/// File `path` (created when missing) held with an exclusive `flock` until it is dropped:
/// the lock under which a manifest (an experiment's, a sweep's) is read and rewritten.
pub(crate) fn lock_exclusive(path: &Path) -> Result<fs::File, Error> {
    let lock = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| io_error("cannot open", path, e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| io_error("cannot lock", path, e.into()))?;
    Ok(lock)
}

pub(crate) fn io_error(action: &'static str, path: &Path, source: io::Error) -> Error {
    Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// Who made an experiment or an attempt: herd's version and the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The herd version (`env!("CARGO_PKG_VERSION")` of the binary).
    pub herd_version: String,
    /// The command line as given, non-UTF-8 arguments included.
    pub argv: Vec<OsString>,
}

impl Invocation {
    /// This process's command line (`std::env::args_os`) with `herd_version`.
    pub fn current(herd_version: impl Into<String>) -> Invocation {
        Invocation {
            herd_version: herd_version.into(),
            argv: std::env::args_os().collect(),
        }
    }
}

/// A file to put into the experiment folder, e.g. the rendered batch script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraFile {
    /// Its name: one file name, the rules of [`validate_name`], and none of the names herd
    /// uses itself (`code`, `logs`, `checkpoints`, `manifest.json`, `.lock`).
    pub name: String,
    /// Its contents.
    pub contents: Vec<u8>,
    /// Executable (mode 0777 less the umask) or not (0666 less the umask).
    pub executable: bool,
}

impl ExtraFile {
    fn check(&self) -> Result<(), NameError> {
        name::check("file name", &self.name)?;
        if layout::TAKEN.contains(&self.name.as_str()) {
            return Err(NameError {
                what: "file name",
                name: self.name.clone(),
                problem: NameProblem::Taken,
            });
        }
        Ok(())
    }

    fn mode(&self) -> u32 {
        if self.executable {
            0o777
        } else {
            0o666
        }
    }
}

/// The folder a job name gets under `exp_root`: `<exp_root>/<name>`, the name checked.
/// Lets a batch script name its paths before the folder exists.
pub fn experiment_dir(exp_root: &Path, name: &str) -> Result<PathBuf, NameError> {
    validate_name(name)?;
    Ok(exp_root.join(name))
}

/// The first of `base`, `base-2`, `base-3`, … that names nothing under `exp_root` (an
/// experiment, a sweep or anything else): where a job without a name of its own goes.
/// `base` is shortened so that the name fits `max` bytes (at most [`MAX_NAME_BYTES`]).
/// Free when asked, not reserved: [`NewExperiment::create`] still refuses a name taken
/// meanwhile.
pub fn next_free_name(exp_root: &Path, base: &str, max: usize) -> String {
    let taken = |name: &str| fs::symlink_metadata(exp_root.join(name)).is_ok();
    if !taken(base) {
        return base.to_owned();
    }
    (2u64..)
        .map(|n| {
            let suffix = format!("-{n}");
            let max = max.min(MAX_NAME_BYTES);
            let mut keep = max.saturating_sub(suffix.len()).min(base.len());
            while !base.is_char_boundary(keep) {
                keep -= 1;
            }
            format!("{}{suffix}", &base[..keep])
        })
        .find(|name| !taken(name))
        .unwrap_or_else(|| base.to_owned())
}

/// Everything needed to create an experiment; [`NewExperiment::create`] does it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewExperiment {
    /// The experiment root; created (with its parents) if missing.
    pub exp_root: PathBuf,
    /// The job name, the folder's name: see [`validate_name`].
    pub name: String,
    /// The project root, snapshotted into `code/`.
    pub project_root: PathBuf,
    /// The resolved plan, recorded in the manifest as it is.
    pub plan: serde_json::Value,
    /// herd's version and the command line, recorded in the manifest and its first attempt.
    pub invocation: Invocation,
    /// How to take the snapshot.
    pub snapshot: SnapshotOptions,
    /// Files to put into the folder besides the snapshot and the manifest.
    pub files: Vec<ExtraFile>,
}

/// A created experiment and what its snapshot did.
#[derive(Debug, Clone)]
pub struct Created {
    /// The experiment, its first attempt (number 1) without a job id yet.
    pub experiment: Experiment,
    /// What the snapshot did.
    pub snapshot: SnapshotReport,
}

impl NewExperiment {
    /// A request with default snapshot options and no extra files.
    pub fn new(
        exp_root: impl Into<PathBuf>,
        name: impl Into<String>,
        project_root: impl Into<PathBuf>,
        plan: serde_json::Value,
        invocation: Invocation,
    ) -> NewExperiment {
        NewExperiment {
            exp_root: exp_root.into(),
            name: name.into(),
            project_root: project_root.into(),
            plan,
            invocation,
            snapshot: SnapshotOptions::default(),
            files: Vec::new(),
        }
    }

    /// Creates `<exp_root>/<name>/` with the snapshot, the manifest (first attempt
    /// included), `logs/` and the extra files, all at once or not at all.
    ///
    /// Refused when the folder exists ([`Error::AlreadyExists`], checked before the
    /// snapshot and again, atomically, when the folder is put in place). Any error leaves
    /// nothing behind.
    pub fn create(&self) -> Result<Created, Error> {
        self.create_in(None)
    }

    /// [`NewExperiment::create`], where `exp_root` may be a sweep's folder being made
    /// inside the experiment root `outer_root` (canonical): the walk of the project leaves
    /// out `outer_root` (when it is inside the project) instead of `exp_root`.
    pub(crate) fn create_in(&self, outer_root: Option<&Path>) -> Result<Created, Error> {
        validate_name(&self.name)?;
        for file in &self.files {
            file.check()?;
        }
        let root = fs::canonicalize(&self.project_root)
            .map_err(|e| io_error("cannot open the project root", &self.project_root, e))?;
        if !root.is_dir() {
            return Err(io_error(
                "cannot snapshot the project root",
                &root,
                io::Error::other("it is not a folder"),
            ));
        }
        fs::create_dir_all(&self.exp_root)
            .map_err(|e| io_error("cannot create the experiment root", &self.exp_root, e))?;
        let exp_root = fs::canonicalize(&self.exp_root)
            .map_err(|e| io_error("cannot open the experiment root", &self.exp_root, e))?;
        if exp_root == root {
            return Err(Error::ExpRootIsProject { path: root });
        }
        let target = exp_root.join(&self.name);
        refuse_existing(&target)?;

        let prepared = snapshot::prepare(&root, &exp_root, outer_root, &self.snapshot)?;
        let git = manifest::git_state(&root)?;

        // Dropping `tmp` (an error, a panic) removes the folder and all in it.
        let tmp = tempfile::Builder::new()
            .prefix(layout::NEW_EXPERIMENT_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .tempdir_in(&exp_root)
            .map_err(|e| io_error("cannot create a temporary folder in", &exp_root, e))?;
        let new = ExperimentDir::new(tmp.path());
        for path in new.folders() {
            fs::create_dir(&path).map_err(|e| io_error("cannot create folder", &path, e))?;
        }
        let report = prepared.run(&new.code())?;
        for file in &self.files {
            write_new_file(&tmp.path().join(&file.name), file)?;
        }
        let inv = &self.invocation;
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            name: self.name.clone(),
            created_unix: manifest::unix_now(),
            herd_version: inv.herd_version.clone(),
            argv: inv.argv.iter().map(|a| a.as_os_str().into()).collect(),
            project: Project {
                root: root.as_path().into(),
                git,
            },
            snapshot: SnapshotSummary {
                files: report.files,
                bytes: report.bytes,
                symlinks: report.symlinks,
                copied: report.copied,
                linked: report.linked,
                linked_from: report.linked_from.clone(),
                skipped: report.skipped.iter().map(|p| p.as_path().into()).collect(),
                herd_outputs: report
                    .herd_outputs
                    .iter()
                    .map(|o| o.as_os_string().as_os_str().into())
                    .collect(),
                python_envs: report
                    .python_envs
                    .iter()
                    .map(|e| e.path.as_path().into())
                    .collect(),
            },
            plan: self.plan.clone(),
            submissions: vec![Submission::new(1, &inv.herd_version, &inv.argv)],
            other: serde_json::Map::new(),
        };
        manifest::write_new(&new.manifest(), &manifest)?;

        rename_noreplace(tmp.path(), &target).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Error::AlreadyExists {
                    path: target.clone(),
                }
            } else {
                io_error(
                    "cannot put the new experiment folder in place at",
                    &target,
                    e,
                )
            }
        })?;
        // The folder now lives at `target`: nothing left to remove.
        let _ = tmp.keep();
        Ok(Created {
            experiment: Experiment {
                name: self.name.clone(),
                paths: ExperimentDir::new(target),
            },
            snapshot: report,
        })
    }
}

pub(crate) fn refuse_existing(path: &Path) -> Result<(), Error> {
    match fs::symlink_metadata(path) {
        Ok(_) => Err(Error::AlreadyExists {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("cannot look at", path, e)),
    }
}

/// Creates `path` (which must not exist) with the file's contents and mode.
pub(crate) fn write_new_file(path: &Path, file: &ExtraFile) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(file.mode())
        .open(path)
        .map_err(|e| io_error("cannot create", path, e))?;
    f.write_all(&file.contents)
        .map_err(|e| io_error("cannot write", path, e))
}

/// Renames `from` to `to` unless `to` exists (`io::ErrorKind::AlreadyExists` then).
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use rustix::io::Errno;
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // A kernel or file system without RENAME_NOREPLACE (EINVAL; ENOSYS before Linux
        // 3.15): check that the target is absent, then rename. Something created at `to`
        // between the check and the rename would be replaced if it is an empty folder
        // (otherwise the rename fails): a window of microseconds, on file systems that
        // cannot do better.
        Err(e) if e == Errno::INVAL || e == Errno::NOSYS || e == Errno::OPNOTSUPP => {
            match fs::symlink_metadata(to) {
                Ok(_) => Err(io::ErrorKind::AlreadyExists.into()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => fs::rename(from, to),
                Err(e) => Err(e),
            }
        }
        Err(e) => Err(e.into()),
    }
}

/// `dir` is an experiment folder: it holds a manifest. Else why not, in the user's words.
fn check_manifest(dir: &Path) -> Result<(), Error> {
    if ExperimentDir::new(dir).manifest().is_file() {
        Ok(())
    } else if dir.is_dir() {
        Err(Error::NotAnExperiment {
            path: dir.to_owned(),
        })
    } else {
        Err(Error::NotFound {
            path: dir.to_owned(),
        })
    }
}

/// An existing experiment folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Experiment {
    name: String,
    paths: ExperimentDir,
}

impl Experiment {
    /// Opens `<exp_root>/<name>/`, which must hold a manifest (`herd submit --resume`).
    pub fn open(exp_root: &Path, name: &str) -> Result<Experiment, Error> {
        let dir = experiment_dir(exp_root, name)?;
        check_manifest(&dir)?;
        Ok(Experiment {
            name: name.to_owned(),
            paths: ExperimentDir::new(dir),
        })
    }

    /// Opens the experiment folder `dir` (its name is the job name), which must hold a
    /// manifest.
    pub fn open_dir(dir: &Path) -> Result<Experiment, Error> {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::NotFound {
                path: dir.to_owned(),
            })?;
        check_manifest(dir)?;
        Ok(Experiment {
            name: name.to_owned(),
            paths: ExperimentDir::new(dir),
        })
    }

    /// The job name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The experiment folder.
    pub fn dir(&self) -> &Path {
        self.paths.path()
    }

    /// Every path inside the folder ([`layout`]).
    pub fn paths(&self) -> &ExperimentDir {
        &self.paths
    }

    /// Reads the manifest.
    pub fn manifest(&self) -> Result<Manifest, Error> {
        manifest::read(&self.paths.manifest())
    }

    /// Appends a new submission (`herd submit --resume`) and returns its number (2 for the
    /// first resume). The snapshot is not touched.
    pub fn add_submission(&self, invocation: &Invocation) -> Result<u32, Error> {
        self.update(|m| {
            let number = m
                .submissions
                .last()
                .map_or(1, |a| a.number.saturating_add(1));
            m.submissions.push(Submission::new(
                number,
                &invocation.herd_version,
                &invocation.argv,
            ));
            Ok(number)
        })
    }

    /// Records the scheduler's job id of a submission. Recording the same id again is a
    /// no-op; a different one is refused ([`Error::JobIdAlreadySet`]).
    pub fn record_job_id(&self, submission: u32, job_id: &str) -> Result<(), Error> {
        check_job_id(job_id)?;
        let path = self.dir().to_owned();
        self.update(|m| {
            let a = submission_mut(m, &path, submission)?;
            match &a.job_id {
                Some(existing) if existing == job_id => Ok(()),
                Some(existing) => Err(Error::JobIdAlreadySet {
                    path,
                    submission,
                    existing: existing.clone(),
                }),
                None => {
                    a.job_id = Some(job_id.to_owned());
                    Ok(())
                }
            }
        })
    }

    /// Records the Slurm release a submission went to (`26.05.5`); a later call replaces it.
    pub fn record_slurm_version(&self, submission: u32, version: &str) -> Result<(), Error> {
        let path = self.dir().to_owned();
        self.update(|m| {
            submission_mut(m, &path, submission)?.slurm_version = Some(version.to_owned());
            Ok(())
        })
    }

    /// Appends `run` to the runs of the submission whose job id is `job_id` (the newest
    /// submission when none has it, e.g. a `herd launch` started by hand).
    pub fn record_run(&self, job_id: Option<&str>, run: Run) -> Result<(), Error> {
        let path = self.dir().to_owned();
        self.update(|m| {
            let count = m.submissions.len();
            let pos = m
                .submissions
                .iter()
                .rposition(|a| job_id.is_some() && a.job_id.as_deref() == job_id)
                .or(count.checked_sub(1));
            let Some(a) = pos.and_then(|i| m.submissions.get_mut(i)) else {
                return Err(Error::NoSuchSubmission {
                    path,
                    submission: 1,
                    count,
                });
            };
            a.runs.push(run);
            Ok(())
        })
    }

    /// Puts a file into the folder (e.g. an attempt's batch script) and returns its path;
    /// refused ([`Error::FileExists`]) if a file of that name exists. Written to a
    /// temporary file first, then renamed into place without replacing anything.
    pub fn add_file(&self, file: &ExtraFile) -> Result<PathBuf, Error> {
        file.check()?;
        let target = self.dir().join(&file.name);
        // Checked first so that a refused file changes nothing, not even the folder's
        // mtime; the rename below refuses atomically whatever appears meanwhile.
        if fs::symlink_metadata(&target).is_ok() {
            return Err(Error::FileExists { path: target });
        }
        let tmp = tempfile::Builder::new()
            .prefix(name::RESERVED_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(file.mode()))
            .tempfile_in(self.dir())
            .map_err(|e| io_error("cannot create a temporary file in", self.dir(), e))?;
        let tmp_path = tmp.into_temp_path();
        fs::write(&tmp_path, &file.contents).map_err(|e| io_error("cannot write", &tmp_path, e))?;
        rename_noreplace(&tmp_path, &target).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Error::FileExists {
                    path: target.clone(),
                }
            } else {
                io_error("cannot put in place", &target, e)
            }
        })?;
        // Renamed: nothing left to remove.
        let _ = tmp_path.keep();
        Ok(target)
    }

    /// Reads, changes and rewrites the manifest under the experiment's lock.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut Manifest) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let lock_path = self.paths.lock();
        let lock = lock_exclusive(&lock_path)?;
        let path = self.paths.manifest();
        let mut m = manifest::read(&path)?;
        if m.format > MANIFEST_FORMAT {
            return Err(Error::ManifestFormat {
                path,
                found: m.format,
            });
        }
        let out = change(&mut m)?;
        // Written in this herd's format (an older manifest's `attempts` are `submissions`).
        m.format = MANIFEST_FORMAT;
        manifest::replace(&path, &m)?;
        drop(lock);
        Ok(out)
    }
}

/// Submission `number` of manifest `m` (of the experiment at `path`), or
/// [`Error::NoSuchSubmission`].
fn submission_mut<'m>(
    m: &'m mut Manifest,
    path: &Path,
    number: u32,
) -> Result<&'m mut Submission, Error> {
    let count = m.submissions.len();
    m.submissions
        .iter_mut()
        .find(|a| a.number == number)
        .ok_or_else(|| Error::NoSuchSubmission {
            path: path.to_owned(),
            submission: number,
            count,
        })
}

pub(crate) fn check_job_id(job_id: &str) -> Result<(), Error> {
    let reason = if job_id.is_empty() {
        Some("it is empty")
    } else if job_id.len() > MAX_JOB_ID_BYTES {
        Some("it is longer than 64 bytes")
    } else if !job_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_+.-:".contains(&b))
    {
        Some("only ASCII letters, digits and `_+.-:` appear in job ids")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::BadJobId {
            job_id: job_id.to_owned(),
            reason,
        }),
    }
}
