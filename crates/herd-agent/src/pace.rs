//! The pace of each rank's progress and the hang timeout it earns: a rank's progress (an
//! output line, a touch of its heartbeat file) as the agent's poll sees it each second
//! ([`Pace`]), and the timeout that applies to a rank now ([`limit`]): `--start-timeout`
//! before its first progress, then `--hang-timeout`, fixed, or with `--hang-timeout auto`
//! its own from its pace ([`AutoRule`], docs/launch.md "Hangs").

use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use herd_plan::launch::{HangTimeout, KeepAlive};

use crate::message::RankProgress;

/// One rank's progress as the agent's poll sees it: when it first and last made progress,
/// and the longest gap between two of its progress events so far. The poll sees the time
/// of the rank's last progress; a gap is the step from the last one it saw to the next, so
/// several events between two polls count as one gap, never shorter than the true longest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pace {
    /// Its first progress, milliseconds since the Unix epoch; 0: none yet.
    first_ms: u64,
    /// Its last progress seen.
    last_ms: u64,
    /// The longest gap between two of its progress events seen.
    pub(crate) longest_gap_ms: u64,
    /// How many gaps were seen.
    pub(crate) gaps: u32,
}

impl Pace {
    /// The rank's last progress is at `last_ms` (0: none yet); a later one than before
    /// closes a gap.
    pub(crate) fn observe(&mut self, last_ms: u64) {
        if last_ms == 0 || last_ms <= self.last_ms {
            return;
        }
        if self.last_ms == 0 {
            self.first_ms = last_ms;
        } else {
            self.longest_gap_ms = self.longest_gap_ms.max(last_ms - self.last_ms);
            self.gaps = self.gaps.saturating_add(1);
        }
        self.last_ms = last_ms;
    }

    /// How long it has made progress: from its first progress to its last.
    pub(crate) fn progress_ms(&self) -> u64 {
        self.last_ms - self.first_ms
    }
}

/// `--hang-timeout auto`'s rule: a rank's timeout is `factor` × the longest gap between its
/// progress events so far, at least `floor`; while it warms up (less than `warm_up` of
/// progress or fewer than `warm_up_gaps` gaps) at least `warm_up_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AutoRule {
    pub(crate) factor: u32,
    pub(crate) floor: Duration,
    pub(crate) warm_up: Duration,
    pub(crate) warm_up_gaps: u32,
    pub(crate) warm_up_timeout: Duration,
}

impl Default for AutoRule {
    /// The rule's numbers, `herd_plan`'s (docs/launch.md says why): NVIDIA's NVRx safety
    /// factor 5; a floor of a minute; a warm-up of 5 minutes and 10 gaps, with 10 minutes
    /// (NCCL's default collective timeout) as its timeout.
    fn default() -> AutoRule {
        AutoRule {
            factor: HangTimeout::AUTO_FACTOR,
            floor: HangTimeout::AUTO_FLOOR.duration(),
            warm_up: HangTimeout::AUTO_WARM_UP.duration(),
            warm_up_gaps: HangTimeout::AUTO_WARM_UP_GAPS,
            warm_up_timeout: HangTimeout::AUTO_WARM_UP_TIMEOUT.duration(),
        }
    }
}

/// For tests only: `HERD_HANG_AUTO_FLOOR=S` (seconds) makes [`AutoRule`]'s floor S, its
/// warm-up 5 × S and the warm-up's timeout 10 × S, so a test sees the rule in seconds.
pub(crate) const HERD_HANG_AUTO_FLOOR: &str = "HERD_HANG_AUTO_FLOOR";

impl AutoRule {
    /// [`AutoRule::default`] with the floor `floor`, and the warm-up and its timeout in
    /// the same proportion to it.
    pub(crate) fn with_floor(floor: Duration) -> AutoRule {
        let d = AutoRule::default();
        let scale = floor.as_secs_f64() / d.floor.as_secs_f64();
        AutoRule {
            floor,
            warm_up: d.warm_up.mul_f64(scale),
            warm_up_timeout: d.warm_up_timeout.mul_f64(scale),
            ..d
        }
    }

