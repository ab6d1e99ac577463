//! SLURM hostlist expressions, with SLURM's own results.
//!
//! ```
//! use herd_hostlist::{compress, expand};
//! let hosts = expand("gpu-a[01-03],login1").unwrap();
//! assert_eq!(hosts, ["gpu-a01", "gpu-a02", "gpu-a03", "login1"]);
//! assert_eq!(compress(&hosts), "gpu-a[01-03],login1");
//! ```
//!
//! What SLURM does, and so does this crate (checked against `scontrol show hostnames` and
//! `scontrol show hostlist` by a differential test on the test bed):
//! - items are separated by commas or whitespace at top level; empty items are skipped;
//! - an item is text and bracket groups: `n[1-3,5]`, `rack[1-2]n[01-04]` (several groups are
//!   a cartesian product: the last group varies fastest; with three or more groups SLURM's
//!   order follows, the first group next, then the second, …, the one before the last
//!   slowest: `a[1-2]b[1-2]c[1-2]` gives a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 …);
//! - a range's zero padding is the width of its lower bound as written (`[08-10]` gives
//!   `08 09 10`, `[8-010]` gives `8 9 10`);
//! - expansion keeps the written order and duplicates;
//! - [`compress`] keeps order and duplicates too, merging only neighbours, exactly like
//!   `scontrol show hostlist`; sort ([`sort_hosts`]) or dedup first for the shortest form.
//!
//! Where SLURM is lenient or wrong this crate is strict: a `]` without `[`, an unclosed `[`,
//! `[]`, a descending range and a number past 18 digits are errors naming the column and
//! what was expected (SLURM prints garbage for some of them, saturates numbers at 2⁶⁴−1).
//! One extension: text after the last group (`node[1-2]-ib`) is allowed, as in
//! python-hostlist; SLURM 22.05 rejects it. A single range may be wider than SLURM's 65,536
//! hosts; the whole expansion is bounded by [`Limits::max_hosts`] instead.

use std::cmp::Ordering;
use std::fmt;

/// Bounds on what an expression may expand to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most hosts an expression may expand to (default 1,000,000).
    pub max_hosts: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_hosts: 1_000_000,
        }
    }
}

/// What is wrong with an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// A `[` with no matching `]`.
    Unclosed,
    /// A `]` with no `[` before it.
    UnexpectedClose,
    /// A `[` inside a group.
    Nested,
    /// Inside a group, something other than a number where a number must be.
    ExpectedNumber(Option<char>),
    /// After a number inside a group, something other than `-`, `,` or `]`.
    ExpectedRangeEnd(Option<char>),
    /// A range whose upper bound is below its lower bound.
    Descending {
        /// Lower bound as written.
        lo: u64,
        /// Upper bound as written.
        hi: u64,
    },
    /// A number past 2⁶⁴−1 or with more than 20 digits.
    NumberTooLarge,
    /// Whitespace other than space, tab, newline or carriage return (SLURM would make it
    /// part of a host name).
    OddWhitespace(char),
    /// The expression expands to more hosts than the limit allows.
    TooManyHosts {
        /// The limit in force.
        limit: u64,
    },
}

/// A malformed or too large expression: what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    /// What is wrong.
    pub kind: ErrorKind,
    /// 1-based column (in characters) where it was found.
    pub column: usize,
    /// The part of the expression around the column, for the message.
    pub context: String,
}

