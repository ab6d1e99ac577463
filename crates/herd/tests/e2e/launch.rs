//! `herd run` / `herd launch` on the bed (issue #4): one agent per node spawning and
//! supervising real workers.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use herd_testbed::{rank_lines, Bed};
use serde_json::Value;

use crate::support::{herd_run, local_herd_run, three_nodes, train_command, worker, Job};

/// `python probe.py DIR`: the worker that records what it sees into DIR.
fn probe_cmd(bed: &Bed, dir: &Path) -> Vec<String> {
    vec![
        bed.python().display().to_string(),
        worker("probe.py"),
        dir.display().to_string(),
    ]
}

fn probes(dir: &Path, attempt: u32) -> BTreeMap<u32, Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("probe dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&format!("probe-{attempt}-")) else {
            continue;
        };
        let rank: u32 = rest.trim_end_matches(".json").parse().expect("rank");
        let text = std::fs::read_to_string(entry.path()).expect("read probe");
        out.insert(rank, serde_json::from_str(&text).expect("probe json"));
    }
    out
}

fn checksums(output: &str, world: u32) -> String {
    let done = rank_lines(output, "done");
    assert_eq!(
        done.keys().copied().collect::<Vec<_>>(),
        (0..world).collect::<Vec<_>>(),
        "{output}"
    );
    let sums: BTreeSet<&str> = done.values().map(|f| f["checksum"].as_str()).collect();
    assert_eq!(sums.len(), 1, "ranks disagree: {sums:?}\n{output}");
    let sum = sums.into_iter().next().map(str::to_owned);
    sum.unwrap_or_default()
}

/// (a) 3 nodes × 2 workers (2 GPUs per node, so 2 workers by default) train to one checksum,
/// the same as `herd run` of 3 simulated nodes × 2 workers on one machine.
#[test]
fn a_three_nodes_by_two_gpus_match_a_local_run() {
    let bed = Bed::require();
    let dir = bed.scratch("launch_a").expect("scratch");
    let train = train_command(&bed, &["--steps", "30", "--log-every", "10"]);
    let log_dir = dir.join("logs").display().to_string();
    let job = Job::submit(
        &bed,
        &dir,
        "launch-a",
        &["--nodes=3", &three_nodes(&bed), "--gres=gpu:2", "--time=10"],
        &herd_run(&["--label", "--log-dir", &log_dir], &train),
    );
    let output = job.wait_success(&bed, Duration::from_secs(300));
    let on_bed = checksums(&output, 6);
    let starts = rank_lines(&output, "start");
    let hosts: Vec<&str> = starts.values().map(|f| f["host"].as_str()).collect();
    let want: Vec<&str> = bed.nodes()[..3]
        .iter()
        .flat_map(|n| [n.as_str(), n.as_str()])
        .collect();
    assert_eq!(hosts, want, "two ranks per node, in node order:\n{output}");
    // Per-rank logs, one pair per rank.
    for rank in 0..6 {
        let out = std::fs::read_to_string(dir.join(format!("logs/attempt-0/rank-{rank}.out")))
            .unwrap_or_else(|e| panic!("rank {rank} log: {e}"));
        assert!(
            out.contains(&format!("rank={rank} done")),
            "rank {rank} log:\n{out}"
        );
        assert!(dir
            .join(format!("logs/attempt-0/rank-{rank}.err"))
            .is_file());
    }

    let local_out = local_herd_run(&dir, 3, 2, &train);
    assert_eq!(
        checksums(&local_out, 6),
        on_bed,
        "bed and local runs of the same world size differ"
    );
}

