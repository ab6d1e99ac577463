//! The repository's shape, checked on its sources: one home for each concern.
//!
//! - No import cycle between the files of a crate: file A depends on file B when A names
//!   B's module in a `use` (re-exports with `pub use` aside: they only publish), in a
//!   `crate::…`/`super::…`/`self::…` path, or through a child module it declares. The
//!   crate root (`lib.rs`, `main.rs`) is the crate's front door and takes no part; test
//!   code (`#[cfg(test)]` items and the files only tests compile) neither.
//! - No source file over 1,000 lines; test files count separately.
//! - The experiment folder's files and folders are named only in herd-exp's `layout.rs`:
//!   no string literal elsewhere in the sources spells one.
//! - Processes are started in a few named files only ([`STARTS_PROCESSES`]); every program
//!   the user controls through `herd_slurm::user_program`, which withholds the job's secret.
//! - The timeline's events are named only in herd-exp's `timeline` module: no string
//!   literal elsewhere is `"event"` or a kind only the timeline uses.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One source file of a crate, its comments and literals blanked out.
struct File {
    /// Relative to the workspace, for messages.
    shown: String,
    /// Its module path in the crate (`[]` for the root, `["leader", "decide"]`).
    module: Vec<String>,
    /// Only compiled for tests.
    test_only: bool,
    /// Its text, comments, strings and chars replaced by spaces (lines kept), test items
    /// removed.
    code: String,
    /// Its string literals outside test items: (line, contents).
    literals: Vec<(usize, String)>,
    /// Lines in all.
    lines: usize,
    /// The file modules it declares: (name, test only).
    children: Vec<(String, bool)>,
}

/// Blanks comments, strings and chars (keeping newlines) and collects the string literals.
fn lex(text: &str) -> (String, Vec<(usize, String)>) {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut lits = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let blank = |c: char, out: &mut String| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
        }
        if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
            continue;
        }
        if c == '/' && b.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == '\n' {
                        line += 1;
                    }
                    blank(b[i], &mut out);
                    i += 1;
                }
            }
            continue;
        }
        // Raw strings: r"…", r#"…"#, br#"…"#.
        let raw_start = if c == 'r' || (c == 'b' && b.get(i + 1) == Some(&'r')) {
            let r = if c == 'b' { i + 1 } else { i };
            let prev_ident = i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_');
            let mut j = r + 1;
            while b.get(j) == Some(&'#') {
                j += 1;
            }
            (!prev_ident && b.get(j) == Some(&'"')).then_some((j - r - 1, j))
        } else {
            None
        };
        if let Some((hashes, quote)) = raw_start {
            let start_line = line;
            for &ch in &b[i..=quote] {
                blank(ch, &mut out);
            }
            i = quote + 1;
            let mut lit = String::new();
            while i < b.len() {
                if b[i] == '"' && (1..=hashes).all(|k| b.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                if b[i] == '\n' {
                    line += 1;
                }
                lit.push(b[i]);
                blank(b[i], &mut out);
                i += 1;
            }
            lits.push((start_line, lit));
            continue;
        }
        if c == '"' {
            let start_line = line;
            out.push(' ');
            i += 1;
            let mut lit = String::new();
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    lit.push(b[i]);
                    out.push(' ');
                    i += 1;
                }
                if let Some(&ch) = b.get(i) {
                    if ch == '\n' {
                        line += 1;
                    }
                    lit.push(ch);
                    blank(ch, &mut out);
                }
                i += 1;
            }
            out.push(' ');
            i += 1;
            lits.push((start_line, lit));
            continue;
        }
        if c == '\'' {
            // A char literal ('x', '\n', '\u{1F600}'), or a lifetime ('a).
            let end = if b.get(i + 1) == Some(&'\\') {
                (i + 2..b.len()).find(|&j| b[j] == '\'')
            } else if b.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            if let Some(end) = end {
                for _ in i..=end {
                    out.push(' ');
                }
                i = end + 1;
                continue;
            }
        }
        out.push(c);
        i += 1;
    }
    (out, lits)
}

