use std::os::unix::fs::MetadataExt;

use super::*;
use crate::layout::ExperimentDir;

/// Writes a file last modified an hour ago (a file changed within 2 s of its earlier
/// copy is copied again, not linked).
fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(&path, text).expect("write");
    let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_modified(hour_ago))
        .expect("mtime");
}

fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    n.sort();
    n
}

fn run(name: &str, lr: &str, seed: &str) -> NewRun {
    NewRun {
        name: name.to_owned(),
        values: vec![("lr".into(), lr.into()), ("seed".into(), seed.into())],
        plan: serde_json::json!({"command": ["python", "train.py", "--lr", lr]}),
        files: vec![ExtraFile {
            name: ExperimentDir::job_script_name().into(),
            contents: format!("#!/bin/bash\necho {name}\n").into_bytes(),
            executable: true,
        }],
    }
}

fn request(exp_root: &Path, project: &Path) -> NewSweep {
    NewSweep {
        exp_root: exp_root.to_owned(),
        name: "grid".into(),
        keys: vec!["lr".into(), "seed".into()],
        runs: vec![
            run("lr=0.1,seed=1", "0.1", "1"),
            run("lr=0.1,seed=2", "0.1", "2"),
            run("lr=0.01,seed=1", "0.01", "1"),
        ],
        max_parallel: Some(2),
        project_root: project.to_owned(),
        invocation: Invocation {
            herd_version: "9.9.9".into(),
            argv: vec!["herd".into(), "submit".into()],
        },
        snapshot: SnapshotOptions::default(),
        array_scripts: vec![(
            "job.sbatch".into(),
            b"#!/bin/bash\n#SBATCH --array=0-2%2\n".to_vec(),
        )],
    }
}

/// A project with an experiment root inside it that holds an earlier experiment.
fn project() -> tempfile::TempDir {
    let proj = tempfile::tempdir().expect("tempdir");
    write(proj.path(), "train.py", "print('train')\n");
    write(proj.path(), "lib/net.py", "class Net: pass\n");
    write(proj.path(), "herd-exp/old/code/stale.py", "old\n");
    proj
}

