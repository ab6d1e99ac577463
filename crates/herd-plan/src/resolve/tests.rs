use super::*;
use crate::launch::{HangTimeout, KeepAlive, OnHang, Preflight, Seconds, Warm};
use std::path::Path;

fn file(text: &str) -> JobFile {
    JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn profile(text: &str) -> Profile {
    Profile::parse(text, Path::new("profiles/login.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn ok(job: Option<&JobFile>, flags: &JobKeys, profiles: &[Profile], host: &str) -> Plan {
    resolve(job, flags, profiles, host).unwrap_or_else(|e| panic!("{e}"))
}

fn err(job: Option<&JobFile>, flags: &JobKeys) -> ResolveError {
    resolve(job, flags, &[], "login1").expect_err("should not resolve")
}

const BASIC: &str = "nodes = 2\ngpus_per_node = 4\ncommand = [\"python\", \"train.py\"]\n";

#[test]
fn staying_alive_has_defaults_and_checks_its_keys_against_each_other() {
    let plan = ok(Some(&file(BASIC)), &JobKeys::default(), &[], "login1");
    assert_eq!(plan.keep, KeepAlive::submit(None));
    assert_eq!(plan.keep.max_requeues, 3);
    assert_eq!(plan.source(Key::MaxRequeues), Some(&Source::Default));
    let job = file(&format!(
        "max_requeues = 10\nwarn_before = 300\nstop_signal = \"SIGUSR2\"\nstop_grace = 120\nhang_timeout = 600\nstart_timeout = 900\non_hang = \"restart\"\npreflight = \"off\"\nwarm = \"off\"\ntime = \"24:00:00\"\n{BASIC}"
    ));
    let keep = ok(Some(&job), &JobKeys::default(), &[], "login1").keep;
    assert_eq!(
        keep,
        KeepAlive {
            max_requeues: 10,
            warn_before: Seconds::from_secs(300),
            stop_signal: "USR2".parse().unwrap_or_else(|e| panic!("{e}")),
            stop_grace: Seconds::from_secs(120),
            hang_timeout: HangTimeout::Fixed(Seconds::from_secs(600)),
            start_timeout: Seconds::from_secs(900),
            on_hang: OnHang::Restart,
            preflight: Preflight::Off,
            warm: Warm::Off,
        }
    );
    // `requeue = false` turns the default budget off and refuses an explicit one.
    let job = file(&format!("requeue = false\n{BASIC}"));
    assert_eq!(
        ok(Some(&job), &JobKeys::default(), &[], "login1")
            .keep
            .max_requeues,
        0
    );
    let job = file(&format!("requeue = false\nmax_requeues = 2\n{BASIC}"));
    let e = err(Some(&job), &JobKeys::default()).to_string();
    assert!(
        e.contains("`requeue = false` forbids them: set max_requeues = 0"),
        "{e}"
    );
    // The grace must fit in the warning, the warning in the time limit.
    let job = file(&format!("warn_before = 60\nstop_grace = 60\n{BASIC}"));
    let e = err(Some(&job), &JobKeys::default()).to_string();
    assert!(e.contains("lower stop_grace or raise warn_before"), "{e}");
    // The defaults shrink to fit a short limit; a warning set to 120 s does not fit 2 min.
    let job = file(&format!("time = 2\n{BASIC}"));
    let keep = ok(Some(&job), &JobKeys::default(), &[], "login1").keep;
    assert_eq!(
        (keep.warn_before.whole(), keep.stop_grace.whole()),
        (30, 15)
    );
    let long = file(&format!("time = 600\n{BASIC}"));
    let keep = ok(Some(&long), &JobKeys::default(), &[], "login1").keep;
    assert_eq!(
        (keep.warn_before.whole(), keep.stop_grace.whole()),
        (120, 60)
    );
    let flags = JobKeys {
        warn_before: Some(120),
        ..JobKeys::default()
    };
    let e = err(Some(&job), &flags).to_string();
    assert!(
        e.contains("--warn-before") && e.contains("lower warn_before or raise time"),
        "{e}"
    );
    let flags = JobKeys {
        warn_before: Some(30),
        stop_grace: Some(10),
        ..JobKeys::default()
    };
    assert_eq!(
        ok(Some(&job), &flags, &[], "login1").keep.warn_before,
        Seconds::from_secs(30)
    );
    // Signals no worker can checkpoint on, unknown hang actions, and agent-only keys
    // in another mode are refused, each naming its key.
    for (bad, key) in [
        ("stop_signal = \"KILL\"", "stop_signal"),
        ("on_hang = \"ignore\"", "on_hang"),
        ("preflight = \"no\"", "preflight"),
        ("mode = \"srun\"\npreflight = \"on\"", "preflight"),
        ("mode = \"srun\"\nhang_timeout = 60", "hang_timeout"),
        ("mode = \"srun\"\nhang_timeout = \"auto\"", "hang_timeout"),
        ("hang_timeout = \"often\"", "hang_timeout"),
        ("hang_timeout = -5", "hang_timeout"),
        ("mode = \"torchrun\"\nmax_requeues = 2", "max_requeues"),
    ] {
        let e = err(Some(&file(&format!("{bad}\n{BASIC}"))), &JobKeys::default()).to_string();
        assert!(
            e.contains(&format!("`{key}` in jobs/train.toml")),
            "{bad}: {e}"
        );
    }
    // `auto` from a job file or a flag; a flag's number wins over the file's word.
    let job = file(&format!("hang_timeout = \"auto\"\n{BASIC}"));
    let plan = ok(Some(&job), &JobKeys::default(), &[], "login1");
    assert_eq!(plan.keep.hang_timeout, HangTimeout::Auto);
    let flags = JobKeys {
        hang_timeout: Some(crate::values::TextOrNumber::Number(90)),
        ..JobKeys::default()
    };
    assert_eq!(
        ok(Some(&job), &flags, &[], "login1").keep.hang_timeout,
        HangTimeout::Fixed(Seconds::from_secs(90))
    );
    let flags = JobKeys {
        hang_timeout: Some(crate::values::TextOrNumber::Text("auto".into())),
        ..JobKeys::default()
    };
    let plan = ok(Some(&file(BASIC)), &flags, &[], "login1");
    assert_eq!(plan.keep.hang_timeout, HangTimeout::Auto);
    assert_eq!(plan.source(Key::HangTimeout), Some(&Source::Flag));
    // In srun mode nobody requeues nor checks the nodes: the defaults are not used.
    let job = file(&format!("mode = \"srun\"\n{BASIC}"));
    let keep = ok(Some(&job), &JobKeys::default(), &[], "login1").keep;
    assert_eq!((keep.max_requeues, keep.preflight), (0, Preflight::Off));
    // The preflight is on by default, and a flag turns it off.
    assert_eq!(plan.keep.preflight, Preflight::On);
    assert_eq!(plan.source(Key::Preflight), Some(&Source::Default));
    let flags = JobKeys {
        preflight: Some("off".into()),
        ..JobKeys::default()
    };
    let plan = ok(Some(&file(BASIC)), &flags, &[], "login1");
    assert_eq!(plan.keep.preflight, Preflight::Off);
    let args = plan.agent_options().to_args();
    assert!(
        args.ends_with(&["--preflight".into(), "off".into()]),
        "{args:?}"
    );
    // A manifest written before the key existed reads back with the preflight on.
    let mut json = serde_json::to_value(&plan.keep).unwrap_or_default();
    json.as_object_mut().map(|o| o.remove("preflight"));
    let back: KeepAlive = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.preflight, Preflight::On);
    // Warm starts: on by default, off by a flag (passed to the agents), off in srun mode,
    // and on in a manifest written before the key existed.
    assert_eq!(plan.keep.warm, Warm::On);
    let flags = JobKeys {
        warm: Some("off".into()),
        ..JobKeys::default()
    };
    let plan = ok(Some(&file(BASIC)), &flags, &[], "login1");
    assert_eq!(plan.keep.warm, Warm::Off);
    assert_eq!(plan.source(Key::Warm), Some(&Source::Flag));
    let args = plan.agent_options().to_args();
    assert!(args.ends_with(&["--warm".into(), "off".into()]), "{args:?}");
    assert_eq!(keep.warm, Warm::Off, "srun mode starts no worker itself");
    let mut json = serde_json::to_value(&plan.keep).unwrap_or_default();
    json.as_object_mut().map(|o| o.remove("warm"));
    let back: KeepAlive = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.warm, Warm::On);
}

#[test]
fn gpu_bind_defaults_to_all_and_a_flag_overrides_the_file() {
    let plan = ok(Some(&file(BASIC)), &JobKeys::default(), &[], "login1");
    assert_eq!(plan.gpu_bind, GpuBind::All);
    assert_eq!(plan.source(Key::GpuBind), Some(&Source::Default));
    let job = file(&format!("gpu_bind = \"per-rank\"\n{BASIC}"));
    let plan = ok(Some(&job), &JobKeys::default(), &[], "login1");
    assert_eq!(plan.gpu_bind, GpuBind::PerRank);
    let flags = JobKeys {
        gpu_bind: Some("all".into()),
        ..JobKeys::default()
    };
    let plan = ok(Some(&job), &flags, &[], "login1");
    assert_eq!(plan.gpu_bind, GpuBind::All);
    assert_eq!(plan.source(Key::GpuBind), Some(&Source::Flag));
    // A manifest written before the key existed reads back with the default.
    let mut json = serde_json::to_value(&plan).unwrap_or_default();
    json.as_object_mut().map(|o| o.remove("gpu_bind"));
    let back: Plan = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.gpu_bind, GpuBind::All);
}

