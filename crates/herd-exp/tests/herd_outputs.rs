//! What herd wrote into a project is never snapshotted: other experiment roots (their
//! experiments and sweeps), logs folders of `herd run`, `herd report`'s page and plots; a
//! user's own pages, images and `manifest.json`/`sweep.json` are copied as any file.

mod common;

use std::fs;
use std::path::Path;

use common::{listing, request, settle, write};
use herd_exp::outputs::{HTML_MARK, SVG_MARK};
use herd_exp::sweep::{NewRun, NewSweep};
use herd_exp::{ExtraFile, HerdOutput, Invocation, SnapshotOptions};
use tempfile::TempDir;

/// A PNG's start as `herd report` writes one: its signature, its header and the `tEXt`
/// chunk naming herd (what follows does not matter to the snapshot).
fn herd_png() -> Vec<u8> {
    let mut png =
        b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x04\xb0\0\0\x02\x58\x08\x02\0\0\0\0\0\0\0".to_vec();
    png.extend_from_slice(b"\0\0\0\x14tEXtSoftware\0herd report\0\0\0\0");
    png.extend_from_slice(b"\0\0\0\0IDAT pixels");
    png
}

/// A user's own PNG: the same without the chunk.
fn user_png() -> Vec<u8> {
    b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x10\0\0\0\x10\x08\x02\0\0\0\0\0\0\0\0\0\0\0IDAT"
        .to_vec()
}

fn write_bytes(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    fs::write(path, bytes).expect("write");
}

/// A sweep of one run in `exp_root`, of the project `project`.
fn sweep(exp_root: &Path, project: &Path) {
    NewSweep {
        exp_root: exp_root.to_owned(),
        name: "grid".into(),
        keys: vec!["lr".into()],
        runs: vec![NewRun {
            name: "lr=0.1".into(),
            values: vec![("lr".into(), "0.1".into())],
            plan: serde_json::json!({}),
            files: vec![ExtraFile {
                name: herd_exp::ExperimentDir::job_script_name().into(),
                contents: b"#!/bin/bash\n".to_vec(),
                executable: true,
            }],
        }],
        max_parallel: None,
        project_root: project.to_owned(),
        invocation: Invocation {
            herd_version: "9.9.9-test".into(),
            argv: vec!["herd".into(), "submit".into()],
        },
        snapshot: SnapshotOptions::default(),
        array_scripts: vec![("job.sbatch".into(), b"#!/bin/bash\n".to_vec())],
    }
    .create()
    .expect("sweep");
}

/// The project of a user who followed the README's tour and more: experiments under the
/// default `herd-exp/`, a sweep and an experiment under `old-exps/`, an experiment beside
/// their own results, `herd run`'s logs, a report page and plots; and their own pages,
/// images, a web app's `manifest.json` and a `sweep.json` of another tool.
fn project() -> TempDir {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "print('train')\n");
    // The user's own files that look like herd's by name only.
    write(
        p,
        "docs/index.html",
        "<!DOCTYPE html>\n<html><head><meta name=\"generator\" content=\"Sphinx\"></head></html>\n",
    );
    write(
        p,
        "docs/diagram.svg",
        "<!-- generator: inkscape -->\n<svg></svg>\n",
    );
    write_bytes(p, "docs/logo.png", &user_png());
    write(
        p,
        "webapp/manifest.json",
        "{\n  \"name\": \"app\",\n  \"manifest_version\": 3\n}\n",
    );
    write(
        p,
        "configs/sweep.json",
        "{\"method\": \"grid\", \"parameters\": {\"lr\": {\"values\": [0.1]}}}\n",
    );
    write(p, "results/summary.csv", "lr,loss\n0.1,1.0\n");
    // What herd wrote.
    request(&p.join("herd-exp"), "first", p)
        .create()
        .expect("an experiment under herd-exp/");
    sweep(&p.join("old-exps"), p);
    request(&p.join("old-exps"), "single", p)
        .create()
        .expect("an experiment under old-exps/");
    request(&p.join("results"), "beside", p)
        .create()
        .expect("an experiment beside the user's results");
    write(p, "herd-logs/run-1a2b3c4d/attempt-0/rank-0.times", "");
    write(
        p,
        "herd-logs/run-1a2b3c4d/attempt-0/rank-0.err",
        "Traceback\n",
    );
    write(p, "herd-logs/run-1a2b3c4d/failure.json", "{}\n");
    write(p, "report.html", &format!("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n{HTML_MARK}\n<title>herd report: first</title>\n"));
    write(
        p,
        "plots/first.loss.svg",
        &format!("{SVG_MARK}\n<svg width=\"1200\"></svg>\n"),
    );
    write_bytes(p, "plots/first.loss.png", &herd_png());
    write(
        p,
        "figures/first.throughput.svg",
        &format!("{SVG_MARK}\n<svg></svg>\n"),
    );
    write(p, "figures/mine.svg", "<svg></svg>\n");
    settle(p);
    proj
}

