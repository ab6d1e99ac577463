//! `herd top NAME`: a live view of a running job, one row per rank (docs/top.md).
//!
//! - [`model`]: the folder read refresh after refresh into a [`model::Frame`] (no terminal).
//! - [`gpus`]: the GPU samples of the attempt, read as they grow, and their flags.
//! - [`view`]: the frame drawn with ratatui, or as plain text for `--once`.
//! - here: the arguments, the scheduler's state in a background thread, the terminal loop
//!   and its keys.

pub mod gpus;
pub mod model;
pub mod view;

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::time::{Duration, Instant};

use clap::Args;
use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use herd_slurm::scheduler::queue::{self, Scope};

use crate::{CliError, ExitStatus};
use model::{Frame, Reader, Thresholds};
use view::Ui;

/// How often the folder is read again.
pub const REFRESH: Duration = Duration::from_secs(1);
/// How often the scheduler is asked for the job's state (never once the job ended).
pub const QUEUE_EVERY: Duration = Duration::from_secs(10);
/// How long `--once` waits for the scheduler.
pub const ONCE_TIMEOUT: Duration = Duration::from_secs(3);
/// Lines of the log pane.
const PANE_LINES: usize = 200;

/// `herd top` arguments.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    /// The experiment: its folder's name under the experiment root.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// The experiment root (default: the profile's `exp_root`, else herd-exp/ in this
    /// folder, as for `herd submit`).
    #[arg(long, value_name = "DIR")]
    pub exp_root: Option<PathBuf>,
    /// Show attempt K (`logs/attempt-K`) instead of following the newest.
    #[arg(long, value_name = "K")]
    pub attempt: Option<u32>,
    /// A running rank with no output for longer than this is SILENT (default: 60 s, or 10
    /// times the rank's own usual gap between lines when that is longer).
    #[arg(long, value_name = "SECS")]
    pub silent_after: Option<u64>,
    /// Print one frame as plain text and exit (no full-screen view; for scripts, and
    /// needed when stdout is not a terminal).
    #[arg(long)]
    pub once: bool,
}

fn now_ms() -> u64 {
    herd_exp::timeline::now().1
}

/// The scheduler's state of job `id` in a few words: SLURM's state (`RUNNING`), `not in
/// the queue`, or why it is not known.
pub fn queue_state(id: &str, timeout: Duration) -> String {
    match queue::query(Scope::Jobs(std::slice::from_ref(&id.to_owned())), timeout) {
        Ok(rows) => crate::status::SchedJob::group(rows)
            .into_iter()
            .find(|j| j.id == id)
            .map_or_else(|| "not in the queue".to_owned(), |j| j.lead().state.clone()),
        Err(_) => "squeue: no answer".to_owned(),
    }
}

/// The scheduler's state, asked in a background thread at most every [`QUEUE_EVERY`], so a
/// slow slurmctld never holds the screen.
struct Queue {
    rx: Option<Receiver<String>>,
    next: Instant,
    state: Option<String>,
}

impl Queue {
    fn new() -> Queue {
        Queue {
            rx: None,
            next: Instant::now(),
            state: None,
        }
    }

    fn poll(&mut self, frame: &Frame) -> Option<String> {
        if let Some(rx) = &self.rx {
            match rx.try_recv() {
                Ok(s) => {
                    self.state = Some(s);
                    self.rx = None;
                }
                Err(TryRecvError::Disconnected) => self.rx = None,
                Err(TryRecvError::Empty) => {}
            }
        }
        let id = frame.job_ids.last();
        if let (None, Some(id), false) = (&self.rx, id, frame.is_over()) {
            if Instant::now() >= self.next {
                self.next = Instant::now() + QUEUE_EVERY;
                let (tx, rx) = mpsc::channel();
                let id = id.clone();
                std::thread::spawn(move || {
                    let _ = tx.send(queue_state(&id, crate::site::DEFAULT_TIMEOUT));
                });
                self.rx = Some(rx);
            }
        }
        self.state.clone()
    }
}

