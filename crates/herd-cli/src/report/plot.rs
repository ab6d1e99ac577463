//! Plots of one experiment's loss and throughput, PNG and SVG (docs/report.md).
//!
//! Each rank its own colour ([`rank_colour`]), every attempt on one axis: x is the global
//! step (readings without one left out; seconds since the experiment's first reading when
//! no reading has a step), and each attempt after the first is marked by a dashed vertical
//! line labelled with what started it (`restart`, `requeue`, `resume`). A rank's line
//! breaks at each attempt: no segment joins one attempt's last reading to the next one's
//! first. Steps an attempt computes again after resuming from a checkpoint (at or below the
//! highest step an earlier attempt reached) are drawn dashed and lighter
//! ([`rework_colour`]) over a shaded band ([`lines`], [`Line`], [`Rework`]). Long series
//! are cut to at most [`MAX_POINTS`] points a rank ([`downsample`]: the smallest and the
//! largest reading of each bucket, so spikes stay). With GPU samples, two more: each GPU's
//! utilisation and memory used over the seconds since the job's first sample, each GPU its
//! own colour and named `node/GPU (rank R)` in the legend ([`Metric::GPU`]). The font
//! (DejaVu Sans) is in the binary: no font is looked up on the system.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::data::{began_word, ExpData};
pub use super::thin::downsample;
use super::thin::keep;
use crate::CliError;

/// Width of a plot, pixels.
pub const WIDTH: u32 = 1200;
/// Height of a plot, pixels.
pub const HEIGHT: u32 = 600;
/// The most points drawn of one rank's line.
pub const MAX_POINTS: usize = 2000;
/// The most ranks the legend names (then `+N more`).
pub const LEGEND_MAX: usize = 16;
/// Width of the legend at the right of the chart, pixels (wider for long named entries,
/// [`Plot::legend_width`]).
pub const LEGEND_WIDTH: u32 = 140;
/// The widest a legend of named entries gets, pixels.
pub const LEGEND_MAX_WIDTH: u32 = 420;
/// Stroke width of a rank's line, pixels, in a plot of at most [`LEGEND_MAX`] ranks (each
/// named in the legend, each to be seen). The bitmap backend draws lines without
/// antialiasing, so every pixel of a line is exactly its rank's colour.
pub const LINE_WIDTH: u32 = 2;
/// Stroke width with more ranks than that: one pixel. Sixty-four 2-pixel lines are a solid
/// band anyway, and the bitmap backend fills each wide segment as a polygon: 64 ranks ×
/// 2,000 points took 8 s to draw that way, 2 s in 1-pixel lines.
pub const THIN_LINE_WIDTH: u32 = 1;
/// Colour of the attempt markers and their labels.
pub const MARKER_COLOUR: (u8, u8, u8) = (90, 90, 90);
/// Colour of the band over a range of steps computed again, and its opacity.
pub const REWORK_BAND: ((u8, u8, u8), f64) = ((255, 170, 60), 0.16);
/// The dashes of a recomputed part of a line: dash and gap, pixels.
pub const REWORK_DASH: (u32, u32) = (7, 4);
/// How far a recomputed part of a line is mixed towards white (0: the rank's colour, 1:
/// white).
pub const REWORK_LIGHTEN: f64 = 0.55;

/// The rank colours, in order: distinct for the first 16 ranks, then they repeat.
pub const PALETTE: [(u8, u8, u8); 16] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (188, 189, 34),
    (23, 190, 207),
    (0, 0, 128),
    (255, 215, 0),
    (0, 128, 128),
    (128, 0, 0),
    (255, 0, 255),
    (0, 200, 120),
    (128, 128, 255),
];

/// The colour of rank `rank`'s line: [`PALETTE`], cycling after 16 ranks.
pub fn rank_colour(rank: u32) -> (u8, u8, u8) {
    PALETTE[rank as usize % PALETTE.len()]
}

