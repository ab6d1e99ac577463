//! `herd status` of a sweep: one row for the whole sweep in the job list (its name, its
//! array's job id, its state as a whole, its runs' attempts, `sweep: 4 runs: 2 running, 1
//! queued, 1 finished`), and `herd status NAME`'s lines, one per run: its values, its task,
//! state, attempts, goodput so far and the detail `herd status` gives an experiment. Each
//! run's state comes from `herd status`'s own machinery ([`super::state::run_view`]).

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::run::{values_json, Sweep};
use super::state::{self, Answer};
use super::table::{self, Align};
use crate::status::{SchedJob, StatusArgs, SweepRow, View};
use crate::{CliError, ExitStatus};

/// One run as the sweep's status shows it.
#[derive(Debug, Clone)]
pub struct RunStatus {
    /// Its array task index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its values, in the sweep's key order.
    pub values: Vec<(String, String)>,
    /// Where it stands, as `herd status` words an experiment (its goodput in
    /// [`View::goodput`], not in the detail).
    pub view: View,
}

/// A sweep as `herd status` shows it.
#[derive(Debug, Clone)]
pub struct SweepStatus {
    /// The sweep.
    pub name: String,
    /// The newest submission's array job ids (one per resource shape), none before.
    pub job_ids: Vec<String>,
    /// Its value columns, and whether each is numeric (right-aligned).
    pub columns: Vec<(String, bool)>,
    /// Its runs, in index order.
    pub runs: Vec<RunStatus>,
    /// Whether the scheduler answered (else: the folders alone).
    pub answered: bool,
}

/// Where each run of `sweep` stands, from `answer` and its folder.
pub fn status(sweep: &Sweep, answer: &Answer) -> SweepStatus {
    SweepStatus {
        name: sweep.name.clone(),
        job_ids: sweep.job_ids(),
        columns: sweep.value_columns(),
        runs: sweep
            .by_index()
            .into_iter()
            .map(|run| RunStatus {
                index: run.index,
                name: run.name.clone(),
                values: run.values.clone(),
                view: state::run_view(sweep, run, answer, None),
            })
            .collect(),
        answered: answer.answered,
    }
}

impl SweepStatus {
    /// How many runs are in each state, in the order `running, suspended, queued, finished,
    /// failed, cancelled, unknown`, states no run is in left out.
    pub fn counts(&self) -> Vec<(&'static str, usize)> {
        state::counts(self.runs.iter().map(|r| r.view.state))
    }

