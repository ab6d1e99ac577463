//! herd's JSON-lines convention, and mmengine's `scalars.json` (the same shape).
//!
//! A small parser of its own rather than `serde_json::Value`: it keeps the fields in the
//! line's order, flattens nested objects, and takes the `NaN`/`Infinity` that Python's
//! `json.dumps` writes (skipped as non-finite) instead of losing the whole line.

use crate::read::text::{norm, step_of, strip_ansi};
use crate::Record;

/// Nesting deeper than this is not a metrics line.
const MAX_DEPTH: usize = 32;

/// herd's convention: a JSON object on the line (after any prefix) with a numeric `step`.
pub(crate) fn line(line: &str) -> Option<Record> {
    // cheap rejections first: most lines have no `"step"` at all
    if !line.contains("\"step\"") {
        return None;
    }
    let t = strip_ansi(line);
    let t = t.trim_end();
    if !t.ends_with('}') {
        return None;
    }
    let start = t.find('{')?;
    object(&t[start..], false)
}

/// One JSON object with a whole-number `step` at its top level: the record, every other
/// number by its (dotted, for nested objects) name, normalised when `normalise`.
pub(crate) fn object(text: &str, normalise: bool) -> Option<Record> {
    let mut p = Parser {
        s: text.as_bytes(),
        text,
        i: 0,
        values: Vec::new(),
        step: None,
        step_seen: false,
    };
    p.ws();
    if p.peek() != Some(b'{') {
        return None;
    }
    let mut path = String::new();
    p.object(&mut path, 0)?;
    p.ws();
    if p.i != p.s.len() || !p.step_seen {
        return None;
    }
    let step = p.step?;
    let mut values = p.values;
    if normalise {
        for (n, _) in &mut values {
            *n = norm(n);
        }
    }
    Some(Record {
        step: Some(step),
        values,
    })
}

