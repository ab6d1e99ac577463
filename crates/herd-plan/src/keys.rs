//! The keys of a plan, each declared once, and where each value came from.
//!
//! `plan_keys!` below is the one definition of every key: its job-file name (the field),
//! its `herd submit`/`herd check` flag and `--help` line (the clap attributes and doc
//! comment), the TOML type a job file or profile gives it, its [`Key`] and an example
//! value. From it come [`JobKeys`] (one struct that clap parses the flags into and serde
//! parses job files and profiles into, so every layer of a plan has the same shape),
//! [`Key`] with [`Key::ALL`], [`Key::name`], [`Key::flag`] and [`Key::example`], and the
//! keys table in docs/submit.md (checked against it by a test). How each value is checked
//! and where it lands in the [`crate::Plan`] is [`crate::resolve()`].

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;

use clap::builder::TypedValueParser;
use serde::{Deserialize, Serialize};

use crate::values::TextOrNumber;

/// Declares the plan's keys once: each entry is a field of [`JobKeys`] (doc comment = the
/// flag's `--help` line, `#[arg]` = the flag, `#[serde]` = job-file details) with, for a
/// key, `#[key(Variant, example = "TOML value")]`. An entry without `#[key]` is a flag
/// that only spells another key's value (`--no-requeue`) and never appears in a file.
macro_rules! plan_keys {
    ($(
        $(#[doc = $doc:literal])*
        $(#[key($key:ident, example = $example:literal)])?
        $(#[arg $arg:tt])*
        $(#[serde $serde:tt])*
        pub $field:ident: $ty:ty,
    )*) => {
        /// The keys of a plan as one layer gives them: `herd submit`'s flags (clap), a job
        /// file or a profile (TOML, unknown keys refused). Types are checked, values not
        /// yet ([`crate::resolve()`] does, naming the key and where it was set). `None`
        /// leaves the key to the next layer.
        ///
        /// Field docs are the flags' `--help` lines; docs/submit.md has the table of keys.
        #[derive(Debug, Clone, Default, PartialEq, clap::Args, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct JobKeys {
            $(
                $(#[doc = $doc])*
                $(#[arg $arg])*
                $(#[serde $serde])*
                pub $field: $ty,
            )*
        }

        /// One key of a plan: its job-file name ([`Key::name`]), its `herd submit` flag
        /// ([`Key::flag`]). Ordered as in a job file; problems are reported in this order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Key {
            $($(
                #[doc = concat!("`", stringify!($field), "`: see [`JobKeys::", stringify!($field), "`].")]
                $key,
            )?)*
        }

        impl Key {
            /// Every key, in job-file order.
            pub const ALL: [Key; [$($(stringify!($key),)?)*].len()] = [$($(Key::$key,)?)*];

            /// The key's name in a job file or profile (`gpus_per_node`).
            pub fn name(self) -> &'static str {
                match self {
                    $($(Key::$key => stringify!($field),)?)*
                }
            }

            /// An example value, as TOML (`"450G"` for `mem`).
            pub fn example(self) -> &'static str {
                match self {
                    $($(Key::$key => $example,)?)*
                }
            }
        }
    };
}

plan_keys! {
    /// `--job-name`: also the experiment folder's name.
    #[key(JobName, example = r#""swav""#)]
    #[arg(long, short = 'J', value_name = "NAME")]
    pub job_name: Option<String>,
    /// Launch mode: agent (default), srun (one task per GPU) or torchrun.
    #[key(Mode, example = r#""srun""#)]
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Nodes.
    #[key(Nodes, example = "8")]
    #[arg(long, short = 'N', value_name = "N", value_parser = count())]
    pub nodes: Option<i64>,
    /// GPUs in all (nodes follow from it and --gpus-per-node).
    #[key(Gpus, example = "64")]
    #[arg(long, value_name = "N", value_parser = count())]
    pub gpus: Option<i64>,
    /// GPUs per node (= workers per node in agent mode).
    #[key(GpusPerNode, example = "8")]
    #[arg(
        long,
        alias = "nproc-per-node",
        alias = "nproc_per_node",
        value_name = "G",
        value_parser = count()
    )]
    pub gpus_per_node: Option<i64>,
    /// GPU type for `--gres=gpu:TYPE:N`.
    #[key(GpuType, example = r#""a100""#)]
    #[arg(long, value_name = "TYPE")]
    pub gpu_type: Option<String>,
    /// GPUs each worker sees: `all` of its node's (default; `cuda:LOCAL_RANK` works) or
    /// `per-rank` (only its own share, for code that always uses `cuda:0`).
    #[key(GpuBind, example = r#""per-rank""#)]
    #[arg(long, value_name = "all|per-rank")]
    pub gpu_bind: Option<String>,
    /// Tasks per node (srun mode).
    #[key(NtasksPerNode, example = "8")]
    #[arg(long, value_name = "N", value_parser = count())]
    pub ntasks_per_node: Option<i64>,
    /// CPUs per task.
    #[key(CpusPerTask, example = "8")]
    #[arg(long, short = 'c', value_name = "N", value_parser = count())]
    pub cpus_per_task: Option<i64>,
    /// Memory per node (`240G`, `16000M`).
    #[key(Mem, example = r#""450G""#)]
    #[arg(long, value_name = "MEM", value_parser = text)]
    pub mem: Option<TextOrNumber>,
    /// Time limit (`2-00:00:00`, `90`).
    #[key(Time, example = r#""50:00:00""#)]
    #[arg(long, short = 't', value_name = "TIME", value_parser = text)]
    pub time: Option<TextOrNumber>,
    /// Partition.
    #[key(Partition, example = r#""gpu""#)]
    #[arg(long, short = 'p', value_name = "NAME")]
    pub partition: Option<String>,
    /// Node features.
    #[key(Constraint, example = r#""ib""#)]
    #[arg(long, short = 'C', value_name = "LIST")]
    pub constraint: Option<String>,
    /// Start after job NAME or ID (`NAME[:ok|any|notok]`), resolved with one squeue query.
    #[key(After, example = r#"["pretrain"]"#)]
    #[arg(long, value_name = "NAME|ID[:ok|any|notok]")]
    pub after: Option<Vec<String>>,
    /// Let SLURM requeue the job (preemption, node failure).
    #[key(Requeue, example = "true")]
    #[arg(long, num_args = 0, default_missing_value = "true", overrides_with = "no_requeue")]
    pub requeue: Option<bool>,
    /// Never requeue.
    #[arg(long)]
    #[serde(skip)]
    pub no_requeue: bool,
    /// Signal before the time limit (`USR1@60`, `B:USR1@90`).
    #[key(Signal, example = r#""USR1@60""#)]
    #[arg(long, value_name = "[B:]SIG[@SECONDS]")]
    pub signal: Option<String>,
    /// The command and its arguments (after `--`); replaces the job file's.
    #[key(Command, example = r#"["python", "-u", "main_swav.py", "--data", "{DATA}"]"#)]
    #[arg(last = true, value_name = "CMD")]
    pub command: Option<Vec<String>>,
    /// A `{NAME}` parameter of the job file's command (`--param CHECKPOINT=/x.pth`).
    #[key(Params, example = r#"["DATA"]"#)]
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Option<Vec<String>>,
    /// An extra sbatch option, passed verbatim (repeatable).
    #[key(SbatchArgs, example = r#"["--account=vision"]"#)]
    #[arg(long = "sbatch-arg", value_name = "OPTION", allow_hyphen_values = true)]
    pub sbatch_args: Option<Vec<String>>,
    /// Where experiment folders go.
    #[key(ExpRoot, example = r#""/scratch/exp""#)]
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// A glob left out of the code snapshot (repeatable; `*.out` always is).
    #[key(Exclude, example = r#"["data/**"]"#)]
    #[arg(long, value_name = "GLOB")]
    pub exclude: Option<Vec<String>>,
    /// Restarts of all workers inside the allocation after a failure.
    #[key(MaxRestarts, example = "2")]
    #[arg(long, value_name = "N", value_parser = count())]
    pub max_restarts: Option<i64>,
}

/// A count flag (`--nodes 8`): parsed as the `u32` it must be, so clap names the flag when
/// it is not one, and held as the job file's `i64`, so [`crate::resolve()`] checks both
/// alike.
fn count() -> impl TypedValueParser<Value = i64> {
    clap::value_parser!(u32).map(i64::from)
}

/// A `--mem` or `--time` flag: the text, parsed by [`crate::resolve()`] like a job file's.
fn text(s: &str) -> Result<TextOrNumber, std::convert::Infallible> {
    Ok(TextOrNumber::Text(s.to_owned()))
}

/// What `herd submit` and `herd check` are given: a job file, and the keys as flags, which
/// override it.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct PlanArgs {
    /// Job file (TOML) with the plan's keys; flags override it.
    #[arg(value_name = "JOB.toml")]
    pub job: Option<PathBuf>,
    /// The keys given as flags.
    #[command(flatten)]
    pub flags: JobKeys,
}

