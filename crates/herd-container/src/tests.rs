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
    let (_d, path) = path_with(&["podman"]);
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
    let c = Container::start(&spec, Some(&path), "t").expect("starts");
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
        let c = Container::start(&spec, Some(&path), "t").expect("starts");
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
fn a_runtime_herd_cannot_start_yet_or_a_missing_one_is_named() {
    let img = folder_image(&[], "");
    let (_d, path) = path_with(&["podman"]);
    for (runtime, says) in [
        (Runtime::Podman, "does not start workers with podman yet"),
        (Runtime::Pyxis, "does not start workers through pyxis yet"),
        (Runtime::Charliecloud, "`ch-run` is not on this node's PATH"),
    ] {
        let spec = Spec {
            image: img.path().display().to_string(),
            runtime: Some(runtime),
            mounts: Vec::new(),
        };
        let err = Container::start(&spec, Some(&path), "t").expect_err("refused");
        assert!(err.contains(says), "{runtime}: {err}");
    }
    let (_d, path) = path_with(&["ch-run"]);
    let spec = Spec {
        image: "relative/img".into(),
        runtime: None,
        mounts: Vec::new(),
    };
    let err = Container::start(&spec, Some(&path), "t").expect_err("refused");
    assert!(err.contains("not an absolute path"), "{err}");
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
    let c = Container::start(&spec, Some(&path), "t").expect("starts");
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