/// A job file with every key resolves, and the plan says where each came from. It leaves
/// out `cpus_per_task`, which one file may not set beside `cpus_per_worker`: its source is
/// then `cpus_per_worker`'s (crate::cpus).
#[test]
fn every_key_resolves_with_its_source() {
    let text: String = crate::keys::every_key_job_file()
        .lines()
        .filter(|l| !l.starts_with("cpus_per_task ="))
        .map(|l| format!("{l}\n"))
        .collect();
    let job = file(&text);
    let flags = JobKeys {
        params: Some(vec!["DATA=/datasets/imagenet".into()]),
        ..JobKeys::default()
    };
    let plan = ok(Some(&job), &flags, &[], "login1");
    for key in Key::ALL {
        assert!(plan.source(key).is_some(), "`{key}` has no source");
    }
    assert_eq!(plan.source(Key::Params), Some(&Source::Flag));
    assert_eq!(
        plan.source(Key::CpusPerTask),
        Some(&Source::Derived {
            from: vec![Key::CpusPerWorker, Key::GpusPerNode]
        })
    );
    assert_eq!(
        plan.command.last().map(String::as_str),
        Some("/datasets/imagenet")
    );
}

#[test]
fn defaults() {
    let plan = ok(Some(&file(BASIC)), &JobKeys::default(), &[], "login1");
    assert_eq!(plan.mode, Mode::Agent);
    assert_eq!(plan.job_name, "train");
    assert_eq!(plan.nodes, 2);
    assert_eq!(plan.workers_per_node(), 4);
    assert_eq!(plan.tasks_per_node(), 1);
    assert_eq!(plan.world_size(), 8);
    assert_eq!(plan.exp_root, PathBuf::from("herd-exp"));
    assert_eq!(plan.exclude, vec!["*.out".to_owned()]);
    assert_eq!(plan.max_restarts, 0);
    assert_eq!(plan.source(Key::Mode), Some(&Source::Default));
    assert_eq!(plan.describe(Key::Nodes), "`nodes` in jobs/train.toml");
    assert_eq!(plan.describe(Key::Partition), "`partition` (not set)");
    assert_eq!(plan.profile, None);
}

