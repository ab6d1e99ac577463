//! The seeds' jobs as herd job files (`examples/recipes/`): each resolves with no profile,
//! passes the checks, and renders #SBATCH resources equal to what its seed asks for.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use herd_plan::{
    check, has_errors, rank_table, render_script, resolve, CheckContext, JobFile, JobKeys, Memory,
    Mode, ScriptParams, TimeLimit,
};

/// What a seed asks for, as the seed writes it.
struct Seed {
    file: &'static str,
    params: &'static [(&'static str, &'static str)],
    mode: Mode,
    nodes: u32,
    gpus_per_node: u32,
    /// SLURM tasks per node (#SBATCH --ntasks-per-node).
    tasks_per_node: u32,
    cpus_per_task: u32,
    mem: Option<&'static str>,
    time: Option<&'static str>,
    partition: Option<&'static str>,
    /// The program and first argument the workers run.
    runs: [&'static str; 2],
}

const SEEDS: &[Seed] = &[
    // InternVideo seed, scheme 2 (run.py + submit.sh): run.py's "login" default
    // `-p gpu --mem=240GB -c 64 -t 2-00:00:00`, one task per node; stage2 1B: 8 x 8 GPUs.
    Seed {
        file: "internvideo2_stage2_1b.toml",
        params: &[],
        mode: Mode::Agent,
        nodes: 8,
        gpus_per_node: 8,
        tasks_per_node: 1,
        cpus_per_task: 64,
        mem: Some("240GB"),
        time: Some("2-00:00:00"),
        partition: Some("gpu"),
        runs: ["python", "tasks/pretrain.py"],
    },
    // The same for stage2 6B: 32 x 8 GPUs.
    Seed {
        file: "internvideo2_stage2_6b.toml",
        params: &[],
        mode: Mode::Agent,
        nodes: 32,
        gpus_per_node: 8,
        tasks_per_node: 1,
        cpus_per_task: 64,
        mem: Some("240GB"),
        time: Some("2-00:00:00"),
        partition: Some("gpu"),
        runs: ["python", "tasks/pretrain.py"],
    },
    // ViCLIP (InternVideo seed, scheme 2): "默认按 240GB/64 核申请", GPUS=16 GPUS_PER_NODE=8.
    Seed {
        file: "viclip_pretrain.toml",
        params: &[],
        mode: Mode::Torchrun,
        nodes: 2,
        gpus_per_node: 8,
        tasks_per_node: 1,
        cpus_per_task: 64,
        mem: Some("240GB"),
        time: Some("2-00:00:00"),
        partition: Some("gpu"),
        runs: ["python", "tasks/pretrain.py"],
    },
    // slurm_train.sh (InternVideo seed, scheme 1): GPUS=8 GPUS_PER_NODE=8, ntasks = GPUS,
    // ntasks-per-node = GPUS_PER_NODE, CPUS_PER_TASK 5, partition dev; no mem, no time.
    Seed {
        file: "mmaction2_slurm_train.toml",
        params: &[],
        mode: Mode::Srun,
        nodes: 1,
        gpus_per_node: 8,
        tasks_per_node: 8,
        cpus_per_task: 5,
        mem: None,
        time: None,
        partition: Some("dev"),
        runs: ["python", "-u"],
    },
    // slurm_test.sh: the same, plus CHECKPOINT.
    Seed {
        file: "mmaction2_slurm_test.toml",
        params: &[("CHECKPOINT", "work_dirs/k700/epoch 50.pth")],
        mode: Mode::Srun,
        nodes: 1,
        gpus_per_node: 8,
        tasks_per_node: 8,
        cpus_per_task: 5,
        mem: None,
        time: None,
        partition: Some("dev"),
        runs: ["python", "-u"],
    },
    // SwAV seed: 8 nodes x 8 GPUs; swav_800ep_pretrain.sh: --ntasks-per-node=8
    // --cpus-per-task=8 --mem=450G --time=50:00:00.
    Seed {
        file: "swav_800ep.toml",
        params: &[("DATA_PATH", "/datasets/imagenet/train")],
        mode: Mode::Srun,
        nodes: 8,
        gpus_per_node: 8,
        tasks_per_node: 8,
        cpus_per_task: 8,
        mem: Some("450G"),
        time: Some("50:00:00"),
        partition: None,
        runs: ["python", "-u"],
    },
];

fn recipes_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/recipes")
}

/// `#SBATCH --key=value` lines as a map (`--requeue` maps to "").
fn sbatch_options(script: &str) -> BTreeMap<String, String> {
    script
        .lines()
        .filter_map(|l| l.strip_prefix("#SBATCH "))
        .map(|o| match o.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (o.to_owned(), String::new()),
        })
        .collect()
}

