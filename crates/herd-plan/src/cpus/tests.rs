use std::path::{Path, PathBuf};

use super::*;
use crate::job::{JobFile, Profile};
use crate::keys::JobKeys;
use crate::plan::ResolveError;
use crate::resolve::resolve;

const CMD: &str = "command = [\"python\", \"train.py\"]\n";

fn file(text: &str) -> JobFile {
    JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn profile(text: &str) -> Profile {
    Profile::parse(
        &format!("match = \"login*\"\n{text}"),
        Path::new("profiles/login.toml"),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn resolved(
    job: &str,
    flags: &JobKeys,
    profiles: &[Profile],
) -> Result<crate::plan::Plan, ResolveError> {
    resolve(
        Some(&file(&format!("{job}{CMD}"))),
        flags,
        profiles,
        "login1",
    )
}

fn plan(job: &str, flags: &JobKeys, profiles: &[Profile]) -> crate::plan::Plan {
    resolved(job, flags, profiles).unwrap_or_else(|e| panic!("{e}"))
}

fn from_file() -> Source {
    Source::File {
        path: PathBuf::from("jobs/train.toml"),
    }
}

/// 2 nodes × 4 workers in `mode`.
fn two_by_four(mode: &str) -> String {
    format!("mode = \"{mode}\"\nnodes = 2\ngpus_per_node = 4\n")
}

/// `cpus_per_worker` becomes SLURM's `--cpus-per-task`: × the node's workers in agent and
/// torchrun mode (one task per node), × 1 in srun mode (one task per worker); the plan
/// keeps what was given, and `cpus_per_task` is derived from it.
#[test]
fn cpus_per_worker_is_multiplied_by_the_workers_each_task_starts() {
    for (mode, per_task, from) in [
        ("agent", 20, vec![Key::CpusPerWorker, Key::GpusPerNode]),
        ("torchrun", 20, vec![Key::CpusPerWorker, Key::GpusPerNode]),
        ("srun", 5, vec![Key::CpusPerWorker]),
    ] {
        let p = plan(
            &format!("{}cpus_per_worker = 5\n", two_by_four(mode)),
            &JobKeys::default(),
            &[],
        );
        assert_eq!(p.cpus_per_task, Some(per_task), "{mode}");
        assert_eq!(p.cpus_per_worker, Some(5), "{mode}");
        assert_eq!(p.cpus_per_node(), 20, "{mode}: 5 CPUs × 4 workers");
        assert_eq!(p.source(Key::CpusPerWorker), Some(&from_file()), "{mode}");
        assert_eq!(
            p.source(Key::CpusPerTask),
            Some(&Source::Derived { from }),
            "{mode}"
        );
    }
    // Without GPUs an agent starts one worker: its CPUs are the task's.
    let p = plan("nodes = 2\ncpus_per_worker = 6\n", &JobKeys::default(), &[]);
    assert_eq!((p.cpus_per_task, p.cpus_per_node()), (Some(6), 6));
}

/// `cpus_per_task` keeps SLURM's meaning: as given, in every mode, with no per-worker
/// value recorded.
#[test]
fn cpus_per_task_is_slurms_count_as_given() {
    for mode in ["agent", "torchrun", "srun"] {
        let p = plan(
            &format!("{}cpus_per_task = 8\n", two_by_four(mode)),
            &JobKeys::default(),
            &[],
        );
        assert_eq!(
            (p.cpus_per_task, p.cpus_per_worker),
            (Some(8), None),
            "{mode}"
        );
        assert_eq!(p.source(Key::CpusPerTask), Some(&from_file()), "{mode}");
        assert_eq!(p.source(Key::CpusPerWorker), None, "{mode}");
    }
}

/// A job file, a profile or the flags that set both keys is refused naming both, with
/// what each would mean.
#[test]
fn both_keys_from_one_source_are_refused_naming_both() {
    let e = resolved(
        &format!(
            "{}cpus_per_worker = 5\ncpus_per_task = 8\n",
            two_by_four("agent")
        ),
        &JobKeys::default(),
        &[],
    )
    .expect_err("both keys in one job file");
    assert_eq!(e.problems.len(), 1, "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("`cpus_per_worker` in jobs/train.toml: set together with `cpus_per_task` in jobs/train.toml: they are two ways to ask for the same CPUs"),
        "{text}"
    );
    assert!(
        text.contains("cpus_per_worker = 5: 5 for each worker, SLURM's --cpus-per-task=20 here")
            && text.contains("cpus_per_task = 8: 8 for the node's one task in agent mode, shared by its 4 workers")
            && text.contains("keep one of them and remove the other"),
        "{text}"
    );

    let flags = JobKeys {
        cpus_per_worker: Some(5),
        cpus_per_task: Some(8),
        ..JobKeys::default()
    };
    let e = resolved(&two_by_four("srun"), &flags, &[]).expect_err("both flags");
    let text = e.to_string();
    assert!(
        text.starts_with("--cpus-per-worker: set together with --cpus-per-task:")
            && text.contains("cpus_per_task = 8: 8 for each task, one per worker in srun mode"),
        "{text}"
    );

    // A profile that sets both is wrong for every job: refused even where a flag decides.
    let both = [profile("cpus_per_worker = 4\ncpus_per_task = 32\n")];
    let flags = JobKeys {
        cpus_per_worker: Some(5),
        ..JobKeys::default()
    };
    let e = resolved(&two_by_four("agent"), &flags, &both).expect_err("both in the profile");
    assert!(
        e.to_string().starts_with(
            "`cpus_per_worker` in profile profiles/login.toml: set together with `cpus_per_task` in profile profiles/login.toml"
        ),
        "{e}"
    );
}

/// The highest layer that sets either key decides, replacing a lower layer's value of the
/// other: flags over the job file over the profile, as for every key.
#[test]
fn a_later_layers_key_replaces_an_earlier_layers_other_key() {
    let job = two_by_four("agent");
    // The profile's cpus_per_task, replaced by the job file's cpus_per_worker.
    let site = [profile("cpus_per_task = 64\n")];
    let p = plan(
        &format!("{job}cpus_per_worker = 5\n"),
        &JobKeys::default(),
        &site,
    );
    assert_eq!((p.cpus_per_task, p.cpus_per_worker), (Some(20), Some(5)));
    assert_eq!(p.source(Key::CpusPerWorker), Some(&from_file()));
    // The profile's cpus_per_worker, replaced by the job file's cpus_per_task.
    let site = [profile("cpus_per_worker = 8\n")];
    let p = plan(
        &format!("{job}cpus_per_task = 12\n"),
        &JobKeys::default(),
        &site,
    );
    assert_eq!((p.cpus_per_task, p.cpus_per_worker), (Some(12), None));
    assert_eq!(p.source(Key::CpusPerWorker), None);
    // And with nothing above it, the profile's cpus_per_worker stands.
    let p = plan(&job, &JobKeys::default(), &site);
    assert_eq!((p.cpus_per_task, p.cpus_per_worker), (Some(32), Some(8)));
    assert_eq!(
        p.source(Key::CpusPerWorker),
        Some(&Source::Profile {
            path: PathBuf::from("profiles/login.toml")
        })
    );
    // A flag replaces the job file's other key, either way round.
    let c = JobKeys {
        cpus_per_task: Some(6),
        ..JobKeys::default()
    };
    let p = plan(&format!("{job}cpus_per_worker = 5\n"), &c, &[]);
    assert_eq!((p.cpus_per_task, p.cpus_per_worker), (Some(6), None));
    assert_eq!(p.source(Key::CpusPerTask), Some(&Source::Flag));
    let w = JobKeys {
        cpus_per_worker: Some(3),
        ..JobKeys::default()
    };
    let p = plan(&format!("{job}cpus_per_task = 64\n"), &w, &[]);
    assert_eq!((p.cpus_per_task, p.cpus_per_worker), (Some(12), Some(3)));
    assert_eq!(p.source(Key::CpusPerWorker), Some(&Source::Flag));
}

/// A bad value of the deciding key is a problem of that key; a count too large to ask
/// SLURM for is refused rather than wrapped.
#[test]
fn bad_values_are_refused_naming_their_key() {
    let e = resolved("cpus_per_worker = 0\n", &JobKeys::default(), &[]).expect_err("0");
    assert_eq!(e.problems[0].key, Key::CpusPerWorker, "{e}");
    assert!(
        e.to_string().contains("must be a whole number from 1"),
        "{e}"
    );
    let e = resolved(
        "gpus_per_node = 8\ncpus_per_worker = 4294967295\n",
        &JobKeys::default(),
        &[],
    )
    .expect_err("overflow");
    assert!(
        e.to_string()
            .contains("4294967295 CPUs × 8 workers per task is more than SLURM can be asked for"),
        "{e}"
    );
    let e = resolved("cpus_per_task = -1\n", &JobKeys::default(), &[]).expect_err("-1");
    assert_eq!(e.problems[0].key, Key::CpusPerTask, "{e}");
}

/// `herd check`'s CPU line for 2 nodes × 4 workers with `cpus_per_worker = 5`, in each
/// mode: 20 per node, 5 per worker, and what SLURM is asked for.
#[test]
fn the_check_line_says_each_workers_cpus_from_cpus_per_worker_in_every_mode() {
    let line = |mode: &str| {
        cpus_line(&plan(
            &format!("{}cpus_per_worker = 5\n", two_by_four(mode)),
            &JobKeys::default(),
            &[],
        ))
    };
    assert_eq!(
        line("agent"),
        "CPUs: 20 per node (5 per worker × 4 workers): `cpus_per_worker` in jobs/train.toml = 5, asked of SLURM as --cpus-per-task=20 for the node's one task (herd's agent, which starts its 4 workers)"
    );
    assert_eq!(
        line("torchrun"),
        "CPUs: 20 per node (5 per worker × 4 workers): `cpus_per_worker` in jobs/train.toml = 5, asked of SLURM as --cpus-per-task=20 for the node's one task (torchrun, which starts its 4 workers)"
    );
    assert_eq!(
        line("srun"),
        "CPUs: 20 per node (5 per worker × 4 workers): `cpus_per_worker` in jobs/train.toml = 5, asked of SLURM as --cpus-per-task=5 for each of the node's 4 tasks (one per worker)"
    );
}

/// With `cpus_per_task` the line says what each worker ends up with: the node's count
/// shared in agent and torchrun mode (a fraction where it does not divide), each task's
/// own in srun mode.
#[test]
fn the_check_line_says_each_workers_cpus_from_cpus_per_task_in_every_mode() {
    let line = |mode: &str, c: u32| {
        cpus_line(&plan(
            &format!("{}cpus_per_task = {c}\n", two_by_four(mode)),
            &JobKeys::default(),
            &[],
        ))
    };
    assert_eq!(
        line("agent", 8),
        "CPUs: 8 per node (2 per worker × 4 workers): `cpus_per_task` in jobs/train.toml = 8 for the node's one task (herd's agent, which starts its 4 workers)"
    );
    assert_eq!(
        line("torchrun", 6),
        "CPUs: 6 per node (1.5 per worker × 4 workers): `cpus_per_task` in jobs/train.toml = 6 for the node's one task (torchrun, which starts its 4 workers)"
    );
    assert_eq!(
        line("agent", 2),
        "CPUs: 2 per node (0.5 per worker × 4 workers): `cpus_per_task` in jobs/train.toml = 2 for the node's one task (herd's agent, which starts its 4 workers)"
    );
    assert_eq!(
        line("srun", 8),
        "CPUs: 32 per node (8 per worker × 4 workers): `cpus_per_task` in jobs/train.toml = 8 for each of the node's 4 tasks (one per worker)"
    );
    let p = plan(
        &format!("{}cpus_per_task = 10\n", "nodes = 1\ngpus_per_node = 3\n"),
        &JobKeys::default(),
        &[],
    );
    assert!(
        cpus_line(&p).starts_with("CPUs: 10 per node (3.33 per worker × 3 workers)"),
        "{}",
        cpus_line(&p)
    );
}

/// With neither key, the line says what SLURM's default of 1 CPU per task means in the
/// plan's mode.
#[test]
fn the_check_line_says_what_slurms_default_means_in_every_mode() {
    let line = |mode: &str| cpus_line(&plan(&two_by_four(mode), &JobKeys::default(), &[]));
    assert_eq!(
        line("agent"),
        "CPUs: neither cpus_per_worker nor cpus_per_task is set, so SLURM's default of 1 per task: the node's 4 workers share 1 CPU (its one task, herd's agent, starts them all), unless the site's default is higher; set cpus_per_worker to give each worker more"
    );
    assert_eq!(
        line("torchrun"),
        "CPUs: neither cpus_per_worker nor cpus_per_task is set, so SLURM's default of 1 per task: the node's 4 workers share 1 CPU (its one task, torchrun, starts them all), unless the site's default is higher; set cpus_per_worker to give each worker more"
    );
    assert_eq!(
        line("srun"),
        "CPUs: neither cpus_per_worker nor cpus_per_task is set, so SLURM's default of 1 per task: 4 per node (1 per worker × 4 workers, one task each), unless the site's default is higher; set cpus_per_worker to give each worker more"
    );
    let p = plan("nodes = 2\n", &JobKeys::default(), &[]);
    assert!(
        cpus_line(&p)
            .contains("the node's one worker gets 1 CPU (its one task, herd's agent, starts it)"),
        "{}",
        cpus_line(&p)
    );
}

/// A manifest written before `cpus_per_worker` existed reads back without one.
#[test]
fn an_older_manifest_reads_back_without_cpus_per_worker() {
    let p = plan(
        &format!("{}cpus_per_task = 8\n", two_by_four("agent")),
        &JobKeys::default(),
        &[],
    );
    let mut json = serde_json::to_value(&p).unwrap_or_default();
    json.as_object_mut().map(|o| o.remove("cpus_per_worker"));
    let back: crate::plan::Plan = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, p);
}
