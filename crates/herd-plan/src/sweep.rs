//! Sweeps: one job run over a grid of values (docs/sweeps.md). Pure: the spec from
//! `--sweep KEY=V1,V2,…` flags and a `--sweep-file` ([`SweepFile`]), its runs
//! ([`SweepSpec::runs`]) with their names, the `{KEY}` placeholders of the worker command
//! ([`check_command`], [`substitute`]), the keys named after plan keys that set each
//! run's plan ([`plan_key`], [`check_plan_keys`], [`run_flags`]) and the grid table
//! `--dry-run` prints ([`grid_table`]).
//!
//! ```
//! use herd_plan::sweep::{substitute, SweepSpec};
//!
//! let spec = SweepSpec::build(&["lr=0.1,0.01".into(), "seed=1,2".into()], None)?;
//! let runs = spec.runs()?;
//! assert_eq!(runs.len(), 4);
//! assert_eq!(runs[1].name, "lr=0.1,seed=2");
//! let cmd = vec!["python".to_owned(), "train.py".into(), "--lr={lr}".into()];
//! assert_eq!(substitute(&cmd, &runs[2].values)[2], "--lr=0.01");
//! # Ok::<(), herd_plan::sweep::SweepError>(())
//! ```
//!
//! Every check collects all it finds ([`SweepError::problems`]), each naming what to
//! change: a key that is no identifier, a key given twice, a key without values or with an
//! empty value, a value with a control character, duplicate runs, more than [`MAX_RUNS`]
//! runs, runs that give different keys, a `{NAME}` in the command that is no sweep key
//! (nor a job-file param), a key whose `{KEY}` the command never uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::keys::{JobKeys, Key};

/// The most runs one sweep may have.
pub const MAX_RUNS: usize = 1000;

/// The longest run name, in bytes (a longer one is cut and ends in `-<index>`).
pub const MAX_RUN_NAME_BYTES: usize = 120;

/// Why a sweep cannot be made: every problem found, each naming what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", problems.join("\n"))]
pub struct SweepError {
    /// Every problem, in the order found.
    pub problems: Vec<String>,
}

impl SweepError {
    fn one(problem: String) -> SweepError {
        SweepError {
            problems: vec![problem],
        }
    }
}

/// A sweep file (`--sweep-file FILE`, TOML): a `[grid]` table of key → array of values,
/// and/or `[[runs]]` tables, each an explicit run giving every key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepFile {
    /// The grid's keys with their values as text, in the file's order.
    pub grid: Vec<(String, Vec<String>)>,
    /// The explicit runs: each key with its value as text, in the file's order.
    pub runs: Vec<Vec<(String, String)>>,
}

