//! Training in containers on the bed (docs/containers.md): the bed's image (testbed/image: a
//! Debian 12 root with Debian's python3-torch, whose own environment sets `RANK=99`,
//! `LOCAL_RANK=99`, `WORLD_SIZE=99` and `MASTER_ADDR=wrong`) run by Charliecloud as a
//! folder and as a SquashFS file, by Podman from its store, and Pyxis' job steps with its
//! container part stood in. What each runtime's jobs go through is shared here.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use herd_testbed::{rank_lines, read_lossy, Bed, JobId};
use serde_json::Value;

use crate::staying_alive::{args, checksum, kill, stop, wait_final, wait_for};
use crate::support::{events, job_id, local_herd_run, names, submit, timeline};

mod charliecloud;
mod podman;
mod pyxis;

/// The image's own python run on this machine with no container at all (no namespace, no
/// mount): its interpreter and its libraries by path. The image is Debian 12 like the bed,
/// so these are the same programs and libraries the container runs, and a training run
/// with them is "the same job without a container".
fn bare_image_python(image: &Path) -> Vec<String> {
    let mut lib_dirs = std::collections::BTreeSet::new();
    for top in ["usr/lib", "lib"] {
        collect_lib_dirs(&image.join(top), &mut lib_dirs);
    }
    let lib_path: Vec<String> = lib_dirs.iter().map(|d| d.display().to_string()).collect();
    vec![
        "/usr/bin/env".into(),
        format!("PYTHONHOME={}", image.join("usr").display()),
        format!("LD_LIBRARY_PATH={}", lib_path.join(":")),
        image.join("usr/bin/python3").display().to_string(),
    ]
}

/// Every folder under `dir` that holds a shared library.
fn collect_lib_dirs(dir: &Path, out: &mut std::collections::BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(kind) = e.file_type() else { continue };
        let name = e.file_name().to_string_lossy().into_owned();
        if kind.is_dir() {
            collect_lib_dirs(&e.path(), out);
        } else if name.contains(".so") {
            out.insert(dir.to_owned());
        }
    }
}

