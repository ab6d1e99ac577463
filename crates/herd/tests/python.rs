//! The `herd` Python module's own unit tests (`python/tests`, standard library only), run
//! with the machine's `python3`: the stop handler, `save_atomic`, the variables, heartbeat
//! and log lines. Its use by real training code under real jobs is in the e2e tests
//! (`e2e/frameworks_stop.rs`).

use std::path::Path;
use std::process::Command;

#[test]
fn the_python_modules_unit_tests_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-v", "-s", "python/tests"])
        .current_dir(&root)
        .output()
        .expect("python3 runs (install python3: the herd module's tests need it)");
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
    assert!(ran >= 10, "the module's tests ran ({ran}):\n{text}");
}