/// The colour of rank `rank`'s steps computed again: its [`rank_colour`] mixed
/// [`REWORK_LIGHTEN`] of the way to white.
pub fn rework_colour(rank: u32) -> (u8, u8, u8) {
    let light = |c: u8| {
        let c = f64::from(c);
        (c + (255.0 - c) * REWORK_LIGHTEN).round() as u8
    };
    let (r, g, b) = rank_colour(rank);
    (light(r), light(g), light(b))
}

/// What a plot shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `loss`.
    Loss,
    /// `samples_per_s`, or `tokens_per_s` when the job reports no samples.
    Throughput,
    /// Each GPU's utilisation over the job's time (its samples, [`super::gpus`]).
    GpuUtil,
    /// Each GPU's memory used over the job's time.
    GpuMemory,
}

impl Metric {
    /// The ranks' metrics, in the order they are written (a note for each without
    /// readings).
    pub const ALL: [Metric; 2] = [Metric::Loss, Metric::Throughput];

    /// The GPUs' plots, written after [`Metric::ALL`]'s when the job has GPU samples (no
    /// note when it has none).
    pub const GPU: [Metric; 2] = [Metric::GpuUtil, Metric::GpuMemory];

    /// `loss`, `throughput`, `gpu-util` or `gpu-memory`: the middle of the file names.
    pub fn word(self) -> &'static str {
        match self {
            Metric::Loss => "loss",
            Metric::Throughput => "throughput",
            Metric::GpuUtil => "gpu-util",
            Metric::GpuMemory => "gpu-memory",
        }
    }
}

/// One polyline drawn: part of one rank's readings in one attempt, never more than one
/// attempt. Within an attempt, the readings at steps an earlier attempt already reached
/// (computed again after a resume from a checkpoint) are a line of their own with `rework`
/// set, and the line that follows begins at that line's last point, so the attempt still
/// reads as one continuous line in two shades. A line also breaks where x would go back
/// (a trainer whose step goes back within one attempt): x never decreases along a line.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    /// The rank; in a plot whose [`Plot::legend`] names its lines, the key of the entry it
    /// belongs to (its colour is [`rank_colour`] of it either way).
    pub rank: u32,
    /// The attempt (K of `logs/attempt-K`).
    pub attempt: u32,
    /// Steps computed again: at or below the highest step any earlier attempt reached.
    pub rework: bool,
    /// Its points (x, y), in the order read, downsampled with the rank's other lines.
    pub points: Vec<(f64, f64)>,
}

/// The steps one attempt computed again (a shaded band in the plot): from its first
/// recomputed reading to its last, over all ranks.
#[derive(Debug, Clone, PartialEq)]
pub struct Rework {
    /// K.
    pub attempt: u32,
    /// The smallest step computed again.
    pub from: f64,
    /// The largest.
    pub to: f64,
}

/// The start of an attempt after the first.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// K.
    pub attempt: u32,
    /// Where on the x axis: the attempt's first reading.
    pub x: f64,
    /// What started it: `restart`, `requeue`, `resume` (`attempt` when the timeline does
    /// not say).
    pub label: String,
}

/// One plot, ready to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Plot {
    /// The experiment.
    pub name: String,
    /// What it shows.
    pub metric: Metric,
    /// The column drawn: `loss`, `samples_per_s` or `tokens_per_s`.
    pub column: String,
    /// `NAME: loss`.
    pub title: String,
    /// `step`, or `seconds since the first reading`.
    pub x_label: String,
    /// The y axis: the column's name.
    pub y_label: String,
    /// The polylines ([`Line`]): by rank, then in the order read.
    pub lines: Vec<Line>,
    /// One per attempt after the first that has readings.
    pub markers: Vec<Marker>,
    /// One per attempt that computed steps again, in order (none on a seconds axis).
    pub rework: Vec<Rework>,
    /// The legend's entries when its lines are not ranks: each line's key ([`Line::rank`])
    /// and what the legend calls it, in the legend's order (a sweep's overlay: each run's
    /// place and its values). Empty: `rank R` for each rank with a line.
    pub legend: Vec<(u32, String)>,
    /// A fixed y axis (the GPUs' utilisation 0–100 %, their memory from 0 to the largest
    /// total); `None`: the lines' range.
    pub y_range: Option<(f64, f64)>,
}

