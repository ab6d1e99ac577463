use super::*;
use proptest::prelude::*;

fn flags(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

fn spec(args: &[&str], file: Option<&SweepFile>) -> SweepSpec {
    SweepSpec::build(&flags(args), file).unwrap_or_else(|e| panic!("{e}"))
}

fn problems(args: &[&str], file: Option<&SweepFile>) -> Vec<String> {
    SweepSpec::build(&flags(args), file)
        .expect_err("refused")
        .problems
}

fn names(spec: &SweepSpec) -> Vec<String> {
    spec.runs()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .map(|r| r.name)
        .collect()
}

fn file(text: &str) -> SweepFile {
    SweepFile::parse(text, Path::new("sweep.toml")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_grid_is_the_product_first_key_slowest() {
    let s = spec(&["lr=0.1,0.01", "seed=1,2,3"], None);
    assert_eq!(s.keys(), ["lr", "seed"]);
    assert_eq!(
        names(&s),
        [
            "lr=0.1,seed=1",
            "lr=0.1,seed=2",
            "lr=0.1,seed=3",
            "lr=0.01,seed=1",
            "lr=0.01,seed=2",
            "lr=0.01,seed=3"
        ]
    );
    let runs = s.runs().expect("runs");
    assert_eq!(runs[4].index, 4);
    assert_eq!(
        runs[4].values,
        [("lr".into(), "0.01".into()), ("seed".into(), "2".into())]
    );
}

#[test]
fn a_sweep_file_gives_a_grid_in_its_order_and_explicit_runs() {
    let f = file(
        r#"
[grid]
seed = [1, 2]
lr = ["3e-4", 1e-3, 0.5]
warm = [true]

[[runs]]
seed = 9
lr = "1"
warm = false
batch = 64
"#,
    );
    assert_eq!(
        f.grid,
        [
            ("seed".to_owned(), vec!["1".to_owned(), "2".to_owned()]),
            (
                "lr".to_owned(),
                vec!["3e-4".to_owned(), "0.001".to_owned(), "0.5".to_owned()]
            ),
            ("warm".to_owned(), vec!["true".to_owned()]),
        ],
        "strings as written, numbers as TOML reads them, the file's order"
    );
    // File keys come before flag keys; explicit runs after the grid, with every key.
    let f = file(
        r#"
[grid]
seed = [1, 2]

[[runs]]
seed = 9
batch = 128
"#,
    );
    let s = spec(&["batch=32,64"], Some(&f));
    assert_eq!(s.keys(), ["seed", "batch"]);
    assert_eq!(
        names(&s),
        [
            "seed=1,batch=32",
            "seed=1,batch=64",
            "seed=2,batch=32",
            "seed=2,batch=64",
            "seed=9,batch=128"
        ]
    );
    // Explicit runs alone: their keys in the first run's order.
    let s = spec(
        &[],
        Some(&file(
            "[[runs]]\nmodel = \"vit\"\nnodes = 2\n[[runs]]\nnodes = 4\nmodel = \"resnet\"\n",
        )),
    );
    assert_eq!(names(&s), ["model=vit,nodes=2", "model=resnet,nodes=4"]);
}

#[test]
fn every_problem_is_collected_and_names_what_to_change() {
    let p = problems(
        &[
            "1lr=1", "seed=1,2", "seed=3", "bs=", "x=a,,b", "y=a\u{7}", "z=q,q", "nonsense",
        ],
        None,
    );
    let want = [
        "--sweep \"nonsense\": not KEY=V1,V2,…",
        "`1lr` is not a sweep key",
        "key `seed` is given twice",
        "key `bs` has no values",
        "key `x` has an empty value",
        "key `y` has a value with the control character U+0007",
        "key `z` has a value twice",
    ];
    for w in want {
        assert!(p.iter().any(|m| m.contains(w)), "no {w:?} in {p:#?}");
    }
    assert_eq!(p.len(), want.len(), "{p:#?}");

    let f = file("[grid]\nlr = [1, 2]\n");
    let p = problems(&["lr=3"], Some(&f));
    assert_eq!(
        p,
        ["key `lr` is given both in the sweep file's [grid] and by --sweep: keep one"]
    );

    let p = problems(
        &["a=1,2", "b=1"],
        Some(&file("[[runs]]\na = 1\nb = 1\n[[runs]]\na = 5\n")),
    );
    assert_eq!(
        p,
        [
            "the sweep file's run 2 lacks b: every run gives the same keys (a, b)",
            "runs 0 and 2 are the same (a=1,b=1): drop one",
        ]
    );
    let p = problems(&["a=1"], Some(&file("[[runs]]\na = \"x\\u0000y\"\n")));
    assert!(
        p[0].contains("run 1 gives `a` a value with the control character U+0000"),
        "{p:?}"
    );
    assert_eq!(
        problems(&[], None),
        ["the sweep has no keys: give `--sweep KEY=V1,V2`, or a sweep file with a [grid] or [[runs]]"]
    );
    let many: Vec<String> = (0..1001).map(|i| i.to_string()).collect();
    let arg = format!("a={}", many.join(","));
    let p = SweepSpec::build(&[arg], None)
        .expect_err("too many")
        .problems;
    assert_eq!(
        p,
        ["the sweep has 1001 runs, more than 1000: give fewer values"]
    );
    let ten: Vec<String> = (0..10)
        .map(|i| format!("k{i}={}", many[..10].join(",")))
        .collect();
    let p = SweepSpec::build(&ten, None).expect_err("too many").problems;
    assert_eq!(
        p,
        ["the sweep has 10000000000 runs, more than 1000: give fewer values"]
    );
}

#[test]
fn a_bad_sweep_file_says_where() {
    for (text, want) in [
        ("grid = 3\n", "`grid` is a integer, not a table"),
        (
            "[grid]\nlr = 3\n",
            "grid key `lr` is a integer, not an array of values",
        ),
        ("[grid]\nlr = [[1]]\n", "grid key `lr` has a array value"),
        ("[other]\n", "unknown key `other`"),
        ("[grid\n", "sweep.toml: TOML parse error"),
        ("runs = 1\n", "`runs` is a integer"),
    ] {
        let err = SweepFile::parse(text, Path::new("sweep.toml")).expect_err(text);
        assert!(err.to_string().contains(want), "{text}: {err}");
        assert!(err.to_string().starts_with("sweep.toml"), "{err}");
    }
}

#[test]
fn run_names_are_safe_short_and_unique() {
    let run = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let long = "x".repeat(200);
    let names = run_names(&[
        run(&[("path", "/data/a b"), ("lr", "3e-4")]),
        run(&[("path", "/data/a_b"), ("lr", "3e-4")]),
        run(&[("path", &long), ("lr", "1")]),
        run(&[("path", "é"), ("lr", "1")]),
    ]);
    assert_eq!(names[0], "path=_data_a_b,lr=3e-4-0");
    assert_eq!(names[1], "path=_data_a_b,lr=3e-4-1");
    assert_eq!(names[2].len(), MAX_RUN_NAME_BYTES);
    assert!(names[2].ends_with("xxx-2"), "{}", names[2]);
    assert_eq!(names[3], "path=_,lr=1");
}

#[test]
fn placeholders_are_identifiers_in_braces_and_nothing_else() {
    assert_eq!(placeholders("--lr={lr}/{seed}{"), ["lr", "seed"]);
    assert!(placeholders(r#"{"a": 1}"#).is_empty());
    assert!(placeholders("{1x} { lr } {}").is_empty());
    let values = [
        ("lr".to_owned(), "{seed}".to_owned()),
        ("seed".to_owned(), "1".to_owned()),
    ];
    let words = [
        "--lr={lr}".to_owned(),
        r#"{"s": {seed}}"#.to_owned(),
        "{other}".to_owned(),
    ];
    assert_eq!(
        substitute(&words, &values),
        ["--lr={seed}", r#"{"s": 1}"#, "{other}"],
        "one pass; other braces left alone"
    );
}

#[test]
fn the_command_uses_every_key_and_only_keys_and_params() {
    let cmd = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let keys = ["lr".to_owned(), "seed".to_owned()];
    assert!(check_command(&cmd(&["python", "--lr={lr}", "{seed}"]), &keys, &[]).is_empty());
    assert_eq!(
        check_command(&cmd(&["python", "--lr={lr}", "{sed}", "{DATA}"]), &keys, &["DATA".into()]),
        [
            "the command has `{sed}`, which is no sweep key (lr, seed) nor param (DATA): fix its name or add `--sweep sed=…`",
            "sweep key `seed` appears nowhere in the command as `{seed}`: its runs would be the same; use it (`--seed {seed}`) or drop it",
        ]
    );
    assert_eq!(
        check_command(&cmd(&["{lr}", "{seed}"]), &keys, &["lr".into()]),
        ["`lr` is both a sweep key and a param of the job file: rename the sweep key"]
    );
}

#[test]
fn the_grid_table_aligns_its_columns() {
    let s = spec(&["lr=0.1,0.001", "seed=1,22"], None);
    let t = grid_table(s.keys(), &s.runs().expect("runs"));
    assert_eq!(
        t,
        "\
#  run               lr     seed
0  lr=0.1,seed=1     0.1    1
1  lr=0.1,seed=22    0.1    22
2  lr=0.001,seed=1   0.001  1
3  lr=0.001,seed=22  0.001  22
"
    );
}

proptest! {
    /// Whatever the values, every run has a name that is a usable folder name, at most
    /// 120 bytes, made only of safe characters, and no two are the same.
    #[test]
    fn run_names_are_unique_and_valid_for_any_grid(
        grid in prop::collection::vec(
            prop::collection::btree_set("[a-zA-Z0-9 ./_=,+é-]{1,70}|x{100,130}", 1..4),
            1..4,
        )
    ) {
        let args: Vec<String> = Vec::new();
        let file = SweepFile {
            grid: grid
                .iter()
                .enumerate()
                .map(|(i, vals)| (format!("k{i}"), vals.iter().cloned().collect()))
                .collect(),
            runs: Vec::new(),
        };
        let spec = SweepSpec::build(&args, Some(&file)).expect("a valid grid");
        let runs = spec.runs().expect("names");
        let mut seen = BTreeSet::new();
        for r in &runs {
            prop_assert!(r.name.len() <= MAX_RUN_NAME_BYTES, "{}", r.name);
            prop_assert!(herd_exp::validate_name(&r.name).is_ok(), "{}", r.name);
            prop_assert!(
                r.name.chars().all(|c| c.is_ascii_alphanumeric() || "._+=,-".contains(c)),
                "{}", r.name
            );
            prop_assert!(seen.insert(r.name.clone()), "{} twice", r.name);
        }
    }

    /// Names made only to collide (the same safe form, suffixes that look like indexes)
    /// still come out unique.
    #[test]
    fn colliding_names_are_told_apart(values in prop::collection::vec("[a_ ]{1,3}(-[0-9])?", 1..12)) {
        let runs: Vec<Vec<(String, String)>> =
            values.iter().map(|v| vec![("k".to_owned(), v.clone())]).collect();
        let names = run_names(&runs);
        let unique: BTreeSet<&String> = names.iter().collect();
        prop_assert_eq!(unique.len(), names.len(), "{:?}", names);
    }
}

fn keys(k: &[&str]) -> Vec<String> {
    k.iter().map(|s| (*s).to_owned()).collect()
}

fn values(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A plan key's value is parsed as its flag's: `nodes=2` is `--nodes=2`, `time=90` and
/// `mem=16G` are text as `--time`/`--mem` take them; keys of the command alone are left
/// out; the flags the user gave stay.
#[test]
fn a_plan_key_sets_the_runs_key_as_its_flag_would() {
    let base = JobKeys {
        partition: Some("gpu".into()),
        no_requeue: true,
        ..JobKeys::default()
    };
    let run = run_flags(
        &base,
        &values(&[
            ("nodes", "2"),
            ("gpus_per_node", "4"),
            ("time", "01:30:00"),
            ("mem", "16G"),
            ("seed", "1"),
        ]),
    )
    .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(run.nodes, Some(2));
    assert_eq!(run.gpus_per_node, Some(4));
    assert_eq!(
        serde_json::to_value(&run.time).ok(),
        Some(serde_json::json!("01:30:00"))
    );
    assert_eq!(
        serde_json::to_value(&run.mem).ok(),
        Some(serde_json::json!("16G"))
    );
    assert_eq!(
        run.partition.as_deref(),
        Some("gpu"),
        "the user's flags stay"
    );
    assert!(run.no_requeue, "--no-requeue stays");
    let requeued = run_flags(&base, &values(&[("requeue", "true")])).expect("bool");
    assert_eq!((requeued.requeue, requeued.no_requeue), (Some(true), false));
    assert_eq!(
        run_flags(&JobKeys::default(), &values(&[("seed", "1")])).ok(),
        Some(JobKeys::default()),
        "no plan key: the flags as given"
    );
}

/// A value its flag refuses is refused, naming the flag and the value.
#[test]
fn a_plan_keys_bad_value_is_refused_as_its_flag_refuses_it() {
    let err =
        run_flags(&JobKeys::default(), &values(&[("nodes", "two")])).expect_err("not a count");
    assert!(
        err.len() == 1 && err[0].contains("--nodes=two") && err[0].contains("'two'"),
        "{err:?}"
    );
    let err = run_flags(&JobKeys::default(), &values(&[("requeue", "yes")])).expect_err("no bool");
    assert!(err[0].contains("neither true nor false"), "{err:?}");
}

/// `job_name`, `command`, `params`, `after`, `exp_root`, `exclude` and the sweep's own
/// flags cannot be swept; a plan key also given as a flag names both.
#[test]
fn unsweepable_keys_and_keys_given_twice_are_refused() {
    let none = JobKeys::default();
    for key in [
        "job_name", "command", "params", "after", "exp_root", "exclude",
    ] {
        let p = check_plan_keys(&keys(&[key]), &none);
        assert!(
            p.len() == 1 && p[0].contains(&format!("plan key `{key}` cannot be swept")),
            "{key}: {p:?}"
        );
    }
    for key in ["sweep", "sweep_file", "max_parallel"] {
        let p = check_plan_keys(&keys(&[key]), &none);
        assert!(
            p.len() == 1 && p[0].contains("the sweep's own flag"),
            "{key}: {p:?}"
        );
    }
    assert!(check_plan_keys(&keys(&["nodes", "seed", "time"]), &none).is_empty());
    let flags = JobKeys {
        nodes: Some(2),
        ..JobKeys::default()
    };
    let p = check_plan_keys(&keys(&["nodes", "seed"]), &flags);
    assert!(
        p.len() == 1 && p[0].contains("given both by --nodes and by the sweep"),
        "{p:?}"
    );
    let flags = JobKeys {
        no_requeue: true,
        ..JobKeys::default()
    };
    let p = check_plan_keys(&keys(&["requeue"]), &flags);
    assert!(p.len() == 1 && p[0].contains("--no-requeue"), "{p:?}");
}

/// `cpus_per_worker` and `cpus_per_task` ask for the same CPUs: sweeping one while the
/// other is a flag, or sweeping both, is refused naming both; sweeping one over a job
/// file's other is not (the run's flags replace it).
#[test]
fn sweeping_one_cpu_key_beside_the_other_is_refused() {
    let c = JobKeys {
        cpus_per_task: Some(8),
        ..JobKeys::default()
    };
    let p = check_plan_keys(&keys(&["cpus_per_worker"]), &c);
    assert!(
        p.len() == 1
            && p[0].contains("`cpus_per_worker` is swept and --cpus-per-task is given")
            && p[0].contains("keep one"),
        "{p:?}"
    );
    let w = JobKeys {
        cpus_per_worker: Some(5),
        ..JobKeys::default()
    };
    let p = check_plan_keys(&keys(&["cpus_per_task"]), &w);
    assert!(
        p.len() == 1 && p[0].contains("`cpus_per_task` is swept and --cpus-per-worker is given"),
        "{p:?}"
    );
    let none = JobKeys::default();
    let p = check_plan_keys(&keys(&["cpus_per_task", "cpus_per_worker"]), &none);
    assert!(
        p.len() == 1 && p[0].contains("`cpus_per_worker` and `cpus_per_task` are both swept"),
        "{p:?}"
    );
    assert!(check_plan_keys(&keys(&["cpus_per_worker", "seed"]), &none).is_empty());
    // A run's swept cpus_per_worker is one of its flags: it replaces the job file's
    // cpus_per_task.
    let run =
        run_flags(&none, &values(&[("cpus_per_worker", "4")])).unwrap_or_else(|e| panic!("{e:?}"));
    let job = crate::job::JobFile::parse(
        "gpus_per_node = 8\ncpus_per_task = 64\ncommand = [\"python\", \"t.py\"]\n",
        std::path::Path::new("job.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let plan =
        crate::resolve::resolve(Some(&job), &run, &[], "h").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (plan.cpus_per_worker, plan.cpus_per_task),
        (Some(4), Some(32))
    );
}

/// A plan key need not appear in the command (it sets the plan), but may (`{nodes}`).
#[test]
fn a_plan_key_need_not_appear_in_the_command() {
    let cmd = keys(&["python", "t.py", "--seed={seed}"]);
    let p = check_command(&cmd, &keys(&["nodes", "seed"]), &[]);
    assert!(p.is_empty(), "{p:?}");
    let cmd = keys(&["python", "t.py", "--world={nodes}"]);
    assert!(check_command(&cmd, &keys(&["nodes"]), &[]).is_empty());
    assert_eq!(plan_key("gpus_per_node"), Some(Key::GpusPerNode));
    assert_eq!(plan_key("seed"), None);
}
