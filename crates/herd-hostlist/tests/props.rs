//! Properties of the hostlist model on random input.
//!
//! - `expand(compress(hosts)) == hosts` for any list of plain hostnames (order, duplicates);
//! - a random expression, rendered from a random structure, expands exactly as a
//!   straightforward model of that structure says, and `count` agrees;
//! - sorting and deduplicating before compressing loses nothing either.

use herd_hostlist::{compress, count, dedup_hosts, expand, natural_cmp, sort_hosts};
use proptest::prelude::*;

fn hostname() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        Just(String::new()),
        Just("n".to_owned()),
        Just("gpu-a".to_owned()),
        Just("rack1n".to_owned()),
        Just("node-".to_owned()),
        Just("login".to_owned()),
        "[a-z][a-z0-9._-]{0,6}",
    ];
    let number = prop_oneof![
        Just(None),
        (0u64..40, 0usize..4).prop_map(Some),
        (0u64..2_000_000, 0usize..9).prop_map(Some),
    ];
    (prefix, number).prop_filter_map("hostnames are not empty", |(p, n)| {
        let host = match n {
            None => p,
            Some((v, w)) => format!("{p}{v:0w$}"),
        };
        (!host.is_empty()).then_some(host)
    })
}

fn hostnames() -> impl Strategy<Value = Vec<String>> {
    // Runs of consecutive numbers make compression interesting; plain picks make it messy.
    let run = (hostname(), 1u64..20).prop_map(|(h, len)| {
        let digits = h.bytes().rev().take_while(u8::is_ascii_digit).count();
        if digits == 0 || digits > 12 {
            return vec![h];
        }
        let (p, d) = h.split_at(h.len() - digits);
        let start: u64 = d.parse().unwrap_or(0);
        (start..start + len)
            .map(|v| format!("{p}{v:0digits$}"))
            .collect()
    });
    proptest::collection::vec(run, 0..12).prop_map(|runs| runs.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn compress_then_expand_is_identity(hosts in hostnames()) {
        let short = compress(&hosts);
        prop_assert_eq!(expand(&short).map_err(|e| e.to_string()), Ok(hosts.clone()), "compressed: {}", short);
    }

    #[test]
    fn sorted_unique_compress_round_trips(mut hosts in hostnames()) {
        dedup_hosts(&mut hosts);
        sort_hosts(&mut hosts);
        let short = compress(&hosts);
        prop_assert_eq!(expand(&short).map_err(|e| e.to_string()), Ok(hosts), "compressed: {}", short);
    }

    #[test]
    fn natural_order_is_a_total_order(a in hostname(), b in hostname(), c in hostname()) {
        use std::cmp::Ordering::*;
        prop_assert_eq!(natural_cmp(&a, &b), natural_cmp(&b, &a).reverse());
        prop_assert_eq!(natural_cmp(&a, &b) == Equal, a == b);
        if natural_cmp(&a, &b) != Greater && natural_cmp(&b, &c) != Greater {
            prop_assert_ne!(natural_cmp(&a, &c), Greater);
        }
    }
}

/// A random expression's structure: items of text and groups of (lo, hi, width) ranges.
#[derive(Debug, Clone)]
enum Piece {
    Text(String),
    Group(Vec<(u64, u64, usize)>),
}

fn piece() -> impl Strategy<Value = Piece> {
    let range = (0u64..120, 0u64..12, 0usize..4).prop_map(|(lo, span, w)| (lo, lo + span, w));
    prop_oneof![
        "[a-z][a-z0-9.-]{0,4}".prop_map(Piece::Text),
        proptest::collection::vec(range, 1..4).prop_map(Piece::Group),
    ]
}

fn item() -> impl Strategy<Value = Vec<Piece>> {
    proptest::collection::vec(piece(), 1..4).prop_map(|mut pieces| {
        // Adjacent text pieces would render as one; merge them so the model matches.
        pieces.dedup_by(|b, a| match (a, b) {
            (Piece::Text(a), Piece::Text(b)) => {
                a.push_str(b);
                true
            }
            _ => false,
        });
        pieces
    })
}

/// What may stand between two items: commas, whitespace (newlines included: herd's
/// deliberate difference from SLURM, which makes a newline part of a name) and empty items.
fn separator() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(","),
        Just(" "),
        Just(", "),
        Just("\n"),
        Just("\r\n"),
        Just("\t"),
        Just(",,"),
        Just(" ,\n "),
    ]
}

