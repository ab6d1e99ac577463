use std::path::PathBuf;

use super::*;

fn ids(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn each_rank_takes_the_gpu_of_its_local_rank_or_its_share() {
    let four = ids(&["0", "1", "2", "3"]);
    assert_eq!(
        ranks_of(&four, GpuBind::All, 8, 4),
        vec![vec![8], vec![9], vec![10], vec![11]]
    );
    // Two workers on four GPUs, per rank: each its two.
    assert_eq!(
        ranks_of(&four, GpuBind::PerRank, 0, 2),
        vec![vec![0], vec![0], vec![1], vec![1]]
    );
    // More workers than GPUs with every GPU visible: they share, rank % n.
    assert_eq!(
        ranks_of(&ids(&["0", "1"]), GpuBind::All, 0, 4),
        vec![vec![0, 2], vec![1, 3]]
    );
    assert!(ranks_of(&[], GpuBind::All, 0, 4).is_empty());
}

#[test]
fn the_nodes_gpus_are_found_by_index_uuid_or_in_order() {
    let listed = vec![
        (0, "GPU-a".to_owned()),
        (1, "GPU-b".to_owned()),
        (2, "GPU-c".to_owned()),
        (3, "GPU-d".to_owned()),
    ];
    assert_eq!(
        match_gpus(&ids(&["2", "3"]), &listed),
        vec![Some(2), Some(3)]
    );
    assert_eq!(
        match_gpus(&ids(&["GPU-d", "0"]), &listed),
        vec![Some(3), Some(0)]
    );
    // A cgroup shows only the job's two GPUs, numbered by the node as 4 and 5.
    let cgroup = vec![(4, "GPU-e".to_owned()), (5, "GPU-f".to_owned())];
    assert_eq!(
        match_gpus(&ids(&["0", "1"]), &cgroup),
        vec![Some(4), Some(5)]
    );
    // Nothing to go by: none matched.
    assert_eq!(match_gpus(&ids(&["7"]), &listed), vec![None]);
}

#[test]
fn a_refused_field_is_read_from_nvidia_smis_words() {
    assert_eq!(
        refused_field("Field \"clocks_throttle_reasons.active\" is not a valid field to query.\n")
            .as_deref(),
        Some("clocks_throttle_reasons.active")
    );
    assert_eq!(
        refused_field(
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
        ),
        None
    );
}

/// The node's GPUs `ids` (all listed: `None`) for `local` ranks from `first`, each rank
/// seeing all of them.
fn mine(ids: Option<&[&str]>, (first, local): (u32, u32)) -> Mine {
    Mine {
        ids: ids.map(self::ids),
        bind: GpuBind::All,
        ranks: (first, local),
    }
}

/// With no GPU named (`herd run` where `CUDA_VISIBLE_DEVICES` is unset), every GPU the
/// driver lists is sampled, local rank `l` on the `l`-th of them.
#[test]
fn with_no_gpu_named_every_listed_gpu_is_the_nodes() {
    let listed = vec![(0, "GPU-a".to_owned()), (1, "GPU-b".to_owned())];
    let (matched, ranks) = mine(None, (4, 2)).resolve(&listed);
    assert_eq!(matched, vec![Some(0), Some(1)]);
    assert_eq!(ranks, vec![vec![4], vec![5]]);
    let (matched, ranks) = mine(Some(&["1"]), (0, 1)).resolve(&listed);
    assert_eq!((matched, ranks), (vec![Some(1)], vec![vec![0]]));
}

/// A watch for tests: its errors on the returned receiver, the kernel log `log` (a plain
/// file) when given; the sender stops it.
fn watch(
    log: Option<&Path>,
) -> (
    Watch,
    tokio::sync::mpsc::UnboundedReceiver<Event>,
    tokio::sync::watch::Sender<bool>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let w = Watch {
        report: Report { attempt: 3, tx },
        kernel_log: log.map(|p| KernelLog::open(p).expect("the log")),
        stopped,
    };
    (w, rx, stop)
}

fn stand_in(dir: &Path, script: &str) -> PathBuf {
    let smi = dir.join("nvidia-smi");
    std::fs::write(&smi, script).expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    smi
}

/// A stand-in `nvidia-smi` that refuses the throttle reasons' old name, then prints two
/// periods of two GPUs, the second with two uncorrectable ECC errors on GPU 1: the sampler
/// asks again with the new name, writes the node's one GPU (index 1) with its rank each
/// period, and reports the ECC errors that came as a hardware error of that GPU.
#[tokio::test]
async fn the_sampler_asks_again_without_a_refused_field_and_writes_the_nodes_gpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let smi = stand_in(
        dir.path(),
        r#"#!/bin/sh
case "$1" in *clocks_throttle_reasons*) echo 'Field "clocks_throttle_reasons.active" is not a valid field to query.'; exit 2;; esac
for i in 1 2; do
  echo "0, GPU-a, Stand-in, 10, 100, 1000, 50.0, 300.00, 40, 1000, 0x0000000000000001, 0, No, 00000000:1A:00.0"
  echo "1, GPU-b, Stand-in, 9$i, 900, 1000, 290.0, 300.00, 70, 1400, 0x0000000000000004, $((i * 2 - 2)), No, 00000000:1B:00.0"
done
"#,
    );
    let out = dir.path().join("node-0.gpus.jsonl");
    let (w, mut rx, _stop) = watch(None);
    let ended = sample(&smi, &out, &mine(Some(&["1"]), (5, 1)), w).await;
    assert!(ended.expect_err("it ends").contains("nvidia-smi ended"));
    let samples = gpus::read(&out).expect("read");
    assert_eq!(samples.len(), 2, "{samples:?}");
    assert!(samples.iter().all(|s| s.gpu == 1 && s.ranks == vec![5]));
    assert_eq!(samples[1].util, Some(92.0));
    assert_eq!(
        samples[0].reasons,
        vec!["sw_power_cap"],
        "asked by its new name"
    );
    let Some(Event::GpuError { attempt, error }) = rx.try_recv().ok() else {
        panic!("an ECC error is reported");
    };
    assert_eq!((attempt, error.gpu, error.ranks.clone()), (3, 1, vec![5]));
    assert!(error.hardware && error.xid.is_none(), "{error:?}");
    assert!(
        error.what.starts_with("2 new uncorrectable ECC errors"),
        "{error:?}"
    );
    assert!(rx.try_recv().is_err(), "said once");
}

