//! `herd report` of a sweep: one row per run with its values, final and best loss,
//! throughput, goodput and state, sorted by final loss; `--json`; with `--plots` the
//! overlay of every run's loss ([`super::overlay`]) and with `--html` a page with the
//! sweep's section (the table, the overlay, the scaling table when the runs ran at
//! different sizes) and each run's own section, as `herd report` draws an experiment's.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::overlay::{self, Entry, Overlay};
use super::run::{values_json, Sweep};
use super::state::{self, Answer};
use super::table::{self, Align};
use crate::report::data::{self, ExpData};
use crate::report::html::{self, escape, inline_svg};
use crate::report::plot::{self, PlotError};
use crate::report::{ReportArgs, Row};
use crate::status::View;
use crate::{CliError, ExitStatus};

/// What `herd report` does with a sweep beside its table: `--json`, `--epochs`, `--plots`,
/// `--html` (as for experiments).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// JSON instead of the table.
    pub json: bool,
    /// The scaling table's projection: this many epochs.
    pub epochs: Option<u32>,
    /// Write the overlay into this folder: `NAME.loss.png`, `NAME.loss.svg`.
    pub plots: Option<PathBuf>,
    /// Write the page to this file.
    pub html: Option<PathBuf>,
}

impl From<&ReportArgs> for Options {
    fn from(a: &ReportArgs) -> Options {
        Options {
            json: a.json,
            epochs: a.epochs,
            plots: a.plots.clone(),
            html: a.html.clone(),
        }
    }
}

/// One run's line of the sweep's table.
#[derive(Debug, Clone)]
pub struct RunRow {
    /// Its array task index.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Its values, in the sweep's key order.
    pub values: Vec<(String, String)>,
    /// Its values as the legend says them: `lr=3e-4, seed=1`.
    pub label: String,
    /// Its colour in the overlay ([`plot::rank_colour`] of it): its place in index order.
    pub colour_key: u32,
    /// The last loss it read ([`overlay::losses`]).
    pub final_loss: Option<f64>,
    /// The smallest.
    pub best_loss: Option<f64>,
    /// Samples per second, as `herd report` counts an experiment's
    /// ([`crate::report::measure`]).
    pub throughput: Option<f64>,
    /// Training over its wall time (so far, while it runs).
    pub goodput: Option<f64>,
    /// Where it stands, as `herd status` words it ([`state::run_view`]).
    pub view: View,
    /// What its folder holds (`None` when it cannot be read: a note says why).
    pub data: Option<ExpData>,
}

/// A sweep's report: its rows in the table's order, and what could not be read.
#[derive(Debug, Clone)]
pub struct SweepReport {
    /// The sweep.
    pub name: String,
    /// Its value columns, in order, and whether each is numeric (right-aligned).
    pub columns: Vec<(String, bool)>,
    /// One per run: by final loss, smallest first; runs without a loss last, in index
    /// order.
    pub rows: Vec<RunRow>,
    /// `NAME/RUN: …`: runs whose folder could not be read.
    pub notes: Vec<String>,
}

/// Reads every run of `sweep`: its readings, losses, throughput and goodput as `herd
/// report` reads an experiment ([`data::load`]), its state from `answer` and its folder as
/// `herd status` gives it.
pub fn load(sweep: &Sweep, answer: &Answer) -> SweepReport {
    let mut notes = Vec::new();
    let mut rows: Vec<RunRow> = sweep
        .by_index()
        .into_iter()
        .enumerate()
        .map(|(place, run)| {
            let data = match data::load(&run.experiment) {
                Ok(d) => Some(d),
                Err(e) => {
                    notes.push(format!("{}/{}: {e}", sweep.name, run.name));
                    None
                }
            };
            let (final_loss, best_loss) = data.as_ref().map_or((None, None), overlay::losses);
            let throughput = data
                .as_ref()
                .and_then(|d| crate::report::measure(&d.rank_series()).0);
            let view = state::run_view(sweep, run, answer, data.as_ref().map(|d| &d.goodput));
            RunRow {
                index: run.index,
                name: run.name.clone(),
                values: run.values.clone(),
                label: run.label(),
                colour_key: u32::try_from(place).unwrap_or(u32::MAX),
                final_loss,
                best_loss,
                throughput,
                goodput: view.goodput,
                view,
                data,
            }
        })
        .collect();
    rows.sort_by(|a, b| match (a.final_loss, b.final_loss) {
        (Some(x), Some(y)) => x.total_cmp(&y).then(a.index.cmp(&b.index)),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.index.cmp(&b.index),
    });
    SweepReport {
        name: sweep.name.clone(),
        columns: sweep.value_columns(),
        rows,
        notes,
    }
}

