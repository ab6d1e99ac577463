//! Snapshots share unchanged files through hard links: what that must never cost. Deleting
//! one experiment never touches another's code; a file of `code/` cannot be changed in
//! place; a copy someone changed anyway is not linked again; another user's files are
//! copied, not linked.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{as_nobody, ino, names, request, settle, write};
use tempfile::TempDir;

/// Per path: kind, and for files mode, mtime and contents; for symlinks the target. What
/// a job sees of a tree (inodes and folder times left out).
fn contents(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("read_dir") {
            let entry = e.expect("entry").path();
            let md = fs::symlink_metadata(&entry).expect("lstat");
            let rel = entry
                .strip_prefix(root)
                .expect("under root")
                .to_string_lossy()
                .into_owned();
            let what = if md.file_type().is_symlink() {
                format!(
                    "link {}",
                    fs::read_link(&entry).expect("readlink").display()
                )
            } else if md.is_dir() {
                stack.push(entry.clone());
                "dir".to_owned()
            } else {
                format!(
                    "file {:o} {}.{} {:?}",
                    md.mode() & 0o7777,
                    md.mtime(),
                    md.mtime_nsec(),
                    fs::read(&entry).expect("read")
                )
            };
            out.insert(rel, what);
        }
    }
    out
}

fn project() -> TempDir {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "print('train')\n");
    write(p, "models/net.py", "class Net: pass\n");
    write(p, "models/deep/er/layer.py", "x = 1\n");
    write(p, "configs/a b.yaml", "lr: 0.1\n");
    write(p, "run.sh", "#!/bin/sh\n");
    fs::set_permissions(p.join("run.sh"), fs::Permissions::from_mode(0o750)).expect("chmod");
    fs::create_dir_all(p.join("empty/folder")).expect("mkdir");
    std::os::unix::fs::symlink("models/net.py", p.join("net-link.py")).expect("symlink");
    write(p, "slurm-1.out", "left out\n");
    proj
}

fn nlink(path: &Path) -> u64 {
    fs::metadata(path).expect("stat").nlink()
}

#[test]
fn an_unchanged_project_copies_nothing_and_edits_after_submit_change_nothing() {
    let proj = project();
    settle(proj.path());
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "first", proj.path())
        .create()
        .expect("first");
    assert_eq!(first.snapshot.copied, 5);
    let second = request(exp.path(), "second", proj.path())
        .create()
        .expect("second");
    assert_eq!(
        (second.snapshot.linked, second.snapshot.copied),
        (5, 0),
        "{:?}",
        second.snapshot
    );
    assert_eq!(second.snapshot.linked_from.as_deref(), Some("first"));
    assert_eq!(
        contents(&first.experiment.paths().code()),
        contents(&second.experiment.paths().code())
    );
    assert_eq!(
        names(exp.path()),
        ["first", "second"],
        "nothing else is made"
    );

    // Edited, replaced and removed after submit.
    write(proj.path(), "train.py", "print('edited after submit')\n");
    fs::remove_file(proj.path().join("models/net.py")).expect("rm");
    write(proj.path(), "new.py", "new\n");
    for exp in [&first.experiment, &second.experiment] {
        let code = exp.paths().code();
        assert_eq!(
            fs::read_to_string(code.join("train.py")).expect("read"),
            "print('train')\n"
        );
        assert_eq!(
            fs::read_to_string(code.join("models/net.py")).expect("read"),
            "class Net: pass\n"
        );
        assert!(!code.join("new.py").exists());
    }
    let (c1, c2) = (
        first.experiment.paths().code(),
        second.experiment.paths().code(),
    );
    assert_eq!(ino(&c1.join("train.py")), ino(&c2.join("train.py")));
}

#[test]
fn deleting_an_experiment_frees_only_what_no_other_links() {
    let proj = project();
    settle(proj.path());
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "first", proj.path())
        .create()
        .expect("first");
    write(proj.path(), "train.py", "print('v2')\n");
    settle(proj.path());
    let second = request(exp.path(), "second", proj.path())
        .create()
        .expect("second");
    assert_eq!(
        (second.snapshot.linked, second.snapshot.copied),
        (4, 1),
        "{:?}",
        second.snapshot
    );
    let c2 = second.experiment.paths().code();
    assert_eq!(nlink(&c2.join("models/net.py")), 2, "shared with first");
    assert_eq!(nlink(&c2.join("train.py")), 1, "second's own copy");
    let want = contents(&c2);

    // `rm -rf` of the first: the second's code is whole, and now the only owner of
    // every file it linked (the link count is the garbage collector).
    fs::remove_dir_all(first.experiment.dir()).expect("rm first");
    assert_eq!(contents(&c2), want);
    assert_eq!(nlink(&c2.join("models/net.py")), 1);

    // A third links from the second, the newest left.
    let third = request(exp.path(), "third", proj.path())
        .create()
        .expect("third");
    assert_eq!(third.snapshot.linked_from.as_deref(), Some("second"));
    assert_eq!((third.snapshot.linked, third.snapshot.copied), (5, 0));
}

#[test]
fn a_copy_changed_in_place_is_not_linked_again() {
    let proj = project();
    settle(proj.path());
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "first", proj.path())
        .create()
        .expect("first");
    // Someone makes a file of the first's code/ writable and edits it (same size): the
    // mtime and the mode give it away.
    let net = first.experiment.paths().code().join("models/net.py");
    fs::set_permissions(&net, fs::Permissions::from_mode(0o644)).expect("chmod");
    fs::write(&net, "class Bad: pass\n").expect("tamper");
    // (Contents are not hashed: whoever also puts back the mode and the mtime by hand
    // defeats this, as they would rsync's quick check.)
    let second = request(exp.path(), "second", proj.path())
        .create()
        .expect("second");
    assert_eq!(
        fs::read_to_string(second.experiment.paths().code().join("models/net.py")).expect("read"),
        "class Net: pass\n"
    );
    assert_ne!(
        ino(&net),
        ino(&second.experiment.paths().code().join("models/net.py"))
    );
    assert_eq!((second.snapshot.linked, second.snapshot.copied), (4, 1));
}

