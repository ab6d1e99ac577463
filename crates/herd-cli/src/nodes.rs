//! `herd nodes`: the user's record of bad nodes (`herd_exp::nodes`), one row per node, with
//! SLURM's own state of each node now; and what `herd submit` does with the record
//! (`avoid_bad_nodes`: [`avoid_bad_nodes`]). docs/launch.md, "The record of bad nodes".
//!
//! The record is never trusted and never fatal: a line that is no blame is skipped with a
//! warning naming the file and line, a node SLURM does not know is shown (or, at submit,
//! not left out) with a warning, and a scheduler that does not answer is said in the state
//! column.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use herd_exp::nodes::{self, Blame, NodeSummary};
use herd_plan::avoid::{self, Verdict};
use herd_plan::Plan;
use herd_slurm::scheduler::command::QUERY_TIMEOUT;
use herd_slurm::scheduler::node::{self as slurm_nodes, NodeTable};
use serde_json::json;

use crate::{CliError, ExitStatus};

/// The schema version of `herd nodes --json`.
pub const JSON_FORMAT: u32 = 1;

/// `herd nodes` arguments.
#[derive(Debug, Args)]
#[command(after_help = concat!(
    "The record: $HERD_NODE_RECORD if set, else $XDG_STATE_HOME/herd/nodes.jsonl, else ",
    "~/.local/state/herd/nodes.jsonl: one JSON line per blame, appended by herd's agents ",
    "(a node lost, frozen, failing twice or failing its preflight) and read by `herd submit` ",
    "(--avoid-bad-nodes). Delete the file, or lines of it, to forget blames."
))]
pub struct NodesArgs {
    /// Only blames since WHEN: `30s`, `10m`, `2h`, `1d` ago, or an RFC 3339 time
    /// (`2026-12-01T14:00:00Z`); default: all.
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Print JSON (schema in docs/launch.md) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Seconds SLURM has to answer.
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

/// The record's path, or an error saying how to name one.
fn record_path() -> Result<PathBuf, CliError> {
    nodes::record_path().ok_or_else(|| {
        CliError::Usage(format!(
            "no record of bad nodes: HOME is not set; set {} to the record's path",
            nodes::RECORD_ENV
        ))
    })
}

/// Reads the record, printing a warning on stderr for each line skipped.
fn read_record(path: &Path) -> std::io::Result<Vec<Blame>> {
    let (blames, warnings) = nodes::read(path)?;
    for w in warnings {
        eprintln!("herd: warning: {w}");
    }
    Ok(blames)
}

/// What SLURM says of the nodes: the table, or why there is none.
enum Cluster {
    /// `sinfo` answered.
    Known(NodeTable),
    /// SLURM is not installed here.
    NoSlurm,
    /// `sinfo` failed, timed out or printed what herd cannot read.
    Trouble(String),
}

/// The state column of `node`.
fn state_of(cluster: &Cluster, node: &str) -> String {
    match cluster {
        Cluster::Known(t) => t
            .get(node)
            .map_or_else(|| "unknown to SLURM".to_owned(), |n| n.describe()),
        Cluster::NoSlurm => "no SLURM here".to_owned(),
        Cluster::Trouble(_) => "SLURM did not answer".to_owned(),
    }
}

/// Run `herd nodes`.
pub fn run(args: NodesArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let now_ms = herd_exp::timeline::now().1;
    let since = match &args.since {
        Some(when) => Some(crate::logs::parse_since(when, now_ms).ok_or_else(|| {
            CliError::Usage(format!(
                "--since {when:?}: give a time ago (30s, 10m, 2h, 1d) or an RFC 3339 time (2026-12-01T14:00:00Z)"
            ))
        })? / 1000),
        None => None,
    };
    let path = record_path()?;
    let blames = read_record(&path).map_err(CliError::system(format!(
        "cannot read the record of bad nodes {}",
        path.display()
    )))?;
    let rows = nodes::summarize(&blames, since);
    let cluster = if rows.is_empty() {
        Cluster::NoSlurm
    } else {
        match slurm_nodes::query(Duration::from_secs(args.timeout.max(1))) {
            Ok(t) => Cluster::Known(t),
            Err(e) if e.is_not_installed() => Cluster::NoSlurm,
            Err(e) => Cluster::Trouble(e.to_string()),
        }
    };
    if let Cluster::Trouble(e) = &cluster {
        eprintln!("herd: note: SLURM's state of the nodes is not known: {e}");
    }
    if let Cluster::Known(t) = &cluster {
        for row in rows.iter().filter(|r| t.get(&r.node).is_none()) {
            eprintln!(
                "herd: warning: {} is unknown to SLURM (not listed by sinfo): renamed or removed? `herd submit` does not leave it out; delete its lines from {} to forget it",
                row.node,
                path.display()
            );
        }
    }
    let now = now_ms / 1000;
    if args.json {
        let doc = json!({
            "format": JSON_FORMAT,
            "record": path.display().to_string(),
            "since_unix": since,
            "scheduler": {
                "answered": matches!(cluster, Cluster::Known(_)),
                "error": match &cluster {
                    Cluster::Trouble(e) => Some(e.clone()),
                    Cluster::NoSlurm if !rows.is_empty() => Some("SLURM is not installed here".to_owned()),
                    _ => None,
                },
            },
            "nodes": rows.iter().map(|r| row_json(r, &cluster)).collect::<Vec<_>>(),
        });
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?
        )?;
        return Ok(ExitStatus::Success);
    }
    if rows.is_empty() {
        match &args.since {
            Some(when) if !blames.is_empty() => writeln!(
                out,
                "no node blamed since {when} ({} older blame{}; record: {})",
                blames.len(),
                if blames.len() == 1 { "" } else { "s" },
                path.display()
            )?,
            _ => writeln!(out, "no node blamed yet (record: {})", path.display())?,
        }
        return Ok(ExitStatus::Success);
    }
    let table: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            [
                r.node.clone(),
                format!("{} ({})", ago(now, r.last_unix), stamp(r.last_unix)),
                r.count.to_string(),
                plain(&r.last_why),
                state_of(&cluster, &r.node),
            ]
        })
        .collect();
    print_table(
        out,
        ["NODE", "LAST BLAMED", "BLAMES", "WHY (LAST)", "SLURM NOW"],
        &table,
    )?;
    Ok(ExitStatus::Success)
}