/// A value of the file as text: strings as written, integers and floats as TOML reads
/// them (`1_000` → `1000`, `3e-4` → `0.0003`), booleans `true`/`false`.
fn text_of(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(format!("{f:?}")),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The keys of the file's `[grid]` (`run` `None`) or of its run `run`, in the order the
/// file writes them (TOML tables are read sorted).
fn file_order(text: &str, table: &toml::Table, run: Option<usize>) -> Vec<String> {
    let mut keys: Vec<String> = table.keys().cloned().collect();
    let Ok(doc) = toml::de::DeTable::parse(text) else {
        return keys;
    };
    let doc = doc.get_ref();
    let found = match run {
        None => doc.get("grid").and_then(|v| v.get_ref().as_table()),
        Some(i) => doc
            .get("runs")
            .and_then(|v| v.get_ref().as_array())
            .and_then(|a| a.get(i))
            .and_then(|v| v.get_ref().as_table()),
    };
    let Some(found) = found else {
        return keys;
    };
    let at: BTreeMap<String, usize> = found
        .iter()
        .map(|(k, _)| (k.get_ref().to_string(), k.span().start))
        .collect();
    keys.sort_by_key(|k| at.get(k).copied().unwrap_or(usize::MAX));
    keys
}

impl SweepFile {
    /// Parses a sweep file's `text`; `path` names it in messages.
    pub fn parse(text: &str, path: &Path) -> Result<SweepFile, SweepError> {
        let shown = path.display();
        let doc: toml::Table = toml::from_str(text)
            .map_err(|e| SweepError::one(format!("{shown}: {}", e.to_string().trim_end())))?;
        let mut problems = Vec::new();
        let mut file = SweepFile::default();
        for key in doc.keys() {
            if key != "grid" && key != "runs" {
                problems.push(format!(
                    "{shown}: unknown key `{key}`: a sweep file has a `[grid]` table and `[[runs]]` tables"
                ));
            }
        }
        match doc.get("grid") {
            None => {}
            Some(toml::Value::Table(grid)) => {
                for key in file_order(text, grid, None) {
                    let values = match &grid[&key] {
                        toml::Value::Array(a) => a,
                        other => {
                            problems.push(format!(
                                "{shown}: grid key `{key}` is a {}, not an array of values: write `{key} = [1, 2]`",
                                other.type_str()
                            ));
                            continue;
                        }
                    };
                    let mut texts = Vec::new();
                    for v in values {
                        match text_of(v) {
                            Some(t) => texts.push(t),
                            None => problems.push(format!(
                                "{shown}: grid key `{key}` has a {} value: use strings, integers, floats or booleans",
                                v.type_str()
                            )),
                        }
                    }
                    file.grid.push((key, texts));
                }
            }
            Some(other) => problems.push(format!(
                "{shown}: `grid` is a {}, not a table: write `[grid]` with one `KEY = [values]` a line",
                other.type_str()
            )),
        }
        match doc.get("runs") {
            None => {}
            Some(toml::Value::Array(runs)) => {
                for (i, run) in runs.iter().enumerate() {
                    let Some(table) = run.as_table() else {
                        problems.push(format!(
                            "{shown}: run {} is a {}, not a table: write each run as `[[runs]]` with its keys",
                            i + 1,
                            run.type_str()
                        ));
                        continue;
                    };
                    let mut pairs = Vec::new();
                    for key in file_order(text, table, Some(i)) {
                        match text_of(&table[&key]) {
                            Some(t) => pairs.push((key, t)),
                            None => problems.push(format!(
                                "{shown}: run {} gives `{key}` a {}: use a string, integer, float or boolean",
                                i + 1,
                                table[&key].type_str()
                            )),
                        }
                    }
                    file.runs.push(pairs);
                }
            }
            Some(other) => problems.push(format!(
                "{shown}: `runs` is a {}: write each run as a `[[runs]]` table",
                other.type_str()
            )),
        }
        if problems.is_empty() {
            Ok(file)
        } else {
            Err(SweepError { problems })
        }
    }
}

/// Whether `key` is a sweep key: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A value's problem, if any: empty, or a control character (NUL included).
fn value_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("an empty value".to_owned());
    }
    value.chars().find(|c| c.is_control()).map(|c| {
        format!(
            "a value with the control character U+{:04X} ({:?})",
            c as u32,
            value.escape_debug().to_string()
        )
    })
}

/// One run of a sweep: its index (the array task's id), its name (its folder's) and its
/// values in key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepRunSpec {
    /// Its index, from 0: the SLURM array task id.
    pub index: usize,
    /// Its name: `k=v,k=v` made safe ([`run_names`]).
    pub name: String,
    /// Each key with its value, in key order.
    pub values: Vec<(String, String)>,
}

/// A checked sweep: its keys in order and every run's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepSpec {
    keys: Vec<String>,
    runs: Vec<Vec<String>>,
}

