//! What `herd submit` says about a code snapshot besides its counts, one line each and only
//! when it matters (docs/submit.md, "The code snapshot"): what herd wrote into the project
//! that the snapshot left out, the Python environments it left out, and a snapshot larger
//! than usual.
//!
//! **Larger than usual**: with a previous snapshot of the same project (the one unchanged
//! files are linked from), at least [`GROWTH_FACTOR`] times its bytes and
//! [`GROWTH_MIN_BYTES`] more, or [`GROWTH_FACTOR`] times its files and [`GROWTH_MIN_FILES`]
//! more; without one (a project's first snapshot, a sweep's), [`LARGE_BYTES`] or
//! [`LARGE_FILES`]. A project's code stays about the same size from one submit to the next,
//! and a few MB; data, checkpoints or outputs that got into it make
//! it jump, and every experiment pays for them (the copy's time and disk).

use herd_exp::{HerdOutput, LeftOutEnv, PythonEnv, SnapshotReport, TopEntry};

/// A snapshot this many times the previous one's bytes (or files) is larger than usual…
pub(crate) const GROWTH_FACTOR: u64 = 2;
/// …when it is also this many bytes more (10 MB: a project of 2 MB that grows to 5 MB is
/// no news)…
pub(crate) const GROWTH_MIN_BYTES: u64 = 10_000_000;
/// …or, for files, this many more.
pub(crate) const GROWTH_MIN_FILES: u64 = 1_000;
/// Without a previous snapshot, a snapshot of this many bytes (100 MB) is larger than usual…
pub(crate) const LARGE_BYTES: u64 = 100_000_000;
/// …or of this many files.
pub(crate) const LARGE_FILES: u64 = 10_000;

/// Examples a line names before `and N more`.
const EXAMPLES: usize = 2;

/// `herd: code snapshot: left out N things herd wrote (…): A, B and K more`, when the
/// snapshot left out anything herd wrote; `None` when it did not.
pub(crate) fn left_out_line(outputs: &[HerdOutput]) -> Option<String> {
    if outputs.is_empty() {
        return None;
    }
    let n = outputs.len();
    Some(format!(
        "herd: code snapshot: left out {n} thing{} herd wrote (experiments, logs, report pages and plots are never snapshotted): {}",
        if n == 1 { "" } else { "s" },
        examples(outputs.iter().map(ToString::to_string).collect())
    ))
}

/// `herd: code snapshot: left out the Python environment .venv/ (…)`, when the snapshot
/// left out any; `None` when it did not.
pub(crate) fn envs_line(envs: &[LeftOutEnv]) -> Option<String> {
    let what = match envs {
        [] => return None,
        [one] => format!("the Python environment {}/", one.path.display()),
        many => format!("{} Python environments", many.len()),
    };
    let named: Vec<String> = envs
        .iter()
        .map(|e| {
            let kind = match e.kind {
                PythonEnv::Venv => "venv",
                PythonEnv::Conda => "conda",
            };
            format!("{}/ ({kind}: {})", e.path.display(), e.kind.marker())
        })
        .collect();
    let named = if envs.len() == 1 {
        format!("it holds {}", envs[0].kind.marker().trim_end_matches('/'))
    } else {
        examples(named)
    };
    Some(format!(
        "herd: code snapshot: left out {what} (a job runs its Python from where it is installed, never from code/): {named}"
    ))
}

/// The first [`EXAMPLES`] of `items`, `and N more` for the rest (all of them when one more
/// would be all that is left out).
fn examples(items: Vec<String>) -> String {
    if items.len() <= EXAMPLES + 1 {
        return match items.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
            _ => items.join(""),
        };
    }
    format!(
        "{} and {} more",
        items[..EXAMPLES].join(", "),
        items.len() - EXAMPLES
    )
}

