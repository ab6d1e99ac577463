//! Fuzz target for `herd_hostlist`'s parser: any UTF-8 text (invalid bytes replaced) is
//! parsed with a small host limit, and the results must agree with each other.
//!
//! Checked for every input:
//! - nothing panics (parse, expand, count, compress, error messages);
//! - an error from `parse_with` is the error `count` finds too, unless it is the host limit;
//! - on success: `len()` is the number of hosts `for_each` yields, and what `count` says;
//!   `hosts()`, `to_hosts()` (and its `get`), `expand_hosts`, `expand_with` and `write_to`
//!   give the same hosts; `is_empty()` agrees;
//! - `expand(compress(hosts)) == hosts` whenever no host holds a comma, whitespace or bracket
//!   (for the parsed hosts, and for the input read as one host per line).

#![no_main]

use herd_hostlist::{
    compress, count, expand, expand_hosts, expand_with, ErrorKind, HostList, Limits,
};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits { max_hosts: 10_000 };

/// Hosts `compress` must give back unchanged through `expand`.
fn round_trips(hosts: &[String]) -> bool {
    hosts.iter().all(|h| {
        !h.is_empty()
            && !h.contains(|c: char| c == ',' || c == '[' || c == ']' || c.is_whitespace())
    })
}

fn check_round_trip(hosts: &[String]) {
    let short = compress(hosts);
    match expand(&short) {
        Ok(back) => assert_eq!(back, hosts, "expand(compress(hosts)) via {short:?}"),
        Err(e) => panic!("compress gave {short:?}, which does not parse: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let expr = String::from_utf8_lossy(data);
    let expr = expr.as_ref();

    let list = match HostList::parse_with(expr, &LIMITS) {
        Ok(list) => list,
        Err(e) => {
            let message = e.to_string();
            assert!(!message.is_empty());
            assert!(
                e.column >= 1 && e.column <= expr.chars().count() + 1,
                "column of {e:?}"
            );
            match e.kind {
                // Without the limit the expression may be fine, or fail later on.
                ErrorKind::TooManyHosts { .. } => {
                    if let Ok(n) = count(expr) {
                        assert!(n > LIMITS.max_hosts, "over the limit, yet count() = {n}");
                    }
                }
                // A syntax error does not depend on the limit.
                _ => assert_eq!(count(expr), Err(e), "count() and parse_with() disagree"),
            }
            return;
        }
    };

    let n = list.len();
    assert!(n <= LIMITS.max_hosts);
    assert_eq!(list.is_empty(), n == 0);
    assert_eq!(count(expr), Ok(n), "count() and len() disagree");

    let mut yielded: u64 = 0;
    let mut hosts: Vec<String> = Vec::new();
    list.for_each(|h| {
        yielded += 1;
        hosts.push(h.to_owned());
    });
    assert_eq!(yielded, n, "len() and for_each disagree");
    assert_eq!(list.hosts(), hosts);
    let packed = list.to_hosts();
    assert_eq!(packed.len() as u64, n, "to_hosts() and len() disagree");
    assert!(
        packed.iter().eq(hosts.iter().map(String::as_str)),
        "to_hosts() and for_each disagree"
    );
    for (i, h) in hosts.iter().enumerate() {
        assert_eq!(packed.get(i), Some(h.as_str()));
    }
    assert_eq!(packed.get(hosts.len()), None);
    assert_eq!(expand_hosts(expr).as_ref(), Ok(&packed));
    assert_eq!(expand_with(expr, &LIMITS).as_ref(), Ok(&hosts));

    let mut written = Vec::new();
    list.write_to(&mut written, "\n").expect("writing to a Vec");
    let expected: String = hosts.iter().map(|h| format!("{h}\n")).collect();
    assert_eq!(String::from_utf8(written).as_deref(), Ok(expected.as_str()));

    if round_trips(&hosts) {
        check_round_trip(&hosts);
    }

    // The same bytes as a host list, one host per line: compress must round-trip it too.
    let lines: Vec<String> = expr.split('\n').map(str::to_owned).collect();
    if lines.len() <= 10_000 && round_trips(&lines) {
        check_round_trip(&lines);
    }
});
