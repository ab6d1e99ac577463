//! The code snapshot: ignore rules, `*.out`, symlinks, modes, hard links to the previous
//! snapshot, isolation from later edits.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::{chmod, fingerprint, ino, just_written, listing, request, settle, write};
use herd_exp::Error;
use tempfile::TempDir;

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).expect("lstat").mode() & 0o7777
}

#[test]
fn ignore_files_are_respected_and_hidden_files_kept() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(
        p,
        ".gitignore",
        "*.log\n!keep.log\nbuild/\n/top-only.txt\n__pycache__/\n",
    );
    write(p, "train.py", "x\n");
    write(p, "run.log", "ignored\n");
    write(p, "keep.log", "negated: kept\n");
    write(p, "build/out.o", "ignored folder\n");
    write(p, "top-only.txt", "anchored: ignored\n");
    write(p, "sub/top-only.txt", "anchored elsewhere: kept\n");
    write(p, "sub/__pycache__/m.cpython-311.pyc", "ignored\n");
    write(p, "sub/.gitignore", "secret.*\n");
    write(p, "sub/secret.yaml", "ignored by the nested .gitignore\n");
    write(
        p,
        "secret.yaml",
        "the nested .gitignore does not reach up: kept\n",
    );
    write(p, ".ignore", "scratch/\n");
    write(p, "scratch/notes.md", "ignored by .ignore\n");
    write(p, ".env.example", "hidden: kept\n");
    write(p, ".config/settings.toml", "hidden folder: kept\n");
    // A `.git` folder is never copied, repository or not.
    write(p, ".git/HEAD", "ref: refs/heads/main\n");
    write(p, "vendor/lib/.git", "gitdir: ../../.git/modules/lib\n");
    write(p, "vendor/lib/lib.py", "kept\n");

    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", p).create().expect("create");
    assert_eq!(
        listing(&created.experiment.paths().code()),
        [
            ".config",
            ".config/settings.toml",
            ".env.example",
            ".gitignore",
            ".ignore",
            "keep.log",
            "secret.yaml",
            "sub",
            "sub/.gitignore",
            "sub/top-only.txt",
            "train.py",
            "vendor",
            "vendor/lib",
            "vendor/lib/lib.py",
        ]
    );
}

#[test]
fn out_files_and_extra_globs_are_excluded() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "x\n");
    write(p, "slurm-1234.out", "ignored\n");
    write(p, "logs/42.out", "ignored\n");
    write(p, "output.txt", "kept\n");
    write(p, "out/readme.md", "kept: `out` is not `*.out`\n");
    write(p, "data/big.bin", "excluded by a glob\n");
    write(p, "ckpt/last.ckpt", "excluded by a glob\n");
    write(p, "ckpt/config.json", "kept\n");
    // `*.out` is excluded even where a .gitignore says to keep it.
    write(p, ".gitignore", "!important.out\n");
    write(p, "important.out", "still excluded\n");

    let exp = TempDir::new().expect("tempdir");
    let mut req = request(exp.path(), "run", p);
    req.snapshot.exclude = vec!["data/".into(), "*.ckpt".into()];
    let created = req.create().expect("create");
    assert_eq!(
        listing(&created.experiment.paths().code()),
        [
            ".gitignore",
            "ckpt",
            "ckpt/config.json",
            "logs",
            "out",
            "out/readme.md",
            "output.txt",
            "train.py",
        ]
    );

    for (glob, phrase) in [("!data", "drop the `!`"), ("  ", "empty"), ("a[", "a[")] {
        let mut req = request(exp.path(), "bad", p);
        req.snapshot.exclude = vec![glob.into()];
        let err = req.create().expect_err(glob);
        assert!(matches!(err, Error::BadExclude { .. }), "{err:?}");
        assert!(err.to_string().contains(phrase), "{err}");
    }
    assert_eq!(common::names(exp.path()), ["run"]);
}

