//! Creates one experiment as `herd submit` does: its folder with the code snapshot.
//! Used by `bench/snapshot`.
//!
//! ```text
//! snapshot PROJECT EXP_ROOT NAME
//! ```
//!
//! Prints one line of JSON on stdout: what was done and how long it took inside the
//! process. `HERD_SNAPSHOT_THREADS=N` sets [`herd_exp::SnapshotOptions::threads`].

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Instant;

use herd_exp::{Invocation, NewExperiment};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let [project, exp_root, name] = args.as_slice() else {
        eprintln!("usage: snapshot PROJECT EXP_ROOT NAME");
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