struct Parser<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    values: Vec<(String, f64)>,
    step: Option<u64>,
    step_seen: bool,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// An object at `self.i`, its numbers recorded under `path.`+key.
    fn object(&mut self, path: &mut String, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Some(());
        }
        loop {
            self.ws();
            let key = self.string()?;
            self.eat(b':')?;
            self.ws();
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key);
            self.value(path, depth)?;
            path.truncate(len);
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A value at `self.i`: numbers recorded under `path`, objects flattened, the rest
    /// skipped.
    fn value(&mut self, path: &mut String, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(path, depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(|_| ()),
            b't' => self.word("true"),
            b'f' => self.word("false"),
            b'n' => self.word("null"),
            _ => {
                let v = self.number()?;
                if depth == 0 && path == "step" {
                    self.step_seen = true;
                    self.step = step_of(v);
                } else if v.is_finite() {
                    self.values.push((path.clone(), v));
                }
                Some(())
            }
        }
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(b'[')?;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Some(());
        }
        // numbers inside arrays are not metrics: parse them under a name never kept
        let mut scratch = String::from("\0array");
        loop {
            self.ws();
            self.value(&mut scratch, depth + 1)?;
            scratch.truncate(6);
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {
                    self.i += 1;
                    self.values.retain(|(n, _)| !n.starts_with('\0'));
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn word(&mut self, w: &str) -> Option<()> {
        let end = self.i + w.len();
        (self.s.get(self.i..end)? == w.as_bytes()).then(|| self.i = end)
    }

    /// A JSON number, or Python's `NaN`, `Infinity`, `-Infinity`.
    fn number(&mut self) -> Option<f64> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        if self.word("Infinity").is_some() {
            return Some(f64::INFINITY);
        }
        if self.i == start && self.word("NaN").is_some() {
            return Some(f64::NAN);
        }
        let digits = |p: &mut Self| {
            let d = p.i;
            while p.peek().is_some_and(|c| c.is_ascii_digit()) {
                p.i += 1;
            }
            p.i > d
        };
        if !digits(self) {
            return None;
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !digits(self) {
                return None;
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !digits(self) {
                return None;
            }
        }
        self.text.get(start..self.i)?.parse().ok()
    }

    /// A JSON string, unescaped.
    fn string(&mut self) -> Option<String> {
        if self.peek() != Some(b'"') {
            return None;
        }
        self.i += 1;
        let mut out = String::new();
        let mut run = self.i;
        loop {
            match self.peek()? {
                b'"' => {
                    out.push_str(self.text.get(run..self.i)?);
                    self.i += 1;
                    return Some(out);
                }
                b'\\' => {
                    out.push_str(self.text.get(run..self.i)?);
                    self.i += 1;
                    let c = self.peek()?;
                    self.i += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode()?),
                        _ => return None,
                    }
                    run = self.i;
                }
                c if c < 0x20 => return None,
                _ => self.i += 1,
            }
        }
    }

    /// The character of a `\uXXXX` escape (a surrogate pair takes two).
    fn unicode(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        if (0xd800..0xdc00).contains(&hi) {
            self.word("\\u")?;
            let lo = self.hex4()?;
            if !(0xdc00..0xe000).contains(&lo) {
                return None;
            }
            return char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00));
        }
        char::from_u32(hi)
    }

    fn hex4(&mut self) -> Option<u32> {
        let h = self.text.get(self.i..self.i + 4)?;
        let v = u32::from_str_radix(h, 16).ok()?;
        self.i += 4;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rec;

    #[test]
    fn convention() {
        assert_eq!(
            line(r#"{"step": 10, "loss": 0.53, "samples_per_s": 1557.1, "tag": "x", "ok": true}"#),
            Some(rec(10, &[("loss", 0.53), ("samples_per_s", 1557.1)]))
        );
        // the line's order, not sorted
        assert_eq!(
            line(r#"{"zeta": 1, "step": 2, "alpha": 3}"#),
            Some(rec(2, &[("zeta", 1.0), ("alpha", 3.0)]))
        );
        // nested objects flatten with dots; arrays, null, strings are skipped
        assert_eq!(
            line(
                r#"{"step":3,"train":{"loss":1.5,"acc":{"top1":0.7}},"hist":[1,2,{"a":3}],"n":null}"#
            ),
            Some(rec(3, &[("train.loss", 1.5), ("train.acc.top1", 0.7)]))
        );
        // Python's NaN/Infinity: skipped, the line kept
        assert_eq!(
            line(r#"{"step": 4, "loss": NaN, "gn": Infinity, "x": -Infinity, "lr": 1e-4}"#),
            Some(rec(4, &[("lr", 1e-4)]))
        );
        // a logging prefix, ANSI colour
        assert_eq!(
            line("[rank0]: 2026-12-01 14:00:00,123 - INFO - {\"step\": 5, \"loss\": 2}"),
            Some(rec(5, &[("loss", 2.0)]))
        );
        assert_eq!(
            line("\x1b[32m{\"step\": 6, \"loss\": 1}\x1b[0m"),
            Some(rec(6, &[("loss", 1.0)]))
        );
        // escapes in keys
        assert_eq!(
            line(r#"{"step": 7, "a\"b\u00e9": 1}"#),
            Some(rec(7, &[("a\"bé", 1.0)]))
        );
    }

    #[test]
    fn not_convention() {
        for l in [
            r#"{"loss": 1}"#,
            r#"{"step": "10", "loss": 1}"#,
            r#"{"step": -1, "loss": 1}"#,
            r#"{"step": 1.5, "loss": 1}"#,
            r#"{"step": 1, "loss": 1"#,
            r#"{"step": 1, "loss": 1} trailing"#,
            r#"{"step": 1, "loss": 01x}"#,
            r#"{"inner": {"step": 1}, "loss": 1}"#,
            "step 1 loss 2",
            "",
        ] {
            assert_eq!(line(l), None, "{l}");
        }
    }

    #[test]
    fn normalised() {
        assert_eq!(
            object(
                r#"{"coco/bbox_mAP": 0.37, "data_time": 0.0036, "step": 12}"#,
                true
            ),
            Some(rec(12, &[("coco_bbox_map", 0.37), ("data_time", 0.0036)]))
        );
    }
}
