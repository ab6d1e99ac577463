//! The code snapshot: `code/`, the project's files as the job will run them, made when the
//! experiment is created.
//!
//! One parallel walk (`ignore`'s) over the project. A file whose size, modification time
//! and mode (less write permission) equal those of its copy in the previous experiment of
//! the same project (see [`find_previous`]) is hard-linked from that copy; every other file
//! is copied. Copies are read-only: they may be shared by every later experiment that runs
//! the same version of the file, so a job or an editor writing into a file of its `code/`
//! in place fails instead of changing other experiments' code. The file system's link
//! count is the garbage collector: deleting an experiment frees what only it used.
//!
//! A file modified less than [`RACY_SECS`] before its previous copy was written (that
//! copy's ctime) is copied again even when it looks unchanged: it may have changed again
//! within the file system's timestamp granularity (git's "racily clean" problem).
//!
//! What herd wrote itself (other experiment roots, logs folders, `herd report`'s pages and
//! plots) is left out and listed ([`crate::outputs`]), and so are Python environments
//! ([`PythonEnv`]: a folder holding `pyvenv.cfg` or `conda-meta/`).
//!
//! Each walking thread keeps the folders it works in open (`O_PATH`): the project's, the
//! new snapshot's and the previous snapshot's, so the per-file system calls (`statx`,
//! `linkat`, `openat`) name a file relative to its folder instead of walking its whole path.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use rustix::fs::AtFlags;

use crate::outputs::{self, HerdOutput, MarkedKind};
use crate::{io_error, Error};

mod file;
mod previous;

pub use file::RACY_SECS;
use file::{copy_file, open_dir, open_src, reusable, stat_at};
use previous::{find_previous, Previous};

/// Folders each thread keeps open (most recently used first).
const OPEN_DIRS: usize = 4;

/// How many of the project's biggest top-level files and folders a report names.
pub const BIGGEST: usize = 3;

/// The glob every snapshot excludes (SLURM's `%j.out` files).
pub const ALWAYS_EXCLUDED: &str = "*.out";

/// How to take the code snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Globs to leave out, besides `.gitignore` & co. and `*.out` (always left out), in
    /// `.gitignore` syntax relative to the project root (`data/`, `*.ckpt`, `/notes.md`).
    /// A glob may not start with `!`: these only exclude.
    pub exclude: Vec<String>,
    /// Threads that walk and copy; `None` picks the number of CPUs (at least 2, at most 8).
    pub threads: Option<NonZeroUsize>,
    /// Hard-link files unchanged since the previous snapshot of the same project under the
    /// same experiment root instead of copying them (default `true`).
    pub reuse_previous: bool,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            exclude: Vec::new(),
            threads: None,
            reuse_previous: true,
        }
    }
}

/// What a snapshot did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Regular files in the snapshot.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Files copied from the project.
    pub copied: u64,
    /// Bytes copied from the project.
    pub copied_bytes: u64,
    /// Files hard-linked from the previous snapshot (unchanged since).
    pub linked: u64,
    /// Symbolic links, recreated as symbolic links (never followed).
    pub symlinks: u64,
    /// Folders (the snapshot's root not counted).
    pub dirs: u64,
    /// Sockets, FIFOs and device files left out, relative to the project root.
    pub skipped: Vec<PathBuf>,
    /// Problems that did not stop the snapshot (a malformed pattern in an ignore file, an
    /// unreadable previous manifest), one line each.
    pub warnings: Vec<String>,
    /// The experiment whose snapshot unchanged files were linked from, if any.
    pub linked_from: Option<String>,
    /// What herd wrote itself and the snapshot left out, sorted ([`crate::outputs`]):
    /// another experiment root, an experiment, a sweep or logs folder, a page or plot of
    /// `herd report`. The experiment root the new experiment goes to is left out too, but
    /// not listed.
    pub herd_outputs: Vec<HerdOutput>,
    /// The Python environments in the project the snapshot left out, sorted (see
    /// [`PythonEnv`]).
    pub python_envs: Vec<LeftOutEnv>,
    /// The previous snapshot of the same project (the one unchanged files are linked
    /// from), when there is one and its manifest says its size.
    pub previous: Option<PreviousSize>,
    /// The top-level files and folders of the snapshot holding the most bytes, largest
    /// first, at most [`BIGGEST`].
    pub biggest: Vec<TopEntry>,
    /// How long the snapshot took.
    pub elapsed: Duration,
}

/// A top-level file or folder of a snapshot, with its bytes (a folder's: those of all the
/// files under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopEntry {
    /// Its name in the project root.
    pub path: PathBuf,
    /// Whether it is a folder.
    pub folder: bool,
    /// Its bytes.
    pub bytes: u64,
}

