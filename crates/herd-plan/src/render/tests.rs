use super::*;
use crate::job::JobFile;
use crate::keys::JobKeys;
use crate::resolve::resolve;
use crate::values::Signal;
use std::path::PathBuf;

fn plan(text: &str) -> Plan {
    let job = JobFile::parse(text, Path::new("jobs/train.toml")).unwrap_or_else(|e| panic!("{e}"));
    resolve(Some(&job), &JobKeys::default(), &[], "login1").unwrap_or_else(|e| panic!("{e}"))
}

fn params() -> ScriptParams<'static> {
    ScriptParams {
        exp_dir: Path::new("/scratch/exp/train"),
        herd: Path::new("/opt/herd/bin/herd"),
        dependency: None,
    }
}

fn render(p: &Plan) -> String {
    render_script(p, &params()).unwrap_or_else(|e| panic!("{e}"))
}

fn sbatch_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter_map(|l| l.strip_prefix("#SBATCH "))
        .collect()
}

#[test]
fn agent_script() {
    let p = plan(
        "nodes = 2\ngpus_per_node = 4\ncpus_per_task = 32\nmem = \"240GB\"\ntime = \"2-00:00:00\"\npartition = \"gpu\"\nconstraint = \"ib&a100\"\nrequeue = true\nsignal = \"USR1@90\"\nmax_restarts = 2\nsbatch_args = [\"--account=vision\", \"--qos=high\"]\ncommand = [\"python\", \"-u\", \"train.py\", \"--lr\", \"0.1\"]\n",
    );
    let s = render(&p);
    assert!(s.starts_with("#!/bin/bash\n#SBATCH "), "{s}");
    assert_eq!(
        sbatch_lines(&s),
        vec![
            "--job-name=train",
            "--nodes=2",
            "--ntasks-per-node=1",
            "--gres=gpu:4",
            "--cpus-per-task=32",
            "--mem=240G",
            "--time=2-00:00:00",
            "--partition=gpu",
            "--constraint=ib&a100",
            "--output=\"/scratch/exp/train/logs/%j.out\"",
            "--error=\"/scratch/exp/train/logs/%j.err\"",
            "--open-mode=append",
            "--requeue",
            "--signal=USR1@90",
            "--account=vision",
            "--qos=high",
        ]
    );
    assert!(s.contains("cd -- '/scratch/exp/train/code'\n"), "{s}");
    assert!(
        s.contains("export HERD_EXP_DIR='/scratch/exp/train'\n"),
        "{s}"
    );
    assert!(
        s.contains("export HERD_CHECKPOINT_DIR='/scratch/exp/train/checkpoints'\n"),
        "{s}"
    );
    assert!(s.contains("HERD_JOB_SECRET=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n')\nexport HERD_JOB_SECRET\n"), "{s}");
    assert!(s.contains(
        "exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1 \\\n  '/opt/herd/bin/herd' launch --nproc-per-node 4 --max-restarts 2 --warn-before 120 --max-requeues 3 --log-dir '/scratch/exp/train/logs' \\\n  -- 'python' '-u' 'train.py' '--lr' '0.1'\n"
    ), "{s}");
    assert!(!s.contains("MASTER_PORT"), "{s}");
    // Every #SBATCH line comes before the first command (sbatch stops reading there).
    assert!(crate::check::check_script(&s).is_empty(), "{s}");
}

#[test]
fn srun_script() {
    let p = plan(
        "mode = \"srun\"\njob_name = \"k700\"\ngpus = 16\ngpus_per_node = 8\ncpus_per_task = 5\npartition = \"dev\"\ncommand = [\"python\", \"-u\", \"tools/train.py\", \"configs/x.py\", \"--launcher=slurm\"]\n",
    );
    let s = render(&p);
    let lines = sbatch_lines(&s);
    assert!(
        lines.contains(&"--nodes=2") && lines.contains(&"--ntasks-per-node=8"),
        "{s}"
    );
    assert!(
        lines.contains(&"--gres=gpu:8") && lines.contains(&"--cpus-per-task=5"),
        "{s}"
    );
    assert!(s.contains("MASTER_ADDR=$('/opt/herd/bin/herd' hostlist expand -- \"$SLURM_JOB_NODELIST\")\nMASTER_ADDR=${MASTER_ADDR%%$'\\n'*}\n"), "{s}");
    assert!(s.contains(
        "exec srun --nodes=2 --ntasks=16 --ntasks-per-node=8 --cpus-per-task=5 --kill-on-bad-exit=1 \\\n  '/opt/herd/bin/herd' exec \\\n  -- 'python' '-u' 'tools/train.py' 'configs/x.py' '--launcher=slurm'\n"
    ), "{s}");
    assert!(!s.contains("HERD_JOB_SECRET"), "{s}");
}

