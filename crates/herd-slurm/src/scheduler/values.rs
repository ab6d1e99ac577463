//! SLURM's value formats: a time ([`TimeLimit`], and [`parse_duration`] for the durations
//! SLURM prints) and a memory size ([`Memory`]), parsed strictly, one reading each for what
//! a user gives herd and what SLURM says.
//!
//! Each parser returns a [`FormatError`] that says what was given and what is accepted; the
//! caller adds the key and where it was set.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A value that is not in SLURM's format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FormatError {
    /// What is wrong and what is accepted, e.g. "`50h` is not a SLURM time: …".
    pub message: String,
}

impl FormatError {
    fn new(message: impl Into<String>) -> FormatError {
        FormatError {
            message: message.into(),
        }
    }
}

/// Most days a time limit may hold (SLURM's own limit is far below; this only keeps the
/// arithmetic in range).
const MAX_DAYS: u64 = 100_000;

/// A job time limit (`--time`), in seconds.
///
/// Accepted forms are SLURM's: `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`.
/// Where SLURM silently normalizes or guesses, this refuses: a field past its range
/// (`1:61:00`, `1-25`), an empty field (`1-`, `5:`), signs, spaces, fractions, and a limit
/// of zero (SLURM reads 0 as "no limit"; leave the key out instead). The leading field of a
/// form may be as large as wanted (`90` minutes, `50:00:00` hours).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TimeLimit {
    seconds: u64,
}

impl TimeLimit {
    /// A limit of `seconds` (more than 0).
    pub fn from_seconds(seconds: u64) -> Option<TimeLimit> {
        (seconds > 0 && seconds <= MAX_DAYS * 86_400).then_some(TimeLimit { seconds })
    }

    /// The limit in seconds.
    pub fn seconds(&self) -> u64 {
        self.seconds
    }

    /// The limit in minutes, rounded up (SLURM's granularity).
    pub fn minutes_ceil(&self) -> u64 {
        self.seconds.div_ceil(60)
    }

    /// Parse a whole number of minutes given as a TOML integer (`time = 90`).
    pub fn from_minutes(minutes: i64) -> Result<TimeLimit, FormatError> {
        u64::try_from(minutes)
            .ok()
            .and_then(|m| m.checked_mul(60))
            .and_then(TimeLimit::from_seconds)
            .ok_or_else(|| {
                FormatError::new(format!(
                    "{minutes} is not a time limit: give a positive number of minutes or a string such as \"2-00:00:00\""
                ))
            })
    }
}

const TIME_FORMS: &str =
    "use MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (e.g. \"50:00:00\" or \"2-00:00:00\")";

fn time_field(text: &str, field: &str, whole: &str) -> Result<u64, FormatError> {
    if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FormatError::new(format!(
            "`{whole}` is not a SLURM time: the {field} field `{text}` is not a whole number; {TIME_FORMS}"
        )));
    }
    text.parse()
        .map_err(|_| FormatError::new(format!("`{whole}` is not a SLURM time: {TIME_FORMS}")))
}

fn below(value: u64, limit: u64, field: &str, whole: &str) -> Result<u64, FormatError> {
    if value >= limit {
        return Err(FormatError::new(format!(
            "`{whole}` is not a SLURM time: {field} must be below {limit}, got {value}; {TIME_FORMS}"
        )));
    }
    Ok(value)
}