/// A kind of Python environment, as a snapshot knows one: by the file or folder its tool
/// writes at its top, never by its name. A snapshot never copies one: the job runs the
/// environment it was submitted with, at its own path (the interpreter on PATH, not a copy
/// in `code/`), and a copy would cost every experiment thousands of files (a venv with
/// torch holds about 5 GB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PythonEnv {
    /// A venv, virtualenv or uv environment: it holds `pyvenv.cfg`.
    Venv,
    /// A conda, mamba or pixi environment: it holds `conda-meta/`.
    Conda,
}

impl PythonEnv {
    /// What marks this kind of environment, as a user would look for it.
    pub fn marker(self) -> &'static str {
        match self {
            PythonEnv::Venv => "pyvenv.cfg",
            PythonEnv::Conda => "conda-meta/",
        }
    }

    /// The kind of environment the folder `name` of the open folder `parent` is; `None`
    /// for any other folder. One or two `statx` calls, each for a name that is usually
    /// missing.
    fn of(parent: &impl std::os::fd::AsFd, name: &std::ffi::OsStr) -> Option<PythonEnv> {
        let is = |file: &str, kind: u32| {
            rustix::fs::statx(
                parent,
                Path::new(name).join(file),
                AtFlags::SYMLINK_NOFOLLOW,
                rustix::fs::StatxFlags::TYPE,
            )
            .is_ok_and(|st| u32::from(st.stx_mode) & 0o170_000 == kind)
        };
        if is("pyvenv.cfg", 0o100_000) {
            Some(PythonEnv::Venv)
        } else if is("conda-meta", 0o040_000) {
            Some(PythonEnv::Conda)
        } else {
            None
        }
    }
}

/// A Python environment a snapshot left out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct LeftOutEnv {
    /// Its folder, relative to the project root.
    pub path: PathBuf,
    /// What kind it is.
    pub kind: PythonEnv,
}

/// The size of the previous snapshot of the same project, from its manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviousSize {
    /// Its experiment's name.
    pub name: String,
    /// Its regular files.
    pub files: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// A snapshot ready to run: options checked, previous snapshot found.
pub(crate) struct Prepared {
    root: PathBuf,
    exclude_dir: Option<PathBuf>,
    overrides: Override,
    threads: usize,
    prev: Option<Previous>,
    warnings: Vec<String>,
}

/// Checks the options and finds the previous snapshot; writes nothing. `root` and
/// `exp_root` are canonical, and so is `outer_root`: the experiment root that holds
/// `exp_root` when that is a sweep's folder being made, left out of the walk in its place.
pub(crate) fn prepare(
    root: &Path,
    exp_root: &Path,
    outer_root: Option<&Path>,
    opts: &SnapshotOptions,
) -> Result<Prepared, Error> {
    let overrides = overrides(root, &opts.exclude)?;
    let threads = match opts.threads {
        Some(n) => n.get(),
        None => std::thread::available_parallelism()
            .map(NonZeroUsize::get)
            .unwrap_or(2)
            .clamp(2, 8),
    };
    // An experiment root inside the project is left out of the walk (it holds this
    // experiment's temporary folder too).
    let walled = outer_root.unwrap_or(exp_root);
    let exclude_dir = (walled != root && walled.starts_with(root)).then(|| walled.into());
    let mut warnings = Vec::new();
    let prev = if opts.reuse_previous {
        find_previous(exp_root, root, &mut warnings)
    } else {
        None
    };
    Ok(Prepared {
        root: root.to_owned(),
        exclude_dir,
        overrides,
        threads,
        prev,
        warnings,
    })
}

fn overrides(root: &Path, exclude: &[String]) -> Result<Override, Error> {
    let mut builder = OverrideBuilder::new(root);
    for glob in std::iter::once(ALWAYS_EXCLUDED).chain(exclude.iter().map(String::as_str)) {
        let bad = |reason: String| Error::BadExclude {
            glob: glob.to_owned(),
            reason,
        };
        if glob.trim().is_empty() {
            return Err(bad("it is empty".into()));
        }
        if glob.starts_with('!') {
            return Err(bad(
                "it starts with `!`, but these globs only exclude: drop the `!`".into(),
            ));
        }
        // In an override, `!` marks a glob that ignores.
        builder
            .add(&format!("!{glob}"))
            .map_err(|e| bad(e.to_string()))?;
    }
    builder.build().map_err(|e| Error::BadExclude {
        glob: exclude.join(" "),
        reason: e.to_string(),
    })
}

