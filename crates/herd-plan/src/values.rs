//! The values a plan holds, parsed the way SLURM reads them, but strictly: an early-warning
//! signal and positive counts. SLURM's time limit and memory size ([`TimeLimit`](crate::TimeLimit),
//! [`Memory`](crate::Memory)) are herd-slurm's, re-exported by this crate.
//!
//! Each parser returns a [`ValueError`] that says what was given and what is accepted; the
//! caller adds the key and where it was set.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A value that is not what its key accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValueError {
    /// What is wrong and what is accepted, e.g. "`50h` is not a SLURM time: …".
    pub message: String,
}

/// A time or memory size not in SLURM's format, as a plan's value error (same message).
impl From<herd_slurm::FormatError> for ValueError {
    fn from(e: herd_slurm::FormatError) -> ValueError {
        ValueError { message: e.message }
    }
}

impl ValueError {
    pub(crate) fn new(message: impl Into<String>) -> ValueError {
        ValueError {
            message: message.into(),
        }
    }
}

/// Signal names SLURM's `--signal` accepts (22.05), without the `SIG` prefix.
pub const SIGNAL_NAMES: &[&str] = &[
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1", "USR2", "URG", "CONT", "STOP",
    "TSTP", "TTIN", "TTOU", "XCPU",
];

/// SLURM's early-warning signal (`--signal=[{R|B}:]SIG[@seconds]`): which signal, to whom,
/// and how long before the time limit.
///
/// `B:` sends it to the batch shell only (herd's script `exec`s srun, so srun receives it
/// and forwards it to every task); `R:` also sends it on reservation end. The signal is a
/// name from [`SIGNAL_NAMES`] (any case, `SIG` prefix optional) or a number 1–64; seconds
/// are 0–65535, default 60 as in SLURM.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signal {
    /// `B:`: signal the batch shell only.
    pub batch_only: bool,
    /// `R:`: also signal when the reservation ends.
    pub reservation: bool,
    /// The signal: a name without `SIG` (`USR1`) or a number (`10`).
    pub name: String,
    /// Seconds before the time limit.
    pub seconds: u16,
}

const SIGNAL_FORMS: &str =
    "use [B:]SIGNAL[@SECONDS] with a signal name such as USR1 or a number, e.g. \"USR1@60\" or \"B:TERM@120\"";

impl FromStr for Signal {
    type Err = ValueError;

    fn from_str(s: &str) -> Result<Signal, ValueError> {
        let bad = |why: &str| {
            ValueError::new(format!("`{s}` is not a SLURM signal{why}: {SIGNAL_FORMS}"))
        };
        let (flags, rest) = match s.split_once(':') {
            Some((flags, rest)) => (flags, rest),
            None => ("", s),
        };
        let (mut batch_only, mut reservation) = (false, false);
        for c in flags.chars() {
            match c {
                'B' | 'b' if !batch_only => batch_only = true,
                'R' | 'r' if !reservation => reservation = true,
                _ => return Err(bad(&format!(" (unknown flag `{flags}:`, only B: and R:)"))),
            }
        }
        if s.contains(':') && flags.is_empty() {
            return Err(bad(" (empty flag before `:`)"));
        }
        let (sig, seconds) = match rest.split_once('@') {
            Some((sig, secs)) => {
                if secs.is_empty() || secs.len() > 5 || !secs.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad(" (seconds after `@` must be a whole number 0-65535)"));
                }
                let secs: u16 = secs
                    .parse()
                    .map_err(|_| bad(" (seconds after `@` must be 65535 or less)"))?;
                (sig, secs)
            }
            None => (rest, 60),
        };
        let name = if !sig.is_empty() && sig.bytes().all(|b| b.is_ascii_digit()) {
            match sig.parse::<u8>() {
                Ok(n @ 1..=64) => n.to_string(),
                _ => return Err(bad(" (signal numbers are 1-64)")),
            }
        } else {
            let upper = sig.to_ascii_uppercase();
            let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
            match SIGNAL_NAMES.iter().find(|n| **n == bare) {
                Some(n) => (*n).to_owned(),
                None => {
                    return Err(bad(&format!(
                        " (unknown signal `{sig}`; SLURM knows {})",
                        SIGNAL_NAMES.join(" ")
                    )))
                }
            }
        };
        Ok(Signal {
            batch_only,
            reservation,
            name,
            seconds,
        })
    }
}

impl fmt::Display for Signal {
    /// SLURM's form, seconds always written: `B:USR1@60`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.reservation, self.batch_only) {
            (true, true) => write!(f, "RB:")?,
            (true, false) => write!(f, "R:")?,
            (false, true) => write!(f, "B:")?,
            (false, false) => {}
        }
        write!(f, "{}@{}", self.name, self.seconds)
    }
}

impl Serialize for Signal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Signal, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e: ValueError| serde::de::Error::custom(e.message))
    }
}

/// A positive whole number (1 or more) that fits in 32 bits.
pub fn positive(value: i64) -> Result<u32, ValueError> {
    match u32::try_from(value) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(ValueError::new(format!(
            "must be a whole number from 1 to {}, got {value}",
            u32::MAX
        ))),
    }
}

/// A whole number 0 or more that fits in 32 bits.
pub fn non_negative(value: i64) -> Result<u32, ValueError> {
    u32::try_from(value).map_err(|_| {
        ValueError::new(format!(
            "must be a whole number from 0 to {}, got {value}",
            u32::MAX
        ))
    })
}

/// The longest window [`window_seconds`] accepts: ten years.
pub const MAX_WINDOW_SECONDS: u64 = 3650 * 86_400;

