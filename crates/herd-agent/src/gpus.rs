//! What this node's GPUs are doing while an attempt runs: one `nvidia-smi --query-gpu=…
//! --format=csv,noheader,nounits -lms 2000` for the attempt's life, each line it prints a
//! [`herd_exp::gpus::Sample`] appended to the attempt's `node-N.gpus.jsonl` with the ranks
//! whose device the GPU is.
//!
//! Why `nvidia-smi` and not NVML through `libnvidia-ml.so.1`: it comes with the driver on
//! every NVIDIA GPU node, it needs no foreign function calls (no `unsafe` in herd), one
//! process keeps it loaded between samples (its start, the costly part, is paid once per
//! attempt), and a stand-in on PATH replays recorded samples on a bed without GPUs. Its
//! CSV is documented per field; a driver that does not know a field refuses the whole
//! query, so the field is asked by its other name or left out and the query made again.
//!
//! Only the GPUs SLURM gave the node (`CUDA_VISIBLE_DEVICES`) are sampled. No GPU given:
//! nothing to sample, nothing said. No `nvidia-smi`, or one that fails: one line saying
//! so, and the job goes on.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use herd_exp::gpus::{self, GpuError, Sample};
use herd_exp::layout::AttemptDir;
use herd_slurm::worker::GpuBind;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::config::Config;
use crate::event::Event;
use crate::words::say;

mod watch;
use watch::KernelLog;

/// How often `nvidia-smi` samples (its `-lms`).
pub(crate) const INTERVAL: Duration = Duration::from_secs(2);

