//! The code snapshot: the project's files as the job will run them.
//!
//! One parallel walk (`ignore`'s) over the project. Each thread keeps the folders it works
//! in open (`O_PATH`): the project's, the new snapshot's and the previous snapshot's, so
//! the per-file system calls (`statx`, `linkat`) name a file relative to its folder instead
//! of walking the whole path each time. Each thread also writes its own share of the new
//! index; the shares are joined at the end.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use crate::text::{escape, unescape};
use crate::{io_error, Error, CODE_DIR, SNAPSHOT_INDEX_FILE};

/// First line of a snapshot index.
const INDEX_MAGIC: &str = "herd-snapshot-index 1";

/// A file whose mtime or ctime is this close to (or after) the start of the snapshot that
/// recorded it is never reused: it may have changed again within the file system's
/// timestamp granularity (git's "racily clean" problem).
const RACY_SECS: i64 = 2;

/// Folders each thread keeps open (most recently used first).
const OPEN_DIRS: usize = 4;

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
    /// unreadable previous index), one line each.
    pub warnings: Vec<String>,
    /// The experiment whose snapshot unchanged files were linked from, if any.
    pub linked_from: Option<String>,
    /// How long the snapshot took.
    pub elapsed: Duration,
}

/// What decides whether a file is unchanged since the previous snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    size: u64,
    mtime: (i64, u32),
    ctime: (i64, u32),
    ino: u64,
    mode: u32,
}

const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;

impl Stat {
    fn of_statx(st: &rustix::fs::Statx) -> Stat {
        Stat {
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
            ino: st.stx_ino,
            mode: u32::from(st.stx_mode) & 0o7777,
        }
    }

    fn of_metadata(md: &fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        let ns = |n: i64| u32::try_from(n).unwrap_or(0);
        Stat {
            size: md.size(),
            mtime: (md.mtime(), ns(md.mtime_nsec())),
            ctime: (md.ctime(), ns(md.ctime_nsec())),
            ino: md.ino(),
            mode: md.mode() & 0o7777,
        }
    }
}

/// `lstat` of `name` in the open folder `dir`: whether it is a regular file, and its
/// [`Stat`]. Kernels without `statx` (before Linux 4.11, or a sandbox refusing it) get a
/// plain `lstat` of `full`, its whole path.
fn stat_at(
    dir: &OwnedFd,
    name: &OsStr,
    full: impl FnOnce() -> PathBuf,
) -> io::Result<(bool, Stat)> {
    use rustix::io::Errno;
    let mask = StatxFlags::TYPE
        | StatxFlags::MODE
        | StatxFlags::SIZE
        | StatxFlags::INO
        | StatxFlags::MTIME
        | StatxFlags::CTIME;
    match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask) {
        Ok(st) => Ok((
            u32::from(st.stx_mode) & S_IFMT == S_IFREG,
            Stat::of_statx(&st),
        )),
        Err(e) if e == Errno::NOSYS || e == Errno::PERM => {
            let md = fs::symlink_metadata(full())?;
            Ok((md.is_file(), Stat::of_metadata(&md)))
        }
        Err(e) => Err(e.into()),
    }
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// The previous snapshot of the same project, as found: its index not parsed yet.
struct PrevIndex {
    name: String,
    code: PathBuf,
    index: PathBuf,
    started: (i64, u32),
    /// The index after its header.
    body: Vec<u8>,
}

/// The previous snapshot, its index parsed (keys borrowed from [`PrevIndex::body`]).
struct Prev<'a> {
    code: &'a Path,
    /// Files older than this may be reused (the previous snapshot's start minus the racy
    /// margin).
    reusable_before: (i64, u32),
    files: HashMap<Cow<'a, [u8]>, Stat>,
}

impl PrevIndex {
    fn parse(&self) -> Result<Prev<'_>, String> {
        let mut files = HashMap::with_capacity(self.body.len() / 64 + 16);
        for (n, line) in self.body.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            let (rel, stat) = parse_entry(line).ok_or_else(|| {
                format!(
                    "line {} is malformed: {:?}",
                    n + 4,
                    String::from_utf8_lossy(line)
                )
            })?;
            files.insert(rel, stat);
        }
        Ok(Prev {
            code: &self.code,
            reusable_before: (self.started.0.saturating_sub(RACY_SECS), self.started.1),
            files,
        })
    }
}

impl Prev<'_> {
    /// Whether `rel` may be linked from the previous snapshot: the project's file is
    /// unchanged since (and was not racily new then).
    fn unchanged(&self, rel: &[u8], now: &Stat) -> Option<&Stat> {
        let was = self.files.get(rel)?;
        (was == now && was.mtime < self.reusable_before && was.ctime < self.reusable_before)
            .then_some(was)
    }
}

