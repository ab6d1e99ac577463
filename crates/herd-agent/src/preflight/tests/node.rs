//! The node's own checks: folders made, written and measured, the master port reached and
//! chosen, a whole node's check with the torch venv and the order findings come in.

use super::*;

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
