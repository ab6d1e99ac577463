//! The `herd` Python module's own unit tests (`python/tests`): the standard-library ones
//! (the stop handler and its chaining, `save_atomic`, the variables, heartbeat and log
//! lines) with the machine's `python3`, and the ones beside PyTorch Lightning's real signal
//! handlers with the venv's python that `testbed/venv` prints (Lightning pinned there).
//! Its use by real training code under real jobs is in the e2e tests
//! (`e2e/frameworks_stop.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `python -m unittest discover -v -s python/tests -p PATTERN`; asserts that it
/// passed and ran at least `at_least` tests.
fn unittest(python: &Path, pattern: &str, at_least: u32) {
    let out = Command::new(python)
        .args(["-m", "unittest", "discover", "-v"])
        .args(["-s", "python/tests", "-p", pattern])
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} (install python3: the herd module's tests need it): {e}",
                python.display()
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    let ran = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(ran >= at_least, "the module's tests ran ({ran}):\n{text}");
}

#[test]
fn the_python_modules_unit_tests_pass() {
    unittest(Path::new("python3"), "test*.py", 20);
}

/// The venv with the pinned frameworks, from `testbed/venv`. Never skipped: without it the
/// test fails, saying how to make it.
fn frameworks_python() -> PathBuf {
    herd_testbed::venv_python().unwrap_or_else(|e| panic!("testbed/venv could not make the test venv ({e}): run `testbed/venv` by hand (scripts/test-all sets everything up)"))
}

#[test]
fn herds_stop_handler_and_lightnings_real_signal_handlers_work_together() {
    unittest(&frameworks_python(), "lightning_*.py", 5);
}

/// The version has one source, the workspace's `Cargo.toml` (the wheel's comes from it
/// through maturin); the module's `__version__` is a copy this keeps equal.
#[test]
fn the_python_modules_version_is_the_workspaces() {
    let out = Command::new("python3")
        .args(["-c", "import herd; print(herd.__version__)"])
        .current_dir(repo_root().join("python"))
        .env_remove("PYTHONPATH")
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        env!("CARGO_PKG_VERSION"),
        "python/herd/__init__.py's __version__ must be Cargo.toml's workspace version"
    );
}