fn describe_char(c: Option<char>) -> String {
    match c {
        None => "the end".to_owned(),
        Some(c) if c.is_whitespace() => format!("whitespace {c:?}"),
        Some(c) => format!("`{c}`"),
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match &self.kind {
            ErrorKind::Unclosed => "`[` is never closed: add `]`".to_owned(),
            ErrorKind::UnexpectedClose => "`]` has no matching `[`".to_owned(),
            ErrorKind::Nested => "`[` inside a bracket group: groups do not nest".to_owned(),
            ErrorKind::ExpectedNumber(c) => {
                format!(
                    "expected a number inside `[…]`, found {}",
                    describe_char(*c)
                )
            }
            ErrorKind::ExpectedRangeEnd(c) => {
                format!(
                    "expected `-`, `,` or `]` after a number, found {}",
                    describe_char(*c)
                )
            }
            ErrorKind::Descending { lo, hi } => {
                format!("range {lo}-{hi} goes down: write the lower bound first")
            }
            ErrorKind::OddWhitespace(c) => format!(
                "whitespace character U+{:04X} where hosts are separated by commas, spaces, tabs or newlines",
                *c as u32
            ),
            ErrorKind::NumberTooLarge => {
                "number is larger than 18446744073709551615 (2^64-1) or has more than 20 digits"
                    .to_owned()
            }
            ErrorKind::TooManyHosts { limit } => {
                return write!(
                    f,
                    "hostlist expands to more than {limit} hosts (the limit): `{}`",
                    self.context
                );
            }
        };
        write!(f, "{what} at column {} of `{}`", self.column, self.context)
    }
}

/// A range inside a bracket group: `lo..=hi`, zero-padded to `width` digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> Option<u64> {
        (self.hi - self.lo).checked_add(1)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Group(Vec<Range>),
}

/// One comma-separated item: text and bracket groups, e.g. `rack[1-2]n[01-04]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Item {
    pieces: Vec<Piece>,
}

impl Item {
    /// `(pieces before, ranges, pieces after)` when the item has exactly one group.
    fn single_group(&self) -> Option<(&[Piece], &[Range], &[Piece])> {
        let mut groups = self
            .pieces
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p, Piece::Group(_)));
        let (i, first) = groups.next()?;
        if groups.next().is_some() {
            return None;
        }
        let Piece::Group(ranges) = first else {
            return None;
        };
        Some((&self.pieces[..i], ranges, &self.pieces[i + 1..]))
    }

    fn count(&self) -> Option<u64> {
        self.pieces.iter().try_fold(1u64, |acc, p| match p {
            Piece::Text(_) => Some(acc),
            Piece::Group(ranges) => ranges
                .iter()
                .try_fold(0u64, |s, r| s.checked_add(r.len()?))
                .and_then(|n| acc.checked_mul(n)),
        })
    }

    /// Call `f` with every host of the item, in order, reusing one buffer.
    fn for_each(&self, buf: &mut String, f: &mut dyn FnMut(&str)) {
        if let Some((prefix, ranges, suffix)) = self.single_group() {
            // The common shape (`gpu-a[001-128]`): the number is incremented in place.
            buf.clear();
            for p in prefix {
                if let Piece::Text(t) = p {
                    buf.push_str(t);
                }
            }
            let base = buf.len();
            let mut digits = String::new();
            for r in ranges {
                digits.clear();
                push_padded(&mut digits, r.lo, r.width);
                let mut v = r.lo;
                loop {
                    buf.truncate(base);
                    buf.push_str(&digits);
                    for p in suffix {
                        if let Piece::Text(t) = p {
                            buf.push_str(t);
                        }
                    }
                    f(buf);
                    if v == r.hi {
                        break;
                    }
                    v += 1;
                    increment_decimal(&mut digits);
                }
            }
            return;
        }
        // Odometer over the groups: (range index, current value) per group.
        let groups: Vec<&Vec<Range>> = self
            .pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Group(r) => Some(r),
                Piece::Text(_) => None,
            })
            .collect();
        let mut state: Vec<(usize, u64)> = self
            .pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Group(r) => Some((0, r[0].lo)),
                Piece::Text(_) => None,
            })
            .collect();
        loop {
            buf.clear();
            let mut g = 0;
            for piece in &self.pieces {
                match piece {
                    Piece::Text(t) => buf.push_str(t),
                    Piece::Group(ranges) => {
                        let (ri, v) = state[g];
                        push_padded(buf, v, ranges[ri].width);
                        g += 1;
                    }
                }
            }
            f(buf);
            // Advance in SLURM's order: the last group varies fastest, then the first,
            // the second, …, and the one before the last varies slowest (SLURM expands
            // `a[..]b[..]c[..]` by peeling the last bracket off the prefix, recursively).
            let n = state.len();
            let mut carried = true;
            for k in 0..n {
                let g = if k == 0 { n - 1 } else { k - 1 };
                let ranges = &groups[g];
                let (ri, v) = &mut state[g];
                if *v < ranges[*ri].hi {
                    *v += 1;
                    carried = false;
                    break;
                }
                if *ri + 1 < ranges.len() {
                    *ri += 1;
                    *v = ranges[*ri].lo;
                    carried = false;
                    break;
                }
                *ri = 0;
                *v = ranges[0].lo;
            }
            if carried {
                return;
            }
        }
    }
}

