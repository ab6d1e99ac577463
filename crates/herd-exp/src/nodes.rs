//! The user's record of bad nodes: one JSON object a line ([`Blame`]), appended whenever
//! herd blames a node (lost, frozen, failing twice, failing its preflight), shared by all of
//! the user's experiments and read by `herd nodes` and `herd submit --avoid-bad-nodes`.
//!
//! ```text
//! {"node":"gpu-a02","at_unix":1796060412,"why":"lost: no word from it for 10 s","kind":"lost","job":"4242","experiment":"/scratch/me/exp/resnet50"}
//! ```
//!
//! It lives at [`record_path`]: `$HERD_NODE_RECORD` when set, else
//! `$XDG_STATE_HOME/herd/nodes.jsonl`, else `~/.local/state/herd/nodes.jsonl` — in the home
//! folder, which a cluster shares between its nodes, so an agent's blame is seen by the
//! next `herd submit` on the login node.
//!
//! The record is only ever appended to ([`append`]: one `write` to a file opened with
//! `O_APPEND`, under an advisory lock when the file system grants one, so lines of agents
//! on several nodes never interleave), and never trusted: [`read`] skips a line that is not
//! a blame with a warning naming the file and the line, never failing because of one.
//! Delete the file, or lines of it, to forget blames.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The file name of the record inside its folder.
pub const RECORD_NAME: &str = "nodes.jsonl";

/// The environment variable that names the record's path (tests; a site that wants the
/// record elsewhere).
pub const RECORD_ENV: &str = "HERD_NODE_RECORD";

/// The longest line [`read`] accepts, in bytes; a longer one is skipped with a warning.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// One blame: one line of the record (JSON object per line).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Blame {
    /// SLURM node name.
    pub node: String,
    /// When, seconds since the epoch.
    pub at_unix: u64,
    /// Short reason, e.g. `lost: no word from it for 10 s`, `failed twice: rank 3 exited
    /// 1`, `preflight: cannot import torch`.
    pub why: String,
    /// `lost` | `failures` | `preflight` (free text for forward compatibility).
    pub kind: String,
    /// SLURM job id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The experiment folder, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

/// The record's path for this user: `$HERD_NODE_RECORD` if set (tests), else
/// `$XDG_STATE_HOME/herd/nodes.jsonl`, else `$HOME/.local/state/herd/nodes.jsonl`; `None`
/// without `HOME`.
pub fn record_path() -> Option<PathBuf> {
    record_path_from(|name| std::env::var_os(name))
}

/// [`record_path`] with the environment given by `var` (tests).
pub fn record_path_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    if let Some(path) = set(RECORD_ENV) {
        return Some(PathBuf::from(path));
    }
    // The XDG base directory specification: a relative path is invalid and ignored.
    if let Some(state) = set("XDG_STATE_HOME").map(PathBuf::from) {
        if state.is_absolute() {
            return Some(state.join("herd").join(RECORD_NAME));
        }
    }
    let home = PathBuf::from(set("HOME")?);
    Some(home.join(".local/state/herd").join(RECORD_NAME))
}

/// Append one blame (creates the folder; one write with `O_APPEND` so concurrent agents
/// never interleave lines).
///
/// The file is created with mode 0644 less the umask. The write happens under an exclusive
/// `flock` when one is granted within a second (on NFS, `O_APPEND` alone is not atomic
/// between clients; the lock makes it so where the file system supports locks) and without
/// one otherwise: a blame is never lost, nor is an agent held up long, for want of a lock.
pub fn append(path: &Path, blame: &Blame) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut line = serde_json::to_vec(blame).map_err(io::Error::other)?;
    line.push(b'\n');
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .open(path)?;
    let locked = lock_briefly(&file);
    let written = file.write(&line)?;
    // A regular file takes a line this short in one write; should it not, the rest follows
    // (still whole under the lock).
    if written < line.len() {
        file.write_all(&line[written..])?;
    }
    if locked {
        let _ = rustix::fs::flock(&file, rustix::fs::FlockOperation::Unlock);
    }
    Ok(())
}

