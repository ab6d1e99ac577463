use super::*;

/// `herd launch`'s flags as clap sees them.
fn launch_flags() -> clap::Command {
    AgentOptions::augment_args(clap::Command::new("herd-launch"))
}

fn parse(args: &[String]) -> AgentOptions {
    #[derive(clap::Parser)]
    struct Launch {
        #[command(flatten)]
        opts: AgentOptions,
    }
    let argv = std::iter::once("herd-launch".to_owned()).chain(args.iter().cloned());
    <Launch as clap::Parser>::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        .opts
}

/// Every option at a value other than its default.
fn every_option_changed() -> AgentOptions {
    AgentOptions {
        nproc_per_node: Some(3),
        gpus: GpuBindArg {
            gpu_bind: GpuBind::PerRank,
        },
        max_restarts: 2,
        spare_nodes: 1,
        label: true,
        metrics: "regex:step (?P<step>\\d+) loss='(?P<loss>[0-9.]+)'"
            .parse()
            .unwrap_or_else(|e| panic!("{e}")),
        kill_grace: "2.5".parse().unwrap_or_else(|e| panic!("{e}")),
        rendezvous_timeout: Seconds::from_secs(30),
        heartbeat_timeout: "0.75".parse().unwrap_or_else(|e| panic!("{e}")),
        keep: KeepAlive {
            warn_before: Seconds::from_secs(300),
            stop_signal: "USR2".parse().unwrap_or_else(|e| panic!("{e}")),
            stop_grace: Seconds::from_secs(90),
            max_requeues: 5,
            hang_timeout: HangTimeout::Auto,
            start_timeout: Seconds::from_secs(900),
            on_hang: OnHang::Restart,
            preflight: Preflight::Off,
            warm: Warm::Off,
        },
        container: crate::launch::ContainerArgs {
            image: Some("/shared/images/train.sqfs".into()),
            runtime: Some(herd_container::Runtime::Apptainer),
            mounts: Some(
                "/data:/data:ro,/scratch:/mnt/0"
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}")),
            ),
        },
    }
}

#[test]
fn the_flags_read_back_what_to_args_writes() {
    let changed = every_option_changed();
    let args = changed.to_args();
    assert_eq!(parse(&args), changed, "{args:?}");
    // Every flag is written when its value is not the default: a flag added to the
    // definition but not to `to_args` fails here.
    for arg in launch_flags().get_arguments() {
        let long = format!("--{}", arg.get_long().unwrap_or_default());
        assert!(
            args.contains(&long),
            "{long} is not written by to_args: {args:?}"
        );
    }
    // Defaults are written as nothing, and nothing reads back as the defaults.
    assert!(AgentOptions::default().to_args().is_empty());
    assert_eq!(parse(&[]), AgentOptions::default());
    assert_eq!(AgentOptions::default().keep, KeepAlive::LAUNCH);
}

#[test]
fn values_are_typed_and_refused_where_they_are_given() {
    assert_eq!("90".parse::<Seconds>(), Ok(Seconds::from_secs(90)));
    assert_eq!(
        "1.5".parse::<Seconds>().map(|s| s.to_string()).as_deref(),
        Ok("1.5")
    );
    for bad in ["-1", "nan", "inf", "1e9", "", "ten"] {
        assert!(bad.parse::<Seconds>().is_err(), "{bad}");
    }
    for (given, shown) in [
        ("USR2", "USR2"),
        ("SIGTERM", "TERM"),
        ("hup", "HUP"),
        ("10", "USR1"),
    ] {
        assert_eq!(
            given
                .parse::<StopSignal>()
                .map(|s| s.to_string())
                .as_deref(),
            Ok(shown),
            "{given}"
        );
    }
    for bad in ["KILL", "SIGSTOP", "SEGV", "9", "USR3"] {
        let e = bad.parse::<StopSignal>().expect_err(bad);
        assert!(e.contains("USR1, USR2, TERM, INT, HUP, CONT"), "{e}");
    }
    assert!("ignore".parse::<OnHang>().is_err());
    assert_eq!("off".parse::<Preflight>(), Ok(Preflight::Off));
    for bad in ["", "no", "false", "On"] {
        assert!(bad.parse::<Preflight>().is_err(), "{bad}");
        assert!(bad.parse::<Warm>().is_err(), "{bad}");
    }
    assert_eq!("off".parse::<Warm>(), Ok(Warm::Off));
    assert_eq!("auto".parse::<HangTimeout>(), Ok(HangTimeout::Auto));
    assert_eq!(
        "600".parse::<HangTimeout>(),
        Ok(HangTimeout::Fixed(Seconds::from_secs(600)))
    );
    assert_eq!("0".parse::<HangTimeout>(), Ok(HangTimeout::OFF));
    assert!(!HangTimeout::OFF.is_on() && HangTimeout::Auto.is_on());
    for bad in ["-1", "Auto", "auto:60", "", "ten"] {
        let e = bad.parse::<HangTimeout>().expect_err(bad);
        assert!(e.contains("or `auto`"), "{e}");
    }
    // A flag's bad value is clap's error, naming the flag.
    #[derive(clap::Parser, Debug)]
    struct Launch {
        #[command(flatten)]
        _opts: AgentOptions,
    }
    for (flag, bad) in [
        ("--on-hang", "restrat"),
        ("--preflight", "false"),
        ("--stop-signal", "KILL"),
        ("--hang-timeout", "-3"),
        ("--nproc-per-node", "0"),
    ] {
        let arg = format!("{flag}={bad}");
        let e = <Launch as clap::Parser>::try_parse_from(["x", arg.as_str()]).expect_err(bad);
        assert!(e.to_string().contains(flag), "{e}");
    }
}

