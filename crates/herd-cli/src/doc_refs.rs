//! README.md and docs/*.md checked against the repository and herd's own command tree:
//! every repository path they name exists (a link's `#anchor` names a heading of its file),
//! and every `herd …` command line they show names real subcommands and flags. One test
//! reports every miss with file:line.
//!
//! Rules (what is not checked, on purpose):
//! - A path is checked when a word of a code span or of a code block, or a link's target,
//!   starts with one of [`REPO_DIRS`]; words with a placeholder (`…`, `*`, `{`, `<`, `$`, an
//!   upper-case part like `NAME`) are patterns, not paths. Paths of a user's project or of
//!   an experiment folder (`herd-exp/NAME/…`, `logs/attempt-K`) start elsewhere and are not
//!   repository paths.
//! - A `herd` word is a herd command line where a command stands: first on the line (after
//!   a `$` prompt and `VAR=value`s), after a shell operator, `(`, `$(` or a launcher and its
//!   flags (`srun -N3 herd env`). So `cargo … -p herd`, `import herd` and prose in a
//!   command's output (`worker environment herd sets:`) are not. The words after it that
//!   are written like a command (lower case letters and `-`) must be its subcommands;
//!   words in capitals (`herd SUBCOMMAND`) are placeholders.
//! - Flags are checked up to the end of the command: `--` (what follows is the user's
//!   program: torchrun's, srun's, the script's flags), a shell operator (`|`, `;`, `&&`,
//!   `>`, `#`…), or the first argument of a command whose arguments run to the end
//!   (`herd submit … python train.py --lr 1`).
//! - Two short lists, each entry with its reason: [`FOREIGN_PATHS`] (another repository's
//!   path, named as such) and [`WRONG_ON_PURPOSE`] (an example of a mistake).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// Top-level folders of the repository: a word starting with one of them names a path here.
const REPO_DIRS: &[&str] = &[
    "crates/",
    "scripts/",
    "testbed/",
    "bench/",
    "examples/",
    "docs/",
    "python/",
    ".ci/",
    "fuzz/",
];

/// Paths of other repositories, named where the docs say whose they are: (doc, path).
const FOREIGN_PATHS: &[(&str, &str)] = &[
    // SwAV's own launch script, one of the seeds.
    ("docs/design.md", "scripts/swav_800ep_pretrain.sh"),
];

