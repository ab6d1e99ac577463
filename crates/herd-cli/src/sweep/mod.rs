//! Sweeps: a grid of runs submitted as one SLURM array, each run a complete experiment
//! (docs/sweeps.md); [`submit`] makes and queues one (`herd submit --sweep`), the rest
//! shows and compares one as a whole (docs/status.md, "A sweep"; docs/report.md, "A
//! sweep").
//!
//! These views take the sweep as values ([`Sweep`], its runs [`SweepRun`]), whatever
//! stores it; the command line builds a [`Sweep`] from the sweep's folder and calls:
//!
//! - **`herd report NAME`**: [`report::run`]`(&sweep, &answer, &Options::from(&args), out)`
//!   prints the table of runs × values × final loss, best loss, samples/s, goodput and
//!   state, sorted by final loss (`--json`: the same as data), the scaling table when the
//!   runs ran at different sizes, and with `--plots DIR` / `--html FILE` the overlay of
//!   every run's loss (`DIR/NAME.loss.png`, `.svg`) and the page. The parts:
//!   [`report::load`] → [`report::SweepReport`] (`markdown`, `json`, `overlay`, `page`),
//!   [`report::write_overlay`].
//! - **`herd status`** (the job list): [`status::status`]`(&sweep, &answer)` →
//!   [`status::SweepStatus`]; its [`row`](status::SweepStatus::row) is the sweep's line in
//!   the `EXPERIMENT JOB STATE ATTEMPTS DETAIL` table (`sweep: 4 runs: 2 running, 1
//!   queued, 1 finished`), [`row_json`](status::SweepStatus::row_json) its `--json`
//!   entry.
//! - **`herd status NAME`**: the same [`status::SweepStatus`]'s
//!   [`text`](status::SweepStatus::text) (one line per run: values, job, state, attempts,
//!   goodput, detail) and [`json`](status::SweepStatus::json); then
//!   [`state::record_ends`]`(&sweep, &answer)`, so a run whose task left the queue still
//!   says how it ended, as `herd status` records an experiment's end.
//!
//! `answer` is the scheduler's: [`Answer::ask`]`(&sweep, timeout)` makes the one `squeue`
//! call for the sweep's array (and returns why when it did not answer: the states then
//! come from the run folders alone, as `herd status` says), [`Answer::none`] asks nothing.
//! Each run's state is `herd status`'s for an experiment ([`crate::status::view`]), from
//! its array task's row (`ARRAY_INDEX`, or the array's pending rest that holds it) and
//! its folder.

pub mod overlay;
pub mod report;
pub mod resume;
pub mod run;
pub mod state;
pub mod status;
pub mod submit;
pub mod table;

pub use report::{Options, SweepReport};
pub use run::{Sweep, SweepRun};
pub use state::Answer;
pub use status::SweepStatus;
pub use submit::run;

#[cfg(test)]
mod tests;