#[test]
fn flags_over_file_over_profile() {
    let job = file(
        "nodes = 2\ngpus_per_node = 4\nmem = \"100G\"\ncommand = [\"python\", \"train.py\"]\n",
    );
    let profiles = [profile(
        "match = \"login*\"\npartition = \"gpu\"\nmem = \"240GB\"\ncpus_per_task = 64\ntime = \"2-00:00:00\"\nsbatch_args = [\"--account=lab\"]\nexclude = [\"data/**\"]\n",
    )];
    let flags = JobKeys {
        nodes: Some(4),
        sbatch_args: Some(vec!["--qos=high".into()]),
        exclude: Some(vec!["*.ckpt".into()]),
        ..JobKeys::default()
    };
    let plan = ok(Some(&job), &flags, &profiles, "login3.cluster.org");
    assert_eq!(plan.nodes, 4);
    assert_eq!(plan.source(Key::Nodes), Some(&Source::Flag));
    assert_eq!(plan.mem.map(|m| m.megabytes()), Some(100 * 1024));
    assert!(matches!(plan.source(Key::Mem), Some(Source::File { .. })));
    assert_eq!(plan.cpus_per_task, Some(64));
    assert_eq!(plan.partition.as_deref(), Some("gpu"));
    assert_eq!(
        plan.describe(Key::Partition),
        "`partition` in profile profiles/login.toml"
    );
    assert_eq!(plan.time.map(|t| t.seconds()), Some(2 * 86_400));
    assert_eq!(plan.sbatch_args, vec!["--account=lab", "--qos=high"]);
    assert_eq!(plan.exclude, vec!["*.out", "data/**", "*.ckpt"]);
    assert_eq!(plan.sources.get(&Key::Exclude).map(Vec::len), Some(3));
    assert_eq!(plan.profile, Some(PathBuf::from("profiles/login.toml")));

    // Another host: no profile, so nothing fills partition.
    let plan = ok(Some(&job), &flags, &profiles, "gpu-a01");
    assert_eq!(plan.partition, None);
    assert_eq!(plan.profile, None);
}