/// The sampling of one attempt on this node; dropping it ends `nvidia-smi`.
pub(crate) struct Sampler {
    task: tokio::task::JoinHandle<Vec<GpuError>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Sampler {
    /// End the sampling once the kernel log has been read a last time: the Xid of a GPU
    /// whose fault ended the workers is in it before their exits are seen. The errors of
    /// that last read, for the agent to report with the teardown.
    pub(crate) async fn stop(mut self) -> Vec<GpuError> {
        let _ = self.stop.send(true);
        match tokio::time::timeout(Duration::from_secs(1), &mut self.task).await {
            Ok(Ok(errors)) => errors,
            _ => Vec::new(),
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // The task owns the child, made with kill_on_drop: aborting it kills nvidia-smi.
        self.task.abort();
    }
}

/// How often the kernel log is read for Xid lines while sampling.
const KERNEL_LOG_EVERY: Duration = Duration::from_millis(200);

/// The node's kernel log, where the driver writes its Xid lines.
const KERNEL_LOG: &str = "/dev/kmsg";

/// What the sampler tells its agent: GPU errors of attempt `attempt`, on `tx`.
pub(crate) struct Report {
    pub(crate) attempt: u32,
    pub(crate) tx: tokio::sync::mpsc::UnboundedSender<Event>,
}

impl Report {
    fn error(&self, error: GpuError) {
        let _ = self.tx.send(Event::GpuError {
            attempt: self.attempt,
            error,
        });
    }
}

/// Which ranks use each of the node's GPUs (`node_gpus`, in `CUDA_VISIBLE_DEVICES`'
/// order), the node's local ranks starting at global rank `first`, `local` of them, under
/// `bind`: with every GPU visible, local rank `l` takes `cuda:l` (of `n`: `l % n`), as
/// torchrun-style code does; with `per-rank`, each rank its own share.
pub(crate) fn ranks_of(
    node_gpus: &[String],
    bind: GpuBind,
    first: u32,
    local: u32,
) -> Vec<Vec<u32>> {
    let n = node_gpus.len();
    let mut out = vec![Vec::new(); n];
    if n == 0 {
        return out;
    }
    for l in 0..local {
        let seen = bind.visible(node_gpus, l, local);
        let mine: Vec<&String> = match bind {
            GpuBind::All => seen
                .get(l as usize % seen.len().max(1))
                .into_iter()
                .collect(),
            GpuBind::PerRank => seen.iter().collect(),
        };
        for id in mine {
            if let Some(p) = node_gpus.iter().position(|g| g == id) {
                out[p].push(first + l);
            }
        }
    }
    out
}

/// Which of `nvidia-smi`'s GPUs (`listed`: index and UUID of each) the node's `node_gpus`
/// are, by position in `node_gpus`: an entry names a GPU by index or UUID; where one
/// matches none and the node lists as many GPUs as it was given (a cgroup that numbers
/// them from 0, as SLURM's device constraint does), they are taken in order. `None` for
/// an entry that is no listed GPU.
pub(crate) fn match_gpus(node_gpus: &[String], listed: &[(u32, String)]) -> Vec<Option<u32>> {
    let by_id: Vec<Option<u32>> = node_gpus
        .iter()
        .map(|id| {
            listed
                .iter()
                .find(|(index, uuid)| gpus::names_gpu(id, Some(*index), Some(uuid)) == Some(true))
                .map(|(index, _)| *index)
        })
        .collect();
    if by_id.iter().all(Option::is_some) || listed.len() != node_gpus.len() {
        return by_id;
    }
    listed.iter().map(|(index, _)| Some(*index)).collect()
}

/// Which listed GPU each of the node's GPUs is (by position), and whose device each one is.
type Mapping = (Vec<Option<u32>>, Vec<Vec<u32>>);

/// The GPUs this node's sampler samples, and whose devices they are.
pub(crate) struct Mine {
    /// The node's GPUs as `CUDA_VISIBLE_DEVICES` names them; `None`: every GPU the driver
    /// lists (`herd run` on a machine where it is unset: the workers see them all).
    pub(crate) ids: Option<Vec<String>>,
    /// How the workers see them.
    pub(crate) bind: GpuBind,
    /// The node's first global rank, and how many ranks it runs.
    pub(crate) ranks: (u32, u32),
}

impl Mine {
    /// Which listed GPU each of the node's GPUs is, and whose device each one is, once the
    /// driver has listed its GPUs (`listed`: index and UUID of each).
    fn resolve(&self, listed: &[(u32, String)]) -> Mapping {
        let (first, local) = self.ranks;
        match &self.ids {
            Some(ids) => (
                match_gpus(ids, listed),
                ranks_of(ids, self.bind, first, local),
            ),
            None => {
                let ids: Vec<String> = listed.iter().map(|(i, _)| i.to_string()).collect();
                (
                    listed.iter().map(|(i, _)| Some(*i)).collect(),
                    ranks_of(&ids, GpuBind::All, first, local),
                )
            }
        }
    }
}

/// `field` out of `nvidia-smi`'s refusal of it (`Field "x" is not a valid field to
/// query.`).
fn refused_field(said: &str) -> Option<String> {
    let line = said.lines().find(|l| l.contains("is not a valid field"))?;
    let rest = line.split_once('"')?.1;
    Some(rest.split_once('"')?.0.to_owned())
}

/// `nvidia-smi` on `path`, for the attempt's sampler.
fn find(path: Option<&OsStr>) -> Option<PathBuf> {
    crate::preflight::resolve(OsStr::new("nvidia-smi"), path).ok()
}

/// Start sampling the node's GPUs for attempt folder `dir`, where this node is node `slot`
/// of the attempt and runs `local` ranks from global rank `first`; GPU errors go to
/// `report`. The GPUs SLURM gave the node (`CUDA_VISIBLE_DEVICES`); outside a SLURM job
/// with it unset (`herd run` on a workstation), every GPU the driver lists. `None` when
/// the node was given no GPU in a SLURM job, or has no `nvidia-smi` (said, when it was
/// given GPUs).
pub(crate) fn start(
    cfg: &Config,
    dir: &AttemptDir,
    slot: u32,
    (first, local): (u32, u32),
    report: Report,
) -> Option<Sampler> {
    let node_gpus = cfg.launch.node_gpus.clone();
    let every = node_gpus.is_empty()
        && cfg.launch.job_id.is_none()
        && std::env::var_os("CUDA_VISIBLE_DEVICES").is_none();
    if node_gpus.is_empty() && !every {
        return None;
    }
    let host = cfg.host().to_owned();
    let Some(smi) = find(std::env::var_os("PATH").as_deref()) else {
        if !every {
            say(format!(
                "{host}: its GPUs are not sampled (nvidia-smi is not on PATH): `herd top` and `herd report` show none"
            ));
        }
        return None;
    };
    let mine = Mine {
        ids: (!every).then_some(node_gpus),
        bind: cfg.launch.gpu_bind,
        ranks: (first, local),
    };
    let path = dir.gpus(slot);
    let kernel_log = match KernelLog::open(Path::new(KERNEL_LOG)) {
        Ok(log) => Some(log),
        Err(e) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                say(format!(
                    "{host}: GPU Xid errors are not watched: its kernel log {KERNEL_LOG} cannot be read ({e}; kernel.dmesg_restrict = 1 keeps it from users); uncorrectable ECC errors and lost GPUs are still seen in the samples"
                ));
            }
            None
        }
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(async move {
        let watch = Watch {
            report,
            kernel_log,
            stopped,
        };
        match sample(&smi, &path, &mine, watch).await {
            Ok(last) => last,
            Err(why) => {
                say(format!(
                    "{host}: GPU sampling stopped: {why}; the job goes on"
                ));
                Vec::new()
            }
        }
    });
    Some(Sampler { task, stop })
}

/// What the sampler watches beside the samples: the kernel log, its stop.
struct Watch {
    report: Report,
    kernel_log: Option<KernelLog>,
    stopped: tokio::sync::watch::Receiver<bool>,
}

impl Watch {
    /// The errors of the Xid lines written since the last look, about the node's GPUs
    /// `known`.
    fn read_kernel_log(&mut self, known: &[Sample]) -> Vec<GpuError> {
        let Some(log) = self.kernel_log.as_mut() else {
            return Vec::new();
        };
        let Ok(messages) = log.messages() else {
            self.kernel_log = None;
            return Vec::new();
        };
        let t = crate::workers::unix_ms();
        messages
            .iter()
            .filter_map(|m| watch::xid_error(m, known, t))
            .collect()
    }
}

/// Run `smi` and append what it prints to `path` until it ends or `watch` is stopped,
/// each sample of the node's GPUs (`mine`) with the ranks whose device it is; asked again
/// without a field it refuses. Errors it sees go to the agent as they come; those of the
/// kernel log's last read, when stopped, are returned. Why it ended, when not stopped.
async fn sample(
    smi: &Path,
    path: &Path,
    mine: &Mine,
    mut watch: Watch,
) -> Result<Vec<GpuError>, String> {
    let mut fields: Vec<&str> = gpus::QUERY.to_vec();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // The node's GPUs as last sampled, and as first sampled (the ECC counts to compare).
    let mut known: Vec<Sample> = Vec::new();
    let mut first: Vec<Sample> = Vec::new();
    let mut tick = tokio::time::interval(KERNEL_LOG_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let mut cmd =
            tokio::process::Command::from(herd_slurm::user_program(smi, &Default::default()));
        cmd.arg(format!("--query-gpu={}", fields.join(",")))
            .arg("--format=csv,noheader,nounits")
            .arg(format!("--loop-ms={}", INTERVAL.as_millis()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {} ({e})", smi.display()))?;
        let mut stderr = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let mut said = String::new();
        let mut sampled = false;
        let mut mapping: Option<Mapping> = None;
        let mut batch: Vec<Sample> = Vec::new();
        loop {
            let line = tokio::select! {
                line = lines.next_line() => match line {
                    Ok(Some(line)) => line,
                    _ => break,
                },
                _ = tick.tick() => {
                    for e in watch.read_kernel_log(&known) {
                        watch.report.error(e);
                    }
                    continue;
                }
                _ = watch.stopped.changed() => return Ok(watch.read_kernel_log(&known)),
            };
            let t = crate::workers::unix_ms();
            let Some(s) = gpus::parse_fields(&fields, &line, t) else {
                if let Some(e) = watch::lost_error(&line, &known, t) {
                    watch.report.error(e);
                }
                if said.len() < 4096 {
                    said.push_str(&line);
                    said.push('\n');
                }
                continue;
            };
            sampled = true;
            // One period's lines come together: a GPU seen again starts the next batch.
            if batch.iter().any(|b| b.gpu == s.gpu) {
                let done = std::mem::take(&mut batch);
                let (matched, ranks) = mapping.get_or_insert_with(|| mine.resolve(&listed(&done)));
                let written = write_batch(&mut file, done, matched, ranks)?;
                compare(&mut watch, &mut first, &written);
                known = written;
            }
            batch.push(s);
        }
        if !batch.is_empty() {
            let done = std::mem::take(&mut batch);
            let (matched, ranks) = mapping.get_or_insert_with(|| mine.resolve(&listed(&done)));
            let written = write_batch(&mut file, done, matched, ranks)?;
            compare(&mut watch, &mut first, &written);
            known = written;
        }
        let _ = stderr.read_to_string(&mut said).await;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        if let Some(field) = refused_field(&said).filter(|_| !sampled) {
            let Some(i) = fields.iter().position(|f| *f == field) else {
                return Err(format!("nvidia-smi refused the field {field}"));
            };
            match gpus::other_name(&field) {
                Some(other) => fields[i] = other,
                None => {
                    fields.remove(i);
                }
            }
            continue;
        }
        let first = said
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return Err(format!(
            "nvidia-smi ended ({}: {})",
            crate::exit::exit_of(status),
            first.trim()
        ));
    }
}

/// The index and UUID of each GPU of one period's samples.
fn listed(batch: &[Sample]) -> Vec<(u32, String)> {
    batch.iter().map(|b| (b.gpu, b.uuid.clone())).collect()
}

/// Compare the node's GPUs' newest samples `now` with their first (`first`, filled the
/// first time): an uncorrectable ECC count that grew is an error, said once per count.
fn compare(watch: &mut Watch, first: &mut Vec<Sample>, now: &[Sample]) {
    for s in now {
        match first.iter_mut().find(|f| f.gpu == s.gpu) {
            Some(before) => {
                if let Some(e) = watch::ecc_error(before, s) {
                    watch.report.error(e);
                    *before = s.clone();
                }
            }
            None => first.push(s.clone()),
        }
    }
}

/// Append one period's samples of the node's GPUs (`matched`: which listed GPU each of the
/// node's GPUs is; `ranks`: whose device each one is) to `file`: only the node's GPUs, each
/// with its ranks; those, as written.
fn write_batch(
    file: &mut std::fs::File,
    batch: Vec<Sample>,
    matched: &[Option<u32>],
    ranks: &[Vec<u32>],
) -> Result<Vec<Sample>, String> {
    let mut text = String::new();
    let mut written = Vec::new();
    for mut s in batch {
        let Some(p) = matched.iter().position(|m| *m == Some(s.gpu)) else {
            continue;
        };
        s.ranks = ranks.get(p).cloned().unwrap_or_default();
        text.push_str(&serde_json::to_string(&s).map_err(|e| e.to_string())?);
        text.push('\n');
        written.push(s);
    }
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write the GPU samples: {e}"))?;
    Ok(written)
}

#[cfg(test)]
mod tests;
