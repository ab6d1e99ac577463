use std::path::Path;

use super::*;
use crate::job::JobFile;
use crate::keys::JobKeys;
use crate::render::{render_script, ScriptParams};
use crate::resolve::resolve;
use herd_slurm::scheduler::node::parse_nodes;

fn plan(text: &str) -> Plan {
    let text = format!("{text}command = [\"python\", \"train.py\"]\n");
    let job = JobFile::parse(&text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"));
    resolve(Some(&job), &JobKeys::default(), &[], "login1").unwrap_or_else(|e| panic!("{e}"))
}

/// Three 4-GPU nodes in `gpu` (the default) and `dev`, and a 2-GPU one in `gpu` only.
const CLUSTER: &str = "\
gpu-a01|gpu*|idle|8|16000|gpu:4|none
gpu-a01|dev|idle|8|16000|gpu:4|none
gpu-a02|gpu*|mixed|8|16000|gpu:4|none
gpu-a02|dev|mixed|8|16000|gpu:4|none
gpu-a03|gpu*|idle|8|16000|gpu:4|none
gpu-a03|dev|idle|8|16000|gpu:4|none
gpu-b01|gpu*|idle|8|16000|gpu:2|none
";

fn cluster() -> NodeTable {
    parse_nodes(CLUSTER).unwrap_or_else(|e| panic!("{e}"))
}

fn blamed(node: &str, count: usize, last_unix: u64) -> NodeSummary {
    NodeSummary {
        node: node.into(),
        count,
        last_unix,
        last_why: "lost: no word from it for 10 s".into(),
        last_kind: "lost".into(),
        last_job: None,
        last_experiment: None,
        kinds: vec!["lost".into()],
    }
}

fn verdicts(d: &[Decision]) -> Vec<(&str, &Verdict)> {
    d.iter()
        .map(|d| (d.node.node.as_str(), &d.verdict))
        .collect()
}

#[test]
fn blamed_nodes_the_cluster_knows_are_left_out_and_unknown_ones_not() {
    let p = plan("nodes = 1\ngpus_per_node = 4\n");
    let b = [blamed("gpu-a02", 2, 100), blamed("gpu-z09", 1, 50)];
    let d = decide(&p, &b, Some(&cluster()));
    assert_eq!(
        verdicts(&d),
        [
            ("gpu-a02", &Verdict::LeftOut),
            ("gpu-z09", &Verdict::Unknown)
        ]
    );
    // Without the cluster's word every blamed node is left out, unchecked.
    let d = decide(&p, &b, None);
    assert!(d.iter().all(|d| d.verdict == Verdict::LeftOut), "{d:?}");
}

#[test]
fn nodes_are_kept_when_the_job_would_not_fit_without_them_least_blamed_first() {
    // 3 nodes with 4 GPUs in `gpu`; a 2-node 4-GPU job; two of them blamed.
    let p = plan("nodes = 2\ngpus_per_node = 4\n");
    let b = [blamed("gpu-a01", 3, 300), blamed("gpu-a02", 1, 400)];
    let d = decide(&p, &b, Some(&cluster()));
    assert_eq!(d[0].verdict, Verdict::LeftOut, "the most blamed goes");
    let Verdict::Kept(why) = &d[1].verdict else {
        panic!("gpu-a02 is kept: {d:?}");
    };
    assert_eq!(
        why,
        "without all 2 blamed nodes partition gpu has 1 of the 2 nodes the job needs; the least blamed is kept"
    );
    // gpu-b01 has 2 GPUs: it does not count for a 4-GPU job, but does for a 2-GPU one.
    let p2 = plan("nodes = 2\ngpus_per_node = 2\n");
    let d = decide(&p2, &b, Some(&cluster()));
    assert!(d.iter().all(|d| d.verdict == Verdict::LeftOut), "{d:?}");
}

#[test]
fn the_partition_that_needs_the_fewest_kept_counts() {
    // `dev` has only the 3 four-GPU nodes; `gpu` has gpu-b01 too (2 GPUs).
    let p = plan("nodes = 2\ngpus_per_node = 2\npartition = \"dev,gpu\"\n");
    let b = [blamed("gpu-a01", 1, 1), blamed("gpu-a02", 1, 2)];
    let d = decide(&p, &b, Some(&cluster()));
    assert!(d.iter().all(|d| d.verdict == Verdict::LeftOut), "{d:?}");
    let p = plan("nodes = 2\ngpus_per_node = 2\npartition = \"dev\"\n");
    let d = decide(&p, &b, Some(&cluster()));
    assert_eq!(d[1].verdict, Verdict::LeftOut);
    assert!(
        matches!(&d[0].verdict, Verdict::Kept(w) if w.contains("partition dev has 1 of the 2")),
        "the older of two equally blamed nodes is kept: {d:?}"
    );
}

#[test]
fn a_job_too_big_for_the_partition_anyway_keeps_nothing() {
    let p = plan("nodes = 5\ngpus_per_node = 4\n");
    let d = decide(&p, &[blamed("gpu-a01", 1, 1)], Some(&cluster()));
    assert_eq!(d[0].verdict, Verdict::LeftOut);
}

#[test]
fn sbatch_args_exclusions_and_nodelists_are_respected() {
    let p = plan(
        "nodes = 1\nsbatch_args = [\"--exclude=gpu-a[01-02]\", \"-w gpu-a03\", \"--account=x\"]\n",
    );
    let b = [
        blamed("gpu-a02", 1, 1),
        blamed("gpu-a03", 1, 1),
        blamed("gpu-b01", 1, 1),
    ];
    let d = decide(&p, &b, Some(&cluster()));
    assert_eq!(d[0].verdict, Verdict::Excluded);
    assert!(
        matches!(&d[1].verdict, Verdict::Kept(w) if w.contains("--nodelist")),
        "{d:?}"
    );
    assert_eq!(d[2].verdict, Verdict::LeftOut);
}

#[test]
fn option_values_read_every_spelling() {
    let args: Vec<String> = [
        "--exclude=a1",
        "--exclude b[1-2]",
        "-xc1",
        "-x d1",
        "--exclusive",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        option_values(&args, "--exclude", 'x'),
        ["a1", "b[1-2]", "c1", "d1"]
    );
    assert!(is_exclude("-x d1") && !is_exclude("--exclusive") && !is_exclude("--account=x"));
}

fn script(p: &Plan) -> String {
    render_script(
        p,
        &ScriptParams {
            exp_dir: Path::new("/scratch/exp/train"),
            herd: Path::new("/opt/herd/bin/herd"),
            dependency: None,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn excludes(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter(|l| l.starts_with("#SBATCH --exclude") || l.starts_with("#SBATCH -x"))
        .collect()
}

#[test]
fn the_script_excludes_avoided_nodes_merged_with_the_users_once() {
    let mut p = plan("sbatch_args = [\"--exclude=gpu-a[01-02]\", \"--account=x\"]\n");
    assert_eq!(excludes(&script(&p)), ["#SBATCH --exclude=gpu-a[01-02]"]);
    p.avoided_nodes = vec!["gpu-a02".into(), "gpu-b01".into(), "gpu-b01".into()];
    let s = script(&p);
    assert_eq!(excludes(&s), ["#SBATCH --exclude=gpu-a[01-02],gpu-b01"]);
    assert!(s.contains("#SBATCH --account=x\n"), "{s}");
    let mut p = plan("");
    p.avoided_nodes = vec!["gpu-a03".into()];
    assert_eq!(excludes(&script(&p)), ["#SBATCH --exclude=gpu-a03"]);
    // A node name that an #SBATCH line could misread is refused, never written.
    p.avoided_nodes = vec!["a b".into()];
    let p = p;
    let e = render_script(
        &p,
        &ScriptParams {
            exp_dir: Path::new("/scratch/exp/train"),
            herd: Path::new("/opt/herd/bin/herd"),
            dependency: None,
        },
    )
    .expect_err("not a node name");
    assert!(e.to_string().contains("is not a node name"), "{e}");
}

#[test]
fn avoid_bad_nodes_takes_seconds_or_units_and_defaults_to_a_day() {
    assert_eq!(plan("").avoid_bad_nodes, 86_400);
    assert_eq!(plan("avoid_bad_nodes = 0\n").avoid_bad_nodes, 0);
    assert_eq!(plan("avoid_bad_nodes = \"30m\"\n").avoid_bad_nodes, 1800);
    let job = JobFile::parse(
        "avoid_bad_nodes = \"soon\"\ncommand = [\"true\"]\n",
        Path::new("j.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let e = resolve(Some(&job), &JobKeys::default(), &[], "h").expect_err("not a span");
    assert!(
        e.to_string().contains("`avoid_bad_nodes` in j.toml")
            && e.to_string().contains("`soon` is not a span of time"),
        "{e}"
    );
}