#[test]
fn gpus_total_derives_nodes() {
    let job = file("gpus = 16\ngpus_per_node = 8\ncommand = [\"python\", \"t.py\"]\n");
    let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
    assert_eq!(
        (plan.nodes, plan.gpus, plan.gpus_per_node),
        (2, Some(16), Some(8))
    );
    assert_eq!(
        plan.source(Key::Nodes),
        Some(&Source::Derived {
            from: vec![Key::Gpus, Key::GpusPerNode]
        })
    );
    let job = file("gpus = 16\nnodes = 4\ncommand = [\"python\", \"t.py\"]\n");
    let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
    assert_eq!(plan.gpus_per_node, Some(4));
    let job = file("gpus = 4\ncommand = [\"python\", \"t.py\"]\n");
    let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
    assert_eq!((plan.nodes, plan.gpus_per_node), (1, Some(4)));
    // A remainder resolves (rounded up); check() reports it.
    let job = file("gpus = 12\ngpus_per_node = 8\ncommand = [\"python\", \"t.py\"]\n");
    assert_eq!(ok(Some(&job), &JobKeys::default(), &[], "h").nodes, 2);
}

#[test]
fn srun_mode_counts() {
    let job = file("mode = \"srun\"\nnodes = 2\ngpus_per_node = 8\ncpus_per_task = 5\ncommand = [\"python\", \"t.py\"]\n");
    let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
    assert_eq!(plan.tasks_per_node(), 8);
    assert_eq!(plan.workers_per_node(), 8);
    assert_eq!(plan.cpus_per_node(), 40);
    let flags = JobKeys {
        mode: Some("agent".into()),
        ..JobKeys::default()
    };
    let plan = ok(Some(&job), &flags, &[], "h");
    assert_eq!((plan.tasks_per_node(), plan.cpus_per_node()), (1, 5));
}

