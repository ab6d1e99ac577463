//! Goodput on the bed (issue #28): one 2-node job with a frozen follower node and then a
//! time limit, whose time herd accounts for. It also stands for the frozen-follower case of
//! staying alive (the frozen-leader case is in staying_alive.rs): the loss is reported as
//! the lost node (not as the time limit that comes later), the job is requeued without the
//! node and ends with the checksum of an uninterrupted run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use herd_testbed::{read_lossy, Bed};
use serde_json::Value;

use crate::staying_alive::{
    args, checksum, freeze, project, reference_run, wait_final, wait_for, wait_for_file,
    LOST_NODE_DEADLINE,
};
use crate::support::{events, job_id, names, submit, timeline};

/// Every `step=N` rank 0 logged in an attempt's `rank-0.out`, in order.
fn rank0_steps(exp: &Path, k: usize) -> Vec<u64> {
    read_lossy(exp.join(format!("logs/attempt-{k}/rank-0.out")))
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == "rank=0").then_some(())?;
            words.next()?.strip_prefix("step=")?.parse().ok()
        })
        .collect()
}

fn ms(e: &serde_json::Map<String, Value>) -> u64 {
    e["unix_ms"].as_u64().expect("unix_ms")
}

fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn herd(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("herd runs")
}

/// A 2-node job (checkpoint every 10 steps, 1-minute limit): node 1 freezes at step 15 of
/// attempt 0; herd reports the lost node, requeues without it, attempt 1 resumes from step
/// 10 (the steps since then computed again) and runs into the time limit, checkpoints and
/// is requeued; attempt 2 finishes (or, on a slow bed, meets the limit too). `herd report` then accounts for the wall time: its
/// parts add up to it within 1 s, rework is the steps rank 0's own log shows twice, queue
/// and start are the timeline's stamps, each fault's phases add up to its cost from the
/// fault to training again, and the page and the plots show it.
#[test]
fn a_frozen_node_and_a_time_limit_cost_what_the_report_says() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "goodput");
    let exp_root = exps.display().to_string();
    let train = [
        "python",
        "train_ddp.py",
        "--steps",
        "160",
        "--log-every",
        "1",
        "--ckpt-every",
        "10",
    ];
    let mut slow: Vec<&str> = train.to_vec();
    slow.extend(["--step-time", "0.3"]);
    let job = job_id(&submit(
        &bed,
        &project,
        &args(
            &[
                "-J",
                "costly",
                "--nodes",
                "2",
                "--gpus-per-node",
                "2",
                "--time",
                "1",
                "--warn-before",
                "20",
                "--stop-grace",
                "15",
                "--max-requeues",
                "3",
            ],
            &exp_root,
            &slow,
        ),
    ));
    let exp = exps.join("costly");

    // --- the freeze: every process of node 1's part ---------------------------------
    wait_for(
        &exp.join("logs/attempt-0/rank-2.out"),
        "rank=2 step=15 ",
        Duration::from_secs(240),
    );
    let started = events(&timeline(&exp), "started")[0]["nodes"].clone();
    let host = started[1].as_str().expect("node 1").to_owned();
    // Frozen, not stopped: this job has a time limit, and the SIGCONT SLURM sends up to a
    // minute before it (herd's warning) would wake a stopped node before herd noticed.
    let freezing_ms = unix_ms_now();
    let _frozen = freeze(&bed, &host, &exp, "train_ddp.py --steps 160 ");
    let frozen_ms = unix_ms_now();
    let stopped = Instant::now();
    let report_path = exp.join("logs/attempt-0/failure.json");
    wait_for_file(&report_path, stopped, LOST_NODE_DEADLINE);
    let report: Value =
        serde_json::from_str(&read_lossy(&report_path)).expect("failure.json parses");
    assert!(
        report["cause"]
            .as_str()
            .unwrap_or_default()
            .starts_with(&format!("lost node 1 ({host})")),
        "{report:#}"
    );
    let reference = reference_run(&bed, &project, &exps, &train);
    // Three attempts or four, a few minutes: 8 minutes tells a stuck job.
    let info = wait_final(&bed, job, &exp, Duration::from_secs(480));
    assert!(info.succeeded(), "{info:?}");

    // --- the story: lost node → requeue without it, time limit → requeue, the end -----
    let all = timeline(&exp);
    let requeues = events(&all, "requeue");
    // Attempt 1 cannot do the 150 steps left in the 40 s before the warning (0.3 s a step
    // at least); a slow bed may need a second time limit.
    let causes: Vec<&Value> = requeues.iter().map(|r| &r["cause"]).collect();
    assert!(
        causes.len() >= 2
            && causes[0] == "node_failure"
            && causes[1..].iter().all(|c| *c == "time_limit"),
        "{:?}",
        names(&all)
    );
    assert_eq!(requeues[0]["exclude"], Value::from(vec![host.clone()]));
    let allocs = events(&all, "started");
    let attempts = allocs.len();
    assert_eq!(attempts, requeues.len() + 1, "{:?}", names(&all));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert_eq!(checksum(&out), checksum(&reference));
    let left = bed
        .node_processes("train_ddp.py")
        .expect("the nodes' process tables");
    assert!(
        left.is_empty(),
        "nothing of the frozen attempt is left: {left:?}"
    );

    // --- the accounting, as `herd report --json` gives it -------------------------------
    let json_out = herd(
        &["report", "costly", "--exp-root", &exp_root, "--json"],
        &project,
    );
    assert!(json_out.status.success(), "{json_out:?}");
    let doc: Value = serde_json::from_slice(&json_out.stdout).expect("report JSON");
    let g = &doc["runs"][0]["goodput"];
    eprintln!("goodput: {g:#}");
    let part = |name: &str| g["parts"][name].as_f64().unwrap_or(f64::NAN);
    let sum: f64 = [
        "training",
        "rework",
        "detection",
        "stop",
        "start",
        "running",
        "queue",
        "other",
    ]
    .iter()
    .map(|p| part(p))
    .sum();
    // The wall time by the timeline's own stamps: the first start to the end.
    let finished = events(&all, "finished");
    assert_eq!(finished.len(), 1);
    let wall = (ms(finished[0]) - ms(allocs[0])) as f64 / 1000.0;
    assert!(
        (sum - wall).abs() <= 1.0 && (g["wall_s"].as_f64().unwrap_or(0.0) - wall).abs() <= 1.0,
        "parts {sum} s, wall {} s, the timeline's {wall} s",
        g["wall_s"]
    );
    // Rework: the steps rank 0's own logs show more than once.
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for k in 0..attempts {
        let steps = rank0_steps(&exp, k);
        assert!(!steps.is_empty(), "attempt {k} trained");
        for s in steps {
            *seen.entry(s).or_default() += 1;
        }
    }
    let twice: usize = seen.values().map(|n| n - 1).sum();
    assert!(
        twice > 0,
        "attempt 1 resumed from step 10 after step 15: {seen:?}"
    );
    assert_eq!(g["rework_steps"], twice as u64, "{g:#}");
    assert!(part("rework") > 0.0 && part("detection") > 0.5, "{g:#}");
    // Queue: each requeue to the next start, by the timeline's stamps.
    let queue: u64 = requeues
        .iter()
        .zip(&allocs[1..])
        .map(|(r, s)| ms(s) - ms(r))
        .sum();
    assert!(
        (part("queue") - queue as f64 / 1000.0).abs() < 0.002,
        "queue {} s, the timeline's {queue} ms",
        part("queue")
    );
    // Start: each allocation's start to rank 0's first step reading in its attempt.
    for (k, alloc) in allocs.iter().enumerate() {
        let series = herd_metrics::store::read_rank(&exp.join(format!("logs/attempt-{k}")), 0)
            .expect("rank 0's readings");
        let first = series
            .time_ms
            .iter()
            .zip(&series.step)
            .find(|(t, s)| **t > 0 && s.is_some())
            .map(|(t, _)| *t)
            .expect("a step reading");
        let want = (first - ms(alloc)) as f64 / 1000.0;
        let got = g["attempts"][k]["parts"]["start"]
            .as_f64()
            .unwrap_or(f64::NAN);
        assert!(
            (got - want).abs() < 0.002,
            "attempt {k}: start {got} s, want {want} s"
        );
    }
    // Each fault: its phases add up to its cost, which runs from the fault (the freeze;
    // the time limit's warning) to training again (attempt K+1's reading of the highest
    // step attempt K reached, all before it computed again).
    let faults = g["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), attempts - 1, "one fault per requeue: {g:#}");
    let mut best = 0;
    for (k, f) in faults.iter().enumerate() {
        let at = f["at_unix_ms"].as_u64().expect("at_unix_ms");
        let cost = f["cost_s"].as_f64().expect("cost_s");
        let sum: f64 = f["phases"]
            .as_object()
            .expect("phases")
            .values()
            .map(|v| v.as_f64().expect("every phase happened"))
            .sum();
        assert!(
            (sum - cost).abs() < 0.01,
            "fault {k}: phases {sum} s, cost {cost} s: {f:#}"
        );
        best = best.max(rank0_steps(&exp, k).into_iter().max().unwrap_or(0));
        let series =
            herd_metrics::store::read_rank(&exp.join(format!("logs/attempt-{}", k + 1)), 0)
                .expect("rank 0's readings");
        let again = series
            .time_ms
            .iter()
            .zip(&series.step)
            .find(|(_, s)| s.is_some_and(|s| s >= best))
            .map(|(t, _)| *t)
            .expect("the next attempt passed the fault's step");
        let cost_seen = again.saturating_sub(at) as f64 / 1000.0;
        assert!(
            (cost - cost_seen).abs() <= 1.0,
            "fault {k}: cost {cost} s, from its moment to attempt {}'s step {best}: {cost_seen} s: {f:#}",
            k + 1
        );
        assert_eq!(f["then"], "requeue", "{f:#}");
        if k == 0 {
            assert_eq!(f["kind"], "node failure", "{f:#}");
            assert!(
                at + 1000 >= freezing_ms && at <= frozen_ms + 1000,
                "the lost node's fault at {at}, the freeze {freezing_ms}..{frozen_ms}: {f:#}"
            );
            assert!(f["phases"]["detect"].as_f64().unwrap_or(0.0) > 0.5, "{f:#}");
        } else {
            assert_eq!(f["kind"], "time limit", "{f:#}");
            let warnings: Vec<u64> = events(&all, "warning").iter().map(|w| ms(w)).collect();
            assert!(
                warnings.contains(&at),
                "a time limit's fault is its warning {warnings:?}: {f:#}"
            );
            assert_eq!(f["phases"]["detect"], 0.0, "{f:#}");
        }
        // The requeue phase holds the queue.
        let queued = (ms(allocs[k + 1]) - ms(requeues[k])) as f64 / 1000.0;
        assert!(
            f["phases"]["relaunch"].as_f64().unwrap_or(0.0) >= queued,
            "fault {k}: the requeue phase holds the {queued} s queue: {f:#}"
        );
    }
    let ended: Vec<&str> = (0..attempts)
        .map(|k| g["attempts"][k]["ended"].as_str().unwrap_or(""))
        .collect();
    let mut want = vec!["requeue: node failure"];
    want.resize(attempts - 1, "requeue: time limit");
    want.push("finished");
    assert_eq!(ended, want, "{g:#}");

    // --- the report's line, the page and the plots --------------------------------------
    let plots = project.join("plots");
    let page = project.join("report.html");
    let text_out = herd(
        &[
            "report",
            "costly",
            "--exp-root",
            &exp_root,
            "--plots",
            plots.to_str().expect("utf-8"),
            "--html",
            page.to_str().expect("utf-8"),
        ],
        &project,
    );
    assert!(text_out.status.success(), "{text_out:?}");
    let text = String::from_utf8_lossy(&text_out.stdout);
    let percent = g["goodput"].as_f64().expect("goodput") * 100.0;
    assert!(
        text.contains(&format!("costly: goodput {percent:.1} % of ")),
        "{text}"
    );
    assert!(text.contains(&format!(" ({twice} steps)")), "{text}");
    assert!(
        text.contains(&format!("  {} faults, ", attempts - 1))
            && text.contains("    attempt 0, node failure → requeue: ")
            && text.contains(" = detect "),
        "the faults, one line each: {text}"
    );
    let html = std::fs::read_to_string(&page).expect("page");
    assert!(html.contains("<h3>Goodput</h3>"), "{html}");
    for span in ["training", "rework", "detection", "stop", "start", "queue"] {
        assert!(
            html.contains(&format!("class=\"span {span}\"")),
            "a {span} span in the strip"
        );
    }
    assert!(html.contains("<td>requeue: node failure</td>"));
    // No line of any plot runs back in steps: each attempt's readings are a line of their
    // own, so a resume from an older checkpoint draws no segment going backwards.
    for what in ["loss", "throughput"] {
        let svg = std::fs::read_to_string(plots.join(format!("costly.{what}.svg"))).expect("svg");
        let doc = roxmltree::Document::parse(&svg).expect("SVG parses");
        let mut lines = 0;
        for line in doc.descendants().filter(|n| n.has_tag_name("polyline")) {
            let xs: Vec<f64> = line
                .attribute("points")
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.split(',').next()?.parse().ok())
                .collect();
            lines += 1;
            assert!(
                xs.windows(2).all(|w| w[1] >= w[0]),
                "{what}: a line goes back in steps: {xs:?}"
            );
        }
        assert!(
            lines >= 12,
            "{what}: 4 ranks × 3 attempts at least, {lines} lines"
        );
    }
    // herd status: the whole job's time, and its goodput.
    let status = herd(&["status", "costly", "--exp-root", &exp_root], &project);
    let said = String::from_utf8_lossy(&status.stdout);
    assert!(said.contains("; goodput "), "{said}");
}

