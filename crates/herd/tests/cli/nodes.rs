//! The record of bad nodes with fake SLURM commands: `herd nodes` on a hand-written record,
//! and `herd submit --dry-run` leaving out the nodes it blames (`--avoid-bad-nodes`). The
//! record is a file of the test's own, named by `HERD_NODE_RECORD`.

use super::submit::{fake_command, herd_here, slurm_called, submit_project};

/// Now, in seconds since the epoch: read once, so blames written "60 s ago" by one test
/// are of the same second.
fn now() -> u64 {
    static NOW: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *NOW.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
    })
}

/// One blame line of the record.
fn blame(node: &str, ago_s: u64, kind: &str, why: &str) -> String {
    format!(
        "{{\"node\":\"{node}\",\"at_unix\":{},\"why\":\"{why}\",\"kind\":\"{kind}\",\"job\":\"41\"}}\n",
        now() - ago_s
    )
}

/// `sinfo --all -h -N -o '%N|%P|%T|%c|%m|%G|%E'` of a 3-node cluster like the test bed,
/// gpu-a03 drained with a reason; the fake writes its arguments into `called`.
fn fake_sinfo(dir: &std::path::Path) {
    fake_command(
        dir,
        "sinfo",
        &format!(
            "echo \"sinfo $*\" >> '{}'\ncat <<'EOF'\n\
gpu-a01|gpu*|idle|8|16000|gpu:4|none\n\
gpu-a01|dev|idle|8|16000|gpu:4|none\n\
gpu-a02|gpu*|mixed|8|16000|gpu:4|none\n\
gpu-a02|dev|mixed|8|16000|gpu:4|none\n\
gpu-a03|gpu*|drained|8|16000|gpu:4|bad GPU 3\n\
gpu-a03|dev|drained|8|16000|gpu:4|bad GPU 3\n\
EOF",
            dir.join("called").display()
        ),
    );
}

/// A project (see `submit_project`) with the fake sinfo and the record `lines`; returns it
/// and the record's path.
fn with_record(lines: &[String]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = submit_project(&[("train.py", 10)]);
    fake_sinfo(dir.path());
    let record = dir.path().join("state/nodes.jsonl");
    std::fs::create_dir_all(record.parent().expect("folder")).expect("state folder");
    std::fs::write(&record, lines.concat()).expect("record");
    (dir, record)
}

/// `herd ARGS` in the project with `HERD_NODE_RECORD` set to `record`.
fn herd_with(
    dir: &std::path::Path,
    record: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    let record = record.display().to_string();
    herd_here(dir, args, &[("HERD_NODE_RECORD", record.as_str())])
}