/// One reading on its way to a [`Line`].
#[derive(Debug, Clone, Copy)]
struct Point {
    x: f64,
    y: f64,
    attempt: u32,
    rework: bool,
}

/// One rank's points, every attempt in order, as [`Line`]s: downsampled to at most
/// [`MAX_POINTS`] points drawn in all (a point where a recomputed part meets the rest is
/// drawn in both lines, and counted twice), cut at each attempt, where the rework flag
/// changes (joined there) and where x goes back.
fn split(rank: u32, points: &[Point]) -> Vec<Line> {
    // Every change of the flag within an attempt may cost one point drawn twice.
    let joins = points
        .windows(2)
        .filter(|w| w[0].attempt == w[1].attempt && w[0].rework != w[1].rework)
        .count();
    let kept = keep(points.len(), MAX_POINTS.saturating_sub(joins), |i| {
        points[i].y
    });
    let mut lines: Vec<Line> = Vec::new();
    for p in kept.into_iter().map(|i| points[i]) {
        match lines.last_mut() {
            Some(l) if l.attempt == p.attempt && l.points.last().is_some_and(|q| q.0 <= p.x) => {
                if l.rework == p.rework {
                    l.points.push((p.x, p.y));
                } else {
                    let q = *l.points.last().unwrap_or(&(p.x, p.y));
                    lines.push(Line {
                        rank,
                        attempt: p.attempt,
                        rework: p.rework,
                        points: vec![q, (p.x, p.y)],
                    });
                }
            }
            _ => lines.push(Line {
                rank,
                attempt: p.attempt,
                rework: p.rework,
                points: vec![(p.x, p.y)],
            }),
        }
    }
    lines
}

/// The polylines the plot of `metric` draws for `exp` (what [`build`] puts in
/// [`Plot::lines`]; none when no rank has a reading of it): one per rank per attempt, and
/// within an attempt the readings at steps an earlier attempt already reached — computed
/// again after resuming from a checkpoint — in a line of their own marked
/// [`Line::rework`], which the fresh line of the attempt continues from its last point. No
/// line spans two attempts and x never decreases along a line.
pub fn lines(exp: &ExpData, metric: Metric) -> Vec<Line> {
    build(exp, metric).map(|p| p.lines).unwrap_or_default()
}

