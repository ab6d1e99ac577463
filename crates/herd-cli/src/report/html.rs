//! `herd report --html FILE`: one self-contained page: inline CSS, every plot as inline
//! SVG, no script, nothing fetched (no `src=`, no `href=`). Per experiment: its attempts
//! (from the timeline and the manifest), its goodput, its GPUs when it has GPU samples, the
//! failure report when there is one, its plots;
//! then the scaling table when there are several experiments. Everything that comes from
//! the experiments (names, causes, exception text, stderr) is HTML-escaped.

use super::data::{ExpData, Failure};
use super::plot::{self, Plot, PlotError};
use super::table::{hms, num, Row};
pub use super::text::{escape, since};

/// An SVG document as an element inside HTML: without its namespace attribute (HTML puts
/// `<svg>` in SVG's namespace by itself), so the page names no address at all.
pub fn inline_svg(svg: &str) -> String {
    let body = match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    };
    body.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1)
}

const STYLE: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1250px}\
table{border-collapse:collapse;margin:0.5em 0 1em}\
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}\
td.n{text-align:right}th{background:#f3f3f3}\
pre{background:#f7f7f7;border:1px solid #ddd;padding:0.6em;overflow-x:auto}\
.plot svg{max-width:100%;height:auto}.note{color:#666}\
td.stamp{color:#666;font-size:0.85em}td[title]{cursor:help}\
section{border-top:2px solid #ddd;margin-top:2em}";

fn td(s: &str) -> String {
    format!("<td>{}</td>", escape(s))
}

/// A time cell: `stamp` (RFC 3339) as [`since`] `base` with the exact stamp on hover
/// (`title`); a stamp that does not parse as it is; `—` when there is none.
fn time_cell(stamp: Option<&str>, base: Option<u64>) -> String {
    let Some(stamp) = stamp else {
        return "<td class=\"n\">—</td>".to_owned();
    };
    match herd_exp::timeline::parse_rfc3339(stamp).zip(base) {
        Some((ms, base)) => format!(
            "<td class=\"n\" title=\"{}\">{}</td>",
            escape(stamp),
            since(ms, base)
        ),
        None => td(stamp),
    }
}

/// The attempt table of `exp` (docs/report.md): when each attempt started and ended as
/// time since the job first started (`+1:17`, the exact stamp on hover), how long it
/// ran, and the exact start in its own column.
pub fn attempts_table(exp: &ExpData, html: &mut String) {
    let rows = exp.attempt_rows();
    html.push_str("<h3>Attempts</h3>\n");
    if rows.is_empty() {
        html.push_str("<p class=\"note\">No attempt has started.</p>\n");
        return;
    }
    let ms = |t: &Option<String>| t.as_deref().and_then(herd_exp::timeline::parse_rfc3339);
    // The job's first start (its agents' `started`), as the goodput strip counts; else
    // the first attempt's.
    let base = exp
        .goodput
        .attempts
        .first()
        .map(|a| a.from_ms)
        .or_else(|| rows.iter().filter_map(|r| ms(&r.started)).min())
        .or_else(|| rows.iter().filter_map(|r| ms(&r.ended)).min());
    html.push_str(
        "<p class=\"note\">Started and ended: time since the job first started \
         (hover over one for its exact time).</p>\n\
         <table class=\"attempts\"><tr><th>attempt</th><th>began</th><th>started</th>\
         <th>ran</th><th>ended</th><th>how it ended</th><th>nodes</th>\
         <th>started at (UTC)</th></tr>\n",
    );
    for r in rows {
        let ran = match (ms(&r.started), ms(&r.ended)) {
            (Some(a), Some(b)) if b >= a => {
                crate::status::clock(std::time::Duration::from_millis(b - a))
            }
            _ => "—".to_owned(),
        };
        html.push_str(&format!(
            "<tr><td class=\"n\">{}</td>{}{}<td class=\"n\">{ran}</td>{}{}{}\
             <td class=\"stamp\">{}</td></tr>\n",
            r.number,
            td(&r.began),
            time_cell(r.started.as_deref(), base),
            time_cell(r.ended.as_deref(), base),
            td(&r.how),
            td(&if r.nodes.is_empty() {
                "—".to_owned()
            } else {
                r.nodes.join(", ")
            }),
            escape(r.started.as_deref().unwrap_or("—")),
        ));
    }
    html.push_str("</table>\n");
}

/// The GPUs of `exp` when it has samples: the mean utilisation and each flagged GPU
/// (docs/report.md, "GPUs"); their plots are with the others.
fn gpus(exp: &ExpData, html: &mut String) {
    let Some(head) = exp.gpus.headline() else {
        return;
    };
    html.push_str(&format!(
        "<h3>GPUs</h3>\n<p class=\"gpus\">GPUs: {}</p>\n",
        escape(&head)
    ));
    let flagged = exp.gpus.flagged();
    if !flagged.is_empty() {
        html.push_str("<ul class=\"gpu-flags\">\n");
        for line in flagged {
            html.push_str(&format!("<li>{}</li>\n", escape(&line)));
        }
        html.push_str("</ul>\n");
    }
}

fn failure(exp: &ExpData, html: &mut String) {
    let Some(f) = &exp.failure else {
        return;
    };
    html.push_str("<h3>Failure report</h3>\n");
    let r = match f {
        Failure::Unreadable(why) => {
            html.push_str(&format!("<p class=\"note\">{}</p>\n", escape(why)));
            return;
        }
        Failure::Report(r) => r,
    };
    html.push_str("<table class=\"failure\">\n");
    let mut row = |k: &str, v: String| {
        html.push_str(&format!("<tr><th>{k}</th>{}</tr>\n", td(&v)));
    };
    row("cause", r.cause.clone());
    row("attempt", r.attempt.to_string());
    row(
        "rank",
        r.rank.map_or_else(|| "—".to_owned(), |n| n.to_string()),
    );
    row("node", format!("{} ({})", r.node_rank, r.host));
    row(
        "exit",
        r.exit
            .as_ref()
            .map_or_else(|| "—".to_owned(), ToString::to_string),
    );
    if let Some(e) = &r.error {
        row(
            "exception",
            match &e.exception {
                Some(x) => format!("{x}: {}", e.message),
                None => e.message.clone(),
            },
        );
    }
    row("time", r.time.clone());
    html.push_str("</table>\n");
    if let Some(tb) = r.error.as_ref().and_then(|e| e.traceback.as_ref()) {
        html.push_str(&format!(
            "<h4>Traceback</h4>\n<pre class=\"traceback\">{}</pre>\n",
            escape(tb)
        ));
    }
    if !r.stderr_tail.is_empty() {
        html.push_str(&format!(
            "<h4>Last lines of stderr</h4>\n<pre class=\"stderr\">{}</pre>\n",
            escape(&r.stderr_tail.join("\n"))
        ));
    }
}

/// The scaling table as an HTML table (the markdown table's columns).
pub fn scaling_table(rows: &[Row], epochs: Option<u32>) -> String {
    let (workers, per) = super::table::worker_words(rows);
    let mut s = format!(
        "<table class=\"scaling\"><tr><th>run</th><th>nodes</th><th>{workers}</th>\
         <th>samples/s</th><th>{per}</th><th>efficiency</th><th>time/epoch</th>",
    );
    if let Some(e) = epochs {
        s.push_str(&format!("<th>{e} epochs</th>"));
    }
    s.push_str("</tr>\n");
    for r in rows {
        let n = |v: String| format!("<td class=\"n\">{}</td>", escape(&v));
        s.push_str(&format!(
            "<tr>{}{}{}{}{}{}{}",
            td(&r.name),
            n(r.nodes.to_string()),
            n(r.gpus.to_string()),
            n(num(r.samples_per_s, 1)),
            n(num(r.per_gpu, 1)),
            n(if r.efficiency.is_finite() {
                format!("{:.0}%", r.efficiency * 100.0)
            } else {
                "—".into()
            }),
            n(r.epoch_time_s
                .map_or_else(|| "—".into(), |t| format!("{t:.1} s"))),
        ));
        if let Some(e) = epochs {
            s.push_str(&n(r
                .epoch_time_s
                .map_or_else(|| "—".into(), |t| hms(t * f64::from(e)))));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s
}

/// A whole page titled `title` around `body`: the doctype, herd's mark (a `generator` meta
/// tag in the first bytes, by which a code snapshot knows the page is herd's and leaves it
/// out: [`herd_exp::outputs`]), the inline style, the title as its heading. `title` is
/// escaped here; `body` is HTML as it is.
pub fn document(title: &str, body: &str) -> String {
    let title = escape(title);
    let mark = herd_exp::outputs::HTML_MARK;
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n{mark}\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n\
         {body}</body>\n</html>\n"
    )
}

/// One experiment's section of the page: its size, attempts, goodput, GPUs, failure report,
/// `plots` (with what their lighter dashes mean) and `notes` (plots not drawn).
pub fn section(exp: &ExpData, plots: &[Plot], notes: &[String]) -> Result<String, PlotError> {
    let mut html = format!("<section>\n<h2>{}</h2>\n", escape(&exp.name));
    if let Some((nodes, gpus)) = exp.size {
        html.push_str(&format!(
            "<p>{nodes} node{}, {gpus} worker{}</p>\n",
            if nodes == 1 { "" } else { "s" },
            if gpus == 1 { "" } else { "s" }
        ));
    }
    attempts_table(exp, &mut html);
    super::strip::section(&exp.goodput, &mut html);
    gpus(exp, &mut html);
    failure(exp, &mut html);
    html.push_str("<h3>Plots</h3>\n");
    for p in plots {
        html.push_str(&format!(
            "<div class=\"plot\" data-plot=\"{}\">\n{}\n</div>\n",
            p.metric.word(),
            inline_svg(&plot::svg(p)?)
        ));
        if let Some(n) = p.rework_note() {
            html.push_str(&format!("<p class=\"note\">{}</p>\n", escape(&n)));
        }
    }
    for n in notes {
        html.push_str(&format!("<p class=\"note\">{}</p>\n", escape(n)));
    }
    html.push_str("</section>\n");
    Ok(html)
}

/// The page: `exps[i]` with its plots `plots[i]` and notes `notes[i]` (plots not drawn);
/// the scaling table of `rows` when there are several experiments.
pub fn page(
    exps: &[ExpData],
    plots: &[Vec<Plot>],
    notes: &[Vec<String>],
    rows: &[Row],
    epochs: Option<u32>,
) -> Result<String, PlotError> {
    let names: Vec<&str> = exps.iter().map(|e| e.name.as_str()).collect();
    let mut body = String::new();
    if exps.len() > 1 {
        body.push_str("<h2>Scaling</h2>\n");
        body.push_str(&scaling_table(rows, epochs));
    }
    for (i, exp) in exps.iter().enumerate() {
        body.push_str(&section(
            exp,
            plots.get(i).map_or(&[][..], Vec::as_slice),
            notes.get(i).map_or(&[][..], Vec::as_slice),
        )?);
    }
    Ok(document(
        &format!("herd report: {}", names.join(", ")),
        &body,
    ))
}
