//! The bed repairs itself at the start of every bed test ([`repair`], which
//! [`crate::Bed::require`] runs before it looks at the nodes): a test that is killed (by
//! nextest's slow-timeout, a Ctrl-C) runs none of its guards, and
//! what it froze, stopped, drained or submitted must not break every test after it.
//!
//! In order, each step only when there is something to do:
//! 1. cgroups of frozen nodes (`herd-testbed-frozen-*`, [`crate::Frozen`]) are thawed and
//!    what is inside them is killed (a dead test's job processes), then removed;
//! 2. a stopped (SIGSTOP) slurmctld, slurmd or slurmstepd gets SIGCONT;
//! 3. jobs left in the queue are cancelled, and waited for (at most a minute) until they
//!    have left it, so that no earlier test's processes are still on the nodes;
//! 4. nodes left DOWN, DRAIN or FAIL are resumed (`scontrol update nodename=… state=resume`)
//!    and waited for (at most 30 s).
//!
//! What it repaired is said in one line on stderr. It never fails: what it could not mend
//! is in that line, and [`crate::Bed::connect`] then refuses the bed, saying what is wrong.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_slurm::scheduler::command;

use crate::freeze;

/// How long one SLURM query of the repair may take (slurmctld has been woken by then).
const QUERY: Duration = Duration::from_secs(10);

/// Repairs what an earlier, killed test left broken (see the module doc) and says in one
/// line on stderr what it repaired, `whose` naming who left it (`an earlier test`); says
/// nothing when nothing needed repair. `wait_for_jobs` is how long it waits for cancelled
/// jobs to leave the queue. Returns what it said.
pub fn repair(whose: &str, wait_for_jobs: Duration) -> Vec<String> {
    let mut done = Vec::new();
    thaw_frozen_cgroups(&mut done);
    wake_stopped_daemons(&mut done);
    cancel_leftover_jobs(wait_for_jobs, &mut done);
    resume_nodes(&mut done);
    if !done.is_empty() {
        eprintln!(
            "herd-testbed: repaired what {whose} left: {}",
            done.join("; ")
        );
    }
    done
}

/// Step 1: every `herd-testbed-frozen-*` cgroup thawed, its processes killed, removed.
fn thaw_frozen_cgroups(done: &mut Vec<String>) {
    // No cgroup2 mount: nothing can have been frozen.
    let Ok(root) = freeze::cgroup2_root() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(freeze::PREFIX) {
            continue;
        }
        let cgroup = entry.path();
        let _ = std::fs::write(cgroup.join("cgroup.freeze"), "0");
        let pids = procs(&cgroup);
        if !pids.is_empty() {
            signal("KILL", &pids);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !procs(&cgroup).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Whatever would not die goes back to the root, so that the cgroup can go.
        for pid in procs(&cgroup) {
            let _ = std::fs::write(root.join("cgroup.procs"), pid.to_string());
        }
        let removed = std::fs::remove_dir(&cgroup).is_ok();
        done.push(format!(
            "thawed {name} and killed its {} process{}{}",
            pids.len(),
            if pids.len() == 1 { "" } else { "es" },
            if removed {
                ""
            } else {
                " (the cgroup would not go)"
            }
        ));
    }
}

/// The pids in a cgroup's `cgroup.procs`.
fn procs(cgroup: &Path) -> Vec<u32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|text| {
            text.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// `kill -SIGNAL PID…`.
fn signal(name: &str, pids: &[u32]) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The SLURM daemons a test may stop (status.rs stops slurmctld to test a scheduler that
/// does not answer).
const DAEMONS: [&str; 3] = ["slurmctld", "slurmd", "slurmstepd"];

/// The command name and state letter of a `/proc/PID/stat` line (`PID (COMM) STATE …`;
/// COMM may hold spaces and parentheses, STATE follows the last `)`).
pub(crate) fn comm_and_state(stat: &str) -> Option<(&str, char)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let (_, comm) = head.split_once('(')?;
    let state = rest.trim_start().chars().next()?;
    Some((comm, state))
}

/// Step 2: SIGCONT to every stopped SLURM daemon (state `T` in `/proc/PID/stat`).
fn wake_stopped_daemons(done: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        if let Some((comm, 'T')) = comm_and_state(&stat) {
            if DAEMONS.contains(&comm) {
                signal("CONT", &[pid]);
                done.push(format!("woke the stopped {comm} (pid {pid}) with SIGCONT"));
            }
        }
    }
}

/// This process's user id (the tests' jobs are theirs).
fn uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid()).ok()
}

/// The ids of the user's jobs in the queue (pending, running or completing).
fn queued(uid: u32) -> Result<Vec<String>, herd_slurm::SlurmError> {
    let user = format!("--user={uid}");
    let args: [&OsStr; 4] = ["-h".as_ref(), user.as_ref(), "-o".as_ref(), "%A".as_ref()];
    let text = command::run("squeue", &args, None, QUERY)?;
    Ok(text.split_whitespace().map(str::to_owned).collect())
}

