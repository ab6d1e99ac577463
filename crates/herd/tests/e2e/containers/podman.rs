//! Podman: the bed's image from Podman's store.

use std::time::Duration;

use herd_testbed::{bed_image, bed_podman_image, read_lossy, Bed};

use super::{
    a_hang_names_the_pid_inside_with_every_stack, a_segfault_is_reported_as_sigsegv,
    a_stopped_node_is_replaced_by_the_spare, bare_reference, in_image,
    ranks_saw_herds_variables_over_the_images, requeued_at_the_time_limit_and_lost_no_step,
};
use crate::staying_alive::{args, wait_final};
use crate::support::{job_id, submit};

/// Every container Podman has on this machine whose name herd gave (`herd-…`).
fn herd_containers() -> Vec<String> {
    let out = std::process::Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}} {{.Status}}"])
        .output()
        .expect("podman ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("herd-"))
        .map(str::to_owned)
        .collect()
}

/// Podman, the bed's image from its store: 2 nodes × 2 workers of train_ddp.py with a
/// 1-minute time limit. Each worker sees herd's ranks and master, never the image's, and
/// the image's own `LANG`, with `PYTHONNOUSERSITE=1`; herd's warning signal reaches Python
/// itself inside the container (it checkpoints), the job is requeued with the host's
/// `scontrol`, resumes and ends with the checksum of the same training with the image's
/// python and no container. Then rank 3 hangs (SIGSTOP) and the report names the pid it
/// printed inside, with every rank's py-spy stack taken from the host; then a worker that
/// dies of SIGSEGV is reported as SIGSEGV, not as Podman's exit code 139. Nothing of these
/// jobs is left on any node, and no container.
#[test]
fn podman_workers_get_herds_variables_signals_stacks_and_their_own_exit_and_leave_nothing() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let name = bed_podman_image().expect("the bed's image in podman (testbed/image)");
    let (project, exps) = crate::support::project_with(
        &bed,
        "containers_podman",
        &[
            ("crates/herd/tests/e2e/workers/hang.py", "hang.py"),
            ("examples/train_ddp.py", "train_ddp.py"),
        ],
    );
    let exp_root = exps.display().to_string();

    // --- a time limit, requeue and resume, with the variables each worker sees ------------
    let train = [
        "--steps",
        "100",
        "--log-every",
        "1",
        "--ckpt-every",
        "100000",
    ];
    let said = format!(
        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
         MASTER_ADDR=$MASTER_ADDR LANG=$LANG NOUSERSITE=$PYTHONNOUSERSITE\"; \
         exec python3 train_ddp.py {} --step-time 0.5",
        train.join(" ")
    );
    let common = in_image(
        &[
            "-J",
            "limited",
            "-p",
            "dev",
            "--time",
            "1",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--warn-before",
            "20",
            "--stop-grace",
            "15",
            "--max-requeues",
            "8",
        ],
        &name,
    );
    let job = job_id(&submit(
        &bed,
        &project,
        &args(&common, &exp_root, &["sh", "-c", &said]),
    ));
    let reference = bare_reference(&project, &exps, &image, &train);
    let exp = exps.join("limited");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(480));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(
        info.succeeded(),
        "{info:?}\n{out}\n{}",
        read_lossy(exp.join(format!("logs/{job}.err")))
    );
    requeued_at_the_time_limit_and_lost_no_step(&exp, &out, &reference);
    ranks_saw_herds_variables_over_the_images(&exp);

    // --- a hang: the pid inside is the one herd names, every stack from the host ----------
    let container = ["--container", name.as_str()];
    let (job, exp) = a_hang_names_the_pid_inside_with_every_stack(
        &bed,
        &project,
        &exps,
        &container,
        &["--on-hang", "fail"],
    );
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
    assert!(!info.succeeded(), "--on-hang fail: {info:?}");

    // --- a worker that dies of SIGSEGV ----------------------------------------------------
    let marker = "herd-e2e-podman-segv";
    a_segfault_is_reported_as_sigsegv(
        &bed,
        &exps,
        &|a: &[&str]| submit(&bed, &project, a),
        &container,
        "python3",
        marker,
    );

    // --- nothing left ---------------------------------------------------------------------
    nothing_left_of_podman(&bed, &[marker, "train_ddp.py", "hang.py"], true);

    // --- a frozen node replaced by a spare ------------------------------------------------
    a_stopped_node_is_replaced_by_the_spare(&bed, &project, &exps, &image, &container);
    // The stopped node's agent was killed by SLURM at the job's end, with no chance to
    // remove its container: nothing of it runs (its guard, or SLURM, ended the workers),
    // and the next herd agent on that node removes the record Podman keeps.
    nothing_left_of_podman(&bed, &["train_ddp.py"], false);
}

/// No process of the jobs (`needles`), no conmon or podman process, on any node, and no
/// container of herd's running (`or_stopped`: nor stopped) within 30 s of their end.
fn nothing_left_of_podman(bed: &Bed, needles: &[&str], or_stopped: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = Vec::new();
        for needle in needles.iter().chain(&["conmon", "podman"]) {
            left.extend(
                bed.node_processes(needle)
                    .expect("the nodes' process tables"),
            );
        }
        left.extend(
            herd_containers()
                .into_iter()
                .filter(|c| or_stopped || c.contains(" Up ")),
        );
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left 30 s after the last job ended: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
