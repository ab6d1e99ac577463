//! Resolution: flags, job file, cluster profile and herd's defaults merged into one
//! [`Plan`], every value checked, every key's origin recorded.
//!
//! Precedence, per key: a flag, else the job file, else the profile chosen by the login
//! host's name, else herd's default ([`crate::layers`]). Two lists add up instead:
//! `sbatch_args` (profile, then file, then flags) and `exclude` (herd's `*.out`, then
//! profile, file, flags). The command from the flags replaces the job file's whole command.
//! `cpus_per_worker` and `cpus_per_task` decide together: the highest layer that sets
//! either wins, replacing a lower layer's value of the other ([`crate::cpus`]).
//!
//! Resolution fails only on values that cannot make a plan (malformed, out of range,
//! unusable in a batch script) and reports all of them at once; a plan that is well-formed
//! but unwise (GPUs that do not divide, too little memory) resolves, and
//! [`crate::check()`] reports it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use herd_slurm::GpuBind;

use crate::cpus::resolve_cpus;
use crate::job::{JobFile, Profile};
use crate::keep::resolve_keep;
use crate::keys::{JobKeys, Key, Source};
use crate::launch::ContainerArgs;
use crate::layers::Layers;
use crate::names::{
    command_stem, job_name, sanitize_job_name, sbatch_arg, sbatch_safe, simple_name,
};
use crate::plan::{
    Mode, Plan, ResolveError, DEFAULT_AVOID_BAD_NODES, DEFAULT_EXCLUDE, DEFAULT_EXP_ROOT,
    MAX_ARG_BYTES, MAX_RANKS,
};
use crate::values::{non_negative, positive, window, Signal, TextOrNumber, ValueError};
use herd_slurm::{Memory, TimeLimit};

/// Split a `--param NAME=VALUE` argument (the value may contain `=`).
pub fn parse_param(arg: &str) -> Result<(String, String), ValueError> {
    match arg.split_once('=') {
        Some((name, value)) if valid_param_name(name) => Ok((name.to_owned(), value.to_owned())),
        _ => Err(ValueError {
            message: format!("`{arg}` is not NAME=VALUE with NAME made of letters, digits and `_`"),
        }),
    }
}

fn valid_param_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

