//! Charliecloud: the bed's image as a folder and as a SquashFS file.

use std::path::Path;
use std::time::Duration;

use herd_testbed::{bed_image, bed_image_squashfs, read_lossy, Bed};
use serde_json::Value;

use super::{
    a_hang_names_the_pid_inside_with_every_stack, a_segfault_is_reported_as_sigsegv,
    a_stopped_node_is_replaced_by_the_spare, bare_reference, in_image,
    ranks_saw_herds_variables_over_the_images, requeued_at_the_time_limit_and_lost_no_step,
};
use crate::staying_alive::{args, checksum, project, wait_final};
use crate::support::{events, job_id, names, submit, timeline};

/// 2 nodes × 2 workers of train_ddp.py in the bed's image, once as a folder and once as a
/// SquashFS file, both under Charliecloud: each reaches the checksum of the same training
/// with the image's own python and torch run without a container. Each worker sees herd's
/// ranks and master, never the image's `RANK=99`/`MASTER_ADDR=wrong`, and the rest of the
/// image's environment (`LANG`), with `PYTHONNOUSERSITE=1`. Then a worker that dies of SIGSEGV inside the image is
/// reported as SIGSEGV, the job fails, and no process of these jobs (no squashfuse either)
/// is left on any node.
#[test]
fn charliecloud_folder_and_squashfs_images_train_to_the_bare_checksum_with_herds_variables() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let squashfs = bed_image_squashfs(&image);
    let (project, exps) = project(&bed, "containers_charliecloud");
    let exp_root = exps.display().to_string();
    let train = ["train_ddp.py", "--steps", "30", "--log-every", "10"];
    let common = |name: &'static str, image: &Path| -> Vec<String> {
        [
            "-J",
            name,
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--time",
            "5",
            "--container",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([image.display().to_string()])
        .collect()
    };
    // The folder image: each worker says what it sees, then trains.
    let said = format!(
        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
         MASTER_ADDR=$MASTER_ADDR LANG=$LANG NOUSERSITE=$PYTHONNOUSERSITE\"; \
         exec python3 {}",
        train.join(" ")
    );
    let folder_args = common("in_folder", &image);
    let folder_args: Vec<&str> = folder_args.iter().map(String::as_str).collect();
    let in_folder = job_id(&submit(
        &bed,
        &project,
        &args(&folder_args, &exp_root, &["sh", "-c", &said]),
    ));
    // The SquashFS image: python3 as the worker command itself.
    let squash_args = common("in_squashfs", &squashfs);
    let squash_args: Vec<&str> = squash_args.iter().map(String::as_str).collect();
    let mut python_train = vec!["python3"];
    python_train.extend(train);
    let in_squashfs = job_id(&submit(
        &bed,
        &project,
        &args(&squash_args, &exp_root, &python_train),
    ));

    // The same training without a container.
    let reference = bare_reference(&project, &exps, &image, &train[1..]);

    for (job, name) in [(in_folder, "in_folder"), (in_squashfs, "in_squashfs")] {
        let exp = exps.join(name);
        let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
        let out = read_lossy(exp.join(format!("logs/{job}.out")));
        assert!(
            info.succeeded(),
            "{name}: {info:?}\n{out}\n{}",
            read_lossy(exp.join(format!("logs/{job}.err")))
        );
        assert_eq!(
            checksum(&out),
            checksum(&reference),
            "{name}: the checksum of the same training without a container"
        );
        let manifest: Value =
            serde_json::from_str(&read_lossy(exp.join("manifest.json"))).expect("manifest");
        assert_eq!(
            manifest["plan"]["container"]["image"],
            Value::from(if name == "in_folder" {
                image.display().to_string()
            } else {
                squashfs.display().to_string()
            }),
            "{name}: the manifest names the image"
        );
    }
    let exp = exps.join("in_folder");
    ranks_saw_herds_variables_over_the_images(&exp);
    let all = timeline(&exp);
    assert_eq!(events(&all, "finished").len(), 1, "{:?}", names(&all));

    // --- a worker that dies of SIGSEGV inside the image ---------------------------------
    let marker = "herd-e2e-container-segv";
    let sqfs = squashfs.display().to_string();
    a_segfault_is_reported_as_sigsegv(
        &bed,
        &exps,
        &|a: &[&str]| submit(&bed, &project, a),
        &["--container", &sqfs],
        "python3",
        marker,
    );
    for needle in [marker, "train_ddp.py", "squashfuse", "ch-run"] {
        let left = bed
            .node_processes(needle)
            .expect("the nodes' process tables");
        assert!(left.is_empty(), "left running: {left:#?}");
    }
}

