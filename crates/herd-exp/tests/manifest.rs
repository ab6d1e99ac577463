//! The manifest: plan, git commit and dirty diff, argv, herd version, submissions and job ids;
//! resuming; extra files.

mod common;

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{fingerprint, request, write};
use herd_exp::{Error, Experiment, ExtraFile, Invocation, LosslessText, MANIFEST_FORMAT};
use tempfile::TempDir;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn manifest_records_plan_git_argv_version_and_submissions() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    git(p, &["init", "-q"]);
    write(p, "train.py", "lr = 0.1\nepochs = 10\n");
    write(p, "README.md", "readme\n");
    git(p, &["add", "."]);
    git(p, &["commit", "-q", "-m", "init"]);
    let head = git(p, &["rev-parse", "HEAD"]).trim().to_owned();
    write(p, "train.py", "lr = 0.5\nepochs = 10\n");
    write(p, "untracked.py", "new\n");

    let exp = TempDir::new().expect("tempdir");
    let mut req = request(exp.path(), "run", p);
    let weird = OsString::from_vec(b"--note=caf\xe9 \\ $(rm -rf /)\n".to_vec());
    req.invocation.argv.push(weird.clone());
    req.invocation.argv.push("ünï ✓".into());
    let created = req.create().expect("create");
    let m = created.experiment.manifest().expect("manifest");

    assert_eq!(m.format, MANIFEST_FORMAT);
    assert_eq!(m.name, "run");
    assert_eq!(m.herd_version, "9.9.9-test");
    assert_eq!(m.plan, req.plan);
    assert_eq!(
        m.project.root,
        LosslessText::from(fs::canonicalize(p).expect("canonical").as_path())
    );
    let args: Vec<OsString> = m
        .argv
        .iter()
        .map(|a| a.to_os_string().expect("decodes"))
        .collect();
    assert_eq!(args, req.invocation.argv, "argv recorded losslessly");
    assert!(matches!(m.argv[3], LosslessText::Escaped { .. }));
    assert_eq!(m.argv[4], LosslessText::Utf8("ünï ✓".into()));

    let git_state = m.project.git.as_ref().expect("a git repository");
    assert_eq!(git_state.commit.as_deref(), Some(head.as_str()));
    assert!(git_state.dirty);
    let diff = git_state.diff.as_ref().expect("a diff").to_string_lossy();
    assert!(
        diff.contains("-lr = 0.1") && diff.contains("+lr = 0.5"),
        "{diff}"
    );
    assert!(
        !diff.contains("untracked"),
        "untracked files are not in the diff"
    );

    assert_eq!(m.submissions.len(), 1);
    let a = &m.submissions[0];
    assert_eq!((a.number, a.job_id.as_deref()), (1, None));
    assert_eq!(a.argv, m.argv);
    assert_eq!(a.herd_version, "9.9.9-test");
    assert_eq!((m.snapshot.files, m.snapshot.copied), (3, 3));

    // The snapshot has the working tree (edits and untracked files), not `.git`.
    let code = created.experiment.paths().code();
    assert_eq!(
        fs::read_to_string(code.join("train.py")).expect("read"),
        "lr = 0.5\nepochs = 10\n"
    );
    assert!(code.join("untracked.py").exists());
    assert!(!code.join(".git").exists());

    // The raw JSON: a readable file, the non-UTF-8 argument escaped.
    let raw = fs::read_to_string(created.experiment.paths().manifest()).expect("read");
    assert!(
        raw.contains(r#""escaped": "--note=caf\\xe9 \\\\ $(rm -rf /)\n""#),
        "{raw}"
    );
    assert!(raw.contains(&format!(r#""commit": "{head}""#)), "{raw}");
}

#[test]
fn clean_repository_unborn_repository_and_no_repository() {
    let exp = TempDir::new().expect("tempdir");

    let clean = TempDir::new().expect("tempdir");
    git(clean.path(), &["init", "-q"]);
    write(clean.path(), "a.py", "a\n");
    git(clean.path(), &["add", "."]);
    git(clean.path(), &["commit", "-q", "-m", "c"]);
    let m = request(exp.path(), "clean", clean.path())
        .create()
        .expect("create")
        .experiment
        .manifest()
        .expect("manifest");
    let g = m.project.git.expect("repository");
    assert!(g.commit.is_some());
    assert!(!g.dirty);
    assert_eq!(g.diff, Some(LosslessText::Utf8(String::new())));

    let unborn = TempDir::new().expect("tempdir");
    git(unborn.path(), &["init", "-q"]);
    write(unborn.path(), "a.py", "a\n");
    let m = request(exp.path(), "unborn", unborn.path())
        .create()
        .expect("create")
        .experiment
        .manifest()
        .expect("manifest");
    let g = m.project.git.expect("repository");
    assert_eq!((g.commit, g.dirty, g.diff), (None, false, None));

    let plain = TempDir::new().expect("tempdir");
    write(plain.path(), "a.py", "a\n");
    let created = request(exp.path(), "plain", plain.path())
        .create()
        .expect("create");
    let m = created.experiment.manifest().expect("manifest");
    assert_eq!(m.project.git, None);
    let raw = fs::read_to_string(created.experiment.paths().manifest()).expect("read");
    assert!(raw.contains(r#""git": null"#), "{raw}");

    // A sub-folder of a repository is in that repository; its diff is its own part only
    // (an edit elsewhere in the repository is not in the snapshot either).
    let sub = clean.path().join("sub");
    write(&sub, "b.py", "b\n");
    git(clean.path(), &["add", "."]);
    git(clean.path(), &["commit", "-q", "-m", "sub"]);
    write(clean.path(), "a.py", "edited outside the project\n");
    write(&sub, "b.py", "edited inside\n");
    let m = request(exp.path(), "sub", &sub)
        .create()
        .expect("create")
        .experiment
        .manifest()
        .expect("manifest");
    let g = m.project.git.expect("repository");
    assert!(g.commit.is_some() && g.dirty);
    let diff = g.diff.expect("a diff").to_string_lossy();
    assert!(diff.contains("+edited inside"), "{diff}");
    assert!(!diff.contains("outside"), "{diff}");
}

#[test]
fn a_git_failure_is_an_error_with_gits_message() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    git(p, &["init", "-q"]);
    write(p, "a.py", "a\n");
    git(p, &["add", "."]);
    git(p, &["commit", "-q", "-m", "c"]);
    // A broken repository: HEAD names a commit whose objects are gone.
    fs::remove_dir_all(p.join(".git/objects")).expect("rm");
    fs::create_dir(p.join(".git/objects")).expect("mkdir");
    let exp = TempDir::new().expect("tempdir");
    let err = request(exp.path(), "run", p)
        .create()
        .expect_err("git fails");
    assert!(matches!(err, Error::Git { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("git -C") && msg.contains("diff HEAD") && msg.contains("bad object"),
        "the command and git's stderr: {msg}"
    );
    assert!(common::names(exp.path()).is_empty());
}

#[test]
fn job_ids_are_recorded_once_and_resume_adds_submissions() {
    let proj = TempDir::new().expect("tempdir");
    write(proj.path(), "train.py", "x\n");
    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", proj.path())
        .create()
        .expect("create");
    let e = &created.experiment;
    e.record_job_id(1, "4242").expect("record");
    e.record_job_id(1, "4242")
        .expect("the same id again is fine");
    let err = e.record_job_id(1, "4243").expect_err("never replaced");
    assert!(matches!(err, Error::JobIdAlreadySet { .. }), "{err:?}");
    assert!(err.to_string().contains("already has job id 4242"), "{err}");
    let err = e.record_job_id(2, "1").expect_err("no attempt 2 yet");
    assert!(
        matches!(err, Error::NoSuchSubmission { count: 1, .. }),
        "{err:?}"
    );
    for bad in ["", "12 34", "1;rm", "x".repeat(65).as_str(), "4\n2"] {
        let err = e.record_job_id(1, bad).expect_err(bad);
        assert!(matches!(err, Error::BadJobId { .. }), "{bad:?}: {err:?}");
    }

    // `--resume`: open by name, add an attempt; the snapshot is not touched.
    let code_before = fingerprint(&e.paths().code());
    write(proj.path(), "train.py", "changed after the first submit\n");
    let resumed = Experiment::open(exp.path(), "run").expect("open");
    let inv = Invocation {
        herd_version: "10.0.0".into(),
        argv: vec![
            "herd".into(),
            "submit".into(),
            "--resume".into(),
            "run".into(),
        ],
    };
    assert_eq!(resumed.add_submission(&inv).expect("attempt"), 2);
    resumed.record_job_id(2, "5000_1").expect("record");
    assert_eq!(resumed.add_submission(&inv).expect("attempt"), 3);
    assert_eq!(fingerprint(&e.paths().code()), code_before);

    let m = resumed.manifest().expect("manifest");
    let ids: Vec<_> = m
        .submissions
        .iter()
        .map(|a| (a.number, a.job_id.as_deref(), a.herd_version.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            (1, Some("4242"), "9.9.9-test"),
            (2, Some("5000_1"), "10.0.0"),
            (3, None, "10.0.0")
        ]
    );
    assert_eq!(m.submissions[1].argv[2], LosslessText::from("--resume"));
    // The creating command line stays the manifest's own.
    assert_eq!(m.herd_version, "9.9.9-test");
    // No temporary files left; the lock file exists after updates.
    assert_eq!(
        common::names(e.dir()),
        [".lock", "checkpoints", "code", "logs", "manifest.json"]
    );

    let err = Experiment::open(exp.path(), "nope").expect_err("missing");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    std::fs::create_dir(exp.path().join("plain")).expect("mkdir");
    let err = Experiment::open(exp.path(), "plain").expect_err("no manifest");
    assert!(matches!(err, Error::NotAnExperiment { .. }), "{err:?}");
    let err = Experiment::open(exp.path(), "../run").expect_err("bad name");
    assert!(matches!(err, Error::Name(_)), "{err:?}");
}

#[test]
fn fields_of_a_newer_herd_are_kept_and_newer_formats_refused() {
    let proj = TempDir::new().expect("tempdir");
    write(proj.path(), "train.py", "x\n");
    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", proj.path())
        .create()
        .expect("create");
    let path = created.experiment.paths().manifest();
    let mut raw: serde_json::Value =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
    raw["future_field"] = serde_json::json!({"kept": true});
    raw["submissions"][0]["future_submission_field"] = serde_json::json!(7);
    fs::write(&path, serde_json::to_vec(&raw).expect("json")).expect("write");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");

    created.experiment.record_job_id(1, "77").expect("record");
    let raw: serde_json::Value =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
    assert_eq!(raw["future_field"], serde_json::json!({"kept": true}));
    assert_eq!(raw["submissions"][0]["future_submission_field"], 7);
    assert_eq!(raw["submissions"][0]["job_id"], "77");
    assert_eq!(
        fs::metadata(&path).expect("stat").permissions().mode() & 0o777,
        0o640,
        "the manifest keeps its mode when rewritten"
    );

    let mut raw = raw;
    raw["format"] = serde_json::json!(MANIFEST_FORMAT + 1);
    fs::write(&path, serde_json::to_vec(&raw).expect("json")).expect("write");
    let before = fs::read(&path).expect("read");
    let err = created
        .experiment
        .add_submission(&Invocation::current("1"))
        .expect_err("newer format");
    assert!(matches!(err, Error::ManifestFormat { .. }), "{err:?}");
    assert_eq!(fs::read(&path).expect("read"), before);
}

#[test]
fn extra_files_are_written_with_the_folder_and_never_overwritten() {
    let proj = TempDir::new().expect("tempdir");
    write(proj.path(), "train.py", "x\n");
    let exp = TempDir::new().expect("tempdir");
    let mut req = request(exp.path(), "run", proj.path());
    req.files = vec![ExtraFile {
        name: "job.sbatch".into(),
        contents: b"#!/bin/bash\n#SBATCH -N 2\n".to_vec(),
        executable: true,
    }];
    let created = req.create().expect("create");
    let e = &created.experiment;
    let script = e.dir().join("job.sbatch");
    assert_eq!(
        fs::read(&script).expect("read"),
        b"#!/bin/bash\n#SBATCH -N 2\n"
    );
    let mode = fs::metadata(&script).expect("stat").permissions().mode();
    assert_eq!(mode & 0o100, 0o100, "executable: {mode:o}");

    let second = ExtraFile {
        name: "job-2.sbatch".into(),
        contents: b"#!/bin/bash\n".to_vec(),
        executable: false,
    };
    let path = e.add_file(&second).expect("add");
    assert_eq!(path, e.dir().join("job-2.sbatch"));
    assert_eq!(
        fs::metadata(&path).expect("stat").permissions().mode() & 0o111,
        0
    );
    let before = fingerprint(e.dir());
    let err = e
        .add_file(&ExtraFile {
            contents: b"other".to_vec(),
            ..second
        })
        .expect_err("exists");
    assert!(matches!(err, Error::FileExists { .. }), "{err:?}");
    for name in [
        "manifest.json",
        "code",
        "logs",
        "checkpoints",
        ".lock",
        "a/b",
        "",
    ] {
        let err = e
            .add_file(&ExtraFile {
                name: name.into(),
                contents: vec![],
                executable: false,
            })
            .expect_err(name);
        assert!(matches!(err, Error::Name(_)), "{name}: {err:?}");
    }
    assert_eq!(fingerprint(e.dir()), before);

    let mut req = request(exp.path(), "taken", proj.path());
    req.files = vec![ExtraFile {
        name: "manifest.json".into(),
        contents: vec![],
        executable: false,
    }];
    let err = req.create().expect_err("taken name");
    assert!(err.to_string().contains("herd uses itself"), "{err}");
}

#[test]
fn a_format_1_manifest_reads_its_attempts_as_submissions_and_is_rewritten_as_format_2() {
    let proj = TempDir::new().expect("tempdir");
    write(proj.path(), "train.py", "x\n");
    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "old", proj.path())
        .create()
        .expect("create");
    let path = created.experiment.paths().manifest();
    // What herd wrote before format 2: the submissions under `attempts`.
    let mut raw: serde_json::Value =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
    let obj = raw.as_object_mut().expect("object");
    let submissions = obj.remove("submissions").expect("submissions");
    obj.insert("attempts".into(), submissions);
    obj.insert("format".into(), serde_json::json!(1));
    raw["attempts"][0]["job_id"] = serde_json::json!("41");
    fs::write(&path, serde_json::to_vec(&raw).expect("json")).expect("write");

    let m = created.experiment.manifest().expect("format 1 reads");
    assert_eq!(m.submissions.len(), 1);
    assert_eq!(m.submissions[0].job_id.as_deref(), Some("41"));

    let n = created
        .experiment
        .add_submission(&Invocation::current("1"))
        .expect("a format-1 manifest takes a submission");
    assert_eq!(n, 2);
    let raw: serde_json::Value =
        serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
    assert_eq!(raw["format"], MANIFEST_FORMAT);
    assert_eq!(MANIFEST_FORMAT, 2);
    assert!(raw.get("attempts").is_none(), "{raw:#}");
    assert_eq!(raw["submissions"][0]["job_id"], "41");
    assert_eq!(raw["submissions"][1]["number"], 2);
}

#[test]
fn the_next_free_name_counts_up_from_the_base_past_anything_taken() {
    let root = TempDir::new().expect("tempdir");
    let free = |base: &str, max: usize| herd_exp::next_free_name(root.path(), base, max);
    assert_eq!(free("train", 128), "train", "nothing there yet");
    fs::create_dir(root.path().join("train")).expect("mkdir");
    assert_eq!(free("train", 128), "train-2");
    fs::create_dir(root.path().join("train-2")).expect("mkdir");
    // Any entry takes a name, not only an experiment folder.
    fs::write(root.path().join("train-3"), "").expect("file");
    assert_eq!(free("train", 128), "train-4");
    // Another base is not counted: `train-eval` is not a number.
    fs::create_dir(root.path().join("train-eval")).expect("mkdir");
    assert_eq!(free("train-eval", 128), "train-eval-2");
    // A base at the length limit is shortened to make room for its suffix.
    let long = "a".repeat(12);
    fs::create_dir(root.path().join(&long)).expect("mkdir");
    assert_eq!(free(&long, 12), format!("{}-2", "a".repeat(10)));
    // No experiment root yet: the base is free.
    assert_eq!(
        herd_exp::next_free_name(&root.path().join("missing"), "train", 128),
        "train"
    );
}