/// The old copy must still be what that snapshot wrote: a file of the recorded size and
/// mode with the mtime the snapshot gave it (the project file's). Someone editing an old
/// snapshot must not leak into new ones.
fn old_copy_intact((is_file, old): (bool, Stat), was: &Stat) -> bool {
    is_file && old.size == was.size && old.mtime == was.mtime && old.mode == was.mode
}

/// A snapshot ready to run: options checked, previous snapshot found.
pub(crate) struct Prepared {
    root: PathBuf,
    exclude_dir: Option<PathBuf>,
    overrides: Override,
    threads: usize,
    prev: Option<PrevIndex>,
    warnings: Vec<String>,
}

/// Checks the options and finds the previous snapshot; writes nothing. `root` and
/// `exp_root` are canonical.
pub(crate) fn prepare(
    root: &Path,
    exp_root: &Path,
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
    let exclude_dir = (exp_root != root && exp_root.starts_with(root)).then(|| exp_root.into());
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
    /// Copies the project into `dest` (an empty folder) and writes the index to `index`.
    pub(crate) fn run(self, dest: &Path, index: &Path) -> Result<SnapshotReport, Error> {
        let start = Instant::now();
        let started = now();
        let mut warnings = self.warnings;
        let prev = match &self.prev {
            None => None,
            Some(p) => match p.parse() {
                Ok(prev) => Some(prev),
                Err(e) => {
                    warnings.push(format!(
                        "previous snapshot index {} not used: {e}",
                        p.index.display()
                    ));
                    None
                }
            },
        };
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
            prev: prev.as_ref(),
            failed: AtomicBool::new(false),
            first_error: Mutex::new(None),
            parts: Mutex::new(Vec::new()),
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
        let parts = job.parts.into_inner().unwrap_or_else(|e| e.into_inner());

        let mut report = SnapshotReport {
            warnings,
            ..SnapshotReport::default()
        };
        let mut text = String::new();
        let _ = writeln!(text, "{INDEX_MAGIC}");
        let _ = writeln!(
            text,
            "root {}",
            escape(self.root.as_os_str().as_bytes(), true)
        );
        let _ = writeln!(text, "started {} {}", started.0, started.1);
        text.reserve(parts.iter().map(|p| p.index.len()).sum());
        for part in parts {
            let r = part.report;
            report.files += r.files;
            report.bytes += r.bytes;
            report.copied += r.copied;
            report.copied_bytes += r.copied_bytes;
            report.linked += r.linked;
            report.symlinks += r.symlinks;
            report.dirs += r.dirs;
            report.skipped.extend(r.skipped);
            report.warnings.extend(r.warnings);
            text.push_str(&part.index);
        }
        if report.linked > 0 {
            report.linked_from = self.prev.as_ref().map(|p| p.name.clone());
        }
        report.skipped.sort();
        fs::write(index, text).map_err(|e| io_error("cannot write", index, e))?;
        report.elapsed = start.elapsed();
        Ok(report)
    }
}

fn now() -> (i64, u32) {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(_) => (0, 0),
    }
}

struct Job<'a> {
    root: &'a Path,
    dest: &'a Path,
    prev: Option<&'a Prev<'a>>,
    failed: AtomicBool,
    first_error: Mutex<Option<Error>>,
    parts: Mutex<Vec<Part>>,
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

/// One thread's share of the results.
#[derive(Default)]
struct Part {
    /// Its lines of the new index.
    index: String,
    report: SnapshotReport,
}

struct VisitorBuilder<'a> {
    job: &'a Job<'a>,
}

impl<'s> ParallelVisitorBuilder<'s> for VisitorBuilder<'s> {
    fn build(&mut self) -> Box<dyn ParallelVisitor + 's> {
        Box::new(Visitor {
            job: self.job,
            part: Part::default(),
            dirs: Vec::with_capacity(OPEN_DIRS),
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
    part: Part,
    dirs: Vec<OpenDir>,
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        let part = std::mem::take(&mut self.part);
        self.job
            .parts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(part);
    }
}

impl ParallelVisitor for Visitor<'_> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.job.failed.load(Ordering::Relaxed) {
            return WalkState::Quit;
        }
        match self.handle(entry) {
            Ok(()) => WalkState::Continue,
            Err(err) => {
                self.job.fail(err);
                WalkState::Quit
            }
        }
    }
}

