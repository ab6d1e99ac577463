//! The page's goodput section: the goodput line, the time by part, and a timeline strip
//! with one row per attempt, each span coloured by its part and the way the attempt ended
//! beside it (docs/report.md, "Goodput").

use herd_exp::goodput::{duration, Accounting, Part};

use super::text::{escape, since};

/// The colour of `part` in the strip and its legend.
pub fn colour(part: Part) -> &'static str {
    match part {
        Part::Training => "#2ca02c",
        Part::Rework => "#ff7f0e",
        Part::Detection => "#d62728",
        Part::Stop => "#9467bd",
        Part::Start => "#1f77b4",
        Part::Running => "#17becf",
        Part::Queue => "#9e9e9e",
        Part::Other => "#dddddd",
    }
}

/// Appends the section for `acc` to `html`.
pub fn section(acc: &Accounting, html: &mut String) {
    html.push_str("<h3>Goodput</h3>\n");
    html.push_str(&format!(
        "<p class=\"goodput\">{}</p>\n",
        escape(&acc.summary())
    ));
    if acc.attempts.is_empty() {
        html.push_str("<p class=\"note\">No attempt has started.</p>\n");
        return;
    }
    // The legend: each part with time, its colour and its total.
    html.push_str("<p class=\"legend\">");
    for p in Part::ALL.iter().filter(|p| acc.parts.get(**p) > 0) {
        let mut words = format!("{} {}", p.name(), duration(acc.parts.get(*p)));
        if *p == Part::Rework {
            words.push_str(&format!(" ({} steps)", acc.rework_steps));
        }
        html.push_str(&format!(
            "<span style=\"display:inline-block;width:0.9em;height:0.9em;background:{};\
             vertical-align:middle;margin:0 0.3em 0 0.8em\"></span>{}",
            colour(*p),
            escape(&words)
        ));
    }
    html.push_str("</p>\n");
    let t0 = acc.attempts.first().map_or(0, |a| a.from_ms);
    let t1 = acc.attempts.last().map_or(t0, |a| a.to_ms).max(t0 + 1);
    let pct = |t: u64| (t.saturating_sub(t0)) as f64 * 100.0 / (t1 - t0) as f64;
    html.push_str(
        "<table class=\"strip\"><tr><th>attempt</th><th>from</th><th style=\"width:60%\">time \
         (one scale for all rows; hover a span for its part)</th><th>ended</th></tr>\n",
    );
    for a in &acc.attempts {
        let mut spans = String::new();
        for s in &a.spans {
            spans.push_str(&format!(
                "<div class=\"span {name}\" style=\"position:absolute;top:0;bottom:0;\
                 left:{left:.3}%;width:{width:.3}%;background:{c}\" title=\"{name} {d} \
                 ({from} → {to})\"></div>",
                name = s.part.name(),
                left = pct(s.from_ms),
                width = pct(s.to_ms) - pct(s.from_ms),
                c = colour(s.part),
                d = duration(s.to_ms - s.from_ms),
                from = since(s.from_ms, t0),
                to = since(s.to_ms, t0),
            ));
        }
        html.push_str(&format!(
            "<tr><td class=\"n\">{}</td><td title=\"{}\">{}</td><td><div \
             style=\"position:relative;height:1.2em;background:#fafafa\">{spans}</div></td>\
             <td>{}</td></tr>\n",
            a.attempt,
            herd_exp::timeline::rfc3339(a.from_ms),
            since(a.from_ms, t0),
            escape(&a.ended),
        ));
    }
    html.push_str("</table>\n");
    if let Some(faults) = acc.faults_line() {
        html.push_str(&format!(
            "<p class=\"faults\">{}: where each fault's time went</p>\n<ul class=\"faults\">\n",
            escape(&faults)
        ));
        for f in &acc.faults {
            html.push_str(&format!("<li>{}</li>\n", escape(&f.line())));
        }
        html.push_str("</ul>\n");
    }
    if let Some(advice) = &acc.advice {
        html.push_str(&format!(
            "<p class=\"advice\">{}</p>\n",
            escape(&advice.line())
        ));
    }
}
