//! A table of docs/ kept equal to the definition it is made from (the keys of
//! docs/submit.md, the options of docs/launch.md, the experiment folder's layout and the
//! timeline's events of docs/design.md, …), for the tests of every crate that has one.
//! `HERD_UPDATE_DOCS=1` rewrites it.

/// The table between `<!-- NAME: begin -->` and `<!-- NAME: end -->` of `docs/FILE`: `None`
/// when it differed from `want` and `HERD_UPDATE_DOCS` rewrote it, else what it says now.
pub fn table_in(file: &str, name: &str, want: &str) -> Option<String> {
    let path = crate::repo_root()
        .join("docs")
        .join(file)
        .display()
        .to_string();
    let (start, end) = (
        format!("<!-- {name}: begin -->\n"),
        format!("<!-- {name}: end -->"),
    );
    let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (before, rest) = doc
        .split_once(&start)
        .unwrap_or_else(|| panic!("{path} has no {start:?}"));
    let (table, after) = rest
        .split_once(&end)
        .unwrap_or_else(|| panic!("{path} has no {end:?}"));
    if table != want && std::env::var_os("HERD_UPDATE_DOCS").is_some() {
        // Written beside and renamed over it: tests that read it meanwhile (nextest runs
        // each in a process of its own) see the old text or the new, never a part.
        let updated = format!("{before}{start}{want}{end}{after}");
        let tmp = format!("{path}.{}.tmp", std::process::id());
        std::fs::write(&tmp, updated).unwrap_or_else(|e| panic!("{tmp}: {e}"));
        std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("{path}: {e}"));
        return None;
    }
    Some(table.to_owned())
}
