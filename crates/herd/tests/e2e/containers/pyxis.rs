//! Pyxis' job steps on the bed, with its container part stood in (the bed has no Pyxis).

use std::time::Duration;

use herd_testbed::{bed_image, bed_image_squashfs, read_lossy, Bed};

use super::{a_segfault_is_reported_as_sigsegv, env_line, in_image};
use crate::staying_alive::{args, checksum, project, reference_run, wait_final};
use crate::support::job_id;

/// Pyxis' side of a job on the bed, which has no Pyxis: an `srun` on the job's PATH stands in
/// for Pyxis' srun (it drops the `--container-*` options and runs the real srun, so the
/// worker runs on the host, in the test venv), with a no-op `enroot` beside it. Everything
/// else is real: on 2 nodes × 2 workers each worker is a one-task step of its own, started
/// by its node's agent with `srun --overlap` (four step ids); herd's variables, set by
/// `env` last, win over the step's own (`SLURM_PROCID=0`); the training reaches the checksum of the same run
/// without SLURM; a worker that dies of SIGSEGV is reported as SIGSEGV (srun's exit code
/// 139 read as the signal); nothing is left on any node.
#[test]
fn pyxis_workers_run_as_steps_of_their_own_with_herds_variables_set_last() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let squashfs = bed_image_squashfs(&image);
    let (project, exps) = project(&bed, "containers_pyxis");
    let exp_root = exps.display().to_string();
    let shim = exps.join("pyxis-shim");
    std::fs::create_dir_all(&shim).expect("shim dir");
    let real_srun = String::from_utf8_lossy(
        &std::process::Command::new("sh")
            .args(["-c", "command -v srun"])
            .output()
            .expect("sh")
            .stdout,
    )
    .trim()
    .to_owned();
    assert!(real_srun.starts_with('/'), "srun on PATH: {real_srun:?}");
    let srun = format!(
        "#!/bin/sh\n\
         # Pyxis stood in: srun less its --container-* options (those before the\n\
         # command; its own are all --name=value).\n\
         if [ \"$1\" = --help ]; then\n\
         \x20   {real_srun} --help\n\
         \x20   echo '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n\
         \x20   exit 0\n\
         fi\n\
         cmd=\n\
         for a do\n\
         \x20   shift\n\
         \x20   if [ -z \"$cmd\" ]; then\n\
         \x20       case $a in\n\
         \x20       --container-*|--no-container-*) continue ;;\n\
         \x20       -*) ;;\n\
         \x20       *) cmd=1 ;;\n\
         \x20       esac\n\
         \x20   fi\n\
         \x20   set -- \"$@\" \"$a\"\n\
         done\n\
         exec {real_srun} \"$@\"\n"
    );
    herd_testbed::write_file(&shim.join("srun"), &srun, 0o755).expect("srun shim");
    herd_testbed::write_file(&shim.join("enroot"), "#!/bin/sh\nexit 0\n", 0o755).expect("enroot");
    let venv_bin = bed.python().parent().expect("venv bin").to_path_buf();
    let path = format!(
        "{}:{}:{}",
        shim.display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let python = bed.python().display().to_string();
    let submit_here =
        |args: &[&str]| crate::support::herd_with_path("submit", &project, args, &path);

    let train = ["--steps", "30", "--log-every", "10"];
    let said = format!(
        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
         SLURM_PROCID=$SLURM_PROCID NOUSERSITE=$PYTHONNOUSERSITE STEP=$SLURM_STEP_ID\"; \
         exec {python} train_ddp.py {}",
        train.join(" ")
    );
    let sqfs = squashfs.display().to_string();
    let common = in_image(
        &[
            "-J",
            "steps",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--time",
            "5",
            "--container-runtime",
            "pyxis",
        ],
        &sqfs,
    );
    let job = job_id(&submit_here(&args(
        &common,
        &exp_root,
        &["sh", "-c", &said],
    )));
    let mut full = vec!["python", "train_ddp.py"];
    full.extend(train);
    let reference = reference_run(&bed, &project, &exps, &full);
    let exp = exps.join("steps");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(
        info.succeeded(),
        "{info:?}\n{out}\n{}",
        read_lossy(exp.join(format!("logs/{job}.err")))
    );
    assert_eq!(
        checksum(&out),
        checksum(&reference),
        "the run without SLURM"
    );
    let mut steps = std::collections::BTreeSet::new();
    for rank in 0..4u32 {
        let log = read_lossy(exp.join(format!("logs/attempt-0/rank-{rank}.out")));
        let env = env_line(&log);
        assert_eq!(env["RANK"], rank.to_string(), "{log}");
        assert_eq!(env["LOCAL_RANK"], (rank % 2).to_string(), "{log}");
        assert_eq!(env["WORLD_SIZE"], "4", "{log}");
        assert_eq!(
            env["SLURM_PROCID"],
            rank.to_string(),
            "herd's, not the one-task step's 0: {log}"
        );
        assert_eq!(env["NOUSERSITE"], "1", "{log}");
        steps.insert(env["STEP"].clone());
    }
    assert_eq!(
        steps.len(),
        4,
        "each worker in a job step of its own, not its agent's: {steps:?}"
    );

    // --- a worker that dies of SIGSEGV --------------------------------------------------
    let marker = "herd-e2e-pyxis-segv";
    a_segfault_is_reported_as_sigsegv(
        &bed,
        &exps,
        &submit_here,
        &["--container-runtime", "pyxis", "--container", &sqfs],
        &python,
        marker,
    );
    for needle in [marker, "train_ddp.py"] {
        let left = bed
            .node_processes(needle)
            .expect("the nodes' process tables");
        assert!(left.is_empty(), "left running: {left:#?}");
    }
}
