//! The experiment's event timeline, `timeline.jsonl`: one JSON object a line, appended by
//! whoever knows the moment — `herd submit` when it queues a job, the leader agent as the
//! job runs, `herd cancel` and `herd status` when they learn its end — and never rewritten. Each line has `time` (RFC 3339, UTC, milliseconds),
//! `unix_ms` and `event`, and the event's own fields.
//!
//! | event | written by | fields |
//! |---|---|---|
//! | `queued` | `herd submit` | `submission` (the manifest's attempt number), `job_id` |
//! | `started` | leader | `job_id`, `host`, `nodes`, `requeue` (SLURM's requeue count) |
//! | `rendezvous` | leader | `world_size`, `master_addr`, `nodes`: `[{"node": 0, "host": "gpu-a01", "ranks": [0, 1]}, …]` in node-rank order (which ranks ran where, for the attempts that follow) |
//! | `attempt_started` | leader | `attempt` (K of `logs/attempt-K`), `master_port`, `resume_from`, `restarts` (in this allocation), `requeue` |
//! | `first_output` | leader | `attempt` (node 0's first worker line) |
//! | `signal` | leader | `attempt`, `signal`, `action` (`forward`, `terminate`, `stop`, `ignored (stopping)`), `cause`, `node` (the follower that got it; `null`: the leader) |
//! | `warning` | leader | `attempt`, `cause` (`time_limit`, `preemption`), `stop_signal`, `grace_s`: the stop begins |
//! | `worker_exit` | leader | `attempt`, `rank`, `how`, `during` (`stop` when asked to) |
//! | `hang` | leader | `attempt`, `rank`, `host`, `pid`, `silent_s`: the rank that went silent first; `started` (whether it had made progress), `timeout_s` and `timeout` (how its timeout was derived: `auto: 5 × longest gap 7.5 s = 37.5 s`) |
//! | `failed` | leader | `attempt`, `cause` (the failure report's cause line), `kind` (the cause's name) |
//! | `teardown` | leader | `attempt` |
//! | `checkpoint` | leader | `attempt`, `path`: the newest checkpoint after the attempt, when it wrote one |
//! | `restart` | leader | `attempt` (the new one) |
//! | `restarts_stopped` | leader | `attempt`, `restarts` (in a row without progress), `step` (the highest seen), `max_restarts`, `left`: no restart though some were left |
//! | `requeue` | leader | `attempt`, `cause`, `count` (for this cause), `budget`, `exclude` (nodes left out) |
//! | `requeue_refused` | leader | `attempt`, `cause`, `used`, `budget`: no budget left |
//! | `requeue_failed` | leader | `attempt`, `error` |
//! | `finished` | leader | `attempt`, `ok`, `cause` (when not ok) |
//! | `cancelled` | `herd cancel` | `job_id`, `by`, `user`, `why` (`experiment NAME`, `waits for ID`) |
//! | `ended` | `herd status`, the watch | `job_id`, `state` (SLURM's final state), `exit_code`, `reason`: the scheduler's word on the end, written once |
//!
//! Each line is one `write` to a file opened with `O_APPEND`, so lines of two writers never
//! interleave on a local file system (on NFS, appends of two clients may; here the writers
//! of one moment are one process).

use std::io::{self, Write as _};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::ExperimentDir;

/// Appends one event with `fields` (an object; other values are left out) to
/// `<exp_dir>/timeline.jsonl`, creating it.
pub fn append(exp_dir: &Path, event: &str, fields: Value) -> io::Result<()> {
    let (time, unix_ms) = now();
    let mut line = Map::new();
    line.insert("time".into(), time.into());
    line.insert("unix_ms".into(), unix_ms.into());
    line.insert("event".into(), event.into());
    if let Value::Object(fields) = fields {
        line.extend(fields);
    }
    let mut text = serde_json::to_string(&Value::Object(line)).map_err(io::Error::other)?;
    text.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(ExperimentDir::new(exp_dir).timeline())?
        .write_all(text.as_bytes())
}

