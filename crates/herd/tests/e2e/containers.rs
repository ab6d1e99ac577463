//! Training in containers on the bed (docs/containers.md): the bed's image (testbed/image: a
//! Debian 12 root with Debian's python3-torch, whose own environment sets `RANK=99`,
//! `LOCAL_RANK=99`, `WORLD_SIZE=99` and `MASTER_ADDR=wrong`) run by Charliecloud as a
//! folder and as a SquashFS file, and by Podman from its store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_testbed::{bed_image, bed_image_squashfs, bed_podman_image, read_lossy, Bed};
use serde_json::Value;

use crate::staying_alive::{args, checksum, project, wait_final};
use crate::support::{events, job_id, local_herd_run, names, submit, timeline};

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
fn env_line(log: &str) -> std::collections::BTreeMap<String, String> {
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

/// 2 nodes × 2 workers of train_ddp.py in the bed's image, once as a folder and once as a
/// SquashFS file, both under Charliecloud: each reaches the checksum of the same training
/// with the image's own python and torch run without a container. Each worker sees herd's
/// ranks and master, never the image's `RANK=99`/`MASTER_ADDR=wrong`, and the rest of the
/// image's environment (`LANG`), with `PYTHONNOUSERSITE=1`. Then a worker that dies of SIGSEGV inside the image is
/// reported as SIGSEGV, the job fails, and no process of these jobs (no squashfuse either)
/// is left on any node.
#[test]
fn charliecloud_folder_and_squashfs_images_train_to_the_bare_checksum_with_herds_variables() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let squashfs = bed_image_squashfs(&image);
    let (project, exps) = project(&bed, "containers_charliecloud");
    let exp_root = exps.display().to_string();
    let train = ["train_ddp.py", "--steps", "30", "--log-every", "10"];
    let common = |name: &'static str, image: &Path| -> Vec<String> {
        [
            "-J",
            name,
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--time",
            "5",
            "--container",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([image.display().to_string()])
        .collect()
    };
    // The folder image: each worker says what it sees, then trains.
    let said = format!(
        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
         MASTER_ADDR=$MASTER_ADDR LANG=$LANG NOUSERSITE=$PYTHONNOUSERSITE\"; \
         exec python3 {}",
        train.join(" ")
    );
    let folder_args = common("in_folder", &image);
    let folder_args: Vec<&str> = folder_args.iter().map(String::as_str).collect();
    let in_folder = job_id(&submit(
        &bed,
        &project,
        &args(&folder_args, &exp_root, &["sh", "-c", &said]),
    ));
    // The SquashFS image: python3 as the worker command itself.
    let squash_args = common("in_squashfs", &squashfs);
    let squash_args: Vec<&str> = squash_args.iter().map(String::as_str).collect();
    let mut python_train = vec!["python3"];
    python_train.extend(train);
    let in_squashfs = job_id(&submit(
        &bed,
        &project,
        &args(&squash_args, &exp_root, &python_train),
    ));

    // The same training without a container.
    let reference = bare_reference(&project, &exps, &image, &train[1..]);

    for (job, name) in [(in_folder, "in_folder"), (in_squashfs, "in_squashfs")] {
        let exp = exps.join(name);
        let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
        let out = read_lossy(exp.join(format!("logs/{job}.out")));
        assert!(
            info.succeeded(),
            "{name}: {info:?}\n{out}\n{}",
            read_lossy(exp.join(format!("logs/{job}.err")))
        );
        assert_eq!(
            checksum(&out),
            checksum(&reference),
            "{name}: the checksum of the same training without a container"
        );
        let manifest: Value =
            serde_json::from_str(&read_lossy(exp.join("manifest.json"))).expect("manifest");
        assert_eq!(
            manifest["plan"]["container"]["image"],
            Value::from(if name == "in_folder" {
                image.display().to_string()
            } else {
                squashfs.display().to_string()
            }),
            "{name}: the manifest names the image"
        );
    }
    let exp = exps.join("in_folder");
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
    let all = timeline(&exp);
    assert_eq!(events(&all, "finished").len(), 1, "{:?}", names(&all));

    // --- a worker that dies of SIGSEGV inside the image ---------------------------------
    let marker = "herd-e2e-container-segv";
    let segv = format!(
        "import os, signal, time  # {marker}\n\
         if os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGSEGV)\n\
         time.sleep(300)\n"
    );
    let segv_args = [
        "-J",
        "segv",
        "--nodes",
        "1",
        "--gpus-per-node",
        "2",
        "--time",
        "5",
        "--container",
        squashfs.to_str().expect("utf-8 path"),
    ];
    let job = job_id(&submit(
        &bed,
        &project,
        &args(&segv_args, &exp_root, &["python3", "-c", &segv]),
    ));
    let exp = exps.join("segv");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
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
    for needle in [marker, "train_ddp.py", "squashfuse", "ch-run"] {
        let left = bed
            .node_processes(needle)
            .expect("the nodes' process tables");
        assert!(left.is_empty(), "left running: {left:#?}");
    }
}