/// A plan's and a manifest's hang timeout: a number as it always was (an old manifest
/// reads as before), or `"auto"`; each reads back as written.
#[test]
fn the_hang_timeout_is_a_number_or_auto_in_json() {
    let fixed = HangTimeout::Fixed(Seconds::from_secs(600));
    for (value, json) in [
        (fixed, "600"),
        (HangTimeout::OFF, "0"),
        (HangTimeout::Auto, "\"auto\""),
        (HangTimeout::Fixed("1.5".parse().unwrap_or_default()), "1.5"),
    ] {
        assert_eq!(serde_json::to_string(&value).ok().as_deref(), Some(json));
        let back: HangTimeout = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, value, "{json}");
    }
    // A plan written before `auto`: every key a number.
    let old = serde_json::json!({"warn_before": 120, "stop_signal": "USR1", "stop_grace": 60,
                                 "max_requeues": 3, "hang_timeout": 600, "on_hang": "fail"});
    let keep: KeepAlive = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(keep.hang_timeout, fixed);
    assert_eq!(keep.start_timeout, KeepAlive::LAUNCH.start_timeout);
    for bad in ["\"often\"", "-1", "true", "1e9"] {
        assert!(serde_json::from_str::<HangTimeout>(bad).is_err(), "{bad}");
    }
}

