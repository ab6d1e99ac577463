//! herd's own outputs in a project folder, and how a code snapshot knows them: they are
//! never snapshotted (docs/submit.md, "The code snapshot").
//!
//! - **Folders herd makes**, known by what they hold, never by a name a user might give: an
//!   experiment folder (its `manifest.json` begins as herd writes one: `format`,
//!   `created_unix`, `herd_version` in its first [`HEAD_BYTES`]), a sweep folder (its
//!   `sweep.json` reads as herd's), a logs folder of `herd run` or `herd launch --log-dir`
//!   (it holds `attempt-0/rank-0.times`, the agent's time marks) and the temporary folder of
//!   a submit in progress or killed (`.herd-new-*`: `.herd-` names are herd's own, no job
//!   may take one). A folder left empty by leaving these out (an experiment root,
//!   `herd-logs/`) is left out with them.
//! - **Files `herd report` writes** (`--plots DIR`, `--html FILE`), wherever they were put:
//!   each carries a mark near its start, the usual way a file names the program that made
//!   it: the page a `<meta name="generator">` ([`HTML_MARK`]), an SVG a comment before its
//!   `<svg>` ([`SVG_MARK`]), a PNG a `tEXt` chunk `Software` right after its header
//!   ([`PNG_KEYWORD`], [`GENERATOR`]). Only files named `*.html`, `*.htm`, `*.svg` or `*.png`
//!   are looked at, and only their first [`HEAD_BYTES`]: a user's own pages and images,
//!   which carry no such mark, are copied as any file.
//!
//! The project root itself is never looked at: whatever it holds, it is snapshotted.

use std::ffi::OsStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};

use crate::layout::{ExperimentDir, LogsDir, SweepDir, NEW_EXPERIMENT_PREFIX};

/// The program the marks name.
pub const GENERATOR: &str = "herd report";

/// The mark in the `<head>` of each page `herd report --html` writes.
pub const HTML_MARK: &str = "<meta name=\"generator\" content=\"herd report\">";

/// The mark before the `<svg>` of each SVG `herd report --plots` writes.
pub const SVG_MARK: &str = "<!-- generator: herd report -->";

/// The keyword of the `tEXt` chunk (text [`GENERATOR`]) of each PNG `herd report --plots`
/// writes (`Software`: PNG's own keyword for the program that made the image).
pub const PNG_KEYWORD: &str = "Software";

/// How many bytes of a file's start are read to find a mark (or of a `manifest.json` to
/// know it is herd's).
pub const HEAD_BYTES: usize = 512;

/// The most of a `sweep.json` read to know it is herd's.
const SWEEP_JSON_MAX: u64 = 4 << 20;

/// A kind of file `herd report` writes, by its name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkedKind {
    /// `*.html`, `*.htm`: a page.
    Html,
    /// `*.svg`: a plot.
    Svg,
    /// `*.png`: a plot.
    Png,
}

impl MarkedKind {
    /// The kind of a file named `name` (its extension, any case); `None` for any other file,
    /// which is never opened to look for a mark.
    pub fn of_name(name: &OsStr) -> Option<MarkedKind> {
        let name = name.as_bytes();
        let dot = name.iter().rposition(|&b| b == b'.')?;
        let ext = &name[dot + 1..];
        if ext.eq_ignore_ascii_case(b"html") || ext.eq_ignore_ascii_case(b"htm") {
            Some(MarkedKind::Html)
        } else if ext.eq_ignore_ascii_case(b"svg") {
            Some(MarkedKind::Svg)
        } else if ext.eq_ignore_ascii_case(b"png") {
            Some(MarkedKind::Png)
        } else {
            None
        }
    }

