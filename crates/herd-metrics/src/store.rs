//! The per-rank metrics files: `logs/attempt-K/rank-R.metrics`, written by the node's agent
//! as it reads its workers' lines, read by `herd top` and `herd report`.
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
//! `$HERD_METRICS_FILE` (`rank-R.metrics.jsonl` beside it): [`read_rank`] reads both.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::read::{reader, Format};
use crate::Record;

/// The first line of every metrics file.
pub const HEADER: &str = "# herd metrics 1";

/// `DIR/rank-R.metrics`.
pub fn metrics_path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("rank-{rank}.metrics"))
}

/// `DIR/rank-R.metrics.jsonl`: where a worker writes the convention itself
/// (`HERD_METRICS_FILE`).
pub fn worker_file_path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("rank-{rank}.metrics.jsonl"))
}

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

    fn column_index(&mut self, name: &str) -> usize {
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
    fn reserve(&mut self, more: usize) {
        self.time_ms.reserve(more);
        self.step.reserve(more);
        for (_, col) in &mut self.columns {
            col.reserve(more);
        }
    }

    /// Appends a reading with no values yet (NaN in every column); its row.
    fn start_row(&mut self, time_ms: u64, step: Option<u64>) -> usize {
        self.time_ms.push(time_ms);
        self.step.push(step);
        for (_, col) in &mut self.columns {
            col.push(f64::NAN);
        }
        self.time_ms.len() - 1
    }

    /// Takes the last reading back off.
    fn pop_row(&mut self) {
        self.time_ms.pop();
        self.step.pop();
        for (_, col) in &mut self.columns {
            col.pop();
        }
    }

    fn push_values(
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

/// Parses the text of a metrics file into `series`; a partial last line (no newline yet:
/// the agent is writing it) is left out.
pub fn parse_into(text: &str, path: &Path, series: &mut Series) -> Result<(), StoreError> {
    parse_bytes(text.as_bytes(), path, series)
}

/// [`parse_into`] of the file's bytes as read: only column names need be UTF-8 (the agent
/// writes nothing else that is not ASCII digits), so the whole file is not checked first.
fn parse_bytes(text: &[u8], path: &Path, series: &mut Series) -> Result<(), StoreError> {
    Parser::default().feed(whole_lines(text), path, series)
}

/// `text` up to and with its last newline: the lines the agent finished writing.
fn whole_lines(text: &[u8]) -> &[u8] {
    match memchr::memrchr(b'\n', text) {
        Some(i) => &text[..=i],
        None => &[],
    }
}

/// Where a parse stands between two pieces of one file: the line number and the current
/// `@` columns (by name, so each piece may go into another [`Series`]).
#[derive(Debug, Clone, Default)]
struct Parser {
    /// Lines read so far.
    line: usize,
    /// The value columns of the lines that follow.
    columns: Vec<String>,
}

impl Parser {
    /// Parses `bytes`, whole lines only (each ending in a newline), into `series`, in one
    /// pass over each line: fields found and numbers read in place.
    fn feed(&mut self, bytes: &[u8], path: &Path, series: &mut Series) -> Result<(), StoreError> {
        let bad = |line: usize, what: String| StoreError::Format {
            path: path.to_owned(),
            line,
            what,
        };
        // One pass to count the lines, so the columns grow once (SIMD: a few ms for 300 MB).
        series.reserve(memchr::memchr_iter(b'\n', bytes).count());
        let mut idx: Vec<usize> = self
            .columns
            .iter()
            .map(|c| series.column_index(c))
            .collect();
        let mut pos = 0;
        while let Some(len) = memchr::memchr(b'\n', &bytes[pos..]) {
            let line = &bytes[pos..pos + len];
            pos += len + 1;
            self.line += 1;
            let n = self.line;
            if n == 1 {
                if line != HEADER.as_bytes() {
                    return Err(bad(
                        n,
                        format!("not a herd metrics file (expected {HEADER:?})"),
                    ));
                }
                continue;
            }
            if line.is_empty() {
                continue;
            }
            if line[0] == b'@' {
                let cols = std::str::from_utf8(&line[1..])
                    .map_err(|_| bad(n, "column names that are not UTF-8".into()))?;
                self.columns = ascii_split(cols, b'\t')
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect();
                idx = self
                    .columns
                    .iter()
                    .map(|c| series.column_index(c))
                    .collect();
                continue;
            }
            let mut f = Fields { line, at: 0 };
            let time = f
                .next()
                .and_then(digits)
                .ok_or_else(|| bad(n, "no time".into()))?;
            let step = match f.next() {
                Some(b"-") => None,
                Some(s) => Some(
                    digits(s)
                        .ok_or_else(|| bad(n, format!("step {:?}", String::from_utf8_lossy(s))))?,
                ),
                None => return Err(bad(n, "no step".into())),
            };
            let row = series.start_row(time, step);
            let mut count = 0;
            for v in f {
                let value = if v == b"-" {
                    f64::NAN
                } else {
                    match decimal(v) {
                        Some(x) => x,
                        None => std::str::from_utf8(v)
                            .ok()
                            .and_then(|t| t.parse::<f64>().ok())
                            .ok_or_else(|| {
                                bad(n, format!("value {:?}", String::from_utf8_lossy(v)))
                            })?,
                    }
                };
                if let Some(&i) = idx.get(count) {
                    series.columns[i].1[row] = value;
                }
                count += 1;
            }
            if count != idx.len() {
                series.pop_row();
                return Err(bad(n, format!("{count} values for {} columns", idx.len())));
            }
        }
        Ok(())
    }
}

/// The tab-separated fields of one line (a byte loop: fields are a few bytes, shorter than
/// a vector search pays for).
struct Fields<'a> {
    line: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Fields<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.at > self.line.len() {
            return None;
        }
        let rest = &self.line[self.at..];
        match rest.iter().position(|&b| b == b'\t') {
            Some(i) => {
                self.at += i + 1;
                Some(&rest[..i])
            }
            None => {
                self.at = self.line.len() + 1;
                Some(rest)
            }
        }
    }
}

