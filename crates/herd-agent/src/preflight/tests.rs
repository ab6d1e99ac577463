//! The preflight's checks against real processes, files and sockets: a Python with torch
//! (the torch venv, `testbed/venv`) and one without (a bare venv made here), programs that
//! are missing or not executable, a fake `nvidia-smi`, folders root cannot write, a closed
//! port and a held one.

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::*;
use crate::config::{Config, KeepAlive};

/// The torch venv's python, from `testbed/venv` (as the bed's tests find it). Tests never
/// skip: without it they fail, saying how to make it.
fn torch_python() -> PathBuf {
    herd_testbed::venv_python().unwrap_or_else(|e| panic!("testbed/venv could not make the test venv ({e}): run `testbed/venv` by hand (scripts/test-all sets everything up)"))
}

/// A fresh venv without torch (nor pip) in `dir`, made by the `python3` on PATH: its
/// `bin/python`.
fn bare_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("bare");
    let status = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap_or_else(|e| panic!("these tests need python3 with its venv module on PATH: {e}"));
    assert!(status.success(), "python3 -m venv failed: {status}");
    venv.join("bin/python")
}

/// `text` written to `path`, executable.
fn executable_file(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_owned()
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The finding, or a panic naming what passed.
fn finding<T: std::fmt::Debug>(r: Result<T, Finding>, what: &str) -> Finding {
    match r {
        Err(f) => {
            println!("{what}: {f}");
            f
        }
        Ok(v) => panic!("{what}: no finding ({v:?})"),
    }
}

#[test]
fn python_arguments_are_read_as_python_reads_them() {
    let read = |args: &[&str]| {
        let (options, module, script) = python_args(&os(args));
        let options: Vec<String> = options
            .iter()
            .map(|o| o.to_string_lossy().into_owned())
            .collect();
        (options, module, script)
    };
    let none: Vec<String> = Vec::new();
    assert_eq!(
        read(&["train.py", "--lr", "1"]),
        (none.clone(), None, Some(PathBuf::from("train.py")))
    );
    assert_eq!(
        read(&["-u", "-W", "ignore", "-X", "dev", "train.py"]),
        (none.clone(), None, Some(PathBuf::from("train.py")))
    );
    assert_eq!(
        read(&["-uIs", "-Wignore", "a b.py"]),
        (
            vec!["-I".into(), "-s".into()],
            None,
            Some(PathBuf::from("a b.py"))
        )
    );
    assert_eq!(
        read(&[
            "-u",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "x.py"
        ]),
        (none.clone(), Some("torch.distributed.run".into()), None)
    );
    assert_eq!(
        read(&["-Smmypkg.train"]),
        (vec!["-S".into()], Some("mypkg.train".into()), None)
    );
    assert_eq!(
        read(&["-c", "print(1)", "x.py"]),
        (none.clone(), None, None)
    );
    assert_eq!(read(&["-"]), (none.clone(), None, None));
    assert_eq!(
        read(&["-E", "--", "-odd.py"]),
        (vec!["-E".into()], None, Some(PathBuf::from("-odd.py")))
    );
    assert_eq!(
        read(&["--check-hash-based-pycs", "never", "t.py"]),
        (none.clone(), None, Some(PathBuf::from("t.py")))
    );
    assert_eq!(read(&["--version"]), (none, None, None));
}

#[test]
fn programs_resolve_as_the_os_finds_them() {
    let dir = tmp();
    let bin = dir.path().join("bin");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(&other).expect("mkdir");
    let tool = executable_file(&bin.join("tool"), "#!/bin/sh\n");
    std::fs::write(other.join("plain"), "not a program").expect("write");
    let path = std::env::join_paths([&other, &bin]).expect("PATH");
    assert_eq!(resolve(OsStr::new("tool"), Some(&path)), Ok(tool.clone()));
    assert_eq!(
        resolve(tool.as_os_str(), Some(OsStr::new("/nowhere"))),
        Ok(tool)
    );
    // Not executable, even for root (no execute bit at all): said, with where it was.
    let e = resolve(OsStr::new("plain"), Some(&path)).expect_err("plain");
    assert!(e.contains("only as") && e.contains("other/plain"), "{e}");
    assert!(e.contains("chmod +x"), "{e}");
    let e = resolve(OsStr::new("missing-tool"), Some(&path)).expect_err("missing");
    assert!(
        e.contains("`missing-tool` is not on PATH on this node (searched ")
            && e.contains(&*path.to_string_lossy()),
        "{e}"
    );
    let e = resolve(bin.as_os_str(), None).expect_err("a folder");
    assert!(e.contains("is not a file"), "{e}");
}

#[tokio::test]
async fn a_missing_or_unrunnable_program_is_a_command_finding() {
    let dir = tmp();
    let path = OsString::from("/usr/bin:/bin");
    let f = finding(
        check_command(&os(&["herd-no-such-program", "--x"]), Some(&path)).await,
        "missing program",
    );
    assert_eq!(f.check, "command");
    assert!(
        f.detail.contains(
            "`herd-no-such-program` is not on PATH on this node (searched /usr/bin:/bin)"
        ),
        "{f}"
    );

    let plain = dir.path().join("run.sh");
    std::fs::write(&plain, "#!/bin/sh\necho hi\n").expect("write");
    let f = finding(
        check_command(&[plain.clone().into()], Some(&path)).await,
        "not executable",
    );
    assert_eq!(f.check, "command");
    assert!(
        f.detail
            .contains(&format!("`{}` may not be executed", plain.display())),
        "{f}"
    );

    // A script whose interpreter this node lacks: the kernel would refuse it too.
    let script = executable_file(
        &dir.path().join("wrapped"),
        "#!/opt/herd-missing/bin/bash -e\nexit 0\n",
    );
    let f = finding(
        check_command(&[script.clone().into()], Some(&path)).await,
        "missing interpreter",
    );
    assert_eq!(f.check, "command");
    assert!(
        f.detail
            .contains("starts with `#!/opt/herd-missing/bin/bash -e`")
            && f.detail.contains("does not exist on this node"),
        "{f}"
    );

    // Programs that resolve pass: by path, by PATH, a script with a sound `#!` line.
    let ok = executable_file(&dir.path().join("ok.sh"), "#!/bin/sh\nexit 0\n");
    check_command(&[ok.into()], Some(&path))
        .await
        .expect("ok.sh");
    check_command(&os(&["sh", "-c", "true"]), Some(&path))
        .await
        .expect("sh");
}

#[tokio::test]
async fn a_python_without_torch_is_named_with_the_fix() {
    let dir = tmp();
    let bare = bare_venv(dir.path());
    let script = dir.path().join("train.py");
    std::fs::write(&script, "import torch\n").expect("write");
    let script_s = script.to_string_lossy().into_owned();

    // By path: the interpreter and the missing module are named.
    let argv = vec![bare.clone().into(), "-u".into(), script.clone().into()];
    let f = finding(check_command(&argv, None).await, "bare venv by path");
    assert_eq!(f.check, "python");
    assert_eq!(
        f.detail,
        format!(
            "{} cannot import torch (no module named torch): install torch in that environment",
            bare.display()
        )
    );

    // By name, on a node whose PATH leads to the bare venv: PATH is part of the fix.
    let path =
        std::env::join_paths([bare.parent().expect("bin"), Path::new("/usr/bin")]).expect("PATH");
    let f = finding(
        check_command(&os(&["python3", &script_s]), Some(&path)).await,
        "python3 on a broken PATH",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail.starts_with(&format!(
            "{} cannot import torch",
            bare.parent().expect("bin").join("python3").display()
        )) && f
            .detail
            .contains("fix PATH on this node so `python3` is the environment's python"),
        "{f}"
    );

    // A script run by its `#!` line is a Python command too.
    let shebang = executable_file(
        &dir.path().join("train"),
        "#!/usr/bin/env -S python3 -u\nimport torch\n",
    );
    let f = finding(
        check_command(&[shebang.into()], Some(&path)).await,
        "#! python3",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail.contains("cannot import torch")
            && f.detail
                .contains("fix PATH on this node so `python3` is the environment's python"),
        "{f}"
    );

    // The script itself must be readable here (the code on a file system every node has).
    let missing = dir.path().join("gone/train.py");
    let f = finding(
        check_command(&[bare.clone().into(), missing.clone().into()], None).await,
        "missing script",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail.starts_with(&format!(
            "the script {} cannot be read on this node (No such file or directory",
            missing.display()
        )),
        "{f}"
    );

    // An interpreter that is not there, or a venv whose python links to nothing.
    let f = finding(
        check_command(&os(&["/opt/herd-none/bin/python", &script_s]), None).await,
        "no interpreter",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail
            .contains("`/opt/herd-none/bin/python` does not exist on this node"),
        "{f}"
    );
    let broken = dir.path().join("broken/bin");
    std::fs::create_dir_all(&broken).expect("mkdir");
    std::os::unix::fs::symlink("/opt/herd-none/python3.11", broken.join("python")).expect("ln");
    let f = finding(
        check_command(&[broken.join("python").into(), script.clone().into()], None).await,
        "dangling python",
    );
    assert!(f.detail.contains("(or is a link to nothing)"), "{f}");

    // An interpreter that starts and dies: its last words are in the finding.
    let dying = executable_file(
        &dir.path().join("python3.11"),
        "#!/bin/sh\necho 'Fatal Python error: init_fs_encoding: failed to get the Python codec' >&2\nexit 1\n",
    );
    let f = finding(
        check_command(&[dying.clone().into(), script.into()], None).await,
        "dying python",
    );
    assert_eq!(f.check, "python");
    assert_eq!(
        f.detail,
        format!("{} does not start on this node (exited with code 1: Fatal Python error: init_fs_encoding: failed to get the Python codec): its environment is broken here; reinstall it or fix PATH on this node", dying.display())
    );
}

#[tokio::test]
async fn a_python_with_torch_passes_and_its_module_is_looked_for() {
    let python = torch_python();
    let dir = tmp();
    let script = dir.path().join("train.py");
    std::fs::write(&script, "import torch\n").expect("write");
    let py: OsString = python.clone().into();
    let started = Instant::now();
    check_command(&[py.clone(), "-u".into(), script.clone().into()], None)
        .await
        .expect("the torch venv has torch");
    println!("python check with the torch venv: {:?}", started.elapsed());
    // torchrun's module: found without importing torch.
    check_command(
        &[
            py.clone(),
            "-m".into(),
            "torch.distributed.run".into(),
            "--nproc-per-node".into(),
            "2".into(),
            script.clone().into(),
        ],
        None,
    )
    .await
    .expect("-m torch.distributed.run");
    let f = finding(
        check_command(
            &[py.clone(), "-m".into(), "herd_no_such_pkg.train".into()],
            None,
        )
        .await,
        "-m missing module",
    );
    assert_eq!(
        f.detail,
        format!(
            "{} cannot import herd_no_such_pkg (no module named herd_no_such_pkg): install herd_no_such_pkg in that environment",
            python.display()
        )
    );
    // The command's own options that change where modules are found are kept: with -S
    // (no site-packages) that interpreter has no torch.
    let f = finding(
        check_command(&[py, "-S".into(), script.into()], None).await,
        "-S",
    );
    assert!(f.detail.contains("cannot import torch"), "{f}");
}

/// A fake `nvidia-smi` in `dir` that prints `out` and exits with `code`; PATH of `dir`.
fn fake_smi(dir: &Path, out: &str, code: i32) -> OsString {
    executable_file(
        &dir.join("nvidia-smi"),
        &format!("#!/bin/sh\n[ \"$1\" = -L ] || exit 64\ncat <<'EOF'\n{out}EOF\nexit {code}\n"),
    );
    dir.as_os_str().to_owned()
}

const H200S: &str = "GPU 0: NVIDIA H200 (UUID: GPU-3f2a9c1e-0b1d-4c55-9a8e-1f0e2d3c4b5a)\n\
GPU 1: NVIDIA H200 (UUID: GPU-7d6c5b4a-3928-4716-8a5b-6c7d8e9f0a1b)\n";

#[test]
fn nvidia_smi_lines_are_read() {
    let mig = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5b2b4a-0000-1111-2222-333344445555)\n  \
MIG 1g.5gb      Device  0: (UUID: MIG-c7384736-a75d-5afc-978f-d2f1294409fd)\n";
    assert_eq!(
        listed(mig),
        vec![
            Listed {
                index: Some("0".into()),
                uuid: Some("GPU-5d5b2b4a-0000-1111-2222-333344445555".into())
            },
            Listed {
                index: None,
                uuid: Some("MIG-c7384736-a75d-5afc-978f-d2f1294409fd".into())
            },
        ]
    );
    let devices = listed(mig);
    assert!(is_listed("0", &devices));
    assert!(!is_listed("1", &devices));
    assert!(is_listed("MIG-c7384736", &devices));
    assert!(is_listed(
        "GPU-5d5b2b4a-0000-1111-2222-333344445555",
        &devices
    ));
    assert!(!is_listed("GPU-ffff", &devices));
    assert!(listed("No devices were found\n").is_empty());
}

