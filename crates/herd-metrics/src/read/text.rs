//! Helpers the readers share: ANSI stripping, numbers, names.

use std::borrow::Cow;

/// `line` without ANSI escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL|ESC \`,
/// and two-byte `ESC x`); borrowed, without allocating, when it has none.
pub(crate) fn strip_ansi(line: &str) -> Cow<'_, str> {
    if !line.as_bytes().contains(&0x1b) {
        return Cow::Borrowed(line);
    }
    let b = line.as_bytes();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    let mut kept = 0;
    while i < b.len() {
        if b[i] != 0x1b {
            i += 1;
            continue;
        }
        out.push_str(&line[kept..i]);
        i += 1;
        match b.get(i) {
            Some(b'[') => {
                i += 1;
                // parameters and intermediates, then one final byte 0x40..=0x7e
                while i < b.len() && !(0x40..=0x7e).contains(&b[i]) {
                    i += 1;
                }
                i += 1;
            }
            Some(b']') => {
                i += 1;
                while i < b.len() {
                    if b[i] == 0x07 {
                        i += 1;
                        break;
                    }
                    if b[i] == 0x1b && b.get(i + 1) == Some(&b'\\') {
                        i += 2;
                        break;
                    }
                    i += 1;
                }
            }
            Some(c) if c.is_ascii() => i += 1,
            _ => {}
        }
        i = i.min(b.len());
        // never split a UTF-8 character: sequences end on ASCII bytes, but a malformed
        // one may have swallowed into a multi-byte character
        while i < b.len() && !line.is_char_boundary(i) {
            i += 1;
        }
        kept = i;
    }
    out.push_str(&line[kept..]);
    Cow::Owned(out)
}

/// A number as trainers print them: `12`, `-0.5`, `1.2E+01`, `1,234` (thousands
/// separators, in groups of three), with surrounding spaces. `None` for anything else,
/// for `-`, and for `nan`/`inf` (non-finite numbers are skipped).
pub(crate) fn num(s: &str) -> Option<f64> {
    let s = s.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() || s == "-" {
        return None;
    }
    let v: f64 = if s.contains(',') {
        grouped(s)?
    } else {
        // f64's parser takes `inf`, `infinity` and `nan` in any case; those are skipped
        // below, the same as any non-finite value.
        s.parse().ok()?
    };
    v.is_finite().then_some(v)
}

/// `1,234,567.5`: digits in groups of three after the first comma.
fn grouped(s: &str) -> Option<f64> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let (int, frac) = match body.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (body, None),
    };
    let mut groups = int.split(',');
    let first = groups.next()?;
    if first.is_empty() || first.len() > 3 || !first.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let mut digits = String::with_capacity(s.len());
    if neg {
        digits.push('-');
    }
    digits.push_str(first);
    for g in groups {
        if g.len() != 3 || !g.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        digits.push_str(g);
    }
    if let Some(f) = frac {
        if f.is_empty() || !f.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        digits.push('.');
        digits.push_str(f);
    }
    digits.parse().ok()
}

/// A step from a number: a whole number, 0 or more.
pub(crate) fn step_of(v: f64) -> Option<u64> {
    (v >= 0.0 && v.fract() == 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

/// A trainer's name as herd stores it: lowercased, `%` read as `pct`, every run of other
/// characters that are not letters or digits turned into one `_`, none at either end
/// (`elapsed time per iteration (ms)` → `elapsed_time_per_iteration_ms`).
pub(crate) fn norm(name: &str) -> String {
    norm_with(name, false)
}

/// [`norm`], splitting CamelCase words too (`RunningAvgSamplesPerSec` →
/// `running_avg_samples_per_sec`).
pub(crate) fn norm_camel(name: &str) -> String {
    norm_with(name, true)
}

fn norm_with(name: &str, camel: bool) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    norm_into(&mut out, name, camel);
    out
}

/// [`norm`] (or [`norm_camel`]) of `name`, appended to `out`; a `_` between them when
/// `out` is not empty.
pub(crate) fn norm_into(out: &mut String, name: &str, camel: bool) {
    let start = out.len();
    let mut gap = start > 0;
    let mut prev_lower = false;
    for c in name.chars() {
        if c == '%' {
            if out.len() > start || gap {
                out.push('_');
            }
            out.push_str("pct");
            gap = true;
            prev_lower = false;
            continue;
        }
        if !c.is_alphanumeric() {
            gap = out.len() > start || gap;
            prev_lower = false;
            continue;
        }
        if camel && c.is_uppercase() && prev_lower {
            gap = true;
        }
        if gap {
            out.push('_');
            gap = false;
        }
        prev_lower = c.is_lowercase() || c.is_numeric();
        if c.is_ascii() {
            out.push(c.to_ascii_lowercase());
        } else {
            out.extend(c.to_lowercase());
        }
    }
}

/// Whether `hay` holds `needle` starting at a word boundary (not right after a letter,
/// digit or `_`); the first such position.
pub(crate) fn find_word(hay: &str, needle: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = hay[from..].find(needle) {
        let at = from + at;
        let before = hay[..at].chars().next_back();
        if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return Some(at);
        }
        from = at + needle.len();
    }
    None
}