/// Seconds of a SLURM time (`MM`, `MM:SS`, `HH:MM:SS`, `D-HH`, `D-HH:MM`, `D-HH:MM:SS`),
/// zero included: the one reading of SLURM's time format, behind [`TimeLimit`] (what a
/// user gives) and [`parse_duration`] (what SLURM prints).
fn read_seconds(s: &str) -> Result<u64, FormatError> {
    let (days, rest) = match s.split_once('-') {
        Some((d, rest)) => (Some(time_field(d, "days", s)?), rest),
        None => (None, s),
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let seconds = match (days, parts.as_slice()) {
        (None, [m]) => time_field(m, "minutes", s)?.checked_mul(60),
        (None, [m, sec]) => {
            let m = time_field(m, "minutes", s)?;
            let sec = below(time_field(sec, "seconds", s)?, 60, "seconds", s)?;
            m.checked_mul(60).and_then(|v| v.checked_add(sec))
        }
        (None, [h, m, sec]) => {
            let h = time_field(h, "hours", s)?;
            let m = below(time_field(m, "minutes", s)?, 60, "minutes", s)?;
            let sec = below(time_field(sec, "seconds", s)?, 60, "seconds", s)?;
            h.checked_mul(3600)
                .and_then(|v| v.checked_add(m * 60 + sec))
        }
        (Some(d), [h, rest @ ..]) if rest.len() <= 2 => {
            let h = below(time_field(h, "hours", s)?, 24, "hours", s)?;
            let m = match rest.first() {
                Some(m) => below(time_field(m, "minutes", s)?, 60, "minutes", s)?,
                None => 0,
            };
            let sec = match rest.get(1) {
                Some(sec) => below(time_field(sec, "seconds", s)?, 60, "seconds", s)?,
                None => 0,
            };
            d.checked_mul(86_400)
                .and_then(|v| v.checked_add(h * 3600 + m * 60 + sec))
        }
        _ => {
            return Err(FormatError::new(format!(
                "`{s}` is not a SLURM time: {TIME_FORMS}"
            )))
        }
    };
    seconds.ok_or_else(|| FormatError::new(format!("`{s}` is longer than {MAX_DAYS} days")))
}

impl FromStr for TimeLimit {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<TimeLimit, FormatError> {
        match read_seconds(s)? {
            0 => Err(FormatError::new(format!(
                "`{s}` is a time limit of zero (SLURM reads it as no limit): give a positive limit or leave the key out"
            ))),
            v => TimeLimit::from_seconds(v).ok_or_else(|| {
                FormatError::new(format!("`{s}` is longer than {MAX_DAYS} days"))
            }),
        }
    }
}

/// A duration as SLURM prints it (`TimeLimit`, `RunTime` of `scontrol show job`,
/// `TimeUsed`, `TimeLimit` of `squeue`), read as [`TimeLimit`] reads a time but zero
/// allowed (a job that just started); `None` for `UNLIMITED`, `INVALID`, `N/A` and anything
/// else that is no time.
pub fn parse_duration(text: &str) -> Option<Duration> {
    read_seconds(text).ok().map(Duration::from_secs)
}

impl fmt::Display for TimeLimit {
    /// `HH:MM:SS` under a day, `D-HH:MM:SS` from a day on (both SLURM forms).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (d, rest) = (self.seconds / 86_400, self.seconds % 86_400);
        let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
        if d > 0 {
            write!(f, "{d}-{h:02}:{m:02}:{s:02}")
        } else {
            write!(f, "{h:02}:{m:02}:{s:02}")
        }
    }
}

impl Serialize for TimeLimit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TimeLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TimeLimit, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e: FormatError| serde::de::Error::custom(e.message))
    }
}

/// Memory per node (`--mem`), in megabytes (SLURM's MB are MiB).
///
/// Accepted: a whole number with an optional unit `K`, `M`, `G` or `T` (any case, 1024
/// apart, default `M`), optionally followed by `B`: `240G`, `240GB`, `450G`, `16000M`,
/// `16000`. Kilobytes round up to whole megabytes, as SLURM does. `0` is SLURM's "all the
/// memory of each node". Fractions (`1.5G`), `GiB`, `P` and signs are refused, as SLURM
/// refuses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Memory {
    megabytes: u64,
}

/// Largest memory size accepted: 1 EiB, far beyond any node.
const MAX_MEMORY_MB: u64 = 1 << 40;

impl Memory {
    /// `megabytes` MB.
    pub fn from_megabytes(megabytes: u64) -> Option<Memory> {
        (megabytes <= MAX_MEMORY_MB).then_some(Memory { megabytes })
    }

    /// The size in megabytes.
    pub fn megabytes(&self) -> u64 {
        self.megabytes
    }

    /// Whether this is `0`: all the memory of each node.
    pub fn is_whole_node(&self) -> bool {
        self.megabytes == 0
    }

    /// Parse a whole number of megabytes given as a TOML integer (`mem = 16000`).
    pub fn from_number(megabytes: i64) -> Result<Memory, FormatError> {
        u64::try_from(megabytes)
            .ok()
            .and_then(Memory::from_megabytes)
            .ok_or_else(|| {
                FormatError::new(format!(
                    "{megabytes} is not a memory size: give megabytes (0 or more) or a string such as \"240G\""
                ))
            })
    }
}