/// The plot of `metric` for `exp`; `None` when no rank has a reading of it.
pub fn build(exp: &ExpData, metric: Metric) -> Option<Plot> {
    let has = |col: &str| {
        exp.all_series().iter().any(|s| {
            s.column(col)
                .is_some_and(|c| c.iter().any(|v| v.is_finite()))
        })
    };
    let (column, y_label) = match metric {
        Metric::Loss => ("loss", "loss"),
        Metric::Throughput if has("samples_per_s") => ("samples_per_s", "samples/s"),
        Metric::Throughput => ("tokens_per_s", "tokens/s"),
        Metric::GpuUtil | Metric::GpuMemory => return build_gpus(exp, metric),
    };
    if !has(column) {
        return None;
    }
    // Steps when any reading has one (the readings without a step are left out: a trainer
    // printing its own line beside the convention's, such as SwAV's `Epoch: [E][I]`
    // before its first JSON line, must not turn the axis into seconds); else seconds since
    // the first reading.
    let by_step = exp.all_series().iter().any(|s| {
        s.column(column).is_some_and(|c| {
            c.iter()
                .zip(&s.step)
                .any(|(v, step)| v.is_finite() && step.is_some())
        })
    });
    let t0 = exp
        .all_series()
        .iter()
        .flat_map(|s| s.time_ms.iter().copied())
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    let mut per_rank: std::collections::BTreeMap<u32, Vec<Point>> = Default::default();
    let mut markers = Vec::new();
    let mut rework: Vec<Rework> = Vec::new();
    let mut first_with_data = true;
    // The highest step any earlier attempt reached (any reading with a step).
    let mut reached: Option<u64> = None;
    for attempt in &exp.attempts {
        let mut start: Option<f64> = None;
        for (rank, s) in &attempt.ranks {
            let Some(col) = s.column(column) else {
                continue;
            };
            let line = per_rank.entry(*rank).or_default();
            for (i, &y) in col.iter().enumerate() {
                if !y.is_finite() {
                    continue;
                }
                let (x, again) = if by_step {
                    let Some(step) = s.step[i] else { continue };
                    (step as f64, reached.is_some_and(|r| step <= r))
                } else {
                    (s.time_ms[i].saturating_sub(t0) as f64 / 1000.0, false)
                };
                start = Some(start.map_or(x, |s0| s0.min(x)));
                if again {
                    match rework.last_mut() {
                        Some(r) if r.attempt == attempt.number => {
                            (r.from, r.to) = (r.from.min(x), r.to.max(x));
                        }
                        _ => rework.push(Rework {
                            attempt: attempt.number,
                            from: x,
                            to: x,
                        }),
                    }
                }
                line.push(Point {
                    x,
                    y,
                    attempt: attempt.number,
                    rework: again,
                });
            }
        }
        let top = attempt
            .ranks
            .iter()
            .flat_map(|(_, s)| s.step.iter().flatten().copied())
            .max();
        reached = reached.max(top);
        if let Some(x) = start {
            if !first_with_data {
                let label = exp
                    .history
                    .attempts
                    .get(&attempt.number)
                    .map_or("attempt", |i| began_word(&i.began));
                markers.push(Marker {
                    attempt: attempt.number,
                    x,
                    label: label.to_owned(),
                });
            }
            first_with_data = false;
        }
    }
    let lines: Vec<Line> = per_rank
        .into_iter()
        .flat_map(|(rank, points)| split(rank, &points))
        .collect();
    Some(Plot {
        name: exp.name.clone(),
        metric,
        column: column.to_owned(),
        title: format!("{}: {}", exp.name, metric.word()),
        x_label: if by_step {
            "step".to_owned()
        } else {
            "seconds since the first reading".to_owned()
        },
        y_label: y_label.to_owned(),
        lines,
        markers,
        rework,
        legend: Vec::new(),
        y_range: None,
    })
}

/// The title of the GPU utilisation plot after `NAME: ` (the page's and a test's handle).
pub const GPU_UTIL_TITLE: &str = "GPU utilisation";
/// The title of the GPU memory plot after `NAME: `.
pub const GPU_MEMORY_TITLE: &str = "GPU memory used";