/// Merge `flags`, the `job` file and the first of `profiles` whose `match` fits `host`
/// (the login host's name) into a checked [`Plan`].
///
/// Defaults: mode `agent`, 1 node, no GPUs, `max_restarts` 0, `exp_root` `herd-exp`,
/// `exclude` `*.out`, job name the job file's name (else the program's). When `gpus` (total)
/// is given without `nodes`, nodes are `gpus ÷ gpus_per_node` (rounded up; [`crate::check()`]
/// reports a remainder); without `gpus_per_node`, it is `gpus ÷ nodes`.
pub fn resolve(
    job: Option<&JobFile>,
    flags: &JobKeys,
    profiles: &[Profile],
    host: &str,
) -> Result<Plan, ResolveError> {
    let (mut l, profile) = Layers::new(job, flags, profiles, host);
    let mode = l.take_or(
        Key::Mode,
        |k| k.mode.as_deref(),
        |s: &str| s.parse::<Mode>(),
        Mode::Agent,
    );
    let size = size(&mut l);
    let max_restarts = l.take_or(
        Key::MaxRestarts,
        |k| k.max_restarts.as_ref(),
        |v: &i64| non_negative(*v),
        0,
    );
    let spare_nodes = l.take_or(
        Key::SpareNodes,
        |k| k.spare_nodes.as_ref(),
        |v: &i64| non_negative(*v),
        0,
    );
    let metrics = l.take_or(
        Key::Metrics,
        |k| k.metrics.as_deref(),
        |s: &str| {
            s.parse::<herd_metrics::Format>()
                .map_err(|e| ValueError::new(e.to_string()))
        },
        herd_metrics::Format::Auto,
    );
    let gpu_bind = l.take_or(
        Key::GpuBind,
        |k| k.gpu_bind.as_deref(),
        |s: &str| {
            s.parse::<GpuBind>()
                .map_err(|e| ValueError::new(e.to_string()))
        },
        GpuBind::All,
    );
    let sbatch = sbatch_keys(&mut l);
    let keep = resolve_keep(&mut l, mode, sbatch.time.as_ref(), sbatch.requeue);
    let exp_root = l.take_or(
        Key::ExpRoot,
        |k| k.exp_root.as_ref(),
        |p: &PathBuf| {
            if p.as_os_str().is_empty() {
                Err(ValueError::new(
                    "is empty: give the folder experiment folders are made in",
                ))
            } else {
                Ok(p.clone())
            }
        },
        PathBuf::from(DEFAULT_EXP_ROOT),
    );
    let avoid_bad_nodes = l.take_or(
        Key::AvoidBadNodes,
        |k| k.avoid_bad_nodes.as_ref(),
        window,
        DEFAULT_AVOID_BAD_NODES,
    );
    let container = container(&mut l);
    if container.image.is_some() && mode != Mode::Agent {
        let origin = l.origin(Key::Container);
        l.problem(
            Key::Container,
            origin,
            format!(
                "runs the workers through herd's agents, and `mode` is {mode}: use mode agent \
                 (the default) with a container"
            ),
        );
    }
    let (sbatch_args, exclude) = lists(&mut l);
    // The command, with params substituted when it comes from the job file.
    let (command, params) = resolve_command(&mut l, job, flags);
    let job_name = job_name_of(&mut l, job, &command);
    let workers = match mode {
        Mode::Srun => size.ntasks_per_node.or(size.gpus_per_node).unwrap_or(1),
        Mode::Agent | Mode::Torchrun => size.gpus_per_node.unwrap_or(1),
    };
    let cpus = resolve_cpus(&mut l, mode, workers, size.gpus_per_node);
    if u64::from(size.nodes) * u64::from(workers) > MAX_RANKS {
        let origin = l.origin(Key::Nodes);
        let nodes = size.nodes;
        l.problem(
            Key::Nodes,
            origin,
            format!(
                "{nodes} nodes × {workers} workers is more than herd's limit of {MAX_RANKS} workers"
            ),
        );
    }
    let sources = l.finish()?;
    Ok(Plan {
        job_name,
        mode,
        nodes: size.nodes,
        gpus: size.gpus,
        gpus_per_node: size.gpus_per_node,
        gpu_type: sbatch.gpu_type,
        gpu_bind,
        ntasks_per_node: size.ntasks_per_node,
        cpus_per_task: cpus.per_task,
        cpus_per_worker: cpus.per_worker,
        mem: sbatch.mem,
        time: sbatch.time,
        partition: sbatch.partition,
        constraint: sbatch.constraint,
        after: sbatch.after,
        requeue: sbatch.requeue,
        signal: sbatch.signal,
        command,
        params,
        sbatch_args,
        exp_root,
        exclude,
        max_restarts,
        spare_nodes,
        metrics,
        keep,
        avoid_bad_nodes,
        avoided_nodes: Vec::new(),
        container,
        profile: profile.map(|p| p.path.clone()),
        sources,
    })
}

/// How big the job is: nodes, GPUs and tasks.
struct Size {
    nodes: u32,
    gpus: Option<u32>,
    gpus_per_node: Option<u32>,
    ntasks_per_node: Option<u32>,
}