/// A 3-node job with `--gres=gpu:GPUS` whose `herd run EXTRA…` runs the probe worker on
/// every rank; waits for success and returns the 6 probes by rank.
fn probe_job(bed: &Bed, test: &str, gpus: u32, extra: &[&str]) -> BTreeMap<u32, Value> {
    let dir = bed.scratch(&format!("launch_{test}")).expect("scratch");
    let log_dir = dir.join("logs").display().to_string();
    let mut args = extra.to_vec();
    args.extend(["--log-dir", &log_dir]);
    let job = Job::submit(
        bed,
        &dir,
        &format!("launch-{test}"),
        &[
            "--nodes=3",
            &three_nodes(bed),
            &format!("--gres=gpu:{gpus}"),
            "--time=5",
        ],
        &herd_run(&args, &probe_cmd(bed, &dir)),
    );
    job.wait_success(bed, Duration::from_secs(180));
    let p = probes(&dir, 0);
    assert_eq!(
        p.keys().copied().collect::<Vec<_>>(),
        (0..6).collect::<Vec<_>>()
    );
    p
}

/// (b) Code that finds its rank the seeds' way (SLURM_PROCID, SLURM_LOCALID,
/// SLURM_NNODES × SLURM_TASKS_PER_NODE[0]) gets correct, distinct ranks under agent mode,
/// and every worker sees all of its node's GPUs, as under torchrun and srun, so
/// `torch.cuda.set_device(LOCAL_RANK)` (InternVideo2, torchrun's docs) selects its own.
#[test]
fn b_seeds_rank_discovery_is_right_under_agent_mode() {
    let bed = Bed::require();
    let p = probe_job(&bed, "b", 2, &[]);
    let mut seen = BTreeSet::new();
    for (rank, v) in &p {
        let s = &v["seeds"];
        assert_eq!(s["rank"], *rank, "{v:#}");
        assert_eq!(s["world_size"], 6, "{v:#}");
        assert_eq!(s["mmcv_world_size"], 6, "{v:#}");
        assert_eq!(s["gpu"], rank % 2, "{v:#}");
        assert!(seen.insert(s["rank"].as_u64()), "duplicate rank {v:#}");
        let env = &v["env"];
        assert_eq!(
            env["CUDA_VISIBLE_DEVICES"], "0,1",
            "all of the node's GPUs: {v:#}"
        );
        assert_eq!(env["LOCAL_RANK"], (rank % 2).to_string());
        let visible = env["CUDA_VISIBLE_DEVICES"]
            .as_str()
            .unwrap_or("")
            .split(',');
        let local: usize = env["LOCAL_RANK"]
            .as_str()
            .unwrap_or("")
            .parse()
            .expect("LOCAL_RANK");
        assert!(
            local < visible.count(),
            "cuda:LOCAL_RANK is a device this worker sees: {v:#}"
        );
        assert_eq!(env["NODE_RANK"], (rank / 2).to_string());
        assert_eq!(v["host"], bed.nodes()[(rank / 2) as usize].as_str());
        assert_eq!(env["MASTER_ADDR"], p[&0]["env"]["MASTER_ADDR"]);
        assert_ne!(
            env["MASTER_ADDR"], "127.0.0.1",
            "other nodes must reach the master"
        );
    }
}

/// (b2) `--gpu-bind per-rank`: each worker sees exactly its own share of its node's GPUs
/// (4 GPUs, 2 workers: 0,1 and 2,3), distinct from its node's other worker's.
#[test]
fn b2_per_rank_gpu_binding_gives_each_worker_its_own_share() {
    let bed = Bed::require();
    let p = probe_job(
        &bed,
        "b2",
        4,
        &["--nproc-per-node", "2", "--gpu-bind", "per-rank"],
    );
    let mut per_node: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rank, v) in &p {
        let env = &v["env"];
        let want = if rank % 2 == 0 { "0,1" } else { "2,3" };
        assert_eq!(env["CUDA_VISIBLE_DEVICES"], want, "its own share: {v:#}");
        per_node
            .entry(v["host"].as_str().unwrap_or_default().to_owned())
            .or_default()
            .push(env["CUDA_VISIBLE_DEVICES"].to_string());
    }
    for (host, shares) in &per_node {
        assert_eq!(shares.len(), 2, "{host}: {per_node:?}");
        assert_ne!(shares[0], shares[1], "{host}: shares overlap: {per_node:?}");
    }
}

