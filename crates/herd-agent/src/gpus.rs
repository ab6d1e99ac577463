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

use herd_exp::gpus::{self, Sample};
use herd_exp::layout::AttemptDir;
use herd_slurm::worker::GpuBind;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::config::Config;
use crate::words::say;

/// How often `nvidia-smi` samples (its `-lms`).
pub(crate) const INTERVAL: Duration = Duration::from_secs(2);

/// The sampling of one attempt on this node; dropping it ends `nvidia-smi`.
pub(crate) struct Sampler {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        // The task owns the child, made with kill_on_drop: aborting it kills nvidia-smi.
        self.task.abort();
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
                .find(|(index, uuid)| index.to_string() == *id || uuid == id)
                .map(|(index, _)| *index)
        })
        .collect();
    if by_id.iter().all(Option::is_some) || listed.len() != node_gpus.len() {
        return by_id;
    }
    listed.iter().map(|(index, _)| Some(*index)).collect()
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
/// of the attempt and runs `local` ranks from global rank `first`. `None` when the node
/// was given no GPU, or has no `nvidia-smi` (said once).
pub(crate) fn start(
    cfg: &Config,
    dir: &AttemptDir,
    slot: u32,
    (first, local): (u32, u32),
) -> Option<Sampler> {
    let node_gpus = cfg.launch.node_gpus.clone();
    if node_gpus.is_empty() {
        return None;
    }
    let host = cfg.host().to_owned();
    let Some(smi) = find(std::env::var_os("PATH").as_deref()) else {
        say(format!(
            "{host}: its GPUs are not sampled (nvidia-smi is not on PATH): `herd top` and `herd report` show none"
        ));
        return None;
    };
    let ranks = ranks_of(&node_gpus, cfg.launch.gpu_bind, first, local);
    let path = dir.gpus(slot);
    let task = tokio::spawn(async move {
        if let Err(why) = sample(&smi, &path, &node_gpus, &ranks).await {
            say(format!(
                "{host}: GPU sampling stopped: {why}; the job goes on"
            ));
        }
    });
    Some(Sampler { task })
}