#[test]
fn every_bad_value_is_reported_with_key_and_origin() {
    let job = file(
        r#"
nodes = 0
gpus_per_node = -1
cpus_per_task = 0
mem = "1.5G"
time = "50h"
signal = "USR9"
mode = "mpi"
partition = "gpu debug"
constraint = "a#b"
gpu_type = "a100 80gb"
gpu_bind = "closest"
job_name = "my job"
max_restarts = -1
sbatch_args = ["--comment=a\nb", "account=x"]
exclude = ["a[b", "!keep.out"]
command = ["python", "train.py"]
"#,
    );
    let e = err(Some(&job), &JobKeys::default());
    let keys: Vec<Key> = e.problems.iter().map(|p| p.key).collect();
    for k in [
        Key::Nodes,
        Key::GpusPerNode,
        Key::CpusPerTask,
        Key::Mem,
        Key::Time,
        Key::Signal,
        Key::Mode,
        Key::Partition,
        Key::Constraint,
        Key::GpuType,
        Key::GpuBind,
        Key::JobName,
        Key::MaxRestarts,
        Key::SbatchArgs,
        Key::Exclude,
    ] {
        assert!(keys.contains(&k), "{k} not reported: {e}");
    }
    let text = e.to_string();
    assert!(
        text.contains("`time` in jobs/train.toml: `50h` is not a SLURM time"),
        "{text}"
    );
    assert!(
        text.contains("`mode` in jobs/train.toml: `mpi` is not a launch mode"),
        "{text}"
    );
    assert!(
        text.contains("`gpu_bind` in jobs/train.toml: `closest` is not a GPU binding"),
        "{text}"
    );
    assert!(
        text.contains("`constraint` in jobs/train.toml: the constraint `a#b` contains `#`"),
        "{text}"
    );
    assert_eq!(
        e.problems
            .iter()
            .filter(|p| p.key == Key::SbatchArgs)
            .count(),
        2
    );
    let count = |k: Key| e.problems.iter().filter(|p| p.key == k).count();
    assert_eq!(count(Key::Exclude), 2);
    assert!(
        text.contains("`!keep.out`: these globs only leave files out"),
        "{text}"
    );
}

#[test]
fn bad_flag_values_name_the_flag() {
    let flags = JobKeys {
        nodes: Some(0),
        time: Some(TextOrNumber::Text("forever".into())),
        mem: Some(TextOrNumber::Text("lots".into())),
        ..JobKeys::default()
    };
    let text = err(Some(&file(BASIC)), &flags).to_string();
    assert!(
        text.contains("--nodes: must be a whole number from 1"),
        "{text}"
    );
    assert!(
        text.contains("--time: `forever` is not a SLURM time"),
        "{text}"
    );
    assert!(
        text.contains("--mem: `lots` is not a SLURM memory size"),
        "{text}"
    );
}

#[test]
fn command_rules() {
    let e = err(Some(&file("nodes = 1\n")), &JobKeys::default());
    assert!(e.to_string().contains("no command"), "{e}");
    let e = err(Some(&file("command = []\n")), &JobKeys::default());
    assert!(e.to_string().contains("the command is empty"), "{e}");
    let e = err(Some(&file("command = [\"--x\"]\n")), &JobKeys::default());
    assert!(e.to_string().contains("starts with `-`"), "{e}");
    let flags = JobKeys {
        command: Some(vec!["python".into(), "a\0b".into()]),
        ..JobKeys::default()
    };
    let e = err(None, &flags);
    assert!(
        e.to_string()
            .contains("-- CMD ARGS…: argument 2 contains a NUL byte"),
        "{e}"
    );
    // The flags' command replaces the file's, and names the job when no file does.
    let flags = JobKeys {
        command: Some(vec!["/opt/bin/my train".into(), "x".into()]),
        ..JobKeys::default()
    };
    let plan = ok(Some(&file(BASIC)), &flags, &[], "h");
    assert_eq!(plan.command, vec!["/opt/bin/my train", "x"]);
    let plan = ok(None, &flags, &[], "h");
    assert_eq!(plan.job_name, "my_train");
}

