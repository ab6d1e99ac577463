//! Creating experiment folders: atomic, never overwritten, nothing left behind on errors;
//! job names.

mod common;

use std::fs;
use std::os::fd::OwnedFd;
use std::path::Path;

use common::{fingerprint, names, request, write};
use herd_exp::{validate_name, Error, ExtraFile, NameProblem};
use tempfile::TempDir;

fn project() -> TempDir {
    let dir = TempDir::new().expect("tempdir");
    write(dir.path(), "train.py", "print('train')\n");
    write(dir.path(), "models/net.py", "class Net: pass\n");
    dir
}

#[test]
fn creates_the_folder_with_code_logs_manifest() {
    let proj = project();
    let exp = TempDir::new().expect("tempdir");
    let root = exp.path().join("does/not/exist/yet");
    let created = request(&root, "run1", proj.path())
        .create()
        .expect("create");
    let dir = created.experiment.dir();
    assert_eq!(dir, fs::canonicalize(&root).expect("exists").join("run1"));
    assert_eq!(names(dir), ["checkpoints", "code", "logs", "manifest.json"]);
    assert!(names(&dir.join("checkpoints")).is_empty());
    assert!(names(&dir.join("logs")).is_empty());
    assert_eq!(
        fs::read_to_string(dir.join("code/models/net.py")).expect("snapshot file"),
        "class Net: pass\n"
    );
    assert_eq!(created.snapshot.files, 2);
    assert_eq!(created.snapshot.copied, 2);
    // Only the experiment: no temporary folder, nothing else beside it.
    assert_eq!(names(&root), ["run1"]);
}

#[test]
fn existing_name_is_refused_and_the_folder_untouched() {
    let proj = project();
    let exp = TempDir::new().expect("tempdir");
    // A folder made by hand, and one made by herd.
    write(exp.path(), "byhand/results.csv", "epoch,loss\n1,0.5\n");
    write(exp.path(), "byhand/code/train.py", "old code\n");
    std::os::unix::fs::symlink("results.csv", exp.path().join("byhand/latest")).expect("symlink");
    request(exp.path(), "run1", proj.path())
        .create()
        .expect("first create");
    let before = fingerprint(exp.path());

    for name in ["byhand", "run1"] {
        // The project changed meanwhile: nothing of it may reach the existing folder.
        write(
            proj.path(),
            "train.py",
            &format!("print('changed for {name}')\n"),
        );
        let err = request(exp.path(), name, proj.path())
            .create()
            .expect_err("must be refused");
        assert!(
            matches!(&err, Error::AlreadyExists { path } if path.ends_with(name)),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("already exists") && msg.contains("--resume"),
            "{msg}"
        );
        assert_eq!(fingerprint(exp.path()), before, "{name} changed");
    }
    // A file or a symlink (even dangling) of that name is refused as well.
    fs::write(exp.path().join("afile"), "x").expect("write");
    std::os::unix::fs::symlink("nowhere", exp.path().join("alink")).expect("symlink");
    let before = fingerprint(exp.path());
    for name in ["afile", "alink"] {
        let err = request(exp.path(), name, proj.path())
            .create()
            .expect_err("must be refused");
        assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");
    }
    assert_eq!(fingerprint(exp.path()), before);
}

#[test]
fn concurrent_creates_of_one_name_one_wins() {
    let proj = project();
    for i in 0..40 {
        write(
            proj.path(),
            &format!("pkg/m{i}.py"),
            &"x = 1\n".repeat(i + 1),
        );
    }
    let exp = TempDir::new().expect("tempdir");
    for round in 0..5 {
        let name = format!("race{round}");
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| request(exp.path(), &name, proj.path()).create()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("no panic"))
                .collect()
        });
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "round {round}: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, Error::AlreadyExists { .. }), "{e:?}");
            }
        }
    }
    // The winners only: no temporary folders.
    assert_eq!(
        names(exp.path()),
        ["race0", "race1", "race2", "race3", "race4"]
    );
}

