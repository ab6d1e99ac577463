//! `herd submit` on the bed: dependencies by name (`--after`), chains (`--then`) and new
//! submissions of an experiment (`--resume`), from its newest checkpoint.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use herd_testbed::{rank_lines, read_lossy, Bed, JobId};
use serde_json::Value;

use crate::submit::{checksum, project, submit_true};
use crate::support::{herd_with_path, job_id, submit, wait_ok};

/// `sbatch --hold --job-name=NAME --wrap=true` from `dir`: a job that waits, by name.
fn held_job(dir: &Path, name: &str) -> JobId {
    let out = Command::new("sbatch")
        .args(["--parsable", "--hold", "--job-name", name, "--wrap=true"])
        .current_dir(dir)
        .output()
        .expect("sbatch runs");
    assert!(out.status.success(), "sbatch: {out:?}");
    JobId(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("job id"),
    )
}

/// `--after NAME:any` and `NAME:notok` become SLURM's afterany and afternotok on the jobs
/// of those names; a name that several jobs have is refused, listing their ids, and
/// nothing is written or submitted.
#[test]
fn after_kinds_by_name_and_a_name_of_several_jobs() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_after_kinds");
    let exp_root = exps.display().to_string();
    let scratch = project.parent().expect("scratch").to_path_buf();
    let (pa, pb) = (
        held_job(&scratch, "after-pa"),
        held_job(&scratch, "after-pb"),
    );
    let dups = [
        held_job(&scratch, "after-dup"),
        held_job(&scratch, "after-dup"),
    ];

    let out = submit_true(
        &bed,
        &project,
        &exp_root,
        "kinds",
        &["--after", "after-pa:any", "--after", "after-pb:notok"],
    );
    let kinds = job_id(&out);
    let info = bed.job(kinds).expect("the job");
    let dependency = info.fields.get("Dependency").cloned().unwrap_or_default();
    assert!(
        dependency.contains(&format!("afterany:{pa}(unfulfilled)"))
            && dependency.contains(&format!("afternotok:{pb}(unfulfilled)")),
        "{dependency}"
    );

    let out = submit_true(
        &bed,
        &project,
        &exp_root,
        "ambiguous",
        &["--after", "after-dup"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--after after-dup: 2 jobs are named \"after-dup\" (ids {}, {}); give the id instead",
            dups[0], dups[1]
        )),
        "{stderr}"
    );
    assert!(!exps.join("ambiguous").exists(), "nothing written");
    let queued = Command::new("squeue")
        .args(["-h", "-n", "ambiguous", "-o", "%i"])
        .output()
        .expect("squeue");
    assert!(
        String::from_utf8_lossy(&queued.stdout).trim().is_empty(),
        "nothing submitted"
    );
}