/// In the SquashFS image: 2 nodes × 2 workers with a 1-minute time limit; herd warns 20 s
/// before each limit (the workers checkpoint on SIGUSR1 inside the image), requeues the job
/// (`scontrol` is the host's: the image has none), and it resumes from the checkpoint and
/// finishes with the checksum of the same training run without interruption or container.
#[test]
fn in_a_container_a_time_limit_requeues_and_the_job_resumes_with_no_lost_step() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let squashfs = bed_image_squashfs(&image);
    let (project, exps) = project(&bed, "containers_time_limit");
    let exp_root = exps.display().to_string();
    let train = [
        "--steps",
        "100",
        "--log-every",
        "1",
        "--ckpt-every",
        "100000",
    ];
    let mut slow = vec!["python3", "train_ddp.py"];
    slow.extend(train);
    slow.extend(["--step-time", "0.5"]);
    let sqfs = squashfs.display().to_string();
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
        &sqfs,
    );
    let job = job_id(&submit(&bed, &project, &args(&common, &exp_root, &slow)));
    let reference = bare_reference(&project, &exps, &image, &train);
    let exp = exps.join("limited");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(480));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(info.succeeded(), "{info:?}\n{out}");
    requeued_at_the_time_limit_and_lost_no_step(&exp, &out, &reference);
}

/// In the folder image: rank 3 stops (SIGSTOP) in a barrier; with `--hang-timeout 8` herd
/// reports the hang naming rank 3, with every rank's py-spy stack (py-spy is the host's;
/// the workers keep the host's PID namespace), and restarts the workers, which finish.
/// Then a job with a spare: node 1 freezes and the spare takes its place in the same job,
/// which ends with the uninterrupted checksum; nothing is left running on any node.
#[test]
fn in_a_container_a_hang_is_reported_with_every_stack_and_a_frozen_node_is_replaced() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let folder = image.display().to_string();
    let (project, exps) = crate::support::project_with(
        &bed,
        "containers_hang_spare",
        &[
            ("crates/herd/tests/e2e/workers/hang.py", "hang.py"),
            ("examples/train_ddp.py", "train_ddp.py"),
        ],
    );
    let container = ["--container", folder.as_str()];

    // --- a hang ---------------------------------------------------------------------------
    let (job, exp) = a_hang_names_the_pid_inside_with_every_stack(
        &bed,
        &project,
        &exps,
        &container,
        &["--on-hang", "restart", "--max-restarts", "1"],
    );
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
    assert!(info.succeeded(), "{info:?}");
    let all = timeline(&exp);
    assert_eq!(events(&all, "restart").len(), 1, "{:?}", names(&all));

    // --- a frozen node replaced by a spare ------------------------------------------------
    a_stopped_node_is_replaced_by_the_spare(&bed, &project, &exps, &image, &container);
    for needle in ["train_ddp.py", "hang.py", "squashfuse"] {
        let left = bed
            .node_processes(needle)
            .expect("the nodes' process tables");
        assert!(left.is_empty(), "left running: {left:#?}");
    }
}

