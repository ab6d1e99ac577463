//! What the GPUs are doing, on the bed: it has no GPU, so a stand-in `nvidia-smi`
//! (testbed/standins/nvidia-smi) first on the job's PATH replays recorded samples in the
//! driver's own formats. Every node of the stand-in has a busy GPU 0 held at its power cap
//! and an idle GPU 1 (a data-bound rank's): the agents sample both for the ranks whose
//! devices they are, and `herd top` and `herd report` show and flag them.

use std::path::{Path, PathBuf};
use std::process::Output;

use herd_exp::gpus::{self, Sample};
use herd_testbed::{read_lossy, repo_root, write_file, Bed};
use serde_json::{json, Value};

use crate::support::{herd_with_path, job_id, project_with, wait_ok};

/// A recorded H100's frames: busy at 95–99 % and held at its 700 W cap
/// (`sw_power_cap`), its memory growing.
fn busy() -> Value {
    let frames: Vec<Value> = (0..6)
        .map(|i| {
            json!({
                "utilization.gpu": (95 + i % 3).to_string(),
                "memory.used": (61_000 + 100 * i).to_string(),
                "memory.total": "81559",
                "power.draw": "698.42",
                "power.limit": "700.00",
                "temperature.gpu": "67",
                "clocks.sm": "1755",
                "clocks_throttle_reasons.active": "0x0000000000000004",
                "ecc.errors.uncorrected.volatile.total": "0",
                "retired_pages.pending": "[N/A]",
            })
        })
        .collect();
    json!(frames)
}

/// An idle H100's frame: 2 % busy, its clocks down for idleness (no throttling).
fn idle() -> Value {
    json!([{
        "utilization.gpu": "2",
        "memory.used": "3120",
        "memory.total": "81559",
        "power.draw": "88.10",
        "power.limit": "700.00",
        "temperature.gpu": "34",
        "clocks.sm": "345",
        "clocks_throttle_reasons.active": "0x0000000000000001",
        "ecc.errors.uncorrected.volatile.total": "0",
        "retired_pages.pending": "[N/A]",
    }])
}

/// A folder holding the stand-in `nvidia-smi` and every bed node's samples: PATH's first.
fn standin(bed: &Bed, dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(bin.join("gpus")).expect("bin");
    let script = read_lossy(repo_root().join("testbed/standins/nvidia-smi"));
    write_file(&bin.join("nvidia-smi"), &script, 0o755).expect("stand-in");
    for (n, node) in bed.nodes().iter().enumerate() {
        // Each node's GPUs at PCI buses of their own (node n: 0xN1, 0xN2).
        let gpus = json!({"gpus": [
            {"index": 0, "uuid": format!("GPU-0000000{n}-0000-0000-0000-000000000000"),
             "name": "NVIDIA H100 80GB HBM3", "pci": format!("00000000:{:02X}:00.0", 0x10 * (n + 1) + 1),
             "frames": busy()},
            {"index": 1, "uuid": format!("GPU-0000000{n}-0000-0000-0000-000000000001"),
             "name": "NVIDIA H100 80GB HBM3", "pci": format!("00000000:{:02X}:00.0", 0x10 * (n + 1) + 2),
             "frames": idle()},
        ]});
        write_file(
            &bin.join(format!("gpus/{node}.json")),
            &gpus.to_string(),
            0o644,
        )
        .expect("samples");
    }
    bin
}

