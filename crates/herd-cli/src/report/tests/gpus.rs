//! The GPUs' section: `--json`'s `gpu_usage`, the text's `GPUs:` lines, the page's GPU
//! plots, from `node-N.gpus.jsonl` files made here.

use super::*;
use herd_exp::gpus::Sample;

/// A sample of GPU `gpu` of a node serving `ranks` at `t`: `util` %, 60 GiB of 80 used,
/// clock event reasons `reasons` (NVML's mask).
fn sample(t: u64, gpu: u32, ranks: &[u32], util: f64, reasons: u64) -> Sample {
    Sample {
        t,
        gpu,
        uuid: format!("GPU-{gpu:08}"),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        ranks: ranks.to_vec(),
        util: Some(util),
        mem_used: Some(61_440.0 + f64::from(gpu)),
        mem_total: Some(81_559.0),
        power: Some(650.0),
        power_limit: Some(700.0),
        temp: Some(60.0),
        reasons: herd_exp::gpus::reasons(reasons),
        ..Sample::default()
    }
}

impl Exp {
    /// `n` samples of node `node`'s GPUs in attempt `k`, one every 2 s from `t0`: each GPU
    /// `(gpu, ranks, util, reasons)`.
    fn gpus(&self, k: u32, node: u32, t0: u64, n: u64, gpus: &[(u32, &[u32], f64, u64)]) {
        let dir = self.exp.paths().logs().attempt(k);
        std::fs::create_dir_all(dir.path()).expect("attempt dir");
        let samples: Vec<Sample> = (0..n)
            .flat_map(|i| {
                gpus.iter().map(move |&(gpu, ranks, util, reasons)| {
                    // A little wobble, so the series are no flat lines.
                    let util = (util + (i % 3) as f64).min(100.0);
                    sample(t0 + i * 2000, gpu, ranks, util, reasons)
                })
            })
            .collect();
        herd_exp::gpus::append(&dir.gpus(node), &samples).expect("samples");
    }
}

/// `gpu`: 4 ranks on node-a and node-b, one attempt; rank 2's GPU at its power cap, rank
/// 3's far below the others; node-b's GPU 2 serves no rank (and idles too).
fn gpu_job(root: &Root) -> Exp {
    let e = root.exp_with_plan("gpu", json!({"nodes": 2, "gpus_per_node": 2}));
    e.event(
        "started",
        json!({"job_id": "42", "host": "node-a", "nodes": ["node-a", "node-b"], "requeue": 0}),
    );
    e.event(
        "rendezvous",
        json!({"world_size": 4, "master_addr": "node-a", "nodes": [
            {"node": 0, "host": "node-a", "ranks": [0, 1]},
            {"node": 1, "host": "node-b", "ranks": [2, 3]}]}),
    );
    e.event("attempt_started", json!({"attempt": 0, "restarts": 0}));
    for rank in 0..4 {
        let rows: Vec<_> = (0..50)
            .map(|s| (1_000_000 + s * 1000, Some(s), reading(rank, s)))
            .collect();
        e.metrics(0, rank, &rows);
    }
    // 600 samples a GPU: more than a series keeps.
    e.gpus(
        0,
        0,
        1_000_000,
        600,
        &[(0, &[0], 90.0, 0), (1, &[1], 92.0, 0)],
    );
    e.gpus(
        0,
        1,
        1_001_000,
        600,
        &[
            (0, &[2], 91.0, 0x4),
            (1, &[3], 4.0, 0x1),
            (2, &[], 0.0, 0x1),
        ],
    );
    e.event("finished", json!({"attempt": 0, "ok": true}));
    e
}