/// A loss as the table says it: four significant digits (`2.310`, `0.001857`), `1.234e-5`
/// when very small or large, `—` when there is none.
pub fn loss_text(v: Option<f64>) -> String {
    let Some(v) = v.filter(|v| v.is_finite()) else {
        return "—".to_owned();
    };
    if v == 0.0 {
        return "0".to_owned();
    }
    let a = v.abs();
    if !(1e-4..1e6).contains(&a) {
        return format!("{v:.3e}");
    }
    let digits = usize::try_from((3 - a.log10().floor() as i32).max(0)).unwrap_or(0);
    format!("{v:.digits$}")
}

impl RunRow {
    /// Its cells after the values: final loss, best loss, samples/s, goodput, state.
    fn cells(&self) -> [String; 5] {
        [
            loss_text(self.final_loss),
            loss_text(self.best_loss),
            self.throughput
                .map_or_else(|| "—".to_owned(), |t| format!("{t:.1}")),
            self.goodput
                .map_or_else(|| "—".to_owned(), herd_exp::goodput::percent),
            self.view.state.to_owned(),
        ]
    }

    /// Its line of `--json`.
    pub fn json(&self) -> Value {
        json!({
            "index": self.index,
            "name": self.name,
            "values": values_json(&self.values),
            "final_loss": self.final_loss,
            "best_loss": self.best_loss,
            "throughput": self.throughput,
            "goodput": self.goodput,
            "state": self.view.state,
        })
    }
}

/// The columns after the values.
const AFTER: [(&str, Align); 5] = [
    ("final loss", Align::Right),
    ("best loss", Align::Right),
    ("samples/s", Align::Right),
    ("goodput", Align::Right),
    ("state", Align::Left),
];

impl SweepReport {
    /// The table's head, alignment and cells: the values first (numbers right-aligned),
    /// then final loss, best loss, samples/s, goodput, state.
    pub fn cells(&self) -> (Vec<String>, Vec<Align>, Vec<Vec<String>>) {
        let mut head: Vec<String> = self.columns.iter().map(|(k, _)| k.clone()).collect();
        let mut align: Vec<Align> = self
            .columns
            .iter()
            .map(|(_, n)| if *n { Align::Right } else { Align::Left })
            .collect();
        head.extend(AFTER.iter().map(|(h, _)| (*h).to_owned()));
        align.extend(AFTER.iter().map(|(_, a)| *a));
        let rows = self
            .rows
            .iter()
            .map(|r| {
                let mut cells = table::value_cells(&self.columns, &r.values, "—");
                cells.extend(r.cells());
                cells
            })
            .collect();
        (head, align, rows)
    }

    /// The table as markdown, padded to read in a terminal.
    pub fn markdown(&self) -> String {
        let (head, align, rows) = self.cells();
        table::markdown(&head, &align, &rows)
    }

