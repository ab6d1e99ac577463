//! The record of bad nodes on the bed: `herd submit` leaves out a node the record blames,
//! SLURM runs the job elsewhere, and `herd nodes` shows SLURM's own state of that node.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use herd_testbed::Bed;

use crate::support::{job_id, project_with};

/// `herd ARGS` from `project` with `HERD_NODE_RECORD` set to `record`.
fn herd(project: &Path, record: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .env("HERD_NODE_RECORD", record)
        .current_dir(project)
        .output()
        .expect("herd runs")
}

/// With the bed's first node blamed a minute ago (and a node the bed does not have), a
/// 2-node job is submitted without it: herd says so, `scontrol show job` has it in
/// `ExcNodeList` and not in `NodeList`, the job succeeds on the other nodes, and
/// `herd nodes` lists the blamed node with the state `sinfo` gives it and the other as
/// unknown to SLURM.
#[test]
fn submit_leaves_out_a_blamed_bed_node_and_herd_nodes_shows_its_slurm_state() {
    let bed = Bed::require();
    assert!(bed.nodes().len() >= 3, "needs 3 nodes: {:?}", bed.nodes());
    let blamed = bed.nodes()[0].clone();
    let (project, exps) = project_with(&bed, "avoid_bad_nodes", &[]);
    let record = exps.with_file_name("nodes.jsonl");
    let now = herd_exp::nodes::unix_now();
    for (node, why) in [
        (blamed.as_str(), "lost: no word from it for 10 s"),
        ("gpu-zz99", "preflight: cannot import torch"),
    ] {
        herd_exp::nodes::append(
            &record,
            &herd_exp::nodes::Blame {
                node: node.into(),
                at_unix: now - 60,
                why: why.into(),
                kind: "lost".into(),
                job: Some("1".into()),
                experiment: None,
            },
        )
        .expect("record");
    }
    let exp_root = exps.display().to_string();
    let out = herd(
        &project,
        &record,
        &[
            "submit",
            "-J",
            "avoid",
            "--nodes",
            "2",
            "--time",
            "5",
            "--exp-root",
            &exp_root,
            "--",
            "hostname",
        ],
    );
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    let job = job_id(&out);
    assert!(
        said.contains(&format!(
            "herd: leaving out {blamed} (blamed 1 min ago: lost: no word from it for 10 s; 1 blame in 24 h; --avoid-bad-nodes 0 to use it)"
        )),
        "{said}"
    );
    assert!(
        said.contains("herd: warning: gpu-zz99, blamed 1 min ago (preflight: cannot import torch), is unknown to SLURM"),
        "{said}"
    );
    let script =
        std::fs::read_to_string(exps.join("avoid/job.sbatch")).expect("the experiment's script");
    assert!(
        script.contains(&format!("\n#SBATCH --exclude={blamed}\n")),
        "{script}"
    );

    let info = bed.wait(job, Duration::from_secs(300)).expect("job ends");
    assert!(
        info.succeeded(),
        "job {job} {} {}:\n{}",
        info.state,
        info.exit_code,
        herd_testbed::read_lossy(exps.join(format!("avoid/logs/{job}.err")))
    );
    assert_eq!(
        info.fields.get("ExcNodeList").map(String::as_str),
        Some(blamed.as_str()),
        "{:?}",
        info.fields
    );
    let ran_on = herd_hostlist::expand(&info.node_list).expect("NodeList");
    assert_eq!(ran_on.len(), 2, "{ran_on:?}");
    assert!(
        !ran_on.contains(&blamed),
        "ran on {ran_on:?}, {blamed} left out"
    );

    let out = herd(&project, &record, &["nodes"]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    let state = Command::new("sinfo")
        .args(["-h", "-N", "-n", &blamed, "-o", "%T"])
        .output()
        .expect("sinfo");
    let state = String::from_utf8_lossy(&state.stdout);
    let state = state.lines().next().unwrap_or_default().trim().to_owned();
    assert!(!state.is_empty(), "sinfo knows {blamed}");
    let row = table
        .lines()
        .find(|l| l.starts_with(&format!("{blamed} ")))
        .unwrap_or_else(|| panic!("no row for {blamed}:\n{table}"));
    assert!(
        row.ends_with(&format!("  {state}")),
        "SLURM's state {state}: {row}"
    );
    assert!(row.contains(" min ago ("), "{row}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("gpu-zz99 ") && l.ends_with("unknown to SLURM")),
        "{table}"
    );
}