/// (d) Another program holds the leader's preferred rendezvous port on node 0: the job
/// still runs (the leader takes the next candidate, followers skip the squatter).
#[test]
fn d_busy_preferred_port_does_not_stop_the_job() {
    let bed = Bed::require();
    let dir = bed.scratch("launch_d").expect("scratch");
    let next = bed.next_job_id().expect("next job id");
    // `herd run` starts the job's first step (0) with the agents.
    let preferred = herd_rendezvous::port_candidates(&format!("slurm-{next}.0"), 1)[0];
    let node0 = &bed.nodes()[0];
    let mut squatter = Command::new("nsenter")
        .arg(format!("--net=/var/run/netns/herd-{node0}"))
        .arg(bed.python())
        .args([
            "-c",
            "import socket, sys, time\n\
             s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
             s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(16)\n\
             print('listening', flush=True); time.sleep(300)",
        ])
        .arg(preferred.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("squatter");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(squatter.stdout.as_mut().expect("stdout")),
        &mut line,
    )
    .expect("squatter ready");
    assert_eq!(line.trim(), "listening");
    let cmd = probe_cmd(&bed, &dir);
    let job = Job::submit(
        &bed,
        &dir,
        "launch-d",
        &["--nodes=3", &three_nodes(&bed), "--time=5"],
        &herd_run(
            &["--log-dir", &dir.join("logs").display().to_string()],
            &cmd,
        ),
    );
    assert_eq!(
        job.id, next,
        "another job was submitted meanwhile; the prediction is off"
    );
    let result = std::panic::catch_unwind(|| job.wait_success(&bed, Duration::from_secs(180)));
    let _ = squatter.kill();
    let _ = squatter.wait();
    let output = result.unwrap_or_else(|e| std::panic::resume_unwind(e));
    assert_eq!(probes(&dir, 0).len(), 3, "{output}");
    // The leader announced a port of its own: another of the job's candidates.
    let announced: Vec<u16> = output
        .lines()
        .filter_map(|l| {
            l.split_once("rendezvous port ")?
                .1
                .split_once(',')?
                .0
                .parse()
                .ok()
        })
        .collect();
    let candidates = herd_rendezvous::port_candidates(&format!("slurm-{next}.0"), 32);
    assert_eq!(announced.len(), 1, "one leader announcement:\n{output}");
    assert!(
        announced[0] != preferred && candidates.contains(&announced[0]),
        "the leader must take another candidate than the held {preferred}, took {}:\n{output}",
        announced[0]
    );
}

