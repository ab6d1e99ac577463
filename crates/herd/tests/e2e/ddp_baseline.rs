//! The bed's baseline: examples/train_ddp.py over 3 nodes × 2 tasks, launched the seeds' way
//! (`srun` + a wrapper that maps SLURM_* to the torch variables). Later tests launch the
//! same workload with herd and compare against this.

use std::collections::BTreeSet;
use std::time::Duration;

use herd_testbed::{rank_lines, shell_join, Bed, BED_IFNAME};

use crate::support::{slurm_torch_wrapper, train_command, Job};

#[test]
fn srun_wrapper_3_nodes_x_2_tasks_end_with_one_checksum() {
    let bed = Bed::require();
    assert!(
        bed.nodes().len() >= 3,
        "this test needs 3 nodes; the bed has {:?} (testbed/up --nodes 3)",
        bed.nodes()
    );
    let dir = bed.scratch("ddp_baseline").expect("scratch folder");
    let ckpt = dir.join("ckpt").display().to_string();
    let steps = 30;
    let mut argv = vec![slurm_torch_wrapper()];
    argv.extend(train_command(
        &bed,
        &[
            "--steps",
            "30",
            "--log-every",
            "10",
            "--ckpt-every",
            "20",
            "--ckpt-dir",
            &ckpt,
        ],
    ));
    let job = Job::submit(
        &bed,
        &dir,
        "ddp-baseline",
        &[
            "--nodes=3",
            "--ntasks-per-node=2",
            "--gres=gpu:2",
            "--cpus-per-task=1",
            "--time=10",
        ],
        // The seeds' way needs the shared network named on the bed's two-network nodes
        // (gloo would bind to the loopback address a node's own name has there; see
        // two_networks.rs): herd picks it by itself.
        &format!(
            "export GLOO_SOCKET_IFNAME={BED_IFNAME}\nsrun --kill-on-bad-exit=1 --label {}",
            shell_join(&argv)
        ),
    );
    let output = job.wait_success(&bed, Duration::from_secs(300));

    let world: BTreeSet<u32> = (0..6).collect();
    let starts = rank_lines(&output, "start");
    let done = rank_lines(&output, "done");
    assert_eq!(
        starts.keys().copied().collect::<BTreeSet<_>>(),
        world,
        "{output}"
    );
    assert_eq!(
        done.keys().copied().collect::<BTreeSet<_>>(),
        world,
        "{output}"
    );

    // Real multi-node: two ranks on each of three distinct bed nodes, in block order.
    for (rank, fields) in &starts {
        assert_eq!(fields["world_size"], "6", "rank {rank}");
        assert_eq!(fields["local_rank"], (rank % 2).to_string(), "rank {rank}");
        assert_eq!(fields["backend"], "gloo", "rank {rank}");
    }
    let hosts: Vec<&str> = starts.values().map(|f| f["host"].as_str()).collect();
    let expected: Vec<&str> = bed.nodes()[..3]
        .iter()
        .flat_map(|n| [n.as_str(), n.as_str()])
        .collect();
    assert_eq!(hosts, expected, "ranks by host:\n{output}");

    // DDP kept every replica identical: one checksum, after the requested steps.
    let sums: BTreeSet<&str> = done.values().map(|f| f["checksum"].as_str()).collect();
    assert_eq!(
        sums.len(),
        1,
        "ranks disagree on the parameters: {sums:?}\n{output}"
    );
    for (rank, fields) in &done {
        assert_eq!(fields["steps"], steps.to_string(), "rank {rank}");
    }
    assert!(
        dir.join(format!("ckpt/ckpt-{steps:09}.pt")).is_file(),
        "final checkpoint missing in {}",
        dir.display()
    );
}