/// The GPUs inside the image, on nodes with NVIDIA's driver stood in (an `nvidia-smi` on
/// PATH listing 4 GPUs, and a `libcuda.so.1` the image's Python loads through
/// `LD_LIBRARY_PATH`, with CUDA's rules for `CUDA_VISIBLE_DEVICES`): `srun -N3
/// --gres=gpu:2 herd launch --container IMAGE` where the "container" of one node has only
/// one GPU blames that node before any worker starts, naming the count. Without the
/// driver library in the image on any node, the finding is the job's: it is said with
/// Charliecloud's fix (`ch-fromhost --nvidia`), and the workers start.
#[test]
fn a_node_whose_image_sees_fewer_gpus_than_slurm_gave_is_blamed_before_any_worker_starts() {
    use crate::preflight::srun_launch;
    use herd_testbed::{fake_libcuda, write_file, BedError};

    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let dir = bed.scratch("containers_gpus").expect("scratch");
    let lib = fake_libcuda(&dir.join("lib")).expect("cc builds the stand-in libcuda.so.1");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let listing: String = (0..4)
        .map(|g| format!("echo 'GPU {g}: Stand-in (UUID: GPU-0000000{g})'\n"))
        .collect();
    write_file(
        &bin.join("nvidia-smi"),
        &format!("#!/bin/sh\n{listing}"),
        0o755,
    )
    .expect("nvidia-smi");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let image_arg = image.display().to_string();
    // Each worker writes a file named by its rank; as a Python command, or through `sh`
    // (the preflight then asks CUDA with the image's `python3`).
    let launch = |out: &Path, env: &[(&str, &str)], through_sh: bool| {
        std::fs::create_dir_all(out).expect("out");
        let log_dir = out.join("logs").display().to_string();
        let cmd: Vec<String> = if through_sh {
            vec![
                "sh".into(),
                "-c".into(),
                "echo \"$CUDA_VISIBLE_DEVICES\" > \"$0/$RANK\"".into(),
                out.display().to_string(),
            ]
        } else {
            vec![
                "python3".into(),
                "-c".into(),
                "import os, sys; open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write(os.environ['CUDA_VISIBLE_DEVICES'])".into(),
                out.display().to_string(),
            ]
        };
        let mut env = env.to_vec();
        env.push(("PATH", &path));
        srun_launch(
            &dir,
            &env,
            &[
                "--nproc-per-node",
                "2",
                "--log-dir",
                &log_dir,
                "--container",
                &image_arg,
                "--container-runtime",
                "charliecloud",
            ],
            &cmd,
        )
    };
    let ran = |out: &Path| -> Vec<String> {
        let mut r: Vec<String> = std::fs::read_dir(out)
            .expect("out")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "logs")
            .collect();
        r.sort();
        r
    };

    // One node's container has one GPU of the two SLURM gave; the command is `sh`.
    let short = bed.nodes()[1].clone();
    let lib_path = lib.display().to_string();
    let out = dir.join("short");
    let said = match launch(
        &out,
        &[
            ("LD_LIBRARY_PATH", &lib_path),
            ("HERD_FAKE_CUDA_SHORT", &short),
        ],
        true,
    ) {
        Ok(out) => panic!("the job should fail without starting, but it ran:\n{out}"),
        Err(BedError::Failed { stderr, .. }) => stderr,
        Err(e) => panic!("{e}"),
    };
    assert!(
        said.contains(&format!(
            "{short}: preflight check `container` failed: inside the image {image_arg} CUDA sees 1 of the 2 GPUs SLURM gave this node (CUDA_VISIBLE_DEVICES=0,1): Charliecloud keeps the host's /dev, so this node shows fewer GPUs than SLURM gave"
        )),
        "names the node, the count and the fix:\n{said}"
    );
    assert!(
        said.contains(&format!("blaming node 1 ({short})")),
        "blames that node:\n{said}"
    );
    assert!(ran(&out).is_empty(), "no worker started anywhere:\n{said}");

    // No driver library in the image on any node: the job's finding, said; workers start.
    // The command is Python's.
    let out = dir.join("nolib");
    let said = launch(&out, &[], false).unwrap_or_else(|e| panic!("the job runs: {e}"));
    assert!(
        said.contains("every node fails check `container` (the image")
            && said.contains(
                "has no NVIDIA driver library (libcuda.so.1: cannot open shared object file"
            )
            && said.contains(&format!("`ch-fromhost --nvidia {image_arg}`"))
            && said.contains("starting the workers"),
        "the leader says the finding is the job's:\n{said}"
    );
    assert_eq!(
        ran(&out),
        ["0", "1", "2", "3", "4", "5"],
        "every worker of every node ran:\n{said}"
    );
}
