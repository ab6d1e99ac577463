//! Nodes with two networks, as GPU nodes have them. On the bed every node has a `docker0`
//! bridge first in its interface list that reaches no other node, and Debian's stock
//! `127.0.1.1 NAME` line for its own name (docs/testbed.md). A job launched the usual bare
//! way (`srun` + `torchrun`, torchrun's own docs) cannot even initialise there: gloo binds
//! to the address the node's name resolves to, loopback, and its peers cannot connect. The
//! same job under `herd submit` trains to the right checksum (the bare job's once the
//! interface is named), in all three launch modes: herd picks each node's interface on the
//! route to the master and makes `MASTER_ADDR` node 0's address on the shared network. An
//! interface the user names that a node lacks fails that node's preflight, naming it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use herd_testbed::{rank_lines, shell_join, Bed, BED_IFNAME};
use serde_json::Value;

use crate::submit::{checksum, project};
use crate::support::{job_id, submit, wait_ok, worker, Job};

/// examples/train_ddp.py for 2 nodes × 1 worker, `--steps 5`, launched bare: torchrun on
/// each node through srun, the c10d rendezvous at the first node's name (the pattern of
/// torchrun's and SLURM sites' docs). `timeout` ends a hang.
fn bare_torchrun(bed: &Bed, dir: &Path, name: &str, before: &str) -> Job {
    let train = dir.join("train_ddp.py");
    std::fs::copy(
        herd_testbed::repo_root().join("examples/train_ddp.py"),
        &train,
    )
    .expect("copy the example");
    let torchrun = shell_join(&[
        "timeout".to_owned(),
        "60".to_owned(),
        bed.python().display().to_string(),
        "-m".to_owned(),
        "torch.distributed.run".to_owned(),
        "--nnodes=2".to_owned(),
        "--nproc_per_node=1".to_owned(),
        "--rdzv_backend=c10d".to_owned(),
        "--rdzv_id=bare".to_owned(),
    ]);
    let body = format!(
        "{before}MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n\
         srun --kill-on-bad-exit=1 {torchrun} --rdzv_endpoint=\"$MASTER_ADDR:29531\" {} --steps 5\n",
        shell_join(&[train.display().to_string()])
    );
    Job::submit(
        bed,
        dir,
        name,
        &["--nodes=2", "--ntasks-per-node=1", "--time=5"],
        &body,
    )
}

#[test]
fn a_bare_torchrun_job_fails_at_init_where_herd_submit_trains() {
    let bed = Bed::require();
    let dir = bed.scratch("two_networks_bare").expect("scratch");

    // Bare: gloo on node 0 binds to 127.0.1.1; the job hangs or fails in
    // init_process_group and never trains a step.
    let bare = bare_torchrun(&bed, &dir, "bare", "");
    let info = bed
        .wait(bare.id, Duration::from_secs(240))
        .expect("the bare job ends");
    let out = bare.output();
    assert!(
        !info.succeeded() && rank_lines(&out, "done").is_empty(),
        "the bare job should not train on two networks (it ended {} {}):\n{out}",
        info.state,
        info.exit_code
    );
    // The cause, and nothing else: the same job with the interface named trains.
    let named = bare_torchrun(
        &bed,
        &dir,
        "named",
        &format!("export GLOO_SOCKET_IFNAME={BED_IFNAME}\n"),
    );
    let right = checksum(&named.wait_success(&bed, Duration::from_secs(240)), 2);

    // herd submit, in each launch mode: the same job trains to the same checksum.
    let (project, exps) = project(&bed, "two_networks_herd");
    let exp_root = exps.display().to_string();
    for mode in ["agent", "srun", "torchrun"] {
        let name = format!("ddp-{mode}");
        let job = job_id(&submit(
            &bed,
            &project,
            &[
                "-J",
                &name,
                "--mode",
                mode,
                "--nodes",
                "2",
                "--gpus-per-node",
                "1",
                "--exp-root",
                &exp_root,
                "--",
                "python",
                "train_ddp.py",
                "--steps",
                "5",
            ],
        ));
        let out = wait_ok(&bed, job, &exps.join(&name));
        assert_eq!(
            checksum(&out, 2),
            right,
            "{mode} mode: herd's job and the bare job with the interface named"
        );
    }
}

