//! The batch script: `#SBATCH` lines for the plan, then a body that runs the code snapshot
//! and starts the workers in the plan's launch mode (docs/design.md §2).
//!
//! Nothing a user wrote is ever re-parsed by a shell: the command, its arguments and every
//! path in the body are single-quoted words ([`crate::quote()`]); values in `#SBATCH` lines are
//! checked to be safe there (no whitespace, quotes, `#`, backslash or line breaks; paths are
//! double-quoted with `%` doubled, since sbatch reads `%j`-style patterns in them).
//!
//! The rendered script is `set -euo pipefail`, exports `HERD_EXP_DIR` and
//! `HERD_CHECKPOINT_DIR`, `cd`s into the code snapshot (made by `herd submit` with the
//! experiment folder; every path inside it comes from `herd_exp::layout`), and `exec`s
//! srun, so the job's exit
//! status is srun's and a `B:` signal (sent to the batch shell) reaches srun, which
//! forwards it to every task.
//!
//! `--cpus-per-task` is the plan's SLURM count per task, as given or made from
//! `cpus_per_worker` (× the workers per node in agent and torchrun mode; [`crate::cpus`]).
//! `srun` is given it again: since SLURM 22.05 srun no longer inherits it from the batch
//! job, and an agent confined to one CPU would squeeze all its workers there.

use std::path::Path;

use herd_exp::layout::{ExperimentDir, LogsDir, Stream};
use herd_exp::nodes::is_node_name;
use herd_slurm::worker::vars::{
    HERD_CHECKPOINT_DIR, HERD_EXP_DIR, HERD_JOB_SECRET, HERD_RESUME_FROM,
};

use crate::avoid;
use crate::launch::GpuBindArg;
use crate::names::{job_name_ok, sbatch_arg, sbatch_safe, simple_name_ok};
use crate::plan::{Mode, Plan};
use crate::quote::{quote, quote_if_needed, quote_words};
use crate::torchrun;

/// Where the script runs and what it needs to know beyond the plan.
#[derive(Debug, Clone, Copy)]
pub struct ScriptParams<'a> {
    /// The experiment folder (absolute). The job runs from its code snapshot and SLURM
    /// writes the batch step's output into its logs folder (`herd_exp::layout`); SLURM does
    /// not create folders, so the logs folder must exist before `sbatch`.
    pub exp_dir: &'a Path,
    /// The herd binary as the compute nodes see it (absolute).
    pub herd: &'a Path,
    /// `--dependency`, already resolved from `after` (e.g. `afterok:1234`).
    pub dependency: Option<&'a str>,
}

