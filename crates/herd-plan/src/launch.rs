//! The agent's options: what `herd launch` is told, defined once.
//!
//! [`AgentOptions`] is `herd launch`'s (and `herd run`'s) flags, as clap parses them; the
//! batch script's `herd launch` line ([`crate::render_script`]) and the arguments `herd run`
//! gives its agents are both [`AgentOptions::to_args`] of a value of it, and a test parses
//! what render writes back into the same value. Every value is typed from the plan on: a
//! duration is [`Seconds`], the hang timeout a [`HangTimeout`], the stop signal a
//! [`StopSignal`], a hang's consequence an [`OnHang`]; a value that is none of these is an
//! error where it is given, never another value later.
//!
//! Each default is stated once: `herd launch`'s in [`KeepAlive::LAUNCH`] and the flags'
//! attributes below; where `herd submit`'s differ, [`KeepAlive::submit`] says how, and
//! docs/launch.md's options table shows both (a test keeps it in step).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::Args;
use herd_slurm::GpuBind;
use nix::sys::signal::Signal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A number of seconds, whole or not (`90`, `1.5`), at least 0 and below 10,000,000.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seconds(Duration);

/// The largest [`Seconds`] (exclusive): 115 days, far above any time limit.
const MAX_SECONDS: f64 = 1e7;

impl Seconds {
    /// No time.
    pub const ZERO: Seconds = Seconds(Duration::ZERO);

    /// `secs` whole seconds.
    pub const fn from_secs(secs: u64) -> Seconds {
        Seconds(Duration::from_secs(secs))
    }

    /// As a [`Duration`].
    pub fn duration(self) -> Duration {
        self.0
    }

    /// Whether it is no time at all (an option that is then off).
    pub fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    /// The smaller of the two.
    pub fn min(self, other: Seconds) -> Seconds {
        Seconds(self.0.min(other.0))
    }

    /// Whole seconds, rounded down.
    pub fn whole(self) -> u64 {
        self.0.as_secs()
    }
}

impl From<Duration> for Seconds {
    fn from(d: Duration) -> Seconds {
        Seconds(d)
    }
}

impl FromStr for Seconds {
    type Err = String;

    fn from_str(s: &str) -> Result<Seconds, String> {
        let bad = || format!("`{s}` is not a number of seconds (0 or more, below 10000000)");
        let v: f64 = s.trim().parse().map_err(|_| bad())?;
        if !(0.0..MAX_SECONDS).contains(&v) {
            return Err(bad());
        }
        Ok(Seconds(Duration::from_secs_f64(v)))
    }
}

impl fmt::Display for Seconds {
    /// `90`, or `1.5`: the shortest text that reads back as the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.subsec_nanos() == 0 {
            write!(f, "{}", self.0.as_secs())
        } else {
            write!(f, "{}", self.0.as_secs_f64())
        }
    }
}

impl Serialize for Seconds {
    /// A number: whole seconds as an integer (what manifests have always held).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.subsec_nanos() == 0 {
            s.serialize_u64(self.0.as_secs())
        } else {
            s.serialize_f64(self.0.as_secs_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seconds, D::Error> {
        let v = f64::deserialize(d)?;
        if (0.0..MAX_SECONDS).contains(&v) {
            Ok(Seconds(Duration::from_secs_f64(v)))
        } else {
            Err(serde::de::Error::custom(format!(
                "{v} is not a number of seconds (0 or more, below 10000000)"
            )))
        }
    }
}

/// The hang watchdog's timeout (`--hang-timeout`): a number of seconds, the same for every
/// rank (`0`: no watchdog), or `auto`, each rank's own from the pace of its progress
/// (docs/launch.md, "Hangs"). In a plan and a manifest a number or the string `"auto"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HangTimeout {
    /// This many seconds of silence; zero: no watchdog.
    Fixed(Seconds),
    /// A safety factor times the longest gap between the rank's progress so far, with a
    /// floor and a warm-up (the agent's rule).
    Auto,
}

impl HangTimeout {
    /// No watchdog.
    pub const OFF: HangTimeout = HangTimeout::Fixed(Seconds::ZERO);

