//! `herd submit` and `herd check` with fake SLURM commands: dry runs, checks, and bad input
//! or a failing file system that leave nothing behind and submit nothing.

use super::*;

#[test]
fn submit_dry_run_prints_script_and_ranks_and_writes_nothing() {
    let dir = temp_dir("dry-run");
    let exps = dir.join("exps");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args([
            "submit",
            "--dry-run",
            "-J",
            "demo",
            "--nodes",
            "2",
            "--gpus-per-node",
            "2",
            "--exp-root",
        ])
        .arg(&exps)
        .args(["--", "sh", "-c", "echo $(id) 'x'"])
        .current_dir(&dir)
        .output()
        .expect("herd runs");
    let text = stdout_of(&out);
    assert!(text.starts_with("#!/bin/bash\n"), "{text}");
    assert!(text.contains("#SBATCH --nodes=2"), "{text}");
    assert!(
        text.contains("'sh' '-c' 'echo $(id) '\\''x'\\'''"),
        "arguments are single-quoted words: {text}"
    );
    // Every worker sees both GPUs of its node by default.
    assert!(
        text.contains(
            "node  rank  local_rank  CUDA_VISIBLE_DEVICES\n   0     0           0  0,1\n   0     1           1  0,1\n"
        ),
        "{text}"
    );
    assert!(!exps.exists(), "a dry run writes nothing");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--hang-timeout auto` reaches the batch script's `herd launch` line; a word that is
/// neither seconds nor `auto` is refused naming the flag.
#[test]
fn submit_hang_timeout_auto_reaches_the_agents() {
    let dir = temp_dir("hang-auto");
    let exps = dir.join("exps");
    std::fs::write(dir.join("train.py"), "").expect("train.py");
    let dry_run = |value: &str| {
        Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(["submit", "--dry-run", "-J", "auto", "--nodes", "1"])
            .args(["--hang-timeout", value, "--exp-root"])
            .arg(&exps)
            .args(["--", "python", "train.py"])
            .current_dir(&dir)
            .output()
            .expect("herd runs")
    };
    let text = stdout_of(&dry_run("auto"));
    assert!(text.contains(" --hang-timeout auto "), "{text}");
    let out = dry_run("often");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--hang-timeout: `often` is not a whole number of seconds or `auto`"),
        "{err}"
    );
    assert!(!exps.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--gpu-bind per-rank` reaches the script and the rank table; a value that is not a binding
/// (SLURM's own `--gpu-bind=closest`) is refused naming the two there are.
#[test]
fn submit_gpu_bind_per_rank_shows_each_ranks_share() {
    let dir = temp_dir("gpu-bind");
    let exps = dir.join("exps");
    std::fs::write(dir.join("train.py"), "").expect("train.py");
    let dry_run = |bind: &str| {
        Command::new(env!("CARGO_BIN_EXE_herd"))
            .args([
                "submit",
                "--dry-run",
                "-J",
                "bind",
                "--nodes",
                "1",
                "--gpus-per-node",
                "4",
                "--gpu-bind",
                bind,
                "--exp-root",
            ])
            .arg(&exps)
            .args(["--", "python", "train.py"])
            .current_dir(&dir)
            .output()
            .expect("herd runs")
    };
    let out = dry_run("per-rank");
    let text = stdout_of(&out);
    assert!(
        text.contains("launch --nproc-per-node 4 --gpu-bind per-rank"),
        "{text}"
    );
    assert!(
        text.contains("   0     1           1  1\n   0     2           2  2\n"),
        "{text}"
    );
    let out = dry_run("closest");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--gpu-bind: `closest` is not a GPU binding")
            && err.contains("use `all`")
            && err.contains("`per-rank`"),
        "{err}"
    );
    assert!(!exps.exists(), "nothing written");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_names_the_key_to_change_and_fails() {
    let dir = temp_dir("check");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args([
            "check",
            "-J",
            "x",
            "--gpus",
            "3",
            "--gpus-per-node",
            "2",
            "--",
            "no-such-program-here",
        ])
        .current_dir(&dir)
        .output()
        .expect("herd runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--gpus = 3 GPUs is not a multiple of --gpus-per-node = 2"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`no-such-program-here` is not on PATH"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nothing written, nothing submitted"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `herd check --example-profile` prints the complete cluster profile of docs/submit.md and
/// asks SLURM nothing; installed where profiles go (its `match` made to fit this host),
/// `herd submit --dry-run` takes its defaults. With any other argument it is a usage error.
#[test]
fn check_prints_the_example_profile_that_submit_then_uses() {
    let dir = submit_project(&[("train.py", 10)]);
    let out = herd_here(dir.path(), &["check", "--example-profile"], &[]);
    let profile = stdout_of(&out);
    assert!(profile.contains("\nmatch = \"login*\""), "{profile}");
    assert_eq!(slurm_called(dir.path()), "", "checks nothing");
    let profiles = dir.path().join("config/herd/profiles");
    std::fs::create_dir_all(&profiles).expect("profiles folder");
    std::fs::write(
        profiles.join("10-mycluster.toml"),
        profile.replacen("\nmatch = \"login*\"", "\nmatch = \"*\"", 1),
    )
    .expect("profile");
    let out = submit_here(
        dir.path(),
        &["--dry-run", "-J", "demo", "--", "sh", "train.py"],
    );
    let script = stdout_of(&out);
    for line in [
        "#SBATCH --partition=gpu\n",
        "#SBATCH --constraint=ib\n",
        "#SBATCH --gres=gpu:a100:8\n",
        "#SBATCH --time=2-00:00:00\n",
        "#SBATCH --account=vision\n",
        "#SBATCH --qos=normal\n",
    ] {
        assert!(script.contains(line), "{line}: {script}");
    }
    assert!(script.contains(" --hang-timeout auto "), "{script}");
    assert!(script.contains("/scratch/alice/herd-exp/demo"), "{script}");

    let out = herd_here(dir.path(), &["check", "--example-profile", "-J", "x"], &[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn the_snapshot_store_commands_are_gone() {
    // The code folder is made at submit and freed with its experiment: no `materialize`,
    // no `gc`.
    for gone in ["materialize", "gc"] {
        let out = herd(&[gone]);
        assert_eq!(out.status.code(), Some(2), "{gone}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("unrecognized subcommand '{gone}'")),
            "{gone}: {stderr}"
        );
    }
}

/// A tmpfs mounted on a folder for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs with `options` (`size=64k`, `ro,size=64k`) on `dir`, made if missing.
    /// Mounting needs root, as CI runs the tests: without it the test fails, never skips.
    fn mount(dir: &std::path::Path, options: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).expect("mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(out) if out.status.success() => Tmpfs(dir.to_owned()),
            other => panic!(
                "this test makes the file system fail with a small tmpfs (`mount -t tmpfs -o {options}`), which needs root (CI runs the tests as root): {other:?}"
            ),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let done = |args: &[&str]| {
            Command::new("umount")
                .args(args)
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success())
        };
        if !done(&[]) && !done(&["--lazy"]) {
            eprintln!(
                "warning: cannot unmount the test's tmpfs {}",
                self.0.display()
            );
        }
    }
}

/// A project with `files` (name, size in bytes), and `bin/` holding a fake `sbatch`,
/// `squeue` and `scontrol` that fail as with slurmctld down and write their name into
/// `called`: `herd submit` with [`submit_here`] never reaches a cluster.
pub(super) fn submit_project(files: &[(&str, usize)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    for fake in ["sbatch", "squeue", "scontrol"] {
        let path = bin.join(fake);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho {fake} >> '{}'\necho '{fake}: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n",
                dir.path().join("called").display()
            ),
        )
        .expect("fake command");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
    }
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("project");
    for (name, size) in files {
        // Not zeros: every byte takes room on any file system.
        let bytes: Vec<u8> = (0..*size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(project.join(name), bytes).expect("project file");
    }
    dir
}

/// `herd submit ARGS` run in `dir`'s project with only its fake SLURM commands (and the
/// system's) on PATH and no cluster profiles.
fn submit_here(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    let argv: Vec<&str> = std::iter::once("submit")
        .chain(args.iter().copied())
        .collect();
    herd_here(dir, &argv, &[])
}

/// The fake SLURM commands [`submit_here`] ran.
pub(super) fn slurm_called(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("called")).unwrap_or_default()
}

/// stderr of a [`submit_here`], less the note that the partitions were not checked (the
/// fake scontrol fails), which must be there once, with scontrol's message.
fn stderr_less_note(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let note = "herd: note: partitions not checked: scontrol: error: Unable to contact slurm controller (connect failure)\n";
    assert_eq!(stderr.matches(note).count(), 1, "{stderr}");
    stderr.replacen(note, "", 1)
}

/// Names in `exp_root`.
fn left_in(exp_root: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(exp_root)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// `herd submit --resume NAME` and `herd report NAME` of a folder that is there but holds no
/// manifest say it is no experiment folder (not that it does not exist), and of a missing
/// one that it does not exist; exit 2, nothing submitted, the folder left as it was.
#[test]
fn resume_of_a_folder_that_is_no_experiment_says_so_and_touches_nothing() {
    let dir = submit_project(&[("train.py", 10)]);
    let exps = dir.path().join("exps");
    std::fs::create_dir_all(exps.join("half")).expect("mkdir");
    std::fs::write(exps.join("half/notes.txt"), "mine\n").expect("write");
    let exp_root = exps.to_str().expect("utf-8");
    let report = |name: &str| {
        Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(["report", name, "--exp-root", exp_root])
            .output()
            .expect("herd runs")
    };
    for out in [
        submit_here(dir.path(), &["--resume", "half", "--exp-root", exp_root]),
        report("half"),
    ] {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("/half is not an experiment folder: it has no manifest.json (only `herd submit` makes experiment folders)"),
            "{stderr}"
        );
        assert!(!stderr.contains("does not exist"), "{stderr}");
    }
    for out in [
        submit_here(dir.path(), &["--resume", "gone", "--exp-root", exp_root]),
        report("gone"),
    ] {
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("/gone does not exist"), "{stderr}");
    }
    assert_eq!(left_in(&exps), ["half"]);
    assert_eq!(left_in(&exps.join("half")), ["notes.txt"]);
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
}

/// A full disk while `herd submit` snapshots the code is a failure (1), not a usage error:
/// the message says what failed and where, sbatch is never called, nothing is left behind.
#[test]
fn submit_onto_a_full_disk_exits_1_naming_the_path_and_leaves_nothing() {
    let dir = submit_project(&[("big.bin", 256 << 10), ("train.py", 10)]);
    let exps = dir.path().join("exps");
    let _fs = Tmpfs::mount(&exps, "size=64k");
    let exp_root = exps.to_str().expect("utf-8");
    let out = submit_here(
        dir.path(),
        &["-J", "full", "--exp-root", exp_root, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = stderr_less_note(&out);
    assert!(
        stderr.starts_with("herd: error: cannot ")
            && stderr.contains(&format!(" {exp_root}/"))
            && stderr.contains("No space left on device"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, the cause once: {stderr}"
    );
    assert!(out.stdout.is_empty(), "no job id: {out:?}");
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
    assert_eq!(
        left_in(&exps),
        Vec::<String>::new(),
        "no experiment folder, no .herd-new-* folder"
    );
}

/// A read-only file system (root cannot write there either): exit 1, naming the folder.
#[test]
fn submit_onto_a_read_only_file_system_exits_1_naming_the_path() {
    let dir = submit_project(&[("train.py", 10)]);
    let ro = dir.path().join("ro");
    let _fs = Tmpfs::mount(&ro, "ro,size=64k");
    let exps = ro.join("exps");
    let exp_root = exps.to_str().expect("utf-8");
    let out = submit_here(
        dir.path(),
        &["-J", "ro", "--exp-root", exp_root, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = stderr_less_note(&out);
    assert_eq!(
        stderr,
        format!("herd: error: cannot create the experiment root {exp_root}: Read-only file system (os error 30)\n")
    );
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
    assert_eq!(left_in(&ro), Vec::<String>::new(), "nothing written");
}

/// What the user got wrong still exits 2: a job name that is no folder name (found by the
/// plan) and an experiment root that is the project itself (found making the experiment).
#[test]
fn submit_with_bad_input_exits_2_writing_nothing() {
    let dir = submit_project(&[("train.py", 10)]);
    let exps = dir.path().join("exps");
    let exp_root = exps.to_str().expect("utf-8");
    let out = submit_here(
        dir.path(),
        &["-J", "a/b", "--exp-root", exp_root, "--", "true"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .starts_with("herd: error: --job-name: `a/b` is not a job name"),
        "{out:?}"
    );
    assert!(!exps.exists(), "nothing written");

    let out = submit_here(dir.path(), &["-J", "here", "--exp-root", ".", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is the project root"),
        "{out:?}"
    );
    let project: Vec<_> = std::fs::read_dir(dir.path().join("project"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(project, ["train.py"], "nothing written into the project");
    assert!(
        !slurm_called(dir.path()).contains("sbatch"),
        "sbatch was called"
    );
}

/// `herd submit --help` and `herd check --help` list every key's flag (the command as
/// `-- <CMD>...`), and every flag they list is a key's, a `--no-KEY`, or one of the
/// command's own.
#[test]
fn submit_and_check_help_list_every_key() {
    use herd_plan::Key;
    for (command, own) in [
        (
            "submit",
            &[
                "--dry-run",
                "--resume",
                "--then",
                "--wait",
                "--sweep",
                "--sweep-file",
                "--max-parallel",
                "--help",
                "--version",
            ][..],
        ),
        ("check", &["--example-profile", "--help", "--version"][..]),
    ] {
        let out = herd(&[command, "--help"]);
        assert!(out.status.success(), "herd {command} --help: {out:?}");
        let help = String::from_utf8_lossy(&out.stdout);
        // Option lines: `  -N, --nodes <N>  Nodes` or `      --requeue  …`.
        let listed: Vec<&str> = help
            .lines()
            .skip_while(|l| !l.starts_with("Options:"))
            .filter(|l| l.trim_start().starts_with('-'))
            .filter_map(|l| {
                l.trim_start()
                    .split([' ', ','])
                    .find(|w| w.starts_with("--"))
            })
            .collect();
        for key in Key::ALL {
            if key == Key::Command {
                assert!(
                    help.contains("[-- <CMD>...]"),
                    "herd {command} --help:\n{help}"
                );
            } else {
                assert!(
                    listed.contains(&key.flag()),
                    "herd {command} --help does not list {}:\n{help}",
                    key.flag()
                );
            }
        }
        for flag in &listed {
            let is_key = Key::ALL.iter().any(|k| k.flag() == *flag);
            let negates_key = flag
                .strip_prefix("--no-")
                .is_some_and(|f| Key::ALL.iter().any(|k| k.flag() == format!("--{f}")));
            assert!(
                is_key || negates_key || own.contains(flag),
                "herd {command} --help lists {flag}, which is no key:\n{help}"
            );
        }
    }
}

/// Writes `bin/NAME` under `dir` (a [`submit_project`]): a fake SLURM command running `body`.
pub(super) fn fake_command(dir: &std::path::Path, name: &str, body: &str) {
    let path = dir.join("bin").join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("fake command");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
}

/// `herd ARGS` run in `dir`'s project with only its fake SLURM commands (and the system's)
/// on PATH, no cluster profiles, and `env` set.
pub(super) fn herd_here(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .current_dir(dir.join("project"))
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", dir.join("bin").display()),
        )
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env_remove("SLURM_JOB_ID")
        .env_remove("HERD_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("herd runs")
}

/// `scontrol show partition -o` on the test bed (slurm-wlm 22.05.8), as printed.
const BED_PARTITIONS: &str = "\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
PartitionName=dev AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=00:05:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
";

/// `herd check` compares the plan with the partitions `scontrol show partition -o` lists
/// (a time over dev's MaxTime is an error naming it), and an `sinfo` that fails leaves
/// out the node sizes with a note saying so, sinfo's words included.
#[test]
fn check_reads_the_partitions_and_notes_a_failing_sinfo() {
    let dir = submit_project(&[("train.py", 10)]);
    fake_command(
        dir.path(),
        "scontrol",
        &format!("cat <<'EOF'\n{BED_PARTITIONS}EOF"),
    );
    fake_command(
        dir.path(),
        "sinfo",
        "echo 'sinfo: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1",
    );
    let out = herd_here(
        dir.path(),
        &[
            "check", "-J", "x", "-p", "dev", "--time", "10", "--", "true",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--time = 00:10:00 is longer than partition dev's MaxTime=00:05:00"),
        "{stderr}"
    );
    assert!(
        stderr.contains("herd: note: node sizes not checked: sinfo: error: Unable to contact slurm controller (connect failure)\n"),
        "{stderr}"
    );
    assert!(!stderr.contains("partitions not checked"), "{stderr}");
}

/// `--after NAME` looks the name up among this user's jobs with herd's one squeue query
/// and leaves out the jobs that have ended: with a running and an ended `pretrain`, the
/// script depends on the running one.
#[test]
fn after_a_name_depends_on_the_job_of_that_name_that_has_not_ended() {
    let dir = submit_project(&[("train.py", 10)]);
    fake_command(
        dir.path(),
        "squeue",
        &format!(
            "echo \"squeue $*\" >> '{}'\ncat <<'EOF'\n\
20|20|N/A|RUNNING|None|0:10|1:00|gpu-a01|1|0|me|(null)|2026-12-01T14:25:14|pretrain|\n\
21|21|N/A|COMPLETED|None|0:10|1:00|gpu-a02|1|0|me|(null)|2026-12-01T14:20:14|pretrain|\n\
EOF",
            dir.path().join("called").display()
        ),
    );
    let out = herd_here(
        dir.path(),
        &[
            "submit",
            "--dry-run",
            "-J",
            "eval",
            "--after",
            "pretrain",
            "--",
            "true",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(
        script.contains("#SBATCH --dependency=afterok:20\n"),
        "{script}"
    );
    let called = slurm_called(dir.path());
    assert!(
        called.contains("squeue -h --states=all --me -O JobID:|"),
        "{called}"
    );
}

/// `herd submit` from a project where `herd report` wrote its page and plots and an earlier
/// experiment root holds an experiment: the snapshot leaves them out and one line says so
/// (the user's own page is taken); a later snapshot with 12 MB of data added says it is
/// larger than usual and which `--exclude` leaves the data out.
#[test]
fn submit_leaves_out_what_herd_wrote_and_says_when_the_snapshot_grew() {
    let dir = submit_project(&[("train.sh", 100)]);
    let sbatch = dir.path().join("bin/sbatch");
    std::fs::write(&sbatch, "#!/bin/sh\necho 77\n").expect("a fake sbatch that queues");
    let project = dir.path().join("project");
    std::fs::write(
        project.join("report.html"),
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n{}\n",
            herd_exp::outputs::HTML_MARK
        ),
    )
    .expect("report.html");
    std::fs::create_dir(project.join("plots")).expect("plots");
    std::fs::write(
        project.join("plots/one.loss.svg"),
        format!("{}\n<svg></svg>\n", herd_exp::outputs::SVG_MARK),
    )
    .expect("svg");
    std::fs::write(project.join("index.html"), "<!DOCTYPE html>\n<p>mine</p>\n").expect("mine");
    herd_exp::NewExperiment::new(
        project.join("old-exps"),
        "old",
        &project,
        serde_json::json!({}),
        herd_exp::Invocation::current("test"),
    )
    .create()
    .expect("an earlier experiment root");
    let exps = dir.path().join("exps");
    let exp_root = exps.to_str().expect("utf-8");

    let out = submit_here(
        dir.path(),
        &["-J", "one", "--exp-root", exp_root, "--", "sh", "train.sh"],
    );
    assert!(out.status.success(), "{out:?}");
    let stderr = stderr_less_note(&out);
    assert!(
        stderr.contains(": 2 files, 0.0 MB, 2 copied in "),
        "index.html and train.sh: {stderr}"
    );
    assert!(
        stderr.contains("\nherd: code snapshot: left out 3 things herd wrote (experiments, logs, report pages and plots are never snapshotted): old-exps/, plots/ and report.html\n"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("herd: note: this code snapshot"),
        "{stderr}"
    );
    let mut code: Vec<String> = std::fs::read_dir(exps.join("one/code"))
        .expect("code")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    code.sort();
    assert_eq!(code, ["index.html", "train.sh"]);

    std::fs::create_dir(project.join("data")).expect("data");
    let bytes: Vec<u8> = (0..12_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(project.join("data/train.bin"), bytes).expect("data");
    let out = submit_here(
        dir.path(),
        &["-J", "two", "--exp-root", exp_root, "--", "sh", "train.sh"],
    );
    assert!(out.status.success(), "{out:?}");
    let stderr = stderr_less_note(&out);
    let note = stderr
        .lines()
        .find(|l| l.starts_with("herd: note: this code snapshot is larger than usual: "))
        .unwrap_or_else(|| panic!("no line about the size: {stderr}"));
    assert!(
        note.contains("against 0.0 MB in 2 files for one; biggest: data/ 12.0 MB")
            && note.contains("`--exclude /data/`"),
        "{note}"
    );
}

/// The README's flow: a venv made in the project (`python3 -m venv .venv`), then `herd
/// submit`: the snapshot is the code alone, one line says the venv was left out, and the
/// manifest records it.
#[test]
fn submit_leaves_a_venv_in_the_project_out_of_the_snapshot_and_says_so() {
    let dir = submit_project(&[("train.py", 100)]);
    let sbatch = dir.path().join("bin/sbatch");
    std::fs::write(&sbatch, "#!/bin/sh\necho 78\n").expect("a fake sbatch that queues");
    let project = dir.path().join("project");
    let made = Command::new("python3")
        .args(["-m", "venv", "--without-pip", ".venv"])
        .current_dir(&project)
        .status()
        .expect("python3 runs (these tests need python3 with its venv module)");
    assert!(made.success(), "python3 -m venv .venv");
    let exps = dir.path().join("exps");
    let exp_root = exps.to_str().expect("utf-8");
    // The venv's own python, as `python` is once it is activated.
    let python = project.join(".venv/bin/python");
    let out = submit_here(
        dir.path(),
        &[
            "-J",
            "venv",
            "--exp-root",
            exp_root,
            "--",
            python.to_str().expect("utf-8"),
            "train.py",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let stderr = stderr_less_note(&out);
    assert!(
        stderr.contains("\nherd: code snapshot: left out the Python environment .venv/ (a job runs its Python from where it is installed, never from code/): it holds pyvenv.cfg\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains(": 1 file, 0.0 MB, 1 copied in "),
        "{stderr}"
    );
    let code: Vec<String> = std::fs::read_dir(exps.join("venv/code"))
        .expect("code")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(code, ["train.py"]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(exps.join("venv/manifest.json")).expect("manifest"))
            .expect("json");
    assert_eq!(
        manifest["snapshot"]["python_envs"],
        serde_json::json!([".venv"])
    );
}
