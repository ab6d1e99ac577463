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

/// `nvidia-smi --query-gpu=index,uuid,memory.total,ecc.errors.uncorrected.volatile.total,
/// retired_pages.pending --format=csv,noheader,nounits` of a node whose GPU 1 has a
/// double-bit error, and one whose GPU 0 has a page waiting to be retired.
const ECC_ON_1: &str = "0, GPU-aaaa, 81559, 0, No\n1, GPU-bbbb, 81559, 2, No\n";
const PENDING_ON_0: &str = "0, GPU-aaaa, 81559, 0, Yes\n1, GPU-bbbb, 81559, 0, No\n";
const HEALTHY: &str = "0, GPU-aaaa, 81559, 0, No\n1, GPU-bbbb, 81559, 0, No\n";
/// `--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits`: a leftover
/// holding 40 GiB of GPU 1, and a small context on GPU 0.
const APPS: &str = "GPU-bbbb, 4242, 40960\nGPU-aaaa, 777, 512\n";

#[test]
fn an_uncorrectable_ecc_error_or_a_pending_retirement_fails_the_gpus_health() {
    let ids = |s: &str| -> Vec<String> { s.split(',').map(str::to_owned).collect() };
    let rows = gpu_health::rows(ECC_ON_1);
    assert_eq!(rows.len(), 2);
    let why = gpu_health::judge(&ids("0,1"), &rows, &[]).expect("a finding");
    assert!(
        why.starts_with("GPU 1 (GPU-bbbb) has 2 uncorrectable ECC errors")
            && why.contains("--exclude"),
        "{why}"
    );
    // The job was given GPU 0 only: GPU 1's errors are another job's concern.
    assert_eq!(gpu_health::judge(&ids("0"), &rows, &[]), None);
    assert_eq!(gpu_health::judge(&ids("GPU-aaaa"), &rows, &[]), None);
    let why =
        gpu_health::judge(&ids("0,1"), &gpu_health::rows(PENDING_ON_0), &[]).expect("a finding");
    assert!(
        why.contains("GPU 0 (GPU-aaaa) has memory pages waiting to be retired"),
        "{why}"
    );
    assert_eq!(
        gpu_health::judge(&ids("0,1"), &gpu_health::rows(HEALTHY), &[]),
        None
    );
    // A cgroup numbers the job's GPUs 0.. where the driver lists 4 and 5: all are judged.
    let cgroup = gpu_health::rows("4, GPU-eeee, 81559, 1, No\n");
    assert!(gpu_health::judge(&ids("0"), &cgroup, &[]).is_some());
}

#[test]
fn a_process_holding_a_tenth_of_a_gpus_memory_before_the_workers_fails_the_check() {
    let ids = |s: &str| -> Vec<String> { s.split(',').map(str::to_owned).collect() };
    let apps = gpu_health::apps(APPS);
    assert_eq!(apps.len(), 2);
    let rows = gpu_health::rows(HEALTHY);
    let why = gpu_health::judge(&ids("0,1"), &rows, &apps).expect("a finding");
    assert!(
        why.starts_with(
            "GPU 1 (GPU-bbbb): process 4242 holds 40.0 of its 79.6 GiB before any worker started"
        ),
        "{why}"
    );
    // A small context (0.5 GiB of 80) is no leftover to fail on.
    assert_eq!(gpu_health::judge(&ids("0"), &rows, &apps), None);
    assert!(gpu_health::apps("No running processes found\n").is_empty());
}

/// A driver that answers `-L` but none of the health queries (this fake refuses anything
/// else) is not judged on them.
#[tokio::test]
async fn a_driver_without_the_health_fields_is_not_judged_on_them() {
    let dir = tmp();
    let path = fake_smi(dir.path(), H200S, 0);
    let smi = resolve(OsStr::new("nvidia-smi"), Some(&path)).expect("the fake");
    let gpus = vec!["0".to_owned(), "1".to_owned()];
    assert!(gpu_health::check(&smi, &gpus, CHECK_TIMEOUT).await.is_ok());
}
