//! `herd env` in every task of real srun steps agrees with what SLURM and the nodes
//! themselves say about that task: uneven tasks per node, two per node, and a step on a
//! subset of a batch job's nodes (where SLURM_NODELIST names the job's nodes, not the step's).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use herd_testbed::{run_cmd, shell_join, Bed, BED_IFNAME};
use serde_json::Value;

use crate::support::Job;

/// Each task writes `herd env --json` and the facts from its own node: SLURM_PROCID, the
/// node's hostname and its address on the network the nodes share (eth0: the bed's nodes
/// have a docker0 too, whose address `hostname -I` would list first), and the step's node
/// list as scontrol expands it.
const TASK_SCRIPT: &str = r#"set -eu
dir=$1 herd=$2
"$herd" env --json > "$dir/env-$SLURM_PROCID.json"
printf '%s %s %s\n' "$SLURM_PROCID" "$(hostname)" "$(ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1)" > "$dir/truth-$SLURM_PROCID"
scontrol show hostnames "$SLURM_STEP_NODELIST" > "$dir/nodes-$SLURM_PROCID"
"#;

fn task_argv(dir: &Path) -> Vec<String> {
    vec![
        "bash".into(),
        "-c".into(),
        TASK_SCRIPT.into(),
        "task".into(),
        dir.display().to_string(),
        env!("CARGO_BIN_EXE_herd").into(),
    ]
}

struct Truth {
    host: String,
    ip: String,
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Check every task's `herd env --json` against the facts the tasks recorded.
fn check(dir: &Path, ntasks: u32) {
    let mut truth = BTreeMap::new();
    for rank in 0..ntasks {
        let line = read(&dir.join(format!("truth-{rank}")));
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 3, "truth-{rank}: {line}");
        assert_eq!(f[0], rank.to_string());
        truth.insert(
            rank,
            Truth {
                host: f[1].into(),
                ip: f[2].into(),
            },
        );
    }
    let nodes: Vec<String> = read(&dir.join("nodes-0"))
        .lines()
        .map(str::to_owned)
        .collect();
    let per_node = |host: &str| truth.values().filter(|t| t.host == host).count() as u64;
    let master_ip = &truth
        .values()
        .find(|t| t.host == nodes[0])
        .expect("a task on the master node")
        .ip;

    let mut local_ranks: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
    for (rank, t) in &truth {
        let text = read(&dir.join(format!("env-{rank}.json")));
        let env: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        let ctx = format!("rank {rank} on {}: {env:#}", t.host);
        let task = &env["task"];
        assert_eq!(task["rank"], *rank, "{ctx}");
        assert_eq!(task["node"], t.host.as_str(), "{ctx}");
        assert_eq!(env["world_size"], ntasks, "{ctx}");
        assert_eq!(env["nodes"], serde_json::json!(nodes), "{ctx}");
        let node_rank = nodes
            .iter()
            .position(|n| *n == t.host)
            .expect("host in step") as u64;
        assert_eq!(task["node_rank"], node_rank, "{ctx}");
        assert_eq!(task["local_world_size"], per_node(&t.host), "{ctx}");
        assert_eq!(env["master_node"], nodes[0].as_str(), "{ctx}");
        assert_eq!(env["master_addr"], master_ip.as_str(), "{ctx}");
        assert_eq!(env["socket_ifname"], BED_IFNAME, "{ctx}");
        let local = task["local_rank"].as_u64().expect("local_rank");
        assert!(local < per_node(&t.host), "{ctx}");
        assert!(
            local_ranks.entry(t.host.clone()).or_default().insert(local),
            "duplicate local rank: {ctx}"
        );

        let w = &env["worker_env"];
        assert_eq!(w["RANK"], rank.to_string(), "{ctx}");
        assert_eq!(w["SLURM_PROCID"], rank.to_string(), "{ctx}");
        assert_eq!(w["WORLD_SIZE"], ntasks.to_string(), "{ctx}");
        assert_eq!(w["LOCAL_RANK"], local.to_string(), "{ctx}");
        assert_eq!(w["NODE_RANK"], node_rank.to_string(), "{ctx}");
        assert_eq!(
            w["LOCAL_WORLD_SIZE"],
            per_node(&t.host).to_string(),
            "{ctx}"
        );
        assert_eq!(w["MASTER_ADDR"], master_ip.as_str(), "{ctx}");
        assert_eq!(w["GLOO_SOCKET_IFNAME"], BED_IFNAME, "{ctx}");
        assert_eq!(w["NCCL_SOCKET_IFNAME"], BED_IFNAME, "{ctx}");
    }
}

