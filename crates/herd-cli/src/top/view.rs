//! Drawing a [`Frame`]: the header, the per-rank table and the footer with ratatui, and the
//! same frame as plain text for `--once`. Every marker is text (`SILENT 75s`, `SLOW 42%`,
//! `failed 1`, `THROTTLED`), colour only highlights it, so a capture without colours shows
//! it too.

use std::time::Duration;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row as TableRow, Table, TableState};

use super::model::{Frame, Level, Row, Sort, SILENT_FLOOR, SILENT_GAPS, SLOW_RATIO};
use crate::status::clock;

/// The table's columns and their widths: 69 characters with the gaps, in 80 with the
/// selection mark; [`GPU_COLUMN`] after them when the attempt has GPU samples.
const COLUMNS: [(&str, u16); 7] = [
    ("RANK", 5),
    ("NODE", 12),
    ("STATE", 13),
    ("STEP", 9),
    ("RATE", 10),
    ("LOSS", 8),
    ("LAST", 6),
];

/// The GPU column (`97% 59.8G 698W`, or its flags: `THROTTLED`), after [`COLUMNS`] when the
/// attempt has GPU samples: 87 characters with the gaps, 89 with the selection mark.
pub const GPU_COLUMN: (&str, u16) = ("GPU", 17);

/// The least terminal width that shows the GPU column (narrower ones leave it out; the
/// header's `GPUs:` line still names the flagged GPUs).
pub const GPU_TABLE_WIDTH: u16 = 89;

/// Whether the table has the GPU column: the attempt has GPU samples.
pub fn has_gpus(frame: &Frame) -> bool {
    !frame.gpus.is_empty()
}

fn columns(gpu: bool) -> Vec<(&'static str, u16)> {
    let mut c = COLUMNS.to_vec();
    if gpu {
        c.push(GPU_COLUMN);
    }
    c
}

/// What the screen shows besides the frame: sort, selection, the log pane, help.
#[derive(Debug, Default)]
pub struct Ui {
    /// The table's order.
    pub sort: Sort,
    /// The selected row and the scroll offset.
    pub table: TableState,
    /// The rank whose log is open, and its last lines.
    pub pane: Option<(u32, Vec<String>)>,
    /// Whether the help line is shown.
    pub help: bool,
    /// `--silent-after`, for the help line.
    pub silent_after: Option<Duration>,
}

/// `1.23M`, `45.6k`, `512.0`.
pub fn number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

fn loss(v: f64) -> String {
    if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

/// `4s`, `2m05s`, `1h02m`.
pub fn ago(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut t: String = text.chars().take(width.saturating_sub(1)).collect();
    t.push('~');
    t
}

/// `samples/s` for `samples_per_s`.
pub fn rate_words(name: &str) -> &'static str {
    if name == "tokens_per_s" {
        "tokens/s"
    } else {
        "samples/s"
    }
}

/// The table's heading cells (the rate column named by the frame's rate; `GPU` last when
/// the attempt has GPU samples).
pub fn heading(frame: &Frame) -> Vec<String> {
    let mut h: Vec<String> = columns(has_gpus(frame))
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .collect();
    h[4] = rate_words(frame.rate_name).to_uppercase();
    h
}

/// One row's cells, as the table and `--once` show them; `gpu`: with the GPU column (its
/// GPU's figures or flags, `-` for a rank without a GPU sample).
pub fn cells(row: &Row, gpu: bool) -> Vec<String> {
    let dash = || "-".to_owned();
    let mut c = vec![
        row.rank.to_string(),
        row.host.as_deref().map_or_else(dash, |h| cut(h, 12)),
        row.state.text(),
        row.step.map_or_else(dash, |s| s.to_string()),
        row.rate.map_or_else(dash, number),
        row.loss.map_or_else(dash, loss),
        row.since.map_or_else(dash, ago),
    ];
    if gpu {
        c.push(
            row.gpu
                .as_ref()
                .map_or_else(dash, |g| cut(&g.cell(), GPU_COLUMN.1 as usize)),
        );
    }
    c
}

