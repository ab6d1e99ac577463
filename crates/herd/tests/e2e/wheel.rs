//! The pip wheel (issue #16): the herd that `pip install herd-slurm` puts in a venv needs no
//! glibc newer than 2.17, and a job submitted with it runs on the bed with that same binary
//! on every node. `scripts/test-all` builds the wheels (`scripts/wheel`), installs the
//! x86_64 one into a fresh venv and names it in `HERD_WHEEL_HERD` (the venv's `bin/herd`)
//! and `HERD_WHEEL_DIR` (where the wheels are).

use std::path::{Path, PathBuf};
use std::process::Command;

use herd_testbed::Bed;

use crate::support::{job_id, wait_ok, waiter_project};

pub(crate) fn from_env(var: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!(
            "{var} is not set: scripts/test-all builds the wheels (scripts/wheel), installs \
             one into a fresh venv and sets it"
        )
    });
    assert!(path.exists(), "{var}={} does not exist", path.display());
    path
}

/// The newest `GLIBC_x.y` version the ELF file's dynamic symbols ask for.
fn newest_glibc(bin: &Path) -> (u32, u32) {
    let out = Command::new("readelf")
        .args(["-W", "--dyn-syms"])
        .arg(bin)
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let versions: Vec<(u32, u32)> = text
        .split("GLIBC_")
        .skip(1)
        .filter_map(|rest| {
            let v: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .collect();
    assert!(!versions.is_empty(), "{}: no glibc symbols", bin.display());
    versions.into_iter().max().expect("some")
}

fn unpacked_binary(wheel: &Path, into: &Path) -> PathBuf {
    let st = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(wheel)
        .arg(into)
        .status()
        .expect("python3 unzips");
    assert!(st.success());
    let data = std::fs::read_dir(into)
        .expect("unpacked")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".data"))
        .expect("a .data folder in the wheel");
    data.join("scripts/herd")
}

/// The installed wheel's herd: its version, its glibc floor (2.17), and a 2-node job
/// submitted with it from a project folder whose batch script and agents use it by its
/// absolute path, so no node picks up another herd.
#[test]
fn the_wheels_herd_needs_glibc_2_17_at_most_and_runs_a_job_with_itself() {
    let herd = from_env("HERD_WHEEL_HERD");
    let out = Command::new(&herd).arg("--version").output().expect("runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("herd {}", env!("CARGO_PKG_VERSION"))
    );
    let newest = newest_glibc(&herd);
    assert!(
        newest <= (2, 17),
        "the wheel's herd needs GLIBC_{}.{}",
        newest.0,
        newest.1
    );

    let bed = Bed::require();
    let (project, exps) = waiter_project(&bed, "wheel_job");
    let venv_bin = bed.python().parent().expect("venv bin").to_path_buf();
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let root = exps.display().to_string();
    let out = Command::new(&herd)
        .args(["submit", "-J", "from-wheel", "--nodes", "2", "--time", "5"])
        .args([
            "--exp-root",
            &root,
            "--",
            "python",
            "waiter.py",
            "--lines",
            "2",
        ])
        .env("PATH", path)
        .current_dir(&project)
        .output()
        .expect("herd submit runs");
    let job = job_id(&out);
    let exp = exps.join("from-wheel");
    wait_ok(&bed, job, &exp);
    let script = std::fs::read_to_string(exp.join("job.sbatch")).expect("job.sbatch");
    let quoted = format!("'{}' launch", herd.display());
    assert!(
        script.contains(&quoted),
        "the batch script starts the agents with the wheel's herd ({quoted}):\n{script}"
    );
    assert!(!script.contains(env!("CARGO_BIN_EXE_herd")), "{script}");
    let log = herd_testbed::read_lossy(exp.join("logs/attempt-0/rank-1.out"));
    assert!(log.contains("rank 1 attempt 0 line 1"), "{log}");
}

/// The aarch64 wheel is built (it cannot run here): an AArch64 binary with the same glibc
/// floor.
#[test]
fn the_aarch64_wheel_holds_an_arm_binary_for_glibc_2_17() {
    let dir = from_env("HERD_WHEEL_DIR");
    let wheel = std::fs::read_dir(&dir)
        .expect("wheel dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with("manylinux_2_17_aarch64.whl"))
        .unwrap_or_else(|| panic!("no aarch64 wheel in {}", dir.display()));
    let tmp = tempfile::tempdir().expect("tempdir");
    let bin = unpacked_binary(&wheel, tmp.path());
    let header = Command::new("readelf")
        .arg("-h")
        .arg(&bin)
        .output()
        .expect("readelf");
    let text = String::from_utf8_lossy(&header.stdout);
    assert!(text.contains("AArch64"), "{text}");
    let newest = newest_glibc(&bin);
    assert!(newest <= (2, 17), "GLIBC_{}.{}", newest.0, newest.1);
}

/// The same wheel puts the `herd` Python module into the venv: `import herd` there gives
/// the module of this checkout, outside a job a no-op (no stop, nothing to resume from).
#[test]
fn the_wheel_installs_the_herd_python_module() {
    let herd = from_env("HERD_WHEEL_HERD");
    let python = herd.parent().expect("venv bin").join("python");
    let out = Command::new(&python)
        .args([
            "-c",
            "import herd; print(herd.__file__); print(herd.stop_requested(), herd.resume_from())",
        ])
        .env_remove("PYTHONPATH")
        .current_dir(std::env::temp_dir())
        .output()
        .expect("the wheel venv's python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    let file = PathBuf::from(lines.next().expect("herd.__file__"));
    assert!(
        file.starts_with(herd.parent().and_then(Path::parent).expect("venv")),
        "imported from the venv: {}",
        file.display()
    );
    assert_eq!(lines.next(), Some("False None"), "{text}");
    for name in ["__init__.py", "lightning.py", "transformers.py", "py.typed"] {
        let installed = std::fs::read_to_string(file.with_file_name(name)).expect(name);
        let ours =
            std::fs::read_to_string(herd_testbed::repo_root().join("python/herd").join(name))
                .expect(name);
        assert_eq!(installed, ours, "{name} in the wheel is this checkout's");
    }
}
