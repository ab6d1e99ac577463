//! What every later test relies on from examples/train_ddp.py, shown on the bed: SIGUSR1
//! stops all ranks at one step with a complete checkpoint and exit 0, and a run resumed from
//! that checkpoint ends with the same parameters as one that was never interrupted.

use std::collections::BTreeSet;
use std::time::Duration;

use herd_testbed::{rank_lines, shell_join, Bed, BED_IFNAME};

use crate::support::{slurm_torch_wrapper, train_command, Job};

const RESOURCES: [&str; 4] = [
    "--nodes=2",
    "--ntasks-per-node=1",
    "--cpus-per-task=1",
    "--time=10",
];

fn srun_train(bed: &Bed, args: &[&str]) -> String {
    let mut argv = vec![slurm_torch_wrapper()];
    argv.extend(train_command(bed, args));
    // Bare srun needs the shared network named on the bed's two-network nodes (herd picks
    // it by itself; two_networks.rs).
    format!(
        "export GLOO_SOCKET_IFNAME={BED_IFNAME}\nsrun --kill-on-bad-exit=1 --label {}",
        shell_join(&argv)
    )
}

fn one_checksum(output: &str, steps: &str) -> String {
    let done = rank_lines(output, "done");
    assert_eq!(done.len(), 2, "both ranks must finish:\n{output}");
    let sums: BTreeSet<&str> = done.values().map(|f| f["checksum"].as_str()).collect();
    assert_eq!(sums.len(), 1, "ranks disagree: {sums:?}\n{output}");
    assert!(done.values().all(|f| f["steps"] == steps), "{output}");
    let sum = sums.into_iter().next().map(str::to_owned);
    sum.unwrap_or_default()
}

#[test]
fn sigusr1_checkpoints_all_ranks_at_one_step_and_resume_matches_uninterrupted_run() {
    let bed = Bed::require();
    let dir = bed.scratch("train_ddp_contract").expect("scratch folder");
    let interrupted = dir.join("ckpt-interrupted").display().to_string();
    let straight = dir.join("ckpt-straight").display().to_string();
    let common = ["--steps", "60", "--log-every", "5", "--ckpt-every", "1000"];

    // 1. A slow run, signalled once it is under way.
    let mut slow: Vec<&str> = common.to_vec();
    slow.extend(["--step-time", "0.2", "--ckpt-dir", &interrupted]);
    let job = Job::submit(&bed, &dir, "usr1", &RESOURCES, &srun_train(&bed, &slow));
    job.wait_output(Duration::from_secs(180), "step=10 on both ranks", |out| {
        out.contains("rank=0 step=10 ") && out.contains("rank=1 step=10 ")
    });
    bed.signal(job.id, "USR1").expect("signal the job");
    let output = job.wait_success(&bed, Duration::from_secs(120));
    let stops = rank_lines(&output, "stopping");
    assert_eq!(stops.len(), 2, "both ranks must stop on SIGUSR1:\n{output}");
    let stop_steps: BTreeSet<&str> = stops.values().map(|f| f["step"].as_str()).collect();
    assert_eq!(
        stop_steps.len(),
        1,
        "ranks stopped at different steps:\n{output}"
    );
    let stop: u32 = stop_steps
        .into_iter()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("numeric step");
    assert!(
        (10..60).contains(&stop),
        "stopped at step {stop}:\n{output}"
    );
    assert!(
        rank_lines(&output, "done").is_empty(),
        "a signalled run must not finish:\n{output}"
    );
    let ckpts: Vec<String> = std::fs::read_dir(&interrupted)
        .expect("checkpoint folder")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    assert_eq!(
        ckpts,
        vec![format!("ckpt-{stop:09}.pt")],
        "checkpoints after SIGUSR1"
    );

    // 2. Resume it, and run the same job uninterrupted next to it.
    let mut resume: Vec<&str> = common.to_vec();
    resume.extend(["--ckpt-dir", &interrupted]);
    let mut fresh: Vec<&str> = common.to_vec();
    fresh.extend(["--ckpt-dir", &straight]);
    let resumed = Job::submit(&bed, &dir, "resume", &RESOURCES, &srun_train(&bed, &resume));
    let reference = Job::submit(
        &bed,
        &dir,
        "straight",
        &RESOURCES,
        &srun_train(&bed, &fresh),
    );
    let resumed_out = resumed.wait_success(&bed, Duration::from_secs(300));
    let reference_out = reference.wait_success(&bed, Duration::from_secs(300));

    let resumes = rank_lines(&resumed_out, "resumed");
    assert_eq!(resumes.len(), 2, "both ranks must resume:\n{resumed_out}");
    assert!(
        resumes.values().all(|f| f["step"] == stop.to_string()),
        "resumed from the wrong step (expected {stop}):\n{resumed_out}"
    );
    assert_eq!(
        one_checksum(&resumed_out, "60"),
        one_checksum(&reference_out, "60"),
        "resumed run diverged from the uninterrupted one"
    );
}
