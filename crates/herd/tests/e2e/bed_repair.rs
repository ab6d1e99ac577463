//! The bed repairs itself at a test's start (crates/herd-testbed/src/repair.rs): this test
//! breaks it as a test killed mid-way would leave it (a frozen cgroup never thawed,
//! slurmctld stopped, a node drained and one failed, jobs left in the queue), all while it
//! holds the bed, and the repair that `Bed::require` runs first mends every part of it and
//! says so; the bed is then accepted as it is.

use std::process::Command;
use std::time::{Duration, Instant};

use herd_slurm::scheduler::command;
use herd_testbed::{repair, Bed, Frozen};

fn scontrol(args: &[&str]) {
    let out = Command::new("scontrol")
        .args(args)
        .output()
        .expect("scontrol runs");
    assert!(
        out.status.success(),
        "scontrol {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `sbatch --parsable ARGS --wrap 'sleep 300'`: the job id.
fn sleeper(args: &[&str]) -> String {
    let out = Command::new("sbatch")
        .args([
            "--parsable",
            "--job-name=herd-e2e-bed-repair",
            "--output=/dev/null",
        ])
        .args(args)
        .args(["--wrap", "sleep 300"])
        .output()
        .expect("sbatch runs");
    assert!(
        out.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The state letter of process `pid` (`/proc/PID/stat`: `PID (COMM) STATE …`).
fn state_of(pid: &str) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .expect("a state")
}

fn queue() -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%A %T"])
        .output()
        .expect("squeue runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_bed_left_broken_is_repaired_at_the_next_tests_start() {
    // The bed is this test's while it breaks it: no other test process takes it meanwhile
    // (the cross-process lock is held until this process ends).
    let turn = herd_testbed::exclusive();
    let nodes: Vec<String> = command::node_states("gpu")
        .expect("sinfo: is the bed up? (`sudo testbed/up`)")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(nodes.len() >= 3, "the bed's 3 nodes: {nodes:?}");

    // A job running on the first node, one held in the queue.
    let running = sleeper(&[&format!("--nodelist={}", nodes[0])]);
    let held = sleeper(&["--hold"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !queue().contains(&format!("{running} RUNNING")) {
        assert!(
            Instant::now() < deadline,
            "job {running} never ran: {:?}",
            queue()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // The second node drained, the third failed. (Not down: with the bed's
    // ReturnToService=2 slurmctld itself returns a down node to service at its next
    // registration, which on a small cluster comes with every ping, so a down node may be
    // idle again before the repair looks. The repair resumes down nodes the same way; its
    // unit tests read every state it resumes.)
    scontrol(&[
        "update",
        &format!("nodename={}", nodes[1]),
        "state=drain",
        "reason=herd bed_repair test",
    ]);
    scontrol(&[
        "update",
        &format!("nodename={}", nodes[2]),
        "state=fail",
        "reason=herd bed_repair test",
    ]);
    // A process frozen in a cgroup whose guard never ran (a test killed mid-way).
    let mut frozen_child = Command::new("sleep").arg("300").spawn().expect("sleep");
    std::mem::forget(Frozen::new(&[frozen_child.id()]).expect("the cgroup freezer"));
    // slurmctld stopped.
    let ctld = std::fs::read_to_string("/var/lib/herd-testbed/run/slurmctld.pid")
        .expect("slurmctld's pid file")
        .trim()
        .to_owned();
    assert!(Command::new("kill")
        .args(["-STOP", &ctld])
        .status()
        .expect("kill")
        .success());
    // A stop signal takes effect when the kernel next schedules the process (every thread
    // of a busy slurmctld): look until it shows, within a deadline that only tells a stop
    // from none.
    let stopped_by = Instant::now() + Duration::from_secs(10);
    while state_of(&ctld) != 'T' {
        assert!(
            Instant::now() < stopped_by,
            "slurmctld {ctld} not stopped 10 s after SIGSTOP: state {}",
            state_of(&ctld)
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let said = repair::repair("this test", Duration::from_secs(60));
    eprintln!("the repair said: {said:#?}");
    let all = said.join("\n");
    for want in [
        "thawed herd-testbed-frozen-",
        "woke the stopped slurmctld",
        "cancelled 2 leftover jobs",
        &format!("resumed {} (drain", nodes[1]),
        &format!("resumed {} (fail", nodes[2]),
    ] {
        assert!(
            all.contains(want),
            "no `{want}` in what the repair said:\n{all}"
        );
    }
    assert!(
        all.contains(&running) && all.contains(&held),
        "the leftover jobs named:\n{all}"
    );
    assert!(
        !all.contains("could not") && !all.contains("still") && !all.contains("would not"),
        "the repair mended everything:\n{all}"
    );

    // Mended: the frozen process is gone, slurmctld runs, the queue is empty, every node
    // is usable, no frozen cgroup is left.
    let ended = frozen_child.try_wait().expect("try_wait");
    assert!(
        ended.is_some_and(|s| !s.success()),
        "the frozen sleep was killed: {ended:?}"
    );
    assert_ne!(state_of(&ctld), 'T', "slurmctld runs again");
    assert!(queue().is_empty(), "no job left: {:?}", queue());
    for (node, state) in command::node_states("gpu").expect("sinfo") {
        assert!(
            matches!(state.as_str(), "idle" | "mix" | "alloc" | "comp"),
            "{node} is {state}"
        );
    }
    let cgroups = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for line in cgroups.lines().filter(|l| l.contains(" - cgroup2 ")) {
        let mount = line.split_whitespace().nth(4).expect("mount point");
        let left: Vec<String> = std::fs::read_dir(mount)
            .expect("cgroup2 root")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("herd-testbed-frozen-"))
            .collect();
        assert!(left.is_empty(), "frozen cgroups left: {left:?}");
    }

    // And the bed is accepted as it is now, with nothing more to repair.
    drop(turn);
    let bed = Bed::require();
    assert!(bed.nodes().len() >= 3, "{:?}", bed.nodes());
    assert!(
        repair::repair("this test", Duration::from_secs(10)).is_empty(),
        "nothing is left to repair"
    );
}