/// Whether `report`'s snapshot is larger than usual (see the module's doc).
fn larger_than_usual(report: &SnapshotReport) -> bool {
    match &report.previous {
        Some(prev) => {
            let grew = |now: u64, before: u64, min: u64| {
                now >= before.saturating_mul(GROWTH_FACTOR) && now >= before.saturating_add(min)
            };
            grew(report.bytes, prev.bytes, GROWTH_MIN_BYTES)
                || grew(report.files, prev.files, GROWTH_MIN_FILES)
        }
        None => report.bytes >= LARGE_BYTES || report.files >= LARGE_FILES,
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn files(n: u64) -> String {
    format!("{n} file{}", if n == 1 { "" } else { "s" })
}

/// A top-level entry as `--exclude` takes it, anchored to the project root: `/data/`,
/// `/model.ckpt`.
fn exclude_glob(entry: &TopEntry) -> String {
    format!(
        "/{}{}",
        entry.path.display(),
        if entry.folder { "/" } else { "" }
    )
}

/// `herd: note: …` when the snapshot is larger than usual: how large, against what, its
/// biggest entries and how to leave one out; `None` otherwise.
pub(crate) fn size_line(report: &SnapshotReport) -> Option<String> {
    if !larger_than_usual(report) {
        return None;
    }
    let size = format!("{} in {}", mb(report.bytes), files(report.files));
    let how = match &report.previous {
        Some(prev) => format!(
            "larger than usual: {size}, against {} in {} for {}",
            mb(prev.bytes),
            files(prev.files),
            prev.name
        ),
        None => format!("large: {size}"),
    };
    let mut line = format!("herd: note: this code snapshot is {how}");
    if let Some(first) = report.biggest.first() {
        let biggest: Vec<String> = report
            .biggest
            .iter()
            .map(|e| {
                format!(
                    "{}{} {}",
                    e.path.display(),
                    if e.folder { "/" } else { "" },
                    mb(e.bytes)
                )
            })
            .collect();
        line.push_str(&format!(
            "; biggest: {}; what the job does not need, leave out with `--exclude {}` (or `exclude` in the job file) or .gitignore",
            biggest.join(", "),
            exclude_glob(first)
        ));
    } else {
        line.push_str(
            "; what the job does not need, leave out with --exclude (or `exclude` in the job file) or .gitignore",
        );
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use herd_exp::PreviousSize;
    use std::path::PathBuf;

    fn out(path: &str, folder: bool) -> HerdOutput {
        HerdOutput {
            path: PathBuf::from(path),
            folder,
        }
    }

    #[test]
    fn the_left_out_line_counts_and_names_a_couple() {
        assert_eq!(left_out_line(&[]), None);
        assert_eq!(
            left_out_line(&[out("report.html", false)]).as_deref(),
            Some("herd: code snapshot: left out 1 thing herd wrote (experiments, logs, report pages and plots are never snapshotted): report.html")
        );
        assert_eq!(
            left_out_line(&[out("herd-exp", true), out("plots", true), out("report.html", false)])
                .as_deref(),
            Some("herd: code snapshot: left out 3 things herd wrote (experiments, logs, report pages and plots are never snapshotted): herd-exp/, plots/ and report.html")
        );
        let many: Vec<HerdOutput> = (0..6)
            .map(|i| out(&format!("plots/run{i}.loss.png"), false))
            .collect();
        assert_eq!(
            left_out_line(&many).as_deref(),
            Some("herd: code snapshot: left out 6 things herd wrote (experiments, logs, report pages and plots are never snapshotted): plots/run0.loss.png, plots/run1.loss.png and 4 more")
        );
    }

    #[test]
    fn the_environments_line_names_each_and_what_marks_it() {
        let env = |path: &str, kind| LeftOutEnv {
            path: PathBuf::from(path),
            kind,
        };
        assert_eq!(envs_line(&[]), None);
        assert_eq!(
            envs_line(&[env(".venv", PythonEnv::Venv)]).as_deref(),
            Some("herd: code snapshot: left out the Python environment .venv/ (a job runs its Python from where it is installed, never from code/): it holds pyvenv.cfg")
        );
        assert_eq!(
            envs_line(&[env(".venv", PythonEnv::Venv), env("envs/dev", PythonEnv::Conda)])
                .as_deref(),
            Some("herd: code snapshot: left out 2 Python environments (a job runs its Python from where it is installed, never from code/): .venv/ (venv: pyvenv.cfg) and envs/dev/ (conda: conda-meta/)")
        );
    }

    fn report(files: u64, bytes: u64, previous: Option<(u64, u64)>) -> SnapshotReport {
        SnapshotReport {
            files,
            bytes,
            previous: previous.map(|(files, bytes)| PreviousSize {
                name: "lr0.1".into(),
                files,
                bytes,
            }),
            biggest: vec![
                TopEntry {
                    path: "data".into(),
                    folder: true,
                    bytes: bytes * 9 / 10,
                },
                TopEntry {
                    path: "train.py".into(),
                    folder: false,
                    bytes: bytes / 10,
                },
            ],
            ..SnapshotReport::default()
        }
    }

    #[test]
    fn a_snapshot_against_the_previous_one_is_larger_than_usual_when_doubled_and_10_mb_more() {
        // The README tour's case: 1.9 MB after 10 kB is no news.
        assert_eq!(size_line(&report(10, 1_900_000, Some((2, 10_000)))), None);
        // A big project that stays big.
        assert_eq!(
            size_line(&report(30_000, 900_000_000, Some((29_000, 880_000_000)))),
            None
        );
        // Doubled, but by less than 10 MB.
        assert_eq!(
            size_line(&report(40, 9_000_000, Some((30, 4_000_000)))),
            None
        );
        assert_eq!(
            size_line(&report(40, 250_000_000, Some((30, 4_000_000)))).as_deref(),
            Some("herd: note: this code snapshot is larger than usual: 250.0 MB in 40 files, against 4.0 MB in 30 files for lr0.1; biggest: data/ 225.0 MB, train.py 25.0 MB; what the job does not need, leave out with `--exclude /data/` (or `exclude` in the job file) or .gitignore")
        );
        // Files alone: a virtual environment of small files.
        let venv = report(31_000, 9_000_000, Some((30, 3_000_000)));
        assert!(size_line(&venv).is_some_and(|l| l.contains("31000 files")));
        // Not quite twice the files.
        assert_eq!(
            size_line(&report(1_900, 2_000_000, Some((1_000, 2_000_000)))),
            None
        );
    }

    #[test]
    fn a_first_snapshot_is_larger_than_usual_from_100_mb_or_10000_files() {
        assert_eq!(size_line(&report(200, 99_999_999, None)), None);
        assert_eq!(size_line(&report(9_999, 1_000_000, None)), None);
        assert_eq!(
            size_line(&report(200, 100_000_000, None)).as_deref(),
            Some("herd: note: this code snapshot is large: 100.0 MB in 200 files; biggest: data/ 90.0 MB, train.py 10.0 MB; what the job does not need, leave out with `--exclude /data/` (or `exclude` in the job file) or .gitignore")
        );
        assert!(size_line(&report(10_000, 1_000_000, None)).is_some());
        let file_first = SnapshotReport {
            biggest: vec![TopEntry {
                path: "model.ckpt".into(),
                folder: false,
                bytes: 150_000_000,
            }],
            ..report(3, 150_000_000, None)
        };
        assert!(size_line(&file_first)
            .is_some_and(|l| l.contains("biggest: model.ckpt 150.0 MB;")
                && l.contains("`--exclude /model.ckpt`")));
    }
}
