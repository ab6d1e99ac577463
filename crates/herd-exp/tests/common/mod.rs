//! Helpers shared by the integration tests: projects in temporary folders, tree
//! fingerprints, experiment requests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_exp::{Invocation, NewExperiment};

/// Writes `contents` to `root/rel`, creating parent folders.
pub fn write(root: &Path, rel: &str, contents: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("has a parent")).expect("create parents");
    fs::write(&path, contents).expect("write file");
}

/// Sets the permission bits of `root/rel`.
pub fn chmod(root: &Path, rel: &str, mode: u32) {
    fs::set_permissions(root.join(rel), fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Waits until files written now are no longer "racily new" for a snapshot taken after
/// (herd links only files last changed more than 2 s before the earlier snapshot began).
pub fn settle() {
    std::thread::sleep(Duration::from_millis(2200));
}

/// A new-experiment request with a fixed invocation and plan.
pub fn request(exp_root: &Path, name: &str, project: &Path) -> NewExperiment {
    NewExperiment::new(
        exp_root,
        name,
        project,
        serde_json::json!({"nodes": 2, "gpus_per_node": 4, "script": "train.py"}),
        Invocation {
            herd_version: "9.9.9-test".into(),
            argv: vec![
                OsString::from("herd"),
                OsString::from("submit"),
                OsString::from(name),
            ],
        },
    )
}

/// Everything about a tree that "byte for byte untouched" covers: per path its kind,
/// permission bits, size, mtime, inode, and contents or link target.
pub type Fingerprint = BTreeMap<PathBuf, String>;

/// The fingerprint of the tree at `root` (the root folder itself included).
pub fn fingerprint(root: &Path) -> Fingerprint {
    let mut out = BTreeMap::new();
    fn visit(root: &Path, path: &Path, out: &mut Fingerprint) {
        let md = fs::symlink_metadata(path).expect("lstat");
        let rel = path.strip_prefix(root).expect("under root").to_owned();
        let common = format!(
            "mode {:o} mtime {}.{} ino {}",
            md.mode(),
            md.mtime(),
            md.mtime_nsec(),
            md.ino()
        );
        if md.file_type().is_symlink() {
            let target = fs::read_link(path).expect("readlink");
            out.insert(rel, format!("link -> {} {common}", target.display()));
        } else if md.is_dir() {
            out.insert(rel, format!("dir {common}"));
            let mut names: Vec<_> = fs::read_dir(path)
                .expect("read_dir")
                .map(|e| e.expect("entry").path())
                .collect();
            names.sort();
            for p in names {
                visit(root, &p, out);
            }
        } else {
            let bytes = fs::read(path).expect("read");
            out.insert(
                rel,
                format!(
                    "file {} bytes {common} content {:?}",
                    bytes.len(),
                    String::from_utf8_lossy(&bytes)
                ),
            );
        }
    }
    visit(root, root, &mut out);
    out
}

/// Relative paths of everything under `root` (not the root), sorted.
pub fn listing(root: &Path) -> Vec<String> {
    fingerprint(root)
        .into_keys()
        .filter(|p| !p.as_os_str().is_empty())
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// Names in `dir` (one level).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The inode of `path` (not following symlinks).
pub fn ino(path: &Path) -> u64 {
    fs::symlink_metadata(path).expect("lstat").ino()
}
