//! Real training frameworks, unchanged, under herd (issue #11): PyTorch Lightning and HF
//! Accelerate, pinned in the test venv (`testbed/requirements-frameworks.txt`), on 3 nodes × 2
//! workers in agent mode (`herd submit`), srun mode (`herd submit --mode srun`, one
//! `herd exec` per task) and `herd run` on this machine. Each test reads what the framework
//! itself decided (ranks, world size, node rank, the cluster environment it chose) and checks
//! that the replicas end equal.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use herd_testbed::{repo_root, Bed};
use serde_json::Value;

use crate::support::{job_id, local_herd_run, project_with, submit, wait_ok};

const NODES: u32 = 3;
const PER_NODE: u32 = 2;
const WORLD: u32 = NODES * PER_NODE;

const WORKERS: [(&str, &str); 2] = [
    (
        "crates/herd/tests/e2e/workers/lightning_fit.py",
        "lightning_fit.py",
    ),
    (
        "crates/herd/tests/e2e/workers/accelerate_gather.py",
        "accelerate_gather.py",
    ),
];

/// How a test starts its workers.
#[derive(Clone, Copy)]
enum Launch {
    /// `herd submit` (agent mode) on the bed.
    Agent,
    /// `herd submit --mode srun` on the bed.
    Srun,
    /// `herd run` of 3 simulated nodes on this machine, no SLURM.
    Here,
}

/// Run `script OUT ARGS…` on 3 nodes × 2 workers the `launch` way, named `name`; waits for
/// success. The worker writes its records into OUT, the returned folder. Also returns the
/// node of each node rank when the job ran on the bed (`None` here, where every simulated
/// node has this machine's name).
fn run_worker(
    bed: &Bed,
    name: &str,
    launch: Launch,
    script: &str,
    args: &[&str],
) -> (PathBuf, Option<Vec<String>>) {
    let dir = bed.scratch(name).expect("scratch");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).expect("out dir");
    let out_dir = out.display().to_string();
    let mode = match launch {
        Launch::Agent => "agent",
        Launch::Srun => "srun",
        Launch::Here => {
            let mut cmd = vec![
                bed.python().display().to_string(),
                repo_root()
                    .join("crates/herd/tests/e2e/workers")
                    .join(script)
                    .display()
                    .to_string(),
                out_dir,
            ];
            cmd.extend(args.iter().map(|a| a.to_string()));
            local_herd_run(&dir, NODES, PER_NODE, &cmd);
            return (out, None);
        }
    };
    let (project, exps) = project_with(bed, &format!("{name}/job"), &WORKERS);
    let exp_root = exps.display().to_string();
    let (nodes, per_node) = (NODES.to_string(), PER_NODE.to_string());
    let mut argv = vec![
        "-J",
        name,
        "--mode",
        mode,
        "--nodes",
        &nodes,
        "--gpus-per-node",
        &per_node,
        "--partition",
        "gpu",
        "--time",
        "10",
        "--exp-root",
        &exp_root,
        "--",
        "python",
        script,
        &out_dir,
    ];
    argv.extend_from_slice(args);
    let job = job_id(&submit(bed, &project, &argv));
    wait_ok(bed, job, &exps.join(name));
    assert!(bed.nodes().len() >= NODES as usize, "{:?}", bed.nodes());
    (out, Some(bed.nodes()[..NODES as usize].to_vec()))
}

/// Every `PREFIX-<rank>.json` record in `dir`, by the rank in its name.
fn records(dir: &Path, prefix: &str) -> BTreeMap<u32, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("records").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rank) = name
            .strip_prefix(&format!("{prefix}-"))
            .and_then(|r| r.strip_suffix(".json"))
        else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).expect("read record");
        out.insert(
            rank.parse().expect("rank in name"),
            serde_json::from_str(&text).expect("record json"),
        );
    }
    assert_eq!(
        out.keys().copied().collect::<Vec<_>>(),
        (0..WORLD).collect::<Vec<_>>(),
        "one record per rank in {}",
        dir.display()
    );
    out
}

/// The one value `key` has in every record (the replicas agree on it).
fn agreed(recs: &BTreeMap<u32, Value>, key: &str) -> Value {
    let values: BTreeSet<String> = recs.values().map(|r| r[key].to_string()).collect();
    assert_eq!(values.len(), 1, "ranks disagree on {key}: {recs:#?}");
    recs[&0][key].clone()
}

/// `hosts`: the node of each node rank, when the job ran on the bed (`None` locally, where
/// every simulated node has this machine's name).
fn check_lightning(
    recs: &BTreeMap<u32, Value>,
    environment: &str,
    hosts: Option<&[String]>,
) -> Value {
    for (&rank, r) in recs {
        assert_eq!(r["global_rank"], rank, "{r:#}");
        assert_eq!(r["world_size"], WORLD, "Lightning's world size: {r:#}");
        assert_eq!(r["process_group_size"], WORLD, "the process group: {r:#}");
        assert_eq!(r["local_rank"], rank % PER_NODE, "{r:#}");
        assert_eq!(r["node_rank"], rank / PER_NODE, "{r:#}");
        assert_eq!(r["cluster_environment"], environment, "{r:#}");
        if let Some(hosts) = hosts {
            assert_eq!(
                r["host"],
                hosts[(rank / PER_NODE) as usize].as_str(),
                "{r:#}"
            );
        }
    }
    // 96 samples split over 6 ranks, batches of 8, 2 epochs.
    assert_eq!(agreed(recs, "global_step"), 4);
    agreed(recs, "checksum")
}