#[test]
fn per_rank_gpu_binding_reaches_the_agents_and_the_tasks() {
    let agent = render(&plan(
        "nodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\ncommand = [\"python\", \"train.py\"]\n",
    ));
    assert!(
        agent.contains("launch --nproc-per-node 4 --gpu-bind per-rank --warn-before 120"),
        "{agent}"
    );
    let srun = render(&plan(
        "mode = \"srun\"\nnodes = 2\ngpus_per_node = 4\ngpu_bind = \"per-rank\"\ncommand = [\"python\", \"train.py\"]\n",
    ));
    assert!(
        srun.contains("'/opt/herd/bin/herd' exec --gpu-bind per-rank \\\n"),
        "{srun}"
    );
    // The default binding (all GPUs) is herd's own default: no flag at all.
    let default = render(&plan(
        "nodes = 2\ngpus_per_node = 4\ncommand = [\"python\", \"train.py\"]\n",
    ));
    assert!(!default.contains("--gpu-bind"), "{default}");
}

#[test]
fn torchrun_script() {
    let p = plan(
        "mode = \"torchrun\"\nnodes = 4\ngpus_per_node = 8\nmax_restarts = 1\ncommand = [\"python\", \"tasks/pretrain.py\", \"config.py\"]\n",
    );
    let s = render(&p);
    // A python command runs torchrun's module with that python.
    assert!(s.contains(
        "exec srun --nodes=4 --ntasks=4 --ntasks-per-node=1 --kill-on-bad-exit=1 \\\n  '/opt/herd/bin/herd' exec --network-only -- 'python' -m torch.distributed.run --nnodes=4 --nproc_per_node=8 --rdzv_id=\"$SLURM_JOB_ID\" \\\n  --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" --max_restarts=1 --no_python \\\n  'python' 'tasks/pretrain.py' 'config.py'\n"
    ), "{s}");
    // A venv's python by path: that python, quoted like every user word.
    let p = plan(
        "mode = \"torchrun\"\nnodes = 2\ncommand = [\"/scratch/my venv/bin/python3.11\", \"-u\", \"train.py\"]\n",
    );
    let s = render(&p);
    assert!(s.contains(
        "  '/opt/herd/bin/herd' exec --network-only -- '/scratch/my venv/bin/python3.11' -m torch.distributed.run --nnodes=2 --nproc_per_node=1 --rdzv_id=\"$SLURM_JOB_ID\" \\\n  --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" --no_python \\\n  '/scratch/my venv/bin/python3.11' '-u' 'train.py'\n"
    ), "{s}");
    // Any other program: torchrun from PATH.
    let p = plan("mode = \"torchrun\"\nnodes = 2\ncommand = [\"./run.sh\", \"x\"]\n");
    let s = render(&p);
    assert!(s.contains(
        "  '/opt/herd/bin/herd' exec --network-only -- torchrun --nnodes=2 --nproc_per_node=1 --rdzv_id=\"$SLURM_JOB_ID\" \\\n  --rdzv_backend=c10d --rdzv_endpoint=\"$MASTER_ADDR:$MASTER_PORT\" --no_python \\\n  './run.sh' 'x'\n"
    ), "{s}");
    assert!(s.contains("# One torchrun per node, from PATH;"), "{s}");
    assert!(
        s.contains("MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))"),
        "{s}"
    );
    assert!(s.contains("not claimed"), "{s}");
}

#[test]
fn optional_lines() {
    let mut p = plan("command = [\"./run\"]\n");
    let s = render(&p);
    let lines = sbatch_lines(&s);
    assert_eq!(
        lines,
        vec![
            "--job-name=train",
            "--nodes=1",
            "--ntasks-per-node=1",
            "--output=\"/scratch/exp/train/logs/%j.out\"",
            "--error=\"/scratch/exp/train/logs/%j.err\"",
            "--open-mode=append",
            // herd requeues by default (max_requeues 3), so SLURM must allow it, and
            // asks for its stop signal before the time limit.
            "--requeue",
            "--signal=CONT@120",
        ]
    );
    let mut none = p.clone();
    none.keep.max_requeues = 0;
    assert!(!sbatch_lines(&render(&none)).contains(&"--requeue"));
    p.requeue = Some(false);
    p.gpus_per_node = Some(2);
    p.gpu_type = Some("a100".into());
    p.signal = "B:USR1@60".parse::<Signal>().ok();
    let params = ScriptParams {
        dependency: Some("afterok:12:13"),
        ..params()
    };
    let s = render_script(&p, &params).unwrap_or_else(|e| panic!("{e}"));
    let lines = sbatch_lines(&s);
    for want in [
        "--gres=gpu:a100:2",
        "--no-requeue",
        "--signal=B:USR1@60",
        "--dependency=afterok:12:13",
    ] {
        assert!(lines.contains(&want), "{want}: {s}");
    }
}

