//! The code snapshot: the project's files as the job will run them.
//!
//! A snapshot has two halves:
//!
//! - **Capture** (at submit): one parallel walk (`ignore`'s) over the project. A file
//!   unchanged since the previous snapshot of the same project is not touched at all: its
//!   entry in the new index names the object the previous snapshot stored it in. Every
//!   other file is copied into a new object of the experiment root's store
//!   (`<exp_root>/.herd-store/objects/<snapshot>/<thread>/<n>`): when `code/` is made
//!   later, appended to the thread's pack `<snapshot>/<thread>.pack` instead, which the
//!   first materializing that needs it unpacks into those files (see "Packs" below). The
//!   index (`snapshot.idx`) lists every folder, symlink and file with its object.
//!   Capturing an unchanged project costs one `statx` per file and writes one file, the
//!   index; it makes no folder. The previous index is mapped, not read, and its lines are
//!   compared as text when looked up, not parsed.
//! - **Materializing** (at job start, or at once): the `code/` folder is made from the index,
//!   every file a hard link to its object, in a temporary folder renamed into place. Every
//!   object is checked on the way (one `statx` each, before its link); one that is missing
//!   while its pack is there is unpacked first.
//!
//! Objects are written once and read-only (the project file's mode without write
//! permission; `code/` files are links to them, so a job or an editor writing into one in
//! place fails instead of changing every experiment that shares it). An object whose
//! size, mtime or mode is not what the index recorded (someone made it writable and
//! edited it, or root did) stops a materialization with an error naming the file, and
//! goes on the store's list of damaged objects (`.herd-store/damaged`), which every
//! capture reads: it is never reused again. A capture trusts the objects of this user's
//! previous snapshot as written (checking them is what the job's start does anyway); it
//! checks each one it reuses (still intact? readable by this user?) when the previous
//! snapshot is another user's, and when it makes `code/` at once.
//!
//! Each walking thread keeps the project folders it works in open (`O_PATH`), so the
//! per-file system calls name a file relative to its folder instead of walking the whole
//! path each time, and appends its lines of the new index to the file in 64 KiB chunks
//! (lines are in no order; materializing sorts them).
//!
//! The store's objects folder is locked (`flock`) shared while a snapshot is taken or a
//! `code/` folder made, and exclusively by [`collect_garbage`].

use std::borrow::Cow;
use std::collections::HashSet;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::{self, Read};
use std::num::NonZeroUsize;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ignore::overrides::{Override, OverrideBuilder};
use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkBuilder, WalkState};
use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use crate::text::{escape, unescape};
use crate::{io_error, Error, SNAPSHOT_INDEX_FILE};

/// First line of a snapshot index.
const INDEX_MAGIC: &str = "herd-snapshot-index 3";
/// First line of the indexes herd wrote before packs: the same lines, every object a file
/// of its own.
const INDEX_MAGIC_V2: &str = "herd-snapshot-index 2";
/// First line of the indexes herd wrote before the store (their `code/` is complete; they
/// are not reused from).
const INDEX_MAGIC_V1: &str = "herd-snapshot-index 1";

/// The store of snapshot objects, in the experiment root.
pub const STORE_DIR: &str = ".herd-store";
/// The objects folder inside the store.
const OBJECTS_DIR: &str = "objects";

/// A file whose mtime or ctime is this close to (or after) the start of the snapshot that
/// recorded it is never reused: it may have changed again within the file system's
/// timestamp granularity (git's "racily clean" problem).
const RACY_SECS: i64 = 2;

/// Folders each thread keeps open (most recently used first).
const OPEN_DIRS: usize = 4;

/// The glob every snapshot excludes (SLURM's `%j.out` files).
pub const ALWAYS_EXCLUDED: &str = "*.out";

/// The objects folder of an experiment root's store.
pub(crate) fn objects_dir(exp_root: &Path) -> PathBuf {
    exp_root.join(STORE_DIR).join(OBJECTS_DIR)
}

/// How to take the code snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Globs to leave out, besides `.gitignore` & co. and `*.out` (always left out), in
    /// `.gitignore` syntax relative to the project root (`data/`, `*.ckpt`, `/notes.md`).
    /// A glob may not start with `!`: these only exclude.
    pub exclude: Vec<String>,
    /// Threads that walk and copy; `None` picks the number of CPUs (at least 2, at most 8).
    pub threads: Option<NonZeroUsize>,
    /// Reuse the stored copies of files unchanged since the previous snapshot of the same
    /// project under the same experiment root instead of copying them again (default
    /// `true`).
    pub reuse_previous: bool,
    /// Make the `code/` folder with the experiment (default `true`). `false` leaves it to
    /// [`crate::Experiment::materialize`], which the batch script runs when the job starts:
    /// `herd submit` does that, so a queued job costs its folder one index file, not one
    /// link per file, and the files it copies go into a few packs, not one file each.
    pub materialize: bool,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            exclude: Vec::new(),
            threads: None,
            reuse_previous: true,
            materialize: true,
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
    /// Files copied from the project into new objects.
    pub copied: u64,
    /// Bytes copied from the project.
    pub copied_bytes: u64,
    /// Files unchanged since the previous snapshot: its objects reused, nothing copied.
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
    /// The experiment whose snapshot's objects unchanged files reuse, if any.
    pub linked_from: Option<String>,
    /// How long capturing the snapshot took (the walk, the copies, the index).
    pub elapsed: Duration,
    /// What making `code/` did, when it was made with the experiment.
    pub materialized: Option<MaterializeReport>,
}

/// What making a `code/` folder from its snapshot did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaterializeReport {
    /// Regular files, each a hard link to its object (or a copy of it, below).
    pub files: u64,
    /// Files copied from their object because it could not be linked (too many links).
    pub copied: u64,
    /// Stored copies unpacked from the packs of snapshots taken for a job that starts
    /// later (`herd submit`'s), their first job to start.
    pub unpacked: u64,
    /// Symbolic links made.
    pub symlinks: u64,
    /// Folders made (the root not counted).
    pub dirs: u64,
    /// How long it took.
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

/// `lstat` of `name` relative to the open folder `dir`: whether it is a regular file, and
/// its [`Stat`]. Kernels without `statx` (before Linux 4.11, or a sandbox refusing it) get
/// a plain `lstat` of `full`, its whole path.
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

/// This process's effective user id (asked once).
fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Whether the stored object `name` in the open folder `dir` is intact ([`object_intact`])
/// and readable by this process: a copy stored by another user may be unreadable (a
/// project file of mode 0750, say), and reusing it would only fail later, when the job
/// starts.
fn object_usable(dir: &OwnedFd, name: &OsStr, was: &Stat) -> bool {
    let mask = StatxFlags::TYPE
        | StatxFlags::MODE
        | StatxFlags::SIZE
        | StatxFlags::MTIME
        | StatxFlags::UID;
    let Ok(st) = rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask) else {
        return false;
    };
    let found = (
        u32::from(st.stx_mode) & S_IFMT == S_IFREG,
        Stat::of_statx(&st),
    );
    object_intact(found, was)
        && (st.stx_uid == euid()
            || rustix::fs::accessat(dir, name, rustix::fs::Access::READ_OK, AtFlags::EACCESS)
                .is_ok())
}

/// An object must still be what its snapshot wrote: a regular file of the recorded size,
/// with the mtime the snapshot gave it (the project file's) and the project file's mode
/// without write permission ([`object_mode`]; or with it: copies stored before objects
/// were read-only). Someone who made a file of an experiment's `code/` writable and
/// edited it in place edited its object: that must not spread into later snapshots.
fn object_intact((is_file, obj): (bool, Stat), was: &Stat) -> bool {
    is_file
        && obj.size == was.size
        && obj.mtime == was.mtime
        && (obj.mode == object_mode(was.mode) || obj.mode == was.mode)
}

/// The mode of a stored copy (and so of the file in `code/`, a hard link to it) of a
/// project file of mode `mode`: the same without write permission. Stored copies are
/// shared by every experiment that runs that version of the file; read-only, a job or an
/// editor writing into a file of `code/` fails at once instead of changing the code of
/// other experiments (as git's and Nix's stores do; root ignores it, which is why a copy
/// is still checked when `code/` is made).
fn object_mode(mode: u32) -> u32 {
    mode & !0o222
}

// ---------------------------------------------------------------------------------------
// The index.

/// One line of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry<'a> {
    /// `d PATH`
    Dir,
    /// `l TARGET PATH`
    Symlink(Vec<u8>),
    /// `f SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS INO MODE(octal) OBJECT PATH`
    File { stat: Stat, object: &'a str },
}

/// Appends `bytes` as one space-free index field: `\\`, control characters, spaces and
/// bytes that are not UTF-8 escaped (see [`escape`]; a space is `\x20`).
fn push_field(out: &mut String, bytes: &[u8]) {
    out.push_str(&as_field(bytes));
}

/// `bytes` as an index field: borrowed when nothing needs escaping (nearly every path).
fn as_field(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(plain)
            if !plain
                .bytes()
                .any(|b| b == b'\\' || b == b' ' || b.is_ascii_control()) =>
        {
            Cow::Borrowed(plain)
        }
        _ => Cow::Owned(escape(bytes, true).replace(' ', "\\x20")),
    }
}

fn field(bytes: &[u8]) -> Option<Cow<'_, [u8]>> {
    if bytes.contains(&b'\\') {
        Some(Cow::Owned(unescape(std::str::from_utf8(bytes).ok()?)?))
    } else {
        Some(Cow::Borrowed(bytes))
    }
}

