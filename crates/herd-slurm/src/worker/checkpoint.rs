//! Finding the checkpoint a job resumes from.
//!
//! A job writes its checkpoints, files or folders, directly into `HERD_CHECKPOINT_DIR`; a new
//! attempt resumes from the newest complete one, `HERD_RESUME_FROM` (docs/launch.md,
//! "Checkpoints"). herd's own convention is to write under a temporary name and rename once
//! complete, but the frameworks write in place, so [`completed_at`] also knows their layouts
//! and tells a complete checkpoint from one a killed job left half-written. Each entry, by
//! the first row that matches it:
//!
//! | entry | complete when | its time |
//! |---|---|---|
//! | a temporary name: starts with `.`, ends in `.tmp`, `.partial`, `.incomplete` | never | |
//! | folder `tmp-checkpoint-N` (HF Transformers 4.36–4.38 staging) | never | |
//! | folder `checkpoint-N` (HF Transformers' Trainer, written in place) | it holds `trainer_state.json`, the Trainer's last write | that file's |
//! | folder holding `.metadata` (torch.distributed.checkpoint, renamed in last; `__0.metadata` without collectives) | always | that file's |
//! | folder holding `*.distcp` files but no `.metadata` | never | |
//! | empty folder (DCP makes it first) | never | |
//! | other folder | always | its own |
//! | empty file | never | |
//! | file that starts as a zip archive (`torch.save`, Lightning's `.ckpt`) | it ends with the archive's end record | its own |
//! | other file | always | its own |
//!
//! The newest complete entry wins: latest time, then the greatest name. A folder known by its
//! last file takes that file's time, not its own: a folder's own changes with every file
//! added or removed later (a rotation deleting an old checkpoint file by file would make it
//! look new).

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Suffixes of names that are still being written.
const UNFINISHED: [&str; 3] = [".tmp", ".partial", ".incomplete"];
/// The folder HF Transformers' Trainer writes each checkpoint into (`checkpoint-500`), and
/// the staging name a few versions wrote it under first (`tmp-checkpoint-500`).
const HF_PREFIX: &str = "checkpoint-";
const HF_STAGING_PREFIX: &str = "tmp-checkpoint-";
/// The Trainer's last write into its checkpoint folder.
const HF_LAST: &str = "trainer_state.json";
/// torch.distributed.checkpoint: the metadata it renames into the folder last (`.metadata`;
/// `__0.metadata` when saved without collectives, one per rank), and its data files' suffix.
const DCP_LAST: [&str; 2] = [".metadata", "__0.metadata"];
const DCP_DATA_SUFFIX: &str = ".distcp";
/// A zip archive's first bytes (a local file header) and its end record's signature; the
/// end record is 22 bytes and a comment of at most 65,535.
const ZIP_START: &[u8] = b"PK\x03\x04";
const ZIP_END: &[u8] = b"PK\x05\x06";
const ZIP_END_LEN: u64 = 22;
const ZIP_TAIL_MAX: u64 = ZIP_END_LEN + 0xffff;

/// Whether `name` is a temporary name, one that is never a checkpoint.
pub fn is_temporary(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    bytes.is_empty()
        || bytes.starts_with(b".")
        || UNFINISHED.iter().any(|s| bytes.ends_with(s.as_bytes()))
}

/// Whether `path` (an entry of the checkpoint folder) is a complete checkpoint.
pub fn is_complete(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|md| matches!(completed_at(path, &md), Ok(Some(_))))
}

/// When `path`, an entry of the checkpoint folder with metadata `md` (symlinks followed), was
/// completed, by the table of the module's documentation; `None` if it is not a complete
/// checkpoint.
pub fn completed_at(path: &Path, md: &Metadata) -> io::Result<Option<SystemTime>> {
    let Some(name) = path.file_name() else {
        return Ok(None);
    };
    if is_temporary(name) {
        return Ok(None);
    }
    let name = name.as_bytes();
    if md.is_dir() {
        if name.starts_with(HF_STAGING_PREFIX.as_bytes()) {
            return Ok(None);
        }
        if is_hf_checkpoint(name) {
            return modified_if_not_empty(&path.join(HF_LAST));
        }
        for last in DCP_LAST {
            if let Some(t) = modified_if_not_empty(&path.join(last))? {
                return Ok(Some(t));
            }
        }
        let mut empty = true;
        for entry in std::fs::read_dir(path)? {
            empty = false;
            if entry?
                .file_name()
                .as_bytes()
                .ends_with(DCP_DATA_SUFFIX.as_bytes())
            {
                return Ok(None);
            }
        }
        return (!empty).then(|| md.modified()).transpose();
    }
    if md.len() == 0 || is_zip_cut_short(path, md.len())? {
        return Ok(None);
    }
    md.modified().map(Some)
}