fn check_accelerate(recs: &BTreeMap<u32, Value>, hosts: Option<&[String]>) -> Value {
    let all: Vec<u32> = (0..WORLD).collect();
    for (&rank, r) in recs {
        assert_eq!(r["process_index"], rank, "{r:#}");
        assert_eq!(r["num_processes"], WORLD, "{r:#}");
        assert_eq!(r["local_process_index"], rank % PER_NODE, "{r:#}");
        assert_eq!(r["distributed_type"], "MULTI_CPU", "{r:#}");
        assert_eq!(r["backend"], "gloo", "{r:#}");
        assert_eq!(r["gathered"], serde_json::json!(all), "the gather: {r:#}");
        if let Some(hosts) = hosts {
            assert_eq!(
                r["host"],
                hosts[(rank / PER_NODE) as usize].as_str(),
                "{r:#}"
            );
        }
    }
    // 96 samples sharded over 6 processes, batches of 8.
    assert_eq!(agreed(recs, "steps"), 2);
    agreed(recs, "checksum")
}

const LIGHTNING: [&str; 4] = ["--nodes", "3", "--devices", "2"];

/// Lightning in agent mode picks its TorchElasticEnvironment (torchrun's variables are
/// there) and gets every rank right; made to read SLURM's variables instead
/// (`plugins=[SLURMEnvironment()]`), it gets the same ranks and result, because the SLURM
/// task variables each worker sees describe that worker.
#[test]
fn lightning_ddp_in_agent_mode_with_its_own_and_slurms_view() {
    let bed = Bed::require();
    let (out, hosts) = run_worker(
        &bed,
        "lightning-agent",
        Launch::Agent,
        "lightning_fit.py",
        &LIGHTNING,
    );
    let detected = check_lightning(
        &records(&out, "lightning-auto"),
        "TorchElasticEnvironment",
        hosts.as_deref(),
    );
    let slurm_args = [&LIGHTNING[..], &["--cluster", "slurm"]].concat();
    let (out, hosts) = run_worker(
        &bed,
        "lightning-agent-slurm",
        Launch::Agent,
        "lightning_fit.py",
        &slurm_args,
    );
    let slurm = check_lightning(
        &records(&out, "lightning-slurm"),
        "SLURMEnvironment",
        hosts.as_deref(),
    );
    assert_eq!(
        detected, slurm,
        "the same fit, whichever way Lightning reads the job"
    );
}

/// Lightning in srun mode (one SLURM task per worker, each through `herd exec`).
#[test]
fn lightning_ddp_in_srun_mode() {
    let bed = Bed::require();
    let (out, hosts) = run_worker(
        &bed,
        "lightning-srun",
        Launch::Srun,
        "lightning_fit.py",
        &LIGHTNING,
    );
    check_lightning(
        &records(&out, "lightning-auto"),
        "TorchElasticEnvironment",
        hosts.as_deref(),
    );
}

/// Lightning under `herd run` on this machine: 3 simulated nodes, the same ranks.
#[test]
fn lightning_ddp_under_herd_run_here() {
    let bed = Bed::require();
    let (out, hosts) = run_worker(
        &bed,
        "lightning-here",
        Launch::Here,
        "lightning_fit.py",
        &LIGHTNING,
    );
    check_lightning(
        &records(&out, "lightning-auto"),
        "TorchElasticEnvironment",
        hosts.as_deref(),
    );
}

/// Accelerate in agent mode: MULTI_CPU with gloo, every process index right, the gather
/// returns every process's index in order.
#[test]
fn accelerate_in_agent_mode() {
    let bed = Bed::require();
    let (out, hosts) = run_worker(
        &bed,
        "accelerate-agent",
        Launch::Agent,
        "accelerate_gather.py",
        &[],
    );
    check_accelerate(&records(&out, "accelerate"), hosts.as_deref());
}

/// Accelerate in srun mode.
#[test]
fn accelerate_in_srun_mode() {
    let bed = Bed::require();
    let (out, hosts) = run_worker(
        &bed,
        "accelerate-srun",
        Launch::Srun,
        "accelerate_gather.py",
        &[],
    );
    check_accelerate(&records(&out, "accelerate"), hosts.as_deref());
}

/// Accelerate under `herd run` on this machine.
#[test]
fn accelerate_under_herd_run_here() {
    let bed = Bed::require();
    let (out, hosts) = run_worker(
        &bed,
        "accelerate-here",
        Launch::Here,
        "accelerate_gather.py",
        &[],
    );
    check_accelerate(&records(&out, "accelerate"), hosts.as_deref());
}
