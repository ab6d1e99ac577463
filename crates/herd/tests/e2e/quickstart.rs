//! README.md's "Quick start", run as written: its commands and its `train.py` are read from
//! the README itself (between the `<!-- quick start NAME: begin/end -->` markers) and run
//! in an empty folder, with the wheel `scripts/test-all` built (`HERD_WHEEL_DIR`). No bed:
//! `herd run` simulates the nodes on this machine.
//!
//! No network either. pip finds herd-slurm through `PIP_FIND_LINKS` (the README's own
//! advice while the wheel is not on the package index) and `PIP_NO_INDEX`. torch comes
//! from the PyTorch venv of `testbed/venv`: its site-packages are put on the new venv's
//! path by a `.pth` file, so `pip install … torch` finds it installed. Installing torch
//! from wheels instead would mean keeping the CUDA build's wheels (torch, triton and the
//! nvidia and cuda packages it pulls in, gigabytes) and unpacking them into every test's
//! venv, minutes of the 2-core CI machine; and a venv made earlier has no such wheels to
//! reuse without the network. The one other change: the venv's own setuptools (the old one
//! `ensurepip` bundles) is removed before the README's commands run, so pip sees the
//! PyTorch venv's, as new as torch asks for, instead of trying to fetch one.
//!
//! A missing wheel, marker or torch venv, or a python3 other than the torch venv's, fails
//! the test, saying what to do; it never skips. 46 s on 2 cores, 90 s with other work on
//! them: making the venv (ensurepip, twice) and four workers importing torch.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::wheel::from_env;

/// The one fenced block between `<!-- quick start NAME: begin -->` and
/// `<!-- quick start NAME: end -->` of README.md, and its language.
fn readme_block(readme: &str, name: &str) -> (String, String) {
    let begin = format!("<!-- quick start {name}: begin -->\n");
    let end = format!("<!-- quick start {name}: end -->");
    let (_, rest) = readme.split_once(&begin).unwrap_or_else(|| {
        panic!(
            "README.md has no {begin:?}: the quick start's {name} is read from between its markers"
        )
    });
    let (inside, _) = rest
        .split_once(&end)
        .unwrap_or_else(|| panic!("README.md has no {end:?} after {begin:?}"));
    let fenced = inside
        .strip_prefix("```")
        .and_then(|s| s.strip_suffix("```\n"))
        .and_then(|s| s.split_once('\n'))
        .unwrap_or_else(|| {
            panic!("README.md: between the quick start's {name} markers must be one fenced block:\n{inside}")
        });
    (fenced.0.to_owned(), fenced.1.to_owned())
}

