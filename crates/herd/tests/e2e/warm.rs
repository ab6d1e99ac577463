//! Warm starts on the bed (docs/launch.md, "Warm starts"): a restart in the same
//! allocation runs each worker from the standby its agent started once the attempt before
//! trained, and the script cannot tell: the same environment (but the attempt's own
//! variables, which carry the new attempt's values), argv, `__main__`, `sys.path[0]`,
//! working folder, stdin, signal dispositions, process group, `multiprocessing` spawn
//! children, traceback and exit code as the cold start before it. `--warm off` starts
//! every worker cold.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use herd_testbed::{read_lossy, Bed};
use serde_json::Value;

use crate::support::{events, job_id, names, project_with, submit, timeline};

/// The variables that differ from one attempt to the next, warm or cold.
const PER_ATTEMPT: [&str; 10] = [
    "HERD_ATTEMPT",
    "TORCHELASTIC_RESTART_COUNT",
    "MASTER_ADDR",
    "MASTER_PORT",
    "HERD_LOG_DIR",
    "HERD_HEARTBEAT_FILE",
    "HERD_METRICS_FILE",
    "TORCHELASTIC_ERROR_FILE",
    "HERD_RESUME_FROM",
    "GLOO_SOCKET_IFNAME",
];

/// Submit the probe on 2 nodes × 2 workers with one restart, no requeue (and `extra` flags; its
/// attempt 0 waits for the standbys when `wait`); wait for it to fail, as it does on
/// purpose; its experiment folder and batch stderr.
fn probe(bed: &Bed, name: &str, extra: &[&str], wait: bool) -> (std::path::PathBuf, String) {
    let (project, exps) = project_with(
        bed,
        name,
        &[(
            "crates/herd/tests/e2e/workers/warm_probe.py",
            "warm_probe.py",
        )],
    );
    let out = exps.join("seen");
    std::fs::create_dir_all(&out).expect("out");
    let (exp_root, out_arg) = (exps.display().to_string(), out.display().to_string());
    let mut args = vec![
        "-J",
        name,
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--max-restarts",
        "1",
        // A node whose worker fails first twice is blamed: no requeue then, the job ends.
        "--max-requeues",
        "0",
        "--exp-root",
        &exp_root,
    ];
    args.extend_from_slice(extra);
    let wait = if wait { "wait" } else { "nowait" };
    args.extend(["--", "python", "warm_probe.py", &out_arg, wait]);
    let id = job_id(&submit(bed, &project, &args));
    let exp = exps.join(name);
    let info = bed
        .wait(id, Duration::from_secs(300))
        .expect("the job ends");
    let err = read_lossy(exp.join(format!("logs/{id}.err")));
    assert!(
        !info.succeeded(),
        "the probe fails on purpose: {info:?}\n{err}"
    );
    (exp, err)
}

