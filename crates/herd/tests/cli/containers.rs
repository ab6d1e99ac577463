//! The container keys with `herd submit` (fake SLURM commands): a bad image path, runtime
//! or mount list, a runtime or mounts without an image, and a container outside agent mode
//! are refused with exit 2, naming what to change, before anything is written or queued;
//! a good one reaches the batch script's `herd launch` as flags, quoted; a Podman image
//! name is each node's, never looked for on the login node.

use super::submit::{herd_here, slurm_called, submit_project};

/// `herd submit --dry-run` or `herd submit` of one node × 2 workers with `extra` flags.
fn submit(dir: &std::path::Path, dry_run: bool, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["submit"];
    if dry_run {
        args.push("--dry-run");
    }
    args.extend(["-J", "ct", "--nodes", "1", "--gpus-per-node", "2"]);
    args.extend(extra);
    args.extend(["--", "python3", "train.py"]);
    herd_here(dir, &args, &[])
}

#[test]
fn bad_container_keys_are_refused_naming_the_fix_with_nothing_written() {
    let dir = submit_project(&[("train.py", 10)]);
    for (flags, says) in [
        (
            vec!["--container", "images/train.sqfs"],
            "`images/train.sqfs` is not an absolute path: give the image as /path/to/image",
        ),
        (
            vec!["--container", "/i.sqfs", "--container-runtime", "docker"],
            "unknown container runtime `docker`: choose charliecloud, podman, apptainer or pyxis",
        ),
        (
            vec![
                "--container",
                "localhost/torch:24",
                "--container-runtime",
                "charliecloud",
            ],
            "charliecloud runs an image folder or file, and `localhost/torch:24` is an image name: give the image's absolute path, or --container-runtime podman (or pyxis)",
        ),
        (
            vec!["--container", "/i.sqfs", "--container-mounts", "data:/data"],
            "container mount `data:/data`: the source `data` is not an absolute path",
        ),
        (
            vec!["--container-runtime", "charliecloud"],
            "is set but `container` is not: give the image with `container` (--container IMAGE), or remove it",
        ),
        (
            vec!["--container", "/i.sqfs", "--mode", "srun"],
            "runs the workers through herd's agents, and `mode` is srun: use mode agent",
        ),
    ] {
        let out = submit(dir.path(), false, &flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{flags:?}: {out:?}");
    }
    assert!(
        !dir.path().join("project/herd-exp").exists(),
        "no experiment folder"
    );
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "nothing queued"
    );
}

/// An image that is not there is refused by the check (exit 1), nothing written; the
/// worker's program is the image's, so one missing on this machine is no finding.
#[test]
fn a_missing_image_is_refused_and_the_program_is_not_looked_for_here() {
    let dir = submit_project(&[("train.py", 10)]);
    let out = submit(
        dir.path(),
        false,
        &["--container", "/nonexistent/images/train.sqfs"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the container image /nonexistent/images/train.sqfs does not exist here"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("project/herd-exp").exists(),
        "no experiment folder"
    );
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "nothing queued"
    );
}

#[test]
fn a_container_reaches_each_nodes_agent_as_flags() {
    let dir = submit_project(&[("train.py", 10)]);
    let image = dir.path().join("my train.sqfs");
    std::fs::write(&image, "hsqs").expect("image");
    let image = image.display().to_string();
    let out = submit(
        dir.path(),
        true,
        &[
            "--container",
            &image,
            "--container-runtime",
            "charliecloud",
            "--container-mounts",
            "/data:/data:ro,/scratch",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains(&format!(
            "--container '{image}' --container-runtime charliecloud --container-mounts /data:/data:ro,/scratch"
        )),
        "{stdout}"
    );
}

#[test]
fn the_workers_program_is_the_images_not_this_machines() {
    let dir = submit_project(&[("train.py", 10)]);
    let image = dir.path().join("image");
    std::fs::create_dir(&image).expect("image");
    let image = image.display().to_string();
    let args = [
        "check",
        "-J",
        "ct",
        "--container",
        &image,
        "--",
        "herd-python-only-in-the-image",
        "train.py",
    ];
    let out = herd_here(dir.path(), &args, &[]);
    assert!(out.status.success(), "{out:?}");
    let without = herd_here(
        dir.path(),
        &["check", "-J", "ct", "--", "herd-python-only-in-the-image"],
        &[],
    );
    assert_eq!(without.status.code(), Some(1), "{without:?}");
}

/// A Podman image is a name in each node's store: the login node's check does not look for
/// it (each node's preflight does), and it reaches the agents as given.
#[test]
fn a_podman_image_name_is_left_to_the_nodes() {
    let dir = submit_project(&[("train.py", 10)]);
    let out = submit(
        dir.path(),
        true,
        &["--container", "nvcr.io/nvidia/pytorch:24.05-py3"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stdout.contains("--container nvcr.io/nvidia/pytorch:24.05-py3"),
        "{stdout}"
    );
}