#[test]
fn every_recipe_is_checked_against_its_seed() {
    let mut on_disk: Vec<String> = std::fs::read_dir(recipes_dir())
        .unwrap_or_else(|e| panic!("examples/recipes: {e}"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        .collect();
    on_disk.sort();
    let mut tested: Vec<String> = SEEDS.iter().map(|s| s.file.to_owned()).collect();
    tested.sort();
    assert_eq!(on_disk, tested);
}

#[test]
fn recipes_render_the_seeds_resources() {
    for seed in SEEDS {
        let path = recipes_dir().join(seed.file);
        let job = JobFile::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let flags = JobKeys {
            params: Some(
                seed.params
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ),
            ..JobKeys::default()
        };
        let plan = resolve(Some(&job), &flags, &[], "login1")
            .unwrap_or_else(|e| panic!("{}: {e}", seed.file));
        let findings = check(&plan, &CheckContext::default());
        assert!(!has_errors(&findings), "{}: {findings:?}", seed.file);
        assert_eq!(plan.mode, seed.mode, "{}", seed.file);
        // The plan reads back from its manifest JSON unchanged.
        let json = serde_json::to_string(&plan).unwrap_or_else(|e| panic!("{e}"));
        let back: herd_plan::Plan = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, plan, "{}", seed.file);

        let exp = PathBuf::from("/scratch/herd-exp").join(&plan.job_name);
        let script = render_script(
            &plan,
            &ScriptParams {
                exp_dir: &exp,
                herd: Path::new("/opt/herd/bin/herd"),
                dependency: None,
            },
        )
        .unwrap_or_else(|e| panic!("{}: {e}", seed.file));
        assert!(herd_plan::check_script(&script).is_empty(), "{script}");
        let o = sbatch_options(&script);
        let f = seed.file;
        assert_eq!(o["--nodes"], seed.nodes.to_string(), "{f}");
        assert_eq!(o["--gres"], format!("gpu:{}", seed.gpus_per_node), "{f}");
        assert_eq!(
            o["--ntasks-per-node"],
            seed.tasks_per_node.to_string(),
            "{f}"
        );
        assert_eq!(o["--cpus-per-task"], seed.cpus_per_task.to_string(), "{f}");
        let mem = o.get("--mem").map(|m| m.parse::<Memory>());
        assert_eq!(mem, seed.mem.map(|m| m.parse::<Memory>()), "{f}");
        let time = o.get("--time").map(|t| t.parse::<TimeLimit>());
        assert_eq!(time, seed.time.map(|t| t.parse::<TimeLimit>()), "{f}");
        assert_eq!(
            o.get("--partition").map(String::as_str),
            seed.partition,
            "{f}"
        );
        assert_eq!(o["--job-name"], plan.job_name, "{f}");
        assert_eq!(
            o["--output"],
            format!("\"/scratch/herd-exp/{}/logs/%j.out\"", plan.job_name),
            "{f}"
        );

        // The launch line: the seed's total tasks, and the seed's program.
        let world = seed.nodes * seed.gpus_per_node;
        assert_eq!(plan.world_size(), u64::from(world), "{f}");
        assert_eq!(rank_table(&plan).len() as u32, world, "{f}");
        let launch = script
            .split("exec srun ")
            .nth(1)
            .unwrap_or_else(|| panic!("{f}: no srun line:\n{script}"));
        let tasks = match seed.mode {
            Mode::Srun => world,
            Mode::Agent | Mode::Torchrun => seed.nodes,
        };
        assert!(
            launch.starts_with(&format!("--nodes={} --ntasks={tasks} ", seed.nodes)),
            "{f}: {launch}"
        );
        assert!(launch.contains("--kill-on-bad-exit=1"), "{f}");
        let runs = format!("'{}' '{}'", seed.runs[0], seed.runs[1]);
        assert!(launch.contains(&runs), "{f}: {launch}");
        match seed.mode {
            Mode::Agent => assert!(
                launch.contains(&format!("launch --nproc-per-node {}", seed.gpus_per_node)),
                "{f}"
            ),
            Mode::Srun => assert!(launch.contains("' exec \\\n  -- 'python'"), "{f}: {launch}"),
            // The seed's `srun torchrun`, started by the command's own python.
            Mode::Torchrun => assert!(
                launch.contains(&format!(
                    "'{}' -m torch.distributed.run --nnodes={} --nproc_per_node={}",
                    seed.runs[0], seed.nodes, seed.gpus_per_node
                )) && launch.contains("--rdzv_backend=c10d"),
                "{f}: {launch}"
            ),
        }
        for (_, value) in seed.params {
            assert!(
                plan.command.iter().any(|w| w == value),
                "{f}: {:?}",
                plan.command
            );
            assert!(script.contains(&format!("'{value}'")), "{f}");
        }
    }
}

#[test]
fn the_test_recipe_needs_its_checkpoint() {
    let job = JobFile::load(&recipes_dir().join("mmaction2_slurm_test.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let e = resolve(Some(&job), &JobKeys::default(), &[], "login1").expect_err("no CHECKPOINT");
    assert!(
        e.to_string()
            .contains("needs a value for `CHECKPOINT`: give --param CHECKPOINT=VALUE"),
        "{e}"
    );
}

#[test]
fn flags_scale_a_recipe() {
    // `herd submit mmaction2_slurm_train.toml --gpus 16`: 2 nodes of 8.
    let job = JobFile::load(&recipes_dir().join("mmaction2_slurm_train.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    let flags = JobKeys {
        gpus: Some(16),
        ..JobKeys::default()
    };
    let plan = resolve(Some(&job), &flags, &[], "login1").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((plan.nodes, plan.world_size()), (2, 16));
    assert!(check(&plan, &CheckContext::default()).is_empty());
    // The seeds' pitfall: GPUS not a multiple of GPUS_PER_NODE.
    let flags = JobKeys {
        gpus: Some(12),
        ..JobKeys::default()
    };
    let plan = resolve(Some(&job), &flags, &[], "login1").unwrap_or_else(|e| panic!("{e}"));
    let findings = check(&plan, &CheckContext::default());
    assert_eq!(findings.len(), 1);
    assert!(
        findings[0]
            .message
            .starts_with("--gpus = 12 GPUs is not a multiple of `gpus_per_node` in "),
        "{}",
        findings[0]
    );
}