fn write_dir(out: &mut String, rel: &[u8]) {
    out.push_str("d ");
    push_field(out, rel);
    out.push('\n');
}

fn write_symlink(out: &mut String, rel: &[u8], target: &[u8]) {
    out.push_str("l ");
    push_field(out, target);
    out.push(' ');
    push_field(out, rel);
    out.push('\n');
}

fn write_file(out: &mut String, rel: &[u8], s: &Stat, object: &str) {
    stat_prefix(out, s);
    file_line_end(out, object, &as_field(rel));
}

/// The rest of a file line after its [`stat_prefix`]: `OBJECT PATH\n` (`field`: the path
/// as [`as_field`] gives it).
fn file_line_end(out: &mut String, object: &str, field: &str) {
    out.push_str(object);
    out.push(' ');
    out.push_str(field);
    out.push('\n');
}

/// A file line up to its object: `f SIZE MTIME_S MTIME_NS CTIME_S CTIME_NS INO MODE `.
/// Two stats are equal exactly when their prefixes are.
fn stat_prefix(out: &mut String, s: &Stat) {
    // itoa: `write!` costs more than the `statx` it records, once per file.
    let mut n = itoa::Buffer::new();
    out.push_str("f ");
    out.push_str(n.format(s.size));
    out.push(' ');
    out.push_str(n.format(s.mtime.0));
    out.push(' ');
    out.push_str(n.format(s.mtime.1));
    out.push(' ');
    out.push_str(n.format(s.ctime.0));
    out.push(' ');
    out.push_str(n.format(s.ctime.1));
    out.push(' ');
    out.push_str(n.format(s.ino));
    out.push(' ');
    let _ = write!(out, "{:o} ", s.mode);
}

/// Parses one index line: the path (relative to the project root) and what it is.
fn parse_line(line: &[u8]) -> Option<(Cow<'_, [u8]>, Entry<'_>)> {
    let mut fields = line.split(|&b| b == b' ');
    let kind = fields.next()?;
    let mut next = || fields.next();
    let entry = match kind {
        b"d" => Entry::Dir,
        b"l" => Entry::Symlink(field(next()?)?.into_owned()),
        b"f" => {
            let mut num = || std::str::from_utf8(next()?).ok();
            let size = num()?.parse().ok()?;
            let mtime = (num()?.parse().ok()?, num()?.parse().ok()?);
            let ctime = (num()?.parse().ok()?, num()?.parse().ok()?);
            let ino = num()?.parse().ok()?;
            let mode = u32::from_str_radix(num()?, 8).ok()?;
            let object = num()?;
            if !valid_object(object) {
                return None;
            }
            Entry::File {
                stat: Stat {
                    size,
                    mtime,
                    ctime,
                    ino,
                    mode,
                },
                object,
            }
        }
        _ => return None,
    };
    let rel = field(next()?)?;
    if next().is_some() || !valid_rel(&rel) {
        return None;
    }
    Some((rel, entry))
}

/// An object name: `<snapshot>/<thread>/<n>`, letters, digits and `-` only.
fn valid_object(object: &str) -> bool {
    object.split('/').count() == 3
        && object
            .split('/')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

/// A path inside the snapshot: relative, no `.`/`..`/empty parts (an index is data, and
/// materializing one must never write outside `code/`).
fn valid_rel(rel: &[u8]) -> bool {
    !rel.is_empty()
        && !rel.contains(&0)
        && rel
            .split(|&b| b == b'/')
            .all(|part| !part.is_empty() && part != b"." && part != b"..")
}

/// When a snapshot started: seconds and nanoseconds since the Unix epoch.
type Started = (i64, u32);

/// An index's header.
struct Header {
    format: u32,
    root: String,
    started: Started,
}

/// An index's bytes after its header: mapped, or read where mapping is not possible.
pub(crate) struct Body {
    bytes: IndexBytes,
    start: usize,
}

/// A whole file's bytes (an index, a pack): mapped, or read where mapping is not possible.
enum IndexBytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl std::ops::Deref for IndexBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            IndexBytes::Mapped(m) => m,
            IndexBytes::Read(v) => v,
        }
    }
}

impl std::ops::Deref for Body {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.bytes.get(self.start..).unwrap_or_default()
    }
}

/// The whole index file, mapped: the page cache's pages, not a fresh copy of them. (Reading
/// a just-written 2 MB index into new memory took 15–50 ms on the VMs herd is tested on,
/// a fifth of a snapshot of an unchanged project; mapping it, 2–7 ms.)
fn load_index(path: &Path) -> io::Result<IndexBytes> {
    map_file(&fs::File::open(path)?)
}

/// The whole of `file`, mapped where possible (see [`load_index`]).
fn map_file(file: &fs::File) -> io::Result<IndexBytes> {
    let len = file.metadata()?.len();
    if len > 0 {
        // SAFETY: a mapping is undefined behaviour if the file changes while it is mapped.
        // herd creates an index (or a pack) with `create_new`, writes it once and never
        // writes it again (a pack is read-only too), and keeps it mapped only while it
        // takes or makes one snapshot; only someone editing an experiment's
        // `snapshot.idx` by hand at that moment could break it (git maps its index and
        // packs on the same terms).
        #[allow(unsafe_code)]
        let mapped = unsafe { memmap2::Mmap::map(file) };
        if let Ok(m) = mapped {
            return Ok(IndexBytes::Mapped(m));
        }
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut file = file;
    file.read_to_end(&mut bytes)?;
    Ok(IndexBytes::Read(bytes))
}

/// Reads an index's header and, when `want_root` is `None` or the header names it, its
/// body (`Ok((header, None))` for an index of another project or of format 1).
fn read_index(path: &Path, want_root: Option<&str>) -> io::Result<(Header, Option<Body>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_owned());
    let bytes = load_index(path)?;
    let all: &[u8] = &bytes;
    // The header is three short lines; a root path is at most a few KiB.
    let mut start = 0;
    let mut lines = Vec::with_capacity(3);
    for _ in 0..3 {
        let rest = all.get(start..).unwrap_or_default();
        let Some(end) = rest.iter().take(3 * 4096 + 256).position(|&b| b == b'\n') else {
            return Err(bad("it ends inside its header"));
        };
        lines.push(std::str::from_utf8(&rest[..end]).map_err(|_| bad("its header is not UTF-8"))?);
        start += end + 1;
    }
    let format = match lines[0] {
        INDEX_MAGIC => 3,
        INDEX_MAGIC_V2 => 2,
        INDEX_MAGIC_V1 => 1,
        _ => return Err(bad("it does not start with `herd-snapshot-index 3`")),
    };
    let root = lines[1]
        .strip_prefix("root ")
        .ok_or_else(|| bad("its `root` line is malformed"))?
        .to_owned();
    let started = lines[2]
        .strip_prefix("started ")
        .and_then(|l| l.split_once(' '))
        .and_then(|(s, ns)| Some((s.parse().ok()?, ns.parse().ok()?)))
        .ok_or_else(|| bad("its `started` line is malformed"))?;
    let header = Header {
        format,
        root,
        started,
    };
    if format < 2 || want_root.is_some_and(|want| want != header.root) {
        return Ok((header, None));
    }
    Ok((header, Some(Body { bytes, start })))
}

// ---------------------------------------------------------------------------------------
// The previous snapshot.

/// The previous snapshot of the same project, as found: its index not parsed yet.
struct PrevIndex {
    name: String,
    index: PathBuf,
    /// Who wrote it (the index file's owner).
    owner: u32,
    started: Started,
    /// The index after its header.
    body: Body,
}

/// The previous snapshot, ready for lookups. Its lines are parsed when looked up, by the
/// walking threads: building it only finds where each file's line is (a capture of an
/// unchanged project spends its time on `statx`, not on parsing or on fresh memory).
struct Prev<'a> {
    body: &'a [u8],
    /// Files older than this may be reused (the previous snapshot's start minus the racy
    /// margin).
    reusable_before: (i64, u32),
    /// For each file line: the hash of its (escaped) path and where the line starts,
    /// sorted by hash.
    files: Vec<(u64, usize)>,
}

/// A path's hash for [`Prev`]'s lookups: over 8-byte words, each folded in with a 64×64→128
/// bit multiply whose halves are xored (wyhash's "mum"). Cheap (it runs twice per file,
/// and SipHash took a tenth of an unchanged capture); a collision only costs one more text
/// comparison.
fn path_hash(escaped: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let step = |h: u64, word: [u8; 8]| {
        let m = u128::from(h ^ u64::from_le_bytes(word)) * u128::from(K);
        (m as u64) ^ ((m >> 64) as u64)
    };
    let mut h = (escaped.len() as u64) ^ 0xa076_1d64_78bd_642f;
    let mut words = escaped.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = step(h, word);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = step(h, word);
    }
    h
}

impl PrevIndex {
    /// Finds the file lines; an index with a line that is no index line is not used.
    fn parse(&self) -> Result<Prev<'_>, String> {
        let body = &self.body[..];
        let mut files = Vec::with_capacity(body.len() / 80 + 16);
        // Lines found with memchr (the index is ~85 bytes a file); a `\r` anywhere is
        // looked for once, not per line.
        let has_cr = memchr::memchr(b'\r', body).is_some();
        let mut start = 0;
        let ends = memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len()));
        for (n, end) in ends.enumerate() {
            let line = &body[start..end];
            let line_start = std::mem::replace(&mut start, end + 1);
            if line.is_empty() {
                continue;
            }
            let well_formed = line.len() > 2
                && matches!(&line[..2], b"f " | b"d " | b"l ")
                && !(has_cr && line.contains(&b'\r'));
            if !well_formed {
                return Err(format!(
                    "line {} is malformed: {:?}",
                    n + 4,
                    String::from_utf8_lossy(line)
                ));
            }
            if line[0] == b'f' {
                let path = match memchr::memrchr(b' ', line) {
                    Some(i) => &line[i + 1..],
                    None => line,
                };
                files.push((path_hash(path), line_start));
            }
        }
        files.sort_unstable();
        Ok(Prev {
            body,
            reusable_before: (self.started.0.saturating_sub(RACY_SECS), self.started.1),
            files,
        })
    }
}