/// `herd submit` arguments: `common`, `--container IMAGE`, then the rest.
fn in_image<'a>(common: &[&'a str], image: &'a str) -> Vec<&'a str> {
    let mut a = common.to_vec();
    a.extend(["--container", image]);
    a
}

/// The reference of `train` (train_ddp.py's arguments) with the image's python and no
/// container: 2 simulated nodes × 2 workers here; its output.
fn bare_reference(project: &Path, exps: &Path, image: &Path, train: &[&str]) -> String {
    let dir = exps.join("reference");
    std::fs::create_dir_all(&dir).expect("reference dir");
    std::fs::copy(project.join("train_ddp.py"), dir.join("train_ddp.py")).expect("copy");
    let mut bare = bare_image_python(image);
    bare.push("train_ddp.py".into());
    bare.extend(train.iter().map(|s| s.to_string()));
    local_herd_run(&dir, 2, 2, &bare)
}

/// In the SquashFS image: 2 nodes × 2 workers with a 1-minute time limit; herd warns 20 s
/// before each limit (the workers checkpoint on SIGUSR1 inside the image), requeues the job
/// (`scontrol` is the host's: the image has none), and it resumes from the checkpoint and
/// finishes with the checksum of the same training run without interruption or container.
#[test]
fn in_a_container_a_time_limit_requeues_and_the_job_resumes_with_no_lost_step() {
    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let squashfs = bed_image_squashfs(&image);
    let (project, exps) = project(&bed, "containers_time_limit");
    let exp_root = exps.display().to_string();
    let train = [
        "--steps",
        "100",
        "--log-every",
        "1",
        "--ckpt-every",
        "100000",
    ];
    let mut slow = vec!["python3", "train_ddp.py"];
    slow.extend(train);
    slow.extend(["--step-time", "0.5"]);
    let sqfs = squashfs.display().to_string();
    let common = in_image(
        &[
            "-J",
            "limited",
            "-p",
            "dev",
            "--time",
            "1",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--warn-before",
            "20",
            "--stop-grace",
            "15",
            "--max-requeues",
            "8",
        ],
        &sqfs,
    );
    let job = job_id(&submit(&bed, &project, &args(&common, &exp_root, &slow)));
    let reference = bare_reference(&project, &exps, &image, &train);
    let exp = exps.join("limited");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(480));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(info.succeeded(), "{info:?}\n{out}");
    let all = timeline(&exp);
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
    assert_eq!(checksum(&out), checksum(&reference), "no step lost");
}

