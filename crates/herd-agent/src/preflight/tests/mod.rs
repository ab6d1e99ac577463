//! The preflight's checks against real processes, files and sockets: a Python with torch
//! (the torch venv, `testbed/venv`) and one without (a bare venv made here), programs that
//! are missing or not executable, a fake `nvidia-smi`, folders root cannot write, a closed
//! port and a held one.

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::*;
use crate::config::{Config, KeepAlive};

/// The torch venv's python, from `testbed/venv` (as the bed's tests find it). Tests never
/// skip: without it they fail, saying how to make it.
fn torch_python() -> PathBuf {
    herd_testbed::venv_python().unwrap_or_else(|e| panic!("testbed/venv could not make the test venv ({e}): run `testbed/venv` by hand (scripts/test-all sets everything up)"))
}

/// A fresh venv without torch (nor pip) in `dir`, made by the `python3` on PATH: its
/// `bin/python`.
fn bare_venv(dir: &Path) -> PathBuf {
    let venv = dir.join("bare");
    let status = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(&venv)
        .status()
        .unwrap_or_else(|e| panic!("these tests need python3 with its venv module on PATH: {e}"));
    assert!(status.success(), "python3 -m venv failed: {status}");
    venv.join("bin/python")
}

/// `text` written to `path`, executable.
fn executable_file(path: &Path, text: &str) -> PathBuf {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path.to_owned()
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The finding, or a panic naming what passed.
fn finding<T: std::fmt::Debug>(r: Result<T, Finding>, what: &str) -> Finding {
    match r {
        Err(f) => {
            println!("{what}: {f}");
            f
        }
        Ok(v) => panic!("{what}: no finding ({v:?})"),
    }
}

#[test]
fn python_arguments_are_read_as_python_reads_them() {
    let read = |args: &[&str]| {
        let (options, module, script) = python_args(&os(args));
        let options: Vec<String> = options
            .iter()
            .map(|o| o.to_string_lossy().into_owned())
            .collect();
        (options, module, script)
    };
    let none: Vec<String> = Vec::new();
    assert_eq!(
        read(&["train.py", "--lr", "1"]),
        (none.clone(), None, Some(PathBuf::from("train.py")))
    );
    assert_eq!(
        read(&["-u", "-W", "ignore", "-X", "dev", "train.py"]),
        (none.clone(), None, Some(PathBuf::from("train.py")))
    );
    assert_eq!(
        read(&["-uIs", "-Wignore", "a b.py"]),
        (
            vec!["-I".into(), "-s".into()],
            None,
            Some(PathBuf::from("a b.py"))
        )
    );
    assert_eq!(
        read(&[
            "-u",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "x.py"
        ]),
        (none.clone(), Some("torch.distributed.run".into()), None)
    );
    assert_eq!(
        read(&["-Smmypkg.train"]),
        (vec!["-S".into()], Some("mypkg.train".into()), None)
    );
    assert_eq!(
        read(&["-c", "print(1)", "x.py"]),
        (none.clone(), None, None)
    );
    assert_eq!(read(&["-"]), (none.clone(), None, None));
    assert_eq!(
        read(&["-E", "--", "-odd.py"]),
        (vec!["-E".into()], None, Some(PathBuf::from("-odd.py")))
    );
    assert_eq!(
        read(&["--check-hash-based-pycs", "never", "t.py"]),
        (none.clone(), None, Some(PathBuf::from("t.py")))
    );
    assert_eq!(read(&["--version"]), (none, None, None));
}

#[test]
fn programs_resolve_as_the_os_finds_them() {
    let dir = tmp();
    let bin = dir.path().join("bin");
    let other = dir.path().join("other");
    std::fs::create_dir_all(&bin).expect("mkdir");
    std::fs::create_dir_all(&other).expect("mkdir");
    let tool = executable_file(&bin.join("tool"), "#!/bin/sh\n");
    std::fs::write(other.join("plain"), "not a program").expect("write");
    let path = std::env::join_paths([&other, &bin]).expect("PATH");
    assert_eq!(resolve(OsStr::new("tool"), Some(&path)), Ok(tool.clone()));
    assert_eq!(
        resolve(tool.as_os_str(), Some(OsStr::new("/nowhere"))),
        Ok(tool)
    );
    // Not executable, even for root (no execute bit at all): said, with where it was.
    let e = resolve(OsStr::new("plain"), Some(&path)).expect_err("plain");
    assert!(e.contains("only as") && e.contains("other/plain"), "{e}");
    assert!(e.contains("chmod +x"), "{e}");
    let e = resolve(OsStr::new("missing-tool"), Some(&path)).expect_err("missing");
    assert!(
        e.contains("`missing-tool` is not on PATH on this node (searched ")
            && e.contains(&*path.to_string_lossy()),
        "{e}"
    );
    let e = resolve(bin.as_os_str(), None).expect_err("a folder");
    assert!(e.contains("is not a file"), "{e}");
}

#[tokio::test]
async fn a_missing_or_unrunnable_program_is_a_command_finding() {
    let dir = tmp();
    let path = OsString::from("/usr/bin:/bin");
    let f = finding(
        check_command(&os(&["herd-no-such-program", "--x"]), Some(&path)).await,
        "missing program",
    );
    assert_eq!(f.check, "command");
    assert!(
        f.detail.contains(
            "`herd-no-such-program` is not on PATH on this node (searched /usr/bin:/bin)"
        ),
        "{f}"
    );

    let plain = dir.path().join("run.sh");
    std::fs::write(&plain, "#!/bin/sh\necho hi\n").expect("write");
    let f = finding(
        check_command(&[plain.clone().into()], Some(&path)).await,
        "not executable",
    );
    assert_eq!(f.check, "command");
    assert!(
        f.detail
            .contains(&format!("`{}` may not be executed", plain.display())),
        "{f}"
    );

    // A script whose interpreter this node lacks: the kernel would refuse it too.
    let script = executable_file(
        &dir.path().join("wrapped"),
        "#!/opt/herd-missing/bin/bash -e\nexit 0\n",
    );
    let f = finding(
        check_command(&[script.clone().into()], Some(&path)).await,
        "missing interpreter",
    );
    assert_eq!(f.check, "command");
    assert!(
        f.detail
            .contains("starts with `#!/opt/herd-missing/bin/bash -e`")
            && f.detail.contains("does not exist on this node"),
        "{f}"
    );

    // Programs that resolve pass: by path, by PATH, a script with a sound `#!` line.
    let ok = executable_file(&dir.path().join("ok.sh"), "#!/bin/sh\nexit 0\n");
    check_command(&[ok.into()], Some(&path))
        .await
        .expect("ok.sh");
    check_command(&os(&["sh", "-c", "true"]), Some(&path))
        .await
        .expect("sh");
}

#[tokio::test]
async fn a_python_without_torch_is_named_with_the_fix() {
    let dir = tmp();
    let bare = bare_venv(dir.path());
    let script = dir.path().join("train.py");
    std::fs::write(&script, "import torch\n").expect("write");
    let script_s = script.to_string_lossy().into_owned();

    // By path: the interpreter and the missing module are named.
    let argv = vec![bare.clone().into(), "-u".into(), script.clone().into()];
    let f = finding(check_command(&argv, None).await, "bare venv by path");
    assert_eq!(f.check, "python");
    assert_eq!(
        f.detail,
        format!(
            "{} cannot import torch (no module named torch): install torch in that environment",
            bare.display()
        )
    );

    // By name, on a node whose PATH leads to the bare venv: PATH is part of the fix.
    let path =
        std::env::join_paths([bare.parent().expect("bin"), Path::new("/usr/bin")]).expect("PATH");
    let f = finding(
        check_command(&os(&["python3", &script_s]), Some(&path)).await,
        "python3 on a broken PATH",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail.starts_with(&format!(
            "{} cannot import torch",
            bare.parent().expect("bin").join("python3").display()
        )) && f
            .detail
            .contains("fix PATH on this node so `python3` is the environment's python"),
        "{f}"
    );

    // A script run by its `#!` line is a Python command too.
    let shebang = executable_file(
        &dir.path().join("train"),
        "#!/usr/bin/env -S python3 -u\nimport torch\n",
    );
    let f = finding(
        check_command(&[shebang.into()], Some(&path)).await,
        "#! python3",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail.contains("cannot import torch")
            && f.detail
                .contains("fix PATH on this node so `python3` is the environment's python"),
        "{f}"
    );

    // The script itself must be readable here (the code on a file system every node has).
    let missing = dir.path().join("gone/train.py");
    let f = finding(
        check_command(&[bare.clone().into(), missing.clone().into()], None).await,
        "missing script",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail.starts_with(&format!(
            "the script {} cannot be read on this node (No such file or directory",
            missing.display()
        )),
        "{f}"
    );

    // An interpreter that is not there, or a venv whose python links to nothing.
    let f = finding(
        check_command(&os(&["/opt/herd-none/bin/python", &script_s]), None).await,
        "no interpreter",
    );
    assert_eq!(f.check, "python");
    assert!(
        f.detail
            .contains("`/opt/herd-none/bin/python` does not exist on this node"),
        "{f}"
    );
    let broken = dir.path().join("broken/bin");
    std::fs::create_dir_all(&broken).expect("mkdir");
    std::os::unix::fs::symlink("/opt/herd-none/python3.11", broken.join("python")).expect("ln");
    let f = finding(
        check_command(&[broken.join("python").into(), script.clone().into()], None).await,
        "dangling python",
    );
    assert!(f.detail.contains("(or is a link to nothing)"), "{f}");

    // An interpreter that starts and dies: its last words are in the finding.
    let dying = executable_file(
        &dir.path().join("python3.11"),
        "#!/bin/sh\necho 'Fatal Python error: init_fs_encoding: failed to get the Python codec' >&2\nexit 1\n",
    );
    let f = finding(
        check_command(&[dying.clone().into(), script.into()], None).await,
        "dying python",
    );
    assert_eq!(f.check, "python");
    assert_eq!(
        f.detail,
        format!("{} does not start on this node (exited with code 1: Fatal Python error: init_fs_encoding: failed to get the Python codec): its environment is broken here; reinstall it or fix PATH on this node", dying.display())
    );
}

#[tokio::test]
async fn a_python_with_torch_passes_and_its_module_is_looked_for() {
    let python = torch_python();
    let dir = tmp();
    let script = dir.path().join("train.py");
    std::fs::write(&script, "import torch\n").expect("write");
    let py: OsString = python.clone().into();
    let started = Instant::now();
    check_command(&[py.clone(), "-u".into(), script.clone().into()], None)
        .await
        .expect("the torch venv has torch");
    println!("python check with the torch venv: {:?}", started.elapsed());
    // torchrun's module: found without importing torch.
    check_command(
        &[
            py.clone(),
            "-m".into(),
            "torch.distributed.run".into(),
            "--nproc-per-node".into(),
            "2".into(),
            script.clone().into(),
        ],
        None,
    )
    .await
    .expect("-m torch.distributed.run");
    let f = finding(
        check_command(
            &[py.clone(), "-m".into(), "herd_no_such_pkg.train".into()],
            None,
        )
        .await,
        "-m missing module",
    );
    assert_eq!(
        f.detail,
        format!(
            "{} cannot import herd_no_such_pkg (no module named herd_no_such_pkg): install herd_no_such_pkg in that environment",
            python.display()
        )
    );
    // The command's own options that change where modules are found are kept: with -S
    // (no site-packages) that interpreter has no torch.
    let f = finding(
        check_command(&[py, "-S".into(), script.into()], None).await,
        "-S",
    );
    assert!(f.detail.contains("cannot import torch"), "{f}");
}

mod gpus;
mod node;