/// Step 3: the user's jobs still in the queue cancelled, and waited for until they left it
/// (at most `wait`).
fn cancel_leftover_jobs(wait: Duration, done: &mut Vec<String>) {
    let Some(uid) = uid() else {
        return;
    };
    let jobs = match queued(uid) {
        Ok(jobs) if jobs.is_empty() => return,
        Ok(jobs) => jobs,
        Err(e) => {
            done.push(format!("could not list the queue ({e})"));
            return;
        }
    };
    let user = format!("--user={uid}");
    if let Err(e) = command::run("scancel", &[user.as_ref()], None, QUERY) {
        done.push(format!("could not cancel jobs {} ({e})", jobs.join(",")));
        return;
    }
    let started = Instant::now();
    let left = loop {
        let left = queued(uid).unwrap_or_default();
        if left.is_empty() || started.elapsed() >= wait {
            break left;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    let mut said = format!(
        "cancelled {} leftover job{} ({})",
        jobs.len(),
        if jobs.len() == 1 { "" } else { "s" },
        jobs.join(",")
    );
    if left.is_empty() {
        said.push_str(&format!(
            ", out of the queue {:.1} s later",
            started.elapsed().as_secs_f64()
        ));
    } else {
        said.push_str(&format!(
            ", {} still in the queue after {wait:?}",
            left.join(",")
        ));
    }
    done.push(said);
}

/// What the repair makes of a node's state as `sinfo -o %t` prints it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// Idle, mixed, allocated or completing: as [`crate::Bed::connect`] wants it.
    Usable,
    /// Down, drained, draining or failed: `scontrol update … state=resume` brings it back
    /// (once its slurmd answers).
    Resumable,
    /// Anything else (reserved, in maintenance, powered down, unknown): left as it is.
    Other,
}

/// The repair's view of a `sinfo %t` state: its base word, with the flags sinfo appends
/// (`*` not responding, `~` powered off, `#` powering up, `!`, `%`, `$`, `@`, `^`, `-`)
/// taken off for the resumable ones (`down*` is a down node whose slurmd did not answer
/// yet; woken, it answers).
pub(crate) fn node_state(state: &str) -> NodeState {
    if matches!(state, "idle" | "mix" | "alloc" | "comp") {
        return NodeState::Usable;
    }
    let base = state.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
    if matches!(
        base,
        "down" | "drain" | "drng" | "drained" | "draining" | "fail" | "failg" | "failing"
    ) {
        NodeState::Resumable
    } else {
        NodeState::Other
    }
}

/// Every node of the bed and its state (each once, whatever its partitions).
fn nodes() -> Result<Vec<(String, String)>, herd_slurm::SlurmError> {
    let args: [&OsStr; 4] = [
        "-h".as_ref(),
        "-N".as_ref(),
        "-o".as_ref(),
        "%N %t".as_ref(),
    ];
    let text = command::run("sinfo", &args, None, QUERY)?;
    let mut nodes: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_owned(), it.next()?.to_owned()))
        })
        .collect();
    nodes.sort();
    nodes.dedup();
    Ok(nodes)
}

/// Step 4: nodes left down, drained or failed resumed, and waited for (at most 30 s).
fn resume_nodes(done: &mut Vec<String>) {
    let Ok(listed) = nodes() else {
        // slurmctld does not answer: Bed::connect says so.
        return;
    };
    let bad: Vec<(String, String)> = listed
        .into_iter()
        .filter(|(_, state)| node_state(state) == NodeState::Resumable)
        .collect();
    if bad.is_empty() {
        return;
    }
    for (node, state) in &bad {
        let name = format!("nodename={node}");
        match command::run(
            "scontrol",
            &["update".as_ref(), name.as_ref(), "state=resume".as_ref()],
            None,
            QUERY,
        ) {
            Ok(_) => done.push(format!("resumed {node} ({state})")),
            Err(e) => done.push(format!("could not resume {node} ({state}): {e}")),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let still: Vec<String> = nodes()
            .unwrap_or_default()
            .into_iter()
            .filter(|(n, s)| bad.iter().any(|(b, _)| b == n) && node_state(s) != NodeState::Usable)
            .map(|(n, s)| format!("{n} ({s})"))
            .collect();
        if still.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            done.push(format!("still not usable 30 s later: {}", still.join(", ")));
            return;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_give_command_and_state() {
        assert_eq!(
            comm_and_state("1234 (slurmctld) T 1 1234 1234 0 -1 4194560 ..."),
            Some(("slurmctld", 'T'))
        );
        assert_eq!(
            comm_and_state("77 (slurmd) S 1 77 77 0 -1"),
            Some(("slurmd", 'S'))
        );
        // A command name with spaces and parentheses: the state follows the last `)`.
        assert_eq!(comm_and_state("9 (a (b) c) R 1 9"), Some(("a (b) c", 'R')));
        assert_eq!(comm_and_state("garbage"), None);
        assert_eq!(comm_and_state("5 (x)"), None);
    }

    #[test]
    fn node_states_are_told_apart() {
        for usable in ["idle", "mix", "alloc", "comp"] {
            assert_eq!(node_state(usable), NodeState::Usable, "{usable}");
        }
        for resumable in ["down", "down*", "drain", "drain*", "drng", "fail", "failg"] {
            assert_eq!(node_state(resumable), NodeState::Resumable, "{resumable}");
        }
        for other in ["resv", "maint", "idle~", "idle*", "unk", "plnd", ""] {
            assert_eq!(node_state(other), NodeState::Other, "{other}");
        }
    }
}
