//! A likely cause and its fix for the common failures: a fixed table of texts torch, CUDA,
//! NCCL, gloo and Python print, matched in order against what the failing rank left (its
//! error file's exception and traceback, then its stderr tail). The first entry with a
//! match wins; a failure no entry matches gets no guess. docs/launch.md lists the table
//! ("Likely causes"), and a test keeps it equal to [`HINTS`].

use super::error_file::WorkerError;

/// One recognised failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hint {
    /// A stable name (`cuda-out-of-memory`), for tests and the docs.
    pub name: &'static str,
    /// Texts any of which, found as they are (case matters), make the match.
    pub texts: &'static [&'static str],
    /// Matches only when the worker was aborted (SIGABRT, or exit code 134 from a shell
    /// that ran it) and wrote no error file: the text also shows up beside other failures.
    pub aborted_only: bool,
    /// The likely cause, in words.
    pub cause: &'static str,
    /// What to change.
    pub fix: &'static str,
}

/// The table, in the order it is tried. Collective timeouts come before the abort at exit:
/// NCCL's watchdog also ends the process with SIGABRT.
pub const HINTS: &[Hint] = &[
    Hint {
        name: "cuda-out-of-memory",
        texts: &["CUDA out of memory", "torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"],
        aborted_only: false,
        cause: "the GPU ran out of memory",
        fix: "use a smaller per-GPU batch (keep the global batch with gradient accumulation), activation checkpointing, mixed precision or sharding (FSDP, ZeRO); when the message says much memory is reserved but unallocated, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    },
    Hint {
        name: "invalid-device-ordinal",
        texts: &["invalid device ordinal"],
        aborted_only: false,
        cause: "the worker asked for a GPU it does not see (`cuda:N` with N at least the number of GPUs in its CUDA_VISIBLE_DEVICES)",
        fix: "with `--gpu-bind per-rank` each worker sees only its own GPU, so `cuda:LOCAL_RANK` fails on every local rank but 0: use `cuda:0` there, or `--gpu-bind all` (the default) for code that picks `cuda:LOCAL_RANK`; and ask for no more workers per node than the node has GPUs (docs/frameworks.md, \"Which GPUs a worker sees\")",
    },
    Hint {
        name: "collective-timeout",
        texts: &[
            "Watchdog caught collective operation timeout",
            "ms for recv operation to complete",
            "ms for send operation to complete",
        ],
        aborted_only: false,
        cause: "a collective (all-reduce, broadcast, …) waited past the process group's timeout: some rank never joined it, because it hung, died, or took another path (uneven data: one rank ran out of batches first; a collective inside a branch only some ranks take)",
        fix: "read the other ranks' last lines (`herd logs NAME`); run with `--hang-timeout SECONDS` (below the process group's timeout, 10 min by default) so herd names the rank that went silent first and dumps every rank's Python stack (`--on-hang restart` restarts instead of failing); give every rank the same number of steps (DistributedSampler with `drop_last=True`, or torch's `Join`)",
    },
    Hint {
        name: "port-in-use",
        texts: &[
            "EADDRINUSE",
            "Address already in use",
            "address already in use",
            "The server socket has failed to listen",
            "The server socket has failed to bind",
        ],
        aborted_only: false,
        cause: "rank 0 could not listen on MASTER_PORT: another process on the master's node holds that port (a port fixed in the code or its config, or another job's)",
        fix: "leave MASTER_PORT to herd (remove a fixed port from the code and its launcher settings); in agent mode (the default) the leader claims a free port for every attempt; in srun and torchrun mode the batch script picks it from the job id, skipping ports busy when the script starts, so submit again (a new job id, another port) or use agent mode",
    },
    Hint {
        name: "master-unreachable",
        texts: &[
            "Connection refused",
            "connect() failed",
            "The client socket has failed to connect",
            "The client socket has timed out after",
        ],
        aborted_only: false,
        cause: "this rank could not reach the master (MASTER_ADDR:MASTER_PORT, where rank 0 serves the process group's store)",
        fix: "when rank 0 failed or started late its own lines say why (`herd logs NAME --rank 0`); otherwise that port is not reachable from this node: allow TCP between the compute nodes on the job's ports (firewall), and make node 0's host name resolve to the interface the nodes share (herd's MASTER_ADDR is node 0's address as the other nodes reach it; GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME pick the interface of the collectives)",
    },
    Hint {
        name: "module-not-found",
        texts: &["ModuleNotFoundError: No module named", "ImportError: No module named"],
        aborted_only: false,
        cause: "the Python that ran on the compute node lacks the package: it is not the environment where the package is installed",
        fix: "name the environment's python by its path in the command (`-- /path/venv/bin/python train.py`), or activate the environment before submitting (sbatch passes your environment on); the environment must be on a file system the compute nodes share",
    },
    Hint {
        name: "disk-full",
        texts: &[
            "No space left on device",
            "Disk quota exceeded",
            "unexpected pos",
        ],
        aborted_only: false,
        cause: "a file system the job writes to is full, or your quota on it is used up (torch.save says `unexpected pos` then)",
        fix: "free space there (`df -h PATH`, `quota`) or write elsewhere: checkpoints go to HERD_CHECKPOINT_DIR, the experiment's checkpoints/ folder, and logs to its logs/ folder, so put the experiment root on a larger file system (`--exp-root`, `exp_root`) or delete old checkpoints",
    },
    Hint {
        name: "process-group-not-destroyed",
        texts: &[
            "destroy_process_group() was not called",
            "process group has NOT been destroyed",
            "terminate called without an active exception",
            "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        ],
        aborted_only: true,
        cause: "the worker aborted at exit while its process group's threads (gloo, NCCL) were still running: the process group was not destroyed before the interpreter's teardown",
        fix: "end the script with `dist.barrier()` and `torch.distributed.destroy_process_group()` (HF Accelerate: `accelerator.end_training()`); if it still aborts, flush stdout and stderr and leave with `os._exit(0)` (docs/launch.md, \"A rank that aborts at exit\")",
    },
];

impl Hint {
    /// The one line the report prints after `likely cause: `.
    pub fn line(&self) -> String {
        format!("{} — fix: {}", self.cause, self.fix)
    }
}

/// The first entry of [`HINTS`] that what the worker left matches: its error file's
/// message and traceback, then its stderr tail. `aborted`: the worker died of SIGABRT (or
/// exited 134, a shell's word for it).
pub fn find(
    aborted: bool,
    error: Option<&WorkerError>,
    stderr_tail: &[String],
) -> Option<&'static Hint> {
    let mut texts: Vec<&str> = Vec::new();
    if let Some(e) = error {
        texts.push(&e.message);
        texts.extend(e.traceback.as_deref());
    }
    texts.extend(stderr_tail.iter().map(String::as_str));
    HINTS.iter().find(|h| {
        (!h.aborted_only || (aborted && error.is_none()))
            && texts.iter().any(|t| h.texts.iter().any(|p| t.contains(p)))
    })
}

#[cfg(test)]
mod tests;
