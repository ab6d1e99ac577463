//! Text tables of a sweep's runs: padded markdown for `herd report`, the plain columns of
//! `herd status`; numbers right-aligned.

/// How a column's cells stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Words.
    Left,
    /// Numbers.
    Right,
}

fn widths(head: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    let mut width: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    width
}

fn pad(cell: &str, width: usize, align: Align) -> String {
    match align {
        Align::Left => format!("{cell:<width$}"),
        Align::Right => format!("{cell:>width$}"),
    }
}

/// A markdown table, its columns padded so it reads as a table in a terminal too, right-
/// aligned columns marked `---:`.
pub fn markdown(head: &[String], align: &[Align], rows: &[Vec<String>]) -> String {
    let width: Vec<usize> = widths(head, rows).into_iter().map(|w| w.max(3)).collect();
    let line = |cells: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cells.iter().enumerate() {
            s.push_str(&format!(" {} |", pad(c, width[i], align[i])));
        }
        s.push('\n');
        s
    };
    let mut s = line(head);
    s.push('|');
    for (w, a) in width.iter().zip(align) {
        match a {
            Align::Left => s.push_str(&format!("{}|", "-".repeat(w + 2))),
            Align::Right => s.push_str(&format!("{}:|", "-".repeat(w + 1))),
        }
    }
    s.push('\n');
    for r in rows {
        s.push_str(&line(r));
    }
    s
}

/// Columns as `herd status` prints them: two spaces apart, the last one unpadded.
pub fn plain(head: &[String], align: &[Align], rows: &[Vec<String>]) -> String {
    let width = widths(head, rows);
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&pad(c, width[i], align[i]));
                s.push_str("  ");
            }
        }
        format!("{}\n", s.trim_end())
    };
    let mut s = line(head);
    for r in rows {
        s.push_str(&line(r));
    }
    s
}

/// A run's value of each of `columns` (key, numeric), `missing` where it has none: the
/// value cells that start a run's row in the report's and the status's tables.
pub fn value_cells(
    columns: &[(String, bool)],
    values: &[(String, String)],
    missing: &str,
) -> Vec<String> {
    columns
        .iter()
        .map(|(k, _)| {
            values
                .iter()
                .find(|(rk, _)| rk == k)
                .map_or_else(|| missing.to_owned(), |(_, v)| v.clone())
        })
        .collect()
}