#[tokio::test]
async fn gpus_are_checked_against_slurm_and_nvidia_smi() {
    let dir = tmp();
    let ids = |s: &str| -> Vec<String> { s.split(',').map(str::to_owned).collect() };
    // No GPU asked for: nothing is run (this nvidia-smi would fail).
    let failing = dir.path().join("failing");
    std::fs::create_dir_all(&failing).expect("mkdir");
    let failing = fake_smi(&failing, "", 9);
    check_gpus(&[], None, Some(&failing))
        .await
        .expect("no gpus");
    check_gpus(&[], Some(0), Some(&failing))
        .await
        .expect("gres 0");

    // SLURM's count against CUDA_VISIBLE_DEVICES.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let f = finding(
        check_gpus(&ids("0"), Some(2), Some(empty.as_os_str())).await,
        "gres 2, one visible",
    );
    assert_eq!(f.check, "gpus");
    assert!(
        f.detail
            .starts_with("SLURM gave this node 2 GPUs (SLURM_GPUS_ON_NODE=2) but CUDA_VISIBLE_DEVICES=0 names 1 GPU:"),
        "{f}"
    );
    let f = finding(
        check_gpus(&[], Some(4), Some(empty.as_os_str())).await,
        "gres 4, none visible",
    );
    assert!(
        f.detail.contains("but CUDA_VISIBLE_DEVICES names none"),
        "{f}"
    );
    // Without nvidia-smi, a consistent count is all there is to check.
    check_gpus(&ids("0,1"), Some(2), Some(empty.as_os_str()))
        .await
        .expect("no nvidia-smi");

    let good = dir.path().join("good");
    std::fs::create_dir_all(&good).expect("mkdir");
    let good = fake_smi(&good, H200S, 0);
    check_gpus(&ids("0,1"), Some(2), Some(&good))
        .await
        .expect("both listed");
    check_gpus(&ids("1"), None, Some(&good))
        .await
        .expect("one listed");
    check_gpus(&ids("GPU-7d6c5b4a"), None, Some(&good))
        .await
        .expect("a UUID prefix");
    let f = finding(
        check_gpus(&ids("0,3"), None, Some(&good)).await,
        "GPU 3 missing",
    );
    assert_eq!(f.check, "gpus");
    assert!(
        f.detail.starts_with(
            "CUDA_VISIBLE_DEVICES=0,3, but `nvidia-smi -L` does not list GPU 3 on this node (it lists 0, 1):"
        ),
        "{f}"
    );

    let f = finding(
        check_gpus(&ids("0"), None, Some(&failing)).await,
        "nvidia-smi fails",
    );
    assert!(
        f.detail
            .contains("-L` failed on this node (exited with code 9"),
        "{f}"
    );
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).expect("mkdir");
    let broken = fake_smi(
        &broken,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
        9,
    );
    let f = finding(
        check_gpus(&ids("0"), None, Some(&broken)).await,
        "no driver",
    );
    assert!(
        f.detail.contains("(exited with code 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
        "{f}"
    );
}

