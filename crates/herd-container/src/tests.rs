use super::*;

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A folder image with `dirs` inside and `/ch/environment` of `vars`.
fn folder_image(dirs: &[&str], vars: &str) -> tempfile::TempDir {
    let img = tempfile::tempdir().expect("tempdir");
    for d in ["usr/bin", "bin", "ch", "home", "mnt/0"].iter().chain(dirs) {
        std::fs::create_dir_all(img.path().join(d)).expect("mkdir");
    }
    std::fs::write(img.path().join("ch/environment"), vars).expect("environment");
    img
}

/// A PATH with a fake `ch-run` (never run: only found).
fn path_with(programs: &[&str]) -> (tempfile::TempDir, OsString) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    for p in programs {
        let f = dir.path().join(p);
        std::fs::write(&f, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let path = dir.path().as_os_str().to_owned();
    (dir, path)
}

#[test]
fn runtimes_are_read_by_name_and_alias() {
    for (s, r) in [
        ("charliecloud", Runtime::Charliecloud),
        ("ch-run", Runtime::Charliecloud),
        ("Podman", Runtime::Podman),
        ("apptainer", Runtime::Apptainer),
        ("singularity", Runtime::Apptainer),
        ("pyxis", Runtime::Pyxis),
    ] {
        assert_eq!(s.parse::<Runtime>(), Ok(r), "{s}");
    }
    let err = "docker".parse::<Runtime>().expect_err("refused");
    assert!(
        err.contains("charliecloud, podman, apptainer or pyxis"),
        "{err}"
    );
    for r in Runtime::ALL {
        assert_eq!(r.name().parse::<Runtime>(), Ok(r));
    }
}

#[test]
fn mounts_are_written_as_pyxis_writes_them() {
    let m: Mounts = "/data:/data:ro, /scratch/me:/mnt/0,/opt/x"
        .parse()
        .expect("parses");
    assert_eq!(
        m.0,
        vec![
            Mount {
                src: "/data".into(),
                dst: "/data".into(),
                read_only: true
            },
            Mount {
                src: "/scratch/me".into(),
                dst: "/mnt/0".into(),
                read_only: false
            },
            Mount {
                src: "/opt/x".into(),
                dst: "/opt/x".into(),
                read_only: false
            },
        ]
    );
    assert_eq!(m.to_string(), "/data:/data:ro,/scratch/me:/mnt/0,/opt/x");
    assert_eq!(m.to_string().parse::<Mounts>(), Ok(m));
    for (bad, says) in [
        ("data:/data", "source `data` is not an absolute path"),
        ("/data:x", "destination `x` is not an absolute path"),
        ("/a:/b:rx", "unknown flag `rx`"),
        ("/a:/b:ro:x", "too many `:`"),
    ] {
        let err = bad.parse::<Mounts>().expect_err("refused");
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[test]
fn the_image_kind_is_read_from_what_is_there() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert_eq!(ImageKind::of(dir.path()), Ok(ImageKind::Directory));
    let sqfs = dir.path().join("img.data");
    std::fs::write(&sqfs, b"hsqs and more").expect("write");
    assert_eq!(ImageKind::of(&sqfs), Ok(ImageKind::SquashFs));
    let sif = dir.path().join("img.sif");
    std::fs::write(&sif, b"#!/usr/bin/env run-singularity").expect("write");
    assert_eq!(ImageKind::of(&sif), Ok(ImageKind::Sif));
    let other = dir.path().join("img.tar");
    std::fs::write(&other, b"not an image").expect("write");
    let err = ImageKind::of(&other).expect_err("refused");
    assert!(
        err.contains("neither a folder, a SquashFS file nor a SIF file"),
        "{err}"
    );
    let err = ImageKind::of(&dir.path().join("missing")).expect_err("refused");
    assert!(err.contains("cannot be read here"), "{err}");
}

#[test]
fn the_runtime_is_the_first_the_node_has_that_herd_can_start() {
    let (_d, path) = path_with(&["podman", "apptainer", "ch-run"]);
    assert_eq!(detect(Some(&path)), Ok(Runtime::Charliecloud));
    let (_d, path) = path_with(&["podman", "singularity"]);
    assert_eq!(detect(Some(&path)), Ok(Runtime::Apptainer));
    let (_d, path) = path_with(&["podman", "enroot"]);
    assert_eq!(detect(Some(&path)), Ok(Runtime::Podman));
    let (_d, path) = path_with(&["enroot"]);
    assert_eq!(detect(Some(&path)), Ok(Runtime::Pyxis));
    let (_d, path) = path_with(&["docker"]);
    let err = detect(Some(&path)).expect_err("refused");
    assert!(err.contains("no container runtime here"), "{err}");
}

#[test]
fn herds_variables_win_over_the_images_and_user_site_is_off_unless_set() {
    let image = [
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("RANK".to_owned(), "99".to_owned()),
        ("MASTER_ADDR".to_owned(), "wrong".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ];
    let herd = env(&[("RANK", "3"), ("MASTER_ADDR", "gpu-a01")]);
    let got = worker_env(&image, &herd, |_| false);
    assert_eq!(got["RANK"], "3");
    assert_eq!(got["MASTER_ADDR"], "gpu-a01");
    assert_eq!(got["PATH"], "/usr/bin:/bin", "the image's PATH");
    assert_eq!(got["LANG"], "C.UTF-8");
    assert_eq!(got["PYTHONNOUSERSITE"], "1");
    let got = worker_env(&image, &herd, |v| v == "PYTHONNOUSERSITE");
    assert!(!got.contains_key("PYTHONNOUSERSITE"), "the job's own kept");
}

#[test]
fn charliecloud_binds_each_folder_at_its_path_or_its_deepest_ancestor_the_image_has() {
    let img = folder_image(&["work/exps"], "PATH=/usr/bin:/bin\nRANK=99\n# note\n\n");
    let (_d, path) = path_with(&["ch-run"]);
    let spec = Spec {
        image: img.path().display().to_string(),
        runtime: None,
        mounts: vec![Mount {
            src: "/data/set".into(),
            dst: "/mnt/0".into(),
            read_only: false,
        }],
    };
    let c = Container::start(&spec, Some(&path), "t", &Node::default()).expect("starts");
    assert_eq!(c.runtime(), Runtime::Charliecloud);
    let herd = env(&[("RANK", "1")]);
    let need = [
        PathBuf::from("/work/exps/job/logs"),
        PathBuf::from("/work/exps/job"),
        PathBuf::from("/home/alice/ckpt"),
        PathBuf::from("/tmp/scratch"),
    ];
    let w = c
        .wrap(
            &os(&["python3", "train.py", "--lr", "0.1"]),
            &herd,
            |_| true,
            Path::new("/home/alice/proj"),
            &need,
        )
        .expect("wraps");
    assert_eq!(w.program, PathBuf::from(&path).join("ch-run"));
    let root = img.path().display().to_string();
    assert_eq!(
        w.args,
        os(&[
            "-b",
            "/home:/home",
            "-b",
            "/work/exps:/work/exps",
            "-b",
            "/data/set:/mnt/0",
            "-c",
            "/home/alice/proj",
            &root,
            "--",
            "python3",
            "train.py",
            "--lr",
            "0.1",
        ])
    );
    assert_eq!(w.env["RANK"], "1");
    assert_eq!(w.env["PATH"], "/usr/bin:/bin");
    assert!(!w.env.contains_key("PYTHONNOUSERSITE"), "the host sets it");
}

#[test]
fn charliecloud_names_the_folder_an_image_lacks_and_refuses_to_cover_system_ones() {
    let img = folder_image(&[], "");
    let (_d, path) = path_with(&["ch-run"]);
    let wrap = |cwd: &str, mounts: Vec<Mount>| {
        let spec = Spec {
            image: img.path().display().to_string(),
            runtime: Some(Runtime::Charliecloud),
            mounts,
        };
        let c = Container::start(&spec, Some(&path), "t", &Node::default()).expect("starts");
        c.wrap(
            &os(&["python3"]),
            &BTreeMap::new(),
            |_| true,
            Path::new(cwd),
            &[],
        )
    };
    let err = wrap("/lustre/proj", Vec::new()).expect_err("refused");
    assert!(
        err.contains("has no /lustre for /lustre/proj") && err.contains("mkdir -p"),
        "{err}"
    );
    let err = wrap("/usr/local/proj", Vec::new()).expect_err("refused");
    assert!(
        err.contains("has no /usr/local for /usr/local/proj"),
        "{err}"
    );
    let ro = Mount {
        src: "/data".into(),
        dst: "/mnt/0".into(),
        read_only: true,
    };
    let err = wrap("/tmp/x", vec![ro]).expect_err("refused");
    assert!(err.contains("cannot be read-only"), "{err}");
    let missing = Mount {
        src: "/data".into(),
        dst: "/data".into(),
        read_only: false,
    };
    let err = wrap("/tmp/x", vec![missing]).expect_err("refused");
    assert!(err.contains("has no /data"), "{err}");
}

#[test]
fn a_missing_runtime_or_one_that_cannot_run_the_image_is_named() {
    let img = folder_image(&[], "");
    let (_d, path) = path_with(&["podman", "enroot"]);
    for (runtime, says) in [
        (
            Runtime::Pyxis,
            "pyxis runs a SquashFS file (enroot's .sqsh) or an image name",
        ),
        (Runtime::Charliecloud, "`ch-run` is not on this node's PATH"),
    ] {
        let spec = Spec {
            image: img.path().display().to_string(),
            runtime: Some(runtime),
            mounts: Vec::new(),
        };
        let err = Container::start(&spec, Some(&path), "t", &Node::default()).expect_err("refused");
        assert!(err.contains(says), "{runtime}: {err}");
    }
    let (_d, path) = path_with(&["ch-run"]);
    let mut spec = Spec {
        image: "relative/img".into(),
        runtime: None,
        mounts: Vec::new(),
    };
    let err = Container::start(&spec, Some(&path), "t", &Node::default()).expect_err("refused");
    assert!(
        err.contains("`podman` is not on this node's PATH"),
        "a name is Podman's: {err}"
    );
    spec.runtime = Some(Runtime::Charliecloud);
    let err = Container::start(&spec, Some(&path), "t", &Node::default()).expect_err("refused");
    assert!(
        err.contains("charliecloud runs an image folder or file")
            && err.contains("--container-runtime podman"),
        "a name is Podman's: {err}"
    );
    for bad in ["img.sqfs", "./img", "images/train.sif", "~/img", "a b", ""] {
        let err = image_ref(bad).expect_err(bad);
        assert!(err.contains("not an absolute path"), "{bad}: {err}");
    }
    for good in [
        "/abs/img.sqfs",
        "localhost/herd-bed-torch:bookworm",
        "nvcr.io/nvidia/pytorch:24.05-py3",
        "python@sha256:0123abcd",
        "ubuntu",
    ] {
        assert_eq!(image_ref(good), Ok(()), "{good}");
    }
    assert_eq!(runtime_for("ubuntu", None), Ok(Some(Runtime::Podman)));
    assert_eq!(runtime_for("/img", None), Ok(None));
    assert!(runtime_for("ubuntu", Some(Runtime::Apptainer)).is_err());
}

#[test]
fn podman_runs_one_guarded_container_with_the_hosts_namespaces_and_never_pulls() {
    use crate::podman::{run_args, Gpus, Image, GUARD};
    let a = strs(&run_args(
        "herd-r1-7-0",
        Path::new("/tmp/herd-podman-r1-7/herd-r1-7-0.pid"),
        &Image::Name("localhost/torch:24".into()),
        &[
            PathBuf::from("/lustre/me"),
            PathBuf::from("/tmp/herd-podman-r1-7"),
        ],
        &[Mount {
            src: "/data".into(),
            dst: "/mnt/data".into(),
            read_only: true,
        }],
        Gpus::Cdi,
        true,
        Path::new("/tmp/herd-podman-r1-7/guard"),
    ));
    let want: Vec<String> = [
        "run",
        "--detach",
        "--rm",
        "--name",
        "herd-r1-7-0",
        "--pidfile",
        "/tmp/herd-podman-r1-7/herd-r1-7-0.pid",
        "--pid",
        "host",
        "--ipc",
        "host",
        "--network",
        "host",
        "--uts",
        "host",
        "--pull",
        "never",
        "--log-driver",
        "none",
        "--device",
        "nvidia.com/gpu=all",
        "--volume",
        "/lustre/me:/lustre/me",
        "--volume",
        "/tmp/herd-podman-r1-7:/tmp/herd-podman-r1-7",
        "--volume",
        "/data:/mnt/data:ro",
        "localhost/torch:24",
        "/bin/sh",
        "-c",
        GUARD,
        "/tmp/herd-podman-r1-7/guard",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(a, want);
    // Rootless, no GPU, a root folder: the user's own ids, no device, an overlay on it.
    let a = strs(&run_args(
        "n",
        Path::new("/p"),
        &Image::Rootfs("/images/torch".into()),
        &[],
        &[],
        Gpus::None,
        false,
        Path::new("/f"),
    ));
    let joined = a.join(" ");
    assert!(joined.contains("--userns keep-id"), "{joined}");
    assert!(!joined.contains("--device"), "{joined}");
    assert!(
        joined.contains("--rootfs /images/torch:O /bin/sh -c"),
        "{joined}"
    );
}

#[test]
fn podman_execs_each_worker_by_a_wrapper_that_says_its_pid_and_passes_variables_by_name() {
    use crate::podman::{exec_args, PID_WRAPPER};
    let a = strs(&exec_args(
        "herd-r1-7-0",
        Path::new("/lustre/me/proj"),
        &["RANK".into(), "MASTER_ADDR".into()],
        Path::new("/tmp/herd-podman-r1-7/worker-1.pid"),
        &os(&["python3", "-u", "train.py", "--lr", "1e-3; rm -rf /"]),
    ));
    assert_eq!(
        a,
        [
            "exec",
            "--workdir",
            "/lustre/me/proj",
            "--env",
            "RANK",
            "--env",
            "MASTER_ADDR",
            "herd-r1-7-0",
            "/bin/sh",
            "-c",
            PID_WRAPPER,
            "/tmp/herd-podman-r1-7/worker-1.pid",
            "python3",
            "-u",
            "train.py",
            "--lr",
            "1e-3; rm -rf /",
        ]
    );
    // The wrapper really execs its arguments as they are, never evaluating one, and
    // writes its own pid, which is then the worker's.
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("w.pid");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", PID_WRAPPER])
        .arg(&pid_file)
        .args(["/bin/sh", "-c", "echo $$ \"$1\"", "x", "a b; $(false) *"])
        .output()
        .expect("sh");
    let said = String::from_utf8_lossy(&out.stdout);
    let written = std::fs::read_to_string(&pid_file).expect("pid file");
    assert!(written.ends_with('\n'), "{written:?}");
    assert_eq!(said, format!("{} a b; $(false) *\n", written.trim()));
}

#[test]
fn the_podman_guard_kills_only_its_own_containers_processes() {
    use crate::podman::GUARD;
    // Outside any container (no libpod cgroup) it kills nothing and ends when the FIFO's
    // writer is gone.
    let dir = tempfile::tempdir().expect("tempdir");
    let sub = dir.path().join("run");
    std::fs::create_dir(&sub).expect("dir");
    let fifo = sub.join("guard");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .expect("open");
    let mut bystander = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let mut guard = std::process::Command::new("/bin/sh")
        .args(["-c", GUARD])
        .arg(&fifo)
        .spawn()
        .expect("guard");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        guard.try_wait().expect("wait").is_none(),
        "waits on the FIFO"
    );
    drop(writer);
    let status = guard.wait().expect("wait");
    assert!(status.success(), "{status}");
    assert!(
        bystander.try_wait().expect("wait").is_none(),
        "a process outside its container lives on"
    );
    let _ = bystander.kill();
    let _ = bystander.wait();
}

#[test]
fn podman_env_lines_parse_as_pairs() {
    assert_eq!(
        crate::podman::parse_env_lines("PATH=/usr/bin:/bin\nRANK=99\nA=b=c\n\n"),
        [
            ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ("RANK".to_owned(), "99".to_owned()),
            ("A".to_owned(), "b=c".to_owned()),
        ]
    );
}

fn strs(a: &[OsString]) -> Vec<String> {
    a.iter().map(|s| s.to_string_lossy().into_owned()).collect()
}

#[test]
fn apptainer_execs_with_nv_binds_pwd_and_herds_variables_as_apptainerenv() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sif = dir.path().join("train.sif");
    std::fs::write(&sif, b"#!/usr/bin/env run-singularity\n").expect("write");
    let (_d, path) = path_with(&["apptainer"]);
    let spec = Spec {
        image: sif.display().to_string(),
        runtime: Some(Runtime::Apptainer),
        mounts: vec![Mount {
            src: "/data".into(),
            dst: "/data".into(),
            read_only: true,
        }],
    };
    let c = Container::start(&spec, Some(&path), "t", &Node::default()).expect("starts");
    let herd = env(&[("RANK", "5"), ("CUDA_VISIBLE_DEVICES", "0,1")]);
    let w = c
        .wrap(
            &os(&["python", "-m", "train"]),
            &herd,
            |_| false,
            Path::new("/lustre/me/proj"),
            &[
                PathBuf::from("/lustre/me/exps/j"),
                PathBuf::from("/lustre/me/exps/j/logs"),
            ],
        )
        .expect("wraps");
    assert_eq!(w.program, PathBuf::from(&path).join("apptainer"));
    assert_eq!(
        w.args,
        os(&[
            "exec",
            "--nv",
            "--bind",
            "/lustre/me/exps/j,/data:/data:ro",
            "--pwd",
            "/lustre/me/proj",
            &sif.display().to_string(),
            "python",
            "-m",
            "train",
        ])
    );
    assert_eq!(w.env["APPTAINERENV_RANK"], "5");
    assert_eq!(w.env["APPTAINERENV_PYTHONNOUSERSITE"], "1");
    assert_eq!(w.env["RANK"], "5");
    // No GPU: no --nv.
    let w = c
        .wrap(&os(&["python"]), &env(&[]), |_| false, Path::new("/p"), &[])
        .expect("wraps");
    assert!(!w.args.contains(&OsString::from("--nv")), "{:?}", w.args);
}

#[test]
fn podman_folders_of_dead_agents_are_removed_and_live_ones_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let live = tmp
        .path()
        .join(format!("herd-podman-run-1-{}", std::process::id()));
    // Far above any pid_max: no such process.
    let dead = tmp.path().join("herd-podman-run-2-999999999");
    let other = tmp.path().join("herd-image-run-3-999999999");
    for d in [&live, &dead, &other] {
        std::fs::create_dir(d).expect("dir");
        std::fs::write(d.join("worker-0.pid"), "1\n").expect("file");
    }
    crate::podman::remove_abandoned_folders(tmp.path());
    assert!(live.exists(), "a running agent's folder stays");
    assert!(!dead.exists(), "a dead agent's folder goes");
    assert!(other.exists(), "what is not Podman's stays");
}

/// A fake `srun` on a PATH, whose `--help` has Pyxis' options when `pyxis`.
fn path_with_srun(pyxis: bool) -> (tempfile::TempDir, OsString) {
    use std::os::unix::fs::PermissionsExt;
    let (dir, path) = path_with(&["enroot"]);
    let help = if pyxis {
        "      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH"
    } else {
        "      --overlap"
    };
    let srun = dir.path().join("srun");
    std::fs::write(&srun, format!("#!/bin/sh\necho '{help}'\n")).expect("write");
    std::fs::set_permissions(&srun, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (dir, path)
}

#[test]
fn pyxis_needs_a_slurm_job_step_and_an_srun_with_pyxis() {
    let spec = Spec {
        image: "nvcr.io#nvidia/pytorch:24.05-py3".into(),
        runtime: Some(Runtime::Pyxis),
        mounts: Vec::new(),
    };
    let in_job = Node {
        gpus: true,
        job_id: Some(41),
        host: Some("gpu-a02".into()),
        cpus_per_worker: Some(8),
    };
    let (_d, path) = path_with_srun(true);
    let err = Container::start(&spec, Some(&path), "t", &Node::default()).expect_err("refused");
    assert!(err.contains("only in a SLURM job step"), "{err}");
    let (_d, path) = path_with_srun(false);
    let err = Container::start(&spec, Some(&path), "t", &in_job).expect_err("refused");
    assert!(
        err.contains("has no --container-image: Pyxis is not installed"),
        "{err}"
    );
    let (_d, path) = path_with_srun(true);
    let tag = format!("r9-{}", std::process::id());
    let c = Container::start(&spec, Some(&path), &tag, &in_job).expect("starts");
    let w = c
        .wrap(
            &os(&["python3", "train.py"]),
            &env(&[("RANK", "3"), ("HERD_JOB_SECRET", "s")]),
            |_| false,
            Path::new("/lustre/me/proj"),
            &[PathBuf::from("/lustre/me/exps/run1")],
        )
        .expect("wraps");
    assert!(w.program.ends_with("srun"), "{w:?}");
    assert!(
        w.env.is_empty(),
        "srun runs in the agent's environment: {w:?}"
    );
    assert!(w.signal_as_code, "srun exits 128 + N for signal N");
    let args = strs(&w.args);
    let joined = args.join(" ");
    assert!(
        joined.starts_with("--jobid=41 --overlap --nodelist=gpu-a02 --nodes=1 --ntasks=1"),
        "{joined}"
    );
    assert!(joined.contains("--cpus-per-task=8"), "{joined}");
    assert!(
        joined.contains(&format!("--container-name=herd-{tag} ")),
        "one container per agent, shared by its steps: {joined}"
    );
    assert!(
        args.contains(&"RANK=3".to_owned()) && args.contains(&"PYTHONNOUSERSITE=1".to_owned()),
        "{joined}"
    );
    assert!(
        !joined.contains("HERD_JOB_SECRET"),
        "never the secret: {joined}"
    );
    let pid_file = w.pid_file.expect("a pid file");
    assert!(
        joined.contains(&format!(
            "--container-mounts=/lustre/me/exps/run1:/lustre/me/exps/run1,\
             /lustre/me/proj:/lustre/me/proj,{d}:{d} ",
            d = pid_file.parent().expect("dir").display()
        )),
        "{joined}"
    );
    drop(c);
    assert!(
        !pid_file.parent().expect("dir").exists(),
        "its folder goes with it"
    );
}

#[test]
fn pyxis_starts_each_worker_as_a_step_with_herds_variables_set_last() {
    use crate::pyxis::{srun_args, Step};
    let step = Step {
        job_id: 1234,
        host: "gpu-b07",
        cpus_per_worker: Some(12),
        image: "/shared/images/pytorch.sqsh",
        name: "herd-1234-77",
    };
    let a = strs(
        &srun_args(
            &step,
            Path::new("/lustre/me/proj"),
            &[
                PathBuf::from("/lustre/me"),
                PathBuf::from("/tmp/herd-pyxis-1234-77"),
            ],
            &[Mount {
                src: "/datasets".into(),
                dst: "/data".into(),
                read_only: true,
            }],
            &env(&[
                ("MASTER_ADDR", "10.0.0.7"),
                ("RANK", "5"),
                ("LOCAL_RANK", "1"),
                ("CUDA_VISIBLE_DEVICES", "1"),
            ]),
            Path::new("/tmp/herd-pyxis-1234-77/worker-3.pid"),
            &os(&["python3", "-m", "train", "--lr", "1e-3; rm -rf /"]),
        )
        .expect("a command line"),
    );
    let want: Vec<String> = [
        "--jobid=1234",
        "--overlap",
        "--nodelist=gpu-b07",
        "--nodes=1",
        "--ntasks=1",
        "--ntasks-per-node=1",
        "--cpus-per-task=12",
        "--mem=0",
        "--quiet",
        "--container-image=/shared/images/pytorch.sqsh",
        "--container-name=herd-1234-77",
        "--container-workdir=/lustre/me/proj",
        "--container-mounts=/lustre/me:/lustre/me,/tmp/herd-pyxis-1234-77:/tmp/herd-pyxis-1234-77,/datasets:/data:ro",
        "--no-container-mount-home",
        "/bin/sh",
        "-c",
        crate::podman::PID_WRAPPER_ENV,
        "/tmp/herd-pyxis-1234-77/worker-3.pid",
        "CUDA_VISIBLE_DEVICES=1",
        "LOCAL_RANK=1",
        "MASTER_ADDR=10.0.0.7",
        "RANK=5",
        "python3",
        "-m",
        "train",
        "--lr",
        "1e-3; rm -rf /",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(a, want);

    // The wrapper sets the variables over what the step had, then execs the worker in
    // place with its arguments as they are, never evaluated.
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("w.pid");
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", crate::podman::PID_WRAPPER_ENV])
        .arg(&pid_file)
        .args([
            "RANK=5",
            "SLURM_PROCID=5",
            "/bin/sh",
            "-c",
            "echo $$ $RANK $SLURM_PROCID \"$1\"",
            "x",
            "a; $(false)",
        ])
        .env("RANK", "0")
        .env("SLURM_PROCID", "0")
        .output()
        .expect("sh");
    let written = std::fs::read_to_string(&pid_file).expect("pid file");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{} 5 5 a; $(false)\n", written.trim())
    );

    // What `env` cannot take is refused, naming it.
    let bad_env = env(&[("NOTE", "two\nlines")]);
    let err = srun_args(
        &step,
        Path::new("/p"),
        &[],
        &[],
        &bad_env,
        Path::new("/f"),
        &os(&["python3"]),
    )
    .expect_err("refused");
    assert!(
        err.contains("`NOTE` cannot be given to a worker through Pyxis"),
        "{err}"
    );
    let err = srun_args(
        &step,
        Path::new("/p"),
        &[],
        &[],
        &env(&[]),
        Path::new("/f"),
        &os(&["A=b", "x"]),
    )
    .expect_err("refused");
    assert!(err.contains("has `=` in its name"), "{err}");
    let err = srun_args(
        &step,
        Path::new("/p"),
        &[PathBuf::from("/a,b")],
        &[],
        &env(&[]),
        Path::new("/f"),
        &os(&["python3"]),
    )
    .expect_err("refused");
    assert!(err.contains("comma"), "{err}");
}