impl<'a> Prev<'a> {
    /// The object of the file whose index field is `key` when the project's file is
    /// unchanged since: its line starts with `prefix` ([`stat_prefix`] of `now`), and `now`
    /// was not racily new then. Lines are compared as text, not parsed.
    fn unchanged(&self, key: &[u8], prefix: &[u8], now: &Stat) -> Option<&'a str> {
        if !(now.mtime < self.reusable_before && now.ctime < self.reusable_before) {
            return None;
        }
        let hash = path_hash(key);
        let first = self.files.partition_point(|&(h, _)| h < hash);
        let body: &'a [u8] = self.body;
        self.files[first..]
            .iter()
            .take_while(|&&(h, _)| h == hash)
            .find_map(|&(_, start)| {
                let rest = body.get(start..)?.strip_prefix(prefix)?;
                let end = rest.iter().position(|&b| b == b' ')?;
                let after = rest[end + 1..].strip_prefix(key)?;
                if !matches!(after.first(), None | Some(b'\n')) {
                    return None;
                }
                let object = std::str::from_utf8(&rest[..end]).ok()?;
                valid_object(object).then_some(object)
            })
    }
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
                    index,
                    md.uid(),
                ));
            }
        }
    }
    candidates.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
    let want = escape(root.as_os_str().as_bytes(), true);
    for (_, name, index, owner) in candidates {
        match read_index(&index, Some(&want)) {
            Ok((_, None)) => continue,
            Ok((header, Some(body))) => {
                return Some(PrevIndex {
                    name,
                    index,
                    owner,
                    started: header.started,
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

/// The store's list of stored copies found changed or missing when a `code/` folder was
/// made (`<exp_root>/.herd-store/damaged`, one object name per line): a snapshot never
/// reuses them.
const DAMAGED_FILE: &str = "damaged";

fn damaged_path(objects: &Path) -> PathBuf {
    objects.with_file_name(DAMAGED_FILE)
}

/// The store's list of damaged copies (empty when there is none). Lines that are no object
/// name (a write cut short) are left out.
fn read_damaged(objects: &Path) -> io::Result<HashSet<Box<[u8]>>> {
    let path = damaged_path(objects);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e),
    };
    Ok(bytes
        .split(|&b| b == b'\n')
        .filter(|l| std::str::from_utf8(l).is_ok_and(valid_object))
        .map(Box::from)
        .collect())
}

/// Adds `list` to the store's list of damaged copies: one `O_APPEND` write, a line each.
/// The list gets the objects folder's permissions for reading and writing (a store
/// shared by a group, a list the group can add to).
fn record_damaged<'a>(objects: &Path, list: impl IntoIterator<Item = &'a str>) -> io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
    let path = damaged_path(objects);
    let mode = fs::metadata(objects)?.permissions().mode() & 0o666;
    let mut file = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(mode)
        .open(&path)?;
    let md = file.metadata()?;
    if md.len() == 0 && md.uid() == euid() {
        let _ = file.set_permissions(fs::Permissions::from_mode(mode));
    }
    let mut lines = String::new();
    for object in list {
        lines.push_str(object);
        lines.push('\n');
    }
    file.write_all(lines.as_bytes())
}

// ---------------------------------------------------------------------------------------
// Packs.
//
// A snapshot whose `code/` is made later (`herd submit`) does not write one file per new
// stored copy: each walking thread appends its copies to one pack,
// `<objects>/<token>/<thread>.pack`, and the job's start unpacks it into the folder
// `<token>/<thread>`, one file per stored copy, named as the index names them, before it
// links `code/`. Creating ~20,000 inodes is most of a first snapshot's cost; at submit it
// is what the user waits for on the login node, at the job's start it is a fraction of a
// second next to starting Python on every GPU. A later snapshot that reuses a copy
// still packed names it the same way: whichever job starts first unpacks it.
//
// A pack: `herd-pack 1\n`, then per stored copy a 32-byte header (little-endian: its
// number `n` u64, its length u64, its mode u32, its mtime's nanoseconds u32 and seconds
// i64) and its bytes.

/// A pack's first bytes.
const PACK_MAGIC: &[u8] = b"herd-pack 1\n";
/// The name of a pack: `<thread>` and this.
const PACK_SUFFIX: &str = ".pack";
/// The size of a stored copy's header in a pack.
const PACK_HEADER: usize = 32;
/// A pack is written in pieces of about this size.
const PACK_FLUSH: usize = 1 << 20;
/// Temporary folders of unpacks in a `<token>` folder start with this.
const UNPACK_PREFIX: &str = ".unpack-";

/// One walking thread's pack, being written.
struct PackWriter {
    token: String,
    file: fs::File,
    path: PathBuf,
    /// What is not written yet.
    buf: Vec<u8>,
    /// Bytes written to the file.
    written: u64,
}

impl PackWriter {
    /// Appends at most `stat.size` bytes of the open file `src` as stored copy `n`, with
    /// the mtime of `stat` and its mode made read-only ([`object_mode`]): the bytes copied
    /// (fewer when the file shrank meanwhile).
    fn add(&mut self, src: &OwnedFd, n: u64, stat: &Stat) -> io::Result<u64> {
        let header_at = self.written + self.buf.len() as u64;
        let mut header = [0u8; PACK_HEADER];
        header[..8].copy_from_slice(&n.to_le_bytes());
        header[8..16].copy_from_slice(&stat.size.to_le_bytes());
        header[16..20].copy_from_slice(&object_mode(stat.mode).to_le_bytes());
        header[20..24].copy_from_slice(&stat.mtime.1.to_le_bytes());
        header[24..32].copy_from_slice(&stat.mtime.0.to_le_bytes());
        self.buf.extend_from_slice(&header);
        let mut copied = 0u64;
        while copied < stat.size {
            if self.buf.len() >= PACK_FLUSH {
                self.flush()?;
            }
            let want = usize::try_from(stat.size - copied)
                .unwrap_or(usize::MAX)
                .min(PACK_FLUSH);
            self.buf.reserve(want);
            let spare = &mut self.buf.spare_capacity_mut()[..want];
            let got = match rustix::io::read(src, spare) {
                Ok((init, _)) => init.len(),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            };
            if got == 0 {
                break;
            }
            // SAFETY: `read` initialized the first `got` bytes of the spare capacity.
            #[allow(unsafe_code)]
            unsafe {
                self.buf.set_len(self.buf.len() + got);
            }
            copied += got as u64;
        }
        if copied != stat.size {
            // Shrank: the header says what is there.
            let len = copied.to_le_bytes();
            if header_at >= self.written {
                let at = usize::try_from(header_at - self.written).unwrap_or(usize::MAX) + 8;
                self.buf[at..at + 8].copy_from_slice(&len);
            } else {
                use std::os::unix::fs::FileExt as _;
                self.file.write_all_at(&len, header_at + 8)?;
            }
        }
        Ok(copied)
    }

    /// Writes what is buffered.
    fn flush(&mut self) -> io::Result<()> {
        use std::io::Write as _;
        self.file.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// A stored copy in a pack.
struct Packed<'a> {
    n: u64,
    mode: u32,
    mtime: (i64, u32),
    bytes: &'a [u8],
}

/// The stored copies of the pack `bytes`, or what is wrong with it.
fn pack_entries(bytes: &[u8]) -> Result<Vec<Packed<'_>>, String> {
    let mut rest = bytes
        .strip_prefix(PACK_MAGIC)
        .ok_or("it does not start with `herd-pack 1`")?;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let Some((header, after)) = rest.split_first_chunk::<PACK_HEADER>() else {
            return Err(format!(
                "it ends inside the header of its stored copy #{}",
                out.len() + 1
            ));
        };
        let u64_at = |i: usize| u64::from_le_bytes(header[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(header[i..i + 4].try_into().unwrap_or_default());
        let len = usize::try_from(u64_at(8)).unwrap_or(usize::MAX);
        if len > after.len() {
            return Err(format!(
                "it ends inside its stored copy #{} ({} of {len} bytes there)",
                out.len() + 1,
                after.len()
            ));
        }
        let (body, after) = after.split_at(len);
        out.push(Packed {
            n: u64_at(0),
            mode: u32_at(16) & 0o7777,
            mtime: (u64_at(24) as i64, u32_at(20)),
            bytes: body,
        });
        rest = after;
    }
    Ok(out)
}

/// Unpacks the pack of the stored copies `<token>/<thread>/*` (`token_thread`), if there
/// is one, into the folder `<objects>/<token>/<thread>`: made as a temporary folder in
/// `<token>`, renamed into place, then the pack is removed. Under an exclusive lock on
/// the pack, so a job starting at the same moment waits and then finds the folder.
/// The number of stored copies it unpacked: 0 when there is no such pack, or another job
/// unpacked it.
fn unpack(objects: &Path, token_thread: &str) -> Result<u64, UnpackError> {
    use rustix::fs::FlockOperation;
    use UnpackError::Io;
    let Some((token, thread)) = token_thread.split_once('/') else {
        return Ok(0);
    };
    let token_dir = objects.join(token);
    let pack_path = token_dir.join(format!("{thread}{PACK_SUFFIX}"));
    let file = match fs::File::open(&pack_path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Io(io_error("cannot open", &pack_path, e))),
    };
    match rustix::fs::flock(&file, FlockOperation::LockExclusive) {
        Ok(()) => {}
        Err(e) if locks_unsupported(e) => {}
        Err(e) => return Err(Io(io_error("cannot lock", &pack_path, e.into()))),
    }
    let dest = token_dir.join(thread);
    if fs::symlink_metadata(&dest).is_ok() {
        // Unpacked meanwhile (by the job that held the lock); the pack may still be there
        // if that one was killed right after.
        let _ = fs::remove_file(&pack_path);
        return Ok(0);
    }
    let bytes = map_file(&file).map_err(|e| Io(io_error("cannot read", &pack_path, e)))?;
    let entries = pack_entries(&bytes).map_err(|e| {
        UnpackError::Damaged(format!("the pack {} is damaged: {e}", pack_path.display()))
    })?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!("{UNPACK_PREFIX}{thread}-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .tempdir_in(&token_dir)
        .map_err(|e| {
            Io(io_error(
                "cannot create a temporary folder in",
                &token_dir,
                e,
            ))
        })?;
    let tmp_fd = open_dir(tmp.path()).map_err(|e| Io(io_error("cannot open", tmp.path(), e)))?;
    let mut name = itoa::Buffer::new();
    for e in &entries {
        write_object(
            &tmp_fd,
            OsStr::new(name.format(e.n)),
            e.mode,
            e.mtime,
            e.bytes,
        )
        .map_err(|err| {
            Io(io_error(
                "cannot unpack the pack of stored copies into",
                tmp.path(),
                err,
            ))
        })?;
    }
    // Put in place, then the pack goes; a job killed in between leaves a pack that the
    // next one (or `herd gc`) removes.
    match fs::rename(tmp.path(), &dest) {
        Ok(()) => {
            let _ = tmp.keep();
        }
        Err(e) if fs::symlink_metadata(&dest).is_ok() => drop(e),
        Err(e) => return Err(Io(io_error("cannot put in place", &dest, e))),
    }
    let _ = fs::remove_file(&pack_path);
    Ok(entries.len() as u64)
}

/// Why a pack was not unpacked.
enum UnpackError {
    /// It is not what a snapshot wrote (cut short, or not in the pack format): why.
    Damaged(String),
    /// Reading it or writing its copies failed (a full disk, permissions).
    Io(Error),
}

/// Unpacks the packs `token_threads` ([`unpack`]), on up to as many threads as there are
/// CPUs: the stored copies unpacked, and the first pack that could not be, with why.
fn unpack_all<'a>(
    objects: &Path,
    token_threads: &[&'a str],
) -> (u64, Option<(&'a str, UnpackError)>) {
    let threads = std::thread::available_parallelism()
        .map_or(2, NonZeroUsize::get)
        .min(token_threads.len());
    let next = AtomicUsize::new(0);
    let unpacked = AtomicUsize::new(0);
    let failed = Mutex::new(None);
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(&tt) = token_threads.get(i) else {
            return;
        };
        match unpack(objects, tt) {
            Ok(n) => {
                unpacked.fetch_add(usize::try_from(n).unwrap_or(usize::MAX), Ordering::Relaxed);
            }
            Err(why) => {
                let mut first = failed.lock().unwrap_or_else(|e| e.into_inner());
                if first.is_none() {
                    *first = Some((tt, why));
                }
                return;
            }
        }
    };
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    (
        unpacked.into_inner() as u64,
        failed.into_inner().unwrap_or_else(|e| e.into_inner()),
    )
}

// ---------------------------------------------------------------------------------------
// Capture.

/// The objects one snapshot writes: `<objects>/<token>/<thread>/<n>`, the folder made when
/// the first file is copied (a snapshot of an unchanged project makes none: creating a
/// folder can cost more than the rest of such a snapshot, ext4 looking for a free inode
/// after many deletions). Removed again (with the store, if it is then empty) when
/// dropped, unless [`NewObjects::keep`] was called: a failed experiment leaves nothing
/// behind in the store either.
pub(crate) struct NewObjects {
    objects: PathBuf,
    /// `<token>` and its folder, open, once made.
    dir: Mutex<Option<(String, OwnedFd)>>,
    kept: bool,
    /// A shared lock on the objects folder, held until the experiment is in place (or
    /// given up): [`collect_garbage`] takes it exclusively, so it never removes an object
    /// a snapshot is reusing before that snapshot's index is where it looks.
    lock: OwnedFd,
}

/// The store's shared lock (see [`NewObjects`]), for making a `code/` folder: while it is
/// held, [`collect_garbage`] does not run. `None` when there is no store.
pub(crate) fn lock_store_shared(exp_root: &Path) -> Result<Option<OwnedFd>, Error> {
    let objects = objects_dir(exp_root);
    lock_objects(&objects, false).map_err(|e| io_error("cannot lock", &objects, e))
}

/// Whether `flock` failed because the file system does not do locks (Lustre mounted
/// without `flock`, some NFS setups), not because of the lock itself.
fn locks_unsupported(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    e == Errno::NOSYS || e == Errno::OPNOTSUPP || e == Errno::NOLCK || e == Errno::INVAL
}

/// Opens the objects folder and locks it (`flock`), shared or exclusive; `Ok(None)` when
/// it does not exist. The lock is taken on the folder that is at that path once locked (a
/// folder removed and made again meanwhile is locked again). A shared lock on a file
/// system without locks is skipped (it only keeps [`collect_garbage`] out); an exclusive
/// one is an error there.
fn lock_objects(objects: &Path, exclusive: bool) -> io::Result<Option<OwnedFd>> {
    use rustix::fs::FlockOperation;
    loop {
        let fd = match rustix::fs::open(
            objects,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let op = if exclusive {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::LockShared
        };
        match rustix::fs::flock(&fd, op) {
            Ok(()) => {}
            Err(e) if !exclusive && locks_unsupported(e) => return Ok(Some(fd)),
            Err(e) if locks_unsupported(e) => {
                return Err(io::Error::other(format!(
                    "this file system does not support locks ({e}), so herd gc cannot keep submits out while it removes files: nothing was removed"
                )))
            }
            Err(e) => return Err(e.into()),
        }
        let locked = rustix::fs::fstat(&fd)?;
        match rustix::fs::stat(objects) {
            Ok(now) if now.st_ino == locked.st_ino && now.st_dev == locked.st_dev => {
                return Ok(Some(fd))
            }
            Ok(_) => continue,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
}

impl NewObjects {
    /// Makes the store where missing and takes its shared lock; no folder for the new
    /// objects yet ([`NewObjects::thread_dir`]).
    pub(crate) fn create(exp_root: &Path) -> Result<NewObjects, Error> {
        let objects = objects_dir(exp_root);
        for _ in 0..100 {
            // Made again each time: a failed snapshot removes the store when it was empty.
            make_store(exp_root, &objects)
                .map_err(|e| io_error("cannot create the snapshot store", &objects, e))?;
            if let Some(lock) =
                lock_objects(&objects, false).map_err(|e| io_error("cannot lock", &objects, e))?
            {
                return Ok(NewObjects {
                    objects,
                    dir: Mutex::new(None),
                    kept: false,
                    lock,
                });
            }
        }
        Err(io_error(
            "cannot lock",
            &objects,
            io::Error::other("it was removed again each time it was made (100 tries)"),
        ))
    }

    /// Runs `f` on this snapshot's folder of new objects, `<token>`, made and opened the
    /// first time: its token, and the folder, open.
    fn in_token<T>(&self, f: impl FnOnce(&str, &OwnedFd) -> Result<T, Error>) -> Result<T, Error> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let mut dir = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        if dir.is_none() {
            let (secs, nanos) = now();
            let pid = std::process::id();
            for _ in 0u32..100 {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let token = format!("{secs:x}{nanos:08x}-{pid:x}-{n}");
                let path = self.objects.join(&token);
                match fs::create_dir(&path) {
                    Ok(()) => {
                        let fd = open_dir(&path).map_err(|e| io_error("cannot open", &path, e))?;
                        *dir = Some((token, fd));
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io_error("cannot create folder", &path, e)),
                }
            }
        }
        let Some((token, fd)) = dir.as_ref() else {
            return Err(io_error(
                "cannot create folder",
                &self.objects,
                io::Error::other("no folder for new snapshot objects could be made in 100 tries"),
            ));
        };
        f(token, fd)
    }

    /// Makes the folder `<token>/<thread>` for one walking thread's new objects: the
    /// token, and the folder, open.
    fn thread_dir(&self, thread: usize) -> Result<(String, OwnedFd), Error> {
        self.in_token(|token, fd| {
            let t = thread.to_string();
            let path = self.objects.join(token).join(&t);
            rustix::fs::mkdirat(fd, t.as_str(), Mode::from_raw_mode(0o777))
                .map_err(|e| io_error("cannot create folder", &path, e.into()))?;
            let out = open_dir(&path).map_err(|e| io_error("cannot open", &path, e))?;
            Ok((token.to_owned(), out))
        })
    }

    /// Starts the pack `<token>/<thread>.pack` of one walking thread's new objects.
    fn thread_pack(&self, thread: usize) -> Result<PackWriter, Error> {
        self.in_token(|token, fd| {
            let name = format!("{thread}{PACK_SUFFIX}");
            let path = self.objects.join(token).join(&name);
            // Readable by its owner only: it holds files of every mode, and only this
            // user's jobs unpack it (another user reuses stored copies once unpacked).
            let file = rustix::fs::openat(
                fd,
                name.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o400),
            )
            .map_err(|e| io_error("cannot create", &path, e.into()))?;
            let mut buf = Vec::with_capacity(PACK_FLUSH + PACK_HEADER);
            buf.extend_from_slice(PACK_MAGIC);
            Ok(PackWriter {
                token: token.to_owned(),
                file: fs::File::from(file),
                path,
                buf,
                written: 0,
            })
        })
    }

    /// The folder of this snapshot's objects, if it made one.
    fn made(&self) -> Option<PathBuf> {
        let dir = self.dir.lock().unwrap_or_else(|e| e.into_inner());
        dir.as_ref().map(|(token, _)| self.objects.join(token))
    }

    /// Keeps the objects (the experiment that uses them is in place).
    pub(crate) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for NewObjects {
    fn drop(&mut self) {
        if !self.kept {
            if let Some(dir) = self.made() {
                let _ = fs::remove_dir_all(dir);
            }
            // An empty store goes too, unless another snapshot holds it: that one may
            // make its folder in it later (it holds the shared lock, so the exclusive one
            // is refused).
            let op = rustix::fs::FlockOperation::NonBlockingLockExclusive;
            if rustix::fs::flock(&self.lock, op).is_ok() {
                let _ = fs::remove_dir(&self.objects);
                if let Some(store) = self.objects.parent() {
                    let _ = fs::remove_dir(store);
                }
            }
        }
    }
}

/// Makes the store's folders where missing, with the experiment root's permissions (and
/// set-group-ID bit): a root shared by a group gets a store the group can write to, with
/// any umask.
fn make_store(exp_root: &Path, objects: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let store = exp_root.join(STORE_DIR);
    let mode = fs::metadata(exp_root)?.permissions().mode() & 0o7777;
    for dir in [&store, objects] {
        match fs::create_dir(dir) {
            Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(mode))?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A snapshot ready to run: options checked, previous snapshot found.
pub(crate) struct Prepared {
    root: PathBuf,
    exp_root: PathBuf,
    exclude_dir: Option<PathBuf>,
    overrides: Override,
    threads: usize,
    prev: Option<PrevIndex>,
    /// Check each reused stored copy now ([`object_usable`]); otherwise only the store's
    /// list of damaged copies is consulted and making `code/` checks each copy.
    verify_objects: bool,
    /// New objects go into packs, unpacked when `code/` is made (it is made later).
    packed: bool,
    /// The store's list of damaged copies ([`read_damaged`]).
    damaged: HashSet<Box<[u8]>>,
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
    // experiment's temporary folder and the store too).
    let exclude_dir = (exp_root != root && exp_root.starts_with(root)).then(|| exp_root.into());
    let mut warnings = Vec::new();
    let prev = if opts.reuse_previous {
        find_previous(exp_root, root, &mut warnings)
    } else {
        None
    };
    let damaged = prev.as_ref().map(|_| read_damaged(&objects_dir(exp_root)));
    // The stored copies this user's previous snapshot names are trusted as written
    // (read-only, write-once) when `code/` is made later: that checks every copy anyway,
    // and one it finds changed goes on the damaged list. Another user's may be unreadable
    // here, and `code/` made at once must not fail on a changed one: checked now.
    let verify_objects = opts.materialize
        || prev.as_ref().is_some_and(|p| p.owner != euid())
        || matches!(damaged, Some(Err(_)));
    let damaged = match damaged {
        Some(Ok(set)) => set,
        Some(Err(e)) => {
            warnings.push(format!(
                "cannot read {}: {e}; every stored copy reused was checked instead",
                damaged_path(&objects_dir(exp_root)).display()
            ));
            HashSet::new()
        }
        None => HashSet::new(),
    };
    Ok(Prepared {
        root: root.to_owned(),
        exp_root: exp_root.to_owned(),
        exclude_dir,
        overrides,
        threads,
        prev,
        verify_objects,
        packed: !opts.materialize,
        damaged,
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
    /// Captures the project: new objects into `new`, the index to `index`.
    pub(crate) fn run(self, new: &NewObjects, index: &Path) -> Result<SnapshotReport, Error> {
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
        let objects_path = objects_dir(&self.exp_root);
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
            // Compared as bytes: `Path`'s `==` and `file_name` parse components, per entry.
            .filter_entry(move |e| {
                let path = e.path().as_os_str().as_bytes();
                !path.ends_with(b"/.git")
                    && exclude_dir
                        .as_deref()
                        .is_none_or(|x| x.as_os_str().as_bytes() != path)
            });
        let mut head = String::new();
        let _ = writeln!(head, "{INDEX_MAGIC}");
        let _ = writeln!(
            head,
            "root {}",
            escape(self.root.as_os_str().as_bytes(), true)
        );
        let _ = writeln!(head, "started {} {}", started.0, started.1);
        let file = fs::File::create_new(index).and_then(|mut f| {
            use std::io::Write as _;
            f.write_all(head.as_bytes())?;
            Ok(f)
        });
        let file = file.map_err(|e| io_error("cannot write", index, e))?;
        let job = Job {
            root: &self.root,
            objects_path: &objects_path,
            new,
            prev: prev.as_ref(),
            verify_objects: self.verify_objects,
            packed: self.packed,
            damaged: &self.damaged,
            next_thread: AtomicUsize::new(0),
            index: Mutex::new(file),
            index_path: index,
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
        }
        if report.linked > 0 {
            report.linked_from = self.prev.as_ref().map(|p| p.name.clone());
        }
        report.skipped.sort();
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
    /// The store's objects folder.
    objects_path: &'a Path,
    new: &'a NewObjects,
    prev: Option<&'a Prev<'a>>,
    /// See [`Prepared::verify_objects`].
    verify_objects: bool,
    /// See [`Prepared::packed`].
    packed: bool,
    damaged: &'a HashSet<Box<[u8]>>,
    next_thread: AtomicUsize,
    /// The new index, its header written; the threads append their lines in chunks.
    index: Mutex<fs::File>,
    index_path: &'a Path,
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
            thread: self.job.next_thread.fetch_add(1, Ordering::Relaxed),
            out: None,
            next_object: 0,
            part: Part {
                index: String::with_capacity(INDEX_CHUNK),
                report: SnapshotReport::default(),
            },
            dirs: Vec::with_capacity(OPEN_DIRS),
            object_dirs: Vec::new(),
            prefix: String::with_capacity(128),
        })
    }
}

/// A folder of the project, open.
struct OpenDir {
    rel: PathBuf,
    src: OwnedFd,
}

struct Visitor<'a> {
    job: &'a Job<'a>,
    thread: usize,
    /// Where this thread's new objects go, once it copied a file.
    out: Option<Out>,
    next_object: u64,
    part: Part,
    dirs: Vec<OpenDir>,
    /// Folders of the store's objects this thread looked into, open.
    object_dirs: Vec<(String, OwnedFd)>,
    /// Reused for each file's [`stat_prefix`].
    prefix: String,
}

/// Where one walking thread puts its new objects.
enum Out {
    /// One file each, in `<token>/<thread>` (open): `code/` is made at once.
    Loose(String, OwnedFd),
    /// Into its pack (see [`PackWriter`]).
    Pack(PackWriter),
}

/// A thread writes its index lines to the file once it has this many bytes of them.
const INDEX_CHUNK: usize = 1 << 16;

impl Visitor<'_> {
    /// Appends this thread's index lines to the index file.
    fn flush(&mut self) -> Result<(), Error> {
        use std::io::Write as _;
        if self.part.index.is_empty() {
            return Ok(());
        }
        let mut file = self.job.index.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(self.part.index.as_bytes())
            .map_err(|e| io_error("cannot write", self.job.index_path, e))?;
        self.part.index.clear();
        Ok(())
    }
}

impl Drop for Visitor<'_> {
    fn drop(&mut self) {
        if let Err(err) = self.flush() {
            self.job.fail(err);
        }
        if let Some(Out::Pack(pack)) = &mut self.out {
            if let Err(e) = pack.flush() {
                let path = pack.path.clone();
                self.job.fail(io_error("cannot write", &path, e));
            }
        }
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
        let mut result = self.handle(entry);
        if result.is_ok() && self.part.index.len() >= INDEX_CHUNK - 1024 {
            result = self.flush();
        }
        match result {
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
        // The walk's paths are the root's path, `/`, the relative path: cut as bytes
        // (`Path::strip_prefix` compares component by component, per file).
        let root_len = root.as_os_str().len();
        let Some(rel) = path
            .as_os_str()
            .as_bytes()
            .strip_prefix(root.as_os_str().as_bytes())
            .and_then(|r| r.strip_prefix(b"/").or(r.is_empty().then_some(r)))
        else {
            return Ok(());
        };
        debug_assert!(rel.is_empty() || path.as_os_str().len() == root_len + 1 + rel.len());
        if rel.is_empty() {
            return Ok(()); // the root
        }
        let rel = Path::new(OsStr::from_bytes(rel));
        let Some(kind) = entry.file_type() else {
            return Ok(());
        };
        if kind.is_file() {
            return self.file(path, rel);
        }
        let rel_bytes = rel.as_os_str().as_bytes();
        let part = &mut self.part;
        if kind.is_dir() {
            write_dir(&mut part.index, rel_bytes);
            part.report.dirs += 1;
        } else if kind.is_symlink() {
            let target =
                fs::read_link(path).map_err(|e| io_error("cannot read symlink", path, e))?;
            write_symlink(&mut part.index, rel_bytes, target.as_os_str().as_bytes());
            part.report.symlinks += 1;
        } else {
            part.report.skipped.push(rel.to_owned());
        }
        Ok(())
    }

    /// The open project folder `rel_parent` (opened now unless among the last few used).
    fn dir_of(&mut self, rel_parent: &Path) -> Result<&OwnedFd, Error> {
        let want = rel_parent.as_os_str().as_bytes();
        if let Some(i) = self
            .dirs
            .iter()
            .position(|d| d.rel.as_os_str().as_bytes() == want)
        {
            if i != 0 {
                let d = self.dirs.remove(i);
                self.dirs.insert(0, d);
            }
        } else {
            let src_path = self.job.root.join(rel_parent);
            let src = open_dir(&src_path).map_err(|e| io_error("cannot open", &src_path, e))?;
            self.dirs.truncate(OPEN_DIRS - 1);
            self.dirs.insert(
                0,
                OpenDir {
                    rel: rel_parent.to_owned(),
                    src,
                },
            );
        }
        // Just put in front.
        self.dirs
            .first()
            .map(|d| &d.src)
            .ok_or_else(|| io_error("cannot open", rel_parent, io::Error::other("no folder")))
    }

    /// Whether the stored object `<dir>/<n>` may be reused ([`object_usable`]); its folder
    /// is opened once per thread.
    fn object_usable(&mut self, object: &str, was: &Stat) -> bool {
        let Some((dir, name)) = object.rsplit_once('/') else {
            return false;
        };
        let i = match self.object_dirs.iter().position(|(d, _)| d == dir) {
            Some(i) => i,
            None => {
                let Ok(fd) = open_dir(&self.job.objects_path.join(dir)) else {
                    return false;
                };
                self.object_dirs.push((dir.to_owned(), fd));
                self.object_dirs.len() - 1
            }
        };
        let fd = &self.object_dirs[i].1;
        object_usable(fd, OsStr::new(name), was)
    }

    fn file(&mut self, path: &Path, rel: &Path) -> Result<(), Error> {
        // Parent and name as bytes (no component parsing per file).
        let rel_all = rel.as_os_str().as_bytes();
        let (parent, name) = match rel_all.iter().rposition(|&b| b == b'/') {
            Some(i) => (&rel_all[..i], &rel_all[i + 1..]),
            None => (&b""[..], rel_all),
        };
        let (parent, name) = (
            Path::new(OsStr::from_bytes(parent)),
            OsStr::from_bytes(name),
        );
        let job = self.job;
        let src = self.dir_of(parent)?;
        let (is_file, stat) =
            stat_at(src, name, || path.to_owned()).map_err(|e| io_error("cannot read", path, e))?;
        if !is_file {
            return Err(io_error(
                "cannot snapshot",
                path,
                io::Error::other("it stopped being a regular file during the snapshot"),
            ));
        }
        let rel_bytes = rel.as_os_str().as_bytes();
        // Reused when unchanged and its object is not known to be damaged (checked now
        // when `verify_objects`); anything else is copied.
        let mut prefix = std::mem::take(&mut self.prefix);
        prefix.clear();
        stat_prefix(&mut prefix, &stat);
        let key = as_field(rel_bytes);
        let reused = match job
            .prev
            .and_then(|prev| prev.unchanged(key.as_bytes(), prefix.as_bytes(), &stat))
        {
            Some(object)
                if (job.damaged.is_empty() || !job.damaged.contains(object.as_bytes()))
                    && (!job.verify_objects || self.object_usable(object, &stat)) =>
            {
                Some(object)
            }
            _ => None,
        };
        let report = &mut self.part.report;
        report.files += 1;
        report.bytes += stat.size;
        if let Some(object) = reused {
            report.linked += 1;
            self.part.index.push_str(&prefix);
            file_line_end(&mut self.part.index, object, &key);
            self.prefix = prefix;
            return Ok(());
        }
        self.prefix = prefix;
        let src = self.dir_of(parent)?;
        // O_NONBLOCK: a FIFO put in the file's place since the `statx` fails the copy
        // instead of blocking the open until someone writes to it (regular files ignore it).
        let src = rustix::fs::openat(
            src,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error("cannot read", path, e.into()))?;
        let out = match self.out {
            Some(ref mut made) => made,
            None if job.packed => self
                .out
                .insert(Out::Pack(job.new.thread_pack(self.thread)?)),
            None => {
                let (token, dir) = job.new.thread_dir(self.thread)?;
                self.out.insert(Out::Loose(token, dir))
            }
        };
        let n = self.next_object;
        self.next_object += 1;
        let mut name = itoa::Buffer::new();
        let name = name.format(n);
        let (copied, token) = match out {
            Out::Loose(token, dir) => (
                copy_object(src, dir, OsStr::new(name), &stat),
                token.as_str(),
            ),
            Out::Pack(pack) => (pack.add(&src, n, &stat), pack.token.as_str()),
        };
        let copied = copied.map_err(|e| io_error("cannot copy", path, e))?;
        let object = format!("{token}/{}/{name}", self.thread);
        let report = &mut self.part.report;
        report.copied += 1;
        report.copied_bytes += copied;
        // What was copied: a file that shrank while it was copied is recorded as copied
        // (it differs from the project's file next time, so it is copied again then).
        let stored = Stat {
            size: copied,
            ..stat
        };
        write_file(&mut self.part.index, rel_bytes, &stored, &object);
        Ok(())
    }
}

/// This process's umask, from `/proc/self/status` (read once; `None` where that line is
/// missing, before Linux 4.7). Reading it with `umask(2)` would change it for a moment, for
/// every thread.
fn umask() -> Option<u32> {
    static UMASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    })
}

/// Copies at most `stat.size` bytes of the open file `src` into a new file `name` of the
/// folder `dir`, with the mtime of `stat` and its mode made read-only ([`object_mode`]);
/// the bytes copied (fewer when the file shrank meanwhile: the index records what was
/// copied).
fn copy_object(src: OwnedFd, dir: &OwnedFd, name: &OsStr, stat: &Stat) -> io::Result<u64> {
    use rustix::io::Errno;
    let mode = object_mode(stat.mode);
    let (dst, plain) = create_object(dir, name, mode)?;
    // copy_file_range for the known size: no bytes through user space, reflinks where the
    // file system can, and no extra call to find the end. Another file system than the
    // project's (EXDEV on older kernels) or one without it: a plain copy.
    let mut copied = 0u64;
    let mut fallback = false;
    while copied < stat.size {
        let want = usize::try_from(stat.size - copied)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        match rustix::fs::copy_file_range(&src, None, &dst, None, want) {
            Ok(0) => break,
            Ok(n) => copied += n as u64,
            Err(e)
                if copied == 0
                    && (e == Errno::XDEV
                        || e == Errno::INVAL
                        || e == Errno::NOSYS
                        || e == Errno::OPNOTSUPP) =>
            {
                fallback = true;
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut dst = fs::File::from(dst);
    if fallback {
        let mut src = io::Read::take(fs::File::from(src), stat.size);
        copied = io::copy(&mut src, &mut dst)?;
    }
    finish_object(&dst, plain, mode, stat.mtime)?;
    Ok(copied)
}

/// Writes `bytes` into a new stored copy `name` of the folder `dir`, of mode `mode` (a
/// stored copy's, [`object_mode`]) and mtime `mtime`.
fn write_object(
    dir: &OwnedFd,
    name: &OsStr,
    mode: u32,
    mtime: (i64, u32),
    bytes: &[u8],
) -> io::Result<()> {
    use std::io::Write as _;
    let (dst, plain) = create_object(dir, name, mode)?;
    let mut dst = fs::File::from(dst);
    dst.write_all(bytes)?;
    finish_object(&dst, plain, mode, mtime)
}

/// Creates the new file `name` in `dir` for a stored copy of mode `mode`, open for
/// writing; and whether it has that mode already. It does when the umask leaves that mode
/// alone (nearly always), so no `fchmod` is needed (a new file is written through the
/// descriptor that created it whatever its mode).
fn create_object(dir: &OwnedFd, name: &OsStr, mode: u32) -> io::Result<(OwnedFd, bool)> {
    let plain = mode & 0o7000 == 0 && umask().is_some_and(|m| mode & m == 0);
    let dst = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(if plain { mode } else { 0o600 }),
    )?;
    Ok((dst, plain))
}

/// Gives a stored copy written through `dst` its mode (unless it has it, `plain`) and mtime.
fn finish_object(dst: &fs::File, plain: bool, mode: u32, mtime: (i64, u32)) -> io::Result<()> {
    if !plain {
        rustix::fs::fchmod(dst, Mode::from_raw_mode(mode))?;
    }
    set_mtime(dst, mtime)
}

/// Gives the open file `fd` the modification time `mtime`, access time untouched.
fn set_mtime(fd: &impl std::os::fd::AsFd, mtime: (i64, u32)) -> io::Result<()> {
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
    rustix::fs::futimens(fd, &times).map_err(io::Error::from)
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

// ---------------------------------------------------------------------------------------
// Garbage.

/// What [`collect_garbage`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GarbageReport {
    /// Experiments whose snapshot indexes were read.
    pub experiments: u64,
    /// Stored copies some experiment still uses (kept).
    pub objects_kept: u64,
    /// Stored copies no experiment uses any more (removed).
    pub objects_removed: u64,
    /// Stored copies no experiment uses that this user may not remove (another user's
    /// snapshot; their `herd gc` removes them).
    pub objects_not_removable: u64,
    /// Bytes those took that are free now (a copy still linked from some `code/` folder
    /// frees nothing).
    pub bytes_freed: u64,
    /// Temporary folders of experiment creations (`.herd-new-*`) and of code folders
    /// (`.herd-code-*`) whose processes were killed, removed.
    pub stale_folders_removed: u64,
}

/// Removes the stored copies of files that no experiment under `exp_root` uses any more
/// (their experiments deleted), and temporary folders left by killed creations. Waits
/// for snapshots being taken under `exp_root` to finish and keeps new ones waiting
/// meanwhile. An experiment whose index cannot be read stops it before anything is
/// removed (what that index uses is unknown).
pub fn collect_garbage(exp_root: &Path) -> Result<GarbageReport, Error> {
    let mut report = GarbageReport::default();
    let objects = objects_dir(exp_root);
    let Some(_lock) =
        lock_objects(&objects, true).map_err(|e| io_error("cannot lock", &objects, e))?
    else {
        return Ok(report);
    };
    let mut live = HashSet::new();
    // `<token>/<thread>` of every object in use: their packs are kept.
    let mut live_packs = HashSet::new();
    let mut stale = Vec::new();
    for entry in entries(exp_root)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.as_bytes();
        if name.starts_with(b".herd-new-") {
            // No creation runs while the lock is held: this one was killed.
            stale.push(entry.path());
            continue;
        }
        if name.starts_with(crate::name::RESERVED_PREFIX.as_bytes()) {
            continue;
        }
        let index = entry.path().join(SNAPSHOT_INDEX_FILE);
        match fs::symlink_metadata(&index) {
            Ok(md) if md.is_file() => {}
            _ => continue,
        }
        // Temporary code folders of a `herd materialize` that was killed (none runs while
        // the lock is held).
        if let Ok(inner) = fs::read_dir(entry.path()) {
            for e in inner.flatten() {
                if e.file_name().as_bytes().starts_with(b".herd-code-") {
                    stale.push(e.path());
                }
            }
        }
        let (_, body) = read_index(&index, None).map_err(|e| {
            io_error(
                "nothing was removed: cannot read the snapshot index",
                &index,
                e,
            )
        })?;
        report.experiments += 1;
        for line in body.iter().flat_map(|b| b.split(|&c| c == b'\n')) {
            if let Some(object) = line
                .strip_prefix(b"f ")
                .and_then(|l| l.split(|&c| c == b' ').nth(7))
            {
                if let Some(i) = memchr::memrchr(b'/', object) {
                    live_packs.insert(object[..i].to_vec());
                }
                live.insert(object.to_vec());
            }
        }
    }
    for dir in stale {
        fs::remove_dir_all(&dir).map_err(|e| io_error("cannot remove", &dir, e))?;
        report.stale_folders_removed += 1;
    }
    for token in entries(&objects)? {
        let token = token?;
        let token_path = token.path();
        if !token.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        for thread in entries(&token_path)? {
            let thread = thread?;
            let thread_path = thread.path();
            let file_name = thread.file_name();
            if file_name.as_bytes().starts_with(UNPACK_PREFIX.as_bytes()) {
                // An unpack that was killed (none runs while the lock is held).
                fs::remove_dir_all(&thread_path)
                    .map_err(|e| io_error("cannot remove", &thread_path, e))?;
                report.stale_folders_removed += 1;
                continue;
            }
            if let Some(t) = file_name.as_bytes().strip_suffix(PACK_SUFFIX.as_bytes()) {
                let mut id = token.file_name().as_bytes().to_vec();
                id.push(b'/');
                id.extend_from_slice(t);
                gc_pack(&thread_path, live_packs.contains(&id), &mut report)?;
                continue;
            }
            if !thread.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            for object in entries(&thread_path)? {
                let object = object?;
                let mut id = token.file_name().as_bytes().to_vec();
                id.push(b'/');
                id.extend_from_slice(thread.file_name().as_bytes());
                id.push(b'/');
                id.extend_from_slice(object.file_name().as_bytes());
                if live.contains(&id) {
                    report.objects_kept += 1;
                    continue;
                }
                let path = object.path();
                let md =
                    fs::symlink_metadata(&path).map_err(|e| io_error("cannot read", &path, e))?;
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    // Stored by another user, in a folder only they may change.
                    Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                        report.objects_not_removable += 1;
                        continue;
                    }
                    Err(e) => return Err(io_error("cannot remove", &path, e)),
                }
                report.objects_removed += 1;
                if std::os::unix::fs::MetadataExt::nlink(&md) == 1 {
                    report.bytes_freed += md.len();
                }
            }
            let _ = fs::remove_dir(&thread_path);
        }
        let _ = fs::remove_dir(&token_path);
    }
    prune_damaged(&objects)?;
    Ok(report)
}

/// Removes the pack `path` unless `in_use` (then counts its copies as kept) and unless its
/// copies are unpacked already (a job killed right after unpacking it left it).
fn gc_pack(path: &Path, in_use: bool, report: &mut GarbageReport) -> Result<(), Error> {
    let unpacked = path
        .as_os_str()
        .as_bytes()
        .strip_suffix(PACK_SUFFIX.as_bytes())
        .is_some_and(|dir| fs::symlink_metadata(OsStr::from_bytes(dir)).is_ok());
    let count = || -> u64 {
        let Ok(file) = fs::File::open(path) else {
            return 0;
        };
        match map_file(&file) {
            Ok(bytes) => pack_entries(&bytes).map_or(0, |e| e.len() as u64),
            Err(_) => 0,
        }
    };
    if in_use && !unpacked {
        report.objects_kept += count();
        return Ok(());
    }
    let n = if unpacked { 0 } else { count() };
    let len = fs::symlink_metadata(path).map_or(0, |md| md.len());
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            report.objects_not_removable += n.max(1);
            return Ok(());
        }
        Err(e) => return Err(io_error("cannot remove", path, e)),
    }
    report.objects_removed += n;
    report.bytes_freed += len;
    Ok(())
}