#[tokio::test]
async fn folders_are_created_written_and_measured() {
    let dir = tmp();
    let logs = dir.path().join("exp/logs");
    let ckpt = dir.path().join("exp/checkpoints");
    let folders = vec![
        ("log folder", logs.clone()),
        ("checkpoint folder", ckpt.clone()),
    ];
    check_folders(&folders, "gpu-a01", MIN_FREE)
        .await
        .expect("fresh folders");
    for d in [&logs, &ckpt] {
        assert!(d.is_dir(), "{} was not created", d.display());
        let left: Vec<_> = std::fs::read_dir(d).expect("read_dir").collect();
        assert!(
            left.is_empty(),
            "the probe file was left in {}",
            d.display()
        );
    }

    // Root can write anywhere, but not under a file, nor where no file can be created.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let under_file = file.join("logs");
    let f = finding(
        check_folders(&[("log folder", under_file.clone())], "n", MIN_FREE).await,
        "under a file",
    );
    assert_eq!(f.check, "folders");
    assert!(
        f.detail.starts_with(&format!(
            "cannot create the log folder {} on this node (Not a directory",
            under_file.display()
        )) && f.detail.ends_with("point --log-dir elsewhere"),
        "{f}"
    );
    let f = finding(
        check_folders(
            &[
                ("log folder", logs.clone()),
                ("checkpoint folder", PathBuf::from("/proc")),
            ],
            "n",
            MIN_FREE,
        )
        .await,
        "/proc",
    );
    assert!(
        f.detail
            .starts_with("cannot write in the checkpoint folder /proc on this node (")
            && f.detail.ends_with("point HERD_CHECKPOINT_DIR elsewhere"),
        "{f}"
    );

    // Free space, measured for real: no file system here has 16 EiB free.
    let f = finding(
        check_folders(&[("log folder", logs.clone())], "n", u64::MAX).await,
        "free space",
    );
    assert!(
        f.detail
            .starts_with(&format!("the log folder {} has ", logs.display()))
            && f.detail
                .contains(" free on this node, below the 17179869184 GiB herd asks for"),
        "{f}"
    );
    assert_eq!(size(512 << 20), "512 MiB");
    assert_eq!(size(1 << 30), "1 GiB");
    assert_eq!(size(3 << 29), "1.5 GiB");
}