impl SweepSpec {
    /// The sweep of `--sweep KEY=V1,V2,…` `flags` and the sweep file: the grid is the
    /// product of the file's grid keys then the flags' keys, in that order, the first
    /// varying slowest; then the file's explicit runs. Every problem is collected.
    pub fn build(flags: &[String], file: Option<&SweepFile>) -> Result<SweepSpec, SweepError> {
        let mut problems = Vec::new();
        let mut grid: Vec<(String, Vec<String>, &'static str)> = Vec::new();
        for (key, values) in file.map(|f| f.grid.as_slice()).unwrap_or_default() {
            grid.push((key.clone(), values.clone(), "the sweep file's [grid]"));
        }
        for arg in flags {
            let Some((key, values)) = arg.split_once('=') else {
                problems.push(format!(
                    "--sweep {arg:?}: not KEY=V1,V2,…: write e.g. `--sweep lr=0.1,0.01`"
                ));
                continue;
            };
            let values: Vec<String> = if values.is_empty() {
                Vec::new()
            } else {
                values.split(',').map(str::to_owned).collect()
            };
            grid.push((key.to_owned(), values, "--sweep"));
        }
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, values, from) in &grid {
            if !is_key(key) {
                problems.push(format!(
                    "{from}: `{}` is not a sweep key: use letters, digits and `_`, not starting with a digit",
                    key.escape_debug()
                ));
            }
            if let Some(first) = seen.insert(key, from) {
                problems.push(if first == *from {
                    format!("{from}: key `{key}` is given twice: give all its values once (`{key}=A,B`)")
                } else {
                    format!("key `{key}` is given both in {first} and by {from}: keep one")
                });
            }
            if values.is_empty() {
                problems.push(format!(
                    "{from}: key `{key}` has no values: give at least one (`{key}=A,B`)"
                ));
            }
            for v in values {
                if let Some(p) = value_problem(v) {
                    problems.push(format!(
                        "{from}: key `{key}` has {p}: remove it (values are split on `,`)"
                    ));
                }
            }
            let distinct: BTreeSet<&String> = values.iter().collect();
            if distinct.len() < values.len() {
                problems.push(format!(
                    "{from}: key `{key}` has a value twice: give each once"
                ));
            }
        }
        let mut keys: Vec<String> = grid.iter().map(|(k, _, _)| k.clone()).collect();
        let explicit = file.map(|f| f.runs.as_slice()).unwrap_or_default();
        if keys.is_empty() {
            if let Some(first) = explicit.first() {
                keys = first.iter().map(|(k, _)| k.clone()).collect();
                for k in &keys {
                    if !is_key(k) {
                        problems.push(format!(
                            "the sweep file's [[runs]]: `{}` is not a sweep key: use letters, digits and `_`, not starting with a digit",
                            k.escape_debug()
                        ));
                    }
                }
            }
        }
        if keys.is_empty() {
            problems.push(
                "the sweep has no keys: give `--sweep KEY=V1,V2`, or a sweep file with a [grid] or [[runs]]"
                    .to_owned(),
            );
        }

        // The grid's product, first key slowest; then the explicit runs.
        let mut runs: Vec<Vec<String>> = Vec::new();
        let sizes: Vec<usize> = grid.iter().map(|(_, v, _)| v.len()).collect();
        let total = sizes
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n))
            .unwrap_or(usize::MAX);
        let total_all = if grid.is_empty() { 0 } else { total }.saturating_add(explicit.len());
        if total_all > MAX_RUNS {
            problems.push(format!(
                "the sweep has {} runs, more than {MAX_RUNS}: give fewer values",
                if total == usize::MAX {
                    "too many".to_owned()
                } else {
                    total_all.to_string()
                }
            ));
        } else if !grid.is_empty() && total > 0 {
            for n in 0..total {
                let mut rest = n;
                let mut run = vec![String::new(); grid.len()];
                for (i, (_, values, _)) in grid.iter().enumerate().rev() {
                    run[i] = values[rest % values.len()].clone();
                    rest /= values.len();
                }
                runs.push(run);
            }
        }
        let want: BTreeSet<&String> = keys.iter().collect();
        for (i, run) in explicit.iter().enumerate() {
            let given: BTreeSet<&String> = run.iter().map(|(k, _)| k).collect();
            if given != want {
                let missing: Vec<&str> = want.difference(&given).map(|k| k.as_str()).collect();
                let extra: Vec<&str> = given.difference(&want).map(|k| k.as_str()).collect();
                let mut what = Vec::new();
                if !missing.is_empty() {
                    what.push(format!("lacks {}", missing.join(", ")));
                }
                if !extra.is_empty() {
                    what.push(format!("has {} besides", extra.join(", ")));
                }
                problems.push(format!(
                    "the sweep file's run {} {}: every run gives the same keys ({})",
                    i + 1,
                    what.join(" and "),
                    keys.join(", ")
                ));
                continue;
            }
            let mut values = Vec::new();
            for key in &keys {
                let v = run
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default();
                if let Some(p) = value_problem(&v) {
                    problems.push(format!(
                        "the sweep file's run {} gives `{key}` {p}: change it",
                        i + 1
                    ));
                }
                values.push(v);
            }
            runs.push(values);
        }
        let mut first_of: BTreeMap<&Vec<String>, usize> = BTreeMap::new();
        for (i, run) in runs.iter().enumerate() {
            if let Some(first) = first_of.insert(run, i) {
                let shown: Vec<String> = keys
                    .iter()
                    .zip(run)
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                problems.push(format!(
                    "runs {first} and {i} are the same ({}): drop one",
                    shown.join(",")
                ));
                first_of.insert(run, first);
            }
        }
        if problems.is_empty() {
            Ok(SweepSpec { keys, runs })
        } else {
            Err(SweepError { problems })
        }
    }

    /// The keys, in order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// How many runs.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether there is no run (a built spec always has one).
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Every run with its index, name and values. A name that is not a usable folder name
    /// (which the naming rules should make impossible) is an error.
    pub fn runs(&self) -> Result<Vec<SweepRunSpec>, SweepError> {
        let values: Vec<Vec<(String, String)>> = self
            .runs
            .iter()
            .map(|run| self.keys.iter().cloned().zip(run.iter().cloned()).collect())
            .collect();
        let names = run_names(&values);
        let mut problems = Vec::new();
        for name in &names {
            if let Err(e) = herd_exp::validate_name(name) {
                problems.push(format!("run name: {e}"));
            }
        }
        if !problems.is_empty() {
            return Err(SweepError { problems });
        }
        Ok(values
            .into_iter()
            .zip(names)
            .enumerate()
            .map(|(index, (values, name))| SweepRunSpec {
                index,
                name,
                values,
            })
            .collect())
    }
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `base` with `-<index>` at its end, `base` cut so the whole is at most
/// [`MAX_RUN_NAME_BYTES`].
fn suffixed(base: &str, index: usize) -> String {
    let suffix = format!("-{index}");
    format!(
        "{}{suffix}",
        cut(base, MAX_RUN_NAME_BYTES.saturating_sub(suffix.len()))
    )
}