/// A job that checkpoints every 5 steps with `herd.save_atomic` (each save 0.3 s) and whose
/// worker crashes once: `herd report` gives the checkpoint advice with the numbers it was
/// computed from, the same numbers the attempts' `checkpoints.jsonl` hold: the saves, the
/// median save and interval, one fault that cost work, and Young's interval from them.
#[test]
fn the_report_advises_a_checkpoint_interval_from_the_timed_saves_and_the_faults() {
    let bed = Bed::require();
    let (project, exps) = crate::support::project_with(
        &bed,
        "goodput_advice",
        &[(
            "crates/herd/tests/e2e/workers/ckpt_regular.py",
            "ckpt_regular.py",
        )],
    );
    let module = project.join("herd");
    std::fs::create_dir_all(&module).expect("module");
    for entry in std::fs::read_dir(herd_testbed::repo_root().join("python/herd"))
        .expect("python/herd")
        .flatten()
    {
        std::fs::copy(entry.path(), module.join(entry.file_name())).expect("copy");
    }
    let exp_root = exps.display().to_string();
    let job = job_id(&submit(
        &bed,
        &project,
        &args(
            &[
                "-J",
                "advised",
                "--nodes",
                "1",
                "--gpus-per-node",
                "2",
                "--max-restarts",
                "1",
            ],
            &exp_root,
            &["python", "ckpt_regular.py", "40", "0.1", "5", "0.3", "12"],
        ),
    ));
    let exp = exps.join("advised");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    assert!(info.succeeded(), "{info:?}");

    // What the saves were, as the attempts' files say.
    let mut seconds = Vec::new();
    let mut gaps = Vec::new();
    for k in 0..2 {
        let text = read_lossy(exp.join(format!("logs/attempt-{k}/checkpoints.jsonl")));
        let saves: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a save"))
            .collect();
        assert!(!saves.is_empty(), "attempt {k} saved");
        for w in saves.windows(2) {
            gaps.push(
                w[1]["started"].as_f64().unwrap_or(0.0) - w[0]["started"].as_f64().unwrap_or(0.0),
            );
        }
        seconds.extend(
            saves
                .iter()
                .map(|s| s["seconds"].as_f64().expect("seconds")),
        );
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let n = v.len();
        if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        }
    };
    let (saves, save_s, every_s) = (seconds.len(), median(seconds), median(gaps));
    assert!(save_s >= 0.3, "each save took its 0.3 s at least: {save_s}");

    let out = herd(
        &["report", "advised", "--exp-root", &exp_root, "--json"],
        &project,
    );
    assert!(out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    let c = &doc["runs"][0]["goodput"]["checkpoint_advice"];
    assert_eq!(c["saves"], saves as u64, "{c:#}");
    let num = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
    assert!((num("save_s") - save_s).abs() < 1e-3, "{c:#}");
    assert!((num("every_s") - every_s).abs() < 1e-2, "{c:#}");
    assert_eq!(c["lossy_faults"], 1, "the crash: {c:#}");
    let mtbf = num("allocated_s");
    assert!((num("mtbf_s") - mtbf).abs() < 1e-6, "{c:#}");
    assert!(
        (num("best_every_s") - (2.0 * save_s * mtbf).sqrt()).abs() < 1e-2,
        "Young's interval from the same numbers: {c:#}"
    );
    let text = herd(&["report", "advised", "--exp-root", &exp_root], &project);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!("  checkpoints: {saves} saves, one every "))
            && text.contains("1 fault cost work in ")
            && text.contains(" (Young: √(2 × "),
        "{text}"
    );
}