/// Whether `python3` can bind `port` on all interfaces without SO_REUSEADDR (as a plain
/// `socket.bind` does; torch's TCPStore sets it, so this is the stricter test).
fn binds_without_reuse(port: u16) -> bool {
    let status = Command::new("python3")
        .args([
            "-c",
            "import socket, sys\ns = socket.socket()\ntry:\n    s.bind(('0.0.0.0', int(sys.argv[1])))\nexcept OSError as e:\n    print(e)\n    sys.exit(1)\ns.listen()\n",
        ])
        .arg(port.to_string())
        .status()
        .expect("python3");
    status.success()
}

#[tokio::test]
async fn the_port_check_reaches_a_held_port_and_names_a_closed_one() {
    // A port nobody holds.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port();
    let f = finding(check_port("127.0.0.1", closed).await, "closed port");
    assert_eq!(f.check, "port");
    assert!(
        f.detail.starts_with(&format!(
            "the master's port 127.0.0.1:{closed} cannot be reached from this node (Connection refused"
        )) && f.detail.contains("firewall"),
        "{f}"
    );

    let held = hold_port("127.0.0.1").await.expect("hold");
    let port = held.port();
    for _ in 0..3 {
        check_port("127.0.0.1", port).await.expect("held port");
    }
    // Reached by name too.
    check_port("localhost", port).await.expect("by name");
    assert!(!binds_without_reuse(port), "the held port was free");
    held.release().await;
    // Released: free at once for a worker that binds it, even without SO_REUSEADDR.
    assert!(
        binds_without_reuse(port),
        "port {port} is not free after release"
    );
    let f = finding(check_port("127.0.0.1", port).await, "released port");
    assert_eq!(f.check, "port");

    // A master with an IPv6 address gets its port held on IPv6.
    let held = hold_port("::1").await.expect("hold on IPv6");
    check_port("::1", held.port())
        .await
        .expect("held IPv6 port");
    held.release().await;
}

