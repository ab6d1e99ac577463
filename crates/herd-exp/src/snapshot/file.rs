//! The code snapshot's file layer: what a `statx` says of a file, whether the previous
//! snapshot's copy of it may be linked, and the copy itself (`copy_file_range`, read-only,
//! the project file's mtime).

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use crate::outputs;

/// A file modified this close (in seconds) to the moment its previous copy was written is
/// copied again, never linked.
pub const RACY_SECS: i64 = 2;

/// What a `statx` tells about a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    pub(super) regular: bool,
    pub(super) size: u64,
    pub(super) mtime: (i64, u32),
    pub(super) ctime: (i64, u32),
    /// Permission bits (`0o7777`).
    pub(super) mode: u32,
    pub(super) uid: u32,
}

impl Stat {
    pub(super) fn of_statx(st: &rustix::fs::Statx) -> Stat {
        Stat {
            regular: u32::from(st.stx_mode) & 0o170_000 == 0o100_000,
            size: st.stx_size,
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
            mode: u32::from(st.stx_mode) & 0o7777,
            uid: st.stx_uid,
        }
    }

    pub(super) fn of_metadata(md: &fs::Metadata) -> Stat {
        use std::os::unix::fs::MetadataExt;
        let ns = |n: i64| u32::try_from(n).unwrap_or(0);
        Stat {
            regular: md.is_file(),
            size: md.size(),
            mtime: (md.mtime(), ns(md.mtime_nsec())),
            ctime: (md.ctime(), ns(md.ctime_nsec())),
            mode: md.mode() & 0o7777,
            uid: md.uid(),
        }
    }
}

/// `lstat` of `name` relative to the open folder `dir`. Kernels without `statx` (before
/// Linux 4.11, or a sandbox refusing it) get a plain `lstat` of `full`, its whole path.
pub(super) fn stat_at(
    dir: &OwnedFd,
    name: &OsStr,
    full: impl FnOnce() -> PathBuf,
) -> io::Result<Stat> {
    use rustix::io::Errno;
    let mask = StatxFlags::TYPE
        | StatxFlags::MODE
        | StatxFlags::SIZE
        | StatxFlags::MTIME
        | StatxFlags::CTIME
        | StatxFlags::UID;
    match rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask) {
        Ok(st) => Ok(Stat::of_statx(&st)),
        Err(e) if e == Errno::NOSYS || e == Errno::PERM => {
            Ok(Stat::of_metadata(&fs::symlink_metadata(full())?))
        }
        Err(e) => Err(e.into()),
    }
}

pub(super) fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// The mode of a copy of a project file of mode `mode`: the same without write permission.
pub(super) fn copy_mode(mode: u32) -> u32 {
    mode & !0o222
}

/// Whether `old`, the previous snapshot's copy of a project file now described by `now`,
/// may be linked into the new snapshot: a regular file of the same size, mtime and mode
/// (less write permission), written at least [`RACY_SECS`] after the file's last
/// modification, and readable by this process (a copy of another user's may not be).
pub(super) fn reusable(old: &Stat, now: &Stat, readable: impl FnOnce() -> bool) -> bool {
    old.regular
        && old.size == now.size
        && old.mtime == now.mtime
        && old.mode == copy_mode(now.mode)
        && now.mtime < (old.ctime.0.saturating_sub(RACY_SECS), old.ctime.1)
        && (old.uid == euid() || readable())
}

/// This process's effective user id (asked once).
pub(super) fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *EUID.get_or_init(|| rustix::process::geteuid().as_raw())
}

/// Opens the project file `name` of the folder `dir` to read it. O_NONBLOCK: a FIFO put in
/// the file's place since its `statx` fails the copy instead of blocking the open until
/// someone writes to it.
pub(super) fn open_src(dir: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
    outputs::open_in(dir, Path::new(name))
}

/// This process's umask, from `/proc/self/status` (read once; `None` where that line is
/// missing, before Linux 4.7). Reading it with `umask(2)` would change it for a moment, for
/// every thread.
pub(super) fn umask() -> Option<u32> {
    static UMASK: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *UMASK.get_or_init(|| {
        let status = fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:"))?;
        u32::from_str_radix(line.trim(), 8).ok()
    })
}

/// Copies at most `stat.size` bytes of the open file `src` into a new file `name` of the
/// folder `dir`, with the mtime of `stat` and its mode made read-only ([`copy_mode`]);
/// returns the bytes copied (fewer when the file shrank meanwhile).
pub(super) fn copy_file(src: OwnedFd, dir: &OwnedFd, name: &OsStr, stat: &Stat) -> io::Result<u64> {
    use rustix::io::Errno;
    let mode = copy_mode(stat.mode);
    // Created with its final mode when the umask leaves that alone (nearly always), so no
    // `fchmod`: a new file is written through the descriptor that created it whatever its
    // mode.
    let plain = mode & 0o7000 == 0 && umask().is_some_and(|m| mode & m == 0);
    let dst = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
        Mode::from_raw_mode(if plain { mode } else { 0o600 }),
    )?;
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
    if !plain {
        rustix::fs::fchmod(&dst, Mode::from_raw_mode(mode))?;
    }
    set_mtime(&dst, stat.mtime)?;
    Ok(copied)
}

/// Gives the open file `fd` the modification time `mtime`, access time untouched.
pub(super) fn set_mtime(fd: &impl std::os::fd::AsFd, mtime: (i64, u32)) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(size: u64, mtime: i64, ctime: i64, mode: u32) -> Stat {
        Stat {
            regular: true,
            size,
            mtime: (mtime, 5),
            ctime: (ctime, 0),
            mode,
            uid: euid(),
        }
    }

    #[test]
    fn a_copy_is_reused_only_when_size_mtime_and_mode_match_and_it_is_not_racy() {
        let now = stat(10, 1000, 1000, 0o644);
        let copy = stat(10, 1000, 1000 + RACY_SECS + 1, 0o444);
        assert!(reusable(&copy, &now, || true));
        assert!(!reusable(&Stat { size: 11, ..copy }, &now, || true));
        assert!(!reusable(
            &Stat {
                mtime: (1000, 6),
                ..copy
            },
            &now,
            || true
        ));
        // Executable now, or the copy made writable since.
        assert!(!reusable(&copy, &Stat { mode: 0o755, ..now }, || true));
        assert!(!reusable(
            &Stat {
                mode: 0o644,
                ..copy
            },
            &now,
            || true
        ));
        assert!(!reusable(
            &Stat {
                regular: false,
                ..copy
            },
            &now,
            || true
        ));
        // Written too soon after the file's last change.
        assert!(!reusable(
            &Stat {
                ctime: (1000 + RACY_SECS, 0),
                ..copy
            },
            &now,
            || true
        ));
        // Another user's copy: only when readable.
        let theirs = Stat {
            uid: euid().wrapping_add(1),
            ..copy
        };
        assert!(reusable(&theirs, &now, || true));
        assert!(!reusable(&theirs, &now, || false));
    }
}