impl Visitor<'_> {
    fn handle(&mut self, entry: Result<DirEntry, ignore::Error>) -> Result<(), Error> {
        let root = self.job.root;
        let entry = entry.map_err(|e| walk_error(root, &e))?;
        if let Some(err) = entry.error() {
            // A pattern git would not understand either is skipped, as git does; an ignore
            // file that cannot be read is an error (what it hides is unknown).
            if only_bad_patterns(err) {
                self.part.report.warnings.push(err.to_string());
            } else {
                return Err(walk_error(entry.path(), err));
            }
        }
        let path = entry.path();
        let Ok(rel) = path.strip_prefix(root) else {
            return Ok(());
        };
        if rel.as_os_str().is_empty() {
            return Ok(()); // the root: `dest` exists already
        }
        let Some(kind) = entry.file_type() else {
            return Ok(());
        };
        if kind.is_file() {
            return self.file(path, rel);
        }
        let dst = self.job.dest.join(rel);
        let report = &mut self.part.report;
        if kind.is_dir() {
            fs::create_dir(&dst).map_err(|e| io_error("cannot create folder", &dst, e))?;
            report.dirs += 1;
        } else if kind.is_symlink() {
            let target =
                fs::read_link(path).map_err(|e| io_error("cannot read symlink", path, e))?;
            std::os::unix::fs::symlink(&target, &dst)
                .map_err(|e| io_error("cannot create symlink", &dst, e))?;
            report.symlinks += 1;
        } else {
            report.skipped.push(rel.to_owned());
        }
        Ok(())
    }

    /// The open folders of `rel`'s parent (opened now unless among the last few used).
    fn dir_of(&mut self, rel_parent: &Path) -> Result<&OpenDir, Error> {
        if let Some(i) = self.dirs.iter().position(|d| d.rel == rel_parent) {
            if i != 0 {
                let d = self.dirs.remove(i);
                self.dirs.insert(0, d);
            }
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
        // Just put in front.
        self.dirs
            .first()
            .ok_or_else(|| io_error("cannot open", rel_parent, io::Error::other("no folder")))
    }

    fn file(&mut self, path: &Path, rel: &Path) -> Result<(), Error> {
        let name = path.file_name().unwrap_or(path.as_os_str());
        let job = self.job;
        let dir = self.dir_of(rel.parent().unwrap_or(Path::new("")))?;
        let (is_file, stat) = stat_at(&dir.src, name, || path.to_owned())
            .map_err(|e| io_error("cannot read", path, e))?;
        if !is_file {
            return Err(io_error(
                "cannot snapshot",
                path,
                io::Error::other("it stopped being a regular file during the snapshot"),
            ));
        }
        let rel_bytes = rel.as_os_str().as_bytes();
        // Linked when unchanged and the old copy is intact; any failure to link (the old
        // experiment deleted meanwhile, too many links) falls back to a copy.
        let linked = match (job.prev, &dir.prev) {
            (Some(prev), Some(prev_dir)) => prev.unchanged(rel_bytes, &stat).is_some_and(|was| {
                stat_at(prev_dir, name, || prev.code.join(rel))
                    .is_ok_and(|old| old_copy_intact(old, was))
                    && rustix::fs::linkat(prev_dir, name, &dir.dst, name, AtFlags::empty()).is_ok()
            }),
            _ => false,
        };
        let report = &mut self.part.report;
        report.files += 1;
        report.bytes += stat.size;
        if linked {
            report.linked += 1;
        } else {
            let dst = job.dest.join(rel);
            // `fs::copy` uses copy_file_range and gives the copy the file's permission bits.
            let n = fs::copy(path, &dst).map_err(|e| io_error("cannot copy", path, e))?;
            set_mtime(&dst, stat.mtime).map_err(|e| io_error("cannot set the time of", &dst, e))?;
            report.copied += 1;
            report.copied_bytes += n;
        }
        write_entry(&mut self.part.index, rel_bytes, &stat);
        Ok(())
    }
}

/// Gives `path` the modification time `mtime` (the project file's), access time untouched.
fn set_mtime(path: &Path, mtime: (i64, u32)) -> io::Result<()> {
    use rustix::fs::{Timespec, Timestamps, UTIME_OMIT};
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime.0,
            tv_nsec: mtime.1.into(),
        },
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::empty()).map_err(io::Error::from)
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

/// One index line: `SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS INO MODE(octal) PATH`, the path
/// last and escaped (see [`escape`]) so it is one line.
fn write_entry(out: &mut String, rel: &[u8], s: &Stat) {
    let _ = write!(
        out,
        "{} {} {} {} {} {} {:o} ",
        s.size, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1, s.ino, s.mode
    );
    match std::str::from_utf8(rel) {
        Ok(plain) if !plain.bytes().any(|b| b == b'\\' || b.is_ascii_control()) => {
            out.push_str(plain);
        }
        _ => out.push_str(&escape(rel, true)),
    }
    out.push('\n');
}