fn seen(exp: &Path, attempt: u32, rank: u32) -> Value {
    let path = exp
        .parent()
        .expect("exps")
        .join(format!("seen/attempt-{attempt}-rank-{rank}.json"));
    serde_json::from_str(&read_lossy(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The traceback in rank `rank`'s stderr of attempt `attempt`: its lines from
/// `Traceback` to the exception's.
fn traceback(exp: &Path, attempt: u32, rank: u32) -> Vec<String> {
    let text = read_lossy(exp.join(format!("logs/attempt-{attempt}/rank-{rank}.err")));
    text.lines()
        .skip_while(|l| !l.starts_with("Traceback"))
        .take_while(|l| !l.starts_with("RuntimeError"))
        .chain(
            text.lines()
                .filter(|l| l.starts_with("RuntimeError"))
                .take(1),
        )
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_warm_restart_sees_exactly_what_a_cold_start_does() {
    let bed = Bed::require();
    let (exp, err) = probe(&bed, "warm", &[], true);
    let all = timeline(&exp);
    let order = names(&all);
    let started = events(&all, "attempt_started");
    assert_eq!(started.len(), 2, "{order:?}");
    let port1 = started[1]["master_port"].to_string();
    for node in &bed.nodes()[..2] {
        assert!(
            err.lines().any(
                |l| l.contains(&format!("herd: {node}: ranks ")) && l.contains(" started warm")
            ),
            "{node}'s workers of attempt 1 started warm:\n{err}"
        );
    }
    for rank in 0..4 {
        let (cold, warm) = (seen(&exp, 0, rank), seen(&exp, 1, rank));
        // Everything but the environment, field by field.
        let fields: BTreeSet<&String> = cold
            .as_object()
            .expect("object")
            .keys()
            .chain(warm.as_object().expect("object").keys())
            .collect();
        for field in fields.into_iter().filter(|f| *f != "env") {
            assert_eq!(cold[field], warm[field], "rank {rank}: {field}");
        }
        assert_eq!(
            warm["spawn_child"], 49,
            "a spawn child ran the script's function"
        );
        assert_eq!(warm["stdin"], "/dev/null");
        assert_eq!(warm["own_group"], true);
        // The environment: the same but for the attempt's own variables, which are attempt
        // 1's.
        let (ce, we) = (&cold["env"], &warm["env"]);
        let keys: BTreeSet<&String> = ce
            .as_object()
            .expect("env")
            .keys()
            .chain(we.as_object().expect("env").keys())
            .collect();
        for key in keys {
            if !PER_ATTEMPT.contains(&key.as_str()) {
                assert_eq!(ce[key], we[key], "rank {rank}: {key}");
            }
        }
        assert_eq!(we["HERD_ATTEMPT"], "1", "rank {rank}");
        assert_eq!(we["TORCHELASTIC_RESTART_COUNT"], "1", "rank {rank}");
        assert_eq!(
            we["MASTER_PORT"].as_str(),
            Some(port1.as_str()),
            "rank {rank}"
        );
        assert!(
            we["HERD_LOG_DIR"]
                .as_str()
                .is_some_and(|d| d.ends_with("/logs/attempt-1")),
            "rank {rank}: {we:#}"
        );
        // The same traceback, with no line of herd's standby in it.
        let (tc, tw) = (traceback(&exp, 0, rank), traceback(&exp, 1, rank));
        assert!(tw.len() >= 3, "rank {rank}: {tw:?}");
        assert_eq!(tc, tw, "rank {rank}");
        assert!(!tw.iter().any(|l| l.contains("<string>")), "{tw:?}");
        // No restart is left after attempt 1 (--max-restarts 1): no standby was started.
        let held = read_lossy(
            exp.parent()
                .expect("exps")
                .join(format!("seen/attempt-1-rank-{rank}.standbys")),
        );
        assert_eq!(held.trim(), "0", "rank {rank}");
        // It learned torch for the standby after it.
        let learned = read_lossy(exp.join(format!("logs/attempt-1/rank-{rank}.modules")));
        assert!(
            learned.lines().any(|l| l == "torch"),
            "rank {rank}: {learned}"
        );
    }
    // Both attempts end the same way: a rank exits with code 1.
    let exits = events(&all, "worker_exit");
    for attempt in 0..2 {
        assert!(
            exits
                .iter()
                .any(|e| e["attempt"] == attempt && e["exit"] == serde_json::json!({"code": 1})),
            "attempt {attempt}: {order:?}"
        );
    }
}

#[test]
fn warm_off_starts_every_worker_cold() {
    let bed = Bed::require();
    let (exp, err) = probe(&bed, "cold", &["--warm", "off"], false);
    assert!(!err.contains("started warm"), "{err}");
    assert!(
        !exp.join("logs/attempt-1/rank-0.modules").exists(),
        "nothing learned: no standby ran"
    );
    for rank in 0..4 {
        assert_eq!(seen(&exp, 1, rank)["env"]["HERD_ATTEMPT"], "1");
    }
}