/// In the folder image: rank 3 stops (SIGSTOP) in a barrier; with `--hang-timeout 8` herd
/// reports the hang naming rank 3, with every rank's py-spy stack (py-spy is the host's;
/// the workers keep the host's PID namespace), and restarts the workers, which finish.
/// Then a job with a spare: node 1 freezes and the spare takes its place in the same job,
/// which ends with the uninterrupted checksum; nothing is left running on any node.
#[test]
fn in_a_container_a_hang_is_reported_with_every_stack_and_a_frozen_node_is_replaced() {
    use crate::staying_alive::{kill, stop, wait_for};
    use herd_testbed::rank_lines;
    use std::time::Instant;

    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let folder = image.display().to_string();
    let (project, exps) = crate::support::project_with(
        &bed,
        "containers_hang_spare",
        &[
            ("crates/herd/tests/e2e/workers/hang.py", "hang.py"),
            ("examples/train_ddp.py", "train_ddp.py"),
        ],
    );
    let exp_root = exps.display().to_string();

    // --- a hang ---------------------------------------------------------------------------
    let common = in_image(
        &[
            "-J",
            "hang",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--hang-timeout",
            "8",
            "--on-hang",
            "restart",
            "--max-restarts",
            "1",
        ],
        &folder,
    );
    let job = job_id(&submit(
        &bed,
        &project,
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
        "the pid the worker printed inside the image is the one herd names: {report:#}"
    );
    let stacks = report["stacks"].as_array().expect("stacks");
    let ranks: Vec<u64> = stacks.iter().filter_map(|s| s["rank"].as_u64()).collect();
    assert_eq!(ranks, [0, 1, 2, 3], "a stack for every rank: {report:#}");
    for s in stacks {
        let text = s["stack"].as_str().unwrap_or_default();
        assert!(
            text.contains("Thread") && text.contains("hang.py"),
            "py-spy's stack of rank {} inside the image: {text}",
            s["rank"]
        );
    }
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
    assert!(info.succeeded(), "{info:?}");
    let all = timeline(&exp);
    assert_eq!(events(&all, "restart").len(), 1, "{:?}", names(&all));

    // --- a frozen node replaced by a spare ------------------------------------------------------
    let train = ["--steps", "60", "--log-every", "1", "--ckpt-every", "10"];
    let mut slow = vec!["python3", "train_ddp.py"];
    slow.extend(train);
    slow.extend(["--step-time", "0.3"]);
    let common = in_image(
        &[
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
        ],
        &folder,
    );
    let job = job_id(&submit(&bed, &project, &args(&common, &exp_root, &slow)));
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
    stop(&bed, &frozen_host, &exp, "train_ddp.py --steps 60 ");
    let reference = bare_reference(&project, &exps, &image, &train);
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(info.succeeded(), "{info:?}\n{out}");
    let all = timeline(&exp);
    let replace = events(&all, "replace");
    assert_eq!(replace.len(), 1, "{:?}", names(&all));
    assert_eq!(replace[0]["node"], Value::from(frozen_host));
    assert_eq!(replace[0]["by"], Value::from(spare_host));
    assert_eq!(checksum(&out), checksum(&reference));
    for needle in ["train_ddp.py", "hang.py", "squashfuse"] {
        let left = bed
            .node_processes(needle)
            .expect("the nodes' process tables");
        assert!(left.is_empty(), "left running: {left:#?}");
    }
}

/// Every container Podman has on this machine whose name herd gave (`herd-…`).
fn herd_containers() -> Vec<String> {
    let out = std::process::Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}} {{.Status}}"])
        .output()
        .expect("podman ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("herd-"))
        .map(str::to_owned)
        .collect()
}