/// A [`Config`] for one simulated node running `argv`.
fn config(argv: Vec<OsString>, logs: &Path, checkpoints: Option<PathBuf>) -> Config {
    Config {
        node_rank: 0,
        node_names: vec!["local-0".into()],
        leader_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
        nproc: 2,
        argv,
        key: herd_rendezvous::JobKey {
            id: "local-test".into(),
            secret: b"secret".to_vec(),
        },
        log_dir: herd_exp::layout::LogsDir::new(logs),
        label: false,
        metrics: herd_metrics::Format::Auto,
        kill_grace: Duration::from_secs(1),
        rendezvous_timeout: Duration::from_secs(30),
        heartbeat_timeout: Duration::from_secs(10),
        spare_nodes: 0,
        port_candidates: 32,
        keep: KeepAlive::default(),
        exp_dir: None,
        launch: herd_slurm::LaunchInfo {
            checkpoint_dir: checkpoints,
            ..herd_slurm::LaunchInfo::default()
        },
        container: None,
        warm: None,
    }
}

#[tokio::test]
async fn a_whole_node_check_with_the_torch_venv_and_its_cost() {
    let python = torch_python();
    let dir = tmp();
    let script = dir.path().join("train.py");
    std::fs::write(&script, "import torch\n").expect("write");
    let cfg = config(
        vec![python.into(), "-u".into(), script.into()],
        &dir.path().join("exp/logs"),
        Some(dir.path().join("exp/checkpoints")),
    );
    let held = hold_port("127.0.0.1").await.expect("hold");
    let master = Some(("127.0.0.1".to_owned(), held.port()));
    let mut took = Vec::new();
    for _ in 0..5 {
        let wall = Instant::now();
        let d = check_node(&cfg, master.clone())
            .await
            .unwrap_or_else(|f| panic!("{f}"));
        took.push((d, wall.elapsed()));
    }
    held.release().await;
    // Measured, not asserted: a loaded test machine says nothing about a node.
    println!("check_node with the torch venv's python, 5 runs (reported, wall): {took:?}");
}