    /// `auto`: a rank's timeout is this many times the longest gap between its progress
    /// events so far (NVIDIA NVRx's safety factor).
    pub const AUTO_FACTOR: u32 = 5;
    /// `auto`: at least this long.
    pub const AUTO_FLOOR: Seconds = Seconds::from_secs(60);
    /// `auto`: a rank warms up until it has made progress this long…
    pub const AUTO_WARM_UP: Seconds = Seconds::from_secs(300);
    /// … and shown this many gaps;
    pub const AUTO_WARM_UP_GAPS: u32 = 10;
    /// while it warms up its timeout is at least this (NCCL's default collective timeout).
    pub const AUTO_WARM_UP_TIMEOUT: Seconds = Seconds::from_secs(600);

    /// Whether the watchdog is on.
    pub fn is_on(self) -> bool {
        self != HangTimeout::OFF
    }
}

impl FromStr for HangTimeout {
    type Err = String;

    /// `auto`, or seconds (`600`, `1.5`).
    fn from_str(s: &str) -> Result<HangTimeout, String> {
        if s.trim() == "auto" {
            return Ok(HangTimeout::Auto);
        }
        s.parse::<Seconds>().map(HangTimeout::Fixed).map_err(|_| {
            format!("`{s}` is not a number of seconds (0 or more, below 10000000) or `auto`")
        })
    }
}

impl fmt::Display for HangTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HangTimeout::Fixed(s) => s.fmt(f),
            HangTimeout::Auto => f.write_str("auto"),
        }
    }
}

impl Serialize for HangTimeout {
    /// A number of seconds (what manifests held before `auto`), or `"auto"`.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            HangTimeout::Fixed(secs) => secs.serialize(s),
            HangTimeout::Auto => s.serialize_str("auto"),
        }
    }
}

impl<'de> Deserialize<'de> for HangTimeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HangTimeout, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = HangTimeout;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of seconds or \"auto\"")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<HangTimeout, E> {
                if (0.0..MAX_SECONDS).contains(&v) {
                    Ok(HangTimeout::Fixed(Seconds(Duration::from_secs_f64(v))))
                } else {
                    Err(E::custom(format!(
                        "{v} is not a number of seconds (0 or more, below 10000000)"
                    )))
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<HangTimeout, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<HangTimeout, E> {
                self.visit_f64(v as f64)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<HangTimeout, E> {
                match v {
                    "auto" => Ok(HangTimeout::Auto),
                    _ => Err(E::custom(format!(
                        "`{v}` is not a number of seconds or \"auto\""
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The signal that asks every worker to checkpoint and exit: one a worker can catch and act
/// on (`USR1`, `USR2`, `TERM`, `INT`, `HUP`, `CONT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StopSignal(Signal);

/// The signals a worker can be asked to stop with.
const STOP_SIGNALS: [Signal; 6] = [
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGCONT,
];

impl StopSignal {
    /// `SIGUSR1`: herd's, and Lightning's and submitit's, default.
    pub const USR1: StopSignal = StopSignal(Signal::SIGUSR1);

    /// The signal.
    pub fn signal(self) -> Signal {
        self.0
    }
}

impl FromStr for StopSignal {
    type Err = String;

    /// `USR1`, `SIGUSR1`, `usr1`, or its number.
    fn from_str(s: &str) -> Result<StopSignal, String> {
        let upper = s.trim().to_ascii_uppercase();
        let named = match upper.parse::<i32>() {
            Ok(n) => Signal::try_from(n).ok(),
            Err(_) => {
                let full = if upper.starts_with("SIG") {
                    upper
                } else {
                    format!("SIG{upper}")
                };
                full.parse::<Signal>().ok()
            }
        };
        match named.filter(|sig| STOP_SIGNALS.contains(sig)) {
            Some(sig) => Ok(StopSignal(sig)),
            None => Err(format!(
                "`{s}` is not a signal a worker can checkpoint on: use one of USR1, USR2, TERM, INT, HUP, CONT"
            )),
        }
    }
}

impl fmt::Display for StopSignal {
    /// Without `SIG`: `USR1`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.0.as_str();
        f.write_str(name.strip_prefix("SIG").unwrap_or(name))
    }
}

impl Serialize for StopSignal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StopSignal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StopSignal, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// What the hang watchdog does once it has reported a hang.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnHang {
    /// End the job (exit 1).
    #[default]
    Fail,
    /// Restart all workers, as after a failure (counts against `--max-restarts`).
    Restart,
}

impl FromStr for OnHang {
    type Err = String;

    fn from_str(s: &str) -> Result<OnHang, String> {
        match s {
            "fail" => Ok(OnHang::Fail),
            "restart" => Ok(OnHang::Restart),
            _ => Err(format!("`{s}` is not `fail` or `restart`")),
        }
    }
}

impl fmt::Display for OnHang {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OnHang::Fail => "fail",
            OnHang::Restart => "restart",
        })
    }
}

/// Whether each agent checks its node before each attempt (docs/launch.md, "Preflight"):
/// its worker command and Python, its GPUs, its log and checkpoint folders, the master's
/// port; a node that fails is blamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preflight {
    /// Check every node before every attempt (the default: it costs tens of milliseconds).
    #[default]
    On,
    /// Start the workers unchecked.
    Off,
}

impl Preflight {
    /// Whether the nodes are checked.
    pub fn is_on(self) -> bool {
        self == Preflight::On
    }
}

impl FromStr for Preflight {
    type Err = String;

    fn from_str(s: &str) -> Result<Preflight, String> {
        match s {
            "on" => Ok(Preflight::On),
            "off" => Ok(Preflight::Off),
            _ => Err(format!("`{s}` is not `on` or `off`")),
        }
    }
}

impl fmt::Display for Preflight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Preflight::On => "on",
            Preflight::Off => "off",
        })
    }
}