/// The index after the item starting at `from` (through its `;` or its matching `}`).
fn item_end(code: &[u8], from: usize) -> usize {
    let mut depth = 0i32;
    let mut i = from;
    while i < code.len() {
        match code[i] {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b';' if depth == 0 => return i + 1,
            b'{' if depth == 0 => {
                let mut braces = 0;
                while i < code.len() {
                    match code[i] {
                        b'{' => braces += 1,
                        b'}' => {
                            braces -= 1;
                            if braces == 0 {
                                return i + 1;
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
                return code.len();
            }
            _ => {}
        }
        i += 1;
    }
    code.len()
}

/// `code` with every `#[cfg(test)]` item blanked (lines kept); the blanked byte ranges.
fn without_tests(code: &str) -> (String, Vec<(usize, usize)>) {
    let mut bytes = code.as_bytes().to_vec();
    let mut cut = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let start = from + at;
        let end = item_end(code.as_bytes(), start + "#[cfg(test)]".len());
        for b in &mut bytes[start..end] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        cut.push((start, end));
        from = end;
    }
    (String::from_utf8(bytes).unwrap_or_default(), cut)
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The words of `text` that follow `word` (as a whole word), each with its byte offset.
fn words_after<'t>(text: &'t str, word: &str) -> Vec<(usize, &'t str)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(word) {
        let start = from + at;
        from = start + word.len();
        let before_ok = start == 0 || !is_ident(bytes[start - 1]) && bytes[start - 1] != b'$';
        let after = start + word.len();
        if !before_ok || after >= bytes.len() || is_ident(bytes[after]) {
            continue;
        }
        out.push((after, &text[after..]));
    }
    out
}

/// `mod NAME;` declarations of `code` (not `mod NAME { … }`), with whether `#[cfg(test)]`
/// precedes them; `full` is the text with test items still in.
fn declared_children(full: &str) -> Vec<(String, bool)> {
    let (_, cut) = without_tests(full);
    let mut out = Vec::new();
    for (at, rest) in words_after(full, "mod") {
        let rest = rest.trim_start();
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() || !rest[name.len()..].trim_start().starts_with(';') {
            continue;
        }
        let test_only = cut.iter().any(|&(s, e)| s <= at && at < e);
        out.push((name, test_only));
    }
    out
}

fn read_crate(src: &Path, root_file: &str) -> Vec<File> {
    let mut files = Vec::new();
    let mut todo = vec![(src.join(root_file), Vec::<String>::new(), false)];
    while let Some((path, module, test_only)) = todo.pop() {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (lexed, literals) = lex(&text);
        let (code, cut) = without_tests(&lexed);
        // Line starts, to tell which literals are in test items.
        let offset_of_line: Vec<usize> = std::iter::once(0)
            .chain(lexed.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let literals = literals
            .into_iter()
            .filter(|(line, _)| {
                let at = offset_of_line.get(line - 1).copied().unwrap_or(0);
                !cut.iter().any(|&(s, e)| s <= at && at < e)
            })
            .collect();
        let children = declared_children(&lexed);
        let is_mod_file = path
            .file_name()
            .is_some_and(|n| n == "mod.rs" || n == root_file)
            && (path.file_name().is_some_and(|n| n == "mod.rs") || module.is_empty());
        let dir = if is_mod_file {
            path.parent().map(Path::to_path_buf).unwrap_or_default()
        } else {
            path.with_extension("")
        };
        for (name, child_test) in &children {
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(name).join("mod.rs");
            let child = if flat.is_file() { flat } else { nested };
            let mut m = module.clone();
            m.push(name.clone());
            todo.push((child, m, test_only || *child_test));
        }
        files.push(File {
            shown: path
                .strip_prefix(workspace())
                .unwrap_or(&path)
                .display()
                .to_string(),
            module,
            test_only,
            code,
            literals,
            lines: text.lines().count(),
            children,
        });
    }
    files
}

/// Every crate of the workspace: (name, its files).
fn crates() -> Vec<(String, Vec<File>)> {
    let mut out = Vec::new();
    let dir = workspace().join("crates");
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    names.sort();
    for c in names {
        let src = c.join("src");
        let root = ["lib.rs", "main.rs"]
            .into_iter()
            .find(|f| src.join(f).is_file());
        let Some(root) = root else { continue };
        let name = c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((name, read_crate(&src, root)));
    }
    out
}

/// The segments of each path a `use` tree names (`a::{b, c::d as e}` → `[a, b]`,
/// `[a, c, d]`; `a::*` → `[a]`; `a::{self}` → `[a]`).
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let tree = tree.trim();
        if let Some(open) = tree.find('{') {
            let head = &tree[..open];
            let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
            let mut p = prefix.to_vec();
            p.extend(segments(head));
            let mut depth = 0;
            let mut start = 0;
            for (i, ch) in inner.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&inner[start..i], &p, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            expand(&inner[start..], &p, out);
            return;
        }
        let tree = tree.split(" as ").next().unwrap_or("").trim();
        if tree.is_empty() {
            return;
        }
        let mut p = prefix.to_vec();
        p.extend(
            segments(tree)
                .into_iter()
                .filter(|s| s != "*" && s != "self"),
        );
        out.push(p);
    }
    fn segments(path: &str) -> Vec<String> {
        path.split("::")
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }
    let mut out = Vec::new();
    expand(tree, &[], &mut out);
    out
}

/// The path that starts at `rest` (`crate::a::b(…)` after `crate`): `::`-separated words.
fn path_after(rest: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut r = rest;
    while let Some(next) = r.strip_prefix("::") {
        let next = next.trim_start();
        let word: String = next
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if word.is_empty() {
            break;
        }
        r = &next[word.len()..];
        segs.push(word);
    }
    segs
}

/// Each module file `file` depends on, with the use or path that says so.
fn dependencies(file: &File, modules: &BTreeSet<Vec<String>>) -> BTreeMap<Vec<String>, String> {
    let here = &file.module;
    // `super` of module `a::b` (`a/b.rs` or `a/b/mod.rs`) is `a`.
    let parent: Vec<String> = here[..here.len().saturating_sub(1)].to_vec();
    let children: BTreeSet<&str> = file.children.iter().map(|(n, _)| n.as_str()).collect();
    let resolve = |segs: &[String]| -> Option<Vec<String>> {
        let first = segs.first()?;
        let full: Vec<String> = match first.as_str() {
            "crate" => segs[1..].to_vec(),
            "super" => {
                let mut p = parent.clone();
                let mut rest = &segs[1..];
                while rest.first().is_some_and(|s| s == "super") {
                    p.pop();
                    rest = &rest[1..];
                }
                p.extend(rest.iter().cloned());
                p
            }
            "self" => here.iter().chain(&segs[1..]).cloned().collect(),
            name if children.contains(name) => here.iter().chain(segs).cloned().collect(),
            _ => return None,
        };
        // The deepest file module the path names (the root takes no part).
        (1..=full.len())
            .rev()
            .map(|n| full[..n].to_vec())
            .find(|m| modules.contains(m))
    };
    let mut deps = BTreeMap::new();
    let code = &file.code;
    // `use` declarations, re-exports aside.
    for (at, rest) in words_after(code, "use") {
        let before = code[..at - 3].trim_end();
        let re_export = before.ends_with("pub")
            || before.ends_with(')')
                && before
                    .rfind("pub(")
                    .is_some_and(|p| !before[p..].contains([';', '{', '}']));
        if re_export {
            continue;
        }
        let Some(end) = rest.find(';') else { continue };
        let tree = &rest[..end];
        for segs in use_paths(tree) {
            if let Some(m) = resolve(&segs) {
                deps.entry(m)
                    .or_insert_with(|| format!("use {}", tree.trim()));
            }
        }
    }
    // Paths in code: crate::…, super::…, self::…, child::….
    let mut starts: Vec<&str> = vec!["crate", "super", "self"];
    starts.extend(children.iter().copied());
    for start in starts {
        for (_, rest) in words_after(code, start) {
            if !rest.starts_with("::") {
                continue;
            }
            let mut segs = vec![start.to_owned()];
            segs.extend(path_after(rest));
            if let Some(m) = resolve(&segs) {
                deps.entry(m).or_insert_with(|| segs.join("::"));
            }
        }
    }
    deps.remove(here);
    deps
}

/// Strongly connected components of more than one node (Tarjan).
fn cycles(edges: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>) -> Vec<Vec<Vec<String>>> {
    struct T<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Vec<String>) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(next) = t.edges.get(v) {
            for w in next.keys() {
                let Some((w, _)) = t.edges.get_key_value(w) else {
                    continue;
                };
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let l = t.low[w].min(t.low[v]);
                    t.low.insert(v, l);
                } else if t.on.contains(w) {
                    let l = t.index[w].min(t.low[v]);
                    t.low.insert(v, l);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_crate_has_an_import_cycle_between_its_files() {
    let mut found = Vec::new();
    for (name, files) in crates() {
        let code_files: Vec<&File> = files
            .iter()
            .filter(|f| !f.test_only && !f.module.is_empty())
            .collect();
        let modules: BTreeSet<Vec<String>> = code_files.iter().map(|f| f.module.clone()).collect();
        let edges: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = code_files
            .iter()
            .map(|f| (f.module.clone(), dependencies(f, &modules)))
            .collect();
        let shown = |m: &Vec<String>| {
            code_files
                .iter()
                .find(|f| &f.module == m)
                .map_or_else(|| m.join("::"), |f| f.shown.clone())
        };
        for comp in cycles(&edges) {
            let mut text = format!("{name}: a cycle between {} files:\n", comp.len());
            for m in &comp {
                for (to, why) in &edges[m] {
                    if comp.contains(to) {
                        text.push_str(&format!("  {} -> {} ({why})\n", shown(m), shown(to)));
                    }
                }
            }
            found.push(text);
        }
    }
    assert!(
        found.is_empty(),
        "import cycles (move what both sides need into a module of its own):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_source_file_is_over_1000_lines() {
    let long: Vec<String> = crates()
        .into_iter()
        .flat_map(|(_, files)| files)
        .filter(|f| !f.test_only && f.lines > 1000)
        .map(|f| format!("{}: {} lines", f.shown, f.lines))
        .collect();
    assert!(
        long.is_empty(),
        "split these along their concerns (tests may go in a file of their own):\n{}",
        long.join("\n")
    );
}

/// Names of the experiment folder's layout, whole (`"logs"`) or as a piece of a longer
/// literal (`"attempt-{k}"`).
const LAYOUT_NAMES: [&str; 8] = [
    "code",
    "logs",
    "checkpoints",
    "manifest.json",
    "timeline.jsonl",
    "job.sbatch",
    "failure.json",
    ".lock",
];
const LAYOUT_PIECES: [&str; 10] = [
    "attempt-",
    "rank-",
    ".heartbeat",
    ".error.json",
    ".metrics",
    ".times",
    "%j.out",
    "%j.err",
    "/logs",
    "/checkpoints",
];

#[test]
fn the_experiment_layout_is_named_only_in_herd_exp_layout() {
    let mut found = Vec::new();
    for (_, files) in crates() {
        for f in files.iter().filter(|f| !f.test_only) {
            if f.shown.ends_with("crates/herd-exp/src/layout.rs") {
                continue;
            }
            for (line, lit) in &f.literals {
                let whole = LAYOUT_NAMES.contains(&lit.as_str());
                let piece = LAYOUT_PIECES.iter().find(|p| lit.contains(*p));
                if whole || piece.is_some() {
                    found.push(format!("{}:{line}: {lit:?}", f.shown));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "paths inside an experiment come from herd_exp::layout (ExperimentDir, LogsDir, AttemptDir, RankFile); these literals spell them elsewhere:\n{}",
        found.join("\n")
    );
}

/// The files that may start a process, each with what it starts. A program the user
/// controls (a worker, the preflight's Python, py-spy, nvidia-smi) is started only through
/// `herd_slurm::user_program`, which withholds the job's secret.
const STARTS_PROCESSES: [(&str, &str); 8] = [
    (
        "crates/herd-slurm/src/worker/mod.rs",
        "user_program: every user program",
    ),
    (
        "crates/herd-slurm/src/scheduler/command.rs",
        "SLURM's commands",
    ),
    (
        "crates/herd-cli/src/launch.rs",
        "herd run: herd's own agents, which need the secret",
    ),
    (
        "crates/herd-cli/src/settle.rs",
        "herd settle: the agents' srun step",
    ),
    (
        "crates/herd-exp/src/manifest.rs",
        "git, on the project being submitted",
    ),
    (
        "crates/herd-container/src/charliecloud.rs",
        "squashfuse and fusermount, which mount a SquashFS image, with an empty environment",
    ),
    (
        "crates/herd-container/src/podman.rs",
        "podman's own commands (image inspect, run, ps, rm), without herd_container::WITHHELD",
    ),
    (
        "crates/herd-container/src/pyxis.rs",
        "srun --help and enroot remove (Pyxis), without herd_container::WITHHELD",
    ),
];

#[test]
fn user_programs_are_started_only_through_user_program() {
    let mut found = Vec::new();
    for (name, files) in crates() {
        if name == "herd-testbed" {
            continue;
        }
        for f in files.iter().filter(|f| !f.test_only) {
            if STARTS_PROCESSES
                .iter()
                .any(|(file, _)| f.shown.ends_with(file))
            {
                continue;
            }
            for (at, _) in f.code.match_indices("Command::new") {
                // clap's commands start nothing.
                if f.code[..at].ends_with("clap::") {
                    continue;
                }
                let line = f.code[..at].matches('\n').count() + 1;
                found.push(format!("{}:{line}", f.shown));
            }
        }
    }
    assert!(
        found.is_empty(),
        "start a user program with herd_slurm::user_program (it withholds HERD_JOB_SECRET), or add the file to STARTS_PROCESSES saying what it starts:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_check() {
    // The lexer keeps code, blanks comments and strings, and finds literals.
    let (code, lits) =
        lex("let a = \"x // y\"; // c \"z\"\nlet b = 'q'; let l: &'a str = r#\"raw \"q\"\"#;\n");
    assert!(code.contains("let a =") && !code.contains("x //") && !code.contains('z'));
    assert_eq!(
        lits,
        [(1, "x // y".to_owned()), (2, "raw \"q\"".to_owned())]
    );
    assert!(code.contains("&'a str"), "{code}");
    // Test items are cut, with their uses.
    let (plain, _) =
        without_tests("use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\nfn f() {}\n");
    assert!(plain.contains("crate::a") && !plain.contains("crate::b") && plain.contains("fn f"));
    // Use trees.
    assert_eq!(
        use_paths("crate::{a::{b, c as d}, e::*, self}"),
        [
            vec!["crate", "a", "b"],
            vec!["crate", "a", "c"],
            vec!["crate", "e"],
            vec!["crate"],
        ]
    );
    // A two-file cycle is found, a chain is not.
    let m = |s: &str| vec![s.to_owned()];
    let edge = |to: &str| BTreeMap::from([(m(to), String::new())]);
    let chain = BTreeMap::from([(m("a"), edge("b")), (m("b"), BTreeMap::new())]);
    assert!(cycles(&chain).is_empty());
    let cycle = BTreeMap::from([(m("a"), edge("b")), (m("b"), edge("a"))]);
    assert_eq!(cycles(&cycle), [vec![m("a"), m("b")]]);
    // This workspace's crates are all read.
    let names: Vec<String> = crates().into_iter().map(|(n, _)| n).collect();
    for want in [
        "herd-agent",
        "herd-cli",
        "herd-exp",
        "herd-plan",
        "herd-slurm",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} not read: {names:?}"
        );
    }
}

/// The timeline's event kinds are named in herd-exp's `timeline` module alone: every other
/// file writes and reads them as `herd_exp::timeline::Event`, never as strings. No string
/// literal elsewhere is `"event"` (the key that names a line's kind) or the name of a kind
/// that only the timeline uses (`attempt_started`, `worker_exit`, …; the one-word kinds,
/// `started`, `failed`, `restart`, are also words of the job states and the manifest's runs).
#[test]
fn timeline_events_are_named_only_in_herd_exp_timeline() {
    let kinds: Vec<&str> = herd_exp::timeline::kinds()
        .iter()
        .map(|k| k.name)
        .filter(|n| n.contains('_'))
        .collect();
    assert!(kinds.contains(&"attempt_started"), "{kinds:?}");
    let mut found = Vec::new();
    for (_, files) in crates() {
        for f in files.iter().filter(|f| !f.test_only) {
            if f.shown.ends_with("crates/herd-exp/src/timeline.rs")
                || f.shown.contains("crates/herd-exp/src/timeline/")
            {
                continue;
            }
            for (line, lit) in &f.literals {
                if lit == "event" || kinds.contains(&lit.as_str()) {
                    found.push(format!("{}:{line}: {lit:?}", f.shown));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "timeline events are written and read as herd_exp::timeline::Event (Entry, append, read); these literals name them elsewhere:\n{}",
        found.join("\n")
    );
}
