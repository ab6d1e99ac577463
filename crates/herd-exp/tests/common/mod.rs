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

/// Makes every file under `root` written in the last minute (or ahead of the clock) an
/// hour old, by its mtime (nothing sleeps; older files keep theirs): written long before
/// any snapshot taken next, so a later snapshot may link its copies (herd links only files
/// last changed 2 s or more before the earlier snapshot copied them).
pub fn settle(root: &Path) {
    let now = std::time::SystemTime::now();
    set_mtimes(
        root,
        now - Duration::from_secs(60),
        now - Duration::from_secs(3600),
    );
}

/// Makes `root/rel` as new as a file can be for herd's snapshots: its mtime an hour ahead
/// (as a file server's clock can be), never 2 s older than a snapshot's copy of it, however
/// long the test took to get there. A snapshot that copies it now must copy it again.
pub fn just_written(root: &Path, rel: &str) {
    let now = std::time::SystemTime::now();
    set_mtimes(
        &root.join(rel),
        std::time::UNIX_EPOCH,
        now + Duration::from_secs(3600),
    );
}

/// Sets to `mtime` the mtime of the file `path`, or of every file under the folder `path`,
/// whose mtime is after `newer_than` (symbolic links are left alone).
fn set_mtimes(path: &Path, newer_than: std::time::SystemTime, mtime: std::time::SystemTime) {
    let md = fs::symlink_metadata(path).expect("lstat");
    if md.is_dir() {
        for entry in fs::read_dir(path).expect("read_dir") {
            set_mtimes(&entry.expect("entry").path(), newer_than, mtime);
        }
    } else if md.is_file() && md.modified().expect("mtime") > newer_than {
        fs::File::open(path)
            .and_then(|f| f.set_modified(mtime))
            .unwrap_or_else(|e| panic!("set the mtime of {}: {e}", path.display()));
    }
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

/// In the part of a test [`as_nobody`] runs: the experiment root and the project it was
/// given (`T_ROOT`, `T_PROJ`). `None` in root's part.
pub fn nobody_part() -> Option<(PathBuf, PathBuf)> {
    std::env::var_os("HERD_TEST_AS_NOBODY")?;
    let var = |k: &str| PathBuf::from(std::env::var_os(k).expect(k));
    Some((var("T_ROOT"), var("T_PROJ")))
}

/// Runs this test binary's test `name` again as user `nobody` (uid 65534), with `env`:
/// the test sees `HERD_TEST_AS_NOBODY` and does the other user's part.
pub fn as_nobody(name: &str, env: &[(&str, &Path)]) {
    // Switching users needs root; CI runs the tests as root.
    assert_eq!(
        fs::metadata("/proc/self").expect("/proc/self").uid(),
        0,
        "test {name} runs part of itself as user nobody with setpriv, which needs root"
    );
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("HERD_TEST_AS_NOBODY", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("setpriv runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "as nobody: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A renamed test would match nothing and pass: the child ran exactly this one.
    assert!(
        stdout.contains("running 1 test") && stdout.contains(&format!("test {name} ... ok")),
        "as nobody, test {name} did not run:\n{stdout}"
    );
}