const MEM_FORMS: &str =
    "use a whole number with an optional unit K, M, G or T (e.g. \"240G\", \"16000M\", \"16000\")";

impl FromStr for Memory {
    type Err = FormatError;

    fn from_str(s: &str) -> Result<Memory, FormatError> {
        let digits = s.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = s.split_at(digits);
        let bad = || FormatError::new(format!("`{s}` is not a SLURM memory size: {MEM_FORMS}"));
        if number.is_empty() || number.len() > 20 {
            return Err(bad());
        }
        let n: u64 = number.parse().map_err(|_| bad())?;
        let unit = unit
            .strip_suffix(['B', 'b'])
            .filter(|u| !u.is_empty())
            .unwrap_or(unit);
        let mb = match unit {
            "" | "M" | "m" => Some(n),
            "K" | "k" => Some(n.div_ceil(1024)),
            "G" | "g" => n.checked_mul(1024),
            "T" | "t" => n.checked_mul(1024 * 1024),
            _ => return Err(bad()),
        };
        mb.and_then(Memory::from_megabytes)
            .ok_or_else(|| FormatError::new(format!("`{s}` is larger than 1 EiB")))
    }
}

impl fmt::Display for Memory {
    /// The largest unit that divides the size: `240G`, `1T`, `16000M`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = self.megabytes;
        if mb != 0 && mb.is_multiple_of(1024 * 1024) {
            write!(f, "{}T", mb / (1024 * 1024))
        } else if mb != 0 && mb.is_multiple_of(1024) {
            write!(f, "{}G", mb / 1024)
        } else {
            write!(f, "{mb}M")
        }
    }
}

impl Serialize for Memory {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Memory {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Memory, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|e: FormatError| serde::de::Error::custom(e.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str) -> u64 {
        s.parse::<TimeLimit>()
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .seconds()
    }

    #[test]
    fn time_forms() {
        assert_eq!(t("5"), 300);
        assert_eq!(t("90"), 5400);
        assert_eq!(t("5:30"), 330);
        assert_eq!(t("1:00:00"), 3600);
        assert_eq!(t("50:00:00"), 50 * 3600);
        assert_eq!(t("1-0"), 86_400);
        assert_eq!(t("1-1:30"), 86_400 + 5400);
        assert_eq!(t("2-00:00:00"), 2 * 86_400);
        assert_eq!(t("0-00:00:01"), 1);
    }

    #[test]
    fn time_refusals_name_the_forms() {
        for bad in [
            "",
            "0",
            "00:00",
            "0-0",
            "1-",
            "-1",
            "5:",
            ":5",
            "1:2:3:4",
            "1-1:1:1:1",
            "00:61",
            "1:61:00",
            "1-24",
            "1-1:60",
            "1.5",
            " 5",
            "5 ",
            "5s",
            "50h",
            "+5",
            "infinite",
            "1-a",
            "9999999999",
        ] {
            let e = bad.parse::<TimeLimit>().expect_err(bad);
            assert!(e.message.contains(&format!("`{bad}`")), "{e}");
        }
        assert!(TimeLimit::from_minutes(0).is_err());
        assert!(TimeLimit::from_minutes(-5).is_err());
        assert_eq!(TimeLimit::from_minutes(90).map(|t| t.seconds()), Ok(5400));
    }

    #[test]
    fn time_display() {
        assert_eq!(t_display("50:00:00"), "2-02:00:00");
        assert_eq!(t_display("5"), "00:05:00");
        assert_eq!(t_display("2-00:00:00"), "2-00:00:00");
        assert_eq!(t_display("5:30"), "00:05:30");
    }

    fn t_display(s: &str) -> String {
        s.parse::<TimeLimit>()
            .map(|t| t.to_string())
            .unwrap_or_default()
    }

    fn mb(s: &str) -> u64 {
        s.parse::<Memory>()
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .megabytes()
    }