fn report(root: &Root, extra: &[&str]) -> String {
    let mut out = Vec::new();
    run(root.args(extra), &mut out).expect("report");
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn json_has_each_gpus_series_and_names_the_idle_one() {
    let root = Root::new();
    gpu_job(&root);
    let doc: serde_json::Value =
        serde_json::from_str(&report(&root, &["gpu", "--json"])).expect("only JSON");
    let run = &doc["runs"][0];
    assert_eq!(run["gpus"], 4, "the workers' count stays");
    let g = &run["gpu_usage"];
    // (90 + 92 + 91 + 4 + 0 + 3 × the mean wobble of 1) / 5.
    let mean = g["mean_util"].as_f64().expect("mean_util");
    assert!((mean - (277.0 / 5.0 + 1.0)).abs() < 0.01, "{mean}");
    let per_gpu = g["per_gpu"].as_array().expect("per_gpu");
    assert_eq!(per_gpu.len(), 5);
    let find = |node: u64, gpu: u64| {
        per_gpu
            .iter()
            .find(|p| p["node"] == node && p["gpu"] == gpu)
            .unwrap_or_else(|| panic!("no node {node} GPU {gpu}: {per_gpu:?}"))
    };
    for p in per_gpu {
        assert_eq!(p["attempt"], 0);
        assert_eq!(p["samples"], 600);
        let series = p["series"].as_array().expect("series");
        assert!(
            series.len() <= 500 && series.len() >= 250,
            "{}",
            series.len()
        );
        let xs: Vec<f64> = series.iter().map(|s| s[0].as_f64().expect("x")).collect();
        assert!(xs.windows(2).all(|w| w[0] < w[1]), "in time order");
        assert!(xs[xs.len() - 1] <= 1199.0 + 1.0, "{xs:?}");
        assert_eq!(series[0].as_array().expect("point").len(), 3);
    }
    // Seconds since the job's first sample: node 0's, a second before node 1's.
    assert_eq!(find(0, 0)["series"][0][0], 0.0);
    assert_eq!(find(1, 0)["series"][0][0], 1.0);
    assert_eq!(find(0, 1)["series"][0][2], 61_441.0);
    let idle = find(1, 1);
    assert_eq!(idle["host"], "node-b");
    assert_eq!(idle["ranks"], json!([3]));
    assert_eq!(idle["flags"][0]["flag"], "idle", "{idle}");
    assert!(
        idle["flags"][0]["words"]
            .as_str()
            .is_some_and(|w| w.starts_with("idle: 5 % busy where the job's GPUs are 91 %")),
        "{idle}"
    );
    assert_eq!(find(0, 0)["flags"], json!([]));
    let throttled = find(1, 0);
    assert_eq!(throttled["flags"][0]["flag"], "throttled");
    assert_eq!(throttled["flags"][0]["by"], json!(["sw_power_cap"]));
    assert_eq!(throttled["throttled"], 1.0);
    assert_eq!(throttled["mean_util"], 92.0);
}

#[test]
fn the_text_names_the_flagged_gpus_with_their_node_and_rank() {
    let root = Root::new();
    gpu_job(&root);
    let out = report(&root, &["gpu"]);
    let lines: Vec<&str> = out.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("  GPUs: "))
        .unwrap_or_else(|| panic!("no GPUs line:\n{out}"));
    assert_eq!(
        lines[at], "  GPUs: mean utilisation 56.4 % over 5 GPUs; 3 flagged:",
        "{out}"
    );
    assert!(
        lines[..at].iter().any(|l| l.starts_with("gpu: goodput ")),
        "after the goodput lines:\n{out}"
    );
    let flagged = &lines[at + 1..at + 4];
    assert_eq!(
        flagged[0], "    node-b GPU 0 (rank 2): throttled by sw_power_cap",
        "{out}"
    );
    assert!(
        flagged[1]
            .starts_with("    node-b GPU 1 (rank 3): idle: 5 % busy where the job's GPUs are 91 %"),
        "{out}"
    );
    assert!(
        flagged[2].starts_with("    node-b GPU 2 (no rank): idle: 1 % busy"),
        "{out}"
    );
}