impl Prepared {
    /// Copies the project into `dest`, an empty folder.
    pub(crate) fn run(self, dest: &Path) -> Result<SnapshotReport, Error> {
        let start = Instant::now();
        // Ignore files of folders above the project root count only inside a git work tree,
        // as for git (a stray `~/.gitignore` must not empty a project that is no repo).
        let in_git_tree = self
            .root
            .ancestors()
            .any(|dir| fs::symlink_metadata(dir.join(".git")).is_ok());
        let exclude_dir = self.exclude_dir.clone();
        let mut walk = WalkBuilder::new(&self.root);
        walk.hidden(false)
            .parents(in_git_tree)
            .ignore(true)
            .git_ignore(true)
            .git_global(true)
            .git_exclude(true)
            .require_git(false)
            .follow_links(false)
            .overrides(self.overrides.clone())
            .threads(self.threads)
            .filter_entry(move |e| {
                e.file_name() != ".git" && exclude_dir.as_deref() != Some(e.path())
            });
        let job = Job {
            root: &self.root,
            dest,
            prev: self.prev.as_ref(),
            failed: AtomicBool::new(false),
            first_error: Mutex::new(None),
            parts: Mutex::new(Vec::new()),
            tops: Mutex::new(HashMap::new()),
        };
        walk.build_parallel()
            .visit(&mut VisitorBuilder { job: &job });
        if let Some(err) = job
            .first_error
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
        {
            return Err(err);
        }
        let mut report = SnapshotReport {
            warnings: self.warnings,
            ..SnapshotReport::default()
        };
        for r in job.parts.into_inner().unwrap_or_else(|e| e.into_inner()) {
            report.files += r.files;
            report.bytes += r.bytes;
            report.copied += r.copied;
            report.copied_bytes += r.copied_bytes;
            report.linked += r.linked;
            report.symlinks += r.symlinks;
            report.dirs += r.dirs;
            report.skipped.extend(r.skipped);
            report.warnings.extend(r.warnings);
            report.herd_outputs.extend(r.herd_outputs);
            report.python_envs.extend(r.python_envs);
        }
        report.python_envs.sort();
        let mut tops: Vec<TopEntry> = job
            .tops
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .into_iter()
            .map(|(name, (bytes, folder))| TopEntry {
                path: name.into(),
                folder,
                bytes,
            })
            .collect();
        tops.sort_unstable_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.path.cmp(&b.path)));
        tops.truncate(BIGGEST);
        report.biggest = tops;
        leave_out_emptied(dest, &mut report);
        if let Some(prev) = self.prev {
            report.previous = prev.size.map(|(files, bytes)| PreviousSize {
                name: prev.name.clone(),
                files,
                bytes,
            });
            if report.linked > 0 {
                report.linked_from = Some(prev.name);
            }
        }
        report.skipped.sort();
        report.elapsed = start.elapsed();
        Ok(report)
    }
}

struct Job<'a> {
    root: &'a Path,
    dest: &'a Path,
    prev: Option<&'a Previous>,
    failed: AtomicBool,
    first_error: Mutex<Option<Error>>,
    /// Each thread's counts, pushed when it ends.
    parts: Mutex<Vec<SnapshotReport>>,
    /// Bytes of the files under each top-level entry of the project (and whether it is a
    /// folder), added by each thread when it ends.
    tops: Mutex<HashMap<OsString, (u64, bool)>>,
}

/// Leaves out of the snapshot `dest` the folders that leaving out herd's outputs left empty
/// (an experiment root, `herd-logs/`, a folder of plots): each is removed from `dest` (only
/// when empty) and listed in place of what it held. Never the snapshot's root.
fn leave_out_emptied(dest: &Path, report: &mut SnapshotReport) {
    loop {
        let mut parents: Vec<PathBuf> = report
            .herd_outputs
            .iter()
            .filter_map(|o| o.path.parent())
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_owned)
            .collect();
        parents.sort_unstable_by(|a, b| {
            b.components()
                .count()
                .cmp(&a.components().count())
                .then_with(|| a.cmp(b))
        });
        parents.dedup();
        let mut emptied = false;
        for parent in parents {
            if fs::remove_dir(dest.join(&parent)).is_ok() {
                report.dirs = report.dirs.saturating_sub(1);
                report
                    .herd_outputs
                    .retain(|o| o.path.parent() != Some(parent.as_path()));
                report.herd_outputs.push(HerdOutput {
                    path: parent,
                    folder: true,
                });
                emptied = true;
            }
        }
        if !emptied {
            break;
        }
    }
    report.herd_outputs.sort();
}