fn shown(outputs: &[HerdOutput]) -> Vec<String> {
    outputs.iter().map(ToString::to_string).collect()
}

#[test]
fn what_herd_wrote_is_left_out_and_listed_and_the_users_own_files_are_copied() {
    let proj = project();
    let p = proj.path();
    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "next", p).create().expect("create");
    assert_eq!(
        listing(&created.experiment.paths().code()),
        [
            "configs",
            "configs/sweep.json",
            "docs",
            "docs/diagram.svg",
            "docs/index.html",
            "docs/logo.png",
            "figures",
            "figures/mine.svg",
            "results",
            "results/summary.csv",
            "train.py",
            "webapp",
            "webapp/manifest.json",
        ]
    );
    let snap = &created.snapshot;
    assert_eq!(
        shown(&snap.herd_outputs),
        [
            "figures/first.throughput.svg",
            "herd-exp/",
            "herd-logs/",
            "old-exps/",
            "plots/",
            "report.html",
            "results/beside/",
        ],
        "folders emptied by leaving herd's outputs out go too, each listed once"
    );
    assert_eq!(snap.files, 8);
    assert_eq!(snap.dirs, 5, "configs, docs, figures, results, webapp");
    let manifest = created.experiment.manifest().expect("manifest");
    let recorded: Vec<String> = manifest
        .snapshot
        .herd_outputs
        .iter()
        .map(|t| t.to_string_lossy())
        .collect();
    assert_eq!(recorded, shown(&snap.herd_outputs));
}

#[test]
fn the_experiment_root_in_use_is_left_out_without_being_listed() {
    let proj = project();
    let p = proj.path();
    let created = request(&p.join("herd-exp"), "second", p)
        .create()
        .expect("create");
    let code = created.experiment.paths().code();
    assert!(!code.join("herd-exp").exists());
    assert!(code.join("train.py").is_file());
    assert!(
        !shown(&created.snapshot.herd_outputs).contains(&"herd-exp/".to_owned()),
        "{:?}",
        created.snapshot.herd_outputs
    );
    assert!(shown(&created.snapshot.herd_outputs).contains(&"old-exps/".to_owned()));
}

#[test]
fn the_project_root_is_snapshotted_even_when_it_looks_like_herds() {
    // A project that is itself an experiment folder, a sweep folder and a logs folder.
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    let exp = TempDir::new().expect("tempdir");
    write(p, "train.py", "x\n");
    request(exp.path(), "made", p)
        .create()
        .expect("an experiment");
    let made = exp.path().join("made");
    fs::copy(made.join("manifest.json"), p.join("manifest.json")).expect("copy manifest");
    write(p, "attempt-0/rank-0.times", "");
    let created = request(&exp.path().join("other"), "again", p)
        .create()
        .expect("create");
    assert_eq!(
        listing(&created.experiment.paths().code()),
        [
            "attempt-0",
            "attempt-0/rank-0.times",
            "manifest.json",
            "train.py"
        ]
    );
    assert!(created.snapshot.herd_outputs.is_empty());
}

#[test]
fn a_folder_of_herds_outputs_and_the_users_files_keeps_the_users() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "x\n");
    write(p, "plots/mine.png", "not even a png\n");
    write_bytes(p, "plots/run.loss.png", &herd_png());
    let exp = TempDir::new().expect("tempdir");
    let created = request(exp.path(), "run", p).create().expect("create");
    assert_eq!(
        listing(&created.experiment.paths().code()),
        ["plots", "plots/mine.png", "train.py"]
    );
    assert_eq!(
        shown(&created.snapshot.herd_outputs),
        ["plots/run.loss.png"]
    );
}

#[test]
fn a_snapshot_says_its_biggest_entries_and_the_previous_snapshots_size() {
    let proj = TempDir::new().expect("tempdir");
    let p = proj.path();
    write(p, "train.py", "x\n");
    write(p, "data/a.bin", &"a".repeat(3000));
    write(p, "data/sub/b.bin", &"b".repeat(2000));
    write(p, "ckpt.pt", &"c".repeat(1000));
    settle(p);
    let exp = TempDir::new().expect("tempdir");
    let first = request(exp.path(), "one", p).create().expect("create");
    assert_eq!(first.snapshot.previous, None);
    let biggest: Vec<(String, bool, u64)> = first
        .snapshot
        .biggest
        .iter()
        .map(|e| (e.path.display().to_string(), e.folder, e.bytes))
        .collect();
    assert_eq!(
        biggest,
        [
            ("data".into(), true, 5000),
            ("ckpt.pt".into(), false, 1000),
            ("train.py".into(), false, 2)
        ]
    );
    write(p, "more.txt", "more\n");
    let second = request(exp.path(), "two", p).create().expect("create");
    let previous = second.snapshot.previous.as_ref().expect("previous");
    assert_eq!(
        (previous.name.as_str(), previous.files, previous.bytes),
        ("one", first.snapshot.files, first.snapshot.bytes)
    );
    assert_eq!(second.snapshot.files, first.snapshot.files + 1);
}
