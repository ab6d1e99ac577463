//! The environment herd gives every worker (docs/design.md §3).
//!
//! torchrun's variables, so `init_process_group(init_method="env://")` works unchanged; SLURM
//! task variables that describe the worker itself, so code written for one-task-per-GPU
//! `srun` launch (`SLURM_PROCID`, `SLURM_LOCALID`, `SLURM_NTASKS`, `SLURM_TASKS_PER_NODE`)
//! gets the right ranks even when one agent per node spawns the workers; the GPUs each
//! worker sees ([`GpuBind`]), a sane `OMP_NUM_THREADS`, and `HERD_*`.
//!
//! - [`vars`]: the names of herd's own variables (`HERD_*`).
//! - [`checkpoint`]: the newest complete checkpoint, which a new attempt resumes from
//!   (`HERD_RESUME_FROM`).

pub mod checkpoint;
pub mod vars;

use std::collections::BTreeMap;

use herd_hostlist::compress;
use serde::{Deserialize, Serialize};

use crate::allocation::counts::format_counts;
use crate::allocation::Layout;

/// Where one worker sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    /// Global rank.
    pub rank: u32,
    /// Rank on its node.
    pub local_rank: u32,
    /// Index of its node.
    pub node_rank: u32,
}

/// Which of its node's GPUs a worker sees in `CUDA_VISIBLE_DEVICES`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuBind {
    /// Every GPU of its node, as torchrun and `srun --gres=gpu:G` show them: code that
    /// picks `cuda:LOCAL_RANK` (torchrun's docs, Lightning, Accelerate, DeepSpeed,
    /// InternVideo) or `rank % device_count()` (SwAV) finds its own device (the default).
    #[default]
    All,
    /// Only local rank `l`'s equal share of them, for code that always uses `cuda:0`
    /// (all of them, shared, when the GPUs do not divide among the workers).
    PerRank,
}

impl GpuBind {
    /// The name in job files and flags: `all`, `per-rank`.
    pub fn name(self) -> &'static str {
        match self {
            GpuBind::All => "all",
            GpuBind::PerRank => "per-rank",
        }
    }

    /// The GPUs local rank `local_rank` of `local_world_size` sees, of `node_gpus`.
    pub fn visible(
        self,
        node_gpus: &[String],
        local_rank: u32,
        local_world_size: u32,
    ) -> Vec<String> {
        match self {
            GpuBind::All => node_gpus.to_vec(),
            GpuBind::PerRank => gpu_share(node_gpus, local_rank, local_world_size),
        }
    }
}

impl std::fmt::Display for GpuBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A GPU binding that is not `all` or `per-rank`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a GPU binding: use `all` (every worker sees all of its node's GPUs, the default) or `per-rank` (each local rank only its own share); SLURM's --gpu-bind values (closest, map_gpu:…) belong to sbatch and srun, not to this option")]
pub struct GpuBindError(pub String);

impl std::str::FromStr for GpuBind {
    type Err = GpuBindError;

    fn from_str(s: &str) -> Result<GpuBind, GpuBindError> {
        match s {
            "all" => Ok(GpuBind::All),
            "per-rank" => Ok(GpuBind::PerRank),
            _ => Err(GpuBindError(s.to_owned())),
        }
    }
}

/// What the launch knows beyond the layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LaunchInfo {
    /// `MASTER_ADDR`: an address of node 0 that every node reaches.
    pub master_addr: String,
    /// `MASTER_PORT`: the claimed port, when known.
    pub master_port: Option<u16>,
    /// `TORCHELASTIC_RUN_ID` (herd uses the SLURM job id).
    pub run_id: String,
    /// Restarts so far in this allocation (`TORCHELASTIC_RESTART_COUNT`).
    pub restart_count: u32,
    /// `HERD_ATTEMPT`: the attempt's number over the whole experiment, the K of its
    /// `logs/attempt-K` (restarts and requeues both count).
    pub attempt: u32,
    /// How often SLURM has requeued the job (`SLURM_RESTART_COUNT`; 0 outside SLURM).
    pub requeues: u32,
    /// `TORCHELASTIC_MAX_RESTARTS`.
    pub max_restarts: u32,
    /// GPUs of this node (device ids as in `CUDA_VISIBLE_DEVICES`); empty when no GPU is
    /// allocated.
    pub node_gpus: Vec<String>,
    /// Which of them each worker sees.
    pub gpu_bind: GpuBind,
    /// CPUs on this node available to the workers (for `OMP_NUM_THREADS`).
    pub node_cpus: Option<u32>,
    /// This node's interface on the route to the master (`eth0`; `lo` on one node): every
    /// worker's `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME`, unless the user set them.
    pub socket_ifname: Option<String>,
    /// Which of `GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME` the user set: kept as they are.
    pub user_ifnames: Vec<String>,
    /// `OMP_NUM_THREADS` already set by the user: kept as it is.
    pub user_omp_threads: Option<String>,
    /// SLURM job id (`HERD_JOB_ID`): the job's own, for `srun --jobid` (an array task's
    /// own number too).
    pub job_id: Option<u64>,
    /// The job's id as herd names it ([`crate::allocation::job_ref`]): `ARRAYID_TASK` for a
    /// task of a job array, else the job id. The agents write it into the timeline and the
    /// manifest (as `herd submit` recorded it) and give it to SLURM's requeue, show, update
    /// and cancel, which then act on this task alone.
    pub job_ref: Option<String>,
    /// `HERD_CHECKPOINT_DIR`, where the job writes its checkpoints, when set.
    pub checkpoint_dir: Option<std::path::PathBuf>,
    /// `HERD_RESUME_FROM`: the newest complete checkpoint there when the attempt started
    /// ([`checkpoint::newest`]); `None` leaves a value the user set alone.
    pub resume_from: Option<std::path::PathBuf>,
}