/// Podman, the bed's image from its store: 2 nodes × 2 workers of train_ddp.py with a
/// 1-minute time limit. Each worker sees herd's ranks and master, never the image's, and
/// the image's own `LANG`, with `PYTHONNOUSERSITE=1`; herd's warning signal reaches Python
/// itself inside the container (it checkpoints), the job is requeued with the host's
/// `scontrol`, resumes and ends with the checksum of the same training with the image's
/// python and no container. Then rank 3 hangs (SIGSTOP) and the report names the pid it
/// printed inside, with every rank's py-spy stack taken from the host; then a worker that
/// dies of SIGSEGV is reported as SIGSEGV, not as Podman's exit code 139. Nothing of these
/// jobs is left on any node, and no container.
#[test]
fn podman_workers_get_herds_variables_signals_stacks_and_their_own_exit_and_leave_nothing() {
    use crate::staying_alive::{kill, wait_for};
    use herd_testbed::rank_lines;
    use std::time::Instant;

    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let name = bed_podman_image().expect("the bed's image in podman (testbed/image)");
    let (project, exps) = crate::support::project_with(
        &bed,
        "containers_podman",
        &[
            ("crates/herd/tests/e2e/workers/hang.py", "hang.py"),
            ("examples/train_ddp.py", "train_ddp.py"),
        ],
    );
    let exp_root = exps.display().to_string();

    // --- a time limit, requeue and resume, with the variables each worker sees ------------
    let train = [
        "--steps",
        "100",
        "--log-every",
        "1",
        "--ckpt-every",
        "100000",
    ];
    let said = format!(
        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
         MASTER_ADDR=$MASTER_ADDR LANG=$LANG NOUSERSITE=$PYTHONNOUSERSITE\"; \
         exec python3 train_ddp.py {} --step-time 0.5",
        train.join(" ")
    );
    let common = in_image(
        &[
            "-J",
            "limited",
            "-p",
            "dev",
            "--time",
            "1",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--warn-before",
            "20",
            "--stop-grace",
            "15",
            "--max-requeues",
            "8",
        ],
        &name,
    );
    let job = job_id(&submit(
        &bed,
        &project,
        &args(&common, &exp_root, &["sh", "-c", &said]),
    ));
    let reference = bare_reference(&project, &exps, &image, &train);
    let exp = exps.join("limited");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(480));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(
        info.succeeded(),
        "{info:?}\n{out}\n{}",
        read_lossy(exp.join(format!("logs/{job}.err")))
    );
    let all = timeline(&exp);
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
    assert_eq!(checksum(&out), checksum(&reference), "no step lost");
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

    // --- a hang: the pid inside is the one herd names, every stack from the host ----------
    let common = in_image(
        &[
            "-J",
            "hang",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--hang-timeout",
            "8",
            "--on-hang",
            "fail",
        ],
        &name,
    );
    let job = job_id(&submit(
        &bed,
        &project,
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
        "the pid the worker printed inside the container is the one herd names: {report:#}"
    );
    let stacks = report["stacks"].as_array().expect("stacks");
    let ranks: Vec<u64> = stacks.iter().filter_map(|s| s["rank"].as_u64()).collect();
    assert_eq!(ranks, [0, 1, 2, 3], "a stack for every rank: {report:#}");
    for s in stacks {
        let text = s["stack"].as_str().unwrap_or_default();
        assert!(
            text.contains("Thread") && text.contains("hang.py"),
            "py-spy's stack of rank {} inside the container: {text}",
            s["rank"]
        );
    }
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
    assert!(!info.succeeded(), "--on-hang fail: {info:?}");

    // --- a worker that dies of SIGSEGV ----------------------------------------------------
    let marker = "herd-e2e-podman-segv";
    let segv = format!(
        "import os, signal, time  # {marker}\n\
         if os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGSEGV)\n\
         time.sleep(300)\n"
    );
    let segv_args = in_image(
        &[
            "-J",
            "segv",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--time",
            "5",
        ],
        &name,
    );
    let job = job_id(&submit(
        &bed,
        &project,
        &args(&segv_args, &exp_root, &["python3", "-c", &segv]),
    ));
    let exp = exps.join("segv");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
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
        "Python's own signal, not podman's exit code: {report:#}"
    );

    // --- nothing left ---------------------------------------------------------------------
    nothing_left_of_podman(&bed, &[marker, "train_ddp.py", "hang.py"], true);

    // --- a frozen node replaced by a spare ------------------------------------------------
    let train = ["--steps", "60", "--log-every", "1", "--ckpt-every", "10"];
    let mut slow = vec!["python3", "train_ddp.py"];
    slow.extend(train);
    slow.extend(["--step-time", "0.3"]);
    let common = in_image(
        &[
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
        ],
        &name,
    );
    let job = job_id(&submit(&bed, &project, &args(&common, &exp_root, &slow)));
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
    crate::staying_alive::stop(&bed, &frozen_host, &exp, "train_ddp.py --steps 60 ");
    let reference = bare_reference(&project, &exps, &image, &train);
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(info.succeeded(), "{info:?}\n{out}");
    let all = timeline(&exp);
    let replace = events(&all, "replace");
    assert_eq!(replace.len(), 1, "{:?}", names(&all));
    assert_eq!(replace[0]["node"], Value::from(frozen_host));
    assert_eq!(replace[0]["by"], Value::from(spare_host));
    assert_eq!(checksum(&out), checksum(&reference));
    // The stopped node's agent was killed by SLURM at the job's end, with no chance to
    // remove its container: nothing of it runs (its guard, or SLURM, ended the workers),
    // and the next herd agent on that node removes the record Podman keeps.
    nothing_left_of_podman(&bed, &["train_ddp.py"], false);
}