#[test]
fn symlinks_are_kept_as_symlinks() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    let outside = TempDir::new().expect("tempdir");
    write(outside.path(), "dataset/part0", "outside the project\n");
    write(p, "real/model.py", "x\n");
    std::os::unix::fs::symlink("real/model.py", p.join("model.py")).expect("symlink");
    std::os::unix::fs::symlink("real", p.join("real-dir")).expect("symlink");
    std::os::unix::fs::symlink("does/not/exist", p.join("dangling")).expect("symlink");
    std::os::unix::fs::symlink(outside.path().join("dataset"), p.join("data")).expect("symlink");

    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", p).create().expect("create");
    let code = created.experiment.paths().code();
    for (name, target) in [
        ("model.py", "real/model.py".into()),
        ("real-dir", "real".into()),
        ("dangling", "does/not/exist".into()),
        ("data", outside.path().join("dataset")),
    ] {
        let md = fs::symlink_metadata(code.join(name)).expect("exists");
        assert!(md.file_type().is_symlink(), "{name} is not a symlink");
        assert_eq!(fs::read_link(code.join(name)).expect("readlink"), target);
    }
    // Not followed: nothing of the linked folders was copied.
    assert_eq!(
        listing(&code),
        [
            "dangling",
            "data",
            "model.py",
            "real",
            "real/model.py",
            "real-dir"
        ]
    );
    assert_eq!(created.snapshot.symlinks, 4);
    assert_eq!(created.snapshot.files, 1);
}

#[test]
fn modes_less_write_permission_and_mtimes_are_kept_special_files_skipped() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "run.sh", "#!/bin/sh\necho hi\n");
    chmod(p, "run.sh", 0o755);
    write(p, "private.cfg", "x\n");
    chmod(p, "private.cfg", 0o600);
    write(p, "group.txt", "x\n");
    chmod(p, "group.txt", 0o640);
    write(p, "bin/tool", "#!/bin/sh\n");
    chmod(p, "bin/tool", 0o750);
    let st = Command::new("mkfifo")
        .arg(p.join("a.fifo"))
        .status()
        .expect("mkfifo");
    assert!(st.success());

    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", p).create().expect("create");
    let code = created.experiment.paths().code();
    // Read-only: the files are shared with every experiment that runs the same version.
    for (rel, want) in [
        ("run.sh", 0o555),
        ("private.cfg", 0o400),
        ("group.txt", 0o440),
        ("bin/tool", 0o550),
    ] {
        assert_eq!(mode(&code.join(rel)), want, "{rel}");
        let (src, dst) = (
            fs::metadata(p.join(rel)).expect("src"),
            fs::metadata(code.join(rel)).expect("dst"),
        );
        assert_eq!(
            (src.mtime(), src.mtime_nsec()),
            (dst.mtime(), dst.mtime_nsec()),
            "{rel}: mtime kept"
        );
    }
    assert!(!code.join("a.fifo").exists());
    assert_eq!(created.snapshot.skipped, [Path::new("a.fifo")]);
    let manifest = created.experiment.manifest().expect("manifest");
    assert_eq!(manifest.snapshot.skipped, ["a.fifo".into()]);
}

