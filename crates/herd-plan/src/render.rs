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
//! `srun` is given `--cpus-per-task` again: since SLURM 22.05 srun no longer inherits it
//! from the batch job, and an agent confined to one CPU would squeeze all its workers there.

use std::path::Path;

use herd_exp::layout::{ExperimentDir, LogsDir, Stream};
use herd_slurm::worker::vars::{
    HERD_CHECKPOINT_DIR, HERD_EXP_DIR, HERD_JOB_SECRET, HERD_RESUME_FROM,
};

use crate::launch::GpuBindArg;
use crate::names::{job_name_ok, sbatch_arg, sbatch_safe, simple_name_ok};
use crate::plan::{Mode, Plan};
use crate::quote::{quote, quote_if_needed, quote_words};

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
    sbatch(format!("--nodes={}", plan.nodes));
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
        sbatch(a.clone());
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
            s.push_str(&format!(
                "exec srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1{cpus} --kill-on-bad-exit=1 \\\n  {herd_q} launch {options} --log-dir {} \\\n  -- {cmd}\n",
                q(logs, "experiment folder")?,
            ));
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
            s.push_str(&format!(
                "# One torchrun per node; --no_python runs the command as given.\n\
                 exec srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1{cpus} --kill-on-bad-exit=1 \\\n  torchrun --nnodes={nodes} --nproc_per_node={workers} --rdzv_id=\"$SLURM_JOB_ID\" \\\n  --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\"{restarts} --no_python \\\n  {cmd}\n",
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
mod tests {
    use super::*;
    use crate::job::JobFile;
    use crate::keys::JobKeys;
    use crate::resolve::resolve;
    use crate::values::Signal;
    use std::path::PathBuf;

    fn plan(text: &str) -> Plan {
        let job =
            JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"));
        resolve(Some(&job), &JobKeys::default(), &[], "login1").unwrap_or_else(|e| panic!("{e}"))
    }

    fn params() -> ScriptParams<'static> {
        ScriptParams {
            exp_dir: Path::new("/scratch/exp/train"),
            herd: Path::new("/opt/herd/bin/herd"),
            dependency: None,
        }
    }

    fn render(p: &Plan) -> String {
        render_script(p, &params()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn sbatch_lines(script: &str) -> Vec<&str> {
        script
            .lines()
            .filter_map(|l| l.strip_prefix("#SBATCH "))
            .collect()
    }

    #[test]
    fn agent_script() {
        let p = plan(
            "nodes = 2\ngpus_per_node = 4\ncpus_per_task = 32\nmem = \"240GB\"\ntime = \"2-00:00:00\"\npartition = \"gpu\"\nconstraint = \"ib&a100\"\nrequeue = true\nsignal = \"USR1@90\"\nmax_restarts = 2\nsbatch_args = [\"--account=vision\", \"--qos=high\"]\ncommand = [\"python\", \"-u\", \"train.py\", \"--lr\", \"0.1\"]\n",
        );
        let s = render(&p);
        assert!(s.starts_with("#!/bin/bash\n#SBATCH "), "{s}");
        assert_eq!(
            sbatch_lines(&s),
            vec![
                "--job-name=train",
                "--nodes=2",
                "--ntasks-per-node=1",
                "--gres=gpu:4",
                "--cpus-per-task=32",
                "--mem=240G",
                "--time=2-00:00:00",
                "--partition=gpu",
                "--constraint=ib&a100",
                "--output=\"/scratch/exp/train/logs/%j.out\"",
                "--error=\"/scratch/exp/train/logs/%j.err\"",
                "--open-mode=append",
                "--requeue",
                "--signal=USR1@90",
                "--account=vision",
                "--qos=high",
            ]
        );
        assert!(s.contains("cd -- '/scratch/exp/train/code'\n"), "{s}");
        assert!(
            s.contains("export HERD_EXP_DIR='/scratch/exp/train'\n"),
            "{s}"
        );
        assert!(
            s.contains("export HERD_CHECKPOINT_DIR='/scratch/exp/train/checkpoints'\n"),
            "{s}"
        );
        assert!(s.contains("HERD_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')\nexport HERD_JOB_SECRET\n"), "{s}");
        assert!(s.contains(
            "exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1 \\\n  '/opt/herd/bin/herd' launch --nproc-per-node 4 --max-restarts 2 --warn-before 120 --max-requeues 3 --log-dir '/scratch/exp/train/logs' \\\n  -- 'python' '-u' 'train.py' '--lr' '0.1'\n"
        ), "{s}");
        assert!(!s.contains("MASTER_PORT"), "{s}");
        // Every #SBATCH line comes before the first command (sbatch stops reading there).
        assert!(crate::check::check_script(&s).is_empty(), "{s}");
    }

    #[test]
    fn srun_script() {
        let p = plan(
            "mode = \"srun\"\njob_name = \"k700\"\ngpus = 16\ngpus_per_node = 8\ncpus_per_task = 5\npartition = \"dev\"\ncommand = [\"python\", \"-u\", \"tools/train.py\", \"configs/x.py\", \"--launcher=slurm\"]\n",
        );
        let s = render(&p);
        let lines = sbatch_lines(&s);
        assert!(
            lines.contains(&"--nodes=2") && lines.contains(&"--ntasks-per-node=8"),
            "{s}"
        );
        assert!(
            lines.contains(&"--gres=gpu:8") && lines.contains(&"--cpus-per-task=5"),
            "{s}"
        );
        assert!(s.contains("MASTER_ADDR=$('/opt/herd/bin/herd' hostlist expand -- \"$SLURM_JOB_NODELIST\")\nMASTER_ADDR=${MASTER_ADDR%%$'\\n'*}\n"), "{s}");
        assert!(s.contains(
            "exec srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=5 --kill-on-bad-exit=1 \\\n  '/opt/herd/bin/herd' exec \\\n  -- 'python' '-u' 'tools/train.py' 'configs/x.py' '--launcher=slurm'\n"
        ), "{s}");
        assert!(!s.contains("HERD_JOB_SECRET"), "{s}");
    }

    #[test]
    fn per_rank_gpu_binding_reaches_the_agents_and_the_tasks() {
        let agent = render(&plan(
            "nodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\ncommand = [\"python\", \"train.py\"]\n",
        ));
        assert!(
            agent.contains("launch --nproc-per-node 4 --gpu-bind per-rank --warn-before 120"),
            "{agent}"
        );
        let srun = render(&plan(
            "mode = \"srun\"\nnodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\ncommand = [\"python\", \"train.py\"]\n",
        ));
        assert!(
            srun.contains("'/opt/herd/bin/herd' exec --gpu-bind per-rank \\\n"),
            "{srun}"
        );
        // The default binding (all GPUs) is herd's own default: no flag at all.
        let default = render(&plan(
            "nodes = 2\ngpus_per_node = 4\ncommand = [\"python\", \"train.py\"]\n",
        ));
        assert!(!default.contains("--gpu-bind"), "{default}");
    }

    #[test]
    fn torchrun_script() {
        let p = plan(
            "mode = \"torchrun\"\nnodes = 4\ngpus_per_node = 8\nmax_restarts = 1\ncommand = [\"python\", \"tasks/pretrain.py\", \"config.py\"]\n",
        );
        let s = render(&p);
        assert!(s.contains(
            "exec srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --kill-on-bad-exit=1 \\\n  torchrun --nnodes=4 --nproc_per_node=8 --rdzv_id=\"$SLURM_JOB_ID\" \\\n  --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" --max_restarts=1 --no_python \\\n  'python' 'tasks/pretrain.py' 'config.py'\n"
        ), "{s}");
        assert!(
            s.contains("MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"),
            "{s}"
        );
        assert!(s.contains("not claimed"), "{s}");
    }

    #[test]
    fn optional_lines() {
        let mut p = plan("command = [\"./run\"]\n");
        let s = render(&p);
        let lines = sbatch_lines(&s);
        assert_eq!(
            lines,
            vec![
                "--job-name=train",
                "--nodes=1",
                "--ntasks-per-node=1",
                "--output=\"/scratch/exp/train/logs/%j.out\"",
                "--error=\"/scratch/exp/train/logs/%j.err\"",
                "--open-mode=append",
                // herd requeues by default (max_requeues 3), so SLURM must allow it, and
                // asks for its stop signal before the time limit.
                "--requeue",
                "--signal=CONT@120",
            ]
        );
        let mut none = p.clone();
        none.keep.max_requeues = 0;
        assert!(!sbatch_lines(&render(&none)).contains(&"--requeue"));
        p.requeue = Some(false);
        p.gpus_per_node = Some(2);
        p.gpu_type = Some("a100".into());
        p.signal = "B:USR1@60".parse::<Signal>().ok();
        let params = ScriptParams {
            dependency: Some("afterok:12:13"),
            ..params()
        };
        let s = render_script(&p, &params).unwrap_or_else(|e| panic!("{e}"));
        let lines = sbatch_lines(&s);
        for want in [
            "--gres=gpu:a100:2",
            "--no-requeue",
            "--signal=B:USR1@60",
            "--dependency=afterok:12:13",
        ] {
            assert!(lines.contains(&want), "{want}: {s}");
        }
    }

    #[test]
    fn refuses_unsafe_inputs() {
        let p = plan("command = [\"python\"]\n");
        let with = |exp: &'static str, herd: &'static str, dep: Option<&'static str>| {
            render_script(
                &p,
                &ScriptParams {
                    exp_dir: Path::new(exp),
                    herd: Path::new(herd),
                    dependency: dep,
                },
            )
        };
        assert!(matches!(
            with("exp", "/h", None),
            Err(RenderError::RelativePath { .. })
        ));
        assert!(matches!(
            with("/e", "herd", None),
            Err(RenderError::RelativePath { .. })
        ));
        for exp in ["/e/a\"b", "/e/a\nb", "/e/a#b", "/e/a\\b"] {
            let e = with(exp, "/h", None).expect_err(exp);
            assert!(e.to_string().contains("cannot carry"), "{e}");
        }
        assert!(with("/e", "/h", Some("afterok:1 --x")).is_err());
        // Spaces, quotes and `%` are fine in paths.
        let s = with("/scratch/my exp/it's 100%", "/o/h e/herd", None)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            s.contains("#SBATCH --output=\"/scratch/my exp/it's 100%%/logs/%j.out\"\n"),
            "{s}"
        );
        assert!(
            s.contains("cd -- '/scratch/my exp/it'\\''s 100%/code'\n"),
            "{s}"
        );
        assert!(s.contains("'/o/h e/herd' launch"), "{s}");

        let mut bad = p.clone();
        bad.sbatch_args = vec!["--comment=a\nb".into()];
        assert!(
            render_script(&bad, &params()).is_err_and(|e| e.to_string().contains("sbatch_args"))
        );
        let mut bad = p.clone();
        bad.command.push("a\0b".into());
        assert!(render_script(&bad, &params()).is_err_and(|e| e.to_string().contains("NUL")));
        let mut bad = p.clone();
        bad.partition = Some("gpu\n#SBATCH --x".into());
        assert!(render_script(&bad, &params()).is_err());
        let mut bad = p.clone();
        bad.job_name = "a b".into();
        assert!(render_script(&bad, &params()).is_err());
        let mut bad = p;
        bad.exp_root = PathBuf::from("x");
        assert!(render_script(&bad, &params()).is_ok());
    }

    /// The words of the script's `herd launch` line after `launch` and before `--log-dir`,
    /// as bash would split them (single quotes, `'\''`, backslash-newline).
    fn launch_words(script: &str) -> Vec<String> {
        let joined = script.replace("\\\n", " ");
        let line = joined
            .lines()
            .find(|l| l.contains("' launch "))
            .unwrap_or_else(|| panic!("no herd launch line:\n{script}"));
        let mut words = Vec::new();
        let mut word: Option<String> = None;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    let w = word.get_or_insert_with(String::new);
                    for q in chars.by_ref() {
                        if q == '\'' {
                            break;
                        }
                        w.push(q);
                    }
                }
                '\\' => {
                    if let Some(n) = chars.next() {
                        word.get_or_insert_with(String::new).push(n);
                    }
                }
                ' ' => words.extend(word.take()),
                c => word.get_or_insert_with(String::new).push(c),
            }
        }
        words.extend(word);
        let start = words
            .iter()
            .position(|w| w == "launch")
            .map_or(0, |i| i + 1);
        let end = words
            .iter()
            .position(|w| w == "--log-dir")
            .unwrap_or(words.len());
        words[start..end].to_vec()
    }

    /// What render writes is what `herd launch` parses: a plan with every key the agents
    /// act on set to a value other than its default reads back, from the script, as the
    /// plan's agent options.
    #[test]
    fn the_launch_line_parses_back_into_the_plans_agent_options() {
        let p = plan(
            "nodes = 2\ngpus_per_node = 3\ngpu_bind = \"per-rank\"\nmax_restarts = 2\n\
             metrics = \"regex:it (?P<step>\\\\d+) loss='(?P<loss>\\\\S+)'\"\n\
             time = \"24:00:00\"\nmax_requeues = 5\nwarn_before = 300\nstop_signal = \"USR2\"\n\
             stop_grace = 90\nhang_timeout = 600\non_hang = \"restart\"\n\
             command = [\"python\", \"train.py\"]\n",
        );
        let want = p.agent_options();
        let launch = crate::launch::AgentOptions::default();
        // Every option the plan decides differs from `herd launch`'s default here.
        assert_ne!(want.nproc_per_node, launch.nproc_per_node);
        assert_ne!(want.gpus, launch.gpus);
        assert_ne!(want.max_restarts, launch.max_restarts);
        assert_ne!(want.metrics, launch.metrics);
        let (k, d) = (&want.keep, &launch.keep);
        assert!(
            k.warn_before != d.warn_before
                && k.stop_signal != d.stop_signal
                && k.stop_grace != d.stop_grace
                && k.max_requeues != d.max_requeues
                && k.hang_timeout != d.hang_timeout
                && k.on_hang != d.on_hang,
            "{k:?}"
        );
        let words = launch_words(&render(&p));
        #[derive(clap::Parser)]
        struct Launch {
            #[command(flatten)]
            opts: crate::launch::AgentOptions,
        }
        let parsed = <Launch as clap::Parser>::try_parse_from(
            std::iter::once("herd-launch".to_owned()).chain(words.iter().cloned()),
        )
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
        assert_eq!(parsed.opts, want, "{words:?}");
        // And with every key at its default: the defaults read back too.
        let plain = plan("command = [\"python\", \"train.py\"]\n");
        let words = launch_words(&render(&plain));
        let parsed = <Launch as clap::Parser>::try_parse_from(
            std::iter::once("herd-launch".to_owned()).chain(words.iter().cloned()),
        )
        .unwrap_or_else(|e| panic!("{words:?}: {e}"));
        assert_eq!(parsed.opts, plain.agent_options(), "{words:?}");
    }
}