/// The `env …` line a worker printed before training, as NAME=VALUE pairs.
pub(super) fn env_line(log: &str) -> std::collections::BTreeMap<String, String> {
    log.lines()
        .find_map(|l| l.strip_prefix("env "))
        .unwrap_or_else(|| panic!("no env line in:\n{log}"))
        .split_whitespace()
        .filter_map(|w| {
            let (k, v) = w.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// `herd submit` arguments: `common`, `--container IMAGE`, then the rest.
pub(super) fn in_image<'a>(common: &[&'a str], image: &'a str) -> Vec<&'a str> {
    let mut a = common.to_vec();
    a.extend(["--container", image]);
    a
}

/// The reference of `train` (train_ddp.py's arguments) with the image's python and no
/// container: 2 simulated nodes × 2 workers here; its output.
pub(super) fn bare_reference(project: &Path, exps: &Path, image: &Path, train: &[&str]) -> String {
    let dir = exps.join("reference");
    std::fs::create_dir_all(&dir).expect("reference dir");
    std::fs::copy(project.join("train_ddp.py"), dir.join("train_ddp.py")).expect("copy");
    let mut bare = bare_image_python(image);
    bare.push("train_ddp.py".into());
    bare.extend(train.iter().map(|s| s.to_string()));
    local_herd_run(&dir, 2, 2, &bare)
}

/// Each of the 4 ranks' `env …` line (attempt 0 of `exp`): herd's ranks and master, never
/// the image's `RANK=99`/`MASTER_ADDR=wrong`, the image's own `LANG`, and
/// `PYTHONNOUSERSITE=1`.
pub(super) fn ranks_saw_herds_variables_over_the_images(exp: &Path) {
    for rank in 0..4u32 {
        let log = read_lossy(exp.join(format!("logs/attempt-0/rank-{rank}.out")));
        let env = env_line(&log);
        assert_eq!(env["RANK"], rank.to_string(), "{log}");
        assert_eq!(env["LOCAL_RANK"], (rank % 2).to_string(), "{log}");
        assert_eq!(env["WORLD_SIZE"], "4", "{log}");
        assert!(
            env["MASTER_ADDR"] != "wrong" && !env["MASTER_ADDR"].is_empty(),
            "herd's master, not the image's: {log}"
        );
        assert_eq!(env["LANG"], "C.UTF-8", "the image's own variable: {log}");
        assert_eq!(env["NOUSERSITE"], "1", "{log}");
    }
}

/// A job that ran into its time limit (`out`: its batch output, `exp`: its experiment):
/// requeued for the time limit only, resumed from a checkpoint, and ended with the
/// checksum of `reference`.
pub(super) fn requeued_at_the_time_limit_and_lost_no_step(exp: &Path, out: &str, reference: &str) {
    let all = timeline(exp);
    let requeues = events(&all, "requeue");
    assert!(!requeues.is_empty(), "{:#?}", names(&all));
    assert!(
        requeues.iter().all(|r| r["cause"] == "time_limit"),
        "{requeues:#?}"
    );
    assert!(
        out.contains("resumed from="),
        "a later attempt resumed from the checkpoint:\n{out}"
    );
    assert_eq!(checksum(out), checksum(reference), "no step lost");
}

/// A job `hang` of hang.py on 2 nodes × 2 workers (`container`: the flags naming the image
/// and runtime, `on_hang`: what the hang does): rank 3 stops (SIGSTOP) in a barrier, and
/// herd's report names the pid rank 3 printed inside (the workers keep the host's PID
/// namespace), with every rank's py-spy stack (py-spy is the host's). The job and its
/// experiment, for what the caller checks next.
pub(super) fn a_hang_names_the_pid_inside_with_every_stack(
    bed: &Bed,
    project: &Path,
    exps: &Path,
    container: &[&str],
    on_hang: &[&str],
) -> (JobId, PathBuf) {
    let exp_root = exps.display().to_string();
    let mut common = vec![
        "-J",
        "hang",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--hang-timeout",
        "8",
    ];
    common.extend(on_hang);
    common.extend(container);
    let job = job_id(&submit(
        bed,
        project,
        &args(
            &common,
            &exp_root,
            &["python3", "hang.py", "--rounds", "15"],
        ),
    ));
    let exp = exps.join("hang");
    let log = wait_for(
        &exp.join("logs/attempt-0/rank-3.out"),
        "rank=3 barrier=2\n",
        Duration::from_secs(240),
    );
    let pid = rank_lines(&log, "start")[&3]["pid"].clone();
    kill("STOP", &pid);
    let stopped = Instant::now();
    let report_path = exp.join("logs/attempt-0/failure.json");
    while !report_path.exists() {
        assert!(
            stopped.elapsed() < Duration::from_secs(120),
            "no hang report 120 s after the stop (hang timeout 8 s)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let report: Value =
        serde_json::from_str(&read_lossy(&report_path)).expect("failure.json parses");
    let cause = report["cause"].as_str().unwrap_or_default();
    assert!(
        cause.contains(&format!("rank 3 (pid {pid} on {})", bed.nodes()[1])),
        "the pid the worker printed inside is the one herd names: {report:#}"
    );
    let stacks = report["stacks"].as_array().expect("stacks");
    let ranks: Vec<u64> = stacks.iter().filter_map(|s| s["rank"].as_u64()).collect();
    assert_eq!(ranks, [0, 1, 2, 3], "a stack for every rank: {report:#}");
    for s in stacks {
        let text = s["stack"].as_str().unwrap_or_default();
        assert!(
            text.contains("Thread") && text.contains("hang.py"),
            "py-spy's stack of rank {} inside: {text}",
            s["rank"]
        );
    }
    (job, exp)
}

/// A job `spare` of train_ddp.py on 2 nodes × 2 workers and a spare (`container`: the
/// flags naming the image and runtime): node 1 stops, the spare takes its place in the same
/// job, which ends with the checksum of the same training with `image`'s python and no
/// container.
pub(super) fn a_stopped_node_is_replaced_by_the_spare(
    bed: &Bed,
    project: &Path,
    exps: &Path,
    image: &Path,
    container: &[&str],
) {
    let exp_root = exps.display().to_string();
    let train = ["--steps", "60", "--log-every", "1", "--ckpt-every", "10"];
    let mut slow = vec!["python3", "train_ddp.py"];
    slow.extend(train);
    slow.extend(["--step-time", "0.3"]);
    let mut common = vec![
        "-J",
        "spare",
        "--nodes",
        "2",
        "--spare-nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--max-requeues",
        "1",
    ];
    common.extend(container);
    let job = job_id(&submit(bed, project, &args(&common, &exp_root, &slow)));
    let exp = exps.join("spare");
    wait_for(
        &exp.join("logs/attempt-0/rank-2.out"),
        "rank=2 step=15 ",
        Duration::from_secs(240),
    );
    let all = timeline(&exp);
    let rendezvous = &events(&all, "rendezvous")[0];
    let frozen_host = rendezvous["nodes"][1]["host"]
        .as_str()
        .expect("host")
        .to_owned();
    let spare_host = rendezvous["spares"][0]
        .as_str()
        .expect("a spare")
        .to_owned();
    stop(bed, &frozen_host, &exp, "train_ddp.py --steps 60 ");
    let reference = bare_reference(project, exps, image, &train);
    let info = wait_final(bed, job, &exp, Duration::from_secs(300));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(info.succeeded(), "{info:?}\n{out}");
    let all = timeline(&exp);
    let replace = events(&all, "replace");
    assert_eq!(replace.len(), 1, "{:?}", names(&all));
    assert_eq!(replace[0]["node"], Value::from(frozen_host));
    assert_eq!(replace[0]["by"], Value::from(spare_host));
    assert_eq!(checksum(&out), checksum(&reference));
}

/// A job `segv` (submitted by `submit_job`; `container`: the flags naming the image and
/// runtime) of `python -c` on 1 node × 2 workers whose rank 1 kills itself with SIGSEGV,
/// its command line marked with `marker`: the job fails, and the report names rank 1 and
/// SIGSEGV, Python's own signal, never the runtime's exit code (1, 139).
pub(super) fn a_segfault_is_reported_as_sigsegv(
    bed: &Bed,
    exps: &Path,
    submit_job: &dyn Fn(&[&str]) -> Output,
    container: &[&str],
    python: &str,
    marker: &str,
) {
    let exp_root = exps.display().to_string();
    let segv = format!(
        "import os, signal, time  # {marker}\n\
         if os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGSEGV)\n\
         time.sleep(300)\n"
    );
    let mut common = vec![
        "-J",
        "segv",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--time",
        "5",
    ];
    common.extend(container);
    let job = job_id(&submit_job(&args(
        &common,
        &exp_root,
        &[python, "-c", &segv],
    )));
    let exp = exps.join("segv");
    let info = wait_final(bed, job, &exp, Duration::from_secs(240));
    assert!(!info.succeeded(), "the job fails: {info:?}");
    let report: Value = serde_json::from_str(&read_lossy(exp.join("logs/attempt-0/failure.json")))
        .unwrap_or_else(|e| {
            panic!(
                "failure.json: {e}\n{}",
                read_lossy(exp.join(format!("logs/{job}.err")))
            )
        });
    assert_eq!(report["rank"], 1, "{report:#}");
    assert_eq!(
        report["exit"],
        serde_json::json!({"signal": "SIGSEGV"}),
        "Python's own signal, not the runtime's exit code: {report:#}"
    );
}