#[test]
fn refuses_unsafe_inputs() {
    let p = plan("command = [\"python\"]\n");
    let with = |exp: &'static str, herd: &'static str, dep: Option<&'static str>| {
        render_script(
            &p,
            &ScriptParams {
                exp_dir: Path::new(exp),
                herd: Path::new(herd),
                dependency: dep,
            },
        )
    };
    assert!(matches!(
        with("exp", "/h", None),
        Err(RenderError::RelativePath { .. })
    ));
    assert!(matches!(
        with("/e", "herd", None),
        Err(RenderError::RelativePath { .. })
    ));
    for exp in ["/e/a\"b", "/e/a\nb", "/e/a#b", "/e/a\\b"] {
        let e = with(exp, "/h", None).expect_err(exp);
        assert!(e.to_string().contains("cannot carry"), "{e}");
    }
    assert!(with("/e", "/h", Some("afterok:1 --x")).is_err());
    // Spaces, quotes and `%` are fine in paths.
    let s =
        with("/scratch/my exp/it's 100%", "/o/h e/herd", None).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        s.contains("#SBATCH --output=\"/scratch/my exp/it's 100%%/logs/%j.out\"\n"),
        "{s}"
    );
    assert!(
        s.contains("cd -- '/scratch/my exp/it'\\''s 100%/code'\n"),
        "{s}"
    );
    assert!(s.contains("'/o/h e/herd' launch"), "{s}");

    let mut bad = p.clone();
    bad.sbatch_args = vec!["--comment=a\nb".into()];
    assert!(render_script(&bad, &params()).is_err_and(|e| e.to_string().contains("sbatch_args")));
    let mut bad = p.clone();
    bad.command.push("a\0b".into());
    assert!(render_script(&bad, &params()).is_err_and(|e| e.to_string().contains("NUL")));
    let mut bad = p.clone();
    bad.partition = Some("gpu\n#SBATCH --x".into());
    assert!(render_script(&bad, &params()).is_err());
    let mut bad = p.clone();
    bad.job_name = "a b".into();
    assert!(render_script(&bad, &params()).is_err());
    let mut bad = p;
    bad.exp_root = PathBuf::from("x");
    assert!(render_script(&bad, &params()).is_ok());
}

/// The words of the script's `herd launch` line after `launch` and before `--log-dir`,
/// as bash would split them (single quotes, `'\''`, backslash-newline).
fn launch_words(script: &str) -> Vec<String> {
    let joined = script.replace("\\\n", " ");
    let line = joined
        .lines()
        .find(|l| l.contains("' launch "))
        .unwrap_or_else(|| panic!("no herd launch line:\n{script}"));
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.push(q);
                }
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    word.get_or_insert_with(String::new).push(n);
                }
            }
            ' ' => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    let start = words
        .iter()
        .position(|w| w == "launch")
        .map_or(0, |i| i + 1);
    let end = words
        .iter()
        .position(|w| w == "--log-dir")
        .unwrap_or(words.len());
    words[start..end].to_vec()
}

