//! Finding and ending every process a node's workers started, however they tried to hide.
//!
//! Workers run in their own process groups, and the agent is a child subreaper: a worker's
//! child that double-forks or calls `setsid` is re-parented to the agent instead of init, so
//! "every descendant of the agent" is exactly "every process of the job on this node".

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// One line of /proc/PID/stat, the fields herd needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    pid: i32,
    ppid: i32,
    /// Its process group.
    pgrp: i32,
    zombie: bool,
}

fn parse_stat(text: &str) -> Option<Stat> {
    // "pid (comm) state ppid …": comm may hold spaces and parentheses; split at the last ')'.
    let (head, tail) = text.rsplit_once(')')?;
    let pid = head.split_whitespace().next()?.parse().ok()?;
    let mut fields = tail.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some(Stat {
        pid,
        ppid,
        pgrp,
        zombie: state == "Z" || state == "X",
    })
}

fn all_stats() -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let name = e.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    })
    .collect()
}

/// Whether process `pid` exists and is not a zombie.
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| parse_stat(&t))
        .is_some_and(|s| !s.zombie)
}

/// Live (not zombie) descendants of `root`, and zombie direct children (to reap).
pub fn descendants(root: i32) -> (Vec<i32>, Vec<i32>) {
    let (live, zombies) = descendant_stats(root);
    (live.iter().map(|s| s.pid).collect(), zombies)
}

/// Processes the agent keeps across teardowns (warm standbys, `crate::warm`): never
/// counted among the workers' processes, never signalled or reaped by this module.
static KEPT: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Keep process `pid` (and what it starts) out of every teardown.
pub fn keep(pid: i32) {
    if let Ok(mut kept) = KEPT.lock() {
        kept.insert(pid);
    }
}

/// Process `pid` is no longer kept: a worker now, or ended.
pub fn unkeep(pid: i32) {
    if let Ok(mut kept) = KEPT.lock() {
        kept.remove(&pid);
    }
}

/// [`descendants`], with each live one's `/proc/PID/stat` fields; kept processes
/// ([`keep`]) and theirs left out.
fn descendant_stats(root: i32) -> (Vec<Stat>, Vec<i32>) {
    let kept = KEPT.lock().map(|k| k.clone()).unwrap_or_default();
    let stats = all_stats();
    let mut children: HashMap<i32, Vec<Stat>> = HashMap::new();
    for s in &stats {
        children.entry(s.ppid).or_default().push(*s);
    }
    let (mut live, mut zombies) = (Vec::new(), Vec::new());
    let mut queue = vec![root];
    let mut seen = HashSet::new();
    while let Some(p) = queue.pop() {
        for c in children.get(&p).into_iter().flatten() {
            if !seen.insert(c.pid) || kept.contains(&c.pid) {
                continue;
            }
            if c.zombie {
                if p == root {
                    zombies.push(c.pid);
                }
            } else {
                live.push(*c);
            }
            queue.push(c.pid);
        }
    }
    (live, zombies)
}

/// Make this process a child subreaper, so orphaned descendants stay ours to find.
pub fn become_subreaper() {
    // Best effort: without it, the process-group kill still reaches ordinary children.
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Reap zombie children that are not `managed` (those are waited for by their owners).
fn reap_orphans(zombies: &[i32], managed: &HashSet<i32>) {
    for &z in zombies {
        if !managed.contains(&z) {
            let _ = nix::sys::wait::waitpid(
                Pid::from_raw(z),
                Some(nix::sys::wait::WaitPidFlag::WNOHANG),
            );
        }
    }
}

/// Signal the workers' process groups and, separately, every descendant that left them
/// (`setsid`, `setpgid`): each process gets `signal` once. (Twice would make a worker
/// that catches SIGINT as `KeyboardInterrupt` raise it again while it cleans up.)
pub fn signal_all(groups: &[i32], signal: Signal) {
    for &g in groups {
        let _ = killpg(Pid::from_raw(g), signal);
    }
    let (live, _) = descendant_stats(std::process::id() as i32);
    for s in live.iter().filter(|s| !groups.contains(&s.pgrp)) {
        let _ = kill(Pid::from_raw(s.pid), signal);
    }
}

/// Forward `signal` to the workers' process groups only (their own children decide).
pub fn forward(groups: &[i32], signal: Signal) {
    for &g in groups {
        let _ = killpg(Pid::from_raw(g), signal);
    }
}

/// End every descendant of this process: `first` (SIGTERM; the signal that cancelled the
/// job) to the workers' groups and all descendants, up to `grace` for them to exit, then
/// SIGKILL to whatever is left, until nothing is. `managed` are pids whose exit status
/// someone else collects.
pub async fn terminate_all(groups: &[i32], managed: &HashSet<i32>, first: Signal, grace: Duration) {
    let me = std::process::id() as i32;
    signal_all(groups, first);
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let (live, zombies) = descendants(me);
        reap_orphans(&zombies, managed);
        if live.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the grace: SIGKILL until nothing is left (a fork racing the kill is caught on the
    // next round).
    for _ in 0..100 {
        signal_all(groups, Signal::SIGKILL);
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (live, zombies) = descendants(me);
        reap_orphans(&zombies, managed);
        if live.is_empty() {
            return;
        }
    }
}

/// Give `cmd` a process group of its own and the parent-death signal (SIGKILL when the
/// agent dies, so a killed agent never leaves a worker holding GPUs); its stdout and stderr
/// are piped (for `crate::workers::adopt`).
pub(crate) fn own_group_dying_with_agent(cmd: &mut tokio::process::Command) {
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    let agent = std::process::id() as i32;
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit via nix wrappers that allocate nothing).
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)?;
            // The agent may have died between fork and prctl: then nobody would kill us.
            if nix::unistd::getppid().as_raw() != agent {
                nix::libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        let s = parse_stat("4242 (we ird) (x)) S 17 4242 4242 0 -1 4194560").expect("parses");
        assert_eq!(
            s,
            Stat {
                pid: 4242,
                ppid: 17,
                pgrp: 4242,
                zombie: false
            }
        );
        assert!(parse_stat("9 (z) Z 1 9 9").expect("zombie").zombie);
        assert!(parse_stat("garbage").is_none());
    }
}
