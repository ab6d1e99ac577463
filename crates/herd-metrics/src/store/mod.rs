//! The per-rank metrics files of an attempt folder ([`AttemptDir::metrics`]), written by the
//! node's agent as it reads its workers' lines, read by `herd top` and `herd report`.
//!
//! Text, one reading a line, columns separated by tabs (shown as spaces here):
//!
//! ```text
//! # herd metrics 1
//! @    loss    samples_per_s
//! 1796060412123    10    2.31    512
//! 1796060412623    20    2.12    530.5
//! @    loss    val_loss
//! 1796060413001    -    2.05    2.4
//! ```
//!
//! - The first line names the format and its version.
//! - A line starting `@` names the value columns of the lines after it; a new one comes
//!   whenever a reading's names differ from the last ones.
//! - Every other line: when the agent read it (milliseconds since the Unix epoch; 0 when not
//!   known), the step (`-` when the line had none), then the values in the columns' order
//!   (`-` for one a reading did not have).
//!
//! A worker may also write herd's JSON-lines convention itself, one object a line, to
//! `$HERD_METRICS_FILE` ([`AttemptDir::worker_metrics`], beside it): [`read_rank`] reads
//! both.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use herd_exp::layout::{AttemptDir, RankFile};

use crate::read::{reader, Format};

mod parse;
mod series;

use crate::Record;
use parse::parse_bytes;
pub use parse::{parse_into, Tail};
pub use series::{Series, StoreError, HEADER};

/// Appends readings to one rank's metrics file; created with its first reading.
#[derive(Debug)]
pub struct Writer {
    path: PathBuf,
    file: Option<File>,
    columns: Vec<String>,
}

impl Writer {
    /// A writer of `path` (nothing is created until the first reading).
    pub fn new(path: PathBuf) -> Writer {
        Writer {
            path,
            file: None,
            columns: Vec::new(),
        }
    }

    /// Appends `record`, read at `unix_ms`: one write of its line (and of a column line
    /// before it when its names differ from the last ones).
    pub fn write(&mut self, unix_ms: u64, record: &Record) -> io::Result<()> {
        let mut text = String::with_capacity(64);
        if self.file.is_none() {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            // A file that exists already (an agent started again on the same attempt) has
            // its header and columns; the next line states the columns again.
            if file.metadata()?.len() == 0 {
                text.push_str(HEADER);
                text.push('\n');
            }
            self.file = Some(file);
            self.columns.clear();
        }
        let same = self.columns.len() == record.values.len()
            && self
                .columns
                .iter()
                .zip(&record.values)
                .all(|(c, (n, _))| c == n);
        if !same {
            text.push('@');
            self.columns.clear();
            for (name, _) in &record.values {
                text.push('\t');
                text.push_str(&clean(name));
                self.columns.push(name.clone());
            }
            text.push('\n');
        }
        text.push_str(&unix_ms.to_string());
        text.push('\t');
        match record.step {
            Some(s) => text.push_str(&s.to_string()),
            None => text.push('-'),
        }
        for (_, v) in &record.values {
            text.push('\t');
            if v.is_finite() {
                text.push_str(&v.to_string());
            } else {
                text.push('-');
            }
        }
        text.push('\n');
        match &mut self.file {
            Some(f) => f.write_all(text.as_bytes()),
            None => Ok(()),
        }
    }
}

/// A column name as stored: no tab, newline or `@`-confusion.
fn clean(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_whitespace() { '_' } else { c })
        .collect()
}