/// Whether each agent starts the next attempt's Python workers ahead of time, their
/// modules imported (docs/launch.md, "Warm starts").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Warm {
    /// A standby per worker, imports done, for a restart in the same allocation (the
    /// default).
    #[default]
    On,
    /// Every worker starts cold.
    Off,
}

impl Warm {
    /// Whether standbys are kept.
    pub fn is_on(self) -> bool {
        self == Warm::On
    }
}

impl FromStr for Warm {
    type Err = String;

    fn from_str(s: &str) -> Result<Warm, String> {
        match s {
            "on" => Ok(Warm::On),
            "off" => Ok(Warm::Off),
            _ => Err(format!("`{s}` is not `on` or `off`")),
        }
    }
}

impl fmt::Display for Warm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Warm::On => "on",
            Warm::Off => "off",
        })
    }
}

/// Staying alive: the warning before the time limit, the stop that asks workers to
/// checkpoint, the requeue budget, the hang watchdog (docs/launch.md, "Staying alive"), the
/// node preflight (docs/launch.md, "Preflight").
/// `herd launch`'s flags, and a plan's keys of the same names.
#[derive(Debug, Clone, PartialEq, Eq, Args, Serialize, Deserialize)]
pub struct KeepAlive {
    /// In a SLURM job with a time limit: stop the workers this many seconds before it (ask
    /// them to checkpoint, then requeue within --max-requeues); 0: no warning of herd's own.
    #[arg(long, value_name = "SECONDS", default_value_t = KeepAlive::LAUNCH.warn_before)]
    pub warn_before: Seconds,
    /// The signal that asks every worker to checkpoint and exit (time limit, preemption).
    #[arg(long, value_name = "SIGNAL", default_value_t = KeepAlive::LAUNCH.stop_signal)]
    pub stop_signal: StopSignal,
    /// Seconds the workers have after the stop signal before they are torn down.
    #[arg(long, value_name = "SECONDS", default_value_t = KeepAlive::LAUNCH.stop_grace)]
    pub stop_grace: Seconds,
    /// Requeues of the job allowed for each cause: time limits, preemptions, node failures
    /// and the job's own requeues are counted apart (needs a requeueable job: `sbatch
    /// --requeue`).
    #[arg(long, value_name = "N", default_value_t = KeepAlive::LAUNCH.max_requeues)]
    pub max_requeues: u32,
    /// Seconds without progress of any rank (no output line, no touch of
    /// $HERD_HEARTBEAT_FILE) that make a hang: herd names the rank that went silent first
    /// and dumps every rank's stack with py-spy; 0: no watchdog; `auto`: each rank's own,
    /// 5 × the longest gap between its progress so far, at least 60 s (10 min while it
    /// warms up). A rank that has made no progress since it started is given
    /// --start-timeout instead.
    #[arg(long, value_name = "SECONDS|auto", default_value_t = KeepAlive::LAUNCH.hang_timeout)]
    pub hang_timeout: HangTimeout,
    /// With the hang watchdog on: seconds a rank may stay silent after it starts, before its
    /// first line or heartbeat (imports, dataset indexing, NCCL setup), before that silence
    /// counts toward a hang.
    #[arg(long, value_name = "SECONDS", default_value_t = KeepAlive::LAUNCH.start_timeout)]
    #[serde(default = "KeepAlive::default_start_timeout")]
    pub start_timeout: Seconds,
    /// What a hang does: `fail` the job or `restart` its workers (within --max-restarts).
    #[arg(long, value_name = "fail|restart", default_value_t = KeepAlive::LAUNCH.on_hang)]
    pub on_hang: OnHang,
    /// Before each attempt, each agent checks its node (the worker's Python finds torch,
    /// its GPUs are there, the log and checkpoint folders are writable with free space, the
    /// master's port answers) and a node that fails is blamed: `on` or `off`.
    #[arg(long, value_name = "on|off", default_value_t = KeepAlive::LAUNCH.preflight)]
    #[serde(default = "KeepAlive::default_preflight")]
    pub preflight: Preflight,
    /// Once an attempt trains, each agent starts the next attempt's Python workers ahead,
    /// with the modules they had loaded imported, so a restart skips its imports: `on` or
    /// `off`.
    #[arg(long, value_name = "on|off", default_value_t = KeepAlive::LAUNCH.warm)]
    #[serde(default = "KeepAlive::default_warm")]
    pub warm: Warm,
}