#[test]
fn a_sweep_folder_holds_its_manifest_script_logs_and_one_experiment_per_run() {
    let proj = project();
    let root = proj.path().join("herd-exp");
    let created = request(&root, proj.path()).create().expect("create");
    let sweep = &created.sweep;
    let dir = sweep.dir().to_owned();
    assert_eq!(dir, fs::canonicalize(&root).expect("root").join("grid"));
    assert_eq!(
        names(&dir),
        [
            "job.sbatch",
            "logs",
            "lr=0.01,seed=1",
            "lr=0.1,seed=1",
            "lr=0.1,seed=2",
            "sweep.json"
        ]
    );
    assert_eq!(names(&root), ["grid", "old"], "no temporary folder left");
    assert_eq!(
        fs::read_to_string(dir.join("job.sbatch")).expect("array script"),
        "#!/bin/bash\n#SBATCH --array=0-2%2\n"
    );
    assert!(names(&dir.join("logs")).is_empty());

    let m = sweep.manifest().expect("sweep.json");
    assert_eq!(m.format, 1);
    assert_eq!(m.name, "grid");
    assert_eq!(m.keys, ["lr", "seed"]);
    assert_eq!(m.max_parallel, Some(2));
    assert_eq!(m.herd_version, "9.9.9");
    assert!(
        crate::timeline::parse_rfc3339(&m.created).is_some(),
        "{}",
        m.created
    );
    assert!(m.submissions.is_empty());
    let json: serde_json::Value =
        serde_json::from_slice(&fs::read(dir.join("sweep.json")).expect("read")).expect("json");
    assert_eq!(
        json["runs"][2],
        serde_json::json!({"index": 2, "name": "lr=0.01,seed=1", "values": {"lr": "0.01", "seed": "1"}})
    );
    assert_eq!(json["max_parallel"], 2);

    let runs = sweep.runs().expect("runs");
    assert_eq!(runs.len(), 3);
    for (i, (r, exp)) in runs.iter().enumerate() {
        assert_eq!(r.index as usize, i);
        assert_eq!(exp.dir(), dir.join(&r.name));
        let m = exp.manifest().expect("run manifest");
        assert_eq!(m.name, r.name);
        assert_eq!(m.plan["command"][3], r.values["lr"].as_str());
        assert_eq!(
            fs::read_to_string(exp.paths().job_script()).expect("run script"),
            format!("#!/bin/bash\necho {}\n", r.name)
        );
        // The snapshot left the experiment root out, though the sweep was built inside it.
        assert_eq!(names(&exp.paths().code()), ["lib", "train.py"]);
    }
    // One copy of the code: every run links the first run's files.
    let ino = |exp: &Experiment| {
        fs::metadata(exp.paths().code().join("lib/net.py"))
            .expect("file")
            .ino()
    };
    assert!(runs.iter().all(|(_, e)| ino(e) == ino(&runs[0].1)));
    assert_eq!(created.snapshots[0].copied, 2);
    assert_eq!(created.snapshots[2].linked, 2);
    // Nothing inside names the temporary folder it was built in.
    for (_, exp) in &runs {
        let text = fs::read_to_string(exp.paths().manifest()).expect("manifest");
        assert!(!text.contains(layout::NEW_EXPERIMENT_PREFIX), "{text}");
    }

    assert!(is_sweep(&dir));
    assert!(!is_sweep(runs[0].1.dir()));
    assert_eq!(Sweep::open(&root, "grid").expect("open").dir(), dir);
    assert_eq!(Sweep::open_dir(&dir).expect("open").name(), "grid");
    assert!(matches!(
        Sweep::open_dir(runs[0].1.dir()),
        Err(Error::NotASweep { .. })
    ));
    assert!(matches!(
        Sweep::open(&root, "nope"),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn an_existing_name_is_refused_untouched() {
    let proj = project();
    let root = tempfile::tempdir().expect("root");
    write(root.path(), "grid/results.csv", "mine\n");
    let err = request(root.path(), proj.path())
        .create()
        .expect_err("grid exists");
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert_eq!(names(root.path()), ["grid"]);
    assert_eq!(names(&root.path().join("grid")), ["results.csv"]);
    assert_eq!(
        fs::read_to_string(root.path().join("grid/results.csv")).expect("read"),
        "mine\n"
    );
}

#[test]
fn an_error_in_any_run_leaves_nothing_behind() {
    let proj = project();
    let root = tempfile::tempdir().expect("root");
    let mut req = request(root.path(), proj.path());
    // The last run's second file of the same name fails after two whole runs were made.
    let script = req.runs[2].files[0].clone();
    req.runs[2].files.push(script);
    let err = req.create().expect_err("duplicate file");
    assert!(err.to_string().contains("job.sbatch"), "{err}");
    assert!(names(root.path()).is_empty(), "{:?}", names(root.path()));

    // Two runs of one name, and a run named like the sweep's own files: refused first.
    let mut req = request(root.path(), proj.path());
    req.runs[1].name = req.runs[0].name.clone();
    assert!(matches!(req.create(), Err(Error::BadSweep { .. })));
    let mut req = request(root.path(), proj.path());
    req.runs[1].name = "sweep.json".into();
    assert!(matches!(req.create(), Err(Error::BadSweep { .. })));
    let mut req = request(root.path(), proj.path());
    req.runs.clear();
    assert!(matches!(req.create(), Err(Error::BadSweep { .. })));
    assert!(names(root.path()).is_empty(), "{:?}", names(root.path()));
}

#[test]
fn submissions_are_numbered_and_kept() {
    let proj = project();
    let root = tempfile::tempdir().expect("root");
    let sweep = request(root.path(), proj.path())
        .create()
        .expect("create")
        .sweep;
    assert_eq!(
        sweep.record_submission("1234", &[0, 1, 2]).expect("first"),
        1
    );
    assert_eq!(
        sweep.record_submission("1240", &[2]).expect("second"),
        2,
        "numbers count up"
    );
    let m = Sweep::open_dir(sweep.dir())
        .expect("open")
        .manifest()
        .expect("read");
    assert_eq!(
        m.submissions,
        [
            SweepSubmission {
                number: 1,
                job_id: "1234".into(),
                tasks: vec![0, 1, 2],
                arrays: Vec::new(),
            },
            SweepSubmission {
                number: 2,
                job_id: "1240".into(),
                tasks: vec![2],
                arrays: Vec::new(),
            }
        ]
    );
    assert_eq!(
        m.submissions[1].arrays(),
        [array("1240", "job.sbatch", &[2])],
        "one array of job.sbatch is written as before there could be several"
    );
    assert!(sweep.record_submission("12 34", &[0]).is_err());
    assert_eq!(sweep.manifest().expect("read").submissions.len(), 2);
}

fn array(job_id: &str, script: &str, tasks: &[u32]) -> SweepArray {
    SweepArray {
        job_id: job_id.into(),
        script: script.into(),
        tasks: tasks.to_vec(),
    }
}

#[test]
fn a_submission_of_two_shapes_records_both_arrays() {
    let proj = project();
    let root = tempfile::tempdir().expect("root");
    let mut req = request(root.path(), proj.path());
    req.array_scripts = vec![
        ("job-1.sbatch".into(), b"#!/bin/bash\n".to_vec()),
        ("job-2.sbatch".into(), b"#!/bin/bash\n".to_vec()),
    ];
    let sweep = req.create().expect("create").sweep;
    assert!(sweep.paths().array_script(1, 2).is_file());
    assert!(sweep.paths().array_script(2, 2).is_file());
    assert!(!sweep.paths().job_script().exists());
    let arrays = [
        array("51", "job-1.sbatch", &[0, 2]),
        array("52", "job-2.sbatch", &[1]),
    ];
    assert_eq!(sweep.record_arrays(&arrays).expect("record"), 1);
    let m = sweep.manifest().expect("read");
    let s = &m.submissions[0];
    assert_eq!(
        (s.job_id.as_str(), s.tasks.as_slice()),
        ("51", &[0, 2, 1][..])
    );
    assert_eq!(s.arrays(), arrays);
    assert!(sweep.record_arrays(&[]).is_err(), "no array");
    assert!(
        sweep
            .record_arrays(&[array("5 3", "job-1.sbatch", &[0])])
            .is_err(),
        "a bad id"
    );
    let mut bad = request(root.path(), proj.path());
    bad.name = "other".into();
    bad.array_scripts = vec![("run.sh".into(), Vec::new())];
    assert!(bad.create().is_err(), "no array script's name");
}

/// A sweep.json written when a submission had one array (no `arrays`) still reads: its
/// array is `job_id` running `tasks` from `job.sbatch`; the format stays 1.
#[test]
fn a_sweep_json_of_one_array_per_submission_still_reads() {
    let text = r#"{"format": 1, "name": "grid", "keys": ["lr"],
        "runs": [{"index": 0, "name": "lr=1", "values": {"lr": "1"}}],
        "max_parallel": null, "created": "2026-12-03T04:40:12.123Z", "herd_version": "0.1.0",
        "submissions": [{"number": 1, "job_id": "51", "tasks": [0, 1]}]}"#;
    let m: SweepManifest = serde_json::from_str(text).expect("reads");
    assert_eq!(
        m.submissions[0].arrays(),
        [array("51", "job.sbatch", &[0, 1])]
    );
    assert_eq!(crate::sweep::SWEEP_FORMAT, 1);
}

#[test]
fn listings_tell_sweeps_from_experiments() {
    let proj = project();
    let root = tempfile::tempdir().expect("root");
    request(root.path(), proj.path()).create().expect("sweep");
    let single = NewExperiment::new(
        root.path(),
        "single",
        proj.path(),
        serde_json::json!({}),
        Invocation {
            herd_version: "9.9.9".into(),
            argv: Vec::new(),
        },
    )
    .create()
    .expect("experiment");
    let sweeps = list(root.path()).expect("sweeps");
    assert_eq!(sweeps.iter().map(Sweep::name).collect::<Vec<_>>(), ["grid"]);
    // The experiments' listing passes over the sweep folder (it has no manifest.json).
    let exps = crate::progress::list(root.path()).expect("experiments");
    assert_eq!(exps, [single.experiment]);
    assert!(list(&root.path().join("missing")).expect("none").is_empty());
}
