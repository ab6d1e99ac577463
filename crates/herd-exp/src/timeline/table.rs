//! docs/design.md's table of the timeline's events, made from [`kinds`].

use super::event::{kinds, TAG, TIME, UNIX_MS};

/// The markdown table of every kind of event, its fields, their types and what they hold
/// (docs/design.md §4 shows it), then what the type words mean.
pub fn table() -> String {
    let mut t =
        String::from("| event | written by | field | type | what |\n|---|---|---|---|---|\n");
    let row = |t: &mut String, cells: [&str; 5]| {
        t.push_str(&format!("| {} |\n", cells.join(" | ")));
    };
    let envelope = [
        (
            TIME,
            "string",
            "when: RFC 3339, UTC, milliseconds (`2026-11-30T17:40:12.123Z`)",
        ),
        (
            UNIX_MS,
            "integer",
            "the same moment, milliseconds since the Unix epoch",
        ),
        (TAG, "string", "the kind: one of those below"),
    ];
    for (i, (name, ty, what)) in envelope.into_iter().enumerate() {
        let first = if i == 0 { "every line" } else { "" };
        row(&mut t, [first, "", &format!("`{name}`"), ty, what]);
    }
    for k in kinds() {
        row(&mut t, [&format!("`{}`", k.name), k.writer, "", "", k.what]);
        for f in &k.fields {
            row(&mut t, ["", "", &format!("`{}`", f.name), &f.ty, f.what]);
        }
    }
    t.push_str(
        "\nTypes: `?` may be `null` or left out; `[…]` a list; `job id` a string, SLURM's job id \
         (`\"41\"`; an array task `\"40_2\"`, as `herd submit` recorded it; older agents wrote \
         a plain job's as a number, still read); `exit` how a worker ended, `{\"code\": 1}` or \
         `{\"signal\": \"SIGKILL\"}` (as in `failure.json`). A line of a kind this table does not \
         list, or that does not parse, is passed over by every reader.\n",
    );
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/design.md's event table is the one the type describes. `HERD_UPDATE_DOCS=1`
    /// rewrites it.
    #[test]
    fn the_design_doc_lists_every_timeline_event() {
        let want = table();
        let Some(shown) = herd_testbed::docs::table_in("design.md", "timeline table", &want) else {
            return;
        };
        assert!(
            shown == want,
            "docs/design.md: the timeline's event table differs from crates/herd-exp/src/timeline/event.rs; \
             rewrite it with `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-exp timeline_event`, \
             or paste:\n{want}"
        );
    }

    /// Every kind and every field has a row; a kind's rows follow its own.
    #[test]
    fn the_table_has_a_row_for_every_kind_and_field() {
        let t = table();
        let rows: Vec<&str> = t.lines().filter(|l| l.starts_with("| ")).collect();
        let fields: usize = kinds().iter().map(|k| k.fields.len()).sum();
        assert_eq!(rows.len(), 1 + 3 + kinds().len() + fields, "{t}");
        for name in ["blame", "replace", "preflight_failed", "queued", "ended"] {
            assert!(
                rows.iter().any(|r| r.starts_with(&format!("| `{name}` |"))),
                "{name}: {t}"
            );
        }
    }
}