/// `--hang-timeout`'s help (and so docs/launch.md's table) states `auto`'s numbers as the
/// code has them.
#[test]
fn the_hang_timeout_help_states_autos_numbers() {
    let cmd = launch_flags();
    let help = cmd
        .get_arguments()
        .find(|a| a.get_long() == Some("hang-timeout"))
        .and_then(|a| a.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    let warm_up_min = HangTimeout::AUTO_WARM_UP_TIMEOUT.whole() / 60;
    for said in [
        format!("{} × the longest gap", HangTimeout::AUTO_FACTOR),
        format!("at least {} s", HangTimeout::AUTO_FLOOR),
        format!("({warm_up_min} min while it warms up)"),
    ] {
        assert!(help.contains(&said), "{help:?} does not say {said:?}");
    }
}

#[test]
fn submits_defaults_differ_from_launchs_as_the_docs_say() {
    let two_hours = Some(std::time::Duration::from_secs(7200));
    let submit = KeepAlive::submit(two_hours);
    assert_eq!(submit.max_requeues, SUBMIT_MAX_REQUEUES);
    assert_eq!(submit.warn_before, SUBMIT_WARN_BEFORE);
    assert_eq!(submit.stop_grace, KeepAlive::LAUNCH.stop_grace);
    // A 2-minute job: warned a quarter ahead, half of that to checkpoint.
    let short = KeepAlive::submit(Some(std::time::Duration::from_secs(120)));
    assert_eq!(
        (short.warn_before.whole(), short.stop_grace.whole()),
        (30, 15)
    );
    // Everything else is launch's.
    assert_eq!(
        KeepAlive {
            max_requeues: 0,
            warn_before: Seconds::ZERO,
            ..submit
        },
        KeepAlive::LAUNCH
    );
}

/// The table of docs/launch.md: each option, its `herd launch` default, and `herd submit`'s
/// where it differs.
fn options_table() -> String {
    let cmd = launch_flags();
    let submit = AgentOptions {
        keep: KeepAlive::submit(None),
        ..AgentOptions::default()
    };
    let mut t = String::from("| option | default | `herd submit` | meaning |\n|---|---|---|---|\n");
    for arg in cmd.get_arguments() {
        let long = arg.get_long().unwrap_or_default();
        let mut name = format!("--{long}");
        if let Some(v) = arg.get_value_names().and_then(|v| v.first()) {
            if arg.get_action().takes_values() {
                name.push_str(&format!(" {v}"));
            }
        }
        let aliases = arg.get_visible_aliases().unwrap_or_default();
        let all = arg.get_all_aliases().unwrap_or_default();
        let shown_aliases: Vec<String> = all
            .iter()
            .chain(aliases.iter())
            .map(|a| format!(" (`--{a}`)"))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let default = match arg.get_default_values().first() {
            Some(v) => format!("`{}`", v.to_string_lossy()),
            None => "—".to_owned(),
        };
        let flag_of = |o: &AgentOptions| {
            let args = o.to_args();
            args.iter()
                .position(|a| *a == format!("--{long}"))
                .and_then(|i| args.get(i + 1).cloned())
        };
        let differs = match (flag_of(&submit), long) {
            (Some(v), "warn-before") => format!("`{v}`, at most ¼ of the time limit"),
            (Some(v), "stop-grace") => format!("`{v}`, at most ½ of `warn-before`"),
            (Some(v), _) => format!("`{v}`"),
            (None, "nproc-per-node") => "the plan's workers per node".to_owned(),
            (None, "stop-grace") => "`60`, at most ½ of `warn-before`".to_owned(),
            (None, _) => String::new(),
        };
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        let cells = [
            format!("`{name}`{}", shown_aliases.concat()),
            default,
            differs,
            help,
        ]
        .map(|c| c.replace('|', "\\|"));
        t.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    t
}

/// docs/launch.md's options table is made from the definition: every flag, its default,
/// `herd submit`'s where it differs, and its help. `HERD_UPDATE_DOCS=1` rewrites it.
#[test]
fn the_docs_table_lists_every_option_with_both_defaults() {
    let want = options_table();
    let Some(shown) = herd_testbed::docs::table_in("launch.md", "launch options", &want) else {
        return;
    };
    assert!(
        shown == want,
        "docs/launch.md: the options table differs from crates/herd-plan/src/launch.rs; rewrite it with \
         `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-plan docs_table_lists_every_option`, or paste:\n{want}"
    );
}

use std::collections::BTreeSet;

/// The `herd submit` flags' help lines state the staying-alive defaults in words (the keys
/// table of docs/submit.md is made from them): they must say what [`KeepAlive::submit`]
/// and the agent's defaults are.
#[test]
fn the_submit_keys_help_states_the_defaults_the_code_has() {
    let cmd = <crate::keys::JobKeys as clap::Args>::augment_args(clap::Command::new("herd"));
    let help = |key: crate::keys::Key| {
        cmd.get_arguments()
            .find(|a| a.get_id() == key.name())
            .and_then(|a| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_else(|| panic!("`{key}` has no help"))
    };
    use crate::keys::Key;
    let submit = KeepAlive::submit(None);
    for (key, said) in [
        (
            Key::MaxRequeues,
            format!("(default {};", submit.max_requeues),
        ),
        (Key::WarnBefore, format!("(default {},", submit.warn_before)),
        (Key::StopSignal, format!("(default {})", submit.stop_signal)),
        (Key::StopGrace, format!("(default {},", submit.stop_grace)),
        (
            Key::HangTimeout,
            format!("(default {}:", submit.hang_timeout),
        ),
        (
            Key::OnHang,
            format!("`{}` the job (default)", submit.on_hang),
        ),
        (Key::Preflight, format!("`{}` (default)", submit.preflight)),
    ] {
        let h = help(key);
        assert!(
            h.contains(&said),
            "`{key}`'s help {h:?} does not say {said:?}"
        );
    }
}