/// Tries for up to a second to take an exclusive lock on `file`; whether it did.
fn lock_briefly(file: &std::fs::File) -> bool {
    use rustix::fs::{flock, FlockOperation};
    use rustix::io::Errno;
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        match flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return true,
            Err(e) if e == Errno::WOULDBLOCK || e == Errno::INTR => {
                if Instant::now() >= deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // No locks on this file system (ENOLCK, EOPNOTSUPP): append without.
            Err(_) => return false,
        }
    }
}

/// Every blame in the record, oldest first, and one warning per line that is skipped
/// (corrupt JSON, missing fields) — never an error for bad lines; a missing file is an
/// empty record; an unreadable one an `io::Error`.
///
/// "Oldest first" is the order of the lines, which is the order they were appended in.
/// Warnings read `PATH line N: skipped, not a blame: WHY`; empty lines are skipped
/// silently.
pub fn read(path: &Path) -> io::Result<(Vec<Blame>, Vec<String>)> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(e),
    };
    let mut blames = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let warn = |why: String| {
            format!(
                "{} line {}: skipped, not a blame: {why}",
                path.display(),
                i + 1
            )
        };
        if line.len() > MAX_LINE_BYTES {
            warnings.push(warn(format!(
                "{} bytes, longer than {MAX_LINE_BYTES}",
                line.len()
            )));
            continue;
        }
        match serde_json::from_slice::<Blame>(line) {
            Ok(blame) => match check(&blame) {
                None => blames.push(blame),
                Some(why) => warnings.push(warn(why.into())),
            },
            Err(e) => warnings.push(warn(json_error(&e))),
        }
    }
    Ok((blames, warnings))
}

/// serde's reason without its position (`at line 1 column 2`: the line is the record's,
/// named already), with the column when the line is no JSON at all.
fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let reason = match text.rfind(" at line ") {
        Some(i) => &text[..i],
        None => &text,
    };
    if e.is_syntax() || e.is_eof() {
        format!("not JSON ({reason} at column {})", e.column())
    } else {
        reason.to_owned()
    }
}

/// Why a parsed blame is still not one: `None` when it is.
fn check(blame: &Blame) -> Option<&'static str> {
    if blame.node.is_empty() {
        Some("its node is empty")
    } else if !is_node_name(&blame.node) {
        Some("its node is not a node name (letters, digits and `-_.` only)")
    } else {
        None
    }
}

/// `name` is a plausible SLURM node name: 1 to 255 bytes of ASCII letters, digits, `-`, `_`
/// and `.`, not starting with `-` — nothing a batch script's `--exclude=` could misread.
pub fn is_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// What the record says of one node: [`summarize`]'s row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeSummary {
    /// The node.
    pub node: String,
    /// How many blames it has (in the window asked for).
    pub count: usize,
    /// When it was blamed last, seconds since the epoch.
    pub last_unix: u64,
    /// Why, the last time.
    pub last_why: String,
    /// Of which kind, the last time.
    pub last_kind: String,
    /// The job of the last blame, when the record has it.
    pub last_job: Option<String>,
    /// The experiment folder of the last blame, when the record has it.
    pub last_experiment: Option<String>,
    /// Every kind of blame it has, each once, sorted.
    pub kinds: Vec<String>,
}