fn srun_step(bed: &Bed, name: &str, srun_args: &[&str], ntasks: u32) {
    let dir = bed.scratch(name).expect("scratch");
    run_cmd(
        Command::new("srun")
            .args(srun_args)
            .args(task_argv(&dir))
            .current_dir(&dir),
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    check(&dir, ntasks);
}

#[test]
fn herd_env_matches_slurm_with_uneven_tasks_per_node() {
    let bed = Bed::require();
    srun_step(&bed, "herd_env_uneven", &["--nodes=3", "--ntasks=5"], 5);
}

#[test]
fn herd_env_matches_slurm_with_two_tasks_per_node_and_gpus() {
    let bed = Bed::require();
    srun_step(
        &bed,
        "herd_env_two_per_node",
        &["--nodes=3", "--ntasks-per-node=2", "--gres=gpu:2"],
        6,
    );
}

#[test]
fn herd_env_follows_the_step_not_the_job_inside_a_batch_script() {
    let bed = Bed::require();
    let dir = bed.scratch("herd_env_step_in_batch").expect("scratch");
    let body = format!("srun --nodes=2 --ntasks=3 {}", shell_join(&task_argv(&dir)));
    let job = Job::submit(
        &bed,
        &dir,
        "env-step",
        &["--nodes=3", "--ntasks-per-node=2", "--time=5"],
        &body,
    );
    job.wait_success(&bed, Duration::from_secs(180));
    check(&dir, 3);
    let env: Value = serde_json::from_str(&read(&dir.join("env-0.json"))).expect("json");
    let job_nodes = herd_hostlist::expand(env["job_nodelist"].as_str().expect("string"))
        .expect("job nodelist parses");
    let step_nodes: Vec<String> = serde_json::from_value(env["nodes"].clone()).expect("step nodes");
    assert_eq!((job_nodes.len(), step_nodes.len()), (3, 2), "{env:#}");
    assert!(step_nodes.iter().all(|n| job_nodes.contains(n)), "{env:#}");
}

/// Each agent's task writes `herd env --agent --json` and its own environment, then becomes
/// the agent with the same options; each worker writes the environment it got.
const AGENT_SCRIPT: &str = r#"set -eu
dir=$1 herd=$2 python=$3 dump=$4
"$herd" env --json --agent --log-dir "$dir/logs" --stop-signal TERM --max-restarts 2 > "$dir/agent-env-$SLURM_NODEID.json"
env -0 > "$dir/task-env-$SLURM_NODEID"
exec "$herd" launch --log-dir "$dir/logs" --stop-signal TERM --max-restarts 2 -- "$python" "$dump" "$dir/out"
"#;

/// `herd env --agent` in the task that then becomes the agent shows exactly what each of
/// its workers gets: the task's environment, the variables herd env lists for that local
/// rank, and `MASTER_PORT` (the leader claims it at start), less the job's secret.
#[test]
fn herd_env_agent_shows_exactly_the_environment_each_worker_gets() {
    let bed = Bed::require();
    let dir = bed.scratch("herd_env_agent").expect("scratch");
    std::fs::create_dir_all(dir.join("out")).expect("out");
    run_cmd(
        Command::new("srun")
            .args(["--nodes=2", "--ntasks-per-node=1", "--gres=gpu:2"])
            .args(["bash", "-c", AGENT_SCRIPT, "agent"])
            .arg(&dir)
            .arg(env!("CARGO_BIN_EXE_herd"))
            .arg(bed.python())
            .arg(crate::support::worker("env_dump.py"))
            .env("HERD_JOB_SECRET", "agents-only-5d2e")
            .current_dir(&dir),
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut checked = 0;
    for node in 0..2 {
        let shown: Value =
            serde_json::from_str(&read(&dir.join(format!("agent-env-{node}.json")))).expect("json");
        let task: BTreeMap<String, String> = read(&dir.join(format!("task-env-{node}")))
            .split('\0')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(
            task["HERD_JOB_SECRET"], "agents-only-5d2e",
            "the agent has it"
        );
        assert_eq!(shown["withheld"], serde_json::json!(["HERD_JOB_SECRET"]));
        let workers = shown["agent"]["workers"].as_array().expect("workers");
        assert_eq!(workers.len(), 2, "{shown:#}");
        for (local, sets) in workers.iter().enumerate() {
            let rank = node * 2 + local;
            let got: Value =
                serde_json::from_str(&read(&dir.join(format!("out/worker-{rank}.json"))))
                    .expect("json");
            let got: BTreeMap<String, String> =
                serde_json::from_value(got["env"].clone()).expect("env");
            let mut want = task.clone();
            want.remove("HERD_JOB_SECRET");
            let sets: BTreeMap<String, String> =
                serde_json::from_value(sets.clone()).expect("variables");
            want.extend(sets);
            // `_` and `SHLVL` are the shell's (bash lowers SHLVL as it execs the agent); the
            // port is claimed when the attempt starts.
            let ignored = ["_", "SHLVL", "MASTER_PORT"];
            let differ: Vec<String> = want
                .keys()
                .chain(got.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|k| !ignored.contains(&k.as_str()) && want.get(*k) != got.get(*k))
                .map(|k| {
                    format!(
                        "{k}: herd env {:?}, the worker {:?}",
                        want.get(k),
                        got.get(k)
                    )
                })
                .collect();
            assert!(
                differ.is_empty(),
                "rank {rank}: herd env --agent and the worker's environment differ:\n{}",
                differ.join("\n")
            );
            assert!(got.contains_key("MASTER_PORT"), "rank {rank} has a port");
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}