/// What render writes is what `herd launch` parses: a plan with every key the agents
/// act on set to a value other than its default reads back, from the script, as the
/// plan's agent options.
#[test]
fn the_launch_line_parses_back_into_the_plans_agent_options() {
    let p = plan(
        "nodes = 2\ngpus_per_node = 3\ngpu_bind = \"per-rank\"\nmax_restarts = 2\n\
         metrics = \"regex:it (?P<step>\\\\d+) loss='(?P<loss>\\\\S+)'\"\n\
         time = \"24:00:00\"\nmax_requeues = 5\nwarn_before = 300\nstop_signal = \"USR2\"\n\
         stop_grace = 90\nhang_timeout = 600\non_hang = \"restart\"\n\
         command = [\"python\", \"train.py\"]\n",
    );
    let want = p.agent_options();
    let launch = crate::launch::AgentOptions::default();
    // Every option the plan decides differs from `herd launch`'s default here.
    assert_ne!(want.nproc_per_node, launch.nproc_per_node);
    assert_ne!(want.gpus, launch.gpus);
    assert_ne!(want.max_restarts, launch.max_restarts);
    assert_ne!(want.metrics, launch.metrics);
    let (k, d) = (&want.keep, &launch.keep);
    assert!(
        k.warn_before != d.warn_before
            && k.stop_signal != d.stop_signal
            && k.stop_grace != d.stop_grace
            && k.max_requeues != d.max_requeues
            && k.hang_timeout != d.hang_timeout
            && k.on_hang != d.on_hang,
        "{k:?}"
    );
    let words = launch_words(&render(&p));
    #[derive(clap::Parser)]
    struct Launch {
        #[command(flatten)]
        opts: crate::launch::AgentOptions,
    }
    let parsed = <Launch as clap::Parser>::try_parse_from(
        std::iter::once("herd-launch".to_owned()).chain(words.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    assert_eq!(parsed.opts, want, "{words:?}");
    // And with every key at its default: the defaults read back too.
    let plain = plan("command = [\"python\", \"train.py\"]\n");
    let words = launch_words(&render(&plain));
    let parsed = <Launch as clap::Parser>::try_parse_from(
        std::iter::once("herd-launch".to_owned()).chain(words.iter().cloned()),
    )
    .unwrap_or_else(|e| panic!("{words:?}: {e}"));
    assert_eq!(parsed.opts, plain.agent_options(), "{words:?}");
}

/// Spares: the job asks for the nodes and the spares, with `--no-kill`; the step runs on all
/// of them under `herd settle`, without `--kill-on-bad-exit`, and its agents know how many
/// stand by. Without spares the step is srun's own, as always.
#[test]
fn spare_nodes_ask_for_more_nodes_and_run_the_step_under_settle() {
    let p = plan(
        "nodes = 2\nspare_nodes = 1\ngpus_per_node = 2\ncommand = [\"python\", \"train.py\"]\n",
    );
    assert_eq!(p.alloc_nodes(), 3);
    let s = render(&p);
    let sbatch = sbatch_lines(&s);
    assert!(
        sbatch.contains(&"--nodes=3") && sbatch.contains(&"--no-kill"),
        "{s}"
    );
    assert!(
        s.contains("exec '/opt/herd/bin/herd' settle -- srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --no-kill --kill-on-bad-exit=0 \\\n  '/opt/herd/bin/herd' launch "),
        "{s}"
    );
    let words = launch_words(&s);
    assert!(
        words.windows(2).any(|w| w == ["--spare-nodes", "1"]),
        "{words:?}"
    );
    let plain = render(&plan("nodes = 2\ncommand = [\"python\", \"train.py\"]\n"));
    assert!(
        !plain.contains("settle")
            && !plain.contains("--no-kill")
            && plain.contains("exec srun --nodes=2 "),
        "{plain}"
    );
}

/// `cpus_per_worker` reaches sbatch and the srun that starts the tasks as SLURM's count per
/// task: × the node's workers in agent and torchrun mode (one task per node), as it is in
/// srun mode (one task per worker). Every srun of the script is given it: none relies on
/// inheriting it from the batch job.
#[test]
fn cpus_per_worker_becomes_cpus_per_task_for_sbatch_and_every_srun_in_each_mode() {
    let cases = [
        ("agent", "", 20, "exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=20 --kill-on-bad-exit=1 \\\n"),
        ("torchrun", "", 20, "exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=20 --kill-on-bad-exit=1 \\\n"),
        ("srun", "", 5, "exec srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=5 --kill-on-bad-exit=1 \\\n"),
        ("agent", "spare_nodes = 1\n", 20, "exec '/opt/herd/bin/herd' settle -- srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --cpus-per-task=20 --no-kill --kill-on-bad-exit=0 \\\n"),
    ];
    for (mode, spares, per_task, step) in cases {
        let s = render(&plan(&format!(
            "mode = \"{mode}\"\nnodes = 2\n{spares}gpus_per_node = 4\ncpus_per_worker = 5\ncommand = [\"python\", \"train.py\"]\n"
        )));
        let asked: Vec<&str> = sbatch_lines(&s)
            .into_iter()
            .filter(|l| l.starts_with("--cpus-per-task"))
            .collect();
        assert_eq!(
            asked,
            [format!("--cpus-per-task={per_task}")],
            "{mode}: {s}"
        );
        assert!(s.contains(step), "{mode}: {s}");
        let sruns: Vec<&str> = s
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains("srun "))
            .collect();
        assert_eq!(sruns.len(), 1, "{mode}: {s}");
        assert!(
            sruns[0].contains(&format!(" --cpus-per-task={per_task} ")),
            "{mode}: {s}"
        );
    }
}