    /// The rule this agent uses: [`AutoRule::default`], or the test's
    /// [`HERD_HANG_AUTO_FLOOR`]; read once.
    pub(crate) fn get() -> AutoRule {
        static RULE: OnceLock<AutoRule> = OnceLock::new();
        *RULE.get_or_init(|| {
            std::env::var(HERD_HANG_AUTO_FLOOR)
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0 && *s < 86_400.0)
                .map_or_else(AutoRule::default, |s| {
                    AutoRule::with_floor(Duration::from_secs_f64(s))
                })
        })
    }

    /// The timeout of a rank that has made progress, with the longest gap `gap_ms`
    /// between its progress events, `gaps` of them, over `progress_ms`.
    pub(crate) fn limit(&self, gap_ms: u64, gaps: u32, progress_ms: u64) -> Limit {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let scaled = gap_ms.saturating_mul(u64::from(self.factor));
        let warming = gaps < self.warm_up_gaps || progress_ms < ms(self.warm_up);
        let base = if warming {
            self.warm_up_timeout
        } else {
            self.floor
        };
        let how = if scaled >= ms(base) {
            How::Gap
        } else if warming {
            How::WarmUp { gaps, progress_ms }
        } else {
            How::Floor
        };
        Limit {
            timeout_ms: scaled.max(ms(base)),
            how,
            gap: Some((self.factor, gap_ms)),
        }
    }
}

/// The timeout that applies to one rank now, and how it was derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit {
    pub(crate) timeout_ms: u64,
    pub(crate) how: How,
    /// `auto`'s factor and the rank's longest gap.
    gap: Option<(u32, u64)>,
}

/// Where a rank's timeout comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// `--hang-timeout SECONDS`.
    Fixed,
    /// `--start-timeout`: the rank has made no progress since it started.
    Start,
    /// `auto`: the factor × its longest gap.
    Gap,
    /// `auto`: the floor, above the factor × its longest gap.
    Floor,
    /// `auto`, still warming up: the warm-up's timeout.
    WarmUp { gaps: u32, progress_ms: u64 },
}

/// The timeout for rank `p` under `keep` (with `auto`'s `rule`): `--start-timeout` until
/// its first progress (unless that is 0: then as for a rank that has made progress, which
/// with `auto` is the warm-up's), then the hang timeout.
pub(crate) fn limit(keep: &KeepAlive, rule: &AutoRule, p: &RankProgress) -> Limit {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let start = keep.start_timeout.duration();
    if !p.started && !start.is_zero() {
        return Limit {
            timeout_ms: ms(start),
            how: How::Start,
            gap: None,
        };
    }
    match keep.hang_timeout {
        HangTimeout::Fixed(s) => Limit {
            timeout_ms: ms(s.duration()),
            how: How::Fixed,
            gap: None,
        },
        HangTimeout::Auto => rule.limit(p.longest_gap_ms, p.gaps, p.progress_ms),
    }
}

/// Seconds for people: `5 s`, `7.5 s`.
pub(crate) fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

impl Limit {
    /// The timeout.
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }
}