    /// Whether `head`, a file's first bytes (at most [`HEAD_BYTES`]), carries herd's mark.
    pub fn is_marked(self, head: &[u8]) -> bool {
        let head = &head[..head.len().min(HEAD_BYTES)];
        match self {
            MarkedKind::Html => contains(head, HTML_MARK.as_bytes()),
            MarkedKind::Svg => contains(head, SVG_MARK.as_bytes()),
            MarkedKind::Png => {
                let mut chunk = b"tEXt".to_vec();
                chunk.extend_from_slice(PNG_KEYWORD.as_bytes());
                chunk.push(0);
                chunk.extend_from_slice(GENERATOR.as_bytes());
                head.starts_with(b"\x89PNG\r\n\x1a\n") && contains(head, &chunk)
            }
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A folder herd makes, as a snapshot knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HerdFolder {
    /// An experiment folder.
    Experiment,
    /// A sweep folder.
    Sweep,
    /// A logs folder of `herd run` (`herd-logs/RUN`) or `herd launch --log-dir`.
    Logs,
    /// The temporary folder of a submit (`.herd-new-*`).
    Temporary,
}

/// Something herd wrote that a snapshot left out, relative to the project root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HerdOutput {
    /// Its path, relative to the project root.
    pub path: PathBuf,
    /// Whether it is a folder (left out with all it holds).
    pub folder: bool,
}

impl HerdOutput {
    /// The path, a folder's with a `/` after it, byte for byte.
    pub fn as_os_string(&self) -> std::ffi::OsString {
        let mut s = self.path.as_os_str().to_owned();
        if self.folder {
            s.push("/");
        }
        s
    }
}

impl fmt::Display for HerdOutput {
    /// The path, a folder's with a `/` after it: `herd-exp/`, `plots/run.loss.png`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}",
            self.path.display(),
            if self.folder { "/" } else { "" }
        )
    }
}

/// Which folder herd makes `name` is, in the open folder `parent`; `None` for any other.
/// A few lookups (missing files the usual answer), and a read of a `manifest.json` or
/// `sweep.json` only where the folder holds one.
pub(crate) fn herd_folder(parent: &impl AsFd, name: &OsStr) -> Option<HerdFolder> {
    if name
        .as_bytes()
        .starts_with(NEW_EXPERIMENT_PREFIX.as_bytes())
    {
        return Some(HerdFolder::Temporary);
    }
    let dir = Path::new(name);
    let manifest = dir.join(ExperimentDir::manifest_name());
    if let Ok(fd) = open_in(parent, &manifest) {
        let mut head = [0u8; HEAD_BYTES];
        if read_head(&fd, &mut head).is_ok_and(|n| is_experiment_manifest(&head[..n])) {
            return Some(HerdFolder::Experiment);
        }
    }
    let sweep = SweepDir::new(dir).manifest();
    if let Ok(fd) = open_in(parent, &sweep) {
        let mut bytes = Vec::new();
        let file = std::fs::File::from(fd);
        if io::Read::read_to_end(&mut io::Read::take(file, SWEEP_JSON_MAX), &mut bytes).is_ok()
            && is_sweep_manifest(&bytes)
        {
            return Some(HerdFolder::Sweep);
        }
    }
    let times = LogsDir::new(dir).attempt(0).times(0);
    let regular = rustix::fs::statx(parent, &times, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE)
        .is_ok_and(|st| u32::from(st.stx_mode) & 0o170_000 == 0o100_000);
    regular.then_some(HerdFolder::Logs)
}

