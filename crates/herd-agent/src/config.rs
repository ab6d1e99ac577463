//! What an agent is told: its [`Config`]. Its staying-alive settings ([`KeepAlive`]) are
//! `herd launch`'s flags, defined with the other agent options in `herd_plan::launch`.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use herd_exp::layout::LogsDir;
use herd_exp::timeline::{Event, JobRef};
pub use herd_plan::launch::{KeepAlive, OnHang};
use herd_rendezvous::JobKey;
use herd_slurm::LaunchInfo;

use crate::words::say;

/// Everything an agent needs to know.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node's rank (0 leads).
    pub node_rank: u32,
    /// Every node's name, by node rank.
    pub node_names: Vec<String>,
    /// Where followers find the leader (node 0's address).
    pub leader_ip: IpAddr,
    /// Workers on this node.
    pub nproc: u32,
    /// The worker command.
    pub argv: Vec<OsString>,
    /// The job's identity and secret.
    pub key: JobKey,
    /// Where each attempt's per-rank logs go (`herd_exp::layout`).
    pub log_dir: LogsDir,
    /// Label console lines with the rank.
    pub label: bool,
    /// How to read metrics from the workers' lines (docs/metrics.md).
    pub metrics: herd_metrics::Format,
    /// Time between SIGTERM and SIGKILL at teardown.
    pub kill_grace: Duration,
    /// How long nodes may take to find each other.
    pub rendezvous_timeout: Duration,
    /// Silence after which a peer counts as lost.
    pub heartbeat_timeout: Duration,
    /// The last this many nodes stand by as spares (`--spare-nodes`).
    pub spare_nodes: u32,
    /// Candidate rendezvous ports to try.
    pub port_candidates: usize,
    /// What happens before the time limit, on preemption and when ranks hang.
    pub keep: KeepAlive,
    /// The experiment folder (a submitted job's `HERD_EXP_DIR`): the leader appends the
    /// job's events to its `timeline.jsonl`.
    pub exp_dir: Option<PathBuf>,
    /// What this node's workers are told beyond their place in the layout: the run id,
    /// `max_restarts` (also the restarts the leader allows), this node's GPUs and how they
    /// are bound, its CPUs, the user's `OMP_NUM_THREADS`, the job id. Each attempt sets
    /// `master_addr`, `master_port` and `restart_count` itself.
    pub launch: LaunchInfo,
    /// The container image the workers run in, made ready on this node
    /// ([`ContainerState::start`]); `None`: no container.
    pub container: Option<ContainerState>,
    /// This node's standbys for the next attempt's workers (`--warm on`, the default;
    /// docs/launch.md "Warm starts"); `None`: every worker starts cold.
    pub warm: Option<std::sync::Arc<crate::warm::Pool>>,
}

/// This node's container: made ready once per agent (a SquashFS image mounted once), or why
/// it could not be, which the preflight reports as the node's `container` finding.
#[derive(Debug, Clone)]
pub enum ContainerState {
    /// Ready: every worker of every attempt starts through it.
    Ready(std::sync::Arc<herd_container::Container>),
    /// Not usable on this node: what is wrong and what to change.
    Failed {
        /// The image as given.
        image: String,
        /// What is wrong.
        why: String,
    },
}

impl ContainerState {
    /// `spec` made ready on this node (PATH from this process's environment); `tag` names
    /// what it mounts. Blocks while a SquashFS image is mounted: call it before the agent's
    /// runtime starts, on the thread that lives as long as the agent (the mount's
    /// parent-death signal is tied to it).
    pub fn start(
        spec: &herd_container::Spec,
        tag: &str,
        node: &herd_container::Node,
    ) -> ContainerState {
        let path = std::env::var_os("PATH");
        match herd_container::Container::start(spec, path.as_deref(), tag, node) {
            Ok(c) => ContainerState::Ready(std::sync::Arc::new(c)),
            Err(why) => ContainerState::Failed {
                image: spec.image.clone(),
                why,
            },
        }
    }
}

impl Config {
    /// This node's name.
    pub(crate) fn host(&self) -> &str {
        &self.node_names[self.node_rank as usize]
    }

    /// The job's id as the timeline's events give it: as `herd submit` recorded it (a job
    /// of its own `"41"`, a task of a job array `"ARRAYID_TASK"`), so the views match the
    /// agents' events to the submission.
    pub(crate) fn job_id_field(&self) -> Option<JobRef> {
        match (&self.launch.job_ref, self.launch.job_id) {
            (Some(r), _) => Some(JobRef::from(r.as_str())),
            (None, id) => id.map(JobRef::from),
        }
    }

    /// The leader's record of `event` in the experiment's timeline, when there is an
    /// experiment; a timeline that cannot be written is said once and never stops the job.
    pub(crate) fn record(&self, event: impl Into<Event>) {
        if self.node_rank == 0 {
            self.record_here(event);
        }
    }

    /// This agent's record of `event`, whichever node it runs on: a follower that acts for
    /// a lost leader.
    pub(crate) fn record_here(&self, event: impl Into<Event>) {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        let Some(dir) = &self.exp_dir else { return };
        if let Err(e) = herd_exp::timeline::append(dir, event) {
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                say(format!(
                    "cannot write the timeline in {}: {e}; the job goes on",
                    dir.display()
                ));
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A leader's configuration for job `job_id` (`job_ref` as submit recorded it), with no
    /// experiment.
    pub(crate) fn config(job_id: Option<u64>, job_ref: Option<&str>) -> Config {
        Config {
            node_rank: 0,
            node_names: vec!["n0".into()],
            leader_ip: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            nproc: 1,
            argv: Vec::new(),
            key: herd_rendezvous::JobKey {
                id: String::new(),
                secret: Vec::new(),
            },
            log_dir: herd_exp::layout::LogsDir::new("/tmp/x"),
            label: false,
            metrics: herd_metrics::Format::Auto,
            kill_grace: Duration::from_secs(1),
            rendezvous_timeout: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(1),
            spare_nodes: 0,
            port_candidates: 1,
            keep: KeepAlive::default(),
            exp_dir: None,
            launch: LaunchInfo {
                job_id,
                job_ref: job_ref.map(str::to_owned),
                ..LaunchInfo::default()
            },
            container: None,
            warm: None,
        }
    }

    /// The id the agents write into the timeline is the one `herd submit` recorded: a job
    /// of its own `"41"`, an array task `"ARRAYID_TASK"` (not its own `SLURM_JOB_ID`).
    #[test]
    fn the_timeline_names_the_job_as_submit_recorded_it() {
        let id = |c: &Config| c.job_id_field().map(|j| j.as_str().to_owned());
        assert_eq!(id(&config(Some(41), Some("41"))).as_deref(), Some("41"));
        assert_eq!(
            id(&config(Some(1237), Some("1234_3"))).as_deref(),
            Some("1234_3")
        );
        assert_eq!(id(&config(Some(41), None)).as_deref(), Some("41"));
        assert_eq!(id(&config(None, None)), None);
    }

    /// The container runtimes' own commands withhold what every user program does.
    #[test]
    fn container_runtimes_withhold_what_user_programs_do() {
        assert_eq!(
            herd_container::WITHHELD,
            herd_slurm::worker::vars::WITHHELD,
            "herd_container::WITHHELD must name the same variables"
        );
    }
}