/// A submitted job checkpoints into its experiment's `checkpoints/` (HERD_CHECKPOINT_DIR);
/// stopped by SIGUSR1 and queued again with `--resume`, its workers get the newest complete
/// checkpoint as HERD_RESUME_FROM (chosen by the leader and said in the log) and the run
/// ends with the checksum of an uninterrupted one.
#[test]
fn a_resumed_experiment_starts_from_its_newest_checkpoint() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_resume_checkpoint");
    let exp_root = exps.display().to_string();
    let args = |name: &'static str, slow: bool| -> Vec<String> {
        let mut a: Vec<String> = [
            "-J",
            name,
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--time",
            "10",
            "--exp-root",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(exp_root.clone());
        a.extend(
            [
                "--",
                "python",
                "train_ddp.py",
                "--steps",
                "60",
                "--log-every",
                "5",
                "--ckpt-every",
                "20",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        if slow {
            a.extend(["--step-time".to_owned(), "0.2".to_owned()]);
        }
        a
    };
    let exp = exps.join("ckpt");
    let first = job_id(&submit(&bed, &project, &strs(&args("ckpt", true))));
    let rank0 = exp.join("logs/attempt-0/rank-0.out");
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while !read_lossy(&rank0).contains("rank=0 step=25 ") {
        assert!(
            std::time::Instant::now() < deadline,
            "no step 25 in {}:\n{}",
            rank0.display(),
            read_lossy(&rank0)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    bed.signal(first, "USR1").expect("scancel --signal=USR1");
    let out = wait_ok(&bed, first, &exp);
    let stops = rank_lines(&out, "stopping");
    assert_eq!(stops.len(), 4, "every rank stops on SIGUSR1:\n{out}");
    let stop: u32 = stops[&0]["step"].parse().expect("step");
    let mut ckpts: Vec<String> = std::fs::read_dir(exp.join("checkpoints"))
        .expect("checkpoints/ of the experiment")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    ckpts.sort();
    assert_eq!(
        ckpts.last(),
        Some(&format!("ckpt-{stop:09}.pt")),
        "the stop checkpoint is the newest: {ckpts:?}"
    );
    assert!(ckpts.contains(&"ckpt-000000020.pt".to_owned()), "{ckpts:?}");

    let again = submit(
        &bed,
        &project,
        &["--resume", "ckpt", "--exp-root", &exp_root],
    );
    let second = job_id(&again);
    let straight = job_id(&submit(&bed, &project, &strs(&args("straight", false))));
    let resumed = wait_ok(&bed, second, &exp);
    let newest = exp.join(format!("checkpoints/ckpt-{stop:09}.pt"));
    let said = read_lossy(exp.join(format!("logs/{second}.err")));
    assert!(
        said.contains(&format!("attempt 1 resumes from {}", newest.display())),
        "the leader names the checkpoint it gives the workers:\n{said}"
    );
    let resumes = rank_lines(&resumed, "resumed");
    assert_eq!(resumes.len(), 4, "every rank resumes:\n{resumed}");
    assert!(
        resumes
            .values()
            .all(|f| f["from"] == newest.display().to_string() && f["step"] == stop.to_string()),
        "{resumed}"
    );
    let reference = wait_ok(&bed, straight, &exps.join("straight"));
    assert!(
        rank_lines(&reference, "resumed").is_empty(),
        "a new experiment starts fresh: {reference}"
    );
    assert_eq!(
        checksum(&resumed, 4),
        checksum(&reference, 4),
        "the resumed run diverged from the uninterrupted one"
    );
    // The timeline tells both jobs' story, in order, from herd submit and the leader.
    let events = crate::support::timeline(&exp);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(
        names,
        [
            "queued",
            "started",
            "rendezvous",
            "attempt_started",
            "first_output",
            "signal",
            "finished",
            "queued",
            "started",
            "rendezvous",
            "attempt_started",
            "first_output",
            "finished"
        ],
        "{events:#?}"
    );
    let job = |e: &serde_json::Map<String, Value>| e["job_id"].to_string().replace('"', "");
    assert_eq!(
        (job(&events[0]), &events[0]["submission"]),
        (first.to_string(), &Value::from(1))
    );
    assert_eq!(job(&events[1]), first.to_string());
    assert_eq!(events[2]["world_size"], 4);
    assert_eq!(events[3]["resume_from"], Value::Null, "{:?}", events[3]);
    assert_eq!(
        (&events[5]["signal"], &events[5]["action"]),
        (&Value::from("SIGUSR1"), &Value::from("forward")),
        "a user's USR1 long before the time limit is passed on: {:?}",
        events[5]
    );
    assert_eq!(events[6]["ok"], true);
    assert_eq!(
        (job(&events[7]), &events[7]["submission"]),
        (second.to_string(), &Value::from(2))
    );
    assert_eq!(job(&events[8]), second.to_string());
    assert_eq!(
        (&events[10]["attempt"], &events[10]["resume_from"]),
        (&Value::from(1), &Value::from(newest.display().to_string())),
        "the second job's attempt is the experiment's second: {:?}",
        events[10]
    );
    assert_eq!(events[12]["ok"], true);
    let times: Vec<u64> = events
        .iter()
        .map(|e| e["unix_ms"].as_u64().expect("unix_ms"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Each attempt has its own log folder: the first one's is kept as it was.
    let log = read_lossy(&rank0);
    assert!(
        log.contains(&format!("stopping on SIGUSR1 step={stop}")) && !log.contains("resumed"),
        "{log}"
    );
    let log = read_lossy(exp.join("logs/attempt-1/rank-0.out"));
    assert!(
        log.contains("resumed from=") && log.contains("done steps=60"),
        "{log}"
    );
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A chain: eval starts only after pretrain ends (`--after pretrain`, by name).
#[test]
fn a_dependency_by_name_runs_the_chain_in_order() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_chain");
    let exp_root = exps.display().to_string();
    // pretrain runs until the test says go: the dependency is unfulfilled while it checks.
    let go = project.with_file_name("go");
    let pre = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "pretrain-chain",
            "--nodes",
            "1",
            "--exp-root",
            &exp_root,
            "--",
            "python",
            "waiter.py",
            "--lines",
            "0",
            "--go",
            go.to_str().expect("utf-8"),
        ],
    ));
    let eval = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "eval-chain",
            "--nodes",
            "1",
            "--after",
            "pretrain-chain",
            "--exp-root",
            &exp_root,
            "--",
            "true",
        ],
    ));
    let info = bed.job(eval).expect("eval job");
    assert_eq!(
        info.fields.get("Dependency").map(String::as_str),
        Some(format!("afterok:{pre}(unfulfilled)").as_str()),
        "{:?}",
        info.fields
    );
    std::fs::write(&go, "").expect("go");
    let pre_info = bed
        .wait(pre, Duration::from_secs(120))
        .expect("pretrain ends");
    let eval_info = bed.wait(eval, Duration::from_secs(120)).expect("eval ends");
    assert!(pre_info.succeeded() && eval_info.succeeded());
    assert!(
        eval_info.fields["StartTime"] >= pre_info.fields["EndTime"],
        "eval started {} before pretrain ended {}",
        eval_info.fields["StartTime"],
        pre_info.fields["EndTime"]
    );
}

