//! The bed's own scripts (`testbed/up`, `down`, `status`), driven as a user drives them:
//! idempotent `up`, recovery from a crashed run, resizing, another Slurm release, `down`
//! leaving nothing behind, and one clear line for bad input. Runs in the `bed` test group (one at a time with the
//! end-to-end tests) and leaves a healthy default-size bed behind.

use std::collections::BTreeSet;
use std::process::{Command, Output};
use std::time::Duration;

use herd_testbed::{repo_root, run_cmd};

fn script(name: &str, args: &[&str]) -> Output {
    let path = repo_root().join("testbed").join(name);
    eprintln!("+ testbed/{name} {}", args.join(" "));
    let out = Command::new(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    eprintln!("{}{}", text(&out.stdout), text(&out.stderr));
    out
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(name: &str, args: &[&str]) -> String {
    let out = script(name, args);
    assert!(
        out.status.success(),
        "testbed/{name} {args:?} failed ({}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// Exactly one line on stderr, starting with `testbed: error:` and containing `needle`;
/// non-zero exit.
fn refused(out: &Output, needle: &str) {
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "expected a refusal, got success: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "want one line, got:\n{stderr}");
    assert!(
        stderr.starts_with("testbed: error:") && stderr.contains(needle),
        "want an error about {needle:?}, got: {stderr}"
    );
}

fn pid_of(pidfile: &str) -> i32 {
    std::fs::read_to_string(format!("/var/lib/herd-testbed/run/{pidfile}"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {pidfile}"))
}

/// `kill -9 PID`, then waits until the process is gone (or a zombie), 10 s at most.
fn kill9(pid: i32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -9 {pid}");
    let start = std::time::Instant::now();
    // `/proc/PID/stat`: "PID (COMM) STATE …"; COMM may hold spaces, STATE follows its `)`.
    while std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'))
    }) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "process {pid} still runs 10 s after kill -9"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `srun -N n hostname -I` style probe: each node's name, its addresses (docker0's first,
/// then the shared network's) and what its own name resolves to there.
fn node_identities(n: usize) -> BTreeSet<String> {
    let out = run_cmd(
        Command::new("srun")
            .arg(format!("--nodes={n}"))
            .args([
                "--ntasks-per-node=1",
                "bash",
                "-c",
                "echo $(hostname) $(hostname -I) / $(getent hosts $(hostname) | cut -d' ' -f1)",
            ])
            .current_dir(std::env::temp_dir()),
        Duration::from_secs(60),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

/// The release `testbed/up` brings up without `--slurm` (testbed/lib.sh).
fn default_slurm() -> String {
    std::env::var("HERD_BED_SLURM").unwrap_or_else(|_| "26.05".into())
}

/// `sinfo --version` as PATH finds it: `22.05.8`.
fn sinfo_version() -> String {
    let out = Command::new("sinfo")
        .arg("--version")
        .output()
        .expect("sinfo runs");
    text(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn up_is_idempotent_recovers_from_crashes_resizes_changes_release_and_down_leaves_nothing() {
    // The bed is this test's alone: no end-to-end test may run while it goes down and up.
    let _turn = herd_testbed::exclusive();
    // Start from a healthy default bed; a second `up` keeps it (same controller process).
    ok("up", &["--no-venv"]);
    let ctld = pid_of("slurmctld.pid");
    let again = ok("up", &["--no-venv"]);
    assert!(again.contains("already up with 3 nodes"), "{again}");
    assert_eq!(pid_of("slurmctld.pid"), ctld, "a healthy bed was rebuilt");

    // A crashed run: controller and one node daemon die hard, namespaces stay behind.
    kill9(ctld);
    kill9(pid_of("slurmd-gpu-a02.pid"));
    let status = script("status", &[]);
    assert!(
        !status.status.success(),
        "status must report the crashed bed as unhealthy"
    );
    ok("up", &["--no-venv"]);
    assert!(ok("status", &[]).contains("healthy: 3 nodes"));
    let ids = node_identities(3);
    assert_eq!(
        ids.len(),
        3,
        "three distinct nodes with their own names and IPs: {ids:?}"
    );
    let net = std::env::var("HERD_BED_NET").unwrap_or_else(|_| "10.213.47".into());
    // Two networks on every node: a docker0 first that reaches no other node, and the
    // shared one; the node's own name is Debian's 127.0.1.1 there.
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            id,
            &format!("gpu-a{:02} 172.17.0.1 {net}.{} / 127.0.1.1", i + 1, 11 + i)
        );
    }

    // Bad input is refused in one line and leaves the running bed alone.
    for bad in ["0", "x", "33"] {
        refused(
            &script("up", &["--nodes", bad]),
            "--nodes must be a whole number",
        );
    }
    refused(&script("up", &["--bogus"]), "unknown argument '--bogus'");
    let as_nobody = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(repo_root().join("testbed/up"))
        .output()
        .expect("setpriv runs");
    refused(&as_nobody, "must run as root");
    let no_netns = Command::new("unshare")
        .args(["--user", "--map-root-user"])
        .arg(repo_root().join("testbed/up"))
        .arg("--no-venv")
        .output()
        .expect("unshare runs");
    refused(&no_netns, "does not allow network namespaces");
    assert!(ok("status", &[]).contains("healthy: 3 nodes"));

    // Eight nodes, then back to three.
    ok("up", &["--no-venv", "--nodes", "8"]);
    assert!(ok("status", &[]).contains("healthy: 8 nodes"));
    assert_eq!(node_identities(8).len(), 8);

    // Another Slurm release: the bed is built again on it, and the client commands on PATH
    // are that release's (a 22.05 client cannot talk to a 24.11 controller).
    let default = default_slurm();
    let other = if default == "22.05" { "26.05" } else { "22.05" };
    ok("up", &["--no-venv", "--slurm", other]);
    assert!(
        ok("status", &[]).contains(&format!("Slurm {other} (slurm-wlm {other}.")),
        "status names the release that runs"
    );
    assert!(sinfo_version().starts_with(other), "{}", sinfo_version());
    refused(
        &script("up", &["--slurm", "21.08"]),
        "--slurm must be one of 22.05 24.11 26.05",
    );
    ok("up", &["--no-venv"]);
    assert!(
        ok("status", &[]).contains(&format!("Slurm {default} ")),
        "back on the default release"
    );
    assert!(sinfo_version().starts_with(&default), "{}", sinfo_version());

    // Down leaves nothing (the script checks and says so), and a second down is a no-op.
    let down = ok("down", &[]);
    assert!(
        down.contains("no namespace, daemon or process of the bed is left"),
        "{down}"
    );
    let netns = text(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .expect("ip")
            .stdout,
    );
    assert!(!netns.contains("herd-"), "namespaces left: {netns}");
    for daemon in ["slurmctld", "slurmd", "slurmstepd"] {
        let found = Command::new("pgrep")
            .args(["-x", daemon])
            .output()
            .expect("pgrep");
        assert!(
            !found.status.success(),
            "{daemon} still running: {}",
            text(&found.stdout)
        );
    }
    for client in ["sbatch", "srun", "squeue", "scontrol", "sinfo", "scancel"] {
        let link = std::path::Path::new("/usr/local/bin").join(client);
        assert!(
            std::fs::read_link(&link).is_err(),
            "{} is left: {:?}",
            link.display(),
            std::fs::read_link(&link)
        );
    }
    let conf = std::fs::read_to_string("/etc/slurm/slurm.conf").unwrap_or_default();
    assert!(
        !conf.contains("generated by herd testbed"),
        "the bed's slurm.conf is left"
    );
    assert!(ok("down", &[]).contains("nothing is up"));
    assert!(
        !script("status", &[]).status.success(),
        "status of a bed that is down"
    );

    ok("up", &["--no-venv"]);
    assert!(ok("status", &[]).contains("healthy: 3 nodes"));
}