/// Reads one rank's metrics file as it grows: each [`Tail::read`] parses only the whole
/// lines appended since the last one (a partial last line waits for its newline), keeping
/// the offset and the current `@` columns between reads. For a live view of a long run:
/// the cost of a read is what was appended, not the file.
#[derive(Debug, Clone)]
pub struct Tail {
    path: PathBuf,
    offset: u64,
    parser: Parser,
}

impl Tail {
    /// A tail of `path`, from its beginning (a file that does not exist yet is empty).
    pub fn new(path: PathBuf) -> Tail {
        Tail {
            path,
            offset: 0,
            parser: Parser::default(),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes read so far (whole lines only).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Appends the readings of the whole lines written since the last read to `series`;
    /// returns how many bytes were consumed. A file that shrank (rewritten) is read again
    /// from its start.
    pub fn read(&mut self, series: &mut Series) -> Result<u64, StoreError> {
        use std::io::{Read, Seek, SeekFrom};
        let io = |source: io::Error| StoreError::Io {
            path: self.path.clone(),
            source,
        };
        let mut file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(io(e)),
        };
        let len = file.metadata().map_err(io)?.len();
        if len < self.offset {
            self.offset = 0;
            self.parser = Parser::default();
        }
        if len == self.offset {
            return Ok(0);
        }
        file.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut bytes = Vec::with_capacity((len - self.offset) as usize);
        file.take(len - self.offset)
            .read_to_end(&mut bytes)
            .map_err(io)?;
        let text = whole_lines(&bytes);
        if text.is_empty() {
            return Ok(0);
        }
        self.parser.feed(text, &self.path, series)?;
        let used = text.len() as u64;
        self.offset += used;
        Ok(used)
    }
}

/// A whole number of at most 19 digits (any of which `u64` holds).
fn digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    s.iter().try_fold(0u64, |n, b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// Powers of ten a double holds exactly.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// A decimal (`-12.345`, `6.9e-05`: what the agent writes) read on the fast path of
/// correct float parsing (Clinger's): a mantissa below 2^53 and a power of ten of at most
/// 22 are both exact doubles, and one IEEE multiplication or division of them is the
/// correctly rounded value, the same `str::parse` gives. `None` for anything else (long
/// mantissas, big exponents, `inf`): the caller parses those the slow way. Floats were two
/// fifths of a read.
fn decimal(s: &[u8]) -> Option<f64> {
    let (neg, rest) = match s {
        [b'-', rest @ ..] => (true, rest),
        b => (false, b),
    };
    let mut mantissa: u64 = 0;
    let mut count = 0u32;
    let mut fraction: Option<i32> = None;
    let mut i = 0;
    while let Some(&c) = rest.get(i) {
        match c {
            b'0'..=b'9' => {
                count += 1;
                if count > 19 {
                    return None;
                }
                mantissa = mantissa * 10 + u64::from(c - b'0');
                if let Some(f) = fraction.as_mut() {
                    *f += 1;
                }
            }
            b'.' if fraction.is_none() => fraction = Some(0),
            b'e' | b'E' => break,
            _ => return None,
        }
        i += 1;
    }
    if count == 0 || mantissa > 1 << 53 {
        return None;
    }
    let mut exp10 = -fraction.unwrap_or(0);
    if i < rest.len() {
        // An exponent: `e`, a sign, 1 to 3 digits.
        let e = &rest[i + 1..];
        let (eneg, edigits) = match e {
            [b'-', d @ ..] => (true, d),
            [b'+', d @ ..] => (false, d),
            d => (false, d),
        };
        if edigits.is_empty() || edigits.len() > 3 {
            return None;
        }
        let mut x: i32 = 0;
        for &c in edigits {
            if !c.is_ascii_digit() {
                return None;
            }
            x = x * 10 + i32::from(c - b'0');
        }
        exp10 += if eneg { -x } else { x };
    }
    let p = POW10.get(usize::try_from(exp10.unsigned_abs()).ok()?)?;
    let v = if exp10 < 0 {
        mantissa as f64 / p
    } else {
        mantissa as f64 * p
    };
    Some(if neg { -v } else { v })
}

/// The pieces of `text` between the ASCII byte `sep` (which never splits a character),
/// found with a byte loop: `str::split` with a `char` pattern was a third of the read.
fn ascii_split(text: &str, sep: u8) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut done = text.is_empty();
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let rest = &bytes[start..];
        let piece = match rest.iter().position(|&b| b == sep) {
            Some(i) => {
                let p = text.get(start..start + i);
                start += i + 1;
                p
            }
            None => {
                done = true;
                text.get(start..)
            }
        };
        piece
    })
}