impl LaunchInfo {
    /// What a task of `alloc` knows when it launches itself (`herd exec`, `herd env`): the
    /// job id as run id, SLURM's restart count, the GPUs the task sees and the node's CPUs,
    /// the user's `OMP_NUM_THREADS` from `vars`; GPUs bound the default way.
    pub fn for_task(
        alloc: &crate::Allocation,
        vars: &crate::Vars,
        master_addr: String,
        master_port: Option<u16>,
    ) -> LaunchInfo {
        let restarts = vars
            .get("SLURM_RESTART_COUNT")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        LaunchInfo {
            master_addr,
            master_port,
            restart_count: restarts,
            attempt: restarts,
            requeues: restarts,
            job_ref: crate::allocation::job_ref(vars).or_else(|| Some(alloc.job_id.to_string())),
            ..LaunchInfo::for_node(
                &alloc.gpus,
                alloc.cpus_on_node,
                vars,
                alloc.job_id.to_string(),
                Some(alloc.job_id),
            )
        }
    }

    /// The checkpoint a new attempt resumes from: the newest complete one in
    /// [`LaunchInfo::checkpoint_dir`] now (`None` without a folder or a checkpoint).
    pub fn newest_checkpoint(&self) -> std::io::Result<Option<std::path::PathBuf>> {
        match &self.checkpoint_dir {
            Some(dir) => checkpoint::newest(dir),
            None => Ok(None),
        }
    }

    /// What a node knows before any worker starts: its `gpus` (those visible) and
    /// `node_cpus`, as [`crate::Allocation`] has them or, for a node that is no SLURM
    /// task, as [`crate::Gpus::from_vars`] and [`crate::allocation::cpus_on_node`] read
    /// them; the user's `OMP_NUM_THREADS` from `vars`; the run and job ids. No master yet,
    /// restart count 0, no restarts allowed, GPUs bound the default way.
    pub fn for_node(
        gpus: &crate::Gpus,
        node_cpus: Option<u32>,
        vars: &crate::Vars,
        run_id: String,
        job_id: Option<u64>,
    ) -> LaunchInfo {
        LaunchInfo {
            master_addr: String::new(),
            master_port: None,
            run_id,
            restart_count: 0,
            attempt: 0,
            requeues: 0,
            max_restarts: 0,
            node_gpus: gpus.visible.clone().unwrap_or_default(),
            gpu_bind: GpuBind::default(),
            node_cpus,
            user_omp_threads: vars.get("OMP_NUM_THREADS").map(str::to_owned),
            socket_ifname: None,
            user_ifnames: crate::allocation::net::IFNAME_VARS
                .iter()
                .filter(|v| vars.get(v).is_some())
                .map(|v| (*v).to_owned())
                .collect(),
            job_ref: job_id.map(|j| j.to_string()),
            job_id,
            checkpoint_dir: vars
                .get(vars::HERD_CHECKPOINT_DIR)
                .filter(|d| !d.is_empty())
                .map(std::path::PathBuf::from),
            resume_from: None,
        }
    }
}