fn parse_entry(line: &[u8]) -> Option<(Cow<'_, [u8]>, Stat)> {
    let mut fields = line.splitn(8, |&b| b == b' ');
    let mut next = || std::str::from_utf8(fields.next()?).ok();
    let size = next()?.parse().ok()?;
    let mtime = (next()?.parse().ok()?, next()?.parse().ok()?);
    let ctime = (next()?.parse().ok()?, next()?.parse().ok()?);
    let ino = next()?.parse().ok()?;
    let mode = u32::from_str_radix(next()?, 8).ok()?;
    let rel = fields.next()?;
    let rel = if rel.contains(&b'\\') {
        Cow::Owned(unescape(std::str::from_utf8(rel).ok()?)?)
    } else {
        Cow::Borrowed(rel)
    };
    Some((
        rel,
        Stat {
            size,
            mtime,
            ctime,
            ino,
            mode,
        },
    ))
}

/// The newest snapshot under `exp_root` whose index names `root`; problems become warnings
/// (a new snapshot then copies everything).
fn find_previous(exp_root: &Path, root: &Path, warnings: &mut Vec<String>) -> Option<PrevIndex> {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = fs::read_dir(exp_root) else {
        return None;
    };
    let mut candidates = Vec::new();
    for entry in dir.flatten() {
        let name = entry.file_name();
        if name
            .as_bytes()
            .starts_with(crate::name::RESERVED_PREFIX.as_bytes())
        {
            continue;
        }
        let index = entry.path().join(SNAPSHOT_INDEX_FILE);
        if let Ok(md) = fs::symlink_metadata(&index) {
            if md.is_file() {
                candidates.push((
                    (md.mtime(), md.mtime_nsec()),
                    name.to_string_lossy().into_owned(),
                    entry.path(),
                ));
            }
        }
    }
    candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    let want = escape(root.as_os_str().as_bytes(), true);
    for (_, name, dir) in candidates {
        let index = dir.join(SNAPSHOT_INDEX_FILE);
        match read_index(&index, &want) {
            Ok(None) => continue,
            Ok(Some((started, body))) => {
                return Some(PrevIndex {
                    name,
                    code: dir.join(CODE_DIR),
                    index,
                    started,
                    body,
                })
            }
            Err(e) => warnings.push(format!(
                "previous snapshot index {} not used: {e}",
                index.display()
            )),
        }
    }
    None
}

/// When a snapshot started: seconds and nanoseconds since the Unix epoch.
type Started = (i64, u32);

/// Reads an index's header and, when it names `want_root`, its body (`Ok(None)` when it
/// is of another project).
fn read_index(path: &Path, want_root: &str) -> io::Result<Option<(Started, Vec<u8>)>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let mut reader = BufReader::with_capacity(1 << 16, fs::File::open(path)?);
    let mut header = String::new();
    // The header is three short lines; a root path is at most a few KiB.
    let mut head = (&mut reader).take(3 * 4096 + 256);
    for _ in 0..3 {
        if head.read_line(&mut header)? == 0 {
            return Err(bad("it ends inside its header"));
        }
    }
    let mut lines = header.lines();
    if lines.next() != Some(INDEX_MAGIC) {
        return Err(bad("it does not start with `herd-snapshot-index 1`"));
    }
    if lines.next().and_then(|l| l.strip_prefix("root ")) != Some(want_root) {
        return Ok(None);
    }
    let started = lines
        .next()
        .and_then(|l| l.strip_prefix("started "))
        .and_then(|l| l.split_once(' '))
        .and_then(|(s, ns)| Some((s.parse().ok()?, ns.parse().ok()?)))
        .ok_or_else(|| bad("its `started` line is malformed"))?;
    let mut body = Vec::new();
    reader.read_to_end(&mut body)?;
    Ok(Some((started, body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_lines_round_trip() {
        let stat = Stat {
            size: 12,
            mtime: (-5, 7),
            ctime: (1_700_000_000, 999_999_999),
            ino: u64::MAX,
            mode: 0o4755,
        };
        for rel in [
            &b"dir/with space/new\nline \xff"[..],
            b"plain/path.py",
            b"back\\slash",
        ] {
            let mut line = String::new();
            write_entry(&mut line, rel, &stat);
            let line = line.strip_suffix('\n').expect("one line");
            assert!(!line.contains('\n'));
            let (back, back_stat) = parse_entry(line.as_bytes()).expect("parses");
            assert_eq!(&*back, rel);
            assert_eq!(back_stat, stat);
        }
        assert!(parse_entry(b"1 2 3").is_none());
    }
}