/// Add one to a string of ASCII digits, growing it on overflow (`099` → `100`, `99` → `100`).
fn increment_decimal(digits: &mut String) {
    let mut bytes = std::mem::take(digits).into_bytes();
    let mut i = bytes.len();
    loop {
        if i == 0 {
            bytes.insert(0, b'1');
            break;
        }
        i -= 1;
        if bytes[i] == b'9' {
            bytes[i] = b'0';
        } else {
            bytes[i] += 1;
            break;
        }
    }
    // Only ASCII digits were changed: still valid UTF-8.
    *digits = String::from_utf8(bytes).unwrap_or_default();
}

/// Append `v` zero-padded to `width` digits.
fn push_padded(buf: &mut String, mut v: u64, width: usize) {
    const ZEROS: &str = "000000000000000000000000000000000000000000000000";
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let n = digits.len() - i;
    if width > n {
        let pad = width - n;
        buf.push_str(&ZEROS[..pad.min(ZEROS.len())]);
        for _ in ZEROS.len()..pad {
            buf.push('0');
        }
    }
    // ASCII digits: always valid UTF-8.
    buf.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

/// A parsed hostlist expression. Expanding it is lazy: [`HostList::for_each`] and
/// [`HostList::write_to`] never hold the whole list in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList {
    items: Vec<Item>,
    count: u64,
}

/// Most digits a number may have (SLURM reads numbers up to 2⁶⁴−1, 20 digits).
const MAX_DIGITS: usize = 20;

struct Parser<'a> {
    expr: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
}

impl<'a> Parser<'a> {
    fn error(&self, kind: ErrorKind, byte_pos: usize) -> ParseError {
        let column = self.expr[..byte_pos.min(self.expr.len())].chars().count() + 1;
        ParseError {
            kind,
            column,
            context: context(self.expr, column),
        }
    }

    fn peek(&mut self) -> Option<(usize, char)> {
        self.chars.peek().copied()
    }

    fn end_pos(&self) -> usize {
        self.expr.len()
    }