#[test]
fn the_page_draws_each_gpus_utilisation_and_memory() {
    let root = Root::new();
    gpu_job(&root);
    let page = root.tmp.path().join("gpu.html");
    let plots = root.tmp.path().join("plots");
    report(
        &root,
        &[
            "gpu",
            "--html",
            page.to_str().expect("utf-8"),
            "--plots",
            plots.to_str().expect("utf-8"),
        ],
    );
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(html.contains("<h3>GPUs</h3>"), "{html}");
    assert!(
        html.contains("<li>node-b GPU 0 (rank 2): throttled by sw_power_cap</li>"),
        "{html}"
    );
    assert!(html.contains("data-plot=\"gpu-util\""), "{html}");
    assert!(html.contains("data-plot=\"gpu-memory\""), "{html}");
    assert_eq!(
        html.matches("<svg").count(),
        4,
        "loss, throughput, 2 GPU plots"
    );

    let d = data::load(&root.exp_open("gpu")).expect("loads");
    let p = plot::build(&d, Metric::GpuUtil).expect("a GPU plot");
    assert_eq!(p.title, format!("gpu: {}", plot::GPU_UTIL_TITLE));
    let svg = plot::svg(&p).expect("draws");
    let doc = roxmltree::Document::parse(&svg).expect("SVG parses");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    assert!(texts.contains(&"gpu: GPU utilisation"), "{texts:?}");
    for label in [
        "node-a/0 (rank 0)",
        "node-a/1 (rank 1)",
        "node-b/0 (rank 2)",
        "node-b/1 (rank 3)",
        "node-b/2 (no rank)",
    ] {
        assert!(texts.contains(&label), "{label}: {texts:?}");
    }
    // One line per GPU, each in its own colour, every point of its series.
    for key in 0..5u32 {
        let lines = polylines(&doc, rank_colour(key));
        assert_eq!(lines.len(), 1, "GPU {key}: {lines:?}");
        assert_eq!(lines[0], p.lines[key as usize].points.len());
    }
    let mem = plot::build(&d, Metric::GpuMemory).expect("a memory plot");
    assert_eq!(mem.lines[1].points[0].1, 61_441.0 / 1024.0, "GiB");

    let mut written: Vec<String> = std::fs::read_dir(&plots)
        .expect("plots")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            "gpu.gpu-memory.png",
            "gpu.gpu-memory.svg",
            "gpu.gpu-util.png",
            "gpu.gpu-util.svg",
            "gpu.loss.png",
            "gpu.loss.svg",
            "gpu.throughput.png",
            "gpu.throughput.svg"
        ]
    );
}

#[test]
fn a_job_without_samples_has_no_gpu_section() {
    let root = Root::new();
    two_attempts(&root, "train");
    let out = report(&root, &["train"]);
    assert!(!out.contains("GPUs:"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&report(&root, &["train", "--json"])).expect("only JSON");
    assert!(doc["runs"][0].get("gpu_usage").is_none(), "{doc}");
    let page = root.tmp.path().join("train.html");
    report(&root, &["train", "--html", page.to_str().expect("utf-8")]);
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(
        !html.contains("GPUs") && !html.contains("gpu-util"),
        "{html}"
    );
    assert!(root
        .exp_open("train")
        .paths()
        .logs()
        .attempt(0)
        .gpu_nodes()
        .expect("list")
        .is_empty());
}

/// Without nodes in the rendezvous, the hosts come from the `started` before the attempt;
/// with samples in two attempts, each flagged GPU says its attempt and the plot marks the
/// second.
#[test]
fn hosts_from_started_and_attempts_named_when_several() {
    let root = Root::new();
    let e = root.exp("two");
    e.event(
        "started",
        json!({"job_id": "42", "host": "gpu-a01", "nodes": ["gpu-a01", "gpu-a02"], "requeue": 0}),
    );
    e.event(
        "rendezvous",
        json!({"world_size": 2, "master_addr": "gpu-a01"}),
    );
    e.event("attempt_started", json!({"attempt": 0}));
    e.metrics(0, 0, &[(1_000_000, Some(1), vec![("loss", 2.0)])]);
    e.gpus(0, 0, 1_000_000, 10, &[(0, &[0], 95.0, 0)]);
    e.gpus(0, 1, 1_000_000, 10, &[(0, &[1], 95.0, 0x40)]);
    e.event("restart", json!({"attempt": 1}));
    e.event("attempt_started", json!({"attempt": 1, "restarts": 1}));
    e.gpus(1, 0, 1_100_000, 10, &[(0, &[0], 95.0, 0)]);
    e.gpus(1, 1, 1_100_000, 10, &[(0, &[1], 3.0, 0)]);
    let out = report(&root, &["two"]);
    assert!(
        out.contains("\n    gpu-a02 GPU 0 (rank 1, attempt 0): throttled by hw_thermal\n"),
        "{out}"
    );
    assert!(
        out.contains("\n    gpu-a02 GPU 0 (rank 1, attempt 1): idle: 4 % busy"),
        "{out}"
    );
    assert!(out.contains("over 2 GPUs; 2 flagged:"), "{out}");
    let p = plot::build(&e.data(), Metric::GpuUtil).expect("a plot");
    assert_eq!(p.markers.len(), 1);
    assert_eq!((p.markers[0].attempt, p.markers[0].x), (1, 100.0));
    assert_eq!(p.markers[0].label, "restart");
    // Each GPU keeps its colour over the attempts: two lines of the same key.
    assert_eq!(
        p.lines
            .iter()
            .map(|l| (l.rank, l.attempt))
            .collect::<Vec<_>>(),
        [(0, 0), (0, 1), (1, 0), (1, 1)]
    );
}