/// `herd submit`'s requeues per cause: a submitted job is made requeueable, and a few
/// requeues carry a long run through time limits and preemptions.
pub const SUBMIT_MAX_REQUEUES: u32 = 3;
/// `herd submit`'s warning before the time limit (at most a quarter of it): time for the
/// workers to checkpoint and for the requeue.
pub const SUBMIT_WARN_BEFORE: Seconds = Seconds::from_secs(120);

impl KeepAlive {
    /// `herd launch`'s defaults: an agent started by hand knows no requeue policy and asks
    /// SLURM for no warning, so it neither warns nor requeues of its own accord.
    pub const LAUNCH: KeepAlive = KeepAlive {
        warn_before: Seconds::ZERO,
        stop_signal: StopSignal::USR1,
        stop_grace: Seconds::from_secs(60),
        max_requeues: 0,
        hang_timeout: HangTimeout::OFF,
        start_timeout: Seconds::from_secs(1800),
        on_hang: OnHang::Fail,
        preflight: Preflight::On,
        warm: Warm::On,
    };

    /// The start timeout of a plan written before there was one.
    fn default_start_timeout() -> Seconds {
        KeepAlive::LAUNCH.start_timeout
    }

    /// The preflight of a plan written before there was one.
    fn default_preflight() -> Preflight {
        KeepAlive::LAUNCH.preflight
    }

    /// Warm starts in a plan written before there were any.
    fn default_warm() -> Warm {
        KeepAlive::LAUNCH.warm
    }

    /// `herd submit`'s defaults for a job with `time_limit`: [`KeepAlive::LAUNCH`] but
    /// [`SUBMIT_MAX_REQUEUES`] requeues, a warning [`SUBMIT_WARN_BEFORE`] ahead (at most a
    /// quarter of the time limit) and a grace of at most half the warning, so a short test
    /// job is stopped, checkpointed and requeued in time.
    pub fn submit(time_limit: Option<Duration>) -> KeepAlive {
        let quarter =
            time_limit.map_or(SUBMIT_WARN_BEFORE, |t| Seconds::from_secs(t.as_secs() / 4));
        let warn_before = SUBMIT_WARN_BEFORE.min(quarter);
        KeepAlive {
            max_requeues: SUBMIT_MAX_REQUEUES,
            warn_before,
            stop_grace: KeepAlive::submit_stop_grace(warn_before),
            ..Self::LAUNCH
        }
    }

    /// `herd submit`'s grace for a warning `warn_before` ahead: `herd launch`'s, at most
    /// half the warning (whole seconds).
    pub fn submit_stop_grace(warn_before: Seconds) -> Seconds {
        Self::LAUNCH
            .stop_grace
            .min(Seconds::from_secs(warn_before.whole() / 2))
    }

    /// The hang watchdog's timeout; `None` when it is off.
    pub fn watchdog(&self) -> Option<HangTimeout> {
        self.hang_timeout.is_on().then_some(self.hang_timeout)
    }
}

impl Default for KeepAlive {
    fn default() -> KeepAlive {
        KeepAlive::LAUNCH
    }
}

/// Which of its node's GPUs each worker sees (`herd launch`, `herd run`, `herd exec`,
/// `herd env`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Args)]
pub struct GpuBindArg {
    /// GPUs each worker sees: `all` of its node's (as torchrun and srun show them, so
    /// `cuda:LOCAL_RANK` works) or `per-rank` (only its own share, for code that always uses
    /// `cuda:0`).
    #[arg(long, value_name = "all|per-rank", default_value_t = GpuBind::All)]
    pub gpu_bind: GpuBind,
}

