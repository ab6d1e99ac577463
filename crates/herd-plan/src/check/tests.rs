use super::*;
use crate::job::JobFile;
use crate::keys::JobKeys;
use crate::resolve::resolve;
use herd_slurm::scheduler::partition::{add_node_groups, parse_scontrol_partitions, parse_sinfo};
use std::path::{Path, PathBuf};

fn plan_with(text: &str, flags: &JobKeys) -> Plan {
    let job = JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"));
    resolve(Some(&job), flags, &[], "login1").unwrap_or_else(|e| panic!("{e}"))
}

fn plan(text: &str) -> Plan {
    plan_with(text, &JobKeys::default())
}

fn codes(findings: &[Finding]) -> Vec<&'static str> {
    findings.iter().map(|f| f.code).collect()
}

fn run(p: &Plan) -> Vec<Finding> {
    check(p, &CheckContext::default())
}

const CMD: &str = "command = [\"python\", \"train.py\"]\n";

#[test]
fn clean_plan_has_no_findings() {
    let p = plan(&format!(
        "nodes = 2\ngpus_per_node = 8\ncpus_per_task = 64\nmem = \"240G\"\n{CMD}"
    ));
    assert_eq!(run(&p), vec![]);
}

#[test]
fn gpus_must_divide() {
    let p = plan(&format!("gpus = 12\ngpus_per_node = 8\n{CMD}"));
    let f = run(&p);
    assert_eq!(codes(&f), ["gpus-not-divisible"]);
    assert_eq!(f[0].keys, [Key::Gpus, Key::GpusPerNode]);
    assert!(f[0].message.contains("`gpus` in jobs/train.toml = 12 GPUs is not a multiple of `gpus_per_node` in jobs/train.toml = 8"), "{}", f[0]);
    assert!(f[0].message.contains("use 8 or 16 GPUs"), "{}", f[0]);

    // The file says 64 GPUs on 8 nodes; a flag changes nodes.
    let flags = JobKeys {
        nodes: Some(4),
        ..JobKeys::default()
    };
    let p = plan_with(
        &format!("gpus = 64\nnodes = 8\ngpus_per_node = 8\n{CMD}"),
        &flags,
    );
    let f = run(&p);
    assert_eq!(codes(&f), ["gpus-mismatch"]);
    assert!(f[0].message.contains("--nodes × `gpus_per_node` in jobs/train.toml = 4 × 8 = 32: set gpus to 32 or nodes to 8"), "{}", f[0]);

    // Total given with nodes only: gpus per node derived, remainder reported.
    let p = plan(&format!("gpus = 10\nnodes = 4\n{CMD}"));
    assert_eq!(codes(&run(&p)), ["gpus-not-divisible"]);
}

#[test]
fn per_rank_gpu_binding_needs_a_herd_launch_and_gpus() {
    let p = plan(&format!(
        "mode = \"torchrun\"\nnodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\n{CMD}"
    ));
    let f = run(&p);
    assert_eq!(codes(&f), ["gpu-bind-torchrun"]);
    assert!(
        f[0].message
            .contains("`gpu_bind` in jobs/train.toml = per-rank")
            && f[0].message.contains("use mode = \"agent\""),
        "{}",
        f[0]
    );
    let p = plan(&format!("nodes = 2\ngpu_bind = \"per-rank\"\n{CMD}"));
    let f = run(&p);
    assert_eq!(codes(&f), ["gpu-bind-no-gpus"]);
    assert!(!has_errors(&f));
    for mode in ["agent", "srun"] {
        let p = plan(&format!(
            "mode = \"{mode}\"\nnodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\n{CMD}"
        ));
        assert_eq!(codes(&run(&p)), Vec::<&str>::new(), "{mode}");
    }
}