/// `herd nodes` lists one row per node, newest blame first, with the count, the last why
/// and SLURM's state (a drained node with its reason, a node SLURM does not know as
/// `unknown to SLURM`); a corrupt line is skipped with a warning naming the file and line,
/// and the unknown node gets a warning: neither is fatal.
#[test]
fn herd_nodes_lists_the_record_with_slurms_state_and_skips_a_corrupt_line() {
    let (dir, record) = with_record(&[
        blame("gpu-a03", 7200, "failures", "failed twice: rank 3 exited 1"),
        "{\"node\": \"gpu-a01\", this is no JSON\n".to_owned(),
        blame(
            "gpu-z09",
            3600,
            "preflight",
            "preflight: cannot import torch",
        ),
        blame("gpu-a03", 180, "lost", "lost: no word from it for 10 s"),
    ]);
    let out = herd_with(dir.path(), &record, &["nodes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a header and one row per node:\n{stdout}");
    let head: Vec<&str> = lines[0]
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        head,
        ["NODE", "LAST BLAMED", "BLAMES", "WHY (LAST)", "SLURM NOW"]
    );
    let a03 = lines[1];
    assert!(a03.starts_with("gpu-a03 "), "newest blame first:\n{stdout}");
    assert!(a03.contains(" 3 min ago ("), "{a03}");
    assert!(a03.contains("  2  "), "two blames: {a03}");
    assert!(a03.contains("lost: no word from it for 10 s"), "{a03}");
    assert!(a03.ends_with("drained (bad GPU 3)"), "{a03}");
    let z09 = lines[2];
    assert!(
        z09.starts_with("gpu-z09 ") && z09.contains(" 1 h ago ("),
        "{z09}"
    );
    assert!(z09.ends_with("unknown to SLURM"), "{z09}");
    assert!(
        stderr.contains(&format!(
            "herd: warning: {} line 2: skipped, not a blame: not JSON",
            record.display()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("herd: warning: gpu-z09 is unknown to SLURM"),
        "{stderr}"
    );
    assert!(
        slurm_called(dir.path()).contains("sinfo --all -h -N -o %N|%P|%T|%c|%m|%G|%E"),
        "one sinfo call"
    );

    // --since leaves out older blames; --json has the same rows.
    let out = herd_with(dir.path(), &record, &["nodes", "--since", "30m", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let nodes = doc["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 1, "{doc}");
    assert_eq!(nodes[0]["node"], "gpu-a03");
    assert_eq!(nodes[0]["blames"], 1, "only the blame of 3 min ago");
    assert_eq!(nodes[0]["slurm_state"], "drained");
    assert_eq!(nodes[0]["slurm_reason"], "bad GPU 3");
    assert_eq!(nodes[0]["known_to_slurm"], true);
    assert_eq!(doc["record"], record.display().to_string());
}

/// An empty or missing record says so and where it is, without asking SLURM; `--help`
/// says where the record is; a SLURM that does not answer is said in the state column and
/// a note, and `herd nodes` still succeeds.
#[test]
fn herd_nodes_says_where_the_record_is_and_survives_a_silent_slurm() {
    let dir = submit_project(&[]);
    let record = dir.path().join("nowhere/nodes.jsonl");
    let out = herd_with(dir.path(), &record, &["nodes"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("no node blamed yet (record: {})\n", record.display())
    );
    assert_eq!(slurm_called(dir.path()), "", "SLURM not asked");
    let help = herd_with(dir.path(), &record, &["nodes", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("$HERD_NODE_RECORD") && help.contains("~/.local/state/herd/nodes.jsonl"),
        "{help}"
    );
    // Without HERD_NODE_RECORD, the record is under XDG_STATE_HOME.
    let out = herd_here(
        dir.path(),
        &["nodes"],
        &[("XDG_STATE_HOME", "/nonexistent/state")],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "no node blamed yet (record: /nonexistent/state/herd/nodes.jsonl)\n"
    );

    std::fs::create_dir_all(record.parent().expect("folder")).expect("folder");
    std::fs::write(&record, blame("gpu-a01", 60, "lost", "lost")).expect("record");
    fake_command(
        dir.path(),
        "sinfo",
        "echo 'sinfo: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1",
    );
    let out = herd_with(dir.path(), &record, &["nodes"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("gpu-a01 ") && l.ends_with("SLURM did not answer")),
        "{stdout}"
    );
    assert!(
        stderr.contains("herd: note: SLURM's state of the nodes is not known: sinfo: error: Unable to contact slurm controller"),
        "{stderr}"
    );
}

/// The lines of `text` that are `#SBATCH --exclude=…`.
fn excludes(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.starts_with("#SBATCH --exclude"))
        .collect()
}

/// `herd submit --dry-run` leaves out a node blamed within the window (24 h by default):
/// the script excludes it and herd says so, once; a blame older than the window is
/// ignored; `--avoid-bad-nodes 0` uses every node and asks SLURM nothing; a longer window
/// (`3d`) takes the older blame in too; the user's own `--exclude` is merged into one line.
#[test]
fn submit_leaves_out_nodes_blamed_within_the_window_and_says_so() {
    let (dir, record) = with_record(&[
        blame("gpu-a02", 180, "lost", "lost: no word from it for 10 s"),
        blame("gpu-a01", 2 * 86_400, "lost", "lost: closed the connection"),
    ]);
    let submit = |extra: &[&str]| {
        let mut args = vec!["submit", "--dry-run", "-J", "t", "--nodes", "1"];
        args.extend(extra);
        args.extend(["--", "true"]);
        herd_with(dir.path(), &record, &args)
    };
    let out = submit(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(excludes(&stdout), ["#SBATCH --exclude=gpu-a02"], "{stdout}");
    assert_eq!(
        stderr.matches("herd: leaving out").count(),
        1,
        "one line per node left out: {stderr}"
    );
    assert!(
        stderr.contains("herd: leaving out gpu-a02 (blamed 3 min ago: lost: no word from it for 10 s; 1 blame in 24 h; --avoid-bad-nodes 0 to use it)\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("gpu-a01"), "outside the window: {stderr}");

    std::fs::remove_file(dir.path().join("called")).expect("sinfo was called");
    let out = submit(&["--avoid-bad-nodes", "0"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(excludes(&stdout), Vec::<&str>::new(), "{stdout}");
    assert!(!stderr.contains("leaving out"), "{stderr}");
    assert!(
        !slurm_called(dir.path()).contains("sinfo"),
        "the record is not read: no sinfo"
    );

    let out = submit(&["--avoid-bad-nodes", "3d", "--sbatch-arg=--exclude=gpu-a02"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        excludes(&stdout),
        ["#SBATCH --exclude=gpu-a02,gpu-a01"],
        "merged with the user's, once each: {stdout}"
    );
    assert!(
        stderr.contains("herd: leaving out gpu-a01 (blamed 2 days ago: lost: closed the connection; 1 blame in 3 days;"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("leaving out gpu-a02"),
        "the user excluded it already: {stderr}"
    );

    // The same key in a job file, as a number of seconds.
    std::fs::write(
        dir.path().join("project/job.toml"),
        "avoid_bad_nodes = 60\ncommand = [\"true\"]\n",
    )
    .expect("job file");
    let out = herd_with(dir.path(), &record, &["submit", "--dry-run", "job.toml"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        excludes(&String::from_utf8_lossy(&out.stdout)),
        Vec::<&str>::new(),
        "3 min ago is outside a 60 s window"
    );
}

/// The record never fails a submit: a job that needs every node keeps the blamed one and
/// says why; a node SLURM does not know is not excluded (sbatch would refuse the job); a
/// corrupt line is a warning; a SLURM that does not answer leaves the nodes out unchecked,
/// with a note; a bad `--avoid-bad-nodes` is a usage error naming the key.
#[test]
fn the_record_never_fails_a_submit() {
    let (dir, record) = with_record(&[
        blame("gpu-a02", 60, "lost", "lost: no word from it for 10 s"),
        "not json at all\n".to_owned(),
        blame("gpu-z09", 60, "preflight", "preflight: cannot import torch"),
    ]);
    let three = |extra: &[&str]| {
        let mut args = vec!["submit", "--dry-run", "-J", "t", "--nodes", "3"];
        args.extend(extra);
        args.extend(["--", "true"]);
        herd_with(dir.path(), &record, &args)
    };
    let out = three(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(excludes(&stdout), Vec::<&str>::new(), "{stdout}");
    assert!(
        stderr.contains("herd: warning: keeping gpu-a02, blamed 1 min ago (lost: no word from it for 10 s): without it partition gpu has 2 of the 3 nodes the job needs\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("herd: warning: gpu-z09, blamed 1 min ago (preflight: cannot import torch), is unknown to SLURM (not listed by sinfo): not left out"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "herd: warning: {} line 2: skipped, not a blame",
            record.display()
        )),
        "{stderr}"
    );

    fake_command(
        dir.path(),
        "sinfo",
        "echo 'sinfo: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1",
    );
    let out = three(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        excludes(&stdout),
        ["#SBATCH --exclude=gpu-a02,gpu-z09"],
        "{stdout}"
    );
    assert!(
        stderr.contains("herd: note: blamed nodes not checked against the cluster: sinfo: error: Unable to contact slurm controller"),
        "{stderr}"
    );

    let out = three(&["--avoid-bad-nodes", "a while"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--avoid-bad-nodes: `a while` is not a span of time"),
        "{stderr}"
    );
}