/// The job's PATH: the stand-in's folder `bin` first, then the venv's bin, then ours.
fn job_path(bed: &Bed, bin: &Path) -> String {
    let venv_bin = bed.python().parent().expect("venv bin").to_path_buf();
    format!(
        "{}:{}:{}",
        bin.display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `herd submit ARGS` with [`job_path`] as PATH (sbatch passes it on to the job).
fn submit(bed: &Bed, project: &Path, bin: &Path, args: &[&str]) -> Output {
    herd_with_path("submit", project, args, &job_path(bed, bin))
}

/// `herd COMMAND ARGS` from `dir`: its stdout, or a panic with its stderr.
fn herd(dir: &Path, command: &str, args: &[&str]) -> String {
    let path = std::env::var("PATH").unwrap_or_default();
    let out = herd_with_path(command, dir, args, &path);
    assert!(
        out.status.success(),
        "herd {command} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The line of `top --once`'s table whose first word is `rank`.
fn row(top: &str, rank: u32) -> &str {
    top.lines()
        .find(|l| l.split_whitespace().next() == Some(&rank.to_string()))
        .unwrap_or_else(|| panic!("rank {rank}'s row in:\n{top}"))
}

/// A 2-node job with 2 GPUs a node: each agent samples its node's two GPUs into the
/// attempt's `node-N.gpus.jsonl`, each sample with the rank whose device it is
/// (`cuda:LOCAL_RANK`), and the recorded figures come through as the driver gave them.
/// `herd top --once` shows each rank's GPU and flags the throttled and the idle ones;
/// `herd report --json` has each GPU's series and names the idle GPUs with their ranks;
/// the HTML page draws the GPUs' utilisation.
#[test]
fn every_node_samples_its_gpus_for_the_ranks_that_use_them() {
    let bed = Bed::require();
    let (project, exps) = project_with(&bed, "gpus", &[("examples/train_ddp.py", "train_ddp.py")]);
    let bin = standin(&bed, project.parent().expect("scratch"));
    let root = exps.display().to_string();
    let job = job_id(&submit(
        &bed,
        &project,
        &bin,
        &[
            "-J",
            "gpus",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--exp-root",
            &root,
            "--",
            "python",
            "train_ddp.py",
            "--steps",
            "30",
            "--step-time",
            "0.3",
        ],
    ));
    let exp = exps.join("gpus");
    wait_ok(&bed, job, &exp);
    let attempt = herd_exp::layout::LogsDir::new(exp.join("logs")).attempt(0);
    assert_eq!(attempt.gpu_nodes().expect("listing"), vec![0, 1]);
    for node in 0..2u32 {
        let samples: Vec<Sample> = gpus::read(&attempt.gpus(node)).expect("samples");
        let of = |gpu: u32| -> Vec<&Sample> { samples.iter().filter(|s| s.gpu == gpu).collect() };
        let (busy, idle) = (of(0), of(1));
        assert!(
            busy.len() >= 2 && idle.len() >= 2,
            "node {node}: samples of both GPUs every 2 s over ~9 s of training: {samples:?}"
        );
        assert!(
            samples.iter().all(|s| s.gpu < 2),
            "only the node's own GPUs: {samples:?}"
        );
        assert!(busy.iter().all(|s| s.ranks == vec![2 * node]), "{busy:?}");
        assert!(
            idle.iter().all(|s| s.ranks == vec![2 * node + 1]),
            "{idle:?}"
        );
        assert_eq!(busy[0].throttled_by(), vec!["sw_power_cap"]);
        assert_eq!(busy[0].power, Some(698.42));
        assert!(busy[0].uuid.ends_with("-000000000000"), "{:?}", busy[0]);
        assert_eq!(idle[0].util, Some(2.0));
        assert!(
            idle[0].throttled_by().is_empty(),
            "idle clocks are no throttling"
        );
        assert_eq!(idle[0].ecc_uncorrected, Some(0));
    }

    let top = herd(&project, "top", &["--once", "--exp-root", &root, "gpus"]);
    let header = top
        .lines()
        .find(|l| l.trim_start().starts_with("RANK"))
        .unwrap_or_else(|| panic!("the table's header in:\n{top}"));
    assert!(header.trim_end().ends_with("GPU"), "{top}");
    for rank in [0, 2] {
        assert!(row(&top, rank).contains("THROTTLED"), "{top}");
    }
    for rank in [1, 3] {
        assert!(row(&top, rank).contains("IDLE"), "{top}");
    }

    let report: Value = serde_json::from_str(&herd(
        &project,
        "report",
        &["--json", "--exp-root", &root, "gpus"],
    ))
    .expect("report --json");
    let run = &report["runs"][0];
    let per_gpu = run["gpu_usage"]["per_gpu"]
        .as_array()
        .unwrap_or_else(|| panic!("gpu_usage.per_gpu: {run:#}"));
    assert_eq!(per_gpu.len(), 4, "{per_gpu:#?}");
    for g in per_gpu {
        let series = g["series"].as_array().expect("series");
        assert!(series.len() >= 2, "{g:#}");
        let idle = g["flags"]
            .as_array()
            .expect("flags")
            .iter()
            .any(|f| f["flag"] == "idle");
        assert_eq!(
            idle,
            g["gpu"] == 1,
            "the idle GPU is each node's GPU 1: {g:#}"
        );
        if idle {
            let node = g["node"].as_u64().expect("node");
            assert_eq!(g["ranks"], json!([2 * node + 1]), "{g:#}");
        }
    }
    let mean = run["gpu_usage"]["mean_util"].as_f64().expect("mean_util");
    assert!(
        (40.0..60.0).contains(&mean),
        "two GPUs near 97 %, two at 2 %: {mean}"
    );

    let page = project.parent().expect("scratch").join("report.html");
    let page_arg = page.display().to_string();
    herd(
        &project,
        "report",
        &["--html", &page_arg, "--exp-root", &root, "gpus"],
    );
    let html = read_lossy(&page);
    assert!(
        html.contains("data-plot=\"gpu-util\""),
        "the page draws the GPUs' utilisation"
    );
}

/// A 3-node job whose second node's GPU 1 had a double-bit error (its stand-in reports an
/// uncorrectable ECC error): that node's preflight fails check `gpus` naming the GPU, the
/// node is blamed, and no worker starts anywhere.
#[test]
fn a_node_whose_gpu_has_an_uncorrectable_ecc_error_is_blamed_before_any_worker_starts() {
    let bed = Bed::require();
    let dir = bed.scratch("gpus_ecc").expect("scratch");
    let bin = standin(&bed, &dir);
    let broken = bed.nodes()[1].clone();
    let data_path = bin.join(format!("gpus/{broken}.json"));
    let mut data: Value = serde_json::from_str(&read_lossy(&data_path)).expect("samples");
    data["gpus"][1]["frames"][0]["ecc.errors.uncorrected.volatile.total"] = json!("2");
    write_file(&data_path, &data.to_string(), 0o644).expect("samples");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).expect("out");
    let path = job_path(&bed, &bin);
    let cmd = [
        bed.python().display().to_string(),
        crate::support::worker("env_dump.py"),
        out_dir.display().to_string(),
    ];
    let log_dir = dir.join("logs").display().to_string();
    let result = crate::preflight::srun_launch(
        &dir,
        &[("PATH", &path)],
        &["--nproc-per-node", "2", "--log-dir", &log_dir],
        &cmd,
    );
    let said = match result {
        Ok(out) => panic!("the job should fail without starting, but it ran:\n{out}"),
        Err(herd_testbed::BedError::Failed { stderr, .. }) => stderr,
        Err(e) => panic!("{e}"),
    };
    assert!(
        said.contains(&format!("{broken}: preflight check `gpus` failed"))
            && said.contains(
                "GPU 1 (GPU-00000001-0000-0000-0000-000000000001) has 2 uncorrectable ECC errors"
            ),
        "names the node, the GPU and the errors:\n{said}"
    );
    assert!(
        said.contains(&format!("blaming node 1 ({broken})")),
        "blames that node:\n{said}"
    );
    let started = std::fs::read_dir(&out_dir).expect("out").count();
    assert_eq!(started, 0, "no worker started anywhere:\n{said}");
}

/// The kernel log's form of `nvidia-smi`'s PCI bus id: `00000000:22:00.0` → `0000:22:00`.
fn kernel_address(bus_id: &str) -> String {
    let mut parts = bus_id.split(':');
    let domain = parts.next().expect("domain");
    let bus = parts.next().expect("bus");
    let device = parts
        .next()
        .expect("device")
        .split('.')
        .next()
        .expect("device");
    format!(
        "{}:{}:{}",
        &domain[domain.len() - 4..],
        bus.to_lowercase(),
        device
    )
}

/// A GPU falls off the bus during a 2-node job: the driver's Xid 79 line for node 1's GPU
/// 1 (rank 3's device) goes into the kernel log (written to /dev/kmsg, as the driver
/// writes it; the bed's nodes share one kernel, and only the node whose GPU sits at that
/// PCI address takes it), then rank 3 dies as a worker on a lost GPU does. The timeline
/// has the GPU error with its node, GPU, rank and meaning; the failure report's hint leads
/// with it; the node is blamed for a GPU fault.
#[test]
fn an_xid_during_the_job_is_recorded_leads_the_hint_and_blames_the_node() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "gpus_xid",
        &[("crates/herd/tests/e2e/workers/fault.py", "fault.py")],
    );
    let bin = standin(&bed, project.parent().expect("scratch"));
    let marker = project.parent().expect("scratch").join("marker");
    std::fs::create_dir_all(&marker).expect("marker");
    let root = exps.display().to_string();
    let marker_arg = marker.display().to_string();
    let job = job_id(&submit(
        &bed,
        &project,
        &bin,
        &[
            "-J",
            "xid",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--max-restarts",
            "0",
            "--max-requeues",
            "0",
            "--exp-root",
            &root,
            "--",
            "python",
            "fault.py",
            "exit7",
            &marker_arg,
        ],
    ));
    let exp = exps.join("xid");
    let attempt = herd_exp::layout::LogsDir::new(exp.join("logs")).attempt(0);
    // Every rank runs and node 1's sampler knows its GPUs' addresses.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    let gpu1 = loop {
        let samples = gpus::read(&attempt.gpus(1)).unwrap_or_default();
        let up = (0..4).all(|r| marker.join(format!("up-{r}")).exists());
        if let Some(s) = samples.iter().find(|s| s.gpu == 1).filter(|_| up) {
            break s.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job's ranks and node 1's GPU samples within 240 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(gpu1.ranks, vec![3]);
    let address = kernel_address(gpu1.pci.as_deref().expect("its PCI bus id"));
    std::fs::write(
        "/dev/kmsg",
        format!(
            "NVRM: Xid (PCI:{address}): 79, pid=4242, name=python, GPU has fallen off the bus.\n"
        ),
    )
    .expect("the bed runs as root: /dev/kmsg takes the driver's line");
    write_file(&marker.join("go"), "", 0o644).expect("go");
    let info = bed
        .wait(job, std::time::Duration::from_secs(240))
        .expect("the job ends");
    assert!(!info.succeeded(), "rank 3 failed: {info:?}");
    let all = crate::support::timeline(&exp);
    let names = crate::support::names(&all);
    let host = crate::support::events(&all, "started")[0]["nodes"][1]
        .as_str()
        .expect("node 1")
        .to_owned();
    let errors = crate::support::events(&all, "gpu_error");
    assert_eq!(errors.len(), 1, "{names:?}");
    let e = errors[0];
    assert_eq!(
        (
            e["node"].as_str(),
            e["gpu"].as_u64(),
            e["xid"].as_u64(),
            e["hardware"].as_bool()
        ),
        (Some(host.as_str()), Some(1), Some(79), Some(true)),
        "{e:?}"
    );
    assert_eq!(e["ranks"], json!([3]));
    let blames = crate::support::events(&all, "blame");
    assert!(
        blames
            .iter()
            .any(|b| b["kind"] == "gpu" && b["node"] == host.as_str()),
        "node 1 is blamed for its GPU: {names:?} {blames:?}"
    );
    let report: Value =
        serde_json::from_str(&read_lossy(attempt.failure_report())).expect("failure.json");
    let hint = report["hint"].as_str().unwrap_or_default();
    assert!(
        hint.starts_with(&format!(
            "{host}: GPU 1 (rank 3) raised Xid 79: the GPU fell off the bus"
        )),
        "{report:#}"
    );
}