#[test]
fn srun_mode_rules() {
    let p = plan(&format!("mode = \"srun\"\nnodes = 2\ngpus_per_node = 8\nntasks_per_node = 4\nmax_restarts = 1\n{CMD}"));
    let f = run(&p);
    assert_eq!(codes(&f), ["srun-tasks-not-gpus", "srun-no-restarts"]);
    assert!(
        f[0].message
            .contains("`ntasks_per_node` in jobs/train.toml = 4"),
        "{}",
        f[0]
    );
    let p = plan(&format!(
        "nodes = 2\ngpus_per_node = 8\nntasks_per_node = 8\n{CMD}"
    ));
    assert_eq!(codes(&run(&p)), ["ntasks-needs-srun-mode"]);
    // Only herd's agents can put a spare in a lost node's place.
    for mode in ["srun", "torchrun"] {
        let p = plan(&format!(
            "mode = \"{mode}\"\nnodes = 2\nspare_nodes = 1\n{CMD}"
        ));
        let f = run(&p);
        assert!(
            codes(&f).contains(&"spares-need-agent-mode"),
            "{mode}: {f:?}"
        );
    }
    let p = plan(&format!(
        "nodes = 2\ngpus_per_node = 8\ncpus_per_task = 4\n{CMD}"
    ));
    let f = run(&p);
    assert_eq!(codes(&f), ["cpus-below-workers"]);
    assert_eq!(f[0].severity, Severity::Warning);
    assert!(!has_errors(&f));
}

#[test]
fn memory_rule() {
    // run.py's default: 240 GB for 64 CPUs is fine; 32G is not.
    let p = plan(&format!(
        "gpus_per_node = 8\ncpus_per_task = 64\nmem = \"32G\"\n{CMD}"
    ));
    let f = run(&p);
    assert_eq!(codes(&f), ["mem-too-small"]);
    assert!(f[0].message.contains("`mem` in jobs/train.toml = 32G per node is less than the 64G the job needs there: 64 CPUs"), "{}", f[0]);
    // srun mode counts every task's CPUs: 8 tasks × 5 CPUs = 40 CPUs.
    let p = plan(&format!(
        "mode = \"srun\"\ngpus_per_node = 8\ncpus_per_task = 5\nmem = \"39G\"\n{CMD}"
    ));
    assert_eq!(codes(&run(&p)), ["mem-too-small"]);
    let p = plan(&format!(
        "mode = \"srun\"\ngpus_per_node = 8\ncpus_per_task = 5\nmem = \"40G\"\n{CMD}"
    ));
    assert_eq!(run(&p), vec![]);
    // A data cache per worker.
    let ctx = CheckContext {
        memory: MemoryPolicy {
            min_per_cpu_mb: 1024,
            per_worker_mb: 4096,
        },
        ..CheckContext::default()
    };
    let f = check(&p, &ctx);
    assert_eq!(codes(&f), ["mem-too-small"]);
    assert!(
        f[0].message.contains("8 workers × 4096 MB data cache"),
        "{}",
        f[0]
    );
    // mem = 0 is the whole node: nothing to compare.
    let p = plan(&format!("cpus_per_task = 64\nmem = 0\n{CMD}"));
    assert_eq!(run(&p), vec![]);
}

#[test]
fn managed_sbatch_args() {
    let p = plan(&format!(
        "mem = \"10G\"\nsbatch_args = [\"--account=lab\", \"--nodes=4\", \"-N 4\", \"-o x.out\", \"--mem-per-cpu=2G\", \"--gres-flags=enforce-binding\", \"-A lab\"]\n{CMD}"
    ));
    let f = run(&p);
    assert_eq!(codes(&f), ["sbatch-arg-managed"; 4]);
    assert!(f[0].message.contains("`--nodes=4` is --nodes, which herd writes itself from the plan: set `nodes` (herd's default) instead"), "{}", f[0]);
    assert!(f[2].message.contains("remove it"), "{}", f[2]);
}