    fn number(&mut self) -> Result<(u64, usize), ParseError> {
        let start = self.peek().map_or(self.end_pos(), |(i, _)| i);
        let mut value: u64 = 0;
        let mut width = 0;
        while let Some((_, c)) = self.peek() {
            let Some(d) = c.to_digit(10) else {
                break;
            };
            width += 1;
            value = match value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d)))
            {
                Some(v) if width <= MAX_DIGITS => v,
                _ => return Err(self.error(ErrorKind::NumberTooLarge, start)),
            };
            self.chars.next();
        }
        if width == 0 {
            let found = self.peek();
            return Err(self.error(
                ErrorKind::ExpectedNumber(found.map(|(_, c)| c)),
                found.map_or(self.end_pos(), |(i, _)| i),
            ));
        }
        Ok((value, width))
    }

    /// After `[`: ranges up to and including `]`.
    fn group(&mut self, open_pos: usize) -> Result<Vec<Range>, ParseError> {
        let mut ranges = Vec::new();
        loop {
            if self.peek().is_none() {
                return Err(self.error(ErrorKind::Unclosed, open_pos));
            }
            let lo_pos = self.peek().map_or(self.end_pos(), |(i, _)| i);
            let (lo, width) = self.number()?;
            let mut hi = lo;
            if let Some((_, '-')) = self.peek() {
                self.chars.next();
                hi = self.number()?.0;
                if hi < lo {
                    return Err(self.error(ErrorKind::Descending { lo, hi }, lo_pos));
                }
            }
            ranges.push(Range { lo, hi, width });
            match self.chars.next() {
                Some((_, ',')) => continue,
                Some((_, ']')) => return Ok(ranges),
                Some((_, '[')) => return Err(self.error(ErrorKind::Nested, open_pos)),
                Some((i, c)) => return Err(self.error(ErrorKind::ExpectedRangeEnd(Some(c)), i)),
                None => return Err(self.error(ErrorKind::Unclosed, open_pos)),
            }
        }
    }

    fn parse(mut self, limits: &Limits) -> Result<HostList, ParseError> {
        let mut items = Vec::new();
        let mut pieces: Vec<Piece> = Vec::new();
        // The text piece being read, as a byte range of the expression.
        let mut text: Option<(usize, usize)> = None;
        let mut count: u64 = 0;
        let mut item_start = 0;
        let expr = self.expr;
        let take_text = |text: &mut Option<(usize, usize)>, pieces: &mut Vec<Piece>| {
            if let Some((a, b)) = text.take() {
                pieces.push(Piece::Text(expr[a..b].to_owned()));
            }
        };
        loop {
            let next = self.chars.next();
            match next {
                None | Some((_, ',')) => {}
                Some((_, ' ' | '\t' | '\n' | '\r')) => {}
                Some((i, c)) if c.is_whitespace() => {
                    return Err(self.error(ErrorKind::OddWhitespace(c), i))
                }
                Some((i, '[')) => {
                    take_text(&mut text, &mut pieces);
                    if pieces.is_empty() {
                        item_start = i;
                    }
                    pieces.push(Piece::Group(self.group(i)?));
                    continue;
                }
                Some((i, ']')) => return Err(self.error(ErrorKind::UnexpectedClose, i)),
                Some((i, c)) => {
                    match &mut text {
                        Some((_, end)) => *end = i + c.len_utf8(),
                        None => {
                            if pieces.is_empty() {
                                item_start = i;
                            }
                            text = Some((i, i + c.len_utf8()));
                        }
                    }
                    continue;
                }
            }
            // A separator or the end closes the item.
            take_text(&mut text, &mut pieces);
            if !pieces.is_empty() {
                let item = Item {
                    pieces: std::mem::take(&mut pieces),
                };
                count = item
                    .count()
                    .and_then(|n| count.checked_add(n))
                    .filter(|&n| n <= limits.max_hosts)
                    .ok_or_else(|| {
                        self.error(
                            ErrorKind::TooManyHosts {
                                limit: limits.max_hosts,
                            },
                            item_start,
                        )
                    })?;
                items.push(item);
            }
            if next.is_none() {
                return Ok(HostList { items, count });
            }
        }
    }
}

/// Up to 60 characters of `expr` around `column` (1-based), marked with `…` where cut.
fn context(expr: &str, column: usize) -> String {
    const SPAN: usize = 60;
    let total = expr.chars().count();
    if total <= SPAN {
        return expr.to_owned();
    }
    let start = column.saturating_sub(SPAN / 2 + 1).min(total - SPAN);
    let mut s: String = expr.chars().skip(start).take(SPAN).collect();
    if start > 0 {
        s.insert(0, '…');
    }
    if start + SPAN < total {
        s.push('…');
    }
    s
}

impl HostList {
    /// Parse `expr` with the default [`Limits`].
    pub fn parse(expr: &str) -> Result<HostList, ParseError> {
        HostList::parse_with(expr, &Limits::default())
    }

    /// Parse `expr`; an expansion past `limits.max_hosts` is an error.
    pub fn parse_with(expr: &str, limits: &Limits) -> Result<HostList, ParseError> {
        Parser {
            expr,
            chars: expr.char_indices().peekable(),
        }
        .parse(limits)
    }

    /// Number of hosts, duplicates included (known without expanding).
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True when the expression names no host (e.g. `""` or `" , "`).
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Call `f` with every host in order. The `&str` is valid only during the call.
    pub fn for_each(&self, mut f: impl FnMut(&str)) {
        let mut buf = String::new();
        for item in &self.items {
            item.for_each(&mut buf, &mut f);
        }
    }