/// Each run's name, from its values: `k=v,k=v` in key order, every character outside
/// `[A-Za-z0-9._+=,-]` made `_`; one longer than [`MAX_RUN_NAME_BYTES`] is cut and ends in
/// `-<index>`; names that are then the same end in `-<index>` (their run's index), so
/// every name is unique.
pub fn run_names(runs: &[Vec<(String, String)>]) -> Vec<String> {
    let mut names: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, values)| {
            let raw: String = values
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            let safe: String = raw
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "._+=,-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if safe.len() > MAX_RUN_NAME_BYTES {
                suffixed(&safe, i)
            } else {
                safe
            }
        })
        .collect();
    // A suffix makes a name unique among those that were the same; it may meet another
    // run's own name, so again until none is the same. Each round appends indexes, which
    // differ between runs; past a few rounds, `run-<index>` (no run's own name: those hold
    // `=`).
    for round in 0..8 {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &names {
            *count.entry(n.as_str()).or_default() += 1;
        }
        let same: Vec<usize> = (0..names.len())
            .filter(|&i| count[names[i].as_str()] > 1)
            .collect();
        if same.is_empty() {
            break;
        }
        for i in same {
            names[i] = if round < 7 {
                suffixed(&names[i], i)
            } else {
                format!("run-{i}")
            };
        }
    }
    names
}

/// The `{NAME}` placeholders of `word`, in order: `{` + an identifier + `}`; other braces
/// (JSON, `${VAR}`'s braces are `{VAR}` too) count only when they hold an identifier.
pub fn placeholders(word: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = word;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_key(&after[..close]) => {
                found.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    found
}

/// `words` with every `{KEY}` of `values`' keys replaced by its value, in one pass (a
/// value that holds `{other}` is not read again); other braces are left alone.
pub fn substitute(words: &[String], values: &[(String, String)]) -> Vec<String> {
    words
        .iter()
        .map(|word| {
            let mut out = String::with_capacity(word.len());
            let mut rest = word.as_str();
            while let Some(open) = rest.find('{') {
                out.push_str(&rest[..open]);
                let after = &rest[open + 1..];
                let value = after.find('}').and_then(|close| {
                    let name = &after[..close];
                    values
                        .iter()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| (v, close))
                });
                match value {
                    Some((v, close)) => {
                        out.push_str(v);
                        rest = &after[close + 1..];
                    }
                    None => {
                        out.push('{');
                        rest = after;
                    }
                }
            }
            out.push_str(rest);
            out
        })
        .collect()
}

