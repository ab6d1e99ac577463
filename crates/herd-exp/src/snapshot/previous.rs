//! The previous snapshot of the same project: where unchanged files are linked from.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::layout::ExperimentDir;

/// The previous snapshot of the same project.
#[derive(Debug)]
pub(super) struct Previous {
    /// Its experiment's name.
    pub(super) name: String,
    /// Its `code/` folder.
    pub(super) code: PathBuf,
    /// Its size, when its manifest says it.
    pub(super) size: Option<(u64, u64)>,
}

/// The newest experiment under `exp_root` (newest `code/` folder) whose manifest names the
/// project root `root`. Experiments whose manifest cannot be read (another user's, say)
/// are passed over; one that is not valid is passed over with a warning.
pub(super) fn find_previous(
    exp_root: &Path,
    root: &Path,
    warnings: &mut Vec<String>,
) -> Option<Previous> {
    #[derive(serde::Deserialize)]
    struct Size {
        files: u64,
        bytes: u64,
    }
    #[derive(serde::Deserialize)]
    struct Head {
        project: crate::Project,
        #[serde(default)]
        snapshot: Option<Size>,
    }
    use std::os::unix::fs::MetadataExt;
    let mut candidates = Vec::new();
    for entry in fs::read_dir(exp_root).ok()?.flatten() {
        let name = entry.file_name();
        if name
            .as_bytes()
            .starts_with(crate::name::RESERVED_PREFIX.as_bytes())
        {
            continue;
        }
        let Ok(md) = fs::symlink_metadata(ExperimentDir::new(entry.path()).code()) else {
            continue;
        };
        if md.is_dir() {
            candidates.push(((md.mtime(), md.mtime_nsec()), entry.path()));
        }
    }
    candidates.sort_unstable_by(|a, b| b.cmp(a));
    let want = root.as_os_str().as_bytes();
    for (_, dir) in candidates {
        let exp = ExperimentDir::new(&dir);
        let manifest = exp.manifest();
        let Ok(text) = fs::read(&manifest) else {
            continue;
        };
        match serde_json::from_slice::<Head>(&text) {
            Ok(head) if head.project.root.to_bytes().is_ok_and(|r| r == want) => {
                return Some(Previous {
                    name: dir.file_name()?.to_string_lossy().into_owned(),
                    code: exp.code(),
                    size: head.snapshot.map(|s| (s.files, s.bytes)),
                });
            }
            Ok(_) => {}
            Err(e) => warnings.push(format!(
                "{} is not valid ({e}): its code snapshot is not linked from",
                manifest.display()
            )),
        }
    }
    None
}
