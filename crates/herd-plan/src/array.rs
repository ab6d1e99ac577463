//! A sweep's batch script: one SLURM array job whose task `i` runs run `i`
//! (docs/sweeps.md). Its `#SBATCH` lines are the runs' own (which must be the same: one
//! array asks for one set of resources) with `--array` and the array's own output; its
//! body maps `SLURM_ARRAY_TASK_ID` to the run's folder with a `case` of single-quoted
//! paths, sends the task's output to the run's `logs/ARRAYID_TASK.out`/`.err` (appended, as
//! SLURM appends a single job's) and `exec`s `/bin/bash` on the run's own batch script,
//! which [`crate::render_script`] rendered as for a single job.

use std::path::Path;

use herd_exp::layout::{ExperimentDir, Stream, SweepDir};

use crate::quote::quote;
use crate::render::RenderError;

/// What the array script needs: the sweep folder, each of its runs' index, name and
/// rendered script, and `--max-parallel`.
#[derive(Debug, Clone, Copy)]
pub struct ArrayParams<'a> {
    /// The sweep folder (absolute): `<exp_root>/<name>`.
    pub sweep_dir: &'a Path,
    /// Each run the array runs: its index (its task id), its name (its folder inside the
    /// sweep folder) and its batch script, by index. One array's runs ask for the same
    /// resources; a sweep whose runs do not has one array per shape ([`shapes`]).
    pub runs: &'a [(u32, String, String)],
    /// At most this many tasks at once (`--array=…%P`).
    pub max_parallel: Option<u32>,
}

fn bad(message: String) -> RenderError {
    RenderError::BadValue {
        key: "sweep",
        message,
    }
}

/// The `#SBATCH` lines of a batch script, less `--output` and `--error` (each run writes
/// its own), in order.
fn header(script: &str) -> Vec<&str> {
    script
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("#SBATCH "))
        .filter(|l| !l.starts_with("#SBATCH --output=") && !l.starts_with("#SBATCH --error="))
        .collect()
}

/// A path as a UTF-8 string for the script (checked absolute).
fn text<'p>(path: &'p Path, what: &'static str) -> Result<&'p str, RenderError> {
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
    Ok(s)
}

/// `path` + `pattern` double-quoted for an `#SBATCH` line: `%` doubled, and the characters
/// such a line cannot carry refused.
fn sbatch_path(path: &str, pattern: &str) -> Result<String, RenderError> {
    if let Some(c) = path
        .chars()
        .find(|c| c.is_control() || matches!(c, '"' | '\\' | '#'))
    {
        return Err(RenderError::BadPath {
            what: "sweep folder",
            path: path.escape_debug().to_string(),
            why: format!(
                "contains {:?}, which an #SBATCH line cannot carry: choose another folder",
                c
            ),
        });
    }
    Ok(format!("\"{}/{pattern}\"", path.replace('%', "%%")))
}