impl Key {
    /// The `herd submit` flag that sets the key, read from its clap definition in
    /// [`JobKeys`] (sbatch's and torchrun's names where they exist). `command` is given
    /// after `--`; `params` by `--param NAME=VALUE`.
    pub fn flag(self) -> &'static str {
        static FLAGS: OnceLock<Vec<String>> = OnceLock::new();
        let flags = FLAGS.get_or_init(|| {
            let cmd = <JobKeys as clap::Args>::augment_args(clap::Command::new("herd"));
            Key::ALL
                .iter()
                .map(|key| {
                    let arg = cmd.get_arguments().find(|a| a.get_id() == key.name());
                    match arg.and_then(|a| a.get_long()) {
                        Some(long) => format!("--{long}"),
                        // The one positional key: the words after `--`.
                        None => "-- CMD ARGS…".to_owned(),
                    }
                })
                .collect()
        });
        flags.get(self as usize).map_or("", String::as_str)
    }
}

impl fmt::Display for Key {
    /// The job-file name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// The job file at `path`.
    File {
        /// The job file.
        path: PathBuf,
    },
    /// A `herd submit` flag.
    Flag,
    /// The cluster profile at `path`, chosen by the login host's name.
    Profile {
        /// The profile file.
        path: PathBuf,
    },
    /// herd's built-in default.
    Default,
    /// Computed from other keys (e.g. `nodes` from `gpus` ÷ `gpus_per_node`).
    Derived {
        /// The keys it was computed from.
        from: Vec<Key>,
    },
}