impl Job<'_> {
    fn fail(&self, err: Error) {
        self.failed.store(true, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
        if first.is_none() {
            *first = Some(err);
        }
    }
}

struct VisitorBuilder<'a> {
    job: &'a Job<'a>,
}

impl<'s> ParallelVisitorBuilder<'s> for VisitorBuilder<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Visitor {
            job: self.job,
            report: SnapshotReport::default(),
            dirs: Vec::with_capacity(OPEN_DIRS),
            tops: HashMap::new(),
        })
    }
}

/// A folder of the project, open, with its counterparts in the new and previous snapshot.
struct OpenDir {
    rel: PathBuf,
    src: OwnedFd,
    dst: OwnedFd,
    /// `None` when the previous snapshot has no such folder.
    prev: Option<OwnedFd>,
}

struct Visitor<'a> {
    job: &'a Job<'a>,
    report: SnapshotReport,
    dirs: Vec<OpenDir>,
    /// Bytes of the files this thread took under each top-level entry of the project (and
    /// whether it is a folder).
    tops: HashMap<OsString, (u64, bool)>,
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        let report = std::mem::take(&mut self.report);
        self.job
            .parts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(report);
        let mut tops = self.job.tops.lock().unwrap_or_else(|e| e.into_inner());
        for (name, (bytes, folder)) in self.tops.drain() {
            tops.entry(name).or_insert((0, folder)).0 += bytes;
        }
    }
}

impl ParallelVisitor for Visitor<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.job.failed.load(Ordering::Relaxed) {
            return WalkState::Quit;
        }
        match self.handle(entry) {
            Ok(state) => state,
            Err(err) => {
                self.job.fail(err);
                WalkState::Quit
            }
        }
    }
}

