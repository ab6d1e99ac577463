//! Creates one experiment as `herd submit` does, or makes a queued one's code folder as the
//! batch script does at job start. Used by `bench/snapshot`.
//!
//! ```text
//! snapshot [--at-once] PROJECT EXP_ROOT NAME   # capture; --at-once: make code/ too
//! snapshot --materialize EXP_DIR               # make code/ (herd materialize)
//! ```
//!
//! Prints one line of JSON on stdout: what was done and how long it took inside the
//! process. `HERD_SNAPSHOT_THREADS=N` sets [`herd_exp::SnapshotOptions::threads`].

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use herd_exp::{Experiment, Invocation, NewExperiment};

const USAGE: &str =
    "usage: snapshot [--at-once] PROJECT EXP_ROOT NAME | snapshot --materialize EXP_DIR";

fn main() -> ExitCode {
    let mut args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "--materialize") {
        let [_, dir] = args.as_slice() else {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        };
        return materialize(Path::new(dir));
    }
    let at_once = args.first().is_some_and(|a| a == "--at-once");
    if at_once {
        args.remove(0);
    }
    let [project, exp_root, name] = args.as_slice() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let Some(name) = name.to_str() else {
        eprintln!("snapshot: the job name is not UTF-8");
        return ExitCode::from(2);
    };
    let start = Instant::now();
    let mut new = NewExperiment::new(
        exp_root,
        name,
        project,
        serde_json::json!({"example": "snapshot"}),
        Invocation::current(env!("CARGO_PKG_VERSION")),
    );
    new.snapshot.materialize = at_once;
    if let Some(n) = std::env::var("HERD_SNAPSHOT_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        new.snapshot.threads = Some(n);
    }
    match new.create() {
        Ok(created) => {
            let r = &created.snapshot;
            println!(
                "{}",
                serde_json::json!({
                    "dir": created.experiment.dir().to_string_lossy(),
                    "files": r.files,
                    "bytes": r.bytes,
                    "copied": r.copied,
                    "linked": r.linked,
                    "symlinks": r.symlinks,
                    "dirs": r.dirs,
                    "skipped": r.skipped.len(),
                    "warnings": r.warnings,
                    "linked_from": r.linked_from,
                    "snapshot_s": r.elapsed.as_secs_f64(),
                    "materialize_s": r.materialized.as_ref().map(|m| m.elapsed.as_secs_f64()),
                    "create_s": start.elapsed().as_secs_f64(),
                })
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("snapshot: {e}");
            ExitCode::FAILURE
        }
    }
}

fn materialize(dir: &Path) -> ExitCode {
    let start = Instant::now();
    let made = Experiment::open_dir(dir).and_then(|exp| exp.materialize());
    match made {
        Ok(Some(r)) => {
            println!(
                "{}",
                serde_json::json!({
                    "files": r.files,
                    "copied": r.copied,
                    "unpacked": r.unpacked,
                    "symlinks": r.symlinks,
                    "dirs": r.dirs,
                    "materialize_s": r.elapsed.as_secs_f64(),
                    "whole_s": start.elapsed().as_secs_f64(),
                })
            );
            ExitCode::SUCCESS
        }
        Ok(None) => {
            eprintln!("snapshot: {}/code exists already", dir.display());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("snapshot: {e}");
            ExitCode::FAILURE
        }
    }
}
