//! `herd hostlist expand|compress|count`: SLURM hostlists on the command line, like
//! python-hostlist's `hostlist` command and `scontrol show hostnames|hostlist`.

use std::io::{Read, Write};

use clap::{Args, Subcommand};
use herd_hostlist::{compress, dedup_hosts, set_op, sort_hosts, HostList, Limits, SetOp};

use crate::{CliError, ExitStatus};

/// Most bytes read from stdin (`-`): hostlists are small; a runaway pipe is an error.
const MAX_STDIN: u64 = 64 << 20;

/// `herd hostlist` arguments.
#[derive(Debug, Args)]
pub struct HostlistArgs {
    /// What to do with the hosts.
    #[command(subcommand)]
    pub action: HostlistAction,
}

/// The three actions.
#[derive(Debug, Subcommand)]
pub enum HostlistAction {
    /// Print every host (one per line by default), in order, duplicates kept.
    Expand(HostlistInput),
    /// Print the SLURM-style short form (`gpu-a[01-03],login1`); order and duplicates kept
    /// unless --sort/--unique or a set operation is given.
    Compress(HostlistInput),
    /// Print the number of hosts.
    Count(HostlistInput),
}

/// Inputs and options shared by the actions.
#[derive(Debug, Args)]
pub struct HostlistInput {
    /// Hostlist expressions (`gpu-a[01-08],login1`). `-` reads expressions from stdin,
    /// separated by newlines, commas or spaces. Without a set operation the expressions are
    /// concatenated; with one, each is one operand.
    #[arg(required = true, value_name = "EXPR")]
    pub exprs: Vec<String>,
    /// Hosts in any operand (sorted, no duplicates).
    #[arg(short = 'u', long, group = "setop")]
    pub union: bool,
    /// Hosts in every operand.
    #[arg(short = 'i', long, group = "setop")]
    pub intersection: bool,
    /// Hosts in the first operand and in none of the others.
    #[arg(short = 'd', long, group = "setop")]
    pub difference: bool,
    /// Hosts in exactly one operand.
    #[arg(short = 'x', long, group = "setop")]
    pub xor: bool,
    /// Sort hosts in natural order (n2 before n10).
    #[arg(long)]
    pub sort: bool,
    /// Drop repeated hosts, keeping the first.
    #[arg(long)]
    pub unique: bool,
    /// Separator between expanded hosts.
    #[arg(short = 's', long, default_value = "\n", value_name = "SEP")]
    pub separator: String,
    /// Print JSON: an array of hosts, a string, or a number.
    #[arg(long)]
    pub json: bool,
    /// Refuse input that expands to more hosts than this.
    #[arg(long, default_value_t = Limits::default().max_hosts, value_name = "N")]
    pub max_hosts: u64,
}

impl HostlistInput {
    fn set_op(&self) -> Option<SetOp> {
        if self.union {
            Some(SetOp::Union)
        } else if self.intersection {
            Some(SetOp::Intersection)
        } else if self.difference {
            Some(SetOp::Difference)
        } else if self.xor {
            Some(SetOp::SymmetricDifference)
        } else {
            None
        }
    }

    /// The operands as text: each argument, with `-` replaced by stdin.
    fn operands(&self) -> Result<Vec<(String, String)>, CliError> {
        let mut stdin_used = false;
        self.exprs
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let label = format!("argument {}", i + 1);
                if e != "-" {
                    return Ok((label, e.clone()));
                }
                if std::mem::replace(&mut stdin_used, true) {
                    return Err(CliError::Usage("`-` (stdin) may be given only once".into()));
                }
                let mut text = String::new();
                std::io::stdin()
                    .lock()
                    .take(MAX_STDIN + 1)
                    .read_to_string(&mut text)
                    .map_err(|source| CliError::Stdin {
                        what: "hostlists",
                        source,
                    })?;
                if text.len() as u64 > MAX_STDIN {
                    return Err(CliError::Input(format!(
                        "stdin holds more than {} MiB of hostlists",
                        MAX_STDIN >> 20
                    )));
                }
                Ok(("stdin".to_owned(), text))
            })
            .collect()
    }
}

