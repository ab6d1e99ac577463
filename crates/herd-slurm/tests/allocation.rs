//! The allocation model on environments captured from real SLURM (22.05.8 and 26.05.5, the
//! test bed).

use herd_slurm::{worker_env, Allocation, AllocationError, GpuBind, LaunchInfo, Position, Vars};

/// Task 0 of `srun -N2 -n3` inside a 3-node batch job (`sbatch -N3 --gres=gpu:2
/// --ntasks-per-node=2`), as printed on the bed. Note SLURM_NODELIST is the job's nodes while
/// SLURM_NNODES and SLURM_TASKS_PER_NODE follow the step, and SLURM_NTASKS_PER_NODE is stale.
const STEP_IN_BATCH: &str = "\
CUDA_VISIBLE_DEVICES=0,1
SLURMD_NODENAME=gpu-a01
SLURM_CPUS_ON_NODE=2
SLURM_GPUS_ON_NODE=2
SLURM_JOBID=2
SLURM_JOB_CPUS_PER_NODE=2(x3)
SLURM_JOB_GPUS=0,1
SLURM_JOB_ID=2
SLURM_JOB_NODELIST=gpu-a[01-03]
SLURM_JOB_NUM_NODES=3
SLURM_LOCALID=0
SLURM_NNODES=2
SLURM_NODEID=0
SLURM_NODELIST=gpu-a[01-03]
SLURM_NPROCS=3
SLURM_NTASKS=3
SLURM_NTASKS_PER_NODE=2
SLURM_PROCID=0
SLURM_STEPID=0
SLURM_STEP_GPUS=0,1
SLURM_STEP_ID=0
SLURM_STEP_NODELIST=gpu-a[01-02]
SLURM_STEP_NUM_NODES=2
SLURM_STEP_NUM_TASKS=3
SLURM_STEP_TASKS_PER_NODE=2,1
SLURM_TASKS_PER_NODE=2,1
";

/// The batch shell of that job: SLURM sets PROCID/LOCALID/NODEID to 0, but it is no task.
const BATCH: &str = "\
CUDA_VISIBLE_DEVICES=0,1
SLURMD_NODENAME=gpu-a01
SLURM_CPUS_ON_NODE=2
SLURM_GPUS_ON_NODE=2
SLURM_JOBID=2
SLURM_JOB_CPUS_PER_NODE=2(x3)
SLURM_JOB_ID=2
SLURM_JOB_NODELIST=gpu-a[01-03]
SLURM_JOB_NUM_NODES=3
SLURM_LOCALID=0
SLURM_NNODES=3
SLURM_NODEID=0
SLURM_NODELIST=gpu-a[01-03]
SLURM_NPROCS=6
SLURM_NTASKS=6
SLURM_NTASKS_PER_NODE=2
SLURM_PROCID=0
SLURM_TASKS_PER_NODE=2(x3)
";

/// The batch shell of the same job on Slurm 26.05.5 (`testbed/up --slurm 26.05`): SLURM sets
/// `SLURM_STEP_ID=-5` there (the batch step; 22.05 and 24.11 leave it unset), and a few new
/// variables.
const BATCH_26_05: &str = "\
CUDA_VISIBLE_DEVICES=0,1
SLURMD_NODENAME=gpu-a01
SLURM_CPUS_ON_NODE=2
SLURM_GPUS_ON_NODE=2
SLURM_JOBID=47
SLURM_JOB_CPUS_PER_NODE=2(x3)
SLURM_JOB_EXCLUSIVE=NO
SLURM_JOB_GPUS=0,1
SLURM_JOB_ID=47
SLURM_JOB_NODELIST=gpu-a[01-03]
SLURM_JOB_NUM_NODES=3
SLURM_JOB_OVERSUBSCRIBE=NO
SLURM_JOB_SLUID=sEKDM936BEAY00
SLURM_LOCALID=0
SLURM_NNODES=3
SLURM_NODEID=0
SLURM_NODELIST=gpu-a[01-03]
SLURM_NPROCS=6
SLURM_NTASKS=6
SLURM_NTASKS_PER_NODE=2
SLURM_OOM_KILL_STEP=0
SLURM_PROCID=0
SLURM_STEPID=-5
SLURM_STEP_ID=-5
SLURM_TASKS_PER_NODE=2(x3)
";

fn with(base: &str, changes: &[(&str, Option<&str>)]) -> Vars {
    let mut vars = Vars::parse(base);
    for (k, v) in changes {
        match v {
            Some(v) => vars.0.insert(k.to_string(), v.to_string()),
            None => vars.0.remove(*k),
        };
    }
    vars
}