/// Run `smi` and append what it prints to `path` until it ends (or the task is aborted);
/// asked again without a field it refuses. The reason it ended, when it ended.
async fn sample(
    smi: &Path,
    path: &Path,
    node_gpus: &[String],
    ranks: &[Vec<u32>],
) -> Result<(), String> {
    let mut fields: Vec<&str> = gpus::QUERY.to_vec();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
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
        let mut matched: Option<Vec<Option<u32>>> = None;
        let mut batch: Vec<Sample> = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            let t = crate::workers::unix_ms();
            let Some(mut s) = gpus::parse_fields(&fields, &line, t) else {
                if said.len() < 4096 {
                    said.push_str(&line);
                    said.push('\n');
                }
                continue;
            };
            sampled = true;
            // One period's lines come together: a GPU seen again starts the next batch.
            if batch.iter().any(|b| b.gpu == s.gpu) {
                let listed: Vec<(u32, String)> =
                    batch.iter().map(|b| (b.gpu, b.uuid.clone())).collect();
                let matched = matched.get_or_insert_with(|| match_gpus(node_gpus, &listed));
                write_batch(&mut file, std::mem::take(&mut batch), matched, ranks)?;
            }
            s.ranks.clear();
            batch.push(s);
        }
        if !batch.is_empty() {
            let listed: Vec<(u32, String)> =
                batch.iter().map(|b| (b.gpu, b.uuid.clone())).collect();
            let matched = matched.get_or_insert_with(|| match_gpus(node_gpus, &listed));
            write_batch(&mut file, std::mem::take(&mut batch), matched, ranks)?;
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

/// Append one period's samples of the node's GPUs (`matched`: which listed GPU each of the
/// node's GPUs is; `ranks`: whose device each one is) to `file`: only the node's GPUs, each
/// with its ranks.
fn write_batch(
    file: &mut std::fs::File,
    batch: Vec<Sample>,
    matched: &[Option<u32>],
    ranks: &[Vec<u32>],
) -> Result<(), String> {
    let mut text = String::new();
    for mut s in batch {
        let Some(p) = matched.iter().position(|m| *m == Some(s.gpu)) else {
            continue;
        };
        s.ranks = ranks.get(p).cloned().unwrap_or_default();
        text.push_str(&serde_json::to_string(&s).map_err(|e| e.to_string())?);
        text.push('\n');
    }
    file.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write the GPU samples: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn each_rank_takes_the_gpu_of_its_local_rank_or_its_share() {
        let four = ids(&["0", "1", "2", "3"]);
        assert_eq!(
            ranks_of(&four, GpuBind::All, 8, 4),
            vec![vec![8], vec![9], vec![10], vec![11]]
        );
        // Two workers on four GPUs, per rank: each its two.
        assert_eq!(
            ranks_of(&four, GpuBind::PerRank, 0, 2),
            vec![vec![0], vec![0], vec![1], vec![1]]
        );
        // More workers than GPUs with every GPU visible: they share, rank % n.
        assert_eq!(
            ranks_of(&ids(&["0", "1"]), GpuBind::All, 0, 4),
            vec![vec![0, 2], vec![1, 3]]
        );
        assert!(ranks_of(&[], GpuBind::All, 0, 4).is_empty());
    }

    #[test]
    fn the_nodes_gpus_are_found_by_index_uuid_or_in_order() {
        let listed = vec![
            (0, "GPU-a".to_owned()),
            (1, "GPU-b".to_owned()),
            (2, "GPU-c".to_owned()),
            (3, "GPU-d".to_owned()),
        ];
        assert_eq!(
            match_gpus(&ids(&["2", "3"]), &listed),
            vec![Some(2), Some(3)]
        );
        assert_eq!(
            match_gpus(&ids(&["GPU-d", "0"]), &listed),
            vec![Some(3), Some(0)]
        );
        // A cgroup shows only the job's two GPUs, numbered by the node as 4 and 5.
        let cgroup = vec![(4, "GPU-e".to_owned()), (5, "GPU-f".to_owned())];
        assert_eq!(
            match_gpus(&ids(&["0", "1"]), &cgroup),
            vec![Some(4), Some(5)]
        );
        // Nothing to go by: none matched.
        assert_eq!(match_gpus(&ids(&["7"]), &listed), vec![None]);
    }

    #[test]
    fn a_refused_field_is_read_from_nvidia_smis_words() {
        assert_eq!(
            refused_field(
                "Field \"clocks_throttle_reasons.active\" is not a valid field to query.\n"
            )
            .as_deref(),
            Some("clocks_throttle_reasons.active")
        );
        assert_eq!(
            refused_field(
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
            ),
            None
        );
    }

    /// A stand-in `nvidia-smi` that refuses the throttle reasons' old name, then prints two
    /// periods of two GPUs: the sampler asks again with the new name and writes the node's
    /// one GPU (index 1) with its rank, each period.
    #[tokio::test]
    async fn the_sampler_asks_again_without_a_refused_field_and_writes_the_nodes_gpus() {
        let dir = tempfile::tempdir().expect("tempdir");
        let smi = dir.path().join("nvidia-smi");
        std::fs::write(
            &smi,
            r#"#!/bin/sh
case "$1" in *clocks_throttle_reasons*) echo 'Field "clocks_throttle_reasons.active" is not a valid field to query.'; exit 2;; esac
for i in 1 2; do
  echo "0, GPU-a, Stand-in, 10, 100, 1000, 50.0, 300.00, 40, 1000, 0x0000000000000001, 0, No"
  echo "1, GPU-b, Stand-in, 9$i, 900, 1000, 290.0, 300.00, 70, 1400, 0x0000000000000004, 0, No"
done
"#,
        )
        .expect("write");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let out = dir.path().join("node-0.gpus.jsonl");
        let ended = sample(&smi, &out, &ids(&["1"]), &[vec![5]]).await;
        assert!(ended.expect_err("it ends").contains("nvidia-smi ended"));
        let samples = gpus::read(&out).expect("read");
        assert_eq!(samples.len(), 2, "{samples:?}");
        assert!(samples.iter().all(|s| s.gpu == 1 && s.ranks == vec![5]));
        assert_eq!(samples[1].util, Some(92.0));
        assert_eq!(
            samples[0].reasons,
            vec!["sw_power_cap"],
            "asked by its new name"
        );
    }
}
