//! srun launch mode (docs/design.md §2): one SLURM task per GPU, each running `herd exec`,
//! which maps the task's SLURM variables to the rank variables and becomes the worker.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use herd_testbed::{rank_lines, repo_root, run_cmd, shell_join, Bed};
use serde_json::Value;

use crate::support::{local_herd_run, train_command, Job};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

/// The `MASTER_PORT` the probes are given and must report back (nothing binds it).
fn port() -> u16 {
    20_000 + (std::process::id() % 20_000) as u16
}

/// `srun -N3 --ntasks-per-node=2 --gres=gpu:G herd exec EXTRA… -- probe.py`: every task's
/// probe, by rank, after checking its rank, local rank, world size, port and node, that
/// every task got one reachable master address, and that each found the newest complete
/// checkpoint of `HERD_CHECKPOINT_DIR` (not the newer one still being written) as
/// `HERD_RESUME_FROM`.
fn probe_tasks(bed: &Bed, name: &str, gpus: u32, extra: &[&str]) -> Vec<Value> {
    let dir = bed.scratch(name).expect("scratch");
    let ckpts = dir.join("checkpoints");
    std::fs::create_dir(&ckpts).expect("checkpoints");
    std::fs::write(ckpts.join("step-2.pt"), "2").expect("checkpoint");
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(ckpts.join(".step-3.pt.tmp-1"), "3").expect("unfinished checkpoint");
    let probe = repo_root().join("crates/herd/tests/e2e/workers/probe.py");
    run_cmd(
        Command::new("srun")
            .args([
                "--nodes=3",
                "--ntasks-per-node=2",
                &format!("--gres=gpu:{gpus}"),
                "--kill-on-bad-exit=1",
            ])
            .args([HERD, "exec"])
            .args(extra)
            .arg("--")
            .arg(bed.python())
            .arg(&probe)
            .arg(&dir)
            .env("MASTER_PORT", port().to_string())
            .env("HERD_CHECKPOINT_DIR", &ckpts)
            .current_dir(&dir),
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut probes = Vec::new();
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
        assert_eq!(env["MASTER_PORT"], port().to_string());
        assert_eq!(env["HERD_CHECKPOINT_DIR"], ckpts.display().to_string());
        assert_eq!(
            env["HERD_RESUME_FROM"],
            ckpts.join("step-2.pt").display().to_string(),
            "{v:#}"
        );
        assert_eq!(v["host"], bed.nodes()[(rank / 2) as usize].as_str());
        addrs.insert(env["MASTER_ADDR"].as_str().unwrap_or_default().to_owned());
        probes.push(v);
    }
    assert_eq!(addrs.len(), 1, "one master address: {addrs:?}");
    assert!(
        !addrs.contains("127.0.0.1"),
        "other nodes must reach the master"
    );
    probes
}

/// Every task of `srun -N3 --ntasks-per-node=2 --gres=gpu:2 herd exec` gets its own rank,
/// local rank and the master's reachable address, and keeps all of the node's GPUs, as srun
/// gives them, so `cuda:LOCAL_RANK` is a device it sees.
#[test]
fn herd_exec_gives_every_task_its_rank_and_all_gpus() {
    let bed = Bed::require();
    for (rank, v) in probe_tasks(&bed, "srun_mode_probe", 2, &[])
        .iter()
        .enumerate()
    {
        let env = &v["env"];
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], "0,1", "rank {rank}: {v:#}");
        let local: usize = env["LOCAL_RANK"]
            .as_str()
            .unwrap_or("")
            .parse()
            .expect("LOCAL_RANK");
        assert!(local < 2, "cuda:LOCAL_RANK is a device it sees: {v:#}");
    }
}

/// `herd exec --gpu-bind per-rank` under `--gres=gpu:4`: each task sees exactly its local
/// rank's share (0,1 or 2,3).
#[test]
fn herd_exec_per_rank_gpu_binding_gives_each_task_its_share() {
    let bed = Bed::require();
    let probes = probe_tasks(&bed, "srun_mode_per_rank", 4, &["--gpu-bind", "per-rank"]);
    for (rank, v) in probes.iter().enumerate() {
        let want = if rank % 2 == 0 { "0,1" } else { "2,3" };
        assert_eq!(v["env"]["CUDA_VISIBLE_DEVICES"], want, "rank {rank}: {v:#}");
    }
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
        // The batch script runs on the first node, the master: a port the OS says is free
        // there, as torchrun's standalone mode takes one.
        &format!(
            "export MASTER_PORT=$({} -c 'import socket; s = socket.socket(); s.bind((\"\", 0)); print(s.getsockname()[1])')\n\
             srun --kill-on-bad-exit=1 --label {}",
            shell_join(&[bed.python().display().to_string()]),
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
