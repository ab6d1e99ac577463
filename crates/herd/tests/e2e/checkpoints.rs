//! Framework checkpoints (issue #26): each framework killed mid-save, then the checkpoint herd
//! gives the next attempt as `HERD_RESUME_FROM` must be the previous complete one, and the
//! framework must resume from it.
//!
//! `workers/ckpt_kill.py` does it for plain `torch.save` (in place), Lightning's
//! `ModelCheckpoint` (an fsspec temporary file moved into place: renamed on one file system,
//! copied across two), HF Transformers' `Trainer` (`checkpoint-N` written in place) and
//! torch.distributed.checkpoint (`.metadata` renamed in last). Each saves at steps 2, 4 and 6
//! and is SIGKILLed inside its real write of step 6; the real `herd run` (on this machine,
//! no SLURM) with `HERD_CHECKPOINT_DIR` starts a worker that reports `HERD_RESUME_FROM`;
//! the framework resumes from it and must start at step 5 with the weights saved at step 4.
//! One Python process imports the frameworks once and forks for each save and resume.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use herd_testbed::Bed;
use serde_json::Value;

use crate::support::worker;

/// What `ckpt_kill.py` wrote for `stage`.
fn record(dir: &std::path::Path, stage: &str) -> Value {
    let path = dir.join(format!("{stage}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("record json")
}

/// The files and folders the killed save left in the checkpoint folder, with their sizes.
fn left(r: &Value) -> BTreeMap<String, u64> {
    r["left"]
        .as_object()
        .expect("left")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().expect("size")))
        .collect()
}

/// The file name of a save's path.
fn name_of(save: &Value) -> String {
    let path = std::path::Path::new(save["path"].as_str().expect("path"));
    path.file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn frameworks_killed_mid_save_resume_from_the_previous_complete_checkpoint() {
    let bed = Bed::require();
    let dir = bed.scratch("checkpoints-killed-mid-save").expect("scratch");
    let started = Instant::now();
    let out = Command::new(bed.python())
        .arg(worker("ckpt_kill.py"))
        .arg(&dir)
        .arg(env!("CARGO_BIN_EXE_herd"))
        .env_remove("HERD_CHECKPOINT_DIR")
        .env_remove("HERD_RESUME_FROM")
        .output()
        .expect("python runs");
    let took = started.elapsed();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "ckpt_kill.py failed:\n{said}");

    for stage in [
        "torch_save",
        "lightning",
        "lightning_cross_fs",
        "hf_trainer",
        "dcp",
    ] {
        let r = record(&dir, stage);
        let ctx = format!("{stage}: {r:#}");
        // The save of step 6 was cut by SIGKILL, after saves at steps 2 and 4.
        assert_eq!(r["saver"], serde_json::json!({"signal": 9}), "{ctx}");
        let saved = r["saved"].as_array().expect("saved");
        let steps: Vec<_> = saved.iter().map(|s| s["step"].as_u64()).collect();
        assert_eq!(steps, [Some(2), Some(4), Some(6)], "{ctx}");
        let (previous, cut) = (&saved[1], &saved[2]);
        let previous_path = previous["path"].as_str().expect("path");
        let (previous_name, cut_name) = (name_of(previous), name_of(cut));
        // What the cut save left behind, under its final name where the framework writes in
        // place (what the name-only rule took for the newest checkpoint).
        let files = left(&r);
        match stage {
            "torch_save" | "lightning_cross_fs" => {
                assert!(files[&cut_name] > 0, "{ctx}");
                assert!(files[&cut_name] < files[&previous_name], "cut short: {ctx}");
            }
            "lightning" => {
                assert!(!files.contains_key(&cut_name), "{ctx}");
                assert_eq!(r["cross_fs"], false, "{ctx}");
                let tmp = r["tmp_left"].as_object().expect("tmp_left");
                assert!(
                    tmp.len() == 1 && tmp.keys().all(|k| k.starts_with("tmp")),
                    "fsspec's temporary file is tmpXXXXXXXX in the temporary folder: {ctx}"
                );
            }
            "hf_trainer" => {
                assert!(
                    files.contains_key(&format!("{cut_name}/model.safetensors")),
                    "{ctx}"
                );
                assert!(
                    files.contains_key(&format!("{cut_name}/optimizer.pt")),
                    "{ctx}"
                );
                assert!(
                    !files.contains_key(&format!("{cut_name}/trainer_state.json")),
                    "{ctx}"
                );
            }
            "dcp" => {
                assert!(
                    files.contains_key(&format!("{cut_name}/__0_0.distcp")),
                    "{ctx}"
                );
                assert!(
                    files.contains_key(&format!("{cut_name}/.metadata.tmp")),
                    "{ctx}"
                );
                assert!(
                    !files.contains_key(&format!("{cut_name}/.metadata")),
                    "{ctx}"
                );
            }
            _ => unreachable!(),
        }
        if stage == "lightning_cross_fs" {
            assert_eq!(
                r["cross_fs"], true,
                "/dev/shm must be another file system: {ctx}"
            );
        }
        // herd names the previous complete checkpoint, and says so.
        assert_eq!(r["herd_exit"], 0, "{ctx}");
        assert_eq!(r["resume_from"], previous_path, "{ctx}");
        assert!(
            r["herd_said"]
                .as_str()
                .expect("herd_said")
                .contains(&format!("attempt 0 resumes from {previous_path}")),
            "{ctx}"
        );
        // The framework resumes from it: at step 5, with the weights of step 4.
        assert_eq!(r["resumed"], serde_json::json!({"exit": 0}), "{ctx}");
        let seen = &r["resumed_seen"];
        assert_eq!(seen["first_step"], 5, "{ctx}");
        let (want, got) = (
            previous["checksum"].as_f64().expect("saved checksum"),
            seen["checksum"].as_f64().expect("loaded checksum"),
        );
        assert!(
            (want - got).abs() < 1e-9,
            "weights {got} != saved {want}: {ctx}"
        );
        eprintln!(
            "{stage}: killed saving {cut_name}; HERD_RESUME_FROM={previous_path}; resumed at step 5 ({} s)",
            r["secs"]
        );
    }
    eprintln!("all frameworks in {took:.1?}");
}
