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
    /// `--job-name`: also the experiment folder's name. Default: the job file's name, else
    /// the script's (`train` for `python train.py`), made free as `train-2`, `train-3`, …
    #[key(JobName, example = r#""swav""#)]
    #[arg(long, short = 'J', value_name = "NAME")]
    pub job_name: Option<String>,
    /// Launch mode: agent (default), srun (one task per GPU) or torchrun.
    #[key(Mode, example = r#""agent""#)]
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// Nodes.
    #[key(Nodes, example = "8")]
    #[arg(long, short = 'N', value_name = "N", value_parser = count())]
    pub nodes: Option<i64>,
    /// Nodes that stand by beyond `nodes` (agent mode): a lost, frozen or blamed node is
    /// replaced by one inside the same allocation instead of a requeue (default 0).
    #[key(SpareNodes, example = "1")]
    #[arg(long, value_name = "K", value_parser = count())]
    pub spare_nodes: Option<i64>,
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
    /// CPUs for each worker (training process), in every mode. herd makes it SLURM's
    /// --cpus-per-task: × the workers per node in agent and torchrun mode (one task per
    /// node), as it is in srun mode (one task per worker). Give this or --cpus-per-task, not both.
    #[key(CpusPerWorker, example = "5")]
    #[arg(long, value_name = "N", value_parser = count())]
    pub cpus_per_worker: Option<i64>,
    /// SLURM's CPUs per task: the whole node's in agent and torchrun mode (one task per
    /// node, its workers share them), each worker's in srun mode. --cpus-per-worker says
    /// CPUs per worker in every mode.
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
    /// Requeues of the job per cause (time limit, preemption, node failure, the job's own
    /// requeue), each resuming from the newest checkpoint (default 3; 0: never requeue).
    #[key(MaxRequeues, example = "10")]
    #[arg(long, value_name = "N", value_parser = count())]
    pub max_requeues: Option<i64>,
    /// Seconds before the time limit at which herd stops the workers (default 120, at most a
    /// quarter of the time limit).
    #[key(WarnBefore, example = "300")]
    #[arg(long, value_name = "SECONDS", value_parser = count())]
    pub warn_before: Option<i64>,
    /// The signal asking every worker to checkpoint and exit (default USR1).
    #[key(StopSignal, example = r#""USR2""#)]
    #[arg(long, value_name = "SIGNAL")]
    pub stop_signal: Option<String>,
    /// Seconds the workers have, after the stop signal, to checkpoint and exit (default 60, at
    /// most half of `warn_before`).
    #[key(StopGrace, example = "120")]
    #[arg(long, value_name = "SECONDS", value_parser = count())]
    pub stop_grace: Option<i64>,
    /// Seconds without progress of any rank that make a hang (default 0: no watchdog), or
    /// `auto`: each rank's own, from the pace of its progress.
    #[key(HangTimeout, example = "600")]
    #[arg(long, value_name = "SECONDS|auto", value_parser = count_or_text)]
    pub hang_timeout: Option<TextOrNumber>,
    /// Seconds a rank may be silent after it starts, before its first progress, without
    /// counting toward a hang (default 1800).
    #[key(StartTimeout, example = "3600")]
    #[arg(long, value_name = "SECONDS", value_parser = count())]
    pub start_timeout: Option<i64>,
    /// What a hang does: `fail` the job (default) or `restart` its workers.
    #[key(OnHang, example = r#""restart""#)]
    #[arg(long, value_name = "fail|restart")]
    pub on_hang: Option<String>,
    /// Check each node before each attempt (the worker's Python finds torch, its GPUs, its
    /// log and checkpoint folders, the master's port) and blame a node that fails: `on`
    /// (default) or `off`.
    #[key(Preflight, example = r#""off""#)]
    #[arg(long, value_name = "on|off")]
    pub preflight: Option<String>,
    /// Once an attempt trains, start the next attempt's Python workers ahead with their
    /// modules imported, so a restart skips its imports: `on` (default) or `off`.
    #[key(Warm, example = r#""off""#)]
    #[arg(long, value_name = "on|off")]
    pub warm: Option<String>,
    /// How the agents read training metrics from the workers' lines: `auto` (default),
    /// `json`, `kv`, `torchtitan`, `deepspeed`, `megatron`, `swav`, `off`, or `regex:RE`.
    #[key(Metrics, example = r#""megatron""#)]
    #[arg(long, value_name = "FORMAT")]
    pub metrics: Option<String>,
    /// Leave out the nodes your record of bad nodes (`herd nodes`) blames within this long:
    /// seconds, or `30m`, `24h`, `7d` (default 24h; 0: off).
    #[key(AvoidBadNodes, example = r#""12h""#)]
    #[arg(long, value_name = "DURATION", value_parser = text)]
    pub avoid_bad_nodes: Option<TextOrNumber>,
    /// Run each worker inside this container image, at the same absolute path on every
    /// node: a folder or a SquashFS file (Charliecloud), a SIF file (Apptainer), a folder
    /// (Podman), a SquashFS file (Pyxis); or an image name: in each node's Podman store, or
    /// an enroot URI (Pyxis).
    #[key(Container, example = r#""/shared/images/train.sqfs""#)]
    #[arg(long, value_name = "IMAGE")]
    pub container: Option<String>,
    /// The runtime that starts the image: `charliecloud`, `apptainer`, `podman` or `pyxis`
    /// (default: podman for an image name, else the first of the four each node has).
    #[key(ContainerRuntime, example = r#""charliecloud""#)]
    #[arg(long, value_name = "RUNTIME")]
    pub container_runtime: Option<String>,
    /// Host folders mounted inside the image beside the job's own, as Pyxis writes them:
    /// `SRC[:DST[:ro]],…`.
    #[key(ContainerMounts, example = r#""/data:/data:ro""#)]
    #[arg(long, value_name = "MOUNTS")]
    pub container_mounts: Option<String>,
}