/// One row per blamed node, newest blame first (ties by node name), counting only the
/// blames at or after `since_unix` when given (a node with none is left out).
///
/// A node's "last" blame is its latest by `at_unix`, the later line when two share it.
pub fn summarize(blames: &[Blame], since_unix: Option<u64>) -> Vec<NodeSummary> {
    let mut rows: BTreeMap<&str, NodeSummary> = BTreeMap::new();
    for b in blames
        .iter()
        .filter(|b| since_unix.is_none_or(|since| b.at_unix >= since))
    {
        let row = rows.entry(&b.node).or_insert_with(|| NodeSummary {
            node: b.node.clone(),
            count: 0,
            last_unix: b.at_unix,
            last_why: String::new(),
            last_kind: String::new(),
            last_job: None,
            last_experiment: None,
            kinds: Vec::new(),
        });
        row.count += 1;
        if row.count == 1 || b.at_unix >= row.last_unix {
            row.last_unix = b.at_unix;
            row.last_why = b.why.clone();
            row.last_kind = b.kind.clone();
            row.last_job = b.job.clone();
            row.last_experiment = b.experiment.clone();
        }
        if !row.kinds.contains(&b.kind) {
            row.kinds.push(b.kind.clone());
        }
    }
    let mut rows: Vec<NodeSummary> = rows.into_values().collect();
    for row in &mut rows {
        row.kinds.sort();
    }
    rows.sort_by(|a, b| b.last_unix.cmp(&a.last_unix).then(a.node.cmp(&b.node)));
    rows
}