/// No process of the jobs (`needles`), no conmon or podman process, on any node, and no
/// container of herd's running (`or_stopped`: nor stopped) within 30 s of their end.
fn nothing_left_of_podman(bed: &Bed, needles: &[&str], or_stopped: bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut left = Vec::new();
        for needle in needles.iter().chain(&["conmon", "podman"]) {
            left.extend(
                bed.node_processes(needle)
                    .expect("the nodes' process tables"),
            );
        }
        left.extend(
            herd_containers()
                .into_iter()
                .filter(|c| or_stopped || c.contains(" Up ")),
        );
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "left 30 s after the last job ended: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Pyxis' side of a job on the bed, which has no Pyxis: an `srun` on the job's PATH stands in
/// for Pyxis' srun (it drops the `--container-*` options and runs the real srun, so the
/// worker runs on the host, in the test venv), with a no-op `enroot` beside it. Everything
/// else is real: on 2 nodes × 2 workers each worker is a one-task step of its own, started
/// by its node's agent with `srun --overlap` (four step ids); herd's variables, set by
/// `env` last, win over the step's own (`SLURM_PROCID=0`); the training reaches the checksum of the same run
/// without SLURM; a worker that dies of SIGSEGV is reported as SIGSEGV (srun's exit code
/// 139 read as the signal); nothing is left on any node.
#[test]
fn pyxis_workers_run_as_steps_of_their_own_with_herds_variables_set_last() {
    use crate::staying_alive::reference_run;

    let bed = Bed::require();
    let image = bed_image().expect("the bed's image (testbed/image)");
    let squashfs = bed_image_squashfs(&image);
    let (project, exps) = project(&bed, "containers_pyxis");
    let exp_root = exps.display().to_string();
    let shim = exps.join("pyxis-shim");
    std::fs::create_dir_all(&shim).expect("shim dir");
    let real_srun = String::from_utf8_lossy(
        &std::process::Command::new("sh")
            .args(["-c", "command -v srun"])
            .output()
            .expect("sh")
            .stdout,
    )
    .trim()
    .to_owned();
    assert!(real_srun.starts_with('/'), "srun on PATH: {real_srun:?}");
    let srun = format!(
        "#!/bin/sh\n\
         # Pyxis stood in: srun less its --container-* options (those before the\n\
         # command; its own are all --name=value).\n\
         if [ \"$1\" = --help ]; then\n\
         \x20   {real_srun} --help\n\
         \x20   echo '      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH'\n\
         \x20   exit 0\n\
         fi\n\
         cmd=\n\
         for a do\n\
         \x20   shift\n\
         \x20   if [ -z \"$cmd\" ]; then\n\
         \x20       case $a in\n\
         \x20       --container-*|--no-container-*) continue ;;\n\
         \x20       -*) ;;\n\
         \x20       *) cmd=1 ;;\n\
         \x20       esac\n\
         \x20   fi\n\
         \x20   set -- \"$@\" \"$a\"\n\
         done\n\
         exec {real_srun} \"$@\"\n"
    );
    herd_testbed::write_file(&shim.join("srun"), &srun, 0o755).expect("srun shim");
    herd_testbed::write_file(&shim.join("enroot"), "#!/bin/sh\nexit 0\n", 0o755).expect("enroot");
    let venv_bin = bed.python().parent().expect("venv bin").to_path_buf();
    let path = format!(
        "{}:{}:{}",
        shim.display(),
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let python = bed.python().display().to_string();
    let submit_here =
        |args: &[&str]| crate::support::herd_with_path("submit", &project, args, &path);

    let train = ["--steps", "30", "--log-every", "10"];
    let said = format!(
        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE \
         SLURM_PROCID=$SLURM_PROCID NOUSERSITE=$PYTHONNOUSERSITE STEP=$SLURM_STEP_ID\"; \
         exec {python} train_ddp.py {}",
        train.join(" ")
    );
    let sqfs = squashfs.display().to_string();
    let common = in_image(
        &[
            "-J",
            "steps",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--time",
            "5",
            "--container-runtime",
            "pyxis",
        ],
        &sqfs,
    );
    let job = job_id(&submit_here(&args(
        &common,
        &exp_root,
        &["sh", "-c", &said],
    )));
    let mut full = vec!["python", "train_ddp.py"];
    full.extend(train);
    let reference = reference_run(&bed, &project, &exps, &full);
    let exp = exps.join("steps");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(300));
    let out = read_lossy(exp.join(format!("logs/{job}.out")));
    assert!(
        info.succeeded(),
        "{info:?}\n{out}\n{}",
        read_lossy(exp.join(format!("logs/{job}.err")))
    );
    assert_eq!(
        checksum(&out),
        checksum(&reference),
        "the run without SLURM"
    );
    let mut steps = std::collections::BTreeSet::new();
    for rank in 0..4u32 {
        let log = read_lossy(exp.join(format!("logs/attempt-0/rank-{rank}.out")));
        let env = env_line(&log);
        assert_eq!(env["RANK"], rank.to_string(), "{log}");
        assert_eq!(env["LOCAL_RANK"], (rank % 2).to_string(), "{log}");
        assert_eq!(env["WORLD_SIZE"], "4", "{log}");
        assert_eq!(
            env["SLURM_PROCID"],
            rank.to_string(),
            "herd's, not the one-task step's 0: {log}"
        );
        assert_eq!(env["NOUSERSITE"], "1", "{log}");
        steps.insert(env["STEP"].clone());
    }
    assert_eq!(
        steps.len(),
        4,
        "each worker in a job step of its own, not its agent's: {steps:?}"
    );

    // --- a worker that dies of SIGSEGV --------------------------------------------------
    let marker = "herd-e2e-pyxis-segv";
    let segv = format!(
        "import os, signal, time  # {marker}\n\
         if os.environ['RANK'] == '1':\n    os.kill(os.getpid(), signal.SIGSEGV)\n\
         time.sleep(300)\n"
    );
    let segv_args = in_image(
        &[
            "-J",
            "segv",
            "--nodes",
            "1",
            "--gpus-per-node",
            "2",
            "--time",
            "5",
            "--container-runtime",
            "pyxis",
        ],
        &sqfs,
    );
    let job = job_id(&submit_here(&args(
        &segv_args,
        &exp_root,
        &[&python, "-c", &segv],
    )));
    let exp = exps.join("segv");
    let info = wait_final(&bed, job, &exp, Duration::from_secs(240));
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
        "Python's own signal, not srun's exit code: {report:#}"
    );
    for needle in [marker, "train_ddp.py"] {
        let left = bed
            .node_processes(needle)
            .expect("the nodes' process tables");
        assert!(left.is_empty(), "left running: {left:#?}");
    }
}