fn parse_all(input: &HostlistInput) -> Result<Vec<HostList>, CliError> {
    let mut budget = input.max_hosts;
    let mut lists = Vec::new();
    for (label, text) in input.operands()? {
        let list =
            HostList::parse_with(&text, &Limits { max_hosts: budget }).map_err(|source| {
                CliError::Hostlist {
                    operand: label,
                    source,
                }
            })?;
        budget -= list.len();
        lists.push(list);
    }
    Ok(lists)
}

/// Run `herd hostlist …`.
pub fn run(args: HostlistArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let (action, input) = match &args.action {
        HostlistAction::Expand(i) => ("expand", i),
        HostlistAction::Compress(i) => ("compress", i),
        HostlistAction::Count(i) => ("count", i),
    };
    let op = input.set_op();
    let reorder = op.is_some() || input.sort || input.unique;

    // Fast paths: no reordering needed, so nothing is held in memory.
    if !reorder && action == "count" {
        // Counting needs no expansion at all (and no host limit applies).
        let mut total: u64 = 0;
        for (label, text) in input.operands()? {
            let n = herd_hostlist::count(&text).map_err(|source| CliError::Hostlist {
                operand: label,
                source,
            })?;
            total = total.saturating_add(n);
        }
        return emit(
            out,
            &total.to_string(),
            input.json,
            serde_json::json!(total),
        );
    }
    if !reorder && action == "expand" && !input.json {
        let lists = parse_all(input)?;
        let mut writer = Separated::new(out, &input.separator);
        for list in &lists {
            list.for_each(|h| writer.push(h));
        }
        return writer.finish();
    }

    let lists: Vec<_> = parse_all(input)?.iter().map(HostList::to_hosts).collect();
    let combined: Vec<String>;
    let mut hosts: Vec<&str> = match op {
        Some(op) => {
            let views: Vec<Vec<&str>> = lists.iter().map(|l| l.iter().collect()).collect();
            combined = set_op(op, &views);
            combined.iter().map(String::as_str).collect()
        }
        None => lists.iter().flat_map(|l| l.iter()).collect(),
    };
    if input.unique {
        dedup_hosts(&mut hosts);
    }
    if input.sort {
        sort_hosts(&mut hosts);
    }
    match action {
        "expand" if input.json => writeln!(out, "{}", serde_json::json!(hosts))
            .map(|()| ExitStatus::Success)
            .map_err(CliError::from),
        "expand" => {
            let mut writer = Separated::new(out, &input.separator);
            hosts.iter().for_each(|h| writer.push(h));
            writer.finish()
        }
        "compress" => {
            let short = compress(&hosts);
            emit(out, &short, input.json, serde_json::json!(short))
        }
        _ => emit(
            out,
            &hosts.len().to_string(),
            input.json,
            serde_json::json!(hosts.len()),
        ),
    }
}

fn emit(
    out: &mut dyn Write,
    text: &str,
    json: bool,
    value: serde_json::Value,
) -> Result<ExitStatus, CliError> {
    if json {
        writeln!(out, "{value}")?;
    } else {
        writeln!(out, "{text}")?;
    }
    Ok(ExitStatus::Success)
}

/// Hosts joined by a separator, ending with one newline; the first write error is kept.
struct Separated<'a> {
    out: &'a mut dyn Write,
    sep: &'a str,
    first: bool,
    result: std::io::Result<()>,
}

impl<'a> Separated<'a> {
    fn new(out: &'a mut dyn Write, sep: &'a str) -> Self {
        Separated {
            out,
            sep,
            first: true,
            result: Ok(()),
        }
    }

    fn push(&mut self, host: &str) {
        if self.result.is_err() {
            return;
        }
        if !std::mem::take(&mut self.first) {
            self.result = self.out.write_all(self.sep.as_bytes());
        }
        if self.result.is_ok() {
            self.result = self.out.write_all(host.as_bytes());
        }
    }

    fn finish(self) -> Result<ExitStatus, CliError> {
        self.result?;
        if !self.first {
            self.out.write_all(b"\n")?;
        }
        Ok(ExitStatus::Success)
    }
}