fn row_json(r: &NodeSummary, cluster: &Cluster) -> serde_json::Value {
    let node = match cluster {
        Cluster::Known(t) => t.get(&r.node),
        _ => None,
    };
    json!({
        "node": r.node,
        "blames": r.count,
        "last_unix": r.last_unix,
        "last_time": stamp(r.last_unix),
        "last_why": r.last_why,
        "last_kind": r.last_kind,
        "last_job": r.last_job,
        "last_experiment": r.last_experiment,
        "kinds": r.kinds,
        "known_to_slurm": match cluster {
            Cluster::Known(_) => Some(node.is_some()),
            _ => None,
        },
        "slurm_state": node.map(|n| n.state.clone()),
        "slurm_reason": node.and_then(|n| n.reason.clone()),
        "partitions": node.map(|n| n.partitions.clone()),
    })
}

/// A table: columns padded, the last one as it is.
fn print_table<const N: usize>(
    out: &mut dyn Write,
    head: [&str; N],
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut width = head.map(|h| h.chars().count());
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: [&str; N]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == N {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(out, "{}", line(head))?;
    for r in rows {
        writeln!(out, "{}", line(r.each_ref().map(String::as_str)))?;
    }
    Ok(())
}

/// Text from the record as a terminal may show it: control characters (a line break, a
/// terminal escape) escaped, at most 200 characters.
fn plain(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == 200 {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `2026-12-02T21:40:12Z`.
fn stamp(unix: u64) -> String {
    let t = herd_exp::timeline::rfc3339(unix.saturating_mul(1000));
    t.replace(".000Z", "Z")
}

/// How long before `now` `then` was: `just now`, `42 s ago`, `3 min ago`, `5 h ago`,
/// `2 days ago` (a time after `now`, a node's clock ahead of this one's: `just now`).
pub(crate) fn ago(now: u64, then: u64) -> String {
    let s = now.saturating_sub(then);
    match s {
        0 => "just now".to_owned(),
        1..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86_400 => format!("{} h ago", s / 3600),
        _ if s < 2 * 86_400 => "1 day ago".to_owned(),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// A span of seconds in words: `24 h`, `30 min`, `7 days`, `90 s`.
pub(crate) fn span(secs: u64) -> String {
    if secs > 86_400 && secs.is_multiple_of(86_400) {
        format!("{} days", secs / 86_400)
    } else if secs >= 3600 && secs.is_multiple_of(3600) {
        format!("{} h", secs / 3600)
    } else if secs >= 60 && secs.is_multiple_of(60) {
        format!("{} min", secs / 60)
    } else {
        format!("{secs} s")
    }
}

/// `herd submit` (and `herd check`): leaves out of `plan` the nodes the user's record
/// blames within `avoid_bad_nodes`, saying which on stderr, one line each; and says which
/// blamed nodes are kept and why. Never fails: a record that cannot be read, a corrupt line,
/// a node SLURM does not know and a scheduler that does not answer are warnings or notes.
pub fn avoid_bad_nodes(plan: &mut Plan) {
    if plan.avoid_bad_nodes == 0 {
        return;
    }
    let Some(path) = nodes::record_path() else {
        return;
    };
    let blames = match read_record(&path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "herd: warning: cannot read the record of bad nodes {}: {e}; no node left out for it",
                path.display()
            );
            return;
        }
    };
    let now = nodes::unix_now();
    let window = plan.avoid_bad_nodes;
    let blamed = nodes::summarize(&blames, Some(now.saturating_sub(window)));
    if blamed.is_empty() {
        return;
    }
    let cluster = match slurm_nodes::query(QUERY_TIMEOUT) {
        Ok(t) => Some(t),
        Err(e) if e.is_not_installed() => None,
        Err(e) => {
            eprintln!("herd: note: blamed nodes not checked against the cluster: {e}");
            None
        }
    };
    for d in avoid::decide(plan, &blamed, cluster.as_ref()) {
        let n = &d.node;
        let ago = ago(now, n.last_unix);
        let why = plain(&n.last_why);
        match &d.verdict {
            Verdict::LeftOut => {
                eprintln!(
                    "herd: leaving out {} (blamed {ago}: {why}; {} blame{} in {}; --avoid-bad-nodes 0 to use it)",
                    n.node,
                    n.count,
                    if n.count == 1 { "" } else { "s" },
                    span(window)
                );
                plan.avoided_nodes.push(n.node.clone());
            }
            Verdict::Kept(kept) => eprintln!(
                "herd: warning: keeping {}, blamed {ago} ({why}): {kept}",
                n.node
            ),
            Verdict::Unknown => eprintln!(
                "herd: warning: {}, blamed {ago} ({why}), is unknown to SLURM (not listed by sinfo): not left out; delete its lines from {} to forget it",
                n.node,
                path.display()
            ),
            // The job's own --exclude leaves it out already.
            Verdict::Excluded => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_in_words() {
        assert_eq!(ago(100, 100), "just now");
        assert_eq!(ago(100, 200), "just now", "a clock ahead of ours");
        assert_eq!(ago(142, 100), "42 s ago");
        assert_eq!(ago(1000, 800), "3 min ago");
        assert_eq!(ago(20_000, 0), "5 h ago");
        assert_eq!(ago(90_000, 0), "1 day ago");
        assert_eq!(ago(3 * 86_400 + 5, 0), "3 days ago");
        assert_eq!(span(86_400), "24 h");
        assert_eq!(span(7 * 86_400), "7 days");
        assert_eq!(span(1800), "30 min");
        assert_eq!(span(90), "90 s");
        assert_eq!(stamp(1_796_060_412), "2026-11-30T17:40:12Z");
        assert_eq!(plain("lost\n\u{1b}[31mred"), "lost\\n\\u{1b}[31mred");
        assert_eq!(plain(&"x".repeat(300)).chars().count(), 201);
    }
}