const BED_SCONTROL: &str = "\
PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
PartitionName=dev AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=UNLIMITED MaxTime=00:05:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu-a[01-03] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=24 TotalNodes=3 SelectTypeParameters=NONE JobDefaults=(null) DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED TRES=cpu=24,mem=48000M,node=3,billing=24
";
const BED_SINFO: &str =
    "gpu|up|infinite|3|8|16000|gpu:4|gpu-a[01-03]\ndev|up|5:00|3|8|16000|gpu:4|gpu-a[01-03]\n";

fn bed() -> Vec<Partition> {
    let mut parts = parse_scontrol_partitions(BED_SCONTROL).unwrap_or_else(|e| panic!("{e}"));
    let rows = parse_sinfo(BED_SINFO).unwrap_or_else(|e| panic!("{e}"));
    add_node_groups(&mut parts, &rows);
    parts
}

fn with_parts(p: &Plan, parts: &[Partition]) -> Vec<Finding> {
    check(
        p,
        &CheckContext {
            partitions: Some(parts),
            ..CheckContext::default()
        },
    )
}

#[test]
fn partitions_on_the_bed() {
    let parts = bed();
    // Fits: 3 nodes × 2 GPUs, 4 CPUs, 8G each, in the default partition.
    let p = plan(&format!(
        "nodes = 3\ngpus_per_node = 2\ncpus_per_task = 4\nmem = \"8G\"\n{CMD}"
    ));
    assert_eq!(with_parts(&p, &parts), vec![]);

    let p = plan(&format!("partition = \"gpus\"\n{CMD}"));
    let f = with_parts(&p, &parts);
    assert_eq!(codes(&f), ["partition-unknown"]);
    assert!(f[0].message.contains("partition `gpus` (`partition` in jobs/train.toml) does not exist; the cluster has gpu (default), dev"), "{}", f[0]);

    let p = plan(&format!(
        "partition = \"dev\"\ntime = \"10:00\"\nnodes = 4\n{CMD}"
    ));
    let f = with_parts(&p, &parts);
    assert_eq!(codes(&f), ["partition-too-few-nodes", "partition-max-time"]);
    assert!(
        f[1].message.contains(
            "`time` in jobs/train.toml = 00:10:00 is longer than partition dev's MaxTime=00:05:00"
        ),
        "{}",
        f[1]
    );
    assert!(
        f[0].message
            .contains("`nodes` in jobs/train.toml = 4, but partition dev has only 3 nodes"),
        "{}",
        f[0]
    );

    // Spares count: 2 nodes and 2 spares do not fit in 3.
    let p = plan(&format!(
        "partition = \"dev\"\nnodes = 2\nspare_nodes = 2\n{CMD}"
    ));
    let f = with_parts(&p, &parts);
    assert_eq!(codes(&f), ["partition-too-few-nodes"]);
    assert!(
        f[0].message.contains(
            "`nodes` in jobs/train.toml = 2 + `spare_nodes` in jobs/train.toml = 2 (4 nodes), but partition dev has only 3 nodes"
        ),
        "{}",
        f[0]
    );

    // Enough nodes in all, but not enough with 4 GPUs and 8 CPUs free of other shapes.
    let mut mixed = bed();
    mixed[0].node_groups[0].count = 1;
    mixed[0]
        .node_groups
        .push(herd_slurm::scheduler::partition::NodeGroup {
            count: 2,
            cpus: 8,
            mem_mb: 16000,
            gpus: vec![],
        });
    let p = plan(&format!(
        "nodes = 2\ngpus_per_node = 4\ncpus_per_task = 8\n{CMD}"
    ));
    let f = with_parts(&p, &mixed);
    assert_eq!(codes(&f), ["partition-too-few-nodes"]);
    assert!(f[0].message.contains("`nodes` in jobs/train.toml = 2, but only 1 nodes of partition gpu have 4 GPUs, 8 CPUs each"), "{}", f[0]);

    let p = plan(&format!("gpus_per_node = 8\n{CMD}"));
    let f = with_parts(&p, &parts);
    assert_eq!(codes(&f), ["partition-node-gpus"]);
    assert!(
        f[0].message
            .contains("no node of partition gpu has 8 GPUs (the most is 4)"),
        "{}",
        f[0]
    );

    let p = plan(&format!("cpus_per_task = 16\nmem = \"20G\"\n{CMD}"));
    assert_eq!(
        codes(&with_parts(&p, &parts)),
        ["partition-node-cpus", "partition-node-mem"]
    );

    let p = plan(&format!("gpus_per_node = 4\ngpu_type = \"a100\"\n{CMD}"));
    let f = with_parts(&p, &parts);
    assert!(
        f[0].message.contains("4 GPUs of type a100 (the most is 0)"),
        "{}",
        f[0]
    );

    // Two partitions: dev is too short, gpu fits, so dev's limit is only a warning.
    let p = plan(&format!("partition = \"dev,gpu\"\ntime = \"10:00\"\n{CMD}"));
    let f = with_parts(&p, &parts);
    assert_eq!(codes(&f), ["partition-max-time"]);
    assert_eq!(f[0].severity, Severity::Warning);
}