#[test]
fn without_a_name_or_job_file_the_job_is_named_after_its_script() {
    let named = |command: &[&str]| {
        let flags = JobKeys {
            command: Some(command.iter().map(|w| (*w).to_owned()).collect()),
            ..JobKeys::default()
        };
        let plan = ok(None, &flags, &[], "h");
        assert_eq!(plan.source(Key::JobName), Some(&Source::Default));
        plan.job_name
    };
    assert_eq!(named(&["python", "train.py", "--lr", "3e-4"]), "train");
    assert_eq!(named(&["python3", "-u", "src/pretrain.py"]), "pretrain");
    assert_eq!(
        named(&[
            "torchrun",
            "--nproc-per-node",
            "8",
            "tools/train.py",
            "cfg.py"
        ]),
        "train"
    );
    assert_eq!(
        named(&["python", "-m", "mypkg.finetune", "--x"]),
        "finetune"
    );
    // A launcher module is not the script: the script after it is.
    assert_eq!(
        named(&["python", "-m", "torch.distributed.run", "main.py"]),
        "main"
    );
    assert_eq!(named(&["bash", "scripts/run.sh"]), "run");
    assert_eq!(named(&["/opt/bin/fit", "--epochs", "3"]), "fit");
    // Only the file name counts, and it is made a job name.
    assert_eq!(named(&["python", "my model.py"]), "my_model");
    assert_eq!(named(&["python", ".py"]), "python");
}

#[test]
fn params_fill_placeholders() {
    let job = file(
        "params = [\"CHECKPOINT\"]\ncommand = [\"python\", \"test.py\", \"{CHECKPOINT}\", \"--out={CHECKPOINT}.pkl\", \"{OTHER}\"]\n",
    );
    let flags = JobKeys {
        params: Some(vec!["CHECKPOINT=work dirs/epoch_5.pth".into()]),
        ..JobKeys::default()
    };
    let plan = ok(Some(&job), &flags, &[], "h");
    assert_eq!(
        plan.command,
        vec![
            "python",
            "test.py",
            "work dirs/epoch_5.pth",
            "--out=work dirs/epoch_5.pth.pkl",
            "{OTHER}"
        ]
    );
    assert_eq!(
        plan.params.get("CHECKPOINT").map(String::as_str),
        Some("work dirs/epoch_5.pth")
    );

    let e = err(Some(&job), &JobKeys::default());
    assert!(
        e.to_string()
            .contains("needs a value for `CHECKPOINT`: give --param CHECKPOINT=VALUE"),
        "{e}"
    );
    let flags2 = JobKeys {
        params: Some(vec!["CHECKPOINT=a".into(), "CKPT=b".into()]),
        ..JobKeys::default()
    };
    let e = err(Some(&job), &flags2);
    assert!(
        e.to_string()
            .contains("--param CKPT: the job file has no param `CKPT` (it declares CHECKPOINT)"),
        "{e}"
    );
    let unused = file("params = [\"X\"]\ncommand = [\"python\"]\n");
    let flags3 = JobKeys {
        params: Some(vec!["X=1".into()]),
        ..JobKeys::default()
    };
    let e = err(Some(&unused), &flags3);
    assert!(e.to_string().contains("`{X}` appears nowhere"), "{e}");
    assert_eq!(parse_param("A=b=c"), Ok(("A".into(), "b=c".into())));
    assert!(parse_param("=x").is_err());
    assert!(parse_param("a b=x").is_err());
    assert!(parse_param("noequals").is_err());
}

#[test]
fn plan_serializes_for_the_manifest() {
    let job = file("nodes = 2\ngpus_per_node = 4\nmem = \"240GB\"\ntime = \"50:00:00\"\nsignal = \"USR1\"\ncommand = [\"python\", \"train.py\"]\n");
    let plan = ok(Some(&job), &JobKeys::default(), &[], "h");
    let json = serde_json::to_value(&plan).unwrap_or_default();
    assert_eq!(json["mem"], "240G");
    assert_eq!(json["time"], "2-02:00:00");
    assert_eq!(json["signal"], "USR1@60");
    assert_eq!(json["mode"], "agent");
    assert_eq!(json["sources"]["nodes"][0]["kind"], "file");
    assert_eq!(json["sources"]["nodes"][0]["path"], "jobs/train.toml");
    assert_eq!(json["sources"]["mode"][0]["kind"], "default");
    let back: Plan = serde_json::from_value(json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back, plan);
}