/// Makes `root/d…d/d…d/…` deeper than PATH_MAX (4096 bytes), one `mkdirat` at a time.
fn make_too_deep(root: &Path) {
    use rustix::fs::{mkdirat, openat, Mode, OFlags};
    let component = "d".repeat(250);
    let mut dir: OwnedFd =
        rustix::fs::open(root, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).expect("open");
    for _ in 0..18 {
        mkdirat(&dir, component.as_str(), Mode::from_raw_mode(0o755)).expect("mkdirat");
        dir = openat(
            &dir,
            component.as_str(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .expect("openat");
    }
    let file = openat(
        &dir,
        "deep.py",
        OFlags::CREATE | OFlags::WRONLY,
        Mode::from_raw_mode(0o644),
    )
    .expect("create deep file");
    drop(file);
}

#[test]
fn failure_in_the_middle_leaves_nothing_behind() {
    let proj = project();
    for i in 0..200 {
        write(proj.path(), &format!("a/b{}/f{i}.py", i % 7), "pass\n");
    }
    make_too_deep(proj.path());
    let exp = TempDir::new().expect("tempdir");
    let err = request(exp.path(), "run", proj.path())
        .create()
        .expect_err("a path past PATH_MAX cannot be snapshotted");
    let msg = err.to_string();
    assert!(msg.contains("ddddd"), "the message names the path: {msg}");
    assert!(
        names(exp.path()).is_empty(),
        "left behind: {:?}",
        names(exp.path())
    );
}

/// A file the user cannot read (mode 000) among 200 fails the snapshot, naming the file,
/// and leaves nothing. Root reads every file, so that part runs as user `nobody`; root
/// itself snapshots the same project whole.
#[test]
fn unreadable_file_leaves_nothing_behind() {
    const NAME: &str = "unreadable_file_leaves_nothing_behind";
    if let Some((root, proj)) = common::nobody_part() {
        let err = request(&root, "run", &proj)
            .create()
            .expect_err("an unreadable file fails the snapshot");
        let msg = err.to_string();
        assert!(
            msg.contains("secret.key") && msg.contains("ermission denied"),
            "{msg}"
        );
        assert!(names(&root).is_empty(), "left behind: {:?}", names(&root));
        return;
    }
    let proj = project();
    for i in 0..200 {
        write(proj.path(), &format!("a/b{}/f{i}.py", i % 7), "pass\n");
    }
    write(proj.path(), "a/secret.key", "secret\n");
    common::chmod(proj.path(), "a/secret.key", 0o000);
    common::chmod(proj.path(), ".", 0o755);
    let exp = TempDir::new().expect("tempdir");
    common::chmod(exp.path(), ".", 0o777);
    common::as_nobody(NAME, &[("T_ROOT", exp.path()), ("T_PROJ", proj.path())]);
    assert!(names(exp.path()).is_empty(), "{:?}", names(exp.path()));
    let created = request(exp.path(), "run", proj.path())
        .create()
        .expect("root reads files of mode 000");
    assert!(created
        .experiment
        .paths()
        .code()
        .join("a/secret.key")
        .exists());
}

#[test]
fn failure_after_the_snapshot_leaves_nothing_behind() {
    let proj = project();
    let exp = TempDir::new().expect("tempdir");
    let mut req = request(exp.path(), "run", proj.path());
    // The second file of the same name fails after the snapshot and the first file.
    let script = ExtraFile {
        name: "job.sbatch".into(),
        contents: b"#!/bin/bash\n".to_vec(),
        executable: true,
    };
    req.files = vec![script.clone(), script];
    let err = req.create().expect_err("duplicate file");
    assert!(err.to_string().contains("job.sbatch"), "{err}");
    assert!(names(exp.path()).is_empty(), "{:?}", names(exp.path()));
}

#[test]
fn name_validation() {
    let cases: &[(&str, NameProblem, &str)] = &[
        ("", NameProblem::Empty, "is empty"),
        (".", NameProblem::Dots, "`.` and `..`"),
        ("..", NameProblem::Dots, "`.` and `..`"),
        (
            "runs/a",
            NameProblem::Slash { at: 4 },
            "use `-` or `_` instead",
        ),
        ("/abs", NameProblem::Slash { at: 0 }, "not a path"),
        ("a\0b", NameProblem::Nul { at: 1 }, "NUL byte at byte 1"),
        (
            "a\nb",
            NameProblem::Control { ch: '\n', at: 1 },
            "U+000A at byte 1",
        ),
        (
            "tab\there",
            NameProblem::Control { ch: '\t', at: 3 },
            "control character",
        ),
        (
            "esc\u{1b}[31m",
            NameProblem::Control {
                ch: '\u{1b}',
                at: 3,
            },
            "U+001B",
        ),
        (
            "del\u{7f}",
            NameProblem::Control {
                ch: '\u{7f}',
                at: 3,
            },
            "U+007F",
        ),
        (
            "c1\u{85}",
            NameProblem::Control {
                ch: '\u{85}',
                at: 2,
            },
            "U+0085",
        ),
        (".herd-new-x", NameProblem::Reserved, "temporary folders"),
    ];
    for (name, problem, phrase) in cases {
        let err = validate_name(name).expect_err(name);
        assert_eq!(&err.problem, problem, "{name:?}");
        let msg = err.to_string();
        assert!(msg.contains(phrase), "{name:?}: {msg}");
        assert!(
            !msg.contains('\n') && !msg.contains('\u{1b}'),
            "message must be one safe line: {msg:?}"
        );
    }
    let long = "é".repeat(101); // 202 bytes
    let err = validate_name(&long).expect_err("too long");
    assert_eq!(err.problem, NameProblem::TooLong { len: 202 });
    assert!(err
        .to_string()
        .contains("202 bytes long, more than 200: shorten it"));
    assert!(validate_name(&"x".repeat(200)).is_ok());
    for ok in [
        "a",
        "run 1",
        "lr=0.1,bs=64",
        "-dash",
        "ünïcödé",
        "..a",
        ".hidden",
        "a.b",
    ] {
        assert!(validate_name(ok).is_ok(), "{ok:?}");
    }

    // A refused name touches nothing, not even the experiment root.
    let proj = project();
    let exp = TempDir::new().expect("tempdir");
    let root = exp.path().join("root");
    let err = request(&root, "../escape", proj.path())
        .create()
        .expect_err("refused");
    assert!(matches!(err, Error::Name(_)), "{err:?}");
    assert!(!root.exists());
    assert!(names(exp.path()).is_empty());
}

#[test]
fn experiment_root_inside_the_project_is_left_out() {
    let proj = project();
    let exp_root = proj.path().join("experiments");
    let first = request(&exp_root, "one", proj.path())
        .create()
        .expect("create");
    let second = request(&exp_root, "two", proj.path())
        .create()
        .expect("create");
    for created in [&first, &second] {
        assert_eq!(
            names(&created.experiment.paths().code()),
            ["models", "train.py"]
        );
    }
    let err = request(proj.path(), "three", proj.path())
        .create()
        .expect_err("the project root cannot be the experiment root");
    assert!(matches!(err, Error::ExpRootIsProject { .. }), "{err:?}");
    assert!(err.to_string().contains("sub-folder"), "{err}");
}

#[test]
fn project_root_problems_name_the_path() {
    let exp = TempDir::new().expect("tempdir");
    let missing = exp.path().join("no-such-project");
    let err = request(&exp.path().join("e"), "run", &missing)
        .create()
        .expect_err("missing project");
    assert!(err.to_string().contains("no-such-project"), "{err}");
    fs::write(exp.path().join("file"), "x").expect("write");
    let err = request(&exp.path().join("e"), "run", &exp.path().join("file"))
        .create()
        .expect_err("a file is no project");
    assert!(err.to_string().contains("not a folder"), "{err}");
}