impl GpuBindArg {
    /// The flag that gives this binding: none for `all`, the default.
    pub fn to_args(&self) -> Vec<String> {
        match self.gpu_bind {
            GpuBind::All => Vec::new(),
            bind => vec!["--gpu-bind".into(), bind.to_string()],
        }
    }
}

/// The agent's options: `herd launch`'s and `herd run`'s flags (the log folder and the
/// command aside, which each run has of its own).
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct AgentOptions {
    /// Workers per node (default: the node's GPUs, else 1). `--nproc_per_node` works too.
    #[arg(
        long,
        alias = "nproc_per_node",
        value_name = "G",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub nproc_per_node: Option<u32>,
    /// Which GPUs each worker sees.
    #[command(flatten)]
    pub gpus: GpuBindArg,
    /// Restart all workers up to N times after a failure (fresh port, next attempt).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_restarts: u32,
    /// The last K of the step's nodes stand by: when a node is lost, frozen or blamed, the
    /// next attempt starts at once with a spare in its place, in the same allocation (the
    /// job needs SLURM's --no-kill).
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub spare_nodes: u32,
    /// Prefix each console line with the worker's rank (`3: …`), like `srun --label`.
    #[arg(long)]
    pub label: bool,
    /// How to read training metrics from the workers' lines into the logs folder:
    /// auto, json, kv, torchtitan, deepspeed, megatron, swav, off, or regex:RE.
    #[arg(long, value_name = "FORMAT", default_value_t = herd_metrics::Format::Auto)]
    pub metrics: herd_metrics::Format,
    /// Seconds between SIGTERM and SIGKILL when tearing workers down.
    #[arg(long, value_name = "SECONDS", default_value_t = Seconds::from_secs(1))]
    pub kill_grace: Seconds,
    /// Seconds the nodes may take to find each other.
    #[arg(long, value_name = "SECONDS", default_value_t = Seconds::from_secs(300))]
    pub rendezvous_timeout: Seconds,
    /// The longest silence after which another node's agent counts as lost (a crashed or
    /// frozen node). Sooner when its heartbeats (two a second) have been steady: herd
    /// adapts the verdict to each link's own heartbeat intervals, about 2.6 s on a quiet
    /// link, later on a jittery one, never later than this.
    #[arg(long, value_name = "SECONDS", default_value_t = Seconds::from_secs(10))]
    pub heartbeat_timeout: Seconds,
    /// Time limits, preemption, requeues, hangs.
    #[command(flatten)]
    pub keep: KeepAlive,
    /// The container image the workers run in.
    #[command(flatten)]
    pub container: ContainerArgs,
}

/// The container the workers run in (docs/containers.md): `--container IMAGE`,
/// `--container-runtime`, `--container-mounts`; the job keys `container`,
/// `container_runtime`, `container_mounts`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Args, Serialize, Deserialize)]
pub struct ContainerArgs {
    /// Run each worker inside this container image, at the same absolute path on every
    /// node: a folder or a SquashFS file (Charliecloud), a SIF file (Apptainer), a folder
    /// (Podman), a SquashFS file (Pyxis); or an image name: in each node's Podman store, or
    /// an enroot URI (Pyxis).
    #[arg(long = "container", value_name = "IMAGE", value_parser = image_ref)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The runtime that starts it: `charliecloud`, `apptainer`, `podman` or `pyxis`
    /// (default: podman for an image name, else the first of the four each node has).
    #[arg(long = "container-runtime", value_name = "RUNTIME", requires = "image")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<herd_container::Runtime>,
    /// Host folders mounted inside beside the job's own, as Pyxis writes them:
    /// `SRC[:DST[:ro]],…`.
    #[arg(long = "container-mounts", value_name = "MOUNTS", requires = "image")]
    #[serde(default, skip_serializing_if = "Option::is_none", with = "mounts_text")]
    pub mounts: Option<herd_container::Mounts>,
}

impl ContainerArgs {
    /// No image given.
    pub fn is_empty(&self) -> bool {
        self.image.is_none()
    }

    /// What the agent makes ready on each node, when an image is given.
    pub fn spec(&self) -> Option<herd_container::Spec> {
        Some(herd_container::Spec {
            image: self.image.clone()?,
            runtime: self.runtime,
            mounts: self.mounts.clone().map(|m| m.0).unwrap_or_default(),
        })
    }