/// A count flag (`--nodes 8`): parsed as the `u32` it must be, so clap names the flag when
/// it is not one, and held as the job file's `i64`, so [`crate::resolve()`] checks both
/// alike.
fn count() -> impl TypedValueParser<Value = i64> {
    clap::value_parser!(u32).map(i64::from)
}

/// A flag that is a count or a word (`--hang-timeout 600`, `--hang-timeout auto`): a
/// whole number as the job file's number, anything else as its text, so
/// [`crate::resolve()`] checks both alike.
fn count_or_text(s: &str) -> Result<TextOrNumber, std::convert::Infallible> {
    Ok(match s.parse::<u32>() {
        Ok(n) => TextOrNumber::Number(n.into()),
        Err(_) => TextOrNumber::Text(s.to_owned()),
    })
}

/// A `--mem`, `--time` or `--avoid-bad-nodes` flag: the text, parsed by [`crate::resolve()`] like a job file's.
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

/// A job file that sets every key to its example (the command's `{DATA}` wants
/// `--param DATA=…`).
#[cfg(test)]
pub(crate) fn every_key_job_file() -> String {
    Key::ALL
        .iter()
        .map(|k| format!("{} = {}\n", k.name(), k.example()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's view of the flags: what `herd submit --help` lists.
    fn flag_args() -> clap::Command {
        <JobKeys as clap::Args>::augment_args(clap::Command::new("herd"))
    }

    fn arg_of(cmd: &clap::Command, key: Key) -> &clap::Arg {
        cmd.get_arguments()
            .find(|a| a.get_id() == key.name())
            .unwrap_or_else(|| panic!("`{key}` has no flag"))
    }

    #[test]
    fn every_key_has_one_name_and_one_flag() {
        let mut names: Vec<&str> = Key::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Key::ALL.len());
        let mut flags: Vec<&str> = Key::ALL.iter().map(|k| k.flag()).collect();
        flags.sort_unstable();
        flags.dedup();
        assert_eq!(flags.len(), Key::ALL.len());
        let cmd = flag_args();
        for k in Key::ALL {
            assert!(k.flag().starts_with("--"), "{k}");
            let json = serde_json::to_string(&k).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", k.name()));
            let arg = arg_of(&cmd, k);
            assert!(arg.get_help().is_some(), "`{k}` has no --help line");
            match arg.get_long() {
                Some(long) => assert_eq!(k.flag(), format!("--{long}")),
                None => assert!(k == Key::Command && arg.is_last_set(), "{k}"),
            }
        }
        // Every other flag only spells a key's value: `--no-requeue` is `requeue = false`.
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if Key::ALL.iter().any(|k| k.name() == id) {
                continue;
            }
            let negated = id
                .strip_prefix("no_")
                .unwrap_or_else(|| panic!("flag {id} is no key"));
            let key = Key::ALL.iter().find(|k| k.name() == negated);
            assert!(key.is_some(), "flag {id} negates no key");
        }
    }

    /// `key = example` for `key`, as TOML.
    fn example_value(key: Key) -> toml::Value {
        let table: toml::Table = toml::from_str(&format!("v = {}", key.example()))
            .unwrap_or_else(|e| panic!("example of `{key}`: {e}"));
        table.get("v").cloned().unwrap_or_else(|| panic!("{key}"))
    }

    /// The example of `key` as `herd submit` arguments: `--nodes=8`, `--requeue`, one
    /// `--exclude=GLOB` per list entry, `-- WORDS…` for the command.
    fn example_flags(key: Key) -> Vec<String> {
        let words: Vec<String> = match example_value(key) {
            toml::Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect(),
            toml::Value::String(s) => vec![s],
            toml::Value::Boolean(true) => return vec![key.flag().to_owned()],
            other => vec![other.to_string()],
        };
        if key == Key::Command {
            return std::iter::once("--".to_owned()).chain(words).collect();
        }
        words
            .iter()
            .map(|w| format!("{}={w}", key.flag()))
            .collect()
    }

    /// The same definition reads a job file and the flags alike: every key's example, given
    /// as flags, parses to what it parses to in a job file.
    #[test]
    fn flags_and_job_file_parse_every_key_alike() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            plan: PlanArgs,
        }
        let file: JobKeys = toml::from_str(&every_key_job_file()).unwrap_or_else(|e| panic!("{e}"));
        // The command goes last: `--` ends the flags.
        let mut keys = Key::ALL.to_vec();
        keys.sort_by_key(|k| *k == Key::Command);
        let argv: Vec<String> = std::iter::once("herd".to_owned())
            .chain(keys.into_iter().flat_map(example_flags))
            .collect();
        let cli = <Cli as clap::Parser>::try_parse_from(&argv)
            .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
        assert_eq!(cli.plan.flags, file, "{argv:?}");
        assert_eq!(cli.plan.job, None);
    }

    /// The keys table in docs/submit.md, made from the definition.
    fn keys_table() -> String {
        let cmd = flag_args();
        let mut table = String::from(
            "| key | flags | example | what it sets (the flag's `--help`) |\n|---|---|---|---|\n",
        );
        for key in Key::ALL {
            let arg = arg_of(&cmd, key);
            let mut flags = vec![key.flag().to_owned()];
            flags.extend(arg.get_short().map(|s| format!("-{s}")));
            let aliases = arg.get_all_aliases().unwrap_or_default();
            flags.extend(aliases.iter().map(|a| format!("--{a}")));
            let no = format!("no_{}", key.name());
            let negation = cmd.get_arguments().find(|a| a.get_id() == no.as_str());
            flags.extend(
                negation
                    .and_then(|a| a.get_long())
                    .map(|l| format!("--{l}")),
            );
            let flags: Vec<String> = flags.iter().map(|f| format!("`{f}`")).collect();
            let cells = [
                format!("`{}`", key.name()),
                flags.join(", "),
                format!("`{} = {}`", key.name(), key.example()),
                arg.get_help().map(|h| h.to_string()).unwrap_or_default(),
            ];
            // A `|` in a cell, even in code, must be escaped in a Markdown table.
            let cells = cells.map(|c| c.replace('|', "\\|"));
            table.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        table
    }

    /// The cells of a Markdown table row (`|` escaped as `\|` stays in its cell).
    fn cells(row: &str) -> Vec<String> {
        let row = row.trim().replace("\\|", "\u{0}");
        let inner = row.strip_prefix('|').and_then(|r| r.strip_suffix('|'));
        inner
            .unwrap_or(&row)
            .split('|')
            .map(|c| c.trim().replace('\u{0}', "|"))
            .collect()
    }

    /// docs/submit.md's keys table lists exactly the keys, in order, each with its flags,
    /// example and help as the definition has them. `HERD_UPDATE_DOCS=1` rewrites it.
    #[test]
    fn docs_table_lists_every_key() {
        let path = "docs/submit.md";
        let want = keys_table();
        let Some(table) = herd_testbed::docs::table_in("submit.md", "keys table", &want) else {
            return;
        };
        let rows: Vec<Vec<String>> = table.lines().map(cells).collect();
        assert!(rows.len() > 2, "{path}: no table between the markers");
        assert_eq!(rows[0][0], "key", "{path}: the first column is the key");
        let listed: Vec<&str> = rows[2..].iter().map(|r| r[0].trim_matches('`')).collect();
        let names: Vec<&str> = Key::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(
            listed, names,
            "{path}: the table must list exactly the keys, in order"
        );
        for (row, key) in rows[2..].iter().zip(Key::ALL) {
            assert!(
                row[1].contains(&format!("`{}`", key.flag())),
                "{path}: `{key}`'s flag"
            );
        }
        assert!(
            table == want,
            "{path}: the keys table differs from the definition; rewrite it with \
             `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-plan docs_table`, or paste:\n{want}"
        );
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
