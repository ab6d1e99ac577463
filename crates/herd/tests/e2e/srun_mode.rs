//! srun launch mode (SPEC §2.2): one SLURM task per GPU, each running `herd exec`, which maps
//! the task's SLURM variables to the rank variables and becomes the worker.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use herd_testbed::{rank_lines, repo_root, run_cmd, shell_join, Bed};
use serde_json::Value;

use crate::support::{local_herd_run, train_command, Job};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

fn port() -> u16 {
    20_000 + (std::process::id() % 20_000) as u16
}

/// Every task of `srun -N3 --ntasks-per-node=2 --gres=gpu:2 herd exec` gets its own rank,
/// local rank, one GPU and the master's reachable address.
#[test]
fn herd_exec_gives_every_task_its_rank_and_gpu() {
    let bed = Bed::require();
    let dir = bed.scratch("srun_mode_probe").expect("scratch");
    let probe = repo_root().join("crates/herd/tests/e2e/workers/probe.py");
    run_cmd(
        Command::new("srun")
            .args([
                "--nodes=3",
                "--ntasks-per-node=2",
                "--gres=gpu:2",
                "--kill-on-bad-exit=1",
            ])
            .args([HERD, "exec", "--"])
            .arg(bed.python())
            .arg(&probe)
            .arg(&dir)
            .env("MASTER_PORT", port().to_string())
            .current_dir(&dir),
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut ranks = BTreeSet::new();
    let mut addrs = BTreeSet::new();
    for rank in 0..6u32 {
        let path = dir.join(format!("probe-0-{rank}.json"));
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("probe")).expect("json");
        let env = &v["env"];
        assert_eq!(env["RANK"], rank.to_string(), "{v:#}");
        assert_eq!(env["SLURM_PROCID"], rank.to_string(), "{v:#}");
        assert_eq!(env["LOCAL_RANK"], (rank % 2).to_string(), "{v:#}");
        assert_eq!(env["WORLD_SIZE"], "6", "{v:#}");
        assert_eq!(env["LOCAL_WORLD_SIZE"], "2", "{v:#}");
        assert_eq!(
            env["CUDA_VISIBLE_DEVICES"],
            (rank % 2).to_string(),
            "one GPU per task: {v:#}"
        );
        assert_eq!(env["MASTER_PORT"], port().to_string());
        assert_eq!(v["host"], bed.nodes()[(rank / 2) as usize].as_str());
        ranks.insert(rank);
        addrs.insert(env["MASTER_ADDR"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(ranks.len(), 6);
    assert_eq!(addrs.len(), 1, "one master address: {addrs:?}");
    assert!(
        !addrs.contains("127.0.0.1"),
        "other nodes must reach the master"
    );
}

/// examples/train_ddp.py through `herd exec` (srun mode) ends with the same checksum as
/// `herd run` (agent mode) of the same world size.
#[test]
fn srun_mode_trains_to_the_same_checksum_as_agent_mode() {
    let bed = Bed::require();
    let dir = bed.scratch("srun_mode_train").expect("scratch");
    let train = train_command(&bed, &["--steps", "30", "--log-every", "10"]);
    let mut argv = vec![HERD.to_owned(), "exec".into(), "--".into()];
    argv.extend(train.iter().cloned());
    let job = Job::submit(
        &bed,
        &dir,
        "srun-mode",
        &[
            "--nodes=3",
            "--ntasks-per-node=2",
            "--gres=gpu:2",
            "--time=10",
        ],
        &format!(
            "export MASTER_PORT={}\nsrun --kill-on-bad-exit=1 --label {}",
            port(),
            shell_join(&argv)
        ),
    );
    let output = job.wait_success(&bed, Duration::from_secs(300));
    let sums = |out: &str| -> BTreeSet<String> {
        let done = rank_lines(out, "done");
        assert_eq!(done.len(), 6, "{out}");
        done.values().map(|f| f["checksum"].clone()).collect()
    };
    let srun_sums = sums(&output);
    assert_eq!(srun_sums.len(), 1, "{output}");

    assert_eq!(srun_sums, sums(&local_herd_run(&dir, 3, 2, &train)));
}