/// Nodes and GPUs per node (derived from the total where one is missing), and tasks.
fn size(l: &mut Layers<'_>) -> Size {
    let count = |v: &i64| positive(*v);
    let nodes_raw = l.take(Key::Nodes, |k| k.nodes.as_ref(), count);
    let gpus = l.take(Key::Gpus, |k| k.gpus.as_ref(), count);
    let gpn_raw = l.take(Key::GpusPerNode, |k| k.gpus_per_node.as_ref(), count);
    let ntasks_per_node = l.take(Key::NtasksPerNode, |k| k.ntasks_per_node.as_ref(), count);
    let derived = |from: &[Key]| Source::Derived {
        from: from.to_vec(),
    };
    let (nodes, gpus_per_node) = match (nodes_raw, gpus, gpn_raw) {
        (Some(n), _, Some(g)) => (n, Some(g)),
        (Some(n), Some(total), None) => {
            l.set_source(Key::GpusPerNode, derived(&[Key::Gpus, Key::Nodes]));
            (n, Some(total.div_ceil(n)))
        }
        (Some(n), None, None) => (n, None),
        (None, Some(total), Some(g)) => {
            l.set_source(Key::Nodes, derived(&[Key::Gpus, Key::GpusPerNode]));
            (total.div_ceil(g), Some(g))
        }
        (None, Some(total), None) => {
            l.set_source(Key::Nodes, Source::Default);
            l.set_source(Key::GpusPerNode, derived(&[Key::Gpus]));
            (1, Some(total))
        }
        (None, None, g) => {
            if l.first(|k| k.nodes.as_ref()).is_none() {
                l.set_source(Key::Nodes, Source::Default);
            }
            (1, g)
        }
    };
    Size {
        nodes,
        gpus,
        gpus_per_node,
        ntasks_per_node,
    }
}

/// The keys that become `#SBATCH` lines as they are.
struct SbatchKeys {
    gpu_type: Option<String>,
    partition: Option<String>,
    constraint: Option<String>,
    mem: Option<Memory>,
    time: Option<TimeLimit>,
    signal: Option<Signal>,
    requeue: Option<bool>,
    after: Vec<String>,
}

fn sbatch_keys(l: &mut Layers<'_>) -> SbatchKeys {
    SbatchKeys {
        gpu_type: l.take(
            Key::GpuType,
            |k| k.gpu_type.as_deref(),
            |s: &str| simple_name(s, "GPU type", false),
        ),
        partition: l.take(
            Key::Partition,
            |k| k.partition.as_deref(),
            |s: &str| simple_name(s, "partition name", true),
        ),
        constraint: l.take(
            Key::Constraint,
            |k| k.constraint.as_deref(),
            |s: &str| sbatch_safe(s, "constraint").map(|()| s.to_owned()),
        ),
        mem: l.take(
            Key::Mem,
            |k| k.mem.as_ref(),
            |v: &TextOrNumber| match v {
                TextOrNumber::Text(t) => t.parse::<Memory>().map_err(ValueError::from),
                TextOrNumber::Number(n) => Memory::from_number(*n).map_err(ValueError::from),
            },
        ),
        time: l.take(
            Key::Time,
            |k| k.time.as_ref(),
            |v: &TextOrNumber| match v {
                TextOrNumber::Text(t) => t.parse::<TimeLimit>().map_err(ValueError::from),
                TextOrNumber::Number(n) => TimeLimit::from_minutes(*n).map_err(ValueError::from),
            },
        ),
        signal: l.take(
            Key::Signal,
            |k| k.signal.as_deref(),
            |s: &str| s.parse::<Signal>(),
        ),
        // `--no-requeue` is the flags' spelling of `requeue = false`.
        requeue: l.take(
            Key::Requeue,
            |k| k.requeue.as_ref().or(k.no_requeue.then_some(&false)),
            |b: &bool| Ok(*b),
        ),
        after: l
            .take(
                Key::After,
                |k| k.after.as_ref(),
                |v: &Vec<String>| Ok(v.clone()),
            )
            .unwrap_or_default(),
    }
}