/// A command for a program the user controls: a worker, the preflight's Python (whose
/// `.pth` files and `sitecustomize` run user code), py-spy or nvidia-smi found on the
/// user's PATH. It inherits herd's environment with `env` on top, less the variables no
/// such program gets ([`vars::WITHHELD`]), even when `env` names one. Every user program
/// herd starts is made here.
pub fn user_program(
    program: impl AsRef<std::ffi::OsStr>,
    env: &BTreeMap<String, String>,
) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    cmd.envs(env);
    for var in vars::WITHHELD {
        cmd.env_remove(var);
    }
    cmd
}

/// Local rank `local_rank`'s share of `node_gpus` among `local_world_size` workers: an equal
/// share when they divide; all of them otherwise (workers then share).
fn gpu_share(node_gpus: &[String], local_rank: u32, local_world_size: u32) -> Vec<String> {
    let (n, lws) = (node_gpus.len(), local_world_size as usize);
    if n == 0 || lws == 0 || n < lws || n % lws != 0 {
        return node_gpus.to_vec();
    }
    let per = n / lws;
    let start = local_rank as usize * per;
    node_gpus[start..start + per].to_vec()
}

/// The variables herd sets for the worker at `pos` of `layout` in either launch mode: all
/// of them in srun mode (`herd exec`); an agent adds where its attempt's files are and the
/// stop signal (`herd_agent::workers::agent_worker_env`). `herd env` shows either set.
pub fn worker_env(layout: &Layout, pos: Position, info: &LaunchInfo) -> BTreeMap<String, String> {
    let world = layout.world_size();
    let nnodes = layout.nodes.len();
    let lws = layout.tasks_per_node[pos.node_rank as usize];
    let tpn = format_counts(&layout.tasks_per_node);
    let nodelist = compress(&layout.nodes);
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_owned(), v);
    };

    // torchrun's set.
    set("RANK", pos.rank.to_string());
    set("LOCAL_RANK", pos.local_rank.to_string());
    set("WORLD_SIZE", world.to_string());
    set("LOCAL_WORLD_SIZE", lws.to_string());
    set("GROUP_RANK", pos.node_rank.to_string());
    set("NODE_RANK", pos.node_rank.to_string());
    set("GROUP_WORLD_SIZE", nnodes.to_string());
    set("ROLE_NAME", "default".into());
    set("ROLE_RANK", pos.rank.to_string());
    set("ROLE_WORLD_SIZE", world.to_string());
    set("MASTER_ADDR", info.master_addr.clone());
    if let Some(port) = info.master_port {
        set("MASTER_PORT", port.to_string());
    }
    set("TORCHELASTIC_RESTART_COUNT", info.restart_count.to_string());
    set("TORCHELASTIC_MAX_RESTARTS", info.max_restarts.to_string());
    set("TORCHELASTIC_RUN_ID", info.run_id.clone());

    // SLURM task variables describing this worker, as one-task-per-worker srun would.
    set("SLURM_PROCID", pos.rank.to_string());
    set("SLURM_LOCALID", pos.local_rank.to_string());
    set("SLURM_NODEID", pos.node_rank.to_string());
    set("SLURM_NTASKS", world.to_string());
    set("SLURM_NPROCS", world.to_string());
    set("SLURM_NNODES", nnodes.to_string());
    set("SLURM_TASKS_PER_NODE", tpn.clone());
    set("SLURM_STEP_NUM_TASKS", world.to_string());
    set("SLURM_STEP_NUM_NODES", nnodes.to_string());
    set("SLURM_STEP_TASKS_PER_NODE", tpn);
    set("SLURM_STEP_NODELIST", nodelist);
    if layout.tasks_per_node.iter().all(|&t| t == lws) {
        set("SLURM_NTASKS_PER_NODE", lws.to_string());
    }

    // GPUs and threads.
    if !info.node_gpus.is_empty() {
        let visible = info.gpu_bind.visible(&info.node_gpus, pos.local_rank, lws);
        set("CUDA_VISIBLE_DEVICES", visible.join(","));
    }
    let omp = match &info.user_omp_threads {
        Some(user) => user.clone(),
        None => info
            .node_cpus
            .map_or(1, |cpus| (cpus / lws.max(1)).max(1))
            .to_string(),
    };
    set("OMP_NUM_THREADS", omp);
    if let Some(ifname) = &info.socket_ifname {
        for var in crate::allocation::net::IFNAME_VARS {
            if !info.user_ifnames.iter().any(|u| u == var) {
                set(var, ifname.clone());
            }
        }
    }

    // herd's own.
    set(vars::HERD_ATTEMPT, info.attempt.to_string());
    set(vars::HERD_NODE_RANK, pos.node_rank.to_string());
    set(vars::HERD_NUM_NODES, nnodes.to_string());
    set(vars::HERD_MASTER_NODE, layout.nodes[0].clone());
    if let Some(job) = info.job_id {
        set(vars::HERD_JOB_ID, job.to_string());
    }
    if let Some(dir) = &info.checkpoint_dir {
        set(vars::HERD_CHECKPOINT_DIR, dir.display().to_string());
    }
    if let Some(from) = &info.resume_from {
        set(vars::HERD_RESUME_FROM, from.display().to_string());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_user_program_never_gets_the_job_secret() {
        let env = BTreeMap::from([
            ("RANK".to_owned(), "3".to_owned()),
            (vars::HERD_JOB_SECRET.to_owned(), "asked for".to_owned()),
        ]);
        let cmd = user_program("python3", &env);
        let envs: BTreeMap<_, _> = cmd.get_envs().collect();
        let os = std::ffi::OsStr::new;
        assert_eq!(
            envs,
            BTreeMap::from([(os("HERD_JOB_SECRET"), None), (os("RANK"), Some(os("3")))]),
            "inherited or asked for, the secret is taken out"
        );
        assert_eq!(cmd.get_program(), "python3");
    }

    #[test]
    fn all_shows_every_gpu_per_rank_its_share() {
        let node = gpus(&["0", "1", "2", "3"]);
        for l in 0..2 {
            assert_eq!(GpuBind::All.visible(&node, l, 2), node);
        }
        assert_eq!(GpuBind::PerRank.visible(&node, 0, 2), gpus(&["0", "1"]));
        assert_eq!(GpuBind::PerRank.visible(&node, 1, 2), gpus(&["2", "3"]));
        // 4 GPUs do not divide among 3 workers: they share all of them.
        assert_eq!(GpuBind::PerRank.visible(&node, 2, 3), node);
        assert!(GpuBind::PerRank.visible(&[], 0, 2).is_empty());
    }

    #[test]
    fn workers_get_the_checkpoint_folder_and_the_newest_checkpoint_in_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vars = crate::Vars::parse(&format!("HERD_CHECKPOINT_DIR={}", dir.path().display()));
        let gpus = crate::Gpus::from_vars(&vars).expect("no gpus");
        let mut info = LaunchInfo::for_node(&gpus, Some(4), &vars, "run".into(), None);
        assert_eq!(info.checkpoint_dir.as_deref(), Some(dir.path()));
        assert_eq!(info.newest_checkpoint().expect("reads"), None);
        std::fs::write(dir.path().join("ckpt-10.pt"), "x").expect("write");
        info.resume_from = info.newest_checkpoint().expect("reads");
        let layout = Layout {
            nodes: vec!["n1".into()],
            tasks_per_node: vec![1],
        };
        let pos = Position {
            rank: 0,
            local_rank: 0,
            node_rank: 0,
        };
        let env = worker_env(&layout, pos, &info);
        assert_eq!(
            env[vars::HERD_CHECKPOINT_DIR],
            dir.path().display().to_string()
        );
        assert_eq!(
            env[vars::HERD_RESUME_FROM],
            dir.path().join("ckpt-10.pt").display().to_string()
        );
        // Without a folder, neither is set (a HERD_RESUME_FROM of the user's stays theirs).
        let bare =
            LaunchInfo::for_node(&gpus, Some(4), &crate::Vars::parse(""), "run".into(), None);
        let env = worker_env(&layout, pos, &bare);
        assert!(
            !env.contains_key(vars::HERD_CHECKPOINT_DIR)
                && !env.contains_key(vars::HERD_RESUME_FROM)
        );
    }

    #[test]
    fn names_parse_back_and_others_are_refused() {
        for b in [GpuBind::All, GpuBind::PerRank] {
            assert_eq!(b.name().parse::<GpuBind>(), Ok(b));
        }
        let e = "closest".parse::<GpuBind>().expect_err("SLURM's value");
        assert!(e.to_string().contains("use `all`"), "{e}");
        assert!(e.to_string().contains("belong to sbatch and srun"), "{e}");
        assert_eq!(GpuBind::default(), GpuBind::All);
    }
}