    /// Every host, in order, duplicates kept, packed in one buffer (no allocation per host).
    pub fn to_hosts(&self) -> Hosts {
        let mut hosts = Hosts {
            buf: String::new(),
            ends: Vec::with_capacity(usize::try_from(self.count).unwrap_or(0)),
        };
        let mut buf = String::new();
        for item in &self.items {
            item.for_each(&mut buf, &mut |h: &str| hosts.push(h));
        }
        hosts
    }

    /// Every host, in order, duplicates kept.
    pub fn hosts(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(usize::try_from(self.count).unwrap_or(0));
        self.for_each(|h| out.push(h.to_owned()));
        out
    }

    /// Write every host followed by `sep` (the last one too) to `w`.
    pub fn write_to(&self, w: &mut impl std::io::Write, sep: &str) -> std::io::Result<()> {
        let mut result = Ok(());
        self.for_each(|h| {
            if result.is_ok() {
                result = w
                    .write_all(h.as_bytes())
                    .and_then(|()| w.write_all(sep.as_bytes()));
            }
        });
        result
    }
}

/// An expanded host list with every name in one buffer: what [`HostList::to_hosts`] and
/// [`expand_hosts`] return. Iterating yields `&str`s; no name is allocated on its own.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hosts {
    buf: String,
    ends: Vec<usize>,
}

impl Hosts {
    /// An empty list.
    pub fn new() -> Hosts {
        Hosts::default()
    }

    /// Append one host.
    pub fn push(&mut self, host: &str) {
        self.buf.push_str(host);
        self.ends.push(self.buf.len());
    }

    /// Number of hosts.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// No hosts.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The `i`-th host.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        self.buf.get(start..end)
    }

    /// The hosts in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.ends.len()).map(move |i| {
            let start = if i == 0 { 0 } else { self.ends[i - 1] };
            &self.buf[start..self.ends[i]]
        })
    }

    /// The hosts as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_owned).collect()
    }
}

impl fmt::Debug for Hosts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> FromIterator<&'a str> for Hosts {
    fn from_iter<I: IntoIterator<Item = &'a str>>(iter: I) -> Hosts {
        let mut hosts = Hosts::new();
        for h in iter {
            hosts.push(h);
        }
        hosts
    }
}

/// Expand `expr` into a packed [`Hosts`] list, in order, duplicates kept.
pub fn expand_hosts(expr: &str) -> Result<Hosts, ParseError> {
    HostList::parse(expr).map(|h| h.to_hosts())
}

/// Expand `expr` into its hosts, in order, duplicates kept (like `scontrol show hostnames`).
pub fn expand(expr: &str) -> Result<Vec<String>, ParseError> {
    HostList::parse(expr).map(|h| h.hosts())
}

/// Expand `expr` within `limits`.
pub fn expand_with(expr: &str, limits: &Limits) -> Result<Vec<String>, ParseError> {
    HostList::parse_with(expr, limits).map(|h| h.hosts())
}

/// Number of hosts `expr` names, duplicates included, without expanding it.
/// Only overflow of `u64` is an error; no [`Limits`] apply.
pub fn count(expr: &str) -> Result<u64, ParseError> {
    HostList::parse_with(
        expr,
        &Limits {
            max_hosts: u64::MAX,
        },
    )
    .map(|h| h.len())
}

// ---------------------------------------------------------------------------------------
// Compression: SLURM's algorithm (src/common/hostlist.c), so the short forms match
// `scontrol show hostlist` exactly.

/// A host split as SLURM splits it: prefix, then the trailing number (if any) and its width.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run<'a> {
    prefix: &'a str,
    /// `None`: no trailing number (a "single host" in SLURM's terms).
    numeric: Option<(u64, u64, usize)>,
}

