//! Each bed test's time on the bed, and the deadline that ends it before nextest does.
//!
//! nextest kills a test that runs past its slow-timeout (`period` × `terminate-after` in
//! `.config/nextest.toml`, the profile's or a per-test override's): killed, the test says
//! nothing of what it waited for, and runs none of its guards. So under nextest
//! [`crate::Bed::require`] starts a watchdog with the same limit, read from the same file,
//! counted as nextest counts it, from the test process's start (a wait for another
//! process's bed test included): [`MARGIN`] before nextest would kill the test, the
//! watchdog says on stderr how long the test ran, of how long, and what it last waited
//! for, repairs the bed ([`crate::repair`]; only when the bed is this process's) and ends
//! the test process as failed. A test's own deadlines (each
//! wait's, generous: they tell a hang from a prompt end) fire first when they are shorter;
//! this one bounds the whole test, whatever its waits add up to.
//!
//! The limit is found as nextest finds it: the first override of the running profile whose
//! filter matches and that sets `slow-timeout`, then the default profile's, then the
//! running profile's own `slow-timeout`, then the default profile's. Overrides that set
//! `slow-timeout` must name their tests as `test(=NAME) | test(=NAME) …`, the one filter
//! form read here; any other form is an error, never a guess.

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long before nextest's kill the watchdog ends the test: time for its repair.
pub const MARGIN: Duration = Duration::from_secs(60);

/// A test's time limit under nextest, and where it comes from (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// `period` × `terminate-after`: when nextest kills the test.
    pub kill_after: Duration,
    /// Which setting of `.config/nextest.toml` gave it.
    pub from: String,
}

/// The slow-timeout nextest gives test `test` under `profile`, from the text of a
/// `.config/nextest.toml`; `None` when nextest never kills it (no `terminate-after`).
pub fn limit(config: &str, profile: &str, test: &str) -> Result<Option<Limit>, String> {
    let doc: toml::Table = config
        .parse()
        .map_err(|e| format!("nextest config does not parse: {e}"))?;
    let profiles = doc.get("profile").and_then(toml::Value::as_table);
    let profile_table = |name: &str| profiles.and_then(|p| p.get(name)?.as_table());
    let mut order = vec![profile];
    if profile != "default" {
        order.push("default");
    }
    // Overrides first, the running profile's then the default's.
    for name in &order {
        let Some(table) = profile_table(name) else {
            continue;
        };
        let overrides = table
            .get("overrides")
            .and_then(toml::Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, o) in overrides.iter().enumerate() {
            let Some(timeout) = o.get("slow-timeout") else {
                continue;
            };
            let filter = o
                .get("filter")
                .and_then(toml::Value::as_str)
                .ok_or_else(|| {
                    format!("profile.{name}.overrides[{i}] sets slow-timeout without a filter")
                })?;
            let tests =
                exact_tests(filter).map_err(|e| format!("profile.{name}.overrides[{i}]: {e}"))?;
            if tests.iter().any(|t| t == test) {
                return kill_after(timeout)
                    .map(|d| {
                        d.map(|kill_after| Limit {
                            kill_after,
                            from: format!("profile.{name}.overrides[{i}] ({filter})"),
                        })
                    })
                    .map_err(|e| format!("profile.{name}.overrides[{i}]: {e}"));
            }
        }
    }
    for name in &order {
        if let Some(timeout) = profile_table(name).and_then(|t| t.get("slow-timeout")) {
            return kill_after(timeout)
                .map(|d| {
                    d.map(|kill_after| Limit {
                        kill_after,
                        from: format!("profile.{name}.slow-timeout"),
                    })
                })
                .map_err(|e| format!("profile.{name}.slow-timeout: {e}"));
        }
    }
    // nextest's own default: slow after 60 s, never killed.
    Ok(None)
}

/// The names of `test(=NAME) | test(=NAME) …`, the one filter form an override that sets
/// `slow-timeout` may have.
pub fn exact_tests(filter: &str) -> Result<Vec<String>, String> {
    filter
        .split('|')
        .map(|part| {
            part.trim()
                .strip_prefix("test(=")
                .and_then(|rest| rest.strip_suffix(')'))
                .filter(|name| !name.is_empty() && !name.contains(['(', ')', ' ', '&', '|']))
                .map(str::to_owned)
                .ok_or_else(|| {
                    format!(
                        "filter {filter:?}: an override that sets slow-timeout names its tests \
                         as `test(=NAME) | test(=NAME) …` (herd-testbed reads its limit from it)"
                    )
                })
        })
        .collect()
}