/// The plan keys a sweep cannot set per run: the sweep's name and folder (`job_name`,
/// `exp_root`), what the runs' commands are made of (`command`, `params`), its dependency
/// (`after`: one for the whole sweep) and the code snapshot's globs (`exclude`).
pub const UNSWEPT_KEYS: [Key; 6] = [
    Key::JobName,
    Key::Command,
    Key::Params,
    Key::After,
    Key::ExpRoot,
    Key::Exclude,
];

/// `herd submit`'s own sweep flags, which no sweep key may be named after.
pub const SWEEP_FLAGS: [&str; 3] = ["sweep", "sweep_file", "max_parallel"];

/// The plan key sweep key `key` names (`nodes`, `gpus_per_node`: [`Key::name`]), if any:
/// such a key sets that key of each run's plan.
pub fn plan_key(key: &str) -> Option<Key> {
    Key::ALL.into_iter().find(|k| k.name() == key)
}

/// What is wrong with sweeping `keys` as plan keys, given the keys `flags` set: a key that
/// cannot be swept ([`UNSWEPT_KEYS`], [`SWEEP_FLAGS`]), a plan key also given as a flag
/// (`--nodes 2 --sweep nodes=1,2`).
pub fn check_plan_keys(keys: &[String], flags: &JobKeys) -> Vec<String> {
    let mut problems = Vec::new();
    // The keys the flags set: a table of them (`None` is left out).
    let given = toml::Table::try_from(flags).unwrap_or_default();
    for key in keys {
        if SWEEP_FLAGS.contains(&key.as_str()) {
            problems.push(format!(
                "sweep key `{key}` is the name of the sweep's own flag --{}: name the key otherwise",
                key.replace('_', "-")
            ));
            continue;
        }
        let Some(plan) = plan_key(key) else {
            continue;
        };
        if UNSWEPT_KEYS.contains(&plan) {
            problems.push(format!(
                "plan key `{key}` cannot be swept ({}): a sweep's runs share it; name the sweep key otherwise if it is the command's alone",
                match plan {
                    Key::JobName => "it names the sweep and its folder",
                    Key::ExpRoot => "the sweep's runs live in its folder",
                    Key::Command => "the runs' commands are made from it by {KEY} placeholders",
                    Key::Params => "give each param with --param; sweep the command's {KEY} instead",
                    Key::After => "the whole sweep waits for the same jobs",
                    _ => "the code snapshot is the same for every run",
                }
            ));
            continue;
        }
        let set = given.contains_key(key.as_str()) || (plan == Key::Requeue && flags.no_requeue);
        if set {
            let flag = if plan == Key::Requeue && flags.no_requeue {
                "--no-requeue"
            } else {
                plan.flag()
            };
            problems.push(format!(
                "`{key}` is given both by {flag} and by the sweep (`{key}=…`): keep one"
            ));
        }
        // `cpus_per_worker` and `cpus_per_task` ask for the same CPUs: one layer (a run's
        // flags, which the sweep's values join) may set one of them.
        let other = match plan {
            Key::CpusPerWorker => Key::CpusPerTask,
            Key::CpusPerTask => Key::CpusPerWorker,
            _ => continue,
        };
        if given.contains_key(other.name()) {
            problems.push(format!(
                "`{key}` is swept and {} is given: they are two ways to ask for the same CPUs (cpus_per_worker for each worker, cpus_per_task SLURM's per task); keep one",
                other.flag()
            ));
        } else if plan == Key::CpusPerWorker && keys.iter().any(|k| k == other.name()) {
            problems.push(
                "`cpus_per_worker` and `cpus_per_task` are both swept: they are two ways to ask for the same CPUs (cpus_per_worker for each worker, cpus_per_task SLURM's per task); sweep one".to_owned(),
            );
        }
    }
    problems
}

/// The first line of clap's message, without its `error: `.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.strip_prefix("error: ").unwrap_or(line).to_owned()
}

