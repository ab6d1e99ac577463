//! The GPU checks: `nvidia-smi`'s lines against SLURM's count (a fake `nvidia-smi`), and
//! the container check's CUDA probe with the bed's stand-in driver library.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

use super::*;

/// A fake `nvidia-smi` in `dir` that prints `out` and exits with `code`; PATH of `dir`.
fn fake_smi(dir: &Path, out: &str, code: i32) -> OsString {
    executable_file(
        &dir.join("nvidia-smi"),
        &format!("#!/bin/sh\n[ \"$1\" = -L ] || exit 64\ncat <<'EOF'\n{out}EOF\nexit {code}\n"),
    );
    dir.as_os_str().to_owned()
}

const H200S: &str = "GPU 0: NVIDIA H200 (UUID: GPU-3f2a9c1e-0b1d-4c55-9a8e-1f0e2d3c4b5a)\n\
GPU 1: NVIDIA H200 (UUID: GPU-7d6c5b4a-3928-4716-8a5b-6c7d8e9f0a1b)\n";

#[test]
fn nvidia_smi_lines_are_read() {
    let mig = "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5b2b4a-0000-1111-2222-333344445555)\n  \
MIG 1g.5gb      Device  0: (UUID: MIG-c7384736-a75d-5afc-978f-d2f1294409fd)\n";
    assert_eq!(
        listed(mig),
        vec![
            Listed {
                index: Some("0".into()),
                uuid: Some("GPU-5d5b2b4a-0000-1111-2222-333344445555".into())
            },
            Listed {
                index: None,
                uuid: Some("MIG-c7384736-a75d-5afc-978f-d2f1294409fd".into())
            },
        ]
    );
    let devices = listed(mig);
    assert!(is_listed("0", &devices));
    assert!(!is_listed("1", &devices));
    assert!(is_listed("MIG-c7384736", &devices));
    assert!(is_listed(
        "GPU-5d5b2b4a-0000-1111-2222-333344445555",
        &devices
    ));
    assert!(!is_listed("GPU-ffff", &devices));
    assert!(listed("No devices were found\n").is_empty());
}

#[tokio::test]
async fn gpus_are_checked_against_slurm_and_nvidia_smi() {
    let dir = tmp();
    let ids = |s: &str| -> Vec<String> { s.split(',').map(str::to_owned).collect() };
    // No GPU asked for: nothing is run (this nvidia-smi would fail).
    let failing = dir.path().join("failing");
    std::fs::create_dir_all(&failing).expect("mkdir");
    let failing = fake_smi(&failing, "", 9);
    check_gpus(&[], None, Some(&failing))
        .await
        .expect("no gpus");
    check_gpus(&[], Some(0), Some(&failing))
        .await
        .expect("gres 0");

    // SLURM's count against CUDA_VISIBLE_DEVICES.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let f = finding(
        check_gpus(&ids("0"), Some(2), Some(empty.as_os_str())).await,
        "gres 2, one visible",
    );
    assert_eq!(f.check, "gpus");
    assert!(
        f.detail
            .starts_with("SLURM gave this node 2 GPUs (SLURM_GPUS_ON_NODE=2) but CUDA_VISIBLE_DEVICES=0 names 1 GPU:"),
        "{f}"
    );
    let f = finding(
        check_gpus(&[], Some(4), Some(empty.as_os_str())).await,
        "gres 4, none visible",
    );
    assert!(
        f.detail.contains("but CUDA_VISIBLE_DEVICES names none"),
        "{f}"
    );
    // Without nvidia-smi, a consistent count is all there is to check.
    check_gpus(&ids("0,1"), Some(2), Some(empty.as_os_str()))
        .await
        .expect("no nvidia-smi");

    let good = dir.path().join("good");
    std::fs::create_dir_all(&good).expect("mkdir");
    let good = fake_smi(&good, H200S, 0);
    check_gpus(&ids("0,1"), Some(2), Some(&good))
        .await
        .expect("both listed");
    check_gpus(&ids("1"), None, Some(&good))
        .await
        .expect("one listed");
    check_gpus(&ids("GPU-7d6c5b4a"), None, Some(&good))
        .await
        .expect("a UUID prefix");
    let f = finding(
        check_gpus(&ids("0,3"), None, Some(&good)).await,
        "GPU 3 missing",
    );
    assert_eq!(f.check, "gpus");
    assert!(
        f.detail.starts_with(
            "CUDA_VISIBLE_DEVICES=0,3, but `nvidia-smi -L` does not list GPU 3 on this node (it lists 0, 1):"
        ),
        "{f}"
    );

    let f = finding(
        check_gpus(&ids("0"), None, Some(&failing)).await,
        "nvidia-smi fails",
    );
    assert!(
        f.detail
            .contains("-L` failed on this node (exited with code 9"),
        "{f}"
    );
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).expect("mkdir");
    let broken = fake_smi(
        &broken,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
        9,
    );
    let f = finding(
        check_gpus(&ids("0"), None, Some(&broken)).await,
        "no driver",
    );
    assert!(
        f.detail.contains("(exited with code 9: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
        "{f}"
    );
}