/// The lists that add up, profile first, then job file, then flags: the extra sbatch
/// options and the snapshot's exclude globs (herd's own first).
fn lists(l: &mut Layers<'_>) -> (Vec<String>, Vec<String>) {
    let mut sbatch_args = Vec::new();
    let mut exclude: Vec<String> = DEFAULT_EXCLUDE.iter().map(|s| s.to_string()).collect();
    let mut exclude_sources = vec![Source::Default];
    let mut sbatch_sources = Vec::new();
    for (keys, src) in l.bottom_up() {
        if let Some(args) = keys.sbatch_args {
            for a in &args {
                if let Err(e) = sbatch_arg(a) {
                    l.problem(Key::SbatchArgs, Some(src.clone()), e.message);
                }
            }
            sbatch_args.extend(args);
            sbatch_sources.push(src.clone());
        }
        if let Some(globs) = keys.exclude {
            for g in &globs {
                if g.starts_with('!') {
                    l.problem(
                        Key::Exclude,
                        Some(src.clone()),
                        format!(
                            "`{g}`: these globs only leave files out; `!` cannot bring one back"
                        ),
                    );
                } else if let Err(e) = globset::Glob::new(g) {
                    l.problem(
                        Key::Exclude,
                        Some(src.clone()),
                        format!("`{g}` is not a valid glob: {}", e.kind()),
                    );
                }
                if !exclude.contains(g) {
                    exclude.push(g.clone());
                }
            }
            exclude_sources.push(src);
        }
    }
    if !sbatch_sources.is_empty() {
        l.sources.insert(Key::SbatchArgs, sbatch_sources);
    }
    l.sources.insert(Key::Exclude, exclude_sources);
    (sbatch_args, exclude)
}

/// The job name: given, else the job file's name, else the command's script's
/// ([`command_stem`]). A default name is where `herd submit` starts looking for a free one.
fn job_name_of(l: &mut Layers<'_>, job: Option<&JobFile>, command: &[String]) -> String {
    match l.take(Key::JobName, |k| k.job_name.as_deref(), job_name) {
        Some(n) => n,
        None if l.first(|k| k.job_name.as_deref()).is_some() => String::new(),
        None => {
            l.set_source(Key::JobName, Source::Default);
            let base = job
                .and_then(|j| j.stem())
                .map(str::to_owned)
                .or_else(|| command_stem(command))
                .unwrap_or_else(|| "job".to_owned());
            sanitize_job_name(&base)
        }
    }
}

fn resolve_command(
    l: &mut Layers<'_>,
    job: Option<&JobFile>,
    flags: &JobKeys,
) -> (Vec<String>, BTreeMap<String, String>) {
    // The flags give params' values (`--param NAME=VALUE`), the job file their names.
    let mut given: BTreeMap<String, String> = BTreeMap::new();
    for arg in flags.params.iter().flatten() {
        let (name, value) = match parse_param(arg) {
            Ok(p) => p,
            Err(e) => {
                l.problem(Key::Params, Some(Source::Flag), e.message);
                continue;
            }
        };
        if given.insert(name.clone(), value).is_some() {
            l.problem(
                Key::Params,
                Some(Source::Flag),
                format!("`{name}` is given twice"),
            );
        }
    }
    let file_src = job.map(|j| Source::File {
        path: j.path.clone(),
    });
    let declared: Vec<String> = job.and_then(|j| j.keys.params.clone()).unwrap_or_default();
    for (i, name) in declared.iter().enumerate() {
        if !valid_param_name(name) {
            l.problem(
                Key::Params,
                file_src.clone(),
                format!("`{name}` is not a param name: use letters, digits and `_`"),
            );
        } else if declared[..i].contains(name) {
            l.problem(
                Key::Params,
                file_src.clone(),
                format!("`{name}` is declared twice"),
            );
        }
    }

    let (mut command, src) = match (&flags.command, job.and_then(|j| j.keys.command.as_ref())) {
        (Some(cmd), _) => {
            for name in given.keys() {
                l.problem(
                    Key::Params,
                    Some(Source::Flag),
                    format!(
                        "--param {name}: the command comes from after `--`, which takes no params (write the value into it)"
                    ),
                );
            }
            (cmd.clone(), Source::Flag)
        }
        (None, Some(cmd)) => {
            let src = file_src.clone().unwrap_or(Source::Default);
            for name in given.keys() {
                if !declared.contains(name) {
                    let known = if declared.is_empty() {
                        "it declares none".to_owned()
                    } else {
                        format!("it declares {}", declared.join(", "))
                    };
                    l.problem(
                        Key::Params,
                        Some(Source::Flag),
                        format!("--param {name}: the job file has no param `{name}` ({known})"),
                    );
                }
            }
            let mut cmd = cmd.clone();
            for name in &declared {
                let placeholder = format!("{{{name}}}");
                if !cmd.iter().any(|w| w.contains(&placeholder)) {
                    l.problem(
                        Key::Params,
                        file_src.clone(),
                        format!(
                            "`{name}` is declared but `{placeholder}` appears nowhere in `command`"
                        ),
                    );
                }
                match given.get(name) {
                    Some(value) => {
                        for w in &mut cmd {
                            *w = w.replace(&placeholder, value);
                        }
                    }
                    None => l.problem(
                        Key::Params,
                        file_src.clone(),
                        format!(
                            "the command needs a value for `{name}`: give --param {name}=VALUE"
                        ),
                    ),
                }
            }
            if !declared.is_empty() {
                l.set_source(Key::Params, Source::Flag);
            }
            (cmd, src)
        }
        (None, None) => {
            l.problem(
                Key::Command,
                None,
                "no command: set `command = [\"python\", \"train.py\"]` in the job file or give it after `--`",
            );
            return (Vec::new(), given);
        }
    };
    let mut ok = true;
    if command.is_empty() || command.first().is_some_and(|p| p.is_empty()) {
        l.problem(
            Key::Command,
            Some(src.clone()),
            "the command is empty: its first word is the program to run",
        );
        ok = false;
    } else if command.first().is_some_and(|p| p.starts_with('-')) {
        l.problem(
            Key::Command,
            Some(src.clone()),
            format!(
                "the program `{}` starts with `-`: the first word is the program, not an option",
                command[0]
            ),
        );
        ok = false;
    }
    for (i, w) in command.iter().enumerate() {
        if w.contains('\0') {
            l.problem(
                Key::Command,
                Some(src.clone()),
                format!(
                    "argument {} contains a NUL byte, which no program argument can hold",
                    i + 1
                ),
            );
            ok = false;
        } else if w.len() > MAX_ARG_BYTES {
            l.problem(
                Key::Command,
                Some(src.clone()),
                format!(
                    "argument {} is {} bytes, more than Linux passes to a program ({MAX_ARG_BYTES})",
                    i + 1,
                    w.len()
                ),
            );
            ok = false;
        }
    }
    if ok {
        l.set_source(Key::Command, src);
    } else {
        command.clear();
    }
    let used = if flags.command.is_some() {
        BTreeMap::new()
    } else {
        given
            .into_iter()
            .filter(|(k, _)| declared.contains(k))
            .collect()
    };
    (command, used)
}