    /// The sweep's state as a whole: running while any run runs, then suspended, queued,
    /// failed, cancelled, unknown; finished when every run finished.
    pub fn state(&self) -> &'static str {
        state::overall(self.runs.iter().map(|r| r.view.state))
    }

    /// Attempts started over every run.
    pub fn attempts(&self) -> usize {
        self.runs.iter().map(|r| r.view.attempts).sum()
    }

    /// `4 runs: 2 running, 1 queued, 1 finished`.
    pub fn summary(&self) -> String {
        let n = self.runs.len();
        let counts: Vec<String> = self
            .counts()
            .iter()
            .map(|(s, k)| format!("{k} {s}"))
            .collect();
        if counts.is_empty() {
            return format!("{n} run{}", if n == 1 { "" } else { "s" });
        }
        format!(
            "{n} run{}: {}",
            if n == 1 { "" } else { "s" },
            counts.join(", ")
        )
    }

    /// The JOB column of its row: the newest submission's array id (`-` when none); two
    /// arrays (two resource shapes) joined by `,`; more, the first and `+N`.
    pub fn job_column(&self) -> String {
        match &self.job_ids[..] {
            [] => "-".to_owned(),
            [a] => a.clone(),
            [a, b] => format!("{a},{b}"),
            [a, rest @ ..] => format!("{a}+{}", rest.len()),
        }
    }

    /// The sweep's row in `herd status`'s job list, its columns `EXPERIMENT JOB STATE
    /// ATTEMPTS DETAIL`: name, the arrays' job ids ([`SweepStatus::job_column`]), the
    /// state as a whole, the runs' attempts, `sweep: 4 runs: 2 running, 1 queued, 1
    /// finished`.
    pub fn row(&self) -> [String; 5] {
        [
            self.name.clone(),
            self.job_column(),
            self.state().to_owned(),
            self.attempts().to_string(),
            format!("sweep: {}", self.summary()),
        ]
    }

    /// The row as `herd status --json` gives an entry: `kind` `sweep`, `name`, `job_id`
    /// (the first array's), `job_ids` (every array of the newest submission), `state`,
    /// `detail`, `attempts`, `run_count`, and `tasks`, the runs by state (as an
    /// array job's tasks).
    pub fn row_json(&self) -> Value {
        let [_, _, _, _, detail] = self.row();
        json!({
            "kind": "sweep",
            "name": self.name,
            "job_id": self.job_ids.first(),
            "job_ids": self.job_ids,
            "state": self.state(),
            "detail": detail,
            "attempts": self.attempts(),
            "run_count": self.runs.len(),
            "tasks": self
                .counts()
                .into_iter()
                .map(|(s, n)| (s.to_owned(), json!(n)))
                .collect::<serde_json::Map<String, Value>>(),
        })
    }

    /// `herd status NAME` of the sweep: its row's words, then one line per run in index
    /// order: its values (numbers right-aligned), its task's job id, state, attempts,
    /// goodput (so far, while it runs; `-` without step readings) and `herd status`'s
    /// detail.
    pub fn text(&self) -> String {
        let mut head: Vec<String> = self.columns.iter().map(|(k, _)| k.clone()).collect();
        let mut align: Vec<Align> = self
            .columns
            .iter()
            .map(|(_, n)| if *n { Align::Right } else { Align::Left })
            .collect();
        for h in ["JOB", "STATE", "ATTEMPTS", "GOODPUT", "DETAIL"] {
            head.push(h.to_owned());
            align.push(if h == "GOODPUT" {
                Align::Right
            } else {
                Align::Left
            });
        }
        let rows: Vec<Vec<String>> = self
            .runs
            .iter()
            .map(|r| {
                let mut cells = table::value_cells(&self.columns, &r.values, "-");
                cells.push(r.view.job_id.clone().unwrap_or_else(|| "-".to_owned()));
                cells.push(r.view.state.to_owned());
                cells.push(r.view.attempts.to_string());
                cells.push(
                    r.view
                        .goodput
                        .map_or_else(|| "-".to_owned(), herd_exp::goodput::percent),
                );
                cells.push(r.view.detail.clone());
                cells
            })
            .collect();
        format!(
            "sweep {}{}: {}\n{}",
            self.name,
            match &self.job_ids[..] {
                [] => String::new(),
                [id] => format!(" (job {id})"),
                ids => format!(" (jobs {})", ids.join(", ")),
            },
            self.summary(),
            table::plain(&head, &align, &rows)
        )
    }

    /// `herd status NAME --json` of the sweep: the row's fields ([`row_json`](Self::row_json)),
    /// `format`, `keys`, `scheduler_answered`, and `runs`: one object per run in index
    /// order, `index`, `run` (its name), `values` (key → value) and every field `herd
    /// status --json` gives an experiment (docs/status.md).
    pub fn json(&self) -> Value {
        let mut doc = self.row_json();
        doc["format"] = json!(crate::status::JSON_FORMAT);
        doc["keys"] = json!(self.columns.iter().map(|(k, _)| k).collect::<Vec<_>>());
        doc["scheduler_answered"] = json!(self.answered);
        doc["runs"] = Value::Array(
            self.runs
                .iter()
                .map(|r| {
                    let mut v = r.view.json();
                    v["index"] = json!(r.index);
                    v["run"] = json!(r.name);
                    v["values"] = values_json(&r.values);
                    v
                })
                .collect(),
        );
        doc
    }
}

/// The sweeps under `root` named `names` (every one when empty), as the views take them; a
/// sweep folder that cannot be read is said and left out.
fn load(root: &Path, names: &[String]) -> Vec<Sweep> {
    let folders = match herd_exp::sweep::list(root) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "herd: warning: cannot list the sweeps under {}: {e}",
                root.display()
            );
            return Vec::new();
        }
    };
    folders
        .iter()
        .filter(|f| names.is_empty() || names.iter().any(|n| n == f.name()))
        .filter_map(|f| match Sweep::from_folder(f) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("herd: warning: sweep {}: {e}", f.name());
                None
            }
        })
        .collect()
}