/// What the container check's CUDA probe prints when run by the `python3` on PATH with
/// `CUDA_VISIBLE_DEVICES=visible` and `LD_LIBRARY_PATH=lib_path` (the bed's stand-in for
/// NVIDIA's driver library, or a folder without one), on the node `node`.
fn cuda_probe(lib_path: &Path, visible: &str, node: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", container::CUDA_COUNT])
        .env("LD_LIBRARY_PATH", lib_path)
        .env("CUDA_VISIBLE_DEVICES", visible)
        .env("SLURMD_NODENAME", node)
        .env("HERD_FAKE_CUDA_SHORT", "short-node")
        .output()
        .unwrap_or_else(|e| panic!("these tests need python3 on PATH: {e}"));
    assert!(out.status.success(), "the probe never fails: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout:?}");
    stdout
        .strip_prefix("gpus\t")
        .unwrap_or_else(|| panic!("a gpus line: {stdout:?}"))
        .trim_end()
        .to_owned()
}

#[test]
fn the_cuda_probe_counts_what_cuda_sees_with_the_workers_devices() {
    let dir = tmp();
    let lib = herd_testbed::fake_libcuda(&dir.path().join("lib")).expect("cc builds the stand-in");
    // Four devices inside: the two given are seen; CUDA stops at the first it lacks.
    assert_eq!(cuda_probe(&lib, "0,1", "node-a"), "2");
    assert_eq!(cuda_probe(&lib, "2,7,1", "node-a"), "1");
    // A runtime that put one GPU in.
    assert_eq!(cuda_probe(&lib, "0,1", "short-node"), "1");
    assert_eq!(
        cuda_probe(&lib, "1", "short-node"),
        "error\t100\tCUDA_ERROR_NO_DEVICE"
    );
    // No driver library at all.
    let said = cuda_probe(&dir.path().join("empty"), "0,1", "node-a");
    assert!(
        said.starts_with("nolib\t") && said.contains("libcuda.so.1"),
        "{said}"
    );
}

#[test]
fn gpus_missing_inside_an_image_name_the_count_and_each_runtimes_fix() {
    use herd_container::Runtime;
    let given = ["0".to_owned(), "1".to_owned()];
    let image = "/images/pt";
    let inside = |said: &str, rt: Runtime| container::gpus_inside(said, &given, rt, image);
    assert_eq!(inside("2", Runtime::Charliecloud), Ok(()));
    let short = inside("1", Runtime::Charliecloud).expect_err("one of two");
    assert!(
        short.starts_with("inside the image /images/pt CUDA sees 1 of the 2 GPUs SLURM gave this node (CUDA_VISIBLE_DEVICES=0,1): ")
            && short.contains("this node shows fewer GPUs than SLURM gave: check its /dev/nvidia*"),
        "{short}"
    );
    let nolib_ch = inside(
        "nolib\tlibcuda.so.1: cannot open shared object file",
        Runtime::Charliecloud,
    )
    .expect_err("no library");
    assert!(
        nolib_ch.contains("`ch-fromhost --nvidia /images/pt`"),
        "{nolib_ch}"
    );
    let none = inside("error\t100\tCUDA_ERROR_NO_DEVICE", Runtime::Podman).expect_err("none");
    assert!(
        none.contains("CUDA sees 0 of the 2 GPUs")
            && none.contains("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"),
        "{none}"
    );
    let nolib = inside(
        "nolib\tlibcuda.so.1: cannot open shared object file: No such file or directory",
        Runtime::Apptainer,
    )
    .expect_err("no library");
    assert!(
        nolib.starts_with("the image /images/pt has no NVIDIA driver library (libcuda.so.1: cannot open shared object file: No such file or directory), so its workers would see none of the 2 GPUs")
            && nolib.contains("--nv")
            && nolib.contains("nvliblist.conf"),
        "{nolib}"
    );
    let compat = inside(
        "error\t804\tCUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        Runtime::Pyxis,
    )
    .expect_err("a mismatched driver");
    assert!(
        compat.contains("(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, error 804)")
            && compat.contains("does not match this node's driver")
            && compat.contains("NVIDIA_VISIBLE_DEVICES"),
        "{compat}"
    );
    // What the probe cannot say is not a finding.
    assert_eq!(inside("", Runtime::Charliecloud), Ok(()));
}