/// (g) A `@record`-decorated main raises `ValueError("bad shard 7")` on rank 4: torch writes
/// the exception to the TORCHELASTIC_ERROR_FILE herd gave that rank, and the failure
/// report (console and failure.json) leads with it: rank 4, its node, the exception and
/// where it was raised, then the stderr tail.
#[test]
fn g_an_exception_torch_recorded_leads_the_failure_report() {
    let bed = Bed::require();
    let dir = bed.scratch("launch_g").expect("scratch");
    let cmd = vec![
        bed.python().display().to_string(),
        worker("raises.py"),
        "4".into(),
    ];
    let job = Job::submit(
        &bed,
        &dir,
        "launch-g",
        &["--nodes=3", &three_nodes(&bed), "--gres=gpu:2", "--time=5"],
        &herd_run(
            &["--log-dir", &dir.join("logs").display().to_string()],
            &cmd,
        ),
    );
    let info = bed
        .wait(job.id, Duration::from_secs(180))
        .expect("job ends");
    let output = job.output();
    assert!(
        !info.succeeded(),
        "the job must fail:
{output}"
    );
    let node = bed.nodes()[2].as_str();
    assert!(
        output.contains(&format!(
            "herd: job failed (attempt 0): rank 4 (local rank 0 on {node}) raised ValueError: bad shard 7 (exited with code 1)"
        )),
        "{output}"
    );
    let source = std::fs::read_to_string(worker("raises.py")).expect("raises.py");
    let line = 1 + source
        .lines()
        .position(|l| l.trim_start().starts_with("raise ValueError"))
        .expect("the raise in raises.py");
    let raised_at = format!(
        "herd: raised at {}:{line} in load_shard: raise ValueError",
        worker("raises.py")
    );
    let (at, tail) = (
        output.find(&raised_at),
        output.find("herd: last lines of rank 4's stderr:"),
    );
    assert!(
        matches!((at, tail), (Some(a), Some(t)) if a < t),
        "the frame comes before the stderr tail:
{output}"
    );
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("logs/failure.json")).expect("failure.json"),
    )
    .expect("report json");
    assert_eq!(report["rank"], 4, "{report:#}");
    assert_eq!(report["host"], node, "{report:#}");
    let error = &report["error"];
    assert_eq!(error["message"], "ValueError: bad shard 7", "{report:#}");
    assert_eq!(error["exception"], "ValueError", "{report:#}");
    assert_eq!(error["frame"]["function"], "load_shard", "{report:#}");
    assert_eq!(
        error["error_file"],
        dir.join("logs/attempt-0/rank-4.error.json")
            .display()
            .to_string(),
        "{report:#}"
    );
    assert!(
        report["stderr_tail"]
            .to_string()
            .contains("ValueError: bad shard 7"),
        "the stderr tail follows: {report:#}"
    );
}

/// Arguments no shell may touch.
fn nasty_args(dir: &Path) -> Vec<String> {
    vec![
        "with space".into(),
        "it's \"quoted\"".into(),
        format!("$(touch {}/pwned)", dir.display()),
        format!("`touch {}/pwned2`", dir.display()),
        "*".into(),
        "new\nline".into(),
        "ünïcødé ✓ 日本".into(),
        String::new(),
        "--flag=--".into(),
        "a\\b;c|d&e>f".into(),
        "  leading and trailing  ".into(),
    ]
}

fn assert_argv_exact(dir: &Path, args: &[String], ranks: u32) {
    let p = probes(dir, 0);
    assert_eq!(p.len() as u32, ranks);
    let mut want = vec![dir.display().to_string()];
    want.extend(args.iter().cloned());
    for (rank, v) in &p {
        let got: Vec<String> = serde_json::from_value(v["argv"].clone()).expect("argv");
        assert_eq!(got, want, "rank {rank}");
    }
    assert!(
        !dir.join("pwned").exists() && !dir.join("pwned2").exists(),
        "a shell ran an argument"
    );
}

/// (e) Worker arguments reach every worker's argv byte for byte, locally and on the bed.
#[test]
fn e_arguments_reach_workers_byte_for_byte() {
    let bed = Bed::require();
    let dir: PathBuf = bed.scratch("launch_e").expect("scratch");
    let args = nasty_args(&dir);
    let mut cmd = probe_cmd(&bed, &dir);
    cmd.extend(args.iter().cloned());

    local_herd_run(&dir, 2, 2, &cmd);
    assert_argv_exact(&dir, &args, 4);

    for entry in std::fs::read_dir(&dir).expect("dir").flatten() {
        if entry.file_name().to_string_lossy().starts_with("probe-") {
            std::fs::remove_file(entry.path()).expect("clean");
        }
    }
    let job = Job::submit(
        &bed,
        &dir,
        "launch-e",
        &["--nodes=3", &three_nodes(&bed), "--time=5"],
        &herd_run(
            &["--log-dir", &dir.join("logs").display().to_string()],
            &cmd,
        ),
    );
    job.wait_success(&bed, Duration::from_secs(180));
    assert_argv_exact(&dir, &args, 3);
}