/// While the sampler runs, an Xid line for its GPU's PCI address in the kernel log is
/// reported (another GPU's, or another line, is not); stopped, it reads the log a last
/// time and returns what it found then.
#[tokio::test]
async fn xid_lines_of_the_kernel_log_are_reported_for_the_nodes_gpus() {
    let dir = tempfile::tempdir().expect("tempdir");
    let smi = stand_in(
        dir.path(),
        r#"#!/bin/sh
while true; do
  echo "0, GPU-a, Stand-in, 97, 100, 1000, 50.0, 300.00, 40, 1000, 0x0000000000000000, 0, No, 00000000:1B:00.0"
  sleep 0.1
done
"#,
    );
    let log = dir.path().join("kmsg");
    std::fs::write(
        &log,
        "old: NVRM: Xid (PCI:0000:1b:00): 48, before the attempt\n",
    )
    .expect("log");
    let out = dir.path().join("node-0.gpus.jsonl");
    let (w, mut rx, stop) = watch(Some(&log));
    let task = tokio::spawn({
        let (smi, out) = (smi.clone(), out.clone());
        async move { sample(&smi, &out, &mine(Some(&["0"]), (0, 1)), w).await }
    });
    let append = |line: &str| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("open");
        writeln!(f, "{line}").expect("append");
    };
    // Wait for a sample, so the sampler knows the GPU's address.
    while gpus::read(&out).expect("read").is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    append("6,1234,5678,-;NVRM: Xid (PCI:0000:3c:00): 79, pid=1, name=python, GPU has fallen off the bus.");
    append("6,1235,5679,-;NVRM: Xid (PCI:0000:1b:00): 79, pid=1, name=python, GPU has fallen off the bus.");
    let Some(Event::GpuError { error, .. }) = rx.recv().await else {
        panic!("only GPU errors are sent");
    };
    assert_eq!((error.gpu, error.xid, error.hardware), (0, Some(79), true));
    append("6,1236,5680,-;NVRM: Xid (PCI:0000:1b:00): 13, pid=1, name=python, Graphics Exception");
    stop.send(true).expect("stop");
    let mut last = task.await.expect("joined").expect("stopped");
    // The tick may have reported it first; either way it is reported once.
    if last.is_empty() {
        if let Ok(Event::GpuError { error, .. }) = rx.try_recv() {
            last.push(error);
        }
    }
    assert_eq!(last.len(), 1, "{last:?}");
    assert_eq!((last[0].xid, last[0].hardware), (Some(13), false));
    assert!(
        rx.try_recv().is_err(),
        "the old line and the other GPU's are not reported"
    );
}

#[test]
fn a_lost_gpu_line_of_nvidia_smi_is_the_gpus_hardware_error() {
    let gpu = Sample {
        gpu: 2,
        uuid: "GPU-c".into(),
        ranks: vec![6],
        pci: Some("00000000:3B:00.0".into()),
        ..Sample::default()
    };
    let line = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost. Reboot the system to recover this GPU";
    let e = watch::lost_error(line, std::slice::from_ref(&gpu), 7).expect("an error");
    assert_eq!((e.gpu, e.ranks.clone(), e.hardware), (2, vec![6], true));
    assert!(watch::lost_error("No devices were found", &[gpu], 7).is_none());
}