#[test]
fn second_snapshot_links_unchanged_files_and_copies_changed_ones() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "same.py", "unchanged\n");
    write(p, "deep/er/same.py", "unchanged too\n");
    write(p, "edited.py", "version 1\n");
    write(p, "same-size.py", "aaaa\n");
    write(p, "chmod.sh", "#!/bin/sh\n");
    write(p, "deleted.py", "gone later\n");
    write(p, "tampered.py", "original\n");
    settle(p);
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "one", p).create().expect("first");
    assert_eq!(first.snapshot.copied, 7);
    assert_eq!(first.snapshot.linked_from, None);
    let c1 = first.experiment.paths().code();

    write(p, "edited.py", "version 2, longer\n");
    write(p, "same-size.py", "bbbb\n");
    chmod(p, "chmod.sh", 0o755);
    fs::remove_file(p.join("deleted.py")).expect("rm");
    write(p, "new.py", "new\n");
    // Written just before `two` copies them, whatever the machine's speed.
    for rel in ["edited.py", "same-size.py", "new.py"] {
        just_written(p, rel);
    }
    // Someone makes a file of the first snapshot writable and edits it in place: it must
    // not spread to the second.
    chmod(&c1, "tampered.py", 0o644);
    fs::write(c1.join("tampered.py"), "tampered\n").expect("write");
    let second = request(exp.path(), "two", p).create().expect("second");
    let c2 = second.experiment.paths().code();

    for rel in ["same.py", "deep/er/same.py"] {
        assert_eq!(ino(&c1.join(rel)), ino(&c2.join(rel)), "{rel} is linked");
    }
    for rel in ["edited.py", "same-size.py", "chmod.sh", "tampered.py"] {
        assert_ne!(ino(&c1.join(rel)), ino(&c2.join(rel)), "{rel} is copied");
    }
    assert_eq!(
        fs::read_to_string(c2.join("edited.py")).expect("read"),
        "version 2, longer\n"
    );
    assert_eq!(
        fs::read_to_string(c2.join("same-size.py")).expect("read"),
        "bbbb\n"
    );
    assert_eq!(
        fs::read_to_string(c2.join("tampered.py")).expect("read"),
        "original\n"
    );
    assert_eq!(mode(&c2.join("chmod.sh")), 0o555);
    assert_eq!(
        mode(&c1.join("chmod.sh")) & 0o111,
        0,
        "the first snapshot keeps its mode"
    );
    assert!(!c2.join("deleted.py").exists());
    assert!(c1.join("deleted.py").exists());
    assert_eq!(
        fs::read_to_string(c2.join("new.py")).expect("read"),
        "new\n"
    );
    let r = &second.snapshot;
    assert_eq!((r.files, r.linked, r.copied), (7, 2, 5), "{r:?}");
    assert_eq!(r.linked_from.as_deref(), Some("one"));
    let m = second.experiment.manifest().expect("manifest");
    assert_eq!((m.snapshot.linked, m.snapshot.copied), (2, 5));
    assert_eq!(m.snapshot.linked_from.as_deref(), Some("one"));

    // A third snapshot links from the newest one: what was unchanged then and not
    // written just before `two` copied it (the files edited just before `two` are copied
    // again; chmod.sh's contents are older, only its mode changed: linked, like
    // tampered.py, whose copy in `two` is fresh).
    let third = request(exp.path(), "three", p).create().expect("third");
    assert_eq!(third.snapshot.linked_from.as_deref(), Some("two"));
    let c3 = third.experiment.paths().code();
    for rel in ["same.py", "deep/er/same.py", "tampered.py", "chmod.sh"] {
        assert_eq!(ino(&c2.join(rel)), ino(&c3.join(rel)), "{rel} is linked");
    }
    for rel in ["edited.py", "same-size.py", "new.py"] {
        assert_ne!(ino(&c2.join(rel)), ino(&c3.join(rel)), "{rel} is copied");
    }
    assert_eq!((third.snapshot.linked, third.snapshot.copied), (4, 3));

    // Without reuse everything is copied.
    settle(p);
    let mut req = request(exp.path(), "four", p);
    req.snapshot.reuse_previous = false;
    let fourth = req.create().expect("fourth");
    assert_eq!((fourth.snapshot.linked, fourth.snapshot.copied), (0, 7));
    // Now every file is older than the newest snapshot: all linked.
    let fifth = request(exp.path(), "five", p).create().expect("fifth");
    assert_eq!(fifth.snapshot.linked_from.as_deref(), Some("four"));
    assert_eq!((fifth.snapshot.linked, fifth.snapshot.copied), (7, 0));
}

#[test]
fn files_changed_just_before_a_snapshot_are_not_linked_from_it() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "old.py", "old\n");
    settle(p);
    // Written within 2 s of the first snapshot: it might change again unnoticed within
    // the file system's timestamp granularity, so the next snapshot copies it.
    write(p, "racy.py", "just written\n");
    just_written(p, "racy.py");
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "one", p).create().expect("first");
    let second = request(exp.path(), "two", p).create().expect("second");
    let (c1, c2) = (
        first.experiment.paths().code(),
        second.experiment.paths().code(),
    );
    assert_eq!(ino(&c1.join("old.py")), ino(&c2.join("old.py")));
    assert_ne!(ino(&c1.join("racy.py")), ino(&c2.join("racy.py")));
}

#[test]
fn only_snapshots_of_the_same_project_are_linked_from() {
    let a = TempDir::new().expect("tempdir");
    let b = TempDir::new().expect("tempdir");
    for p in [a.path(), b.path()] {
        write(p, "same.py", "identical in both projects\n");
        settle(p);
    }
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "a1", a.path()).create().expect("a1");
    let other = request(exp.path(), "b1", b.path()).create().expect("b1");
    assert_eq!(other.snapshot.linked, 0);
    assert_eq!(other.snapshot.linked_from, None);
    // `b1` is newer, but of another project: `a2` links from `a1`.
    let again = request(exp.path(), "a2", a.path()).create().expect("a2");
    assert_eq!(again.snapshot.linked_from.as_deref(), Some("a1"));
    assert_eq!(
        ino(&first.experiment.paths().code().join("same.py")),
        ino(&again.experiment.paths().code().join("same.py"))
    );
    // The project given through a symlink is the same project (canonical root).
    let via = TempDir::new().expect("tempdir");
    std::os::unix::fs::symlink(a.path(), via.path().join("proj")).expect("symlink");
    let linked = request(exp.path(), "a3", &via.path().join("proj"))
        .create()
        .expect("a3");
    assert_eq!(linked.snapshot.linked_from.as_deref(), Some("a2"));
}