/// The plot of a GPU metric: one line per GPU per attempt over the seconds since the job's
/// first sample, each GPU its own colour, the legend naming it `node/GPU (rank R)`, each
/// attempt after the first marked; `None` without samples.
fn build_gpus(exp: &ExpData, metric: Metric) -> Option<Plot> {
    let memory = metric == Metric::GpuMemory;
    let (legend, lines) = exp.gpus.plot_lines(memory);
    if lines.is_empty() {
        return None;
    }
    let mut lines: Vec<Line> = lines
        .into_iter()
        .map(|(key, attempt, points)| Line {
            rank: key,
            attempt,
            rework: false,
            points,
        })
        .collect();
    lines.sort_by_key(|l| (l.rank, l.attempt));
    let mut starts: std::collections::BTreeMap<u32, f64> = Default::default();
    for l in &lines {
        let x = l.points[0].0;
        let s = starts.entry(l.attempt).or_insert(x);
        *s = s.min(x);
    }
    let markers = starts
        .into_iter()
        .skip(1)
        .map(|(attempt, x)| Marker {
            attempt,
            x,
            label: exp
                .history
                .attempts
                .get(&attempt)
                .map_or("attempt", |i| began_word(&i.began))
                .to_owned(),
        })
        .collect();
    let (title, column, y_label) = if memory {
        (GPU_MEMORY_TITLE, "memory.used", "memory used (GiB)")
    } else {
        (GPU_UTIL_TITLE, "utilization.gpu", "utilisation (%)")
    };
    let top = if memory {
        let total = exp
            .gpus
            .per_gpu
            .iter()
            .filter_map(|g| g.summary.mem_total)
            .map(|t| t / 1024.0);
        let used = lines.iter().flat_map(|l| l.points.iter().map(|p| p.1));
        total.chain(used).fold(1.0, f64::max)
    } else {
        lines
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .fold(100.0, f64::max)
    };
    Some(Plot {
        name: exp.name.clone(),
        metric,
        column: column.to_owned(),
        title: format!("{}: {title}", exp.name),
        x_label: "seconds since the first GPU sample".to_owned(),
        y_label: y_label.to_owned(),
        lines,
        markers,
        rework: Vec::new(),
        legend,
        y_range: Some((0.0, top)),
    })
}

impl Plot {
    /// `NAME.loss`, `NAME.throughput`, `NAME.gpu-util`, `NAME.gpu-memory`: the file names
    /// without `.png`/`.svg`.
    pub fn file_stem(&self) -> String {
        format!("{}.{}", self.name, self.metric.word())
    }

    /// Points drawn over all lines.
    pub fn point_count(&self) -> usize {
        self.lines.iter().map(|l| l.points.len()).sum()
    }

    /// The ranks with a line, in order.
    pub fn ranks(&self) -> Vec<u32> {
        let mut ranks: Vec<u32> = self.lines.iter().map(|l| l.rank).collect();
        ranks.dedup();
        ranks
    }

    /// The legend's entries, in order: [`Plot::legend`] when it names them, else `rank R`
    /// for each rank with a line.
    pub fn legend_entries(&self) -> Vec<(u32, String)> {
        if self.legend.is_empty() {
            self.ranks()
                .into_iter()
                .map(|r| (r, format!("rank {r}")))
                .collect()
        } else {
            self.legend.clone()
        }
    }

    /// The legend's width, pixels: [`LEGEND_WIDTH`], wider when a named entry needs it
    /// (at most [`LEGEND_MAX_WIDTH`]; a longer name is cut at the picture's edge).
    pub fn legend_width(&self) -> u32 {
        let longest = self
            .legend
            .iter()
            .take(LEGEND_MAX)
            .map(|(_, l)| l.chars().count())
            .max()
            .unwrap_or(0);
        // About 8 pixels a character at the legend's 14 pixels, after the swatch.
        let needed = 44 + 8 * u32::try_from(longest).unwrap_or(u32::MAX / 16);
        needed.clamp(LEGEND_WIDTH, LEGEND_MAX_WIDTH)
    }

    /// What the lighter dashes mean, when the plot has any: `Lighter dashes on a shaded
    /// band: steps computed again after a resume from a checkpoint (attempt 1: steps
    /// 221–235).`
    pub fn rework_note(&self) -> Option<String> {
        if self.rework.is_empty() {
            return None;
        }
        let ranges: Vec<String> = self
            .rework
            .iter()
            .map(|r| {
                if r.from == r.to {
                    format!("attempt {}: step {}", r.attempt, r.from)
                } else {
                    format!("attempt {}: steps {}–{}", r.attempt, r.from, r.to)
                }
            })
            .collect();
        Some(format!(
            "Lighter dashes on a shaded band: steps computed again after a resume from a \
             checkpoint ({}).",
            ranges.join("; ")
        ))
    }