fn split_host(host: &str) -> Run<'_> {
    let digits = host.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (prefix, num) = host.split_at(host.len() - digits);
    match num.parse::<u64>() {
        Ok(value) if digits <= MAX_DIGITS => Run {
            prefix,
            numeric: Some((value, value, digits)),
        },
        // No trailing number, or one past u64: the name stands for itself.
        _ => Run {
            prefix: host,
            numeric: None,
        },
    }
}

/// Leading zeros `num` gets when printed at `width` (SLURM's `_zero_padded`).
fn zero_padded(num: u64, width: usize) -> usize {
    let mut n = 1;
    let mut v = num / 10;
    while v > 0 {
        n += 1;
        v /= 10;
    }
    width.saturating_sub(n)
}

/// SLURM's `_width_equiv`: may `n` (width `wn`) and `m` (width `wm`) share one width?
/// Adjusts one of the widths when they can.
fn width_equiv(n: u64, wn: &mut usize, m: u64, wm: &mut usize) -> bool {
    if *wn == *wm {
        return true;
    }
    let npad = zero_padded(n, *wn);
    let nmpad = zero_padded(n, *wm);
    let mpad = zero_padded(m, *wm);
    let mnpad = zero_padded(m, *wn);
    if npad != nmpad && mpad != mnpad {
        return false;
    }
    if npad != nmpad {
        // mpad == mnpad here.
        *wm = *wn;
    } else {
        *wn = *wm;
    }
    true
}

/// Compress `hosts` into a hostlist expression, as `scontrol show hostlist` does: order and
/// duplicates are kept, neighbours with the same prefix merge into ranges and brackets.
/// `expand(compress(h)) == h` for every list of hostnames without separators or brackets.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut runs: Vec<Run<'_>> = Vec::new();
    for host in hosts {
        let mut run = split_host(host.as_ref());
        if let (Some(tail), Some((lo, _, w))) = (runs.last_mut(), run.numeric.as_mut()) {
            if let Some((tlo, thi, tw)) = tail.numeric.as_mut() {
                if tail.prefix == run.prefix
                    && thi.checked_add(1) == Some(*lo)
                    && width_equiv(*tlo, tw, *lo, w)
                {
                    *thi = *lo;
                    continue;
                }
            }
        }
        runs.push(run);
    }

    let mut out = String::new();
    let same_bracket = |a: &Run<'_>, b: &Run<'_>| {
        a.prefix == b.prefix && a.numeric.is_some() && b.numeric.is_some()
    };
    let push_range = |out: &mut String, (lo, hi, w): (u64, u64, usize)| {
        push_padded(out, lo, w);
        if hi != lo {
            out.push('-');
            push_padded(out, hi, w);
        }
    };
    let mut i = 0;
    while i < runs.len() {
        if !out.is_empty() {
            out.push(',');
        }
        let run = &runs[i];
        let Some(range) = run.numeric else {
            out.push_str(run.prefix);
            i += 1;
            continue;
        };
        let bracket =
            range.0 != range.1 || runs.get(i + 1).is_some_and(|next| same_bracket(run, next));
        out.push_str(run.prefix);
        if !bracket {
            push_range(&mut out, range);
            i += 1;
            continue;
        }
        out.push('[');
        push_range(&mut out, range);
        i += 1;
        while i < runs.len() && same_bracket(&runs[i], &runs[i - 1]) {
            out.push(',');
            if let Some(range) = runs[i].numeric {
                push_range(&mut out, range);
            }
            i += 1;
        }
        out.push(']');
    }
    out
}

// ---------------------------------------------------------------------------------------
// Ordering and set operations.

/// Natural order: text compared bytewise, digit runs by value (`n2 < n10`); when all else
/// is equal, the first difference in zero padding decides (`n1 < n01`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut padding = Ordering::Equal;
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let si = i;
            while i < a.len() && a[i].is_ascii_digit() {
                i += 1;
            }
            let sj = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            let (da, db) = (&a[si..i], &b[sj..j]);
            // Compare by value without parsing: strip leading zeros, then length, then bytes.
            let ta = &da[da.iter().take_while(|&&d| d == b'0').count()..];
            let tb = &db[db.iter().take_while(|&&d| d == b'0').count()..];
            let ord = ta.len().cmp(&tb.len()).then_with(|| ta.cmp(tb));
            if ord != Ordering::Equal {
                return ord;
            }
            padding = padding.then(da.len().cmp(&db.len()));
        } else {
            let ord = a[i].cmp(&b[j]);
            if ord != Ordering::Equal {
                return ord;
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j)).then(padding)
}