/// (f) `--max-restarts 1`: a worker that fails once, then succeeds → the job succeeds, with
/// attempt 0's logs kept next to attempt 1's.
#[test]
fn f_one_restart_recovers_and_keeps_the_first_attempts_logs() {
    let bed = Bed::require();
    let dir = bed.scratch("launch_f").expect("scratch");
    let cmd = vec![
        bed.python().display().to_string(),
        worker("probe.py"),
        dir.display().to_string(),
        "--fail-once-rank".into(),
        "3".into(),
    ];
    let job = Job::submit(
        &bed,
        &dir,
        "launch-f",
        &["--nodes=3", &three_nodes(&bed), "--time=5"],
        &herd_run(
            &[
                "--nproc-per-node",
                "2",
                "--max-restarts",
                "1",
                "--log-dir",
                &dir.join("logs").display().to_string(),
            ],
            &cmd,
        ),
    );
    let output = job.wait_success(&bed, Duration::from_secs(240));
    let first =
        std::fs::read_to_string(dir.join("logs/attempt-0/rank-3.err")).expect("attempt 0 log kept");
    assert!(
        first.contains("rank 3 fails on purpose in attempt 0"),
        "{first}"
    );
    let second =
        std::fs::read_to_string(dir.join("logs/attempt-1/rank-3.out")).expect("attempt 1 log");
    assert!(second.contains("rank 3 ok"), "{second}");
    let p1 = probes(&dir, 1);
    assert_eq!(p1.len(), 6, "all workers restarted:\n{output}");
    // Rank 3 always wrote its attempt-0 probe (before failing); other ranks may have been
    // torn down before they got that far.
    let ports: BTreeSet<String> = [probes(&dir, 0), p1]
        .iter()
        .map(|p| {
            p[&3]["env"]["MASTER_PORT"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(ports.len(), 2, "each attempt gets a fresh port");
    assert!(
        output.contains("restarting all workers: attempt 1"),
        "{output}"
    );
}

/// SIGUSR1 to the job (SLURM's warning before a time limit) reaches every worker through
/// the agents: train_ddp.py checkpoints one step on all 6 ranks and the job ends cleanly.
#[test]
fn h_sigusr1_reaches_every_worker_through_the_agents() {
    let bed = Bed::require();
    let dir = bed.scratch("launch_h").expect("scratch");
    let ckpt = dir.join("ckpt").display().to_string();
    let train = train_command(
        &bed,
        &[
            "--steps",
            "500",
            "--step-time",
            "0.1",
            "--log-every",
            "5",
            "--ckpt-every",
            "1000",
            "--ckpt-dir",
            &ckpt,
        ],
    );
    let job = Job::submit(
        &bed,
        &dir,
        "launch-h",
        &["--nodes=3", &three_nodes(&bed), "--gres=gpu:2", "--time=10"],
        &herd_run(
            &[
                "--label",
                "--log-dir",
                &dir.join("logs").display().to_string(),
            ],
            &train,
        ),
    );
    job.wait_output(Duration::from_secs(180), "step 10 on every rank", |out| {
        (0..6).all(|r| out.contains(&format!("rank={r} step=10 ")))
    });
    bed.signal(job.id, "USR1").expect("scancel --signal=USR1");
    let output = job.wait_success(&bed, Duration::from_secs(120));
    let stops = rank_lines(&output, "stopping");
    assert_eq!(stops.len(), 6, "every rank stops on SIGUSR1:\n{output}");
    let steps: BTreeSet<&str> = stops.values().map(|f| f["step"].as_str()).collect();
    assert_eq!(steps.len(), 1, "one step for all:\n{output}");
    let step: u32 = steps
        .into_iter()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("step");
    assert!(
        dir.join(format!("ckpt/ckpt-{step:09}.pt")).is_file(),
        "checkpoint at step {step}"
    );
}