/// Opens `rel` in the folder `parent` to read it (never following a last symlink, never
/// blocking on a FIFO).
pub(crate) fn open_in(parent: &impl AsFd, rel: &Path) -> io::Result<OwnedFd> {
    rustix::fs::openat(
        parent,
        rel,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Reads the start of the open file `fd` into `buf` (without moving its offset); the bytes
/// read.
pub(crate) fn read_head(fd: &impl AsFd, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match rustix::io::pread(fd, &mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// Whether `head`, the start of a `manifest.json`, is the start of herd's: a JSON object
/// whose first keys are herd's (they come first, in this order, in every manifest herd
/// writes).
fn is_experiment_manifest(head: &[u8]) -> bool {
    let text = head.trim_ascii_start();
    let keys: [&[u8]; 3] = [b"\"format\":", b"\"created_unix\":", b"\"herd_version\":"];
    text.starts_with(b"{") && keys.iter().all(|k| contains(text, k))
}

/// Whether `bytes` is a `sweep.json` as herd writes one.
fn is_sweep_manifest(bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    #[allow(dead_code)] // read only to know the file is herd's
    struct Head {
        format: u32,
        name: String,
        keys: Vec<String>,
        runs: Vec<serde::de::IgnoredAny>,
        created: String,
        herd_version: String,
    }
    serde_json::from_slice::<Head>(bytes).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_html_svg_and_png_names_are_looked_at() {
        let kind = |n: &str| MarkedKind::of_name(OsStr::new(n));
        assert_eq!(kind("report.html"), Some(MarkedKind::Html));
        assert_eq!(kind("index.HTM"), Some(MarkedKind::Html));
        assert_eq!(kind("run.loss.svg"), Some(MarkedKind::Svg));
        assert_eq!(kind("run.loss.PNG"), Some(MarkedKind::Png));
        assert_eq!(kind("train.py"), None);
        assert_eq!(kind("png"), None, "no extension");
        assert_eq!(kind("notes.html.bak"), None);
    }

    #[test]
    fn a_mark_counts_only_in_a_files_first_bytes_and_of_its_own_kind() {
        let page = format!("<!DOCTYPE html>\n<html>\n<head>\n{HTML_MARK}\n</head>");
        assert!(MarkedKind::Html.is_marked(page.as_bytes()));
        assert!(!MarkedKind::Html.is_marked(b"<!DOCTYPE html>\n<html><head></head>"));
        assert!(!MarkedKind::Svg.is_marked(page.as_bytes()));
        let late = format!("{}{HTML_MARK}", " ".repeat(HEAD_BYTES));
        assert!(!MarkedKind::Html.is_marked(late.as_bytes()));

        let svg = format!("{SVG_MARK}\n<svg width=\"10\"></svg>");
        assert!(MarkedKind::Svg.is_marked(svg.as_bytes()));
        assert!(!MarkedKind::Svg.is_marked(b"<svg><!-- generator: inkscape --></svg>"));

        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        png.extend_from_slice(b"\0\0\0\x14tEXtSoftware\0herd report");
        assert!(MarkedKind::Png.is_marked(&png));
        assert!(!MarkedKind::Png.is_marked(&png[8..]), "not a PNG");
        let other = String::from_utf8_lossy(&png).replace("herd report", "GIMP 2.10");
        assert!(!MarkedKind::Png.is_marked(other.as_bytes()));
    }

    #[test]
    fn a_manifest_is_herds_by_its_first_keys() {
        let herds = b"{\n  \"format\": 1,\n  \"name\": \"a\",\n  \"created_unix\": 1,\n  \"herd_version\": \"0.1.0\",";
        assert!(is_experiment_manifest(herds));
        assert!(!is_experiment_manifest(
            b"{\n  \"name\": \"my-extension\",\n  \"version\": \"1.0\",\n  \"manifest_version\": 3\n}"
        ));
        assert!(!is_experiment_manifest(
            b"[\"format\":, \"created_unix\":, \"herd_version\":]"
        ));
    }

    #[test]
    fn a_sweep_json_is_herds_when_it_reads_as_herd_writes_it() {
        let herds = br#"{"format": 1, "name": "grid", "keys": ["lr"], "runs": [{"index": 0, "name": "lr=1", "values": {"lr": "1"}}], "max_parallel": null, "created": "2026-01-01T00:00:00Z", "herd_version": "0.1.0", "submissions": []}"#;
        assert!(is_sweep_manifest(herds));
        assert!(!is_sweep_manifest(
            br#"{"method": "bayes", "metric": {"name": "loss"}, "parameters": {}}"#
        ));
    }
}
