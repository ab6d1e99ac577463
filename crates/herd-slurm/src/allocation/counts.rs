//! SLURM's per-node count lists: `SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`, …
//!
//! `2(x3),1` means 2, 2, 2, 1. Both seeds read only the first character of such a value
//! (`2(x3)` → 2 and `16` → 1); this reads all of it.

/// A malformed count list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not a per-node count list like `2(x3),1`: {why}")]
pub struct CountsError {
    /// The text given.
    pub value: String,
    /// What is wrong with it.
    pub why: String,
}

/// Most entries a count list may expand to (a node count; far above any real cluster).
pub const MAX_ENTRIES: u64 = 1_000_000;

/// Parse `2(x3),1` into `[2, 2, 2, 1]`.
pub fn parse_counts(value: &str) -> Result<Vec<u32>, CountsError> {
    let err = |why: String| CountsError {
        value: value.to_owned(),
        why,
    };
    let mut out = Vec::new();
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return Err(err("it is empty".into()));
    }
    for part in trimmed.split(',') {
        let (count, repeat) = match part.split_once('(') {
            None => (part, 1u64),
            Some((count, rest)) => {
                let times = rest
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| err(format!("`{part}`: expected `N(xM)`")))?;
                let times: u64 = times
                    .parse()
                    .map_err(|_| err(format!("`{part}`: repeat `{times}` is not a number")))?;
                if times == 0 {
                    return Err(err(format!("`{part}`: repeat count 0")));
                }
                (count, times)
            }
        };
        let count: u32 = count
            .parse()
            .map_err(|_| err(format!("`{count}` is not a whole number")))?;
        if out.len() as u64 + repeat > MAX_ENTRIES {
            return Err(err(format!("more than {MAX_ENTRIES} entries")));
        }
        out.extend(std::iter::repeat_n(count, repeat as usize));
    }
    Ok(out)
}

/// Format counts the way SLURM does: runs of equal values as `N(xM)`.
pub fn format_counts(counts: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|&&c| c == counts[i]).count();
        parts.push(if run == 1 {
            counts[i].to_string()
        } else {
            format!("{}(x{run})", counts[i])
        });
        i += run;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_slurm_forms() {
        assert_eq!(parse_counts("2(x3)"), Ok(vec![2, 2, 2]));
        assert_eq!(parse_counts("3,1(x2)"), Ok(vec![3, 1, 1]));
        assert_eq!(parse_counts("16"), Ok(vec![16]));
        assert_eq!(parse_counts("2(x3),1"), Ok(vec![2, 2, 2, 1]));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "x",
            "2(3)",
            "2(x)",
            "2(x0)",
            "2(x3",
            "-1",
            "2,,1",
            "2(x1000001)",
        ] {
            let e = parse_counts(bad).expect_err(bad);
            assert!(e.to_string().contains("per-node count list"), "{e}");
        }
    }

    #[test]
    fn formats_like_slurm() {
        assert_eq!(format_counts(&[2, 2, 2]), "2(x3)");
        assert_eq!(format_counts(&[3, 1, 1]), "3,1(x2)");
        assert_eq!(format_counts(&[2, 2, 2, 1]), "2(x3),1");
        assert_eq!(format_counts(&[]), "");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(counts in proptest::collection::vec(0u32..5, 1..40)) {
            prop_assert_eq!(parse_counts(&format_counts(&counts)), Ok(counts));
        }
    }
}