    /// The axes' ranges: (x0, x1, y0, y1), never empty.
    fn bounds(&self) -> (f64, f64, f64, f64) {
        let mut b = (
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NEG_INFINITY,
        );
        for (x, y) in self.lines.iter().flat_map(|l| l.points.iter()) {
            b = (b.0.min(*x), b.1.max(*x), b.2.min(*y), b.3.max(*y));
        }
        if !b.0.is_finite() {
            return (0.0, 1.0, 0.0, 1.0);
        }
        if let Some((y0, y1)) = self.y_range {
            // A little room at both ends, so a line at 0 % or at 100 % stays in sight.
            let pad = (y1 - y0) * 0.03;
            (b.2, b.3) = (y0 - pad, y1 + pad);
            if b.1 <= b.0 {
                b.1 = b.0 + 1.0;
            }
            return b;
        }
        if b.1 <= b.0 {
            b.1 = b.0 + 1.0;
        }
        if b.3 <= b.2 {
            let pad = (b.2.abs() * 0.05).max(1e-9);
            (b.2, b.3) = (b.2 - pad, b.3 + pad);
        } else {
            let pad = (b.3 - b.2) * 0.03;
            (b.2, b.3) = (b.2 - pad, b.3 + pad);
        }
        b
    }
}

/// Drawing failed (the backend's word).
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {what}: {why}")]
pub struct PlotError {
    /// The plot.
    pub what: String,
    /// Why.
    pub why: String,
}

impl From<PlotError> for CliError {
    fn from(e: PlotError) -> CliError {
        CliError::system(format!("cannot draw {}", e.what))(std::io::Error::other(e.why))
    }
}

static FONT: OnceLock<Result<(), String>> = OnceLock::new();

/// Registers the embedded DejaVu Sans as `sans-serif` (once).
fn font() -> Result<(), String> {
    FONT.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .map_err(|_| "the embedded font does not load".to_owned())
    })
    .clone()
}

fn rgb((r, g, b): (u8, u8, u8)) -> RGBColor {
    RGBColor(r, g, b)
}