#[test]
fn a_broken_previous_manifest_means_copying_not_failing() {
    let proj = TempDir::new().expect("tempdir");
    write(proj.path(), "a.py", "a\n");
    settle(proj.path());
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "one", proj.path())
        .create()
        .expect("one");
    let manifest = first.experiment.paths().manifest();
    let text = fs::read_to_string(&manifest).expect("manifest");
    fs::write(&manifest, &text[..text.len() / 2]).expect("write");
    let second = request(exp.path(), "two", proj.path())
        .create()
        .expect("two");
    assert_eq!((second.snapshot.linked, second.snapshot.copied), (0, 1));
    assert!(
        second
            .snapshot
            .warnings
            .iter()
            .any(|w| w.contains("one/manifest.json") && w.contains("is not valid")),
        "{:?}",
        second.snapshot.warnings
    );
}

#[test]
fn editing_the_project_after_the_snapshot_changes_nothing_in_it() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "lr = 0.1\n");
    write(p, "conf/a.yaml", "epochs: 10\n");
    settle(p);
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "one", p).create().expect("one");
    let second = request(exp.path(), "two", p).create().expect("two");
    assert_eq!(second.snapshot.linked, 2);
    let before = (
        fingerprint(&first.experiment.paths().code()),
        fingerprint(&second.experiment.paths().code()),
    );

    // In place (same inode, truncate and write), replaced, appended, deleted, chmod.
    fs::write(p.join("train.py"), "lr = 0.5\n").expect("write");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(p.join("conf/a.yaml"))
        .expect("open");
    std::io::Write::write_all(&mut f, b"extra: true\n").expect("append");
    fs::set_permissions(p.join("conf/a.yaml"), fs::Permissions::from_mode(0o600)).expect("chmod");
    fs::remove_file(p.join("train.py")).expect("rm");
    write(p, "train.py", "brand new file\n");

    let after = (
        fingerprint(&first.experiment.paths().code()),
        fingerprint(&second.experiment.paths().code()),
    );
    assert_eq!(before, after);
    assert_eq!(
        fs::read_to_string(second.experiment.paths().code().join("train.py")).expect("read"),
        "lr = 0.1\n"
    );
}

/// Python environments are never copied, known by what their tools write at their top
/// (`pyvenv.cfg`: venv, virtualenv, uv; `conda-meta/`: conda, mamba, pixi), whatever their
/// name; a folder merely named like one, or a stray `pyvenv.cfg` file elsewhere, is copied.
#[test]
fn python_environments_are_left_out_and_listed() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "x\n");
    write(p, ".venv/pyvenv.cfg", "home = /usr/bin\n");
    write(p, ".venv/bin/python", "");
    write(
        p,
        ".venv/lib/python3.11/site-packages/torch/__init__.py",
        "",
    );
    write(p, "tools/env-2/pyvenv.cfg", "home = /usr/bin\n");
    write(p, "tools/env-2/bin/activate", "");
    write(p, "envs/dev/conda-meta/history", "");
    write(p, "envs/dev/bin/python", "");
    write(p, "venv/notes.md", "a folder named venv, no environment\n");
    write(p, "configs/pyvenv.cfg.example", "copied\n");
    write(
        p,
        "pyvenv.cfg",
        "at the project root: the project is no environment\n",
    );
    settle(p);
    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", p).create().expect("create");
    assert_eq!(
        listing(&created.experiment.paths().code()),
        [
            "configs",
            "configs/pyvenv.cfg.example",
            "envs",
            "pyvenv.cfg",
            "tools",
            "train.py",
            "venv",
            "venv/notes.md",
        ]
    );
    let left: Vec<(String, herd_exp::PythonEnv)> = created
        .snapshot
        .python_envs
        .iter()
        .map(|e| (e.path.display().to_string(), e.kind))
        .collect();
    assert_eq!(
        left,
        [
            (".venv".to_owned(), herd_exp::PythonEnv::Venv),
            ("envs/dev".to_owned(), herd_exp::PythonEnv::Conda),
            ("tools/env-2".to_owned(), herd_exp::PythonEnv::Venv),
        ]
    );
    assert_eq!(created.snapshot.files, 4, "{:?}", created.snapshot);
    let manifest = created.experiment.manifest().expect("manifest");
    let recorded: Vec<String> = manifest
        .snapshot
        .python_envs
        .iter()
        .map(|t| t.to_string_lossy())
        .collect();
    assert_eq!(recorded, [".venv", "envs/dev", "tools/env-2"]);
}