/// Each agent gives its workers the interface of its route to the master, and `MASTER_ADDR`
/// node 0's address on the shared network (never the loopback its name has there).
#[test]
fn every_worker_uses_the_shared_network_and_a_missing_interface_fails_the_preflight() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "two_networks_env");
    let exp_root = exps.display().to_string();
    let out_dir = exps.parent().expect("scratch").join("env");
    std::fs::create_dir_all(&out_dir).expect("out");
    let out_arg = out_dir.display().to_string();
    let dump = worker("env_dump.py");
    let job = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "env",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--exp-root",
            &exp_root,
            "--",
            "python",
            &dump,
            &out_arg,
        ],
    ));
    wait_ok(&bed, job, &exps.join("env"));
    let workers: BTreeMap<u32, Value> = (0..4)
        .map(|rank| {
            let text = std::fs::read_to_string(out_dir.join(format!("worker-{rank}.json")))
                .unwrap_or_else(|e| panic!("worker {rank}: {e}"));
            (rank, serde_json::from_str(&text).expect("json"))
        })
        .collect();
    let node0 = herd_testbed::node_addr(&bed.nodes()[0]);
    for (rank, w) in &workers {
        let env = &w["env"];
        assert_eq!(env["GLOO_SOCKET_IFNAME"], BED_IFNAME, "rank {rank}: {w}");
        assert_eq!(env["NCCL_SOCKET_IFNAME"], BED_IFNAME, "rank {rank}: {w}");
        assert_eq!(
            env["MASTER_ADDR"].as_str(),
            Some(node0.as_str()),
            "rank {rank}"
        );
    }

    // A name the user gives is kept, and checked on every node before any worker starts:
    // with `ib0` on the first node only, the second is blamed, naming what it has.
    std::fs::remove_dir_all(&out_dir).expect("clean");
    std::fs::create_dir_all(&out_dir).expect("out");
    let ib = ExtraInterface::on(&bed.nodes()[0], "ib0");
    let log_dir = out_dir.join("logs").display().to_string();
    let mut srun = std::process::Command::new("srun");
    srun.args(["--nodes=3", "--ntasks-per-node=1"])
        .arg(env!("CARGO_BIN_EXE_herd"))
        .args([
            "launch",
            "--nproc-per-node",
            "1",
            "--log-dir",
            &log_dir,
            "--",
        ])
        .args([bed.python().display().to_string(), dump, out_arg])
        .current_dir(&out_dir)
        .env("GLOO_SOCKET_IFNAME", "ib0");
    let result = herd_testbed::run_cmd(&mut srun, Duration::from_secs(240));
    drop(ib);
    let said = match result {
        Ok(out) => panic!(
            "the job should fail its preflight, but it ran:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(herd_testbed::BedError::Failed { stderr, .. }) => stderr,
        Err(e) => panic!("{e}"),
    };
    let second = &bed.nodes()[1];
    assert!(
        said.contains(&format!("{second}: preflight check `network` failed: GLOO_SOCKET_IFNAME=ib0 names `ib0`, which this node does not have (it has lo, docker0, vethdk1, vethdk0, eth0)")),
        "names the node, the variable, the interface and what the node has:\n{said}"
    );
    assert!(
        said.contains(&format!("blaming node 1 ({second})")),
        "blames that node:\n{said}"
    );
    assert!(
        !std::fs::read_dir(&out_dir)
            .expect("out")
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("worker-")),
        "no worker started:\n{said}"
    );
}

/// An interface on one bed node only (a veth pair inside its namespace), for as long as
/// this lives.
struct ExtraInterface {
    ns: String,
    name: &'static str,
}

impl ExtraInterface {
    fn on(node: &str, name: &'static str) -> ExtraInterface {
        let ns = format!("herd-{node}");
        let peer = format!("{name}p");
        let ip = |args: &[&str]| {
            let ok = std::process::Command::new("ip")
                .args(["-n", &ns])
                .args(args)
                .status()
                .expect("ip runs");
            assert!(ok.success(), "ip -n {ns} {args:?}");
        };
        ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", name, "up"]);
        ExtraInterface { ns, name }
    }
}

impl Drop for ExtraInterface {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["-n", &self.ns, "link", "del", self.name])
            .status();
    }
}