/// Render the items, each after its separator (the first one's is not written); a range's
/// width is the lower bound's written width (padded to `w`).
fn render(items: &[(Vec<Piece>, &str)]) -> String {
    let mut out = String::new();
    for (i, (pieces, sep)) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        for p in pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Group(ranges) => {
                    let parts: Vec<String> = ranges
                        .iter()
                        .map(|&(lo, hi, w)| {
                            if lo == hi {
                                format!("{lo:0w$}")
                            } else {
                                format!("{lo:0w$}-{hi}")
                            }
                        })
                        .collect();
                    out.push_str(&format!("[{}]", parts.join(",")));
                }
            }
        }
    }
    out
}

/// The model: every combination of the groups' values, each padded to its range's written
/// lower-bound width, in SLURM's order: the last group varies fastest, then the first, the
/// second, …, and the group before the last varies slowest.
fn model(items: &[(Vec<Piece>, &str)]) -> Vec<String> {
    let mut all = Vec::new();
    for (pieces, _) in items {
        let groups: Vec<Vec<String>> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Group(ranges) => Some(
                    ranges
                        .iter()
                        .flat_map(|&(lo, hi, w)| {
                            let width = format!("{lo:0w$}").len();
                            (lo..=hi).map(move |v| format!("{v:0width$}"))
                        })
                        .collect(),
                ),
                Piece::Text(_) => None,
            })
            .collect();
        let n = groups.len();
        // Loop order, slowest first.
        let order: Vec<usize> = if n < 2 {
            (0..n).collect()
        } else {
            (0..n - 1).rev().chain([n - 1]).collect()
        };
        let mut choice = vec![0usize; n];
        fn walk(
            depth: usize,
            order: &[usize],
            groups: &[Vec<String>],
            choice: &mut Vec<usize>,
            pieces: &[Piece],
            out: &mut Vec<String>,
        ) {
            if depth == order.len() {
                let mut host = String::new();
                let mut g = 0;
                for p in pieces {
                    match p {
                        Piece::Text(t) => host.push_str(t),
                        Piece::Group(_) => {
                            host.push_str(&groups[g][choice[g]]);
                            g += 1;
                        }
                    }
                }
                out.push(host);
                return;
            }
            let g = order[depth];
            for i in 0..groups[g].len() {
                choice[g] = i;
                walk(depth + 1, order, groups, choice, pieces, out);
            }
        }
        walk(0, &order, &groups, &mut choice, pieces, &mut all);
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_expressions_expand_like_the_model(items in proptest::collection::vec((item(), separator()), 0..6)) {
        let expr = render(&items);
        let want = model(&items);
        prop_assert_eq!(expand(&expr).map_err(|e| e.to_string()), Ok(want.clone()), "expr: {}", expr);
        prop_assert_eq!(count(&expr).ok(), Some(want.len() as u64));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn fast_sort_agrees_with_natural_cmp(hosts in hostnames()) {
        let mut fast = hosts.clone();
        sort_hosts(&mut fast);
        let mut slow = hosts.clone();
        slow.sort_by(|a, b| natural_cmp(a, b));
        prop_assert_eq!(fast, slow);
    }

    #[test]
    fn packed_hosts_equal_owned_hosts(items in proptest::collection::vec((item(), separator()), 0..4)) {
        let expr = render(&items);
        let list = herd_hostlist::HostList::parse(&expr).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let packed = list.to_hosts();
        prop_assert_eq!(packed.len() as u64, list.len());
        prop_assert_eq!(packed.to_vec(), list.hosts());
        prop_assert_eq!(packed.iter().collect::<Vec<_>>(), list.hosts());
    }
}
