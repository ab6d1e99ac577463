//! `herd report NAME…`: the scaling table of runs of one job at different sizes, from the
//! metrics the agents stored, and each experiment's goodput ([`crate::goodput`]); with
//! `--plots DIR` each experiment's loss and throughput per rank as PNG and SVG; with
//! `--html FILE` one self-contained page with the attempts, the goodput, the failure
//! report, the plots and the table (docs/report.md).
//!
//! [`data`] reads an experiment ([`gpus`] its GPU samples), [`table`] makes the table,
//! [`plot`] draws ([`thin`] cuts long series), [`html`] writes the page.

pub mod data;
pub mod gpus;
pub mod html;
pub mod plot;
pub mod strip;
pub mod table;
pub mod text;
pub mod thin;

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

pub use table::{markdown, measure, row_json, rows, Row};

use crate::{CliError, ExitStatus};

/// `herd report` arguments.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The experiments: runs of one job at different sizes (one is enough for its line);
    /// or one sweep's name, its runs compared (`SWEEP/RUN`: one run as an experiment).
    #[arg(value_name = "NAME", required = true)]
    pub names: Vec<String>,
    /// Where the experiments are (as for `herd status`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Also project the time of this many epochs from each run's time per epoch.
    #[arg(long, value_name = "N")]
    pub epochs: Option<u32>,
    /// Print JSON instead of a markdown table (each run with its goodput and, where its
    /// nodes sampled their GPUs, `gpu_usage`).
    #[arg(long)]
    pub json: bool,
    /// Write each experiment's plots into DIR (created when missing): NAME.loss.png,
    /// NAME.loss.svg, NAME.throughput.png, NAME.throughput.svg, and with GPU samples
    /// NAME.gpu-util.png/.svg and NAME.gpu-memory.png/.svg.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Write one self-contained HTML page: attempts, goodput, GPUs, failure report, plots,
    /// table.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// Run `herd report`.
pub fn run(args: ReportArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = crate::site::exp_root(args.exp_root.as_deref())?;
    let mut exps = Vec::new();
    for name in &args.names {
        let exp = crate::site::open_experiment(&root, name)?;
        let loaded = data::load(&exp)?;
        if loaded.size.is_none() {
            return Err(CliError::Input(format!(
                "{name}: its agents never met (no rendezvous in {}): no run to report",
                exp.paths().timeline().display()
            )));
        }
        exps.push(loaded);
    }
    let rows = rows(
        exps.iter()
            .map(|e| {
                let (nodes, gpus) = e.size.unwrap_or((1, 1));
                (e.name.clone(), nodes, gpus, e.on_gpus, e.rank_series())
            })
            .collect(),
    );
    if args.json {
        let runs: Vec<_> = rows
            .iter()
            .map(|r| {
                let mut run = row_json(r, args.epochs);
                if let Some(e) = exps.iter().find(|e| e.name == r.name) {
                    run["goodput"] = e.goodput.json();
                    if let Some(g) = e.gpus.json() {
                        run["gpu_usage"] = g;
                    }
                }
                run
            })
            .collect();
        let doc = json!({"format": 1, "runs": runs});
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?
        )?;
    } else {
        write!(out, "{}", markdown(&rows, args.epochs))?;
        writeln!(out)?;
        // In the table's order.
        for r in &rows {
            if let Some(e) = exps.iter().find(|e| e.name == r.name) {
                writeln!(out, "{}: {}", e.name, e.goodput.summary())?;
                writeln!(out, "  {}", e.goodput.split_line())?;
                if let Some(faults) = e.goodput.faults_line() {
                    writeln!(out, "  {faults}:")?;
                    for f in &e.goodput.faults {
                        writeln!(out, "    {}", f.line())?;
                    }
                }
                if let Some(advice) = &e.goodput.advice {
                    writeln!(out, "  {}", advice.line())?;
                }
                if let Some(head) = e.gpus.headline() {
                    writeln!(out, "  GPUs: {head}")?;
                    for line in e.gpus.flagged() {
                        writeln!(out, "    {line}")?;
                    }
                }
            }
        }
    }
    if args.plots.is_none() && args.html.is_none() {
        return Ok(ExitStatus::Success);
    }
    let (plots, notes): (Vec<_>, Vec<_>) = exps.iter().map(plot::build_all).unzip();
    let mut lines = Vec::new();
    for n in notes.iter().flatten() {
        lines.push(format!("note: {n}"));
    }
    if let Some(dir) = &args.plots {
        for p in &plots {
            for f in plot::write_files(p, dir)? {
                lines.push(f.display().to_string());
            }
        }
    }
    if let Some(file) = &args.html {
        let page = html::page(&exps, &plots, &notes, &rows, args.epochs)?;
        crate::write_atomic(file, page.as_bytes())?;
        lines.push(file.display().to_string());
    }
    // The table's JSON stays alone on stdout; the files go to stderr then.
    if args.json {
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

#[cfg(test)]
mod tests;
