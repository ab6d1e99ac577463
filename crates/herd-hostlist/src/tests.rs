use super::*;

fn ex(e: &str) -> Vec<String> {
    expand(e).unwrap_or_else(|err| panic!("{e}: {err}"))
}

// Expected values below are what `scontrol show hostnames` / `show hostlist` printed on
// the test bed (slurm 22.05.8).
#[test]
fn expands_like_scontrol() {
    let cases: &[(&str, &str)] = &[
        ("a[1-2]b[1-2]", "a1b1 a1b2 a2b1 a2b2"),
        ("a[1-2][3-4]", "a13 a14 a23 a24"),
        (
            "a[1-2]b[1-2]c[1-2]",
            "a1b1c1 a1b1c2 a2b1c1 a2b1c2 a1b2c1 a1b2c2 a2b2c1 a2b2c2",
        ),
        ("n[8-10]", "n8 n9 n10"),
        ("n[008-10]", "n008 n009 n010"),
        ("n[01-3]", "n01 n02 n03"),
        ("n[1-03]", "n1 n2 n3"),
        ("n[9-011]", "n9 n10 n11"),
        ("a,b,a", "a b a"),
        ("x[1,1,2]", "x1 x1 x2"),
        ("n[1-2],n[2-3]", "n1 n2 n2 n3"),
        ("gpu-a[01-03],login1", "gpu-a01 gpu-a02 gpu-a03 login1"),
        ("[1-2]", "1 2"),
        ("a[0-1],,b", "a0 a1 b"),
        (" a , b ", "a b"),
        ("a\tb\nc\r\nd", "a b c d"),
        ("n[0000000000000000001]", "n0000000000000000001"),
        ("n[18446744073709551615]", "n18446744073709551615"),
        ("n[1-2] m[3-4]", "n1 n2 m3 m4"),
        ("n[3,1,2]", "n3 n1 n2"),
        ("n1[1-2]", "n11 n12"),
        ("", ""),
    ];
    for (expr, want) in cases {
        assert_eq!(ex(expr).join(" "), *want, "expand({expr:?})");
    }
}

#[test]
fn suffix_after_last_group_is_allowed() {
    assert_eq!(ex("node[1-2]-ib"), ["node1-ib", "node2-ib"]);
}

#[test]
fn compresses_like_scontrol() {
    let cases: &[(&str, &str)] = &[
        ("n2,n1,n3", "n[2,1,3]"),
        ("n1,n1,n2", "n[1,1-2]"),
        ("n01,n2,n03", "n[01,2,03]"),
        ("n8,n9,n10", "n[8-10]"),
        ("n08,n09,n10", "n[08-10]"),
        ("a1b1,a1b2,a2b1", "a1b[1-2],a2b1"),
        ("a,b,a", "a,b,a"),
        ("n1-ib,n2-ib", "n1-ib,n2-ib"),
        (
            "gpu-a01,gpu-a02,login1,gpu-a03",
            "gpu-a[01-02],login1,gpu-a03",
        ),
        ("n1,m1,n2", "n1,m1,n2"),
        ("n009,n010,n011", "n[009-011]"),
        ("n9,n010", "n[9,010]"),
        ("x", "x"),
        ("n0,n00,n000", "n[0,00,000]"),
        ("n1,n3,n5,n6", "n[1,3,5-6]"),
        ("node1,node2,Node3", "node[1-2],Node3"),
        ("n-1,n-2", "n-[1-2]"),
        ("n001,n1", "n[001,1]"),
        ("n10,n9", "n[10,9]"),
        ("1,2,3", "[1-3]"),
        (
            "n1234567890123456789,n1234567890123456790",
            "n[1234567890123456789-1234567890123456790]",
        ),
        ("n99999999999999999999,n1", "n99999999999999999999,n1"),
    ];
    for (list, want) in cases {
        let hosts: Vec<&str> = list.split(',').collect();
        assert_eq!(compress(&hosts), *want, "compress({list:?})");
        assert_eq!(ex(want), hosts, "expand(compress({list:?}))");
    }
}