#[tokio::test]
async fn the_first_finding_is_chosen_by_the_order_of_the_checks() {
    let dir = tmp();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").expect("write");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port();
    let node = Node {
        argv: os(&["herd-no-such-program"]),
        path: Some("/usr/bin:/bin".into()),
        gpus: vec!["0".into()],
        gres: Some(2),
        folders: vec![("log folder", file.join("logs"))],
        host: "gpu-a01".into(),
        master: Some(("127.0.0.1".into(), closed)),
        ifnames: vec![("GLOO_SOCKET_IFNAME", "herd-no-such-if0".into())],
        container: None,
    };
    let f = finding(node.check().await, "all failing");
    assert_eq!(f.check, "command");
    // A container that cannot run here comes first, in place of the host's command check.
    let f = finding(
        Node {
            container: Some(crate::config::ContainerState::Failed {
                image: "/images/train.sqfs".into(),
                why: "squashfuse is not on this node's PATH".into(),
            }),
            ..node.clone()
        }
        .check()
        .await,
        "a container that cannot run",
    );
    assert_eq!(f.check, "container");
    assert!(
        f.detail.contains("/images/train.sqfs") && f.detail.contains("squashfuse"),
        "{f}"
    );
    let f = finding(
        Node {
            argv: os(&["sh", "-c", "true"]),
            ..node.clone()
        }
        .check()
        .await,
        "gpus",
    );
    assert_eq!(f.check, "gpus");
    let f = finding(
        Node {
            argv: os(&["sh", "-c", "true"]),
            gres: None,
            path: Some(OsString::from(dir.path())),
            ..node.clone()
        }
        .check()
        .await,
        "folders",
    );
    // No `sh` on that PATH: the command is the finding again, naming that PATH.
    assert_eq!(f.check, "command");
    let f = finding(
        Node {
            argv: vec![OsString::from("/bin/sh")],
            gres: None,
            path: Some(OsString::from(dir.path())),
            ..node.clone()
        }
        .check()
        .await,
        "folders",
    );
    assert_eq!(f.check, "folders");
    let f = finding(
        Node {
            argv: vec![OsString::from("/bin/sh")],
            gres: None,
            path: Some(OsString::from(dir.path())),
            folders: vec![("log folder", dir.path().join("logs"))],
            ..node.clone()
        }
        .check()
        .await,
        "network",
    );
    assert_eq!(f.check, "network");
    assert!(
        f.detail
            .starts_with("GLOO_SOCKET_IFNAME=herd-no-such-if0 names `herd-no-such-if0`, which this node does not have (it has lo"),
        "{}",
        f.detail
    );
    let f = finding(
        Node {
            argv: vec![OsString::from("/bin/sh")],
            gres: None,
            path: Some(OsString::from(dir.path())),
            folders: vec![("log folder", dir.path().join("logs"))],
            ifnames: vec![
                ("GLOO_SOCKET_IFNAME", "lo".into()),
                ("NCCL_SOCKET_IFNAME", "^docker,lo".into()),
            ],
            ..node
        }
        .check()
        .await,
        "port",
    );
    assert_eq!(f.check, "port");
    assert_eq!(
        f.to_string(),
        format!("preflight check `port` failed: {}", f.detail)
    );
}