impl Source {
    /// How to name `key` set here in a message: "`mem` in job.toml", "--mem",
    /// "`mem` in profile login.toml", "`mem` (herd's default)",
    /// "`nodes` (derived from gpus, gpus_per_node)".
    pub fn describe(&self, key: Key) -> String {
        match self {
            Source::File { path } => format!("`{key}` in {}", path.display()),
            Source::Flag => key.flag().to_owned(),
            Source::Profile { path } => format!("`{key}` in profile {}", path.display()),
            Source::Default => format!("`{key}` (herd's default)"),
            Source::Derived { from } => {
                let names: Vec<&str> = from.iter().map(|k| k.name()).collect();
                format!("`{key}` (derived from {})", names.join(", "))
            }
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File { path } => write!(f, "job file {}", path.display()),
            Source::Flag => f.write_str("flag"),
            Source::Profile { path } => write!(f, "profile {}", path.display()),
            Source::Default => f.write_str("herd's default"),
            Source::Derived { from } => {
                let names: Vec<&str> = from.iter().map(|k| k.name()).collect();
                write!(f, "derived from {}", names.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_flags_are_distinct() {
        let mut names: Vec<&str> = Key::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Key::ALL.len());
        for k in Key::ALL {
            assert!(k.flag().starts_with("--"), "{k}");
            let json = serde_json::to_string(&k).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", k.name()));
        }
    }

    #[test]
    fn describes_origins() {
        let file = Source::File {
            path: "runs/a.toml".into(),
        };
        assert_eq!(file.describe(Key::Mem), "`mem` in runs/a.toml");
        assert_eq!(Source::Flag.describe(Key::Mem), "--mem");
        assert_eq!(
            Source::Derived {
                from: vec![Key::Gpus, Key::GpusPerNode]
            }
            .describe(Key::Nodes),
            "`nodes` (derived from gpus, gpus_per_node)"
        );
        let json = serde_json::to_string(&file).unwrap_or_default();
        assert_eq!(json, r#"{"kind":"file","path":"runs/a.toml"}"#);
    }
}