/// `flags` with a run's plan keys set from its `values` (keys that are no plan key are
/// the command's alone and left out), each parsed as `herd submit --FLAG=VALUE` parses it
/// (`requeue`: `true` or `false`, as a job file gives it). As flags, they take precedence
/// over the job file and the profile. Every value's problem is returned.
pub fn run_flags(flags: &JobKeys, values: &[(String, String)]) -> Result<JobKeys, Vec<String>> {
    let mut problems = Vec::new();
    let mut argv = vec!["herd".to_owned()];
    let mut swept = Vec::new();
    let mut requeue = None;
    for (key, value) in values {
        let Some(plan) = plan_key(key) else {
            continue;
        };
        match plan {
            Key::Requeue => match value.as_str() {
                "true" => requeue = Some(true),
                "false" => requeue = Some(false),
                _ => problems.push(format!(
                    "sweep key `requeue`: `{value}` is neither true nor false"
                )),
            },
            _ => {
                argv.push(format!("{}={value}", plan.flag()));
                swept.push(key.as_str());
            }
        }
    }
    let cmd = <JobKeys as clap::Args>::augment_args(clap::Command::new("herd"));
    let parsed = cmd
        .try_get_matches_from(&argv)
        .and_then(|m| <JobKeys as clap::FromArgMatches>::from_arg_matches(&m));
    let parsed = match parsed {
        Ok(p) => p,
        Err(e) => {
            problems.push(format!(
                "sweep values {}: {}",
                argv[1..].join(" "),
                clap_message(&e)
            ));
            JobKeys::default()
        }
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    // The flags as a table of the keys they set, the run's parsed keys put over them.
    let mut out = toml::Table::try_from(flags).map_err(|e| vec![e.to_string()])?;
    let parsed = toml::Table::try_from(&parsed).map_err(|e| vec![e.to_string()])?;
    for key in swept {
        if let Some(v) = parsed.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    let mut run: JobKeys = toml::Value::Table(out)
        .try_into()
        .map_err(|e: toml::de::Error| vec![e.to_string()])?;
    run.no_requeue = flags.no_requeue;
    if let Some(r) = requeue {
        run.requeue = Some(r);
        run.no_requeue = false;
    }
    Ok(run)
}

/// What is wrong with the worker `command` for a sweep of `keys`, given the job file's
/// `params` (whose `{NAME}`s `--param` fills): a `{NAME}` that is neither, a key that is
/// also a param, a key the command never uses (its runs would be the same) unless it is a
/// plan key ([`plan_key`]), which sets its key of each run's plan.
pub fn check_command(command: &[String], keys: &[String], params: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let used: BTreeSet<&str> = command.iter().flat_map(|w| placeholders(w)).collect();
    for key in keys {
        if params.contains(key) {
            problems.push(format!(
                "`{key}` is both a sweep key and a param of the job file: rename the sweep key"
            ));
        }
    }
    for name in &used {
        if !keys.iter().any(|k| k == name) && !params.iter().any(|p| p == name) {
            problems.push(format!(
                "the command has `{{{name}}}`, which is no sweep key ({}){}: fix its name or add `--sweep {name}=…`",
                keys.join(", "),
                if params.is_empty() {
                    String::new()
                } else {
                    format!(" nor param ({})", params.join(", "))
                }
            ));
        }
    }
    for key in keys {
        // A plan key sets its key of each run's plan: the command need not name it.
        if !used.contains(key.as_str()) && plan_key(key).is_none() {
            problems.push(format!(
                "sweep key `{key}` appears nowhere in the command as `{{{key}}}`: its runs would be the same; use it (`--{key} {{{key}}}`) or drop it"
            ));
        }
    }
    problems
}

/// The grid as a table for `--dry-run`: columns `#`, `run`, then one per key, aligned;
/// one line each, ending in a newline.
pub fn grid_table(keys: &[String], runs: &[SweepRunSpec]) -> String {
    let mut rows: Vec<Vec<String>> = Vec::with_capacity(runs.len() + 1);
    let mut header = vec!["#".to_owned(), "run".to_owned()];
    header.extend(keys.iter().cloned());
    rows.push(header);
    for run in runs {
        let mut row = vec![run.index.to_string(), run.name.clone()];
        row.extend(run.values.iter().map(|(_, v)| v.clone()));
        rows.push(row);
    }
    let columns = rows[0].len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if c + 1 < row.len() {
                line.push_str(&" ".repeat(widths[c] - cell.chars().count()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests;