    /// The scaling table of the runs whose agents met ([`crate::report::rows`], named by
    /// run), when they ran at more than one size (nodes, workers); else `None`.
    pub fn scaling(&self) -> Option<Vec<Row>> {
        let met: Vec<&ExpData> = self
            .rows
            .iter()
            .filter_map(|r| r.data.as_ref())
            .filter(|d| d.size.is_some())
            .collect();
        let mut sizes: Vec<(u32, u32)> = met.iter().filter_map(|d| d.size).collect();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() < 2 {
            return None;
        }
        Some(crate::report::rows(
            met.iter()
                .map(|d| {
                    let (nodes, gpus) = d.size.unwrap_or((1, 1));
                    (d.name.clone(), nodes, gpus, d.on_gpus, d.rank_series())
                })
                .collect(),
        ))
    }

    /// `--json`: `{"format": 1, "sweep", "keys", "runs": [...], "scaling"}`, the runs in
    /// the table's order; `scaling` as `herd report --json`'s runs, or null.
    pub fn json(&self, epochs: Option<u32>) -> Value {
        json!({
            "format": 1,
            "sweep": self.name,
            "keys": self.columns.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "runs": self.rows.iter().map(RunRow::json).collect::<Vec<_>>(),
            "scaling": self.scaling().map(|rows| rows
                .iter()
                .map(|r| crate::report::row_json(r, epochs))
                .collect::<Vec<_>>()),
        })
    }

    /// The overlay of every run's loss ([`overlay::overlay`]): colours by index order,
    /// the legend in the table's order.
    pub fn overlay(&self) -> Overlay {
        let mut entries: Vec<Entry> = self
            .rows
            .iter()
            .filter_map(|r| {
                Some(Entry {
                    key: r.colour_key,
                    label: r.label.clone(),
                    data: r.data.as_ref()?,
                })
            })
            .collect();
        entries.sort_by_key(|e| e.key);
        let legend: Vec<u32> = self.rows.iter().map(|r| r.colour_key).collect();
        overlay::overlay(&self.name, &entries, &legend)
    }

    /// The sweep's section of the page: a line of counts, the table (numbers right-aligned),
    /// the overlay and its notes, the scaling table when the runs ran at different sizes.
    pub fn section(&self, overlay: &Overlay, epochs: Option<u32>) -> Result<String, PlotError> {
        let states = self.rows.iter().map(|r| r.view.state);
        let counts: Vec<String> = state::counts(states)
            .iter()
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        let mut s = format!(
            "<section class=\"sweep\">\n<h2>Sweep {}</h2>\n<p>{} run{}: {}</p>\n",
            escape(&self.name),
            self.rows.len(),
            if self.rows.len() == 1 { "" } else { "s" },
            counts.join(", ")
        );
        let (head, align, rows) = self.cells();
        s.push_str("<table class=\"sweep\"><tr>");
        for h in &head {
            s.push_str(&format!("<th>{}</th>", escape(h)));
        }
        s.push_str("</tr>\n");
        for r in &rows {
            s.push_str("<tr>");
            for (c, a) in r.iter().zip(&align) {
                match a {
                    Align::Right => s.push_str(&format!("<td class=\"n\">{}</td>", escape(c))),
                    Align::Left => s.push_str(&format!("<td>{}</td>", escape(c))),
                }
            }
            s.push_str("</tr>\n");
        }
        s.push_str("</table>\n");
        if let Some(p) = &overlay.plot {
            s.push_str(&format!(
                "<div class=\"plot\">\n{}\n</div>\n",
                inline_svg(&plot::svg(p)?)
            ));
        }
        for n in overlay.rework_note.iter().chain(&overlay.notes) {
            s.push_str(&format!("<p class=\"note\">{}</p>\n", escape(n)));
        }
        if let Some(rows) = self.scaling() {
            s.push_str("<h3>Scaling</h3>\n");
            s.push_str(&html::scaling_table(&rows, epochs));
        }
        s.push_str("</section>\n");
        Ok(s)
    }