/// `herd top`.
pub fn run(args: TopArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let root = crate::site::exp_root(args.exp_root.as_deref())?;
    let exp = crate::logs::open_experiment(&root, &args.name)?;
    let attempts = exp.paths().logs().attempts().unwrap_or_default();
    if let Some(k) = args.attempt {
        if !attempts.is_empty() && !attempts.contains(&k) {
            let list: Vec<String> = attempts.iter().map(u32::to_string).collect();
            return Err(CliError::Usage(format!(
                "--attempt {k}: {} has no attempt {k} (its attempts: {})",
                args.name,
                list.join(", ")
            )));
        }
    }
    let thresholds = Thresholds {
        silent_after: args.silent_after.map(Duration::from_secs),
        ..Thresholds::default()
    };
    let mut reader = Reader::new(exp, args.attempt, thresholds);
    if args.once {
        let mut frame = reader.frame(now_ms());
        if let (Some(id), false) = (frame.job_ids.last(), frame.is_over()) {
            frame.slurm = Some(queue_state(id, ONCE_TIMEOUT));
        }
        out.write_all(view::text(&frame).as_bytes())?;
        return Ok(ExitStatus::Success);
    }
    if !std::io::stdout().is_terminal() {
        return Err(CliError::Usage(
            "herd top needs a terminal on stdout for its live view: use `herd top NAME --once` to print one frame as text".into(),
        ));
    }
    let mut ui = Ui {
        silent_after: thresholds.silent_after,
        ..Ui::default()
    };
    live(&mut reader, &mut ui)?;
    Ok(ExitStatus::Success)
}

/// Puts the terminal back (raw mode off, main screen, cursor) when dropped: on return, on
/// error and on panic (the hook also does it before the message is printed).
struct Terminal {
    inner: ratatui::Terminal<ratatui::backend::CrosstermBackend<std::io::Stdout>>,
}

fn restore() {
    let _ = crossterm::terminal::disable_raw_mode();
    let _ = crossterm::execute!(
        std::io::stdout(),
        crossterm::terminal::LeaveAlternateScreen,
        crossterm::cursor::Show
    );
}

impl Terminal {
    fn start() -> Result<Terminal, CliError> {
        let sys = |what: &'static str| CliError::system(what);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            hook(info);
        }));
        crossterm::terminal::enable_raw_mode()
            .map_err(sys("cannot put the terminal in raw mode"))?;
        let mut t = Terminal {
            inner: ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(
                std::io::stdout(),
            ))
            .map_err(sys("cannot use the terminal"))?,
        };
        crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::cursor::Hide
        )
        .map_err(sys("cannot switch to the alternate screen"))?;
        t.inner.clear().map_err(sys("cannot clear the terminal"))?;
        Ok(t)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        restore();
    }
}

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing (redraw).
    None,
    /// Leave.
    Quit,
    /// The previous attempt.
    PrevAttempt,
    /// The next attempt (past the newest: follow the newest again).
    NextAttempt,
}