/// Every reading of rank `rank` in the attempt folder `dir`: the agent's file, then the
/// worker's own convention lines (`rank-R.metrics.jsonl`), if any. No file: no readings.
pub fn read_rank(dir: &Path, rank: u32) -> Result<Series, StoreError> {
    let mut series = Series::default();
    let path = metrics_path(dir, rank);
    match std::fs::read(&path) {
        Ok(text) => parse_bytes(&text, &path, &mut series)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => return Err(StoreError::Io { path, source }),
    }
    let path = worker_file_path(dir, rank);
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

/// The ranks that have metrics in the attempt folder `dir` (`rank-R.metrics` or
/// `rank-R.metrics.jsonl`), in order.
pub fn ranks(dir: &Path) -> io::Result<Vec<u32>> {
    let mut ranks: Vec<u32> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let rank = name
            .strip_prefix("rank-")
            .and_then(|r| {
                r.strip_suffix(".metrics")
                    .or_else(|| r.strip_suffix(".metrics.jsonl"))
            })
            .and_then(|r| r.parse().ok());
        if let Some(r) = rank {
            ranks.push(r);
        }
    }
    ranks.sort_unstable();
    ranks.dedup();
    Ok(ranks)
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
        let path = metrics_path(dir.path(), 3);
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
    fn a_partial_last_line_waits_and_a_bad_line_names_itself() {
        let path = Path::new("/x/rank-0.metrics");
        let mut s = Series::default();
        parse_into(
            "# herd metrics 1\n@\tloss\n1\t1\t0.5\n2\t2\t0.",
            path,
            &mut s,
        )
        .expect("ok");
        assert_eq!(s.len(), 1, "the line being written is not read");
        let err = parse_into(
            "# herd metrics 1\n@\tloss\n1\t1\t0.5\t9\n",
            path,
            &mut Series::default(),
        )
        .expect_err("too many values");
        assert_eq!(
            err.to_string(),
            "/x/rank-0.metrics: line 3: 2 values for 1 columns"
        );
        let err = parse_into("not ours\n", path, &mut Series::default()).expect_err("header");
        assert!(err.to_string().contains("not a herd metrics file"), "{err}");
    }

    #[test]
    fn a_workers_own_convention_file_is_read_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            worker_file_path(dir.path(), 0),
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
            let mut w = Writer::new(metrics_path(dir.path(), rank));
            for step in 1..=3u64 {
                w.write(
                    step,
                    &rec(Some(step), &[("loss", f64::from(rank) + step as f64)]),
                )
                .expect("write");
            }
        }
        std::fs::write(
            worker_file_path(dir.path(), 5),
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

    #[test]
    fn ascii_split_is_str_split() {
        for text in ["", "a", "a\tb", "\ta\t\tb\t", "é\tü"] {
            let ours: Vec<&str> = ascii_split(text, b'\t').collect();
            let std: Vec<&str> = if text.is_empty() {
                Vec::new()
            } else {
                text.split('\t').collect()
            };
            assert_eq!(ours, std, "{text:?}");
        }
    }

    #[test]
    fn decimals_read_exactly_as_str_parse_does() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut checked = 0;
        for _ in 0..200_000 {
            let r = next();
            let int = r % 10u64.pow((r >> 60) as u32 % 12);
            let frac_digits = (next() % 12) as usize;
            let frac = next() % 10u64.pow(frac_digits as u32);
            let neg = next() % 3 == 0;
            let text = if frac_digits == 0 {
                format!("{}{int}", if neg { "-" } else { "" })
            } else {
                format!("{}{int}.{frac:0frac_digits$}", if neg { "-" } else { "" })
            };
            let text = match next() % 4 {
                0 => format!("{text}e{}", next() % 40),
                1 => format!("{text}e-{:02}", next() % 40),
                _ => text,
            };
            let want: f64 = text.parse().expect("std parses it");
            if let Some(got) = decimal(text.as_bytes()) {
                assert_eq!(got.to_bits(), want.to_bits(), "{text}");
                checked += 1;
            }
        }
        assert!(checked > 120_000, "the fast path took {checked}");
        for v in [
            2.31,
            530.5,
            0.1,
            1e-7,
            6.9e-5,
            123456.789,
            -0.0,
            9007199254740993.0,
        ] {
            let text = v.to_string();
            let want: f64 = text.parse().expect("parses");
            if let Some(got) = decimal(text.as_bytes()) {
                assert_eq!(got.to_bits(), want.to_bits(), "{text}");
            }
        }
        for not in [
            "",
            "-",
            ".",
            "1e",
            "1e+",
            "1e1234",
            "1e-23x",
            "inf",
            "1.2.3",
            "12345678901234567890",
            "0x1",
        ] {
            assert_eq!(decimal(not.as_bytes()), None, "{not:?}");
        }
    }
    /// NaN != NaN: compare series by their debug text.
    fn shown(s: &Series) -> String {
        format!("{s:?}")
    }

    #[test]
    fn a_tail_reads_what_a_full_read_does_piece_by_piece() {
        use std::io::Write as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = metrics_path(dir.path(), 0);
        let mut tail = Tail::new(path.clone());
        let mut inc = Series::default();
        assert_eq!(tail.read(&mut inc).expect("no file yet"), 0);
        let mut file = std::fs::File::create(&path).expect("create");
        let pieces = [
            "# herd metrics 1\n@\tloss\tsamples_per_s\n100\t1\t2.5\t51",
            "2\n200\t2\t2.25\t530.5\n",
            "",
            "@\tloss\tval_loss\n300\t-\t2",
            ".05\t-\n400\t4\t1.5\t2.4\n@\tsamples_per_s\n500\t5\t600\n",
        ];
        for piece in pieces {
            file.write_all(piece.as_bytes()).expect("append");
            tail.read(&mut inc).expect("tail");
            let full = read_rank(dir.path(), 0).expect("full");
            assert_eq!(shown(&inc), shown(&full), "after {piece:?}");
        }
        assert_eq!(inc.len(), 5);
        assert_eq!(inc.last("samples_per_s"), Some((Some(5), 600.0)));
        assert_eq!(inc.last("loss"), Some((Some(4), 1.5)));
        assert_eq!(tail.offset(), std::fs::metadata(&path).expect("len").len());

        // Pieces into a new series each read: only the new readings, by the right columns.
        let mut again = Tail::new(path.clone());
        let mut first = Series::default();
        again.read(&mut first).expect("read");
        file.write_all(b"600\t6\t700\n").expect("append");
        let mut next = Series::default();
        again.read(&mut next).expect("read");
        assert_eq!(next.len(), 1);
        assert_eq!(next.last("samples_per_s"), Some((Some(6), 700.0)));
    }

    #[test]
    fn a_tail_reports_bad_lines_by_their_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = metrics_path(dir.path(), 0);
        std::fs::write(&path, "# herd metrics 1\n@\tloss\n1\t1\t2\n").expect("write");
        let mut tail = Tail::new(path.clone());
        tail.read(&mut Series::default()).expect("good");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        std::io::Write::write_all(&mut f, b"2\t2\tx\n").expect("append");
        let err = tail.read(&mut Series::default()).expect_err("bad value");
        assert!(err.to_string().contains("line 4"), "{err}");
    }
}
