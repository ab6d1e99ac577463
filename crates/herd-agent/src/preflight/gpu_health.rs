//! The `gpus` check's health part, once `nvidia-smi -L` lists every GPU SLURM gave the
//! node: none of them has uncorrectable ECC errors or pages waiting to be retired (its
//! memory is failing: the job would die of it, or compute wrong numbers), and no process
//! holds a large share of one's memory before any worker starts (another job's leftover,
//! a zombie of an earlier attempt: the workers would run out of memory). A driver that
//! does not answer these queries (an older one, a GPU without ECC) is not judged by them.

use std::path::Path;
use std::time::Duration;

use herd_exp::gpus::{names_gpu, parse_fields, Sample};

/// A process holding at least this share of a GPU's memory before the workers start
/// fails the check.
pub(super) const HELD_SHARE: f64 = 0.10;

/// The fields asked for the health of each GPU.
const HEALTH: [&str; 5] = [
    "index",
    "uuid",
    "memory.total",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
];

/// A process on a GPU: `--query-compute-apps=gpu_uuid,pid,used_memory`'s line.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct App {
    pub(super) gpu_uuid: String,
    pub(super) pid: String,
    /// MiB.
    pub(super) used: f64,
}

/// The processes in `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory
/// --format=csv,noheader,nounits`'s output.
pub(super) fn apps(out: &str) -> Vec<App> {
    out.lines()
        .filter_map(|l| {
            let v: Vec<&str> = l.split(',').map(str::trim).collect();
            let [uuid, pid, used] = v.as_slice() else {
                return None;
            };
            Some(App {
                gpu_uuid: (*uuid).to_owned(),
                pid: (*pid).to_owned(),
                used: used.parse().ok()?,
            })
        })
        .collect()
}

/// The health rows of `nvidia-smi --query-gpu=<HEALTH> --format=csv,noheader,nounits`.
pub(super) fn rows(out: &str) -> Vec<Sample> {
    out.lines()
        .filter_map(|l| parse_fields(&HEALTH, l, 0))
        .collect()
}

/// Whether row `s` is one of the job's GPUs `gpus` (`CUDA_VISIBLE_DEVICES`' entries): by
/// index, or UUID or its prefix, as CUDA takes them.
fn is_ours(s: &Sample, gpus: &[String]) -> bool {
    gpus.iter()
        .any(|id| names_gpu(id, Some(s.gpu), Some(&s.uuid)) == Some(true))
}

/// What is wrong with the job's GPUs `gpus`, judged on the driver's `rows` and `apps`:
/// the first finding's words, or `None`. When no row is named by `gpus` (a cgroup numbers
/// the job's GPUs from 0 where the driver does not), every row is judged.
pub(super) fn judge(gpus: &[String], rows: &[Sample], apps: &[App]) -> Option<String> {
    let ours: Vec<&Sample> = {
        let named: Vec<&Sample> = rows.iter().filter(|s| is_ours(s, gpus)).collect();
        if named.is_empty() {
            rows.iter().collect()
        } else {
            named
        }
    };
    let leave = "leave the node out (`--exclude` it) and tell its admins";
    for s in &ours {
        if let Some(n) = s.ecc_uncorrected.filter(|&n| n > 0) {
            return Some(format!(
                "GPU {} ({}) has {n} uncorrectable ECC error{} since its driver loaded: its memory is failing, and a job on it dies or computes wrong numbers; {leave}",
                s.gpu,
                s.uuid,
                if n == 1 { "" } else { "s" }
            ));
        }
        if s.retired_pending == Some(true) {
            return Some(format!(
                "GPU {} ({}) has memory pages waiting to be retired: its memory is not to be trusted until the node is rebooted; {leave}",
                s.gpu, s.uuid
            ));
        }
    }
    for s in &ours {
        let Some(total) = s.mem_total.filter(|t| *t > 0.0) else {
            continue;
        };
        if let Some(app) = apps
            .iter()
            .find(|a| a.gpu_uuid == s.uuid && a.used >= HELD_SHARE * total)
        {
            return Some(format!(
                "GPU {} ({}): process {} holds {:.1} of its {:.1} GiB before any worker started (another job's leftover, or a process of an earlier run that never ended): the workers would run out of memory; end that process, or {leave}",
                s.gpu,
                s.uuid,
                app.pid,
                app.used / 1024.0,
                total / 1024.0
            ));
        }
    }
    None
}

/// `smi ARGS`' stdout when it answers in `limit` and succeeds; `None` otherwise.
async fn ask(smi: &Path, args: &[String], limit: Duration) -> Option<String> {
    let run = tokio::process::Command::from(herd_slurm::user_program(smi, &Default::default()))
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, run).await.ok()?.ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The health check of the job's GPUs `gpus` with the node's `smi`: what is wrong, in
/// words, when anything is.
pub(super) async fn check(smi: &Path, gpus: &[String], limit: Duration) -> Result<(), String> {
    let query = [
        format!("--query-gpu={}", HEALTH.join(",")),
        "--format=csv,noheader,nounits".to_owned(),
    ];
    let compute = [
        "--query-compute-apps=gpu_uuid,pid,used_memory".to_owned(),
        "--format=csv,noheader,nounits".to_owned(),
    ];
    let health = ask(smi, &query, limit);
    let held = ask(smi, &compute, limit);
    let (health, held) = tokio::join!(health, held);
    let rows = health.as_deref().map(rows).unwrap_or_default();
    let apps = held.as_deref().map(apps).unwrap_or_default();
    match judge(gpus, &rows, &apps) {
        Some(why) => Err(why),
        None => Ok(()),
    }
}
