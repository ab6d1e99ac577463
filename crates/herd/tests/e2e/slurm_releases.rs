//! What differs between Slurm releases, on whichever release the bed runs (`testbed/up
//! --slurm`; `scripts/test-all` runs these on 22.05, 24.11 and 26.05): herd says and records
//! the release, and its steps never lean on what a child srun inherits
//! (docs/slurm.md).

use std::process::Command;
use std::time::Duration;

use herd_testbed::Bed;
use serde_json::Value;

use crate::submit::{project, submit_true};
use crate::support::{herd_run, herd_with_path, job_id, wait_ok, Job};

/// The release `sinfo --version` (the client on PATH) reports: `26.05.5`.
fn sinfo_version() -> String {
    let out = Command::new("sinfo")
        .arg("--version")
        .output()
        .expect("sinfo runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().nth(1).unwrap_or_default();
    assert!(
        out.status.success() && !version.is_empty(),
        "sinfo --version: {out:?}"
    );
    version.to_owned()
}

/// `herd check` prints the release, and each submission's manifest entry records it.
#[test]
fn herd_check_and_the_manifest_name_the_slurm_release_that_runs() {
    let bed = Bed::require();
    let release = sinfo_version();
    let (project, exps) = project(&bed, "slurm_release_named");
    let exp_root = exps.display().to_string();
    let path = std::env::var("PATH").unwrap_or_default();
    let check = herd_with_path(
        "check",
        &project,
        &["--nodes", "1", "--exp-root", &exp_root, "--", "true"],
        &path,
    );
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && stdout.contains(&format!("Slurm {release} (scontrol --version)")),
        "herd check must name Slurm {release}:\n{stdout}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let job = job_id(&submit_true(&bed, &project, &exp_root, "named", &[]));
    wait_ok(&bed, job, &exps.join("named"));
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(herd_exp::ExperimentDir::new(exps.join("named")).manifest())
            .expect("manifest"),
    )
    .expect("manifest is JSON");
    assert_eq!(
        manifest["submissions"][0]["slurm_version"].as_str(),
        Some(release.as_str()),
        "{manifest:#}"
    );
}

/// A job whose two CPU variables disagree, as the controller leaves them when it raises
/// cpus-per-task for `--mem-per-cpu` (`SLURM_CPUS_PER_TASK=4`, `SLURM_TRES_PER_TASK=cpu=2`):
/// from Slurm 23.11 an srun step that gives no `--cpus-per-task` of its own fails ("cpus-per-
/// task set by two different environment variables"). `herd run`'s step gives its own, so
/// the job runs on every release, its workers on both nodes.
#[test]
fn herd_runs_steps_that_say_their_cpus_when_the_jobs_cpu_variables_disagree() {
    let bed = Bed::require();
    let dir = bed.scratch("slurm_release_cpus").expect("scratch");
    let log_dir = dir.join("logs").display().to_string();
    let body = format!(
        "export SLURM_TRES_PER_TASK=cpu=2\n{}\n",
        herd_run(
            &["--nproc-per-node", "1", "--log-dir", &log_dir],
            &[
                "sh".into(),
                "-c".into(),
                "echo \"worker $RANK on $(hostname) cpus=$SLURM_CPUS_PER_TASK\"".into()
            ]
        )
    );
    let job = Job::submit(
        &bed,
        &dir,
        "cpus-disagree",
        &["--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=4"],
        &body,
    );
    let out = job.wait_success(&bed, Duration::from_secs(240));
    for rank in 0..2 {
        assert!(
            out.contains(&format!("worker {rank} on ")),
            "worker {rank} did not run:\n{out}"
        );
    }
    assert!(
        !out.contains("two different environment variables"),
        "{out}"
    );
}