#[test]
fn partition_limits_and_states() {
    let mut parts = bed();
    parts[0].max_nodes = Some(2);
    parts[0].min_nodes = 2;
    parts[0].max_mem_per_node = Memory::from_megabytes(8000);
    parts[0].max_cpus_per_node = Some(4);
    parts[0].total_gpus = Some(4);
    parts[0].node_groups.clear();
    let p = plan(&format!(
        "nodes = 3\ngpus_per_node = 2\ncpus_per_task = 6\nmem = \"9G\"\n{CMD}"
    ));
    assert_eq!(
        codes(&with_parts(&p, &parts)),
        [
            "partition-max-nodes",
            "partition-max-mem",
            "partition-max-cpus",
            "partition-too-few-gpus"
        ]
    );
    let p = plan(&format!("nodes = 1\n{CMD}"));
    assert_eq!(codes(&with_parts(&p, &parts)), ["partition-min-nodes"]);
    parts[0].min_nodes = 0;
    parts[0].state = "DOWN".into();
    let f = with_parts(&p, &parts);
    assert_eq!(codes(&f), ["partition-down"]);
    assert!(!has_errors(&f));
    parts[0].state = "INACTIVE".into();
    assert_eq!(codes(&with_parts(&p, &parts)), ["partition-closed"]);
    // No partition given and no default: nothing to compare.
    parts[0].default = false;
    assert_eq!(with_parts(&p, &parts), vec![]);
}

fn lookup_check(command: &str, files: &[&str]) -> Vec<Finding> {
    let p = plan(&format!("command = {command}\n"));
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    let exists = |path: &Path| files.iter().any(|f| f == path);
    let path = [PathBuf::from("/usr/bin"), PathBuf::from("/opt/conda/bin")];
    let ctx = CheckContext {
        programs: Some(ProgramLookup {
            snapshot: Path::new("/exp/x/code"),
            path: &path,
            exists: &exists,
            executable: &exists,
        }),
        ..CheckContext::default()
    };
    check(&p, &ctx)
}