impl fmt::Display for Limit {
    /// How the timeout was derived: `--hang-timeout 3 s`, `--start-timeout 1800 s`,
    /// `auto: 5 × longest gap 7.5 s = 37.5 s`, `auto: the floor 60 s (5 × longest gap 2 s
    /// = 10 s)`, `auto, warming up (45 s of progress, 8 gaps): 600 s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = secs(self.timeout_ms);
        let (factor, gap) = self.gap.unwrap_or_default();
        let product = format!(
            "{factor} × longest gap {} = {}",
            secs(gap),
            secs(gap.saturating_mul(u64::from(factor)))
        );
        match self.how {
            How::Fixed => write!(f, "--hang-timeout {t}"),
            How::Start => write!(f, "--start-timeout {t}"),
            How::Gap => write!(f, "auto: {product}"),
            How::Floor => write!(f, "auto: the floor {t} ({product})"),
            How::WarmUp { gaps, progress_ms } => write!(
                f,
                "auto, warming up ({} of progress, {gaps} gaps): {t}",
                secs(progress_ms - progress_ms % 1000)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herd_plan::launch::Seconds;

    #[test]
    fn a_pace_keeps_the_longest_gap_between_progress_events() {
        let mut p = Pace::default();
        p.observe(0);
        assert_eq!(p, Pace::default(), "no progress yet");
        // The first progress opens no gap: the silence before it was the start.
        p.observe(10_000);
        assert_eq!((p.gaps, p.longest_gap_ms, p.progress_ms()), (0, 0, 0));
        p.observe(11_000);
        p.observe(11_000); // the same progress, seen by the next poll
        p.observe(14_500); // a 3.5 s pause (a checkpoint)
        p.observe(15_000);
        assert_eq!((p.gaps, p.longest_gap_ms, p.progress_ms()), (3, 3500, 5000));
        // A time that goes back (a heartbeat file's clock) is no progress.
        p.observe(12_000);
        assert_eq!((p.gaps, p.progress_ms()), (3, 5000));
    }

    #[test]
    fn auto_is_the_factor_times_the_longest_gap_with_a_floor_after_a_warm_up() {
        let rule = AutoRule::default();
        let min = |m: u64| m * 60_000;
        // Warming up: fewer than 10 gaps or less than 5 min of progress: 10 min at least.
        let early = rule.limit(2_000, 3, 6_000);
        assert_eq!(early.timeout_ms, min(10));
        assert_eq!(
            early.to_string(),
            "auto, warming up (6 s of progress, 3 gaps): 600 s"
        );
        assert_eq!(rule.limit(2_000, 200, min(4)).timeout_ms, min(10));
        assert_eq!(rule.limit(2_000, 9, min(30)).timeout_ms, min(10));
        // Warmed up with 2 s steps: 5 × 2 s = 10 s is below the floor, a minute.
        let floor = rule.limit(2_000, 150, min(5));
        assert_eq!(floor.timeout_ms, 60_000);
        assert_eq!(floor.how, How::Floor);
        assert_eq!(
            floor.to_string(),
            "auto: the floor 60 s (5 × longest gap 2 s = 10 s)"
        );
        // A 3-minute checkpoint seen once: 15 min from then on.
        let ckpt = rule.limit(180_000, 151, min(8));
        assert_eq!(ckpt.timeout_ms, min(15));
        assert_eq!(ckpt.to_string(), "auto: 5 × longest gap 180 s = 900 s");
        // Slow steps while warming up: the gap wins over the warm-up's 10 min.
        let slow = rule.limit(150_000, 2, min(5));
        assert_eq!((slow.timeout_ms, slow.how), (750_000, How::Gap));
        assert_eq!(
            rule.limit(7_500, 40, min(6)).to_string(),
            "auto: the floor 60 s (5 × longest gap 7.5 s = 37.5 s)"
        );
    }

    #[test]
    fn the_tests_floor_scales_the_warm_up_with_it() {
        let rule = AutoRule::with_floor(Duration::from_secs(1));
        assert_eq!(rule.factor, 5);
        assert_eq!(rule.warm_up, Duration::from_secs(5));
        assert_eq!(rule.warm_up_timeout, Duration::from_secs(10));
        let caught = rule.limit(1_000, 12, 12_000);
        assert_eq!(caught.to_string(), "auto: 5 × longest gap 1 s = 5 s");
        assert_eq!(caught.timeout(), Duration::from_secs(5));
    }

    #[test]
    fn a_ranks_limit_is_the_start_timeout_until_it_makes_progress() {
        // A rank that has made progress for 10 min, with `gap_ms` its longest gap; or none.
        let rank = |started: bool, gap_ms: u64| RankProgress {
            rank: 0,
            pid: 1,
            silent_ms: 0,
            started,
            longest_gap_ms: gap_ms,
            gaps: if started { 300 } else { 0 },
            progress_ms: if started { 600_000 } else { 0 },
        };
        let mut keep = KeepAlive {
            hang_timeout: HangTimeout::Fixed(Seconds::from_secs(30)),
            ..KeepAlive::LAUNCH
        };
        let rule = AutoRule::default();
        let start = limit(&keep, &rule, &rank(false, 0));
        assert_eq!((start.timeout_ms, start.how), (1_800_000, How::Start));
        assert_eq!(start.to_string(), "--start-timeout 1800 s");
        let fixed = limit(&keep, &rule, &rank(true, 90_000));
        assert_eq!((fixed.timeout_ms, fixed.how), (30_000, How::Fixed));
        keep.hang_timeout = HangTimeout::Auto;
        assert_eq!(limit(&keep, &rule, &rank(true, 30_000)).timeout_ms, 150_000);
        assert_eq!(limit(&keep, &rule, &rank(false, 0)).how, How::Start);
        // `--start-timeout 0`: a start's silence counts like any other.
        keep.start_timeout = Seconds::ZERO;
        let no_start = limit(&keep, &rule, &rank(false, 0));
        assert_eq!(
            (no_start.timeout_ms, no_start.how),
            (
                600_000,
                How::WarmUp {
                    gaps: 0,
                    progress_ms: 0
                }
            ),
            "no progress yet: warming up"
        );
        keep.hang_timeout = HangTimeout::Fixed(Seconds::from_secs(30));
        assert_eq!(limit(&keep, &rule, &rank(false, 0)).how, How::Fixed);
    }
}