/// What the container check's CUDA probe prints when run by the `python3` on PATH with
/// `CUDA_VISIBLE_DEVICES=visible` and `LD_LIBRARY_PATH=lib_path` (the bed's stand-in for
/// NVIDIA's driver library, or a folder without one), on the node `node`.
fn cuda_probe(lib_path: &Path, visible: &str, node: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", container::CUDA_COUNT])
        .env("LD_LIBRARY_PATH", lib_path)
        .env("CUDA_VISIBLE_DEVICES", visible)
        .env("SLURMD_NODENAME", node)
        .env("HERD_FAKE_CUDA_SHORT", "short-node")
        .output()
        .unwrap_or_else(|e| panic!("these tests need python3 on PATH: {e}"));
    assert!(out.status.success(), "the probe never fails: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    stdout
        .strip_prefix("gpus\t")
        .unwrap_or_else(|| panic!("a gpus line: {stdout:?}"))
        .trim_end()
        .to_owned()
}

#[test]
fn the_cuda_probe_counts_what_cuda_sees_with_the_workers_devices() {
    let dir = tmp();
    let lib = herd_testbed::fake_libcuda(&dir.path().join("lib")).expect("cc builds the stand-in");
    // Four devices inside: the two given are seen; CUDA stops at the first it lacks.
    assert_eq!(cuda_probe(&lib, "0,1", "node-a"), "2");
    assert_eq!(cuda_probe(&lib, "2,7,1", "node-a"), "1");
    // A runtime that put one GPU in.
    assert_eq!(cuda_probe(&lib, "0,1", "short-node"), "1");
    assert_eq!(
        cuda_probe(&lib, "1", "short-node"),
        "error\t100\tCUDA_ERROR_NO_DEVICE"
    );
    // No driver library at all.
    let said = cuda_probe(&dir.path().join("empty"), "0,1", "node-a");
    assert!(
        said.starts_with("nolib\t") && said.contains("libcuda.so.1"),
        "{said}"
    );
}

#[test]
fn gpus_missing_inside_an_image_name_the_count_and_each_runtimes_fix() {
    use herd_container::Runtime;
    let given = ["0".to_owned(), "1".to_owned()];
    let image = "/images/pt";
    let inside = |said: &str, rt: Runtime| container::gpus_inside(said, &given, rt, image);
    assert_eq!(inside("2", Runtime::Charliecloud), Ok(()));
    let short = inside("1", Runtime::Charliecloud).expect_err("one of two");
    assert!(
        short.starts_with("inside the image /images/pt CUDA sees 1 of the 2 GPUs SLURM gave this node (CUDA_VISIBLE_DEVICES=0,1): ")
            && short.contains("this node shows fewer GPUs than SLURM gave: check its /dev/nvidia*"),
        "{short}"
    );
    let nolib_ch = inside(
        "nolib\tlibcuda.so.1: cannot open shared object file",
        Runtime::Charliecloud,
    )
    .expect_err("no library");
    assert!(
        nolib_ch.contains("`ch-fromhost --nvidia /images/pt`"),
        "{nolib_ch}"
    );
    let none = inside("error\t100\tCUDA_ERROR_NO_DEVICE", Runtime::Podman).expect_err("none");
    assert!(
        none.contains("CUDA sees 0 of the 2 GPUs")
            && none.contains("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"),
        "{none}"
    );
    let nolib = inside(
        "nolib\tlibcuda.so.1: cannot open shared object file: No such file or directory",
        Runtime::Apptainer,
    )
    .expect_err("no library");
    assert!(
        nolib.starts_with("the image /images/pt has no NVIDIA driver library (libcuda.so.1: cannot open shared object file: No such file or directory), so its workers would see none of the 2 GPUs")
            && nolib.contains("--nv")
            && nolib.contains("nvliblist.conf"),
        "{nolib}"
    );
    let compat = inside(
        "error\t804\tCUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        Runtime::Pyxis,
    )
    .expect_err("a mismatched driver");
    assert!(
        compat.contains("(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, error 804)")
            && compat.contains("does not match this node's driver")
            && compat.contains("NVIDIA_VISIBLE_DEVICES"),
        "{compat}"
    );
    // What the probe cannot say is not a finding.
    assert_eq!(inside("", Runtime::Charliecloud), Ok(()));
}

#[tokio::test]
async fn the_master_port_comes_from_below_the_ephemeral_range() {
    let low: u32 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .expect("the ephemeral range")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("its low end");
    let candidates = port::master_port_candidates();
    assert_eq!(candidates.last(), Some(&0), "any free port comes last");
    assert!(
        candidates[..candidates.len() - 1]
            .iter()
            .all(|&p| u32::from(p) < low && u32::from(p) >= low.saturating_sub(8192).max(1024)),
        "{candidates:?} below {low}"
    );
    let held = hold_port("127.0.0.1").await.expect("a port");
    assert!(
        u32::from(held.port()) < low,
        "held {} below {low}",
        held.port()
    );
    held.release().await;
    let claimed = claim_master_port().expect("a port");
    assert!(u32::from(claimed) < low, "claimed {claimed} below {low}");
}
