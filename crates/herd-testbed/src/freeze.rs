//! A frozen node for the tests: processes frozen by the cgroup v2 freezer.
//!
//! SIGSTOP is not a freeze on the bed: SLURM sends SIGCONT to every process of a job before
//! each signal it sends it, and herd asks for a SIGCONT up to a minute before the time limit
//! (`--signal=CONT@…`), so a node stopped with SIGSTOP in a job with a time limit wakes
//! again, seconds later, before herd could notice it. A frozen cgroup ignores SIGCONT (and
//! every other signal) until it is thawed, as a hung machine would; SIGKILL still ends its
//! processes, so SLURM's cleanup works as on a real cluster.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::BedError;

/// Processes frozen together in one cgroup (see the module doc). Dropping it (the test ends,
/// or panics and unwinds) thaws whatever is left and removes the cgroup; a test killed
/// before it could drop it leaves the cgroup frozen, and the next bed test's
/// [`crate::repair`] thaws it and kills what is inside.
#[derive(Debug)]
pub struct Frozen {
    cgroup: PathBuf,
    pids: Vec<u32>,
}

/// The start of the name of every frozen node's cgroup (under the cgroup2 mount), which
/// [`crate::repair`] and `testbed/down` look for.
pub(crate) const PREFIX: &str = "herd-testbed-frozen-";

/// The cgroup v2 hierarchy's mount point, from `/proc/self/mountinfo`.
pub(crate) fn cgroup2_root() -> Result<PathBuf, BedError> {
    let path = Path::new("/proc/self/mountinfo");
    let table = std::fs::read_to_string(path).map_err(|source| BedError::Io {
        path: path.into(),
        source,
    })?;
    mount_point(&table, "cgroup2").ok_or_else(|| BedError::Parse {
        command: "read /proc/self/mountinfo".into(),
        output: "no cgroup2 file system is mounted; the frozen-node tests need its freezer \
                 (mount one: `mount -t cgroup2 none /sys/fs/cgroup/unified`)"
            .into(),
    })
}

/// The mount point of the first mount of file system type `fstype` in a mountinfo table
/// (`ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS… - FSTYPE SOURCE SUPER-OPTIONS`).
fn mount_point(mountinfo: &str, fstype: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next()? == fstype)
            .then(|| before.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

fn write(path: &Path, contents: &str) -> Result<(), BedError> {
    std::fs::write(path, contents).map_err(|source| BedError::Io {
        path: path.into(),
        source,
    })
}

impl Frozen {
    /// Freeze processes `pids` (all their threads) in a new cgroup; returns once the kernel
    /// says the cgroup is frozen (at most 10 s).
    pub fn new(pids: &[u32]) -> Result<Frozen, BedError> {
        let first = pids.first().copied().unwrap_or_default();
        let cgroup = cgroup2_root()?.join(format!("{PREFIX}{first}"));
        std::fs::create_dir_all(&cgroup).map_err(|source| BedError::Io {
            path: cgroup.clone(),
            source,
        })?;
        let frozen = Frozen {
            cgroup,
            pids: pids.to_vec(),
        };
        for pid in pids {
            write(&frozen.cgroup.join("cgroup.procs"), &pid.to_string())?;
        }
        write(&frozen.cgroup.join("cgroup.freeze"), "1")?;
        let events = frozen.cgroup.join("cgroup.events");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = std::fs::read_to_string(&events).map_err(|source| BedError::Io {
                path: events.clone(),
                source,
            })?;
            if now.lines().any(|l| l == "frozen 1") {
                return Ok(frozen);
            }
            if Instant::now() > deadline {
                return Err(BedError::Timeout {
                    command: format!("freeze {pids:?} in {}", frozen.cgroup.display()),
                    timeout: Duration::from_secs(10),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The processes frozen.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.cgroup.join("cgroup.freeze"), "0");
        // Whatever is still alive goes back to the root, so the cgroup can go.
        if let Ok(left) = std::fs::read_to_string(self.cgroup.join("cgroup.procs")) {
            if let Some(root) = self.cgroup.parent() {
                for pid in left.split_whitespace() {
                    let _ = std::fs::write(root.join("cgroup.procs"), pid);
                }
            }
        }
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_in_a_mountinfo_table() {
        let table = "\
24 1 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 24 0:27 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
36 24 0:32 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
        assert_eq!(
            mount_point(table, "cgroup2"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(
            mount_point(table, "cgroup"),
            Some("/sys/fs/cgroup/freezer".into())
        );
        assert_eq!(mount_point(table, "nfs"), None);
    }

    /// A frozen `sleep` stays frozen through SIGCONT, dies of SIGKILL, and the cgroup goes
    /// with the guard.
    #[test]
    fn a_frozen_process_ignores_sigcont_and_dies_of_sigkill() {
        assert!(
            is_root(),
            "the cgroup freezer needs root, as the bed and its tests do"
        );
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("sleep starts");
        let frozen = Frozen::new(&[child.id()]).expect("frozen");
        let cgroup = frozen.cgroup.clone();
        let state =
            |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroups");
        assert!(state(child.id()).contains("herd-testbed-frozen-"));
        let signal = |sig: &str| {
            std::process::Command::new("kill")
                .args([sig, &child.id().to_string()])
                .status()
                .expect("kill runs")
        };
        signal("-CONT");
        std::thread::sleep(Duration::from_millis(100));
        let events = std::fs::read_to_string(cgroup.join("cgroup.events")).expect("cgroup.events");
        assert!(events.contains("frozen 1"), "{events}");
        signal("-KILL");
        let status = child.wait().expect("sleep ends");
        assert!(!status.success());
        drop(frozen);
        assert!(!cgroup.exists());
    }

    fn is_root() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false)
    }
}