/// A value with its unit: the leading number and what follows it
/// (`29.81GiB(31.38%)` → (`29.81`, `GiB(31.38%)`)).
pub(crate) fn split_num(s: &str) -> (&str, &str) {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i = 1;
    }
    let start_digits = i;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.' || b[i] == b',') {
        i += 1;
    }
    if i == start_digits {
        return ("", s);
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'-' || b[j] == b'+') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    (&s[..i], &s[i..])
}

/// `label: value` pairs of a line where values are single words and labels the text
/// between a value and the next `: ` (`steps: 10 loss: 2.3 iter time (s): 0.12` →
/// (`steps`, `10`), (`loss`, `2.3`), (`iter time (s)`, `0.12`)).
pub(crate) fn label_values(s: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(colon) = rest.find(": ") {
        let label = rest[..colon].trim();
        let after = rest[colon + 1..].trim_start();
        let end = after.find(char::is_whitespace).unwrap_or(after.len());
        let value = &after[..end];
        if value.is_empty() {
            break;
        }
        out.push((label, value));
        rest = &after[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi() {
        assert_eq!(strip_ansi("\x1b[31mstep: 1\x1b[39m"), "step: 1");
        assert_eq!(
            strip_ansi("\x1b[38;2;180;60;0mgrad_norm: 3\x1b[0m ok"),
            "grad_norm: 3 ok"
        );
        assert_eq!(strip_ansi("a\x1b]0;title\x07b"), "ab");
        assert_eq!(strip_ansi("é\x1b[1mü"), "éü");
        assert_eq!(strip_ansi("tail\x1b["), "tail");
        assert!(matches!(strip_ansi("plain"), Cow::Borrowed("plain")));
    }

    #[test]
    fn numbers() {
        assert_eq!(num("12"), Some(12.0));
        assert_eq!(num(" -0.5 "), Some(-0.5));
        assert_eq!(num("1.2E+01"), Some(12.0));
        assert_eq!(num("1.000000E-04"), Some(1e-4));
        assert_eq!(num("1,234"), Some(1234.0));
        assert_eq!(num("177,138"), Some(177138.0));
        assert_eq!(num("-1,234,567.25"), Some(-1234567.25));
        assert_eq!(num("10,"), None);
        assert_eq!(num("1,23"), None);
        assert_eq!(num("-"), None);
        assert_eq!(num("nan"), None);
        assert_eq!(num("NaN"), None);
        assert_eq!(num("-inf"), None);
        assert_eq!(num("inf"), None);
        assert_eq!(num("abc"), None);
        assert_eq!(num(""), None);
    }

    #[test]
    fn names() {
        assert_eq!(
            norm("elapsed time per iteration (ms)"),
            "elapsed_time_per_iteration_ms"
        );
        assert_eq!(
            norm("throughput per GPU (TFLOP/s/GPU)"),
            "throughput_per_gpu_tflop_s_gpu"
        );
        assert_eq!(norm("lr-SGD"), "lr_sgd");
        assert_eq!(norm("vm %"), "vm_pct");
        assert_eq!(norm("data_loading(%)"), "data_loading_pct");
        assert_eq!(norm("__x__"), "x");
        assert_eq!(
            norm_camel("RunningAvgSamplesPerSec"),
            "running_avg_samples_per_sec"
        );
        assert_eq!(norm_camel("MaxMemAllocated"), "max_mem_allocated");
    }

    #[test]
    fn words_and_units() {
        assert_eq!(find_word("global_step: 3 step: 4", "step:"), Some(15));
        assert_eq!(find_word("xstep:", "step:"), None);
        assert_eq!(split_num("29.81GiB(31.38%)"), ("29.81", "GiB(31.38%)"));
        assert_eq!(split_num("1.2E+01x"), ("1.2E+01", "x"));
        assert_eq!(split_num("2e"), ("2", "e"));
        assert_eq!(split_num("N/A"), ("", "N/A"));
        assert_eq!(
            label_values("steps: 10 loss: 2.3 iter time (s): 0.12 samples/sec: 9"),
            vec![
                ("steps", "10"),
                ("loss", "2.3"),
                ("iter time (s)", "0.12"),
                ("samples/sec", "9")
            ]
        );
    }
}