/// The runs of a sweep grouped by resource shape: runs whose batch scripts have the same
/// `#SBATCH` lines (less `--output`/`--error`) are one shape, one array job. Each group
/// holds positions in `scripts`, in order; the groups are in the order of their first run.
pub fn shapes<S: AsRef<str>>(scripts: &[S]) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Vec<&str>, Vec<usize>)> = Vec::new();
    for (i, script) in scripts.iter().enumerate() {
        let head = header(script.as_ref());
        match groups.iter_mut().find(|(h, _)| *h == head) {
            Some((_, members)) => members.push(i),
            None => groups.push((head, vec![i])),
        }
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

/// sbatch's `--array` list of task ids `tasks` (sorted here): runs of consecutive ids as
/// ranges, `0-3`, `0,2`, `1-2,5`. SLURM takes a list that is not contiguous.
pub fn array_spec(tasks: &[u32]) -> String {
    let mut tasks = tasks.to_vec();
    tasks.sort_unstable();
    tasks.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tasks.len() {
        let mut j = i;
        while j + 1 < tasks.len() && tasks[j + 1] == tasks[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", tasks[i], tasks[j])
        } else {
            tasks[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Render the array script of a sweep. Pure. Refused: no runs, a run script without
/// `#SBATCH` lines, runs whose `#SBATCH` lines differ (other resources), an `--array` of
/// the user's own.
pub fn render_array_script(params: &ArrayParams<'_>) -> Result<String, RenderError> {
    let sweep = SweepDir::new(params.sweep_dir);
    let dir = text(params.sweep_dir, "sweep folder")?;
    let Some((_, first_name, first)) = params.runs.first() else {
        return Err(bad("the sweep has no runs".into()));
    };
    let head = header(first);
    if head.is_empty() {
        return Err(bad(format!(
            "the batch script of run {first_name} has no #SBATCH lines"
        )));
    }
    if let Some(l) = head.iter().find(|l| l.starts_with("#SBATCH --array")) {
        return Err(bad(format!(
            "`{l}`: a sweep is an array job of its own; drop --array from `sbatch_args`"
        )));
    }
    for (_, name, script) in &params.runs[1..] {
        let other = header(script);
        if other != head {
            let diff = head
                .iter()
                .zip(&other)
                .find(|(a, b)| a != b)
                .map(|(a, b)| format!("`{a}` against `{b}`"))
                .unwrap_or_else(|| "a different number of #SBATCH lines".into());
            return Err(bad(format!(
                "run {name} asks for other resources than run {first_name} ({diff}): one array job has one resource request, so runs of different shapes go to different array scripts"
            )));
        }
    }
    let n = params.runs.len();
    let mut s = String::from("#!/bin/bash\n");
    for l in &head {
        s.push_str(l);
        s.push('\n');
    }
    let limit = match params.max_parallel {
        Some(0) => return Err(bad("--max-parallel must be at least 1".into())),
        Some(p) => format!("%{p}"),
        None => String::new(),
    };
    let tasks: Vec<u32> = params.runs.iter().map(|(i, _, _)| *i).collect();
    let spec = array_spec(&tasks);
    s.push_str(&format!("#SBATCH --array={spec}{limit}\n"));
    let logs = sweep.logs();
    let logs = text(&logs, "sweep folder")?;
    for (flag, stream) in [("--output", Stream::Out), ("--error", Stream::Err)] {
        s.push_str(&format!(
            "#SBATCH {flag}={}\n",
            sbatch_path(logs, &SweepDir::array_log_pattern(stream))?
        ));
    }
    let at_once = match params.max_parallel {
        Some(p) => format!(", at most {p} at once"),
        None => String::new(),
    };
    let name = params
        .sweep_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    s.push_str(&format!(
        "\n# Rendered by herd: sweep {}, {n} runs{at_once}. Array task I runs run I: its own\n\
         # batch script, from its own folder, its output appended to its logs.\n\
         # Every user value below is one single-quoted word: no shell expands it.\n\
         set -euo pipefail\n\
         sweep={}\n\
         task=\"${{SLURM_ARRAY_TASK_ID:-}}\"\n\
         case \"$task\" in\n",
        name.escape_debug(),
        quote(dir, "sweep folder").map_err(|e| bad(e.to_string()))?,
    ));
    for (i, run, _) in params.runs {
        let exp = ExperimentDir::new(params.sweep_dir.join(run));
        let script = exp.job_script();
        let logs = exp.logs();
        s.push_str(&format!(
            "  {i}) script={} logs={} ;;\n",
            quote(text(&script, "sweep folder")?, "run folder").map_err(|e| bad(e.to_string()))?,
            quote(text(logs.path(), "sweep folder")?, "run folder")
                .map_err(|e| bad(e.to_string()))?,
        ));
    }
    s.push_str(&format!(
        "  *)\n\
         \x20   echo \"herd: array task '$task' is no run of sweep $sweep (tasks {spec})\" >&2\n\
         \x20   exit 2 ;;\n\
         esac\n\
         # As sbatch --output does for a single job: the batch step's output, in the run's logs.\n\
         job=\"${{SLURM_ARRAY_JOB_ID:?}}_$task\"\n\
         exec >>\"$logs/$job.{out}\" 2>>\"$logs/$job.{err}\"\n\
         exec /bin/bash -- \"$script\"\n",
        out = Stream::Out.ext(),
        err = Stream::Err.ext(),
    ));
    Ok(s)
}

#[cfg(test)]
mod tests;
