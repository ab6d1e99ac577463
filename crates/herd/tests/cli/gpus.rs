//! GPU sampling under `herd run`, with the bed's stand-in `nvidia-smi` (no GPU here, no
//! cluster needed): where `CUDA_VISIBLE_DEVICES` is unset every GPU the driver lists is
//! sampled, local rank `l` on the `l`-th; where it names GPUs, only those.

use std::path::{Path, PathBuf};
use std::process::Command;

use herd_exp::gpus::{self, Sample};

/// The stand-in and two GPUs' samples in `dir/bin`.
fn standin(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(bin.join("gpus")).expect("bin");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = std::fs::read(root.join("testbed/standins/nvidia-smi")).expect("stand-in");
    std::fs::write(bin.join("nvidia-smi"), script).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        bin.join("nvidia-smi"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    let frame = serde_json::json!([{"utilization.gpu": "88", "memory.used": "1000", "memory.total": "24564"}]);
    let data = serde_json::json!({"gpus": [
        {"index": 0, "uuid": "GPU-a", "pci": "00000000:01:00.0", "frames": frame},
        {"index": 1, "uuid": "GPU-b", "pci": "00000000:02:00.0", "frames": frame},
    ]});
    std::fs::write(bin.join("gpus/default.json"), data.to_string()).expect("samples");
    bin
}

/// `herd run -N 1 --nproc-per-node 2 -- sh -c 'sleep 5'` in `dir` with the stand-in first
/// on PATH and `CUDA_VISIBLE_DEVICES` as `visible` gives it (unset: `None`): node 0's
/// samples.
fn run(dir: &Path, visible: Option<&str>) -> Vec<Sample> {
    let bin = standin(dir);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herd"));
    cmd.args(["run", "-N", "1", "--nproc-per-node", "2", "--log-dir"])
        .arg(dir.join("logs"))
        .args(["--", "sh", "-c", "sleep 5"])
        .env("PATH", path)
        .env_remove("SLURM_JOB_ID")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .current_dir(dir);
    if let Some(v) = visible {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let out = cmd.output().expect("herd run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let attempt = herd_exp::layout::LogsDir::new(dir.join("logs")).attempt(0);
    gpus::read(&attempt.gpus(0)).expect("samples")
}

#[test]
fn herd_run_samples_every_gpu_where_none_is_named_and_only_those_named_otherwise() {
    let dir = tempfile::tempdir().expect("tempdir");
    let all = run(dir.path(), None);
    let of = |s: &[Sample], gpu: u32| -> Vec<Vec<u32>> {
        s.iter()
            .filter(|x| x.gpu == gpu)
            .map(|x| x.ranks.clone())
            .collect()
    };
    assert!(
        of(&all, 0).len() >= 2,
        "samples every 2 s over 5 s: {all:?}"
    );
    assert!(of(&all, 0).iter().all(|r| r == &vec![0]), "{all:?}");
    assert!(of(&all, 1).iter().all(|r| r == &vec![1]), "{all:?}");
    assert_eq!(all[0].util, Some(88.0));

    let dir = tempfile::tempdir().expect("tempdir");
    let named = run(dir.path(), Some("1"));
    assert!(!named.is_empty(), "GPU 1 sampled");
    assert!(
        named.iter().all(|s| s.gpu == 1 && s.ranks == vec![0, 1]),
        "only GPU 1, both ranks' device: {named:?}"
    );
}
