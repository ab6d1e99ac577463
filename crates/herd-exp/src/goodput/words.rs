//! Times and shares as the report writes them.

/// Milliseconds as seconds.
pub(crate) fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// `77.5 %`.
pub fn percent(r: f64) -> String {
    format!("{:.1} %", r * 100.0)
}

/// A duration as people read it: `4.2 s` under a minute, else `3:52` or `1:02:03`.
pub fn duration(ms: u64) -> String {
    if ms < 60_000 {
        return format!("{:.1} s", ms as f64 / 1000.0);
    }
    let s = (ms + 500) / 1000;
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{sec:02}")
    } else {
        format!("{m}:{sec:02}")
    }
}