    #[test]
    fn memory_forms() {
        assert_eq!(mb("240G"), 240 * 1024);
        assert_eq!(mb("240GB"), 240 * 1024);
        assert_eq!(mb("240gb"), 240 * 1024);
        assert_eq!(mb("450G"), 450 * 1024);
        assert_eq!(mb("16000M"), 16000);
        assert_eq!(mb("16000MB"), 16000);
        assert_eq!(mb("16000"), 16000);
        assert_eq!(mb("1T"), 1024 * 1024);
        assert_eq!(mb("1048576K"), 1024);
        assert_eq!(mb("1K"), 1);
        assert_eq!(mb("0"), 0);
        assert!("0".parse::<Memory>().is_ok_and(|m| m.is_whole_node()));
        assert_eq!(Memory::from_number(16000).map(|m| m.megabytes()), Ok(16000));
        assert!(Memory::from_number(-1).is_err());
    }

    #[test]
    fn memory_refusals() {
        for bad in [
            "",
            "G",
            "1Gx",
            "1.5G",
            "-1",
            "1GiB",
            "1B",
            "1P",
            " 1G",
            "1G ",
            "1 G",
            "99999999999999999999999T",
            "1BB",
        ] {
            let e = bad.parse::<Memory>().expect_err(bad);
            assert!(e.message.contains(&format!("`{bad}`")), "{e}");
        }
    }

    #[test]
    fn memory_display() {
        assert_eq!(
            Memory::from_megabytes(240 * 1024).map(|m| m.to_string()),
            Some("240G".into())
        );
        assert_eq!(
            Memory::from_megabytes(16000).map(|m| m.to_string()),
            Some("16000M".into())
        );
        assert_eq!(
            Memory::from_megabytes(1 << 20).map(|m| m.to_string()),
            Some("1T".into())
        );
        assert_eq!(
            Memory::from_megabytes(0).map(|m| m.to_string()),
            Some("0M".into())
        );
    }

    #[test]
    fn durations_are_read_in_every_form_slurm_prints() {
        assert_eq!(parse_duration("00:02:00"), Some(Duration::from_secs(120)));
        assert_eq!(
            parse_duration("1-02:03:04"),
            Some(Duration::from_secs(86_400 + 7384))
        );
        assert_eq!(parse_duration("05:30"), Some(Duration::from_secs(330)));
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("UNLIMITED"), None);
        assert_eq!(parse_duration("Partition_Limit"), None);
        assert_eq!(parse_duration("1:2:3:4"), None);
    }

    #[test]
    fn a_duration_slurm_prints_is_read_as_a_time_limit_is_zero_included() {
        for text in [
            "5",
            "05:30",
            "1:00:00",
            "50:00:00",
            "1-0",
            "1-05",
            "1-02:03:04",
        ] {
            assert_eq!(
                parse_duration(text).map(|d| d.as_secs()),
                text.parse::<TimeLimit>().ok().map(|t| t.seconds()),
                "{text}"
            );
        }
        assert_eq!(
            parse_duration("1-05"),
            Some(Duration::from_secs(86_400 + 5 * 3600))
        );
        assert_eq!(
            parse_duration("00:00:00"),
            Some(Duration::ZERO),
            "a job that just started"
        );
        assert_eq!(parse_duration("0:00"), Some(Duration::ZERO));
        assert!("00:00:00".parse::<TimeLimit>().is_err(), "no limit of zero");
        for none in ["UNLIMITED", "INVALID", "N/A", "", "1:61:00"] {
            assert_eq!(parse_duration(none), None, "{none}");
        }
    }

    proptest! {
        #[test]
        fn time_display_parses_back(secs in 1u64..(400 * 86_400)) {
            let limit = TimeLimit::from_seconds(secs).ok_or_else(|| TestCaseError::fail("range"))?;
            prop_assert_eq!(limit.to_string().parse::<TimeLimit>(), Ok(limit));
        }

        #[test]
        fn memory_display_parses_back(m in 0u64..(1 << 40)) {
            let mem = Memory::from_megabytes(m).ok_or_else(|| TestCaseError::fail("range"))?;
            prop_assert_eq!(mem.to_string().parse::<Memory>(), Ok(mem));
        }

        #[test]
        fn time_parser_never_panics(s in "[0-9:\\-]{0,14}") {
            let _ = s.parse::<TimeLimit>();
        }

        #[test]
        fn hh_mm_ss_is_exact(h in 0u64..1000, m in 0u64..60, s in 0u64..60) {
            prop_assume!(h + m + s > 0);
            let text = format!("{h}:{m:02}:{s:02}");
            prop_assert_eq!(text.parse::<TimeLimit>().map(|t| t.seconds()), Ok(h * 3600 + m * 60 + s));
        }
    }
}