    /// The page: the sweep's [`section`](Self::section), then each run's section in the
    /// table's order, as `herd report --html` draws an experiment's (its attempts,
    /// goodput, failure report and plots).
    pub fn page(&self, overlay: &Overlay, epochs: Option<u32>) -> Result<String, PlotError> {
        let mut body = self.section(overlay, epochs)?;
        for r in &self.rows {
            if let Some(d) = &r.data {
                let (plots, notes) = plot::build_all(d);
                body.push_str(&html::section(d, &plots, &notes)?);
            }
        }
        Ok(html::document(
            &format!("herd report: sweep {}", self.name),
            &body,
        ))
    }
}

/// Writes the overlay as `DIR/NAME.loss.png` and `DIR/NAME.loss.svg` (none without a
/// plot); the paths written.
pub fn write_overlay(overlay: &Overlay, dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    match &overlay.plot {
        Some(p) => plot::write_files(std::slice::from_ref(p), dir),
        None => Ok(Vec::new()),
    }
}

/// `herd report` of a sweep, printed to `out` as `herd report` prints: the table (or with
/// `json` its JSON), the scaling table when the runs ran at different sizes, notes, and
/// with `plots`/`html` the files written (after a blank line; to stderr with `json`).
pub fn run(
    sweep: &Sweep,
    answer: &Answer,
    opts: &Options,
    out: &mut dyn Write,
) -> Result<ExitStatus, CliError> {
    let report = load(sweep, answer);
    let mut lines: Vec<String> = report.notes.iter().map(|n| format!("note: {n}")).collect();
    if opts.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report.json(opts.epochs))
                .map_err(std::io::Error::other)?
        )?;
    } else {
        write!(out, "{}", report.markdown())?;
        if let Some(rows) = report.scaling() {
            writeln!(out)?;
            write!(out, "{}", crate::report::markdown(&rows, opts.epochs))?;
        }
    }
    if opts.plots.is_some() || opts.html.is_some() {
        let overlay = report.overlay();
        lines.extend(overlay.notes.iter().map(|n| format!("note: {n}")));
        if let Some(dir) = &opts.plots {
            lines.extend(
                write_overlay(&overlay, dir)?
                    .iter()
                    .map(|f| f.display().to_string()),
            );
        }
        if let Some(file) = &opts.html {
            let page = report.page(&overlay, opts.epochs)?;
            crate::write_atomic(file, page.as_bytes())?;
            lines.push(file.display().to_string());
        }
    }
    if lines.is_empty() {
        return Ok(ExitStatus::Success);
    }
    if opts.json {
        let mut err = std::io::stderr().lock();
        for l in &lines {
            writeln!(err, "{l}")?;
        }
    } else {
        writeln!(out)?;
        for l in &lines {
            writeln!(out, "{l}")?;
        }
    }
    Ok(ExitStatus::Success)
}

/// Whether `herd report` names one sweep (`herd report NAME` of a sweep folder): then
/// [`run_named`] reports it.
pub fn applies(args: &ReportArgs) -> bool {
    let [name] = &args.names[..] else {
        return false;
    };
    crate::site::exp_root(args.exp_root.as_deref())
        .is_ok_and(|root| herd_exp::sweep::is_sweep(&root.join(name)))
}

/// `herd report NAME` of a sweep: its runs compared ([`run`]), their states from one
/// scheduler query (from their folders alone, with a warning, when it does not answer).
pub fn run_named(args: &ReportArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = crate::site::exp_root(args.exp_root.as_deref())?;
    let folder = herd_exp::sweep::Sweep::open(&root, &args.names[0])?;
    let sweep = Sweep::from_folder(&folder)?;
    let (answer, trouble) = Answer::ask(&sweep, crate::site::DEFAULT_TIMEOUT);
    if let Some(e) = trouble {
        eprintln!(
            "herd: warning: {}; the runs' states are from their folders only",
            crate::site::scheduler_trouble(&e)
        );
    }
    run(&sweep, &answer, &Options::from(args), out)
}