/// `herd submit pretrain.toml --then eval.toml`: one command, two jobs, the second held until
/// the first succeeds; `--resume NAME` adds an attempt in the same folder with a new job id.
#[test]
fn then_chains_in_one_command_and_resume_adds_a_submission_whose_attempt_all_views_agree_on() {
    let bed = Bed::require();
    let (project, exps) = project(&bed, "submit_then");
    let exp_root = exps.display().to_string();
    // then-pre runs until the test says go: the dependency is unfulfilled while it checks.
    let go = project.with_file_name("go");
    std::fs::write(
        project.join("pre.toml"),
        format!(
            "job_name = \"then-pre\"\ncommand = [\"python\", \"waiter.py\", \"--lines\", \"0\", \"--go\", {:?}]\n",
            go.to_str().expect("utf-8")
        ),
    )
    .expect("write");
    std::fs::write(
        project.join("eval.toml"),
        "job_name = \"then-eval\"\ncommand = [\"python\", \"probe.py\", \".\"]\n",
    )
    .expect("write");
    let out = submit(
        &bed,
        &project,
        &["pre.toml", "--then", "eval.toml", "--exp-root", &exp_root],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<JobId> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| JobId(l.trim().parse().expect("id")))
        .collect();
    assert_eq!(ids.len(), 2, "{out:?}");
    let eval = bed.job(ids[1]).expect("eval");
    assert_eq!(
        eval.fields.get("Dependency").map(String::as_str),
        Some(format!("afterok:{}(unfulfilled)", ids[0]).as_str())
    );
    std::fs::write(&go, "").expect("go");
    let pre_info = bed
        .wait(ids[0], Duration::from_secs(120))
        .expect("pre ends");
    let eval_info = bed
        .wait(ids[1], Duration::from_secs(120))
        .expect("eval ends");
    assert!(pre_info.succeeded() && eval_info.succeeded());
    assert!(eval_info.fields["StartTime"] >= pre_info.fields["EndTime"]);

    // A second submission of the finished eval experiment, in the same folder: its workers'
    // start is attempt 1 (the first submission's was attempt 0), and the message, the
    // folder, `herd status` and `herd logs` all say so.
    let again = submit(
        &bed,
        &project,
        &["--resume", "then-eval", "--exp-root", &exp_root],
    );
    let second = job_id(&again);
    assert_ne!(second, ids[1]);
    let said = String::from_utf8_lossy(&again.stderr).into_owned();
    let attempt_dir = exps.join("then-eval/logs/attempt-1");
    assert!(
        said.contains(&format!(
            "submitted job {second}: submission 2 of experiment {}; its workers start as attempt 1 ({})",
            exps.join("then-eval").display(),
            attempt_dir.display()
        )),
        "{said}"
    );
    wait_ok(&bed, second, &exps.join("then-eval"));
    assert!(
        attempt_dir.is_dir(),
        "the resumed workers log to {attempt_dir:?}"
    );
    assert!(!exps.join("then-eval/logs/attempt-2").exists());
    let status = herd_with_path(
        "status",
        &project,
        &["--json", "--exp-root", &exp_root, "then-eval"],
        &std::env::var("PATH").unwrap_or_default(),
    );
    let status: Value = serde_json::from_slice(&status.stdout).expect("status --json");
    let eval = &status["experiments"][0];
    assert_eq!(eval["name"], "then-eval", "{status:#}");
    assert_eq!(eval["submissions"], 2, "{status:#}");
    assert_eq!(eval["attempts"], 2, "attempts 0 and 1: {status:#}");
    let logs = herd_with_path(
        "logs",
        &project,
        &["then-eval", "--all-attempts", "--exp-root", &exp_root],
        &std::env::var("PATH").unwrap_or_default(),
    );
    let logs = String::from_utf8_lossy(&logs.stdout).into_owned();
    assert!(
        logs.contains(&format!(
            "── attempt 1 (resumed: submission 2, job {second}) ──"
        )),
        "{logs}"
    );
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(exps.join("then-eval/manifest.json")).expect("manifest"),
    )
    .expect("json");
    assert_eq!(manifest["submissions"][1]["number"], 2, "{manifest:#}");
    assert_eq!(
        manifest["submissions"][1]["runs"][0]["attempt"], 1,
        "{manifest:#}"
    );
    let manifest = std::fs::read_to_string(exps.join("then-eval/manifest.json")).expect("manifest");
    assert!(
        manifest.contains(&format!("\"{}\"", ids[1]))
            && manifest.contains(&format!("\"{second}\"")),
        "{manifest}"
    );
    assert!(
        exps.join(format!("then-eval/logs/{}.out", ids[1]))
            .is_file(),
        "attempt 1's log kept"
    );
}
