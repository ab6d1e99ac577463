//! Text as the page writes it: escaped, and times in the reader's words.

/// `text` with `&`, `<`, `>`, `"` and `'` as character references.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `ms` after `base` in the reader's words: `+0:00`, `+1:17`, `+1:02:03` (whole seconds,
/// as `herd status` counts; `-0:05` before it).
pub fn since(ms: u64, base: u64) -> String {
    let d = |ms: u64| crate::status::clock(std::time::Duration::from_millis(ms));
    if ms >= base {
        format!("+{}", d(ms - base))
    } else {
        format!("-{}", d(base - ms))
    }
}