/// The entries of the folder `path`; every error names it.
fn entries(path: &Path) -> Result<impl Iterator<Item = Result<fs::DirEntry, Error>> + '_, Error> {
    let read = fs::read_dir(path).map_err(|e| io_error("cannot read", path, e))?;
    Ok(read.map(move |e| e.map_err(|e| io_error("cannot read", path, e))))
}

/// Drops the copies that are gone from the store's list of damaged copies (under the
/// store's exclusive lock: nobody adds to it meanwhile).
fn prune_damaged(objects: &Path) -> Result<(), Error> {
    let path = damaged_path(objects);
    let listed = read_damaged(objects).map_err(|e| io_error("cannot read", &path, e))?;
    let kept: Vec<&[u8]> = listed
        .iter()
        .map(|o| &o[..])
        .filter(|o| fs::symlink_metadata(objects.join(OsStr::from_bytes(o))).is_ok())
        .collect();
    if kept.len() == listed.len() {
        return Ok(());
    }
    let result = if kept.is_empty() {
        fs::remove_file(&path)
    } else {
        let mut text = Vec::new();
        for o in kept {
            text.extend_from_slice(o);
            text.push(b'\n');
        }
        let tmp = path.with_file_name(".damaged.new");
        fs::metadata(&path).and_then(|md| {
            fs::write(&tmp, text)?;
            fs::set_permissions(&tmp, md.permissions())?;
            fs::rename(&tmp, &path)
        })
    };
    match result {
        Ok(()) => Ok(()),
        // Another user's list, in a store only they may change.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        Err(e) => Err(io_error("cannot rewrite", &path, e)),
    }
}