/// `period` × `terminate-after` of a slow-timeout (`"60s"`, or a table); `None` without
/// `terminate-after`.
fn kill_after(timeout: &toml::Value) -> Result<Option<Duration>, String> {
    match timeout {
        toml::Value::String(_) => Ok(None),
        toml::Value::Table(t) => {
            let Some(times) = t.get("terminate-after") else {
                return Ok(None);
            };
            let times = times
                .as_integer()
                .filter(|n| *n > 0)
                .ok_or("terminate-after is not a positive integer")?;
            let period = t
                .get("period")
                .and_then(toml::Value::as_str)
                .ok_or("a slow-timeout table needs a period")?;
            let period = duration(period)?;
            Ok(Some(
                period * u32::try_from(times).map_err(|e| e.to_string())?,
            ))
        }
        _ => Err("slow-timeout is neither a string nor a table".into()),
    }
}

/// A nextest duration as this repository writes them: `90s`, `2m`, `1h`.
fn duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let (number, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?}: write it as 90s, 2m or 1h"))?;
    match unit {
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "h" => Ok(Duration::from_secs(n * 3600)),
        _ => Err(format!("duration {text:?}: write it as 90s, 2m or 1h")),
    }
}

/// How long this process has run: `/proc/uptime` less its start in `/proc/self/stat`
/// (field 22, in the kernel's USER_HZ ticks: 100 a second on Linux).
fn process_age() -> Option<Duration> {
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    age_of(&stat, &uptime)
}

/// [`process_age`] from the texts of `/proc/self/stat` and `/proc/uptime`.
fn age_of(stat: &str, uptime: &str) -> Option<Duration> {
    const USER_HZ: f64 = 100.0;
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    // After the command name's `)`: field 3 (the state) is the first, field 22 the 20th.
    let (_, rest) = stat.rsplit_once(')')?;
    let ticks: f64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    Some(Duration::from_secs_f64((up - ticks / USER_HZ).max(0.0)))
}

/// What the test waits for now, said by [`crate::Bed::wait`] for the watchdog's message.
static WAITING: Mutex<Option<String>> = Mutex::new(None);

/// Says what the calling test waits for now (`None`: nothing in particular), for the
/// watchdog's message should the test run out of time meanwhile.
pub fn waiting_for(what: Option<String>) {
    *WAITING.lock().unwrap_or_else(PoisonError::into_inner) = what;
}

