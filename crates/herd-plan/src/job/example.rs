//! The example cluster profile of docs/submit.md, the one `herd check --example-profile`
//! prints ([`EXAMPLE_PROFILE`]): the doc's block is read and parsed with herd's own profile
//! loader, so the doc cannot go stale. It must set or name every key a profile may hold,
//! resolve into a plan that passes the checks, and its comment on srun and torchrun mode
//! must stay true.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::check::{check, CheckContext, Severity};
use crate::job::{Profile, EXAMPLE_PROFILE, JOB_ONLY_KEYS};
use crate::keys::{JobKeys, Key, Source};
use crate::plan::Plan;
use crate::resolve::resolve;
use crate::values::TextOrNumber;

const DOC: &str = "docs/submit.md";
const MARKERS: &str = "example profile";

/// The TOML inside the one ```toml block between `<!-- example profile: begin -->` and
/// `<!-- example profile: end -->` of docs/submit.md (`HERD_UPDATE_DOCS=1` first rewrites
/// it to herd's example when they differ).
fn doc_block() -> String {
    let want = format!("```toml\n{EXAMPLE_PROFILE}```\n");
    let shown = herd_testbed::docs::table_in("submit.md", MARKERS, &want)
        .or_else(|| herd_testbed::docs::table_in("submit.md", MARKERS, &want))
        .unwrap_or_else(|| panic!("{DOC}: the example profile was rewritten but differs"));
    shown
        .strip_prefix("```toml\n")
        .and_then(|s| s.strip_suffix("```\n"))
        .unwrap_or_else(|| {
            panic!("{DOC}: the example profile must be one ```toml block between its markers:\n{shown}")
        })
        .to_owned()
}

fn path() -> PathBuf {
    PathBuf::from("profiles/10-mycluster.toml")
}

fn doc_profile() -> Profile {
    let text = doc_block();
    Profile::parse(&text, &path()).unwrap_or_else(|e| panic!("{DOC}'s example profile: {e}"))
}

/// The keys a profile may hold: all but a job's own.
fn profile_keys() -> BTreeSet<&'static str> {
    Key::ALL
        .iter()
        .map(|k| k.name())
        .filter(|k| !JOB_ONLY_KEYS.contains(k))
        .collect()
}

/// The keys of `# KEY = VALUE` lines (a key shown but left to each job), with the line
/// uncommented.
fn commented_keys(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("# ")?;
            let (key, _) = rest.split_once(" = ")?;
            Key::ALL
                .iter()
                .any(|k| k.name() == key)
                .then(|| (key.to_owned(), rest.to_owned()))
        })
        .collect()
}

fn command() -> JobKeys {
    JobKeys {
        command: Some(vec!["python".into(), "train.py".into()]),
        ..JobKeys::default()
    }
}

fn plan(flags: &JobKeys, host: &str) -> Result<Plan, crate::plan::ResolveError> {
    resolve(None, flags, &[doc_profile()], host)
}

/// The doc's block is herd's example, byte for byte, and parses with the profile loader
/// into a profile for the login nodes it says.
#[test]
fn the_docs_example_profile_is_the_one_herd_prints_and_parses() {
    let text = doc_block();
    assert!(
        text == EXAMPLE_PROFILE,
        "{DOC}: the example profile differs from crates/herd-plan/src/job/example_profile.toml \
         (what `herd check --example-profile` prints); rewrite the doc with \
         `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-plan example_profile`"
    );
    let p = doc_profile();
    assert_eq!(p.pattern, "login*");
    for host in ["login1", "login2.mycluster.example.org", "LOGIN3"] {
        assert!(p.matches(host), "the comment on `match` says {host}");
    }
    assert!(!p.matches("gpu-a01"));
    assert_eq!(p.keys.partition.as_deref(), Some("gpu"));
    assert_eq!(p.keys.gpus_per_node, Some(8));
    assert_eq!(p.keys.mem, Some(TextOrNumber::Text("480G".into())));
}