// ---------------------------------------------------------------------------------------
// Materializing.

/// Makes the snapshot described by the index `index` in `dest` (an empty folder): every
/// folder, every symlink, every file a hard link to its object in `objects`. An object
/// that is missing or not what the index recorded is an error naming the file.
pub(crate) fn materialize(
    index: &Path,
    objects: &Path,
    dest: &Path,
) -> Result<MaterializeReport, Error> {
    let start = Instant::now();
    let damaged = |what: String| Error::SnapshotDamaged {
        index: index.to_owned(),
        what,
    };
    let (header, body) = read_index(index, None).map_err(|e| io_error("cannot read", index, e))?;
    let Some(body) = body else {
        return Err(damaged(format!(
            "it is of format {}, which has no stored objects",
            header.format
        )));
    };
    let mut entries = Vec::with_capacity(body.len() / 80 + 16);
    for (n, line) in body.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        entries.push(parse_line(line).ok_or_else(|| {
            damaged(format!(
                "line {} is malformed: {:?}",
                n + 4,
                String::from_utf8_lossy(line)
            ))
        })?);
    }
    // Parents sort before their children (a path sorts before every path it prefixes).
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let objects_fd = open_dir(objects).map_err(|e| io_error("cannot open", objects, e))?;
    let mut report = MaterializeReport::default();
    // A pack that cannot be unpacked: every stored copy of it this index names goes on
    // the list of damaged copies (the next snapshot copies those files afresh).
    let damaged_pack = |entries: &[(Cow<'_, [u8]>, Entry<'_>)], token_thread: &str, why: String| {
        let packed = entries.iter().filter_map(|(_, entry)| match entry {
            Entry::File { object, .. }
                if object
                    .rsplit_once('/')
                    .is_some_and(|(tt, _)| tt == token_thread) =>
            {
                Some(*object)
            }
            _ => None,
        });
        let listed = match record_damaged(objects, packed) {
            Ok(()) => "its stored copies are now on the store's list of damaged copies, so the next snapshot copies those files afresh".to_owned(),
            Err(e) => format!("its stored copies could not be put on the store's list of damaged copies ({e})"),
        };
        damaged(format!("{why}; {listed}"))
    };
    // The packs of stored copies this index names that are still packed: unpacked first,
    // several at once (a submit's packs are one per walking thread).
    let token_threads: HashSet<&str> = entries
        .iter()
        .filter_map(|(_, entry)| match entry {
            Entry::File { object, .. } => object.rsplit_once('/').map(|(tt, _)| tt),
            _ => None,
        })
        .collect();
    let mut packed: Vec<&str> = token_threads
        .into_iter()
        .filter(|tt| fs::symlink_metadata(objects.join(format!("{tt}{PACK_SUFFIX}"))).is_ok())
        .collect();
    packed.sort_unstable();
    let (unpacked, failed) = unpack_all(objects, &packed);
    report.unpacked = unpacked;
    match failed {
        None => {}
        Some((token_thread, UnpackError::Damaged(why))) => {
            return Err(damaged_pack(&entries, token_thread, why));
        }
        Some((_, UnpackError::Io(e))) => return Err(e),
    }
    for (rel, entry) in &entries {
        let rel_os = OsStr::from_bytes(rel);
        let path = dest.join(rel_os);
        match entry {
            Entry::Dir => {
                fs::create_dir(&path).map_err(|e| io_error("cannot create folder", &path, e))?;
                report.dirs += 1;
            }
            Entry::Symlink(target) => {
                std::os::unix::fs::symlink(OsStr::from_bytes(target), &path)
                    .map_err(|e| io_error("cannot create symlink", &path, e))?;
                report.symlinks += 1;
            }
            Entry::File { stat, object } => {
                let obj = OsStr::new(object);
                let intact = stat_at(&objects_fd, obj, || objects.join(object))
                    .is_ok_and(|found| object_intact(found, stat));
                if !intact {
                    // Never reused again. The list is kept by whoever may write it; this
                    // error is what matters.
                    let listed = match record_damaged(objects, [*object]) {
                        Ok(()) => "it is now on the store's list of damaged copies, so the next snapshot copies the file afresh".to_owned(),
                        Err(e) => format!("it could not be put on the store's list of damaged copies ({e})"),
                    };
                    return Err(damaged(format!(
                        "the stored copy of {} ({}) is missing or was changed after the snapshot (someone made a file of an experiment's code/ writable and edited it in place?); {listed}",
                        rel_os.to_string_lossy(),
                        objects.join(object).display()
                    )));
                }
                match rustix::fs::linkat(&objects_fd, obj, rustix::fs::CWD, &path, AtFlags::empty())
                {
                    Ok(()) => {}
                    // Too many links to one object (65,000 on ext4), a copy stored by another
                    // user (`fs.protected_hardlinks` refuses linking files one cannot
                    // write), a file system without hard links: a copy of it.
                    Err(e)
                        if e == rustix::io::Errno::MLINK
                            || e == rustix::io::Errno::PERM
                            || e == rustix::io::Errno::ACCESS
                            || e == rustix::io::Errno::XDEV =>
                    {
                        let src = rustix::fs::openat(
                            &objects_fd,
                            obj,
                            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                            Mode::empty(),
                        )
                        .map_err(|e| io_error("cannot read", &objects.join(object), e.into()))?;
                        let parent = path.parent().unwrap_or(dest);
                        let parent_fd =
                            open_dir(parent).map_err(|e| io_error("cannot open", parent, e))?;
                        let name = path.file_name().unwrap_or_default();
                        copy_object(src, &parent_fd, name, stat)
                            .map_err(|e| io_error("cannot copy", &path, e))?;
                        report.copied += 1;
                    }
                    Err(e) => return Err(io_error("cannot link", &path, e.into())),
                }
                report.files += 1;
            }
        }
    }
    report.elapsed = start.elapsed();
    Ok(report)
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
            let mut text = String::new();
            write_file(&mut text, rel, &stat, "abc-1/0/7");
            write_dir(&mut text, rel);
            write_symlink(&mut text, rel, b"../tar get\n\xfe");
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines.len(), 3, "{text:?}");
            let (back, entry) = parse_line(lines[0].as_bytes()).expect("file parses");
            assert_eq!(&*back, rel);
            assert_eq!(
                entry,
                Entry::File {
                    stat,
                    object: "abc-1/0/7"
                }
            );
            let (back, entry) = parse_line(lines[1].as_bytes()).expect("dir parses");
            assert_eq!((&*back, entry), (rel, Entry::Dir));
            let (back, entry) = parse_line(lines[2].as_bytes()).expect("symlink parses");
            assert_eq!(&*back, rel);
            assert_eq!(entry, Entry::Symlink(b"../tar get\n\xfe".to_vec()));
        }
        assert!(parse_line(b"f 1 2 3").is_none());
        assert!(parse_line(b"x a").is_none());
    }

    #[test]
    fn a_failed_snapshot_leaves_the_store_to_one_still_running() {
        let root = tempfile::tempdir().expect("tempdir");
        let objects = objects_dir(root.path());
        let a = NewObjects::create(root.path()).expect("a");
        let b = NewObjects::create(root.path()).expect("b");
        // Nothing copied yet: no folder of new objects.
        assert_eq!(fs::read_dir(&objects).expect("objects").count(), 0);
        drop(a);
        assert!(
            objects.is_dir(),
            "b holds the store: a failing must not remove it"
        );
        let (token, _) = b.thread_dir(0).expect("b's first copy");
        assert!(objects.join(&token).join("0").is_dir());
        // b fails too: its folder and the empty store go.
        drop(b);
        assert!(!root.path().join(STORE_DIR).exists());
    }

    #[test]
    fn packs_round_trip_and_record_what_a_shrinking_file_had() {
        let root = tempfile::tempdir().expect("tempdir");
        let new = NewObjects::create(root.path()).expect("store");
        let mut pack = new.thread_pack(3).expect("pack");
        let src_dir = root.path().join("src");
        fs::create_dir(&src_dir).expect("mkdir");
        let open = |name: &str, bytes: &[u8]| {
            let path = src_dir.join(name);
            fs::write(&path, bytes).expect("write");
            OwnedFd::from(fs::File::open(&path).expect("open"))
        };
        let stat = |size: u64, mode: u32, mtime: (i64, u32)| Stat {
            size,
            mtime,
            ctime: mtime,
            ino: 1,
            mode,
        };
        // Larger than a flush, so the header is written before the file turns out short:
        // patched in the file; a small one patched in the buffer.
        let big: Vec<u8> = (0..3 * PACK_FLUSH + 17).map(|i| (i % 251) as u8).collect();
        let cases: [(&str, Vec<u8>, Stat); 4] = [
            (
                "small",
                b"print('hi')\n".to_vec(),
                stat(12, 0o644, (1_600_000_000, 5)),
            ),
            ("empty", Vec::new(), stat(0, 0o755, (-3, 999_999_999))),
            (
                "shrank-big",
                big.clone(),
                stat(big.len() as u64 + 4096, 0o600, (7, 0)),
            ),
            ("shrank-small", b"abc".to_vec(), stat(10, 0o4750, (8, 1))),
        ];
        for (n, (name, bytes, st)) in cases.iter().enumerate() {
            let got = pack.add(&open(name, bytes), n as u64, st).expect("add");
            assert_eq!(got, bytes.len() as u64, "{name}");
        }
        pack.flush().expect("flush");
        let path = pack.path.clone();
        drop(pack);
        let file = fs::File::open(&path).expect("open pack");
        let bytes = map_file(&file).expect("read pack");
        let all: &[u8] = &bytes;
        let entries = pack_entries(all).expect("parses");
        assert_eq!(entries.len(), cases.len());
        for (n, (e, (name, bytes, st))) in entries.iter().zip(&cases).enumerate() {
            assert_eq!(e.n, n as u64, "{name}");
            assert_eq!(e.bytes, &bytes[..], "{name}");
            assert_eq!(e.mode, object_mode(st.mode), "{name}");
            assert_eq!(e.mtime, st.mtime, "{name}");
        }
        // Cut anywhere, it is refused, never read past its end.
        for cut in [1, PACK_MAGIC.len() + 5, all.len() - 1] {
            assert!(pack_entries(&all[..cut]).is_err(), "cut at {cut}");
        }
        new.keep();
    }

    #[test]
    fn path_hashes_differ_for_paths_that_differ_in_any_byte() {
        let paths: Vec<Vec<u8>> = (0..2000)
            .map(|i| format!("models/layer_{i:04}.py").into_bytes())
            .chain(["", "a", "a ", "abcdefgh", "abcdefghi", "abcdefgh\0"].map(|s| s.into()))
            .collect();
        let hashes: std::collections::HashSet<u64> = paths.iter().map(|p| path_hash(p)).collect();
        assert_eq!(hashes.len(), paths.len());
    }

    #[test]
    fn paths_and_objects_that_could_escape_are_refused() {
        for bad in [
            &b"d ../etc"[..],
            b"d a/../../b",
            b"d /abs",
            b"d a//b",
            b"d ./a",
            b"d a extra",
            b"f 1 2 3 4 5 6 644 ../../x/0/1 a.py",
            b"f 1 2 3 4 5 6 644 a/0 a.py",
            b"f 1 2 3 4 5 6 644 a/0/1/2 a.py",
        ] {
            assert!(
                parse_line(bad).is_none(),
                "{:?} parsed",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(parse_line(b"f 1 2 3 4 5 6 644 tok-1/0/1 a.py").is_some());
    }
}
