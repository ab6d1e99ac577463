//! Snapshots whose `code/` is made later, when the job starts (`herd submit`): what is made
//! is what was captured, unchanged projects store nothing new, damaged stores are refused.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{ino, names, request, settle, write};
use herd_exp::{Created, Error, Experiment, MaterializeReport, NewExperiment};
use tempfile::TempDir;

/// Per path: kind, and for files mode, mtime and contents; for symlinks the target. What
/// a job sees of a tree (inodes and folder times left out).
fn contents(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in walk(root) {
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
    out
}

fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).expect("read_dir") {
            let p = e.expect("entry").path();
            if fs::symlink_metadata(&p).expect("lstat").is_dir() {
                stack.push(p.clone());
            }
            out.push(p);
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

/// Makes `exp`'s `code/`, which must not exist yet.
fn make_code(exp: &Experiment) -> MaterializeReport {
    exp.materialize().expect("materialize").expect("made now")
}

fn deferred(exp_root: &Path, name: &str, project: &Path) -> NewExperiment {
    let mut req = request(exp_root, name, project);
    req.snapshot.materialize = false;
    req
}

/// A queued experiment ("queued") of [`project`] in a new experiment root, its copies
/// packed, the project settled (a later snapshot may reuse them): the project, the root,
/// and what was created.
fn queued() -> (TempDir, TempDir, Created) {
    let proj = project();
    settle();
    let exp = TempDir::new().expect("tempdir");
    let queued = deferred(exp.path(), "queued", proj.path())
        .create()
        .expect("queued");
    (proj, exp, queued)
}

/// A queued experiment ("queued") of [`project`] whose stored copies are files already:
/// it reuses every copy of an experiment ("made") whose `code/` was made at once. The
/// project, the root, and what was created.
fn queued_unpacked() -> (TempDir, TempDir, Created) {
    let proj = project();
    settle();
    let exp = TempDir::new().expect("tempdir");
    request(exp.path(), "made", proj.path())
        .create()
        .expect("made");
    let queued = deferred(exp.path(), "queued", proj.path())
        .create()
        .expect("queued");
    assert_eq!(queued.snapshot.linked, 5, "{:?}", queued.snapshot);
    (proj, exp, queued)
}

/// The objects folders of the store: one per snapshot that copied something.
fn object_dirs(exp_root: &Path) -> Vec<String> {
    names(&exp_root.join(".herd-store/objects"))
}

#[test]
fn a_deferred_snapshot_makes_code_at_materialize_the_same_as_at_once() {
    let proj = project();
    let exp = TempDir::new().expect("tempdir");
    let now = request(exp.path(), "now", proj.path())
        .create()
        .expect("now");
    let later = deferred(exp.path(), "later", proj.path())
        .create()
        .expect("later");
    assert!(later.snapshot.materialized.is_none());
    assert!(now.snapshot.materialized.is_some());
    let dir = later.experiment.dir();
    assert!(!dir.join("code").exists(), "no code/ before materialize");
    assert_eq!(
        names(dir),
        ["logs", "manifest.json", "snapshot.idx"],
        "a queued experiment holds its index, not a tree"
    );

    let made = make_code(&later.experiment);
    assert_eq!(
        (made.files, made.symlinks, made.copied),
        (5, 1, 0),
        "{made:?}"
    );
    assert_eq!(made.dirs, 6, "{made:?}");
    let code = later.experiment.code_dir();
    assert_eq!(contents(&code), contents(&now.experiment.code_dir()));
    assert!(!contents(&code).contains_key("slurm-1.out"));
    assert_eq!(
        fs::read_to_string(code.join("configs/a b.yaml")).expect("read"),
        "lr: 0.1\n"
    );
    assert_eq!(
        fs::metadata(code.join("run.sh")).expect("stat").mode() & 0o7777,
        0o550,
        "the project's 0750 without write permission"
    );
    // No temporary folder left in the experiment.
    assert_eq!(
        names(dir),
        ["code", "logs", "manifest.json", "snapshot.idx"]
    );
    // Again (a requeued job, a second attempt): nothing to do, nothing changed.
    let before = common::fingerprint(&code);
    assert!(later.experiment.materialize().expect("again").is_none());
    assert_eq!(common::fingerprint(&code), before);
}

/// The files of the store's objects folder, relative to it: `token/…`, folders with a
/// trailing `/` and files.
fn store_files(exp_root: &Path) -> Vec<String> {
    let root = exp_root.join(".herd-store/objects");
    let mut out: Vec<String> = walk(&root)
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&root)
                .expect("under")
                .to_string_lossy()
                .into_owned();
            if p.is_dir() {
                format!("{rel}/")
            } else {
                rel
            }
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_submitted_snapshot_packs_its_copies_and_the_first_job_to_start_unpacks_them() {
    let (proj, exp, first) = queued();
    assert_eq!(first.snapshot.copied, 5, "{:?}", first.snapshot);
    // One pack per walking thread that copied something, no file per copy.
    let packed = store_files(exp.path());
    let token = object_dirs(exp.path()).pop().expect("one token");
    assert_eq!(packed[0], format!("{token}/"), "{packed:?}");
    assert!(packed.len() > 1, "{packed:?}");
    for f in &packed[1..] {
        assert!(
            f.starts_with(&format!("{token}/")) && f.ends_with(".pack"),
            "{packed:?}"
        );
        let md = fs::metadata(exp.path().join(".herd-store/objects").join(f)).expect("pack");
        assert_eq!(md.mode() & 0o777, 0o400, "{f}: read-only, its owner's only");
    }
    // A second submit, before the first job starts, reuses the copies still packed.
    let second = deferred(exp.path(), "second", proj.path())
        .create()
        .expect("second");
    assert_eq!((second.snapshot.linked, second.snapshot.copied), (5, 0));
    assert_eq!(store_files(exp.path()), packed, "nothing new in the store");

    // The second job starts first: it unpacks the packs, whole, and removes them.
    let made = make_code(&second.experiment);
    assert_eq!(
        (made.files, made.unpacked, made.copied),
        (5, 5, 0),
        "{made:?}"
    );
    let unpacked = store_files(exp.path());
    assert!(
        unpacked.iter().all(|f| !f.ends_with(".pack")),
        "{unpacked:?}"
    );
    assert_eq!(
        unpacked.iter().filter(|f| !f.ends_with('/')).count(),
        5,
        "one file per stored copy: {unpacked:?}"
    );
    // The first finds them unpacked: links to the same copies.
    let made = make_code(&first.experiment);
    assert_eq!((made.files, made.unpacked), (5, 0), "{made:?}");
    let (c1, c2) = (first.experiment.code_dir(), second.experiment.code_dir());
    for rel in ["train.py", "models/net.py", "run.sh"] {
        assert_eq!(ino(&c1.join(rel)), ino(&c2.join(rel)), "{rel}");
    }
    // The same tree as a snapshot whose code/ is made at once (no pack), in another root.
    let other = TempDir::new().expect("tempdir");
    let now = request(other.path(), "now", proj.path())
        .create()
        .expect("now");
    assert!(store_files(other.path())
        .iter()
        .all(|f| !f.ends_with(".pack")));
    assert_eq!(contents(&c1), contents(&now.experiment.code_dir()));
    assert_eq!(contents(&c2), contents(&c1));
}

#[test]
fn a_damaged_pack_stops_the_job_naming_it_and_its_copies_are_not_reused() {
    let (proj, exp, queued) = queued();
    let objects = exp.path().join(".herd-store/objects");
    // The pack that holds train.py, cut short (a hand-made copy of the store onto a disk
    // that filled up, say).
    let train = object_of(queued.experiment.dir(), "train.py");
    let (token_thread, _) = train.rsplit_once('/').expect("token/thread/n");
    let pack = objects.join(format!("{token_thread}.pack"));
    let bytes = fs::read(&pack).expect("pack");
    fs::set_permissions(&pack, fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::write(&pack, &bytes[..bytes.len() - 3]).expect("truncate");

    let err = queued.experiment.materialize().expect_err("damaged pack");
    assert!(matches!(err, Error::SnapshotDamaged { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{token_thread}.pack"))
            && msg.contains("is damaged")
            && msg.contains("ends inside"),
        "{msg}"
    );
    assert_eq!(
        names(queued.experiment.dir()),
        ["logs", "manifest.json", "snapshot.idx"],
        "no code/ and no temporary folder"
    );
    assert!(
        store_files(exp.path())
            .iter()
            .all(|f| !f.contains(".unpack-")),
        "no half-unpacked folder"
    );
    // Every copy in that pack this index names is listed: the next snapshot copies those
    // files afresh, reuses the rest, and its job runs.
    let mut in_pack: Vec<String> = [
        "train.py",
        "models/net.py",
        "models/deep/er/layer.py",
        "configs/a\\x20b.yaml",
        "run.sh",
    ]
    .iter()
    .map(|rel| object_of(queued.experiment.dir(), rel))
    .filter(|o| o.starts_with(&format!("{token_thread}/")))
    .collect();
    in_pack.sort();
    assert_eq!(damaged_list(exp.path()), in_pack);
    settle();
    let again = deferred(exp.path(), "again", proj.path())
        .create()
        .expect("again");
    assert_eq!(
        (again.snapshot.copied, again.snapshot.linked),
        (in_pack.len() as u64, 5 - in_pack.len() as u64),
        "{:?}",
        again.snapshot
    );
    make_code(&again.experiment);
    let elsewhere = TempDir::new().expect("tempdir");
    let fresh = request(elsewhere.path(), "fresh", proj.path())
        .create()
        .expect("fresh");
    assert_eq!(
        contents(&again.experiment.code_dir()),
        contents(&fresh.experiment.code_dir())
    );
}

#[test]
fn a_pack_that_cannot_be_written_out_is_an_error_that_lists_nothing_as_damaged() {
    let (_proj, exp, queued) = queued();
    let token = object_dirs(exp.path()).pop().expect("a token");
    let token_dir = exp.path().join(".herd-store/objects").join(&token);
    // Nothing may be created in the snapshot's folder (as with a full disk): `chattr +i`
    // holds even for root, who runs the tests.
    let chattr = |flag: &str| {
        let st = std::process::Command::new("chattr")
            .arg(flag)
            .arg(&token_dir)
            .status()
            .expect("chattr (e2fsprogs) runs");
        assert!(st.success(), "chattr {flag} {}", token_dir.display());
    };
    chattr("+i");
    let err = queued.experiment.materialize();
    chattr("-i");
    let err = err.expect_err("nothing can be unpacked");
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(err.to_string().contains(&token), "{err}");
    assert!(
        damaged_list(exp.path()).is_empty(),
        "an intact pack is not damaged"
    );
    assert_eq!(
        names(queued.experiment.dir()),
        ["logs", "manifest.json", "snapshot.idx"]
    );
    // Once it can be written, the job starts.
    let made = make_code(&queued.experiment);
    assert_eq!(made.unpacked, 5, "{made:?}");
}

#[test]
fn an_unchanged_project_stores_nothing_new_and_edits_after_submit_change_nothing() {
    let proj = project();
    settle();
    let exp = TempDir::new().expect("tempdir");
    let first = deferred(exp.path(), "first", proj.path())
        .create()
        .expect("first");
    assert_eq!(first.snapshot.copied, 5);
    assert_eq!(object_dirs(exp.path()).len(), 1);
    let second = deferred(exp.path(), "second", proj.path())
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
        object_dirs(exp.path()).len(),
        1,
        "a snapshot that copied nothing leaves no folder in the store"
    );

    // Edited, replaced and removed after submit, before the job starts.
    write(proj.path(), "train.py", "print('edited after submit')\n");
    fs::remove_file(proj.path().join("models/net.py")).expect("rm");
    write(proj.path(), "new.py", "new\n");

    for exp in [&first.experiment, &second.experiment] {
        make_code(exp);
        let code = exp.code_dir();
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
    // Both are links to the one stored copy.
    assert_eq!(
        ino(&first.experiment.code_dir().join("train.py")),
        ino(&second.experiment.code_dir().join("train.py"))
    );
}

#[test]
fn a_queued_experiment_survives_deleting_the_one_it_reuses() {
    let proj = project();
    settle();
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "first", proj.path())
        .create()
        .expect("first");
    let second = deferred(exp.path(), "second", proj.path())
        .create()
        .expect("second");
    assert_eq!(second.snapshot.copied, 0);
    let want = contents(&first.experiment.code_dir());
    fs::remove_dir_all(first.experiment.dir()).expect("rm first");
    second.experiment.materialize().expect("materialize");
    assert_eq!(contents(&second.experiment.code_dir()), want);
}

#[test]
fn a_changed_or_missing_stored_copy_is_refused_and_nothing_is_left() {
    let (proj, exp, queued) = queued_unpacked();
    let object = object_of(queued.experiment.dir(), "models/net.py");
    let stored = exp.path().join(".herd-store/objects").join(&object);
    assert_eq!(
        fs::read_to_string(&stored).expect("stored copy"),
        "class Net: pass\n"
    );

    // Made writable and changed in place (same size): the mtime gives it away.
    tamper(&stored, "class Bad: pass\n");
    let err = queued.experiment.materialize().expect_err("changed copy");
    assert!(matches!(err, Error::SnapshotDamaged { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("models/net.py")
            && msg.contains("changed after the snapshot")
            && msg.contains("list of damaged copies"),
        "{msg}"
    );
    assert_eq!(
        names(queued.experiment.dir()),
        ["logs", "manifest.json", "snapshot.idx"],
        "no code/ and no temporary folder after a refused materialize"
    );
    assert_eq!(damaged_list(exp.path()), [object.as_str()]);

    // Missing.
    fs::remove_file(&stored).expect("rm");
    let err = queued.experiment.materialize().expect_err("missing copy");
    assert!(err.to_string().contains("models/net.py"), "{err}");

    // A later snapshot of the same project does not reuse the damaged copy, made at once
    // (it checks every copy it reuses) or later (it does not, but the copy is listed).
    settle();
    let again = request(exp.path(), "again", proj.path())
        .create()
        .expect("again");
    assert_eq!(
        fs::read_to_string(again.experiment.code_dir().join("models/net.py")).expect("read"),
        "class Net: pass\n"
    );
    let later = deferred(exp.path(), "later", proj.path())
        .create()
        .expect("later");
    assert_eq!(later.snapshot.linked_from.as_deref(), Some("again"));
    assert_eq!((later.snapshot.linked, later.snapshot.copied), (5, 0));
    make_code(&later.experiment);
}

/// The store's list of damaged copies, sorted.
fn damaged_list(exp_root: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_to_string(exp_root.join(".herd-store/damaged"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// What someone does who edits a file of some experiment's `code/` in place: make it
/// writable (it is read-only), write.
fn tamper(path: &Path, text: &str) {
    let mode = fs::metadata(path).expect("stat").permissions().mode();
    fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o200)).expect("chmod");
    fs::write(path, text).expect("tamper");
}

/// The stored copy of `rel` in the experiment's index.
fn object_of(exp_dir: &Path, rel: &str) -> String {
    let index = fs::read_to_string(exp_dir.join("snapshot.idx")).expect("index");
    index
        .lines()
        .find(|l| l.starts_with("f ") && l.ends_with(&format!(" {rel}")))
        .and_then(|l| l.split(' ').nth(8))
        .unwrap_or_else(|| panic!("an entry for {rel}"))
        .to_owned()
}

#[test]
fn a_queued_job_trusts_this_users_stored_copies_and_a_damaged_one_is_found_when_it_starts() {
    let proj = project();
    settle();
    let exp = TempDir::new().expect("tempdir");
    let first = deferred(exp.path(), "first", proj.path())
        .create()
        .expect("first");
    make_code(&first.experiment);
    // The first job's code/ is read-only: whoever edits models/net.py there in place
    // makes it writable first, and so edits the stored copy every experiment shares.
    let code_net = first.experiment.code_dir().join("models/net.py");
    assert_eq!(fs::metadata(&code_net).expect("stat").mode() & 0o222, 0);
    tamper(&code_net, "class Bad: pass\n");
    let object = object_of(first.experiment.dir(), "models/net.py");

    // Submitting again: the project is unchanged, and its stored copies, written and
    // kept read-only by this user, are reused without a look (one `statx` per project
    // file, none per stored copy).
    let second = deferred(exp.path(), "second", proj.path())
        .create()
        .expect("second");
    assert_eq!(
        (second.snapshot.linked, second.snapshot.copied),
        (5, 0),
        "{:?}",
        second.snapshot
    );
    assert_eq!(object_of(second.experiment.dir(), "models/net.py"), object);

    // The job's start checks each copy: it refuses to run edited code, names the file,
    // and lists the copy as damaged.
    let err = second.experiment.materialize().expect_err("damaged copy");
    assert!(matches!(err, Error::SnapshotDamaged { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("models/net.py") && msg.contains("submit the job again"),
        "{msg}"
    );
    assert!(!second.experiment.code_dir().exists());
    assert_eq!(damaged_list(exp.path()), [object.as_str()]);

    // Submitting again copies that file afresh, from the project; the rest is reused.
    let third = deferred(exp.path(), "third", proj.path())
        .create()
        .expect("third");
    assert_eq!((third.snapshot.linked, third.snapshot.copied), (4, 1));
    make_code(&third.experiment);
    assert_eq!(
        fs::read_to_string(third.experiment.code_dir().join("models/net.py")).expect("read"),
        "class Net: pass\n"
    );

    // Once no experiment uses the damaged copy, gc removes it and its line in the list.
    fs::remove_dir_all(first.experiment.dir()).expect("rm first");
    fs::remove_dir_all(second.experiment.dir()).expect("rm second");
    let r = herd_exp::collect_garbage(exp.path()).expect("gc");
    assert_eq!(r.objects_removed, 1, "{r:?}");
    assert!(!exp.path().join(".herd-store/damaged").exists());
}

#[test]
fn an_index_that_points_outside_code_is_refused() {
    let (_proj, exp, queued) = queued();
    let path = queued.experiment.dir().join("snapshot.idx");
    let index = fs::read_to_string(&path).expect("index");
    fs::write(&path, format!("{index}d ../escaped\n")).expect("write");
    let err = queued.experiment.materialize().expect_err("bad path");
    assert!(err.to_string().contains("../escaped"), "{err}");
    assert!(!queued.experiment.dir().join("escaped").exists());
    assert!(!exp.path().join("escaped").exists());
}

#[test]
fn concurrent_materializes_make_one_code_folder_and_unpack_each_pack_once() {
    let (proj, exp, queued) = queued();
    // A second queued job that shares the first one's copies, still packed.
    let twin = deferred(exp.path(), "twin", proj.path())
        .create()
        .expect("twin");
    assert_eq!((twin.snapshot.linked, twin.snapshot.copied), (5, 0));
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let exp = if i % 2 == 0 {
                    &queued.experiment
                } else {
                    &twin.experiment
                };
                s.spawn(move || exp.materialize())
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let made: Vec<_> = results
        .iter()
        .filter_map(|r| r.as_ref().ok()?.as_ref())
        .collect();
    assert_eq!(made.len(), 2, "one code/ per experiment: {results:?}");
    for exp in [&queued.experiment, &twin.experiment] {
        assert_eq!(
            names(exp.dir()),
            ["code", "logs", "manifest.json", "snapshot.idx"]
        );
        assert_eq!(contents(&exp.code_dir()).len(), 12);
    }
    assert_eq!(
        contents(&queued.experiment.code_dir()),
        contents(&twin.experiment.code_dir())
    );
    assert!(
        store_files(exp.path())
            .iter()
            .all(|f| !f.ends_with(".pack") && !f.contains(".unpack-")),
        "every pack unpacked, no temporary folder left: {:?}",
        store_files(exp.path())
    );
    assert_eq!(
        store_files(exp.path())
            .iter()
            .filter(|f| !f.ends_with('/'))
            .count(),
        5,
        "each stored copy unpacked once"
    );
}

/// Every stored copy in the store: `token/thread/n`.
fn objects(exp_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let root = exp_root.join(".herd-store/objects");
    for token in names(&root) {
        for thread in names(&root.join(&token)) {
            for n in names(&root.join(&token).join(&thread)) {
                out.push(format!("{token}/{thread}/{n}"));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn garbage_collection_removes_only_copies_no_experiment_uses() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "shared.py", "kept by everyone\n");
    write(p, "edited.py", "version 1, only in the first experiment\n");
    settle();
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "first", p).create().expect("first");
    write(p, "edited.py", "version 2\n");
    settle();
    let second = request(exp.path(), "second", p).create().expect("second");
    let queued = deferred(exp.path(), "queued", p).create().expect("queued");
    assert_eq!((second.snapshot.linked, second.snapshot.copied), (1, 1));
    assert_eq!((queued.snapshot.linked, queued.snapshot.copied), (2, 0));
    assert_eq!(objects(exp.path()).len(), 3);
    // A creation and a materialize killed halfway left their temporary folders.
    fs::create_dir_all(exp.path().join(".herd-new-killed/code")).expect("mkdir");
    fs::create_dir_all(queued.experiment.dir().join(".herd-code-killed/a")).expect("mkdir");

    // Nothing deleted: everything is in use; only the stale folder goes.
    let r = herd_exp::collect_garbage(exp.path()).expect("gc");
    assert_eq!(
        (
            r.experiments,
            r.objects_kept,
            r.objects_removed,
            r.stale_folders_removed
        ),
        (3, 3, 0, 2),
        "{r:?}"
    );
    assert!(!exp.path().join(".herd-new-killed").exists());
    assert!(!queued.experiment.dir().join(".herd-code-killed").exists());

    // The first experiment deleted: its copy of edited.py version 1 goes, nothing else.
    fs::remove_dir_all(first.experiment.dir()).expect("rm first");
    let r = herd_exp::collect_garbage(exp.path()).expect("gc");
    assert_eq!((r.objects_kept, r.objects_removed), (2, 1), "{r:?}");
    assert_eq!(
        r.bytes_freed,
        "version 1, only in the first experiment\n".len() as u64
    );
    make_code(&queued.experiment);
    assert_eq!(
        fs::read_to_string(queued.experiment.code_dir().join("edited.py")).expect("read"),
        "version 2\n"
    );

    // A broken index stops it before anything is removed.
    fs::remove_dir_all(second.experiment.dir()).expect("rm second");
    let index = queued.experiment.dir().join("snapshot.idx");
    let good = fs::read(&index).expect("index");
    fs::write(&index, "not an index\n").expect("write");
    let err = herd_exp::collect_garbage(exp.path()).expect_err("broken index");
    assert!(err.to_string().contains("nothing was removed"), "{err}");
    assert_eq!(objects(exp.path()).len(), 2);
    fs::write(&index, good).expect("write");

    // Everything deleted: the store is emptied (its still-linked copies free nothing until
    // the last code folder goes, and here they went with their experiments).
    fs::remove_dir_all(queued.experiment.dir()).expect("rm queued");
    let r = herd_exp::collect_garbage(exp.path()).expect("gc");
    assert_eq!(
        (r.experiments, r.objects_kept, r.objects_removed),
        (0, 0, 2),
        "{r:?}"
    );
    assert!(objects(exp.path()).is_empty());
    assert!(names(&exp.path().join(".herd-store/objects")).is_empty());

    // An experiment root without a store: nothing to do.
    let empty = TempDir::new().expect("tempdir");
    assert_eq!(
        herd_exp::collect_garbage(empty.path()).expect("gc"),
        herd_exp::GarbageReport::default()
    );
}

#[test]
fn garbage_collection_keeps_packs_in_use_and_removes_unused_and_leftover_ones() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    for name in ["a.py", "b.py", "c.py", "d.py"] {
        write(p, name, &format!("{name}, in every experiment\n"));
    }
    write(p, "edited.py", "version 1\n");
    settle();
    let exp = TempDir::new().expect("tempdir");
    // One walking thread: one pack per snapshot, whatever the scheduling.
    let one_thread = |name: &str| {
        let mut req = deferred(exp.path(), name, p);
        req.snapshot.threads = std::num::NonZeroUsize::new(1);
        req.create().expect(name)
    };
    let first = one_thread("first");
    write(p, "edited.py", "version 2\n");
    settle();
    let second = one_thread("second");
    assert_eq!((second.snapshot.linked, second.snapshot.copied), (4, 1));
    let packs = || -> Vec<String> {
        store_files(exp.path())
            .into_iter()
            .filter(|f| f.ends_with(".pack"))
            .collect()
    };
    assert_eq!(packs().len(), 2, "{:?}", store_files(exp.path()));
    // An unpack that was killed left its temporary folder.
    let first_pack = packs()
        .into_iter()
        .find(|f| f.starts_with(&object_dirs(exp.path())[0]))
        .expect("first's pack");
    let objects = exp.path().join(".herd-store/objects");
    let (token, _) = first_pack.split_once('/').expect("token/thread.pack");
    fs::create_dir_all(objects.join(token).join(".unpack-0-killed/x")).expect("mkdir");

    let gc = || herd_exp::collect_garbage(exp.path()).expect("gc");
    let r = gc();
    assert_eq!(
        (r.objects_kept, r.objects_removed, r.stale_folders_removed),
        (6, 0, 1),
        "a pack counts its copies: {r:?}"
    );
    // The first experiment deleted before its job started: its pack stays whole, since
    // the second uses four of its five copies.
    fs::remove_dir_all(first.experiment.dir()).expect("rm first");
    let r = gc();
    assert_eq!((r.objects_kept, r.objects_removed), (6, 0), "{r:?}");
    assert_eq!(packs().len(), 2);
    // The second's job starts: both packs unpacked; now the one copy nobody uses goes.
    let made = make_code(&second.experiment);
    assert_eq!(made.unpacked, 6, "{made:?}");
    assert!(packs().is_empty());
    let r = gc();
    assert_eq!((r.objects_kept, r.objects_removed), (5, 1), "{r:?}");
    assert_eq!(r.bytes_freed, "version 1\n".len() as u64);
    // A pack left next to its unpacked folder (a job killed between the two) goes.
    let thread = first_pack
        .strip_prefix(&format!("{token}/"))
        .and_then(|t| t.strip_suffix(".pack"))
        .expect("thread");
    assert!(objects.join(token).join(thread).is_dir());
    fs::write(objects.join(&first_pack), b"herd-pack 1\n").expect("leftover");
    let r = gc();
    assert_eq!((r.objects_kept, r.objects_removed), (5, 0), "{r:?}");
    assert!(packs().is_empty());

    // A queued experiment deleted before its job started: its pack goes, whole.
    write(p, "edited.py", "version 3, never run\n");
    settle();
    let third = one_thread("third");
    assert_eq!(third.snapshot.copied, 1);
    let pack_len = fs::metadata(objects.join(&packs()[0])).expect("pack").len();
    fs::remove_dir_all(third.experiment.dir()).expect("rm third");
    let r = gc();
    assert_eq!((r.objects_kept, r.objects_removed), (5, 1), "{r:?}");
    assert_eq!(r.bytes_freed, pack_len);
    assert!(packs().is_empty());

    // Everything deleted: the store is emptied.
    fs::remove_dir_all(second.experiment.dir()).expect("rm second");
    let r = gc();
    assert_eq!((r.objects_kept, r.objects_removed), (0, 5), "{r:?}");
    assert!(names(&objects).is_empty(), "{:?}", store_files(exp.path()));
}

#[test]
fn the_store_gets_the_experiment_roots_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let proj = project();
    let parent = TempDir::new().expect("tempdir");
    // A root shared by a group: group-writable, set-group-ID.
    let root = parent.path().join("team-exp");
    fs::create_dir(&root).expect("mkdir");
    fs::set_permissions(&root, fs::Permissions::from_mode(0o2775)).expect("chmod");
    deferred(&root, "one", proj.path())
        .create()
        .expect("create");
    for dir in [".herd-store", ".herd-store/objects"] {
        let mode = fs::metadata(root.join(dir))
            .expect("stat")
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o2775, "{dir}: {mode:o}");
    }
}

/// Runs this test binary's test `name` again as user `nobody` (uid 65534), with `env`:
/// the test sees `HERD_TEST_AS_NOBODY` and does the other user's part.
fn as_nobody(name: &str, env: &[(&str, &Path)]) {
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
    assert!(
        out.status.success(),
        "as nobody: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
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
    settle();
    let parent = TempDir::new().expect("tempdir");
    fs::set_permissions(parent.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
    (proj, parent)
}

#[test]
fn another_users_stored_copies_are_copied_into_code_and_left_to_their_gc() {
    use std::os::unix::fs::PermissionsExt;
    const NAME: &str = "another_users_stored_copies_are_copied_into_code_and_left_to_their_gc";
    if std::env::var_os("HERD_TEST_AS_NOBODY").is_some() {
        // The other user's part, in a shared experiment root.
        let var = |k: &str| std::path::PathBuf::from(std::env::var_os(k).expect(k));
        let (root, proj) = (var("T_ROOT"), var("T_PROJ"));
        match std::env::var("T_STEP").expect("T_STEP").as_str() {
            "unreadable" => {
                // run.sh (0750, root's) is unreadable here: its stored copy is not
                // reused (the job would fail at its start), the snapshot fails now.
                let err = deferred(&root, "b0", &proj)
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
                let b = deferred(&root, "b", &proj).create().expect("create");
                assert_eq!(
                    (b.snapshot.linked, b.snapshot.copied),
                    (4, 1),
                    "{:?}",
                    b.snapshot
                );
                let made = make_code(&b.experiment);
                // root's four copies may not be linked (fs.protected_hardlinks): copied.
                assert_eq!((made.files, made.copied), (5, 4), "{made:?}");
            }
            "gc" => {
                let r = herd_exp::collect_garbage(&root).expect("gc");
                assert_eq!(
                    (r.objects_removed, r.objects_not_removable),
                    (1, 5),
                    "{r:?}"
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
    let env = |step: &'static str| {
        as_nobody(
            NAME,
            &[
                ("T_ROOT", &root),
                ("T_PROJ", proj.path()),
                ("T_STEP", Path::new(step)),
            ],
        )
    };
    env("unreadable");
    fs::set_permissions(
        proj.path().join("run.sh"),
        fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    env("snapshot");

    let (ca, cb) = (a.experiment.code_dir(), root.join("b/code"));
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

    // Both experiments deleted: nobody's gc removes nobody's copy and leaves root's five;
    // root's removes those.
    fs::remove_dir_all(a.experiment.dir()).expect("rm a");
    fs::remove_dir_all(root.join("b")).expect("rm b");
    env("gc");
    let r = herd_exp::collect_garbage(&root).expect("gc as root");
    assert_eq!(
        (r.objects_removed, r.objects_not_removable),
        (5, 0),
        "{r:?}"
    );
}

#[test]
fn code_files_are_read_only_so_a_job_cannot_change_another_experiments_code() {
    const NAME: &str = "code_files_are_read_only_so_a_job_cannot_change_another_experiments_code";
    if std::env::var_os("HERD_TEST_AS_NOBODY").is_some() {
        // A user without root's powers, whose experiments share stored copies.
        let var = |k: &str| std::path::PathBuf::from(std::env::var_os(k).expect(k));
        let (root, proj) = (var("T_ROOT"), var("T_PROJ"));
        let first = deferred(&root, "first", &proj).create().expect("first");
        let second = deferred(&root, "second", &proj).create().expect("second");
        assert_eq!(second.snapshot.copied, 0, "{:?}", second.snapshot);
        for exp in [&first.experiment, &second.experiment] {
            make_code(exp);
        }
        let (c1, c2) = (first.experiment.code_dir(), second.experiment.code_dir());
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
        // And the stored copy is intact: the second's code is made again the same.
        fs::remove_dir_all(&c2).expect("rm code");
        make_code(&second.experiment);
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