/// Misses that are the point of their example: (doc, how the miss starts).
const WRONG_ON_PURPOSE: &[(&str, &str)] = &[
    // How herd answers a mistyped command.
    ("docs/cli.md", "`herd stauts`"),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every docs/*.md, relative to the repository.
fn doc_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    let dir = repo().join("docs");
    let mut docs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.expect("a docs entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// One piece of a doc to check: code (a span or a code block's line) or a link's target.
#[derive(Debug, PartialEq)]
enum Piece {
    Code(String),
    Link(String),
}

/// The code spans, code block lines and link targets of `text`, each with its line number.
fn pieces(text: &str) -> Vec<(usize, Piece)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    // The paragraph being read: its lines, with their numbers (code spans may cross lines).
    let mut para: Vec<(usize, &str)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if let Some(f) = &fence {
            if trimmed.starts_with(f.as_str()) {
                fence = None;
            } else {
                out.push((n, Piece::Code(line.to_owned())));
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            out.extend(paragraph(&para));
            para.clear();
            fence = Some(trimmed[..3].to_owned());
            continue;
        }
        if trimmed.is_empty() {
            out.extend(paragraph(&para));
            para.clear();
        } else {
            para.push((n, line));
        }
    }
    out.extend(paragraph(&para));
    out
}

/// The code spans and link targets of a paragraph's lines.
fn paragraph(lines: &[(usize, &str)]) -> Vec<(usize, Piece)> {
    let mut out = Vec::new();
    // (line number, char) of the whole paragraph, lines joined by a space.
    let chars: Vec<(usize, char)> = lines
        .iter()
        .flat_map(|&(n, l)| l.chars().chain([' ']).map(move |c| (n, c)))
        .collect();
    let mut prose: Vec<(usize, char)> = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].1 != '`' {
            prose.push(chars[i]);
            i += 1;
            continue;
        }
        let ticks = chars[i..].iter().take_while(|c| c.1 == '`').count();
        let from = i + ticks;
        let close = (from..chars.len()).find(|&j| {
            chars[j..].iter().take_while(|c| c.1 == '`').count() == ticks
                && (j == 0 || chars[j - 1].1 != '`')
        });
        match close {
            Some(end) => {
                let code: String = chars[from..end].iter().map(|c| c.1).collect();
                out.push((chars[i].0, Piece::Code(code)));
                i = end + ticks;
            }
            None => i = from,
        }
    }
    let text: String = prose.iter().map(|c| c.1).collect();
    let line_at = |byte: usize| prose[text[..byte].chars().count()].0;
    let mut at = 0;
    while let Some(found) = text[at..].find("](") {
        let start = at + found + 2;
        let Some(len) = text[start..].find(')') else {
            break;
        };
        out.push((
            line_at(start),
            Piece::Link(text[start..start + len].trim().to_owned()),
        ));
        at = start + len;
    }
    out.sort_by_key(|p| p.0);
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings (outside code blocks), duplicates numbered.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || !t.starts_with('#') {
            continue;
        }
        let heading = t.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let mut anchor = base.clone();
        let mut k = 1;
        while seen.contains(&anchor) {
            anchor = format!("{base}-{k}");
            k += 1;
        }
        seen.insert(anchor);
    }
    seen
}

/// A word that stands for something (`…`, `NAME`, `*.py`, `{lr}`), not a literal path.
fn is_pattern(word: &str) -> bool {
    word.contains(['…', '*', '?', '{', '<', '$', '['])
        || word.split(['/', '.', '-', '_']).any(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
                && part.chars().any(|c| c.is_ascii_uppercase())
                && !matches!(part, "README" | "CHANGELOG" | "LICENSE")
        })
}

/// What is wrong with a repository path named in `file` (`None`: it exists).
fn path_miss(file: &str, word: &str, link: bool) -> Option<String> {
    let (path, anchor) = match word.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (word, None),
    };
    let base = if link {
        repo()
            .join(file)
            .parent()
            .expect("a doc's folder")
            .to_owned()
    } else {
        repo()
    };
    let target = if path.is_empty() {
        repo().join(file)
    } else {
        base.join(path)
    };
    if !target.exists() {
        return Some(format!(
            "`{word}`: no such file or folder in the repository"
        ));
    }
    let anchor = anchor?;
    if !path.is_empty() && !path.ends_with(".md") {
        return None;
    }
    let text = std::fs::read_to_string(&target).ok()?;
    if anchors(&text).contains(anchor) {
        return None;
    }
    Some(format!(
        "`{word}`: {} has no heading with the anchor #{anchor}",
        if path.is_empty() { file } else { path }
    ))
}

/// A word of a code piece with the punctuation around it taken off.
fn bare(word: &str) -> &str {
    word.trim_start_matches(['(', '"', '\'', '`', '['])
        .trim_end_matches([')', '"', '\'', '`', ',', ';', ':', '.', ']'])
}

/// The repository paths named in a code piece that do not exist.
fn code_path_misses(file: &str, code: &str) -> Vec<String> {
    code.split_whitespace()
        .map(bare)
        .filter(|w| REPO_DIRS.iter().any(|d| w.starts_with(d)) && !is_pattern(w))
        .filter(|w| !FOREIGN_PATHS.contains(&(file, w)))
        .map(|w| {
            // `crates/x.rs:42` names a line of the file.
            match w.rsplit_once(':') {
                Some((p, line)) if line.chars().all(|c| c.is_ascii_digit()) => p,
                _ => w,
            }
        })
        .filter_map(|w| path_miss(file, w, false))
        .collect()
}

/// What is wrong with a link's target (`None`: nothing, or not a repository link).
fn link_miss(file: &str, target: &str) -> Option<String> {
    let target = target.split_whitespace().next().unwrap_or("");
    if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    if target.starts_with('/') || target.starts_with("..") && !file.starts_with("docs/") {
        return Some(format!(
            "`{target}`: a link must stay inside the repository"
        ));
    }
    if target.starts_with("../../") {
        return Some(format!(
            "`{target}`: a link must stay inside the repository"
        ));
    }
    path_miss(file, target, true)
}

/// Words that end a command line's flags: shell operators and comments.
fn ends_command(word: &str) -> bool {
    matches!(
        word,
        "|" | "||" | "&&" | ";" | "&" | ">" | ">>" | "2>" | "2>&1" | "<" | "#" | "\\"
    ) || word.starts_with('>')
        || word.starts_with("2>")
        || word.starts_with('#')
        || word.starts_with('|')
}

/// A command's flag named `name` (`--name` or `-n` given as `n`), with the help and
/// version flags clap adds.
fn find_flag<'a>(
    cmd: &'a clap::Command,
    long: Option<&str>,
    short: Option<char>,
) -> Option<&'a clap::Arg> {
    cmd.get_arguments().find(|a| {
        long.is_some_and(|l| {
            a.get_long() == Some(l) || a.get_all_aliases().is_some_and(|al| al.contains(&l))
        }) || short.is_some_and(|s| {
            a.get_short() == Some(s) || a.get_all_short_aliases().is_some_and(|al| al.contains(&s))
        })
    })
}

fn takes_value(arg: &clap::Arg) -> bool {
    arg.get_action().takes_values()
}

/// The misses of the herd command lines in a code piece, and how many lines it has.
fn command_misses(root: &clap::Command, code: &str) -> (usize, Vec<String>) {
    // A shell comment is no command.
    let words: Vec<&str> = code
        .split_whitespace()
        .take_while(|w| !w.starts_with('#'))
        .collect();
    let mut misses = Vec::new();
    let mut commands = 0;
    for (i, raw) in words.iter().enumerate() {
        let w = raw.trim_start_matches(['(', '`', '"', '\'', '$']);
        if w != "herd" {
            continue;
        }
        // Opened by `(`, `$(`, a quote: a command starts here; else it must stand where a
        // command stands.
        if w.len() == raw.len() && !at_command_position(&words[..i]) {
            continue;
        }
        commands += 1;
        misses.extend(one_command(root, &words[i + 1..]));
    }
    (commands, misses)
}

/// Programs that run the command their arguments end with (`srun -N2 herd env`).
const LAUNCHERS: &[&str] = &[
    "srun", "salloc", "sudo", "exec", "time", "env", "nohup", "timeout", "watch", "then", "do",
];

/// Whether a command starts after `before`: at the start (after a `$` prompt and variable
/// assignments), after a shell operator, or after a launcher and its flags.
fn at_command_position(before: &[&str]) -> bool {
    for w in before.iter().rev() {
        if ends_command(w) || w.ends_with(['|', ';']) || *w == "$" {
            return true;
        }
        if LAUNCHERS.contains(w) {
            return true;
        }
        let assignment = w.split_once('=').is_some_and(|(v, _)| {
            !v.is_empty()
                && v.chars()
                    .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        });
        let flag_or_value = w.starts_with('-') || w.chars().all(|c| c.is_ascii_digit());
        if !(assignment || flag_or_value) {
            return false;
        }
    }
    true
}

/// Checks `herd` followed by `words`.
fn one_command(root: &clap::Command, words: &[&str]) -> Vec<String> {
    let mut misses = Vec::new();
    let mut cmd = root;
    let mut path = vec!["herd".to_owned()];
    let mut rest = words;
    // The subcommands, nested ones too.
    while let Some(first) = rest.first() {
        let word = bare(first);
        if !cmd.has_subcommands()
            || word.is_empty()
            || !word.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            || word.starts_with('-')
        {
            break;
        }
        match cmd.find_subcommand(word) {
            Some(sub) => {
                cmd = sub;
                path.push(word.to_owned());
                rest = &rest[1..];
            }
            None => {
                let known: Vec<&str> = cmd
                    .get_subcommands()
                    .filter(|s| !s.is_hide_set())
                    .map(|s| s.get_name())
                    .collect();
                misses.push(format!(
                    "`{} {word}`: no such command ({} has: {})",
                    path.join(" "),
                    path.join(" "),
                    known.join(", ")
                ));
                return misses;
            }
        }
    }
    let runs_to_end = cmd
        .get_positionals()
        .any(|a| a.is_trailing_var_arg_set() || a.is_last_set());
    let shown = path.join(" ");
    let mut k = 0;
    while k < rest.len() {
        let raw = rest[k];
        k += 1;
        if raw == "--" || ends_command(raw) {
            break;
        }
        // `herd status;`, `(herd top NAME)`: the command ends with this word.
        if raw.ends_with([';', ')']) {
            k = rest.len();
        }
        let word = bare(raw);
        let value_follows = |arg: &clap::Arg, inline: bool| takes_value(arg) && !inline;
        if let Some(long) = word.strip_prefix("--") {
            if long.is_empty() || is_pattern(long) {
                continue;
            }
            let (name, inline) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            match find_flag(cmd, Some(name), None) {
                Some(arg) if value_follows(arg, inline) => k += 1,
                Some(_) => {}
                None if matches!(name, "help" | "version") => {}
                None => misses.push(format!(
                    "`{shown} --{name}`: `{shown}` has no flag --{name}"
                )),
            }
        } else if let Some(shorts) = word.strip_prefix('-') {
            if shorts.is_empty()
                || !shorts
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic())
            {
                continue;
            }
            for (j, c) in shorts.char_indices() {
                match find_flag(cmd, None, Some(c)) {
                    // The rest of the word is the value (`-n2`), or the next word is.
                    Some(arg) if takes_value(arg) => {
                        if j + c.len_utf8() == shorts.len() {
                            k += 1;
                        }
                        break;
                    }
                    Some(_) => {}
                    None if c == 'h' || c == 'V' => {}
                    None => {
                        misses.push(format!("`{shown} -{c}`: `{shown}` has no flag -{c}"));
                        break;
                    }
                }
            }
        } else if runs_to_end && !word.is_empty() && word != "…" {
            // The command's own words begin: their flags are the program's.
            break;
        }
    }
    misses
}

/// Every miss of one doc, `file:line: what`, and how many herd command lines it shows.
fn misses_of(file: &str, text: &str, root: &clap::Command) -> (usize, Vec<String>) {
    let mut out = Vec::new();
    let mut commands = 0;
    for (line, piece) in pieces(text) {
        let found = match &piece {
            Piece::Code(code) => {
                let mut m = code_path_misses(file, code);
                let (n, c) = command_misses(root, code);
                commands += n;
                m.extend(c);
                m
            }
            Piece::Link(target) => link_miss(file, target).into_iter().collect(),
        };
        out.extend(
            found
                .into_iter()
                .filter(|m| !WRONG_ON_PURPOSE.contains(&(file, m.split(':').next().unwrap_or(""))))
                .map(|m| format!("{file}:{line}: {m}")),
        );
    }
    (commands, out)
}

#[test]
fn docs_name_only_paths_commands_and_flags_that_exist() {
    let root = crate::Cli::command();
    let mut misses = Vec::new();
    let mut commands = 0;
    for file in doc_files() {
        let path = repo().join(&file);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let (n, m) = misses_of(&file, &text, &root);
        commands += n;
        misses.extend(m);
    }
    // The docs show herd at work: a checker that finds no command lines is broken.
    assert!(
        commands > 100,
        "only {commands} herd command lines found in README.md and docs/*.md"
    );
    assert!(
        misses.is_empty(),
        "{} stale reference(s) in README.md and docs/*.md (fix the doc, or the rule in crates/herd-cli/src/doc_refs.rs when it is not a reference):\n{}",
        misses.len(),
        misses.join("\n")
    );
}

#[test]
fn the_checker_finds_each_kind_of_miss() {
    let root = crate::Cli::command();
    let doc = "\
See `crates/no-such-crate/src/lib.rs` and [cli](cli.md#no-such-heading), [ok](cli.md#exit-codes).
Run `herd stauts` or `herd hostlist expnd x` or `herd status --wach`.
```sh
herd submit -J x --no-such-flag -- torchrun --nproc-per-node 2 train.py
herd hostlist expand -q 'a[1-2]'
herd submit -J x python train.py --lr 1
from herd import checkpoint
herd SUBCOMMAND --help
worker environment herd sets:
$ srun -N3 --ntasks=5 herd envv    # herd is fine here
```
Paths of a user's project are not the repository's: `herd-exp/NAME/logs/attempt-K`, `examples/NAME.toml`;
`cargo nextest run -p herd --test architecture` is cargo's, and a span may cross lines: `herd
status --wach2`.
";
    let (commands, misses) = misses_of("docs/x.md", doc, &root);
    assert_eq!(commands, 9, "the herd command lines of the sample");
    let want = [
        "docs/x.md:1: `crates/no-such-crate/src/lib.rs`: no such file",
        "docs/x.md:1: `cli.md#no-such-heading`: cli.md has no heading",
        "docs/x.md:2: `herd stauts`: no such command",
        "docs/x.md:2: `herd hostlist expnd`: no such command",
        "docs/x.md:2: `herd status --wach`: `herd status` has no flag --wach",
        "docs/x.md:4: `herd submit --no-such-flag`",
        "docs/x.md:5: `herd hostlist expand -q`",
        "docs/x.md:10: `herd envv`: no such command",
        "docs/x.md:13: `herd status --wach2`",
    ];
    assert_eq!(misses.len(), want.len(), "{misses:#?}");
    for (m, w) in misses.iter().zip(want) {
        assert!(m.starts_with(w), "{m:?} should start with {w:?}");
    }
}

#[test]
fn anchors_are_githubs() {
    let a = anchors("# herd\n## Seeing what herd asks SLURM: `HERD_LOG=debug`\n## 1. Commands\n```\n# not a heading\n```\n## 1. Commands\n");
    let want: BTreeSet<String> = [
        "herd",
        "seeing-what-herd-asks-slurm-herd_logdebug",
        "1-commands",
        "1-commands-1",
    ]
    .map(String::from)
    .into();
    assert_eq!(a, want);
}