fn alloc(vars: &Vars) -> Allocation {
    Allocation::from_vars(vars).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn step_variables_win_over_job_variables_in_a_step() {
    let a = alloc(&Vars::parse(STEP_IN_BATCH));
    assert_eq!(a.job_id, 2);
    assert_eq!(a.job_nodes, ["gpu-a01", "gpu-a02", "gpu-a03"]);
    assert_eq!(a.layout.nodes, ["gpu-a01", "gpu-a02"]);
    assert_eq!(a.layout.tasks_per_node, [2, 1]);
    assert_eq!(a.layout.world_size(), 3);
    let t = a.task.clone().expect("a step task");
    assert_eq!(
        (t.rank, t.local_rank, t.node_rank, t.local_world_size),
        (0, 0, 0, 2)
    );
    assert_eq!(t.node, "gpu-a01");
    assert_eq!(a.gpus.visible, Some(vec!["0".to_owned(), "1".to_owned()]));
    assert_eq!(a.master_node(), "gpu-a01");
}

#[test]
fn batch_shell_is_not_a_task() {
    let a = alloc(&Vars::parse(BATCH));
    assert!(a.task.is_none());
    assert_eq!(a.layout.tasks_per_node, [2, 2, 2]);
    assert_eq!(a.layout.world_size(), 6);
}

/// 26.05's batch shell says `SLURM_STEP_ID=-5`: still the job's layout and no task, and
/// `herd run` there is not "inside an srun step". The other special steps (extern -4,
/// salloc's interactive step -6, or those written unsigned) are no srun step either.
#[test]
fn the_batch_step_of_newer_releases_is_not_an_srun_step() {
    let a = alloc(&Vars::parse(BATCH_26_05));
    assert!(a.task.is_none());
    assert_eq!(a.step_id, None);
    assert_eq!(a.job_id, 47);
    assert_eq!(a.layout.tasks_per_node, [2, 2, 2]);
    for special in ["-4", "-5", "-6", "4294967291", "4294967290"] {
        let v = with(BATCH_26_05, &[("SLURM_STEP_ID", Some(special))]);
        assert_eq!(herd_slurm::allocation::srun_step_id(&v), None, "{special}");
    }
    let step = Vars::parse(STEP_IN_BATCH);
    assert_eq!(herd_slurm::allocation::srun_step_id(&step), Some("0"));
}

#[test]
fn uneven_tasks_per_node() {
    // srun -N3 --ntasks=5 on the bed: task 4 is alone on gpu-a03.
    let vars = with(
        STEP_IN_BATCH,
        &[
            ("SLURM_STEP_NODELIST", Some("gpu-a[01-03]")),
            ("SLURM_STEP_NUM_NODES", Some("3")),
            ("SLURM_NNODES", Some("3")),
            ("SLURM_STEP_NUM_TASKS", Some("5")),
            ("SLURM_NTASKS", Some("5")),
            ("SLURM_STEP_TASKS_PER_NODE", Some("3,1(x2)")),
            ("SLURM_TASKS_PER_NODE", Some("3,1(x2)")),
            ("SLURM_PROCID", Some("4")),
            ("SLURM_NODEID", Some("2")),
            ("SLURMD_NODENAME", Some("gpu-a03")),
        ],
    );
    let a = alloc(&vars);
    let t = a.task.expect("task");
    assert_eq!((t.rank, t.node_rank, t.local_world_size), (4, 2, 1));
    assert_eq!(a.layout.first_rank(2), 4);
}

#[test]
fn disagreeing_variables_are_named() {
    type Change<'a> = (&'a str, Option<&'a str>);
    let cases: &[(&[Change], &str)] = &[
        (&[("SLURM_STEP_NUM_NODES", Some("3"))], "SLURM_STEP_NUM_NODES=3 but SLURM_STEP_NODELIST gives 2"),
        (&[("SLURM_NTASKS", Some("4"))], "SLURM_NTASKS=4 but SLURM_STEP_TASKS_PER_NODE gives 3"),
        (&[("SLURM_STEP_TASKS_PER_NODE", Some("2(x3)"))], "SLURM_STEP_TASKS_PER_NODE=2(x3) covers 3 nodes but SLURM_STEP_NODELIST=gpu-a[01-02] names 2"),
        (&[("SLURM_PROCID", Some("3"))], "SLURM_PROCID=3 but the step has 3 tasks"),
        (&[("SLURM_NODEID", Some("2"))], "SLURM_NODEID=2 but the step has 2 nodes"),
        (&[("SLURM_NODEID", Some("1")), ("SLURM_LOCALID", Some("1"))], "SLURM_LOCALID=1 but node 1 runs 1 tasks"),
        (&[("SLURMD_NODENAME", Some("gpu-a02"))], "SLURMD_NODENAME=gpu-a02 but SLURM_NODEID=0 is gpu-a01"),
        (&[("SLURM_STEP_NODELIST", Some("gpu-a[01,09]"))], "step node gpu-a09 (SLURM_STEP_NODELIST) is not in the job's node list"),
        (&[("SLURM_JOB_NUM_NODES", Some("4"))], "SLURM_JOB_NUM_NODES=4 but SLURM_JOB_NODELIST gives 3"),
        (&[("SLURM_TASKS_PER_NODE", Some("3"))], "SLURM_TASKS_PER_NODE=3 but SLURM_STEP_TASKS_PER_NODE=2,1"),
    ];
    for (changes, want) in cases {
        let err = Allocation::from_vars(&with(STEP_IN_BATCH, changes))
            .expect_err(&format!("{changes:?} must be refused"));
        assert!(matches!(err, AllocationError::Inconsistent(_)), "{err:?}");
        assert!(
            err.to_string().contains(want),
            "{changes:?}: got `{err}`, want `{want}`"
        );
    }
}

#[test]
fn invalid_and_missing_values_name_the_variable() {
    let e = Allocation::from_vars(&with(
        STEP_IN_BATCH,
        &[("SLURM_STEP_NODELIST", Some("gpu-a[01-"))],
    ))
    .expect_err("bad hostlist");
    assert!(
        e.to_string()
            .starts_with("SLURM_STEP_NODELIST=\"gpu-a[01-\" is invalid: expected a number"),
        "{e}"
    );
    let e = Allocation::from_vars(&with(
        STEP_IN_BATCH,
        &[("SLURM_STEP_TASKS_PER_NODE", Some("2(3)"))],
    ))
    .expect_err("bad counts");
    assert!(
        e.to_string()
            .contains("SLURM_STEP_TASKS_PER_NODE=\"2(3)\" is invalid"),
        "{e}"
    );
    let e = Allocation::from_vars(&with(STEP_IN_BATCH, &[("SLURM_PROCID", None)]))
        .expect_err("no procid");
    assert_eq!(
        e,
        AllocationError::Missing {
            var: "SLURM_PROCID",
            context: "SLURM_STEP_ID is set (this is an srun task)".into()
        }
    );
    let e = Allocation::from_vars(&Vars::parse("PATH=/bin\n")).expect_err("no job");
    assert_eq!(e, AllocationError::NotInAllocation);
}

#[test]
fn heterogeneous_job_components() {
    let vars = with(
        BATCH,
        &[
            ("SLURM_HET_SIZE", Some("2")),
            ("SLURM_JOB_NODELIST_HET_GROUP_0", Some("gpu-a01")),
            ("SLURM_JOB_NODELIST_HET_GROUP_1", Some("gpu-a[02-03]")),
            ("SLURM_TASKS_PER_NODE_HET_GROUP_1", Some("4(x2)")),
        ],
    );
    let a = alloc(&vars);
    assert_eq!(a.het_groups.len(), 2);
    assert_eq!(a.het_groups[1].nodes, ["gpu-a02", "gpu-a03"]);
    assert_eq!(a.het_groups[1].tasks_per_node, Some(vec![4, 4]));
    let e = Allocation::from_vars(&with(
        &vars_text(&vars),
        &[("SLURM_JOB_NODELIST_HET_GROUP_1", None)],
    ))
    .expect_err("missing group");
    assert!(e
        .to_string()
        .contains("SLURM_HET_SIZE=2 but SLURM_JOB_NODELIST_HET_GROUP_1 is not set"));
}

fn vars_text(v: &Vars) -> String {
    v.0.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// Code written for one-task-per-GPU srun launch (InternVideo's and SwAV's
/// init_distributed_mode, mmcv's launcher=slurm) reads SLURM_PROCID, SLURM_LOCALID,
/// SLURM_NTASKS, and the seeds compute the world size as SLURM_NNODES × the first character
/// of SLURM_TASKS_PER_NODE. Under herd every worker's SLURM variables describe the worker.
#[test]
fn workers_get_slurm_variables_describing_themselves() {
    let a = alloc(&Vars::parse(BATCH));
    let info = LaunchInfo {
        master_addr: "10.0.0.1".into(),
        master_port: Some(29500),
        run_id: "2".into(),
        node_gpus: vec!["0".into(), "1".into()],
        node_cpus: Some(8),
        job_id: Some(2),
        ..LaunchInfo::default()
    };
    let mut ranks = std::collections::BTreeSet::new();
    for node_rank in 0..3u32 {
        for local_rank in 0..2u32 {
            let rank = a.layout.first_rank(node_rank as usize) + local_rank;
            let env = worker_env(
                &a.layout,
                Position {
                    rank,
                    local_rank,
                    node_rank,
                },
                &info,
            );
            let get = |k: &str| env.get(k).cloned().unwrap_or_else(|| panic!("{k} not set"));
            assert_eq!(get("RANK"), rank.to_string());
            assert_eq!(get("SLURM_PROCID"), rank.to_string());
            assert_eq!(get("SLURM_LOCALID"), local_rank.to_string());
            assert_eq!(get("LOCAL_RANK"), local_rank.to_string());
            assert_eq!(get("SLURM_NODEID"), node_rank.to_string());
            assert_eq!(get("WORLD_SIZE"), "6");
            assert_eq!(get("SLURM_NTASKS"), "6");
            let seeds_world: u32 = get("SLURM_NNODES").parse::<u32>().expect("n")
                * get("SLURM_TASKS_PER_NODE")[..1]
                    .parse::<u32>()
                    .expect("first char");
            assert_eq!(seeds_world, 6, "the seeds' world-size formula");
            assert_eq!(
                get("CUDA_VISIBLE_DEVICES"),
                "0,1",
                "every worker sees all of its node's GPUs, as under torchrun and srun"
            );
            let per_rank = worker_env(
                &a.layout,
                Position {
                    rank,
                    local_rank,
                    node_rank,
                },
                &LaunchInfo {
                    gpu_bind: GpuBind::PerRank,
                    ..info.clone()
                },
            );
            assert_eq!(
                per_rank["CUDA_VISIBLE_DEVICES"],
                local_rank.to_string(),
                "--gpu-bind per-rank: one GPU per worker"
            );
            assert_eq!(get("OMP_NUM_THREADS"), "4", "8 CPUs over 2 workers");
            assert_eq!(get("MASTER_ADDR"), "10.0.0.1");
            assert_eq!(get("MASTER_PORT"), "29500");
            assert_eq!(get("SLURM_STEP_NODELIST"), "gpu-a[01-03]");
            assert_eq!(get("HERD_MASTER_NODE"), "gpu-a01");
            ranks.insert(rank);
        }
    }
    assert_eq!(ranks.len(), 6, "distinct ranks");
}

#[test]
fn user_omp_threads_and_fewer_gpus_than_workers() {
    let a = alloc(&Vars::parse(BATCH));
    let info = LaunchInfo {
        node_gpus: vec!["0".into()],
        user_omp_threads: Some("7".into()),
        ..LaunchInfo::default()
    };
    let env = worker_env(
        &a.layout,
        Position {
            rank: 1,
            local_rank: 1,
            node_rank: 0,
        },
        &info,
    );
    assert_eq!(env["OMP_NUM_THREADS"], "7");
    assert_eq!(
        env["CUDA_VISIBLE_DEVICES"], "0",
        "workers share the only GPU"
    );
    let per_rank = worker_env(
        &a.layout,
        Position {
            rank: 1,
            local_rank: 1,
            node_rank: 0,
        },
        &LaunchInfo {
            gpu_bind: GpuBind::PerRank,
            ..info.clone()
        },
    );
    assert_eq!(
        per_rank["CUDA_VISIBLE_DEVICES"], "0",
        "per-rank cannot split one GPU: the workers share it"
    );
    assert!(!env.contains_key("MASTER_PORT"), "no port claimed yet");
}

#[test]
fn node_gpus_read_once_inside_and_outside_an_allocation() {
    use herd_slurm::Gpus;
    let a = alloc(&Vars::parse(STEP_IN_BATCH));
    assert_eq!(
        Gpus::from_vars(&Vars::parse(STEP_IN_BATCH)),
        Ok(a.gpus.clone())
    );
    assert_eq!(a.gpus.count(), Some(2));
    let info = LaunchInfo::for_node(
        &a.gpus,
        a.cpus_on_node,
        &Vars::parse(STEP_IN_BATCH),
        "2".into(),
        Some(2),
    );
    assert_eq!(info.node_gpus, vec!["0".to_owned(), "1".to_owned()]);
    assert_eq!(
        (info.node_cpus, info.job_id, info.restart_count),
        (Some(2), Some(2), 0)
    );
    // No GPU visible: SLURM's count, else none; a blank CUDA_VISIBLE_DEVICES names none.
    let hidden = with(STEP_IN_BATCH, &[("CUDA_VISIBLE_DEVICES", None)]);
    assert_eq!(Gpus::from_vars(&hidden).map(|g| g.count()), Ok(Some(2)));
    let blank = Vars::parse("CUDA_VISIBLE_DEVICES= \n");
    let g = Gpus::from_vars(&blank).expect("no SLURM variable is needed");
    assert_eq!((g.count(), g.visible), (None, None));
    assert!(Gpus::from_vars(&Vars::parse("SLURM_GPUS_ON_NODE=two\n")).is_err());
}

/// An array task is named `ARRAYID_TASK`, as `herd submit` records it (its own
/// `SLURM_JOB_ID` may be the array's, which SLURM's commands take for every task); a job of
/// its own by its id; none outside a job.
#[test]
fn an_array_task_is_named_by_its_array_and_index() {
    let array = with(
        BATCH,
        &[
            ("SLURM_JOB_ID", Some("1234")),
            ("SLURM_ARRAY_JOB_ID", Some("1234")),
            ("SLURM_ARRAY_TASK_ID", Some("3")),
        ],
    );
    assert_eq!(
        herd_slurm::allocation::job_ref(&array).as_deref(),
        Some("1234_3")
    );
    let a = alloc(&array);
    let info = LaunchInfo::for_task(&a, &array, String::new(), None);
    assert_eq!(info.job_ref.as_deref(), Some("1234_3"));
    assert_eq!(
        info.job_id,
        Some(1234),
        "srun --jobid still gets the number"
    );

    let single = with(BATCH, &[("SLURM_ARRAY_TASK_ID", None)]);
    let a = alloc(&single);
    let info = LaunchInfo::for_task(&a, &single, String::new(), None);
    assert_eq!(info.job_ref, Some(a.job_id.to_string()));
    assert_eq!(
        herd_slurm::allocation::job_ref(&Vars::parse("PATH=/bin\n")),
        None
    );
    // A task id without the array's id (or one that is no number) names no array.
    let odd = with(
        BATCH,
        &[
            ("SLURM_ARRAY_JOB_ID", Some("x")),
            ("SLURM_ARRAY_TASK_ID", Some("1")),
        ],
    );
    assert_eq!(
        herd_slurm::allocation::job_ref(&odd),
        Some(alloc(&odd).job_id.to_string())
    );
}

/// On a node with several networks every worker's collectives use the interface on the
/// node's route to the master (`GLOO_SOCKET_IFNAME`, `NCCL_SOCKET_IFNAME`); a variable the
/// user set is left as it is (the worker inherits it), and without a known route herd sets
/// neither.
#[test]
fn workers_use_the_interface_on_the_route_to_the_master_unless_the_user_named_one() {
    let a = alloc(&Vars::parse(BATCH));
    let pos = Position {
        rank: 2,
        local_rank: 0,
        node_rank: 1,
    };
    let info = LaunchInfo {
        master_addr: "10.213.47.11".into(),
        socket_ifname: Some("eth0".into()),
        ..LaunchInfo::for_node(&a.gpus, None, &Vars::parse(BATCH), "2".into(), Some(2))
    };
    let env = worker_env(&a.layout, pos, &info);
    assert_eq!(env["GLOO_SOCKET_IFNAME"], "eth0");
    assert_eq!(env["NCCL_SOCKET_IFNAME"], "eth0");

    let user = with(BATCH, &[("NCCL_SOCKET_IFNAME", Some("=ib0"))]);
    let info = LaunchInfo {
        socket_ifname: Some("eth0".into()),
        ..LaunchInfo::for_node(&a.gpus, None, &user, "2".into(), Some(2))
    };
    let env = worker_env(&a.layout, pos, &info);
    assert_eq!(env["GLOO_SOCKET_IFNAME"], "eth0");
    assert!(
        !env.contains_key("NCCL_SOCKET_IFNAME"),
        "the user's value is inherited, never replaced"
    );

    let unknown = LaunchInfo::for_node(&a.gpus, None, &Vars::parse(BATCH), "2".into(), None);
    let env = worker_env(&a.layout, pos, &unknown);
    assert!(!env.contains_key("GLOO_SOCKET_IFNAME") && !env.contains_key("NCCL_SOCKET_IFNAME"));
}
