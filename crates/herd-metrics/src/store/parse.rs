//! Reading the store's text: whole files ([`parse_into`]) and files as they grow
//! ([`Tail`]), one pass over each line's bytes with numbers read in place.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::series::{Series, StoreError, HEADER};

/// Parses the text of a metrics file into `series`; a partial last line (no newline yet:
/// the agent is writing it) is left out.
pub fn parse_into(text: &str, path: &Path, series: &mut Series) -> Result<(), StoreError> {
    parse_bytes(text.as_bytes(), path, series)
}

/// [`parse_into`] of the file's bytes as read: only column names need be UTF-8 (the agent
/// writes nothing else that is not ASCII digits), so the whole file is not checked first.
pub(super) fn parse_bytes(text: &[u8], path: &Path, series: &mut Series) -> Result<(), StoreError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::read_rank;
    use herd_exp::layout::AttemptDir;

    #[test]
    fn a_partial_last_line_waits_and_a_bad_line_names_itself() {
        let file = AttemptDir::new("/x").metrics(0);
        let path = file.as_path();
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
        let path = AttemptDir::new(dir.path()).metrics(0);
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
        let path = AttemptDir::new(dir.path()).metrics(0);
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
