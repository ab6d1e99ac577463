//! `herd top` on the bed (issue #15), driven in a real terminal: a tmux pane of 80×24 over a
//! running 3-node job. Every rank is shown on its node, the slow rank is marked slow, and a
//! rank stopped with SIGSTOP is marked silent while the others go on.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use herd_testbed::{shell_join, Bed};

use crate::support::{job_id, project_with, submit, wait_ok};

/// A tmux server of its own (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str, cwd: &Path) -> Tmux {
        let socket = format!("herd-top-test-{}", std::process::id());
        let out = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-s", "top", "-x", "80", "-y", "24"])
            .arg(command)
            .current_dir(cwd)
            .env("TERM", "xterm-256color")
            .output()
            .expect("tmux runs (scripts/test-all installs it)");
        assert!(out.status.success(), "tmux new-session: {out:?}");
        Tmux { socket }
    }

    fn tmux(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux")
    }

    /// The pane's text as a user sees it.
    fn capture(&self) -> String {
        let out = self.tmux(&["capture-pane", "-p", "-t", "top"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Capture until `pred` holds, at most `timeout`; the last capture either way.
    fn wait_for(&self, timeout: Duration, pred: impl Fn(&str) -> bool) -> (bool, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let pane = self.capture();
            if pred(&pane) {
                return (true, pane);
            }
            if Instant::now() > deadline {
                return (false, pane);
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn alive(&self) -> bool {
        self.tmux(&["has-session", "-t", "top"]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The table row of `rank`: the line whose first word (box-drawing characters aside) is the
/// rank.
fn row(pane: &str, rank: u32) -> Option<String> {
    let want = rank.to_string();
    pane.lines()
        .find(|l| {
            l.split(|c: char| c.is_whitespace() || "│┃|▶>".contains(c))
                .find(|w| !w.is_empty())
                == Some(want.as_str())
        })
        .map(str::to_owned)
}

fn wait_pids(dir: &Path, n: u32, timeout: Duration) -> Vec<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids: Vec<i32> = (0..n)
            .filter_map(|r| std::fs::read_to_string(dir.join(format!("rank-{r}"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        if pids.len() == n as usize {
            return pids;
        }
        assert!(
            Instant::now() < deadline,
            "only {} of {n} ranks started in {timeout:?}",
            pids.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kill(sig: &str, pid: i32) {
    let st = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(st.success(), "kill {sig} {pid}");
}

/// A 3-node job whose ranks print metrics on their own clocks (rank 1 at a third of the
/// others' rate); `herd top` in an 80×24 tmux pane shows all three ranks with their nodes,
/// marks rank 1 slow, and after rank 2 is stopped (SIGSTOP) marks it silent while ranks 0
/// and 1 stay unmarked by silence. `q` quits.
#[test]
fn top_in_a_terminal_shows_every_rank_and_marks_the_stopped_one() {
    let bed = Bed::require();
    let (project, exps) = project_with(
        &bed,
        "top_tmux",
        &[("crates/herd/tests/e2e/workers/ticker.py", "ticker.py")],
    );
    let pids_dir = project.join("pids");
    std::fs::create_dir_all(&pids_dir).expect("pids dir");
    let go = project.join("go");
    let root = exps.display().to_string();
    let pids_arg = pids_dir.display().to_string();
    let go_arg = go.display().to_string();
    let job = job_id(&submit(
        &bed,
        &project,
        &[
            "-J",
            "ticking",
            "--nodes",
            "3",
            "--partition",
            "gpu",
            "--time",
            "10",
            "--exp-root",
            &root,
            "--",
            "python",
            "ticker.py",
            "--pids",
            &pids_arg,
            "--go",
            &go_arg,
            "--slow-rank",
            "1",
            "--interval",
            "0.2",
        ],
    ));
    let pids = wait_pids(&pids_dir, 3, Duration::from_secs(180));

    let command = shell_join(&[
        env!("CARGO_BIN_EXE_herd"),
        "top",
        "ticking",
        "--exp-root",
        &root,
        "--silent-after",
        "3",
    ]);
    let tmux = Tmux::start(&command, &project);
    let hosts = bed.nodes().to_vec();
    let (ok, pane) = tmux.wait_for(Duration::from_secs(60), |p| {
        (0..3).all(|r| row(p, r).is_some_and(|l| l.contains("running") || l.contains("SLOW")))
            && row(p, 1).is_some_and(|l| l.contains("SLOW"))
    });
    assert!(ok, "every rank running and rank 1 slow, in:\n{pane}");
    for r in 0..3u32 {
        let line = row(&pane, r).expect("row");
        assert!(
            hosts.iter().any(|h| line.contains(h.as_str())),
            "rank {r}'s row names its node ({hosts:?}): {line}\n{pane}"
        );
        assert!(!line.contains("SILENT"), "{pane}");
    }
    assert!(
        pane.lines().all(|l| l.chars().count() <= 80),
        "fits 80 columns:\n{pane}"
    );

    kill("-STOP", pids[2]);
    let (ok, pane) = tmux.wait_for(Duration::from_secs(30), |p| {
        row(p, 2).is_some_and(|l| l.contains("SILENT"))
    });
    kill("-CONT", pids[2]);
    eprintln!("the pane with rank 2 stopped:\n{pane}");
    assert!(ok, "rank 2 marked silent after SIGSTOP, in:\n{pane}");
    for r in [0, 1] {
        let line = row(&pane, r).expect("row");
        assert!(
            !line.contains("SILENT"),
            "rank {r} still prints: {line}\n{pane}"
        );
    }
    assert!(row(&pane, 1).is_some_and(|l| l.contains("SLOW")), "{pane}");

    // q quits; the job ends cleanly.
    let _ = tmux.tmux(&["send-keys", "-t", "top", "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !tmux.alive(),
        "q did not quit herd top:\n{}",
        tmux.capture()
    );
    std::fs::write(&go, "").expect("go");
    wait_ok(&bed, job, &exps.join("ticking"));
}