#[test]
fn programs_and_scripts() {
    let files = [
        "/opt/conda/bin/python",
        "/exp/x/code/train.py",
        "/exp/x/code/run.sh",
        "/usr/bin/bash",
    ];
    assert_eq!(
        lookup_check(r#"["python", "-u", "train.py", "--lr", "1"]"#, &files),
        vec![]
    );
    assert_eq!(
        lookup_check(r#"["python", "-W", "ignore", "train.py"]"#, &files),
        vec![]
    );
    assert_eq!(
        lookup_check(r#"["python", "-m", "torch.utils.collect_env"]"#, &files),
        vec![]
    );
    assert_eq!(lookup_check(r#"["./run.sh", "a"]"#, &files), vec![]);
    assert_eq!(lookup_check(r#"["bash", "-x", "run.sh"]"#, &files), vec![]);
    assert_eq!(lookup_check(r#"["bash", "-c", "echo hi"]"#, &files), vec![]);
    assert_eq!(
        lookup_check(r#"["/opt/conda/bin/python", "--", "train.py"]"#, &files),
        vec![]
    );

    let f = lookup_check(r#"["pythn", "train.py"]"#, &files);
    assert_eq!(codes(&f), ["program-not-found"]);
    assert!(f[0].message.contains("`command` in jobs/train.toml: the program `pythn` is not on PATH (searched /usr/bin:/opt/conda/bin)"), "{}", f[0]);
    let f = lookup_check(r#"["python", "-u", "tools/train.py"]"#, &files);
    assert_eq!(codes(&f), ["script-not-found"]);
    assert!(f[0].message.contains("`tools/train.py` (argument 3, the script python runs) is not in the snapshot /exp/x/code"), "{}", f[0]);
    let f = lookup_check(r#"["./missing.sh"]"#, &files);
    assert!(
        f[0].message
            .contains("is not in the snapshot /exp/x/code, where the job runs"),
        "{}",
        f[0]
    );
    let f = lookup_check(r#"["/opt/none/python3", "train.py"]"#, &files);
    assert!(
        f[0].message.contains("`/opt/none/python3` does not exist"),
        "{}",
        f[0]
    );
}

/// torchrun mode: a python command needs its interpreter (torchrun beside it, or a
/// warning); any other program needs `torchrun` on PATH.
#[test]
fn torchrun_mode_needs_a_way_to_start_torchrun() {
    let check_with = |command: &str, files: &[&str], executable: &[&str]| {
        let p = plan(&format!("mode = \"torchrun\"\ncommand = {command}\n"));
        let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
        let exec: Vec<PathBuf> = executable.iter().map(PathBuf::from).collect();
        let exists = |path: &Path| files.iter().any(|f| f == path);
        let executable = |path: &Path| exec.iter().any(|f| f == path);
        let path = [PathBuf::from("/usr/bin"), PathBuf::from("/opt/conda/bin")];
        let ctx = CheckContext {
            programs: Some(ProgramLookup {
                snapshot: Path::new("/exp/x/code"),
                path: &path,
                exists: &exists,
                executable: &executable,
            }),
            ..CheckContext::default()
        };
        check(&p, &ctx)
    };
    let venv = ["/v/bin/python", "/v/bin/torchrun", "/exp/x/code/train.py"];
    // The venv's python by path, torchrun beside it: nothing to say, whatever PATH holds.
    assert_eq!(
        check_with(
            r#"["/v/bin/python", "train.py"]"#,
            &venv,
            &["/v/bin/python"]
        ),
        vec![]
    );
    // A bare python is looked for on PATH, and torchrun beside the one found.
    let conda = [
        "/opt/conda/bin/python3",
        "/opt/conda/bin/torchrun",
        "/exp/x/code/train.py",
    ];
    assert_eq!(
        check_with(
            r#"["python3", "train.py"]"#,
            &conda,
            &["/opt/conda/bin/python3"]
        ),
        vec![]
    );
    // No torchrun beside it: a warning (torch may be in the user site).
    let f = check_with(
        r#"["/v/bin/python", "train.py"]"#,
        &venv[..1],
        &["/v/bin/python"],
    );
    assert_eq!(
        codes(&f),
        ["script-not-found", "torchrun-not-beside-python"]
    );
    assert!(f[1].message.contains("torchrun mode runs `/v/bin/python -m torch.distributed.run`, and there is no `torchrun` beside /v/bin/python"), "{}", f[1]);
    // Not executable: an error.
    let f = check_with(r#"["/v/bin/python", "train.py"]"#, &venv, &[]);
    assert_eq!(codes(&f), ["torchrun-python-not-executable"]);
    assert!(
        f[0].message.contains("/v/bin/python is not executable"),
        "{}",
        f[0]
    );
    // Missing: check_program's error alone.
    let f = check_with(r#"["/w/bin/python", "train.py"]"#, &venv, &[]);
    assert_eq!(codes(&f), ["program-not-found"]);
    // Another program: torchrun must be on PATH.
    let f = check_with(r#"["./run.sh"]"#, &["/exp/x/code/run.sh"], &[]);
    assert_eq!(codes(&f), ["torchrun-not-found"]);
    assert!(
        f[0].message.contains(
            "torchrun mode runs `torchrun` from PATH to start `./run.sh`, and `torchrun` is not on PATH here (searched /usr/bin:/opt/conda/bin): give the venv's python by its path (`-- /path/venv/bin/python train.py`; herd then runs `/path/venv/bin/python -m torch.distributed.run`"
        ),
        "{}",
        f[0]
    );
    assert_eq!(
        check_with(
            r#"["./run.sh"]"#,
            &["/exp/x/code/run.sh", "/opt/conda/bin/torchrun"],
            &[]
        ),
        vec![]
    );
    // Other modes need no torchrun.
    assert_eq!(
        lookup_check(r#"["./run.sh"]"#, &["/exp/x/code/run.sh"]),
        vec![]
    );
}

#[test]
fn scripts() {
    assert_eq!(
        check_script("#!/bin/bash\n#SBATCH --nodes=1\n\n# note\nsrun x\n"),
        vec![]
    );
    let f = check_script("# Copyright\n#!/bin/bash\n#SBATCH --nodes=8\n");
    assert_eq!(codes(&f), ["shebang-not-first"]);
    assert!(
        f[0].message
            .contains("first line is `# Copyright`, not a `#!` line (it is on line 2)"),
        "{}",
        f[0]
    );
    assert_eq!(
        codes(&check_script("\n#!/bin/bash\n")),
        ["shebang-not-first"]
    );
    assert_eq!(codes(&check_script("")), ["shebang-not-first"]);
    assert_eq!(
        codes(&check_script("\u{feff}#!/bin/bash\n")),
        ["shebang-not-first"]
    );
    assert_eq!(
        codes(&check_script("#!/bin/bash\r\n#SBATCH -N1\r\n")),
        ["script-crlf"]
    );
    let f = check_script("#!/bin/bash\n#SBATCH -N 2\nset -e\n#SBATCH --time=5\n");
    assert_eq!(codes(&f), ["sbatch-after-command"]);
    assert!(
        f[0].message
            .contains("line 4: `#SBATCH --time=5` comes after the first command (line 3)"),
        "{}",
        f[0]
    );
    // Through check(): script findings come with the others.
    let p = plan(CMD);
    let ctx = CheckContext {
        script: Some("echo\n"),
        ..CheckContext::default()
    };
    assert_eq!(codes(&check(&p, &ctx)), ["shebang-not-first"]);
}

#[test]
fn findings_serialize() {
    let f = error("x", &[Key::Mem], "m".into());
    let json = serde_json::to_string(&f).unwrap_or_default();
    assert_eq!(
        json,
        r#"{"severity":"error","code":"x","keys":["mem"],"message":"m"}"#
    );
    assert_eq!(f.to_string(), "error: m");
}

/// In agent and torchrun mode a `cpus_per_task` below the node's workers gives each less
/// than one CPU: a warning naming the key and `cpus_per_worker`. `cpus_per_worker` gives
/// each worker its own, so it never warns; nor does srun mode, one task per worker.
#[test]
fn cpus_below_workers_is_warned_for_cpus_per_task_alone() {
    for mode in ["agent", "torchrun"] {
        let p = plan(&format!(
            "mode = \"{mode}\"\nnodes = 2\ngpus_per_node = 8\ncpus_per_task = 4\n{CMD}"
        ));
        let f = run(&p);
        assert_eq!(codes(&f), ["cpus-below-workers"], "{mode}");
        assert!(
            f[0].message
                .contains("`cpus_per_task` in jobs/train.toml = 4 CPUs per node for 8 workers")
                && f[0].message.contains("or give cpus_per_worker instead"),
            "{}",
            f[0]
        );
        let p = plan(&format!(
            "mode = \"{mode}\"\nnodes = 2\ngpus_per_node = 8\ncpus_per_worker = 1\n{CMD}"
        ));
        assert_eq!(p.cpus_per_task, Some(8), "{mode}");
        assert_eq!(run(&p), vec![], "{mode}");
    }
    let p = plan(&format!(
        "mode = \"srun\"\nnodes = 2\ngpus_per_node = 8\ncpus_per_task = 1\n{CMD}"
    ));
    assert_eq!(run(&p), vec![]);
}

/// The memory rule counts the CPUs SLURM is asked for, made from `cpus_per_worker`: 8
/// workers × 5 CPUs = 40 CPUs a node in every mode, named by the key that gave them.
#[test]
fn memory_rule_counts_the_cpus_made_from_cpus_per_worker() {
    for mode in ["agent", "torchrun", "srun"] {
        let p = plan(&format!(
            "mode = \"{mode}\"\ngpus_per_node = 8\ncpus_per_worker = 5\nmem = \"39G\"\n{CMD}"
        ));
        let f = run(&p);
        assert_eq!(codes(&f), ["mem-too-small"], "{mode}");
        assert_eq!(f[0].keys, [Key::Mem, Key::CpusPerWorker], "{mode}");
        assert!(
            f[0].message.contains("is less than the 40G the job needs there: 40 CPUs (`cpus_per_worker` in jobs/train.toml = 5 × 8 workers) × 1024 MB per CPU; raise mem or lower cpus_per_worker"),
            "{mode}: {}",
            f[0]
        );
        let p = plan(&format!(
            "mode = \"{mode}\"\ngpus_per_node = 8\ncpus_per_worker = 5\nmem = \"40G\"\n{CMD}"
        ));
        assert_eq!(run(&p), vec![], "{mode}");
    }
    // cpus_per_task: the tasks' CPUs, as before.
    let p = plan(&format!(
        "mode = \"srun\"\ngpus_per_node = 8\ncpus_per_task = 5\nmem = \"39G\"\n{CMD}"
    ));
    let f = run(&p);
    assert_eq!(f[0].keys, [Key::Mem, Key::CpusPerTask]);
    assert!(
        f[0].message
            .contains("40 CPUs (`cpus_per_task` in jobs/train.toml = 5 × 8 tasks)"),
        "{}",
        f[0]
    );
}

/// A partition's node sizes are compared with the CPUs made from `cpus_per_worker`: 2
/// workers × 5 = 10 CPUs, more than the bed's 8, named by that key.
#[test]
fn node_sizes_count_the_cpus_made_from_cpus_per_worker() {
    let p = plan(&format!(
        "nodes = 2\ngpus_per_node = 2\ncpus_per_worker = 5\n{CMD}"
    ));
    let f = with_parts(&p, &bed());
    assert_eq!(codes(&f), ["partition-node-cpus"]);
    assert_eq!(f[0].keys, [Key::CpusPerWorker, Key::Partition]);
    assert!(
        f[0].message.contains("the job asks for 10 CPUs per node (`cpus_per_worker` in jobs/train.toml = 5 × 2 workers), but no node of partition gpu has more than 8"),
        "{}",
        f[0]
    );
    let p = plan(&format!(
        "nodes = 2\ngpus_per_node = 2\ncpus_per_worker = 4\n{CMD}"
    ));
    assert_eq!(with_parts(&p, &bed()), vec![]);
}