/// `checkpoint-` and digits.
fn is_hf_checkpoint(name: &[u8]) -> bool {
    name.strip_prefix(HF_PREFIX.as_bytes())
        .is_some_and(|n| !n.is_empty() && n.iter().all(u8::is_ascii_digit))
}

/// The modification time of `path` when it is a file with something in it.
fn modified_if_not_empty(path: &Path) -> io::Result<Option<SystemTime>> {
    match std::fs::metadata(path) {
        Ok(md) if md.is_file() && md.len() > 0 => md.modified().map(Some),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether the file at `path`, `len` bytes long, starts as a zip archive (what `torch.save`
/// writes) but lacks the end record that closes one: it was cut short.
fn is_zip_cut_short(path: &Path, len: u64) -> io::Result<bool> {
    let mut f = File::open(path)?;
    let mut start = [0u8; 4];
    if len < start.len() as u64 {
        return Ok(false);
    }
    f.read_exact(&mut start)?;
    if start != ZIP_START {
        return Ok(false);
    }
    let tail_len = len.min(ZIP_TAIL_MAX);
    let mut tail = Vec::with_capacity(tail_len as usize);
    f.seek(SeekFrom::Start(len - tail_len))?;
    f.take(tail_len).read_to_end(&mut tail)?;
    Ok(!ends_with_zip_end(&tail))
}

/// Whether `tail` ends with a zip end record: its signature, then 16 bytes, then a comment
/// as long as the record's last two bytes say.
fn ends_with_zip_end(tail: &[u8]) -> bool {
    let fixed = ZIP_END_LEN as usize;
    (0..=tail.len().saturating_sub(fixed)).rev().any(|at| {
        let record = &tail[at..];
        record.len() >= fixed
            && record.starts_with(ZIP_END)
            && usize::from(u16::from_le_bytes([record[20], record[21]])) == record.len() - fixed
    })
}

/// The newest complete checkpoint in `dir`; `Ok(None)` when there is none or `dir` does not
/// exist.
pub fn newest(dir: &Path) -> io::Result<Option<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut best: Option<(SystemTime, OsString)> = None;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if is_temporary(&name) {
            continue;
        }
        let path = entry.path();
        // Follows a symlink (`last.ckpt` → …): a dangling one is no checkpoint.
        let Ok(md) = std::fs::metadata(&path) else {
            continue;
        };
        // An entry removed while we look (a rotation) is no checkpoint either.
        let time = match completed_at(&path, &md) {
            Ok(Some(time)) => time,
            Ok(None) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let key = (time, name);
        if best.as_ref().is_none_or(|b| key > *b) {
            best = Some(key);
        }
    }
    Ok(best.map(|(_, name)| dir.join(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, FileTimes};
    use std::time::Duration;

    fn time(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    /// Sets the modification time of `path`, a file or a folder.
    fn at(path: &Path, secs: u64) {
        File::options()
            .write(true)
            .open(path)
            .or_else(|_| File::open(path))
            .expect("open")
            .set_times(FileTimes::new().set_modified(time(secs)))
            .expect("set mtime");
    }

    /// Writes `path` with `data` and modification time `secs`.
    fn write_at(path: &Path, data: &[u8], secs: u64) {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("mkdir");
        }
        fs::write(path, data).expect("write");
        at(path, secs);
    }

    /// A zip archive of one stored entry, laid out as `torch.save` writes it (`archive/…`):
    /// local header and data, central directory, end record, then `comment`.
    fn zip(data: &[u8], comment: &[u8]) -> Vec<u8> {
        let name = b"archive/data.pkl";
        let (n, len) = (name.len() as u16, data.len() as u32);
        let mut z = Vec::new();
        z.extend_from_slice(ZIP_START);
        z.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&[0, 0]);
        z.extend_from_slice(name);
        z.extend_from_slice(data);
        let central = z.len() as u32;
        z.extend_from_slice(b"PK\x01\x02");
        z.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&len.to_le_bytes());
        z.extend_from_slice(&n.to_le_bytes());
        z.extend_from_slice(&[0; 12]);
        z.extend_from_slice(&0u32.to_le_bytes());
        z.extend_from_slice(name);
        let central_len = z.len() as u32 - central;
        z.extend_from_slice(ZIP_END);
        z.extend_from_slice(&[0, 0, 0, 0, 1, 0, 1, 0]);
        z.extend_from_slice(&central_len.to_le_bytes());
        z.extend_from_slice(&central.to_le_bytes());
        z.extend_from_slice(&(comment.len() as u16).to_le_bytes());
        z.extend_from_slice(comment);
        z
    }

    /// What the Trainer of HF Transformers 5.24 writes into `checkpoint-N`, in its order
    /// (`_save_checkpoint`): the model, the training arguments, optimizer, scheduler, RNG
    /// state, and `trainer_state.json` last. `upto` of them.
    fn hf_checkpoint(dir: &Path, upto: usize, secs: u64) {
        let files = [
            "model.safetensors",
            "training_args.bin",
            "optimizer.pt",
            "scheduler.pt",
            "rng_state.pth",
            HF_LAST,
        ];
        for f in &files[..upto] {
            write_at(&dir.join(f), &zip(b"x", b""), secs);
        }
        at(dir, secs);
    }

    #[test]
    fn temporary_names_are_never_checkpoints() {
        for name in [
            "ckpt-100.pt",
            "epoch=3-step=400.ckpt",
            "global_step400",
            "last.ckpt",
        ] {
            assert!(!is_temporary(OsStr::new(name)), "{name}");
        }
        for name in [
            ".ckpt-100.pt.tmp-42",
            "ckpt-100.pt.tmp",
            "step400.partial",
            "x.incomplete",
            ".hidden",
            "",
        ] {
            assert!(is_temporary(OsStr::new(name)), "{name}");
        }
        let dir = tempfile::tempdir().expect("tempdir");
        write_at(&dir.path().join("ckpt-100.pt.tmp"), &zip(b"x", b""), 1);
        assert!(!is_complete(&dir.path().join("ckpt-100.pt.tmp")));
    }

    #[test]
    fn torch_save_files_are_complete_with_their_zip_end_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let whole = zip(&[7; 300], b"");
        write_at(&d.join("whole.pt"), &whole, 1);
        assert!(is_complete(&d.join("whole.pt")));
        write_at(&d.join("commented.pt"), &zip(&[7; 300], b"a comment"), 1);
        assert!(is_complete(&d.join("commented.pt")));
        // Cut anywhere, even one byte short of the end, it is not a checkpoint.
        for cut in [4, 30, 200, whole.len() - 22, whole.len() - 1] {
            write_at(&d.join("cut.ckpt"), &whole[..cut], 1);
            assert!(!is_complete(&d.join("cut.ckpt")), "cut at {cut}");
        }
        // Other files are taken as they are, unless empty.
        write_at(&d.join("weights.bin"), b"\x80\x02legacy pickle", 1);
        assert!(is_complete(&d.join("weights.bin")));
        write_at(&d.join("empty.pt"), b"", 1);
        assert!(!is_complete(&d.join("empty.pt")));
    }

    #[test]
    fn hf_checkpoint_folders_are_complete_with_their_trainer_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        for upto in 0..6 {
            let ckpt = d.join(format!("checkpoint-{upto}"));
            fs::create_dir(&ckpt).expect("mkdir");
            hf_checkpoint(&ckpt, upto, 1);
            assert!(!is_complete(&ckpt), "{upto} files of 6");
        }
        hf_checkpoint(&d.join("checkpoint-6"), 6, 1);
        assert!(is_complete(&d.join("checkpoint-6")));
        // An empty trainer_state.json was cut before its first byte.
        write_at(&d.join("checkpoint-7").join(HF_LAST), b"", 1);
        assert!(!is_complete(&d.join("checkpoint-7")));
        // The staging folder of 4.36–4.38 never is, however complete.
        hf_checkpoint(&d.join("tmp-checkpoint-8"), 6, 1);
        assert!(!is_complete(&d.join("tmp-checkpoint-8")));
        // A folder of one's own that only looks like it is any folder.
        write_at(&d.join("checkpoint-best").join("weights.pt"), b"w", 1);
        assert!(is_complete(&d.join("checkpoint-best")));
    }

    #[test]
    fn dcp_folders_are_complete_with_their_metadata() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // `dcp.save` makes the folder, writes `__RANK_I.distcp` files, then
        // `.metadata.tmp`, renamed to `.metadata`.
        let step = d.join("step-4");
        fs::create_dir(&step).expect("mkdir");
        assert!(!is_complete(&step), "empty");
        write_at(&step.join("__0_0.distcp"), b"data", 1);
        write_at(&step.join("__1_0.distcp"), b"data", 1);
        assert!(!is_complete(&step), "data only");
        write_at(&step.join(".metadata.tmp"), b"meta", 1);
        assert!(!is_complete(&step), "metadata not yet renamed");
        fs::rename(step.join(".metadata.tmp"), step.join(".metadata")).expect("rename");
        assert!(is_complete(&step));
        // Saved without collectives, rank 0's metadata.
        write_at(&d.join("local").join("__0_0.distcp"), b"data", 1);
        write_at(&d.join("local").join("__0.metadata"), b"meta", 1);
        assert!(is_complete(&d.join("local")));
    }

    #[test]
    fn the_newest_complete_entry_wins_files_and_folders_alike() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        assert_eq!(newest(&d.join("missing")).expect("missing is none"), None);
        assert_eq!(newest(d).expect("empty"), None);
        write_at(&d.join("epoch=9-step=90.ckpt"), &zip(b"a", b""), 10);
        write_at(&d.join("epoch=10-step=100.ckpt"), &zip(b"b", b""), 20);
        // Newer, but still being written.
        write_at(&d.join(".epoch=11.ckpt.tmp-7"), &zip(b"c", b""), 30);
        assert_eq!(
            newest(d).expect("reads"),
            Some(d.join("epoch=10-step=100.ckpt")),
            "by time, not by name"
        );
        // A sharded checkpoint is a folder, renamed into place when complete.
        write_at(&d.join("global_step110").join("mp_rank_00.pt"), b"m", 40);
        at(&d.join("global_step110"), 40);
        assert_eq!(newest(d).expect("reads"), Some(d.join("global_step110")));
        // A dangling symlink is passed over.
        std::os::unix::fs::symlink("gone", d.join("latest")).expect("symlink");
        assert_eq!(newest(d).expect("reads"), Some(d.join("global_step110")));
    }

    #[test]
    fn half_written_framework_checkpoints_lose_to_the_previous_complete_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // HF: checkpoint-4 complete, checkpoint-6 cut during its optimizer (newer).
        hf_checkpoint(&d.join("checkpoint-4"), 6, 10);
        hf_checkpoint(&d.join("checkpoint-6"), 2, 20);
        write_at(
            &d.join("checkpoint-6").join("optimizer.pt"),
            &zip(b"o", b"")[..9],
            20,
        );
        assert_eq!(newest(d).expect("reads"), Some(d.join("checkpoint-4")));
        // A rotation deleting files from an older checkpoint changes the folder's time, not
        // its trainer state's.
        hf_checkpoint(&d.join("checkpoint-2"), 6, 5);
        fs::remove_file(d.join("checkpoint-2").join("optimizer.pt")).expect("rm");
        at(&d.join("checkpoint-2"), 30);
        assert_eq!(newest(d).expect("reads"), Some(d.join("checkpoint-4")));
        // DCP: step-8 has its data but not yet its metadata.
        write_at(&d.join("step-8").join("__0_0.distcp"), b"data", 40);
        write_at(&d.join("step-8").join(".metadata.tmp"), b"meta", 40);
        at(&d.join("step-8"), 40);
        assert_eq!(newest(d).expect("reads"), Some(d.join("checkpoint-4")));
        // Lightning's `.ckpt` copied across file systems, cut mid-copy.
        let ckpt = zip(&[1; 100], b"");
        write_at(&d.join("epoch=0-step=10.ckpt"), &ckpt[..60], 50);
        assert_eq!(newest(d).expect("reads"), Some(d.join("checkpoint-4")));
        write_at(&d.join("epoch=0-step=10.ckpt"), &ckpt, 60);
        assert_eq!(
            newest(d).expect("reads"),
            Some(d.join("epoch=0-step=10.ckpt"))
        );
    }
}