/// The header's line about the GPUs, when the attempt has GPU samples: how many, their
/// mean utilisation on their newest samples, and each flagged one (by its ranks, or by its
/// node and index when no rank claims it): `GPUs: 8  mean util 91%  flagged: rank 3
/// THROTTLED, gpu-a02 GPU 7 IDLE`.
pub fn gpu_line(frame: &Frame) -> Option<String> {
    if frame.gpus.is_empty() {
        return None;
    }
    let utils: Vec<f64> = frame.gpus.iter().filter_map(|g| g.sample.util).collect();
    let mut line = format!("GPUs: {}", frame.gpus.len());
    if !utils.is_empty() {
        let mean = utils.iter().sum::<f64>() / utils.len() as f64;
        line.push_str(&format!("  mean util {mean:.0}%"));
    }
    let flagged: Vec<String> = frame
        .gpus
        .iter()
        .filter_map(|g| Some(format!("{} {}", g.who(), g.flag_words()?)))
        .collect();
    if !flagged.is_empty() {
        line.push_str(&format!("  flagged: {}", flagged.join(", ")));
    }
    Some(line)
}

/// The header's lines, each at most 80 characters.
pub fn header(frame: &Frame) -> Vec<String> {
    let mut first = format!("herd top  {}", frame.name);
    match frame.job_ids.as_slice() {
        [] => first.push_str("  (no job id)"),
        [one] => first.push_str(&format!("  job {one}")),
        [.., last] => first.push_str(&format!(
            "  job {last} (of {} submissions)",
            frame.job_ids.len()
        )),
    }
    if let Some(s) = &frame.slurm {
        first.push_str(&format!("  {s}"));
    }
    if let Some(e) = frame.elapsed {
        first.push_str(&format!("  elapsed {}", clock(e)));
    }
    let mut second = match frame.attempt {
        Some(k) => format!(
            "attempt {k} of {}  restarts {}  requeues {}",
            frame.attempts.len(),
            frame.restarts,
            frame.requeues
        ),
        None => "no attempt yet".to_owned(),
    };
    if let Some(w) = frame.world_size {
        second.push_str(&format!("  world {w}"));
    }
    if let Some(n) = frame.nodes {
        second.push_str(&format!("  nodes {n}"));
    }
    if let Some(g) = &frame.goodput {
        second.push_str(&format!("  {g}"));
    }
    let rate = rate_words(frame.rate_name);
    let third = match (frame.median_rate, frame.total_rate) {
        (Some(m), Some(t)) => format!("{rate}: median {}  total {}", number(m), number(t)),
        _ => format!("{rate}: -"),
    };
    let third = match &frame.ended {
        Some(e) => format!("{third}  job {e}"),
        None => third,
    };
    let mut lines = vec![first, second, third];
    lines.extend(gpu_line(frame));
    if !frame.replaced.is_empty() {
        let swaps: Vec<String> = frame
            .replaced
            .iter()
            .map(|(node, by)| format!("{node} by spare {by}"))
            .collect();
        lines.push(format!("replaced: {}", swaps.join(", ")));
    }
    if let Some(n) = &frame.note {
        lines.push(format!("note: {n}"));
    }
    lines.into_iter().map(|l| cut(&l, 80)).collect()
}

/// The frame as plain text (`--once`): the header, a blank line, the table.
pub fn text(frame: &Frame) -> String {
    let mut out = header(frame).join("\n");
    out.push_str("\n\n");
    let gpu = has_gpus(frame);
    let cols = columns(gpu);
    let line = |cells: &[String]| {
        let mut l = String::new();
        for (i, (c, (_, w))) in cells.iter().zip(&cols).enumerate() {
            if i > 0 {
                l.push(' ');
            }
            // Numbers (and the GPU's figures) to the right, words to the left.
            if i >= 3 {
                l.push_str(&format!("{c:>width$}", width = *w as usize));
            } else {
                l.push_str(&format!("{c:<width$}", width = *w as usize));
            }
        }
        l.trim_end().to_owned()
    };
    out.push_str(&line(&heading(frame)));
    out.push('\n');
    for row in &frame.rows {
        out.push_str(&line(&cells(row, gpu)));
        out.push('\n');
    }
    out
}

fn style(level: Level) -> Style {
    match level {
        Level::Normal => Style::default(),
        Level::Quiet => Style::default().fg(Color::DarkGray),
        Level::Warn => Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD),
        Level::Bad => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
    }
}

/// The footer: the keys.
pub fn footer(ui: &Ui) -> String {
    if ui.pane.is_some() {
        return "Esc/l back to the table  q quit".into();
    }
    format!(
        "q quit  s sort:{}  j/k select  Enter/l log  a/A attempt  ? help",
        ui.sort.name()
    )
}