/// Draws `plot` on `root`. `segments`: each line as its own two-point segments (for the
/// bitmap: wide segments are filled without antialiasing blends at the joints); else one
/// path per rank (for SVG: one `<polyline>` a rank).
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    plot: &Plot,
    segments: bool,
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    font()?;
    root.fill(&WHITE).map_err(e)?;
    let (area, legend) = root.split_horizontally(WIDTH - plot.legend_width());
    let (x0, x1, y0, y1) = plot.bounds();
    let mut chart = ChartBuilder::on(&area)
        .caption(&plot.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(e)?;
    let whole = |v: &f64| format!("{v:.0}");
    let mut mesh = chart.configure_mesh();
    if plot.x_label == "step" {
        mesh.x_label_formatter(&whole);
    }
    mesh.x_desc(plot.x_label.as_str())
        .y_desc(plot.y_label.as_str())
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 16))
        .bold_line_style(RGBColor(225, 225, 225))
        .light_line_style(RGBColor(244, 244, 244))
        .draw()
        .map_err(e)?;
    let (band, opacity) = REWORK_BAND;
    for r in &plot.rework {
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(r.from, y0), (r.to, y1)],
                rgb(band).mix(opacity).filled(),
            )))
            .map_err(e)?;
    }
    let ranks = plot.ranks();
    let entries = plot.legend_entries();
    let width = if ranks.len() <= LEGEND_MAX {
        LINE_WIDTH
    } else {
        THIN_LINE_WIDTH
    };
    // The recomputed parts last and dashed: where they repeat the first computation's
    // values exactly (a deterministic resume), both stay in sight.
    let drawn = plot
        .lines
        .iter()
        .filter(|l| !l.rework)
        .chain(plot.lines.iter().filter(|l| l.rework));
    for line in drawn {
        let colour = if line.rework {
            rework_colour(line.rank)
        } else {
            rank_colour(line.rank)
        };
        let style = ShapeStyle {
            color: rgb(colour).to_rgba(),
            filled: false,
            stroke_width: width,
        };
        if line.points.len() == 1 {
            // A line of one reading is a dot.
            chart
                .draw_series(std::iter::once(Circle::new(
                    line.points[0],
                    width + 1,
                    style.filled(),
                )))
                .map_err(e)?;
        } else if line.rework {
            chart
                .draw_series(DashedLineSeries::new(
                    line.points.iter().copied(),
                    REWORK_DASH.0,
                    REWORK_DASH.1,
                    style,
                ))
                .map_err(e)?;
        } else if segments {
            chart
                .draw_series(
                    line.points
                        .windows(2)
                        .map(|w| PathElement::new(vec![w[0], w[1]], style)),
                )
                .map_err(e)?;
        } else {
            chart
                .draw_series(LineSeries::new(line.points.iter().copied(), style))
                .map_err(e)?;
        }
    }
    let marker = rgb(MARKER_COLOUR);
    for m in &plot.markers {
        chart
            .draw_series(DashedLineSeries::new(
                vec![(m.x, y0), (m.x, y1)],
                8,
                6,
                ShapeStyle {
                    color: marker.to_rgba(),
                    filled: false,
                    stroke_width: 1,
                },
            ))
            .map_err(e)?;
        chart
            .draw_series(std::iter::once(
                EmptyElement::at((m.x, y1))
                    + Text::new(
                        m.label.clone(),
                        (4, 4),
                        TextStyle::from(("sans-serif", 14).into_font()).color(&marker),
                    ),
            ))
            .map_err(e)?;
    }
    let font = ("sans-serif", 14).into_font();
    let mut y = 50;
    for (key, label) in entries.iter().take(LEGEND_MAX) {
        legend
            .draw(&Rectangle::new(
                [(8, y + 5), (30, y + 9)],
                rgb(rank_colour(*key)).filled(),
            ))
            .map_err(e)?;
        legend
            .draw(&Text::new(label.clone(), (36, y), font.clone()))
            .map_err(e)?;
        y += 22;
    }
    if entries.len() > LEGEND_MAX {
        legend
            .draw(&Text::new(
                format!("+{} more", entries.len() - LEGEND_MAX),
                (8, y),
                font.clone(),
            ))
            .map_err(e)?;
        y += 22;
    }
    if !plot.rework.is_empty() {
        // What the lighter dashes on the band are.
        y += 12;
        legend
            .draw(&Rectangle::new(
                [(8, y - 2), (30, y + 16)],
                rgb(band).mix(opacity).filled(),
            ))
            .map_err(e)?;
        // In the colour of a line that was computed again (an overlay's lines are runs').
        let again = plot.lines.iter().find(|l| l.rework).map(|l| l.rank);
        let swatch = rgb(rework_colour(again.or(ranks.first().copied()).unwrap_or(0)));
        legend
            .draw(&Rectangle::new([(8, y + 5), (15, y + 9)], swatch.filled()))
            .map_err(e)?;
        legend
            .draw(&Rectangle::new([(19, y + 5), (26, y + 9)], swatch.filled()))
            .map_err(e)?;
        for (i, text) in ["computed again", "after a resume"].iter().enumerate() {
            legend
                .draw(&Text::new(
                    *text,
                    (36, y + 17 * i as i32),
                    ("sans-serif", 13).into_font(),
                ))
                .map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}

/// `plot` as an SVG document, herd's mark (a comment, [`herd_exp::outputs::SVG_MARK`]) on
/// its first line, before the `<svg>`: a code snapshot knows the file by it and leaves it
/// out. (The page inlines the SVG from its `<svg>` on, without the comment.)
pub fn svg(plot: &Plot) -> Result<String, PlotError> {
    let mut out = format!("{}\n", herd_exp::outputs::SVG_MARK);
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, plot, false).map_err(|why| PlotError {
            what: plot.title.clone(),
            why,
        })?;
    }
    Ok(out)
}