/// Why a plan cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A path that must be absolute is not.
    #[error("the {what} `{path}` is not an absolute path: the batch script runs elsewhere")]
    RelativePath {
        /// Which path (`experiment folder`, `herd binary`).
        what: &'static str,
        /// The path.
        path: String,
    },
    /// A path that cannot be written into the script.
    #[error("the {what} `{path}` {why}")]
    BadPath {
        /// Which path.
        what: &'static str,
        /// The path, lossily.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A plan value that cannot be written into the script.
    #[error("`{key}`: {message}")]
    BadValue {
        /// The job-file key.
        key: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn path_str<'p>(path: &'p Path, what: &'static str) -> Result<&'p str, RenderError> {
    let s = path.to_str().ok_or_else(|| RenderError::BadPath {
        what,
        path: path.to_string_lossy().into_owned(),
        why: "is not valid UTF-8".into(),
    })?;
    if !path.is_absolute() {
        return Err(RenderError::RelativePath {
            what,
            path: s.to_owned(),
        });
    }
    if s.contains('\0') {
        return Err(RenderError::BadPath {
            what,
            path: s.escape_debug().to_string(),
            why: "contains a NUL byte".into(),
        });
    }
    Ok(s)
}

/// `path` + `pattern` as a double-quoted `#SBATCH` value: `%` in `path` doubled (so sbatch
/// takes it literally; `pattern` keeps its `%j`); `"`, `\`, `#` and control characters
/// refused (sbatch has no escape for them).
fn sbatch_path(path: &str, pattern: &str, what: &'static str) -> Result<String, RenderError> {
    if let Some(c) = path
        .chars()
        .find(|c| c.is_control() || matches!(c, '"' | '\\' | '#'))
    {
        return Err(RenderError::BadPath {
            what,
            path: path.escape_debug().to_string(),
            why: format!(
                "contains {}, which an #SBATCH line cannot carry: choose another folder",
                match c {
                    '\n' => "a newline".to_owned(),
                    c if c.is_control() => format!("the character U+{:04X}", c as u32),
                    c => format!("`{c}`"),
                }
            ),
        });
    }
    Ok(format!("\"{}{pattern}\"", path.replace('%', "%%")))
}

fn q(word: &str, key: &'static str) -> Result<String, RenderError> {
    quote(word, key).map_err(|e| RenderError::BadValue {
        key,
        message: e.to_string(),
    })
}

fn bad(key: &'static str, message: String) -> RenderError {
    RenderError::BadValue { key, message }
}

/// Render the batch script for `plan`. Pure: the same inputs give the same text.
pub fn render_script(plan: &Plan, params: &ScriptParams<'_>) -> Result<String, RenderError> {
    let exp = path_str(params.exp_dir, "experiment folder")?;
    let herd = path_str(params.herd, "herd binary")?;
    let layout = ExperimentDir::new(exp);
    let snapshot = layout.code();
    let snapshot = path_str(&snapshot, "experiment folder")?;
    let checkpoints = layout.checkpoints();
    let checkpoints = path_str(&checkpoints, "experiment folder")?;
    let logs = layout.logs();
    let logs = path_str(logs.path(), "experiment folder")?;
    // The plan's fields are public: check again what resolution checked.
    if !job_name_ok(&plan.job_name) {
        return Err(bad(
            "job_name",
            format!(
                "`{}` is not a usable job name",
                plan.job_name.escape_debug()
            ),
        ));
    }
    if plan.nodes == 0 || plan.workers_per_node() == 0 {
        return Err(bad(
            "nodes",
            "nodes and workers per node must be at least 1".into(),
        ));
    }
    if plan.command.is_empty() {
        return Err(bad("command", "the command is empty".into()));
    }

    let mut s = String::from("#!/bin/bash\n");
    let mut sbatch = |line: String| {
        s.push_str("#SBATCH ");
        s.push_str(&line);
        s.push('\n');
    };
    sbatch(format!("--job-name={}", plan.job_name));
    sbatch(format!("--nodes={}", plan.alloc_nodes()));
    if plan.spare_nodes > 0 {
        // A node that fails must not end the job: a spare takes its place.
        sbatch("--no-kill".to_owned());
    }
    sbatch(format!("--ntasks-per-node={}", plan.tasks_per_node()));
    if let Some(g) = plan.gpus_per_node {
        match &plan.gpu_type {
            Some(t) if simple_name_ok(t, false) => sbatch(format!("--gres=gpu:{t}:{g}")),
            Some(t) => {
                return Err(bad(
                    "gpu_type",
                    format!("`{}` is not a GPU type", t.escape_debug()),
                ))
            }
            None => sbatch(format!("--gres=gpu:{g}")),
        }
    }
    if let Some(c) = plan.cpus_per_task {
        sbatch(format!("--cpus-per-task={c}"));
    }
    if let Some(m) = plan.mem {
        sbatch(format!("--mem={m}"));
    }
    if let Some(t) = plan.time {
        sbatch(format!("--time={t}"));
    }
    if let Some(p) = &plan.partition {
        if !simple_name_ok(p, true) {
            return Err(bad(
                "partition",
                format!("`{}` is not a partition name", p.escape_debug()),
            ));
        }
        sbatch(format!("--partition={p}"));
    }
    if let Some(c) = &plan.constraint {
        sbatch_safe(c, "constraint").map_err(|e| bad("constraint", e.message))?;
        sbatch(format!("--constraint={c}"));
    }
    for (flag, stream) in [("--output", Stream::Out), ("--error", Stream::Err)] {
        let pattern = format!("/{}", LogsDir::batch_log_pattern(stream));
        sbatch(format!(
            "{flag}={}",
            sbatch_path(logs, &pattern, "experiment folder")?
        ));
    }
    sbatch("--open-mode=append".to_owned());
    if let Some(d) = params.dependency {
        sbatch_safe(d, "dependency").map_err(|e| bad("after", e.message))?;
        sbatch(format!("--dependency={d}"));
    }
    match plan.requeue {
        Some(true) => sbatch("--requeue".to_owned()),
        Some(false) => sbatch("--no-requeue".to_owned()),
        // herd requeues the job itself (time limit, preemption, node failure): SLURM must
        // allow it, whatever the cluster's default.
        None if plan.mode == Mode::Agent && plan.keep.max_requeues > 0 => {
            sbatch("--requeue".to_owned())
        }
        None => {}
    }
    match &plan.signal {
        Some(sig) => sbatch(format!("--signal={sig}")),
        // herd's agents stop the workers before the time limit with their own timer. SLURM
        // is asked for a SIGCONT then (up to a minute early) and, where the site sends the
        // job's signal at preemption, at preemption instead of SIGTERM: SLURM signals every
        // process of the job, and SIGCONT is the one signal none of them can die of (a
        // DataLoader worker would die of SIGUSR1). The agents ask SLURM what it means.
        None if plan.mode == Mode::Agent && !plan.keep.warn_before.is_zero() => {
            sbatch(format!("--signal=CONT@{}", plan.keep.warn_before.whole()));
        }
        None => {}
    }
    for a in &plan.sbatch_args {
        sbatch_arg(a).map_err(|e| bad("sbatch_args", e.message))?;
        // Merged into the one `--exclude` below, which sbatch would otherwise override.
        if !avoid::replaced_by_merge(plan, a) {
            sbatch(a.clone());
        }
    }
    if let Some(nodes) = avoid::merged_exclude(plan) {
        if let Some(n) = plan.avoided_nodes.iter().find(|n| !is_node_name(n)) {
            return Err(bad(
                "avoid_bad_nodes",
                format!("`{}` is not a node name", n.escape_debug()),
            ));
        }
        sbatch_safe(&nodes, "node list").map_err(|e| bad("sbatch_args", e.message))?;
        sbatch(format!("--exclude={nodes}"));
    }

    let nodes = plan.nodes;
    let workers = plan.workers_per_node();
    let cmd = quote_words(&plan.command, "command argument")
        .map_err(|e| bad("command", e.to_string()))?;
    let cpus = plan
        .cpus_per_task
        .map(|c| format!(" --cpus-per-task={c}"))
        .unwrap_or_default();

    // `herd exec`'s flag, from the definition it parses (none at its default).
    let bind: String = GpuBindArg {
        gpu_bind: plan.gpu_bind,
    }
    .to_args()
    .iter()
    .map(|w| format!(" {w}"))
    .collect();
    let herd_q = q(herd, "herd binary")?;
    s.push_str(&format!(
        "\n# Rendered by herd: {nodes} node(s) x {workers} worker(s), mode {}.\n\
         # Every user value below is one single-quoted word: no shell expands it.\n\
         set -euo pipefail\n\
         export {HERD_EXP_DIR}={}\n\
         # Checkpoints go into the experiment folder; every attempt (a restart, a requeue,\n\
         # herd submit --resume) gets the newest complete one as {HERD_RESUME_FROM}.\n\
         export {HERD_CHECKPOINT_DIR}={}\n\
         # Run the code snapshot, so edits to the source after submitting change nothing.\n\
         cd -- {}\n",
        plan.mode,
        q(exp, "experiment folder")?,
        q(checkpoints, "experiment folder")?,
        q(snapshot, "experiment folder")?,
    ));
    match plan.mode {
        Mode::Agent => {
            s.push_str(&format!(
                "# A fresh secret for this job's agents, made here at run time: it is in no file\n\
                 # and on no command line, and only agents of this job can prove they know it.\n\
                 {HERD_JOB_SECRET}=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')\n\
                 export {HERD_JOB_SECRET}\n\
                 # One agent per node; the agents find each other, claim a port and supervise\n\
                 # the workers.\n",
            ));
            // The agent's options come from the one definition `herd launch` parses.
            let options = plan
                .agent_options()
                .to_args()
                .iter()
                .map(|w| quote_if_needed(w, "agent option"))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad("metrics", e.to_string()))?
                .join(" ");
            let k = &plan.keep;
            s.push_str(&format!(
                "# herd stops the workers {} s before the time limit (and on preemption) with\n\
                 # SIG{}, gives them {} s to checkpoint, and requeues the job (at most {} times\n\
                 # per cause); the next attempt resumes from the newest checkpoint.\n",
                k.warn_before, k.stop_signal, k.stop_grace, k.max_requeues
            ));
            if plan.spare_nodes > 0 {
                let all = plan.alloc_nodes();
                s.push_str(&format!(
                    "# The last {} of the {all} nodes stand by as spares. The step survives a node's loss\n\
                     # (--no-kill; no --kill-on-bad-exit): the agents put a spare in its place and end\n\
                     # what is left of it there. herd settle passes signals on to srun and exits 0 when\n\
                     # the job finished although a replaced node's agent was ended.\n\
                     exec {herd_q} settle -- srun --nodes={all} --ntasks={all} --ntasks-per-node=1{cpus} --no-kill --kill-on-bad-exit=0 \\\n  {herd_q} launch {options} --log-dir {} \\\n  -- {cmd}\n",
                    plan.spare_nodes,
                    q(logs, "experiment folder")?,
                ));
            } else {
                s.push_str(&format!(
                    "exec srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1{cpus} --kill-on-bad-exit=1 \\\n  {herd_q} launch {options} --log-dir {} \\\n  -- {cmd}\n",
                    q(logs, "experiment folder")?,
                ));
            }
        }
        Mode::Srun => {
            s.push_str(&master_snippet(&herd_q));
            let total = u64::from(nodes) * u64::from(workers);
            s.push_str(&format!(
                "# One task per GPU; herd exec gives each the rank variables and execs the command.\n\
                 exec srun --nodes={nodes} --ntasks={total} --ntasks-per-node={workers}{cpus} --kill-on-bad-exit=1 \\\n  {herd_q} exec{bind} \\\n  -- {cmd}\n",
            ));
        }
        Mode::Torchrun => {
            s.push_str(&master_snippet(&herd_q));
            let restarts = if plan.max_restarts > 0 {
                format!(" --max_restarts={}", plan.max_restarts)
            } else {
                String::new()
            };
            // The command's own python runs torchrun's module when the program is one, so
            // a venv named by path needs no `torchrun` on PATH (crate::torchrun).
            let (launcher, what) = match torchrun::python_of(&plan.command) {
                Some(python) => (
                    format!("{} -m {}", q(python, "command")?, torchrun::MODULE),
                    "run by the command's python (-m torch.distributed.run is torchrun),\n\
                     # so its environment needs no torchrun on PATH",
                ),
                None => (torchrun::TORCHRUN.to_owned(), "from PATH"),
            };
            s.push_str(&format!(
                "# One torchrun per node, {what}; --no_python runs the command as given.\n\
                 # herd exec --network-only gives each node's torchrun the interface of its route\n\
                 # to the first node for the collectives (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME).\n\
                 exec srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1{cpus} --kill-on-bad-exit=1 \\\n  {herd_q} exec --network-only -- {launcher} --nnodes={nodes} --nproc_per_node={workers} --rdzv_id=\"$SLURM_JOB_ID\" \\\n  --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\"{restarts} --no_python \\\n  {cmd}\n",
            ));
        }
    }
    Ok(s)
}

/// Lowest port the srun and torchrun scripts pick `MASTER_PORT` from.
pub const PORT_BASE: u16 = 20_000;
/// How many ports the srun and torchrun scripts pick `MASTER_PORT` among.
pub const PORT_SPAN: u16 = 20_000;

/// `MASTER_ADDR` and `MASTER_PORT` for srun and torchrun mode.
fn master_snippet(herd_q: &str) -> String {
    format!(
        "# MASTER_ADDR: the first node of the allocation (node 0; this script runs there).\n\
         # The whole list is read and cut here: `| head -n 1` under pipefail fails the job\n\
         # whenever head exits before the writer is done.\n\
         MASTER_ADDR=$({herd_q} hostlist expand -- \"$SLURM_JOB_NODELIST\")\n\
         MASTER_ADDR=${{MASTER_ADDR%%$'\\n'*}}\n\
         if [ -z \"$MASTER_ADDR\" ]; then\n\
         \x20 echo \"herd: no first node in SLURM_JOB_NODELIST=$SLURM_JOB_NODELIST\" >&2\n\
         \x20 exit 1\n\
         fi\n\
         # MASTER_PORT is chosen here, not claimed. It starts from the job id, so jobs that\n\
         # share a node start from different ports (the seeds' fixed 40000 collides), and\n\
         # skips ports something already listens on here. Nothing can hold it for the job:\n\
         # another program may take it before rank 0 binds it, and the other nodes cannot\n\
         # be checked from here. mode = \"agent\" claims its port instead.\n\
         MASTER_PORT=$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))\n\
         for _ in {{1..32}}; do\n\
         \x20 (exec 3<>\"/dev/tcp/127.0.0.1/$MASTER_PORT\") 2>/dev/null || break\n\
         \x20 MASTER_PORT=$(({PORT_BASE} + (MASTER_PORT - {PORT_BASE} + 1) % {PORT_SPAN}))\n\
         done\n\
         export MASTER_ADDR MASTER_PORT\n"
    )
}

#[cfg(test)]
mod tests;