/// Every event of `<exp_dir>/timeline.jsonl` (none when it does not exist); a line that is
/// not a JSON object is an error naming it.
pub fn read(exp_dir: &Path) -> io::Result<Vec<Map<String, Value>>> {
    let path = ExperimentDir::new(exp_dir).timeline();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} line {}: {e}", path.display(), i + 1),
                )
            })
        })
        .collect()
}

/// Now as (RFC 3339 UTC with milliseconds, milliseconds since the epoch).
pub fn now() -> (String, u64) {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ms = u64::try_from(since.as_millis()).unwrap_or(u64::MAX);
    (rfc3339(ms), ms)
}

/// Milliseconds since the epoch as `2026-11-30T17:40:12.123Z`.
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = (unix_ms / 1000) as i64;
    let ms = unix_ms % 1000;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `2026-12-01T14:00:00Z` (RFC 3339: fractional seconds and a `+HH:MM`/`-HH:MM` offset
/// allowed, `t` and `z` too) as milliseconds since the epoch; `None` when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = b.get(from..from + n)?;
        part.iter().all(u8::is_ascii_digit).then(|| {
            part.iter()
                .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
        })
    };
    let (y, mo, d) = (digits(0, 4)?, digits(5, 2)?, digits(8, 2)?);
    let (h, mi, s) = (digits(11, 2)?, digits(14, 2)?, digits(17, 2)?);
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || s > 60
    {
        return None;
    }
    let mut i = 19;
    let mut ms = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 3 {
                ms = ms * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..3 {
            ms *= 10;
        }
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (digits(i + 1, 2)?, digits(i + 4, 2)?);
            let m = oh * 60 + om;
            if *sign == b'-' {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    // Howard Hinnant's days_from_civil.
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_060_412_123), "2026-11-30T17:40:12.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn parses_rfc3339_back() {
        for ms in [0, 1_796_060_412_123, 951_782_400_000, 1_709_251_199_999] {
            assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms), "{}", rfc3339(ms));
        }
        assert_eq!(
            parse_rfc3339("2026-11-30T17:40:12Z"),
            Some(1_796_060_412_000)
        );
        assert_eq!(
            parse_rfc3339("2026-11-30T18:40:12.5+01:00"),
            Some(1_796_060_412_500)
        );
        for bad in [
            "2026-11-30",
            "2026-11-30T17:40:12",
            "2026-13-30T17:40:12Z",
            "2026-11-30T17:40:12.Z",
            "2026-11-30T17:40:12Zx",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn events_are_appended_whole_and_read_back_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(read(dir.path()).expect("no file yet").is_empty());
        std::thread::scope(|s| {
            for t in 0..4 {
                let dir = dir.path();
                s.spawn(move || {
                    for i in 0..50 {
                        append(
                            dir,
                            "tick",
                            serde_json::json!({"thread": t, "i": i, "pad": "x".repeat(300)}),
                        )
                        .expect("append");
                    }
                });
            }
        });
        let events = read(dir.path()).expect("reads");
        assert_eq!(events.len(), 200, "every line whole");
        for t in 0..4 {
            let mine: Vec<u64> = events
                .iter()
                .filter(|e| e["thread"] == t)
                .map(|e| e["i"].as_u64().expect("i"))
                .collect();
            assert_eq!(mine, (0..50).collect::<Vec<_>>(), "thread {t} in order");
        }
        assert!(events
            .iter()
            .all(|e| e["event"] == "tick" && e["time"].as_str().is_some_and(|t| t.ends_with('Z'))));
        std::fs::write(
            ExperimentDir::new(dir.path()).timeline(),
            "{\"event\":\"a\"}\nnot json\n",
        )
        .expect("write");
        let err = read(dir.path()).expect_err("line 2");
        assert!(err.to_string().contains("line 2"), "{err}");
    }
}