/// Every reading of rank `rank` in the attempt folder `dir`: the agent's file, then the
/// worker's own convention lines, if any. No file: no readings.
pub fn read_rank(dir: &Path, rank: u32) -> Result<Series, StoreError> {
    let mut series = Series::default();
    let dir = AttemptDir::new(dir);
    let path = dir.metrics(rank);
    match std::fs::read(&path) {
        Ok(text) => parse_bytes(&text, &path, &mut series)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(StoreError::Io { path, source }),
    }
    let path = dir.worker_metrics(rank);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mut json = reader(&Format::Json);
            for line in text.lines() {
                if let Some(record) = json.line(line) {
                    series.push(0, &record);
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(StoreError::Io { path, source }),
    }
    Ok(series)
}

/// The ranks that have metrics in the attempt folder `dir` (the agent's file or the
/// worker's own), in order; a folder that does not exist is an error.
pub fn ranks(dir: &Path) -> io::Result<Vec<u32>> {
    std::fs::metadata(dir)?;
    AttemptDir::new(dir).ranks_with(&[RankFile::Metrics, RankFile::WorkerMetrics])
}

/// Every rank's readings in the attempt folder `dir`, the files read in parallel (one
/// thread per core).
pub fn read_attempt(dir: &Path) -> Result<Vec<(u32, Series)>, StoreError> {
    let ranks = ranks(dir).map_err(|source| StoreError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, ranks.len().max(1));
    let chunk = ranks.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = ranks
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|&r| read_rank(dir, r).map(|series| (r, series)))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        let mut all = Vec::with_capacity(ranks.len());
        for p in parts {
            match p.join() {
                Ok(part) => all.extend(part?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(all)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rec;

    #[test]
    fn written_readings_read_back_column_by_column() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = AttemptDir::new(dir.path()).metrics(3);
        let mut w = Writer::new(path.clone());
        w.write(
            100,
            &rec(Some(10), &[("loss", 2.31), ("samples_per_s", 512.0)]),
        )
        .expect("write");
        w.write(
            200,
            &rec(Some(20), &[("loss", 2.12), ("samples_per_s", 530.5)]),
        )
        .expect("write");
        w.write(300, &rec(None, &[("loss", 2.05), ("val loss", f64::NAN)]))
            .expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "# herd metrics 1\n@\tloss\tsamples_per_s\n100\t10\t2.31\t512\n200\t20\t2.12\t530.5\n\
             @\tloss\tval_loss\n300\t-\t2.05\t-\n"
        );
        let s = read_rank(dir.path(), 3).expect("reads");
        assert_eq!(s.time_ms, [100, 200, 300]);
        assert_eq!(s.step, [Some(10), Some(20), None]);
        assert_eq!(s.column("loss").expect("loss"), [2.31, 2.12, 2.05]);
        let rate = s.column("samples_per_s").expect("rate");
        assert_eq!(&rate[..2], [512.0, 530.5]);
        assert!(rate[2].is_nan());
        assert!(s.column("val_loss").expect("val")[..2]
            .iter()
            .all(|v| v.is_nan()));
        assert_eq!(s.last("samples_per_s"), Some((Some(20), 530.5)));
        assert!(read_rank(dir.path(), 4).expect("none").is_empty());
    }

    #[test]
    fn a_workers_own_convention_file_is_read_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            AttemptDir::new(dir.path()).worker_metrics(0),
            "{\"step\": 5, \"loss\": 1.5}\nnot json\n{\"step\": 6, \"loss\": 1.25, \"tokens_per_s\": 9000}\n",
        )
        .expect("write");
        let s = read_rank(dir.path(), 0).expect("reads");
        assert_eq!(s.step, [Some(5), Some(6)]);
        assert_eq!(s.column("loss").expect("loss"), [1.5, 1.25]);
        assert!(s.column("tokens_per_s").expect("tps")[0].is_nan());
    }

    #[test]
    fn an_attempt_reads_every_rank_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        for rank in [2u32, 0, 11] {
            let mut w = Writer::new(AttemptDir::new(dir.path()).metrics(rank));
            for step in 1..=3u64 {
                w.write(
                    step,
                    &rec(Some(step), &[("loss", f64::from(rank) + step as f64)]),
                )
                .expect("write");
            }
        }
        std::fs::write(
            AttemptDir::new(dir.path()).worker_metrics(5),
            "{\"step\": 1, \"loss\": 9}\n",
        )
        .expect("jsonl");
        std::fs::write(dir.path().join("rank-3.out"), "not metrics\n").expect("log");
        let all = read_attempt(dir.path()).expect("reads");
        let ranks: Vec<u32> = all.iter().map(|(r, _)| *r).collect();
        assert_eq!(ranks, [0, 2, 5, 11]);
        assert_eq!(all[3].1.column("loss").expect("loss"), [12.0, 13.0, 14.0]);
        assert_eq!(all[2].1.column("loss").expect("loss"), [9.0]);
    }
}