/// The array job ids of every submission of `sweep` (from its runs' recorded ids and its
/// `sweep.json`: every array of every submission, one per resource shape).
pub(super) fn arrays(sweep: &Sweep) -> Vec<String> {
    let mut ids: Vec<String> = sweep
        .runs
        .iter()
        .filter_map(|r| {
            herd_exp::progress::Progress::read(&r.experiment)
                .ok()?
                .job_id
        })
        .chain(sweep.job_ids())
        .chain(sweep.submitted.iter().cloned())
        .map(|id| id.split('_').next().unwrap_or_default().to_owned())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// The sweeps in the experiment root's folders, for `herd status`'s job list.
pub struct InFolders;

impl crate::status::Sweeps for InFolders {
    fn names(&self, root: &Path) -> Vec<String> {
        herd_exp::sweep::list(root)
            .map(|l| l.iter().map(|s| s.name().to_owned()).collect())
            .unwrap_or_default()
    }

    fn rows(
        &self,
        root: &Path,
        names: &[String],
        jobs: &[SchedJob],
        answered: bool,
    ) -> Vec<SweepRow> {
        if names.is_empty() {
            return Vec::new();
        }
        let answer = Answer {
            jobs: jobs.to_vec(),
            answered,
        };
        load(root, names)
            .iter()
            .map(|s| {
                if answered {
                    state::record_ends(s, &answer);
                }
                let st = status(s, &answer);
                SweepRow {
                    row: st.row(),
                    json: st.row_json(),
                    arrays: arrays(s),
                }
            })
            .collect()
    }
}

/// Whether every target of `herd status` names a sweep: then [`run_named`] shows them.
pub fn applies(args: &StatusArgs) -> bool {
    !args.targets.is_empty()
        && crate::site::exp_root(args.exp_root.as_deref()).is_ok_and(|root| {
            args.targets
                .iter()
                .all(|t| herd_exp::sweep::is_sweep(&root.join(t)))
        })
}

/// `herd status NAME…` of sweeps: each one's runs ([`SweepStatus::text`], `--json`
/// [`SweepStatus::json`]). `-w` does not watch a sweep yet: a usage error.
pub fn run_named(args: &StatusArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    if args.watch {
        return Err(CliError::Usage(format!(
            "{}: -w does not watch a sweep yet; `herd status {}` shows where its runs stand",
            args.targets.join(", "),
            args.targets.join(" ")
        )));
    }
    let root = crate::site::exp_root(args.exp_root.as_deref())?;
    let sweeps = load(&root, &args.targets);
    show(
        &sweeps,
        args.json,
        Duration::from_secs(args.timeout.max(1)),
        out,
    )
}

/// `herd status NAME…` where every NAME is a sweep: each sweep's runs, one line each (with
/// `json`, one document; several sweeps: a list), from one scheduler query per sweep.
fn show(
    sweeps: &[Sweep],
    json: bool,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    let mut docs = Vec::new();
    let mut trouble = None;
    for (i, s) in sweeps.iter().enumerate() {
        let (answer, err) = Answer::ask(s, timeout);
        if answer.answered {
            state::record_ends(s, &answer);
        }
        let st = status(s, &answer);
        if json {
            docs.push(st.json());
        } else {
            if i > 0 {
                writeln!(out)?;
            }
            write!(out, "{}", st.text())?;
        }
        trouble = trouble.or(err);
    }
    if json {
        let doc = match &docs[..] {
            [one] => one.clone(),
            _ => serde_json::Value::Array(docs),
        };
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?
        )?;
    }
    if let Some(e) = trouble {
        eprintln!(
            "herd: error: {}; states above are from the run folders only",
            crate::site::scheduler_trouble(&e)
        );
        return Ok(ExitStatus::Failure);
    }
    Ok(ExitStatus::Success)
}