/// Starts the watchdog of this test process once (see the module doc), under nextest only
/// (which says which test runs, in `NEXTEST_TEST_NAME` and `NEXTEST_PROFILE`).
pub(crate) fn watch() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let Ok(test) = std::env::var("NEXTEST_TEST_NAME") else {
            return;
        };
        let profile = std::env::var("NEXTEST_PROFILE").unwrap_or_else(|_| "default".into());
        let path = crate::repo_root().join(".config/nextest.toml");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let limit =
            limit(&text, &profile, &test).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let Some(limit) = limit else {
            return;
        };
        // nextest's clock started with the process.
        let age = process_age().unwrap_or_default();
        let started = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        let budget = limit.kill_after.saturating_sub(MARGIN);
        std::thread::spawn(move || {
            std::thread::sleep(budget.saturating_sub(started.elapsed()));
            let waiting = WAITING
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
                .map(|w| format!("it was waiting for {w}"))
                .unwrap_or_else(|| "what it was waiting for is in its last lines above".into());
            eprintln!(
                "herd-testbed: {test} ran out of time: {:.0} s of the {:.0} s nextest gives it \
                 ({}, .config/nextest.toml); it fails now, {:.0} s before nextest would kill \
                 it, after repairing the bed; {waiting}. A test that needs longer gets a \
                 slow-timeout override there.",
                started.elapsed().as_secs_f64(),
                limit.kill_after.as_secs_f64(),
                limit.from,
                MARGIN.as_secs_f64(),
            );
            if crate::holds_the_bed() {
                crate::repair::repair("this test", Duration::from_secs(10));
            }
            std::process::exit(101);
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
[profile.default]
slow-timeout = { period = "60s", terminate-after = 10 }

[[profile.default.overrides]]
filter = 'binary(e2e) | binary(lifecycle)'
test-group = 'bed'

[profile.ci]
fail-fast = false

[[profile.ci.overrides]]
filter = 'test(=sweeps::a_grid) | test(=goodput::costly)'
slow-timeout = { period = "60s", terminate-after = 20 }

[[profile.ci.overrides]]
filter = 'test(=goodput::costly)'
slow-timeout = { period = "60s", terminate-after = 30 }
"#;

    #[test]
    fn a_tests_limit_is_the_first_matching_override_then_the_profiles() {
        let got = limit(CONFIG, "ci", "goodput::costly").expect("reads");
        assert_eq!(
            got,
            Some(Limit {
                kill_after: Duration::from_secs(1200),
                from: "profile.ci.overrides[0] (test(=sweeps::a_grid) | test(=goodput::costly))"
                    .into()
            }),
            "the first override that matches wins, as in nextest"
        );
        let other = limit(CONFIG, "ci", "teardown::c1").expect("reads");
        assert_eq!(
            other.map(|l| (l.kill_after, l.from)),
            Some((
                Duration::from_secs(600),
                "profile.default.slow-timeout".into()
            )),
            "ci inherits the default profile's"
        );
        // The default profile has no such override.
        let plain = limit(CONFIG, "default", "goodput::costly").expect("reads");
        assert_eq!(plain.map(|l| l.kill_after), Some(Duration::from_secs(600)));
    }

    #[test]
    fn a_profiles_own_slow_timeout_comes_before_the_defaults_and_a_string_never_kills() {
        let config = r#"
[profile.default]
slow-timeout = { period = "60s", terminate-after = 10 }
[profile.ci]
slow-timeout = { period = "2m", terminate-after = 3 }
[profile.loose]
slow-timeout = "30s"
"#;
        let ci = limit(config, "ci", "x").expect("reads");
        assert_eq!(ci.map(|l| l.kill_after), Some(Duration::from_secs(360)));
        assert_eq!(limit(config, "loose", "x"), Ok(None));
        assert_eq!(
            limit("", "ci", "x"),
            Ok(None),
            "nextest's default kills no test"
        );
    }

    #[test]
    fn only_exact_test_names_are_read_from_a_slow_timeout_override() {
        assert_eq!(
            exact_tests("test(=a::b) | test(=c)"),
            Ok(vec!["a::b".to_owned(), "c".to_owned()])
        );
        for bad in [
            "test(a::b)",
            "binary(e2e) & test(=x)",
            "test(=)",
            "test(/re/)",
        ] {
            assert!(exact_tests(bad).is_err(), "{bad}");
        }
        let config = r#"
[[profile.ci.overrides]]
filter = 'test(sweeps)'
slow-timeout = { period = "60s", terminate-after = 20 }
"#;
        let err = limit(config, "ci", "sweeps::x").expect_err("refused");
        assert!(err.contains("test(=NAME)"), "{err}");
    }

    #[test]
    fn a_process_age_is_uptime_less_its_start() {
        // A process started 1234.56 s after boot (123456 ticks), 10 s ago.
        let stat = "4242 (e2e (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 1 0 0 20 0 3 0 \
                    123456 1000 100 18446744073709551615";
        assert_eq!(
            age_of(stat, "1244.56 2400.00\n").map(|d| d.as_millis()),
            Some(10_000)
        );
        assert_eq!(age_of("garbage", "1.0 1.0"), None);
        assert!(process_age().is_some(), "this process's own age reads");
    }

    #[test]
    fn durations_are_seconds_minutes_or_hours() {
        assert_eq!(duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(duration("1m30s").is_err());
        assert!(duration("soon").is_err());
    }

    /// The repository's own `.config/nextest.toml` reads under every profile, each test
    /// its slow-timeout overrides name exists (a renamed test would silently lose its
    /// longer limit), and every limit leaves the watchdog its margin.
    #[test]
    fn the_repositorys_nextest_config_names_real_tests_and_leaves_the_margin() {
        let root = crate::repo_root();
        let text = std::fs::read_to_string(root.join(".config/nextest.toml")).expect("config");
        let doc: toml::Table = text.parse().expect("parses");
        let profiles = doc["profile"].as_table().expect("profiles");
        let mut sources = Vec::new();
        let mut stack = vec![root.join("crates")];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs")
                    && path.components().any(|c| c.as_os_str() == "tests")
                {
                    let text = std::fs::read_to_string(&path).expect("source");
                    sources.push((path, text));
                }
            }
        }
        for (name, profile) in profiles {
            let overrides = profile
                .get("overrides")
                .and_then(toml::Value::as_array)
                .cloned()
                .unwrap_or_default();
            for o in overrides.iter().filter(|o| o.get("slow-timeout").is_some()) {
                let filter = o["filter"].as_str().expect("filter");
                for test in exact_tests(filter).expect("test(=NAME) filters") {
                    let (modules, func) = test.rsplit_once("::").unwrap_or(("", &test));
                    let file = format!("{}.rs", modules.replace("::", "/"));
                    let found = sources.iter().any(|(path, text)| {
                        (modules.is_empty() || path.ends_with(&file))
                            && text.contains(&format!("fn {func}("))
                    });
                    assert!(found, "profile.{name}: no test {test} (filter {filter:?})");
                    let l = limit(&text, name, &test).expect("reads").expect("a limit");
                    assert!(l.kill_after > MARGIN * 2, "{test}: {l:?}");
                }
            }
            if let Some(l) = limit(&text, name, "any::other").expect("reads") {
                assert!(l.kill_after > MARGIN * 2, "profile {name}: {l:?}");
            }
        }
    }
}