/// Root's part of a test that runs a part as `nobody`: a [`project`] `nobody` can read
/// (after `prepare` has its say, settled) and a folder `nobody` can enter, for experiment
/// roots.
fn for_nobody(prepare: impl FnOnce(&Path)) -> (TempDir, TempDir) {
    // Switching users needs root; CI runs the tests as root.
    assert_eq!(
        fs::metadata("/proc/self").expect("/proc/self").uid(),
        0,
        "this test runs part of itself as user nobody with setpriv, which needs root"
    );
    let proj = project();
    fs::set_permissions(proj.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    prepare(proj.path());
    settle(proj.path());
    let parent = TempDir::new().expect("tempdir");
    fs::set_permissions(parent.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    (proj, parent)
}

#[test]
fn another_users_copies_are_copied_not_linked() {
    const NAME: &str = "another_users_copies_are_copied_not_linked";
    if let Some((root, proj)) = common::nobody_part() {
        // The other user's part, in a shared experiment root.
        match std::env::var("T_STEP").expect("T_STEP").as_str() {
            "unreadable" => {
                // run.sh (0750, root's) is unreadable here: the snapshot fails, naming it,
                // and leaves nothing.
                let err = request(&root, "b0", &proj)
                    .create()
                    .expect_err("run.sh is unreadable");
                let msg = err.to_string();
                assert!(
                    msg.contains("run.sh") && msg.contains("ermission denied"),
                    "{msg}"
                );
                assert!(!root.join("b0").exists());
            }
            "snapshot" => {
                let b = request(&root, "b", &proj).create().expect("create");
                // root's copies may not be linked by nobody (fs.protected_hardlinks: they
                // are read-only and not nobody's): every file copied.
                assert_eq!(
                    (b.snapshot.files, b.snapshot.linked, b.snapshot.copied),
                    (5, 0, 5),
                    "{:?}",
                    b.snapshot
                );
            }
            other => panic!("unknown step {other}"),
        }
        return;
    }
    let (proj, parent) = for_nobody(|_| {});
    let root = parent.path().join("shared");
    fs::create_dir(&root).expect("mkdir");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o777)).expect("chmod");
    let a = request(&root, "a", proj.path()).create().expect("a");
    let step = |step: &'static str| {
        as_nobody(
            NAME,
            &[
                ("T_ROOT", &root),
                ("T_PROJ", proj.path()),
                ("T_STEP", Path::new(step)),
            ],
        )
    };
    step("unreadable");
    fs::set_permissions(
        proj.path().join("run.sh"),
        fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    step("snapshot");

    let (ca, cb) = (a.experiment.paths().code(), root.join("b/code"));
    let mut want = contents(&ca);
    let run_sh = want.get_mut("run.sh").expect("run.sh");
    *run_sh = run_sh.replacen("file 550", "file 555", 1);
    assert_eq!(
        want,
        contents(&cb),
        "the same snapshot, run.sh readable now"
    );
    for rel in ["train.py", "models/net.py"] {
        let (ma, mb) = (
            fs::metadata(ca.join(rel)).expect("a"),
            fs::metadata(cb.join(rel)).expect("b"),
        );
        assert_ne!(ma.ino(), mb.ino(), "{rel}: copied, not linked");
        assert_eq!(mb.uid(), 65534, "{rel}: the copy is nobody's");
    }
}

#[test]
fn code_files_are_read_only_so_a_job_cannot_change_another_experiments_code() {
    const NAME: &str = "code_files_are_read_only_so_a_job_cannot_change_another_experiments_code";
    if let Some((root, proj)) = common::nobody_part() {
        // A user without root's powers, whose experiments share files.
        let first = request(&root, "first", &proj).create().expect("first");
        let second = request(&root, "second", &proj).create().expect("second");
        assert_eq!(second.snapshot.copied, 0, "{:?}", second.snapshot);
        let (c1, c2) = (
            first.experiment.paths().code(),
            second.experiment.paths().code(),
        );
        assert_eq!(ino(&c1.join("train.py")), ino(&c2.join("train.py")));

        // The first job writes into a file of its code/ in place: refused.
        let err = fs::OpenOptions::new()
            .write(true)
            .open(c1.join("train.py"))
            .expect_err("code/ files are read-only");
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
        // Replacing a file (a new file renamed over it, as `sed -i` does) changes only
        // that experiment's code/.
        fs::write(c1.join(".train.py.new"), "print('replaced')\n").expect("write");
        fs::rename(c1.join(".train.py.new"), c1.join("train.py")).expect("rename");
        assert_eq!(
            fs::read_to_string(c2.join("train.py")).expect("read"),
            "print('train')\n"
        );
        return;
    }
    let (proj, parent) = for_nobody(|p| {
        fs::set_permissions(p.join("run.sh"), fs::Permissions::from_mode(0o755)).expect("chmod")
    });
    let root = parent.path().join("nobodys");
    fs::create_dir(&root).expect("mkdir");
    std::os::unix::fs::chown(&root, Some(65534), Some(65534)).expect("chown");
    as_nobody(NAME, &[("T_ROOT", &root), ("T_PROJ", proj.path())]);
}