/// Applies `key` to `ui` (sort, selection, pane, help); says what the loop must do.
pub fn key(ui: &mut Ui, frame: &Frame, key: KeyEvent) -> Action {
    if key.kind == KeyEventKind::Release {
        return Action::None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let rows = frame.rows.len();
    let select = |ui: &mut Ui, to: usize| {
        if rows > 0 {
            ui.table.select(Some(to.min(rows - 1)));
        }
    };
    let at = ui.table.selected().unwrap_or(0);
    match key.code {
        KeyCode::Char('c') if ctrl => return Action::Quit,
        KeyCode::Char('q') => return Action::Quit,
        KeyCode::Esc | KeyCode::Char('l') | KeyCode::Enter if ui.pane.is_some() => ui.pane = None,
        KeyCode::Esc if ui.help => ui.help = false,
        KeyCode::Esc => return Action::Quit,
        KeyCode::Char('?') => ui.help = !ui.help,
        KeyCode::Char('s') => ui.sort = ui.sort.next(),
        KeyCode::Up | KeyCode::Char('k') => select(ui, at.saturating_sub(1)),
        KeyCode::Down | KeyCode::Char('j') => select(ui, at + 1),
        KeyCode::PageUp => select(ui, at.saturating_sub(10)),
        KeyCode::PageDown => select(ui, at + 10),
        KeyCode::Home | KeyCode::Char('g') => select(ui, 0),
        KeyCode::End | KeyCode::Char('G') => select(ui, usize::MAX),
        KeyCode::Enter | KeyCode::Char('l') => {
            if let Some(r) = view::selected_rank(frame, ui) {
                ui.pane = Some((r, Vec::new()));
            }
        }
        KeyCode::Char('a') => return Action::PrevAttempt,
        KeyCode::Char('A') => return Action::NextAttempt,
        _ => {}
    }
    Action::None
}

/// The frame as shown: the scheduler's state in, the rows sorted.
fn shown(reader: &mut Reader, queue: &mut Queue, ui: &mut Ui) -> Frame {
    let mut frame = reader.frame(now_ms());
    frame.slurm = queue.poll(&frame);
    model::sort_rows(&mut frame.rows, ui.sort);
    if let Some((rank, lines)) = &mut ui.pane {
        *lines = reader.log_tail(*rank, PANE_LINES);
    }
    frame
}

fn live(reader: &mut Reader, ui: &mut Ui) -> Result<(), CliError> {
    let mut term = Terminal::start()?;
    let mut queue = Queue::new();
    let mut frame = shown(reader, &mut queue, ui);
    let mut next = Instant::now() + REFRESH;
    loop {
        term.inner
            .draw(|f| view::draw(f, &frame, ui))
            .map_err(CliError::system("cannot draw on the terminal"))?;
        let wait = next.saturating_duration_since(Instant::now());
        let ready = event::poll(wait).map_err(CliError::system("cannot read the terminal"))?;
        if ready {
            let ev = event::read().map_err(CliError::system("cannot read the terminal"))?;
            let Event::Key(k) = ev else {
                // A resize: redrawn at once.
                continue;
            };
            let selected = view::selected_rank(&frame, ui);
            let sort = ui.sort;
            let pane = ui.pane.is_some();
            match key(ui, &frame, k) {
                Action::Quit => return Ok(()),
                Action::None => {}
                action => {
                    reader.pin(switch(&frame.attempts, reader.attempt(), action));
                    next = Instant::now();
                }
            }
            if ui.sort != sort {
                // The selection stays on its rank.
                model::sort_rows(&mut frame.rows, ui.sort);
                if let Some(r) = selected {
                    let i = frame.rows.iter().position(|row| row.rank == r);
                    ui.table.select(i);
                }
            }
            if ui.pane.is_some() && !pane {
                if let Some((rank, lines)) = &mut ui.pane {
                    *lines = reader.log_tail(*rank, PANE_LINES);
                }
            }
        }
        if Instant::now() >= next {
            let selected = view::selected_rank(&frame, ui);
            frame = shown(reader, &mut queue, ui);
            if let Some(r) = selected {
                if let Some(i) = frame.rows.iter().position(|row| row.rank == r) {
                    ui.table.select(Some(i));
                }
            }
            next = Instant::now() + REFRESH;
        }
    }
}

/// The attempt to pin after `a` (previous) or `A` (next) from `current`: `None` follows
/// the newest (`A` onto the newest, or past it).
pub fn switch(attempts: &[u32], current: Option<u32>, action: Action) -> Option<u32> {
    let c = current?;
    let newest = attempts.last().copied();
    match action {
        Action::PrevAttempt => attempts.iter().rev().find(|&&a| a < c).copied().or(Some(c)),
        Action::NextAttempt => attempts
            .iter()
            .find(|&&a| a > c)
            .copied()
            .filter(|&a| Some(a) != newest),
        _ => Some(c),
    }
}

#[cfg(test)]
mod tests;