/// A span of time as a job file or flag gives it: whole seconds (`86400`, `0`) or a whole
/// number with a unit, `s`, `m`, `h` or `d` (`90s`, `30m`, `24h`, `7d`; the units of
/// `herd logs --since`), at most ten years; in seconds.
pub fn window_seconds(text: &str) -> Result<u64, ValueError> {
    let bad = || {
        ValueError::new(format!(
            "`{}` is not a span of time: give seconds (86400) or a whole number with s, m, h or d (90s, 30m, 24h, 7d)",
            text.escape_debug()
        ))
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (n, unit) = text.split_at(split);
    if n.is_empty() || n.len() > 12 {
        return Err(bad());
    }
    let n: u64 = n.parse().map_err(|_| bad())?;
    let unit = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    let secs = n.saturating_mul(unit);
    if secs > MAX_WINDOW_SECONDS {
        return Err(ValueError::new(format!(
            "`{text}` is longer than ten years ({MAX_WINDOW_SECONDS} s)"
        )));
    }
    Ok(secs)
}

/// A span of time from a job file or flag ([`window_seconds`]): a number is seconds.
pub fn window(value: &TextOrNumber) -> Result<u64, ValueError> {
    match value {
        TextOrNumber::Text(t) => window_seconds(t),
        TextOrNumber::Number(n) => match u64::try_from(*n) {
            Ok(secs) => window_seconds(&secs.to_string()),
            Err(_) => Err(ValueError::new(format!(
                "{n} is not a span of time: give 0 or more seconds, or e.g. \"24h\""
            ))),
        },
    }
}

/// A value a job file may give as a string or a number: `mem = "240G"` or `mem = 16000`,
/// `time = "2-00:00:00"` or `time = 90` (minutes), `hang_timeout = "auto"` or
/// `hang_timeout = 600`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TextOrNumber {
    /// A TOML string.
    Text(String),
    /// A TOML integer.
    Number(i64),
}

impl fmt::Display for TextOrNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TextOrNumber::Text(t) => f.write_str(t),
            TextOrNumber::Number(n) => write!(f, "{n}"),
        }
    }
}

impl Serialize for TextOrNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TextOrNumber::Text(t) => s.serialize_str(t),
            TextOrNumber::Number(n) => s.serialize_i64(*n),
        }
    }
}

impl<'de> Deserialize<'de> for TextOrNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TextOrNumber, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = TextOrNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a string such as \"240G\", \"2-00:00:00\" or \"auto\", or a whole number",
                )
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<TextOrNumber, E> {
                Ok(TextOrNumber::Number(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TextOrNumber, E> {
                i64::try_from(v)
                    .map(TextOrNumber::Number)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TextOrNumber, E> {
                Ok(TextOrNumber::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(s: &str) -> String {
        s.parse::<Signal>()
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .to_string()
    }

    #[test]
    fn signal_forms() {
        assert_eq!(sig("USR1@60"), "USR1@60");
        assert_eq!(sig("B:USR1@60"), "B:USR1@60");
        assert_eq!(sig("SIGUSR1@90"), "USR1@90");
        assert_eq!(sig("usr1"), "USR1@60");
        assert_eq!(sig("sigterm"), "TERM@60");
        assert_eq!(sig("R:USR1"), "R:USR1@60");
        assert_eq!(sig("BR:USR1"), "RB:USR1@60");
        assert_eq!(sig("10@60"), "10@60");
        assert_eq!(sig("USR1@65535"), "USR1@65535");
        assert_eq!(sig("B:TERM@0"), "B:TERM@0");
        let s: Signal = "B:USR2@120".parse().unwrap_or_else(|e| panic!("{e}"));
        assert!(s.batch_only && !s.reservation && s.name == "USR2" && s.seconds == 120);
    }

    #[test]
    fn signal_refusals() {
        for bad in [
            "",
            "FOO",
            "PIPE",
            "0",
            "65",
            "USR1@",
            "USR1@-1",
            "USR1@65536",
            "X:USR1",
            ":USR1",
            "BB:USR1",
            "USR1@1.5",
            "B:USR1@60 ",
            "USR1 ",
        ] {
            let e = bad.parse::<Signal>().expect_err(bad);
            assert!(e.message.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn windows_in_seconds_or_with_a_unit() {
        let w = |s: &str| window_seconds(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(w("0"), 0);
        assert_eq!(w("86400"), 86_400);
        assert_eq!(w("90s"), 90);
        assert_eq!(w("30m"), 1800);
        assert_eq!(w("24h"), 86_400);
        assert_eq!(w("7d"), 7 * 86_400);
        for bad in [
            "",
            "h",
            "-5",
            "1.5h",
            "24 h",
            "24H",
            "2w",
            "1h30m",
            "99999999999999",
        ] {
            let e = window_seconds(bad).expect_err(bad);
            assert!(e.message.contains(&format!("`{bad}`")), "{e}");
        }
        assert!(window_seconds("3651d").is_err(), "over ten years");
        assert_eq!(window(&TextOrNumber::Number(3600)), Ok(3600));
        assert_eq!(window(&TextOrNumber::Text("12h".into())), Ok(43_200));
        assert!(window(&TextOrNumber::Number(-1)).is_err());
    }

    #[test]
    fn counts() {
        assert_eq!(positive(1), Ok(1));
        assert!(positive(0).is_err());
        assert!(positive(-3).is_err());
        assert!(positive(1 << 40).is_err());
        assert_eq!(non_negative(0), Ok(0));
        assert!(non_negative(-1).is_err());
    }
}