#[test]
fn errors_name_the_column_and_what_was_expected() {
    let err = |e: &str| HostList::parse(e).expect_err(e);
    let e = err("n[5-3]");
    assert_eq!(e.kind, ErrorKind::Descending { lo: 5, hi: 3 });
    assert_eq!(e.column, 3);
    assert_eq!(
        e.to_string(),
        "range 5-3 goes down: write the lower bound first at column 3 of `n[5-3]`"
    );
    assert_eq!(err("n[]").kind, ErrorKind::ExpectedNumber(Some(']')));
    assert_eq!(err("n[a-b]").kind, ErrorKind::ExpectedNumber(Some('a')));
    assert_eq!(err("n[-1]").column, 3);
    assert_eq!(err("n[1--2]").kind, ErrorKind::ExpectedNumber(Some('-')));
    let unclosed = err("gpu[1-2");
    assert_eq!(
        (unclosed.kind.clone(), unclosed.column),
        (ErrorKind::Unclosed, 4)
    );
    let text_in_group = err("gpu[1-2,n3");
    assert_eq!(text_in_group.kind, ErrorKind::ExpectedNumber(Some('n')));
    assert_eq!(text_in_group.column, 9);
    assert_eq!(err("n[1-").kind, ErrorKind::ExpectedNumber(None));
    assert_eq!(err("n[1-3]][").kind, ErrorKind::UnexpectedClose);
    assert_eq!(err("a]b").column, 2);
    assert_eq!(err("n[1[2]]").kind, ErrorKind::Nested);
    assert_eq!(err("n[1 2]").kind, ErrorKind::ExpectedRangeEnd(Some(' ')));
    assert_eq!(
        err("n[99999999999999999999]").kind,
        ErrorKind::NumberTooLarge
    );
    assert_eq!(
        err("né[x]").column,
        4,
        "columns count characters, not bytes"
    );
}

#[test]
fn expansion_is_bounded() {
    let limits = Limits { max_hosts: 100 };
    assert_eq!(expand_with("n[1-100]", &limits).map(|h| h.len()), Ok(100));
    let e = expand_with("n[1-50],m[1-51]", &limits).expect_err("101 hosts");
    assert_eq!(e.kind, ErrorKind::TooManyHosts { limit: 100 });
    assert_eq!(e.column, 9, "points at the item that crosses the limit");
    // The default limit stops a cartesian bomb before allocating anything.
    let bomb = "n[0-999999][0-999999][0-999999][0-999999]";
    assert!(matches!(
        HostList::parse(bomb).map_err(|e| e.kind),
        Err(ErrorKind::TooManyHosts { .. })
    ));
    assert_eq!(count("n[1-1000000][1-1000000]"), Ok(1_000_000_000_000));
}

#[test]
fn count_matches_expansion() {
    for e in ["", "a", "n[1-3,5],m[01-02]x[1-3]", "a,a,a"] {
        assert_eq!(count(e).ok(), Some(ex(e).len() as u64), "{e}");
    }
}

#[test]
fn natural_order() {
    let mut hosts: Vec<String> = ["n10", "n9", "m1", "n01", "n1", "n1a", "n"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    sort_hosts(&mut hosts);
    assert_eq!(hosts, ["m1", "n", "n1", "n01", "n1a", "n9", "n10"]);
}

#[test]
fn set_operations() {
    let a = ex("n[1-5]");
    let b = ex("n[4-8],n4");
    let lists = [a, b];
    let op = |op| compress(&set_op(op, &lists));
    assert_eq!(op(SetOp::Union), "n[1-8]");
    assert_eq!(op(SetOp::Intersection), "n[4-5]");
    assert_eq!(op(SetOp::Difference), "n[1-3]");
    assert_eq!(op(SetOp::SymmetricDifference), "n[1-3,6-8]");
}

#[test]
fn dedup_keeps_first_occurrence() {
    let mut h = ex("n3,n1,n3,n2,n1");
    dedup_hosts(&mut h);
    assert_eq!(h, ["n3", "n1", "n2"]);
}
