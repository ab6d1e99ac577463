//! Finding the checkpoint a job resumes from.
//!
//! The convention (docs/launch.md, "Checkpoints"): a job writes each checkpoint, a file or a
//! folder, directly into `HERD_CHECKPOINT_DIR`, first under a temporary name (one that
//! starts with `.`, or ends in `.tmp`, `.partial` or `.incomplete`), and renames it to its
//! final name once it is complete. Only entries with a final name are checkpoints; the
//! newest of them (latest modification time, then the greatest name) is the one a new
//! attempt resumes from, `HERD_RESUME_FROM`.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Suffixes of names that are still being written.
const UNFINISHED: [&str; 3] = [".tmp", ".partial", ".incomplete"];

/// Whether `name` is the final name of a checkpoint, not a temporary one.
pub fn is_complete(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && !bytes.starts_with(b".")
        && !UNFINISHED.iter().any(|s| bytes.ends_with(s.as_bytes()))
}

/// The newest complete checkpoint in `dir`; `Ok(None)` when there is none or `dir` does not
/// exist.
pub fn newest(dir: &Path) -> io::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut best: Option<(SystemTime, std::ffi::OsString)> = None;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if !is_complete(&name) {
            continue;
        }
        // Follows a symlink (`last.ckpt` → …): a dangling one is no checkpoint.
        let Ok(md) = std::fs::metadata(entry.path()) else {
            continue;
        };
        let key = (md.modified()?, name);
        if best.as_ref().is_none_or(|b| key > *b) {
            best = Some(key);
        }
    }
    Ok(best.map(|(_, name)| dir.join(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File, FileTimes};
    use std::time::Duration;

    fn at(path: &Path, secs: u64) {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs);
        File::options()
            .write(true)
            .open(path)
            .or_else(|_| File::open(path))
            .expect("open")
            .set_times(FileTimes::new().set_modified(t))
            .expect("set mtime");
    }

    #[test]
    fn temporary_names_are_not_checkpoints() {
        for name in [
            "ckpt-100.pt",
            "epoch=3-step=400.ckpt",
            "global_step400",
            "last.ckpt",
        ] {
            assert!(is_complete(OsStr::new(name)), "{name}");
        }
        for name in [
            ".ckpt-100.pt.tmp-42",
            "ckpt-100.pt.tmp",
            "step400.partial",
            "x.incomplete",
            ".hidden",
            "",
        ] {
            assert!(!is_complete(OsStr::new(name)), "{name}");
        }
    }

    #[test]
    fn the_newest_complete_entry_wins_files_and_folders_alike() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        assert_eq!(newest(&d.join("missing")).expect("missing is none"), None);
        assert_eq!(newest(d).expect("empty"), None);
        fs::write(d.join("epoch=9-step=90.ckpt"), "a").expect("write");
        at(&d.join("epoch=9-step=90.ckpt"), 10);
        fs::write(d.join("epoch=10-step=100.ckpt"), "b").expect("write");
        at(&d.join("epoch=10-step=100.ckpt"), 20);
        // Newer, but still being written.
        fs::write(d.join(".epoch=11.ckpt.tmp-7"), "c").expect("write");
        at(&d.join(".epoch=11.ckpt.tmp-7"), 30);
        assert_eq!(
            newest(d).expect("reads"),
            Some(d.join("epoch=10-step=100.ckpt")),
            "by time, not by name"
        );
        // A sharded checkpoint is a folder, renamed into place when complete.
        fs::create_dir(d.join("global_step110")).expect("mkdir");
        at(&d.join("global_step110"), 40);
        assert_eq!(newest(d).expect("reads"), Some(d.join("global_step110")));
        // A dangling symlink is passed over.
        std::os::unix::fs::symlink("gone", d.join("latest")).expect("symlink");
        assert_eq!(newest(d).expect("reads"), Some(d.join("global_step110")));
    }
}