/// Every key a profile may hold is either set or shown commented out (each such line parses
/// once uncommented); a job's own keys are neither.
#[test]
fn the_example_profile_sets_or_shows_every_key_a_profile_may_hold() {
    let text = doc_block();
    let p = doc_profile();
    let set: BTreeSet<String> = toml::Table::try_from(&p.keys)
        .unwrap_or_else(|e| panic!("{e}"))
        .keys()
        .cloned()
        .collect();
    let commented = commented_keys(&text);
    let shown: BTreeSet<String> = commented.iter().map(|(k, _)| k.clone()).collect();
    assert!(
        set.is_disjoint(&shown),
        "{DOC}: keys both set and commented out: {:?}",
        set.intersection(&shown).collect::<Vec<_>>()
    );
    let all: BTreeSet<String> = set.union(&shown).cloned().collect();
    let want: BTreeSet<String> = profile_keys().into_iter().map(str::to_owned).collect();
    assert_eq!(
        all, want,
        "{DOC}: the example profile must set, or show commented out, exactly the keys a \
         profile may hold"
    );
    for (key, line) in &commented {
        let one = Profile::parse(&format!("match = \"*\"\n{line}\n"), &path())
            .unwrap_or_else(|e| panic!("{DOC}: `# {line}` does not parse uncommented: {e}"));
        let table = toml::Table::try_from(&one.keys).unwrap_or_else(|e| panic!("{e}"));
        assert!(table.contains_key(key), "`# {line}` sets {key}");
    }
}

/// On a login node the profile resolves into a plan with every key it sets taken from it,
/// and the plan passes the checks; on another host it is not used.
#[test]
fn the_example_profile_resolves_into_a_plan_that_passes_the_checks() {
    let p = doc_profile();
    let plan = plan(&command(), "login2.mycluster.example.org")
        .unwrap_or_else(|e| panic!("{DOC}'s example profile does not resolve: {e}"));
    assert_eq!(plan.profile, Some(path()));
    let set = toml::Table::try_from(&p.keys).unwrap_or_else(|e| panic!("{e}"));
    let from_profile = Source::Profile { path: path() };
    for key in Key::ALL.iter().filter(|k| set.contains_key(k.name())) {
        assert_eq!(
            plan.source(*key),
            Some(&from_profile),
            "`{key}` comes from the profile"
        );
    }
    assert_eq!(plan.world_size(), 8);
    assert_eq!(plan.partition.as_deref(), Some("gpu"));
    let errors: Vec<String> = check(&plan, &CheckContext::default())
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(ToString::to_string)
        .collect();
    assert!(errors.is_empty(), "{DOC}'s example profile: {errors:?}");

    let elsewhere = plan_on("workstation");
    assert_eq!(elsewhere.profile, None);
    assert_eq!(elsewhere.partition, None);
}

fn plan_on(host: &str) -> Plan {
    plan(&command(), host).unwrap_or_else(|e| panic!("{e}"))
}

/// The profile's comment on srun and torchrun mode is true: such a job is refused for the
/// two keys it names, and resolves with the two flags it gives.
#[test]
fn srun_and_torchrun_jobs_need_just_the_flags_the_example_profile_names() {
    let text = doc_block();
    assert!(
        text.contains(
            "srun or torchrun mode turns them off with --max-requeues 0 --hang-timeout 0"
        ),
        "{DOC}: the comment on srun and torchrun mode"
    );
    for mode in ["srun", "torchrun"] {
        let flags = JobKeys {
            mode: Some(mode.into()),
            ..command()
        };
        let e = plan(&flags, "login1").expect_err("agent-only keys in another mode");
        let keys: Vec<Key> = e.problems.iter().map(|p| p.key).collect();
        assert_eq!(keys, [Key::MaxRequeues, Key::HangTimeout], "{mode}: {e}");
        let turned_off = JobKeys {
            max_requeues: Some(0),
            hang_timeout: Some(TextOrNumber::Number(0)),
            ..flags
        };
        plan(&turned_off, "login1").unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
}