/// Now, in seconds since the epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blame(node: &str, at_unix: u64, kind: &str, why: &str) -> Blame {
        Blame {
            node: node.into(),
            at_unix,
            why: why.into(),
            kind: kind.into(),
            job: None,
            experiment: None,
        }
    }

    #[test]
    fn append_then_read_round_trips_and_creates_the_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state/herd/nodes.jsonl");
        let mut first = blame("gpu-a02", 100, "lost", "lost: no word from it for 10 s");
        first.job = Some("4242".into());
        first.experiment = Some("/scratch/me/exp/r50".into());
        let second = blame(
            "gpu-b07",
            200,
            "preflight",
            "preflight: cannot import torch",
        );
        append(&path, &first).expect("appends");
        append(&path, &second).expect("appends");
        let (blames, warnings) = read(&path).expect("reads");
        assert_eq!(blames, vec![first, second]);
        assert!(warnings.is_empty(), "{warnings:?}");
        let text = std::fs::read_to_string(&path).expect("reads");
        assert_eq!(text.lines().count(), 2);
        // Optional fields absent are not written.
        assert!(
            !text.lines().nth(1).expect("line 2").contains("job"),
            "{text}"
        );
    }

    #[test]
    fn concurrent_appends_from_threads_stay_whole_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nodes.jsonl");
        let why = "x".repeat(2000);
        std::thread::scope(|s| {
            for t in 0..8 {
                let (path, why) = (&path, &why);
                s.spawn(move || {
                    for i in 0..50 {
                        let b = blame(&format!("node-{t}"), i, "failures", why);
                        append(path, &b).expect("appends");
                    }
                });
            }
        });
        let (blames, warnings) = read(&path).expect("reads");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(blames.len(), 400);
        for t in 0..8 {
            let mine: Vec<u64> = blames
                .iter()
                .filter(|b| b.node == format!("node-{t}"))
                .map(|b| b.at_unix)
                .collect();
            assert_eq!(mine, (0..50).collect::<Vec<_>>(), "node-{t}");
        }
    }

    #[test]
    fn corrupt_lines_are_skipped_with_warnings_naming_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nodes.jsonl");
        let good = serde_json::to_string(&blame("gpu-a01", 5, "lost", "lost")).expect("serializes");
        let text = format!(
            "{good}\n{{not json\n\n{{\"node\":\"gpu-a03\",\"at_unix\":6}}\n\
             {{\"node\":\"a;rm -rf\",\"at_unix\":7,\"why\":\"w\",\"kind\":\"lost\"}}\n\
             \u{ff}\u{fe}\n{good}\n{{\"node\":\"gpu-a0"
        );
        std::fs::write(&path, text).expect("write");
        let (blames, warnings) = read(&path).expect("reads");
        assert_eq!(blames.len(), 2, "{blames:?}");
        let lines: Vec<String> = warnings
            .iter()
            .map(|w| {
                let rest = w
                    .strip_prefix(&format!("{} line ", path.display()))
                    .expect("warning names the file");
                rest.split(':').next().expect("line number").to_owned()
            })
            .collect();
        assert_eq!(lines, ["2", "4", "5", "6", "8"], "{warnings:#?}");
        assert!(
            warnings[1].contains("missing field `why`"),
            "{}",
            warnings[1]
        );
        assert!(warnings[2].contains("not a node name"), "{}", warnings[2]);
    }

    #[test]
    fn a_missing_file_is_an_empty_record_and_an_unreadable_one_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (blames, warnings) = read(&dir.path().join("absent.jsonl")).expect("reads");
        assert!(blames.is_empty() && warnings.is_empty());
        // A folder where the file should be cannot be read.
        assert!(read(dir.path()).is_err());
    }

    #[test]
    fn record_path_follows_the_environment() {
        fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
            move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        }
        let all = [
            (RECORD_ENV, "/t/record.jsonl"),
            ("XDG_STATE_HOME", "/x/state"),
            ("HOME", "/home/me"),
        ];
        assert_eq!(
            record_path_from(env(&all)),
            Some(PathBuf::from("/t/record.jsonl"))
        );
        assert_eq!(
            record_path_from(env(&all[1..])),
            Some(PathBuf::from("/x/state/herd/nodes.jsonl"))
        );
        assert_eq!(
            record_path_from(env(&[("XDG_STATE_HOME", "relative"), ("HOME", "/home/me")])),
            Some(PathBuf::from("/home/me/.local/state/herd/nodes.jsonl"))
        );
        assert_eq!(
            record_path_from(env(&[(RECORD_ENV, ""), ("HOME", "/home/me")])),
            Some(PathBuf::from("/home/me/.local/state/herd/nodes.jsonl"))
        );
        assert_eq!(record_path_from(env(&[])), None);
    }

    #[test]
    fn summarize_counts_within_the_window_newest_first() {
        let blames = [
            blame("a", 100, "lost", "old loss"),
            blame("b", 300, "failures", "b fails"),
            blame("a", 500, "preflight", "no torch"),
            blame("c", 50, "lost", "long ago"),
            blame("a", 400, "lost", "lost again"),
        ];
        let all = summarize(&blames, None);
        let order: Vec<_> = all.iter().map(|r| (r.node.as_str(), r.count)).collect();
        assert_eq!(order, [("a", 3), ("b", 1), ("c", 1)]);
        assert_eq!(all[0].last_unix, 500);
        assert_eq!(all[0].last_why, "no torch");
        assert_eq!(all[0].last_kind, "preflight");
        assert_eq!(all[0].kinds, ["lost", "preflight"]);

        let recent = summarize(&blames, Some(300));
        let order: Vec<_> = recent.iter().map(|r| (r.node.as_str(), r.count)).collect();
        assert_eq!(order, [("a", 2), ("b", 1)]);
        assert_eq!(recent[0].kinds, ["lost", "preflight"]);
        assert!(summarize(&blames, Some(501)).is_empty());
    }

    #[test]
    fn summarize_breaks_ties_by_name_and_takes_the_later_line() {
        let blames = [
            blame("b", 10, "lost", "first"),
            blame("a", 10, "lost", "x"),
            blame("b", 10, "failures", "second"),
        ];
        let rows = summarize(&blames, None);
        assert_eq!(rows[0].node, "a");
        assert_eq!(rows[1].last_why, "second");
    }

    #[test]
    fn node_names_are_checked() {
        for ok in ["gpu-a01", "node_1.cluster", "n1"] {
            assert!(is_node_name(ok), "{ok}");
        }
        for bad in ["", "-x", "a b", "a,b", "a\nb", "a;b", "é"] {
            assert!(!is_node_name(bad), "{bad:?}");
        }
    }
}