/// What `python` says `code` prints.
fn python_says(python: &Path, code: &str) -> String {
    let out = Command::new(python)
        .args(["-c", code])
        .env_remove("PYTHONPATH")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", python.display()));
    assert!(out.status.success(), "{}: {out:?}", python.display());
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The PyTorch venv the quick start's torch comes from, from `testbed/venv`.
fn torch_python() -> PathBuf {
    herd_testbed::venv_python().unwrap_or_else(|e| panic!("testbed/venv could not make the test venv ({e}): run `testbed/venv` by hand (scripts/test-all sets everything up)"))
}

/// Runs `script` with bash in `dir` with `env`, in a process group of its own that is
/// killed whole after `timeout`.
fn run_script(script: &str, dir: &Path, env: &[(&str, String)], timeout: Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("bash");
    cmd.args(["-c", script]).current_dir(dir);
    // The test's own environment, less what would change what the commands do: a venv
    // or PYTHONPATH, another index, an allocation (herd run would use srun), herd's job
    // variables, the user's folders.
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("PIP_")
            || k.starts_with("SLURM_")
            || k.starts_with("HERD_")
            || k.starts_with("XDG_")
            || k.starts_with("PYTHON")
            || k == "VIRTUAL_ENV"
        {
            cmd.env_remove(&key);
        }
    }
    let mut child = cmd
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash runs");
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            panic!("the quick start did not end within {timeout:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// The README's quick start, verbatim, in an empty folder: the venv with the wheel's herd,
/// its `train.py` on 2 simulated nodes × 2 workers, every rank of both nodes finishing as
/// the README shows, herd's lines on stderr, the per-rank logs where it says.
#[test]
fn the_readmes_quick_start_runs_as_written() {
    let started = Instant::now();
    let wheels = from_env("HERD_WHEEL_DIR");
    let arch = std::env::consts::ARCH;
    let wheel = std::fs::read_dir(&wheels)
        .expect("wheel dir")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.ends_with(&format!("manylinux_2_17_{arch}.whl")))
        .unwrap_or_else(|| {
            panic!(
                "no {arch} wheel in {}: build it with scripts/wheel",
                wheels.display()
            )
        });
    let readme =
        std::fs::read_to_string(herd_testbed::repo_root().join("README.md")).expect("README.md");
    let (lang, setup) = readme_block(&readme, "setup");
    assert_eq!(lang, "sh", "the setup block is shell");
    let (lang, train) = readme_block(&readme, "train.py");
    assert_eq!(lang, "python", "train.py is Python");
    let (lang, run) = readme_block(&readme, "run");
    assert_eq!(lang, "sh", "the run block is shell");
    let (_, shown) = readme_block(&readme, "output");

    let torch = torch_python();
    let version = "import sys; print('%d.%d' % sys.version_info[:2])";
    let purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])";
    let torch_lib = python_says(&torch, purelib);

    // The venv the setup block makes, made first to give it torch (see the module doc);
    // the block then makes it again, as a user would, keeping what is in it.
    let venv_dir = setup
        .split_once("-m venv ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("README.md: the quick start's setup makes no venv:\n{setup}"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let project = tmp.path().join("quickstart");
    std::fs::create_dir(&project).expect("project folder");
    let made = Command::new("python3")
        .args(["-m", "venv", venv_dir])
        .current_dir(&project)
        .status()
        .expect("python3 runs (install python3 and python3-venv)");
    assert!(made.success(), "python3 -m venv {venv_dir}");
    let python = project.join(venv_dir).join("bin/python");
    assert_eq!(
        python_says(&python, version),
        python_says(&torch, version),
        "python3 and the PyTorch venv of testbed/venv ({}) must be the same Python for the \
         quick start's venv to use its torch: make that venv with python3 (HERD_PYTHON)",
        torch.display()
    );
    let lib = PathBuf::from(python_says(&python, purelib));
    for entry in std::fs::read_dir(&lib).expect("site-packages").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("setuptools")
            || name.starts_with("pkg_resources")
            || name.starts_with("_distutils_hack")
            || name == "distutils-precedence.pth"
        {
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
    std::fs::write(lib.join("herd-test-torch.pth"), format!("{torch_lib}\n")).expect(".pth");

    std::fs::write(project.join("train.py"), &train).expect("train.py");
    let script = format!("set -e\n{setup}\n{run}");
    let home = tmp.path().display().to_string();
    let out = run_script(
        &script,
        &project,
        &[
            ("PIP_NO_INDEX", "1".into()),
            ("PIP_FIND_LINKS", wheels.display().to_string()),
            ("PIP_DISABLE_PIP_VERSION_CHECK", "1".into()),
            ("HOME", home),
        ],
        Duration::from_secs(300),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "quick start: {:.1} s in all\n--- stdout\n{stdout}--- stderr\n{stderr}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        out.status.success(),
        "the quick start failed ({}); its output is above",
        out.status
    );

    // The wheel was installed into the new venv, and its herd ran the job.
    let version_of = |name: &str| {
        name.split('-')
            .nth(1)
            .expect("a wheel's version")
            .to_owned()
    };
    assert!(
        stdout.contains(&format!(
            "Successfully installed herd-slurm-{}",
            version_of(&wheel)
        )),
        "pip installed the wheel"
    );
    let herd = project.join(venv_dir).join("bin/herd");
    let v = Command::new(&herd).arg("--version").output().expect("herd");
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("herd {}", env!("CARGO_PKG_VERSION"))
    );

    // Every rank of both simulated nodes finished, as the README shows it.
    let done: Vec<String> = (0..4)
        .map(|rank| format!("rank {rank} of 4 on node {} done", rank / 2))
        .collect();
    for line in &done {
        assert!(
            stdout.lines().any(|l| l == line),
            "{line:?} on stdout (a worker's line)"
        );
        assert!(
            shown.lines().any(|l| l == line),
            "README.md's quick start output shows {line:?}"
        );
    }
    for line in [
        "herd: all 4 workers finished",
        "herd: 4 workers on 2 nodes, master 127.0.0.1",
    ] {
        assert!(stderr.lines().any(|l| l == line), "{line:?} on stderr");
        assert!(!stdout.contains(line), "herd's lines are not on stdout");
        assert!(
            shown.lines().any(|l| l == line),
            "README.md's quick start output shows {line:?}"
        );
    }
    assert!(
        stderr.contains(": 2 simulated nodes on this machine, logs in "),
        "{stderr}"
    );

    // The logs where the README says: herd-logs/RUN/attempt-0/rank-R.{out,err,metrics}.
    let runs: Vec<PathBuf> = std::fs::read_dir(project.join("herd-logs"))
        .expect("herd-logs/ in the folder")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(runs.len(), 1, "one run: {runs:?}");
    for (rank, line) in done.iter().enumerate() {
        let attempt = runs[0].join("attempt-0");
        let out = herd_testbed::read_lossy(attempt.join(format!("rank-{rank}.out")));
        assert!(out.contains(line), "rank-{rank}.out: {out}");
        for ext in ["err", "metrics"] {
            let file = attempt.join(format!("rank-{rank}.{ext}"));
            assert!(file.is_file(), "{}", file.display());
        }
    }
}