impl Visitor<'_> {
    /// Takes one entry of the walk; [`WalkState::Skip`] for a folder herd made or a Python
    /// environment (not entered).
    fn handle(&mut self, entry: Result<DirEntry, ignore::Error>) -> Result<WalkState, Error> {
        let root = self.job.root;
        let entry = entry.map_err(|e| walk_error(root, &e))?;
        if let Some(err) = entry.error() {
            // A pattern git would not understand either is skipped, as git does; an ignore
            // file that cannot be read is an error (what it hides is unknown).
            if only_bad_patterns(err) {
                self.report.warnings.push(err.to_string());
            } else {
                return Err(walk_error(entry.path(), err));
            }
        }
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            return Ok(WalkState::Continue);
        };
        if rel.as_os_str().is_empty() {
            // The root: `dest` exists already, and it is never one of herd's folders.
            return Ok(WalkState::Continue);
        }
        let Some(kind) = entry.file_type() else {
            return Ok(WalkState::Continue);
        };
        if kind.is_file() {
            self.file(path, rel)?;
            return Ok(WalkState::Continue);
        }
        // The walk visits a folder before anything in it.
        let dst = self.job.dest.join(rel);
        if kind.is_dir() {
            let name = path.file_name().unwrap_or(path.as_os_str());
            let parent = self.dir_of(rel.parent().unwrap_or(Path::new("")))?;
            if outputs::herd_folder(&parent.src, name).is_some() {
                self.report.herd_outputs.push(HerdOutput {
                    path: rel.to_owned(),
                    folder: true,
                });
                return Ok(WalkState::Skip);
            }
            if let Some(kind) = PythonEnv::of(&parent.src, name) {
                self.report.python_envs.push(LeftOutEnv {
                    path: rel.to_owned(),
                    kind,
                });
                return Ok(WalkState::Skip);
            }
            fs::create_dir(&dst).map_err(|e| io_error("cannot create folder", &dst, e))?;
            self.report.dirs += 1;
        } else if kind.is_symlink() {
            let target =
                fs::read_link(path).map_err(|e| io_error("cannot read symlink", path, e))?;
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| io_error("cannot create symlink", &dst, e))?;
            self.report.symlinks += 1;
        } else {
            self.report.skipped.push(rel.to_owned());
        }
        Ok(WalkState::Continue)
    }

    /// The open folders of `rel_parent` (opened now unless among the last few used).
    fn dir_of(&mut self, rel_parent: &Path) -> Result<&OpenDir, Error> {
        if let Some(i) = self.dirs.iter().position(|d| d.rel == rel_parent) {
            let d = self.dirs.remove(i);
            self.dirs.insert(0, d);
        } else {
            let src_path = self.job.root.join(rel_parent);
            let dst_path = self.job.dest.join(rel_parent);
            let src = open_dir(&src_path).map_err(|e| io_error("cannot open", &src_path, e))?;
            let dst = open_dir(&dst_path).map_err(|e| io_error("cannot open", &dst_path, e))?;
            let prev = self
                .job
                .prev
                .and_then(|p| open_dir(&p.code.join(rel_parent)).ok());
            self.dirs.truncate(OPEN_DIRS - 1);
            self.dirs.insert(
                0,
                OpenDir {
                    rel: rel_parent.to_owned(),
                    src,
                    dst,
                    prev,
                },
            );
        }
        Ok(&self.dirs[0])
    }

    fn file(&mut self, path: &Path, rel: &Path) -> Result<(), Error> {
        let name = path.file_name().unwrap_or(path.as_os_str());
        let dest = self.job.dest;
        let dir = self.dir_of(rel.parent().unwrap_or(Path::new("")))?;
        let stat = stat_at(&dir.src, name, || path.to_owned())
            .map_err(|e| io_error("cannot read", path, e))?;
        if !stat.regular {
            return Err(io_error(
                "cannot snapshot",
                path,
                io::Error::other("it stopped being a regular file during the snapshot"),
            ));
        }
        // A page or plot of `herd report` is left out; a user's own is taken as any file
        // (and the file opened to look is the one copied).
        let mut opened = None;
        if let Some(kind) = MarkedKind::of_name(name) {
            let src = open_src(&dir.src, name).map_err(|e| io_error("cannot read", path, e))?;
            let mut head = [0u8; outputs::HEAD_BYTES];
            let n = outputs::read_head(&src, &mut head)
                .map_err(|e| io_error("cannot read", path, e))?;
            if kind.is_marked(&head[..n]) {
                self.report.herd_outputs.push(HerdOutput {
                    path: rel.to_owned(),
                    folder: false,
                });
                return Ok(());
            }
            opened = Some(src);
        }
        // Linked when unchanged; any failure to link (the old experiment deleted meanwhile,
        // too many links, another user's file under `protected_hardlinks`) means a copy.
        let linked = dir.prev.as_ref().is_some_and(|prev| {
            stat_at(prev, name, PathBuf::new).is_ok_and(|old| {
                reusable(&old, &stat, || {
                    use rustix::fs::Access;
                    rustix::fs::accessat(prev, name, Access::READ_OK, AtFlags::EACCESS).is_ok()
                })
            }) && rustix::fs::linkat(prev, name, &dir.dst, name, AtFlags::empty()).is_ok()
        });
        let copied = if linked {
            None
        } else {
            let src = match opened {
                Some(src) => src,
                None => open_src(&dir.src, name).map_err(|e| io_error("cannot read", path, e))?,
            };
            Some(
                copy_file(src, &dir.dst, name, &stat).map_err(|source| Error::Copy {
                    from: path.to_owned(),
                    to: dest.join(rel),
                    source,
                })?,
            )
        };
        let top = rel.iter().next().unwrap_or(rel.as_os_str());
        match self.tops.get_mut(top) {
            Some((bytes, _)) => *bytes += stat.size,
            None => {
                let folder = top.len() != rel.as_os_str().len();
                self.tops.insert(top.to_owned(), (stat.size, folder));
            }
        }
        let report = &mut self.report;
        report.files += 1;
        report.bytes += stat.size;
        match copied {
            None => report.linked += 1,
            Some(n) => {
                report.copied += 1;
                report.copied_bytes += n;
            }
        }
        Ok(())
    }
}

fn only_bad_patterns(err: &ignore::Error) -> bool {
    match err {
        ignore::Error::Partial(errs) => errs.iter().all(only_bad_patterns),
        ignore::Error::WithLineNumber { err, .. }
        | ignore::Error::WithPath { err, .. }
        | ignore::Error::WithDepth { err, .. } => only_bad_patterns(err),
        ignore::Error::Glob { .. } => true,
        _ => false,
    }
}

fn walk_error(fallback: &Path, err: &ignore::Error) -> Error {
    fn inner<'a>(err: &'a ignore::Error, path: &mut Option<&'a Path>) -> String {
        match err {
            ignore::Error::WithPath { path: p, err } => {
                *path = Some(p);
                inner(err, path)
            }
            ignore::Error::WithDepth { err, .. } => inner(err, path),
            ignore::Error::WithLineNumber { line, err } => {
                format!("line {line}: {}", inner(err, path))
            }
            ignore::Error::Partial(errs) => errs
                .iter()
                .map(|e| inner(e, path))
                .collect::<Vec<_>>()
                .join("; "),
            other => other.to_string(),
        }
    }
    let mut path = None;
    let message = inner(err, &mut path);
    Error::Walk {
        path: path.unwrap_or(fallback).to_owned(),
        message,
    }
}