/// Sort hosts in natural order (see [`natural_cmp`]).
///
/// Each host is split once into the text before its trailing number and that number; hosts
/// with equal heads (most pairs in a real list) compare by number and width alone, which is
/// what [`natural_cmp`] would decide, without rescanning the names.
pub fn sort_hosts<S: AsRef<str>>(hosts: &mut [S]) {
    struct Key<'a> {
        head: &'a str,
        /// The trailing number and its width, when there is one that fits in u64.
        tail: Option<(u64, usize)>,
        full: &'a str,
        index: usize,
    }
    let mut keys: Vec<Key<'_>> = hosts
        .iter()
        .enumerate()
        .map(|(index, h)| {
            let full = h.as_ref();
            let digits = full.bytes().rev().take_while(u8::is_ascii_digit).count();
            let (head, tail) = full.split_at(full.len() - digits);
            match tail.parse::<u64>() {
                Ok(num) => Key {
                    head,
                    tail: Some((num, digits)),
                    full,
                    index,
                },
                Err(_) => Key {
                    head: full,
                    tail: None,
                    full,
                    index,
                },
            }
        })
        .collect();
    // Stable sort: it finds the sorted runs a real list is made of and merges them.
    keys.sort_by(|a, b| match (a.tail, b.tail) {
        (Some((na, wa)), Some((nb, wb))) if a.head == b.head => na.cmp(&nb).then(wa.cmp(&wb)),
        _ => natural_cmp(a.full, b.full),
    });
    // Apply the permutation in place (cycle by cycle).
    let mut order: Vec<usize> = keys.iter().map(|k| k.index).collect();
    drop(keys);
    for i in 0..order.len() {
        let mut current = i;
        while order[current] != i {
            let next = order[current];
            hosts.swap(current, next);
            order[current] = current;
            current = next;
        }
        order[current] = current;
    }
}

/// Remove duplicates, keeping each host's first occurrence in place.
pub fn dedup_hosts<S: AsRef<str>>(hosts: &mut Vec<S>) {
    let keep: Vec<bool> = {
        let mut seen = std::collections::HashSet::with_capacity(hosts.len());
        hosts.iter().map(|h| seen.insert(h.as_ref())).collect()
    };
    let mut i = 0;
    hosts.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// Set operations over several host lists. Results are sets: sorted, no duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    /// Hosts in any list.
    Union,
    /// Hosts in every list.
    Intersection,
    /// Hosts in the first list and in none of the others.
    Difference,
    /// Hosts in exactly one list.
    SymmetricDifference,
}

/// Apply `op` to `lists`; the result is sorted in natural order, without duplicates.
pub fn set_op<S: AsRef<str>>(op: SetOp, lists: &[Vec<S>]) -> Vec<String> {
    use std::collections::HashMap;
    let mut membership: HashMap<&str, (usize, bool)> = HashMap::new();
    for (i, list) in lists.iter().enumerate() {
        let mut seen_here = std::collections::HashSet::new();
        for h in list {
            let h = h.as_ref();
            if !seen_here.insert(h) {
                continue;
            }
            let e = membership.entry(h).or_insert((0, false));
            e.0 += 1;
            if i == 0 {
                e.1 = true;
            }
        }
    }
    let n = lists.len();
    let mut out: Vec<String> = membership
        .into_iter()
        .filter(|(_, (k, in_first))| match op {
            SetOp::Union => true,
            SetOp::Intersection => *k == n,
            SetOp::Difference => *in_first && *k == 1,
            SetOp::SymmetricDifference => *k == 1,
        })
        .map(|(h, _)| h.to_owned())
        .collect();
    sort_hosts(&mut out);
    out
}

#[cfg(test)]
mod tests;