/// `plot` as RGB pixels, `WIDTH × HEIGHT × 3` bytes, row by row.
pub fn pixels(plot: &Plot) -> Result<Vec<u8>, PlotError> {
    let mut buf = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (WIDTH, HEIGHT)).into_drawing_area();
        draw(&root, plot, true).map_err(|why| PlotError {
            what: plot.title.clone(),
            why,
        })?;
    }
    Ok(buf)
}

/// `plot` as a PNG file's bytes, with herd's mark: a `tEXt` chunk `Software` right after
/// the header ([`herd_exp::outputs::PNG_KEYWORD`]), by which a code snapshot knows the
/// file and leaves it out.
pub fn png(plot: &Plot) -> Result<Vec<u8>, PlotError> {
    let rgb = pixels(plot)?;
    let err = |e: png::EncodingError| PlotError {
        what: plot.title.clone(),
        why: e.to_string(),
    };
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, WIDTH, HEIGHT);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.add_text_chunk(
            herd_exp::outputs::PNG_KEYWORD.into(),
            herd_exp::outputs::GENERATOR.into(),
        )
        .map_err(err)?;
        let mut w = enc.write_header().map_err(err)?;
        w.write_image_data(&rgb).map_err(err)?;
        w.finish().map_err(err)?;
    }
    Ok(out)
}

/// What [`write`] did for one experiment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Written {
    /// The files written, in order.
    pub files: Vec<PathBuf>,
    /// A line for each plot not written: `NAME: no loss readings`.
    pub notes: Vec<String>,
}

/// Both plots of `exp` that have readings, and a note for each that has none
/// (`NAME: no loss readings: no loss plot`); then, when it has GPU samples, its GPUs'
/// utilisation and memory ([`Metric::GPU`]; no note without).
pub fn build_all(exp: &ExpData) -> (Vec<Plot>, Vec<String>) {
    let mut plots = Vec::new();
    let mut notes = Vec::new();
    for metric in Metric::ALL {
        match build(exp, metric) {
            Some(p) => plots.push(p),
            None => notes.push(format!(
                "{}: no {} readings: no {} plot",
                exp.name,
                match metric {
                    Metric::Loss => "loss",
                    Metric::Throughput => "samples_per_s or tokens_per_s",
                    Metric::GpuUtil | Metric::GpuMemory => "GPU samples",
                },
                metric.word()
            )),
        }
    }
    plots.extend(Metric::GPU.into_iter().filter_map(|m| build(exp, m)));
    (plots, notes)
}

/// Writes `DIR/STEM.png` and `DIR/STEM.svg` for each of `plots` (`dir` created when
/// missing), each through a temporary file and a rename; the paths written, in order.
pub fn write_files(plots: &[Plot], dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    std::fs::create_dir_all(dir)
        .map_err(CliError::system(format!("cannot create {}", dir.display())))?;
    let mut files = Vec::new();
    for plot in plots {
        let stem = plot.file_stem();
        let path = dir.join(format!("{stem}.png"));
        crate::write_atomic(&path, &png(plot)?)?;
        files.push(path);
        let path = dir.join(format!("{stem}.svg"));
        crate::write_atomic(&path, svg(plot)?.as_bytes())?;
        files.push(path);
    }
    Ok(files)
}

/// Writes `DIR/NAME.loss.{png,svg}` and `DIR/NAME.throughput.{png,svg}` for `exp`, and
/// `NAME.gpu-util.{png,svg}`, `NAME.gpu-memory.{png,svg}` when it has GPU samples
/// ([`build_all`], [`write_files`]): a metric without readings is no file but a note.
pub fn write(exp: &ExpData, dir: &Path) -> Result<Written, CliError> {
    let (plots, notes) = build_all(exp);
    Ok(Written {
        files: write_files(&plots, dir)?,
        notes,
    })
}
