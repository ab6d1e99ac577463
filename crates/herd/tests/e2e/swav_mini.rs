//! examples/swav_mini.py through `herd run` of 2 simulated nodes x 2 workers on this machine
//! (no SLURM, no test bed; it needs the torch venv, `testbed/venv`, which builds it once):
//! every rank logs SwAV's lines and herd's JSON metrics lines, the loss goes down, all ranks
//! end with one checksum, and a run resumed from a mid-epoch checkpoint (the feature queue
//! full) ends with that checksum too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use herd_testbed::repo_root;
use serde_json::Value;

const HERD: &str = env!("CARGO_BIN_EXE_herd");
const WORLD: u32 = 4;
const EPOCHS: u64 = 2;
const ITERS: u64 = 6;

/// The venv's python, from `testbed/venv` (as the bed's tests find it).
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let out = Command::new(repo_root().join("testbed/venv"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run testbed/venv");
        assert!(
            out.status.success(),
            "testbed/venv could not provide the torch venv ({})",
            out.status
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// The common arguments: 2 epochs of 6 iterations, a queue from epoch 1 (32 features a
/// rank: full after one step), checkpoints every 4 steps (8 is mid-epoch 1).
fn swav_args(ckpt_dir: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "--epochs",
        &EPOCHS.to_string(),
        "--iters-per-epoch",
        &ITERS.to_string(),
        "--log-every",
        "2",
        "--queue-length",
        "128",
        "--epoch-queue-starts",
        "1",
        "--freeze-prototypes-niters",
        "3",
        "--ckpt-every",
        "4",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push("--ckpt-dir".into());
    args.push(ckpt_dir.display().to_string());
    args
}

/// `herd run --nodes 2 --nproc-per-node 2 --label -- PY examples/swav_mini.py ARGS…`: its
/// stdout, once it succeeded within 5 minutes.
fn herd_run(dir: &Path, name: &str, args: &[String]) -> String {
    let stdout = dir.join(format!("{name}.out"));
    let stderr = dir.join(format!("{name}.err"));
    let mut cmd = Command::new(HERD);
    cmd.args(["run", "--nodes", "2", "--nproc-per-node", "2", "--label"])
        .arg("--log-dir")
        .arg(dir.join(format!("{name}-logs")))
        .arg("--")
        .arg(python())
        .arg(repo_root().join("examples/swav_mini.py"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).expect("stdout file"))
        .stderr(std::fs::File::create(&stderr).expect("stderr file"));
    for var in [
        "SLURM_JOB_ID",
        "SLURM_JOBID",
        "SLURM_STEP_ID",
        "HERD_CHECKPOINT_DIR",
        "HERD_RESUME_FROM",
    ] {
        cmd.env_remove(var);
    }
    let mut child = cmd.spawn().expect("herd run starts");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(300) {
            // SIGTERM: herd tears its workers down.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
            panic!(
                "herd run {name} took over 5 minutes\n{}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = std::fs::read_to_string(&stdout).expect("read stdout");
    assert!(
        status.success(),
        "herd run {name} failed ({status})\nstdout:\n{out}\nstderr:\n{}",
        std::fs::read_to_string(&stderr).unwrap_or_default()
    );
    out
}

/// Each rank's lines, from `--label`'s `R: ` prefixes.
fn by_rank(output: &str) -> BTreeMap<u32, Vec<&str>> {
    let mut lines: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for line in output.lines() {
        if let Some((label, rest)) = line.split_once(": ") {
            if let Ok(rank) = label.trim().parse::<u32>() {
                lines.entry(rank).or_default().push(rest);
            }
        }
    }
    lines
}

/// A SwAV line (`INFO - date time - elapsed - Epoch: [e][it]\tTime v (avg)\tData v (avg)\t
/// Loss v (avg)\tLr: v`): (epoch, iteration, loss).
fn swav_line(line: &str) -> Option<(u64, u64, f64)> {
    let at = line.find("Epoch: [")?;
    assert!(
        line.starts_with("INFO - "),
        "SwAV's logger prefix: {line:?}"
    );
    let fields: Vec<&str> = line[at..].split('\t').collect();
    assert_eq!(fields.len(), 5, "five tab-separated fields: {line:?}");
    let head = fields[0].strip_prefix("Epoch: [").expect("Epoch");
    let (epoch, rest) = head.split_once("][").expect("][");
    let it = rest.strip_suffix(']').expect("]");
    let pair = |field: &str, name: &str| -> (f64, f64) {
        let body = field
            .strip_prefix(name)
            .unwrap_or_else(|| panic!("{name} in {line:?}"));
        let (val, avg) = body.split_once(" (").expect("value (average)");
        let avg = avg.strip_suffix(')').expect(")");
        (val.parse().expect("value"), avg.parse().expect("average"))
    };
    pair(fields[1], "Time ");
    pair(fields[2], "Data ");
    let (loss, _) = pair(fields[3], "Loss ");
    let lr: f64 = fields[4]
        .strip_prefix("Lr: ")
        .expect("Lr: ")
        .parse()
        .expect("lr");
    assert!(lr >= 0.0, "{line:?}");
    Some((
        epoch.parse().expect("epoch"),
        it.parse().expect("iteration"),
        loss,
    ))
}

/// `rank=R done steps=N checksum=H`: (N, H).
fn done_line(line: &str) -> Option<(u64, String)> {
    let rest = line.strip_prefix("rank=")?;
    let (_, rest) = rest.split_once(" done ")?;
    let mut steps = None;
    let mut sum = None;
    for word in rest.split_whitespace() {
        match word.split_once('=') {
            Some(("steps", v)) => steps = v.parse().ok(),
            Some(("checksum", v)) => sum = Some(v.to_owned()),
            _ => {}
        }
    }
    Some((steps?, sum?))
}

fn number(obj: &Value, key: &str, line: &str) -> f64 {
    obj.get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("numeric {key:?} in {line:?}"))
}

/// What one rank printed: checked line by line; its checksum.
fn check_rank(rank: u32, lines: &[&str], output: &str) -> String {
    // SwAV's lines: iterations 0, 2, 4 and the last (5) of each epoch.
    let swav: Vec<(u64, u64, f64)> = lines.iter().filter_map(|l| swav_line(l)).collect();
    let want: Vec<(u64, u64)> = (0..EPOCHS)
        .flat_map(|e| [0, 2, 4, 5].map(|it| (e, it)))
        .collect();
    assert_eq!(
        swav.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
        want,
        "rank {rank}'s SwAV lines\n{output}"
    );

    // herd's convention: the metrics lines, then one epoch_time_s line per epoch.
    let mut metrics = Vec::new();
    let mut epochs = Vec::new();
    for line in lines.iter().filter(|l| l.starts_with('{')) {
        let obj: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("rank {rank}: {line:?} is no JSON: {e}"));
        let step = number(&obj, "step", line);
        let epoch = number(&obj, "epoch", line);
        if obj.get("epoch_time_s").is_some() {
            let t = number(&obj, "epoch_time_s", line);
            assert!(t > 0.0, "{line:?}");
            epochs.push((step as u64, epoch as u64));
        } else {
            let loss = number(&obj, "loss", line);
            let rate = number(&obj, "samples_per_s", line);
            let lr = number(&obj, "lr", line);
            assert!(loss.is_finite() && rate > 0.0 && lr >= 0.0, "{line:?}");
            metrics.push((step as u64, epoch as u64, loss));
        }
    }
    let steps: Vec<u64> = metrics.iter().map(|m| m.0).collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "rank {rank}'s steps do not increase: {steps:?}"
    );
    assert_eq!(
        steps,
        vec![1, 3, 5, 6, 7, 9, 11, 12],
        "rank {rank}\n{output}"
    );
    assert_eq!(
        epochs,
        vec![(ITERS, 0), (2 * ITERS, 1)],
        "rank {rank}'s epoch_time_s lines\n{output}"
    );
    // The SwAV lines and the JSON lines report the same losses (4 decimals against 6 digits).
    for (s, m) in swav.iter().zip(&metrics) {
        assert!((s.2 - m.2).abs() < 1e-3, "rank {rank}: {s:?} vs {m:?}");
    }
    let (first, last) = (metrics[0].2, metrics[metrics.len() - 1].2);
    eprintln!(
        "rank {rank}: loss {first} -> {last} over {} steps",
        EPOCHS * ITERS
    );
    assert!(
        last < first,
        "rank {rank}'s loss did not go down: {first} -> {last}\n{output}"
    );

    let done: Vec<(u64, String)> = lines.iter().filter_map(|l| done_line(l)).collect();
    assert_eq!(done.len(), 1, "rank {rank}'s done line\n{output}");
    assert_eq!(done[0].0, EPOCHS * ITERS, "{done:?}");
    assert_eq!(done[0].1.len(), 64, "a SHA-256: {done:?}");
    done[0].1.clone()
}

fn checksums(output: &str) -> BTreeSet<String> {
    let lines = by_rank(output);
    assert_eq!(
        lines.keys().copied().collect::<Vec<_>>(),
        (0..WORLD).collect::<Vec<_>>(),
        "{output}"
    );
    lines
        .values()
        .filter_map(|ls| ls.iter().find_map(|l| done_line(l)).map(|d| d.1))
        .collect()
}

#[test]
fn swav_mini_trains_logs_and_resumes_bit_for_bit() {
    // No bed, but six torch processes: one heavy test at a time, as with the bed's.
    let _turn = herd_testbed::exclusive();
    let dir = tempfile::tempdir().expect("temp dir");
    let ckpt = dir.path().join("ckpt");
    let output = herd_run(dir.path(), "full", &swav_args(&ckpt));

    let lines = by_rank(&output);
    assert_eq!(
        lines.keys().copied().collect::<Vec<_>>(),
        (0..WORLD).collect::<Vec<_>>(),
        "every rank's lines\n{output}"
    );
    let sums: BTreeSet<String> = lines
        .iter()
        .map(|(rank, ls)| check_rank(*rank, ls, &output))
        .collect();
    assert_eq!(sums.len(), 1, "ranks disagree: {sums:?}\n{output}");
    for step in [4, 8, 12] {
        let file = ckpt.join(format!("ckpt-{step:09}.pt"));
        assert!(file.is_file(), "no {}\n{output}", file.display());
    }

    // Resume from step 8 (epoch 1, iteration 2; the queue in use) in a fresh folder.
    let again = dir.path().join("again");
    std::fs::create_dir_all(&again).expect("mkdir");
    std::fs::copy(
        ckpt.join("ckpt-000000008.pt"),
        again.join("ckpt-000000008.pt"),
    )
    .expect("copy checkpoint");
    let resumed = herd_run(dir.path(), "resumed", &swav_args(&again));
    for (rank, ls) in by_rank(&resumed) {
        assert!(
            ls.iter()
                .any(|l| l.starts_with(&format!("rank={rank} resumed from="))
                    && l.ends_with(" step=8")),
            "rank {rank} did not resume from step 8\n{resumed}"
        );
    }
    assert_eq!(
        checksums(&resumed),
        sums,
        "the resumed run ends elsewhere\nfull:\n{output}\nresumed:\n{resumed}"
    );
}