fn help(ui: &Ui) -> String {
    let silent = match ui.silent_after {
        Some(d) => format!("{}s", d.as_secs()),
        None => format!("max({}s, {SILENT_GAPS}x its gap)", SILENT_FLOOR.as_secs()),
    };
    format!(
        "SILENT: no output for > {silent}; SLOW: rate < {:.0}% of the median",
        SLOW_RATIO * 100.0
    )
}

/// Draws `frame` (rows already sorted) with `ui` onto `f`.
pub fn draw(f: &mut ratatui::Frame<'_>, frame: &Frame, ui: &mut Ui) {
    let area = f.area();
    let head = header(frame);
    let footer_h = if ui.help { 2 } else { 1 };
    let [top, body, bottom] = Layout::vertical([
        Constraint::Length(head.len() as u16),
        Constraint::Min(1),
        Constraint::Length(footer_h),
    ])
    .areas(area);
    let head: Vec<Line<'_>> = head
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                Line::from(Span::styled(
                    l,
                    Style::default().add_modifier(Modifier::BOLD),
                ))
            } else if l.starts_with("note:") || (l.starts_with("GPUs:") && l.contains("flagged:")) {
                Line::from(Span::styled(l, Style::default().fg(Color::Yellow)))
            } else {
                Line::from(l)
            }
        })
        .collect();
    f.render_widget(Paragraph::new(head), top);
    match &ui.pane {
        Some((rank, lines)) => draw_pane(f, body, *rank, lines),
        None => draw_table(f, body, frame, &mut ui.table),
    }
    let mut foot = vec![Line::from(Span::styled(
        footer(ui),
        Style::default().add_modifier(Modifier::REVERSED),
    ))];
    if ui.help {
        foot.insert(0, Line::from(help(ui)));
    }
    f.render_widget(Paragraph::new(foot), bottom);
}

fn draw_table(f: &mut ratatui::Frame<'_>, area: Rect, frame: &Frame, state: &mut TableState) {
    // The GPU column only where it fits.
    let gpu = has_gpus(frame) && area.width >= GPU_TABLE_WIDTH;
    let widths: Vec<Constraint> = columns(gpu)
        .iter()
        .map(|&(_, w)| Constraint::Length(w))
        .collect();
    // Numbers to the right, as in `--once`.
    let cell = |(i, text): (usize, String)| {
        if i >= 3 {
            Cell::from(Line::from(text).right_aligned())
        } else {
            Cell::from(text)
        }
    };
    let mut head = heading(frame);
    head.truncate(widths.len());
    let heading = TableRow::new(head.into_iter().enumerate().map(cell))
        .style(Style::default().add_modifier(Modifier::BOLD));
    let rows = frame.rows.iter().map(|r| {
        let st = style(r.state.level());
        let mut c: Vec<Cell<'_>> = cells(r, gpu).into_iter().enumerate().map(cell).collect();
        c[2] = std::mem::take(&mut c[2]).style(st);
        if gpu && r.gpu.as_ref().is_some_and(|g| g.flagged()) {
            c[7] = std::mem::take(&mut c[7]).style(style(Level::Warn));
        }
        if matches!(r.state.level(), Level::Bad | Level::Warn) {
            c[0] = std::mem::take(&mut c[0]).style(st);
        }
        TableRow::new(c)
    });
    if frame.rows.is_empty() {
        state.select(None);
    } else {
        let i = state.selected().unwrap_or(0).min(frame.rows.len() - 1);
        state.select(Some(i));
    }
    let table = Table::new(rows, widths)
        .header(heading)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
    f.render_stateful_widget(table, area, state);
}

fn draw_pane(f: &mut ratatui::Frame<'_>, area: Rect, rank: u32, lines: &[String]) {
    let mut text = vec![Line::from(Span::styled(
        format!("rank {rank}: last lines of stdout and stderr (err| ), following"),
        Style::default().add_modifier(Modifier::BOLD),
    ))];
    let room = (area.height as usize).saturating_sub(1);
    let skip = lines.len().saturating_sub(room);
    text.extend(lines[skip..].iter().map(|l| {
        let s = if l.starts_with("err| ") {
            Style::default().fg(Color::Red)
        } else {
            Style::default()
        };
        Line::from(Span::styled(cut(l, area.width as usize), s))
    }));
    f.render_widget(Paragraph::new(text), area);
}

/// The sorted rows' ranks (to find the selected one).
pub fn selected_rank(frame: &Frame, ui: &Ui) -> Option<u32> {
    frame.rows.get(ui.table.selected()?).map(|r| r.rank)
}