#[cfg(test)]
mod tests;

/// `container`, `container_runtime` and `container_mounts`: the image must be an absolute
/// path (the workers start in the code snapshot); the runtime one herd can start workers
/// with; the mounts `SRC[:DST[:ro]],…`. A runtime or mounts without an image is refused.
fn container(l: &mut Layers) -> ContainerArgs {
    let image = l.take(
        Key::Container,
        |k| k.container.as_deref(),
        |s: &str| {
            herd_container::image_ref(s)
                .map(|()| s.to_owned())
                .map_err(ValueError::new)
        },
    );
    let runtime = l.take(
        Key::ContainerRuntime,
        |k| k.container_runtime.as_deref(),
        |s: &str| {
            s.parse::<herd_container::Runtime>()
                .map_err(ValueError::new)
        },
    );
    let mounts = l.take(
        Key::ContainerMounts,
        |k| k.container_mounts.as_deref(),
        |s: &str| s.parse::<herd_container::Mounts>().map_err(ValueError::new),
    );
    if image.is_none() {
        for (key, set) in [
            (Key::ContainerRuntime, runtime.is_some()),
            (Key::ContainerMounts, mounts.is_some()),
        ] {
            if set {
                let origin = l.origin(key);
                l.problem(
                    key,
                    origin,
                    "is set but `container` is not: give the image with `container` (--container IMAGE), or remove it".to_owned(),
                );
            }
        }
    }
    if let Some(image) = &image {
        if let Err(why) = herd_container::runtime_for(image, runtime) {
            let origin = l.origin(Key::ContainerRuntime);
            l.problem(Key::ContainerRuntime, origin, why);
        }
    }
    ContainerArgs {
        image,
        runtime,
        mounts,
    }
}
