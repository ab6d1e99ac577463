//! What the store holds: the format's first line, one rank's readings ([`Series`]), and
//! what goes wrong reading them ([`StoreError`]).

use std::io;
use std::path::PathBuf;

use crate::Record;

/// The first line of every metrics file.
pub const HEADER: &str = "# herd metrics 1";

/// Every reading of one rank, column by column.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Series {
    /// When each reading was read (ms since the epoch; 0: not known).
    pub time_ms: Vec<u64>,
    /// Each reading's step.
    pub step: Vec<Option<u64>>,
    /// Each value column's name and values, one per reading (NaN where a reading did not
    /// have it).
    pub columns: Vec<(String, Vec<f64>)>,
}

impl Series {
    /// How many readings.
    pub fn len(&self) -> usize {
        self.time_ms.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.time_ms.is_empty()
    }

    /// The column named `name`.
    pub fn column(&self, name: &str) -> Option<&[f64]> {
        self.columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    pub(super) fn column_index(&mut self, name: &str) -> usize {
        if let Some(i) = self.columns.iter().position(|(n, _)| n == name) {
            return i;
        }
        let mut col = Vec::with_capacity(self.time_ms.capacity());
        col.resize(self.time_ms.len(), f64::NAN);
        self.columns.push((name.to_owned(), col));
        self.columns.len() - 1
    }

    /// Appends one reading.
    pub fn push(&mut self, time_ms: u64, record: &Record) {
        let idx: Vec<usize> = record
            .values
            .iter()
            .map(|(n, _)| self.column_index(n))
            .collect();
        self.push_values(
            time_ms,
            record.step,
            &idx,
            record.values.iter().map(|(_, v)| *v),
        );
    }

    /// Room for `more` readings in every column, present and to come.
    pub(super) fn reserve(&mut self, more: usize) {
        self.time_ms.reserve(more);
        self.step.reserve(more);
        for (_, col) in &mut self.columns {
            col.reserve(more);
        }
    }

    /// Appends a reading with no values yet (NaN in every column); its row.
    pub(super) fn start_row(&mut self, time_ms: u64, step: Option<u64>) -> usize {
        self.time_ms.push(time_ms);
        self.step.push(step);
        for (_, col) in &mut self.columns {
            col.push(f64::NAN);
        }
        self.time_ms.len() - 1
    }

    /// Takes the last reading back off.
    pub(super) fn pop_row(&mut self) {
        self.time_ms.pop();
        self.step.pop();
        for (_, col) in &mut self.columns {
            col.pop();
        }
    }

    pub(super) fn push_values(
        &mut self,
        time_ms: u64,
        step: Option<u64>,
        idx: &[usize],
        values: impl Iterator<Item = f64>,
    ) {
        self.time_ms.push(time_ms);
        self.step.push(step);
        for (_, col) in &mut self.columns {
            col.push(f64::NAN);
        }
        let row = self.time_ms.len() - 1;
        for (&i, v) in idx.iter().zip(values) {
            self.columns[i].1[row] = v;
        }
    }

    /// The last reading's value of `name`, and its step.
    pub fn last(&self, name: &str) -> Option<(Option<u64>, f64)> {
        let col = self.column(name)?;
        let i = col.iter().rposition(|v| !v.is_nan())?;
        Some((self.step[i], col[i]))
    }
}

/// What a metrics file holds that is not one: the line, and what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// It could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A line that is not one of the format's.
    #[error("{}: line {line}: {what}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Its number, from 1.
        line: usize,
        /// What is wrong.
        what: String,
    },
}