    /// These as `herd launch` flags.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(image) = &self.image {
            args.extend(["--container".to_owned(), image.clone()]);
            if let Some(r) = self.runtime {
                args.extend(["--container-runtime".to_owned(), r.to_string()]);
            }
            if let Some(m) = self.mounts.as_ref().filter(|m| !m.0.is_empty()) {
                args.extend(["--container-mounts".to_owned(), m.to_string()]);
            }
        }
        args
    }
}

/// A `--container` value: an absolute path or a Podman image name
/// ([`herd_container::image_ref`]).
fn image_ref(s: &str) -> Result<String, String> {
    herd_container::image_ref(s).map(|()| s.to_owned())
}

/// Mounts in a manifest: their text, as the key takes it.
mod mounts_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        m: &Option<herd_container::Mounts>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match m {
            Some(m) => s.serialize_str(&m.to_string()),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<herd_container::Mounts>, D::Error> {
        let text = Option::<String>::deserialize(d)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

impl Default for AgentOptions {
    /// `herd launch` with no flags.
    fn default() -> AgentOptions {
        #[derive(clap::Parser)]
        struct Bare {
            #[command(flatten)]
            opts: AgentOptions,
        }
        // The flags' own defaults, so they are stated once (in the attributes above).
        match <Bare as clap::Parser>::try_parse_from(["herd"]) {
            Ok(bare) => bare.opts,
            Err(e) => unreachable!("the flags' defaults parse: {e}"),
        }
    }
}

impl AgentOptions {
    /// These options as `herd launch` flags: every one whose value differs from the flag's
    /// default, in the order the flags are defined. Values are one word each, never given
    /// to a shell here (the batch script quotes them).
    pub fn to_args(&self) -> Vec<String> {
        let d = AgentOptions::default();
        let (k, dk) = (&self.keep, &d.keep);
        let mut args = Vec::new();
        if let Some(g) = self.nproc_per_node {
            flag(&mut args, "nproc-per-node", &g, None);
        }
        args.extend(self.gpus.to_args());
        flag(
            &mut args,
            "max-restarts",
            &self.max_restarts,
            Some(&d.max_restarts),
        );
        flag(
            &mut args,
            "spare-nodes",
            &self.spare_nodes,
            Some(&d.spare_nodes),
        );
        flag(&mut args, "metrics", &self.metrics, Some(&d.metrics));
        flag(
            &mut args,
            "kill-grace",
            &self.kill_grace,
            Some(&d.kill_grace),
        );
        let rendezvous = Some(&d.rendezvous_timeout);
        flag(
            &mut args,
            "rendezvous-timeout",
            &self.rendezvous_timeout,
            rendezvous,
        );
        let heartbeat = Some(&d.heartbeat_timeout);
        flag(
            &mut args,
            "heartbeat-timeout",
            &self.heartbeat_timeout,
            heartbeat,
        );
        flag(
            &mut args,
            "warn-before",
            &k.warn_before,
            Some(&dk.warn_before),
        );
        flag(
            &mut args,
            "stop-signal",
            &k.stop_signal,
            Some(&dk.stop_signal),
        );
        flag(&mut args, "stop-grace", &k.stop_grace, Some(&dk.stop_grace));
        flag(
            &mut args,
            "max-requeues",
            &k.max_requeues,
            Some(&dk.max_requeues),
        );
        flag(
            &mut args,
            "hang-timeout",
            &k.hang_timeout,
            Some(&dk.hang_timeout),
        );
        flag(
            &mut args,
            "start-timeout",
            &k.start_timeout,
            Some(&dk.start_timeout),
        );
        flag(&mut args, "on-hang", &k.on_hang, Some(&dk.on_hang));
        flag(&mut args, "preflight", &k.preflight, Some(&dk.preflight));
        flag(&mut args, "warm", &k.warm, Some(&dk.warm));
        if self.label {
            args.push("--label".into());
        }
        args.extend(self.container.to_args());
        args
    }
}

/// `--name value` appended to `args`, unless `value` is `default`.
fn flag<T: PartialEq + fmt::Display>(
    args: &mut Vec<String>,
    name: &str,
    value: &T,
    default: Option<&T>,
) {
    if default != Some(value) {
        args.push(format!("--{name}"));
        args.push(value.to_string());
    }
}

#[cfg(test)]
mod tests;
